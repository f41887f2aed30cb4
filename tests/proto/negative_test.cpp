// Negative tests for parse(): every ParseError from a crafted frame, every prefix of valid
// frames (raw, and with the IP/UDP lengths fixed up so the truncation shows at the right
// header), and every single-bit flip from the IP header onward. Each truncated prefix lives in
// its own heap buffer of exactly that size, so the sanitizer build catches any over-read.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "proto/headers.hpp"
#include "proto/packet.hpp"
#include "tests/proto/test_util.hpp"

using namespace uroce::proto;
namespace t = uroce::proto::test;

namespace {

using Frame = std::vector<uint8_t>;

struct Expect {
  ParseError error;
  Layer layer = Layer::Ethernet;  // for Truncated only
};

std::string describe(const ParseResult& r) { return r.message(); }
std::string describe(const Expect& e) { return ParseResult{e.error, e.layer}.message(); }

::testing::AssertionResult parses_as(const Frame& f, Expect want) {
  Packet p;
  ParseResult r = parse(f, p);
  if (r.error == want.error && (want.error != ParseError::Truncated || r.layer == want.layer))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got \"" << describe(r) << "\", want \"" << describe(want) << "\"";
}

// What parse() must say about the bytes after a BTH with `opcode` and `pad`, when `rem` bytes of
// the UDP payload follow the BTH and the ICRC does not match.
Expect after_bth(uint8_t opcode, uint8_t pad, size_t rem) {
  const OpcodeInfo& info = opcode_info(opcode);
  if (!info.valid) {
    Transport tr = transport_bits(opcode);
    return {tr == Transport::Unknown || tr == Transport::RD ? ParseError::UnknownOpcode
                                                            : ParseError::OpcodeInvalidForTransport};
  }
  for (Ext e : kExtOrder) {
    if (!info.has(e)) continue;
    if (rem < ext_size(e)) return {ParseError::Truncated, ext_layer(e)};
    rem -= ext_size(e);
  }
  if (rem < kIcrcSize) return {ParseError::Truncated, Layer::Icrc};
  const size_t padded = rem - kIcrcSize;
  if (padded % 4 != 0 || pad > padded) return {ParseError::BadPadCount};
  if (!info.payload && padded != 0) return {ParseError::UnexpectedPayload};
  return {ParseError::BadIcrc};
}

struct Sample {
  std::string name;
  Frame frame;
};

std::vector<Sample> samples() {
  std::vector<Sample> s;
  auto add = [&](uint8_t opc, int v, int vlans, size_t n) {
    Frame f = t::build_frame(t::make_packet(opc, v, vlans, t::seq_payload(n)));
    s.push_back({std::string(opcode_info(opc).name) + " IPv" + std::to_string(v) + " vlans=" + std::to_string(vlans) +
                     " payload=" + std::to_string(n),
                 f});
  };
  add(op::kSendOnly, 4, 0, 13);
  add(op::kSendOnlyImm, 6, 1, 8);
  add(op::kSendFirst, 4, 2, 16);
  add(op::kWriteOnlyImm, 4, 2, 5);
  add(op::kWriteOnly, 6, 0, 31);
  add(op::kWriteMiddle, 6, 2, 0);
  add(op::kReadRequest, 4, 0, 0);
  add(op::kReadRespFirst, 6, 0, 16);
  add(op::kReadRespMiddle, 4, 1, 6);
  add(op::kAck, 4, 1, 0);
  add(op::kAtomicAck, 6, 0, 0);
  add(op::kCmpSwap, 4, 0, 0);
  add(op::kFetchAdd, 6, 1, 0);
  add(op::kSendOnlyInv, 4, 0, 7);
  add(op::kFlush, 4, 1, 0);
  add(op::kAtomicWrite, 6, 0, 8);
  add(op::kUc | op::kWriteFirst, 4, 0, 9);
  add(op::kUd | op::kSendOnlyImm, 6, 1, 3);
  add(op::kUd | op::kSendOnly, 4, 0, 256);
  add(op::kCnp, 4, 0, 0);
  add(op::kCnp, 6, 1, 0);
  s.push_back({"golden rxe/write_small WRITE_ONLY", t::kWriteSmallFrame});
  return s;
}

Frame prefix(const Frame& f, size_t k) { return Frame(f.begin(), f.begin() + long(k)); }

}  // namespace

