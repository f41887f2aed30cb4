// crc32_copy(): a copy and the CRC-32 of the bytes copied, in one pass over them.
//
// A packet's payload is read once instead of twice: once to copy it (into a frame on send, into
// the application's memory on receive) and once more for the ICRC. With AVX-512 and VPCLMULQDQ,
// each 64-byte block is loaded into a register, stored at the destination and folded into the
// CRC from that register (carry-less multiplication, the method of Intel's white paper "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ"). With VPCLMULQDQ and AVX2 only, the same
// with 32-byte registers. Elsewhere the bytes go in two passes, as before.
//
// The folding, in the reflected representation of CRC-32 (bit 0 of the first byte is the
// highest power). A 16-byte lane X holding the message up to some point stands for
// X(x) = lo(x)·x^64 + hi(x), lo being its first 8 bytes. Moving it D bits further on (to be
// added to the lane D bits later) is a multiplication by x^D modulo P. A carry-less product of two
// reflected 64-bit values is their product times x in the reflected 128-bit frame, so
//   fold_D(X) = clmul(lo, x^(D+63) mod P) xor clmul(hi, x^(D-1) mod P)
// is congruent to X·x^D and fits in 128 bits. The constants are computed here, once, from P.
// At the end the one lane left is, as a 16-byte message, congruent to the whole message so far:
// its CRC with a zero initial register, chained with the bytes left over, is the result.
#include <cstring>

#include "proto/icrc.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define UROCE_CRC_FOLD 1
#endif

