// uroce-perf: a perftest-like benchmark and demo over the uroce engine on a DPDK link.
//
//   server: uroce-perf --config config/memif-server.conf --test write --mode bw -a
//   client: uroce-perf --config config/memif-client.conf --test write --mode bw -a 127.0.0.1
//
// One process per side; the application thread itself drives Device::progress() (one busy
// poller per process). Connection data (QPN, PSN, rkey, VA, GID, MAC) goes over TCP as in
// perftest; the peer's MAC for the address vector comes from ARP/ND on the DPDK link. Data is
// verified after every size (CRC of the target buffers, atomic results); any error completion
// or mismatch exits non-zero.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "port/dpdk_link.hpp"
#include "proto/icrc.hpp"

using namespace uroce;
using namespace uroce::engine;

namespace {

enum class Test { Write, Send, Read, Atomic };
enum class Mode { Bw, Lat };

struct Opts {
  Test test = Test::Write;
  Mode mode = Mode::Bw;
  uint64_t size = 0;          // 0: default for the mode
  uint64_t iters = 0;
  bool all = false;
  uint64_t max_size = 1ull << 23;
  uint32_t qps = 1;
  std::string config;
  uint16_t tcp_port = 18515;
  std::string peer;           // empty: server
  uint32_t tx_depth = 128;
  uint32_t cq_mod = 64;
  uint32_t rx_depth = 512;
  int mtu = 0;                // 0: the config's
  bool cas = false;           // atomic: compare-and-swap instead of fetch-and-add
  bool stats = false;
  uint32_t timeout_s = 120;
  uint32_t window = 0;        // engine send window in packets (0: the engine's default)
  std::vector<std::string> eal_extra;
};

[[noreturn]] void die(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "uroce-perf: ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
  std::fflush(stdout);
  _exit(1);
}

void usage() {
  std::fprintf(stderr,
               "usage: uroce-perf --config FILE [options] [peer-address]\n"
               "  --test write|send|read|atomic   operation (default write)\n"
               "  --mode bw|lat                   bandwidth or latency (default bw)\n"
               "  -s, --size BYTES                message size (default 65536 bw, 2 lat)\n"
               "  -n, --iters N                   messages per QP and size (default 5000 bw, 1000 lat)\n"
               "  -a, --all                       all sizes 2 .. 2^23 (bounded by --max-size)\n"
               "  --max-size BYTES                largest size for -a (default 8388608)\n"
               "  -q, --qps N                     QPs (default 1)\n"
               "  -t, --tx-depth N                outstanding sends per QP (default 128)\n"
               "  --cq-mod N                      signal every Nth send (default 64)\n"
               "  -m, --mtu BYTES                 path MTU (default: the config's)\n"
               "  -A, --atomic cas|fadd           atomic type (default fadd)\n"
               "  -p, --port N                    TCP port for the connection exchange (default 18515)\n"
               "  -w, --window N                  engine send window in packets (default: the engine's)\n"
               "  --stats                         print link and engine counters at the end\n"
               "  --timeout S                     give up after S seconds (default 120)\n"
               "  --eal ARG                       extra EAL argument (repeatable)\n"
               "without a peer address this side is the server.\n");
  std::exit(2);
}

Opts parse_args(int argc, char** argv) {
  Opts o;
  bool have_iters = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--test") {
      std::string v = val();
      if (v == "write") o.test = Test::Write;
      else if (v == "send") o.test = Test::Send;
      else if (v == "read") o.test = Test::Read;
      else if (v == "atomic") o.test = Test::Atomic;
      else usage();
    } else if (a == "--mode") {
      std::string v = val();
      if (v == "bw") o.mode = Mode::Bw;
      else if (v == "lat") o.mode = Mode::Lat;
      else usage();
    } else if (a == "-s" || a == "--size") o.size = std::stoull(val());
    else if (a == "-n" || a == "--iters") o.iters = std::stoull(val()), have_iters = true;
    else if (a == "-a" || a == "--all") o.all = true;
    else if (a == "--max-size") o.max_size = std::stoull(val());
    else if (a == "-q" || a == "--qps") o.qps = uint32_t(std::stoul(val()));
    else if (a == "-t" || a == "--tx-depth") o.tx_depth = uint32_t(std::stoul(val()));
    else if (a == "--cq-mod") o.cq_mod = uint32_t(std::stoul(val()));
    else if (a == "-m" || a == "--mtu") o.mtu = std::stoi(val());
    else if (a == "-A" || a == "--atomic") {
      std::string v = val();
      o.cas = v == "cas" || v == "CMP_AND_SWAP";
    } else if (a == "-p" || a == "--port") o.tcp_port = uint16_t(std::stoul(val()));
    else if (a == "--config") o.config = val();
    else if (a == "--stats") o.stats = true;
    else if (a == "--timeout") o.timeout_s = uint32_t(std::stoul(val()));
    else if (a == "-w" || a == "--window") o.window = uint32_t(std::stoul(val()));
    else if (a == "--eal") o.eal_extra.push_back(val());
    else if (a == "-h" || a == "--help") usage();
    else if (!a.empty() && a[0] != '-' && o.peer.empty()) o.peer = a;
    else usage();
  }
  if (o.config.empty() || o.qps == 0 || o.qps > 64 || o.tx_depth == 0 || o.cq_mod == 0) usage();
  if (!have_iters) o.iters = o.mode == Mode::Bw ? 5000 : 1000;
  if (o.iters == 0) usage();
  if (o.size == 0) o.size = o.mode == Mode::Bw ? 65536 : 2;
  if (o.test == Test::Atomic) o.size = 8, o.all = false;
  if (o.max_size > (1ull << 23)) o.max_size = 1ull << 23;
  o.cq_mod = std::min(o.cq_mod, o.tx_depth);
  return o;
}

