// The engine's reads and writes of registered memory: what an RNIC does by DMA. The verbs let a
// program touch that memory while the device does (a latency test polls the last byte an RDMA
// WRITE brings; udaddy receives ten datagrams into one buffer and reads its GRH after the first
// completion), so these copies race with the program's own accesses by design, as DMA does.
// Under ThreadSanitizer they are not recorded (DMA is invisible to it on a real RNIC); every
// other access of the engine, its queues and tables, is. Everywhere else they are memcpy.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include "proto/icrc.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

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

// The same copy with the CRC-32 of the bytes chained onto `crc`, in one pass (proto::crc32_copy):
// a received payload placed while its ICRC is checked.
inline uint32_t dma_copy_crc(void* dst, const void* src, size_t n, uint32_t crc) {
#ifdef UROCE_TSAN
  __tsan_ignore_thread_begin();
  crc = proto::crc32_copy(crc, static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
  __tsan_ignore_thread_end();
  return crc;
#else
  return proto::crc32_copy(crc, static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
#endif
}

// An ATOMIC WRITE's placement (IBA 1.5 A19): the 8 bytes at `src` land at the 8-byte aligned
// `dst` as one store, so a reader of dst sees the old value or the new one, never a mix.
inline void dma_store8(void* dst, const void* src) {
  uint64_t v;
  std::memcpy(&v, src, 8);
#ifdef UROCE_TSAN
  __tsan_ignore_thread_begin();
#endif
  __atomic_store_n(static_cast<uint64_t*>(dst), v, __ATOMIC_RELEASE);
#ifdef UROCE_TSAN
  __tsan_ignore_thread_end();
#endif
}

// A FLUSH to global visibility: every store the engine made before is visible to every other
// thread and device before what follows (the engine places data with ordinary stores).
// (x86: MFENCE, an instruction ThreadSanitizer neither needs nor refuses; it rejects a C++
// atomic_thread_fence at compile time.)
inline void dma_visible() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_mfence();
  asm volatile("" ::: "memory");
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// A FLUSH to persistence of [p, p + n): each cache line written back to memory, then a store
// fence. On persistent memory mapped with DAX that makes the bytes durable (the ADR domain); on
// DRAM it is what a persistence flush can do. CLWB where the CPU has it (the line stays cached),
// else CLFLUSHOPT, else CLFLUSH (every x86-64 CPU has that one; it is serializing and slow).
#if defined(__x86_64__) || defined(__i386__)
namespace dma_detail {
inline constexpr uintptr_t kLine = 64;
enum class WriteBack : uint8_t { Clflush, Clflushopt, Clwb };
inline WriteBack write_back_kind() {
  static const WriteBack k = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return WriteBack::Clflush;
    if (b & (1u << 24)) return WriteBack::Clwb;        // CPUID.(7,0):EBX.CLWB
    if (b & (1u << 23)) return WriteBack::Clflushopt;  // CPUID.(7,0):EBX.CLFLUSHOPT
    return WriteBack::Clflush;
  }();
  return k;
}
__attribute__((target("clwb"))) inline void clwb_range(uintptr_t a, uintptr_t end) {
  for (; a < end; a += kLine) _mm_clwb(reinterpret_cast<void*>(a));
}
__attribute__((target("clflushopt"))) inline void clflushopt_range(uintptr_t a, uintptr_t end) {
  for (; a < end; a += kLine) _mm_clflushopt(reinterpret_cast<void*>(a));
}
inline void clflush_range(uintptr_t a, uintptr_t end) {
  for (; a < end; a += kLine) _mm_clflush(reinterpret_cast<const void*>(a));
}
}  // namespace dma_detail
#endif

inline void dma_writeback(const void* p, size_t n) {
#if defined(__x86_64__) || defined(__i386__)
  using namespace dma_detail;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(kLine - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  switch (write_back_kind()) {
    case WriteBack::Clwb: clwb_range(a, end); break;
    case WriteBack::Clflushopt: clflushopt_range(a, end); break;
    case WriteBack::Clflush: clflush_range(a, end); break;
  }
  _mm_sfence();
#else
  (void)p;
  (void)n;
  dma_visible();
#endif
}

}  // namespace uroce::engine