namespace uroce::proto {

namespace {

// Two passes: the copy, then the CRC of the source (the way before crc32_copy). Splitting the
// bytes into chunks that stay in the L1 cache between the two was tried and was slower on an AMD
// EPYC with AVX-512 (2 KiB chunks: 13.6 GB/s at 1 MiB against 23.6 GB/s for two whole passes).
uint32_t crc32_copy_two_pass(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  std::memcpy(dst, src, len);
  return crc32(crc, src, len);
}

#ifdef UROCE_CRC_FOLD

// A polynomial of degree < 64 (bit d: the coefficient of x^d) as a reflected 64-bit value (the
// coefficient of x^d at bit 63 - d).
uint64_t reflect(uint64_t v) {
  uint64_t out = 0;
  for (unsigned d = 0; d < 64; ++d)
    if (v >> d & 1) out |= uint64_t(1) << (63 - d);
  return out;
}

// floor(x^64 / P), of degree 32: long division over GF(2).
uint64_t barrett_mu() {
  const unsigned __int128 p = 0x104C11DB7ull;
  unsigned __int128 rem = (unsigned __int128)1 << 64;
  uint64_t quo = 0;
  for (int d = 64; d >= 32; --d) {
    if (rem >> d & 1) {
      quo |= uint64_t(1) << (d - 32);
      rem ^= p << (d - 32);
    }
  }
  return quo;
}

// x^n mod P, P = x^32 + 0x04C11DB7, as a reflected 64-bit value, the form a lane's half takes.
uint64_t xpow_reflected(unsigned n) {
  uint64_t r = 1;
  for (unsigned i = 0; i < n; ++i) {
    r <<= 1;
    if (r >> 32) r ^= 0x104C11DB7ull;
  }
  return reflect(r);
}

// The folds' constants, laid out as the registers take them: a distance's two constants in every
// 16-byte lane (x^(D+63) for a lane's first 8 bytes, x^(D-1) for its last 8), then the reduction's.
struct FoldConstants {
  alignas(64) uint64_t k256[8];  // 256 bytes on (2048 bits): the four registers of the main loop
  alignas(64) uint64_t k64[8];   // 64 bytes on: one register onto the next
  alignas(64) uint64_t lane[8];  // lane j onto lane 3, (3 - j) * 128 bits on; lane 3 zero
  uint64_t k95, k63, mu, poly;     // the last 16 bytes' reduction (reduce(), below)
  // The 32-byte registers' (AVX2): 128 bytes on (four registers), 32 bytes on, lane 0 onto lane 1.
  alignas(32) uint64_t y128[4], y32[4], ylane[4];
  FoldConstants() {
    for (int j = 0; j < 2; ++j) {
      y128[2 * j] = xpow_reflected(1024 + 63);
      y128[2 * j + 1] = xpow_reflected(1024 - 1);
      y32[2 * j] = xpow_reflected(256 + 63);
      y32[2 * j + 1] = xpow_reflected(256 - 1);
    }
    ylane[0] = xpow_reflected(128 + 63);
    ylane[1] = xpow_reflected(128 - 1);
    ylane[2] = ylane[3] = 0;
    k95 = xpow_reflected(95);
    k63 = xpow_reflected(63);
    mu = reflect(barrett_mu());
    poly = reflect(0x104C11DB7ull);
    for (int j = 0; j < 4; ++j) {
      k256[2 * j] = xpow_reflected(2048 + 63);
      k256[2 * j + 1] = xpow_reflected(2048 - 1);
      k64[2 * j] = xpow_reflected(512 + 63);
      k64[2 * j + 1] = xpow_reflected(512 - 1);
      const unsigned d = (3 - j) * 128;
      lane[2 * j] = j < 3 ? xpow_reflected(d + 63) : 0;
      lane[2 * j + 1] = j < 3 ? xpow_reflected(d - 1) : 0;
    }
  }
};

const FoldConstants& fold_constants() {
  static const FoldConstants c;
  return c;
}

// The CRC register (reflected, 32 bits) of the 16-byte lane lo | hi as a message of its own
// with a zero initial register, X·x^32 mod P, by two folds and a Barrett reduction:
//   A: X·x^32 = lo·x^96 + hi·x^32; lo·x^96 by clmul with x^95 mod P: Y, of degree < 96.
//   B: Y's part above x^64, its 32 top coefficients Q: Q·x^64 by clmul with x^63 mod P: Z, < 64.
//   C: Z = Z1·x^32 + Z0; q = floor(Z1·mu / x^32), mu = floor(x^64 / P); Z mod P = Z0 + (q·P mod x^32).
// Each clmul's product is in the reflected frame with its extra factor x (see above): the shifts
// by 31 and 1 below are that x.
__attribute__((target("pclmul,sse4.1"))) uint32_t reduce(uint64_t lo, uint64_t hi, const FoldConstants& fc) {
  const __m128i k = _mm_set_epi64x(int64_t(fc.k63), int64_t(fc.k95));
  // A: Y = clmul(lo, x^95) xor hi at bits 32..95.
  __m128i y = _mm_clmulepi64_si128(_mm_set_epi64x(0, int64_t(lo)), k, 0x00);
  y = _mm_xor_si128(y, _mm_set_epi64x(int64_t(hi >> 32), int64_t(hi << 32)));
  // B: Q is Y's bits 32..63 (degrees 95..64), as a reflected 64-bit value; Z = clmul(Q, x^63)
  // xor Y's high half (degrees 63..0).
  const uint64_t ylo = uint64_t(_mm_cvtsi128_si64(y)), yhi = uint64_t(_mm_extract_epi64(y, 1));
  const __m128i z = _mm_clmulepi64_si128(_mm_set_epi64x(0, int64_t(ylo & 0xFFFFFFFF00000000ull)), k, 0x10);
  const uint64_t zhi = uint64_t(_mm_extract_epi64(z, 1)) ^ yhi;
  // C: Z1 is zhi's bits 0..31 (degrees 63..32), Z0 its bits 32..63.
  const __m128i t1 = _mm_clmulepi64_si128(_mm_set_epi64x(0, int64_t(zhi << 32)), _mm_set_epi64x(0, int64_t(fc.mu)), 0x00);
  const uint64_t q = (uint64_t(_mm_cvtsi128_si64(t1)) >> 31) | (uint64_t(_mm_extract_epi64(t1, 1)) << 33);
  const __m128i t2 = _mm_clmulepi64_si128(_mm_set_epi64x(0, int64_t(q & 0xFFFFFFFF00000000ull)),
                                          _mm_set_epi64x(0, int64_t(fc.poly)), 0x00);
  return uint32_t(zhi >> 32) ^ uint32_t(uint64_t(_mm_extract_epi64(t2, 1)) >> 31);
}

#define UROCE_FOLD_TARGET __attribute__((target("avx512f,vpclmulqdq")))

UROCE_FOLD_TARGET inline __m512i fold(__m512i x, __m512i k) {
  return _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11));
}
// fold(x, k) xor d, in one ternary-logic instruction for the two xors.
UROCE_FOLD_TARGET inline __m512i fold_add(__m512i x, __m512i k, __m512i d) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), d,
                                   0x96);
}