// ---- TCP connection exchange -------------------------------------------------------------------
struct Msg {
  uint32_t type = 0;
  uint32_t status = 0;
  uint64_t size = 0;
  uint64_t a = 0, b = 0;
  double bw_peak = 0, bw_avg = 0, mpps = 0;
};
enum MsgType : uint32_t { kStart = 1, kReady, kDone, kResult, kBye, kQuiet };

struct QpInfo {
  uint32_t qpn, psn, rkey, pad;
  uint64_t rbuf, sbuf;
};
struct Hello {
  uint32_t magic = 0x75726f63;  // "uroc"
  uint32_t qps = 0, test = 0, mode = 0, mtu = 0, pad = 0;
  uint64_t size = 0, iters = 0;
  uint8_t gid[16] = {}, mac[6] = {}, pad2[2] = {};
};

class Tcp {
 public:
  int fd = -1;
  std::string rxbuf;
  void send_all(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n) {
      ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) die("TCP send: %s", std::strerror(errno));
      c += k, n -= size_t(k);
    }
  }
  // Non-blocking: true when n bytes are available (copied to p).
  bool try_recv(void* p, size_t n) {
    char tmp[4096];
    while (rxbuf.size() < n) {
      ssize_t k = ::recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
      if (k == 0) die("peer closed the TCP connection");
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
        if (errno == EINTR) continue;
        die("TCP recv: %s", std::strerror(errno));
      }
      rxbuf.append(tmp, size_t(k));
    }
    std::memcpy(p, rxbuf.data(), n);
    rxbuf.erase(0, n);
    return true;
  }
  // Blocking, bounded: true when n bytes arrived; false when the peer closed, on an error, or
  // after timeout_ms.
  bool recv_wait(void* p, size_t n, int timeout_ms) {
    const uint64_t end = rte_get_tsc_cycles() + rte_get_tsc_hz() / 1000 * uint64_t(timeout_ms);
    char tmp[4096];
    while (rxbuf.size() < n) {
      const uint64_t now = rte_get_tsc_cycles();
      if (now >= end) return false;
      pollfd pf{fd, POLLIN, 0};
      const int r = ::poll(&pf, 1, int((end - now) * 1000 / rte_get_tsc_hz()) + 1);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      const ssize_t k = ::recv(fd, tmp, sizeof tmp, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return false;
      rxbuf.append(tmp, size_t(k));
    }
    std::memcpy(p, rxbuf.data(), n);
    rxbuf.erase(0, n);
    return true;
  }
};

// Accepts one connection, calling pump() while waiting so the endpoint keeps answering ARP,
// ND and ping (and acknowledging) in the meantime.
int tcp_server(uint16_t port, const std::function<void()>& pump) {
  int ls = socket(AF_INET6, SOCK_STREAM, 0);
  bool v6 = ls >= 0;
  if (!v6) ls = socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0) die("socket: %s", std::strerror(errno));
  int one = 1, zero = 0;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {
    setsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    a.sin6_addr = in6addr_any;
    rc = bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    rc = bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0) die("bind TCP port %u: %s", port, std::strerror(errno));
  if (listen(ls, 1) != 0) die("listen: %s", std::strerror(errno));
  fcntl(ls, F_SETFL, fcntl(ls, F_GETFL) | O_NONBLOCK);
  for (;;) {
    int fd = accept(ls, nullptr, nullptr);
    if (fd >= 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      close(ls);
      return fd;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("accept: %s", std::strerror(errno));
    for (int i = 0; i < 1024; ++i) pump();
  }
}

int tcp_client(const std::string& host, uint16_t port, uint32_t timeout_s, const std::function<void()>& pump) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  std::string ps = std::to_string(port);
  if (getaddrinfo(host.c_str(), ps.c_str(), &hints, &res) != 0 || !res) die("cannot resolve %s", host.c_str());
  const uint64_t end = rte_get_tsc_cycles() + rte_get_tsc_hz() * timeout_s;
  for (;;) {
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd < 0) die("socket: %s", std::strerror(errno));
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      freeaddrinfo(res);
      return fd;
    }
    close(fd);
    if (rte_get_tsc_cycles() > end) die("cannot connect to %s:%u", host.c_str(), port);
    // The server may not be listening yet: keep the endpoint alive for 100 ms, then retry.
    const uint64_t until = rte_get_tsc_cycles() + rte_get_tsc_hz() / 10;
    while (rte_get_tsc_cycles() < until) pump();
  }
}

