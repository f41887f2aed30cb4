// uroce-lesson: the traffic of the lessons in docs/learn/ (scripts/learn.sh makes them). A plain
// libibverbs program with two sides, run through scripts/uroce-run (or on any RDMA device): it
// moves a few messages, checks every byte, and says what each side saw, so that the capture next
// to it can be read frame by frame.
//
//   server: uroce-lesson SCENARIO [options]
//   client: uroce-lesson SCENARIO [options] SERVER_IP
//
// The two sides exchange QP numbers, PSNs and keys over TCP (like perftest), then:
//   write-send   the client WRITEs 4 KiB into the server's buffer, then SENDs 4 KiB to a
//                receive the server posted: same bytes, two operations, two contracts.
//   writes       the client WRITEs -n messages of -s bytes (for a lossy link: go-back-N).
//   rnr          the client SENDs before the server has posted a receive: RNR NAKs, then the
//                retry after the server's min_rnr_timer, then the ACK.
//   read-atomic  the client READs 4 KiB, then FETCH_ADD and COMPARE_SWAP on one 8-byte word,
//                -n times (with loss: a lost READ response replayed from the saved request).
//   states       the server walks its QP RESET -> INIT -> RTR -> RTS -> ERR; in each state the
//                client sends one SEND to it and both say what happened. With --pause, the
//                server prints "paused STATE" and waits for a line on stdin before each probe
//                (learn.sh runs uroce-stat there).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace {

[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stdout, "FAIL: ");
  std::vfprintf(stdout, fmt, ap);
  std::fprintf(stdout, "\n");
  va_end(ap);
  std::fflush(stdout);
  _exit(1);
}

void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::printf("\n");
  std::fflush(stdout);
}

struct Options {
  std::string scenario, server;
  int port = 18600;
  uint32_t size = 4096, count = 1;
  bool pause = false;
  bool is_client() const { return !server.empty(); }
};

constexpr size_t kBuf = 1 << 20;       // registered on each side
constexpr size_t kWord = 512 * 1024;   // the atomics' 8-byte word, in the server's buffer
constexpr uint32_t kGidIndex = 1;      // IPv4-mapped GID (RoCEv2 over IPv4)
constexpr uint32_t kStartPsn = 100;    // both sides, so the PSNs in the capture are easy to follow
constexpr uint64_t kWordStart = 100;
constexpr double kWaitSeconds = 20;    // the longest any completion may take

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

void pattern(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = uint8_t(seed + i * 7);
}

void check(const uint8_t* p, size_t n, uint8_t seed, const char* what) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != uint8_t(seed + i * 7)) fail("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, p[i], uint8_t(seed + i * 7));
}

// ---- the TCP side channel (QP numbers, keys, and "go" signals between the steps) ------------

struct Info {
  uint32_t qpn, psn, rkey, pad;
  uint64_t addr;
  uint8_t gid[16];
};

void xfer(int fd, void* p, size_t n, bool out) {
  auto* c = static_cast<char*>(p);
  while (n) {
    ssize_t k = out ? ::send(fd, c, n, MSG_NOSIGNAL) : ::recv(fd, c, n, 0);
    if (k <= 0) fail("TCP %s: %s", out ? "send" : "recv", k == 0 ? "peer closed" : std::strerror(errno));
    c += k, n -= size_t(k);
  }
}
void send_byte(int fd, uint8_t b) { xfer(fd, &b, 1, true); }
uint8_t recv_byte(int fd) {
  uint8_t b;
  xfer(fd, &b, 1, false);
  return b;
}

// One byte at a time goes over this socket: without TCP_NODELAY, Nagle's algorithm holds a
// byte until the previous one is acknowledged, and the peer's delayed ACK makes that ~40 ms.
void no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int connect_tcp(const Options& o) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(o.port));
  if (o.is_client()) {
    if (inet_pton(AF_INET, o.server.c_str(), &a.sin_addr) != 1) fail("bad server address %s", o.server.c_str());
    for (int i = 0; ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0; ++i) {
      if (i > 200) fail("connect to %s:%d: %s", o.server.c_str(), o.port, std::strerror(errno));
      usleep(50000);
    }
    no_delay(fd);
    return fd;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) || ::listen(fd, 1))
    fail("listen on port %d: %s", o.port, std::strerror(errno));
  int c = ::accept(fd, nullptr, nullptr);
  if (c < 0) fail("accept: %s", std::strerror(errno));
  ::close(fd);
  no_delay(c);
  return c;
}

