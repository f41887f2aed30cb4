// uroced: the uroce service (docs/service.md). Owns one device's link and shares it with every
// process on the host that opens the device (the verbs shim, uroce-perf attach to it by the
// device's name): port/service/daemon.hpp.
//
//   uroced --config FILE     the device of a uroce config file (memif, af_packet, a PCI NIC, a netdev)
//   uroced --netdev IFACE    the host's interface IFACE beside the kernel, device uroce_IFACE (the
//                            same two-line config uroce-run --netdev writes)
//   --group G                processes of group G (a name or a number) may attach too, besides
//                            root and uroced's user (config key service_group; docs/service.md)
// Runs in the foreground until SIGINT or SIGTERM; "uroced: serving" on stdout says it is ready.
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "port/config.hpp"
#include "port/service/daemon.hpp"

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

int usage() {
  std::fprintf(stderr, "usage: uroced --config FILE | --netdev IFACE [--group G]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, netdev, group;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) config = argv[++i];
    else if (a == "--netdev" && i + 1 < argc) netdev = argv[++i];
    else if (a == "--group" && i + 1 < argc) group = argv[++i];
    else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else return usage();
  }
  if (config.empty() == netdev.empty()) return usage();
  if (!netdev.empty()) {
    if (netdev.find('/') != std::string::npos || netdev.size() >= 16) return usage();
    const char* tmp = std::getenv("TMPDIR");
    config = std::string(tmp && *tmp ? tmp : "/tmp") + "/uroce-netdev-" + netdev + ".conf";
    const std::string part = config + "." + std::to_string(getpid());
    std::ofstream(part) << "# written by uroced --netdev " << netdev << "\nname = uroce_" << netdev
                        << "\nnetdev = " << netdev << "\n";
    if (std::rename(part.c_str(), config.c_str()) != 0) {
      std::fprintf(stderr, "uroced: cannot write %s\n", config.c_str());
      return 1;
    }
  }
  std::string err;
  auto cfg = uroce::port::load_config(config, err);
  if (!cfg) {
    std::fprintf(stderr, "uroced: %s\n", err.c_str());
    return 1;
  }
  cfg->service = "off";  // the daemon's link is its own
  if (!group.empty()) cfg->service_group = group;
  auto d = uroce::port::service::Daemon::open(*cfg, err);
  if (!d) {
    std::fprintf(stderr, "uroced: %s: %s\n", cfg->name.c_str(), err.c_str());
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // The data path (this thread, which runs the loop) ahead of the programs' busy pollers
  // (param.hpp, kServiceRtPriority), where the daemon alone polls the port. Only this thread: the
  // EAL's own threads stay as they are.
  std::string sched = "the fair scheduler";
  if (cfg->service_rt_priority > 0 && d->polls_alone()) {
    sched_param sp{};
    sp.sched_priority = int(cfg->service_rt_priority);
    if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0)
      sched = "SCHED_FIFO " + std::to_string(cfg->service_rt_priority);
    else
      std::fprintf(stderr, "uroced: cannot run the data path at SCHED_FIFO %u (needs CAP_SYS_NICE): with more busy "
                           "threads than cores it may wait for the CPU long enough for QPs to time out "
                           "(docs/service.md, Scheduling)\n", cfg->service_rt_priority);
  }
  std::printf("uroced: serving %s on %s; data path: %s\n", cfg->name.c_str(), d->link().describe().c_str(), sched.c_str());
  std::fflush(stdout);
  d->run(g_stop);
  const auto& c = d->counters();
  // The daemon's own moves; those of processes that drove the port are counted in theirs.
  std::printf("uroced: stopped (%lu attached, %lu detached, %lu DREQs sent and %lu buffers taken back for them, %lu DREQs that could not be sent; frames delivered %lu, looped %lu, sent %lu, "
              "for nobody %lu, ring full %lu; taken from drivers %lu, drivers that died holding the port %lu; "
              "the port received %lu; longest pause %.1f ms; pool %lu buffers, fewest free %lu, fill rings left short %lu)\n",
              (unsigned long)c.attached, (unsigned long)c.detached, (unsigned long)c.wills_sent, (unsigned long)c.reclaimed, (unsigned long)c.wills_lost, (unsigned long)c.delivered,
              (unsigned long)c.looped, (unsigned long)c.sent, (unsigned long)c.no_owner, (unsigned long)c.ring_full,
              (unsigned long)c.from_drivers, (unsigned long)c.driver_deaths,
              (unsigned long)d->port_received(), double(c.longest_pause_ns) / 1e6, (unsigned long)c.pool_size,
              (unsigned long)(c.pool_low == UINT64_MAX ? c.pool_size : c.pool_low),
              (unsigned long)d->driving()->fill_short.load());
  return 0;
}