// ---- The endpoint -------------------------------------------------------------------------------
struct QpCtx {
  Qp* qp = nullptr;
  uint8_t* rbuf = nullptr;  // the peer writes / sends here; READ and atomic target
  uint8_t* sbuf = nullptr;  // WRITE/SEND source, READ destination, atomic result
  QpInfo remote{};
  uint64_t posted = 0, completed = 0;
  uint64_t recv_posted = 0, recv_done = 0;
};

struct Ctx {
  Opts o;
  port::EndpointConfig cfg;
  std::unique_ptr<port::DpdkLink> link;
  std::unique_ptr<port::TscClock> clock;
  std::unique_ptr<Device> dev;
  Pd* pd = nullptr;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  Mr* mr = nullptr;
  uint8_t* mem = nullptr;
  size_t region = 0;
  std::vector<QpCtx> q;
  Tcp tcp;
  bool server = true;
  Mtu mtu = Mtu::M1024;
  uint64_t hz = 1;

  void pump() { dev->progress(); }

  Msg wait_msg(uint32_t type) {
    Msg m;
    uint32_t spin = 0;
    for (;;) {
      dev->progress();
      if ((++spin & 255) == 0 && tcp.try_recv(&m, sizeof m)) break;
    }
    if (m.type != type) die("protocol: expected message %u, got %u (status %u)", type, m.type, m.status);
    return m;
  }
  void send_msg(const Msg& m) { tcp.send_all(&m, sizeof m); }

  void check_wc(const Wc& wc) {
    if (wc.status != WcStatus::Success)
      die("error completion: qp 0x%x wr_id %lu status %s (%u) opcode %u", wc.qp_num, (unsigned long)wc.wr_id,
          std::string(wc_status_name(wc.status)).c_str(), unsigned(wc.status), unsigned(wc.opcode));
  }
};

uint32_t checksum(const uint8_t* p, size_t n) { return proto::crc32(0, p, n); }

void fill_pattern(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) p[i] = uint8_t(x >> (8 * (i & 7)));
}

void setup(Ctx& c) {
  std::string err;
  auto cfg = port::load_config(c.o.config, err);
  if (!cfg) die("%s", err.c_str());
  c.cfg = *cfg;
  if (c.o.mtu) {
    switch (c.o.mtu) {
      case 256: c.cfg.path_mtu = Mtu::M256; break;
      case 512: c.cfg.path_mtu = Mtu::M512; break;
      case 1024: c.cfg.path_mtu = Mtu::M1024; break;
      case 2048: c.cfg.path_mtu = Mtu::M2048; break;
      case 4096: c.cfg.path_mtu = Mtu::M4096; break;
      default: die("bad path mtu %d", c.o.mtu);
    }
  }
  c.link = port::DpdkLink::open(c.cfg, err, c.o.eal_extra);
  if (!c.link) die("%s", err.c_str());
  c.hz = rte_get_tsc_hz();
  c.clock = std::make_unique<port::TscClock>();
  Device::Config dc;
  dc.mac = c.link->mac();
  dc.gid = c.link->gid();
  dc.max_qp_wr = 16384;
  dc.max_cqe = 1 << 18;
  if (c.o.window) dc.max_unacked_psns = c.o.window;
  c.dev = std::make_unique<Device>(*c.link, *c.clock, dc);
  if (engine::mtu_bytes(c.cfg.path_mtu) > c.dev->mtu_limit()) die("path mtu larger than the link carries");
  c.mtu = c.cfg.path_mtu;
  c.pd = c.dev->alloc_pd();
  const uint32_t depth = std::max(c.o.tx_depth, c.o.rx_depth) * c.o.qps * 2 + 64;
  c.scq = c.dev->create_cq(depth);
  c.rcq = c.dev->create_cq(depth);
  if (!c.pd || !c.scq || !c.rcq) die("cannot create PD/CQ");
  const uint64_t maxs = c.o.all ? c.o.max_size : c.o.size;
  c.region = (std::max<uint64_t>(maxs, 64) + 4095) & ~uint64_t(4095);
  const size_t total = c.region * 2 * c.o.qps;
  c.mem = static_cast<uint8_t*>(aligned_alloc(4096, total));
  if (!c.mem) die("out of memory (%zu bytes)", total);
  std::memset(c.mem, 0, total);
  c.mr = c.dev->reg_mr(c.pd, c.mem, total, kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic);
  if (!c.mr) die("reg_mr failed");
  c.q.resize(c.o.qps);
  for (uint32_t i = 0; i < c.o.qps; ++i) {
    QpInitAttr ia;
    ia.pd = c.pd;
    ia.send_cq = c.scq;
    ia.recv_cq = c.rcq;
    ia.cap.max_send_wr = c.o.tx_depth + 8;
    ia.cap.max_recv_wr = c.o.rx_depth + 8;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = 0;
    c.q[i].qp = c.dev->create_qp(ia);
    if (!c.q[i].qp) die("create_qp failed");
    c.q[i].rbuf = c.mem + c.region * 2 * i;
    c.q[i].sbuf = c.q[i].rbuf + c.region;
  }
}

