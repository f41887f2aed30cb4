// 24-bit Packet Sequence Number arithmetic. PSNs wrap at 2^24; "before" and "after" are
// decided within half the space (2^23), as IBA 9.7.1 and rxe's psn_compare do.
#pragma once
#include <cstdint>

namespace uroce::proto {

inline constexpr uint32_t kPsnMask = 0xFFFFFF;
inline constexpr uint32_t kPsnHalf = 0x800000;

constexpr uint32_t psn_add(uint32_t psn, int64_t n) { return uint32_t((int64_t(psn) + n) & kPsnMask); }
constexpr uint32_t psn_next(uint32_t psn) { return (psn + 1) & kPsnMask; }

// Signed distance a - b in [-2^23, 2^23): how many PSNs a is ahead of b. Two PSNs exactly
// 2^23 apart are each "before" the other: the spec leaves that case undefined, and a window
// never spans it.
constexpr int32_t psn_diff(uint32_t a, uint32_t b) {
  return int32_t(((a - b) & kPsnMask) << 8) >> 8;
}
constexpr bool psn_before(uint32_t a, uint32_t b) { return psn_diff(a, b) < 0; }
constexpr bool psn_after(uint32_t a, uint32_t b) { return psn_diff(a, b) > 0; }
// a in [lo, lo + window)
constexpr bool psn_in_window(uint32_t a, uint32_t lo, uint32_t window) {
  return uint32_t((a - lo) & kPsnMask) < window;
}

static_assert(psn_add(0xFFFFFF, 1) == 0);
static_assert(psn_add(0, -1) == 0xFFFFFF);
static_assert(psn_diff(0, 0xFFFFFF) == 1);
static_assert(psn_diff(0xFFFFFF, 0) == -1);
static_assert(psn_before(0xFFFFF0, 5) && psn_after(5, 0xFFFFF0));
static_assert(psn_in_window(2, 0xFFFFFE, 8) && !psn_in_window(0xFFFFFD, 0xFFFFFE, 8));

}  // namespace uroce::proto
