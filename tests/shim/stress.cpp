// stress: many threads on one uroce device at once, through the plain libibverbs API only
// (issue 35; run with scripts/uroce-run). Every QP pair is RC in loopback (both ends on this
// device: the frames go through the engine and back, as to a peer). Threads:
//   - workers (--workers, 8): each with its own CQ and QP pair, rounds of a WRITE, a SEND, a
//     READ and a FETCH_ADD of random sizes (0 to 64 KiB), all four in flight at once;
//   - two sharers: one CQ and one SRQ between them, a QP pair each; up to 8 SENDs in flight
//     each, whose receive buffers come from the SRQ; whoever polls a completion checks it for
//     its owner (each message arrives exactly once, with its bytes);
//   - churn: creates and destroys CQs, QPs (taken to RTS), MRs (ibv_rereg_mr too) and AHs, and
//     deregisters an MR while WRITEs into it are in flight: each completes with success or an
//     error, and the guard bytes around the MR's range never change;
//   - events: a QP pair whose CQ has a completion channel, woken by ibv_get_cq_event (5 s at
//     most), and the asynchronous events of the device, read and acknowledged;
//   - poller: ib_write_lat's pattern: it watches the last byte of a WRITE's target for the
//     message's arrival, reading the memory while the engine writes it (as a program may while
//     an RNIC's DMA does: engine/dma.hpp), then reaps the completion.
// Every completion is checked (status, opcode, length) and every byte; resident memory and open
// file descriptors are compared between half-way (60 s at most) and the end (more descriptors:
// a failure). The last line:
//   stress: N operations, M bytes checked, F failures
// and the exit status is 0 when F is 0 and every thread got work done.
//
//   stress [--seconds S] [--workers N]
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/shim/process_use.hpp"

namespace {

constexpr uint8_t kGidIndex = 1;
constexpr uint32_t kMaxMsg = 64 << 10;
constexpr uint64_t kPollBudgetNs = 10'000'000'000ull;  // a completion that takes longer: a hang

std::atomic<bool> g_stop{false};
// The churn thread parks between turns while g_park_churn is set (g_churn_parked says it has):
// descriptors are counted then, when it holds none of its moment's objects (a turn takes longer
// than the count's looks under ThreadSanitizer).
std::atomic<bool> g_park_churn{false}, g_churn_parked{false};
std::atomic<uint64_t> g_failures{0};
ibv_context* g_ctx = nullptr;
ibv_pd* g_pd = nullptr;
ibv_gid g_gid{};
ibv_mtu g_mtu = IBV_MTU_1024;
std::mutex g_print;

void failure(const char* who, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void failure(const char* who, const char* fmt, ...) {
  g_failures.fetch_add(1);
  std::lock_guard<std::mutex> l(g_print);
  va_list ap;
  va_start(ap, fmt);
  std::printf("FAIL %s: ", who);
  std::vprintf(fmt, ap);
  std::printf("\n");
  std::fflush(stdout);
  va_end(ap);
}

[[noreturn]] void fatal(const char* what) {
  std::printf("FAIL set-up: %s: %s\n", what, std::strerror(errno));
  std::fflush(stdout);
  _exit(1);
}

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count());
}

void pattern(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p[i] = uint8_t(x);
  }
}

// Where `got` differs from the pattern of `seed`: the offset, or -1.
long mismatch(const uint8_t* got, size_t n, uint64_t seed) {
  std::vector<uint8_t> want(n);
  pattern(want.data(), n, seed);
  for (size_t i = 0; i < n; ++i)
    if (got[i] != want[i]) return long(i);
  return -1;
}

struct Buf {
  std::vector<uint8_t> mem;
  ibv_mr* mr = nullptr;
  explicit Buf(size_t n, int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                       IBV_ACCESS_REMOTE_ATOMIC)
      : mem(n) {
    mr = ibv_reg_mr(g_pd, mem.data(), n, access);
    if (!mr) fatal("ibv_reg_mr");
  }
  ~Buf() {
    if (mr) ibv_dereg_mr(mr);
  }
  uint8_t* at(size_t off) { return mem.data() + off; }
  uint64_t addr(size_t off) const { return uint64_t(uintptr_t(mem.data() + off)); }
};

