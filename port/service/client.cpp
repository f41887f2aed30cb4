// ServiceLink (port/service/client.hpp): attaching to the daemon, the four rings, the control
// socket.
#include "port/service/client.hpp"

#include <poll.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <rte_memzone.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_version.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "port/dpdk_link_impl.hpp"
#include "port/netdev.hpp"
#include "port/service/route.hpp"

// DPDK 22.11 gives a secondary process no telemetry socket of its own (the primary's path is
// taken), so uroce-stat could not see an attached process's QPs. The telemetry library's own
// start-up function (an internal symbol of 22.11, five arguments as the EAL calls it) opens one in
// a directory of the process's own instead. Other DPDK versions: no telemetry when attached.
#if RTE_VERSION >= RTE_VERSION_NUM(22, 11, 0, 0) && RTE_VERSION < RTE_VERSION_NUM(23, 0, 0, 0)
#define UROCE_ATTACHED_TELEMETRY 1
extern "C" int rte_telemetry_init(const char* runtime_dir, const char* rte_version, rte_cpuset_t* cpuset,
                                  int (*log_fn)(uint32_t, uint32_t, const char*, ...), uint32_t logtype);
#endif

namespace uroce::port::service {

namespace {

// While it lives, a process that is not root sees XDG_RUNTIME_DIR = the directory two levels above
// the daemon's runtime directory (RUN/dpdk/PREFIX), so its EAL finds RUN/dpdk/PREFIX; the old
// value comes back after.
class RuntimeDirFor {
 public:
  explicit RuntimeDirFor(const char* daemon_dir) {
    const std::string d(daemon_dir, strnlen(daemon_dir, 108));
    const size_t a = d.find_last_of('/');
    const size_t b = a == std::string::npos || a == 0 ? std::string::npos : d.find_last_of('/', a - 1);
    if (::getuid() == 0 || b == std::string::npos || d.compare(b, a - b, "/dpdk") != 0) return;
    const char* old = std::getenv("XDG_RUNTIME_DIR");
    had_ = old != nullptr;
    if (old) old_ = old;
    ::setenv("XDG_RUNTIME_DIR", d.substr(0, b).c_str(), 1);
    set_ = true;
  }
  ~RuntimeDirFor() {
    if (!set_) return;
    if (had_) ::setenv("XDG_RUNTIME_DIR", old_.c_str(), 1);
    else ::unsetenv("XDG_RUNTIME_DIR");
  }
  RuntimeDirFor(const RuntimeDirFor&) = delete;
  RuntimeDirFor& operator=(const RuntimeDirFor&) = delete;