const char* test_name(const Opts& o) {
  switch (o.test) {
    case Test::Write: return "RDMA_Write";
    case Test::Send: return "Send";
    case Test::Read: return "RDMA_Read";
    case Test::Atomic: return o.cas ? "Atomic CMP_AND_SWAP" : "Atomic FETCH_AND_ADD";
  }
  return "?";
}

void connect_qps(Ctx& c) {
  // Exchange connection data over TCP.
  const auto pump = [&] { c.pump(); };
  c.tcp.fd = c.server ? tcp_server(c.o.tcp_port, pump) : tcp_client(c.o.peer, c.o.tcp_port, 30, pump);
  int one = 1;
  setsockopt(c.tcp.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  Hello h;
  h.qps = c.o.qps;
  h.test = uint32_t(c.o.test);
  h.mode = uint32_t(c.o.mode);
  h.mtu = uint32_t(c.mtu);
  h.size = c.o.all ? 0 : c.o.size;
  h.iters = c.o.iters;
  std::memcpy(h.gid, c.link->gid().data(), 16);
  std::memcpy(h.mac, c.link->mac().data(), 6);
  std::vector<QpInfo> mine(c.o.qps), theirs(c.o.qps);
  for (uint32_t i = 0; i < c.o.qps; ++i) {
    mine[i].qpn = c.q[i].qp->qpn();
    mine[i].psn = (0x1000 * (i + 1) + (c.server ? 0x500000 : 0)) & 0xFFFFFF;
    mine[i].rkey = c.mr->rkey;
    mine[i].rbuf = reinterpret_cast<uintptr_t>(c.q[i].rbuf);
    mine[i].sbuf = reinterpret_cast<uintptr_t>(c.q[i].sbuf);
  }
  c.tcp.send_all(&h, sizeof h);
  c.tcp.send_all(mine.data(), sizeof(QpInfo) * mine.size());
  Hello ph;
  while (!c.tcp.try_recv(&ph, sizeof ph)) c.pump();
  if (ph.magic != h.magic || ph.qps != h.qps || ph.test != h.test || ph.mode != h.mode || ph.size != h.size ||
      ph.iters != h.iters)
    die("the peer runs a different test (same --test, --mode, -s/-a, -n, -q on both sides)");
  if (ph.mtu != h.mtu) die("path MTU differs from the peer's (%u vs %u bytes)", mtu_bytes(c.mtu), mtu_bytes(Mtu(ph.mtu)));
  while (!c.tcp.try_recv(theirs.data(), sizeof(QpInfo) * theirs.size())) c.pump();

  // The DPDK link must be up (memif: the peer connected), then the peer's MAC is resolved
  // on the link itself (ARP or ND), not taken from the TCP exchange.
  if (!c.link->wait_link_up(20000)) die("DPDK link did not come up within 20 s");
  proto::Ip6 pgid;
  std::memcpy(pgid.data(), ph.gid, 16);
  proto::Mac pmac;
  if (!c.link->resolve(pgid, pmac, [&] { c.pump(); }))
    die("address resolution of %s failed (%s)", port::gid_str(pgid).c_str(),
        engine::gid_is_v4mapped(pgid) ? "ARP" : "ND");
  proto::Mac tmac;
  std::memcpy(tmac.data(), ph.mac, 6);
  if (tmac != pmac)
    die("%s resolved to %s but the peer says its MAC is %s", port::gid_str(pgid).c_str(),
        port::mac_str(pmac).c_str(), port::mac_str(tmac).c_str());

  for (uint32_t i = 0; i < c.o.qps; ++i) {
    QpCtx& x = c.q[i];
    x.remote = theirs[i];
    QpAttr at;
    at.qp_state = QpState::Init;
    at.pkey_index = 0;
    at.port_num = 1;
    at.qp_access_flags = kRemoteWrite | kRemoteRead | kRemoteAtomic;
    if (c.dev->modify_qp(x.qp, at, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags) != 0)
      die("modify_qp INIT");
    at.qp_state = QpState::Rtr;
    at.path_mtu = c.mtu;
    at.dest_qp_num = theirs[i].qpn;
    at.rq_psn = theirs[i].psn;
    at.max_dest_rd_atomic = 16;
    at.min_rnr_timer = 1;
    at.ah_attr.dgid = pgid;
    at.ah_attr.dmac = pmac;
    at.ah_attr.hop_limit = c.cfg.hop_limit;
    at.ah_attr.traffic_class = uint8_t(c.cfg.dscp << 2 | c.cfg.ecn);
    at.ah_attr.sgid_index = uint8_t(c.cfg.gid_index);
    if (c.dev->modify_qp(x.qp, at,
                         kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic |
                             kAttrMinRnrTimer) != 0)
      die("modify_qp RTR");
    at.qp_state = QpState::Rts;
    at.sq_psn = mine[i].psn;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.max_rd_atomic = 16;
    if (c.dev->modify_qp(x.qp, at,
                         kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
                             kAttrMaxQpRdAtomic) != 0)
      die("modify_qp RTS");
  }
  // Barrier: both sides are in RTS.
  Msg m;
  m.type = kReady;
  c.send_msg(m);
  c.wait_msg(kReady);
  std::printf("local  address: %s  QPN 0x%06x PSN 0x%06x RKey 0x%08x VA 0x%016lx\n",
              port::gid_str(c.link->gid()).c_str(), mine[0].qpn, mine[0].psn, mine[0].rkey,
              (unsigned long)mine[0].rbuf);
  std::printf("remote address: %s  QPN 0x%06x PSN 0x%06x RKey 0x%08x VA 0x%016lx MAC %s (resolved)\n",
              port::gid_str(pgid).c_str(), theirs[0].qpn, theirs[0].psn, theirs[0].rkey,
              (unsigned long)theirs[0].rbuf, port::mac_str(pmac).c_str());
}

void print_header(const Ctx& c) {
  const char* line = "---------------------------------------------------------------------------------------";
  std::printf("%s\n", line);
  std::printf("                    %s %s Test\n", test_name(c.o), c.o.mode == Mode::Bw ? "BW" : "Latency");
  std::printf(" Number of qps   : %-10u Transport type : IB (RoCEv2, uroce over DPDK)\n", c.o.qps);
  std::printf(" Connection type : RC         Using SRQ      : OFF\n");
  std::printf(" Device          : %-10s Link           : %s\n", c.cfg.name.c_str(), c.link->describe().c_str());
  std::printf(" Mtu             : %u[B]\n", mtu_bytes(c.mtu));
  if (c.o.mode == Mode::Bw) std::printf(" TX depth        : %-10u CQ Moderation  : %u\n", c.o.tx_depth, c.o.cq_mod);
  std::printf("%s\n", line);
  if (c.o.mode == Mode::Bw)
    std::printf(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n");
  else
    std::printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
                "   99%% percentile[usec]   99.9%% percentile[usec]\n");
  std::fflush(stdout);
}

// ---- Posting helpers ---------------------------------------------------------------------------
void post_op(Ctx& c, QpCtx& x, uint64_t size, uint64_t idx, bool signaled) {
  Sge sge{reinterpret_cast<uintptr_t>(x.sbuf), uint32_t(size), c.mr->lkey};
  SendWr wr;
  wr.wr_id = idx;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = signaled ? uint32_t(kSendSignaled) : 0u;
  switch (c.o.test) {
    case Test::Write:
      wr.opcode = WrOpcode::RdmaWrite;
      wr.remote_addr = x.remote.rbuf;
      wr.rkey = x.remote.rkey;
      break;
    case Test::Send: wr.opcode = WrOpcode::Send; break;
    case Test::Read:
      wr.opcode = WrOpcode::RdmaRead;
      wr.remote_addr = x.remote.rbuf;
      wr.rkey = x.remote.rkey;
      break;
    case Test::Atomic:
      wr.remote_addr = x.remote.rbuf;
      wr.rkey = x.remote.rkey;
      sge.length = 8;
      if (c.o.cas) {
        wr.opcode = WrOpcode::AtomicCmpSwp;
        wr.compare_add = idx;
        wr.swap = idx + 1;
      } else {
        wr.opcode = WrOpcode::AtomicFetchAdd;
        wr.compare_add = 1;
      }
      break;
  }
  int rc = c.dev->post_send(x.qp, wr);
  if (rc != 0) die("post_send: %s", std::strerror(rc));
}

void post_recvs(Ctx& c, QpCtx& x, uint64_t size, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    Sge sge{reinterpret_cast<uintptr_t>(x.rbuf), uint32_t(size), c.mr->lkey};
    RecvWr wr;
    wr.wr_id = x.recv_posted++;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    int rc = c.dev->post_recv(x.qp, wr);
    if (rc != 0) die("post_recv: %s", std::strerror(rc));
  }
}

