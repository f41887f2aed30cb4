// The shim's runtime (verbs_shim/runtime.hpp): start-up of the EAL, the port and the engine on
// the polling thread, and shutdown at exit (the CM's goodbye, the poller stopped, the statistics,
// the memif peer's leave). The poller's loop and the progress step: verbs_shim/progress.cpp.
#include "verbs_shim/runtime.hpp"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "engine/cm.hpp"
#include "verbs_shim/api.hpp"

namespace uroce::shim {

Runtime& rt() {
  static Runtime* r = new Runtime;  // never destroyed: the poller may outlive static destructors
  return *r;
}

Token& token() { return rt().token; }

namespace {

std::mutex g_init_mu;

void poller_main(std::promise<bool>* ready) {
  Runtime& r = rt();
  port::EndpointConfig cfg = r.identity.cfg;
  // A unique --file-prefix per process, whatever the config says.
  std::vector<std::string> eal;
  for (size_t i = 0; i < cfg.eal.size(); ++i) {
    if (cfg.eal[i] == "--file-prefix") {
      ++i;
      continue;
    }
    if (cfg.eal[i].rfind("--file-prefix=", 0) == 0) continue;
    eal.push_back(cfg.eal[i]);
  }
  eal.push_back("--file-prefix=uroce-shim-" + std::to_string(getpid()));
  cfg.eal = eal;
  r.ep = port::Endpoint::open(cfg, r.start_err, r.dcfg);
  if (!r.ep) {
    ready->set_value(false);
    return;
  }
  r.link = &r.ep->link();
  r.engine = &r.ep->device();
  r.dcfg = r.engine->config();
  build_gid_table(r.identity, *r.engine);
  ready->set_value(true);
  poller_loop(r);
  // Process exit: the port and the EAL are left to the process teardown. Closing the port here
  // (closing the DPDK device) races with the EAL interrupt thread handling the peer's memif disconnect
  // and crashed in the memif PMD; sockets (af_packet, memif's abstract socket) close with the
  // process anyway. Only the runtime directory is removed.
  r.token.lock();
  std::string dir = r.link->runtime_dir();
  std::error_code ec;
  if (dir.find("uroce-shim-") != std::string::npos) std::filesystem::remove_all(dir, ec);
}

void segv_handler(int sig) {
  void* bt[param::kShimBacktraceDepth];
  int n = backtrace(bt, param::kShimBacktraceDepth);
  char msg[64];
  int k = std::snprintf(msg, sizeof msg, "uroce-verbs: signal %d, thread %ld\n", sig, long(gettid()));
  ssize_t w = write(2, msg, size_t(k));
  (void)w;
  backtrace_symbols_fd(bt, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

// The connection manager's goodbye (liburoce-rdmacm's connections): the kernel ends the ids of a
// process that exits, and a peer waiting on one of ours would otherwise resend its DREQ into
// silence. DREQs (and DREPs, REJs) go out now; the DREPs are waited for a bounded moment.
void cm_leave(Runtime& r) {
  if (!r.engine || !r.engine->cm()) return;
  Guard g;
  r.cm_hook = nullptr;  // the library's ids are not touched any more: its events stay queued
  r.engine->cm()->shutdown();
  const uint64_t end = r.engine->now_ns() + param::kShimCmLeaveWaitNs;
  do r.drive();  // out go the MADs; then the DREPs come back
  while (r.engine->cm()->disconnecting() && r.engine->now_ns() < end);
}

// Registered with atexit when the runtime starts, so it runs before the shared libraries' own
// destructors (DPDK's among them, in _dl_fini): the poller must stop before the PMDs go away.
void shim_fini() {
  Runtime& r = rt();
  if (!r.started) return;
  {
    Guard g;  // the registry's lists are the token's
    for (UQp* q : r.registry.qps) send_posted(r, q->e);  // datagrams posted just before exit go out
  }
  cm_leave(r);  // with or without a polling thread (progress = inline has none)
  if (!r.poller.joinable()) {
    if (r.link) r.link->release_netdev();
    return;
  }
  if (getenv("UROCE_SHIM_STATS")) r.policy.print_stats();
  r.stop = true;
  r.poller.join();
  if (r.link) r.link->flush_capture();  // the link is never closed: its capture buffer goes out here
  if (r.link) r.link->release_netdev();  // and a netdev's frames go back to the kernel
  if (getenv("UROCE_SHIM_STATS") && r.engine) {
    std::fprintf(stderr, "uroce-verbs: engine %s\n", r.engine->counters().text().c_str());
    std::fprintf(stderr, "uroce-verbs: link %s\n", r.link->counters_text().c_str());
  }
  // Nothing here polls any more; on memif, give the peer (bounded) time to stop polling and
  // leave first, so that our exit cannot pull its rings from under it.
  if (r.link) r.link->await_peer_close(param::kShimPeerLeaveWaitMs);
}

}  // namespace

bool start_runtime() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> g(g_init_mu);
  if (r.started) return true;
  if (!r.start_err.empty()) return false;
  r.policy.configure(r.identity.cfg.progress);  // the poller reads it from its start
  std::promise<bool> ready;
  auto fut = ready.get_future();
  r.poller = std::thread(poller_main, &ready);
  if (!fut.get()) {
    r.poller.join();
    std::fprintf(stderr, "uroce-verbs: cannot open %s (%s): %s\n", r.identity.cfg.name.c_str(), r.identity.cfg.file.c_str(),
                  r.start_err.c_str());
    if (r.start_err.empty()) r.start_err = "failed";
    return false;
  }
  r.started = true;
  if (getenv("UROCE_SHIM_DEBUG")) signal(SIGSEGV, segv_handler);
  atexit(shim_fini);
  return true;
}

}  // namespace uroce::shim