// ---- verbs --------------------------------------------------------------------------------

struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buf = nullptr;
  Info me{}, peer{};

  void open() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list || n == 0) fail("no RDMA device (run through scripts/uroce-run)");
    ctx = ibv_open_device(list[0]);
    if (!ctx) fail("ibv_open_device: %s", std::strerror(errno));
    ibv_free_device_list(list);
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    buf = static_cast<uint8_t*>(aligned_alloc(4096, kBuf));
    std::memset(buf, 0, kBuf);
    mr = ibv_reg_mr(pd, buf, kBuf,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    if (!pd || !cq || !mr) fail("PD/CQ/MR: %s", std::strerror(errno));
    ibv_qp_init_attr ia{};
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 64;
    ia.cap.max_recv_wr = 64;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    qp = ibv_create_qp(pd, &ia);
    if (!qp) fail("ibv_create_qp: %s", std::strerror(errno));
    ibv_gid gid;
    if (ibv_query_gid(ctx, 1, kGidIndex, &gid)) fail("ibv_query_gid");
    me = Info{qp->qp_num, kStartPsn, mr->rkey, 0, reinterpret_cast<uintptr_t>(buf), {}};
    std::memcpy(me.gid, gid.raw, 16);
  }

  void exchange(int fd) {
    xfer(fd, &me, sizeof me, true);
    xfer(fd, &peer, sizeof peer, false);
  }

  void to_init() {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      fail("modify to INIT: %s", std::strerror(rc));
  }
  // min_rnr_timer: what this side's responder asks a sender to wait after an RNR NAK
  // (16 = 2.56 ms in the IBTA table).
  void to_rtr(uint8_t min_rnr_timer = 16) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = peer.psn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = min_rnr_timer;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
    a.ah_attr.grh.sgid_index = kGidIndex;
    a.ah_attr.grh.hop_limit = 64;
    if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      fail("modify to RTR: %s", std::strerror(rc));
  }
  // timeout 14: 4.096 us x 2^14 = 67 ms before a resend; retry_cnt 7; rnr_retry 7 = for ever.
  void to_rts(uint8_t timeout = 14, uint8_t retry_cnt = 7) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = me.psn;
    a.timeout = timeout;
    a.retry_cnt = retry_cnt;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                           IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
      fail("modify to RTS: %s", std::strerror(rc));
  }
  void to_state(ibv_qp_state s) {
    ibv_qp_attr a{};
    a.qp_state = s;
    if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE)) fail("modify to state %d: %s", int(s), std::strerror(rc));
  }

  void post_recv(size_t off, uint32_t len, uint64_t id) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf + off), len, mr->lkey};
    ibv_recv_wr wr{}, *bad;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (int rc = ibv_post_recv(qp, &wr, &bad)) fail("ibv_post_recv: %s", std::strerror(rc));
  }
  // One signalled work request; remote_off is an offset into the peer's buffer.
  void post(ibv_wr_opcode op, size_t off, uint32_t len, uint64_t remote_off, uint64_t id, uint64_t add_or_cmp = 0,
            uint64_t swap = 0) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf + off), len, mr->lkey};
    ibv_send_wr wr{}, *bad;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
      wr.wr.atomic.remote_addr = peer.addr + remote_off;
      wr.wr.atomic.rkey = peer.rkey;
      wr.wr.atomic.compare_add = add_or_cmp;
      wr.wr.atomic.swap = swap;
    } else {
      wr.wr.rdma.remote_addr = peer.addr + remote_off;
      wr.wr.rdma.rkey = peer.rkey;
    }
    if (int rc = ibv_post_send(qp, &wr, &bad)) fail("ibv_post_send: %s", std::strerror(rc));
  }
  // The next completion, whatever its status (the caller decides what a failure means).
  ibv_wc next() {
    ibv_wc wc{};
    const double end = now_s() + kWaitSeconds;
    while (true) {
      int k = ibv_poll_cq(cq, 1, &wc);
      if (k < 0) fail("ibv_poll_cq: %d", k);
      if (k == 1) return wc;
      if (now_s() > end) fail("no completion within %.0f s", kWaitSeconds);
    }
  }
  ibv_wc wait_ok(const char* what) {
    ibv_wc wc = next();
    if (wc.status != IBV_WC_SUCCESS) fail("%s: completion status %s", what, ibv_wc_status_str(wc.status));
    return wc;
  }
};

