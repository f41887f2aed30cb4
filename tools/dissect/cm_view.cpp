// uroce-dissect: CM MADs in the line view and in the --bytes layout (cm_view.hpp).
#include "tools/dissect/cm_view.hpp"

#include <arpa/inet.h>

#include <cinttypes>
#include <initializer_list>
#include <string_view>

#include "proto/cm.hpp"
#include "tools/dissect/ladder.hpp"

namespace uroce::dissect {

namespace cm = proto::cm;
using proto::load_be16;
using proto::load_be24;
using proto::load_be32;
using proto::load_be64;

namespace {

std::string sv(std::string_view s) { return std::string(s); }

// Path MTU as IBA encodes it (1 = 256 ... 5 = 4096).
std::string mtu_text(uint8_t code) { return code >= 1 && code <= 5 ? fmt("%u", 128u << code) : fmt("code %u", code); }

std::string transport_text(uint8_t t) {
  switch (t) {
    case 0: return "RC";
    case 1: return "UC";
    case 2: return "RD";
    case 3: return "XRC";
    default: return "reserved";
  }
}

// "(TCP 18515)" for a service ID of rdma_cm's IP form, else "".
std::string sid_note(uint64_t sid) {
  if (!cm::is_ip_service_id(sid)) return "";
  return fmt("(%s %u)", sv(cm::port_space_name(cm::service_id_port_space(sid))).c_str(), cm::service_id_port(sid));
}
std::string sid_text(uint64_t sid) {
  const std::string note = sid_note(sid);
  return fmt("0x%016" PRIx64, sid) + (note.empty() ? "" : " " + note);
}

std::string addr_text(const cm::CmaHeader& h, const cm::Gid& a, uint16_t port) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (h.ip_version == 4) {
    inet_ntop(AF_INET, a.data() + 12, buf, sizeof buf);
    return fmt("%s:%u", buf, port);
  }
  inet_ntop(AF_INET6, a.data(), buf, sizeof buf);
  return fmt("[%s]:%u", buf, port);
}

// "  ip 10.1.16.62:52471 > 10.1.16.61:18515" from the rdma_cm header at the front of the
// private data (the destination port is the service ID's), or why there is none.
std::string cma_text(std::span<const uint8_t> private_data, uint64_t sid) {
  cm::CmaHeader h;
  const cm::CmaError e = cm::parse_cma_header(private_data, h);
  if (e != cm::CmaError::Ok) return "  (no rdma_cm IP header: " + sv(cm::error_name(e)) + ")";
  return "  ip " + addr_text(h, h.src_addr, h.src_port) + " > " + addr_text(h, h.dst_addr, cm::service_id_port(sid));
}

std::string ids(uint32_t local, uint32_t remote) {
  return fmt(" local_id 0x%08" PRIx32 " remote_id 0x%08" PRIx32, local, remote);
}

struct LineText {
  std::string operator()(const cm::Req& r) const {
    return fmt(" local_id 0x%08" PRIx32 " sid %s qpn 0x%06" PRIx32 " psn %" PRIu32 " %s mtu %s", r.local_comm_id,
               sid_text(r.service_id).c_str(), r.local_qpn, r.starting_psn, transport_text(r.transport_service_type).c_str(),
               mtu_text(r.path_mtu).c_str()) +
           cma_text(r.private_data, r.service_id);
  }
  std::string operator()(const cm::Mra& m) const {
    return ids(m.local_comm_id, m.remote_comm_id) + fmt(" for %s service_timeout %u", sv(cm::msg_kind_name(m.message_mraed, true)).c_str(),
                                                        m.service_timeout);
  }
  std::string operator()(const cm::Rej& m) const {
    return ids(m.local_comm_id, m.remote_comm_id) +
           fmt(" reason %u (%s) rejects %s", m.reason, sv(cm::rej_reason_name(m.reason)).c_str(),
               sv(cm::msg_kind_name(m.message_rejected, false)).c_str());
  }
  std::string operator()(const cm::Rep& m) const {
    return ids(m.local_comm_id, m.remote_comm_id) + fmt(" qpn 0x%06" PRIx32 " psn %" PRIu32, m.local_qpn, m.starting_psn);
  }
  std::string operator()(const cm::Rtu& m) const { return ids(m.local_comm_id, m.remote_comm_id); }
  std::string operator()(const cm::Dreq& m) const {
    return ids(m.local_comm_id, m.remote_comm_id) + fmt(" remote_qpn 0x%06" PRIx32, m.remote_qpn);
  }
  std::string operator()(const cm::Drep& m) const { return ids(m.local_comm_id, m.remote_comm_id); }
  std::string operator()(const cm::SidrReq& m) const {
    return fmt(" request_id 0x%08" PRIx32 " sid %s", m.request_id, sid_text(m.service_id).c_str()) +
           cma_text(m.private_data, m.service_id);
  }
  std::string operator()(const cm::SidrRep& m) const {
    return fmt(" request_id 0x%08" PRIx32 " status %u (%s) qpn 0x%06" PRIx32 " qkey 0x%08" PRIx32 " sid %s",
               m.request_id, m.status, sv(cm::sidr_status_name(m.status)).c_str(), m.qpn, m.qkey,
               sid_text(m.service_id).c_str());
  }
};

// ---- --bytes ------------------------------------------------------------------------------------


// Collects the fields of one header.
class Fields {
 public:
  Fields(std::vector<CmField>& out, const uint8_t* mad, size_t mad_at) : out_(out), mad_(mad), mad_at_(mad_at) {}
  // Starts a header at `off` bytes into the MAD.
  void header(std::string name, size_t off) {
    name_ = std::move(name);
    base_ = off;
  }
  const uint8_t* at(size_t hoff) const { return mad_ + base_ + hoff; }
  void add(size_t hoff, size_t n, std::string text) {
    out_.push_back({name_, mad_at_ + base_, hoff, n, std::move(text)});
  }
  // A big-endian number of n bytes (1 to 8): "0x..." and, when asked, its decimal value.
  void num(size_t hoff, size_t n, const char* name, bool decimal = false, const std::string& note = "") {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = v << 8 | at(hoff)[i];
    std::string t = fmt("0x%0*" PRIx64, int(2 * n), v);
    if (decimal) t += fmt(" (%" PRIu64 ")", v);
    if (!note.empty()) t += " " + note;
    add(hoff, n, named(name, t));
  }
  // A 16-byte GID, as an IPv6 address (RoCE GIDs are IP addresses; IPv4 ones as ::ffff:a.b.c.d).
  void gid(size_t hoff, const char* name) {
    char buf[INET6_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET6, at(hoff), buf, sizeof buf);
    add(hoff, 16, named(name, buf));
  }
  // A byte of several bit fields: "A=1 B=2 [1 10]".
  void bitbyte(size_t hoff, const std::string& fields, std::initializer_list<unsigned> groups) {
    add(hoff, 1, with_bits(fields, bits(at(hoff)[0], groups)));
  }
  // A run of opaque bytes: private data, ARI.
  void blob(size_t hoff, size_t n, const char* what) {
    size_t nonzero = 0;
    for (size_t i = 0; i < n; ++i) nonzero += at(hoff)[i] != 0;
    out_.push_back({name_, mad_at_ + base_, hoff, 0, fmt("%s, %zu bytes (%zu nonzero)", what, n, nonzero)});
  }