TEST(Negative, SamplesAreValid) {
  for (const auto& s : samples()) {
    ASSERT_FALSE(s.frame.empty()) << s.name;
    Packet p;
    ParseResult r = parse(s.frame, p);
    ASSERT_TRUE(r.ok()) << s.name << ": " << r.message();
    Frame again(frame_len(p));
    ASSERT_TRUE(build(p, again).ok());
    ASSERT_EQ(again, s.frame) << s.name;
  }
}

// Raw prefixes: the IP length field then claims more than the frame holds.
TEST(Negative, EveryPrefixIsTruncatedAtTheRightLayer) {
  std::set<Layer> seen;
  size_t checked = 0;
  for (const auto& s : samples()) {
    const Frame& f = s.frame;
    const size_t l3 = t::l3_offset(f);
    const size_t vlans = (l3 - 14) / 4;
    const bool v4 = (f[l3] >> 4) == 4;
    const size_t hl = t::ip_header_len_at(f, l3);
    for (size_t k = 0; k < f.size(); ++k) {
      Expect want{ParseError::Truncated};
      if (k < 14) want.layer = Layer::Ethernet;
      else if (k < 14 + 4 * vlans) want.layer = Layer::Vlan;
      else if (k < l3 + hl) want.layer = v4 ? Layer::Ipv4 : Layer::Ipv6;
      else want.layer = Layer::IpPayload;
      Frame g = prefix(f, k);
      ASSERT_TRUE(parses_as(g, want)) << s.name << " prefix " << k << " of " << f.size();
      seen.insert(want.layer);
      ++checked;
    }
  }
  // Ethernet, VLAN, IPv4, IPv6, IP payload.
  EXPECT_EQ(seen.size(), 5u);
  std::printf("%zu raw prefixes checked\n", checked);
}

// Prefixes with the IP and UDP lengths (and the IPv4 checksum) fixed up to the truncated size:
// the truncation is reported at the header it cuts.
TEST(Negative, EveryFixedUpPrefixIsReportedAtTheCutHeader) {
  std::set<Layer> seen;
  std::set<ParseError> errors;
  size_t checked = 0;
  for (const auto& s : samples()) {
    const Frame& f = s.frame;
    const size_t l3 = t::l3_offset(f);
    const size_t hl = t::ip_header_len_at(f, l3);
    const size_t bth = l3 + hl + 8;
    const uint8_t opcode = f[bth];
    const uint8_t pad = (f[bth + 1] >> 4) & 3;
    for (size_t k = l3 + hl; k < f.size(); ++k) {
      Frame g = prefix(f, k);
      t::fix_lengths(g);
      Expect want;
      const size_t rem = k - (l3 + hl);
      if (rem < 8) want = {ParseError::Truncated, Layer::Udp};
      else if (rem < 20) want = {ParseError::Truncated, Layer::Bth};
      else want = after_bth(opcode, pad, rem - 20);
      ASSERT_TRUE(parses_as(g, want)) << s.name << " prefix " << k << " of " << f.size();
      if (want.error == ParseError::Truncated) seen.insert(want.layer);
      errors.insert(want.error);
      ++checked;
    }
  }
  // UDP, BTH, every extension header, the ICRC.
  const std::set<Layer> all = {Layer::Udp,       Layer::Bth,  Layer::Deth,         Layer::Feth,
                               Layer::Reth,      Layer::AtomicEth, Layer::Aeth, Layer::AtomicAckEth,
                               Layer::ImmDt,     Layer::Ieth, Layer::Cnp,  Layer::Icrc};
  EXPECT_EQ(seen, all);
  EXPECT_TRUE(errors.count(ParseError::BadPadCount));
  EXPECT_TRUE(errors.count(ParseError::BadIcrc));
  std::printf("%zu fixed-up prefixes checked\n", checked);
}