const char* wc_opcode(ibv_wc_opcode o) {
  switch (o) {
    case IBV_WC_SEND: return "SEND";
    case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
    case IBV_WC_RDMA_READ: return "RDMA_READ";
    case IBV_WC_COMP_SWAP: return "COMP_SWAP";
    case IBV_WC_FETCH_ADD: return "FETCH_ADD";
    case IBV_WC_RECV: return "RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
    default: return "other";
  }
}

// Both sides to RTS, then a barrier. `recv_len`: a receive of that many bytes (wr_id 7) is
// posted in INIT (a QP in RESET takes none), before the peer may send.
void connect_both(Side& s, int fd, uint32_t recv_len = 0) {
  s.to_init();
  if (recv_len) s.post_recv(256 * 1024, recv_len, 7);
  s.exchange(fd);
  s.to_rtr();
  s.to_rts();
  send_byte(fd, 1);  // both sides in RTS before anything is sent
  recv_byte(fd);
}

// ---- the scenarios ------------------------------------------------------------------------

void write_send(Side& s, int fd, const Options& o) {
  const uint32_t n = o.size;
  if (!o.is_client()) {
    connect_both(s, fd, n);  // the SEND needs a receive; the WRITE needs nothing posted
    say("server: posted one receive of %u bytes (wr_id 7) in INIT; the WRITE needs none", n);
    recv_byte(fd);  // the client's WRITE has completed
    check(s.buf, n, 0x11, "WRITE");
    say("server: the WRITE put %u bytes at 0x%llx (verified), and gave the server no completion", n,
        (unsigned long long)s.me.addr);
    ibv_wc wc = s.wait_ok("SEND's receive");
    check(s.buf + 256 * 1024, wc.byte_len, 0x22, "SEND");
    say("server: completion wr_id %llu opcode %s byte_len %u: the SEND's %u bytes are in the posted receive (verified)",
        (unsigned long long)wc.wr_id, wc_opcode(wc.opcode), wc.byte_len, wc.byte_len);
    send_byte(fd, 2);
    return;
  }
  connect_both(s, fd);
  pattern(s.buf, n, 0x11);
  s.post(IBV_WR_RDMA_WRITE, 0, n, 0, 1);
  ibv_wc wc = s.wait_ok("WRITE");
  say("client: WRITE of %u bytes to 0x%llx rkey 0x%x: completion %s", n, (unsigned long long)s.peer.addr, s.peer.rkey,
      wc_opcode(wc.opcode));
  send_byte(fd, 1);
  pattern(s.buf + n, n, 0x22);
  s.post(IBV_WR_SEND, n, n, 0, 2);
  wc = s.wait_ok("SEND");
  say("client: SEND of %u bytes: completion %s", n, wc_opcode(wc.opcode));
  recv_byte(fd);
}

void writes(Side& s, int fd, const Options& o) {
  if (!o.is_client()) {
    connect_both(s, fd);
    recv_byte(fd);
    for (uint32_t i = 0; i < o.count; ++i) check(s.buf + size_t(i % 8) * o.size, o.size, uint8_t(0x30 + i % 8), "WRITE");
    say("server: %u WRITEs of %u bytes, the last ones of each slot verified", o.count, o.size);
    send_byte(fd, 2);
    return;
  }
  if (size_t(o.size) * 8 > kBuf) fail("-s %u too large (at most %zu)", o.size, kBuf / 8);
  connect_both(s, fd);
  for (uint32_t i = 0; i < 8; ++i) pattern(s.buf + size_t(i) * o.size, o.size, uint8_t(0x30 + i));
  const double t0 = now_s();
  uint32_t posted = 0, done = 0;
  while (done < o.count) {
    while (posted < o.count && posted - done < 8) {
      size_t off = size_t(posted % 8) * o.size;
      s.post(IBV_WR_RDMA_WRITE, off, o.size, off, posted);
      ++posted;
    }
    s.wait_ok("WRITE");
    ++done;
  }
  say("client: %u WRITEs of %u bytes completed in %.1f ms", o.count, o.size, (now_s() - t0) * 1e3);
  send_byte(fd, 1);
  recv_byte(fd);
}

