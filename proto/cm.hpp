// The InfiniBand Communication Manager (CM) on the wire: the 256-byte management datagram
// (MAD) that rdma_cm and the kernel's IB CM exchange to connect two QPs, and the rdma_cm
// IP header at the front of a REQ's private data.
//
// On RoCEv2 a CM MAD is the payload of a UD SEND_ONLY (opcode 0x64) to QP 1, with P_Key 0xffff,
// Q_Key 0x80010000 and source QP 1 in the DETH. The MAD is 24 bytes of common MAD header (IBA
// vol. 1, 13.4.2) followed by 232 bytes of one CM message (IBA vol. 1, chapter 12, tables 106
// to 120). Offsets in the message views below are counted from the start of the CM message
// (MAD byte 24), as those tables count them; bit fields use the tables' Byte[Bit] notation:
// bit 0 is the most significant bit of the byte. Checked field by field against Linux's
// include/rdma/ibta_vol1_c12.h and against real captures (tests/proto/cm_test.cpp).
//
// Same conventions as headers.hpp: a view never checks bounds (the caller guarantees 256 bytes
// for a MAD, 36 for the rdma_cm header); parse() checks and never reads outside its span, and
// emit() writes every byte of the MAD (reserved fields as zero). For a MAD whose reserved
// fields are zero, emit(parse(bytes)) gives back the same bytes.
//
// The files: proto/cm_const.hpp (where MADs travel, attribute IDs, REJ reasons, SIDR statuses,
// rdma_cm service IDs, with their names), proto/cm_view.hpp (the views over the MAD's bytes), and
// this one (the validated representation: parse() and emit(), the rdma_cm IP header). Users
// include this one.
//
// What is not here: the CM state machine, timers and retries (engine/cm.hpp), and
// liburoce-rdmacm, the rdma_cm library built on it (verbs_shim/rdmacm/; docs/rdma_cm.md).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <variant>

#include "proto/cm_const.hpp"
#include "proto/cm_view.hpp"
#include "proto/headers.hpp"
#include "proto/opcode.hpp"

