// The shim's runtime: the configuration, start-up of the EAL, the port and the engine (on the
// polling thread), the polling loop, the ownership token's progress step, and shutdown at exit.
// Progress design: verbs_shim/runtime.hpp and docs/verbs_shim.md.
#include "verbs_shim/runtime.hpp"

#include <execinfo.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>

#include "engine/cm.hpp"
#include "verbs_shim/objects.hpp"

namespace uroce::shim {

namespace E = uroce::engine;

Runtime& rt() {
  static Runtime* r = new Runtime;  // never destroyed: the poller may outlive static destructors
  return *r;
}

void nap(uint64_t ns) {
  timespec ts{0, long(ns)};
  nanosleep(&ts, nullptr);
}

void Runtime::note_app(uint64_t now) {
  // initial-exec: no __tls_get_addr call per use (the shim is preloaded, so static TLS is there).
  static thread_local const int tid __attribute__((tls_model("initial-exec"))) = int(gettid());
  app_poll_ns.store(now, std::memory_order_relaxed);
  if (app_tid.load(std::memory_order_relaxed) != tid) app_tid.store(tid, std::memory_order_relaxed);
}

// With the token held.
bool Runtime::drive() {
  // The thread about to touch the mempool: a DPDK thread with its own mbuf cache (without one,
  // every mbuf allocated and freed went through the pool's shared ring: 18% of ib_write_bw's
  // time at 64 B). One thread-local check per call after the first.
  static thread_local bool registered __attribute__((tls_model("initial-exec"))) = false;
  if (!registered) [[unlikely]] {
    port::DpdkLink::register_thread();
    registered = true;
  }
  posted_undriven = 0;
  bool did = engine->progress();
  if (cm_hook) cm_hook();
  for (size_t i = 0; i < armed.size();) {
    UCq* c = armed[i];
    if (c->e->completions_pushed() != c->armed_at) {
      c->armed = false;
      c->events.fetch_add(1, std::memory_order_relaxed);
      ssize_t k = write(c->ch->wfd, &c, sizeof c);
      (void)k;
      armed[i] = armed.back();
      armed.pop_back();
    } else {
      ++i;
    }
  }
  if (!contexts.empty()) {
    const uint64_t now = engine->last_step_ns();
    if (now >= next_scan_ns) async_scan(*this, now);
  }
  return did;
}

namespace {

std::mutex g_init_mu;

// The GID table the application sees is the engine's (port::DpdkLink::gids(): 0 link-local,
// 1 IPv4-mapped, 2.. each configured IPv6 address); a zero entry is not valid.
void build_gid_table(Runtime& r) {
  r.gids = r.engine->config().gids;
  r.gid_valid.assign(r.gids.size(), false);
  for (size_t i = 0; i < r.gids.size(); ++i) r.gid_valid[i] = r.engine->sgid(uint32_t(i)) != nullptr;
  device_view_gids(r);
}

// Does the application thread run on the poller's core now? It has, if it is runnable ('R' in
// /proc/self/task/TID/stat) and was last on this CPU: then a spinning poller takes the core from
// it. Read at most every kShimAppStateCheckNs; false when no thread has used the data path.
class AppWatch {
 public:
  ~AppWatch() {
    if (fd_ >= 0) close(fd_);
  }
  bool shares_core(const Runtime& r, uint64_t now) {
    if (now < next_ns_) return shares_;
    next_ns_ = now + param::kShimAppStateCheckNs;
    const int tid = r.app_tid.load(std::memory_order_relaxed);
    if (tid != tid_) {
      if (fd_ >= 0) close(fd_);
      const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
      fd_ = tid ? open(path.c_str(), O_RDONLY | O_CLOEXEC) : -1;
      tid_ = tid;
    }
    shares_ = false;
    char buf[1024];
    const ssize_t n = fd_ >= 0 ? pread(fd_, buf, sizeof buf - 1, 0) : -1;
    if (n <= 0) return shares_;
    buf[n] = 0;
    // "pid (comm) S ..." : field 3 is the state, field 39 the CPU it last ran on.
    const char* p = std::strrchr(buf, ')');
    if (!p || p[1] != ' ') return shares_;
    const char state = p[2];
    int field = 3;
    for (const char* q = p + 2; *q && field < 39; ++q)
      if (*q == ' ') {
        if (++field == 39) shares_ = state == 'R' && std::atoi(q + 1) == sched_getcpu();
      }
    return shares_;
  }

