// Forwarding to the real libibverbs: the one lookup behind REAL() (verbs_shim/real.hpp).
#include "verbs_shim/real.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace uroce::shim {

namespace {

// The real library, when it is not in the process's global scope behind the shim: a program that
// loads libibverbs with dlopen after start-up (UCX loads its IB module, and with it libibverbs, that
// way) has it in a local scope that RTLD_NEXT does not search. Opening it again by its soname
// finds the loaded copy (or loads it); the shim stays first for everyone else's calls, since a
// preloaded library precedes every later one in symbol resolution.
void* real_library() {
  static void* const h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  return h;
}

}  // namespace

void* real_sym(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (!p) {
    if (void* h = real_library()) p = dlsym(h, name);
  }
  if (!p) {
    std::fprintf(stderr, "uroce-verbs: %s not found in the real libibverbs (%s)\n", name,
                 real_library() ? "it lacks the symbol" : "libibverbs.so.1 cannot be loaded");
    abort();
  }
  return p;
}

}  // namespace uroce::shim
