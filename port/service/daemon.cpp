// The uroce service's daemon (port/service/daemon.hpp): set-up, the loop, the dispatch of frames
// to their owners, and the control sockets.
#include "port/service/daemon.hpp"

#include <fcntl.h>
#include <poll.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_memzone.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "port/service/protocol.hpp"
#include "port/service/route.hpp"

namespace uroce::port::service {

namespace {

constexpr const char* kHugeDir = "/sys/kernel/mm/hugepages/hugepages-2048kB/";

long read_long(const std::string& path) {
  std::ifstream f(path);
  long v = -1;
  f >> v;
  return f ? v : -1;
}

bool hugetlbfs_mounted() { return !hugetlbfs_dirs().empty(); }

// An abstract unix socket address: "\0name".
socklen_t abstract_addr(const std::string& name, sockaddr_un& a) {
  std::memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof a.sun_path - 2);
  std::memcpy(a.sun_path + 1, name.data(), n);
  return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + n);
}

}  // namespace

bool ensure_hugepages(uint32_t mb, std::string& err) {
  const long want = long(mb / 2);
  const long free_pages = read_long(std::string(kHugeDir) + "free_hugepages");
  if (free_pages < 0) {
    err = "this kernel has no 2 MB hugepages (" + std::string(kHugeDir) + ")";
    return false;
  }
  if (free_pages < want) {
    const long total = read_long(std::string(kHugeDir) + "nr_hugepages");
    std::ofstream nr(std::string(kHugeDir) + "nr_hugepages");
    nr << (total + want - free_pages);
    nr.close();
    if (read_long(std::string(kHugeDir) + "free_hugepages") < want) {
      err = "fewer than " + std::to_string(want) + " free 2 MB hugepages (as root: echo N > " + kHugeDir +
            "nr_hugepages)";
      return false;
    }
  }
  if (!hugetlbfs_mounted()) {
    ::mkdir("/dev/hugepages", 0755);
    if (::mount("nodev", "/dev/hugepages", "hugetlbfs", 0, "pagesize=2M") != 0) {
      err = "no hugetlbfs mounted (as root: mount -t hugetlbfs nodev /dev/hugepages)";
      return false;
    }
  }
  return true;
}

std::unique_ptr<Daemon> Daemon::open(const EndpointConfig& cfg_in, std::string& err) {
  std::unique_ptr<Daemon> d(new Daemon());
  // The control socket first: a second daemon for the name stops here, before touching DPDK.
  d->listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un a;
  const socklen_t alen = abstract_addr(socket_name(cfg_in.name), a);
  if (d->listen_fd_ < 0 || ::bind(d->listen_fd_, reinterpret_cast<sockaddr*>(&a), alen) != 0) {
    err = errno == EADDRINUSE ? "a uroced serves device " + cfg_in.name + " already"
                              : std::string("control socket: ") + std::strerror(errno);
    return nullptr;
  }
  if (::listen(d->listen_fd_, 16) != 0) {
    err = std::string("listen: ") + std::strerror(errno);
    return nullptr;
  }
  // The EAL as a primary whose memory secondaries can map: hugepages, a prefix of the device's,
  // the memory the config's -m asks for (else param::kServiceDaemonMemMb).
  EndpointConfig cfg = cfg_in;
  std::vector<std::string> eal;
  uint32_t mem_mb = param::kServiceDaemonMemMb;
  for (size_t i = 0; i < cfg.eal.size(); ++i) {
    const std::string& w = cfg.eal[i];
    if (w == "--no-huge" || w == "--in-memory" || w == "--huge-unlink" || w.rfind("--proc-type", 0) == 0) continue;
    if (w == "-m" && i + 1 < cfg.eal.size()) mem_mb = uint32_t(std::strtoul(cfg.eal[i + 1].c_str(), nullptr, 10));
    if (w == "--file-prefix" || w == "-m") {
      ++i;
      continue;
    }
    if (w.rfind("--file-prefix=", 0) == 0 || w.rfind("-m", 0) == 0) continue;
    eal.push_back(w);
  }
  d->prefix_ = "uroced-" + cfg.name;
  eal.push_back("--proc-type=primary");
  eal.push_back("--file-prefix=" + d->prefix_);
  eal.push_back("-m");
  eal.push_back(std::to_string(mem_mb));
  cfg.eal = eal;
  if (!ensure_hugepages(std::max(mem_mb + 32, param::kServiceHugepagesMb), err)) return nullptr;
  if (!resolve_group(cfg.service_group, d->access_, err)) return nullptr;
  d->link_ = DpdkLink::open(cfg, err);
  if (!d->link_) return nullptr;
  d->runtime_dir_ = rte_eal_get_runtime_dir();
  share_files(d->access_, d->runtime_dir_, d->prefix_);
  d->drive_allowed_ = cfg.service_drive;
  d->doorbell_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (!d->make_rings(err)) return nullptr;
  d->update_drive();
  return d;
}