// Every single-bit flip from the IP header to the end of the ICRC.
TEST(Negative, EverySingleBitFlip) {
  size_t checked = 0, ok_count = 0;
  for (const auto& s : samples()) {
    const Frame& f = s.frame;
    const size_t l3 = t::l3_offset(f);
    const bool v4 = (f[l3] >> 4) == 4;
    const size_t hl = t::ip_header_len_at(f, l3);
    const size_t udp = hl, bth = hl + 8;
    const uint8_t opcode = f[l3 + bth];
    const uint8_t pad = (f[l3 + bth + 1] >> 4) & 3;
    const size_t after = f.size() - l3 - bth - 12;  // bytes after the BTH, ICRC included
    for (size_t i = 0; i < f.size() - l3; ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        const uint8_t mask = uint8_t(1 << bit);
        Frame g = f;
        g[l3 + i] ^= mask;
        const uint8_t nb = g[l3 + i];
        Expect want{ParseError::BadIcrc};
        if (i < hl) {
          if (v4) {
            if (i == 0 && bit >= 4) want = {ParseError::BadIpVersion};
            else if (i == 0) {
              const size_t ihl = nb & 0x0F;
              if (ihl < 5) want = {ParseError::BadIpv4Header};
              else if (f.size() - l3 < ihl * 4) want = {ParseError::Truncated, Layer::Ipv4};
              else want = {ParseError::BadIpv4Checksum};
            } else {
              // Every other IPv4 header bit, TOS and TTL included (the ICRC masks them, the
              // header checksum does not), breaks the one's-complement sum.
              want = {ParseError::BadIpv4Checksum};
            }
          } else {
            if (i == 0 && bit >= 4) want = {ParseError::BadIpVersion};
            else if (i <= 3 || i == 7) want = {ParseError::Ok};  // traffic class, flow label, hop limit
            else if (i == 4 || i == 5) {
              const size_t plen = load_be16(&g[l3 + 4]);
              if (40 + plen > f.size() - l3) want = {ParseError::Truncated, Layer::IpPayload};
              else if (plen < 8) want = {ParseError::Truncated, Layer::Udp};
              else want = {ParseError::UdpLengthMismatch};
            } else if (i == 6) want = {ParseError::NotUdp};
            else want = {ParseError::BadIcrc};  // addresses
          }
        } else if (i < bth) {
          const size_t j = i - udp;
          if (j <= 1) want = {ParseError::BadIcrc};            // source port
          else if (j <= 3) want = {ParseError::NotRoceV2Port};  // destination port
          else if (j <= 5) {
            // A shorter UDP length first disagrees with the IP payload length.
            want = {ParseError::UdpLengthMismatch};
          } else want = {ParseError::BadUdpChecksum};  // 0 became nonzero: verified, and wrong
        } else if (i < bth + 12) {
          const size_t j = i - bth;
          if (j == 0) want = after_bth(nb, pad, after);
          else if (j == 1 && bit >= 6) want = {ParseError::BadIcrc};  // SE, M
          else if (j == 1 && bit >= 4) want = after_bth(opcode, uint8_t((nb >> 4) & 3), after);
          else if (j == 1) want = {ParseError::BadTver};
          else if (j == 4) want = {ParseError::Ok};  // FECN, BECN, reserved: masked
          else want = {ParseError::BadIcrc};
        }
        ASSERT_TRUE(parses_as(g, want)) << s.name << " l3 byte " << i << " bit " << bit;
        if (want.error == ParseError::Ok) {
          ++ok_count;
          // The packet still describes the flipped frame exactly (the UDP checksum aside, which
          // build() recomputes when nonzero).
          if (!(i >= udp + 6 && i < udp + 8)) {
            Packet p;
            parse(g, p);
            Frame again(frame_len(p));
            ASSERT_TRUE(build(p, again).ok());
            ASSERT_EQ(again, g) << s.name << " l3 byte " << i << " bit " << bit;
          }
        }
        ++checked;
      }
    }
  }
  std::printf("%zu single-bit flips checked, %zu of them in masked, unverified fields (ok)\n", checked, ok_count);
}

// ---- One crafted frame per ParseError ---------------------------------------------------------

namespace {
Frame base_v4(uint8_t opc = op::kSendOnly, size_t n = 8, int vlans = 0) {
  return t::build_frame(t::make_packet(opc, 4, vlans, t::seq_payload(n)));
}
Frame base_v6(uint8_t opc = op::kSendOnly, size_t n = 8, int vlans = 0) {
  return t::build_frame(t::make_packet(opc, 6, vlans, t::seq_payload(n)));
}
// Frame f with the ethertype (or VLAN TPID) at byte `at` replaced by `type`.
Frame with_type(Frame f, size_t at, uint16_t type) {
  store_be16(&f[at], type);
  return f;
}
}  // namespace

