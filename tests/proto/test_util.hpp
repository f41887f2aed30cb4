// Shared helpers for the proto unit tests: a golden frame as a literal, packets built by hand
// for every opcode class, and frame surgery (length fix-ups, IPv4 checksum) for negative tests.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "proto/checksum.hpp"
#include "proto/headers.hpp"
#include "proto/icrc.hpp"
#include "proto/locate.hpp"
#include "proto/packet.hpp"

namespace uroce::proto::test {

// Frame 1 of ../shared/golden/rxe/write_small.pcap (tshark -x): RC RDMA WRITE Only, 64 bytes,
// QP 0x1b, PSN 0x100, AckReq, IPv4 198.18.1.1 -> 198.18.1.2, UDP 49881 -> 4791, ICRC 0xe914946f.
inline const std::vector<uint8_t> kWriteSmallFrame = {
    0x02, 0x00, 0xc6, 0x12, 0x01, 0x02, 0x02, 0x00, 0xc6, 0x12, 0x01, 0x01, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x7c, 0x2c, 0xfc, 0x40, 0x00, 0x40, 0x11, 0x7f, 0x4d, 0xc6, 0x12, 0x01, 0x01, 0xc6, 0x12,
    0x01, 0x02, 0xc2, 0xd9, 0x12, 0xb7, 0x00, 0x68, 0x00, 0x00, 0x0a, 0x00, 0xff, 0xff, 0x00, 0x00,
    0x00, 0x1b, 0x80, 0x00, 0x01, 0x00, 0x00, 0x00, 0x55, 0xe2, 0x80, 0x50, 0x70, 0x00, 0x00, 0x00,
    0x0c, 0x30, 0x00, 0x00, 0x00, 0x40, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a,
    0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a,
    0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a,
    0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a,
    0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0xe9, 0x14, 0x94, 0x6f,
};

// A packet with every field set to something recognisable, for `opcode`. Packet::payload points
// into `payload`, which must outlive every use of the packet.
inline Packet make_packet(uint8_t opcode, int ip_version, int vlans, const std::vector<uint8_t>& payload) {
  Packet p;
  p.eth_dst = {0x02, 0x00, 0x00, 0x00, 0x00, 0x02};
  p.eth_src = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
  p.vlan_count = uint8_t(vlans);
  p.vlan_tpid = {vlans == 2 ? kEtherTypeQinQ : kEtherTypeVlan, kEtherTypeVlan};
  p.vlan_tci = {0x6064, 0x0123};
  p.ip_version = uint8_t(ip_version);
  if (ip_version == 4) {
    p.ip_src = {10, 0, 0, 1};
    p.ip_dst = {10, 0, 0, 2};
  } else {
    p.ip_src = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    p.ip_dst = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    p.flow_label = 0x12345;
  }
  p.dscp = 26;
  p.ecn = 2;
  p.ttl = 64;
  p.ipv4_id = 0x1234;
  p.udp_sport = 0xC0DE;
  p.opcode = opcode;
  p.solicited = true;
  p.pkey = 0xFFFF;
  p.dest_qp = 0x000A1B;
  p.ack_req = true;
  p.psn = 0x00ABCD;
  p.reth = {0x00007F0012345000ull, 0x1234, uint32_t(payload.size())};
  p.aeth = {0x1F, 0x000042};
  p.atomic = {0x00007F0012345008ull, 0x5678, 0x1111222233334444ull, 0x5555666677778888ull};
  p.atomic_ack_orig = 0x0102030405060708ull;
  p.imm = 0xC0DE0001;
  p.ieth_rkey = 0x00ABCDEF;
  p.deth = {0x11111111, 0, 0x000001};
  p.feth = {1, 1, 0};
  if (opcode == op::kCnp) {
    p.becn = true;
    p.solicited = false;
    p.ack_req = false;
  }
  if (p.info().payload) p.payload = payload;
  return p;
}

inline std::vector<uint8_t> build_frame(const Packet& p) {
  std::vector<uint8_t> out(frame_len(p));
  BuildResult r = build(p, out);
  if (!r.ok()) return {};
  out.resize(r.len);
  return out;
}

// Offset of the IP header: 14 + 4 per VLAN tag.
inline size_t l3_offset(const std::vector<uint8_t>& f) { return locate(f).l3; }

inline size_t ip_header_len_at(const std::vector<uint8_t>& f, size_t l3) {
  return (f[l3] >> 4) == 4 ? size_t(f[l3] & 0x0F) * 4 : 40;
}

inline void fix_ipv4_checksum(std::vector<uint8_t>& f, size_t l3) {
  if ((f[l3] >> 4) != 4) return;
  const size_t hl = ip_header_len_at(f, l3);
  if (f.size() < l3 + hl) return;
  store_be16(&f[l3 + 10], 0);
  store_be16(&f[l3 + 10], inet_checksum(&f[l3], hl));
}

// Sets the IP and UDP length fields to match the frame's size (when those fields are present)
// and recomputes the IPv4 header checksum.
inline void fix_lengths(std::vector<uint8_t>& f) {
  const size_t l3 = l3_offset(f);
  const bool v4 = (f[l3] >> 4) == 4;
  const size_t hl = ip_header_len_at(f, l3);
  if (f.size() < l3 + hl) return;
  const size_t l3_len = f.size() - l3;
  if (v4) store_be16(&f[l3 + 2], uint16_t(l3_len));
  else store_be16(&f[l3 + 4], uint16_t(l3_len - 40));
  if (f.size() >= l3 + hl + 6) store_be16(&f[l3 + hl + 4], uint16_t(l3_len - hl));
  fix_ipv4_checksum(f, l3);
}

// Recomputes the ICRC in the last four bytes (no L2 trailer).
inline void fix_icrc(std::vector<uint8_t>& f) {
  const size_t l3 = l3_offset(f);
  store_le32(&f[f.size() - 4], icrc_compute(&f[l3], f.size() - 4 - l3, ip_header_len_at(f, l3)));
}

inline std::vector<uint8_t> seq_payload(size_t n, uint8_t start = 0x11) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(start + i);
  return v;
}

inline std::string hex(const std::vector<uint8_t>& v) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t b : v) {
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

}  // namespace uroce::proto::test