Daemon::~Daemon() {
  if (pump_) {
    sh_->drive.store(0);
    Hold h(*this);
    for (uint32_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].live()) detach(i, "daemon stops");
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (doorbell_ >= 0) ::close(doorbell_);
}

bool Daemon::make_rings(std::string& err) {
  const unsigned flags = RING_F_SP_ENQ | RING_F_SC_DEQ;
  auto make = [&](const std::string& name) -> rte_ring* {
    rte_ring* r = rte_ring_create(name.c_str(), param::kServiceRing, int(rte_socket_id()), flags);
    if (!r) err = "rte_ring_create(" + name + "): " + rte_strerror(rte_errno);
    return r;
  };
  std::vector<SlotRings> rings(slots_.size());
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    SlotRings& r = rings[i];
    const SlotRingNames n = slot_ring_names(i);
    if (!(r.rx = make(n.rx)) || !(r.tx = make(n.tx)) || !(r.fill = make(n.fill)) || !(r.free = make(n.free)))
      return false;
  }
  rte_ring* to_daemon = make(kDaemonRing);
  if (!to_daemon) return false;
  const rte_memzone* z = rte_memzone_reserve(kPumpZone, sizeof(PumpShared), int(rte_socket_id()), 0);
  if (!z) {
    err = std::string("rte_memzone_reserve(") + kPumpZone + "): " + rte_strerror(rte_errno);
    return false;
  }
  sh_ = new (z->addr) PumpShared();
  sh_->port = link_->port_id();
  std::memcpy(sh_->mac, link_->mac().data(), 6);
  if (!Pump::register_marks(link_->mempool(), err)) return false;
  pump_ = std::make_unique<Pump>(sh_, std::move(rings), to_daemon, link_->mempool());
  owner_fn_ = {[](void* d, const uint8_t* f, uint32_t len) { return static_cast<Daemon*>(d)->owner_of(f, len); }, this};
  // The processes' frames go out through the link (its capture, fault stages and backlog).
  wire_fn_ = [this](void** out, size_t k) {
    // The link's backlog full (param::kTxBacklogHigh): the frames wait in their tx ring, which
    // is the process's share (a process that sends faster than the wire takes is held back).
    if (link_->tx_backed_up()) return size_t(0);
    engine::PacketBuf b[param::kServiceBurst];
    k = std::min<size_t>(k, param::kServiceBurst);
    for (size_t i = 0; i < k; ++i) {
      rte_mbuf* m = static_cast<rte_mbuf*>(out[i]);
      b[i] = {rte_pktmbuf_mtod(m, uint8_t*), m->data_len, uint32_t(rte_pktmbuf_tailroom(m)) + m->data_len, m};
    }
    const size_t sent = link_->send(b, k);
    ctr_.sent += sent;
    return sent;
  };
  return true;
}

// ---- The port ---------------------------------------------------------------------------------

Daemon::Hold::Hold(Daemon& dm) : d(dm), mine(!dm.held_) {
  if (mine) d.take_port();
}
Daemon::Hold::~Hold() {
  if (!mine) return;
  d.held_ = false;
  d.pump_->give_back(kDaemonHolder);
}

