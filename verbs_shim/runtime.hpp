// The shim's per-process runtime: the configuration, the one engine Device and DpdkLink, the
// ownership token that serialises every engine call, and the polling thread.
//
// Progress design (docs/verbs_shim.md): the engine is single-threaded, so exactly one thread at a
// time may call it. Whoever holds the token (an atomic flag) may call the engine:
//   - the application thread, inside ibv_poll_cq / ibv_post_send / ibv_post_recv / control verbs:
//     it takes the token, runs one Device::progress() and its operation, and gives it back;
//   - the polling thread, when the application has not polled for a while: it takes the token,
//     runs progress(), and backs off (spin briefly, then short sleeps) when there is nothing to do.
// While the application polls, the poller sleeps, so a process never has two busy pollers.
#pragma once
#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.hpp"
#include "port/config.hpp"
#include "port/dpdk_link.hpp"

namespace uroce::shim {

struct UCq;

struct Runtime {
  // Configuration (loaded once, on the first verbs call that needs it).
  bool cfg_tried = false;
  bool cfg_ok = false;
  port::EndpointConfig cfg;
  std::string cfg_err;

  // The device as libibverbs programs see it. `dev` must stay the first member of UDevice.
  ibv_device dev{};
  std::vector<proto::Ip6> gids;   // GID table (index 0 link-local, 1 IPv4-mapped, 2 IPv6 if set)
  std::vector<bool> gid_valid;

  // Started by the first ibv_open_device.
  bool started = false;
  std::string start_err;
  std::unique_ptr<port::DpdkLink> link;
  std::unique_ptr<port::TscClock> clock;
  std::unique_ptr<engine::Device> engine;
  engine::Device::Config dcfg;

  std::atomic<bool> owner{false};
  std::atomic<uint64_t> app_poll_ns{0};
  std::atomic<bool> stop{false};
  std::thread poller;
  // The application polled within this many ns: the poller naps (UROCE_SHIM_APP_ACTIVE_NS; 0 =
  // the poller never yields to the application, for measurements).
  uint64_t app_active_ns = 20'000;
  uint64_t idle_spin_ns = 50'000;   // the poller spins this long after its last work, then naps
  bool eager_post = false;   // post_send runs progress() itself (UROCE_SHIM_EAGER_POST=1)
  std::vector<UCq*> armed;   // CQs with a requested notification (under the token)

  // Statistics (for docs and debugging; UROCE_SHIM_STATS=1 prints them at exit).
  std::atomic<uint64_t> poller_drives{0}, poller_naps{0}, app_drives{0};

  void lock() {
    if (!owner.exchange(true, std::memory_order_acquire)) return;
    for (uint32_t i = 0;; ++i) {
      while (owner.load(std::memory_order_relaxed)) {
        if (++i > 256) std::this_thread::yield();
        else __builtin_ia32_pause();
      }
      if (!owner.exchange(true, std::memory_order_acquire)) return;
    }
  }
  void unlock() { owner.store(false, std::memory_order_release); }
  // With the token held: one progress() step and completion-channel notifications.
  bool drive();
  uint64_t now_ns() const { return clock->now_ns(); }
};

Runtime& rt();

struct Guard {
  Guard() { rt().lock(); }
  ~Guard() { rt().unlock(); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
};

// Wrappers: the ibv_* object first, then uroce's.
struct UContext {
  verbs_context vctx;
};
struct UPd {
  ibv_pd pd;
  engine::Pd* e;
};
struct UMr {
  ibv_mr mr;
  engine::Mr* e;
};
struct UChannel {
  ibv_comp_channel ch;
  int wfd;
};
struct UCq {
  ibv_cq_ex cq;      // starts with the ibv_cq fields
  engine::Cq* e;
  UChannel* ch;
  bool armed;
  uint64_t armed_at;
  std::atomic<uint32_t> events;      // events written to the channel's pipe
  std::atomic<uint32_t> events_read; // events returned by ibv_get_cq_event
  std::atomic<bool> dead;            // destroyed with events still in the pipe (kept, skipped)
};
struct USrq {
  ibv_srq srq;
  engine::Srq* e;
};
struct UQp {
  ibv_qp_ex qpx;     // qpx.qp_base is the ibv_qp
  engine::Qp* e;
  bool ex;           // created with ibv_create_qp_ex and send_ops_flags: ibv_wr_* work
  // ibv_wr_* batch between wr_start and wr_complete
  std::vector<engine::SendWr> batch;
  std::vector<engine::Sge> batch_sge;   // kMaxSge per entry
  int batch_err;
};
struct UAh {
  ibv_ah ah;
  ibv_ah_attr attr;
};

}  // namespace uroce::shim