TEST(ParseErrors, Truncated) {
  Frame f = base_v4();
  EXPECT_TRUE(parses_as({}, {ParseError::Truncated, Layer::Ethernet}));
  EXPECT_TRUE(parses_as(prefix(f, 13), {ParseError::Truncated, Layer::Ethernet}));
  Frame v = base_v4(op::kSendOnly, 8, 1);
  EXPECT_TRUE(parses_as(prefix(v, 17), {ParseError::Truncated, Layer::Vlan}));
  EXPECT_TRUE(parses_as(prefix(f, 33), {ParseError::Truncated, Layer::Ipv4}));
  EXPECT_TRUE(parses_as(prefix(base_v6(), 53), {ParseError::Truncated, Layer::Ipv6}));
  EXPECT_TRUE(parses_as(prefix(f, f.size() - 1), {ParseError::Truncated, Layer::IpPayload}));
  // IHL 6 with the option bytes cut off.
  Frame o = prefix(f, 14 + 20);
  o[14] = 0x46;
  o.push_back(0);
  EXPECT_TRUE(parses_as(o, {ParseError::Truncated, Layer::Ipv4}));
  Packet p;
  EXPECT_EQ(parse(prefix(f, 20), p).message(), "truncated in IPv4 header");
}

TEST(ParseErrors, RoceV1) {
  EXPECT_TRUE(parses_as(with_type(base_v4(), 12, kEtherTypeRoceV1), {ParseError::RoceV1}));
  EXPECT_TRUE(parses_as(with_type(base_v4(op::kSendOnly, 8, 1), 16, kEtherTypeRoceV1), {ParseError::RoceV1}));
}

TEST(ParseErrors, NotIp) {
  EXPECT_TRUE(parses_as(with_type(base_v4(), 12, kEtherTypeArp), {ParseError::NotIp}));
  // A third VLAN tag is not followed.
  EXPECT_TRUE(parses_as(with_type(base_v4(op::kSendOnly, 8, 2), 20, kEtherTypeVlan), {ParseError::NotIp}));
}

TEST(ParseErrors, BadIpVersion) {
  // An IPv6 header behind the IPv4 ethertype, and the other way round.
  EXPECT_TRUE(parses_as(with_type(base_v6(), 12, kEtherTypeIpv4), {ParseError::BadIpVersion}));
  EXPECT_TRUE(parses_as(with_type(base_v4(op::kSendOnly, 64), 12, kEtherTypeIpv6), {ParseError::BadIpVersion}));
}

TEST(ParseErrors, BadIpv4Header) {
  for (uint8_t ihl = 0; ihl < 5; ++ihl) {
    Frame f = base_v4();
    f[14] = uint8_t(0x40 | ihl);
    EXPECT_TRUE(parses_as(f, {ParseError::BadIpv4Header})) << int(ihl);
  }
}

TEST(ParseErrors, BadIpv4Checksum) {
  Frame f = base_v4();
  f[14 + 11] ^= 1;
  EXPECT_TRUE(parses_as(f, {ParseError::BadIpv4Checksum}));
  Frame g = base_v4();
  g[14 + 8] = 1;  // TTL changed by a router that forgot the checksum
  EXPECT_TRUE(parses_as(g, {ParseError::BadIpv4Checksum}));
}

TEST(ParseErrors, Ipv4Fragment) {
  Frame f = base_v4();
  store_be16(&f[14 + 6], 0x2000);  // MF
  t::fix_ipv4_checksum(f, 14);
  EXPECT_TRUE(parses_as(f, {ParseError::Ipv4Fragment}));
  Frame g = base_v4();
  store_be16(&g[14 + 6], 0x4001);  // DF and offset 8
  t::fix_ipv4_checksum(g, 14);
  EXPECT_TRUE(parses_as(g, {ParseError::Ipv4Fragment}));
}

