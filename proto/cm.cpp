// CM MADs: parse() and emit() between the 256 bytes and the validated representation.
// Field positions are in the views of proto/cm.hpp; this file only moves values between them.
#include "proto/cm.hpp"

#include <algorithm>

namespace uroce::proto::cm {

namespace {

template <size_t N>
void copy_out(const uint8_t* from, std::array<uint8_t, N>& to) {
  std::memcpy(to.data(), from, N);
}
template <size_t N>
void copy_in(const std::array<uint8_t, N>& from, uint8_t* to) {
  std::memcpy(to, from.data(), N);
}

Path read_path(PathView<const uint8_t> v) {
  Path p;
  p.local_lid = v.local_lid();
  p.remote_lid = v.remote_lid();
  std::memcpy(p.local_gid.data(), v.local_gid(), 16);
  std::memcpy(p.remote_gid.data(), v.remote_gid(), 16);
  p.flow_label = v.flow_label();
  p.packet_rate = v.packet_rate();
  p.traffic_class = v.traffic_class();
  p.hop_limit = v.hop_limit();
  p.sl = v.sl();
  p.subnet_local = v.subnet_local();
  p.local_ack_timeout = v.local_ack_timeout();
  return p;
}

void write_path(const Path& p, PathView<uint8_t> v) {
  v.set_local_lid(p.local_lid);
  v.set_remote_lid(p.remote_lid);
  v.set_local_gid(p.local_gid.data());
  v.set_remote_gid(p.remote_gid.data());
  v.set_flow_label(p.flow_label);
  v.set_packet_rate(p.packet_rate);
  v.set_traffic_class(p.traffic_class);
  v.set_hop_limit(p.hop_limit);
  v.set_sl(p.sl);
  v.set_subnet_local(p.subnet_local);
  v.set_local_ack_timeout(p.local_ack_timeout);
}

Req read_req(ReqView<const uint8_t> v) {
  Req r;
  r.local_comm_id = v.local_comm_id();
  r.service_id = v.service_id();
  r.local_ca_guid = v.local_ca_guid();
  r.local_qkey = v.local_qkey();
  r.local_qpn = v.local_qpn();
  r.responder_resources = v.responder_resources();
  r.local_eecn = v.local_eecn();
  r.initiator_depth = v.initiator_depth();
  r.remote_eecn = v.remote_eecn();
  r.remote_cm_response_timeout = v.remote_cm_response_timeout();
  r.transport_service_type = v.transport_service_type();
  r.end_to_end_flow_control = v.end_to_end_flow_control();
  r.starting_psn = v.starting_psn();
  r.local_cm_response_timeout = v.local_cm_response_timeout();
  r.retry_count = v.retry_count();
  r.pkey = v.pkey();
  r.path_mtu = v.path_mtu();
  r.rdc_exists = v.rdc_exists();
  r.rnr_retry_count = v.rnr_retry_count();
  r.max_cm_retries = v.max_cm_retries();
  r.srq = v.srq();
  r.extended_transport_type = v.extended_transport_type();
  r.primary = read_path(v.primary_path());
  r.alternate = read_path(v.alternate_path());
  r.sap_supported = v.sap_supported();
  copy_out(v.private_data(), r.private_data);
  return r;
}

void write_req(const Req& r, ReqView<uint8_t> v) {
  v.set_local_comm_id(r.local_comm_id);
  v.set_service_id(r.service_id);
  v.set_local_ca_guid(r.local_ca_guid);
  v.set_local_qkey(r.local_qkey);
  v.set_local_qpn(r.local_qpn);
  v.set_responder_resources(r.responder_resources);
  v.set_local_eecn(r.local_eecn);
  v.set_initiator_depth(r.initiator_depth);
  v.set_remote_eecn(r.remote_eecn);
  v.set_remote_cm_response_timeout(r.remote_cm_response_timeout);
  v.set_transport_service_type(r.transport_service_type);
  v.set_end_to_end_flow_control(r.end_to_end_flow_control);
  v.set_starting_psn(r.starting_psn);
  v.set_local_cm_response_timeout(r.local_cm_response_timeout);
  v.set_retry_count(r.retry_count);
  v.set_pkey(r.pkey);
  v.set_path_mtu(r.path_mtu);
  v.set_rdc_exists(r.rdc_exists);
  v.set_rnr_retry_count(r.rnr_retry_count);
  v.set_max_cm_retries(r.max_cm_retries);
  v.set_srq(r.srq);
  v.set_extended_transport_type(r.extended_transport_type);
  write_path(r.primary, v.primary_path());
  write_path(r.alternate, v.alternate_path());
  v.set_sap_supported(r.sap_supported);
  copy_in(r.private_data, v.private_data());
}

// Each CM message but the SIDR ones starts with the two communication IDs; every one ends with
// its private data. The rest, field by field: read_fields() and write_fields() for each.
template <typename M, template <typename> class View>
void read_ids(View<const uint8_t> v, M& m) {
  m.local_comm_id = v.local_comm_id();
  m.remote_comm_id = v.remote_comm_id();
}
template <typename M, template <typename> class View>
void write_ids(const M& m, View<uint8_t> v) {
  v.set_local_comm_id(m.local_comm_id);
  v.set_remote_comm_id(m.remote_comm_id);
}

void read_fields(MraView<const uint8_t> v, Mra& m) {
  read_ids(v, m);
  m.message_mraed = v.message_mraed();
  m.service_timeout = v.service_timeout();
}
void write_fields(const Mra& m, MraView<uint8_t> v) {
  write_ids(m, v);
  v.set_message_mraed(m.message_mraed);
  v.set_service_timeout(m.service_timeout);
}

void read_fields(RejView<const uint8_t> v, Rej& m) {
  read_ids(v, m);
  m.message_rejected = v.message_rejected();
  m.rejected_info_length = v.rejected_info_length();
  m.reason = v.reason();
  copy_out(v.ari(), m.ari);
}
void write_fields(const Rej& m, RejView<uint8_t> v) {
  write_ids(m, v);
  v.set_message_rejected(m.message_rejected);
  v.set_rejected_info_length(m.rejected_info_length);
  v.set_reason(m.reason);
  copy_in(m.ari, v.ari());
}

void read_fields(RepView<const uint8_t> v, Rep& m) {
  read_ids(v, m);
  m.local_qkey = v.local_qkey();
  m.local_qpn = v.local_qpn();
  m.local_eecn = v.local_eecn();
  m.starting_psn = v.starting_psn();
  m.responder_resources = v.responder_resources();
  m.initiator_depth = v.initiator_depth();
  m.target_ack_delay = v.target_ack_delay();
  m.failover_accepted = v.failover_accepted();
  m.end_to_end_flow_control = v.end_to_end_flow_control();
  m.rnr_retry_count = v.rnr_retry_count();
  m.srq = v.srq();
  m.local_ca_guid = v.local_ca_guid();
}
void write_fields(const Rep& m, RepView<uint8_t> v) {
  write_ids(m, v);
  v.set_local_qkey(m.local_qkey);
  v.set_local_qpn(m.local_qpn);
  v.set_local_eecn(m.local_eecn);
  v.set_starting_psn(m.starting_psn);
  v.set_responder_resources(m.responder_resources);
  v.set_initiator_depth(m.initiator_depth);
  v.set_target_ack_delay(m.target_ack_delay);
  v.set_failover_accepted(m.failover_accepted);
  v.set_end_to_end_flow_control(m.end_to_end_flow_control);
  v.set_rnr_retry_count(m.rnr_retry_count);
  v.set_srq(m.srq);
  v.set_local_ca_guid(m.local_ca_guid);
}

// RTU and DREP: the two IDs only.
void read_fields(RtuView<const uint8_t> v, Rtu& m) { read_ids(v, m); }
void write_fields(const Rtu& m, RtuView<uint8_t> v) { write_ids(m, v); }
void read_fields(DrepView<const uint8_t> v, Drep& m) { read_ids(v, m); }
void write_fields(const Drep& m, DrepView<uint8_t> v) { write_ids(m, v); }

void read_fields(DreqView<const uint8_t> v, Dreq& m) {
  read_ids(v, m);
  m.remote_qpn = v.remote_qpn();
}
void write_fields(const Dreq& m, DreqView<uint8_t> v) {
  write_ids(m, v);
  v.set_remote_qpn(m.remote_qpn);
}

void read_fields(SidrReqView<const uint8_t> v, SidrReq& m) {
  m.request_id = v.request_id();
  m.pkey = v.pkey();
  m.service_id = v.service_id();
}
void write_fields(const SidrReq& m, SidrReqView<uint8_t> v) {
  v.set_request_id(m.request_id);
  v.set_pkey(m.pkey);
  v.set_service_id(m.service_id);
}

void read_fields(SidrRepView<const uint8_t> v, SidrRep& m) {
  m.request_id = v.request_id();
  m.status = v.status();
  m.info_length = v.info_length();
  m.qpn = v.qpn();
  m.service_id = v.service_id();
  m.qkey = v.qkey();
  copy_out(v.info(), m.info);
}
void write_fields(const SidrRep& m, SidrRepView<uint8_t> v) {
  v.set_request_id(m.request_id);
  v.set_status(m.status);
  v.set_info_length(m.info_length);
  v.set_qpn(m.qpn);
  v.set_service_id(m.service_id);
  v.set_qkey(m.qkey);
  copy_in(m.info, v.info());
}

// Message M read through its view V: its fields, then its private data.
template <template <typename> class V, typename M>
M read_as(const uint8_t* p) {
  V<const uint8_t> v(p);
  M m;
  read_fields(v, m);
  copy_out(v.private_data(), m.private_data);
  return m;
}

// Reads the message after the header; Ok or BadInfoLength.
Error read_message(uint16_t attr, const uint8_t* p, Message& out) {
  switch (Attr(attr)) {
    case Attr::Req: out = read_req(ReqView<const uint8_t>(p)); return Error::Ok;
    case Attr::Mra: out = read_as<MraView, Mra>(p); return Error::Ok;
    case Attr::Rej: {
      const Rej m = read_as<RejView, Rej>(p);
      out = m;
      return m.rejected_info_length <= RejView<const uint8_t>::kAriSize ? Error::Ok : Error::BadInfoLength;
    }
    case Attr::Rep: out = read_as<RepView, Rep>(p); return Error::Ok;
    case Attr::Rtu: out = read_as<RtuView, Rtu>(p); return Error::Ok;
    case Attr::Dreq: out = read_as<DreqView, Dreq>(p); return Error::Ok;
    case Attr::Drep: out = read_as<DrepView, Drep>(p); return Error::Ok;
    case Attr::SidrReq: out = read_as<SidrReqView, SidrReq>(p); return Error::Ok;
    case Attr::SidrRep: {
      const SidrRep m = read_as<SidrRepView, SidrRep>(p);
      out = m;
      return m.info_length <= SidrRepView<const uint8_t>::kInfoSize ? Error::Ok : Error::BadInfoLength;
    }
    case Attr::ClassPortInfo:
    case Attr::Lap:
    case Attr::Apr: return Error::UnsupportedAttribute;
  }
  return Error::UnknownAttribute;
}

// The message's view type, for the writer.
template <typename M> struct ViewOf;
template <> struct ViewOf<Mra> { using T = MraView<uint8_t>; };
template <> struct ViewOf<Rej> { using T = RejView<uint8_t>; };
template <> struct ViewOf<Rep> { using T = RepView<uint8_t>; };
template <> struct ViewOf<Rtu> { using T = RtuView<uint8_t>; };
template <> struct ViewOf<Dreq> { using T = DreqView<uint8_t>; };
template <> struct ViewOf<Drep> { using T = DrepView<uint8_t>; };
template <> struct ViewOf<SidrReq> { using T = SidrReqView<uint8_t>; };
template <> struct ViewOf<SidrRep> { using T = SidrRepView<uint8_t>; };

// Writes the message after the header: its fields, then its private data.
struct Writer {
  uint8_t* p;
  void operator()(const Req& m) const { write_req(m, ReqView<uint8_t>(p)); }
  template <typename M>
  void operator()(const M& m) const {
    typename ViewOf<M>::T v(p);
    write_fields(m, v);
    copy_in(m.private_data, v.private_data());
  }
};

struct AttrOf {
  Attr operator()(const Req&) const { return Attr::Req; }
  Attr operator()(const Mra&) const { return Attr::Mra; }
  Attr operator()(const Rej&) const { return Attr::Rej; }
  Attr operator()(const Rep&) const { return Attr::Rep; }
  Attr operator()(const Rtu&) const { return Attr::Rtu; }
  Attr operator()(const Dreq&) const { return Attr::Dreq; }
  Attr operator()(const Drep&) const { return Attr::Drep; }
  Attr operator()(const SidrReq&) const { return Attr::SidrReq; }
  Attr operator()(const SidrRep&) const { return Attr::SidrRep; }
};

}  // namespace

Attr attr_of(const Message& m) { return std::visit(AttrOf{}, m); }

std::string_view error_name(Error e) {
  switch (e) {
    case Error::Ok: return "ok";
    case Error::BadLength: return "not 256 bytes";
    case Error::BadBaseVersion: return "MAD base version is not 1";
    case Error::NotCm: return "management class is not CM (0x07)";
    case Error::BadClassVersion: return "CM class version is not 2";
    case Error::BadMethod: return "method is not Send (0x03)";
    case Error::UnknownAttribute: return "unknown CM attribute";
    case Error::UnsupportedAttribute: return "CM attribute not decoded";
    case Error::BadInfoLength: return "additional information length above 72";
  }
  return "?";
}

Error parse(std::span<const uint8_t> mad, Mad& out) {
  if (mad.size() != kMadSize) return Error::BadLength;
  MadHeaderView<const uint8_t> h(mad.data());
  out.hdr.base_version = h.base_version();
  out.hdr.mgmt_class = h.mgmt_class();
  out.hdr.class_version = h.class_version();
  out.hdr.method = h.method();
  out.hdr.status = h.status();
  out.hdr.class_specific = h.class_specific();
  out.hdr.tid = h.tid();
  out.hdr.attr_id = h.attr_id();
  out.hdr.attr_mod = h.attr_mod();
  if (h.base_version() != kBaseVersion) return Error::BadBaseVersion;
  if (h.mgmt_class() != kMgmtClassCm) return Error::NotCm;
  if (h.class_version() != kCmClassVersion) return Error::BadClassVersion;
  if (h.method() != kMethodSend) return Error::BadMethod;
  return read_message(h.attr_id(), mad.data() + kMadHeaderSize, out.msg);
}

size_t emit(const Mad& m, std::span<uint8_t> out) {
  if (out.size() < kMadSize) return 0;
  std::fill_n(out.data(), kMadSize, uint8_t(0));
  MadHeaderView<uint8_t> h(out.data());
  h.set_base_version(m.hdr.base_version);
  h.set_mgmt_class(m.hdr.mgmt_class);
  h.set_class_version(m.hdr.class_version);
  h.set_method(m.hdr.method);
  h.set_status(m.hdr.status);
  h.set_class_specific(m.hdr.class_specific);
  h.set_tid(m.hdr.tid);
  h.set_attr_id(uint16_t(attr_of(m.msg)));
  h.set_attr_mod(m.hdr.attr_mod);
  std::visit(Writer{out.data() + kMadHeaderSize}, m.msg);
  return kMadSize;
}

std::string_view error_name(CmaError e) {
  switch (e) {
    case CmaError::Ok: return "ok";
    case CmaError::Truncated: return "private data shorter than the 36-byte rdma_cm header";
    case CmaError::BadVersion: return "rdma_cm header version is not 0";
    case CmaError::BadIpVersion: return "rdma_cm header IP version is not 4 or 6";
  }
  return "?";
}

CmaError parse_cma_header(std::span<const uint8_t> private_data, CmaHeader& out) {
  if (private_data.size() < CmaHeaderView<const uint8_t>::kSize) return CmaError::Truncated;
  CmaHeaderView<const uint8_t> v(private_data.data());
  if (v.version() != kCmaVersion) return CmaError::BadVersion;
  if ((v.ip_version() != 4 && v.ip_version() != 6) || v.ip_version_low() != 0) return CmaError::BadIpVersion;
  out.ip_version = v.ip_version();
  out.src_port = v.src_port();
  std::memcpy(out.src_addr.data(), v.src_addr(), 16);
  std::memcpy(out.dst_addr.data(), v.dst_addr(), 16);
  return CmaError::Ok;
}

bool emit_cma_header(const CmaHeader& h, std::span<uint8_t> out) {
  if (out.size() < CmaHeaderView<uint8_t>::kSize) return false;
  CmaHeaderView<uint8_t> v(out.data());
  v.set_version(kCmaVersion);
  v.set_ip_version(h.ip_version);
  v.set_src_port(h.src_port);
  v.set_src_addr(h.src_addr.data());
  v.set_dst_addr(h.dst_addr.data());
  return true;
}

}  // namespace uroce::proto::cm
