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
// What is not here: the CM state machine, timers and retries (engine/cm.hpp), and
// liburoce-rdmacm (not built yet; docs/rdma_cm.md).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <variant>

#include "proto/headers.hpp"
#include "proto/opcode.hpp"

namespace uroce::proto::cm {

// ---- Where CM MADs travel, and their size ------------------------------------------------
inline constexpr uint32_t kCmQpn = 1;               // QP 1, the General Services Interface
inline constexpr uint32_t kGsiQkey = 0x80010000;    // the well-known Q_Key of QP 1
inline constexpr uint16_t kGsiPkey = 0xFFFF;        // the default (full-member) P_Key
inline constexpr size_t kMadSize = 256;
inline constexpr size_t kMadHeaderSize = 24;
inline constexpr size_t kMessageSize = kMadSize - kMadHeaderSize;  // 232

// ---- Common MAD header values for the CM -------------------------------------------------
inline constexpr uint8_t kBaseVersion = 1;
inline constexpr uint8_t kMgmtClassCm = 0x07;
inline constexpr uint8_t kCmClassVersion = 2;
inline constexpr uint8_t kMethodSend = 0x03;  // every CM message is sent with method Send

// ---- Attribute IDs (IBA table 103) ---------------------------------------------------------
enum class Attr : uint16_t {
  ClassPortInfo = 0x0001,
  Req = 0x0010,      // ConnectRequest
  Mra = 0x0011,      // MsgRcptAck: "received, answer comes later"
  Rej = 0x0012,      // ConnectReject
  Rep = 0x0013,      // ConnectReply
  Rtu = 0x0014,      // ReadyToUse
  Dreq = 0x0015,     // DisconnectRequest
  Drep = 0x0016,     // DisconnectReply
  SidrReq = 0x0017,  // ServiceIDResolutionRequest (UD)
  SidrRep = 0x0018,  // ServiceIDResolutionResponse
  Lap = 0x0019,      // LoadAlternatePath (not decoded: rdma_cm does not use it)
  Apr = 0x001A,      // AlternatePathResponse (not decoded)
};

// The short name ("REQ", "SIDR_REQ", ...) and the spec's long name ("ConnectRequest", as
// tshark prints it) of an attribute ID; "?" for an ID the CM does not define.
constexpr std::string_view attr_name(uint16_t id) {
  switch (Attr(id)) {
    case Attr::ClassPortInfo: return "ClassPortInfo";
    case Attr::Req: return "REQ";
    case Attr::Mra: return "MRA";
    case Attr::Rej: return "REJ";
    case Attr::Rep: return "REP";
    case Attr::Rtu: return "RTU";
    case Attr::Dreq: return "DREQ";
    case Attr::Drep: return "DREP";
    case Attr::SidrReq: return "SIDR_REQ";
    case Attr::SidrRep: return "SIDR_REP";
    case Attr::Lap: return "LAP";
    case Attr::Apr: return "APR";
  }
  return "?";
}
constexpr std::string_view attr_long_name(uint16_t id) {
  switch (Attr(id)) {
    case Attr::ClassPortInfo: return "ClassPortInfo";
    case Attr::Req: return "ConnectRequest";
    case Attr::Mra: return "MsgRcptAck";
    case Attr::Rej: return "ConnectReject";
    case Attr::Rep: return "ConnectReply";
    case Attr::Rtu: return "ReadyToUse";
    case Attr::Dreq: return "DisconnectRequest";
    case Attr::Drep: return "DisconnectReply";
    case Attr::SidrReq: return "ServiceIDResReq";
    case Attr::SidrRep: return "ServiceIDResReqResp";
    case Attr::Lap: return "LoadAlternatePath";
    case Attr::Apr: return "AlternatePathResponse";
  }
  return "?";
}

// ---- REJ reasons (IBA table 109; the kernel's enum ib_cm_rej_reason) ------------------------
// rdma_cm uses: 8 when nobody listens on the service ID, 28 when the application rejects
// (rdma_reject, with its private data), 10 for a stale connection (a REQ for a QP still in
// TimeWait), 4 when a peer timed out, 12 when the GIDs in a REQ are not usable.
namespace rej {
inline constexpr uint16_t kNoQp = 1, kNoEec = 2, kNoResources = 3, kTimeout = 4, kUnsupported = 5,
                          kInvalidCommId = 6, kInvalidCommInstance = 7, kInvalidServiceId = 8,
                          kInvalidTransportType = 9, kStaleConn = 10, kRdcNotExist = 11, kInvalidGid = 12,
                          kInvalidLid = 13, kInvalidSl = 14, kInvalidTrafficClass = 15, kInvalidHopLimit = 16,
                          kInvalidPacketRate = 17, kInvalidAltGid = 18, kInvalidAltLid = 19, kInvalidAltSl = 20,
                          kInvalidAltTrafficClass = 21, kInvalidAltHopLimit = 22, kInvalidAltPacketRate = 23,
                          kPortCmRedirect = 24, kPortRedirect = 25, kInvalidMtu = 26,
                          kInsufficientRespResources = 27, kConsumerDefined = 28, kInvalidRnrRetry = 29,
                          kDuplicateLocalCommId = 30, kInvalidClassVersion = 31, kInvalidFlowLabel = 32,
                          kInvalidAltFlowLabel = 33, kVendorOptionNotSupported = 35;
}  // namespace rej

constexpr std::string_view rej_reason_name(uint16_t r) {
  switch (r) {
    case rej::kNoQp: return "no QP";
    case rej::kNoEec: return "no EEC";
    case rej::kNoResources: return "no resources";
    case rej::kTimeout: return "timeout";
    case rej::kUnsupported: return "unsupported request";
    case rej::kInvalidCommId: return "invalid communication ID";
    case rej::kInvalidCommInstance: return "invalid communication instance";
    case rej::kInvalidServiceId: return "invalid service ID";
    case rej::kInvalidTransportType: return "invalid transport service type";
    case rej::kStaleConn: return "stale connection";
    case rej::kRdcNotExist: return "RDC does not exist";
    case rej::kInvalidGid: return "invalid GID";
    case rej::kInvalidLid: return "invalid LID";
    case rej::kInvalidSl: return "invalid SL";
    case rej::kInvalidTrafficClass: return "invalid traffic class";
    case rej::kInvalidHopLimit: return "invalid hop limit";
    case rej::kInvalidPacketRate: return "invalid packet rate";
    case rej::kInvalidAltGid: return "invalid alternate GID";
    case rej::kInvalidAltLid: return "invalid alternate LID";
    case rej::kInvalidAltSl: return "invalid alternate SL";
    case rej::kInvalidAltTrafficClass: return "invalid alternate traffic class";
    case rej::kInvalidAltHopLimit: return "invalid alternate hop limit";
    case rej::kInvalidAltPacketRate: return "invalid alternate packet rate";
    case rej::kPortCmRedirect: return "port and CM redirection";
    case rej::kPortRedirect: return "port redirection";
    case rej::kInvalidMtu: return "invalid path MTU";
    case rej::kInsufficientRespResources: return "insufficient responder resources";
    case rej::kConsumerDefined: return "consumer defined";
    case rej::kInvalidRnrRetry: return "invalid RNR retry count";
    case rej::kDuplicateLocalCommId: return "duplicate local communication ID";
    case rej::kInvalidClassVersion: return "invalid class version";
    case rej::kInvalidFlowLabel: return "invalid flow label";
    case rej::kInvalidAltFlowLabel: return "invalid alternate flow label";
    case rej::kVendorOptionNotSupported: return "vendor option not supported";
    default: return "reserved reason";
  }
}

// Which message a REJ rejects or an MRA acknowledges (REJ byte 8 bits 0-1, MRA byte 8 bits 0-1).
inline constexpr uint8_t kMsgReq = 0, kMsgRep = 1, kMsgOther = 2;  // MRA: 2 means LAP
constexpr std::string_view msg_kind_name(uint8_t v, bool mra) {
  switch (v) {
    case kMsgReq: return "REQ";
    case kMsgRep: return "REP";
    case kMsgOther: return mra ? "LAP" : "other";
    default: return "reserved";
  }
}

// SIDR_REP status (IBA table 121).
namespace sidr {
inline constexpr uint8_t kSuccess = 0, kUnsupported = 1, kReject = 2, kNoQp = 3, kRedirect = 4,
                         kUnsupportedVersion = 5;
}  // namespace sidr
constexpr std::string_view sidr_status_name(uint8_t s) {
  switch (s) {
    case sidr::kSuccess: return "success";
    case sidr::kUnsupported: return "service ID not supported";
    case sidr::kReject: return "rejected";
    case sidr::kNoQp: return "no QP";
    case sidr::kRedirect: return "redirect";
    case sidr::kUnsupportedVersion: return "unsupported version";
    default: return "reserved status";
  }
}

// ---- rdma_cm service IDs -----------------------------------------------------------------
// rdma_cm turns an IP port into a 64-bit service ID: (port space << 16) | port, so a TCP-style
// id listening on port 18515 is service ID 0x0000000001064853. The port space says which kind
// of id listens (RDMA_PS_TCP: RC/UC over REQ/REP/RTU; RDMA_PS_UDP: UD over SIDR).
namespace ps {
inline constexpr uint16_t kIpoib = 0x0002, kTcp = 0x0106, kUdp = 0x0111, kIb = 0x013F;
}  // namespace ps
constexpr uint64_t service_id(uint16_t port_space, uint16_t port) { return uint64_t(port_space) << 16 | port; }
constexpr uint16_t service_id_port_space(uint64_t sid) { return uint16_t(sid >> 16); }
constexpr uint16_t service_id_port(uint64_t sid) { return uint16_t(sid); }
// A service ID of rdma_cm's IP form: the top 32 bits zero and a known port space.
constexpr bool is_ip_service_id(uint64_t sid) {
  const uint16_t s = service_id_port_space(sid);
  return (sid >> 32) == 0 && (s == ps::kTcp || s == ps::kUdp || s == ps::kIpoib || s == ps::kIb);
}
constexpr std::string_view port_space_name(uint16_t s) {
  switch (s) {
    case ps::kIpoib: return "IPOIB";
    case ps::kTcp: return "TCP";
    case ps::kUdp: return "UDP";
    case ps::kIb: return "IB";
    default: return "?";
  }
}
static_assert(service_id(ps::kTcp, 0x4853) == 0x0000000001064853ull);
static_assert(service_id(ps::kUdp, 7174) == 0x0000000001111c06ull);

// ---- bit fields in IBTA's Byte[Bit] notation ---------------------------------------------
// `width` bits of the byte at `p`, starting `bit` bits below its most significant bit.
constexpr unsigned get_bits(const uint8_t* p, unsigned bit, unsigned width) {
  return (p[0] >> (8 - bit - width)) & ((1u << width) - 1);
}
constexpr void set_bits(uint8_t* p, unsigned bit, unsigned width, unsigned v) {
  const unsigned shift = 8 - bit - width;
  const unsigned mask = ((1u << width) - 1) << shift;
  p[0] = uint8_t((p[0] & ~mask) | ((v << shift) & mask));
}

// ---- Common MAD header (24 bytes, IBA 13.4.3) ------------------------------------------------
//  byte 0      BaseVersion (1)           bytes 8-15   TransactionID
//  byte 1      MgmtClass (0x07 CM)       bytes 16-17  AttributeID
//  byte 2      ClassVersion (2)          bytes 18-19  reserved
//  byte 3      R(7) Method(6:0)          bytes 20-23  AttributeModifier
//  bytes 4-5   Status
//  bytes 6-7   ClassSpecific
template <typename Byte>
struct MadHeaderView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(MadHeaderView);
  static constexpr size_t kSize = kMadHeaderSize;
  uint8_t base_version() const { return p_[0]; }
  uint8_t mgmt_class() const { return p_[1]; }
  uint8_t class_version() const { return p_[2]; }
  uint8_t method() const { return p_[3]; }  // the R (response) bit included
  uint16_t status() const { return load_be16(p_ + 4); }
  uint16_t class_specific() const { return load_be16(p_ + 6); }
  uint64_t tid() const { return load_be64(p_ + 8); }
  uint16_t attr_id() const { return load_be16(p_ + 16); }
  uint16_t reserved() const { return load_be16(p_ + 18); }
  uint32_t attr_mod() const { return load_be32(p_ + 20); }
  void set_base_version(uint8_t v) requires kMutable { p_[0] = v; }
  void set_mgmt_class(uint8_t v) requires kMutable { p_[1] = v; }
  void set_class_version(uint8_t v) requires kMutable { p_[2] = v; }
  void set_method(uint8_t v) requires kMutable { p_[3] = v; }
  void set_status(uint16_t v) requires kMutable { store_be16(p_ + 4, v); }
  void set_class_specific(uint16_t v) requires kMutable { store_be16(p_ + 6, v); }
  void set_tid(uint64_t v) requires kMutable { store_be64(p_ + 8, v); }
  void set_attr_id(uint16_t v) requires kMutable { store_be16(p_ + 16, v); }
  void set_reserved(uint16_t v) requires kMutable { store_be16(p_ + 18, v); }
  void set_attr_mod(uint32_t v) requires kMutable { store_be32(p_ + 20, v); }
};

