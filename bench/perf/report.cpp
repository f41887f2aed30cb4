#include "bench/perf/report.hpp"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>

#include "bench/perf/context.hpp"

namespace uroce::perf {

using engine::mtu_bytes;

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

void print_bw_row(uint64_t size, uint64_t iters, const BwResult& r) {
  std::printf(" %-10lu %-10lu       %-12.2f       %-12.2f         %-10.6f\n", (unsigned long)size,
              (unsigned long)iters, r.peak, r.avg, r.mpps);
  std::fflush(stdout);
}

void print_lat_row(uint64_t size, uint64_t iters, const LatResult& r) {
  std::printf(" %-6lu %-10lu   %-10.2f     %-10.2f   %-10.2f       %-10.2f     %-10.2f        %-10.2f             %-10.2f\n",
              (unsigned long)size, (unsigned long)iters, r.tmin, r.tmax, r.typical, r.avg, r.stdev, r.p99, r.p999);
  std::fflush(stdout);
}

void print_server_lat_row(uint64_t size, uint64_t iters) {
  std::printf(" %-6lu %-10lu  (results on the client)\n", (unsigned long)size, (unsigned long)iters);
  std::fflush(stdout);
}

void print_counters(const Ctx& c) {
  const engine::Counters ec = c.dev->counters();
  std::printf("link: %s\n", c.link->counters_text().c_str());
  std::printf("engine: tx_packets=%lu rx_packets=%lu retransmitted=%lu timeouts=%lu seq_naks_sent=%lu "
              "icrc_errors=%lu malformed=%lu dropped_not_for_us=%lu dropped_unknown_qp=%lu duplicates=%lu "
              "dropped_source=%lu dropped_pkey=%lu dropped_bad_state=%lu ghost_responses=%lu replayed_responses=%lu\n",
              (unsigned long)ec.tx_packets, (unsigned long)ec.rx_packets, (unsigned long)ec.retransmitted,
              (unsigned long)ec.timeouts, (unsigned long)ec.seq_naks_sent, (unsigned long)ec.icrc_errors,
              (unsigned long)ec.malformed, (unsigned long)ec.dropped_not_for_us,
              (unsigned long)ec.dropped_unknown_qp, (unsigned long)ec.duplicates, (unsigned long)ec.dropped_source,
              (unsigned long)ec.dropped_pkey, (unsigned long)ec.dropped_bad_state, (unsigned long)ec.ghost_responses,
              (unsigned long)ec.replayed_responses);
  std::printf("ecn: ce_rcvd=%lu cnp_sent=%lu cnp_rcvd=%lu\n", (unsigned long)ec.ecn_ce_rcvd,
              (unsigned long)ec.cnp_sent, (unsigned long)ec.cnp_rcvd);
}

}  // namespace uroce::perf