// ---- Bandwidth ---------------------------------------------------------------------------------
struct BwResult {
  double peak = 0, avg = 0, mpps = 0;
};

BwResult run_bw_client(Ctx& c, uint64_t size) {
  const uint64_t iters = c.o.iters;
  for (auto& x : c.q) x.posted = x.completed = 0;
  std::vector<uint64_t> stamps;  // (tsc) at every signaled completion, with messages done so far
  std::vector<uint64_t> counts;
  stamps.reserve(iters * c.o.qps / c.o.cq_mod + 16);
  counts.reserve(stamps.capacity());
  uint64_t done = 0;
  const uint64_t total = iters * c.o.qps;
  Wc wc[32];
  const uint64_t t0 = rte_get_tsc_cycles();
  while (done < total) {
    for (auto& x : c.q) {
      while (x.posted < iters && x.posted - x.completed < c.o.tx_depth) {
        const bool sig = (x.posted + 1) % c.o.cq_mod == 0 || x.posted + 1 == iters;
        post_op(c, x, size, x.posted, sig);
        ++x.posted;
      }
    }
    c.dev->progress();
    int n = c.dev->poll_cq(c.scq, 32, wc);
    if (n > 0) {
      const uint64_t now = rte_get_tsc_cycles();
      for (int i = 0; i < n; ++i) {
        c.check_wc(wc[i]);
        for (auto& x : c.q)
          if (x.qp->qpn() == wc[i].qp_num) {
            uint64_t upto = wc[i].wr_id + 1;
            done += upto - x.completed;
            x.completed = upto;
          }
      }
      stamps.push_back(now);
      counts.push_back(done);
    }
  }
  const uint64_t t1 = rte_get_tsc_cycles();
  BwResult r;
  const double secs = double(t1 - t0) / double(c.hz);
  r.avg = double(total) * double(size) * 8 / secs / 1e9;
  r.mpps = double(total) / secs / 1e6;
  // Peak: the best rate over any window of at least 1/16 of the messages.
  const uint64_t win = std::max<uint64_t>(total / 16, 1);
  size_t j = 0;
  double best = r.avg;
  for (size_t i = 0; i < stamps.size(); ++i) {
    while (j < i && counts[i] - counts[j] >= win * 2) ++j;
    uint64_t msgs = counts[i] - (j < i ? counts[j] : 0);
    uint64_t dt = stamps[i] - (j < i ? stamps[j] : t0);
    if (msgs >= win && dt > 0) best = std::max(best, double(msgs) * double(size) * 8 / (double(dt) / double(c.hz)) / 1e9);
  }
  r.peak = best;
  return r;
}

