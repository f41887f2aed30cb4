// The CM MADs received (engine/cm.hpp): the checks every frame for QP 1 passes, then one handler
// per message (REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP), each a switch over the
// state of the connection it is for.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/cm.hpp"
#include "engine/cm_util.hpp"
#include "engine/roles.hpp"
#include "proto/entropy.hpp"

namespace uroce::engine::cm {

// ---- Receiving ----------------------------------------------------------------------------------

// A frame for QP 1: it must be a UD SEND_ONLY with the GSI's P_Key and Q_Key (rxe checks the
// same), and its payload a CM MAD.
void Manager::on_frame(const proto::Packet& p) {
  if (!pcm::is_gsi_send(p.opcode, p.dest_qp) || (p.pkey & 0x7FFF) != (pcm::kGsiPkey & 0x7FFF) ||
      p.deth.qkey != pcm::kGsiQkey) {
    ++ctr_.dropped_bad_keys;
    return;
  }
  ++gsi_.ctr.rcvd_pkts;
  gsi_.ctr.rx_bytes += p.payload.size();
  pcm::Mad m;
  if (pcm::parse(p.payload, m) != pcm::Error::Ok) {
    ++ctr_.dropped_bad_mad;
    return;
  }
  ++ctr_.mads_rcvd;
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, pcm::Req>) on_req(p, m.hdr, msg);
        else if constexpr (std::is_same_v<T, pcm::Mra>) on_mra(p, msg);
        else if constexpr (std::is_same_v<T, pcm::Rej>) on_rej(p, msg);
        else if constexpr (std::is_same_v<T, pcm::Rep>) on_rep(p, m.hdr, msg);
        else if constexpr (std::is_same_v<T, pcm::Rtu>) on_rtu(p, msg);
        else if constexpr (std::is_same_v<T, pcm::Dreq>) on_dreq(p, m.hdr, msg);
        else if constexpr (std::is_same_v<T, pcm::Drep>) on_drep(p, msg);
        else if constexpr (std::is_same_v<T, pcm::SidrReq>) on_sidr_req(p, m.hdr, msg);
        else if constexpr (std::is_same_v<T, pcm::SidrRep>) on_sidr_rep(p, msg);
      },
      m.msg);
}

void Manager::on_req(const proto::Packet& p, const pcm::MadHeader& h, const pcm::Req& m) {
  const proto::Ip6 peer_gid = gid_of(p, true);
  // A duplicate: our answer was lost, or the peer's timer is shorter than our application.
  if (Conn* c = find_remote(m.local_comm_id, peer_gid); c && !c->active) {
    switch (c->state) {
      case State::ReqRcvd: {  // not accepted yet: tell the peer to wait longer
        pcm::Mra a;
        a.local_comm_id = c->local_id;
        a.remote_comm_id = c->remote_id;
        a.message_mraed = pcm::kMsgReq;
        a.service_timeout = dev_.config().cm_mra_timeout;
        pcm::Mad out{{}, a};
        out.hdr.tid = c->tid;
        set_state(*c, State::MraReqSent);
        send(c->peer, c->local_gid, out, c);
        return;
      }
      case State::MraReqSent:
      case State::RepSent:
      case State::MraRepRcvd:
        resend(*c);  // the MRA or the REP again
        return;
      default:
        ++ctr_.dropped_duplicate;
        return;
    }
  }
  // Stale: a live connection (or one in TimeWait) already joins this peer's QP to one of ours.
  if (find_stale(m.local_qpn, peer_gid)) {
    pcm::Rej r;
    r.remote_comm_id = m.local_comm_id;
    r.message_rejected = pcm::kMsgReq;
    r.reason = pcm::rej::kStaleConn;
    pcm::Mad out{{}, r};
    out.hdr.tid = h.tid;
    reply_to(p, out);
    ++ctr_.rej_stale;
    return;
  }
  auto reject_now = [&](uint16_t reason, uint64_t& counter) {
    pcm::Rej r;
    r.remote_comm_id = m.local_comm_id;
    r.message_rejected = pcm::kMsgReq;
    r.reason = reason;
    pcm::Mad out{{}, r};
    out.hdr.tid = h.tid;
    reply_to(p, out);
    ++counter;
  };
  Conn* l = find_listener(m.service_id);
  if (!l) return reject_now(pcm::rej::kInvalidServiceId, ctr_.rej_no_listener);
  Event e;
  if (pcm::is_ip_service_id(m.service_id)) {
    // rdma_cm's IP header must be there and well formed (the kernel's cma_save_ip_info).
    if (pcm::parse_cma_header(m.private_data, e.cma) != pcm::CmaError::Ok)
      return reject_now(pcm::rej::kConsumerDefined, ctr_.rej_bad_cma);
    e.has_cma = true;
  }
  // Both ends of an RC or UC connection must use the same path MTU (a first or middle packet
  // carries exactly that many bytes), and a REP has no field to lower it: a REQ asking for more
  // than this port carries (config key mtu) is refused now, not accepted into a connection
  // whose larger messages would be lost.
  if (m.path_mtu > uint8_t(dev_.config().port_mtu)) return reject_now(pcm::rej::kInvalidMtu, ctr_.rej_mtu);
  const uint32_t listen_id = l->local_id;
  Conn* c = new_conn(State::ReqRcvd);
  if (!c) return reject_now(pcm::rej::kNoResources, ctr_.rej_no_resources);
  c->remote_id = m.local_comm_id;
  c->service_id = m.service_id;
  c->tid = h.tid;
  c->peer.dgid = peer_gid;
  c->peer.dmac = p.eth_src;
  c->peer.hop_limit = m.primary.hop_limit ? m.primary.hop_limit : param::kDefaultTtl;
  c->peer.traffic_class = m.primary.traffic_class;
  c->local_gid = gid_of(p, false);
  c->remote_qpn = m.local_qpn;
  index_peer(*c);
  c->local_psn = m.starting_psn;  // the REQ announces the PSN *we* send from
  c->responder_resources = m.initiator_depth;  // what the peer issues is what we must accept
  c->initiator_depth = m.responder_resources;
  c->retry_count = m.retry_count;
  c->rnr_retry_count = m.rnr_retry_count;
  c->path_mtu = m.path_mtu >= 1 && m.path_mtu <= 5 ? Mtu(m.path_mtu) : Mtu::M1024;
  // We wait for the active side's answers (RTU, DREP) as long as it said it may take.
  c->timeout_ns = cm_time_ns(m.local_cm_response_timeout);
  c->max_retries = m.max_cm_retries;
  e.type = EventType::ReqReceived;
  e.id = c->local_id;
  e.listen_id = listen_id;
  e.service_id = m.service_id;
  e.remote_qpn = m.local_qpn;
  e.starting_psn = m.starting_psn;
  e.private_data = vec(m.private_data);
  push(std::move(e));
}

