// The engine's own ceiling: two engines joined by the FakeLink, polled on one core, real
// RoCEv2 frames (build, ICRC, parse, ICRC check) in both directions. 64 B and 1 MiB RDMA
// WRITE and SEND, as messages per second and Gbit/s, next to memcpy of the same bytes.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/engine.hpp"
#include "tests/support/fake_link.hpp"

using namespace uroce::engine;

namespace {

// Messages run by Bench::run over the whole program (warm-ups included), printed at exit: the
// denominator of scripts/profile-engine.sh (callgrind collects inside Bench::run only).
uint64_t g_messages = 0;

struct Side {
  std::unique_ptr<Device> dev;
  Pd* pd;
  Cq* cq;
  Qp* qp;
  std::vector<uint8_t> mem;
  Mr* mr;
};

struct Bench {
  FakeWire wire{8192, 4352, 1};
  Side a, b;
  static constexpr uint32_t kDepth = 256;

  explicit Bench(size_t mem) {
    wire.latency_ns = 0;  // deliverable at once: the bench measures CPU, not a wire
    Device::Config ca, cb;
    ca.mac = {2, 0, 0, 0, 0, 0xa};
    cb.mac = {2, 0, 0, 0, 0, 0xb};
    ca.gid[10] = ca.gid[11] = cb.gid[10] = cb.gid[11] = 0xff;
    ca.gid[12] = cb.gid[12] = 198, ca.gid[13] = cb.gid[13] = 18, ca.gid[15] = 10, cb.gid[15] = 11;
    a.dev = std::make_unique<Device>(wire.a(), wire.clock(), ca);
    b.dev = std::make_unique<Device>(wire.b(), wire.clock(), cb);
    for (Side* s : {&a, &b}) {
      s->pd = s->dev->alloc_pd();
      s->cq = s->dev->create_cq(4 * kDepth);
      s->mem.assign(mem, 1);
      s->mr = s->dev->reg_mr(s->pd, s->mem.data(), mem, kLocalWrite | kRemoteWrite | kRemoteRead);
      QpInitAttr ia;
      ia.pd = s->pd;
      ia.send_cq = ia.recv_cq = s->cq;
      ia.cap.max_send_wr = kDepth;
      ia.cap.max_recv_wr = kDepth;
      s->qp = s->dev->create_qp(ia);
    }
    connect(a, b);
    connect(b, a);
  }
  void connect(Side& s, Side& peer) {
    QpAttr at;
    at.qp_state = QpState::Init;
    at.qp_access_flags = kRemoteWrite | kRemoteRead;
    s.dev->modify_qp(s.qp, at, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags);
    at.qp_state = QpState::Rtr;
    at.path_mtu = Mtu::M4096;
    at.dest_qp_num = peer.qp->qpn();
    at.rq_psn = 0;
    at.max_dest_rd_atomic = 1;
    at.min_rnr_timer = 1;
    at.ah_attr.dgid = peer.dev->config().gid;
    at.ah_attr.dmac = peer.dev->config().mac;
    s.dev->modify_qp(s.qp, at,
                     kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic |
                         kAttrMinRnrTimer);
    at.qp_state = QpState::Rts;
    at.sq_psn = 0;
    s.dev->modify_qp(s.qp, at, kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic);
  }

  // Runs `n` messages of `len` bytes, keeping the send queue full, every 32nd signaled.
  [[gnu::noinline]] bool run(WrOpcode opc, uint32_t len, uint64_t n) {
    g_messages += n;
    Sge s{reinterpret_cast<uintptr_t>(a.mem.data()), len, a.mr->lkey};
    Sge rs{reinterpret_cast<uintptr_t>(b.mem.data()), len, b.mr->lkey};
    SendWr wr;
    wr.opcode = opc;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.remote_addr = reinterpret_cast<uintptr_t>(b.mem.data());
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
      for (int k; (k = a.dev->poll_cq(a.cq, 64, wc)) > 0;)
        for (int i = 0; i < k; ++i) {
          if (wc[i].status != WcStatus::Success) return false;
          if (wc[i].opcode == WcOpcode::RdmaWrite || wc[i].opcode == WcOpcode::Send) done = wc[i].wr_id + 1;
        }
      if (send)
        while (b.dev->poll_cq(b.cq, 64, wc) > 0) {
        }
    }
    return true;
  }
};

void run_bench(benchmark::State& state, WrOpcode opc) {
  const uint32_t len = uint32_t(state.range(0));
  Bench bn(std::max<size_t>(len, 4096));
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