ibv_qp* make_qp(ibv_cq* scq, ibv_cq* rcq, ibv_srq* srq = nullptr, uint32_t depth = 16) {
  ibv_qp_init_attr ia{};
  ia.send_cq = scq;
  ia.recv_cq = rcq;
  ia.srq = srq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = depth;
  ia.cap.max_recv_wr = srq ? 0 : depth;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  return ibv_create_qp(g_pd, &ia);
}

// INIT, RTR to `dest` on this device, RTS. 0 or an errno.
int connect(ibv_qp* qp, uint32_t dest, uint32_t psn, uint32_t dest_psn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if (int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return r;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = g_mtu;
  a.dest_qp_num = dest;
  a.rq_psn = dest_psn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = g_gid;
  a.ah_attr.grh.sgid_index = kGidIndex;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return r;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = psn;
  a.timeout = 12;
  a.retry_cnt = 6;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_MAX_QP_RD_ATOMIC);
}

struct Pair {
  ibv_qp *a = nullptr, *b = nullptr;
  bool up(ibv_cq* cq_a, ibv_cq* cq_b, ibv_srq* srq_b = nullptr, uint32_t psn = 0) {
    a = make_qp(cq_a, cq_a);
    b = make_qp(cq_b, cq_b, srq_b);
    if (!a || !b) return false;
    return connect(a, b->qp_num, psn, psn + 0x100) == 0 && connect(b, a->qp_num, psn + 0x100, psn) == 0;
  }
  void down() {
    if (a) ibv_destroy_qp(a);
    if (b) ibv_destroy_qp(b);
    a = b = nullptr;
  }
};

int post_one(ibv_qp* qp, ibv_wr_opcode op, uint64_t id, ibv_mr* mr, uint64_t laddr, uint32_t len,
             uint64_t raddr = 0, uint32_t rkey = 0, uint64_t add = 0) {
  ibv_sge s{laddr, len, mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &s;
  wr.num_sge = 1;
  if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = raddr;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = add;
  } else {
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
  }
  return ibv_post_send(qp, &wr, &bad);
}

int post_recv(ibv_qp* qp, ibv_srq* srq, uint64_t id, ibv_mr* mr, uint64_t addr, uint32_t len) {
  ibv_sge s{addr, len, mr->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = id;
  wr.sg_list = &s;
  wr.num_sge = 1;
  return srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad);
}

// Polls `cq` for `n` completions into `out` (kPollBudgetNs at most). False on a hang.
bool poll_n(ibv_cq* cq, int n, std::vector<ibv_wc>& out) {
  out.clear();
  const uint64_t until = now_ns() + kPollBudgetNs;
  ibv_wc wc[16];
  while (int(out.size()) < n) {
    const int k = ibv_poll_cq(cq, 16, wc);
    if (k < 0) return false;
    out.insert(out.end(), wc, wc + k);
    if (k == 0 && now_ns() > until) return false;
  }
  return true;
}

struct Tally {
  std::string name;
  std::atomic<uint64_t> ops{0}, bytes{0}, errors_expected{0};
};

// ---- Workers: their own CQ and QP pair; WRITE, SEND, READ and FETCH_ADD at once ------------------

