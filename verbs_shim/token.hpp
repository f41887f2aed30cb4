// The ownership token: the engine is single-threaded, so exactly one thread at a time may call
// it, and that is whoever holds this token (an atomic flag; one per process, rt().token).
// Control verbs hold it for their one engine call (Guard, with_token); the data path holds it
// for one whole verbs call; the poller takes it only when it is free and nobody waits for it.
#pragma once
#include <atomic>
#include <cstdint>
#include <thread>

#include "verbs_shim/param.hpp"

namespace uroce::shim {

struct Token {
  std::atomic<bool> owner{false};
  std::atomic<uint32_t> waiters{0};   // threads waiting in lock() (the poller defers to them)

  // Spins (pausing, then yielding after kShimTokenSpins rounds) until the token is ours.
  void lock() {
    if (!owner.exchange(true, std::memory_order_acquire)) return;
    waiters.fetch_add(1, std::memory_order_relaxed);
    for (uint32_t i = 0;; ++i) {
      while (owner.load(std::memory_order_relaxed)) {
        if (++i > param::kShimTokenSpins) std::this_thread::yield();
        else __builtin_ia32_pause();
      }
      if (!owner.exchange(true, std::memory_order_acquire)) break;
    }
    waiters.fetch_sub(1, std::memory_order_relaxed);
  }
  void unlock() { owner.store(false, std::memory_order_release); }
  // The poller's way: take the token only if nobody holds it or waits for it.
  bool try_lock_idle() {
    return waiters.load(std::memory_order_relaxed) == 0 && !owner.exchange(true, std::memory_order_acquire);
  }
  // (lock/unlock make the token usable with std::unique_lock where a call must drop it in the
  // middle, as ibv_modify_qp does while it resolves the peer.)
};

// The process's token (rt().token; runtime.cpp).
Token& token();

struct Guard {
  Guard() { token().lock(); }
  ~Guard() { token().unlock(); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
};

// f() with the token held: the one engine call of a control verb.
template <typename F>
auto with_token(F&& f) {
  Guard g;
  return f();
}

}  // namespace uroce::shim
