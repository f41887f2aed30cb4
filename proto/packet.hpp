// The validated representation of one RoCEv2 frame, and the two functions that convert
// between it and bytes: parse() (bytes -> Packet, or a precise error) and build()
// (Packet -> bytes, with pad, ICRC and IPv4 checksum filled in).
//
// Views (headers.hpp) are for reading fields in place; Packet is what the rest of uroce
// works with. Payload is not copied: Packet::payload points into the frame (parse) or into
// the caller's memory (build).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "proto/checksum.hpp"
#include "proto/headers.hpp"
#include "proto/opcode.hpp"

namespace uroce::proto {

using Mac = std::array<uint8_t, 6>;
using Ip6 = std::array<uint8_t, 16>;  // IPv4 addresses use the first 4 bytes

// Is this GID an IPv4 address a.b.c.d mapped as ::ffff:a.b.c.d?
constexpr bool gid_is_v4mapped(const Ip6& g) {
  for (int i = 0; i < 10; ++i)
    if (g[i] != 0) return false;
  return g[10] == 0xFF && g[11] == 0xFF;
}

struct Packet {
  // L2
  Mac eth_dst{};
  Mac eth_src{};
  uint8_t vlan_count = 0;                      // 0, 1 or 2 tags
  std::array<uint16_t, 2> vlan_tpid{};         // 0x8100 or 0x88A8, outermost first
  std::array<uint16_t, 2> vlan_tci{};
  // L3
  uint8_t ip_version = 4;                      // 4 or 6
  Ip6 ip_src{};
  Ip6 ip_dst{};
  uint8_t dscp = 0;
  uint8_t ecn = 0;
  uint8_t ttl = 64;                            // hop limit for IPv6
  uint16_t ipv4_id = 0;
  uint16_t ipv4_flags_frag = 0x4000;           // DF, as rxe sends
  uint32_t flow_label = 0;                     // IPv6 only
  std::span<const uint8_t> ipv4_options{};     // IHL > 5 (rare; kept for byte-exact rebuilds)
  std::span<const uint8_t> ip_header{};        // parse: the received IPv4 header (20 bytes, no
                                               // options) or IPv6 header (40), for a UD GRH; build ignores it
  // L4
  uint16_t udp_sport = 0xC000;
  uint16_t udp_dport = 4791;
  bool udp_checksum = false;                   // false: send 0 (as rxe and ConnectX do)
  // BTH
  uint8_t opcode = 0;
  bool solicited = false;
  bool migreq = false;
  uint8_t tver = 0;
  uint16_t pkey = 0xFFFF;
  bool fecn = false;
  bool becn = false;
  uint8_t bth_resv6a = 0;
  uint32_t dest_qp = 0;
  bool ack_req = false;
  uint8_t bth_resv7 = 0;
  uint32_t psn = 0;
  // Extension headers: only those the opcode table names are meaningful.
  struct {
    uint32_t srqn = 0;         // the XRC SRQ (24 bits)
    uint8_t resv = 0;          // bits 31:24, kept for byte-exact rebuilds
  } xrceth;
  struct {
    uint8_t placement = 0;     // IBV_FLUSH_GLOBAL (1) | IBV_FLUSH_PERSISTENT (2)
    uint8_t selectivity = 0;   // IBV_FLUSH_RANGE (0) or IBV_FLUSH_MR (1)
    uint32_t resv = 0;         // bits 31:6, kept for byte-exact rebuilds
  } feth;
  struct {
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t dma_len = 0;
  } reth;
  struct {
    uint8_t syndrome = 0;
    uint32_t msn = 0;
  } aeth;
  struct {
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint64_t swap_add = 0;
    uint64_t compare = 0;
  } atomic;
  uint64_t atomic_ack_orig = 0;
  uint32_t imm = 0;
  uint32_t ieth_rkey = 0;
  struct {
    uint32_t qkey = 0;
    uint8_t resv = 0;
    uint32_t src_qp = 0;
  } deth;
  std::array<uint8_t, 16> cnp_reserved{};
  // Payload (without pad)
  std::span<const uint8_t> payload{};
  // Filled by parse(): the ICRC found on the wire and the one computed. build() ignores them.
  uint32_t icrc_wire = 0;
  uint32_t icrc_computed = 0;
  // Filled by parse() with ParseOptions::defer_payload_icrc: the ICRC is not checked yet, and
  // icrc_partial is the CRC of everything before the payload (icrc_finish() ends it). Whoever
  // copies the payload checks it then, in the same pass (crc32_copy); icrc_computed stays 0.
  bool icrc_deferred = false;
  uint32_t icrc_partial = 0;
  // Filled by parse(): bytes after the IP packet (Ethernet padding of short frames).
  std::span<const uint8_t> l2_trailer{};