void worker(Tally& t, uint32_t index) {
  const std::string who = t.name;
  ibv_cq* cq = ibv_create_cq(g_ctx, 64, nullptr, nullptr, 0);
  if (!cq) fatal("ibv_create_cq");
  Pair p;
  if (!p.up(cq, cq, nullptr, 0x1000 * (index + 1))) fatal("worker QP pair");
  // Regions: [0] WRITE source, [1] WRITE target, [2] SEND source, [3] receive buffer,
  // [4] READ source (b's), [5] READ target, [6] the atomic counter and the fetched value.
  Buf a(7 * kMaxMsg + 64), b(7 * kMaxMsg + 64);
  auto off = [](int r) { return size_t(r) * kMaxMsg; };
  std::mt19937_64 rng(index * 7919 + 1);
  uint64_t counter = 0;  // the model of b's counter
  std::memset(b.at(off(6)), 0, 8);
  std::vector<ibv_wc> wcs;
  for (uint64_t round = 1; !g_stop.load(std::memory_order_relaxed); ++round) {
    const uint32_t lw = uint32_t(rng() % (kMaxMsg + 1)), ls = uint32_t(rng() % (kMaxMsg + 1)),
                   lr = uint32_t(rng() % (kMaxMsg + 1));
    const uint64_t add = rng() >> 8, seed = (uint64_t(index) << 40) | round;
    pattern(a.at(off(0)), lw, seed);
    pattern(a.at(off(2)), ls, seed + 1);
    pattern(b.at(off(4)), lr, seed + 2);
    std::memset(a.at(off(5)), 0xEE, lr);
    if (post_recv(p.b, nullptr, 10 + round, b.mr, b.addr(off(3)), kMaxMsg) ||
        post_one(p.a, IBV_WR_RDMA_WRITE, 1, a.mr, a.addr(off(0)), lw, b.addr(off(1)), b.mr->rkey) ||
        post_one(p.a, IBV_WR_SEND, 2, a.mr, a.addr(off(2)), ls) ||
        post_one(p.a, IBV_WR_RDMA_READ, 3, a.mr, a.addr(off(5)), lr, b.addr(off(4)), b.mr->rkey) ||
        post_one(p.a, IBV_WR_ATOMIC_FETCH_AND_ADD, 4, a.mr, a.addr(off(6)), 8, b.addr(off(6)), b.mr->rkey, add)) {
      failure(who.c_str(), "round %lu: a post failed: %s", (unsigned long)round, std::strerror(errno));
      break;
    }
    if (!poll_n(cq, 5, wcs)) {
      failure(who.c_str(), "round %lu: %zu of 5 completions within 10 s", (unsigned long)round, wcs.size());
      break;
    }
    bool seen[5] = {};
    for (const ibv_wc& wc : wcs) {
      const bool recv = wc.wr_id == 10 + round;
      const int k = recv ? 0 : int(wc.wr_id);
      static const ibv_wc_opcode want[5] = {IBV_WC_RECV, IBV_WC_RDMA_WRITE, IBV_WC_SEND, IBV_WC_RDMA_READ,
                                             IBV_WC_FETCH_ADD};
      if (k < 0 || k > 4 || seen[k] || wc.status != IBV_WC_SUCCESS || wc.opcode != want[k] ||
          (recv && (wc.byte_len != ls || wc.qp_num != p.b->qp_num)) || (!recv && wc.qp_num != p.a->qp_num)) {
        failure(who.c_str(), "round %lu: completion wr_id %lu status %s opcode %d byte_len %u qp 0x%x",
                (unsigned long)round, (unsigned long)wc.wr_id, ibv_wc_status_str(wc.status), int(wc.opcode),
                wc.byte_len, wc.qp_num);
        g_stop = true;
        break;
      }
      seen[k] = true;
    }
    if (g_failures.load()) break;
    long bad;
    if ((bad = mismatch(b.at(off(1)), lw, seed)) >= 0) failure(who.c_str(), "WRITE of %u: byte %ld", lw, bad);
    if ((bad = mismatch(b.at(off(3)), ls, seed + 1)) >= 0) failure(who.c_str(), "SEND of %u: byte %ld", ls, bad);
    if ((bad = mismatch(a.at(off(5)), lr, seed + 2)) >= 0) failure(who.c_str(), "READ of %u: byte %ld", lr, bad);
    uint64_t fetched, now;
    std::memcpy(&fetched, a.at(off(6)), 8);
    std::memcpy(&now, b.at(off(6)), 8);
    if (fetched != counter || now != counter + add)
      failure(who.c_str(), "FETCH_ADD: fetched %lu (want %lu), counter %lu (want %lu)", (unsigned long)fetched,
              (unsigned long)counter, (unsigned long)now, (unsigned long)(counter + add));
    counter += add;
    if (g_failures.load()) break;
    t.ops += 4;
    t.bytes += lw + ls + lr + 8;
  }
  p.down();
  ibv_destroy_cq(cq);
}

