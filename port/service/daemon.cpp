// The uroce service's daemon (port/service/daemon.hpp): set-up, the loop, the dispatch of frames
// to their owners, and the control sockets.
#include "port/service/daemon.hpp"

#include <fcntl.h>
#include <poll.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

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

bool hugetlbfs_mounted() {
  std::ifstream m("/proc/mounts");
  std::string dev, dir, type;
  std::string rest;
  while (m >> dev >> dir >> type) {
    std::getline(m, rest);
    if (type == "hugetlbfs") return true;
  }
  return false;
}

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
  d->link_ = DpdkLink::open(cfg, err);
  if (!d->link_) return nullptr;
  for (uint32_t i = 0; i < d->slots_.size(); ++i)
    if (!d->make_rings(i, err)) return nullptr;
  return d;
}

Daemon::~Daemon() {
  for (uint32_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].live()) detach(i, "daemon stops");
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

bool Daemon::make_rings(uint32_t i, std::string& err) {
  Slot& s = slots_[i];
  const unsigned flags = RING_F_SP_ENQ | RING_F_SC_DEQ;
  const char* kinds[4] = {"urx", "utx", "ufl", "ufr"};
  rte_ring** rings[4] = {&s.rx, &s.tx, &s.fill, &s.free};
  for (int k = 0; k < 4; ++k) {
    const std::string name = kinds[k] + std::to_string(i);
    *rings[k] = rte_ring_create(name.c_str(), param::kServiceRing, int(rte_socket_id()), flags);
    if (!*rings[k]) {
      err = "rte_ring_create(" + name + "): " + rte_strerror(rte_errno);
      return false;
    }
  }
  return true;
}

uint64_t Daemon::now_ns() const {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count());
}

// ---- Frames ---------------------------------------------------------------------------------

int Daemon::owner_of(const uint8_t* f, uint32_t len) {
  const Route r = route_frame({f, len});
  switch (r.by) {
    case Route::By::None: return -1;
    case Route::By::Qp:
    case Route::By::CmId: {
      if (r.id == 0) return -1;
      const int o = int(r.id & kOwnerMask);
      return slots_[uint32_t(o)].live() ? o : -1;
    }
    case Route::By::CmService: break;
  }
  int first = -1;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].live()) continue;
    if (slots_[i].listens.count(r.service_id)) return int(i);
    if (first < 0) first = int(i);
  }
  // Nobody listens: the first process answers it (its CM sends the REJ "invalid service ID").
  ++ctr_.cm_unowned;
  return first;
}

void Daemon::deliver(void** ms, size_t n) {
  int owner[param::kLinkBurst];
  static_assert(param::kServiceBurst <= param::kLinkBurst);
  for (size_t i = 0; i < n; ++i) {
    const rte_mbuf* m = static_cast<const rte_mbuf*>(ms[i]);
    owner[i] = owner_of(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len);
  }
  for (size_t i = 0, j; i < n; i = j) {
    for (j = i + 1; j < n && owner[j] == owner[i];) ++j;  // the run of frames for one owner
    const unsigned run = unsigned(j - i);
    unsigned put = 0;
    if (owner[i] < 0) {
      ctr_.no_owner += run;
    } else {
      Slot& s = slots_[uint32_t(owner[i])];
      put = rte_ring_sp_enqueue_burst(s.rx, ms + i, run, nullptr);
      s.rx_frames += put;
      ctr_.delivered += put;
      ctr_.ring_full += run - put;
    }
    if (put < run) rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(ms + i + put), run - put);
  }
}

void Daemon::move_slot_tx(Slot& s) {
  void* ms[param::kServiceBurst];
  const unsigned n = rte_ring_sc_dequeue_burst(s.tx, ms, param::kServiceBurst, nullptr);
  if (!n) return;
  s.tx_frames += n;
  engine::PacketBuf out[param::kServiceBurst];
  void* looped[param::kServiceBurst];
  size_t k = 0, nl = 0;
  for (unsigned i = 0; i < n; ++i) {
    rte_mbuf* m = static_cast<rte_mbuf*>(ms[i]);
    uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
    if (m->data_len >= 6 && std::memcmp(f, link_->mac().data(), 6) == 0) {  // to this device
      looped[nl++] = m;
      continue;
    }
    out[k].data = f;
    out[k].len = m->data_len;
    out[k].cap = uint32_t(rte_pktmbuf_tailroom(m)) + m->data_len;
    out[k].handle = m;
    ++k;
  }
  ctr_.looped += nl;
  deliver(looped, nl);
  const size_t sent = k ? link_->send(out, k) : 0;
  ctr_.sent += sent;
  for (size_t i = sent; i < k; ++i) link_->release(out[i]);
}

void Daemon::refill(Slot& s) {
  void* ms[param::kServiceBurst];
  const unsigned done = rte_ring_sc_dequeue_burst(s.free, ms, param::kServiceBurst, nullptr);
  if (done) rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(ms), done);
  if (rte_ring_count(s.fill) + param::kServiceBurst > param::kServiceFill) return;
  if (rte_pktmbuf_alloc_bulk(link_->mempool(), reinterpret_cast<rte_mbuf**>(ms), param::kServiceBurst) != 0) return;
  const unsigned put = rte_ring_sp_enqueue_burst(s.fill, ms, param::kServiceBurst, nullptr);
  if (put < param::kServiceBurst)
    rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(ms) + put, param::kServiceBurst - put);
}

