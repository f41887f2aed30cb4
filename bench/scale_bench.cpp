// Scale (issue 30), the engine alone (no DPDK, no shim): three tables.
//  1. Memory per QP: N RC QPs, each with its own CQ of the same depth, created on one device and
//     connected in pairs (loopback), as perftest's and MPI's QPs are: max_send_sge and
//     max_recv_sge 1, max_dest_rd_atomic 16. Per QP+CQ: the heap the engine holds (mallinfo2)
//     and the resident memory it adds (/proc/self/statm), connected, and again after every
//     queue was filled to its depth once and every QP made a READ (queues grow as used).
//  2. Many QPs: --many RC QPs (262,144: max_qp) at depth 1, then at depth 128, each with a CQ,
//     created, connected in pairs and destroyed in one process: the time of each phase, memory
//     per QP+CQ.
//  3. Message rate: 64 B RDMA WRITEs between two engines on the FakeLink (frames delivered at
//     once), both polled on this one core, in wall time: one QP pair with 0, 1,024 and --idle
//     (65,536) connected idle QPs per device beside it, and the traffic spread over 1, 16 and
//     1,024 QP pairs. Each figure the median of 3 runs, and its ratio to the first row.
//  4. An SRQ shared by --srq-qps (10,000) QPs with four 64 B SENDs on each, and --reads (16,384)
//     QPs each with one 64 B READ outstanding at once: every message and READ checked
//     (tests/support/many_pairs.hpp), the time from the first post to the last completion.
// Each row runs in a process of its own (memory given back by an earlier row is not reused).
// scripts/bench-scale.sh runs it.
//
//   scale_bench [--qps N] [--many N] [--idle N] [--msgs N] [--srq-qps N] [--reads N]
//   scale_bench --rate-only K [--msgs N]   table 3's traffic over 1 pair and over K pairs only
//                                          (for a profile: scripts/profile-engine.sh's callgrind)
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "tests/support/many_pairs.hpp"
#include "tests/support/pair.hpp"

using namespace uroce::engine;
using uroce::test::connect_qp;
using uroce::test::Path;
using uroce::test::v4gid;