// Server side of SEND bw: receives iters messages per QP, replenishing receives.
void run_send_server(Ctx& c, uint64_t size) {
  const uint64_t iters = c.o.iters;
  uint64_t done = 0;
  const uint64_t total = iters * c.o.qps;
  Wc wc[32];
  while (done < total) {
    c.dev->progress();
    int n = c.dev->poll_cq(c.rcq, 32, wc);
    for (int i = 0; i < n; ++i) {
      c.check_wc(wc[i]);
      if (wc[i].byte_len != size) die("received %u bytes, expected %lu", wc[i].byte_len, (unsigned long)size);
      ++done;
      for (auto& x : c.q)
        if (x.qp->qpn() == wc[i].qp_num) {
          ++x.recv_done;
          if (x.recv_posted < iters) post_recvs(c, x, size, 1);
        }
    }
  }
}

// ---- Latency -----------------------------------------------------------------------------------
struct LatResult {
  double tmin, tmax, typical, avg, stdev, p99, p999;
};

LatResult lat_stats(std::vector<uint64_t>& d, double hz, double div) {
  std::sort(d.begin(), d.end());
  auto us = [&](uint64_t cyc) { return double(cyc) / hz * 1e6 / div; };
  LatResult r{};
  const size_t n = d.size();
  r.tmin = us(d.front());
  r.tmax = us(d.back());
  r.typical = us(d[n / 2]);
  double sum = 0;
  for (auto v : d) sum += us(v);
  r.avg = sum / double(n);
  double var = 0;
  for (auto v : d) var += (us(v) - r.avg) * (us(v) - r.avg);
  r.stdev = std::sqrt(var / double(n));
  r.p99 = us(d[std::min(n - 1, size_t(double(n) * 0.99))]);
  r.p999 = us(d[std::min(n - 1, size_t(double(n) * 0.999))]);
  return r;
}

void wait_send_cqe(Ctx& c) {
  Wc wc;
  for (;;) {
    c.dev->progress();
    if (c.dev->poll_cq(c.scq, 1, &wc) == 1) {
      c.check_wc(wc);
      return;
    }
  }
}

// Ping-pong (write, send) on QP 0; both sides run this. Returns round trips in cycles (client).
std::vector<uint64_t> run_pingpong(Ctx& c, uint64_t size) {
  QpCtx& x = c.q[0];
  const uint64_t iters = c.o.iters;
  std::vector<uint64_t> rtt;
  rtt.reserve(iters);
  volatile uint8_t* flag = x.rbuf + size - 1;  // last byte of the incoming message
  Wc wc;
  auto wait_incoming = [&](uint64_t i) {
    if (c.o.test == Test::Write) {
      const uint8_t want = uint8_t(i % 255 + 1);
      while (*flag != want) c.dev->progress();
    } else {
      for (;;) {
        c.dev->progress();
        if (c.dev->poll_cq(c.rcq, 1, &wc) == 1) {
          c.check_wc(wc);
          if (wc.byte_len != size) die("received %u bytes, expected %lu", wc.byte_len, (unsigned long)size);
          if (i + 1 < iters) post_recvs(c, x, size, 1);  // none left over for the next size
          return;
        }
      }
    }
  };
  auto send_one = [&](uint64_t i) {
    x.sbuf[size - 1] = uint8_t(i % 255 + 1);
    post_op(c, x, size, i, true);
    wait_send_cqe(c);
  };
  for (uint64_t i = 0; i < iters; ++i) {
    if (c.server) {
      wait_incoming(i);
      send_one(i);
    } else {
      const uint64_t t0 = rte_get_tsc_cycles();
      send_one(i);
      wait_incoming(i);
      rtt.push_back(rte_get_tsc_cycles() - t0);
    }
  }
  return rtt;
}