void rnr(Side& s, int fd, const Options& o) {
  const uint32_t n = o.size;
  if (!o.is_client()) {
    connect_both(s, fd);
    recv_byte(fd);  // the client has posted its SEND
    const double t0 = now_s();
    usleep(6000);   // longer than two RNR timers (2.56 ms each)
    const double t1 = now_s();
    s.post_recv(0, n, 9);
    say("server: posted the receive %.1f ms after the client's SEND (ibv_post_recv took %.1f ms)", (t1 - t0) * 1e3,
        (now_s() - t1) * 1e3);
    ibv_wc wc = s.wait_ok("receive");
    check(s.buf, wc.byte_len, 0x44, "SEND");
    say("server: completion %s byte_len %u (verified)", wc_opcode(wc.opcode), wc.byte_len);
    send_byte(fd, 2);
    return;
  }
  connect_both(s, fd);
  pattern(s.buf, n, 0x44);
  const double t0 = now_s();
  s.post(IBV_WR_SEND, 0, n, 0, 3);
  send_byte(fd, 1);
  ibv_wc wc = s.wait_ok("SEND");
  say("client: SEND of %u bytes posted before the server had a receive: completion %s after %.1f ms (rnr_retry 7: "
      "retry for ever)",
      n, wc_opcode(wc.opcode), (now_s() - t0) * 1e3);
  recv_byte(fd);
}

void read_atomic(Side& s, int fd, const Options& o) {
  const uint32_t n = o.size;
  if (!o.is_client()) {
    pattern(s.buf, n, 0x55);
    std::memcpy(s.buf + kWord, &kWordStart, 8);
    say("server: %u bytes of pattern at 0x%llx to be read, the word at +0x%zx holds %llu", n,
        (unsigned long long)s.me.addr, kWord, (unsigned long long)kWordStart);
    connect_both(s, fd);
    recv_byte(fd);
    uint64_t w;
    std::memcpy(&w, s.buf + kWord, 8);
    if (w != kWordStart) fail("the word holds %llu at the end, expected %llu", (unsigned long long)w,
                              (unsigned long long)kWordStart);
    say("server: the word holds %llu again after %u rounds (verified); the server saw no completion", (unsigned long long)w,
        o.count);
    send_byte(fd, 2);
    return;
  }
  connect_both(s, fd);
  for (uint32_t i = 0; i < o.count; ++i) {
    std::memset(s.buf, 0, n);
    s.post(IBV_WR_RDMA_READ, 0, n, 0, 10);
    s.wait_ok("READ");
    check(s.buf, n, 0x55, "READ");
    // FETCH_ADD 5 returns the old value; COMPARE_SWAP(old + 5 -> old) puts it back.
    s.post(IBV_WR_ATOMIC_FETCH_AND_ADD, n, 8, kWord, 11, 5);
    s.wait_ok("FETCH_ADD");
    uint64_t old;
    std::memcpy(&old, s.buf + n, 8);
    if (old != kWordStart) fail("FETCH_ADD returned %llu, expected %llu", (unsigned long long)old,
                                (unsigned long long)kWordStart);
    s.post(IBV_WR_ATOMIC_CMP_AND_SWP, n + 8, 8, kWord, 12, kWordStart + 5, kWordStart);
    s.wait_ok("COMPARE_SWAP");
    std::memcpy(&old, s.buf + n + 8, 8);
    if (old != kWordStart + 5) fail("COMPARE_SWAP returned %llu, expected %llu", (unsigned long long)old,
                                    (unsigned long long)(kWordStart + 5));
    if (i == 0)
      say("client: READ of %u bytes (verified); FETCH_ADD 5 returned %llu; COMPARE_SWAP %llu -> %llu returned %llu", n,
          (unsigned long long)kWordStart, (unsigned long long)(kWordStart + 5), (unsigned long long)kWordStart,
          (unsigned long long)(kWordStart + 5));
  }
  say("client: %u rounds of READ, FETCH_ADD, COMPARE_SWAP verified", o.count);
  send_byte(fd, 1);
  recv_byte(fd);
}

