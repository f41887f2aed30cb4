// The progress policy (verbs_shim/progress.hpp): one progress step (Runtime::drive), the
// application's decisions inside its data-path calls (drive now? linger for the answer?), the
// polling thread's loop, the knobs from the environment and the statistics. Design and figures:
// docs/verbs_shim.md, "Progress: one ownership token; who turns the engine". Two calls drive on
// their own, outside this policy: ibv_wr_complete (cq.cpp's ibv_cq_ex polling likewise) always
// runs one progress().
#include "verbs_shim/progress.hpp"

#include <fcntl.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "verbs_shim/api.hpp"

namespace uroce::shim {

namespace E = uroce::engine;

void nap(uint64_t ns) {
  timespec ts{0, long(ns)};
  nanosleep(&ts, nullptr);
}

namespace {
// The poller's nap, which a bell ends early (ProgressPolicy::poller_bell).
void nap_or_bell(std::atomic<uint32_t>& bell, uint64_t ns) {
  timespec ts{time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell), FUTEX_WAIT_PRIVATE, 0u, &ts, nullptr, 0);
}
void ring(std::atomic<uint32_t>& bell) {
  if (bell.exchange(1, std::memory_order_release) == 0)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}
}  // namespace

// ---- One step, with the token held --------------------------------------------------------------

bool Runtime::drive() {
  // The thread about to touch the mempool: a DPDK thread with its own mbuf cache (without one,
  // every mbuf allocated and freed went through the pool's shared ring: 18% of ib_write_bw's
  // time at 64 B). One thread-local check per call after the first.
  static thread_local bool registered __attribute__((tls_model("initial-exec"))) = false;
  if (!registered) [[unlikely]] {
    port::DpdkLink::register_thread();
    registered = true;
  }
  policy.posted_undriven = 0;
  bool did = engine->progress();
  // Completions before connection events, as the frames came: a WRITE's ACK and the DREQ
  // after it in one step raise the CQ's channel first (rping's server waits for the WRITE's
  // completion; a DISCONNECTED seen first ends it with an error).
  if (!registry.armed.empty()) notify_channels(registry);
  if (cm_hook) cm_hook();
  if (!registry.contexts.empty()) {
    const uint64_t now = engine->last_step_ns();
    if (now >= registry.next_scan_ns) async_scan(*this, now);
  }
  return did;
}

// ---- Knobs and statistics -----------------------------------------------------------------------

void ProgressPolicy::configure(const std::string& cfg_mode) {
  std::string m = cfg_mode;
  if (const char* e = getenv("UROCE_PROGRESS"); e && *e) m = e;
  if (m == "inline") mode = Mode::Inline;
  else if (m == "dedicated") mode = Mode::Dedicated;
  else if (m != "thread") std::fprintf(stderr, "uroce-verbs: UROCE_PROGRESS=%s is not thread, inline or dedicated: using thread\n", m.c_str());
  if (const char* e = getenv("UROCE_SHIM_EAGER_POST")) eager_post = *e == '1';
  if (const char* e = getenv("UROCE_SHIM_APP_ACTIVE_NS")) app_active_ns = strtoull(e, nullptr, 0);
  if (const char* e = getenv("UROCE_SHIM_IDLE_SPIN_NS")) idle_spin_ns = strtoull(e, nullptr, 0);
  if (const char* e = getenv("UROCE_SHIM_LINGER_NS")) linger_ns = strtoull(e, nullptr, 0);
}

void ProgressPolicy::print_stats() const {
  std::fprintf(stderr, "\nuroce-verbs: poller drives %lu naps %lu, application drives %lu, lingers %lu (found nothing %lu; not needed %lu, skipped %lu), poller woken by a linger %lu\n",
               (unsigned long)poller_drives.load(), (unsigned long)poller_naps.load(),
               (unsigned long)app_drives.load(), (unsigned long)(linger_hits.load() + linger_missed),
               (unsigned long)linger_missed, (unsigned long)linger_answered, (unsigned long)linger_skipped,
               (unsigned long)bells.load());
}

