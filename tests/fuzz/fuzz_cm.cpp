// Fuzz target for the CM MAD layer (proto/cm.hpp): cm::parse(), cm::emit() and the rdma_cm
// IP header. An input is tried two ways: as a MAD on its own (the 256 bytes of a UD payload),
// and as an Ethernet frame that proto::parse() accepts (ICRC not checked) as a UD SEND_ONLY to
// QP 1, whose payload is then the MAD. For every MAD that cm::parse() accepts:
//   - emit(parse(x)) equals x with its reserved bits cleared, byte for byte (the bits a message
//     kind gives meaning to are worked out once, by parsing and emitting a MAD of all ones);
//   - parse(emit(parse(x))) is the same representation;
//   - a REQ's or SIDR_REQ's rdma_cm header, when it parses, emits back to the same 36 bytes.
// A rejected MAD must leave the attribute ID readable (UnknownAttribute and later errors).
// Any violation traps; so does a read or write outside the input under the sanitizers.
//
// Built with clang -fsanitize=fuzzer (scripts/fuzz.sh cm, UROCE_LIBFUZZER) this is a libFuzzer
// target; without that macro main() runs it over the golden frames, their CM MADs and seeded
// mutations of both (the meson test fuzz_cm, suite proto).
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <span>
#include <vector>

#include "proto/cm.hpp"
#include "proto/packet.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace uroce::proto;

const char* const uroce::fuzz::kTarget = "fuzz_cm";

