// The connection manager's side of the library's calls (engine/cm.hpp): listen, connect (the
// active side's REQ), accept and reject (the passive side's REP or REJ), establish (RTU),
// disconnect (DREQ/DREP), SIDR requests and replies, destroy and shutdown.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/cm.hpp"
#include "engine/cm_util.hpp"
#include "engine/roles.hpp"
#include "proto/entropy.hpp"

namespace uroce::engine::cm {

// ---- The library's calls ------------------------------------------------------------------------

// The source GID exists and is of the destination's family (IPv4 to IPv4, IPv6 to IPv6).
bool Manager::same_family(const Peer& to) const {
  const proto::Ip6* src = dev_.sgid(to.sgid_index);
  return src && gid_is_v4mapped(*src) == gid_is_v4mapped(to.dgid);
}

int Manager::listen(uint64_t service_id, uint32_t* id) {
  if (find_listener(service_id)) return EADDRINUSE;
  Conn* c = new_conn(State::Listen);
  if (!c) return ENOMEM;
  c->service_id = service_id;
  listeners_[service_id] = c->local_id;
  *id = c->local_id;
  if (on_listen) on_listen(service_id, true);
  return 0;
}

// A connection object for the active side of a REQ or SIDR_REQ, or nullptr (none free). Its
// transaction ID is echoed by the answers (REP and our RTU, SIDR_REP).
Conn* Manager::new_active(State s, uint64_t service_id, const Peer& peer, uint8_t max_retries) {
  Conn* c = new_conn(s);
  if (!c) return nullptr;
  c->active = true;
  c->service_id = service_id;
  c->peer = peer;
  c->local_gid = *dev_.sgid(peer.sgid_index);
  c->max_retries = max_retries;
  c->tid = uint64_t(rng_.next32()) << 32 | c->local_id;
  return c;
}

int Manager::connect(const ConnectParams& p, uint32_t* id) {
  const size_t room = pcm::ReqView<uint8_t>::kPrivateDataSize - (p.cma ? pcm::CmaHeaderView<uint8_t>::kSize : 0);
  if (p.private_data.size() > room || !same_family(p.peer) || p.qpn == 0 || p.qpn > 0xFFFFFF ||
      p.max_retries > 15 || p.response_timeout > 31 || p.local_response_timeout > 31)
    return EINVAL;
  // TimeWait: a QP number still reserved by a finished connection is not used again yet.
  if (timewait_qpns_.count(p.qpn)) return EBUSY;
  Conn* c = new_active(State::ReqSent, p.service_id, p.peer, p.max_retries);
  if (!c) return ENOMEM;
  c->local_qpn = p.qpn;
  c->remote_psn = p.starting_psn;
  c->responder_resources = p.responder_resources;
  c->initiator_depth = p.initiator_depth;
  c->retry_count = p.retry_count;
  c->rnr_retry_count = p.rnr_retry_count;
  c->path_mtu = p.path_mtu;

  pcm::Req r;
  r.local_comm_id = c->local_id;
  r.service_id = p.service_id;
  r.local_ca_guid = ca_guid(dev_.config().mac);
  r.local_qpn = p.qpn;
  r.responder_resources = p.responder_resources;
  r.initiator_depth = p.initiator_depth;
  r.remote_cm_response_timeout = p.response_timeout;
  r.transport_service_type = p.uc ? 1 : 0;
  r.starting_psn = p.starting_psn & 0xFFFFFF;
  r.local_cm_response_timeout = p.local_response_timeout;
  r.retry_count = p.retry_count & 7;
  r.path_mtu = uint8_t(p.path_mtu);
  r.rnr_retry_count = p.rnr_retry_count & 7;
  r.max_cm_retries = p.max_retries;
  r.srq = p.srq;
  r.primary.local_gid = c->local_gid;
  r.primary.remote_gid = p.peer.dgid;
  r.primary.flow_label = p.peer.flow_label & 0xFFFFF;
  r.primary.traffic_class = p.peer.traffic_class;
  r.primary.hop_limit = p.peer.hop_limit;
  r.primary.local_ack_timeout = p.local_ack_timeout & 0x1F;
  r.alternate = pcm::Path{0, 0};
  copy_cma_pd(r.private_data, p.cma, p.private_data);
  pcm::Mad m{{}, r};
  m.hdr.tid = c->tid;
  send(c->peer, c->local_gid, m, c);  // a lost (or unsent) REQ is resent by the timer
  arm(*c, cm_time_ns(p.response_timeout), p.max_retries);
  *id = c->local_id;
  return 0;
}

int Manager::accept(uint32_t id, const AcceptParams& p) {
  Conn* c = get(id);
  if (!c || (c->state != State::ReqRcvd && c->state != State::MraReqSent)) return EINVAL;
  if (p.private_data.size() > pcm::RepView<uint8_t>::kPrivateDataSize || p.qpn == 0 || p.qpn > 0xFFFFFF) return EINVAL;
  c->local_qpn = p.qpn;
  c->remote_psn = p.starting_psn & 0xFFFFFF;
  c->responder_resources = p.responder_resources;
  c->initiator_depth = p.initiator_depth;
  pcm::Rep r;
  r.local_comm_id = c->local_id;
  r.remote_comm_id = c->remote_id;
  r.local_qpn = p.qpn;
  r.starting_psn = c->remote_psn;
  r.responder_resources = p.responder_resources;
  r.initiator_depth = p.initiator_depth;
  r.target_ack_delay = p.target_ack_delay & 0x1F;
  r.rnr_retry_count = p.rnr_retry_count & 7;
  r.srq = p.srq;
  r.local_ca_guid = ca_guid(dev_.config().mac);
  copy_pd(r.private_data, p.private_data);
  pcm::Mad m{{}, r};
  m.hdr.tid = c->tid;
  set_state(*c, State::RepSent);
  send(c->peer, c->local_gid, m, c);
  arm(*c, c->timeout_ns, c->max_retries);
  return 0;
}

int Manager::reject(uint32_t id, uint16_t reason, std::span<const uint8_t> pd) {
  Conn* c = get(id);
  if (!c || pd.size() > pcm::RejView<uint8_t>::kPrivateDataSize) return EINVAL;
  if (c->state == State::ReqRcvd || c->state == State::MraReqSent) send_rej(*c, pcm::kMsgReq, reason, pd);
  else if (c->state == State::RepRcvd) send_rej(*c, pcm::kMsgRep, reason, pd);
  else return EINVAL;
  free_conn(id);
  return 0;
}

int Manager::establish(uint32_t id, std::span<const uint8_t> pd) {
  Conn* c = get(id);
  if (!c || c->state != State::RepRcvd || pd.size() > pcm::RtuView<uint8_t>::kPrivateDataSize) return EINVAL;
  pcm::Rtu r;
  r.local_comm_id = c->local_id;
  r.remote_comm_id = c->remote_id;
  copy_pd(r.private_data, pd);
  pcm::Mad m{{}, r};
  m.hdr.tid = c->tid;
  set_state(*c, State::Established);
  c->timer_ns = 0;
  send(c->peer, c->local_gid, m, c);  // kept: a duplicate REP (our RTU was lost) gets it again
  return 0;
}

int Manager::disconnect(uint32_t id, std::span<const uint8_t> pd) {
  Conn* c = get(id);
  if (!c) return EINVAL;
  if (c->state == State::Established) {
    if (pd.size() > pcm::DreqView<uint8_t>::kPrivateDataSize) return EINVAL;
    c->tid = uint64_t(rng_.next32()) << 32 | c->local_id;  // a new exchange: the DREP echoes it
    set_state(*c, State::DreqSent);
    send(c->peer, c->local_gid, dreq(*c, c->tid, pd), c);
    arm(*c, c->timeout_ns, c->max_retries);
    return 0;
  }
  if (c->state == State::DreqRcvd) {
    if (pd.size() > pcm::DrepView<uint8_t>::kPrivateDataSize) return EINVAL;
    send(c->peer, c->local_gid, drep(c->local_id, c->remote_id, c->tid, pd), c);  // kept: a duplicate DREQ in TimeWait gets it again
    enter_timewait(*c);
    return 0;
  }
  return EINVAL;
}

int Manager::sidr_request(const SidrParams& p, uint32_t* id) {
  const size_t room = pcm::SidrReqView<uint8_t>::kPrivateDataSize - (p.cma ? pcm::CmaHeaderView<uint8_t>::kSize : 0);
  if (p.private_data.size() > room || !same_family(p.peer) || p.max_retries > 15) return EINVAL;
  Conn* c = new_active(State::SidrReqSent, p.service_id, p.peer, p.max_retries);
  if (!c) return ENOMEM;
  pcm::SidrReq r;
  r.request_id = c->local_id;
  r.service_id = p.service_id;
  copy_cma_pd(r.private_data, p.cma, p.private_data);
  pcm::Mad m{{}, r};
  m.hdr.tid = c->tid;
  send(c->peer, c->local_gid, m, c);
  arm(*c, cm_time_ns(p.response_timeout), p.max_retries);
  *id = c->local_id;
  return 0;
}

int Manager::sidr_reply(uint32_t id, uint8_t status, uint32_t qpn, uint32_t qkey, std::span<const uint8_t> pd) {
  Conn* c = get(id);
  if (!c || c->state != State::SidrReqRcvd || pd.size() > pcm::SidrRepView<uint8_t>::kPrivateDataSize) return EINVAL;
  pcm::SidrRep r;
  r.request_id = c->remote_id;
  r.status = status;
  r.qpn = qpn & 0xFFFFFF;
  r.service_id = c->service_id;
  r.qkey = qkey;
  copy_pd(r.private_data, pd);
  pcm::Mad m{{}, r};
  m.hdr.tid = c->tid;
  send(c->peer, c->local_gid, m, nullptr);
  free_conn(id);
  return 0;
}

int Manager::destroy(uint32_t id) {
  if (!get(id)) return EINVAL;
  free_conn(id);
  return 0;
}

size_t Manager::shutdown() {
  std::vector<uint32_t> ids;
  for (const auto& [id, c] : conns_) ids.push_back(id);
  for (uint32_t id : ids) {
    const Conn* c = get(id);
    if (!c) continue;
    switch (c->state) {
      case State::Established:
      case State::DreqRcvd:
        disconnect(id);
        break;
      case State::ReqRcvd:
      case State::MraReqSent:
      case State::RepRcvd:
        reject(id, pcm::rej::kConsumerDefined);
        break;
      case State::SidrReqRcvd:
        sidr_reply(id, pcm::sidr::kReject, 0, 0, {});
        break;
      default:  // listeners, requests of ours in flight, DREQ_SENT, TimeWait: nothing to say
        break;
    }
  }
  return disconnecting();
}

size_t Manager::disconnecting() const {
  size_t n = 0;
  for (const auto& [id, c] : conns_) n += c.state == State::DreqSent;
  return n;
}

void Manager::qp_data(uint32_t qpn) {
  auto it = rtu_by_qpn_.find(qpn);
  Conn* c = it == rtu_by_qpn_.end() ? nullptr : get(it->second);
  if (!c || !(c->state == State::RepSent || c->state == State::MraRepRcvd) || c->local_qpn != qpn) return;
  set_state(*c, State::Established);
  c->timer_ns = 0;
  push(event(EventType::Established, *c));
}

}  // namespace uroce::engine::cm
