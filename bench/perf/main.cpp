// uroce-perf: a perftest-like benchmark and demo over the uroce engine on a DPDK link.
//
//   server: uroce-perf --config config/memif-server.conf --test write --mode bw -a
//   client: uroce-perf --config config/memif-client.conf --test write --mode bw -a 127.0.0.1
//
// One process per side; the application thread itself drives Device::progress() (one busy
// poller per process). Connection data (QPN, PSN, rkey, VA, GID, MAC) goes over TCP as in
// perftest; the peer's MAC for the address vector comes from ARP/ND on the DPDK link. Data is
// verified after every size (CRC of the target buffers, atomic results); any error completion
// or mismatch exits non-zero.
#include <rte_cycles.h>
#include <rte_eal.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "bench/perf/bringup.hpp"
#include "bench/perf/context.hpp"
#include "bench/perf/report.hpp"
#include "bench/perf/size.hpp"
#include "port/param.hpp"

namespace {

void on_alarm(int) {
  const char msg[] = "uroce-perf: timeout\n";
  ssize_t r = write(2, msg, sizeof msg - 1);
  (void)r;
  _exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace uroce::perf;
  Ctx c;
  c.o = parse_args(argc, argv);
  c.server = c.o.peer.empty();
  signal(SIGALRM, on_alarm);
  alarm(c.o.timeout_s);
  setup(c);
  std::printf("uroce-perf %s: %s\n", c.server ? "server" : "client", c.link->describe().c_str());
  connect_qps(c);
  print_header(c);
  std::vector<uint64_t> sizes;
  if (c.o.all) {
    for (uint64_t s = 2; s <= c.o.max_size; s *= 2) sizes.push_back(s);
  } else {
    sizes.push_back(c.o.size);
  }
  bool ok = true;
  const uint64_t base_iters = c.o.iters;
  for (uint64_t s : sizes) {
    c.o.iters = base_iters;
    c.o.iters = iters_for(c.o, s);  // both sides compute the same from the same options
    ok &= run_size(c, s);
  }
  // Say goodbye while both sides still poll, so final ACKs are not lost.
  Msg bye;
  bye.type = kBye;
  c.send_msg(bye);
  c.wait_msg(kBye);
  const uint64_t until = rte_get_tsc_cycles() + c.hz / 50;
  while (rte_get_tsc_cycles() < until) c.dev->progress();
  std::printf("---------------------------------------------------------------------------------------\n");
  if (c.o.stats) print_counters(c);
  std::printf("data verification: %s\n", ok ? "OK" : "FAILED");
  std::fflush(stdout);
  // Neither side polls from here on; only then may one close its port. memif's PMD unmaps
  // the shared rings when the peer disconnects, even under a running rte_eth_rx_burst()
  // (a SIGSEGV seen under load). The client closes first; the server waits for that
  // disconnect, and for the PMD's interrupt thread to finish it, before closing its own.
  Msg quiet;
  quiet.type = kQuiet;
  c.send_msg(quiet);
  for (;;) {
    Msg m;
    if (!c.tcp.recv_wait(&m, sizeof m, 5000)) break;  // the peer is gone (or hung): go on
    if (m.type == kQuiet) break;
  }
  if (c.server) c.link->await_peer_close(uroce::param::kMemifCloseWaitMs);
  close(c.tcp.fd);
  for (auto& x : c.q) c.dev->destroy_qp(x.qp);
  c.ep.reset();
  rte_eal_cleanup();
  return ok ? 0 : 1;
}
