// The engine's reads and writes of registered memory: what an RNIC does by DMA. The verbs let a
// program touch that memory while the device does (a latency test polls the last byte an RDMA
// WRITE brings; udaddy receives ten datagrams into one buffer and reads its GRH after the first
// completion), so these copies race with the program's own accesses by design, as DMA does.
// Under ThreadSanitizer they are not recorded (DMA is invisible to it on a real RNIC); every
// other access of the engine, its queues and tables, is. Everywhere else they are memcpy.
#pragma once
#include <cstddef>
#include <cstring>

#if defined(__SANITIZE_THREAD__)
#define UROCE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UROCE_TSAN 1
#endif
#endif

#ifdef UROCE_TSAN
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

namespace uroce::engine {

// Copies n bytes between registered memory and the engine (either side may be the registration).
inline void dma_copy(void* dst, const void* src, size_t n) {
#ifdef UROCE_TSAN
  __tsan_ignore_thread_begin();
  std::memcpy(dst, src, n);
  __tsan_ignore_thread_end();
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace uroce::engine
