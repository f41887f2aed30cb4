// uroce-perf's measurement loops for one message size: bandwidth (the client streams, the
// SEND server receives) and latency (ping-pong, or one-sided READ/atomic).
#pragma once
#include <string>
#include <cstdint>
#include <vector>

namespace uroce::perf {

struct Ctx;

struct BwResult {
  double peak = 0, avg = 0, mpps = 0;  // Gb/s, Gb/s, Mpps
  std::string flows;                   // --flow-log's summary line (bench/perf/flows.hpp), printed after the row
};
struct LatResult {
  double tmin, tmax, typical, avg, stdev, p99, p999;  // microseconds
};

// Bandwidth: the client keeps tx_depth operations outstanding per QP until iters completed.
BwResult run_bw_client(Ctx& c, uint64_t size);
// Server side of SEND bw: receives iters messages per QP, replenishing receives.
void run_send_server(Ctx& c, uint64_t size);

// Ping-pong (write, send) on QP 0; both sides run this. Returns round trips in cycles (client).
std::vector<uint64_t> run_pingpong(Ctx& c, uint64_t size);
// READ and atomic latency: the client issues one at a time; the server is passive.
std::vector<uint64_t> run_lat_oneside(Ctx& c, uint64_t size);
// Statistics of durations in cycles, in microseconds after dividing by `div`.
LatResult lat_stats(std::vector<uint64_t>& d, double hz, double div);

}  // namespace uroce::perf
