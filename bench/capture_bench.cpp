// The CPU cost per frame of the port's capture (port/capture.cpp: a pcapng block into the
// buffer, the buffer to a file) and of its fault stage's decision (port/fault_stage.cpp), each
// alone, without DPDK: the share of uroce-perf's per-message cost they add (scripts/bench-capture.sh
// measures the whole). The capture writes to $UROCE_BENCH_CAPTURE (default /dev/shm: the file
// system's own cost is not the capture's).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "port/capture.hpp"
#include "port/fault_stage.hpp"

namespace {

// A 64-byte RC RDMA WRITE ONLY over IPv4 (138 bytes): what uroce-perf's 64 B run sends.
std::vector<uint8_t> write64() {
  std::vector<uint8_t> f(138, 0x5A);
  f[12] = 0x08, f[13] = 0x00, f[14] = 0x45, f[16] = 0, f[17] = 124, f[23] = 17;
  f[36] = 0x12, f[37] = 0xB7, f[42] = 0x0A;
  return f;
}

void BM_CaptureWrite(benchmark::State& st) {
  const char* dir = std::getenv("UROCE_BENCH_CAPTURE");
  const std::string path = std::string(dir ? dir : "/dev/shm") + "/uroce-capture-bench.pcapng";
  const std::vector<uint8_t> f = write64();
  uroce::port::Capture cap;
  uroce::port::CaptureOptions o;
  o.max_bytes = 1ull << 40;
  std::string err;
  if (!cap.open(path, o, err)) {
    st.SkipWithError(err.c_str());
    return;
  }
  for (auto _ : st) {
    cap.write(f.data(), uint32_t(f.size()), uroce::port::Capture::Dir::Out);
    cap.maybe_flush();
  }
  cap.close();
  std::remove(path.c_str());
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_CaptureWrite);

void BM_FaultDecide(benchmark::State& st) {
  std::vector<uint8_t> f = write64();
  uroce::port::FaultStage stage;
  uroce::engine::FaultConfig c;
  c.drop = 0.000001;
  stage.configure(c, 1, false);
  for (auto _ : st) benchmark::DoNotOptimize(stage.decide(f.data(), uint32_t(f.size())));
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_FaultDecide);

}  // namespace

BENCHMARK_MAIN();
