// The constants of the InfiniBand CM on the wire (proto/cm.hpp): where CM MADs travel and their
// size, the common MAD header values, attribute IDs, REJ reasons, MRA/REJ message kinds, SIDR
// statuses and rdma_cm service IDs, each with the name tools and logs print for it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

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

}  // namespace uroce::proto::cm