 private:
  int tid_ = 0, fd_ = -1;
  bool shares_ = false;
  uint64_t next_ns_ = 0;
};

// A statistic only the poller writes: no locked instruction per loop.
void bump(std::atomic<uint64_t>& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

void poller_loop(Runtime& r) {
  prctl(PR_SET_TIMERSLACK, param::kShimPollerTimerSlackNs, 0, 0, 0);
  if (r.progress == Runtime::Progress::Inline) {
    // Only keep the port alive (ARP/ND, a passive peer's requests) when the application has made
    // no data-path call for a whole check interval.
    while (!r.stop.load(std::memory_order_relaxed)) {
      bump(r.poller_naps);
      nap(param::kShimInlineCheckNs);
      const uint64_t now = r.now_ns();
      if (now - r.app_poll_ns.load(std::memory_order_relaxed) < param::kShimInlineCheckNs) continue;
      r.lock();
      while (r.drive()) bump(r.poller_drives);
      bump(r.poller_drives);
      r.unlock();
    }
    return;
  }
  const bool dedicated = r.progress == Runtime::Progress::Dedicated;
  AppWatch watch;
  uint64_t last_work = r.now_ns();
  uint64_t wake_due = last_work;  // when the last nap should have ended
  uint32_t active_checks = 0;
  uint64_t ops_seen = r.app_ops.load(std::memory_order_relaxed);
  // One nap of `ns`; remembers when it should end.
  auto sleep = [&](uint64_t now, uint64_t ns) {
    bump(r.poller_naps);
    wake_due = now + ns;
    nap(ns);
  };
  while (!r.stop.load(std::memory_order_relaxed)) {
    const uint64_t now = r.now_ns();
    // The application drives if it made a data-path call within app_active_ns, counted from
    // when this nap should have ended: the time a late wake-up took is time in which the
    // application thread may have been preempted by it, not time it spent away. At most
    // kShimWakeSlackNs of it: a wake-up that came very late (the application kept the core) says
    // nothing of what the application did, and taking it for activity kept the poller napping
    // while ib_write_lat spun on memory for a scheduler tick (4 ms) per round trip.
    // It also drives if it made data-path calls since the last look: on a shared core the
    // poller's own wake-up preempts it, so its last call can look older than it is (a poller that
    // took that for absence drove and napped at 20 us forever, taking a third of ib_write_bw's
    // 64 B rate from the application it shared the core with).
    const uint64_t late = std::min(now > wake_due ? now - wake_due : 0, param::kShimWakeSlackNs);
    const uint64_t ops = r.app_ops.load(std::memory_order_relaxed);
    const bool called = ops - ops_seen >= param::kShimSteadyOps;
    ops_seen = ops;
    if (!dedicated && (called || now - r.app_poll_ns.load(std::memory_order_relaxed) < r.app_active_ns + late)) {
      // After many such checks in a row with the application busy, check rarely; not while its
      // lingers back off (a ping-pong whose answers no verbs call of its own waits for: both
      // sides' pollers checking once a millisecond made each round trip a millisecond).
      active_checks = called && now >= r.linger_off_until.load(std::memory_order_relaxed) ? active_checks + 1 : 0;
      sleep(now, active_checks > param::kShimSteadyChecks ? param::kShimPollerSteadyNapNs : param::kShimPollerNapNs);
      continue;
    }
    wake_due = now;
    active_checks = 0;
    bool did = false;
    if (r.waiters.load(std::memory_order_relaxed) == 0 && !r.owner.exchange(true, std::memory_order_acquire)) {
      did = r.drive();
      r.unlock();
      bump(r.poller_drives);
    }
    if (did) {
      last_work = now;  // more may follow at once
    } else if (dedicated || (now - last_work < r.idle_spin_ns && !watch.shares_core(r, now))) {
      __builtin_ia32_pause();
    } else {
      sleep(now, now - last_work > param::kShimPollerLongIdleNs ? param::kShimPollerLongNapNs : param::kShimPollerNapNs);
    }
  }
}

void poller_main(std::promise<bool>* ready) {
  Runtime& r = rt();
  port::EndpointConfig cfg = r.cfg;
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
  build_gid_table(r);
  ready->set_value(true);
  poller_loop(r);
  // Process exit: the port and the EAL are left to the process teardown. Closing the port here
  // (closing the DPDK device) races with the EAL interrupt thread handling the peer's memif disconnect
  // and crashed in the memif PMD; sockets (af_packet, memif's abstract socket) close with the
  // process anyway. Only the runtime directory is removed.
  r.lock();
  std::string dir = port::DpdkLink::runtime_dir();
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
  cm_leave(r);  // with or without a polling thread (progress = inline has none)
  if (!r.poller.joinable()) return;
  if (getenv("UROCE_SHIM_STATS"))
    std::fprintf(stderr, "\nuroce-verbs: poller drives %lu naps %lu, application drives %lu, lingers %lu (found nothing %lu; not needed %lu, skipped %lu)\n",
                 (unsigned long)r.poller_drives.load(), (unsigned long)r.poller_naps.load(),
                 (unsigned long)r.app_drives.load(), (unsigned long)(r.linger_hits.load() + r.linger_missed),
                 (unsigned long)r.linger_missed, (unsigned long)r.linger_answered, (unsigned long)r.linger_skipped);
  r.stop = true;
  r.poller.join();
  if (r.link) r.link->flush_capture();  // the link is never closed: its capture buffer goes out here
  if (getenv("UROCE_SHIM_STATS") && r.engine) {
    std::fprintf(stderr, "uroce-verbs: engine %s\n", r.engine->counters().text().c_str());
    std::fprintf(stderr, "uroce-verbs: link %s\n", r.link->counters_text().c_str());
  }
  // Nothing here polls any more; on memif, give the peer (bounded) time to stop polling and
  // leave first, so that our exit cannot pull its rings from under it.
  if (r.link) r.link->await_peer_close(param::kShimPeerLeaveWaitMs);
}

}  // namespace

bool load_cfg() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> g(g_init_mu);
  if (r.cfg_tried) return r.cfg_ok;
  r.cfg_tried = true;
  const char* env = getenv("UROCE_CONFIG");
  // $UROCE_CONFIG, else ./config/uroce.conf (a source tree), else the installed default.
  std::string path = env && *env ? env : "config/uroce.conf";
  if (!(env && *env) && access(path.c_str(), F_OK) != 0) path = UROCE_SYSCONFDIR "/uroce/uroce.conf";
  auto c = port::load_config(path, r.cfg_err);
  if (!c) {
    std::fprintf(stderr, "uroce-verbs: no uroce device: %s (set UROCE_CONFIG=FILE)\n", r.cfg_err.c_str());
    return false;
  }
  // UROCE_CAPTURE, UROCE_FAULT_DROP, ...: the capture and fault keys from the environment.
  if (!port::apply_env(*c, getenv, r.cfg_err)) {
    std::fprintf(stderr, "uroce-verbs: no uroce device: %s\n", r.cfg_err.c_str());
    return false;
  }
  r.cfg = *c;
  ibv_device& d = r.dev;
  d.node_type = IBV_NODE_CA;
  d.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(d.name, sizeof d.name, "%s", r.cfg.name.c_str());
  std::snprintf(d.dev_name, sizeof d.dev_name, "uverbs-%s", r.cfg.name.c_str());
  std::snprintf(d.dev_path, sizeof d.dev_path, "/sys/class/infiniband_verbs/uverbs-%s", r.cfg.name.c_str());
  std::snprintf(d.ibdev_path, sizeof d.ibdev_path, "/sys/class/infiniband/%s", r.cfg.name.c_str());
  r.cfg_ok = true;
  device_view_node(r);
  return true;
}

bool start_runtime() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> g(g_init_mu);
  if (r.started) return true;
  if (!r.start_err.empty()) return false;
  // The poller reads these from its start.
  std::string mode = r.cfg.progress;
  if (const char* e = getenv("UROCE_PROGRESS"); e && *e) mode = e;
  if (mode == "inline") r.progress = Runtime::Progress::Inline;
  else if (mode == "dedicated") r.progress = Runtime::Progress::Dedicated;
  else if (mode != "thread") std::fprintf(stderr, "uroce-verbs: UROCE_PROGRESS=%s is not thread, inline or dedicated: using thread\n", mode.c_str());
  if (const char* e = getenv("UROCE_SHIM_EAGER_POST")) r.eager_post = *e == '1';
  if (const char* e = getenv("UROCE_SHIM_APP_ACTIVE_NS")) r.app_active_ns = strtoull(e, nullptr, 0);
  if (const char* e = getenv("UROCE_SHIM_IDLE_SPIN_NS")) r.idle_spin_ns = strtoull(e, nullptr, 0);
  if (const char* e = getenv("UROCE_SHIM_LINGER_NS")) r.linger_ns = strtoull(e, nullptr, 0);
  std::promise<bool> ready;
  auto fut = ready.get_future();
  r.poller = std::thread(poller_main, &ready);
  if (!fut.get()) {
    r.poller.join();
    std::fprintf(stderr, "uroce-verbs: cannot open %s (%s): %s\n", r.cfg.name.c_str(), r.cfg.file.c_str(),
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