// ---- Sharers: one CQ and one SRQ between two threads -----------------------------------------------

constexpr uint32_t kSrqBufs = 32, kSrqBuf = 8192, kShareDepth = 8;
struct Shared {
  ibv_cq* cq = nullptr;
  ibv_srq* srq = nullptr;
  Buf* rbuf = nullptr;  // kSrqBufs receive buffers
  std::atomic<uint32_t> inflight[2] = {};
  std::atomic<uint64_t> sent[2] = {}, rcvd[2] = {}, seq_sum_sent[2] = {}, seq_sum_rcvd[2] = {};
};

void sharer(Tally& t, Shared& sh, uint32_t me) {
  const std::string who = t.name;
  Pair p;
  if (!p.up(sh.cq, sh.cq, sh.srq, 0x40000 * (me + 1))) fatal("sharer QP pair");
  Buf src(kShareDepth * kSrqBuf);
  std::mt19937_64 rng(me + 99);
  uint64_t seq = 0;
  uint64_t last_work = now_ns();
  ibv_wc wc[8];
  // Until both sharers have nothing in flight: a SEND's completion comes after its receive's
  // (the responder completes the receive before it acknowledges), so by then every receive was
  // polled, by one or the other.
  while (true) {
    const bool stopping = g_stop.load(std::memory_order_relaxed);
    if (stopping && sh.inflight[0].load() == 0 && sh.inflight[1].load() == 0) break;
    if (!stopping && sh.inflight[me].load() < kShareDepth) {
      const uint32_t slot = uint32_t(seq % kShareDepth);
      const uint32_t len = 16 + uint32_t(rng() % (kSrqBuf - 16 + 1));
      uint8_t* m = src.at(size_t(slot) * kSrqBuf);
      const uint64_t tag = (uint64_t(me) << 56) | seq;
      std::memcpy(m, &tag, 8);
      std::memcpy(m + 8, &len, 4);
      pattern(m + 16, len - 16, tag);
      sh.inflight[me].fetch_add(1);
      sh.sent[me].fetch_add(1);
      sh.seq_sum_sent[me].fetch_add(seq);
      if (post_one(p.a, IBV_WR_SEND, tag, src.mr, src.addr(size_t(slot) * kSrqBuf), len)) {
        failure(who.c_str(), "post SEND: %s", std::strerror(errno));
        break;
      }
      ++seq;
    }
    const int k = ibv_poll_cq(sh.cq, 8, wc);
    if (k < 0) {
      failure(who.c_str(), "ibv_poll_cq: %d", k);
      break;
    }
    if (k > 0) last_work = now_ns();
    else if (now_ns() - last_work > kPollBudgetNs) {
      failure(who.c_str(), "nothing completed for 10 s (%u in flight)", sh.inflight[me].load());
      break;
    }
    for (int i = 0; i < k; ++i) {
      const ibv_wc& w = wc[i];
      if (w.status != IBV_WC_SUCCESS) {
        failure(who.c_str(), "completion wr_id 0x%lx: %s", (unsigned long)w.wr_id, ibv_wc_status_str(w.status));
        continue;
      }
      if (w.opcode == IBV_WC_SEND) {
        const uint32_t owner = uint32_t(w.wr_id >> 56);
        if (owner > 1) {
          failure(who.c_str(), "SEND completion of no sender: wr_id 0x%lx", (unsigned long)w.wr_id);
          continue;
        }
        sh.inflight[owner].fetch_sub(1);
        continue;
      }
      if (w.opcode != IBV_WC_RECV || w.wr_id >= kSrqBufs) {
        failure(who.c_str(), "completion opcode %d wr_id %lu", int(w.opcode), (unsigned long)w.wr_id);
        continue;
      }
      uint8_t* m = sh.rbuf->at(size_t(w.wr_id) * kSrqBuf);
      uint64_t tag;
      uint32_t len;
      std::memcpy(&tag, m, 8);
      std::memcpy(&len, m + 8, 4);
      const uint32_t owner = uint32_t(tag >> 56);
      long bad = -2;
      if (owner > 1 || len != w.byte_len || (bad = mismatch(m + 16, len - 16, tag)) >= 0)
        failure(who.c_str(), "received: tag 0x%lx length %u (completion %u), byte %ld", (unsigned long)tag, len,
                w.byte_len, bad);
      else {
        sh.rcvd[owner].fetch_add(1);
        sh.seq_sum_rcvd[owner].fetch_add(tag & ((uint64_t(1) << 56) - 1));
        t.ops += 1;
        t.bytes += len;
      }
      std::memset(m, 0, 16);
      if (post_recv(nullptr, sh.srq, w.wr_id, sh.rbuf->mr, sh.rbuf->addr(size_t(w.wr_id) * kSrqBuf), kSrqBuf))
        failure(who.c_str(), "ibv_post_srq_recv: %s", std::strerror(errno));
    }
    if (g_failures.load()) break;
  }
  p.down();
}

