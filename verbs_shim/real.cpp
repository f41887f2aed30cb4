// Forwarding to the real libibverbs: the one dlsym lookup behind REAL() (verbs_shim/real.hpp).
#include "verbs_shim/real.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace uroce::shim {

void* real_sym(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (!p) {
    std::fprintf(stderr, "uroce-verbs: %s not found in the real libibverbs\n", name);
    abort();
  }
  return p;
}

}  // namespace uroce::shim
