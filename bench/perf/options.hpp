// uroce-perf's command line: what to run (operation, mode, sizes, QPs, depths) and where.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace uroce::perf {

enum class Test { Write, Send, Read, Atomic };
enum class Mode { Bw, Lat };

struct Opts {
  Test test = Test::Write;
  Mode mode = Mode::Bw;
  uint64_t size = 0;          // 0: default for the mode
  uint64_t iters = 0;
  // Each size runs max(iters, bytes_per_size / size) messages, at most kMaxScaledIters (0: iters
  // for every size): small sizes get enough messages for a stable rate.
  uint64_t bytes_per_size = 0;
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
  double stagger_ms = 0;      // bw client: QP i starts posting i x this after the first
  std::string flow_log;       // bw client: each QP's rate per window and the bottleneck's queue (bench/perf/flows.hpp)
  uint32_t flow_ms = 10;      // --flow-log's window
  std::string flow_svg;       // with --flow-log: the rates and the queue drawn
};


inline constexpr uint64_t kMaxScaledIters = 2'000'000;

// The messages per QP for one size.
uint64_t iters_for(const Opts& o, uint64_t size);

// Parses the command line; prints the usage and exits 2 on a bad one.
Opts parse_args(int argc, char** argv);
// perftest's name of the test ("RDMA_Write", "Atomic FETCH_AND_ADD", ...).
const char* test_name(const Opts& o);

}  // namespace uroce::perf
