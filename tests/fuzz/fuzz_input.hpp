// What the structure-aware fuzz targets (fuzz_engine.cpp, fuzz_cm_engine.cpp) share: a fuzz
// input read as a stream of little-endian values (past its end every read is 0, so a target can
// take what it needs from any input, however short), and CHECK, which aborts on a broken
// invariant (libFuzzer and the regression programs report the abort).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CHECK(c)                                                                                \
  do {                                                                                          \
    if (!(c)) {                                                                                 \
      std::fprintf(stderr, "invariant failed: %s (%s:%d)\n", #c, __FILE__, __LINE__);          \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

namespace uroce::fuzz {

struct Input {
  const uint8_t* p;
  size_t n;
  bool empty() const { return n == 0; }
  uint8_t u8() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  uint16_t u16() { return uint16_t(u8() | u8() << 8); }
  uint32_t u32() { return uint32_t(u16() | uint32_t(u16()) << 16); }
  uint64_t u64() { return u32() | uint64_t(u32()) << 32; }
};

}  // namespace uroce::fuzz
