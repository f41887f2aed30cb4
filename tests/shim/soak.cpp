// soak: a verifying traffic program for long runs through the verbs shim (issue 35), plain
// libibverbs only (run with scripts/uroce-run). Two processes, each with an RC, a UC and a UD QP.
// The client runs batches of operations; each batch is derived from (seed, batch number) alone,
// so the server can work out what the client did and check it:
//
//   RC: RDMA WRITE, WRITE with immediate, SEND, SEND with immediate, RDMA READ, FETCH_ADD and
//       CMP_SWAP, 1 to 8 in flight at once, sizes 0 to 1 MiB (log-uniform, 1 in 16 of length 0),
//       unaligned addresses;
//   UC: WRITE, WRITE with immediate and SEND, 16 B to 64 KiB;
//   UD: SEND, 16 B to 2048 B.
//
// The client checks every completion (status, opcode, length), every byte an RDMA READ placed and
// the bytes around it, every value an atomic fetched (against a model of the remote counter).
// After each batch it tells the server over TCP, and the server checks every byte the WRITEs
// placed and the bytes around them, every receive completion of RC in order (opcode, immediate,
// length, bytes), and the counter. RC must lose, duplicate or misplace nothing. UC and UD may lose
// messages (and, with a duplicating link, deliver one twice: neither has a sequence check for
// that); every message they do deliver must be whole and right.
//
// Each side compares its resident memory, its heap in use and its open file
// descriptors after the first minute (or half the run, if shorter) with those at the end. The
// last line of each side:
//   soak: N batches, N operations, N bytes checked, N failures
//
//   server: soak --port N [--seed S]
//   client: soak --port N [--seed S] [--seconds T] SERVER_IP
#include <infiniband/verbs.h>
#include <malloc.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/shim/process_use.hpp"
#include "tests/shim/two_sides.hpp"

namespace {

using shim_test::fail;
using shim_test::xfer;

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// ---- sizes and the memory layout (the same on both sides; each uses its own parts) ----
constexpr uint32_t kGidIndex = 1;
constexpr uint32_t kQkey = 0x11111111;
constexpr uint32_t kMaxRc = 1u << 20;        // largest RC message
constexpr uint32_t kMaxUc = 64u << 10;       // largest UC message
constexpr uint32_t kMaxUd = 2048;            // largest UD message (the path MTU)
constexpr uint32_t kMinTagged = 16;          // UC SEND and UD carry a 16-byte tag first
constexpr uint32_t kRcOps = 8, kUcOps = 4, kUdOps = 8;
constexpr uint32_t kMaxOff = 4096;           // targets start 64 + [0, 4096) bytes into their slot
constexpr uint32_t kRcSlot = kMaxRc + 64 + kMaxOff + 64;
constexpr uint32_t kUcSlot = kMaxUc + 64 + kMaxOff + 64;
constexpr uint32_t kRcRecvs = 16, kUcRecvs = 16, kUdRecvs = 64;
constexpr uint32_t kUdRecvSize = 40 + kMaxUd;
constexpr uint8_t kGuard = 0xA5;

struct Layout {
  size_t rc_target = 0;                                   // server: WRITE targets; client: READ targets
  size_t read_src = rc_target + size_t(kRcSlot) * kRcOps; // server: what READs read
  size_t atomic = read_src + kMaxRc + 2 * kMaxOff;        // server: the counter; client: fetched values
  size_t uc_target = atomic + 4096;                       // server: UC WRITE targets (2 x 4: by batch parity)
  size_t rc_src = uc_target + size_t(kUcSlot) * kUcOps * 2;  // client: sources of RC WRITE and SEND
  size_t uc_src = rc_src + size_t(kMaxRc) * kRcOps;
  size_t ud_src = uc_src + size_t(kMaxUc) * kUcOps;
  size_t rc_recv = ud_src + size_t(kMaxUd) * kUdOps;      // server: receive buffers
  size_t uc_recv = rc_recv + size_t(kMaxRc) * kRcRecvs;
  size_t ud_recv = uc_recv + size_t(kMaxUc) * kUcRecvs;
  size_t total = ud_recv + size_t(kUdRecvSize) * kUdRecvs;
};
const Layout L;

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 27, x *= 0x94D049BB133111EBull, x ^= x >> 31;
  return x;
}

void pattern(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t x = seed | 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p[i] = uint8_t(x);
  }
}

// The first byte of `p[0, n)` that differs from pattern(seed), or n.
size_t check_pattern(const uint8_t* p, size_t n, uint64_t seed) {
  uint64_t x = seed | 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    if (p[i] != uint8_t(x)) return i;
  }
  return n;
}

size_t check_fill(const uint8_t* p, size_t n, uint8_t v) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != v) return i;
  return n;
}

// ---- the plan of one batch ----
enum class Op : uint8_t { Write, WriteImm, Send, SendImm, Read, FetchAdd, CmpSwap, UcWrite, UcWriteImm, UcSend, UdSend };
const char* op_name(Op o) {
  static const char* const n[] = {"WRITE", "WRITE_IMM", "SEND", "SEND_IMM", "READ", "FETCH_ADD", "CMP_SWAP",
                                  "UC_WRITE", "UC_WRITE_IMM", "UC_SEND", "UD_SEND"};
  return n[size_t(o)];
}

