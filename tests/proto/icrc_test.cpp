// CRC-32 implementations agree with each other and with a bit-at-a-time reference; the ICRC
// masks exactly the variant fields; golden ICRCs are reproduced.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "proto/icrc.hpp"
#include "proto/packet.hpp"
#include "tests/proto/test_util.hpp"

using namespace uroce::proto;
namespace t = uroce::proto::test;

namespace {

// Bit-at-a-time reflected CRC-32, written from the definition, as an independent reference.
uint32_t crc32_bitwise(uint32_t crc, const uint8_t* p, size_t len) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < len; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

// 8 bytes of 0xFF (the masked LRH) followed by a copy of [p, p + n).
std::vector<uint8_t> ff_then(const uint8_t* p, size_t n) {
  std::vector<uint8_t> m(8 + n, 0xFF);
  std::memcpy(m.data() + 8, p, n);
  return m;
}

}  // namespace

TEST(Crc32, KnownVectors) {
  const uint8_t s[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  EXPECT_EQ(crc32(0, s, 9), 0xCBF43926u);
  EXPECT_EQ(crc32_slice8(0, s, 9), 0xCBF43926u);
  EXPECT_EQ(crc32_bytewise(0, s, 9), 0xCBF43926u);
  EXPECT_EQ(crc32_bitwise(0, s, 9), 0xCBF43926u);
  EXPECT_EQ(crc32(0, s, 0), 0u);
  EXPECT_EQ(crc32(0x12345678, s, 0), 0x12345678u);
  // The state after the 8 bytes of 0xFF that stand for the masked LRH (notes: 0xDEBB20E3).
  const uint8_t ff[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  EXPECT_EQ(~crc32(0, ff, 8), 0xDEBB20E3u);
  std::printf("crc32 backend: %s\n", crc32_backend());
}

TEST(Crc32, ImplementationsAgreeOnRandomBuffers) {
  std::mt19937 rng(12345);
  std::vector<size_t> lens;
  for (size_t n = 0; n <= 300; ++n) lens.push_back(n);
  for (size_t n : {511u, 512u, 513u, 1023u, 1024u, 1025u, 4095u, 4096u, 4097u, 9000u, 65536u, 65543u, 1u << 20})
    lens.push_back(n);
  for (size_t n : lens) {
    // Unaligned starts too.
    std::vector<uint8_t> buf = random_bytes(rng, n + 7);
    for (size_t shift : {0u, 1u, 3u, 7u}) {
      const uint8_t* p = buf.data() + shift;
      const uint32_t seed = (n % 3 == 0) ? 0 : uint32_t(rng());
      const uint32_t ref = crc32_bytewise(seed, p, n);
      ASSERT_EQ(crc32(seed, p, n), ref) << n << " +" << shift;
      ASSERT_EQ(crc32_slice8(seed, p, n), ref) << n << " +" << shift;
      if (n <= 4096) {
        ASSERT_EQ(crc32_bitwise(seed, p, n), ref) << n << " +" << shift;
      }
    }
  }
}

// The copy with its CRC: the bytes land exactly where they should (nothing before or after the
// destination is touched), and the CRC is the bytewise one, for every length up to two folding
// strides and around the block sizes, unaligned either end, chained from any initial value; by
// crc32_copy() and by each kernel this CPU has (a kernel it lacks is said, not tested).
TEST(Crc32Copy, CopiesExactlyAndAgreesWithTheBytewiseCrc) {
  std::mt19937 rng(4791);
  std::vector<size_t> lens;
  for (size_t n = 0; n <= 600; ++n) lens.push_back(n);
  for (size_t n : {1023u, 1024u, 1025u, 2047u, 2048u, 2049u, 4095u, 4096u, 4097u, 4160u, 9000u, 65536u, 65543u})
    lens.push_back(n);
  std::printf("crc32_copy: %s\n", crc32_copy_backend());
  struct Way {
    const char* name;
    CrcCopyKernel k;
    bool any;  // crc32_copy() itself
    size_t ran = 0;
  } ways[] = {{"crc32_copy", CrcCopyKernel::TwoPass, true},
              {"avx512", CrcCopyKernel::Avx512, false},
              {"avx2", CrcCopyKernel::Avx2, false},
              {"two passes", CrcCopyKernel::TwoPass, false}};
  for (size_t n : lens) {
    std::vector<uint8_t> src = random_bytes(rng, n + 64);
    for (size_t s_shift : {0u, 1u, 13u}) {
      for (size_t d_shift : {0u, 5u, 32u}) {
        const uint8_t* s = src.data() + s_shift;
        const uint32_t seed = (n % 3 == 0) ? 0 : uint32_t(rng());
        const uint32_t ref = crc32_bytewise(seed, s, n);
        for (Way& w : ways) {
          std::vector<uint8_t> dst(n + 128, 0xA5);
          uint8_t* d = dst.data() + 32 + d_shift;
          uint32_t got = seed;
          if (w.any) got = crc32_copy(seed, d, s, n);
          else if (!crc32_copy_with(w.k, got, d, s, n)) continue;
          ++w.ran;
          ASSERT_EQ(got, ref) << w.name << " " << n << " src +" << s_shift << " dst +" << d_shift;
          ASSERT_EQ(std::memcmp(d, s, n), 0) << w.name << " " << n;
          for (size_t i = 0; i < dst.size(); ++i) {
            if (dst.data() + i < d || dst.data() + i >= d + n) {
              ASSERT_EQ(dst[i], 0xA5) << w.name << " " << n << " byte " << i;
            }
          }
        }
      }
    }
  }
  for (const Way& w : ways) std::printf("  %s: %zu copies checked%s\n", w.name, w.ran, w.ran ? "" : " (not on this CPU)");
  EXPECT_GT(ways[0].ran, 0u);
  EXPECT_GT(ways[3].ran, 0u);
}

// A frame's ICRC in three parts (headers, a payload copied with its CRC, pad) is the ICRC.
TEST(Crc32Copy, ChainsWithCrc32) {
  std::mt19937 rng(17);
  for (int iter = 0; iter < 200; ++iter) {
    const size_t a = rng() % 100, n = rng() % 9000, b = rng() % 4;
    std::vector<uint8_t> buf = random_bytes(rng, a + n + b);
    std::vector<uint8_t> out(n);
    uint32_t c = crc32(0, buf.data(), a);
    c = crc32_copy(c, out.data(), buf.data() + a, n);
    c = crc32(c, buf.data() + a + n, b);
    ASSERT_EQ(c, crc32_bytewise(0, buf.data(), buf.size())) << a << "+" << n << "+" << b;
  }
}

TEST(Crc32, ChainedInPieces) {
  std::mt19937 rng(999);
  for (int iter = 0; iter < 300; ++iter) {
    size_t n = rng() % 20000;
    std::vector<uint8_t> buf = random_bytes(rng, n);
    const uint32_t whole = crc32_bytewise(0, buf.data(), n);
    uint32_t a = 0, b = 0, c = 0;
    size_t off = 0;
    while (off < n) {
      size_t piece = std::min(n - off, size_t(rng() % (iter % 2 ? 64 : 3000)) + (iter % 5 == 0 ? 0 : 1));
      a = crc32(a, buf.data() + off, piece);
      b = crc32_slice8(b, buf.data() + off, piece);
      c = crc32_bytewise(c, buf.data() + off, piece);
      off += piece;
    }
    ASSERT_EQ(a, whole) << n;
    ASSERT_EQ(b, whole) << n;
    ASSERT_EQ(c, whole) << n;
  }
}

TEST(Icrc, GoldenWriteOnly) {
  const auto& f = t::kWriteSmallFrame;
  const size_t l3 = 14;
  const size_t len = f.size() - l3 - kIcrcSize;
  EXPECT_EQ(icrc_compute(f.data() + l3, len, 20), 0x6f9414e9u);
  EXPECT_EQ(load_le32(f.data() + f.size() - 4), 0x6f9414e9u);

  // The definition spelled out: CRC-32 over 8 x 0xFF + the masked copy of IP..end of pad.
  std::vector<uint8_t> m = ff_then(f.data() + l3, f.size() - l3 - 4);
  uint8_t* ip = m.data() + 8;
  ip[1] = 0xFF;
  ip[8] = 0xFF;
  ip[10] = ip[11] = 0xFF;
  ip[20 + 6] = ip[20 + 7] = 0xFF;
  ip[28 + 4] = 0xFF;
  EXPECT_EQ(crc32_bitwise(0, m.data(), m.size()), 0x6f9414e9u);
}

// Every byte of the covered region either changes the ICRC when flipped (invariant) or does not
// (masked); the masked set is exactly the one the notes list.
TEST(Icrc, MasksExactlyTheVariantFields) {
  for (int v : {4, 6}) {
    const std::vector<uint8_t> pl = t::seq_payload(20);
    Packet p = t::make_packet(op::kSendOnly, v, 0, pl);
    std::vector<uint8_t> f = t::build_frame(p);
    const size_t l3 = 14, hl = v == 4 ? 20 : 40;
    const size_t len = f.size() - l3 - 4;
    const uint32_t ref = icrc_compute(&f[l3], len, hl);
    for (size_t i = 0; i < len; ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        std::vector<uint8_t> g = f;
        g[l3 + i] ^= uint8_t(1 << bit);
        // The version nibble selects the mask; leave it alone.
        if (i == 0 && bit >= 4) continue;
        bool masked;
        if (v == 4) masked = i == 1 || i == 8 || i == 10 || i == 11;
        else masked = (i == 0 && bit < 4) || i == 1 || i == 2 || i == 3 || i == 7;
        masked = masked || i == hl + 6 || i == hl + 7 || i == hl + 8 + 4;
        EXPECT_EQ(icrc_compute(&g[l3], len, hl) == ref, masked) << "IPv" << v << " byte " << i << " bit " << bit;
        // In place: the same value, and the frame unchanged afterwards.
        const std::vector<uint8_t> before = g;
        EXPECT_EQ(icrc_compute_inplace(&g[l3], len, hl), icrc_compute(&before[l3], len, hl));
        ASSERT_EQ(g, before);
      }
    }
  }
}

TEST(Icrc, BuiltPacketsVerifyForEveryOpcodeAndSize) {
  std::mt19937 rng(5);
  for (int c = 0; c < 256; ++c) {
    if (!opcode_info(uint8_t(c)).valid) continue;
    for (int v : {4, 6}) {
      for (size_t n : {0u, 1u, 2u, 3u, 4u, 5u, 63u, 256u, 1023u, 4096u}) {
        std::vector<uint8_t> pl = random_bytes(rng, n);
        Packet p = t::make_packet(uint8_t(c), v, 1, pl);
        std::vector<uint8_t> f = t::build_frame(p);
        ASSERT_FALSE(f.empty());
        const size_t l3 = 18;
        const size_t hl = v == 4 ? 20 : 40;
        // Independent ICRC: bitwise CRC over 8 x 0xFF + masked copy.
        std::vector<uint8_t> m = ff_then(f.data() + l3, f.size() - l3 - 4);
        uint8_t* ip = m.data() + 8;
        if (v == 4) {
          ip[1] = ip[8] = ip[10] = ip[11] = 0xFF;
        } else {
          ip[0] |= 0x0F;
          ip[1] = ip[2] = ip[3] = ip[7] = 0xFF;
        }
        ip[hl + 6] = ip[hl + 7] = 0xFF;
        ip[hl + 8 + 4] = 0xFF;
        ASSERT_EQ(load_le32(&f[f.size() - 4]), crc32_bitwise(0, m.data(), m.size()))
            << opcode_info(uint8_t(c)).name << " IPv" << v << " " << n;
        Packet q;
        ParseResult r = parse(f, q);
        ASSERT_TRUE(r.ok()) << r.message();
      }
    }
  }
}
