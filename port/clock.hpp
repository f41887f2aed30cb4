// TscClock: the engine's Clock on DPDK, nanoseconds from the TSC (rte_get_tsc_cycles) with
// the EAL's calibrated rte_get_tsc_hz(). Construct it after the EAL has started (DpdkLink::open):
// made before, it counts one cycle as one nanosecond.
// No DPDK type appears in this header.
#pragma once
#include <cstdint>

#include "engine/link.hpp"

namespace uroce::port {

class TscClock : public engine::Clock {
 public:
  TscClock();
  uint64_t now_ns() const override;

 private:
  uint64_t mult_ = 0;  // ns per cycle, 32.32 fixed point
};

}  // namespace uroce::port