TEST(ParseErrors, NotUdp) {
  Frame f = base_v4();
  f[14 + 9] = 6;
  t::fix_ipv4_checksum(f, 14);
  EXPECT_TRUE(parses_as(f, {ParseError::NotUdp}));
  Frame g = base_v6();
  g[14 + 6] = 0;  // hop-by-hop options: extension headers are not followed
  EXPECT_TRUE(parses_as(g, {ParseError::NotUdp}));
}

TEST(ParseErrors, IpLengthMismatch) {
  Frame f = base_v4();
  store_be16(&f[14 + 2], 19);  // shorter than the header
  t::fix_ipv4_checksum(f, 14);
  EXPECT_TRUE(parses_as(f, {ParseError::IpLengthMismatch}));
  Frame g = base_v4();
  store_be16(&g[14 + 2], 0);
  t::fix_ipv4_checksum(g, 14);
  EXPECT_TRUE(parses_as(g, {ParseError::IpLengthMismatch}));
  // Longer than the frame: reported as truncated IP payload.
  Frame h = base_v4();
  store_be16(&h[14 + 2], uint16_t(h.size() - 14 + 1));
  t::fix_ipv4_checksum(h, 14);
  EXPECT_TRUE(parses_as(h, {ParseError::Truncated, Layer::IpPayload}));
}

TEST(ParseErrors, UdpLengthMismatch) {
  for (int delta : {-1, 1, -4, 4}) {
    for (Frame f : {base_v4(), base_v6()}) {
      UdpView<uint8_t> u(&f[14 + t::ip_header_len_at(f, 14)]);
      u.set_length(uint16_t(u.length() + delta));
      EXPECT_TRUE(parses_as(f, {ParseError::UdpLengthMismatch})) << delta;
    }
  }
}

TEST(ParseErrors, BadUdpChecksum) {
  // A correct nonzero checksum parses; the same frame with one checksum bit changed does not.
  for (Frame f : {base_v4(), base_v6()}) {
    Packet p;
    ASSERT_TRUE(parse(f, p).ok());
    p.udp_checksum = true;
    Frame g(frame_len(p));
    ASSERT_TRUE(build(p, g).ok());
    EXPECT_TRUE(parses_as(g, {ParseError::Ok}));
    const size_t csum = 14 + t::ip_header_len_at(g, 14) + 6;
    EXPECT_NE(load_be16(&g[csum]), 0);
    g[csum + 1] ^= 0x01;
    EXPECT_TRUE(parses_as(g, {ParseError::BadUdpChecksum}));
  }
}

TEST(ParseErrors, NotRoceV2Port) {
  Frame f = base_v4();
  store_be16(&f[14 + 20 + 2], 4792);
  EXPECT_TRUE(parses_as(f, {ParseError::NotRoceV2Port}));
  Frame g = base_v6();
  store_be16(&g[14 + 40 + 2], 0xC000);
  EXPECT_TRUE(parses_as(g, {ParseError::NotRoceV2Port}));
}

TEST(ParseErrors, BadTver) {
  for (uint8_t tv = 1; tv < 16; ++tv) {
    Frame f = base_v4();
    f[14 + 28 + 1] = uint8_t((f[14 + 28 + 1] & 0xF0) | tv);
    EXPECT_TRUE(parses_as(f, {ParseError::BadTver})) << int(tv);
  }
}