// ---- The application's side (token held) --------------------------------------------------------

void ProgressPolicy::note_app(uint64_t now) {
  // initial-exec: no __tls_get_addr call per use (the shim is preloaded, so static TLS is there).
  static thread_local const int tid __attribute__((tls_model("initial-exec"))) = int(gettid());
  app_poll_ns.store(now, std::memory_order_relaxed);
  if (app_tid.load(std::memory_order_relaxed) != tid) app_tid.store(tid, std::memory_order_relaxed);
}

namespace {

// After a poll that returned only send-queue completions (or a post by an application that does
// not poll): a process that plays ping-pong (it received a request lately) and has had no
// request since its last post next waits for the peer's answer, often by spinning on memory
// (ib_write_lat), where no verbs call of its own would place it and the poller, napping beside
// a running application, would come 20 us late. So keep the engine turning until the next
// request arrives, up to linger_ns. A process whose lingers keep finding nothing (a bandwidth
// loop, a READ loop) stops lingering for a while; one whose lingers mostly find the answer (a
// ping-pong whose peer was descheduled now and then) goes on.
void linger(Runtime& r) {
  E::Device& d = *r.engine;
  ProgressPolicy& p = r.policy;
  const uint64_t start = d.last_step_ns();
  // The answer came already (a request since the last post), perhaps in the step that brought
  // the ACK; or this process has not been receiving requests.
  const uint64_t mark = p.linger_mark;
  if (d.requests_received() != mark) {
    ++p.linger_answered;
    return;
  }
  if (start < p.linger_off_until.load(std::memory_order_relaxed) || start - d.last_request_ns() > param::kShimLingerRecentNs) {
    ++p.linger_skipped;
    return;
  }
  while (d.requests_received() == mark) {
    if (d.last_step_ns() - start >= p.linger_ns) {
      ++p.linger_missed;
      if (p.linger_score < param::kShimLingerMissCost) {
        p.linger_score = 0;
        p.linger_off_until.store(start + param::kShimLingerBackoffNs, std::memory_order_relaxed);
      } else {
        p.linger_score -= param::kShimLingerMissCost;
      }
      // The answer is late and the application waits for it away from the verbs: the poller,
      // which a ping-pong sends to 1 ms naps, takes over now, not when its nap ends.
      p.bells.store(p.bells.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      ring(p.poller_bell);
      return;
    }
    r.drive();
    p.note_app(d.last_step_ns());  // still driving: the poller stays away
  }
  p.linger_hits.store(p.linger_hits.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  p.linger_score = std::min(p.linger_score + 1, param::kShimLingerScoreMax);
}

}  // namespace

void post_begin(Runtime& r) {
  r.policy.linger_mark = r.engine->requests_received();  // the answer to this post is a request after it
}

void posted(Runtime& r, uint64_t n) {
  ProgressPolicy& p = r.policy;
  p.count_ops(n);
  p.posted_undriven += uint32_t(n);
  // An application that is polling its CQ sends the frames with its next poll_cq (a progress()
  // per post would halve perftest's post-one/poll loops), or once kShimPostBurst WRs wait (a long
  // run of posts would otherwise leave the link idle: perftest posts 100 at a time); one that is
  // not polling (it waits on memory, as ib_write_lat does, or on a completion channel) gets them
  // sent now.
  const uint64_t now = r.now_ns();
  const bool polling = now - p.app_poll_ns.load(std::memory_order_relaxed) < p.app_active_ns;
  p.note_app(now);
  if (p.calls_drive() && (p.eager_post || !polling || p.posted_undriven >= param::kShimPostBurst)) {
    r.drive();
    // An application that posts without polling may spin on memory next for the answer.
    if (!polling && p.linger_ns) linger(r);
  }
}

void poll_begin(Runtime& r) {
  ProgressPolicy& p = r.policy;
  if (p.calls_drive()) {
    r.drive();
    p.note_app(r.engine->last_step_ns());  // the step's time: no second clock read
    p.app_drives.store(p.app_drives.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  } else {
    p.note_app(r.now_ns());
  }
}

void polled(Runtime& r, uint64_t n, bool recv) {
  if (!n) return;
  r.policy.count_ops(n);
  if (!recv && r.policy.linger_ns && r.policy.calls_drive()) linger(r);
}

void app_call(Runtime& r) { r.policy.note_app(r.now_ns()); }

// ---- The poller's side --------------------------------------------------------------------------

namespace {

// Would a spinning poller take a core from a busy thread? Yes if the application thread runs on
// the poller's core now (runnable, 'R' in /proc/self/task/TID/stat, and last on this CPU). Yes
// too if it runs elsewhere while the machine has no core to spare (more threads runnable than
// this process may use CPUs: /proc/loadavg's count, the poller included): the scheduler then put
// the poller beside another busy thread, as two ib_write_lat processes on two cores, each
// application spinning on memory, each poller spinning beside the other's application (runs of
// 10 to 30 round trips of 17 us; docs/performance.md, "Tail latency"). An application that is
// blocked (a perftest server waiting on TCP) leaves the poller to spin: it is the one that drives.
// Read at most every kShimAppStateCheckNs; false when no thread has used the data path.
class AppWatch {
 public:
  AppWatch() {  // at the poller's start: the process's descriptors do not change later
    cpu_set_t set;
    CPU_ZERO(&set);
    cpus_ = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    load_fd_ = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  }
  ~AppWatch() {
    if (fd_ >= 0) close(fd_);
    if (load_fd_ >= 0) close(load_fd_);
  }
  bool shares_core(const ProgressPolicy& p, uint64_t now) {
    if (now < next_ns_) return shares_;
    next_ns_ = now + param::kShimAppStateCheckNs;
    const int tid = p.app_tid.load(std::memory_order_relaxed);
    if (tid != tid_ && tid != 0) {
      if (fd_ >= 0) close(fd_);
      const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
      fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    }
    tid_ = tid;
    shares_ = false;
    // No application thread on the data path now: the last one's file stays open (read no more),
    // so the process's descriptors do not come and go with its threads' pauses (the stress and
    // soak programs count them).
    if (tid == 0) return shares_;
    char buf[1024];
    const ssize_t n = fd_ >= 0 ? pread(fd_, buf, sizeof buf - 1, 0) : -1;
    if (n <= 0) return shares_;
    buf[n] = 0;
    // "pid (comm) S ..." : field 3 is the state, field 39 the CPU it last ran on.
    const char* q0 = std::strrchr(buf, ')');
    if (!q0 || q0[1] != ' ') return shares_;
    const char state = q0[2];
    int field = 3;
    for (const char* q = q0 + 2; *q && field < 39; ++q)
      if (*q == ' ') {
        if (++field == 39) shares_ = state == 'R' && (std::atoi(q + 1) == sched_getcpu() || machine_full());
      }
    return shares_;
  }

 private:
  bool machine_full() const {
    char buf[128];
    const ssize_t n = load_fd_ >= 0 ? pread(load_fd_, buf, sizeof buf - 1, 0) : -1;
    if (n <= 0) return false;
    buf[n] = 0;
    // "0.52 0.58 0.59 3/412 12345": the first number of the fourth field is the runnable count.
    const char* q = buf;
    for (int field = 1; field < 4 && q; ++field) {
      q = std::strchr(q, ' ');
      if (q) ++q;
    }
    return q && std::atoi(q) > cpus_;
  }
  int tid_ = 0, fd_ = -1, load_fd_ = -1, cpus_ = 1;
  bool shares_ = false;
  uint64_t next_ns_ = 0;
};

// A statistic only the poller writes: no locked instruction per loop.
void bump(std::atomic<uint64_t>& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

}  // namespace

void poller_loop(Runtime& r) {
  ProgressPolicy& p = r.policy;
  prctl(PR_SET_TIMERSLACK, param::kShimPollerTimerSlackNs, 0, 0, 0);
  if (p.mode == ProgressPolicy::Mode::Inline) {
    // Only keep the port alive (ARP/ND, a passive peer's requests) when the application has made
    // no data-path call for a whole check interval.
    while (!r.stop.load(std::memory_order_relaxed)) {
      bump(p.poller_naps);
      nap(param::kShimInlineCheckNs);
      const uint64_t now = r.now_ns();
      if (now - p.app_poll_ns.load(std::memory_order_relaxed) < param::kShimInlineCheckNs) continue;
      r.token.lock();
      while (r.drive()) bump(p.poller_drives);
      bump(p.poller_drives);
      r.token.unlock();
    }
    return;
  }
  const bool dedicated = p.mode == ProgressPolicy::Mode::Dedicated;
  AppWatch watch;
  uint64_t last_work = r.now_ns();
  uint64_t wake_due = last_work;  // when the last nap should have ended
  uint32_t active_checks = 0;
  uint64_t ops_seen = p.app_ops.load(std::memory_order_relaxed);
  uint64_t hits_seen = p.linger_hits.load(std::memory_order_relaxed);
  // One nap of `ns`; remembers when it should end.
  auto sleep = [&](uint64_t now, uint64_t ns) {
    bump(p.poller_naps);
    wake_due = now + ns;
    nap_or_bell(p.poller_bell, ns);
  };
  while (!r.stop.load(std::memory_order_relaxed)) {
    const uint64_t now = r.now_ns();
    // A linger found nothing: drive now, whatever the application's calls say.
    const bool rung = p.poller_bell.exchange(0, std::memory_order_acquire) != 0;
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
    const uint64_t ops = p.app_ops.load(std::memory_order_relaxed);
    const bool called = ops - ops_seen >= param::kShimSteadyOps;
    ops_seen = ops;
    if (!dedicated && !rung &&
        (called || now - p.app_poll_ns.load(std::memory_order_relaxed) < p.app_active_ns + late)) {
      // After many such checks in a row with the application busy, check rarely; not while its
      // lingers back off (a ping-pong whose answers no verbs call of its own waits for: both
      // sides' pollers checking once a millisecond made each round trip a millisecond).
      active_checks = called && now >= p.linger_off_until.load(std::memory_order_relaxed) ? active_checks + 1 : 0;
      // A ping-pong whose lingers find their answers (ib_write_lat) needs no poller: check rarely
      // at once, not after kShimSteadyChecks checks. Its poller at 20 us naps woke on the
      // application's core 15,000 times a second and more, each wake-up a late round trip.
      const uint64_t hits = p.linger_hits.load(std::memory_order_relaxed);
      const bool pingpong = hits != hits_seen;  // a linger found its answer since the last look
      hits_seen = hits;
      sleep(now, active_checks > param::kShimSteadyChecks || pingpong ? param::kShimPollerSteadyNapNs
                                                                       : param::kShimPollerNapNs);
      continue;
    }
    wake_due = now;
    active_checks = 0;
    bool did = false;
    if (r.token.try_lock_idle()) {
      did = r.drive();
      r.token.unlock();
      bump(p.poller_drives);
    }
    if (did) {
      last_work = now;  // more may follow at once
    } else if (dedicated || (now - last_work < p.idle_spin_ns && !watch.shares_core(p, now))) {
      __builtin_ia32_pause();
    } else {
      sleep(now, now - last_work > param::kShimPollerLongIdleNs ? param::kShimPollerLongNapNs : param::kShimPollerNapNs);
    }
  }
}

}  // namespace uroce::shim