 private:
  std::vector<CmField>& out_;
  const uint8_t* mad_;
  size_t mad_at_;
  std::string name_;
  size_t base_ = 0;
};

unsigned b(const uint8_t* p, unsigned bit, unsigned width) { return cm::get_bits(p, bit, width); }

void path_fields(Fields& F, size_t o, bool alternate) {
  F.num(o + 0, 2, "LocalLID");
  F.num(o + 2, 2, "RemoteLID");
  F.gid(o + 4, "LocalGID");
  F.gid(o + 20, "RemoteGID");
  const uint32_t w = load_be32(F.at(o + 36));
  F.add(o + 36, 4, named("FlowLabel", fmt("0x%05" PRIx32 " (bits 0-19), PacketRate=%u (byte 3 bits 2-7)", w >> 12, w & 0x3F)));
  F.num(o + 40, 1, "TClass");
  F.num(o + 41, 1, "HopLimit", true);
  const uint8_t* p = F.at(o + 42);
  F.bitbyte(o + 42, fmt("SL=%u SubnetLocal=%u", b(p, 0, 4), b(p, 4, 1)), {4, 1, 3});
  p = F.at(o + 43);
  if (alternate)
    F.bitbyte(o + 43, fmt("LocalAckTO=%u SAP=%u", b(p, 0, 5), b(p, 5, 1)), {5, 1, 2});
  else
    F.bitbyte(o + 43, fmt("LocalAckTO=%u", b(p, 0, 5)), {5, 3});
}

void cma_fields(Fields& F, size_t private_data_off) {
  F.header("rdma_cm", private_data_off);
  const uint8_t* p = F.at(0);
  F.num(0, 1, "Version");
  F.bitbyte(1, fmt("IPVersion=%u", p[1] >> 4), {4, 4});
  F.num(2, 2, "SrcPort", true);
  char buf[INET6_ADDRSTRLEN] = "?";
  for (size_t off : {size_t(4), size_t(20)}) {
    const uint8_t* a = F.at(off);
    if ((p[1] >> 4) == 4) inet_ntop(AF_INET, a + 12, buf, sizeof buf);
    else inet_ntop(AF_INET6, a, buf, sizeof buf);
    F.add(off, 16, named(off == 4 ? "SrcIP" : "DstIP", buf));
  }
}

void message_fields(Fields& F, uint16_t attr, size_t mad_off_msg) {
  F.header("CM " + sv(cm::attr_name(attr)), mad_off_msg);
  auto comm_ids = [&] {
    F.num(0, 4, "LocalCommID");
    F.num(4, 4, "RemoteCommID");
  };
  switch (cm::Attr(attr)) {
    case cm::Attr::Req: {
      F.num(0, 4, "LocalCommID");
      F.num(8, 8, "ServiceID", false, sid_note(load_be64(F.at(8))));
      F.num(16, 8, "LocalCAGUID");
      F.num(28, 4, "LocalQ_Key");
      F.num(32, 3, "LocalQPN", true);
      F.num(35, 1, "RespRes", true);
      F.num(36, 3, "LocalEECN");
      F.num(39, 1, "InitDepth", true);
      F.num(40, 3, "RemoteEECN");
      const uint8_t* p = F.at(43);
      F.bitbyte(43, fmt("RemoteCMTO=%u Transport=%u (%s) E2EFC=%u", b(p, 0, 5), b(p, 5, 2),
                        transport_text(uint8_t(b(p, 5, 2))).c_str(), b(p, 7, 1)),
                {5, 2, 1});
      F.num(44, 3, "StartingPSN", true);
      p = F.at(47);
      F.bitbyte(47, fmt("LocalCMTO=%u RetryCount=%u", b(p, 0, 5), b(p, 5, 3)), {5, 3});
      F.num(48, 2, "P_Key");
      p = F.at(50);
      F.bitbyte(50, fmt("PathMTU=%u (%s) RDC=%u RNRRetry=%u", b(p, 0, 4), mtu_text(uint8_t(b(p, 0, 4))).c_str(), b(p, 4, 1),
                        b(p, 5, 3)),
                {4, 1, 3});
      p = F.at(51);
      F.bitbyte(51, fmt("MaxCMRetries=%u SRQ=%u ExtTransport=%u", b(p, 0, 4), b(p, 4, 1), b(p, 5, 3)), {4, 1, 3});
      F.header("primary path", mad_off_msg + 52);
      path_fields(F, 0, false);
      F.header("alt. path", mad_off_msg + 96);
      path_fields(F, 0, true);
      cma_fields(F, mad_off_msg + 140);
      F.header("CM REQ", mad_off_msg);
      F.blob(140 + 36, 92 - 36, "private data after the rdma_cm header");
      break;
    }
    case cm::Attr::Mra: {
      comm_ids();
      const uint8_t* p = F.at(8);
      F.bitbyte(8, fmt("MsgMRAed=%u (%s)", b(p, 0, 2), sv(cm::msg_kind_name(uint8_t(b(p, 0, 2)), true)).c_str()), {2, 6});
      F.bitbyte(9, fmt("ServiceTO=%u", b(F.at(9), 0, 5)), {5, 3});
      F.blob(10, 222, "private data");
      break;
    }
    case cm::Attr::Rej: {
      comm_ids();
      const uint8_t* p = F.at(8);
      F.bitbyte(8, fmt("MsgRejected=%u (%s)", b(p, 0, 2), sv(cm::msg_kind_name(uint8_t(b(p, 0, 2)), false)).c_str()),
                {2, 6});
      F.bitbyte(9, fmt("RejInfoLen=%u", b(F.at(9), 0, 7)), {7, 1});
      const uint16_t r = load_be16(F.at(10));
      F.add(10, 2, named("Reason", fmt("%u (%s)", r, sv(cm::rej_reason_name(r)).c_str())));
      F.blob(12, 72, "additional rejection information");
      F.blob(84, 148, "private data");
      break;
    }
    case cm::Attr::Rep: {
      comm_ids();
      F.num(8, 4, "LocalQ_Key");
      F.num(12, 3, "LocalQPN", true);
      F.num(16, 3, "LocalEECN");
      F.num(20, 3, "StartingPSN", true);
      F.num(24, 1, "RespRes", true);
      F.num(25, 1, "InitDepth", true);
      const uint8_t* p = F.at(26);
      F.bitbyte(26, fmt("TargetAckDelay=%u Failover=%u E2EFC=%u", b(p, 0, 5), b(p, 5, 2), b(p, 7, 1)), {5, 2, 1});
      p = F.at(27);
      F.bitbyte(27, fmt("RNRRetry=%u SRQ=%u", b(p, 0, 3), b(p, 3, 1)), {3, 1, 4});
      F.num(28, 8, "LocalCAGUID");
      F.blob(36, 196, "private data");
      break;
    }
    case cm::Attr::Rtu:
    case cm::Attr::Drep:
      comm_ids();
      F.blob(8, 224, "private data");
      break;
    case cm::Attr::Dreq:
      comm_ids();
      F.num(8, 3, "RemoteQPN", true);
      F.blob(12, 220, "private data");
      break;
    case cm::Attr::SidrReq:
      F.num(0, 4, "RequestID");
      F.num(4, 2, "P_Key");
      F.num(8, 8, "ServiceID", false, sid_note(load_be64(F.at(8))));
      cma_fields(F, mad_off_msg + 16);
      F.header("CM SIDR_REQ", mad_off_msg);
      F.blob(16 + 36, 216 - 36, "private data after the rdma_cm header");
      break;
    case cm::Attr::SidrRep: {
      F.num(0, 4, "RequestID");
      const uint8_t s = F.at(4)[0];
      F.add(4, 1, named("Status", fmt("%u (%s)", s, sv(cm::sidr_status_name(s)).c_str())));
      F.num(5, 1, "InfoLength", true);
      F.num(8, 3, "QPN", true);
      F.num(12, 8, "ServiceID", false, sid_note(load_be64(F.at(12))));
      F.num(20, 4, "Q_Key");
      F.blob(24, 72, "additional information");
      F.blob(96, 136, "private data");
      break;
    }
    default: F.blob(0, cm::kMessageSize, "not decoded"); break;
  }
}

}  // namespace