// ---- Path information (44 bytes; REQ bytes 52-95 primary, 96-139 alternate) ----------------
//  +0  local port LID     +4  local port GID     +36 flow label (bits 0-19 of the word), reserved
//  +2  remote port LID    +20 remote port GID    +39 bits 2-7 packet rate
//  +40 traffic class      +41 hop limit          +42 SL (bits 0-3), subnet local (bit 4)
//  +43 local ACK timeout (bits 0-4); in the alternate path bit 5 of +43 is REQ's SAP supported
// On RoCE the LIDs are 0xffff (permissive) and the GIDs are the two IP addresses (IPv4 as
// ::ffff:a.b.c.d); the flow label is what the RoCEv2 UDP source port is derived from.
template <typename Byte>
struct PathView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(PathView);
  static constexpr size_t kSize = 44;
  uint16_t local_lid() const { return load_be16(p_); }
  uint16_t remote_lid() const { return load_be16(p_ + 2); }
  const uint8_t* local_gid() const { return p_ + 4; }
  const uint8_t* remote_gid() const { return p_ + 20; }
  uint32_t flow_label() const { return load_be32(p_ + 36) >> 12; }
  uint8_t packet_rate() const { return uint8_t(get_bits(p_ + 39, 2, 6)); }
  uint8_t traffic_class() const { return p_[40]; }
  uint8_t hop_limit() const { return p_[41]; }
  uint8_t sl() const { return uint8_t(get_bits(p_ + 42, 0, 4)); }
  bool subnet_local() const { return get_bits(p_ + 42, 4, 1); }
  uint8_t local_ack_timeout() const { return uint8_t(get_bits(p_ + 43, 0, 5)); }
  void set_local_lid(uint16_t v) requires kMutable { store_be16(p_, v); }
  void set_remote_lid(uint16_t v) requires kMutable { store_be16(p_ + 2, v); }
  void set_local_gid(const uint8_t* g) requires kMutable { std::memcpy(p_ + 4, g, 16); }
  void set_remote_gid(const uint8_t* g) requires kMutable { std::memcpy(p_ + 20, g, 16); }
  void set_flow_label(uint32_t v) requires kMutable {
    store_be32(p_ + 36, (load_be32(p_ + 36) & 0xFFF) | (v & 0xFFFFF) << 12);
  }
  void set_packet_rate(uint8_t v) requires kMutable { set_bits(p_ + 39, 2, 6, v); }
  void set_traffic_class(uint8_t v) requires kMutable { p_[40] = v; }
  void set_hop_limit(uint8_t v) requires kMutable { p_[41] = v; }
  void set_sl(uint8_t v) requires kMutable { set_bits(p_ + 42, 0, 4, v); }
  void set_subnet_local(bool v) requires kMutable { set_bits(p_ + 42, 4, 1, v); }
  void set_local_ack_timeout(uint8_t v) requires kMutable { set_bits(p_ + 43, 0, 5, v); }
};