namespace uroce::proto::cm {

// ====================================================================================================
// The validated representation: parse() and emit().
// ====================================================================================================

using Gid = std::array<uint8_t, 16>;

struct MadHeader {
  uint8_t base_version = kBaseVersion;
  uint8_t mgmt_class = kMgmtClassCm;
  uint8_t class_version = kCmClassVersion;
  uint8_t method = kMethodSend;
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t tid = 0;
  uint16_t attr_id = 0;  // set by emit() from the message
  uint32_t attr_mod = 0;
  bool operator==(const MadHeader&) const = default;
};

struct Path {
  uint16_t local_lid = 0xFFFF, remote_lid = 0xFFFF;  // permissive LID on RoCE
  Gid local_gid{}, remote_gid{};
  uint32_t flow_label = 0;
  uint8_t packet_rate = 0;
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0;
  bool subnet_local = false;
  uint8_t local_ack_timeout = 0;
  bool operator==(const Path&) const = default;
};

struct Req {
  uint32_t local_comm_id = 0;
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;
  uint8_t remote_cm_response_timeout = 0;
  uint8_t transport_service_type = 0;  // 0 RC, 1 UC, 3 XRC... (IBA 12.6.5)
  bool end_to_end_flow_control = false;
  uint32_t starting_psn = 0;
  uint8_t local_cm_response_timeout = 0;
  uint8_t retry_count = 0;
  uint16_t pkey = kGsiPkey;
  uint8_t path_mtu = 0;  // IBA encoding: 1 = 256 ... 5 = 4096
  bool rdc_exists = false;
  uint8_t rnr_retry_count = 0;
  uint8_t max_cm_retries = 0;
  bool srq = false;
  uint8_t extended_transport_type = 0;
  Path primary{};
  Path alternate{};  // all zero when there is none (as on RoCE)
  bool sap_supported = false;
  std::array<uint8_t, ReqView<uint8_t>::kPrivateDataSize> private_data{};
  bool operator==(const Req&) const = default;
};

struct Mra {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  uint8_t message_mraed = kMsgReq;
  uint8_t service_timeout = 0;
  std::array<uint8_t, MraView<uint8_t>::kPrivateDataSize> private_data{};
  bool operator==(const Mra&) const = default;
};

struct Rej {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  uint8_t message_rejected = kMsgReq;
  uint8_t rejected_info_length = 0;  // bytes of `ari` that mean something (at most 72)
  uint16_t reason = 0;
  std::array<uint8_t, RejView<uint8_t>::kAriSize> ari{};
  std::array<uint8_t, RejView<uint8_t>::kPrivateDataSize> private_data{};
  bool operator==(const Rej&) const = default;
};

struct Rep {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;
  uint32_t local_eecn = 0;
  uint32_t starting_psn = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;
  uint8_t failover_accepted = 0;
  bool end_to_end_flow_control = false;
  uint8_t rnr_retry_count = 0;
  bool srq = false;
  uint64_t local_ca_guid = 0;
  std::array<uint8_t, RepView<uint8_t>::kPrivateDataSize> private_data{};
  bool operator==(const Rep&) const = default;
};

struct Rtu {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  std::array<uint8_t, RtuView<uint8_t>::kPrivateDataSize> private_data{};
  bool operator==(const Rtu&) const = default;
};

struct Dreq {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  uint32_t remote_qpn = 0;
  std::array<uint8_t, DreqView<uint8_t>::kPrivateDataSize> private_data{};
  bool operator==(const Dreq&) const = default;
};

struct Drep {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  std::array<uint8_t, DrepView<uint8_t>::kPrivateDataSize> private_data{};
  bool operator==(const Drep&) const = default;
};

struct SidrReq {
  uint32_t request_id = 0;
  uint16_t pkey = kGsiPkey;
  uint64_t service_id = 0;
  std::array<uint8_t, SidrReqView<uint8_t>::kPrivateDataSize> private_data{};
  bool operator==(const SidrReq&) const = default;
};

struct SidrRep {
  uint32_t request_id = 0;
  uint8_t status = sidr::kSuccess;
  uint8_t info_length = 0;  // bytes of `info` that mean something (at most 72)
  uint32_t qpn = 0;
  uint64_t service_id = 0;
  uint32_t qkey = 0;
  std::array<uint8_t, SidrRepView<uint8_t>::kInfoSize> info{};
  std::array<uint8_t, SidrRepView<uint8_t>::kPrivateDataSize> private_data{};
  bool operator==(const SidrRep&) const = default;
};

using Message = std::variant<Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep>;

// The attribute ID of a message (what emit() writes into the MAD header).
Attr attr_of(const Message& m);

struct Mad {
  MadHeader hdr{};
  Message msg{};
  bool operator==(const Mad&) const = default;
};

enum class Error : uint8_t {
  Ok = 0,
  BadLength,           // not 256 bytes: a MAD is always 256
  BadBaseVersion,      // base version is not 1
  NotCm,               // management class is not 0x07 (another class on QP 1: SA, PerfMgt, ...)
  BadClassVersion,     // CM class version is not 2
  BadMethod,           // not method Send (0x03)
  UnknownAttribute,    // an attribute ID the CM does not define
  UnsupportedAttribute,  // ClassPortInfo, LAP, APR: defined, not decoded
  BadInfoLength,       // REJ rejected info length or SIDR_REP additional info length above 72
};
std::string_view error_name(Error e);

// Parses one MAD (the payload of the UD SEND to QP 1). Never reads outside `mad`. On an error
// after the header (UnknownAttribute, UnsupportedAttribute, BadInfoLength) `out.hdr` is filled
// in (so a dissector can name the attribute); `out.msg` is unspecified.
Error parse(std::span<const uint8_t> mad, Mad& out);

// Writes the 256-byte MAD for `m` into `out` (the attribute ID from the message, reserved
// fields zero). Returns the bytes written: 256, or 0 when `out` is smaller.
size_t emit(const Mad& m, std::span<uint8_t> out);

// ---- The rdma_cm IP header ---------------------------------------------------------------------
struct CmaHeader {
  uint8_t ip_version = 4;  // 4 or 6
  uint16_t src_port = 0;
  Gid src_addr{};  // IPv4: 12 zero bytes, then the address (set_ipv4 / ipv4 below)
  Gid dst_addr{};
  bool operator==(const CmaHeader&) const = default;
  static Gid ipv4(const uint8_t* a4) {
    Gid g{};
    std::memcpy(g.data() + 12, a4, 4);
    return g;
  }
  const uint8_t* src_ipv4() const { return src_addr.data() + 12; }
  const uint8_t* dst_ipv4() const { return dst_addr.data() + 12; }
};

enum class CmaError : uint8_t { Ok = 0, Truncated, BadVersion, BadIpVersion };
std::string_view error_name(CmaError e);

// The header at the front of `private_data` (a REQ's or SIDR_REQ's): version 0, IP version 4 or
// 6 in the high nibble (the low nibble must be zero). Never reads outside the span.
CmaError parse_cma_header(std::span<const uint8_t> private_data, CmaHeader& out);
// Writes the 36 bytes; false when `out` is smaller.
bool emit_cma_header(const CmaHeader& h, std::span<uint8_t> out);

// ---- Carriers ------------------------------------------------------------------------------------
// Whether a UD packet is addressed as the CM speaks: SEND_ONLY to QP 1. (Its payload may still
// fail parse(); the Q_Key is not checked here: a receiver drops a wrong one.)
constexpr bool is_gsi_send(uint8_t opcode, uint32_t dest_qp) {
  return opcode == (op::kUd | op::kSendOnly) && dest_qp == kCmQpn;
}

}  // namespace uroce::proto::cm