TEST(ParseErrors, UnknownOpcodeAndInvalidForTransport) {
  int unknown = 0, invalid = 0, valid = 0;
  for (int c = 0; c < 256; ++c) {
    Frame f = base_v4();
    f[14 + 28] = uint8_t(c);
    Expect want = after_bth(uint8_t(c), 0, 8 + 4);
    if (c == op::kSendOnly) want = {ParseError::Ok};  // the frame's own opcode
    if (!opcode_info(uint8_t(c)).valid) {
      const bool unk = (c >= 0x80 && (c < 0xa0 || c >= 0xc0)) || (c >= 0x40 && c < 0x60);
      EXPECT_EQ(want.error, unk ? ParseError::UnknownOpcode : ParseError::OpcodeInvalidForTransport) << c;
      (unk ? unknown : invalid)++;
    } else {
      ++valid;
    }
    EXPECT_TRUE(parses_as(f, want)) << c;
  }
  EXPECT_EQ(valid, 63);
  EXPECT_EQ(unknown, 32 + 127 - 32);                  // RD, and 0x80-0xff except the CNP and XRC's
  EXPECT_EQ(invalid, 256 - 63 - 32 - 95);             // RC 0x15, 0x18-0x1b, 0x1e-0x1f; UC 0x2c-0x3f; UD
                                                      // others; XRC 0xb5, 0xb8-0xbf
  Frame uc_read = base_v4();
  uc_read[14 + 28] = 0x2c;
  EXPECT_TRUE(parses_as(uc_read, {ParseError::OpcodeInvalidForTransport}));
  Frame ud_write = base_v4();
  ud_write[14 + 28] = 0x6a;
  EXPECT_TRUE(parses_as(ud_write, {ParseError::OpcodeInvalidForTransport}));
  Frame rd = base_v4();
  rd[14 + 28] = 0x44;
  EXPECT_TRUE(parses_as(rd, {ParseError::UnknownOpcode}));
}

TEST(ParseErrors, BadPadCount) {
  // Payload + pad not a multiple of 4.
  for (size_t extra : {1u, 2u, 3u}) {
    Frame f = base_v4(op::kSendOnly, 8);
    f.insert(f.end() - 4, extra, 0);
    t::fix_lengths(f);
    EXPECT_TRUE(parses_as(f, {ParseError::BadPadCount})) << extra;
  }
  // Pad longer than the payload: zero-length SEND claiming 3 pad bytes, ACK claiming 1.
  Frame z = base_v4(op::kSendOnly, 0);
  z[14 + 28 + 1] |= 0x30;
  EXPECT_TRUE(parses_as(z, {ParseError::BadPadCount}));
  Frame a = base_v4(op::kAck, 0);
  a[14 + 28 + 1] |= 0x10;
  EXPECT_TRUE(parses_as(a, {ParseError::BadPadCount}));
}

TEST(ParseErrors, UnexpectedPayload) {
  for (uint8_t opc : {op::kAck, op::kAtomicAck, op::kReadRequest, op::kCmpSwap, op::kFetchAdd, op::kCnp}) {
    Frame f = base_v4(opc, 0);
    f.insert(f.end() - 4, 4, 0xAB);
    t::fix_lengths(f);
    t::fix_icrc(f);
    EXPECT_TRUE(parses_as(f, {ParseError::UnexpectedPayload})) << opcode_info(opc).name;
  }
}

TEST(ParseErrors, BadIcrc) {
  Frame f = base_v4();
  f[f.size() - 5] ^= 0x80;  // last payload byte
  EXPECT_TRUE(parses_as(f, {ParseError::BadIcrc}));
  Packet p;
  ParseResult r = parse(f, p);
  EXPECT_EQ(r.message(), "bad ICRC");
  EXPECT_NE(p.icrc_wire, p.icrc_computed);
  EXPECT_EQ(p.psn, 0x00ABCDu);  // the packet is complete on BadIcrc
  // verify_icrc = false lets it through.
  EXPECT_TRUE(parse(f, p, ParseOptions{false}).ok());
  Frame g = base_v6();
  g.back() ^= 1;
  EXPECT_TRUE(parses_as(g, {ParseError::BadIcrc}));
}

TEST(ParseErrors, EveryErrorHasAName) {
  for (int e = 0; e <= int(ParseError::BadIcrc); ++e) EXPECT_NE(error_name(ParseError(e)), "?") << e;
  for (int l = 0; l <= int(Layer::Icrc); ++l) EXPECT_NE(layer_name(Layer(l)), "?") << l;
}

// Ethernet padding after a short IP packet is kept as the L2 trailer and rebuilt.
TEST(Parse, L2TrailerRoundTrips) {
  Packet p = t::make_packet(op::kAck, 4, 0, {});
  Frame f = t::build_frame(p);
  ASSERT_EQ(f.size(), 62u);
  f.resize(64, 0);
  Packet q;
  ASSERT_TRUE(parse(f, q).ok());
  EXPECT_EQ(q.l2_trailer.size(), 2u);
  Frame again(frame_len(q));
  ASSERT_TRUE(build(q, again).ok());
  EXPECT_EQ(again, f);
}
