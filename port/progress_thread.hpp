// ProgressThread: the passive-progress helper for the verbs shim (design: docs/port.md,
// "Progress"). One polling thread owns one or more engine Devices: it alone calls into them.
// Application threads hand work to it through a Boost.Lockfree queue (no locks) and are told of
// completion through an atomic flag. When nothing happens the thread backs off: a few spins,
// then pause instructions, then sleeps of growing length (capped), woken early by an eventfd
// when work is submitted while it sleeps.
//
// Not used by uroce-perf (its application thread drives progress itself: one busy poller per
// process). Header-only; depends on the engine, Boost.Lockfree and Linux, not on DPDK.
#pragma once
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <boost/lockfree/queue.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "engine/engine.hpp"

namespace uroce::port {

struct ProgressOptions {
  uint32_t queue_capacity = 1024;
  uint32_t spin_rounds = 2000;         // idle rounds of plain polling before backing off
  uint32_t pause_rounds = 20000;       // then idle rounds with a pause instruction
  uint32_t min_sleep_us = 1;           // then sleeps from min_sleep_us ...
  uint32_t max_sleep_us = 1000;        // ... doubling up to this (bounds the ACK delay of a passive peer)
};

class ProgressThread {
 public:
  using Options = ProgressOptions;
  // A unit of work run on the polling thread. Trivially copyable, as boost::lockfree::queue
  // requires: a function pointer, an argument and an optional completion flag.
  struct Command {
    void (*fn)(void* arg) = nullptr;
    void* arg = nullptr;
    std::atomic<bool>* done = nullptr;
  };
  struct Stats {
    std::atomic<uint64_t> loops{0}, commands{0}, sleeps{0}, wakeups{0};
  };

  explicit ProgressThread(std::vector<engine::Device*> devs, Options o = {})
      : devs_(std::move(devs)), opt_(o), q_(o.queue_capacity), efd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~ProgressThread() {
    stop();
    if (efd_ >= 0) close(efd_);
  }
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // Called on the polling thread after every idle round (tests advance a virtual clock here).
  std::function<void()> on_idle;

  void start() {
    run_.store(true);
    th_ = std::thread([this] { loop(); });
  }
  void stop() {
    if (!th_.joinable()) return;
    run_.store(false);
    wake();
    th_.join();
  }

  // Hands a command to the polling thread; false if the queue is full (try again).
  bool submit(const Command& c) {
    if (!q_.push(c)) return false;
    if (sleeping_.load(std::memory_order_acquire)) wake();
    return true;
  }

  // Runs f on the polling thread and waits for it (spinning, then yielding).
  template <typename F>
  void call(F&& f) {
    std::atomic<bool> done{false};
    auto tramp = [](void* a) { (*static_cast<std::remove_reference_t<F>*>(a))(); };
    Command c{tramp, &f, &done};
    while (!submit(c)) std::this_thread::yield();
    for (uint32_t i = 0; !done.load(std::memory_order_acquire); ++i)
      if (i > 1000) std::this_thread::yield();
  }

  const Stats& stats() const { return st_; }

 private:
  void wake() {
    uint64_t one = 1;
    ssize_t r = write(efd_, &one, sizeof one);
    (void)r;
  }

  void loop() {
    uint32_t idle = 0, sleep_us = opt_.min_sleep_us;
    while (run_.load(std::memory_order_relaxed)) {
      bool did = false;
      Command c;
      while (q_.pop(c)) {
        c.fn(c.arg);
        if (c.done) c.done->store(true, std::memory_order_release);
        st_.commands.fetch_add(1, std::memory_order_relaxed);
        did = true;
      }
      for (engine::Device* d : devs_) did |= d->progress();
      st_.loops.fetch_add(1, std::memory_order_relaxed);
      if (did) {
        idle = 0;
        sleep_us = opt_.min_sleep_us;
        continue;
      }
      if (on_idle) on_idle();
      ++idle;
      if (idle < opt_.spin_rounds) continue;
      if (idle < opt_.spin_rounds + opt_.pause_rounds) {
        __builtin_ia32_pause();
        continue;
      }
      // Sleep, unless work arrived between the last pop and raising the flag.
      sleeping_.store(true, std::memory_order_seq_cst);
      if (q_.empty()) {
        pollfd p{efd_, POLLIN, 0};
        const int ms = int((sleep_us + 999) / 1000);
        if (sleep_us < 1000) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
        else if (poll(&p, 1, ms) > 0) st_.wakeups.fetch_add(1, std::memory_order_relaxed);
        st_.sleeps.fetch_add(1, std::memory_order_relaxed);
        sleep_us = std::min(sleep_us * 2, opt_.max_sleep_us);
      }
      sleeping_.store(false, std::memory_order_release);
      uint64_t v;
      while (read(efd_, &v, sizeof v) > 0) {
      }
    }
  }

  std::vector<engine::Device*> devs_;
  Options opt_;
  boost::lockfree::queue<Command> q_;
  int efd_;
  std::atomic<bool> run_{false};
  std::atomic<bool> sleeping_{false};
  std::thread th_;
  Stats st_;
};

}  // namespace uroce::port
