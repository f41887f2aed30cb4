// How the fuzz targets fail: a line naming the target and what broke, then a trap, which
// libFuzzer and the sanitizers report with the input that got there. Each target defines
// kTarget, its name in that line.
#pragma once
#include <cstdio>

namespace uroce::fuzz {

extern const char* const kTarget;

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "%s: %s\n", kTarget, what);
  __builtin_trap();
}

inline void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

}  // namespace uroce::fuzz

// The targets call them unqualified.
using uroce::fuzz::check;
using uroce::fuzz::fail;