struct Step {
  Op op;
  uint32_t idx, len, off;  // off: into the target slot (WRITE, READ's destination) or the READ source
  uint32_t loff;           // READ: into the client's target slot
  uint32_t imm;
  uint64_t seed;           // the data's pattern
  uint64_t a, b;           // FETCH_ADD: add; CMP_SWAP: compare, swap
  uint64_t expect;         // atomics: the value fetched
};

uint32_t draw_len(std::mt19937_64& r, uint32_t lo, uint32_t hi, bool zero) {
  if (zero && r() % 16 == 0) return 0;
  const unsigned u = unsigned(r() % 21);
  uint64_t n = (uint64_t(1) << u) + r() % (uint64_t(1) << u);
  if (n < lo) n = lo;
  return uint32_t(n > hi ? hi : n);
}

uint32_t rc_imm(uint32_t k, uint32_t i) { return (k & 0xFFFFFFu) << 8 | i; }
uint32_t uc_imm(uint32_t k, uint32_t i) { return (k & 0xFFFFFFu) << 8 | 0x80 | i; }

// RC: needs the model of the remote counter (CMP_SWAP's compare value is drawn from it).
std::vector<Step> plan_rc(uint64_t seed, uint32_t k, uint64_t& counter) {
  std::mt19937_64 r(mix(seed, uint64_t(k) * 3 + 0));
  std::vector<Step> v(1 + r() % kRcOps);
  for (uint32_t i = 0; i < v.size(); ++i) {
    Step& s = v[i];
    s = {};
    s.op = Op(r() % 7);
    s.idx = i;
    s.seed = mix(seed ^ 0x5eed, uint64_t(k) << 8 | i);
    s.len = draw_len(r, 0, kMaxRc, true);
    s.off = 64 + uint32_t(r() % kMaxOff);
    s.loff = 64 + uint32_t(r() % kMaxOff);
    s.imm = rc_imm(k, i);
    if (s.op == Op::Read) s.off = uint32_t(r() % (2 * kMaxOff));
    if (s.op == Op::FetchAdd) {
      s.len = 8, s.a = r() % 1000003, s.expect = counter;
      counter += s.a;
    } else if (s.op == Op::CmpSwap) {
      s.len = 8, s.a = r() % 2 ? counter : counter ^ 0x5555, s.b = r(), s.expect = counter;
      if (s.a == counter) counter = s.b;
    }
  }
  return v;
}

std::vector<Step> plan_uc(uint64_t seed, uint32_t k) {
  std::mt19937_64 r(mix(seed, uint64_t(k) * 3 + 1));
  std::vector<Step> v(r() % kUcOps);
  for (uint32_t i = 0; i < v.size(); ++i) {
    Step& s = v[i];
    s = {};
    s.op = Op(uint32_t(Op::UcWrite) + r() % 3);
    s.idx = i;
    s.seed = mix(seed ^ 0xc0ffee, uint64_t(k) << 8 | i);
    s.len = draw_len(r, kMinTagged, kMaxUc, false);
    s.off = 64 + uint32_t(r() % kMaxOff);
    s.imm = uc_imm(k, i);
  }
  return v;
}

std::vector<Step> plan_ud(uint64_t seed, uint32_t k) {
  std::mt19937_64 r(mix(seed, uint64_t(k) * 3 + 2));
  std::vector<Step> v(r() % kUdOps);
  for (uint32_t i = 0; i < v.size(); ++i) {
    Step& s = v[i];
    s = {};
    s.op = Op::UdSend;
    s.idx = i;
    s.seed = mix(seed ^ 0xdd, uint64_t(k) << 8 | i);
    s.len = kMinTagged + uint32_t(r() % (kMaxUd - kMinTagged + 1));
  }
  return v;
}

// UC SEND and UD messages start with this tag; the rest is pattern(seed).
struct Tag {
  uint32_t magic, batch, idx, len;
};
constexpr uint32_t kMagic = 0x50a4c0de;

void fill_tagged(uint8_t* p, const Step& s, uint32_t k) {
  Tag t{kMagic, k, s.idx, s.len};
  std::memcpy(p, &t, sizeof t);
  pattern(p + sizeof t, s.len - sizeof t, s.seed);
}

// ---- TCP ----
struct Msg {
  uint32_t type;  // 'B' batch done, 'E' end, 'K' ok, 'F' failed
  uint32_t k;
  uint64_t v[6];
  char text[200];
};

// ---- memory and descriptors (tests/shim/process_use.hpp) ----
double rss_mib() { return double(shim_test::resident_kib()) / 1024; }

// The heap's bytes in use (malloc's count, not the pages it holds).
double heap_mib() { return double(mallinfo2().uordblks) / (1 << 20); }

struct Watch {
  double settle_at;
  double rss0 = 0, t0 = 0, heap0 = 0;
  uint32_t fds0 = 0;
  void look(double start, double now) {
    if (fds0 || now < settle_at) return;
    rss0 = rss_mib(), heap0 = heap_mib(), fds0 = shim_test::settled_fds(), t0 = now - start;
  }
  // Prints the line; returns a failure text or "".
  std::string finish(const char* who) {
    const double rss1 = rss_mib();
    const uint32_t fds1 = shim_test::settled_fds();
    const double grow = rss0 > 0 ? 100.0 * (rss1 - rss0) / rss0 : 0;
    const double heap1 = heap_mib();
    std::printf("%s memory: resident %.1f MiB at %.0f s, %.1f MiB at the end (%+.2f%%); heap in use %.2f and %.2f MiB; "
                "open descriptors %u and %u\n",
                who, rss0, t0, rss1, grow, heap0, heap1, fds0, fds1);
    if (!fds0) return "";
    if (fds1 > fds0) return "open file descriptors grew";
    // Resident memory as the issue asks (the port writes its whole buffer pool at the start, so
    // no page of it becomes resident late), and malloc's bytes in use, which tell a leak in the
    // program, the shim or the engine from pages the C library keeps.
    if (rss0 > 0 && rss1 >= rss0 * 1.01) return "resident memory grew by 1% or more";
    if (heap0 > 0 && heap1 >= heap0 * 1.01) return "the heap in use grew by 1% or more";
    return "";
  }
};

