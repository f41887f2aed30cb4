// The shim's per-process runtime, rt(): its named parts (the device's identity, the ownership
// token, the progress policy, the registry of watched objects) and what start-up makes: the one
// engine Device on its DpdkLink and the polling thread. Start-up and shutdown: runtime.cpp.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "engine/engine.hpp"
#include "port/dpdk_link.hpp"
#include "port/endpoint.hpp"
#include "verbs_shim/identity.hpp"
#include "verbs_shim/param.hpp"
#include "verbs_shim/progress.hpp"
#include "verbs_shim/registry.hpp"
#include "verbs_shim/token.hpp"

namespace uroce::shim {

struct Runtime {
  Identity identity;       // configuration, the ibv_device, the GID table (identity.hpp)
  Token token;             // who may call the engine now (token.hpp)
  ProgressPolicy policy;   // who turns the engine, when; its knobs and statistics (progress.hpp)
  Registry registry;       // objects watched for events, under the token (registry.hpp)

  // Started by the first ibv_open_device (start_runtime).
  bool started = false;
  std::string start_err;
  std::unique_ptr<port::Endpoint> ep;   // link, clock and device (port/endpoint.hpp)
  port::PortLink* link = nullptr;       // ep's, for short
  engine::Device* engine = nullptr;
  engine::Device::Config dcfg;
  std::thread poller;
  std::atomic<bool> stop{false};        // the poller ends (at exit)

  // liburoce-rdmacm's hook (verbs_shim/cm_bridge.hpp): takes the CM's events after each
  // progress step, token held. nullptr unless that library is loaded.
  void (*cm_hook)() = nullptr;

  // With the token held: one progress() step, the CM hook, completion-channel notifications
  // and, when one is due (one clock read per call otherwise), a scan for asynchronous events
  // (progress.cpp).
  bool drive();
  uint64_t now_ns() const { return engine->now_ns(); }
};

Runtime& rt();

// Start-up (runtime.cpp): the first ibv_open_device starts the poller, which starts the EAL, the
// port and the engine. After load_cfg. Idempotent and thread-safe; false if it failed (said on
// stderr).
bool start_runtime();

}  // namespace uroce::shim
