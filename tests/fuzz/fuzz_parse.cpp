// Fuzz target for proto::parse(), and the same checks as a regression program.
//
// LLVMFuzzerTestOneInput parses the bytes; when they parse, it builds the packet again and
// requires that the rebuilt frame parses, has the input's length and equals the input byte for
// byte. Three things a receiver rightly accepts cannot survive build() unchanged, because build()
// always writes the canonical form; for those the rebuilt frame must equal the input with exactly
// that field made canonical, and nothing else may differ:
//   - a nonzero UDP checksum: parse() does not verify it (the ICRC masks it, RoCE peers ignore it);
//     build() writes the correct one;
//   - nonzero pad bytes: parse() ignores their value; build() writes zeros (and so a new ICRC);
//   - an IPv4 header checksum of 0xFFFF where 0x0000 also verifies (one's complement -0 and +0);
//     build() writes 0x0000.
// Any other difference, a crash, or a rebuilt frame that does not parse traps.
//
// Built with clang -fsanitize=fuzzer (scripts/fuzz.sh defines UROCE_LIBFUZZER) this is a
// libFuzzer target. Without that macro it has a main(): the meson test `fuzz_regress` runs the
// function over every golden frame and a few thousand seeded random mutations of them.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "proto/checksum.hpp"
#include "proto/headers.hpp"
#include "proto/icrc.hpp"
#include "proto/locate.hpp"
#include "proto/packet.hpp"

using namespace uroce::proto;

namespace {

[[noreturn]] void fail(const char* what, size_t at = SIZE_MAX) {
  if (at != SIZE_MAX) std::fprintf(stderr, "fuzz_parse: %s (byte %zu)\n", what, at);
  else std::fprintf(stderr, "fuzz_parse: %s\n", what);
  __builtin_trap();
}

// UDP checksum (RFC 768) over the pseudo header and the UDP datagram, written independently of
// proto's build().
uint16_t udp_checksum_of(const uint8_t* ip, bool v4, const uint8_t* udp, size_t udp_len) {
  uint64_t sum = 0;
  auto add = [&sum](const uint8_t* p, size_t n) {
    for (size_t i = 0; i + 1 < n; i += 2) sum += uint32_t(p[i]) << 8 | p[i + 1];
    if (n & 1) sum += uint32_t(p[n - 1]) << 8;
  };
  if (v4) add(ip + 12, 8);
  else add(ip + 8, 32);
  sum += 17;
  sum += udp_len;
  add(udp, 6);  // the checksum field itself counts as zero
  add(udp + 8, udp_len - 8);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  const uint16_t c = uint16_t(~sum);
  return c == 0 ? 0xFFFF : c;
}

struct Canon {
  std::vector<uint8_t> bytes;
  bool udp_checksum = false;  // the input had a nonzero UDP checksum, now recomputed
  bool pad = false;           // the input had nonzero pad bytes, now zero (ICRC recomputed)
  bool ipv4_ffff = false;     // the input's IPv4 checksum was 0xFFFF, now 0x0000
};

// The canonical form of a frame that parsed as `p`: what build(p) must produce.
Canon canonical(std::span<const uint8_t> in, const Packet& p) {
  Canon c;
  c.bytes.assign(in.begin(), in.end());
  uint8_t* f = c.bytes.data();
  const size_t l3 = 14 + 4u * p.vlan_count;
  const bool v4 = p.ip_version == 4;
  const size_t hl = v4 ? size_t(f[l3] & 0x0F) * 4 : 40;
  const size_t ip_total = v4 ? load_be16(f + l3 + 2) : 40u + load_be16(f + l3 + 4);
  const size_t end = l3 + ip_total;  // the ICRC's last byte + 1
  if (v4 && load_be16(f + l3 + 10) == 0xFFFF) {
    store_be16(f + l3 + 10, 0);
    if (inet_checksum(f + l3, hl) == 0) c.ipv4_ffff = true;
    else store_be16(f + l3 + 10, 0xFFFF);  // 0xFFFF was the only form that verifies
  }
  const size_t pad = p.pad_count();
  for (size_t i = end - 4 - pad; i < end - 4; ++i) {
    if (f[i] != 0) c.pad = true;
    f[i] = 0;
  }
  if (c.pad) store_le32(f + end - 4, icrc_compute(f + l3, ip_total - 4, hl));
  uint8_t* udp = f + l3 + hl;
  if (load_be16(udp + 6) != 0) {
    const uint16_t want = udp_checksum_of(f + l3, v4, udp, ip_total - hl);
    if (load_be16(udp + 6) != want) c.udp_checksum = true;
    store_be16(udp + 6, want);
  }
  return c;
}

struct Stats {
  size_t runs = 0, parsed = 0, non_canonical = 0, udp_checksum = 0, pad = 0, ipv4_ffff = 0;
  size_t by_error[64] = {};
};
Stats g_stats;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ++g_stats.runs;
  const std::span<const uint8_t> in(data, size);
  Packet p;
  const ParseResult r = parse(in, p);
  ++g_stats.by_error[size_t(r.error) & 63];
  if (!r.ok()) {
    (void)r.message();
    return 0;
  }
  ++g_stats.parsed;
  if (p.payload.size() && (p.payload.data() < data || p.payload.data() + p.payload.size() > data + size))
    fail("payload span outside the frame");