// ---- Churn: objects made and destroyed while the rest runs; an MR deregistered under WRITEs ------

void churn(Tally& t) {
  const std::string who = t.name;
  constexpr size_t kGuard = 4096, kRegion = 64 << 10;
  std::vector<uint8_t> target(kGuard + kRegion + kGuard, 0xA5);
  Buf src(kRegion);
  pattern(src.at(0), kRegion, 77);
  ibv_cq* cq = ibv_create_cq(g_ctx, 64, nullptr, nullptr, 0);
  if (!cq) fatal("churn CQ");
  std::vector<ibv_wc> wcs;
  for (uint64_t it = 1; !g_stop.load(std::memory_order_relaxed); ++it) {
    if (g_park_churn.load()) {
      g_churn_parked = true;
      while (g_park_churn.load() && !g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      g_churn_parked = false;
    }
    // Objects whose life is a moment.
    ibv_cq* c = ibv_create_cq(g_ctx, 16, nullptr, nullptr, 0);
    ibv_qp* q = c ? make_qp(c, c) : nullptr;
    if (!c || !q || connect(q, q->qp_num, 1, 1)) {
      failure(who.c_str(), "a CQ and a QP to RTS: %s", std::strerror(errno));
      break;
    }
    ibv_ah_attr aa{};
    aa.is_global = 1;
    aa.grh.dgid = g_gid;
    aa.grh.sgid_index = kGidIndex;
    aa.grh.hop_limit = 64;
    aa.port_num = 1;
    ibv_ah* ah = ibv_create_ah(g_pd, &aa);
    std::vector<uint8_t> mem(8192);
    ibv_mr* mr = ibv_reg_mr(g_pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
    const int rr = mr ? ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
                      : -1;
    if (!ah || !mr || rr) failure(who.c_str(), "AH %p, MR %p, rereg %d: %s", (void*)ah, (void*)mr, rr, std::strerror(errno));
    if ((ah && ibv_destroy_ah(ah)) || (mr && ibv_dereg_mr(mr)) || ibv_destroy_qp(q) || ibv_destroy_cq(c))
      failure(who.c_str(), "destroying the moment's objects: %s", std::strerror(errno));
    t.ops += 6;
    // An MR deregistered while WRITEs into it are in flight.
    Pair p;
    if (!p.up(cq, cq, nullptr, uint32_t(0x800000 + it * 64))) {
      failure(who.c_str(), "QP pair: %s", std::strerror(errno));
      break;
    }
    ibv_mr* victim = ibv_reg_mr(g_pd, target.data() + kGuard, kRegion, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!victim) fatal("churn victim MR");
    constexpr int kWrites = 8;
    int posted = 0;
    for (int i = 0; i < kWrites; ++i)
      posted += post_one(p.a, IBV_WR_RDMA_WRITE, uint64_t(i), src.mr, src.addr(0), kRegion / kWrites,
                         uint64_t(uintptr_t(target.data() + kGuard)) + uint64_t(i) * (kRegion / kWrites),
                         victim->rkey) == 0;
    if (ibv_dereg_mr(victim)) failure(who.c_str(), "ibv_dereg_mr with WRITEs in flight: %s", std::strerror(errno));
    if (!poll_n(cq, posted, wcs)) {
      failure(who.c_str(), "%zu of %d WRITE completions within 10 s", wcs.size(), posted);
      break;
    }
    // Success until the deregistration, then REM_ACCESS_ERR and flushes.
    bool failed = false;
    for (const ibv_wc& wc : wcs) {
      const bool ok = wc.status == IBV_WC_SUCCESS ? !failed
                    : wc.status == IBV_WC_REM_ACCESS_ERR ? !failed
                    : wc.status == IBV_WC_WR_FLUSH_ERR && failed;
      if (!ok) failure(who.c_str(), "WRITE %lu into a deregistered MR: %s", (unsigned long)wc.wr_id, ibv_wc_status_str(wc.status));
      if (wc.status != IBV_WC_SUCCESS) {
        failed = true;
        t.errors_expected += 1;
      }
    }
    for (size_t i = 0; i < kGuard; ++i)
      if (target[i] != 0xA5 || target[kGuard + kRegion + i] != 0xA5) {
        failure(who.c_str(), "a guard byte beside the deregistered MR changed (offset %zu)", i);
        break;
      }
    p.down();
    ibv_wc rest[16];
    while (ibv_poll_cq(cq, 16, rest) > 0) {}  // nothing is owed; anything there goes with the pair
    t.ops += uint64_t(posted) + 2;
  }
  ibv_destroy_cq(cq);
}

// ---- Events: a completion channel, and the device's asynchronous events ---------------------------

void events(Tally& t) {
  const std::string who = t.name;
  ibv_comp_channel* ch = ibv_create_comp_channel(g_ctx);
  ibv_cq* cq = ch ? ibv_create_cq(g_ctx, 16, nullptr, ch, 0) : nullptr;
  if (!cq) fatal("events CQ");
  Pair p;
  if (!p.up(cq, cq, nullptr, 0x900000)) fatal("events QP pair");
  Buf a(4096), b(4096);
  unsigned acked = 0;
  for (uint64_t it = 1; !g_stop.load(std::memory_order_relaxed); ++it) {
    pattern(a.at(0), 1000, it);
    if (ibv_req_notify_cq(cq, 0) || post_recv(p.b, nullptr, 100 + it, b.mr, b.addr(0), 4096) ||
        post_one(p.a, IBV_WR_SEND, it, a.mr, a.addr(0), 1000)) {
      failure(who.c_str(), "post: %s", std::strerror(errno));
      break;
    }
    int got = 0;
    const uint64_t until = now_ns() + kPollBudgetNs;
    while (got < 2) {
      pollfd pf{ch->fd, POLLIN, 0};
      if (::poll(&pf, 1, 100) == 1) {
        ibv_cq* ev_cq;
        void* ev_ctx;
        if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx) || ev_cq != cq) {
          failure(who.c_str(), "ibv_get_cq_event");
          break;
        }
        ++acked;
        if (ibv_req_notify_cq(cq, 0)) failure(who.c_str(), "ibv_req_notify_cq");
      }
      ibv_wc wc[4];
      int k;
      while ((k = ibv_poll_cq(cq, 4, wc)) > 0)
        for (int i = 0; i < k; ++i) {
          const bool recv = wc[i].wr_id == 100 + it;
          if (wc[i].status != IBV_WC_SUCCESS || (!recv && wc[i].wr_id != it) ||
              wc[i].opcode != (recv ? IBV_WC_RECV : IBV_WC_SEND))
            failure(who.c_str(), "completion wr_id %lu: %s", (unsigned long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
          ++got;
        }
      if (now_ns() > until) {
        failure(who.c_str(), "%d of 2 completions within 10 s (woken by the channel)", got);
        break;
      }
    }
    if (g_failures.load()) break;
    if (long bad = mismatch(b.at(0), 1000, it); bad >= 0) failure(who.c_str(), "SEND: byte %ld", bad);
    // Asynchronous events (the churn thread's QPs meet access errors): read and acknowledge.
    pollfd af{g_ctx->async_fd, POLLIN, 0};
    if (::poll(&af, 1, 0) == 1) {
      ibv_async_event e;
      if (ibv_get_async_event(g_ctx, &e) == 0) {
        ibv_ack_async_event(&e);
        t.errors_expected += 1;
      }
    }
    t.ops += 2;
    t.bytes += 1000;
  }
  if (acked) ibv_ack_cq_events(cq, acked);
  p.down();
  ibv_destroy_cq(cq);
  ibv_destroy_comp_channel(ch);
}

// ---- Poller: reads a WRITE's target while the engine writes it, as ib_write_lat does --------------

void poller(Tally& t) {
  const std::string who = t.name;
  ibv_cq* cq = ibv_create_cq(g_ctx, 16, nullptr, nullptr, 0);
  if (!cq) fatal("poller CQ");
  Pair p;
  if (!p.up(cq, cq, nullptr, 0xA00000)) fatal("poller QP pair");
  constexpr uint32_t kLen = 4096;
  Buf a(kLen), b(kLen);
  std::vector<ibv_wc> wcs;
  for (uint64_t it = 1; !g_stop.load(std::memory_order_relaxed); ++it) {
    pattern(a.at(0), kLen, it);
    uint8_t last = uint8_t(it);
    if (last == b.at(kLen - 1)[0]) last ^= 0x80;  // differs from what the target holds: its arrival shows
    a.at(kLen - 1)[0] = last;
    if (post_one(p.a, IBV_WR_RDMA_WRITE, it, a.mr, a.addr(0), kLen, b.addr(0), b.mr->rkey)) {
      failure(who.c_str(), "post: %s", std::strerror(errno));
      break;
    }
    const volatile uint8_t* watch = b.at(kLen - 1);
    const uint64_t until = now_ns() + kPollBudgetNs;
    while (*watch != last && now_ns() < until) {
    }
    if (*watch != last) {
      failure(who.c_str(), "WRITE %lu: its last byte not there within 10 s", (unsigned long)it);
      break;
    }
    if (!poll_n(cq, 1, wcs) || wcs[0].status != IBV_WC_SUCCESS || wcs[0].wr_id != it) {
      failure(who.c_str(), "WRITE %lu: no successful completion", (unsigned long)it);
      break;
    }
    if (long bad = mismatch(b.at(0), kLen - 1, it); bad >= 0) failure(who.c_str(), "WRITE: byte %ld", bad);
    if (g_failures.load()) break;
    t.ops += 1;
    t.bytes += kLen;
  }
  p.down();
  ibv_destroy_cq(cq);
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  double seconds = 10;
  uint32_t workers = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--workers" && i + 1 < argc) workers = uint32_t(std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: stress [--seconds S] [--workers N]\n");
      return 2;
    }
  }
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n < 1) fatal("no RDMA device");
  g_ctx = ibv_open_device(list[0]);
  if (!g_ctx) fatal("ibv_open_device");
  // Async events without blocking (the events thread polls the fd).
  if (int fl = fcntl(g_ctx->async_fd, F_GETFL); fl < 0 || fcntl(g_ctx->async_fd, F_SETFL, fl | O_NONBLOCK) < 0)
    fatal("async_fd O_NONBLOCK");
  g_pd = ibv_alloc_pd(g_ctx);
  if (!g_pd || ibv_query_gid(g_ctx, 1, kGidIndex, &g_gid)) fatal("PD or GID");
  ibv_port_attr pa{};
  if (ibv_query_port(g_ctx, 1, &pa)) fatal("ibv_query_port");
  g_mtu = pa.active_mtu;
  std::printf("stress: %s, path MTU %d, %u workers, 2 sharers (one CQ, one SRQ), churn, events, poller; %.0f s\n",
              ibv_get_device_name(list[0]), 128 << int(g_mtu), workers, seconds);

  Shared sh;
  sh.cq = ibv_create_cq(g_ctx, 256, nullptr, nullptr, 0);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = kSrqBufs;
  sa.attr.max_sge = 1;
  sh.srq = sh.cq ? ibv_create_srq(g_pd, &sa) : nullptr;
  if (!sh.srq) fatal("shared CQ and SRQ");
  sh.rbuf = new Buf(size_t(kSrqBufs) * kSrqBuf);
  for (uint32_t i = 0; i < kSrqBufs; ++i)
    if (post_recv(nullptr, sh.srq, i, sh.rbuf->mr, sh.rbuf->addr(size_t(i) * kSrqBuf), kSrqBuf)) fatal("SRQ recv");

  std::vector<std::unique_ptr<Tally>> tallies;
  std::vector<std::thread> threads;
  auto tally = [&](std::string name) -> Tally& {
    tallies.push_back(std::make_unique<Tally>());
    tallies.back()->name = std::move(name);
    return *tallies.back();
  };
  for (uint32_t i = 0; i < workers; ++i) threads.emplace_back(worker, std::ref(tally("worker " + std::to_string(i))), i);
  for (uint32_t i = 0; i < 2; ++i) threads.emplace_back(sharer, std::ref(tally("sharer " + std::to_string(i))), std::ref(sh), i);
  threads.emplace_back(churn, std::ref(tally("churn")));
  threads.emplace_back(events, std::ref(tally("events")));
  threads.emplace_back(poller, std::ref(tally("poller")));
  // Memory and descriptors once everything runs (half-way, at most 60 s in) and at the end: the
  // churn thread makes and destroys objects all the time, so a leak shows as growth.
  const uint64_t start = now_ns(), until = start + uint64_t(seconds * 1e9);
  const uint64_t settle = start + uint64_t(std::min(seconds / 2, 60.0) * 1e9);
  uint64_t rss0 = 0;
  uint32_t fds0 = 0;
  // Descriptors counted with the churn thread parked between two turns (30 s at most to get there).
  auto quiet_fds = [] {
    g_park_churn = true;
    const uint64_t give_up = now_ns() + 30'000'000'000ull;
    while (!g_churn_parked.load() && !g_failures.load() && now_ns() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const uint32_t n = shim_test::settled_fds();
    g_park_churn = false;
    return n;
  };
  while (now_ns() < until && !g_failures.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!rss0 && now_ns() >= settle) rss0 = shim_test::resident_kib(), fds0 = quiet_fds();
  }
  const uint64_t rss1 = shim_test::resident_kib();
  const uint32_t fds1 = quiet_fds();
  g_stop = true;
  for (auto& th : threads) th.join();

  for (uint32_t i = 0; i < 2; ++i)
    if (sh.sent[i] != sh.rcvd[i] || sh.seq_sum_sent[i] != sh.seq_sum_rcvd[i])
      failure("sharers", "sender %u: %lu sent, %lu received (sequence sums %lu, %lu)", i, (unsigned long)sh.sent[i].load(),
              (unsigned long)sh.rcvd[i].load(), (unsigned long)sh.seq_sum_sent[i].load(),
              (unsigned long)sh.seq_sum_rcvd[i].load());
  uint64_t ops = 0, bytes = 0;
  std::printf("%-10s %12s %14s %10s\n", "thread", "operations", "bytes checked", "errors (meant)");
  for (auto& t : tallies) {
    std::printf("%-10s %12lu %14lu %10lu\n", t->name.c_str(), (unsigned long)t->ops.load(), (unsigned long)t->bytes.load(),
                (unsigned long)t->errors_expected.load());
    if (t->ops == 0) failure(t->name.c_str(), "did no work");
    ops += t->ops, bytes += t->bytes;
  }
  std::printf("resident memory %.1f MiB at %.0f s, %.1f MiB at the end (%+.2f%%); open file descriptors %u, %u\n",
              double(rss0) / 1024, double(settle - start) / 1e9, double(rss1) / 1024,
              rss0 ? 100.0 * (double(rss1) - double(rss0)) / double(rss0) : 0.0, fds0, fds1);
  if (rss0 && fds1 > fds0) failure("main", "open file descriptors grew from %u to %u", fds0, fds1);
  delete sh.rbuf;
  ibv_destroy_srq(sh.srq);
  ibv_destroy_cq(sh.cq);
  ibv_dealloc_pd(g_pd);
  ibv_close_device(g_ctx);
  ibv_free_device_list(list);
  std::printf("stress: %lu operations, %lu bytes checked, %lu failures\n", (unsigned long)ops, (unsigned long)bytes,
              (unsigned long)g_failures.load());
  return g_failures.load() ? 1 : 0;
}