// ---- REQ, ConnectRequest (IBA table 106) ---------------------------------------------------
//  0-3   local communication ID          43    remote CM response timeout (0-4), transport
//  4-7   reserved                              service type (5-6: 0 RC, 1 UC), end-to-end flow control (7)
//  8-15  service ID                      44-46 starting PSN; 47: local CM response timeout (0-4), retry count (5-7)
//  16-23 local CA GUID                   48-49 P_Key
//  24-27 reserved                        50    path MTU (0-3), RDC exists (4), RNR retry count (5-7)
//  28-31 local Q_Key                     51    max CM retries (0-3), SRQ (4), extended transport type (5-7)
//  32-34 local QPN; 35 responder resources   52-95  primary path;  96-139 alternate path
//  36-38 local EECN; 39 initiator depth      140-231 private data (92 bytes; rdma_cm puts its
//  40-42 remote EECN                               36-byte IP header first)
template <typename Byte>
struct ReqView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(ReqView);
  static constexpr size_t kSize = kMessageSize;
  static constexpr size_t kPrimaryPath = 52, kAlternatePath = 96, kPrivateData = 140, kPrivateDataSize = 92;
  uint32_t local_comm_id() const { return load_be32(p_); }
  uint64_t service_id() const { return load_be64(p_ + 8); }
  uint64_t local_ca_guid() const { return load_be64(p_ + 16); }
  uint32_t local_qkey() const { return load_be32(p_ + 28); }
  uint32_t local_qpn() const { return load_be24(p_ + 32); }
  uint8_t responder_resources() const { return p_[35]; }
  uint32_t local_eecn() const { return load_be24(p_ + 36); }
  uint8_t initiator_depth() const { return p_[39]; }
  uint32_t remote_eecn() const { return load_be24(p_ + 40); }
  uint8_t remote_cm_response_timeout() const { return uint8_t(get_bits(p_ + 43, 0, 5)); }
  uint8_t transport_service_type() const { return uint8_t(get_bits(p_ + 43, 5, 2)); }
  bool end_to_end_flow_control() const { return get_bits(p_ + 43, 7, 1); }
  uint32_t starting_psn() const { return load_be24(p_ + 44); }
  uint8_t local_cm_response_timeout() const { return uint8_t(get_bits(p_ + 47, 0, 5)); }
  uint8_t retry_count() const { return uint8_t(get_bits(p_ + 47, 5, 3)); }
  uint16_t pkey() const { return load_be16(p_ + 48); }
  uint8_t path_mtu() const { return uint8_t(get_bits(p_ + 50, 0, 4)); }
  bool rdc_exists() const { return get_bits(p_ + 50, 4, 1); }
  uint8_t rnr_retry_count() const { return uint8_t(get_bits(p_ + 50, 5, 3)); }
  uint8_t max_cm_retries() const { return uint8_t(get_bits(p_ + 51, 0, 4)); }
  bool srq() const { return get_bits(p_ + 51, 4, 1); }
  uint8_t extended_transport_type() const { return uint8_t(get_bits(p_ + 51, 5, 3)); }
  PathView<Byte> primary_path() const { return PathView<Byte>(p_ + kPrimaryPath); }
  PathView<Byte> alternate_path() const { return PathView<Byte>(p_ + kAlternatePath); }
  bool sap_supported() const { return get_bits(p_ + 139, 5, 1); }
  Byte* private_data() const { return p_ + kPrivateData; }

  void set_local_comm_id(uint32_t v) requires kMutable { store_be32(p_, v); }
  void set_service_id(uint64_t v) requires kMutable { store_be64(p_ + 8, v); }
  void set_local_ca_guid(uint64_t v) requires kMutable { store_be64(p_ + 16, v); }
  void set_local_qkey(uint32_t v) requires kMutable { store_be32(p_ + 28, v); }
  void set_local_qpn(uint32_t v) requires kMutable { store_be24(p_ + 32, v); }
  void set_responder_resources(uint8_t v) requires kMutable { p_[35] = v; }
  void set_local_eecn(uint32_t v) requires kMutable { store_be24(p_ + 36, v); }
  void set_initiator_depth(uint8_t v) requires kMutable { p_[39] = v; }
  void set_remote_eecn(uint32_t v) requires kMutable { store_be24(p_ + 40, v); }
  void set_remote_cm_response_timeout(uint8_t v) requires kMutable { set_bits(p_ + 43, 0, 5, v); }
  void set_transport_service_type(uint8_t v) requires kMutable { set_bits(p_ + 43, 5, 2, v); }
  void set_end_to_end_flow_control(bool v) requires kMutable { set_bits(p_ + 43, 7, 1, v); }
  void set_starting_psn(uint32_t v) requires kMutable { store_be24(p_ + 44, v); }
  void set_local_cm_response_timeout(uint8_t v) requires kMutable { set_bits(p_ + 47, 0, 5, v); }
  void set_retry_count(uint8_t v) requires kMutable { set_bits(p_ + 47, 5, 3, v); }
  void set_pkey(uint16_t v) requires kMutable { store_be16(p_ + 48, v); }
  void set_path_mtu(uint8_t v) requires kMutable { set_bits(p_ + 50, 0, 4, v); }
  void set_rdc_exists(bool v) requires kMutable { set_bits(p_ + 50, 4, 1, v); }
  void set_rnr_retry_count(uint8_t v) requires kMutable { set_bits(p_ + 50, 5, 3, v); }
  void set_max_cm_retries(uint8_t v) requires kMutable { set_bits(p_ + 51, 0, 4, v); }
  void set_srq(bool v) requires kMutable { set_bits(p_ + 51, 4, 1, v); }
  void set_extended_transport_type(uint8_t v) requires kMutable { set_bits(p_ + 51, 5, 3, v); }
  void set_sap_supported(bool v) requires kMutable { set_bits(p_ + 139, 5, 1, v); }
};

