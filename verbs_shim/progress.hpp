// The progress policy: who turns the engine (Device::progress()) and when. Its state, its knobs
// (read from the environment at start-up), its statistics, and every decision of it, the
// application's and the poller's, in one file: verbs_shim/progress.cpp. docs/verbs_shim.md,
// "Progress: one ownership token; who turns the engine".
//
// The engine is single-threaded and turned by whoever holds the token (verbs_shim/token.hpp).
// The config's `progress` key (or UROCE_PROGRESS) chooses who that is:
//   thread (default): the application thread inside ibv_poll_cq / ibv_post_send (one
//     Device::progress() per call); the polling thread only while the application is away from
//     the data path (it spins on memory, as ib_write_lat does, or waits on a completion channel
//     or a socket). The poller sleeps while the application drives, and checks rarely once the
//     application has driven at many checks in a row, because each of its wake-ups costs the
//     thread it preempts (only while the application is busy: it posts or completes work at a
//     good rate; an application polling for an answer that needs the peer is not). After work
//     it spins only when it has its core to itself (the application thread is blocked or runs on
//     another core); sharing a core with a running application it naps at once. So a process
//     never has two busy threads on one core.
//   inline: the application's verbs calls; the poller only after a millisecond without one.
//   dedicated: the polling thread drives all the time and never sleeps; verbs calls only post
//     and take completions. For a spare core per process.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "verbs_shim/param.hpp"

namespace uroce::shim {

struct Runtime;

struct ProgressPolicy {
  enum class Mode { Thread, Inline, Dedicated };
  Mode mode = Mode::Thread;

  // Knobs for measurements, read by configure() before the poller starts.
  uint64_t app_active_ns = param::kShimAppActiveNs;   // UROCE_SHIM_APP_ACTIVE_NS
  uint64_t idle_spin_ns = param::kShimIdleSpinNs;     // UROCE_SHIM_IDLE_SPIN_NS
  bool eager_post = false;   // post_send runs progress() itself (UROCE_SHIM_EAGER_POST=1)
  uint64_t linger_ns = param::kShimLingerNs;          // UROCE_SHIM_LINGER_NS (0: never linger)

  // What the application does, written by its data-path calls and read by the poller.
  std::atomic<uint64_t> app_poll_ns{0}; // the application's last data-path call (engine clock)
  std::atomic<int> app_tid{0};          // the thread that made it
  std::atomic<uint64_t> app_ops{0};     // WRs posted and completions taken (approximate count)

  // Under the token.
  uint32_t posted_undriven = 0;  // WRs posted since the last drive()
  uint32_t linger_score = param::kShimLingerScoreStart;   // +1 per linger that found the answer, -kShimLingerMissCost per miss
  std::atomic<uint64_t> linger_off_until{0};  // lingers back off until then (the poller reads it)
  uint64_t linger_mark = 0;    // requests received at the last ibv_post_send
  // Rung by a linger that found nothing (the answer is late; the application goes back to
  // spinning on memory): the poller, perhaps in a 1 ms nap, wakes and drives at once. A futex
  // word: 1 rung, 0 not.
  std::atomic<uint32_t> poller_bell{0};

  // Statistics (UROCE_SHIM_STATS=1 prints them at exit: print_stats).
  std::atomic<uint64_t> poller_drives{0}, poller_naps{0}, app_drives{0};
  std::atomic<uint64_t> linger_hits{0};   // written under the token, read by the poller
  uint64_t linger_missed = 0;             // under the token
  uint64_t linger_answered = 0;           // no linger: the answer had come
  uint64_t linger_skipped = 0;            // no linger: backing off, or no requests lately
  std::atomic<uint64_t> bells{0};         // poller_bell rung (under the token)

  // The mode (the config's `progress` key, or UROCE_PROGRESS) and the knobs from the environment.
  void configure(const std::string& cfg_mode);
  // The application's data-path call at `now` (engine clock): the poller's sign that the
  // application is driving, and which thread it is.
  void note_app(uint64_t now);
  // `n` WRs posted or completions taken by the application (the poller's measure of a busy loop).
  void count_ops(uint64_t n) {
    app_ops.store(app_ops.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  // With the token held, in a data-path call: run progress() here? (thread and inline modes:
  // yes; dedicated: the poller does.)
  bool calls_drive() const { return mode != Mode::Dedicated; }
  void print_stats() const;
};

// The application's side (datapath.cpp), token held. ibv_post_send: post_begin before its WRs
// are queued, posted(n) after (drive now? linger?). ibv_poll_cq: poll_begin before it takes
// completions (drives), polled(n, recv) after (linger?). ibv_post_recv: app_call.
void post_begin(Runtime& r);
void posted(Runtime& r, uint64_t n);
void poll_begin(Runtime& r);
void polled(Runtime& r, uint64_t n, bool recv);
void app_call(Runtime& r);

// The poller's side: the polling thread's loop until Runtime::stop (runtime.cpp starts it).
void poller_loop(Runtime& r);

// One nanosleep of `ns` (the poller's naps; ibv_modify_qp's pauses while it resolves a peer).
void nap(uint64_t ns);

}  // namespace uroce::shim