std::string cm_line(std::span<const uint8_t> mad) {
  cm::Mad m;
  const cm::Error e = cm::parse(mad, m);
  if (e == cm::Error::Ok) return "  CM " + sv(cm::attr_name(m.hdr.attr_id)) + std::visit(LineText{}, m.msg);
  if (e == cm::Error::UnsupportedAttribute) return "  CM " + sv(cm::attr_name(m.hdr.attr_id)) + " (not decoded)";
  return "  MAD: " + sv(cm::error_name(e));
}

std::vector<CmField> cm_fields(const uint8_t* mad, size_t at) {
  std::vector<CmField> out;
  Fields F(out, mad, at);
  F.header("MAD", 0);
  const uint8_t* h = mad;
  F.num(0, 1, "BaseVersion");
  F.num(1, 1, "MgmtClass", false, h[1] == cm::kMgmtClassCm ? "(CM)" : "");
  F.num(2, 1, "ClassVersion");
  F.bitbyte(3, fmt("R=%u Method=0x%02x%s", h[3] >> 7, h[3] & 0x7F, (h[3] & 0x7F) == cm::kMethodSend ? " (Send)" : ""),
            {1, 7});
  F.num(4, 2, "Status");
  F.num(6, 2, "ClassSpecific");
  F.num(8, 8, "TID");
  const uint16_t attr = load_be16(h + 16);
  F.add(16, 2, named("AttributeID", fmt("0x%04x %s (%s)", attr, sv(cm::attr_name(attr)).c_str(),
                                          sv(cm::attr_long_name(attr)).c_str())));
  F.num(18, 2, "Reserved");
  F.num(20, 4, "AttrModifier");
  cm::Mad m;
  const cm::Error e = cm::parse({mad, cm::kMadSize}, m);
  if (e == cm::Error::Ok || e == cm::Error::BadInfoLength) message_fields(F, attr, cm::kMadHeaderSize);
  return out;
}

}  // namespace uroce::dissect