// ---- The two communication IDs that start MRA, REJ, REP, RTU, DREQ, DREP -------------------
//  0-3 local communication ID (the sender's), 4-7 remote communication ID (the receiver's)
template <typename Byte>
struct CommIdsView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(CommIdsView);
  uint32_t local_comm_id() const { return load_be32(p_); }
  uint32_t remote_comm_id() const { return load_be32(p_ + 4); }
  void set_local_comm_id(uint32_t v) requires kMutable { store_be32(p_, v); }
  void set_remote_comm_id(uint32_t v) requires kMutable { store_be32(p_ + 4, v); }
};

// ---- MRA, MsgRcptAck (IBA table 107) ---------------------------------------------------------
//  8 message MRAed (bits 0-1: 0 REQ, 1 REP, 2 LAP); 9 service timeout (bits 0-4);
//  10-231 private data (222 bytes)
template <typename Byte>
struct MraView : CommIdsView<Byte> {
  UROCE_VIEW_CTOR_FROM(CommIdsView);
  static constexpr size_t kSize = kMessageSize;
  static constexpr size_t kPrivateData = 10, kPrivateDataSize = 222;
  uint8_t message_mraed() const { return uint8_t(get_bits(p_ + 8, 0, 2)); }
  uint8_t service_timeout() const { return uint8_t(get_bits(p_ + 9, 0, 5)); }
  Byte* private_data() const { return p_ + kPrivateData; }
  void set_message_mraed(uint8_t v) requires kMutable { set_bits(p_ + 8, 0, 2, v); }
  void set_service_timeout(uint8_t v) requires kMutable { set_bits(p_ + 9, 0, 5, v); }
};

