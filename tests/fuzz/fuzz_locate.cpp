// Fuzz target for the header walker (proto::locate), the ARP / ND views and option walk, the
// port's control plane (port/neigh.cpp, which has no DPDK code) that runs them on every frame a
// DpdkLink receives, and the uroce service's routing of frames (port/service/route.cpp). For any
// input:
//   - locate()'s offsets stay inside the frame and agree with each other (l3 = 14 + 4 per
//     tag, l4 = l3 + the IP header, the BTH 8 bytes after UDP on port 4791 only);
//   - when parse() accepts the frame, locate() found it as RoCEv2 at the same offsets;
//   - find_nd_option() returns an option inside the bytes it was given;
//   - route_frame() routes only RoCEv2 frames with a whole BTH, to a 24-bit QP number;
//   - ControlPlane::sort() delivers only RoCEv2 frames with a whole UDP header, and an answer
//     it writes fits the buffer.
// Any violation traps; so does a read or write outside the input under the sanitizers.
//
// Built with clang -fsanitize=fuzzer (scripts/fuzz.sh locate, UROCE_LIBFUZZER) this is a
// libFuzzer target; without that macro main() runs it over the golden frames, the control
// frames of tests/proto/control_frames.hpp (with and without a VLAN tag) and seeded mutations.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <vector>

#include "port/link_counters.hpp"
#include "port/neigh.hpp"
#include "port/service/route.hpp"
#include "proto/arp.hpp"
#include "proto/icmp.hpp"
#include "proto/locate.hpp"
#include "proto/packet.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/proto/control_frames.hpp"

using namespace uroce;
using namespace uroce::proto;

const char* const uroce::fuzz::kTarget = "fuzz_locate";

