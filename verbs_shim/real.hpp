// Forwarding to the real libibverbs. Objects that are not uroce's go to the next definition of
// the same symbol (dlsym RTLD_NEXT: Debian's libibverbs behind the preloaded shim; when a program
// loaded libibverbs with dlopen, the copy that dlopen("libibverbs.so.1") finds). Each symbol
// is looked up once, at its first use, and kept in a function-local static of that call site.
// A symbol the real library lacks is reported on stderr and aborts the process at the call that
// needs it: such an object cannot be handled by uroce either.
#pragma once

namespace uroce::shim {

// The real library's `name`; never nullptr (prints and aborts when missing).
void* real_sym(const char* name);

}  // namespace uroce::shim

// REAL(ibv_foo)(args...) calls the real ibv_foo.
#define REAL(fn)                                                                          \
  ([]() -> decltype(&::fn) {                                                               \
    static const auto p = reinterpret_cast<decltype(&::fn)>(::uroce::shim::real_sym(#fn)); \
    return p;                                                                              \
  }())