// A process holding the port gives it back within a step; one that died holding it never will:
// its socket says so (hang-up), and the daemon takes the port over, undoing what it was moving.
void Daemon::take_port() {
  for (uint32_t spins = 0; !pump_->try_take(kDaemonHolder); ++spins) {
    const uint32_t h = sh_->holder.load(std::memory_order_acquire);
    if (h != 0 && h != kDaemonHolder && h - 1 < slots_.size() && holder_gone(h - 1)) {
      uint32_t expect = h;
      if (sh_->holder.compare_exchange_strong(expect, kDaemonHolder, std::memory_order_acquire)) {
        pump_->repair();
        ++ctr_.driver_deaths;
        std::fprintf(stderr, "uroced: slot %u died holding the port: taken back\n", h - 1);
        break;
      }
    }
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
  held_ = true;
}

bool Daemon::holder_gone(uint32_t i) const {
  if (!slots_[i].live()) return true;  // detached already (its socket was closed)
  pollfd p{slots_[i].fd, 0, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

// Processes may drive while the link is one a secondary can poll, nothing captures or injects
// faults here, and the link stays up: a memif link that comes up again has new shared regions,
// which processes that mapped the old ones must not touch (they go on through the rings).
void Daemon::update_drive() {
  const bool up = link_->link_up_now(link_was_up_);
  if (up != link_was_up_) sh_->epoch.fetch_add(1, std::memory_order_relaxed);
  link_was_up_ = up;
  count_port_rx();
  sh_->drive.store(up && !polls_alone() ? 1 : 0, std::memory_order_relaxed);
}

// Each process's share of the pool (param::kServiceShareMin): half of it split among those attached.
void Daemon::update_share() {
  const auto n = uint32_t(__builtin_popcountll(sh_->live.load(std::memory_order_relaxed)));
  const uint32_t half = link_->mempool()->size / 2;
  sh_->share.store(std::max(param::kServiceShareMin, n ? half / n : half), std::memory_order_relaxed);
}

void Daemon::note_pool() {
  rte_mempool* p = link_->mempool();
  ctr_.pool_size = p->size;
  ctr_.pool_low = std::min<uint64_t>(ctr_.pool_low, rte_mempool_avail_count(p));
}

void Daemon::count_port_rx() {
  const uint64_t rx = link_->port_rx_frames();
  if (rx < port_rx_now_) port_rx_before_ += port_rx_now_;  // a new connection counts from 0
  port_rx_now_ = rx;
}

// ---- Frames ---------------------------------------------------------------------------------

int Daemon::owner_of(const uint8_t* f, uint32_t len) {
  const Route r = route_frame({f, len});
  switch (r.by) {
    case Route::By::None: return Pump::kNobody;
    case Route::By::Group: return Pump::kGroup;
    case Route::By::Qp:
    case Route::By::CmId: {
      if (r.id == 0) return Pump::kNobody;
      const int o = int(r.id & kOwnerMask);
      return slots_[uint32_t(o)].live() ? o : Pump::kNobody;
    }
    case Route::By::CmService: break;
  }
  int first = Pump::kNobody;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].live()) continue;
    if (slots_[i].listens.count(r.service_id)) return int(i);
    if (first < 0) first = int(i);
  }
  // Nobody listens: the first process answers it (its CM sends the REJ "invalid service ID").
  ++ctr_.cm_unowned;
  return first;
}

void Daemon::count(const Pump::Counts& c) {
  ctr_.delivered += c.delivered;
  ctr_.no_owner += c.no_owner;
  ctr_.ring_full += c.ring_full;
}

void Daemon::deliver(void** ms, size_t n) {
  Pump::Counts c;
  pump_->deliver(ms, n, owner_fn_, c);
  count(c);
}

bool Daemon::from_drivers() {
  void* ms[param::kLinkBurst];
  engine::PacketBuf bufs[param::kLinkBurst];
  const unsigned n = rte_ring_sc_dequeue_burst(pump_->to_daemon(), ms, param::kLinkBurst, nullptr);
  if (!n) return false;
  ctr_.from_drivers += n;
  const size_t k = link_->take_received(ms, n, bufs);  // ARP, ND, ICMP answered; RoCE for us kept
  for (size_t i = 0; i < k; ++i) ms[i] = bufs[i].handle;
  deliver(ms, k);
  return true;
}

bool Daemon::step(uint64_t now) {
  if (last_step_ns_) ctr_.longest_pause_ns = std::max(ctr_.longest_pause_ns, now - last_step_ns_);
  last_step_ns_ = now;
  engine::PacketBuf bufs[param::kLinkBurst];
  void* ms[param::kLinkBurst];
  const size_t n = link_->recv(bufs, param::kLinkBurst);
  for (size_t i = 0; i < n; ++i) ms[i] = bufs[i].handle;
  deliver(ms, n);
  bool busy = n != 0;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.live()) continue;
    Pump::Counts c;
    const size_t moved = pump_->move_tx(i, link_->mac().data(), wire_fn_, owner_fn_, c, &ctr_.looped);
    count(c);
    s.tx_frames += moved;
    pump_->refill(i);
    busy |= moved != 0;
  }
  return busy;
}