// READ and atomic latency: the client issues one at a time; the server is passive.
std::vector<uint64_t> run_lat_oneside(Ctx& c, uint64_t size) {
  QpCtx& x = c.q[0];
  std::vector<uint64_t> d;
  d.reserve(c.o.iters);
  Wc wc;
  for (uint64_t i = 0; i < c.o.iters; ++i) {
    const uint64_t t0 = rte_get_tsc_cycles();
    post_op(c, x, size, i, true);
    for (;;) {
      c.dev->progress();
      if (c.dev->poll_cq(c.scq, 1, &wc) == 1) break;
    }
    d.push_back(rte_get_tsc_cycles() - t0);
    c.check_wc(wc);
  }
  return d;
}

// ---- One size ----------------------------------------------------------------------------------
// Returns false on a verification failure.
bool run_size(Ctx& c, uint64_t size) {
  const bool bw = c.o.mode == Mode::Bw;
  const bool pingpong = !bw && (c.o.test == Test::Write || c.o.test == Test::Send);
  const uint64_t seed = size * 131 + 7;
  Msg m;
  if (c.server) {
    m = c.wait_msg(kStart);
    // Prepare the target buffers: cleared (write, send), a pattern (read), counters (atomic).
    for (auto& x : c.q) {
      x.recv_posted = x.recv_done = 0;
      if (c.o.test == Test::Read) fill_pattern(x.rbuf, size, seed + x.qp->qpn());
      else std::memset(x.rbuf, 0, size);
      if (pingpong) std::memset(x.sbuf, 0, size);
      if (c.o.test == Test::Send) post_recvs(c, x, size, bw ? std::min<uint64_t>(c.o.rx_depth, c.o.iters) : 1);
    }
    Msg r;
    r.type = kReady;
    for (auto& x : c.q) r.a = r.a * 31 + checksum(x.rbuf, size);
    c.send_msg(r);
    if (pingpong) {
      run_pingpong(c, size);
    } else if (c.o.test == Test::Send) {
      run_send_server(c, size);
    }
    m = c.wait_msg(kDone);
    // Verify what arrived.
    Msg res;
    res.type = kResult;
    res.status = 0;
    if (c.o.test == Test::Write || c.o.test == Test::Send) {
      for (size_t i = 0; i < c.q.size(); ++i) {
        // The client's source pattern, with the last byte a ping-pong flag in lat mode.
        std::vector<uint8_t> want(size);
        fill_pattern(want.data(), size, seed + i);
        if (pingpong) want[size - 1] = c.q[i].rbuf[size - 1];
        if (std::memcmp(want.data(), c.q[i].rbuf, size) != 0) res.status = 1;
      }
    } else if (c.o.test == Test::Atomic) {
      for (auto& x : c.q) {
        uint64_t v;
        std::memcpy(&v, x.rbuf, 8);
        if (v != c.o.iters) res.status = 2, res.a = v;
      }
    }
    c.send_msg(res);
    if (res.status) {
      std::fprintf(stderr, "uroce-perf: size %lu: data verification FAILED on the server (status %u)\n",
                   (unsigned long)size, res.status);
      return false;
    }
    if (bw) std::printf(" %-10lu %-10lu       %-12.2f       %-12.2f         %-10.6f\n", (unsigned long)size,
                        (unsigned long)c.o.iters, m.bw_peak, m.bw_avg, m.mpps);
    else std::printf(" %-6lu %-10lu  (results on the client)\n", (unsigned long)size, (unsigned long)c.o.iters);
    std::fflush(stdout);
    return true;
  }
  // Client.
  for (size_t i = 0; i < c.q.size(); ++i) {
    auto& x = c.q[i];
    if (c.o.test == Test::Read || c.o.test == Test::Atomic) std::memset(x.sbuf, 0, size);
    else fill_pattern(x.sbuf, size, seed + i);
    if (pingpong) std::memset(x.rbuf, 0, size);
    if (pingpong && c.o.test == Test::Send) post_recvs(c, x, size, 1);
  }
  m = Msg{};
  m.type = kStart;
  m.size = size;
  c.send_msg(m);
  Msg ready = c.wait_msg(kReady);
  BwResult br;
  LatResult lr{};
  std::vector<uint64_t> d;
  if (bw) {
    br = run_bw_client(c, size);
  } else if (pingpong) {
    d = run_pingpong(c, size);
    lr = lat_stats(d, double(c.hz), 2.0);  // half round trip, as perftest reports
  } else {
    d = run_lat_oneside(c, size);
    lr = lat_stats(d, double(c.hz), 1.0);
  }
  bool ok = true;
  if (c.o.test == Test::Read) {
    uint64_t a = 0;
    for (auto& x : c.q) a = a * 31 + checksum(x.sbuf, size);
    if (a != ready.a) {
      std::fprintf(stderr, "uroce-perf: size %lu: READ data differs from the server's buffer\n", (unsigned long)size);
      ok = false;
    }
  } else if (c.o.test == Test::Atomic) {
    // The last operation on each QP returned the value before it: iters - 1.
    for (auto& x : c.q) {
      uint64_t v;
      std::memcpy(&v, x.sbuf, 8);
      if (v != c.o.iters - 1) {
        std::fprintf(stderr, "uroce-perf: atomic: last original value %lu, expected %lu\n", (unsigned long)v,
                     (unsigned long)(c.o.iters - 1));
        ok = false;
      }
    }
  }
  Msg done;
  done.type = kDone;
  done.size = size;
  done.bw_peak = br.peak, done.bw_avg = br.avg, done.mpps = br.mpps;
  c.send_msg(done);
  Msg res = c.wait_msg(kResult);
  if (res.status) {
    std::fprintf(stderr, "uroce-perf: size %lu: the server found the data wrong (status %u, value %lu)\n",
                 (unsigned long)size, res.status, (unsigned long)res.a);
    ok = false;
  }
  if (bw)
    std::printf(" %-10lu %-10lu       %-12.2f       %-12.2f         %-10.6f\n", (unsigned long)size,
                (unsigned long)c.o.iters, br.peak, br.avg, br.mpps);
  else
    std::printf(" %-6lu %-10lu   %-10.2f     %-10.2f   %-10.2f       %-10.2f     %-10.2f        %-10.2f             %-10.2f\n",
                (unsigned long)size, (unsigned long)c.o.iters, lr.tmin, lr.tmax, lr.typical, lr.avg, lr.stdev, lr.p99,
                lr.p999);
  std::fflush(stdout);
  return ok;
}