// The server's QP goes through the states; in each, the client sends one 64-byte SEND to it.
// The client's QP has a short timer (timeout 10: 4 ms) and retry_cnt 1, so a SEND nobody
// answers fails quickly with a retry error; the client then takes its QP through RESET back to
// RTS with its first PSN again (the server has accepted nothing yet, so it still expects it).
void states(Side& s, int fd, const Options& o) {
  static const char* kNames[] = {"RESET", "INIT", "RTR", "RTS", "ERR"};
  if (!o.is_client()) {
    s.exchange(fd);
    for (int st = 0; st < 5; ++st) {
      if (st == 1) {
        s.to_init();
        s.post_recv(0, 64, 100);  // receives may be posted from INIT on
        s.post_recv(64, 64, 101);
        s.post_recv(128, 64, 102);  // left over for ERR to flush
      }
      if (st == 2) s.to_rtr();
      if (st == 3) s.to_rts();
      if (st == 4) s.to_state(IBV_QPS_ERR);
      if (o.pause) {
        say("paused %s", kNames[st]);
        char line[64];
        if (!std::fgets(line, sizeof line, stdin)) fail("stdin closed");
      }
      send_byte(fd, uint8_t(st));  // probe now
      const uint8_t accepted = recv_byte(fd);
      if (accepted) {
        ibv_wc wc = s.wait_ok("receive");
        say("server in %s: the SEND was accepted: completion %s wr_id %llu byte_len %u", kNames[st],
            wc_opcode(wc.opcode), (unsigned long long)wc.wr_id, wc.byte_len);
      } else {
        say("server in %s: the SEND was not taken (no completion here)", kNames[st]);
      }
    }
    // In ERR the remaining receives are flushed.
    ibv_wc wc{};
    int flushed = 0;
    while (ibv_poll_cq(s.cq, 1, &wc) == 1) ++flushed;
    say("server: after ERR, %d receive(s) completed as flushed", flushed);
    send_byte(fd, 9);
    return;
  }
  s.to_init();
  s.exchange(fd);
  s.to_rtr();
  s.to_rts(10, 1);
  for (int st = 0; st < 5; ++st) {
    if (recv_byte(fd) != st) fail("out of step with the server");
    pattern(s.buf, 64, uint8_t(st));
    s.post(IBV_WR_SEND, 0, 64, 0, 200 + uint64_t(st));
    ibv_wc wc = s.next();
    const bool ok = wc.status == IBV_WC_SUCCESS;
    say("client: SEND to a QP in %s: %s", kNames[st], ibv_wc_status_str(wc.status));
    if (!ok) {
      s.to_state(IBV_QPS_RESET);  // keeps the QP number; the PSN starts again at kStartPsn
      s.to_init();
      s.to_rtr();
      s.to_rts(10, 1);
    } else {
      s.me.psn = kStartPsn + 1;  // consumed: a later reset would start after it (not needed here)
    }
    send_byte(fd, ok ? 1 : 0);
  }
  recv_byte(fd);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&] {
      if (i + 1 >= argc) fail("%s needs a value", a.c_str());
      return std::string(argv[++i]);
    };
    if (a == "-h" || a == "--help") {
      std::printf("usage: uroce-lesson write-send|writes|rnr|read-atomic|states [-s BYTES] [-n COUNT] [-p PORT] "
                  "[--pause] [SERVER_IP]\n(the traffic of docs/learn/; scripts/learn.sh runs it)\n");
      return 0;
    } else if (a == "-s") {
      o.size = uint32_t(std::stoul(val()));
    } else if (a == "-n") {
      o.count = uint32_t(std::stoul(val()));
    } else if (a == "-p") {
      o.port = std::stoi(val());
    } else if (a == "--pause") {
      o.pause = true;
    } else if (o.scenario.empty()) {
      o.scenario = a;
    } else {
      o.server = a;
    }
  }
  if (o.size == 0 || o.size > 256 * 1024 || o.count == 0) fail("-s must be 1..262144 and -n at least 1");
  Side s;
  s.open();
  int fd = connect_tcp(o);
  if (o.scenario == "write-send") write_send(s, fd, o);
  else if (o.scenario == "writes") writes(s, fd, o);
  else if (o.scenario == "rnr") rnr(s, fd, o);
  else if (o.scenario == "read-atomic") read_atomic(s, fd, o);
  else if (o.scenario == "states") states(s, fd, o);
  else fail("unknown scenario '%s' (--help)", o.scenario.c_str());
  ::close(fd);
  ibv_destroy_qp(s.qp);
  ibv_dereg_mr(s.mr);
  ibv_destroy_cq(s.cq);
  ibv_dealloc_pd(s.pd);
  ibv_close_device(s.ctx);
  say("%s: done", o.is_client() ? "client" : "server");
  return 0;
}