  const size_t len = frame_len(p);
  if (len != size) fail("frame_len() differs from the input length");
  std::vector<uint8_t> out(len);
  const BuildResult b = build(p, out);
  if (!b.ok()) fail("build() refused a packet that parse() accepted");
  if (b.len != size) fail("build() wrote a different length");

  Packet q;
  const ParseResult r2 = parse(out, q);
  if (!r2.ok()) fail("the rebuilt frame does not parse");

  const Canon c = canonical(in, p);
  for (size_t i = 0; i < size; ++i)
    if (out[i] != c.bytes[i]) fail("the rebuilt frame differs from the input", i);
  if (c.udp_checksum || c.pad || c.ipv4_ffff) {
    ++g_stats.non_canonical;
    g_stats.udp_checksum += c.udp_checksum;
    g_stats.pad += c.pad;
    g_stats.ipv4_ffff += c.ipv4_ffff;
  } else if (std::memcmp(out.data(), data, size) != 0) {
    fail("the rebuilt frame differs from a canonical input");
  }

  // The canonical form is a fixed point: building it again changes nothing.
  std::vector<uint8_t> again(frame_len(q));
  const BuildResult b2 = build(q, again);
  if (!b2.ok() || again != out) fail("build(parse(build(p))) != build(p)");
  return 0;
}

#ifndef UROCE_LIBFUZZER
// ---- Regression driver ------------------------------------------------------------------------
#include <algorithm>
#include <filesystem>
#include <random>
#include <string>

#include "tests/fuzz/fuzz_util.hpp"

namespace {

using uroce::fuzz::golden_frames;

// Length and checksum fix-ups so that mutants get past the cheap checks and reach build().
void fix_up(std::vector<uint8_t>& f, std::mt19937& rng) {
  const size_t l3 = locate(f).l3;
  if (l3 == 0 || l3 >= f.size()) return;
  const bool v4 = (f[l3] >> 4) == 4;
  const size_t hl = v4 ? size_t(f[l3] & 0x0F) * 4 : 40;
  if (hl < 20 || f.size() < l3 + hl + 8 + 12 + 4) return;
  const size_t ip_total = f.size() - l3;
  if (ip_total > 0xFFFF + (v4 ? 0 : 40)) return;
  if (v4) store_be16(&f[l3 + 2], uint16_t(ip_total));
  else store_be16(&f[l3 + 4], uint16_t(ip_total - 40));
  store_be16(&f[l3 + hl + 4], uint16_t(ip_total - hl));
  if (rng() % 4 != 0) store_le32(&f[f.size() - 4], icrc_compute(&f[l3], ip_total - 4, hl));
  if (v4) {
    store_be16(&f[l3 + 10], 0);
    uint16_t c = inet_checksum(&f[l3], hl);
    if (c == 0 && rng() % 2) c = 0xFFFF;  // the other verifying form, when there is one
    store_be16(&f[l3 + 10], c);
  }
}

void mutate(std::vector<uint8_t>& f, std::mt19937& rng) {
  const int n = 1 + int(rng() % 4);
  for (int k = 0; k < n; ++k) {
    const size_t sz = f.size();
    switch (rng() % 9) {
      case 0:
        if (sz) f[rng() % sz] ^= uint8_t(1u << (rng() % 8));
        break;
      case 1:
        if (sz) f[rng() % sz] = uint8_t(rng());
        break;
      case 2:
        if (sz) f.resize(rng() % sz);
        break;
      case 3:
        for (size_t i = rng() % 9; i > 0; --i) f.push_back(uint8_t(rng()));
        break;
      case 4:
        if (sz) f.erase(f.begin() + long(rng() % sz));
        break;
      case 5:
        f.insert(f.begin() + long(sz ? rng() % sz : 0), uint8_t(rng()));
        break;
      case 6:  // a header byte (Ethernet .. BTH + 28) rather than payload
        if (sz) f[rng() % std::min<size_t>(sz, 14 + 8 + 40 + 8 + 12 + 28)] = uint8_t(rng());
        break;
      case 7:  // the opcode of an untagged IPv4 or IPv6 frame
        if (sz > 14 && (f[14] >> 4) == 4 && sz > 14 + 20 + 8) f[14 + 20 + 8] = uint8_t(rng());
        else if (sz > 14 + 40 + 8) f[14 + 40 + 8] = uint8_t(rng());
        break;
      case 8:  // the UDP checksum, or a byte just before the ICRC (a pad byte, if any)
        if (sz > 14 + 20 + 8 && rng() % 2) f[14 + 20 + 6 + rng() % 2] = uint8_t(rng());
        else if (sz >= 8) f[sz - 5 - rng() % 3] = uint8_t(rng());
        break;
    }
  }
  if (rng() % 3 != 0) fix_up(f, rng);
}

}  // namespace