void Manager::on_mra(const proto::Packet& p, const pcm::Mra& m) {
  Conn* c = get_from(m.remote_comm_id, p);
  if (!c) {
    ++ctr_.dropped_unknown_id;
    return;
  }
  // The peer will answer, later: wait its service timeout on top of ours, resend no more.
  const uint64_t wait = cm_time_ns(m.service_timeout) + c->timeout_ns;
  if (m.message_mraed == pcm::kMsgReq && c->state == State::ReqSent) set_state(*c, State::MraReqRcvd);
  else if (m.message_mraed == pcm::kMsgRep && c->state == State::RepSent) set_state(*c, State::MraRepRcvd);
  else if (!(c->state == State::MraReqRcvd && m.message_mraed == pcm::kMsgReq) &&
           !(c->state == State::MraRepRcvd && m.message_mraed == pcm::kMsgRep)) {
    ++ctr_.dropped_wrong_state;
    return;
  }
  set_timer(*c, dev_.step_ns() + wait);
  c->retries_left = 0;
  push(event(EventType::MraReceived, *c));
}

void Manager::on_rej(const proto::Packet& p, const pcm::Rej& m) {
  Conn* c = get_from(m.remote_comm_id, p);
  if (!c) {
    ++ctr_.dropped_unknown_id;
    return;
  }
  Event e = event(EventType::RejReceived, *c);
  e.reason = m.reason;
  e.private_data = vec(m.private_data);
  switch (c->state) {
    case State::ReqSent:
    case State::MraReqRcvd:
    case State::ReqRcvd:
    case State::MraReqSent:
      // Refused before the peer knew our QP as connected: the id is done (the kernel's
      // cm_reset_to_idle), unless the peer says our QP looks stale to it (then TimeWait).
      push(std::move(e));
      if (m.reason == pcm::rej::kStaleConn) enter_timewait(*c);
      else free_conn(c->local_id);
      return;
    case State::RepSent:
    case State::MraRepRcvd:
    case State::RepRcvd:
    case State::Established:
      push(std::move(e));
      // The peer may still send to our QP: keep its number reserved for a while.
      enter_timewait(*c);
      return;
    default:
      ++ctr_.dropped_wrong_state;
  }
}

void Manager::on_rep(const proto::Packet& p, const pcm::MadHeader&, const pcm::Rep& m) {
  Conn* c = get_from(m.remote_comm_id, p);
  if (!c || !c->active) {
    ++ctr_.dropped_unknown_id;
    return;
  }
  switch (c->state) {
    case State::ReqSent:
    case State::MraReqRcvd: {
      c->remote_id = m.local_comm_id;
      c->remote_qpn = m.local_qpn;
      index_peer(*c);
      c->local_psn = m.starting_psn;  // the REP announces the PSN *we* send from
      c->timer_ns = 0;
      // Our RTU and DREQ wait for answers as long as our REQ said the peer may take.
      set_state(*c, State::RepRcvd);
      Event e = event(EventType::RepReceived, *c);
      e.private_data = vec(m.private_data);
      push(std::move(e));
      return;
    }
    case State::Established:
      if (m.local_comm_id == c->remote_id) {
        resend(*c);  // our RTU was lost: send it again
        return;
      }
      ++ctr_.dropped_wrong_state;
      return;
    case State::RepRcvd:
      ++ctr_.dropped_duplicate;  // the application has it; establish() answers
      return;
    default:
      ++ctr_.dropped_wrong_state;
  }
}

