// The engine's own ceiling: two engines joined by the FakeLink, polled on one core, real
// RoCEv2 frames (build, ICRC, parse, ICRC check) in both directions. 64 B and 1 MiB RDMA
// WRITE and SEND, as messages per second and Gbit/s, next to memcpy of the same bytes.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/engine.hpp"
#include "tests/support/pair.hpp"

using namespace uroce::engine;
using uroce::test::ConnectedPair;
using uroce::test::Endpoint;
using uroce::test::PairOptions;

namespace {

// Messages run by Bench::run over the whole program (warm-ups included), printed at exit: the
// denominator of scripts/profile-engine.sh (callgrind collects inside Bench::run only).
uint64_t g_messages = 0;

constexpr uint32_t kDepth = 256;  // each QP's send and receive queue

// Two engines on the FakeLink (tests/support/pair.hpp) with frames deliverable at once (the
// bench measures CPU, not a wire), one CQ per end, RC QPs at path MTU 4096.
PairOptions bench_options(size_t mem) {
  PairOptions o;
  o.mtu = Mtu::M4096;
  o.mem = mem;
  o.wire_frames = 8192;
  o.frame_cap = 4352;
  o.one_cq = true;
  o.cq_depth = 4 * kDepth;
  o.max_send_wr = o.max_recv_wr = kDepth;
  o.max_inline_data = 0;
  o.access = kLocalWrite | kRemoteWrite | kRemoteRead;
  o.qp_access = kRemoteWrite | kRemoteRead;
  o.sq_psn_a = o.sq_psn_b = 0;
  o.max_rd_atomic = 1;
  return o;
}

struct Bench {
  ConnectedPair pair;
  Endpoint &a = pair.a, &b = pair.b;

  explicit Bench(size_t mem) : pair(bench_options(mem)) { pair.wire.latency_ns = 0; }

  // Runs `n` messages of `len` bytes, keeping the send queue full, every 32nd signaled.
  [[gnu::noinline]] bool run(WrOpcode opc, uint32_t len, uint64_t n) {
    g_messages += n;
    Sge s{reinterpret_cast<uintptr_t>(a.buf()), len, a.mr->lkey};
    Sge rs{reinterpret_cast<uintptr_t>(b.buf()), len, b.mr->lkey};
    SendWr wr;
    wr.opcode = opc;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.remote_addr = reinterpret_cast<uintptr_t>(b.buf());
    wr.rkey = b.mr->rkey;
    RecvWr rw{0, &rs, 1};
    uint64_t posted = 0, done = 0, recv_posted = 0;
    Wc wc[64];
    const bool send = opc == WrOpcode::Send;
    while (done < n) {
      while (posted < n && posted - done < kDepth - 32) {
        if (send && recv_posted < posted + 1) {
          if (b.dev->post_recv(b.qp, rw) != 0) break;
          ++recv_posted;
        }
        wr.wr_id = posted;
        wr.send_flags = (posted % 32 == 31 || posted + 1 == n) ? uint32_t(kSendSignaled) : 0u;
        if (a.dev->post_send(a.qp, wr) != 0) break;
        ++posted;
      }
      a.dev->progress();
      b.dev->progress();
      for (int k; (k = a.dev->poll_cq(a.scq, 64, wc)) > 0;)
        for (int i = 0; i < k; ++i) {
          if (wc[i].status != WcStatus::Success) return false;
          if (wc[i].opcode == WcOpcode::RdmaWrite || wc[i].opcode == WcOpcode::Send) done = wc[i].wr_id + 1;
        }
      if (send)
        while (b.dev->poll_cq(b.scq, 64, wc) > 0) {
        }
    }
    return true;
  }
};

void run_bench(benchmark::State& state, WrOpcode opc) {
  const uint32_t len = uint32_t(state.range(0));
  Bench bn(std::max<size_t>(len, 4096));
  if (bn.pair.setup_error) {
    state.SkipWithError("the pair did not come up");
    return;
  }
  const uint64_t per_iter = len >= (1u << 20) ? 16 : 4096;
  bn.run(opc, len, 1000);  // warm up
  uint64_t msgs = 0;
  for (auto _ : state) {
    if (!bn.run(opc, len, per_iter)) {
      state.SkipWithError("error completion");
      break;
    }
    msgs += per_iter;
  }
  state.SetItemsProcessed(int64_t(msgs));
  state.SetBytesProcessed(int64_t(msgs * len));
  state.counters["msgs/s"] = benchmark::Counter(double(msgs), benchmark::Counter::kIsRate);
  state.counters["Gbit/s"] = benchmark::Counter(double(msgs) * len * 8 / 1e9, benchmark::Counter::kIsRate);
  const Counters c = bn.a.dev->counters();
  state.counters["frames/msg"] = double(c.sent_pkts + bn.b.dev->counters().sent_pkts) / double(msgs + 1000);
}

void BM_Write(benchmark::State& s) { run_bench(s, WrOpcode::RdmaWrite); }
void BM_Send(benchmark::State& s) { run_bench(s, WrOpcode::Send); }

void BM_Memcpy(benchmark::State& state) {
  const size_t len = size_t(state.range(0));
  std::vector<uint8_t> src(len, 1), dst(len);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), len);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(len));
  state.counters["Gbit/s"] = benchmark::Counter(double(state.iterations()) * len * 8 / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_Write)->Arg(64)->Arg(1 << 20)->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(BM_Send)->Arg(64)->Arg(1 << 20)->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(BM_Memcpy)->Arg(64)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::fprintf(stderr, "engine_bench: messages run: %llu\n", static_cast<unsigned long long>(g_messages));
  return 0;
}