int main(int argc, char** argv) {
  uroce::fuzz::Args args;
  args.mutations = 20000;
  if (!uroce::fuzz::parse_args(argc, argv, args)) return 0;
  const std::string& golden = args.golden;
  const size_t mutations = args.mutations;
  const unsigned seed = args.seed;
  if (!args.inputs.empty()) {  // reproduce: run the given files (e.g. libFuzzer crash-* files)
    if (!uroce::fuzz::run_files(args.inputs, LLVMFuzzerTestOneInput)) return 2;
    std::printf("fuzz_regress: %zu files, no failure; %zu parse and rebuild (%zu canonicalised: %zu UDP checksum, "
                "%zu pad, %zu IPv4 0xFFFF)\n",
                args.inputs.size(), g_stats.parsed, g_stats.non_canonical, g_stats.udp_checksum, g_stats.pad,
                g_stats.ipv4_ffff);
    return 0;
  }

  const auto frames = golden_frames(golden);
  if (frames.empty() || frames.size() < 2) {
    std::fprintf(stderr, "fuzz_regress: no frames under %s\n", golden.c_str());
    return 2;
  }
  if (!args.corpus_dir.empty()) return uroce::fuzz::write_corpus(args.corpus_dir, frames) ? 0 : 2;

  std::vector<size_t> roce;  // mutate mostly RoCEv2 frames: those reach deeper
  for (size_t i = 0; i < frames.size(); ++i) {
    const size_t before = g_stats.parsed;
    LLVMFuzzerTestOneInput(frames[i].data(), frames[i].size());
    if (g_stats.parsed != before) roce.push_back(i);
  }
  const Stats golden_stats = g_stats;
  if (golden_stats.non_canonical != 0) {
    std::fprintf(stderr, "fuzz_regress: %zu golden frames are not in canonical form\n", golden_stats.non_canonical);
    return 1;
  }

  // One deliberate IPv4 header whose checksum verifies both as 0x0000 and as 0xFFFF: fold the
  // checksum into the identification field (one's-complement add), so the other words sum to -0.
  for (size_t i : roce) {
    std::vector<uint8_t> f = frames[i];
    if (f.size() < 14 + 20 + 24 || load_be16(&f[12]) != kEtherTypeIpv4 || f[14] != 0x45) continue;
    uint32_t id = uint32_t(load_be16(&f[14 + 4])) + load_be16(&f[14 + 10]);
    id = (id & 0xFFFF) + (id >> 16);
    store_be16(&f[14 + 4], uint16_t(id));
    store_be16(&f[14 + 10], 0);
    if (inet_checksum(&f[14], 20) != 0) continue;
    store_be16(&f[14 + 10], 0xFFFF);
    store_le32(&f[f.size() - 4], icrc_compute(&f[14], f.size() - 18, 20));
    const size_t before = g_stats.ipv4_ffff;
    LLVMFuzzerTestOneInput(f.data(), f.size());
    if (g_stats.ipv4_ffff != before + 1) {
      std::fprintf(stderr, "fuzz_regress: the IPv4 checksum 0xFFFF frame was not accepted\n");
      return 1;
    }
    break;
  }

  std::mt19937 rng(seed);
  for (size_t i = 0; i < mutations; ++i) {
    std::vector<uint8_t> f = rng() % 8 != 0 ? frames[roce[rng() % roce.size()]] : frames[rng() % frames.size()];
    mutate(f, rng);
    LLVMFuzzerTestOneInput(f.data(), f.size());
  }
  const size_t m_parsed = g_stats.parsed - golden_stats.parsed;
  std::printf("fuzz_regress: %zu golden frames (%zu parse and rebuild byte for byte), %zu mutations (seed %u): "
              "%zu parse and rebuild (%zu exactly, %zu canonicalised: %zu UDP checksum, %zu pad, %zu IPv4 0xFFFF)\n",
              frames.size(), golden_stats.parsed, mutations, seed, m_parsed, m_parsed - g_stats.non_canonical,
              g_stats.non_canonical, g_stats.udp_checksum, g_stats.pad, g_stats.ipv4_ffff);
  std::printf("  results over all runs:");
  for (int e = 0; e <= int(ParseError::BadIcrc); ++e)
    if (g_stats.by_error[e]) std::printf(" %s=%zu", std::string(error_name(ParseError(e))).c_str(), g_stats.by_error[e]);
  std::printf("\n");
  return 0;
}
#endif