namespace {

struct Counts {
  size_t runs = 0, mads = 0, parsed = 0, cma = 0;
  std::map<uint16_t, size_t> by_attr;
};
Counts g_counts;

// The bits of a MAD of attribute `attr` that parse() reads and emit() writes: all ones through
// parse() and emit() (reserved bits come out zero), with the two length fields that must stay
// at most 72 parsed at 72 and their bits put back.
std::array<uint8_t, cm::kMadSize> meaningful_bits(uint16_t attr) {
  std::array<uint8_t, cm::kMadSize> ones;
  ones.fill(0xFF);
  cm::MadHeaderView<uint8_t> h(ones.data());
  h.set_base_version(cm::kBaseVersion);
  h.set_mgmt_class(cm::kMgmtClassCm);
  h.set_class_version(cm::kCmClassVersion);
  h.set_method(cm::kMethodSend);
  h.set_attr_id(attr);
  uint8_t* msg = ones.data() + cm::kMadHeaderSize;
  if (attr == uint16_t(cm::Attr::Rej)) msg[9] = uint8_t(72 << 1 | 1);
  if (attr == uint16_t(cm::Attr::SidrRep)) msg[5] = 72;
  cm::Mad m;
  check(cm::parse(ones, m) == cm::Error::Ok, "the all-ones MAD does not parse");
  std::array<uint8_t, cm::kMadSize> mask{};
  check(cm::emit(m, mask) == cm::kMadSize, "emit of the all-ones MAD");
  // The fixed header values are meaningful bits too (parse checks them).
  for (size_t i = 0; i < 4; ++i) mask[i] = 0xFF;
  uint8_t* mask_msg = mask.data() + cm::kMadHeaderSize;
  if (attr == uint16_t(cm::Attr::Rej)) mask_msg[9] |= 0xFE;
  if (attr == uint16_t(cm::Attr::SidrRep)) mask_msg[5] = 0xFF;
  return mask;
}

const std::array<uint8_t, cm::kMadSize>& mask_for(uint16_t attr) {
  static std::map<uint16_t, std::array<uint8_t, cm::kMadSize>> masks;
  auto it = masks.find(attr);
  if (it == masks.end()) it = masks.emplace(attr, meaningful_bits(attr)).first;
  return it->second;
}

void check_cma(std::span<const uint8_t> private_data) {
  cm::CmaHeader h;
  if (cm::parse_cma_header(private_data, h) != cm::CmaError::Ok) return;
  std::array<uint8_t, 36> out{};
  check(cm::emit_cma_header(h, out), "emit_cma_header");
  check(std::memcmp(out.data(), private_data.data(), out.size()) == 0, "rdma_cm header rebuilt differently");
  ++g_counts.cma;
}

void check_mad(std::span<const uint8_t> mad) {
  ++g_counts.mads;
  cm::Mad m;
  const cm::Error e = cm::parse(mad, m);
  if (e == cm::Error::UnknownAttribute || e == cm::Error::UnsupportedAttribute || e == cm::Error::BadInfoLength)
    check(m.hdr.attr_id == load_be16(mad.data() + 16), "attribute ID not kept on a late error");
  if (e != cm::Error::Ok) return;
  ++g_counts.parsed;
  ++g_counts.by_attr[m.hdr.attr_id];
  check(m.hdr.attr_id == uint16_t(cm::attr_of(m.msg)), "attribute ID and message kind disagree");
  std::array<uint8_t, cm::kMadSize> out;
  out.fill(0xEE);
  check(cm::emit(m, out) == cm::kMadSize, "emit did not write 256 bytes");
  const auto& mask = mask_for(m.hdr.attr_id);
  for (size_t i = 0; i < cm::kMadSize; ++i)
    check(out[i] == (mad[i] & mask[i]), "emit(parse(x)) differs from x outside its reserved bits");
  cm::Mad again;
  check(cm::parse(out, again) == cm::Error::Ok, "emitted MAD does not parse");
  check(again == m, "parse(emit(m)) != m");
  if (const auto* r = std::get_if<cm::Req>(&m.msg)) check_cma(r->private_data);
  if (const auto* r = std::get_if<cm::SidrReq>(&m.msg)) check_cma(r->private_data);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ++g_counts.runs;
  const std::span<const uint8_t> in(data, size);
  if (size == cm::kMadSize) {
    check_mad(in);
  } else {
    cm::Mad m;
    check(cm::parse(in, m) == cm::Error::BadLength, "a MAD of the wrong length was not refused");
  }
  Packet p;
  if (parse(in, p, {.verify_icrc = false}).ok() && cm::is_gsi_send(p.opcode, p.dest_qp)) {
    if (p.payload.size() == cm::kMadSize) check_mad(p.payload);
    cm::Mad m;
    if (p.payload.size() != cm::kMadSize) check(cm::parse(p.payload, m) == cm::Error::BadLength, "payload length");
  }
  // The rdma_cm header on its own, from the front of the input.
  cm::CmaHeader h;
  if (cm::parse_cma_header(in, h) == cm::CmaError::Ok) check_cma(in);
  return 0;
}

#ifndef UROCE_LIBFUZZER
// ---- Regression driver ------------------------------------------------------------------------
#include <random>

#include "proto/locate.hpp"
#include "tests/fuzz/fuzz_util.hpp"

int main(int argc, char** argv) {
  uroce::fuzz::Args args;
  args.mutations = 50000;
  if (!uroce::fuzz::parse_args(argc, argv, args)) return 0;
  if (!args.inputs.empty()) {  // reproduce: run the given files (e.g. libFuzzer crash-* files)
    if (!uroce::fuzz::run_files(args.inputs, LLVMFuzzerTestOneInput)) return 2;
    std::printf("fuzz_cm: %zu files, no failure\n", args.inputs.size());
    return 0;
  }
  std::vector<std::vector<uint8_t>> frames = uroce::fuzz::golden_frames(args.golden);
  // The CM frames of the golden captures, and their MADs on their own.
  std::vector<std::vector<uint8_t>> cm_frames, mads;
  for (const auto& f : frames) {
    Packet p;
    if (parse(f, p).ok() && cm::is_gsi_send(p.opcode, p.dest_qp)) {
      cm_frames.push_back(f);
      mads.emplace_back(p.payload.begin(), p.payload.end());
    }
  }
  check(cm_frames.size() == 17, "expected the 17 CM MADs of tutorial/rdma_cm.pcap and rping.pcap");
  const size_t golden_cm_frames = cm_frames.size();
  // One MAD of every kind the golden captures lack, made from the REQ: its header with another
  // attribute ID (the body, all the REQ's bytes, is as good a body as any).
  for (uint16_t attr = 0x10; attr <= 0x1A; ++attr) {
    std::vector<uint8_t> m = mads[0];
    store_be16(m.data() + 16, attr);
    mads.push_back(m);
  }
  if (!args.corpus_dir.empty()) {
    std::vector<std::vector<uint8_t>> seed = frames;
    seed.insert(seed.end(), mads.begin(), mads.end());
    return uroce::fuzz::write_corpus(args.corpus_dir, seed) ? 0 : 2;
  }

  for (const auto& f : frames) LLVMFuzzerTestOneInput(f.data(), f.size());
  for (const auto& m : mads) LLVMFuzzerTestOneInput(m.data(), m.size());
  const size_t golden_parsed = g_counts.parsed;
  std::mt19937 rng(args.seed);
  for (size_t k = 0; k < args.mutations; ++k) {
    const bool frame = rng() % 2;
    std::vector<uint8_t> x = frame ? cm_frames[rng() % cm_frames.size()] : mads[rng() % mads.size()];
    const size_t at = frame ? locate(x).bth + 20 : 0;  // the MAD inside a frame: after BTH and DETH
    for (int n = 1 + int(rng() % 4); n > 0 && !x.empty(); --n) {
      switch (rng() % 5) {
        case 0: x[rng() % x.size()] ^= uint8_t(1u << (rng() % 8)); break;
        case 1: x[at + rng() % std::min<size_t>(x.size() - at, 64)] = uint8_t(rng()); break;  // header, IDs
        case 2: store_be16(&x[at + 16], uint16_t(rng() % 0x20)); break;  // any attribute ID, mostly CM ones
        case 3: x.resize(rng() % (x.size() + 1)); break;
        case 4: x.insert(x.begin() + long(rng() % x.size()), uint8_t(rng())); break;
      }
      if (x.size() < at + cm::kMadHeaderSize) break;
    }
    std::vector<uint8_t> exact(x);
    exact.shrink_to_fit();
    LLVMFuzzerTestOneInput(exact.data(), exact.size());
  }
  std::printf("fuzz_cm: %zu golden frames (%zu CM), %zu MADs, %zu mutations (seed %u): %zu MADs parsed "
              "(%zu golden), %zu rdma_cm headers rebuilt;",
              frames.size(), golden_cm_frames, mads.size(), args.mutations, args.seed, g_counts.parsed, golden_parsed,
              g_counts.cma);
  for (const auto& [attr, n] : g_counts.by_attr) std::printf(" %s %zu", std::string(cm::attr_name(attr)).c_str(), n);
  std::printf("; no failure\n");
  return 0;
}
#endif