// len >= 256.
UROCE_FOLD_TARGET uint32_t crc32_copy_avx512(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  const FoldConstants& fc = fold_constants();
  const __m512i k256 = _mm512_load_si512(fc.k256);
  const __m512i k64 = _mm512_load_si512(fc.k64);
  __m512i a0 = _mm512_loadu_si512(src);
  __m512i a1 = _mm512_loadu_si512(src + 64);
  __m512i a2 = _mm512_loadu_si512(src + 128);
  __m512i a3 = _mm512_loadu_si512(src + 192);
  _mm512_storeu_si512(dst, a0);
  _mm512_storeu_si512(dst + 64, a1);
  _mm512_storeu_si512(dst + 128, a2);
  _mm512_storeu_si512(dst + 192, a3);
  // The initial register (zlib's convention: crc is the complement of it) enters as the first
  // four bytes' xor.
  a0 = _mm512_xor_si512(a0, _mm512_maskz_set1_epi32(1, int(~crc)));
  size_t off = 256;
  for (; off + 256 <= len; off += 256) {
    const __m512i d0 = _mm512_loadu_si512(src + off);
    const __m512i d1 = _mm512_loadu_si512(src + off + 64);
    const __m512i d2 = _mm512_loadu_si512(src + off + 128);
    const __m512i d3 = _mm512_loadu_si512(src + off + 192);
    _mm512_storeu_si512(dst + off, d0);
    _mm512_storeu_si512(dst + off + 64, d1);
    _mm512_storeu_si512(dst + off + 128, d2);
    _mm512_storeu_si512(dst + off + 192, d3);
    a0 = fold_add(a0, k256, d0);
    a1 = fold_add(a1, k256, d1);
    a2 = fold_add(a2, k256, d2);
    a3 = fold_add(a3, k256, d3);
  }
  // Four registers into one, then 64-byte blocks.
  __m512i a = fold_add(a0, k64, a1);
  a = fold_add(a, k64, a2);
  a = fold_add(a, k64, a3);
  for (; off + 64 <= len; off += 64) {
    const __m512i d = _mm512_loadu_si512(src + off);
    _mm512_storeu_si512(dst + off, d);
    a = fold_add(a, k64, d);
  }
  // Four lanes into one 16-byte value.
  // (Through memory: a store and four 16-byte reads cost less than the lane extractions.)
  const __m512i t = _mm512_mask_blend_epi64(0xC0, fold(a, _mm512_load_si512(fc.lane)), a);  // lane 3 as it was
  alignas(64) uint64_t q[8];
  _mm512_store_si512(q, t);
  // The lane's CRC register, complemented as zlib's convention has it; then the bytes after
  // the last block.
  uint32_t c = ~reduce(q[0] ^ q[2] ^ q[4] ^ q[6], q[1] ^ q[3] ^ q[5] ^ q[7], fc);
  if (off < len) {
    std::memcpy(dst + off, src + off, len - off);
    c = crc32(c, dst + off, len - off);
  }
  return c;
}

// The same with 32-byte registers, for CPUs with VPCLMULQDQ and AVX2 but no AVX-512 (AMD Zen 3,
// Intel Alder Lake). len >= 128.
#define UROCE_FOLD2_TARGET __attribute__((target("avx2,vpclmulqdq")))