// ---- REJ, ConnectReject (IBA table 108) ------------------------------------------------------
//  8 message rejected (bits 0-1: 0 REQ, 1 REP, 2 other); 9 rejected info length (bits 0-6);
//  10-11 reason; 12-83 additional rejection information (72 bytes); 84-231 private data (148)
template <typename Byte>
struct RejView : CommIdsView<Byte> {
  UROCE_VIEW_CTOR_FROM(CommIdsView);
  static constexpr size_t kSize = kMessageSize;
  static constexpr size_t kAri = 12, kAriSize = 72, kPrivateData = 84, kPrivateDataSize = 148;
  uint8_t message_rejected() const { return uint8_t(get_bits(p_ + 8, 0, 2)); }
  uint8_t rejected_info_length() const { return uint8_t(get_bits(p_ + 9, 0, 7)); }
  uint16_t reason() const { return load_be16(p_ + 10); }
  Byte* ari() const { return p_ + kAri; }
  Byte* private_data() const { return p_ + kPrivateData; }
  void set_message_rejected(uint8_t v) requires kMutable { set_bits(p_ + 8, 0, 2, v); }
  void set_rejected_info_length(uint8_t v) requires kMutable { set_bits(p_ + 9, 0, 7, v); }
  void set_reason(uint16_t v) requires kMutable { store_be16(p_ + 10, v); }
};

