// The regression program of a fuzz target built without libFuzzer (tests/fuzz/meson.build): the
// files named on the command line as inputs, or else `runs` seeded random inputs of 1..max_len
// bytes. The target's LLVMFuzzerTestOneInput checks its invariants and aborts on a broken one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace uroce::fuzz {

// Under AddressSanitizer (scripts/test.sh's second build, where a run costs some 40 times as much)
// the random part is the first quarter of the same sequence: the normal build runs all of it, and
// the instrumented libFuzzer runs (scripts/fuzz.sh) explore beyond it.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr int kSanitizedShare = 4;
#else
inline constexpr int kSanitizedShare = 1;
#endif

// Returns the number of random inputs run (0 when files were given).
inline int run_regression(int argc, char** argv, uint64_t seed, int runs, size_t max_len) {
  runs /= kSanitizedShare;
  if (argc > 1) {
    for (int i = 1; i < argc; ++i) {
      std::ifstream f(argv[i], std::ios::binary);
      std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), {});
      LLVMFuzzerTestOneInput(b.data(), b.size());
    }
    return 0;
  }
  std::mt19937_64 rng(seed);
  for (int i = 0; i < runs; ++i) {
    std::vector<uint8_t> b(1 + rng() % max_len);
    for (auto& c : b) c = uint8_t(rng());
    LLVMFuzzerTestOneInput(b.data(), b.size());
  }
  return runs;
}

}  // namespace uroce::fuzz