void Daemon::run(const std::atomic<bool>& stop) {
  uint64_t next_control = 0, last_busy = monotonic_ns();
  while (!stop.load(std::memory_order_relaxed)) {
    const uint64_t now = monotonic_ns();
    // While processes drive, the daemon only looks at what they hand it, and sleeps between
    // looks; once none has driven for a while it polls the port again.
    const bool driven = sh_->drive.load(std::memory_order_relaxed) &&
                        now - sh_->driven_ns.load(std::memory_order_relaxed) < param::kServiceDrivenNs;
    bool busy = false;
    if (pump_->try_take(kDaemonHolder)) {
      held_ = true;
      busy = from_drivers();
      if (!driven) busy |= step(now);
      else last_step_ns_ = 0;  // the processes move the frames: no pause of the daemon's
      held_ = false;
      pump_->give_back(kDaemonHolder);
    }
    if (busy) last_busy = now;
    // While driven, the daemon waits on its sockets (answering at once) instead of polling.
    if (driven || now >= next_control) {
      control(driven ? int(param::kServiceDrivenWaitMs) : 0);
      update_drive();
      note_pool();
      if (link_->poll_addresses()) send_gids();
      next_control = now + param::kServiceControlNs;
    }
    if (driven) continue;
    if (!busy && now - last_busy > param::kServiceIdleSpinNs)
      std::this_thread::sleep_for(std::chrono::microseconds(param::kServiceIdleSleepUs));
  }
  sh_->drive.store(0);
  count_port_rx();
  Hold h(*this);
  for (uint32_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].live()) detach(i, "daemon stops");
  link_->flush_capture();
  link_->release_netdev();
}

// ---- Control ----------------------------------------------------------------------------------

void Daemon::control(int wait_ms) {
  pollfd fds[2 + param::kServiceMaxProcs];
  uint32_t idx[2 + param::kServiceMaxProcs];
  nfds_t n = 0;
  fds[n++] = {listen_fd_, POLLIN, 0};
  fds[n++] = {doorbell_, POLLIN, 0};
  for (uint32_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].live()) {
      idx[n] = i;
      fds[n++] = {slots_[i].fd, POLLIN, 0};
    }
  if (::poll(fds, n, wait_ms) <= 0) return;
  if (fds[1].revents & POLLIN) {  // frames from drivers: the loop takes them next
    uint64_t rings;
    (void)!::read(doorbell_, &rings, sizeof rings);
  }
  for (nfds_t k = 2; k < n; ++k) {
    if (fds[k].revents & POLLIN) on_message(idx[k]);  // reads the last words, or finds EOF
    else if (fds[k].revents & (POLLHUP | POLLERR)) detach(idx[k], "hung up");
  }
  if (fds[0].revents & POLLIN) accept_one();
}

void Daemon::fill_welcome(uint32_t i, Welcome& w) const {
  w.slot = i;
  w.tag_bits = param::kServiceTagBits;
  w.lcore = i + 1;  // the daemon is lcore 0
  w.max_frame = link_->max_frame();
  w.path_mtu = uint32_t(link_->config().path_mtu);
  w.netdev_ifindex = uint32_t(link_->config().netdev_ifindex);
  std::memcpy(w.mac, link_->mac().data(), 6);
  copy_str(w.file_prefix, sizeof w.file_prefix, prefix_);
  copy_str(w.runtime_dir, sizeof w.runtime_dir, runtime_dir_);
  copy_str(w.netdev, sizeof w.netdev, link_->config().netdev);
  copy_str(w.describe, sizeof w.describe, link_->describe());
  copy_str(w.pool, sizeof w.pool, link_->mempool()->name);
  w.gids = gids_message();
}

Gids Daemon::gids_message() const {
  Gids g;
  const auto& t = link_->gids();
  g.n = uint32_t(std::min<size_t>(t.size(), kMaxGids));
  for (uint32_t k = 0; k < g.n; ++k) std::memcpy(g.gid[k], t[k].data(), 16);
  return g;
}