// ---- REP, ConnectReply (IBA table 110) -------------------------------------------------------
//  8-11 local Q_Key          24 responder resources   26 target ACK delay (0-4), failover accepted (5-6),
//  12-14 local QPN           25 initiator depth          end-to-end flow control (7)
//  16-18 local EE context    27 RNR retry count (0-2), SRQ (3)
//  20-22 starting PSN        28-35 local CA GUID;  36-231 private data (196 bytes)
template <typename Byte>
struct RepView : CommIdsView<Byte> {
  UROCE_VIEW_CTOR_FROM(CommIdsView);
  static constexpr size_t kSize = kMessageSize;
  static constexpr size_t kPrivateData = 36, kPrivateDataSize = 196;
  uint32_t local_qkey() const { return load_be32(p_ + 8); }
  uint32_t local_qpn() const { return load_be24(p_ + 12); }
  uint32_t local_eecn() const { return load_be24(p_ + 16); }
  uint32_t starting_psn() const { return load_be24(p_ + 20); }
  uint8_t responder_resources() const { return p_[24]; }
  uint8_t initiator_depth() const { return p_[25]; }
  uint8_t target_ack_delay() const { return uint8_t(get_bits(p_ + 26, 0, 5)); }
  uint8_t failover_accepted() const { return uint8_t(get_bits(p_ + 26, 5, 2)); }
  bool end_to_end_flow_control() const { return get_bits(p_ + 26, 7, 1); }
  uint8_t rnr_retry_count() const { return uint8_t(get_bits(p_ + 27, 0, 3)); }
  bool srq() const { return get_bits(p_ + 27, 3, 1); }
  uint64_t local_ca_guid() const { return load_be64(p_ + 28); }
  Byte* private_data() const { return p_ + kPrivateData; }
  void set_local_qkey(uint32_t v) requires kMutable { store_be32(p_ + 8, v); }
  void set_local_qpn(uint32_t v) requires kMutable { store_be24(p_ + 12, v); }
  void set_local_eecn(uint32_t v) requires kMutable { store_be24(p_ + 16, v); }
  void set_starting_psn(uint32_t v) requires kMutable { store_be24(p_ + 20, v); }
  void set_responder_resources(uint8_t v) requires kMutable { p_[24] = v; }
  void set_initiator_depth(uint8_t v) requires kMutable { p_[25] = v; }
  void set_target_ack_delay(uint8_t v) requires kMutable { set_bits(p_ + 26, 0, 5, v); }
  void set_failover_accepted(uint8_t v) requires kMutable { set_bits(p_ + 26, 5, 2, v); }
  void set_end_to_end_flow_control(bool v) requires kMutable { set_bits(p_ + 26, 7, 1, v); }
  void set_rnr_retry_count(uint8_t v) requires kMutable { set_bits(p_ + 27, 0, 3, v); }
  void set_srq(bool v) requires kMutable { set_bits(p_ + 27, 3, 1, v); }
  void set_local_ca_guid(uint64_t v) requires kMutable { store_be64(p_ + 28, v); }
};