bool Daemon::step() {
  engine::PacketBuf bufs[param::kLinkBurst];
  void* ms[param::kLinkBurst];
  const size_t n = link_->recv(bufs, param::kLinkBurst);
  for (size_t i = 0; i < n; ++i) ms[i] = bufs[i].handle;
  deliver(ms, n);
  bool busy = n != 0;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.live()) continue;
    const uint64_t before = s.tx_frames;
    move_slot_tx(s);
    refill(s);
    busy |= s.tx_frames != before;
  }
  return busy;
}

void Daemon::run(const std::atomic<bool>& stop) {
  uint64_t next_control = 0, last_busy = now_ns();
  while (!stop.load(std::memory_order_relaxed)) {
    const bool busy = step();
    const uint64_t now = now_ns();
    if (busy) last_busy = now;
    if (now >= next_control) {
      control();
      if (link_->poll_addresses()) send_gids();
      next_control = now + param::kServiceControlNs;
    }
    if (!busy && now - last_busy > param::kServiceIdleSpinNs)
      std::this_thread::sleep_for(std::chrono::microseconds(param::kServiceIdleSleepUs));
  }
  for (uint32_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].live()) detach(i, "daemon stops");
  link_->flush_capture();
  link_->release_netdev();
}

// ---- Control ----------------------------------------------------------------------------------

void Daemon::control() {
  pollfd fds[1 + param::kServiceMaxProcs];
  uint32_t idx[1 + param::kServiceMaxProcs];
  nfds_t n = 0;
  fds[n++] = {listen_fd_, POLLIN, 0};
  for (uint32_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].live()) {
      idx[n] = i;
      fds[n++] = {slots_[i].fd, POLLIN, 0};
    }
  if (::poll(fds, n, 0) <= 0) return;
  for (nfds_t k = 1; k < n; ++k) {
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
  copy_str(w.netdev, sizeof w.netdev, link_->config().netdev);
  copy_str(w.describe, sizeof w.describe, link_->describe());
  copy_str(w.rings.rx, sizeof w.rings.rx, slots_[i].rx->name);
  copy_str(w.rings.tx, sizeof w.rings.tx, slots_[i].tx->name);
  copy_str(w.rings.fill, sizeof w.rings.fill, slots_[i].fill->name);
  copy_str(w.rings.free, sizeof w.rings.free, slots_[i].free->name);
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
    Refused r;
    copy_str(r.why, sizeof r.why, why);
    (void)::send(fd, &r, sizeof r, MSG_NOSIGNAL);
    ::close(fd);
  };
  // The device's users: root and the daemon's own user (as /dev/infiniband/uverbs* is root's).
  ucred cred{};
  socklen_t cl = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || (cred.uid != 0 && cred.uid != ::geteuid()))
    return refuse("permission denied: the device is root's and uroced's user's");
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
  s.rx_frames = s.tx_frames = 0;
  s.listens.clear();
  for (rte_ring* r : {s.rx, s.tx, s.fill, s.free}) rte_ring_reset(r);
  refill(s);
  Welcome w;
  fill_welcome(i, w);
  if (::send(fd, &w, sizeof w, MSG_NOSIGNAL) != ssize_t(sizeof w)) {
    ::close(fd);
    return;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  s.fd = fd;
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
      r.ok = link_->lookup(gid, mac) || link_->resolve(gid, mac, [this] { step(); });
      if (r.ok) std::memcpy(r.mac, mac.data(), 6);
      r.hop_limit = link_->route_hop_limit();
      copy_str(r.error, sizeof r.error, link_->resolve_error());
      (void)::send(s.fd, &r, sizeof r, MSG_NOSIGNAL);
    }
  }
}

void Daemon::detach(uint32_t i, const char* why) {
  Slot& s = slots_[i];
  if (!s.live()) return;
  ::close(s.fd);
  s.fd = -1;
  s.listens.clear();
  execute_wills(s);
  // Buffers in the rings come back; those the process held in its own hands are lost with it
  // (at most a burst and a stash: docs/service.md).
  void* ms[param::kServiceBurst];
  for (rte_ring* r : {s.rx, s.tx, s.fill, s.free}) {
    unsigned n;
    while ((n = rte_ring_sc_dequeue_burst(r, ms, param::kServiceBurst, nullptr)) != 0)
      rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(ms), n);
    rte_ring_reset(r);  // a process killed inside an enqueue leaves its ring half-moved
  }
  ++ctr_.detached;
  std::fprintf(stderr, "uroced: slot %u: pid %d (%s) detached (%s; %lu frames in, %lu out)\n", i, s.pid,
               s.comm.c_str(), why, (unsigned long)s.rx_frames, (unsigned long)s.tx_frames);
}

// The process's rdma_cm connections that were up: their DREQs go out (the peer answers with a
// DREP for nobody, counted and dropped).
void Daemon::execute_wills(Slot& s) {
  for (auto& [id, f] : s.wills) {
    rte_mbuf* m = rte_pktmbuf_alloc(link_->mempool());
    if (!m || rte_pktmbuf_tailroom(m) < f.size()) {
      if (m) rte_pktmbuf_free(m);
      continue;
    }
    engine::PacketBuf b{rte_pktmbuf_mtod(m, uint8_t*), uint32_t(f.size()), uint32_t(rte_pktmbuf_tailroom(m)), m};
    std::memcpy(b.data, f.data(), f.size());
    if (link_->send(&b, 1) == 1) ++ctr_.wills_sent;
    else link_->release(b);
  }
  s.wills.clear();
}

void Daemon::send_gids() {
  const Gids g = gids_message();
  for (Slot& s : slots_)
    if (s.live()) (void)::send(s.fd, &g, sizeof g, MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace uroce::port::service