void Daemon::accept_one() {
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  auto refuse = [fd](const std::string& why) {
    // What the process sent is read first (without waiting): a unix socket closed with a
    // message unread resets its peer, which would then not read why it was refused.
    Hello unread;
    while (::recv(fd, &unread, sizeof unread, MSG_DONTWAIT) > 0) {
    }
    Refused r;
    copy_str(r.why, sizeof r.why, why);
    (void)::send(fd, &r, sizeof r, MSG_NOSIGNAL);
    ::close(fd);
  };
  // The device's users: root, the daemon's own user and its group if it has one (access.hpp).
  // Asked before anything is awaited from the process: anyone else cannot hold the daemon.
  std::string why;
  if (!peer_allowed(fd, access_, why)) return refuse(why);
  Hello h;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, int(param::kServiceReplyWaitMs)) != 1 || ::recv(fd, &h, sizeof h, 0) != ssize_t(sizeof h) ||
      h.type != Msg::Hello)
    return refuse("no hello");
  if (h.version != kVersion) return refuse("protocol version " + std::to_string(h.version) + ", uroced speaks " +
                                           std::to_string(kVersion));
  uint32_t i = 0;
  while (i < slots_.size() && slots_[i].live()) ++i;
  if (i == slots_.size()) return refuse("the device has " + std::to_string(slots_.size()) + " processes already");
  Slot& s = slots_[i];
  s.pid = h.pid;
  s.comm.assign(h.comm, strnlen(h.comm, sizeof h.comm));
  s.tx_frames = 0;
  s.listens.clear();
  Hold hold(*this);
  pump_->drain(i);
  pump_->refill(i);
  // Memory DPDK mapped since the last attach has page files of its own: the group's too.
  share_files(access_, runtime_dir_, prefix_);
  Welcome w;
  fill_welcome(i, w);
  if (send_with_fd(fd, &w, sizeof w, doorbell_) != ssize_t(sizeof w)) {
    ::close(fd);
    return;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  s.fd = fd;
  sh_->live.fetch_or(uint64_t(1) << i, std::memory_order_release);
  update_share();
  ++ctr_.attached;
  std::fprintf(stderr, "uroced: slot %u: pid %d (%s) attached\n", i, s.pid, s.comm.c_str());
}

void Daemon::on_message(uint32_t i) {
  Slot& s = slots_[i];
  alignas(8) uint8_t buf[sizeof(Will) + 64];
  for (;;) {
    const ssize_t n = ::recv(s.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) return detach(i, "closed");
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) detach(i, std::strerror(errno));
      return;
    }
    if (size_t(n) < sizeof(Msg)) continue;
    Msg type;
    std::memcpy(&type, buf, sizeof type);
    if (type == Msg::Listen && size_t(n) == sizeof(Listen)) {
      Listen l;
      std::memcpy(&l, buf, sizeof l);
      if (l.on) s.listens.insert(l.service_id);
      else s.listens.erase(l.service_id);
    } else if (type == Msg::Group && size_t(n) == sizeof(Group)) {
      Group g;
      std::memcpy(&g, buf, sizeof g);
      group(i, g.gid, g.on != 0);
    } else if (type == Msg::Will && size_t(n) == sizeof(Will)) {
      Will w;
      std::memcpy(&w, buf, sizeof w);
      if (w.len == 0 || w.len > sizeof w.frame) s.wills.erase(w.id);
      else s.wills[w.id].assign(w.frame, w.frame + w.len);
    } else if (type == Msg::Resolve && size_t(n) == sizeof(Resolve)) {
      Resolve q;
      std::memcpy(&q, buf, sizeof q);
      proto::Ip6 gid;
      std::memcpy(gid.data(), q.gid, 16);
      proto::Mac mac{};
      Resolved r;
      std::memcpy(r.gid, q.gid, 16);
      // Waiting for the answer here holds up every other process's control messages (never their
      // frames: the pump keeps the data path going), at most arp_timeout_ms.
      Hold hold(*this);
      r.ok = link_->lookup(gid, mac) || link_->resolve(gid, mac, [this] { step(monotonic_ns()); });
      if (r.ok) std::memcpy(r.mac, mac.data(), 6);
      r.hop_limit = link_->route_hop_limit();
      copy_str(r.error, sizeof r.error, link_->resolve_error());
      (void)::send(s.fd, &r, sizeof r, MSG_NOSIGNAL);
    }
  }
}

