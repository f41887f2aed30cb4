// The responder's answers: ACKs and NAKs (a NAK for an invalid request also moves the QP to
// the error state; UC, which has no NAKs, discards the message instead), the coalesced ACK, and
// the READ responses and atomic ACKs owed, sent in request order from progress().
#include <algorithm>
#include <cassert>

#include "engine/responder.hpp"
#include "proto/aeth.hpp"
#include "proto/psn.hpp"

namespace uroce::engine::responder {

namespace {

// UC has no NAKs: a message that cannot be received is discarded, with the rest of its
// packets (until the next FIRST or ONLY), and counted. A partly filled receive WQE is reused.
RespState uc_discard(Qp& qp, uint32_t psn, uint64_t& counter) {
  RecvSide& r = qp.rx;
  ++counter;
  r.msg = RespMsg::None;
  r.uc_dropping = true;
  r.recv_off = 0;
  r.epsn = psn_add(psn, 1);
  return RespState::Idle;
}

bool responses_pending(const Qp& qp) {
#ifndef NDEBUG
  uint32_t owed = 0;  // the counter must equal a recount (test builds check it every call)
  for (const RdAtomicRes& r : qp.rx.res) owed += r.owes();
  assert(owed == qp.rx.res_pending);
#endif
  return qp.rx.res_pending != 0;
}

bool send_atomic_ack(Device& dev, Qp& qp, const RdAtomicRes& r) {
  proto::Packet& p = qp.resp_pkt;
  p.opcode = proto::op::kAtomicAck | qp.opcode_base();
  p.payload = {};
  p.psn = r.psn;
  p.aeth = {Syndrome::ack().encode(), r.msn};
  p.atomic_ack_orig = r.orig;
  return dev.tx().emit(qp, p);
}

}  // namespace

bool send_ack(Device& dev, Qp& qp, Syndrome s, uint32_t psn) {
  RecvSide& r = qp.rx;
  if (s.kind != proto::AckKind::Ack && r.ack_pending) {
    // A coalesced ACK for earlier packets goes out before a NAK.
    r.ack_pending = false;
    send_ack(dev, qp, Syndrome::ack(), r.ack_psn);
  }
  proto::Packet& p = qp.resp_pkt;
  p.opcode = proto::op::kAck | qp.opcode_base();
  p.payload = {};
  p.psn = psn;
  p.aeth = {s.encode(), r.msn};
  if (!dev.tx().emit(qp, p)) return false;  // no transmit buffer now (a NAK: as if lost on the wire)
  r.unacked = 0;  // any ACK or NAK acknowledges what came before it
  switch (s.kind) {
    case proto::AckKind::Ack: ++qp.ctr.acks_sent; break;
    case proto::AckKind::RnrNak: ++qp.ctr.send_rnr_err; break;
    default:
      if (s.nak_code() == NakCode::PsnSequenceError) ++qp.ctr.out_of_seq_request;
      else ++qp.ctr.other_naks_sent;
      break;
  }
  return true;
}

// A coalesced ACK still owed goes out now (before responses to a READ or atomic).
void ack_now(Device& dev, Qp& qp) {
  if (!qp.rx.ack_pending) return;
  // Without a transmit buffer now (the link's back-pressure), the ACK stays owed: the QP stays
  // on the active list and sends it at a later step.
  qp.rx.ack_pending = !send_ack(dev, qp, Syndrome::ack(), qp.rx.ack_psn);
}

// Before the responses to a new READ or atomic: a coalesced ACK for earlier SEND/WRITEs goes
// out now, unless responses to an earlier READ/atomic are still owed. Those must come first
// (an ACK beyond a READ whose responses have not all come tells the requester they were lost),
// and the new responses acknowledge the earlier requests anyway: the ACK is not needed.
void ack_before_responses(Device& dev, Qp& qp) {
  if (qp.rx.res_pending == 0) ack_now(dev, qp);
  else qp.rx.ack_pending = false;
}

// Class A/C errors (IBA 9.9.3): NAK the request and move the QP to the error state.
RespState nak_and_error(Device& dev, Qp& qp, NakCode code, uint32_t psn) {
  if (qp.init.qp_type == QpType::UC) return uc_discard(qp, psn, qp.ctr.dropped_messages);
  send_ack(dev, qp, Syndrome::nak(code), psn);
  qp_ops::set_error(qp);
  return RespState::Error;
}

RespState rnr_nak(Device& dev, Qp& qp, uint32_t psn) {
  if (qp.init.qp_type == QpType::UC) return uc_discard(qp, psn, qp.ctr.dropped_no_recv);
  send_ack(dev, qp, Syndrome::rnr(qp.attrs.min_rnr_timer), psn);
  // The rest of the message is already on the wire. Those packets now look like a gap, and
  // they are dropped silently, as after a sequence NAK: one NAK per refusal. The requester
  // sends the whole message again after the RNR timer.
  qp.rx.seq_nak_sent = true;
  return RespState::RnrNak;  // the expected PSN does not move: the requester sends it again
}

bool flush_ack(Device& dev, Qp& qp) {
  if (!qp.rx.ack_pending || responses_pending(qp)) return false;
  ack_now(dev, qp);
  return true;
}

// READ responses and atomic ACKs owed, oldest first, at most kRespBurst packets per call (a
// duplicate READ of a large range cannot starve the receive side or hold back ACKs). A READ
// whose MR was deregistered since it was checked gets the NAK for an invalid key and the QP
// goes to ERR.
void send_responses(Device& dev, Qp& qp) {
  RecvSide& rs = qp.rx;
  rs.res_paced = false;
  if (rs.res_pending == 0) return;  // the common case: nothing owed, no walk of the ring
  const uint32_t n = rs.res_n;
  const MrTable& mrs = dev.mrs();
  uint32_t budget = param::kRespBurst;
  namespace op = proto::op;
  // Oldest first, from res_next round the ring.
  for (uint32_t i = 0, j = rs.res_next; i < n; ++i, j = j + 1 == n ? 0 : j + 1) {
    RdAtomicRes& r = rs.res[j];
    if (!r.owes()) continue;
    if (budget == 0) return;
    if (r.atomic) {
      if (!send_atomic_ack(dev, qp, r)) return;
      r.sent = 1;
      --rs.res_pending;
      --budget;
      continue;
    }
    if (r.length && r.mr_gen != mrs.gen()) {
      AccessCheck c = check_remote(mrs, r.rkey, qp.rx_pd(), qp.qpn(), r.va, r.length, kRemoteRead);
      if (!c.ok) {
        nak_and_error(dev, qp, NakCode::RemoteAccessError, psn_add(r.psn, r.sent));
        return;
      }
      r.host = c.host;
      r.mr_gen = mrs.gen();
    }
    for (;;) {
      if (r.sent == r.end) {
        if (!r.resume) break;
        // A re-requested part is done: the responses it interrupted go on (opening with FIRST).
        r.sent = r.restart = r.resume;
        r.end = r.resume_end;
        r.resume = 0;
        continue;
      }
      if (budget == 0) return;
      const uint32_t k = r.sent;
      proto::Packet& p = qp.resp_pkt;
      const uint32_t off = k * qp.mtu;
      const uint32_t len = std::min(qp.mtu, r.length - std::min(r.length, off));
      const bool last = k + 1 == r.end;
      const bool first = k == r.restart;
      p.opcode = (first && last ? op::kReadRespOnly : first ? op::kReadRespFirst : last ? op::kReadRespLast : op::kReadRespMiddle) |
                 qp.opcode_base();
      p.psn = psn_add(r.psn, k);
      p.aeth = {Syndrome::ack().encode(), r.msn};
      p.payload = {r.host ? r.host + off : nullptr, len};
      // Congestion control paces READ responses as it paces requests: the QP's one rate covers
      // every packet it sends (a CNP for marked responses comes to this QP, their sender).
      if (qp.cc && !qp.cc->may_send(dev.step_ns())) {
        rs.res_paced = true;  // progress() parks the QP until the pacer's time (next_timer_ns)
        return;
      }
      if (!dev.tx().emit(qp, p)) return;
      if (qp.cc) qp.cc->sent(dev.step_ns(), uint32_t(proto::frame_len(p)));
      ++r.sent;
      --budget;
      if (r.replay) ++qp.ctr.replayed_responses;
    }
    --rs.res_pending;
  }
}

}  // namespace uroce::engine::responder