namespace {

size_t heap_in_use() {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

size_t resident_bytes() {
  long pages = 0, res = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f) {
    if (std::fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    std::fclose(f);
  }
  return size_t(res) * size_t(sysconf(_SC_PAGESIZE));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs `f` in a child process; false if it failed.
bool in_child(const std::function<bool()>& f) {
  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return false;
  if (child == 0) {
    const bool ok = f();
    std::fflush(stdout);
    _exit(ok ? 0 : 1);
  }
  int st = 0;
  return waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

Device::Config config(uint8_t id, uint32_t max_qp) {
  Device::Config c;
  c.mac = {0x02, 0, 0, 0, 0, id};
  c.gid = v4gid(198, 18, 0, id);
  c.seed = id;
  c.max_qp = max_qp;
  c.max_cq = 2 * max_qp + 8;
  return c;
}

QpInitAttr rc_attr(Pd* pd, Cq* scq, Cq* rcq, uint32_t depth, uint32_t inline_bytes = 0) {
  QpInitAttr ia;
  ia.pd = pd;
  ia.send_cq = scq;
  ia.recv_cq = rcq;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = depth;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = inline_bytes;
  return ia;
}

// ---- 1. Memory per QP --------------------------------------------------------------------------

bool memory_row(uint32_t n, uint32_t depth, uint32_t inline_bytes, const char* what) {
  FakeWire wire(64, 9216, 1);
  auto dev = std::make_unique<Device>(wire.a(), wire.clock(), config(10, n));
  Pd* pd = dev->alloc_pd();
  std::vector<Qp*> qps(n);
  const size_t heap0 = heap_in_use(), res0 = resident_bytes();
  for (uint32_t i = 0; i < n; ++i) {
    Cq* cq = dev->create_cq(depth);
    qps[i] = cq ? dev->create_qp(rc_attr(pd, cq, cq, depth, inline_bytes)) : nullptr;
    if (!qps[i]) return std::fprintf(stderr, "scale_bench: QP %u of %u not created\n", i, n), false;
  }
  Path p;
  for (uint32_t i = 0; i < n; i += 2)
    if (connect_qp(*dev, qps[i], *dev, *qps[i + 1], p) || connect_qp(*dev, qps[i + 1], *dev, *qps[i], p))
      return std::fprintf(stderr, "scale_bench: pair %u not connected\n", i / 2), false;
  const size_t heap1 = heap_in_use(), res1 = resident_bytes();
  // Then each queue used to its depth once, pair by pair: max_recv_wr receives posted on both
  // QPs (left posted), max_send_wr signaled 64 B WRITEs posted on both at once (each CQ full of
  // their completions before the first poll), then one READ on both (each peer's READ/atomic
  // slots). A queue keeps the storage it grew to (until the QP is reset).
  std::vector<uint8_t> mem(64 * 1024);
  Mr* mr = dev->reg_mr(pd, mem.data(), mem.size(), kLocalWrite | kRemoteWrite | kRemoteRead);
  if (!mr) return std::fprintf(stderr, "scale_bench: reg_mr\n"), false;
  const uint64_t base = reinterpret_cast<uintptr_t>(mem.data());
  Sge s{base, 64, mr->lkey};
  auto post = [&](Qp* q, WrOpcode op, uint64_t id) {
    SendWr w{};
    w.wr_id = id;
    w.opcode = op;
    w.send_flags = kSendSignaled;
    w.sg_list = &s;
    w.num_sge = 1;
    w.remote_addr = base + 4096;
    w.rkey = mr->rkey;
    return dev->post_send(q, w) == 0;
  };
  // Runs the device until both QPs' CQs hold `per_qp` completions each (none polled before),
  // then polls them; false if one failed or they did not come.
  auto run_pair = [&](Qp* q0, Qp* q1, uint32_t per_qp) {
    Cq* c0 = const_cast<Cq*>(q0->init_attr().send_cq);
    Cq* c1 = const_cast<Cq*>(q1->init_attr().send_cq);
    for (uint64_t spins = 0; (c0->size() < per_qp || c1->size() < per_qp) && spins < 10'000'000; ++spins)
      if (!dev->progress()) wire.clock().advance(1000);  // virtual time: a coalesced ACK's timer
    Wc wc;
    uint32_t ok = 0;
    for (Cq* c : {c0, c1})
      while (dev->poll_cq(c, 1, &wc) == 1) ok += wc.status == WcStatus::Success;
    return ok == 2 * per_qp;
  };
  for (uint32_t i = 0; i < n; i += 2) {
    for (Qp* q : {qps[i], qps[i + 1]})
      for (uint32_t k = 0; k < depth; ++k) {
        RecvWr r{k, &s, 1};
        if (dev->post_recv(q, r)) return std::fprintf(stderr, "scale_bench: post_recv\n"), false;
      }
    for (Qp* q : {qps[i], qps[i + 1]})
      for (uint32_t k = 0; k < depth; ++k)
        if (!post(q, WrOpcode::RdmaWrite, k)) return std::fprintf(stderr, "scale_bench: post_send\n"), false;
    if (!run_pair(qps[i], qps[i + 1], depth))
      return std::fprintf(stderr, "scale_bench: WRITEs did not complete: %s\n", qps[i]->describe().c_str()), false;
    if (!post(qps[i], WrOpcode::RdmaRead, 0) || !post(qps[i + 1], WrOpcode::RdmaRead, 0) ||
        !run_pair(qps[i], qps[i + 1], 1))
      return std::fprintf(stderr, "scale_bench: READs did not complete: %s\n", qps[i]->describe().c_str()), false;
  }
  const size_t heap2 = heap_in_use(), res2 = resident_bytes();
  std::printf("| %-46s | %10zu | %13zu | %10zu | %13zu |\n", what, (heap1 - heap0) / n, res1 > res0 ? (res1 - res0) / n : 0,
              (heap2 - heap0 - mem.size()) / n, res2 > res0 + mem.size() ? (res2 - res0 - mem.size()) / n : 0);
  return true;
}

// ---- 2. Many QPs ---------------------------------------------------------------------------------

// The longest progress() step while another thread's telemetry request is served (what a
// `uroce-stat` command costs the data path), in seconds.
double served_step(Device& dev, const SnapshotRequest& req, size_t* rows) {
  std::atomic<bool> done{false};
  Snapshot s;
  std::thread t([&] {
    dev.telemetry().request(req, s, 10'000);
    done = true;
  });
  double longest = 0;
  while (!done) {
    const auto t0 = std::chrono::steady_clock::now();
    dev.progress();
    longest = std::max(longest, seconds_since(t0));
  }
  t.join();
  *rows = s.qps.size();
  return longest;
}

bool many_row(uint32_t n, uint32_t depth, bool telemetry) {
  FakeWire wire(64, 9216, 1);
  auto dev = std::make_unique<Device>(wire.a(), wire.clock(), config(10, n));
  Pd* pd = dev->alloc_pd();
  std::vector<Qp*> qps(n);
  std::vector<Cq*> cqs(n);
  const size_t heap0 = heap_in_use(), res0 = resident_bytes();
  auto t0 = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < n; ++i) {
    cqs[i] = dev->create_cq(depth);
    qps[i] = cqs[i] ? dev->create_qp(rc_attr(pd, cqs[i], cqs[i], depth)) : nullptr;
    if (!qps[i]) return std::fprintf(stderr, "scale_bench: QP %u of %u not created\n", i, n), false;
  }
  const double t_create = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  Path p;
  for (uint32_t i = 0; i < n; i += 2)
    if (connect_qp(*dev, qps[i], *dev, *qps[i + 1], p) || connect_qp(*dev, qps[i + 1], *dev, *qps[i], p))
      return std::fprintf(stderr, "scale_bench: pair %u not connected\n", i / 2), false;
  const double t_connect = seconds_since(t0);
  const size_t heap1 = heap_in_use(), res1 = resident_bytes();
  // A progress() with all of them connected and idle: the active list is empty again after it.
  t0 = std::chrono::steady_clock::now();
  dev->progress();
  const double t_first = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) dev->progress();
  const double t_idle = seconds_since(t0) / 1000;
  // uroce-stat: one page of 96 QPs from the middle of the list, and the device's counters.
  // Five of each: the fastest and the slowest (the helper thread shares the machine's cores).
  size_t rows = 0, no_rows = 0;
  double page_min = 1e9, page_max = 0, stats_min = 1e9, stats_max = 0;
  for (int i = 0; i < 5; ++i) {
    const double a = served_step(*dev, SnapshotRequest{false, 0, 96, n / 2, false}, &rows);
    const double b = served_step(*dev, SnapshotRequest{false, 0, 0, 0, true}, &no_rows);
    page_min = std::min(page_min, a), page_max = std::max(page_max, a);
    stats_min = std::min(stats_min, b), stats_max = std::max(stats_max, b);
  }
  t0 = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < n; ++i)
    if (dev->destroy_qp(qps[i]) || dev->destroy_cq(cqs[i]))
      return std::fprintf(stderr, "scale_bench: QP %u not destroyed\n", i), false;
  const double t_destroy = seconds_since(t0);
  std::printf("| %u | %u | %.2f s | %.2f s | %.1f ms | %.2f us | %.2f s | %zu | %zu |\n", n, depth, t_create, t_connect,
              t_first * 1e3, t_idle * 1e6, t_destroy, (heap1 - heap0) / n, res1 > res0 ? (res1 - res0) / n : 0);
  if (!telemetry) return true;
  std::printf("\nTelemetry at %u QPs, the longest progress() step while a request is served (5 requests: fastest "
              "to slowest): a page of %zu QPs (/uroce/qps,%u) %.0f to %.0f us; the device's counters (/uroce/stats, "
              "a sum over every QP) %.1f to %.1f ms.\n",
              n, rows, n / 2, page_min * 1e6, page_max * 1e6, stats_min * 1e3, stats_max * 1e3);
  return true;
}

// ---- 3. Message rate ------------------------------------------------------------------------------

struct Rig {
  FakeWire wire{65536, 9216, 1};
  std::unique_ptr<Device> a, b;
  Pd *pa = nullptr, *pb = nullptr;
  Cq *sa = nullptr, *ra = nullptr, *sb = nullptr, *rb = nullptr, *idle_a = nullptr, *idle_b = nullptr;
  std::vector<uint8_t> ma = std::vector<uint8_t>(1 << 16), mb = std::vector<uint8_t>(1 << 16);
  Mr *mra = nullptr, *mrb = nullptr;
  std::vector<Qp*> qa, qb;  // the pairs that carry traffic

  Rig(uint32_t active, uint32_t idle) {
    wire.latency_ns = 0;
    a = std::make_unique<Device>(wire.a(), wire.clock(), config(10, active + idle + 8));
    b = std::make_unique<Device>(wire.b(), wire.clock(), config(11, active + idle + 8));
    pa = a->alloc_pd();
    pb = b->alloc_pd();
    sa = a->create_cq(65536), ra = a->create_cq(16), sb = b->create_cq(16), rb = b->create_cq(16);
    idle_a = a->create_cq(1), idle_b = b->create_cq(1);
    mra = a->reg_mr(pa, ma.data(), ma.size(), kLocalWrite);
    mrb = b->reg_mr(pb, mb.data(), mb.size(), kLocalWrite | kRemoteWrite);
    Path p;
    p.max_rd_atomic = 1;
    for (uint32_t i = 0; i < active + idle; ++i) {
      const bool act = i < active;
      Qp* x = a->create_qp(rc_attr(pa, act ? sa : idle_a, act ? ra : idle_a, act ? 128 : 1));
      Qp* y = b->create_qp(rc_attr(pb, act ? sb : idle_b, act ? rb : idle_b, act ? 128 : 1));
      if (!x || !y || connect_qp(*a, x, *b, *y, p) || connect_qp(*b, y, *a, *x, p)) {
        std::fprintf(stderr, "scale_bench: QP pair %u not set up\n", i);
        std::exit(1);
      }
      if (act) qa.push_back(x), qb.push_back(y);
    }
    while (a->progress() | b->progress()) {
    }
  }

  // Messages per second: `msgs` 64 B WRITEs, each QP pair in turn with up to `window` in flight.
  double run(uint64_t msgs, uint32_t window) {
    const Sge s{uint64_t(uintptr_t(ma.data())), 64, mra->lkey};
    SendWr w;
    w.opcode = WrOpcode::RdmaWrite;
    w.send_flags = kSendSignaled;
    w.sg_list = &s;
    w.num_sge = 1;
    w.remote_addr = uint64_t(uintptr_t(mb.data()));
    w.rkey = mrb->rkey;
    uint64_t posted = 0, done = 0;
    auto post = [&](size_t i) {
      w.wr_id = i;
      if (a->post_send(qa[i], w)) {
        std::fprintf(stderr, "scale_bench: post_send failed\n");
        std::exit(1);
      }
      ++posted;
    };
    // Each pair starts with `window` WRITEs; each completion posts the next on its pair (as a
    // program with many QPs does: the work follows the completions, not a walk of all QPs).
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < qa.size(); ++i)
      for (uint32_t k = 0; k < window && posted < msgs; ++k) post(i);
    Wc wc[64];
    while (done < msgs) {
      a->progress();
      b->progress();
      int k;
      while ((k = a->poll_cq(sa, 64, wc)) > 0)
        for (int j = 0; j < k; ++j) {
          if (wc[j].status != WcStatus::Success) {
            std::fprintf(stderr, "scale_bench: a WRITE failed\n");
            std::exit(1);
          }
          ++done;
          if (posted < msgs) post(size_t(wc[j].wr_id));
        }
    }
    return double(msgs) / seconds_since(t0);
  }
};

// ---- 4. An SRQ shared by many QPs; a READ outstanding on many QPs ---------------------------------

bool shared_row(const char* what, uint32_t pairs, bool srq) {
  uroce::test::ManyPairs::Options o;
  o.pairs = pairs;
  o.send_depth = srq ? 4 : 1;
  o.srq_depth = srq ? 16384 : 0;
  o.mem_a = size_t(pairs) * (srq ? 4 : 1) * 64;
  o.mem_b = size_t(srq ? 16384 : pairs) * 64;
  const auto t0 = std::chrono::steady_clock::now();
  uroce::test::ManyPairs m(o);
  const double t_setup = seconds_since(t0);
  const uroce::test::ScaleResult r = srq ? uroce::test::srq_shared_by_all(m, 4) : uroce::test::one_read_per_qp(m);
  if (r.error || r.wrong) {
    std::fprintf(stderr, "scale_bench: %s: %s, %lu wrong\n", what, r.error ? r.error : "checks failed",
                 (unsigned long)r.wrong);
    return false;
  }
  std::printf("| %-44s | %7u | %8lu | %.2f s | %.1f ms | %9.0f |\n", what, pairs, (unsigned long)r.done, t_setup,
              r.seconds * 1e3, double(r.done) / r.seconds);
  return true;
}

double median3(double x, double y, double z) { return std::max(std::min(x, y), std::min(std::max(x, y), z)); }

bool rate_row(const char* what, uint32_t active, uint32_t idle, uint64_t msgs, double* base) {
  // The base rate comes back from the first row's child through a pipe.
  int fd[2];
  if (pipe(fd)) return false;
  const bool ok = in_child([&] {
    close(fd[0]);
    Rig r(active, idle);
    const uint32_t window = std::max<uint32_t>(1, 128 / active);
    r.run(msgs / 10, window);  // warm-up
    const double m = median3(r.run(msgs, window), r.run(msgs, window), r.run(msgs, window));
    const bool w = write(fd[1], &m, sizeof m) == ssize_t(sizeof m);
    close(fd[1]);
    return w;
  });
  close(fd[1]);
  double m = 0;
  const bool got = read(fd[0], &m, sizeof m) == ssize_t(sizeof m);
  close(fd[0]);
  if (!ok || !got) return false;
  if (*base == 0) *base = m;
  std::printf("| %-44s | %12.0f | %6.2f |\n", what, m, m / *base);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t n = 2000, many = 262144, idle = 65536;
  uint64_t msgs = 300000;
  uint32_t srq_qps = 10000, reads = 16384, rate_only = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--qps") && i + 1 < argc) n = uint32_t(std::atoi(argv[++i])) & ~1u;
    else if (!std::strcmp(argv[i], "--many") && i + 1 < argc) many = uint32_t(std::atoi(argv[++i])) & ~1u;
    else if (!std::strcmp(argv[i], "--idle") && i + 1 < argc) idle = uint32_t(std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--msgs") && i + 1 < argc) msgs = uint64_t(std::atoll(argv[++i]));
    else if (!std::strcmp(argv[i], "--srq-qps") && i + 1 < argc) srq_qps = uint32_t(std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--reads") && i + 1 < argc) reads = uint32_t(std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--rate-only") && i + 1 < argc) rate_only = uint32_t(std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: scale_bench [--qps N] [--many N] [--idle N] [--msgs N] [--srq-qps N] [--reads N]\n"
                           "       scale_bench --rate-only K [--msgs N]\n");
      return 2;
    }
  }
  bool ok = true;
  if (rate_only) {
    std::printf("| %-44s | %12s | %6s |\n|---|---:|---:|\n", "QPs", "messages/s", "ratio");
    double base = 0;
    char what[96];
    std::snprintf(what, sizeof what, "traffic over %u pairs", rate_only);
    ok = rate_row("traffic over 1 pair", 1, 0, msgs, &base) && rate_row(what, rate_only, 0, msgs, &base);
    return ok ? 0 : 1;
  }
  std::printf("1. Memory per RC QP + its CQ: %u of them per row, connected in pairs (loopback);\n"
              "max_send_sge = max_recv_sge = 1, max_dest_rd_atomic 16. Bytes: the engine's heap (mallinfo2), resident.\n\n",
              n);
  std::printf("Connected: as created and connected. Used: after every queue was filled to its depth once\n"
              "(receives, WRITEs, their completions) and one READ on every QP.\n\n");
  std::printf("| %-46s | %10s | %13s | %10s | %13s |\n", "queues", "heap / QP", "resident / QP", "heap, used",
              "resident, used");
  std::printf("|%s|%s|%s|%s|%s|\n", std::string(48, '-').c_str(), std::string(12, '-').c_str(),
              std::string(15, '-').c_str(), std::string(12, '-').c_str(), std::string(15, '-').c_str());
  const struct {
    uint32_t depth, inline_bytes;
    const char* what;
  } rows[] = {{1, 0, "depth 1"},
              {16, 0, "depth 16"},
              {128, 0, "depth 128 (perftest's bw tests)"},
              {128, 220, "depth 128, 220 B inline (perftest's lat tests)"},
              {1024, 0, "depth 1024"}};
  for (const auto& r : rows) ok = ok && in_child([&] { return memory_row(n, r.depth, r.inline_bytes, r.what); });

  std::printf("\n2. Many QPs: RC QPs at depth 1 and at depth 128, each with a CQ of the same depth, created, connected\n"
              "in pairs (loopback), one progress() and then 1,000 more with all of them idle, destroyed (with their CQs).\n\n");
  std::printf("| QPs | depth | create | connect | first progress() | idle progress() | destroy | heap / QP+CQ | resident / QP+CQ |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  ok = ok && in_child([&] { return many_row(many, 1, false); });
  ok = ok && in_child([&] { return many_row(many, 128, true); });

  std::printf("\n3. 64 B RDMA WRITE messages per second between two engines (FakeLink, frames delivered at once),\n"
              "both polled on this core; up to 128 in flight (each of K active pairs: 128 / K, at least 1);\n"
              "%lu messages, median of 3 runs after a warm-up; ratio to the first row of its group.\n\n",
              (unsigned long)msgs);
  std::printf("| %-44s | %12s | %6s |\n", "QPs", "messages/s", "ratio");
  std::printf("|%s|%s|%s|\n", std::string(46, '-').c_str(), std::string(14, '-').c_str(), std::string(8, '-').c_str());
  double base = 0;
  char what[96];
  ok = ok && rate_row("1 active pair, no idle QPs", 1, 0, msgs, &base);
  ok = ok && rate_row("1 active pair, 1,024 idle QPs per device", 1, 1024, msgs, &base);
  std::snprintf(what, sizeof what, "1 active pair, %u idle QPs per device", idle);
  ok = ok && rate_row(what, 1, idle, msgs, &base);
  base = 0;
  ok = ok && rate_row("traffic over 1 pair", 1, 0, msgs, &base);
  ok = ok && rate_row("traffic over 16 pairs", 16, 0, msgs, &base);
  ok = ok && rate_row("traffic over 1,024 pairs", 1024, 0, msgs, &base);

  std::printf("\n4. Many QPs at work at once, two engines on the FakeLink (frames delivered at once), both polled on\n"
              "this core; every message and READ checked. Set-up: the QP pairs created and connected.\n\n");
  std::printf("| %-44s | %7s | %8s | %6s | %8s | %9s |\n", "scenario", "QPs", "done", "set-up", "time", "per second");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  ok = ok && in_child([&] { return shared_row("one SRQ on B for all, 4 SENDs of 64 B per QP", srq_qps, true); });
  ok = ok && in_child([&] { return shared_row("one 64 B READ outstanding per QP, all at once", reads, false); });
  return ok ? 0 : 1;
}