void on_alarm(int) {
  const char msg[] = "uroce-perf: timeout\n";
  ssize_t r = write(2, msg, sizeof msg - 1);
  (void)r;
  _exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  Ctx c;
  c.o = parse_args(argc, argv);
  c.server = c.o.peer.empty();
  signal(SIGALRM, on_alarm);
  alarm(c.o.timeout_s);
  setup(c);
  std::printf("uroce-perf %s: %s\n", c.server ? "server" : "client", c.link->describe().c_str());
  connect_qps(c);
  print_header(c);
  std::vector<uint64_t> sizes;
  if (c.o.all) {
    for (uint64_t s = 2; s <= c.o.max_size; s *= 2) sizes.push_back(s);
  } else {
    sizes.push_back(c.o.size);
  }
  bool ok = true;
  for (uint64_t s : sizes) ok &= run_size(c, s);
  // Say goodbye while both sides still poll, so final ACKs are not lost.
  Msg bye;
  bye.type = kBye;
  c.send_msg(bye);
  c.wait_msg(kBye);
  const uint64_t until = rte_get_tsc_cycles() + c.hz / 50;
  while (rte_get_tsc_cycles() < until) c.dev->progress();
  std::printf("---------------------------------------------------------------------------------------\n");
  const Counters ec = c.dev->counters();
  if (c.o.stats) {
    std::printf("link: %s\n", c.link->counters_text().c_str());
    std::printf("engine: tx_packets=%lu rx_packets=%lu retransmitted=%lu timeouts=%lu seq_naks_sent=%lu "
                "icrc_errors=%lu malformed=%lu dropped_not_for_us=%lu dropped_unknown_qp=%lu duplicates=%lu\n",
                (unsigned long)ec.tx_packets, (unsigned long)ec.rx_packets, (unsigned long)ec.retransmitted,
                (unsigned long)ec.timeouts, (unsigned long)ec.seq_naks_sent, (unsigned long)ec.icrc_errors,
                (unsigned long)ec.malformed, (unsigned long)ec.dropped_not_for_us,
                (unsigned long)ec.dropped_unknown_qp, (unsigned long)ec.duplicates);
  }
  std::printf("data verification: %s\n", ok ? "OK" : "FAILED");
  std::fflush(stdout);
  // Neither side polls from here on; only then may one close its port. memif's PMD unmaps
  // the shared rings when the peer disconnects, even under a running rte_eth_rx_burst()
  // (a SIGSEGV seen under load). The client closes first; the server waits for that
  // disconnect, and for the PMD's interrupt thread to finish it, before closing its own.
  Msg quiet;
  quiet.type = kQuiet;
  c.send_msg(quiet);
  for (;;) {
    Msg m;
    if (!c.tcp.recv_wait(&m, sizeof m, 5000)) break;  // the peer is gone (or hung): go on
    if (m.type == kQuiet) break;
  }
  if (c.server) c.link->await_peer_close(2000);
  close(c.tcp.fd);
  for (auto& x : c.q) c.dev->destroy_qp(x.qp);
  c.dev.reset();
  c.link.reset();
  rte_eal_cleanup();
  return ok ? 0 : 1;
}