// Slot i's membership of multicast group `gid` (a process's first QP joined, or its last left).
// The device's first member has the kernel join the group on a netdev, its last leave it.
void Daemon::group(uint32_t i, const uint8_t* gid, bool on) {
  const uint64_t bit = uint64_t(1) << i;
  GroupEntry* e = nullptr;
  GroupEntry* free = nullptr;
  for (GroupEntry& x : sh_->groups) {
    const uint64_t m = x.members.load(std::memory_order_relaxed);
    if (m && std::memcmp(x.gid, gid, 16) == 0) e = &x;
    if (!m && !free) free = &x;
  }
  std::array<uint8_t, 16> g;
  std::memcpy(g.data(), gid, 16);
  if (on) {
    if (!e) {
      if (!free) {
        ++ctr_.groups_full;
        std::fprintf(stderr, "uroced: more than %u multicast groups on the device: a group's datagrams will not reach slot %u\n",
                     param::kServiceMaxGroups, i);
        return;
      }
      e = free;
      std::memcpy(e->gid, gid, 16);  // before its members: a reader that sees them sees the GID
      link_->join_group(g, true);
    }
    e->members.fetch_or(bit, std::memory_order_release);
  } else if (e && (e->members.fetch_and(~bit, std::memory_order_acq_rel) & ~bit) == 0) {
    link_->join_group(g, false);  // its last member on the device
  }
}

void Daemon::detach(uint32_t i, const char* why) {
  Slot& s = slots_[i];
  if (!s.live()) return;
  sh_->live.fetch_and(~(uint64_t(1) << i), std::memory_order_release);  // drivers deliver to it no more
  update_share();
  Hold hold(*this);  // after any driver's step that still saw it
  ::close(s.fd);
  s.fd = -1;
  s.listens.clear();
  for (const GroupEntry& e : sh_->groups)
    if (e.members.load(std::memory_order_relaxed) & (uint64_t(1) << i)) group(i, e.gid, false);
  // What it handed over before it died (an RTU, its last SENDs, already in its transmit ring)
  // goes out first, as a NIC sends what was posted before its process died: its DREQs then
  // follow them on the wire. (Its peer would otherwise have a DREQ for a connection whose RTU
  // never came: rping's server takes that DISCONNECTED as a connection and waits for ever.)
  {
    Pump::Counts c;
    s.tx_frames += pump_->move_tx(i, link_->mac().data(), wire_fn_, owner_fn_, c, &ctr_.looped);
    count(c);
  }
  // Buffers in the rings come back, then those the process held in its own hands (its stash, the
  // frames it was working on or was done with): they still carry its mark (pump.hpp). Before its
  // DREQs go out: a process that died holding much of the pool must not cost its peers theirs.
  const uint64_t frames_in = pump_->frames_in(i);
  pump_->drain(i);
  pump_->flush_cache(i + 1);  // what it took from the pool while it drove (its lcore id: slot + 1)
  const size_t back = pump_->reclaim(i);
  ctr_.reclaimed += back;
  const size_t owed = s.wills.size(), sent = execute_wills(s);
  ++ctr_.detached;
  std::fprintf(stderr,
               "uroced: slot %u: pid %d (%s) detached (%s; %lu frames in, %lu out; %zu buffers taken back; "
               "%zu DREQs sent for its connections%s)\n",
               i, s.pid, s.comm.c_str(), why, (unsigned long)frames_in, (unsigned long)s.tx_frames, back, sent,
               sent < owed ? ", some could not be sent" : "");
}

// The process's rdma_cm connections that were up: their DREQs go out (the peer answers with a
// DREP for nobody, counted and dropped).
size_t Daemon::execute_wills(Slot& s) {
  size_t sent = 0;
  for (auto& [id, f] : s.wills) {
    rte_mbuf* m = rte_pktmbuf_alloc(link_->mempool());
    if (!m || rte_pktmbuf_tailroom(m) < f.size()) {
      if (m) rte_pktmbuf_free(m);
      ++ctr_.wills_lost;
      continue;
    }
    engine::PacketBuf b{rte_pktmbuf_mtod(m, uint8_t*), uint32_t(f.size()), uint32_t(rte_pktmbuf_tailroom(m)), m};
    std::memcpy(b.data, f.data(), f.size());
    // A full transmit queue empties within microseconds: a few tries before the DREQ is given up
    // (its peer then learns from its own traffic).
    bool ok = false;
    for (int tries = 0; tries < 100 && !(ok = link_->send(&b, 1) == 1); ++tries)
      std::this_thread::sleep_for(std::chrono::microseconds(10));
    if (ok) {
      ++ctr_.wills_sent;
      ++sent;
    } else {
      link_->release(b);
      ++ctr_.wills_lost;
    }
  }
  s.wills.clear();
  return sent;
}

void Daemon::send_gids() {
  const Gids g = gids_message();
  for (Slot& s : slots_)
    if (s.live()) (void)::send(s.fd, &g, sizeof g, MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace uroce::port::service