 private:
  bool set_ = false, had_ = false;
  std::string old_;
};

int connect_to(const std::string& device) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un a;
  std::memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  const std::string name = socket_name(device);
  const size_t n = std::min(name.size(), sizeof a.sun_path - 2);
  std::memcpy(a.sun_path + 1, name.data(), n);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), socklen_t(offsetof(sockaddr_un, sun_path) + 1 + n)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string own_comm() {
  std::ifstream f("/proc/self/comm");
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace

bool ServiceLink::available(const std::string& name) {
  const int fd = connect_to(name);
  if (fd < 0) return false;
  ::close(fd);  // the daemon sees a hang-up without hello, and forgets it
  return true;
}

std::unique_ptr<ServiceLink> ServiceLink::attach(const EndpointConfig& cfg, std::string& err) {
  std::unique_ptr<ServiceLink> l(new ServiceLink());
  l->fd_ = connect_to(cfg.name);
  if (l->fd_ < 0) {
    err = "no uroced serves device " + cfg.name + " (start it: uroced --config FILE, docs/service.md)";
    return nullptr;
  }
  Hello h;
  h.pid = int32_t(::getpid());
  copy_str(h.comm, sizeof h.comm, own_comm());
  // A daemon that refuses us may have answered and closed before our hello arrived: the send
  // fails then, and its answer is still to be read.
  const int sent_errno = ::send(l->fd_, &h, sizeof h, MSG_NOSIGNAL) == ssize_t(sizeof h) ? 0 : errno;
  alignas(8) uint8_t buf[sizeof(Welcome) + sizeof(Refused)];
  pollfd p{l->fd_, POLLIN, 0};
  const ssize_t got =
      ::poll(&p, 1, int(param::kServiceReplyWaitMs)) == 1 ? recv_with_fd(l->fd_, buf, sizeof buf, l->doorbell_) : -1;
  Msg type{};
  if (got >= ssize_t(sizeof type)) std::memcpy(&type, buf, sizeof type);
  if (got == ssize_t(sizeof(Refused)) && type == Msg::Refused) {
    Refused r;
    std::memcpy(&r, buf, sizeof r);
    err = "uroced refused: " + std::string(r.why, strnlen(r.why, sizeof r.why));
    return nullptr;
  }
  if (sent_errno) {
    err = std::string("uroced: ") + std::strerror(sent_errno);
    return nullptr;
  }
  Welcome w;
  if (got == ssize_t(sizeof(Welcome))) std::memcpy(&w, buf, sizeof w);
  if (got != ssize_t(sizeof(Welcome)) || type != Msg::Welcome || w.version != kVersion) {
    err = "uroced did not answer (or speaks another version)";
    return nullptr;
  }
  // The EAL as the daemon's secondary: its memory, none of its devices, an lcore id of our own.
  std::vector<std::string> eal = {"--proc-type=secondary", "--file-prefix=" + std::string(w.file_prefix),
                                  "--no-pci", "--no-telemetry", lcores_of_affinity(w.lcore)};
  for (const std::string& a : cfg.eal)
    if (a.rfind("--log-level", 0) == 0) eal.push_back(a);
  // DPDK looks for a primary's files under /var/run/dpdk when run by root, else under
  // $XDG_RUNTIME_DIR/dpdk: a process of another user (uroced --group) is pointed at the daemon's.
  const RuntimeDirFor dir_for(w.runtime_dir);
  if (!detail::start_eal(eal, {}, err)) {
    err = "attaching to uroced's memory: " + err;
    return nullptr;
  }
  l->start_telemetry();
  rte_ring** rings[4] = {&l->rx_, &l->tx_, &l->fill_, &l->free_};
  const SlotRingNames n = slot_ring_names(w.slot);
  const std::string* names[4] = {&n.rx, &n.tx, &n.fill, &n.free};
  for (int k = 0; k < 4; ++k) {
    *rings[k] = rte_ring_lookup(names[k]->c_str());
    if (!*rings[k]) {
      err = "uroced's ring " + *names[k] + " not found";
      return nullptr;
    }
  }
  l->slot_ = w.slot;
  l->tag_bits_ = w.tag_bits;
  l->max_frame_ = w.max_frame;
  l->describe_ = "uroced slot " + std::to_string(w.slot) + " of " + std::string(w.describe);
  l->cfg_ = cfg;
  l->cfg_.path_mtu = engine::Mtu(w.path_mtu);
  l->cfg_.netdev = w.netdev;
  l->cfg_.netdev_ifindex = int(w.netdev_ifindex);
  std::memcpy(l->mac_.data(), w.mac, 6);
  l->take_gids(w.gids);
  l->gids_changed_ = false;
  if (!l->set_up_driving(w)) l->pump_.reset();
  return l;
}

// The daemon's shared state, every slot's rings and the pool, as the daemon's pump sees them.
bool ServiceLink::set_up_driving(const Welcome& w) {
  const rte_memzone* z = rte_memzone_lookup(kPumpZone);
  rte_mempool* pool = rte_mempool_lookup(w.pool);
  rte_ring* to_daemon = rte_ring_lookup(kDaemonRing);
  if (!z || !pool || !to_daemon || !Pump::find_marks()) return false;
  sh_ = static_cast<PumpShared*>(z->addr);
  port_ = sh_->port;
  if (!rte_eth_dev_is_valid_port(port_)) return false;  // not a port this process sees
  std::vector<SlotRings> rings(param::kServiceMaxProcs);
  for (uint32_t i = 0; i < rings.size(); ++i) {
    const SlotRingNames n = slot_ring_names(i);
    SlotRings& r = rings[i];
    if (!(r.rx = rte_ring_lookup(n.rx.c_str())) || !(r.tx = rte_ring_lookup(n.tx.c_str())) ||
        !(r.fill = rte_ring_lookup(n.fill.c_str())) || !(r.free = rte_ring_lookup(n.free.c_str())))
      return false;
  }
  pump_ = std::make_unique<Pump>(sh_, std::move(rings), to_daemon, pool);
  mark_every_ = rte_get_tsc_hz() / (1'000'000'000 / param::kServiceDrivenMarkNs);
  // What the driver places itself: frames to the device's MAC for a QP or CM ID of a live
  // process. Everything else (ARP, ND, ICMP, REQs by service ID, other MACs) is the daemon's.
  owner_ = {[](void* ctx, const uint8_t* f, uint32_t len) {
              const PumpShared* sh = static_cast<const PumpShared*>(ctx);
              if (len < 14 || std::memcmp(f, sh->mac, 6) != 0) return Pump::kDaemon;
              const Route r = route_frame({f, len});
              if (r.by != Route::By::Qp && r.by != Route::By::CmId) return Pump::kDaemon;
              if (r.id == 0) return Pump::kNobody;
              const uint32_t o = r.id & (param::kServiceMaxProcs - 1);
              return (sh->live.load(std::memory_order_relaxed) >> o) & 1 ? int(o) : Pump::kNobody;
            },
            sh_};
  wire_ = [this](void** ms, size_t n) {
    return size_t(rte_eth_tx_burst(port_, 0, reinterpret_cast<rte_mbuf**>(ms), uint16_t(n)));
  };
  return true;
}

bool ServiceLink::may_drive() {
  if (!pump_ || !alive_ || !sh_->drive.load(std::memory_order_relaxed)) return false;
  const uint32_t epoch = sh_->epoch.load(std::memory_order_relaxed);
  if (epoch_ == UINT32_MAX) epoch_ = epoch;
  // After its first step (the PMD maps the rings' regions into a secondary by then), every page
  // of them is mapped into this process at once, not at each ring slot's first use (as
  // DpdkLink::wait_link does for a link of the process's own), outside any hold of the port.
  if (drives_ && !mapped_) {
    mapped_ = true;
    detail::populate_memif_regions();
  }
  return epoch == epoch_;  // else the link went down since: our view of its memory is old
}

// One step of the port's, holding it: what the port received to its owners (ours into `mine`,
// at most `cap`, the rest of ours behind them in our ring), every process's frames to send out,
// their buffers back and their fill rings topped up. Returns how many went into `mine`.
size_t ServiceLink::drive_step(void** mine, size_t cap) {
  // The time, for the daemon (it leaves the port to drivers while they come often): a TSC read
  // per step, a store only now and then.
  const uint64_t tsc = rte_get_tsc_cycles();
  if (tsc - marked_tsc_ > mark_every_) {
    marked_tsc_ = tsc;
    sh_->driven_ns.store(monotonic_ns(), std::memory_order_relaxed);
  }
  ++drives_;
  void* ms[param::kLinkBurst];
  const uint16_t n = rte_eth_rx_burst(port_, 0, reinterpret_cast<rte_mbuf**>(ms), param::kLinkBurst);
  size_t got = 0;
  pump_->deliver(ms, n, owner_, drive_counts_, {int(slot_), mine, cap, &got});
  for (uint64_t live = sh_->live.load(std::memory_order_acquire); live; live &= live - 1) {
    const uint32_t i = uint32_t(__builtin_ctzll(live));
    pump_->move_tx(i, sh_->mac, wire_, owner_, drive_counts_);
    pump_->refill(i);
  }
  return got;
}


// The process's telemetry socket, in /var/run/dpdk/uroce-shim-PID/ (where uroce-stat looks, and
// what the shim removes at exit, as for a process with a link of its own).
void ServiceLink::start_telemetry() {
#ifdef UROCE_ATTACHED_TELEMETRY
  const char* base = rte_eal_get_runtime_dir();
  std::string dir = base ? base : "";
  const size_t slash = dir.rfind('/');
  if (slash == std::string::npos) return;
  dir = dir.substr(0, slash) + "/uroce-shim-" + std::to_string(::getpid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return;
  rte_cpuset_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0) return;
  const int type = rte_log_register_type_and_pick_level("lib.telemetry", RTE_LOG_ERR);
  if (rte_telemetry_init(dir.c_str(), rte_version(), &cpus, rte_log, type < 0 ? 0u : uint32_t(type)) == 0)
    runtime_dir_ = dir;
#endif
}

ServiceLink::~ServiceLink() {
  flush_free();
  if (fd_ >= 0) ::close(fd_);
  if (doorbell_ >= 0) ::close(doorbell_);
}

void ServiceLink::take_gids(const Gids& g) {
  gids_.assign(g.n, proto::Ip6{});
  for (uint32_t k = 0; k < g.n && k < kMaxGids; ++k) std::memcpy(gids_[k].data(), g.gid[k], 16);
  const size_t i = size_t(cfg_.gid_index);
  gid_ = i < gids_.size() ? gids_[i] : proto::Ip6{};
  gids_changed_ = true;
}

// ---- Frames -----------------------------------------------------------------------------------

bool ServiceLink::alloc(engine::PacketBuf& b, uint32_t len) {
  if (!alive_) return false;
  if (stash_n_ == 0) {
    // Back-pressure: the tx ring holds this process's share of the pool (PumpShared::tx_cap).
    if (rte_ring_count(tx_) >= sh_->tx_cap()) {
      ++tx_full_;
      return false;
    }
    stash_n_ = rte_ring_sc_dequeue_burst(fill_, stash_, param::kServiceBurst, nullptr);
    if (stash_n_ == 0) {
      ++alloc_failed_;
      return false;
    }
  }
  // Fresh from the daemon's rte_pktmbuf_alloc_bulk (reset there): lent as it is.
  rte_mbuf* m = static_cast<rte_mbuf*>(stash_[--stash_n_]);
  if (detail::lend(m, len, b)) return true;
  engine::PacketBuf back{nullptr, 0, 0, m};
  release(back);
  return false;
}

size_t ServiceLink::send(engine::PacketBuf* bufs, size_t n) {
  if (!alive_) return 0;
  void* ms[param::kServiceBurst];
  size_t total = 0;
  // Holding the port with nothing queued before them, the frames go out at once; what the wire
  // does not take goes into the ring, in order.
  const uint32_t me = slot_ + 1;
  const bool held = may_drive() && pump_->try_take(me);
  bool direct = held && rte_ring_empty(tx_);
  while (total < n) {
    const size_t k = std::min<size_t>(n - total, param::kServiceBurst);
    for (size_t i = 0; i < k; ++i) {
      engine::PacketBuf& b = bufs[total + i];
      rte_mbuf* m = static_cast<rte_mbuf*>(b.handle);
      uint32_t len = b.len;
      if (len < param::kMinFrame) {  // padded to the Ethernet minimum, as DpdkLink::send does
        std::memset(b.data + len, 0, param::kMinFrame - len);
        len = param::kMinFrame;
      }
      m->data_len = uint16_t(len);
      m->pkt_len = len;
      ms[i] = m;
    }
    size_t sent = 0;
    if (direct) {
      sent = pump_->out(int(slot_), ms, k, sh_->mac, wire_, owner_, drive_counts_);
      direct = sent == k;
    }
    const unsigned put = sent + rte_ring_sp_enqueue_burst(tx_, ms + sent, unsigned(k - sent), nullptr);
    total += put;
    tx_frames_ += put;
    if (put < k) break;  // the ring is full: the caller keeps the rest
  }
  if (held) {
    pump_->move_tx(slot_, sh_->mac, wire_, owner_, drive_counts_);
    pump_->give_back(me);
  }
  return total;
}

size_t ServiceLink::recv(engine::PacketBuf* bufs, size_t max) {
  if (!alive_) return 0;
  // Holding the port, nobody else puts frames into our ring: those in it are older than what the
  // port holds, and come first. The buffers we are done with go back to the pool at once (the
  // pool's cache is last in, first out: the port's next receive reuses them while they are warm).
  const uint32_t me = slot_ + 1;
  const bool held = may_drive() && pump_->try_take(me);
  if (used_n_ && held) {
    Pump::mark(used_, used_n_, 0);
    rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(used_), used_n_);
    used_n_ = 0;
  } else if (used_n_) {
    flush_free();
  }
  void* ms[param::kLinkBurst];
  const size_t want = std::min<size_t>(max, param::kLinkBurst);
  size_t n = rte_ring_sc_dequeue_burst(rx_, ms, unsigned(want), nullptr);
  if (held) {
    n += drive_step(ms + n, want - n);
    pump_->give_back(me);
    if (pump_->take_rang()) ring_doorbell(doorbell_);
  }
  for (size_t i = 0; i < n; ++i) {
    rte_mbuf* m = static_cast<rte_mbuf*>(ms[i]);
    engine::PacketBuf& b = bufs[i];
    b.data = rte_pktmbuf_mtod(m, uint8_t*);
    b.len = m->data_len;
    b.cap = m->data_len;
    b.handle = m;
  }
  rx_frames_ += n;
  return n;
}

void ServiceLink::release(engine::PacketBuf& b) {
  if (!b.handle) return;
  if (used_n_ == param::kServiceUsed) flush_free();
  if (used_n_ < param::kServiceUsed) used_[used_n_++] = b.handle;  // else lost (the daemon is gone)
  b.handle = nullptr;
}

void ServiceLink::flush_free() {
  if (!used_n_ || !alive_) return;
  const unsigned put = rte_ring_sp_enqueue_burst(free_, used_, used_n_, nullptr);
  std::memmove(used_, used_ + put, (used_n_ - put) * sizeof(void*));
  used_n_ -= put;
}

// ---- Control ----------------------------------------------------------------------------------

void ServiceLink::read_control() {
  if (!alive_) return;
  alignas(8) uint8_t buf[1024];
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      alive_ = false;  // the daemon stopped: the device is gone (the shim says IBV_EVENT_DEVICE_FATAL)
      std::fprintf(stderr, "uroce: uroced of %s is gone: the device is lost\n", cfg_.name.c_str());
      return;
    }
    if (n < 0) return;  // nothing more now
    if (n < ssize_t(sizeof(Msg))) continue;
    Msg type;
    std::memcpy(&type, buf, sizeof type);
    if (type == Msg::Gids && size_t(n) == sizeof(Gids)) {
      Gids g;
      std::memcpy(&g, buf, sizeof g);
      take_gids(g);
    } else if (type == Msg::Resolved && size_t(n) == sizeof(Resolved)) {
      std::memcpy(&answer_, buf, sizeof answer_);
      have_answer_ = true;
    }
  }
}

