#include "proto/packet.hpp"

#include <cstring>

#include "proto/checksum.hpp"
#include "proto/icrc.hpp"
#include "proto/locate.hpp"

namespace uroce::proto {

std::string_view layer_name(Layer l) {
  switch (l) {
    case Layer::Ethernet: return "Ethernet";
    case Layer::Vlan: return "VLAN tag";
    case Layer::Ipv4: return "IPv4 header";
    case Layer::Ipv6: return "IPv6 header";
    case Layer::IpPayload: return "IP payload";
    case Layer::Udp: return "UDP header";
    case Layer::Bth: return "BTH";
    case Layer::Deth: return "DETH";
    case Layer::Xrceth: return "XRCETH";
    case Layer::Feth: return "FETH";
    case Layer::Reth: return "RETH";
    case Layer::AtomicEth: return "AtomicETH";
    case Layer::Aeth: return "AETH";
    case Layer::AtomicAckEth: return "AtomicAckETH";
    case Layer::ImmDt: return "ImmDt";
    case Layer::Ieth: return "IETH";
    case Layer::Cnp: return "CNP body";
    case Layer::Icrc: return "ICRC";
  }
  return "?";
}

std::string_view error_name(ParseError e) {
  switch (e) {
    case ParseError::Ok: return "ok";
    case ParseError::Truncated: return "truncated";
    case ParseError::RoceV1: return "RoCE v1 (ethertype 0x8915), not RoCEv2";
    case ParseError::NotIp: return "not IPv4 or IPv6";
    case ParseError::BadIpVersion: return "IP version does not match the ethertype";
    case ParseError::BadIpv4Header: return "IPv4 header length below 20";
    case ParseError::BadIpv4Checksum: return "bad IPv4 header checksum";
    case ParseError::Ipv4Fragment: return "IPv4 fragment";
    case ParseError::NotUdp: return "not UDP";
    case ParseError::IpLengthMismatch: return "IP length does not match the frame";
    case ParseError::UdpLengthMismatch: return "UDP length does not match the IP payload";
    case ParseError::NotRoceV2Port: return "UDP destination port is not 4791";
    case ParseError::BadTver: return "BTH TVer is not 0";
    case ParseError::UnknownOpcode: return "unknown opcode";
    case ParseError::OpcodeInvalidForTransport: return "opcode not valid for its transport";
    case ParseError::BadPadCount: return "pad count inconsistent with the length";
    case ParseError::UnexpectedPayload: return "payload on an opcode that carries none";
    case ParseError::BadIcrc: return "bad ICRC";
    case ParseError::BadUdpChecksum: return "bad UDP checksum";
  }
  return "?";
}

std::string_view error_name(BuildError e) {
  switch (e) {
    case BuildError::Ok: return "ok";
    case BuildError::BufferTooSmall: return "buffer too small";
    case BuildError::InvalidOpcode: return "invalid opcode";
    case BuildError::PayloadNotAllowed: return "payload on an opcode that carries none";
    case BuildError::TooLong: return "packet longer than IP allows";
  }
  return "?";
}

std::string ParseResult::message() const {
  if (error == ParseError::Truncated) return "truncated in " + std::string(layer_name(layer));
  return std::string(error_name(error));
}

Layer ext_layer(Ext e) {
  switch (e) {
    case kDeth: return Layer::Deth;
    case kXrceth: return Layer::Xrceth;
    case kFeth: return Layer::Feth;
    case kReth: return Layer::Reth;
    case kAtomicEth: return Layer::AtomicEth;
    case kAeth: return Layer::Aeth;
    case kAtomicAckEth: return Layer::AtomicAckEth;
    case kImmDt: return Layer::ImmDt;
    case kIeth: return Layer::Ieth;
    case kCnpBody: return Layer::Cnp;
  }
  return Layer::Bth;
}

namespace {

ParseResult fail(ParseError e, Layer l = Layer::Ethernet) { return {e, l}; }

// Reads one extension header into the packet description.
void read_ext(Ext e, const uint8_t* p, Packet& out) {
  switch (e) {
    case kDeth: {
      DethView<const uint8_t> v(p);
      out.deth = {v.qkey(), v.resv(), v.src_qp()};
      break;
    }
    case kXrceth: {
      XrcethView<const uint8_t> v(p);
      out.xrceth = {v.srqn(), v.resv()};
      break;
    }
    case kFeth: {
      FethView<const uint8_t> v(p);
      out.feth = {v.placement(), v.selectivity(), v.resv()};
      break;
    }
    case kReth: {
      RethView<const uint8_t> v(p);
      out.reth = {v.va(), v.rkey(), v.dma_len()};
      break;
    }
    case kAtomicEth: {
      AtomicEthView<const uint8_t> v(p);
      out.atomic = {v.va(), v.rkey(), v.swap_add(), v.compare()};
      break;
    }
    case kAeth: {
      AethView<const uint8_t> v(p);
      out.aeth = {v.syndrome(), v.msn()};
      break;
    }
    case kAtomicAckEth: out.atomic_ack_orig = AtomicAckEthView<const uint8_t>(p).orig(); break;
    case kImmDt: out.imm = ImmDtView<const uint8_t>(p).imm(); break;
    case kIeth: out.ieth_rkey = IethView<const uint8_t>(p).rkey(); break;
    case kCnpBody: std::memcpy(out.cnp_reserved.data(), p, 16); break;
  }
}

void write_ext(Ext e, uint8_t* p, const Packet& in) {
  switch (e) {
    case kDeth: {
      DethView<uint8_t> v(p);
      v.set_qkey(in.deth.qkey);
      v.set_src_qp(in.deth.src_qp, in.deth.resv);
      break;
    }
    case kXrceth: XrcethView<uint8_t>(p).set(in.xrceth.srqn, in.xrceth.resv); break;
    case kFeth: FethView<uint8_t>(p).set(in.feth.placement, in.feth.selectivity, in.feth.resv); break;
    case kReth: {
      RethView<uint8_t> v(p);
      v.set_va(in.reth.va);
      v.set_rkey(in.reth.rkey);
      v.set_dma_len(in.reth.dma_len);
      break;
    }
    case kAtomicEth: {
      AtomicEthView<uint8_t> v(p);
      v.set_va(in.atomic.va);
      v.set_rkey(in.atomic.rkey);
      v.set_swap_add(in.atomic.swap_add);
      v.set_compare(in.atomic.compare);
      break;
    }
    case kAeth: {
      AethView<uint8_t> v(p);
      v.set_syndrome(in.aeth.syndrome);
      v.set_msn(in.aeth.msn);
      break;
    }
    case kAtomicAckEth: AtomicAckEthView<uint8_t>(p).set_orig(in.atomic_ack_orig); break;
    case kImmDt: ImmDtView<uint8_t>(p).set_imm(in.imm); break;
    case kIeth: IethView<uint8_t>(p).set_rkey(in.ieth_rkey); break;
    case kCnpBody: std::memcpy(p, in.cnp_reserved.data(), 16); break;
  }
}

// The UDP checksum's pseudo header addresses: 4 bytes each for IPv4, 16 for IPv6.
std::span<const uint8_t> ip_addr(const Packet& pk, const Ip6& a) {
  return {a.data(), pk.ip_version == 4 ? size_t(4) : size_t(16)};
}

size_t l2_len(const Packet& p) { return EthView<const uint8_t>::kSize + 4u * p.vlan_count; }
size_t ip_hdr_len(const Packet& p) {
  return p.ip_version == 4 ? Ipv4View<const uint8_t>::kSize + p.ipv4_options.size() : Ipv6View<const uint8_t>::kSize;
}

}  // namespace

bool icrc_verifies(std::span<const uint8_t> frame) {
  const Located loc = locate(frame);
  if (!loc.ok() || !loc.roce_v2() || loc.ip_version == 0) return false;
  const uint8_t* l3 = frame.data() + loc.l3;
  const size_t ip_total =
      loc.ip_version == 4 ? size_t(load_be16(l3 + 2)) : Ipv6View<const uint8_t>::kSize + load_be16(l3 + 4);
  const size_t least = loc.ip_header_len + UdpView<const uint8_t>::kSize + BthView<const uint8_t>::kSize + kIcrcSize;
  if (ip_total < least || ip_total > frame.size() - loc.l3) return false;
  return icrc_compute(l3, ip_total - kIcrcSize, loc.ip_header_len) == load_le32(l3 + ip_total - kIcrcSize);
}

ParseResult parse(std::span<const uint8_t> frame, Packet& out, const ParseOptions& opt) {
  // Not `out = Packet{}`: zeroing the whole struct per frame was a visible share of the
  // receive path. Reset what a frame may leave unwritten; extension-header fields the opcode
  // does not carry are left as they were (unspecified, see packet.hpp).
  out.vlan_count = 0;
  out.ip_src = {};
  out.ip_dst = {};
  out.ipv4_id = 0;
  out.ipv4_flags_frag = 0;
  out.flow_label = 0;
  out.ipv4_options = {};
  out.ip_header = {};
  out.udp_checksum = false;
  out.payload = {};
  out.l2_trailer = {};
  out.icrc_wire = out.icrc_computed = 0;
  out.icrc_deferred = false;
  const uint8_t* const base = frame.data();
  const size_t n = frame.size();
  size_t off = 0;

  // Ethernet and up to two VLAN tags.
  if (n < EthView<const uint8_t>::kSize) return fail(ParseError::Truncated, Layer::Ethernet);
  EthView<const uint8_t> eth(base);
  std::memcpy(out.eth_dst.data(), eth.dst(), 6);
  std::memcpy(out.eth_src.data(), eth.src(), 6);
  uint16_t type = eth.ethertype();
  off = EthView<const uint8_t>::kSize;
  while ((type == kEtherTypeVlan || type == kEtherTypeQinQ) && out.vlan_count < 2) {
    if (n - off < VlanView<const uint8_t>::kSize) return fail(ParseError::Truncated, Layer::Vlan);
    VlanView<const uint8_t> tag(base + off);
    out.vlan_tpid[out.vlan_count] = type;
    out.vlan_tci[out.vlan_count] = tag.tci();
    ++out.vlan_count;
    type = tag.inner_type();
    off += VlanView<const uint8_t>::kSize;
  }
  if (type == kEtherTypeRoceV1) return fail(ParseError::RoceV1);
  if (type != kEtherTypeIpv4 && type != kEtherTypeIpv6) return fail(ParseError::NotIp);

  // IP
  const size_t l3_off = off;
  size_t ip_hlen = 0;
  size_t ip_total = 0;  // IP header + payload, from the IP length field
  if (type == kEtherTypeIpv4) {
    if (n - off < Ipv4View<const uint8_t>::kSize) return fail(ParseError::Truncated, Layer::Ipv4);
    Ipv4View<const uint8_t> ip(base + off);
    out.ip_version = 4;
    if (ip.version() != 4) return fail(ParseError::BadIpVersion);
    if (ip.ihl() < 5) return fail(ParseError::BadIpv4Header);
    ip_hlen = ip.header_len();
    if (n - off < ip_hlen) return fail(ParseError::Truncated, Layer::Ipv4);
    std::memcpy(out.ip_src.data(), ip.src(), 4);
    std::memcpy(out.ip_dst.data(), ip.dst(), 4);
    out.dscp = ip.dscp();
    out.ecn = ip.ecn();
    out.ttl = ip.ttl();
    out.ipv4_id = ip.id();
    out.ipv4_flags_frag = ip.flags_frag();
    out.ipv4_options = frame.subspan(off + 20, ip_hlen - 20);
    if (inet_checksum(base + off, ip_hlen) != 0) return fail(ParseError::BadIpv4Checksum);
    if (ip.more_fragments() || ip.frag_offset() != 0) return fail(ParseError::Ipv4Fragment);
    if (ip.protocol() != kIpProtoUdp) return fail(ParseError::NotUdp);
    ip_total = ip.total_len();
    if (ip_total < ip_hlen) return fail(ParseError::IpLengthMismatch);
    out.ip_header = frame.subspan(l3_off, Ipv4View<const uint8_t>::kSize);
  } else {
    if (n - off < Ipv6View<const uint8_t>::kSize) return fail(ParseError::Truncated, Layer::Ipv6);
    Ipv6View<const uint8_t> ip(base + off);
    out.ip_version = 6;
    if (ip.version() != 6) return fail(ParseError::BadIpVersion);
    ip_hlen = Ipv6View<const uint8_t>::kSize;
    std::memcpy(out.ip_src.data(), ip.src(), 16);
    std::memcpy(out.ip_dst.data(), ip.dst(), 16);
    out.dscp = ip.dscp();
    out.ecn = ip.ecn();
    out.ttl = ip.hop_limit();
    out.flow_label = ip.flow_label();
    if (ip.next_header() != kIpProtoUdp) return fail(ParseError::NotUdp);
    ip_total = ip_hlen + ip.payload_len();
    out.ip_header = frame.subspan(l3_off, ip_hlen);
  }
  if (ip_total > n - l3_off) return fail(ParseError::Truncated, Layer::IpPayload);
  const size_t end = l3_off + ip_total;  // end of the IP packet; anything after is L2 padding
  out.l2_trailer = frame.subspan(end);
  off = l3_off + ip_hlen;

  // UDP
  if (end - off < UdpView<const uint8_t>::kSize) return fail(ParseError::Truncated, Layer::Udp);
  UdpView<const uint8_t> udp(base + off);
  out.udp_sport = udp.src_port();
  out.udp_dport = udp.dst_port();
  out.udp_checksum = udp.checksum() != 0;
  if (udp.length() != end - off) return fail(ParseError::UdpLengthMismatch);
  if (udp.dst_port() != kRoceV2Port) return fail(ParseError::NotRoceV2Port);
  // A nonzero checksum is verified, as the kernel's UDP layer does before rxe sees a frame.
  if (out.udp_checksum &&
      !l4_checksum_ok(ip_addr(out, out.ip_src), ip_addr(out, out.ip_dst), kIpProtoUdp, base + off, end - off))
    return fail(ParseError::BadUdpChecksum);
  off += UdpView<const uint8_t>::kSize;

  // BTH
  if (end - off < BthView<const uint8_t>::kSize) return fail(ParseError::Truncated, Layer::Bth);
  BthView<const uint8_t> bth(base + off);
  out.opcode = bth.opcode();
  out.solicited = bth.solicited();
  out.migreq = bth.migreq();
  out.tver = bth.tver();
  out.pkey = bth.pkey();
  out.fecn = bth.fecn();
  out.becn = bth.becn();
  out.bth_resv6a = bth.resv6a();
  out.dest_qp = bth.dest_qp();
  out.ack_req = bth.ack_req();
  out.bth_resv7 = bth.resv7();
  out.psn = bth.psn();
  const uint8_t pad = bth.pad_count();
  off += BthView<const uint8_t>::kSize;
  if (out.tver != 0) return fail(ParseError::BadTver);
  const OpcodeInfo& info = opcode_info(out.opcode);
  if (!info.valid) {
    Transport t = transport_bits(out.opcode);
    return fail(t == Transport::Unknown || t == Transport::RD ? ParseError::UnknownOpcode
                                                              : ParseError::OpcodeInvalidForTransport);
  }

  // Extension headers, in the table's order (the mask's bits are in that order, lowest first).
  if (end - off < info.ext_bytes()) {  // truncated: find the header it stops in
    for (uint32_t m = info.exts; m; m &= m - 1) {
      const Ext e = Ext(m & -m);
      if (end - off < ext_size(e)) return fail(ParseError::Truncated, ext_layer(e));
      off += ext_size(e);
    }
  }
  for (uint32_t m = info.exts; m; m &= m - 1) {
    const Ext e = Ext(m & -m);
    read_ext(e, base + off, out);
    off += ext_size(e);
  }

  // Payload, pad, ICRC
  if (end - off < kIcrcSize) return fail(ParseError::Truncated, Layer::Icrc);
  const size_t padded = end - off - kIcrcSize;
  if (padded % 4 != 0 || pad > padded) return fail(ParseError::BadPadCount);
  if (!info.payload && padded != 0) return fail(ParseError::UnexpectedPayload);
  out.payload = frame.subspan(off, padded - pad);
  out.icrc_wire = load_le32(base + end - kIcrcSize);
  if (opt.verify_icrc && opt.defer_payload_icrc && out.payload.size() >= kCrcCopyMin) {
    out.icrc_deferred = true;
    out.icrc_partial = icrc_compute(base + l3_off, off - l3_off, ip_hlen);
  } else if (opt.verify_icrc) {
    out.icrc_computed = icrc_compute(base + l3_off, ip_total - kIcrcSize, ip_hlen);
    if (out.icrc_computed != out.icrc_wire) return fail(ParseError::BadIcrc);
  }
  return {};
}

bool icrc_finish(const Packet& p, uint32_t after_payload) {
  const uint8_t* end = p.payload.data() + p.payload.size();  // the pad follows in the frame
  return (p.pad_count() ? crc32(after_payload, end, p.pad_count()) : after_payload) == p.icrc_wire;
}

bool icrc_finish(const Packet& p) { return icrc_finish(p, crc32(p.icrc_partial, p.payload.data(), p.payload.size())); }

size_t header_len(const Packet& p) {
  return l2_len(p) + ip_hdr_len(p) + UdpView<const uint8_t>::kSize + BthView<const uint8_t>::kSize +
         p.info().ext_bytes();
}

size_t frame_len(const Packet& p) {
  return header_len(p) + p.payload.size() + p.pad_count() + kIcrcSize + p.l2_trailer.size();
}

namespace {

// BTH, extension headers, payload and zero pad at b + off (the part build() and build_from()
// share); returns the offset after the pad.
// BTH, extension headers, payload (unless copy_payload is false: the caller copies it) and pad;
// returns the offset of the ICRC.
size_t write_transport(const Packet& p, const OpcodeInfo& info, uint8_t* b, size_t off, bool copy_payload = true) {
  BthView<uint8_t> bth(b + off);
  bth.set_opcode(p.opcode);
  bth.set_flags(p.solicited, p.migreq, p.pad_count(), p.tver);
  bth.set_pkey(p.pkey);
  bth.set_byte4(p.fecn, p.becn, p.bth_resv6a);
  bth.set_dest_qp(p.dest_qp);
  bth.set_ack_req(p.ack_req, p.bth_resv7);
  bth.set_psn(p.psn);
  off += BthView<uint8_t>::kSize;
  for (uint32_t m = info.exts; m; m &= m - 1) {  // the table's order: lowest bit first
    const Ext e = Ext(m & -m);
    write_ext(e, b + off, p);
    off += ext_size(e);
  }
  if (copy_payload && !p.payload.empty()) std::memcpy(b + off, p.payload.data(), p.payload.size());
  off += p.payload.size();
  store_le32(b + off, 0);  // the pad (0 to 3 bytes); the ICRC's 4 bytes follow, so this stays inside the frame
  return off + p.pad_count();
}

// Ethernet, VLAN tags, IP and UDP headers of `p` for an IP packet of l3_len bytes, the IPv4
// checksum included; returns the offset of the BTH.
size_t write_headers(const Packet& p, uint8_t* b, size_t hlen, size_t l3_len) {
  EthView<uint8_t> eth(b);
  eth.set_dst(p.eth_dst.data());
  eth.set_src(p.eth_src.data());
  size_t off = 12;
  for (unsigned i = 0; i < p.vlan_count && i < 2; ++i) {
    store_be16(b + off, p.vlan_tpid[i]);
    store_be16(b + off + 2, p.vlan_tci[i]);
    off += 4;
  }
  store_be16(b + off, p.ip_version == 4 ? kEtherTypeIpv4 : kEtherTypeIpv6);
  off += 2;

  uint8_t* l3 = b + off;
  if (p.ip_version == 4) {
    Ipv4View<uint8_t> ip(l3);
    ip.set_version_ihl(uint8_t(hlen / 4));
    ip.set_tos(p.dscp, p.ecn);
    ip.set_total_len(uint16_t(l3_len));
    ip.set_id(p.ipv4_id);
    ip.set_flags_frag(p.ipv4_flags_frag);
    ip.set_ttl(p.ttl);
    ip.set_protocol(kIpProtoUdp);
    ip.set_checksum(0);
    ip.set_src(p.ip_src.data());
    ip.set_dst(p.ip_dst.data());
    if (!p.ipv4_options.empty()) std::memcpy(l3 + 20, p.ipv4_options.data(), p.ipv4_options.size());
    ip.set_checksum(inet_checksum(l3, hlen));
  } else {
    Ipv6View<uint8_t> ip(l3);
    ip.set_vtf(uint8_t(p.dscp << 2 | (p.ecn & 3)), p.flow_label);
    ip.set_payload_len(uint16_t(l3_len - hlen));
    ip.set_next_header(kIpProtoUdp);
    ip.set_hop_limit(p.ttl);
    ip.set_src(p.ip_src.data());
    ip.set_dst(p.ip_dst.data());
  }
  off += hlen;

  UdpView<uint8_t> udp(b + off);
  udp.set_src_port(p.udp_sport);
  udp.set_dst_port(p.udp_dport);
  udp.set_length(uint16_t(l3_len - hlen));
  udp.set_checksum(0);
  return off + UdpView<uint8_t>::kSize;
}

}  // namespace

BuildResult build(const Packet& p, std::span<uint8_t> out) {
  const OpcodeInfo& info = p.info();
  if (!info.valid) return {BuildError::InvalidOpcode, 0};
  if (!info.payload && !p.payload.empty()) return {BuildError::PayloadNotAllowed, 0};
  const size_t total = frame_len(p);
  if (out.size() < total) return {BuildError::BufferTooSmall, total};
  const size_t hlen = ip_hdr_len(p);
  const size_t l2 = l2_len(p);
  const size_t l3_len = total - l2 - p.l2_trailer.size();
  if (l3_len > 0xFFFF + (p.ip_version == 6 ? hlen : 0)) return {BuildError::TooLong, total};
  uint8_t* b = out.data();
  uint8_t* l3 = b + l2;
  uint8_t* udp_p = l3 + hlen;
  size_t off = write_transport(p, info, b, write_headers(p, b, hlen, l3_len));

  if (p.udp_checksum) {
    // The ICRC is part of the UDP payload: compute it first with the checksum masked anyway.
    uint32_t icrc = icrc_compute(l3, size_t(b + off - l3), hlen);
    store_le32(b + off, icrc);
    UdpView<uint8_t>(udp_p).set_checksum(
        udp_checksum(ip_addr(p, p.ip_src), ip_addr(p, p.ip_dst), udp_p, l3_len - hlen));
  } else {
    store_le32(b + off, icrc_compute(l3, size_t(b + off - l3), hlen));
  }
  off += kIcrcSize;
  if (!p.l2_trailer.empty()) std::memcpy(b + off, p.l2_trailer.data(), p.l2_trailer.size());
  off += p.l2_trailer.size();
  return {BuildError::Ok, off};
}

HeaderTemplate make_template(const Packet& p) {
  HeaderTemplate t;
  // Only what build_from() patches may vary; IPv4 options, a UDP checksum and an Ethernet
  // trailer are left to build().
  if (!p.ipv4_options.empty() || p.udp_checksum || !p.l2_trailer.empty() || p.vlan_count > 2) return t;
  t.ip_version = p.ip_version;
  t.ip_hlen = uint8_t(ip_hdr_len(p));
  t.l3_off = uint8_t(l2_len(p));
  t.len = uint8_t(t.l3_off + t.ip_hlen + UdpView<const uint8_t>::kSize);
  // The headers as build() writes them for an empty packet; lengths, TOS and the IPv4 checksum
  // are patched per packet.
  write_headers(p, t.bytes.data(), t.ip_hlen, t.ip_hlen + UdpView<const uint8_t>::kSize);
  if (p.ip_version == 4) {
    uint8_t* ip = t.bytes.data() + t.l3_off;
    Ipv4View<uint8_t> v(ip);
    v.set_tos(0, 0);
    v.set_total_len(0);
    v.set_checksum(0);
    t.ip4_sum = OnesSum().add(ip, t.ip_hlen);
  }
  t.usable = true;
  return t;
}

BuildResult build_from(const HeaderTemplate& t, const Packet& p, std::span<uint8_t> out) {
  if (!t.usable || p.udp_checksum || !p.l2_trailer.empty()) [[unlikely]]
    return build(p, out);
  const OpcodeInfo& info = p.info();
  if (!info.valid) return {BuildError::InvalidOpcode, 0};
  if (!info.payload && !p.payload.empty()) return {BuildError::PayloadNotAllowed, 0};
  const size_t total = frame_len(t, p);
  const size_t l3_len = total - t.l3_off;
  if (out.size() < total) return {BuildError::BufferTooSmall, total};
  if (l3_len > 0xFFFFu + (t.ip_version == 6 ? t.ip_hlen : 0u)) return {BuildError::TooLong, total};
  uint8_t* b = out.data();
  if (out.size() >= t.bytes.size()) std::memcpy(b, t.bytes.data(), t.bytes.size());  // fixed size; BTH overwrites the rest
  else std::memcpy(b, t.bytes.data(), t.len);
  uint8_t* l3 = b + t.l3_off;
  const uint8_t tos = uint8_t(p.dscp << 2 | (p.ecn & 3));
  if (t.ip_version == 4) {
    Ipv4View<uint8_t> ip(l3);
    ip.set_tos(p.dscp, p.ecn);
    ip.set_total_len(uint16_t(l3_len));
    OnesSum sum = t.ip4_sum;  // incremental: the template's sum plus the two patched words' parts
    ip.set_checksum(sum.add16(tos).add16(uint16_t(l3_len)).checksum());
  } else {
    Ipv6View<uint8_t>(l3).set_vtf(tos, p.flow_label);
    Ipv6View<uint8_t>(l3).set_payload_len(uint16_t(l3_len - t.ip_hlen));
  }
  UdpView<uint8_t>(l3 + t.ip_hlen).set_length(uint16_t(l3_len - t.ip_hlen));
  const size_t n = p.payload.size();
  if (n < kCrcCopyMin) {  // one CRC call over the whole packet costs less
    const size_t off = write_transport(p, info, b, t.len);
    store_le32(b + off, icrc_compute_inplace(l3, size_t(b + off - l3), t.ip_hlen));
    return {BuildError::Ok, off + kIcrcSize};
  }
  // The payload read once: copied into the frame with its CRC, chained after the headers'.
  const size_t off = write_transport(p, info, b, t.len, false);
  uint8_t* const pay = b + off - p.pad_count() - n;
  uint32_t c = icrc_compute_inplace(l3, size_t(pay - l3), t.ip_hlen);
  c = crc32_copy(c, pay, p.payload.data(), n);
  if (p.pad_count()) c = crc32(c, pay + n, p.pad_count());
  store_le32(b + off, c);
  return {BuildError::Ok, off + kIcrcSize};
}

}  // namespace uroce::proto