UROCE_FOLD2_TARGET inline __m256i fold2(__m256i x, __m256i k) {
  return _mm256_xor_si256(_mm256_clmulepi64_epi128(x, k, 0x00), _mm256_clmulepi64_epi128(x, k, 0x11));
}
UROCE_FOLD2_TARGET inline __m256i fold2_add(__m256i x, __m256i k, __m256i d) {
  return _mm256_xor_si256(fold2(x, k), d);
}
UROCE_FOLD2_TARGET inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
UROCE_FOLD2_TARGET inline void store32(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

UROCE_FOLD2_TARGET uint32_t crc32_copy_avx2(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  const FoldConstants& fc = fold_constants();
  const __m256i k128 = _mm256_load_si256(reinterpret_cast<const __m256i*>(fc.y128));
  const __m256i k32 = _mm256_load_si256(reinterpret_cast<const __m256i*>(fc.y32));
  __m256i a0 = load32(src), a1 = load32(src + 32), a2 = load32(src + 64), a3 = load32(src + 96);
  store32(dst, a0);
  store32(dst + 32, a1);
  store32(dst + 64, a2);
  store32(dst + 96, a3);
  a0 = _mm256_xor_si256(a0, _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, int(~crc)));
  size_t off = 128;
  for (; off + 128 <= len; off += 128) {
    const __m256i d0 = load32(src + off), d1 = load32(src + off + 32);
    const __m256i d2 = load32(src + off + 64), d3 = load32(src + off + 96);
    store32(dst + off, d0);
    store32(dst + off + 32, d1);
    store32(dst + off + 64, d2);
    store32(dst + off + 96, d3);
    a0 = fold2_add(a0, k128, d0);
    a1 = fold2_add(a1, k128, d1);
    a2 = fold2_add(a2, k128, d2);
    a3 = fold2_add(a3, k128, d3);
  }
  __m256i a = fold2_add(a0, k32, a1);
  a = fold2_add(a, k32, a2);
  a = fold2_add(a, k32, a3);
  for (; off + 32 <= len; off += 32) {
    const __m256i d = load32(src + off);
    store32(dst + off, d);
    a = fold2_add(a, k32, d);
  }
  // Lane 0 onto lane 1 (lane 1's constants are zero: its fold is zero, it is added as it is).
  const __m256i t = fold2(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(fc.ylane)));
  alignas(32) uint64_t q[4], r[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(q), t);
  _mm256_store_si256(reinterpret_cast<__m256i*>(r), a);
  uint32_t c = ~reduce(q[0] ^ q[2] ^ r[2], q[1] ^ q[3] ^ r[3], fc);
  if (off < len) {
    std::memcpy(dst + off, src + off, len - off);
    c = crc32(c, dst + off, len - off);
  }
  return c;
}

bool have_avx2_fold() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq");
  return yes;
}

bool have_avx512_fold() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
  return yes;
}

#endif  // UROCE_CRC_FOLD

}  // namespace

uint32_t crc32_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
#ifdef UROCE_CRC_FOLD
  if (len >= 256 && have_avx512_fold()) return crc32_copy_avx512(crc, dst, src, len);
  if (len >= 256 && have_avx2_fold()) return crc32_copy_avx2(crc, dst, src, len);
#endif
  return crc32_copy_two_pass(crc, dst, src, len);
}

bool crc32_copy_with(CrcCopyKernel k, uint32_t& crc, uint8_t* dst, const uint8_t* src, size_t len) {
  switch (k) {
    case CrcCopyKernel::TwoPass:
      crc = crc32_copy_two_pass(crc, dst, src, len);
      return true;
#ifdef UROCE_CRC_FOLD
    case CrcCopyKernel::Avx512:
      if (len < 256 || !have_avx512_fold()) return false;
      crc = crc32_copy_avx512(crc, dst, src, len);
      return true;
    case CrcCopyKernel::Avx2:
      if (len < 128 || !have_avx2_fold()) return false;
      crc = crc32_copy_avx2(crc, dst, src, len);
      return true;
#endif
    default:
      return false;
  }
}

const char* crc32_copy_backend() {
#ifdef UROCE_CRC_FOLD
  if (have_avx512_fold()) return "avx512-vpclmulqdq fold";
  if (have_avx2_fold()) return "avx2-vpclmulqdq fold";
#endif
  return "memcpy, then crc32";
}

}  // namespace uroce::proto
