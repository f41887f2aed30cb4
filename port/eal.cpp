// DPDK's start-up for the port: the EAL (once per process, kept quiet unless asked), the
// packet capture framework, the registration of application threads as DPDK threads, the
// EAL's runtime directory, and a plain sleep.
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_pdump.h>

#include "port/dpdk_link_impl.hpp"

namespace uroce::port {

namespace {
bool eal_started = false;
bool pdump_started = false;

// DPDK 22.11's telemetry logs "TELEMETRY: No legacy callbacks, legacy socket not created" at
// WARNING on every start, into the application's own output. Nothing is wrong then: its log type
// is set to errors only, unless the EAL words name lib.telemetry themselves (words after ours
// win, so a config or --eal that asks for it gets it). uroce's telemetry socket is not affected.
constexpr const char* kQuietTelemetry = "--log-level=lib.telemetry:error";

bool names_telemetry_log(const std::vector<std::string>& words) {
  for (const std::string& w : words)
    if (w.find("lib.telemetry") != std::string::npos) return true;
  return false;
}
}  // namespace

bool detail::start_eal(const std::vector<std::string>& eal, const std::vector<std::string>& extra, std::string& err) {
  if (eal_started) return true;
  static std::vector<std::string> args;  // the EAL keeps pointers into argv
  static std::vector<char*> argv;
  args.clear();
  argv.clear();
  args.push_back("uroce");
  if (!names_telemetry_log(eal) && !names_telemetry_log(extra)) args.push_back(kQuietTelemetry);
  for (auto& a : eal) args.push_back(a);
  for (auto& a : extra) args.push_back(a);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (rte_eal_init(int(args.size()), argv.data()) < 0) {
    err = std::string("rte_eal_init: ") + rte_strerror(rte_errno);
    return false;
  }
  eal_started = true;
  return true;
}

// DPDK's packet capture framework, for dpdk-dumpcap (a secondary process that attaches to our
// hugepage memory and asks us for copies of the port's frames). Only a process with shared
// hugepage memory can have secondaries: not with --no-huge or --in-memory.
void detail::start_pdump() {
  if (!pdump_started && rte_eal_has_hugepages() && rte_eal_process_type() == RTE_PROC_PRIMARY)
    pdump_started = rte_pdump_init() == 0;
}

std::string DpdkLink::eal_runtime_dir() {
  const char* d = rte_eal_get_runtime_dir();
  return d ? d : "";
}


namespace {
// One per thread that called register_thread(): gives the lcore id back when the thread ends.
struct ThreadRegistration {
  bool tried = false, registered = false;
  ~ThreadRegistration() {
    if (registered) rte_thread_unregister();
  }
};
thread_local ThreadRegistration t_registration;
}  // namespace

bool DpdkLink::register_thread() {
  ThreadRegistration& t = t_registration;
  if (t.tried) return t.registered || rte_lcore_id() != LCORE_ID_ANY;
  t.tried = true;
  if (rte_lcore_id() != LCORE_ID_ANY) return true;  // an EAL thread already
  // A secondary of the uroce service: DPDK registers no threads there (it would say so on
  // stderr), and this process never takes mbufs from a pool (port/service/client.hpp).
  if (rte_eal_process_type() == RTE_PROC_SECONDARY) return false;
  t.registered = rte_thread_register() == 0;
  return t.registered;
}

}  // namespace uroce::port