bool ServiceLink::poll_addresses() {
  read_control();
  const bool changed = gids_changed_;
  gids_changed_ = false;
  return changed;
}

bool ServiceLink::lookup(const proto::Ip6& gid, proto::Mac& out) const {
  auto it = neigh_.find(gid);
  if (it == neigh_.end()) return false;
  out = it->second.first;
  route_hop_limit_ = it->second.second;
  return true;
}

bool ServiceLink::resolve(const proto::Ip6& gid, proto::Mac& out, const std::function<void()>& pump) {
  Resolve r;
  std::memcpy(r.gid, gid.data(), 16);
  have_answer_ = false;
  if (!alive_ || ::send(fd_, &r, sizeof r, MSG_NOSIGNAL) != ssize_t(sizeof r)) {
    resolve_error_ = "uroced is gone";
    return false;
  }
  // The daemon answers within its own bound (arp_timeout_ms); ours is a little longer.
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(cfg_.arp_timeout_ms + param::kServiceReplyWaitMs);
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, pump ? 1 : 10) == 1) read_control();
    if (!alive_) break;
    if (have_answer_ && std::memcmp(answer_.gid, gid.data(), 16) == 0) {
      have_answer_ = false;
      if (!answer_.ok) {
        resolve_error_ = answer_.error;
        return false;
      }
      std::memcpy(out.data(), answer_.mac, 6);
      neigh_[gid] = {out, answer_.hop_limit};
      route_hop_limit_ = answer_.hop_limit;
      resolve_error_.clear();
      return true;
    }
    if (pump) pump();
  }
  resolve_error_ = alive_ ? "uroced did not answer" : "uroced is gone";
  return false;
}