  const OpcodeInfo& info() const { return opcode_info(opcode); }
  uint8_t pad_count() const { return uint8_t((4 - payload.size() % 4) % 4); }
};

// Which header a "truncated" error stopped at.
enum class Layer : uint8_t {
  Ethernet, Vlan, Ipv4, Ipv6, IpPayload, Udp, Bth,
  Deth, Xrceth, Feth, Reth, AtomicEth, Aeth, AtomicAckEth, ImmDt, Ieth, Cnp,
  Icrc,
};
std::string_view layer_name(Layer l);

enum class ParseError : uint8_t {
  Ok = 0,
  Truncated,            // the frame ends inside `layer`
  RoceV1,               // ethertype 0x8915: RoCE v1 (GRH over Ethernet), not RoCEv2
  NotIp,                // ethertype is neither IPv4 nor IPv6
  BadIpVersion,         // version nibble disagrees with the ethertype
  BadIpv4Header,        // IHL < 5
  BadIpv4Checksum,
  Ipv4Fragment,         // MF set or fragment offset nonzero: RoCEv2 is never fragmented
  NotUdp,               // IP protocol / next header is not 17
  IpLengthMismatch,     // IP length less than its own headers (more than the frame: Truncated)
  UdpLengthMismatch,    // UDP length disagrees with the IP payload length
  NotRoceV2Port,        // UDP destination port is not 4791
  BadTver,              // BTH transport header version is not 0
  UnknownOpcode,        // transport bits name no transport uroce knows (RD included)
  OpcodeInvalidForTransport,  // e.g. UC READ, UD WRITE: not in the opcode table
  BadPadCount,          // payload + pad not a multiple of 4, or pad longer than the payload
  UnexpectedPayload,    // payload on an opcode that carries none (ACK, READ request, atomics)
  BadIcrc,
  BadUdpChecksum,       // a nonzero UDP checksum that does not verify (0 means none, as rxe sends)
};
std::string_view error_name(ParseError e);

struct ParseResult {
  ParseError error = ParseError::Ok;
  Layer layer = Layer::Ethernet;  // meaningful for Truncated
  bool ok() const { return error == ParseError::Ok; }
  std::string message() const;    // "truncated in BTH", "bad ICRC", ...
};

struct ParseOptions {
  bool verify_icrc = true;
  // A payload of kCrcCopyMin bytes or more: its ICRC is left for its copy (Packet::icrc_deferred),
  // so the payload is read once. The caller must check it (icrc_finish) before acting on
  // anything the frame says; parse()'s result is then ok() for a frame whose ICRC may be bad.
  bool defer_payload_icrc = false;
};

// Parses an Ethernet frame (without FCS). Never reads outside `frame`. On error, `out` holds
// every field decoded before the error (for the dissector); on BadIcrc it is complete. Fields
// of extension headers the opcode does not carry are unspecified (a reused Packet keeps old
// values there): read them only when info().has() says the header is present.
ParseResult parse(std::span<const uint8_t> frame, Packet& out, const ParseOptions& opt = {});

// Whether the frame's IP packet ends in the ICRC of its own bytes, the headers located as parse()
// locates them. For a frame parse() refused after reading its BTH (an opcode outside the table),
// which a responder must still answer when it is not corrupt (NAK-invalid request). False when
// the frame is too short to hold an IP, UDP and BTH header and an ICRC.
bool icrc_verifies(std::span<const uint8_t> frame);

// A deferred ICRC (Packet::icrc_deferred), ended: `after_payload` is the CRC chained from
// p.icrc_partial through the payload (crc32_copy's result); the pad follows. Whether it is the
// ICRC on the wire.
bool icrc_finish(const Packet& p, uint32_t after_payload);
// The same without a copy: the payload's CRC computed here.
bool icrc_finish(const Packet& p);

// Byte lengths of what build() writes.
// The Layer a truncated extension header is reported at.
Layer ext_layer(Ext e);
size_t header_len(const Packet& p);  // Ethernet .. last extension header
size_t frame_len(const Packet& p);   // header_len + payload + pad + ICRC (+ l2_trailer)

enum class BuildError : uint8_t { Ok = 0, BufferTooSmall, InvalidOpcode, PayloadNotAllowed, TooLong };
std::string_view error_name(BuildError e);

struct BuildResult {
  BuildError error = BuildError::Ok;
  size_t len = 0;
  bool ok() const { return error == BuildError::Ok; }
};

// Writes the frame for `p` into `out`: headers from the opcode table, payload, zero pad,
// IPv4 header checksum, UDP checksum (0 unless p.udp_checksum), ICRC.
BuildResult build(const Packet& p, std::span<uint8_t> out);

// The Ethernet, VLAN, IP and UDP headers of a sender whose addresses stay the same from packet
// to packet (a connected QP), built once by make_template() from a Packet. build_from() copies
// them and patches what varies per packet: the IP and UDP lengths, the TOS / traffic class
// (from p.dscp and p.ecn) and the IPv4 checksum (incrementally); BTH, extension headers,
// payload, pad and ICRC are written as build() writes them. The frame is byte for byte the one
// build(p) writes, provided every other L2-L4 field of `p` equals that of the Packet the
// template was made from (the caller's contract; tests/proto/template_test.cpp). A packet the
// template cannot express (IPv4 options, a UDP checksum, an Ethernet trailer) goes to build().
struct HeaderTemplate {
  bool usable = false;
  uint8_t ip_version = 4;
  uint8_t l3_off = 0;     // Ethernet and VLAN tags
  uint8_t ip_hlen = 0;    // 20 or 40
  uint8_t len = 0;        // through the UDP header
  OnesSum ip4_sum;        // IPv4: the header's sum with TOS, total length and checksum zero
  std::array<uint8_t, 14 + 8 + 40 + 8> bytes{};
};
HeaderTemplate make_template(const Packet& p);
// What build_from() writes: frame_len(p) when the template is usable and the packet has no
// UDP checksum and no Ethernet trailer (the cases build_from() leaves to build()).
inline size_t frame_len(const HeaderTemplate& t, const Packet& p) {
  if (!t.usable || p.udp_checksum || !p.l2_trailer.empty()) [[unlikely]]
    return frame_len(p);
  return size_t(t.len) + BthView<const uint8_t>::kSize + p.info().ext_bytes() + p.payload.size() + p.pad_count() +
         kIcrcSize;
}
BuildResult build_from(const HeaderTemplate& t, const Packet& p, std::span<uint8_t> out);

}  // namespace uroce::proto
