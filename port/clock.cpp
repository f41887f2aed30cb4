#include "port/clock.hpp"

#include <rte_cycles.h>

namespace uroce::port {

TscClock::TscClock() {
  const uint64_t hz = rte_get_tsc_hz();
  mult_ = hz ? (uint64_t(1'000'000'000) << 32) / hz : (1ull << 32);
}

uint64_t TscClock::now_ns() const {
  return uint64_t((unsigned __int128)rte_get_tsc_cycles() * mult_ >> 32);
}

}  // namespace uroce::port