void ServiceLink::announce_listen(uint64_t service_id, bool on) {
  Listen l;
  l.on = on ? 1 : 0;
  l.service_id = service_id;
  if (alive_) (void)::send(fd_, &l, sizeof l, MSG_NOSIGNAL);
}

int ServiceLink::join_group(const std::array<uint8_t, 16>& gid, bool join) {
  Group g;
  g.on = join ? 1 : 0;
  std::memcpy(g.gid, gid.data(), 16);
  if (alive_) (void)::send(fd_, &g, sizeof g, MSG_NOSIGNAL);
  return alive_ ? 0 : ENODEV;
}

void ServiceLink::leave_will(uint32_t id, const std::vector<uint8_t>& frame) {
  Will w;
  w.id = id;
  if (frame.size() <= sizeof w.frame) {
    w.len = uint32_t(frame.size());
    std::memcpy(w.frame, frame.data(), frame.size());
  }
  if (alive_) (void)::send(fd_, &w, sizeof w, MSG_NOSIGNAL);
}

std::string ServiceLink::describe() const { return describe_; }

std::string ServiceLink::counters_text() const {
  std::string s = "service slot " + std::to_string(slot_) + ": rx_frames " + std::to_string(rx_frames_) +
                  " tx_frames " + std::to_string(tx_frames_) + " alloc_failed " + std::to_string(alloc_failed_) +
                  " tx_full " + std::to_string(tx_full_);
  if (pump_)
    s += " drives " + std::to_string(drives_) + " (delivered " + std::to_string(drive_counts_.delivered) +
         " to_daemon " + std::to_string(drive_counts_.to_daemon) + " no_owner " +
         std::to_string(drive_counts_.no_owner) + " ring_full " + std::to_string(drive_counts_.ring_full) + ")";
  return s;
}

}  // namespace uroce::port::service