// ---- verbs ----
struct Info {
  uint32_t rc_qpn, uc_qpn, ud_qpn, rkey;
  uint64_t addr;
  uint8_t gid[16];
};

struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* ch = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp *rc = nullptr, *uc = nullptr, *ud = nullptr;
  ibv_ah* ah = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buf = nullptr;
  ibv_gid gid{};
  uint32_t rd_atomic = 1;
  uint8_t* at(size_t off) const { return buf + off; }
  uint64_t addr(size_t off) const { return reinterpret_cast<uintptr_t>(buf + off); }
};

ibv_qp* make_qp(Side& s, ibv_qp_type t) {
  ibv_qp_init_attr ia{};
  ia.send_cq = s.cq;
  ia.recv_cq = s.cq;
  ia.qp_type = t;
  ia.cap.max_send_wr = 64;
  ia.cap.max_recv_wr = 128;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ibv_qp* q = ibv_create_qp(s.pd, &ia);
  if (!q) fail("ibv_create_qp(%d): %s", int(t), std::strerror(errno));
  return q;
}

void open_side(Side& s, bool server) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n < 1) fail("no device");
  s.ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!s.ctx) fail("ibv_open_device");
  ibv_device_attr da{};
  if (ibv_query_device(s.ctx, &da)) fail("ibv_query_device");
  s.rd_atomic = uint32_t(std::min(da.max_qp_rd_atom, 16));
  if (ibv_query_gid(s.ctx, 1, kGidIndex, &s.gid)) fail("ibv_query_gid");
  s.pd = ibv_alloc_pd(s.ctx);
  if (!s.pd) fail("ibv_alloc_pd");
  if (server) {
    s.ch = ibv_create_comp_channel(s.ctx);
    if (!s.ch) fail("ibv_create_comp_channel");
  }
  s.cq = ibv_create_cq(s.ctx, 1024, nullptr, s.ch, 0);
  if (!s.cq) fail("ibv_create_cq");
  s.buf = static_cast<uint8_t*>(std::aligned_alloc(4096, (L.total + 4095) & ~size_t(4095)));
  if (!s.buf) fail("out of memory");
  std::memset(s.buf, 0, L.total);
  s.mr = ibv_reg_mr(s.pd, s.buf, L.total,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  if (!s.mr) fail("ibv_reg_mr: %s", std::strerror(errno));
  s.rc = make_qp(s, IBV_QPT_RC);
  s.uc = make_qp(s, IBV_QPT_UC);
  s.ud = make_qp(s, IBV_QPT_UD);
}

ibv_ah_attr ah_to(const Info& peer) {
  ibv_ah_attr a{};
  a.is_global = 1;
  a.port_num = 1;
  std::memcpy(a.grh.dgid.raw, peer.gid, 16);
  a.grh.sgid_index = kGidIndex;
  a.grh.hop_limit = 64;
  return a;
}

