// The shim's per-process runtime: the configuration, the one engine Device and DpdkLink, the
// ownership token that serialises every engine call, and the polling thread.
//
// Progress (docs/verbs_shim.md): the engine is single-threaded, so exactly one thread at a time
// may call it. Whoever holds the token (an atomic flag) may call the engine. The config's
// `progress` key (or UROCE_PROGRESS) chooses who turns it:
//   thread (default): the application thread inside ibv_poll_cq / ibv_post_send (one
//     Device::progress() per call); the polling thread only while the application is away from
//     the data path (it spins on memory, as ib_write_lat does, or waits on a completion channel
//     or a socket). The poller sleeps while the application drives, and checks rarely once the
//     application has driven at many checks in a row, because each of its wake-ups costs the
//     thread it preempts (only while the application is busy: it posts or completes work at a
//     good rate; an application polling for an answer that needs the peer is not). After work
//     it spins only when it has its core to itself (the
//     application thread is blocked or runs on another core); sharing a core with a running
//     application it naps at once. So a process never has two busy threads on one core.
//   inline: only the application's verbs calls (no polling thread work at all).
//   dedicated: the polling thread drives all the time and never sleeps; verbs calls only post
//     and take completions. For a spare core per process.
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
#include "port/endpoint.hpp"
#include "verbs_shim/param.hpp"

namespace uroce::shim {

struct UCq;
struct UContext;
struct UQp;
struct USrq;

using param::kShimAsyncScanNs;
using param::kShimLinkScanNs;

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
  std::unique_ptr<port::Endpoint> ep;   // link, clock and device (port/endpoint.hpp)
  port::DpdkLink* link = nullptr;       // ep's, for short
  engine::Device* engine = nullptr;
  engine::Device::Config dcfg;

  enum class Progress { Thread, Inline, Dedicated };
  Progress progress = Progress::Thread;
  std::atomic<bool> owner{false};
  std::atomic<uint32_t> waiters{0};     // threads waiting for the token (dedicated: the poller defers)
  std::atomic<uint64_t> app_poll_ns{0}; // the application's last data-path call (engine clock)
  std::atomic<int> app_tid{0};          // the thread that made it
  std::atomic<uint64_t> app_ops{0};     // WRs posted and completions taken (approximate count)
  std::atomic<bool> stop{false};
  std::thread poller;
  uint64_t app_active_ns = param::kShimAppActiveNs;   // UROCE_SHIM_APP_ACTIVE_NS
  uint64_t idle_spin_ns = param::kShimIdleSpinNs;     // UROCE_SHIM_IDLE_SPIN_NS
  bool eager_post = false;   // post_send runs progress() itself (UROCE_SHIM_EAGER_POST=1)
  uint32_t posted_undriven = 0;  // WRs posted since the last drive() (under the token)
  // Linger after send completions (datapath.cpp; param::kShimLingerNs), under the token.
  uint64_t linger_ns = param::kShimLingerNs;          // UROCE_SHIM_LINGER_NS
  uint32_t linger_score = param::kShimLingerScoreStart;   // +1 per linger that found the answer, -kShimLingerMissCost per miss
  std::atomic<uint64_t> linger_off_until{0};  // backing off until then (the poller reads it)
  uint64_t linger_mark = 0;    // requests received at the last ibv_post_send
  std::vector<UCq*> armed;   // CQs with a requested notification (under the token)
  // Asynchronous events (async.cpp), under the token: the open contexts (each has its event
  // queue) and the objects whose state is compared at each scan.
  std::vector<UContext*> contexts;
  std::vector<UQp*> qps;
  std::vector<UCq*> cqs;
  std::vector<USrq*> srqs;
  uint64_t next_scan_ns = 0, next_link_ns = 0;
  bool link_up = false;      // as last reported (IBV_EVENT_PORT_ACTIVE / IBV_EVENT_PORT_ERR)
  // liburoce-rdmacm's hook (verbs_shim/cm_bridge.hpp): takes the CM's events after each
  // progress step, token held. nullptr unless that library is loaded.
  void (*cm_hook)() = nullptr;

  // Statistics (for docs and debugging; UROCE_SHIM_STATS=1 prints them at exit).
  std::atomic<uint64_t> poller_drives{0}, poller_naps{0}, app_drives{0};
  std::atomic<uint64_t> linger_hits{0};   // written under the token, read by the poller
  uint64_t linger_missed = 0;             // under the token
  uint64_t linger_answered = 0;           // no linger: the answer had come
  uint64_t linger_skipped = 0;            // no linger: backing off, or no requests lately

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
  // (lock/unlock make the Runtime usable with std::unique_lock where a call must drop the token
  // in the middle, as ibv_modify_qp does while it resolves the peer.)
  // With the token held: one progress() step, completion-channel notifications and, when one
  // is due (one clock read per call otherwise), a scan for asynchronous events.
  bool drive();
  uint64_t now_ns() const { return engine->now_ns(); }
  // The application's data-path call at `now` (engine clock): the poller's sign that the
  // application is driving, and which thread it is.
  void note_app(uint64_t now);
  // `n` WRs posted or completions taken by the application (the poller's measure of a busy loop).
  void count_ops(uint64_t n) {
    app_ops.store(app_ops.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  // With the token held, in a data-path call: run progress() here? (thread and inline modes:
  // yes; dedicated: the poller does.)
  bool calls_drive() const { return progress != Progress::Dedicated; }
};

Runtime& rt();

struct Guard {
  Guard() { rt().lock(); }
  ~Guard() { rt().unlock(); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
};

// f() with the token held: the one engine call of a control verb.
template <typename F>
auto with_token(F&& f) {
  Guard g;
  return f();
}

// Configuration and start-up (runtime.cpp). load_cfg: reads the config once (the device's
// name and paths); start_runtime: the first ibv_open_device starts the poller, the EAL, the
// port and the engine. Both are idempotent and thread-safe; false if it failed (said on stderr).
bool load_cfg();
bool start_runtime();

void nap(uint64_t ns);

// The device as files (device_view.cpp). sysfs_device_file: the answer for one of the device's
// sysfs attributes (board_id, node_desc, hca_type, fw_ver, node_type), false for others.
// device_view_node (after load_cfg) and device_view_gids (after the GID table is known) write
// the device node and the sysfs files when scripts/uroce-run made a private view
// (UROCE_DEVICE_VIEW=1); otherwise they do nothing.
bool sysfs_device_file(const Runtime& r, const char* file, std::string& v);
void device_view_node(const Runtime& r);
void device_view_gids(const Runtime& r);

// Asynchronous events (async.cpp).
// With the token held: compare the watched objects' state with what was last seen and queue the
// events (IBV_EVENT_QP_FATAL, _QP_LAST_WQE_REACHED, _CQ_ERR, _SRQ_LIMIT_REACHED, and the port's
// _PORT_ACTIVE / _PORT_ERR when the link changed); `now` from the engine's clock.
void async_scan(Runtime& r, uint64_t now);
// With the token held: the link's state now (DpdkLink::link_up_now).
bool link_is_up(Runtime& r);

}  // namespace uroce::shim