// ---- RTU (table 111) and DREP (table 113): the two IDs, then 224 bytes of private data -----
template <typename Byte>
struct RtuView : CommIdsView<Byte> {
  UROCE_VIEW_CTOR_FROM(CommIdsView);
  static constexpr size_t kSize = kMessageSize;
  static constexpr size_t kPrivateData = 8, kPrivateDataSize = 224;
  Byte* private_data() const { return p_ + kPrivateData; }
};
template <typename Byte>
using DrepView = RtuView<Byte>;

// ---- DREQ, DisconnectRequest (IBA table 112) -------------------------------------------------
//  8-10 remote QPN/EECN (the receiver's QP); 11 reserved; 12-231 private data (220 bytes)
template <typename Byte>
struct DreqView : CommIdsView<Byte> {
  UROCE_VIEW_CTOR_FROM(CommIdsView);
  static constexpr size_t kSize = kMessageSize;
  static constexpr size_t kPrivateData = 12, kPrivateDataSize = 220;
  uint32_t remote_qpn() const { return load_be24(p_ + 8); }
  Byte* private_data() const { return p_ + kPrivateData; }
  void set_remote_qpn(uint32_t v) requires kMutable { store_be24(p_ + 8, v); }
};

// ---- SIDR_REQ (IBA table 119) ----------------------------------------------------------------
//  0-3 request ID; 4-5 P_Key; 6-7 reserved; 8-15 service ID; 16-231 private data (216 bytes)
template <typename Byte>
struct SidrReqView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(SidrReqView);
  static constexpr size_t kSize = kMessageSize;
  static constexpr size_t kPrivateData = 16, kPrivateDataSize = 216;
  uint32_t request_id() const { return load_be32(p_); }
  uint16_t pkey() const { return load_be16(p_ + 4); }
  uint64_t service_id() const { return load_be64(p_ + 8); }
  Byte* private_data() const { return p_ + kPrivateData; }
  void set_request_id(uint32_t v) requires kMutable { store_be32(p_, v); }
  void set_pkey(uint16_t v) requires kMutable { store_be16(p_ + 4, v); }
  void set_service_id(uint64_t v) requires kMutable { store_be64(p_ + 8, v); }
};