void connect_side(Side& s, const Info& peer, uint32_t my_psn, uint32_t peer_psn) {
  // RC and UC.
  for (ibv_qp* q : {s.rc, s.uc}) {
    const bool rc = q == s.rc;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | (rc ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0);
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) fail("INIT");
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_2048;
    a.dest_qp_num = rc ? peer.rc_qpn : peer.uc_qpn;
    a.rq_psn = peer_psn;
    a.ah_attr = ah_to(peer);
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (rc) {
      a.max_dest_rd_atomic = uint8_t(s.rd_atomic);
      a.min_rnr_timer = 1;
      mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    if (int e = ibv_modify_qp(q, &a, mask)) fail("RTR: %s", std::strerror(e));
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = my_psn;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (rc) {
      a.timeout = 12;  // 4.096 us x 2^12 = 16.8 ms
      a.retry_cnt = 7;
      a.rnr_retry = 7;
      a.max_rd_atomic = uint8_t(s.rd_atomic);
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    if (int e = ibv_modify_qp(q, &a, mask)) fail("RTS: %s", std::strerror(e));
  }
  // UD.
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = kQkey;
  if (ibv_modify_qp(s.ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) fail("UD INIT");
  a = {};
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(s.ud, &a, IBV_QP_STATE)) fail("UD RTR");
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = my_psn;
  if (ibv_modify_qp(s.ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) fail("UD RTS");
  ibv_ah_attr aa = ah_to(peer);
  s.ah = ibv_create_ah(s.pd, &aa);
  if (!s.ah) fail("ibv_create_ah: %s", std::strerror(errno));
}

Info exchange(int fd, Side& s, Info& theirs) {
  Info mine{};
  mine.rc_qpn = s.rc->qp_num, mine.uc_qpn = s.uc->qp_num, mine.ud_qpn = s.ud->qp_num;
  mine.rkey = s.mr->rkey;
  mine.addr = s.addr(0);
  std::memcpy(mine.gid, s.gid.raw, 16);
  xfer(fd, &mine, sizeof mine, true);
  xfer(fd, &theirs, sizeof theirs, false);
  return mine;
}

void post_recv(ibv_qp* q, const Side& s, size_t off, uint32_t len, uint64_t wr_id) {
  ibv_sge g{s.addr(off), len, s.mr->lkey};
  ibv_recv_wr w{}, *bad;
  w.wr_id = wr_id;
  w.sg_list = &g;
  w.num_sge = 1;
  if (int e = ibv_post_recv(q, &w, &bad)) fail("ibv_post_recv: %s", std::strerror(e));
}

// wr_id of a send-side work request: its kind and its index in the batch.
uint64_t wr_id_of(const Step& s) { return uint64_t(s.op) << 32 | s.idx; }

// ==================== client ====================

struct Totals {
  uint64_t batches = 0, ops = 0, bytes = 0, uc_sent = 0, ud_sent = 0;
};

void post_batch(Side& s, const Info& peer, const std::vector<Step>& rc, const std::vector<Step>& uc,
                const std::vector<Step>& ud, uint32_t k) {
  ibv_send_wr* bad;
  for (const Step& st : ud) {
    uint8_t* src = s.at(L.ud_src + size_t(kMaxUd) * st.idx);
    fill_tagged(src, st, k);
    ibv_sge g{s.addr(L.ud_src + size_t(kMaxUd) * st.idx), st.len, s.mr->lkey};
    ibv_send_wr w{};
    w.wr_id = wr_id_of(st);
    w.sg_list = &g;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.ud.ah = s.ah;
    w.wr.ud.remote_qpn = peer.ud_qpn;
    w.wr.ud.remote_qkey = kQkey;
    if (int e = ibv_post_send(s.ud, &w, &bad)) fail("post UD SEND: %s", std::strerror(e));
  }
  for (const Step& st : uc) {
    const size_t src = L.uc_src + size_t(kMaxUc) * st.idx;
    if (st.op == Op::UcSend) fill_tagged(s.at(src), st, k);
    else pattern(s.at(src), st.len, st.seed);
    ibv_sge g{s.addr(src), st.len, s.mr->lkey};
    ibv_send_wr w{};
    w.wr_id = wr_id_of(st);
    w.sg_list = &g;
    w.num_sge = 1;
    w.send_flags = IBV_SEND_SIGNALED;
    w.opcode = st.op == Op::UcSend ? IBV_WR_SEND : st.op == Op::UcWrite ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
    w.imm_data = htonl(st.imm);
    w.wr.rdma.remote_addr = peer.addr + L.uc_target + size_t(kUcSlot) * ((k % 2) * kUcOps + st.idx) + st.off;
    w.wr.rdma.rkey = peer.rkey;
    if (int e = ibv_post_send(s.uc, &w, &bad)) fail("post %s: %s", op_name(st.op), std::strerror(e));
  }
  // RC: one chain.
  std::vector<ibv_send_wr> w(rc.size());
  std::vector<ibv_sge> g(rc.size());
  for (size_t i = 0; i < rc.size(); ++i) {
    const Step& st = rc[i];
    ibv_send_wr& x = w[i];
    x = {};
    x.wr_id = wr_id_of(st);
    x.sg_list = &g[i];
    x.num_sge = st.len ? 1 : 0;
    x.send_flags = IBV_SEND_SIGNALED;
    x.next = i + 1 < rc.size() ? &w[i + 1] : nullptr;
    const size_t src = L.rc_src + size_t(kMaxRc) * st.idx;
    g[i] = {s.addr(src), st.len, s.mr->lkey};
    switch (st.op) {
      case Op::Write:
      case Op::WriteImm:
        pattern(s.at(src), st.len, st.seed);
        x.opcode = st.op == Op::Write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
        x.imm_data = htonl(st.imm);
        x.wr.rdma.remote_addr = peer.addr + L.rc_target + size_t(kRcSlot) * st.idx + st.off;
        x.wr.rdma.rkey = peer.rkey;
        break;
      case Op::Send:
      case Op::SendImm:
        pattern(s.at(src), st.len, st.seed);
        x.opcode = st.op == Op::Send ? IBV_WR_SEND : IBV_WR_SEND_WITH_IMM;
        x.imm_data = htonl(st.imm);
        break;
      case Op::Read: {
        const size_t dst = L.rc_target + size_t(kRcSlot) * st.idx;
        std::memset(s.at(dst), kGuard, kRcSlot);
        g[i].addr = s.addr(dst + st.loff);
        x.opcode = IBV_WR_RDMA_READ;
        x.wr.rdma.remote_addr = peer.addr + L.read_src + st.off;
        x.wr.rdma.rkey = peer.rkey;
        break;
      }
      case Op::FetchAdd:
      case Op::CmpSwap: {
        const size_t dst = L.atomic + 8 * st.idx;
        std::memset(s.at(dst), kGuard, 8);
        g[i] = {s.addr(dst), 8, s.mr->lkey};
        x.num_sge = 1;
        x.opcode = st.op == Op::FetchAdd ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
        x.wr.atomic.remote_addr = peer.addr + L.atomic;
        x.wr.atomic.rkey = peer.rkey;
        x.wr.atomic.compare_add = st.a;
        x.wr.atomic.swap = st.b;
        break;
      }
      default:
        fail("bad RC step");
    }
  }
  if (!w.empty())
    if (int e = ibv_post_send(s.rc, w.data(), &bad)) fail("post RC chain: %s", std::strerror(e));
}

ibv_wc_opcode wc_opcode_of(Op o) {
  switch (o) {
    case Op::Write: case Op::WriteImm: case Op::UcWrite: case Op::UcWriteImm: return IBV_WC_RDMA_WRITE;
    case Op::Send: case Op::SendImm: case Op::UcSend: case Op::UdSend: return IBV_WC_SEND;
    case Op::Read: return IBV_WC_RDMA_READ;
    case Op::FetchAdd: return IBV_WC_FETCH_ADD;
    case Op::CmpSwap: return IBV_WC_COMP_SWAP;
  }
  return IBV_WC_SEND;
}

int run_client(int fd, Side& s, const Info& peer, uint64_t seed, double seconds) {
  Totals t;
  uint64_t counter = 0;
  const double start = now_s(), end = start + seconds;
  Watch watch{std::min(60.0, seconds / 2)};
  watch.settle_at += start;
  double next_print = start + 10;
  for (uint32_t k = 0; now_s() < end; ++k) {
    const std::vector<Step> rc = plan_rc(seed, k, counter), uc = plan_uc(seed, k), ud = plan_ud(seed, k);
    post_batch(s, peer, rc, uc, ud, k);
    const size_t n = rc.size() + uc.size() + ud.size();
    std::vector<bool> done(n, false);
    const double deadline = now_s() + 60;
    for (size_t got = 0; got < n;) {
      ibv_wc wc[16];
      const int m = ibv_poll_cq(s.cq, 16, wc);
      if (m < 0) fail("ibv_poll_cq: %d", m);
      if (m == 0 && now_s() > deadline) fail("batch %u: %zu of %zu completions after 60 s", k, got, n);
      for (int j = 0; j < m; ++j) {
        const Op op = Op(wc[j].wr_id >> 32);
        const uint32_t idx = uint32_t(wc[j].wr_id);
        const std::vector<Step>& v = op == Op::UdSend ? ud : op >= Op::UcWrite ? uc : rc;
        if (idx >= v.size() || v[idx].op != op) fail("batch %u: a completion for nothing posted (wr_id %#lx)", k, (unsigned long)wc[j].wr_id);
        const size_t slot = (op == Op::UdSend ? rc.size() + uc.size() : op >= Op::UcWrite ? rc.size() : 0) + idx;
        if (done[slot]) fail("batch %u: %s %u completed twice", k, op_name(op), idx);
        done[slot] = true;
        ++got;
        if (wc[j].status != IBV_WC_SUCCESS)
          fail("batch %u: %s %u (%u bytes) completed with %s (vendor_err %u)", k, op_name(op), idx, v[idx].len,
               ibv_wc_status_str(wc[j].status), wc[j].vendor_err);
        if (wc[j].opcode != wc_opcode_of(op)) fail("batch %u: %s %u completed as opcode %d", k, op_name(op), idx, int(wc[j].opcode));
        if ((op == Op::Read || op == Op::FetchAdd || op == Op::CmpSwap) && wc[j].byte_len != v[idx].len)
          fail("batch %u: %s %u: byte_len %u, expected %u", k, op_name(op), idx, wc[j].byte_len, v[idx].len);
      }
    }
    // What the READs placed and the atomics fetched.
    for (const Step& st : rc) {
      if (st.op == Op::Read) {
        const uint8_t* d = s.at(L.rc_target + size_t(kRcSlot) * st.idx);
        if (size_t b = check_fill(d, st.loff, kGuard); b != st.loff)
          fail("batch %u: READ %u wrote %u bytes before its destination", k, st.idx, st.loff - uint32_t(b));
        // The source holds pattern(seed ^ 1) from its start: compare against a fresh copy.
        std::vector<uint8_t> want(st.off + st.len);
        pattern(want.data(), want.size(), seed ^ 1);
        if (std::memcmp(d + st.loff, want.data() + st.off, st.len) != 0) {
          size_t b = 0;
          while (d[st.loff + b] == want[st.off + b]) ++b;
          fail("batch %u: READ %u (%u bytes from offset %u): byte %zu wrong", k, st.idx, st.len, st.off, b);
        }
        const size_t after = st.loff + st.len;
        if (size_t b = check_fill(d + after, kRcSlot - after, kGuard); b != kRcSlot - after)
          fail("batch %u: READ %u (%u bytes) wrote past its end at +%zu", k, st.idx, st.len, b);
        t.bytes += st.len;
      } else if (st.op == Op::FetchAdd || st.op == Op::CmpSwap) {
        uint64_t got;
        std::memcpy(&got, s.at(L.atomic + 8 * st.idx), 8);
        if (got != st.expect)
          fail("batch %u: %s %u fetched %#lx, the model says %#lx", k, op_name(st.op), st.idx, (unsigned long)got,
               (unsigned long)st.expect);
        t.bytes += 8;
      }
    }
    Msg m{};
    m.type = 'B';
    m.k = k;
    xfer(fd, &m, sizeof m, true);
    xfer(fd, &m, sizeof m, false);
    if (m.type != 'K') fail("server, batch %u: %.200s", k, m.text);
    t.bytes += m.v[0];
    t.batches++;
    t.ops += n;
    t.uc_sent += uc.size();
    t.ud_sent += ud.size();
    const double now = now_s();
    watch.look(start, now);
    if (now >= next_print) {
      std::printf("soak: %.0f s: %lu batches, %lu operations, %.1f MB checked\n", now - start, (unsigned long)t.batches,
                  (unsigned long)t.ops, double(t.bytes) / 1e6);
      std::fflush(stdout);
      next_print += 10;
    }
  }
  Msg m{};
  m.type = 'E';
  m.k = uint32_t(t.batches);
  m.v[0] = t.uc_sent, m.v[1] = t.ud_sent;
  xfer(fd, &m, sizeof m, true);
  xfer(fd, &m, sizeof m, false);
  if (m.type != 'K') fail("server, at the end: %.200s", m.text);
  t.bytes += m.v[0];
  std::printf("soak: UC %lu sent, %lu delivered (%lu twice, %lu late); UD %lu sent, %lu delivered (%lu twice)\n",
              (unsigned long)t.uc_sent, (unsigned long)m.v[1], (unsigned long)m.v[2], (unsigned long)m.v[3],
              (unsigned long)t.ud_sent, (unsigned long)m.v[4], (unsigned long)m.v[5]);
  const std::string mem = watch.finish("client");
  if (!mem.empty()) fail("client: %s", mem.c_str());
  std::printf("soak: %lu batches, %lu operations, %lu bytes checked, 0 failures\n", (unsigned long)t.batches,
              (unsigned long)t.ops, (unsigned long)t.bytes);
  return 0;
}

// ==================== server ====================

struct Server {
  Side& s;
  const Info& peer;
  uint64_t seed;
  uint32_t cur = 0;            // the batch the client runs now (not yet checked)
  uint64_t counter = 0;        // the model of the counter, after batch `cur`
  std::vector<Step> rc{};      // plan_rc(cur)
  std::deque<ibv_wc> rc_recvs{};  // RC receive completions not yet checked
  std::set<std::pair<uint32_t, uint32_t>> uc_seen{}, ud_seen{};
  uint64_t uc_delivered = 0, uc_twice = 0, uc_late = 0, ud_delivered = 0, ud_twice = 0;
  uint64_t bytes = 0;          // checked since the last report
  double started = 0;

  void prepare() {  // the plan of batch `cur` and the guard bytes around its WRITE targets
    rc = plan_rc(seed, cur, counter);
    for (const Step& st : rc)
      if (st.op == Op::Write || st.op == Op::WriteImm) std::memset(s.at(L.rc_target + size_t(kRcSlot) * st.idx), kGuard, kRcSlot);
  }

  void on_uc(const ibv_wc& wc) {
    const uint32_t slot = uint32_t(wc.wr_id & 0xFFFF);
    const uint8_t* b = s.at(L.uc_recv + size_t(kMaxUc) * slot);
    uint32_t k, i;
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      if (!(wc.wc_flags & IBV_WC_WITH_IMM)) fail("UC WRITE_IMM completion without IBV_WC_WITH_IMM");
      const uint32_t imm = ntohl(wc.imm_data);
      k = imm >> 8, i = imm & 0x7F;
      if (!(imm & 0x80) || k > cur) fail("UC: immediate %#x names no UC WRITE sent", imm);
      const std::vector<Step> v = plan_uc(seed, k);
      if (i >= v.size() || v[i].op != Op::UcWriteImm) fail("UC: immediate %#x names no UC WRITE_IMM sent", imm);
      if (k + 1 >= cur) {  // its target is not reused before batch k + 2
        const uint8_t* d = s.at(L.uc_target + size_t(kUcSlot) * ((k % 2) * kUcOps + i) + v[i].off);
        if (size_t e = check_pattern(d, v[i].len, v[i].seed); e != v[i].len)
          fail("UC WRITE_IMM batch %u #%u (%u bytes): byte %zu wrong", k, i, v[i].len, e);
        bytes += v[i].len;
      }
    } else if (wc.opcode == IBV_WC_RECV) {
      Tag t;
      if (wc.byte_len < sizeof t) fail("UC SEND of %u bytes: shorter than its tag", wc.byte_len);
      std::memcpy(&t, b, sizeof t);
      k = t.batch, i = t.idx;
      if (t.magic != kMagic || k > cur) fail("UC SEND: a tag that names nothing sent");
      const std::vector<Step> v = plan_uc(seed, k);
      if (i >= v.size() || v[i].op != Op::UcSend || v[i].len != t.len || wc.byte_len != t.len)
        fail("UC SEND batch %u #%u: %u bytes, the plan says otherwise", k, i, wc.byte_len);
      if (size_t e = check_pattern(b + sizeof t, t.len - sizeof t, v[i].seed); e != t.len - sizeof t)
        fail("UC SEND batch %u #%u (%u bytes): byte %zu wrong", k, i, t.len, e + sizeof t);
      bytes += t.len;
    } else {
      fail("UC receive completion with opcode %d", int(wc.opcode));
    }
    if (k < cur) ++uc_late;
    if (!uc_seen.insert({k, i}).second) ++uc_twice;
    else ++uc_delivered;
    post_recv(s.uc, s, L.uc_recv + size_t(kMaxUc) * slot, kMaxUc, (1u << 16) | slot);
  }

  void on_ud(const ibv_wc& wc) {
    const uint32_t slot = uint32_t(wc.wr_id & 0xFFFF);
    const uint8_t* b = s.at(L.ud_recv + size_t(kUdRecvSize) * slot);
    if (wc.opcode != IBV_WC_RECV || wc.src_qp != peer.ud_qpn || !(wc.wc_flags & IBV_WC_GRH))
      fail("UD completion: opcode %d, source QP %#x, flags %#x", int(wc.opcode), wc.src_qp, wc.wc_flags);
    Tag t;
    if (wc.byte_len < 40 + sizeof t) fail("UD datagram of %u bytes (with the GRH)", wc.byte_len);
    std::memcpy(&t, b + 40, sizeof t);
    const std::vector<Step> v = plan_ud(seed, t.batch);
    if (t.magic != kMagic || t.batch > cur || t.idx >= v.size() || v[t.idx].len != t.len || wc.byte_len != 40 + t.len)
      fail("UD datagram: a tag that names nothing sent (%u bytes)", wc.byte_len);
    if (size_t e = check_pattern(b + 40 + sizeof t, t.len - sizeof t, v[t.idx].seed); e != t.len - sizeof t)
      fail("UD batch %u #%u (%u bytes): byte %zu wrong", t.batch, t.idx, t.len, e + sizeof t);
    bytes += t.len;
    if (!ud_seen.insert({t.batch, t.idx}).second) ++ud_twice;
    else ++ud_delivered;
    post_recv(s.ud, s, L.ud_recv + size_t(kUdRecvSize) * slot, kUdRecvSize, (2u << 16) | slot);
  }

  void drain() {
    ibv_wc wc[32];
    for (;;) {
      const int m = ibv_poll_cq(s.cq, 32, wc);
      if (m < 0) fail("ibv_poll_cq: %d", m);
      if (m == 0) return;
      for (int j = 0; j < m; ++j) {
        if (wc[j].status != IBV_WC_SUCCESS)
          fail("receive completion (wr_id %#lx) with %s", (unsigned long)wc[j].wr_id, ibv_wc_status_str(wc[j].status));
        const uint32_t kind = uint32_t(wc[j].wr_id >> 16);
        if (kind == 0) {
          if (wc[j].qp_num != s.rc->qp_num) fail("an RC receive completion on QP %#x", wc[j].qp_num);
          rc_recvs.push_back(wc[j]);
        } else if (kind == 1) {
          on_uc(wc[j]);
        } else {
          on_ud(wc[j]);
        }
      }
    }
  }

  // Sleeps on the completion channel (or the socket) up to `ms`.
  void wait(int fd, int ms) {
    pollfd p[2] = {{s.ch->fd, POLLIN, 0}, {fd, POLLIN, 0}};
    if (::poll(p, 2, ms) < 0 && errno != EINTR) fail("poll: %s", std::strerror(errno));
    if (p[0].revents & POLLIN) {
      ibv_cq* cq;
      void* cx;
      if (ibv_get_cq_event(s.ch, &cq, &cx)) fail("ibv_get_cq_event");
      ibv_ack_cq_events(cq, 1);
      if (ibv_req_notify_cq(s.cq, 0)) fail("ibv_req_notify_cq");
    }
    drain();
  }

  // Checks batch `cur` (fails the run at the first thing wrong).
  void check_batch(int fd) {
    size_t need = 0;
    for (const Step& st : rc) need += st.op == Op::Send || st.op == Op::SendImm || st.op == Op::WriteImm;
    const double deadline = now_s() + 60;
    while (rc_recvs.size() < need) {
      if (now_s() > deadline) fail("batch %u: %zu of %zu RC receive completions after 60 s", cur, rc_recvs.size(), need);
      wait(fd, 20);
    }
    if (rc_recvs.size() > need) fail("batch %u: %zu RC receive completions, %zu expected", cur, rc_recvs.size(), need);
    for (const Step& st : rc) {
      if (st.op == Op::Write || st.op == Op::WriteImm) {
        const uint8_t* d = s.at(L.rc_target + size_t(kRcSlot) * st.idx);
        if (size_t b = check_fill(d, st.off, kGuard); b != st.off)
          fail("batch %u: %s %u wrote before its target (byte %zu)", cur, op_name(st.op), st.idx, b);
        if (size_t b = check_pattern(d + st.off, st.len, st.seed); b != st.len)
          fail("batch %u: %s %u (%u bytes at +%u): byte %zu wrong", cur, op_name(st.op), st.idx, st.len, st.off, b);
        const size_t after = st.off + st.len;
        if (size_t b = check_fill(d + after, kRcSlot - after, kGuard); b != kRcSlot - after)
          fail("batch %u: %s %u (%u bytes) wrote past its end at +%zu", cur, op_name(st.op), st.idx, st.len, b);
        bytes += st.len;
      }
      if (st.op == Op::Send || st.op == Op::SendImm || st.op == Op::WriteImm) {
        const ibv_wc wc = rc_recvs.front();
        rc_recvs.pop_front();
        const bool imm = st.op != Op::Send;
        const ibv_wc_opcode want = st.op == Op::WriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
        if (wc.opcode != want || bool(wc.wc_flags & IBV_WC_WITH_IMM) != imm || (imm && ntohl(wc.imm_data) != st.imm))
          fail("batch %u: %s %u: receive completion opcode %d flags %#x immediate %#x, expected %#x", cur, op_name(st.op),
               st.idx, int(wc.opcode), wc.wc_flags, ntohl(wc.imm_data), st.imm);
        const uint32_t slot = uint32_t(wc.wr_id & 0xFFFF);
        if (st.op != Op::WriteImm) {
          if (wc.byte_len != st.len) fail("batch %u: %s %u: byte_len %u, expected %u", cur, op_name(st.op), st.idx, wc.byte_len, st.len);
          if (size_t b = check_pattern(s.at(L.rc_recv + size_t(kMaxRc) * slot), st.len, st.seed); b != st.len)
            fail("batch %u: %s %u (%u bytes): byte %zu wrong", cur, op_name(st.op), st.idx, st.len, b);
          bytes += st.len;
        }
        post_recv(s.rc, s, L.rc_recv + size_t(kMaxRc) * slot, kMaxRc, slot);
      }
    }
    uint64_t got;
    std::memcpy(&got, s.at(L.atomic), 8);
    if (got != counter) fail("batch %u: the counter is %#lx, the model says %#lx", cur, (unsigned long)got, (unsigned long)counter);
  }

  int run(int fd) {
    pattern(s.at(L.read_src), kMaxRc + 2 * kMaxOff, seed ^ 1);
    for (uint32_t i = 0; i < kRcRecvs; ++i) post_recv(s.rc, s, L.rc_recv + size_t(kMaxRc) * i, kMaxRc, i);
    for (uint32_t i = 0; i < kUcRecvs; ++i) post_recv(s.uc, s, L.uc_recv + size_t(kMaxUc) * i, kMaxUc, (1u << 16) | i);
    for (uint32_t i = 0; i < kUdRecvs; ++i)
      post_recv(s.ud, s, L.ud_recv + size_t(kUdRecvSize) * i, kUdRecvSize, (2u << 16) | i);
    if (ibv_req_notify_cq(s.cq, 0)) fail("ibv_req_notify_cq");
    prepare();
    uint32_t go = 1;  // the receives are posted: the client may start
    xfer(fd, &go, sizeof go, true);
    started = now_s();
    Watch watch{started + 60};  // the first minute
    uint64_t total_bytes = 0;
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) {
        wait(fd, 100);
        continue;
      }
      Msg m;
      xfer(fd, &m, sizeof m, false);
      if (m.type == 'B') {
        if (m.k != cur) fail("the client finished batch %u, expected %u", m.k, cur);
        check_batch(fd);
        m = {};
        m.type = 'K';
        m.v[0] = bytes;
        total_bytes += bytes;
        bytes = 0;
        ++cur;
        prepare();
        // A UC or UD message is late by one batch at most (the link holds a frame back behind
        // at most 4 later ones): forget those older than that, so the sets stay small.
        for (auto* seen : {&uc_seen, &ud_seen})
          seen->erase(seen->begin(), seen->lower_bound({cur >= 4 ? cur - 4 : 0, 0}));
        xfer(fd, &m, sizeof m, true);
        watch.look(started, now_s());
      } else if (m.type == 'E') {
        // Whatever UC and UD still bring (at most a few frames held back by the link).
        const double until = now_s() + 0.5;
        while (now_s() < until) wait(fd, 20);
        if (!rc_recvs.empty()) fail("%zu RC receive completions after the last batch", rc_recvs.size());
        total_bytes += bytes;
        const uint64_t uc_sent = m.v[0], ud_sent = m.v[1];
        if (uc_delivered > uc_sent || ud_delivered > ud_sent) fail("more delivered than sent");
        m = {};
        m.type = 'K';
        m.v[0] = bytes;
        m.v[1] = uc_delivered, m.v[2] = uc_twice, m.v[3] = uc_late, m.v[4] = ud_delivered, m.v[5] = ud_twice;
        std::printf("server: UC %lu sent, %lu delivered (%lu twice, %lu late); UD %lu sent, %lu delivered (%lu twice)\n",
                    (unsigned long)uc_sent, (unsigned long)uc_delivered, (unsigned long)uc_twice, (unsigned long)uc_late,
                    (unsigned long)ud_sent, (unsigned long)ud_delivered, (unsigned long)ud_twice);
        const std::string mem = watch.finish("server");
        if (!mem.empty()) {
          m.type = 'F';
          std::snprintf(m.text, sizeof m.text, "server: %s", mem.c_str());
        }
        xfer(fd, &m, sizeof m, true);
        if (!mem.empty()) fail("server: %s", mem.c_str());
        std::printf("soak: %u batches, server side, %lu bytes checked, 0 failures\n", cur, (unsigned long)total_bytes);
        return 0;
      } else {
        fail("the client sent message type %u", m.type);
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  int port = 18515;
  uint64_t seed = 1;
  double seconds = 60;
  std::string peer;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--port" && i + 1 < argc) port = std::atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 0);
    else if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a[0] != '-') peer = a;
    else fail("usage: soak [--port N] [--seed S] [--seconds T] [SERVER_IP]");
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const bool server = peer.empty();
  Side s;
  open_side(s, server);
  const int fd = shim_test::tcp_connect(port, peer);
  uint64_t peer_seed = seed;
  xfer(fd, &seed, sizeof seed, true);
  xfer(fd, &peer_seed, sizeof peer_seed, false);
  if (peer_seed != seed) fail("the two sides have different seeds");
  Info theirs{};
  exchange(fd, s, theirs);
  connect_side(s, theirs, server ? 0x111111 : 0x222222, server ? 0x222222 : 0x111111);
  Server srv{s, theirs, seed};
  std::printf("%s: RC QP %#x, UC QP %#x, UD QP %#x; peer RC %#x, UC %#x, UD %#x; seed %lu\n", server ? "server" : "client",
              s.rc->qp_num, s.uc->qp_num, s.ud->qp_num, theirs.rc_qpn, theirs.uc_qpn, theirs.ud_qpn, (unsigned long)seed);
  if (server) return srv.run(fd);
  uint32_t go = 0;
  xfer(fd, &go, sizeof go, false);  // the server's receives are posted (Server::run)
  return run_client(fd, s, theirs, seed, seconds);
}