namespace {

struct Counts {
  size_t runs = 0, roce = 0, arp = 0, icmp6 = 0, delivered = 0, replies = 0;
};
Counts g_counts;

// Host B of control_frames.hpp, and the destination of the golden rxe captures.
struct Host {
  port::LinkCounters ctr;
  port::ControlPlane cp;
  Host(const uint8_t* mac, const uint8_t* ip4, const uint8_t* ll) {
    Mac m;
    Ip6 g;
    std::memcpy(m.data(), mac, 6);
    std::memcpy(g.data(), ll, 16);
    cp.init(m, ip4, {g}, &ctr);
  }
};

void sort_copy(Host& h, const uint8_t* data, size_t size, const Located& at) {
  // The frame in a buffer with a little room behind it, as an mbuf has.
  std::vector<uint8_t> buf(data, data + size);
  buf.resize(size + 32);
  const port::Verdict v = h.cp.sort(buf.data(), uint32_t(size), uint32_t(buf.size()));
  if (v.kind == port::Verdict::Deliver) {
    check(at.roce_v2() && at.ok(), "delivered a frame that is not RoCEv2 with a whole UDP header");
    ++g_counts.delivered;
  } else if (v.kind == port::Verdict::Reply) {
    check(v.len <= buf.size() && v.len >= EthView<const uint8_t>::kSize && v.sent, "answer outside the buffer");
    ++g_counts.replies;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ++g_counts.runs;
  const std::span<const uint8_t> in(data, size);
  const Located at = locate(in);
  check(at.l3 <= size, "l3 past the end");
  check(at.vlan_count <= 2, "more than two tags");
  if (at.l3) check(at.l3 == EthView<const uint8_t>::kSize + 4u * at.vlan_count, "l3 not after the tags");
  if (at.l4) {
    check(at.ip_version == 4 || at.ip_version == 6, "l4 without an IP version");
    check(at.l4 == at.l3 + at.ip_header_len && at.l4 <= size, "l4 not after the IP header");
  }
  if (at.udp_ports) check(at.ip_proto == kIpProtoUdp && at.l4 && at.l4 + 4 <= size, "UDP ports outside the frame");
  check(at.roce_v2() == (at.udp_ports && at.udp_dport == kRoceV2Port), "BTH offset without port 4791");
  if (at.roce_v2()) check(at.bth == at.l4 + UdpView<const uint8_t>::kSize, "BTH not after UDP");
  if (at.ok() && at.ip_proto == kIpProtoUdp && at.l4) check(at.l4 + 8 <= size, "ok with a cut UDP header");

  // The uroce service's choice of a frame's process (port/service/route.cpp): only RoCEv2 frames
  // with a whole BTH go to anyone; QP numbers are 24-bit; QP 1 goes by its MAD.
  const port::service::Route route = port::service::route_frame(in);
  if (route.by != port::service::Route::By::None) check(at.roce_v2() && at.bth + 12 <= size, "routed a frame without a BTH");
  if (route.by == port::service::Route::By::Qp) check(route.id <= 0xFFFFFF && route.id != 1, "a QP number out of range");

  Packet p;
  if (parse(in, p, {.verify_icrc = false}).ok() || parse(in, p).error == ParseError::BadIcrc) {
    check(at.ok() && at.roce_v2(), "parse() accepts what locate() does not call RoCEv2");
    check(at.l3 == EthView<const uint8_t>::kSize + 4u * p.vlan_count, "parse() and locate() disagree on tags");
    ++g_counts.roce;
  }

  if (at.arp() && size - at.l3 >= ArpView<const uint8_t>::kSize) {
    ArpView<const uint8_t> a(data + at.l3);
    volatile bool sink = a.is_ethernet_ipv4() && a.oper() == kArpRequest && a.tpa()[3] == a.spa()[3];
    (void)sink;
    ++g_counts.arp;
  }
  if (at.l4 && at.ip_proto == kIpProtoIcmp6 && size - at.l4 >= NdView<const uint8_t>::kSize) {
    const std::span<const uint8_t> opts = in.subspan(at.l4 + NdView<const uint8_t>::kSize);
    for (uint8_t type : {kNdOptSourceLinkAddr, kNdOptTargetLinkAddr})
      if (const uint8_t* o = find_nd_option(opts, type))
        check(o >= opts.data() && o + NdOptionView<const uint8_t>::kSize <= opts.data() + opts.size(),
              "ND option outside its bytes");
    ++g_counts.icmp6;
  }

  static Host b(test::kMacB, test::kIp4B, test::kLlB);
  static const uint8_t kRxeMac[6] = {0x02, 0x00, 0xc6, 0x12, 0x01, 0x02};
  static const uint8_t kRxeIp[4] = {198, 18, 1, 2};
  static Host rxe(kRxeMac, kRxeIp, test::kLlB);
  sort_copy(b, data, size, at);
  sort_copy(rxe, data, size, at);
  return 0;
}

#ifndef UROCE_LIBFUZZER
// ---- Regression driver ------------------------------------------------------------------------
#include <random>
#include <string>

#include "tests/fuzz/fuzz_util.hpp"

int main(int argc, char** argv) {
  fuzz::Args args;
  args.mutations = 50000;
  if (!fuzz::parse_args(argc, argv, args)) return 0;
  if (!args.inputs.empty()) {  // reproduce: run the given files (e.g. libFuzzer crash-* files)
    if (!fuzz::run_files(args.inputs, LLVMFuzzerTestOneInput)) return 2;
    std::printf("fuzz_locate: %zu files, no failure\n", args.inputs.size());
    return 0;
  }

  std::vector<std::vector<uint8_t>> frames = fuzz::golden_frames(args.golden);
  const size_t n_golden = frames.size();
  for (const auto* f : {&test::kArpRequestFrame, &test::kArpReplyFrame, &test::kEcho4Frame, &test::kNsFrame,
                        &test::kNaFrame, &test::kEcho6Frame}) {
    frames.push_back(*f);
    std::vector<uint8_t> tagged(f->size() + 4);
    for (size_t i = 0; i < tagged.size(); ++i) tagged[i] = i < 12 ? (*f)[i] : i >= 16 ? (*f)[i - 4] : 0;
    tagged[12] = 0x81, tagged[15] = 0x07;
    frames.push_back(tagged);
  }
  if (!args.corpus_dir.empty()) return fuzz::write_corpus(args.corpus_dir, frames) ? 0 : 2;

  for (const auto& f : frames) LLVMFuzzerTestOneInput(f.data(), f.size());
  const size_t golden_roce = g_counts.roce;
  std::mt19937 rng(args.seed);
  for (size_t k = 0; k < args.mutations; ++k) {
    // Mostly the control frames (the golden ones reach parse() in fuzz_parse already).
    std::vector<uint8_t> f = rng() % 2 ? frames[n_golden + rng() % (frames.size() - n_golden)] : frames[rng() % n_golden];
    for (int m = 1 + int(rng() % 3); m > 0 && !f.empty(); --m) {
      switch (rng() % 4) {
        case 0: f[rng() % f.size()] ^= uint8_t(1u << (rng() % 8)); break;
        case 1: f[rng() % std::min<size_t>(f.size(), 90)] = uint8_t(rng()); break;
        case 2: f.resize(rng() % f.size()); break;
        case 3: f.insert(f.begin() + long(rng() % f.size()), uint8_t(rng())); break;
      }
    }
    // An exact-size copy, so that a read past the end is one past an allocation.
    std::vector<uint8_t> exact(f);
    exact.shrink_to_fit();
    LLVMFuzzerTestOneInput(exact.data(), exact.size());
  }
  std::printf("fuzz_locate: %zu frames (%zu golden, %zu RoCE parse), %zu mutations: %zu RoCE, %zu ARP, %zu ICMPv6 "
              "with ND room, %zu delivered, %zu answered, no failure\n",
              frames.size(), n_golden, golden_roce, args.mutations, g_counts.roce - golden_roce, g_counts.arp,
              g_counts.icmp6, g_counts.delivered, g_counts.replies);
  return 0;
}
#endif