// ---- SIDR_REP (IBA table 120) ----------------------------------------------------------------
//  0-3 request ID; 4 status; 5 additional information length; 6-7 reserved; 8-10 QPN;
//  11 reserved; 12-19 service ID; 20-23 Q_Key; 24-95 additional information (72 bytes);
//  96-231 private data (136 bytes)
template <typename Byte>
struct SidrRepView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(SidrRepView);
  static constexpr size_t kSize = kMessageSize;
  static constexpr size_t kInfo = 24, kInfoSize = 72, kPrivateData = 96, kPrivateDataSize = 136;
  uint32_t request_id() const { return load_be32(p_); }
  uint8_t status() const { return p_[4]; }
  uint8_t info_length() const { return p_[5]; }
  uint32_t qpn() const { return load_be24(p_ + 8); }
  uint64_t service_id() const { return load_be64(p_ + 12); }
  uint32_t qkey() const { return load_be32(p_ + 20); }
  Byte* info() const { return p_ + kInfo; }
  Byte* private_data() const { return p_ + kPrivateData; }
  void set_request_id(uint32_t v) requires kMutable { store_be32(p_, v); }
  void set_status(uint8_t v) requires kMutable { p_[4] = v; }
  void set_info_length(uint8_t v) requires kMutable { p_[5] = v; }
  void set_qpn(uint32_t v) requires kMutable { store_be24(p_ + 8, v); }
  void set_service_id(uint64_t v) requires kMutable { store_be64(p_ + 12, v); }
  void set_qkey(uint32_t v) requires kMutable { store_be32(p_ + 20, v); }
};

// ---- The rdma_cm IP header (36 bytes at the start of a REQ's or SIDR_REQ's private data) ----
//  byte 0      version (0: the only one)      bytes 4-19   source IP
//  byte 1      IP version (bits 7:4: 4 or 6)  bytes 20-35  destination IP
//  bytes 2-3   source port
// An IPv4 address sits in the last 4 of its 16 bytes, after 12 zero bytes (not the ::ffff:
// form of the GIDs). The destination port is not here: it is the low 16 bits of the service ID.
// The kernel's cma.c calls this struct cma_hdr.
inline constexpr uint8_t kCmaVersion = 0;
template <typename Byte>
struct CmaHeaderView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(CmaHeaderView);
  static constexpr size_t kSize = 36;
  uint8_t version() const { return p_[0]; }
  uint8_t ip_version() const { return p_[1] >> 4; }
  uint8_t ip_version_low() const { return p_[1] & 0x0F; }  // reserved
  uint16_t src_port() const { return load_be16(p_ + 2); }
  const uint8_t* src_addr() const { return p_ + 4; }
  const uint8_t* dst_addr() const { return p_ + 20; }
  void set_version(uint8_t v) requires kMutable { p_[0] = v; }
  void set_ip_version(uint8_t v) requires kMutable { p_[1] = uint8_t(v << 4); }
  void set_src_port(uint16_t v) requires kMutable { store_be16(p_ + 2, v); }
  void set_src_addr(const uint8_t* a) requires kMutable { std::memcpy(p_ + 4, a, 16); }
  void set_dst_addr(const uint8_t* a) requires kMutable { std::memcpy(p_ + 20, a, 16); }
};

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
