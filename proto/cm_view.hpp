// Views over the bytes of a CM MAD (proto/cm.hpp): the common MAD header, the path
// information, one view per CM message (IBA vol. 1 tables 106 to 120; offsets from the start of
// the CM message, bit fields in the tables' Byte[Bit] notation) and the rdma_cm IP header. A
// view never checks bounds; parse() in proto/cm.hpp does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "proto/cm_const.hpp"
#include "proto/headers.hpp"

namespace uroce::proto::cm {

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

}  // namespace uroce::proto::cm