void Manager::on_rtu(const proto::Packet& p, const pcm::Rtu& m) {
  Conn* c = get_pair(m.remote_comm_id, m.local_comm_id, p);
  if (!c) return;
  if (c->state != State::RepSent && c->state != State::MraRepRcvd) {
    ++ctr_.dropped_duplicate;  // already established (a duplicate RTU, or data came first)
    return;
  }
  set_state(*c, State::Established);
  c->timer_ns = 0;
  Event e = event(EventType::Established, *c);
  e.private_data = vec(m.private_data);
  push(std::move(e));
}

void Manager::on_dreq(const proto::Packet& p, const pcm::MadHeader& h, const pcm::Dreq& m) {
  Conn* c = get_pair(m.remote_comm_id, m.local_comm_id, p);
  if (!c) {
    // Nothing to disconnect (the connection is long gone): answer anyway, so the peer's
    // DREQ_SENT ends now rather than after all its retries (the kernel does the same).
    reply_to(p, drep(m.remote_comm_id, m.local_comm_id, h.tid));
    return;
  }
  switch (c->state) {
    case State::RepSent:
    case State::MraRepRcvd:
    case State::Established: {
      c->tid = h.tid;
      c->timer_ns = 0;
      set_state(*c, State::DreqRcvd);
      Event e = event(EventType::DreqReceived, *c);
      e.private_data = vec(m.private_data);
      push(std::move(e));
      return;
    }
    case State::DreqSent: {  // both sides disconnect at once: answer, and we are done too
      send(c->peer, c->local_gid, drep(c->local_id, c->remote_id, h.tid), c);
      enter_timewait(*c);
      push(event(EventType::Disconnected, *c));
      return;
    }
    case State::TimeWait: {  // our DREP was lost (or our DREQ crossed theirs): answer again
      ++ctr_.resent;
      send(c->peer, c->local_gid, drep(c->local_id, c->remote_id, h.tid), nullptr);
      return;
    }
    default:
      ++ctr_.dropped_wrong_state;
  }
}

void Manager::on_drep(const proto::Packet& p, const pcm::Drep& m) {
  Conn* c = get_pair(m.remote_comm_id, m.local_comm_id, p);
  if (!c) return;
  if (c->state != State::DreqSent) {
    ++ctr_.dropped_duplicate;
    return;
  }
  enter_timewait(*c);
  push(event(EventType::Disconnected, *c));
}

void Manager::on_sidr_req(const proto::Packet& p, const pcm::MadHeader& h, const pcm::SidrReq& m) {
  const proto::Ip6 peer_gid = gid_of(p, true);
  if (Conn* c = find_remote(m.request_id, peer_gid); c && c->state == State::SidrReqRcvd) {
    ++ctr_.dropped_duplicate;  // the application has it; sidr_reply() answers
    return;
  }
  auto answer_now = [&](uint8_t status) {
    pcm::SidrRep r;
    r.request_id = m.request_id;
    r.status = status;
    r.service_id = m.service_id;
    pcm::Mad out{{}, r};
    out.hdr.tid = h.tid;
    reply_to(p, out);
  };
  Conn* l = find_listener(m.service_id);
  if (!l) {
    ++ctr_.rej_no_listener;
    return answer_now(pcm::sidr::kUnsupported);
  }
  Event e;
  if (pcm::is_ip_service_id(m.service_id)) {
    if (pcm::parse_cma_header(m.private_data, e.cma) != pcm::CmaError::Ok) {
      ++ctr_.rej_bad_cma;
      return answer_now(pcm::sidr::kReject);
    }
    e.has_cma = true;
  }
  const uint32_t listen_id = l->local_id;
  Conn* c = new_conn(State::SidrReqRcvd);
  if (!c) {
    ++ctr_.rej_no_resources;
    return answer_now(pcm::sidr::kNoQp);
  }
  c->remote_id = m.request_id;
  c->service_id = m.service_id;
  c->tid = h.tid;
  c->peer.dgid = peer_gid;
  c->peer.dmac = p.eth_src;
  c->local_gid = gid_of(p, false);
  index_peer(*c);
  e.type = EventType::SidrReqReceived;
  e.id = c->local_id;
  e.listen_id = listen_id;
  e.service_id = m.service_id;
  e.private_data = vec(m.private_data);
  push(std::move(e));
}

void Manager::on_sidr_rep(const proto::Packet& p, const pcm::SidrRep& m) {
  Conn* c = get_from(m.request_id, p);
  if (!c || c->state != State::SidrReqSent) {
    ++ctr_.dropped_unknown_id;
    return;
  }
  Event e = event(EventType::SidrRepReceived, *c);
  e.status = m.status;
  e.remote_qpn = m.qpn;
  e.qkey = m.qkey;
  e.private_data = vec(m.private_data);
  push(std::move(e));
  free_conn(c->local_id);
}

}  // namespace uroce::engine::cm
