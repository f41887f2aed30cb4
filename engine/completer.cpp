// Completer: ACKs, NAKs, READ responses and atomic ACKs retire send WQEs in posting order.
//
// on_response() is a loop over CompState (qp.hpp): DISPATCH by opcode; an ACK/NAK goes
// through CHECK_ACK_PSN to ACK, RNR_NAK, SEQ_NAK or ERROR_NAK; READ_RESPONSE and ATOMIC_ACK
// place their data. It ends in IDLE, GHOST (counted, ignored) or ERROR.
#include <algorithm>
#include <cstring>

#include "engine/roles.hpp"
#include "engine/sge.hpp"
#include "proto/aeth.hpp"
#include "proto/psn.hpp"

namespace uroce::engine::completer {

using proto::psn_add;
using proto::psn_diff;

namespace {

// An ACK (or anything that implies one) made progress, up to `psn`: the retry counters and
// the timers start again, and the round trip may be sampled.
void made_progress(Device& dev, Qp& qp, uint32_t psn) {
  qp.tx.retries_left = qp.attrs.retry_cnt;
  qp.tx.last_progress_ns = dev.step_ns();
  recovery::acked_through(dev, qp, psn);
}

// Selective repeat: READ responses that came ahead of the next one expected (qp.hpp, rd_held:
// bit i is packet rcvd_pkts + 1 + i of the oldest WQE).
constexpr uint32_t kHeldWords = param::kSelectiveRepeatWindow / 64;

bool held_bit(const Qp& qp, uint32_t i) { return (qp.tx.rd_held[i / 64] >> (i % 64)) & 1; }

// One more packet in order: the bits move down by one.
void held_shift(Qp& qp) {
  uint64_t* b = qp.tx.rd_held;
  for (uint32_t j = 0; j < kHeldWords; ++j) b[j] = (b[j] >> 1) | (j + 1 < kHeldWords ? b[j + 1] << 63 : 0);
}

bool held_any(const Qp& qp) {
  for (uint64_t b : qp.tx.rd_held) if (b) return true;
  return false;
}

// The packet index up to which a READ must ask again: the first response held beyond the gap
// (0: none held, ask for the rest).
uint32_t held_from(const Qp& qp, const SendWqe& w) {
  if (qp.tx.sq.empty() || &qp.tx.sq.front() != &w) return 0;
  for (uint32_t i = 0; i < param::kSelectiveRepeatWindow; ++i)
    if (held_bit(qp, i)) return w.rcvd_pkts + 1 + i;
  return 0;
}

// An implied NAK: asks again for a READ's (or atomic's) responses from packet rcvd_pkts on,
// once per gap (later implied NAKs for it are counted as ignored).
void reissue(Device& dev, Qp& qp, SendWqe& w) {
  const uint32_t again = psn_add(w.first_psn, w.rcvd_pkts);
  if (qp.tx.read_retry_psn == again) {
    ++qp.ctr.naks_ignored;
    return;
  }
  if (recovery::selective(dev, qp)) {
    // Only this request again (what follows it arrived), a READ for the missing part only.
    if (!recovery::reissue_read(dev, qp, w, w.wr.opcode == WrOpcode::RdmaRead ? held_from(qp, w) : 0)) return;
  } else if (!recovery::restart_for_gap(dev, qp, again)) return;
  qp.tx.read_retry_psn = again;
  ++qp.ctr.implied_naks;
}

// A response to a later READ or atomic came while the oldest one still waits for its own:
// responses come in order, so the oldest one's were lost (an implied NAK).
void earlier_lost(Device& dev, Qp& qp, const SendWqe* target) {
  SendSide& t = qp.tx;
  if (t.sq.empty() || &t.sq.front() == target) return;
  SendWqe& head = t.sq.front();
  if (head.started && head.is_read_or_atomic() && head.rcvd_pkts < head.npkts) reissue(dev, qp, head);
}

// Completes SEND/WRITE WQEs acknowledged up to `psn` (inclusive) or before it (exclusive).
// Stops at a READ or atomic: those finish only with their responses.
void complete_acked(Device& dev, Qp& qp, uint32_t psn, bool inclusive) {
  SendSide& t = qp.tx;
  bool progress = false;
  // Remember how far the responder has acknowledged: WQEs behind a READ or atomic that is
  // still waiting for its responses complete as soon as it does.
  const uint32_t covered = inclusive ? psn : psn_add(psn, -1);
  if (!t.acked_valid || proto::psn_after(covered, t.acked_psn)) {
    // The responder has PSNs it had not acknowledged before: progress, for retry_cnt too, even
    // while the oldest WQE (a READ or atomic waiting for its responses) cannot complete. Its
    // answers were lost; without this, each gap NAKed behind it took a retry that nothing gave
    // back, and seven gaps ended a QP whose peer was answering (retry_cnt counts consecutive
    // failures to progress, as a ConnectX counts them).
    t.retries_left = qp.attrs.retry_cnt;
    t.acked_psn = covered;
    t.acked_valid = true;
  }
  while (!t.sq.empty()) {
    SendWqe& w = t.sq.front();
    if (!w.started) break;
    if ((w.is_read_or_atomic() || w.is_local()) && w.rcvd_pkts == w.npkts) {
      // Answered while an earlier one waited for its own (selective repeat keeps such answers).
      qp_ops::complete_wqe(qp, WcStatus::Success);
      progress = true;
      continue;
    }
    int32_t d = psn_diff(psn, w.first_psn);  // how far the ACK reaches into this WQE
    if (w.is_read_or_atomic()) {
      // An ACK or a sequence NAK beyond a READ or atomic whose responses never came: the
      // responder has it (a NAK names the PSN it expects, so it has everything before), its
      // responses were lost. Asked again at once: left waiting for the QP timer, every later gap
      // NAKed meanwhile would take a retry with nothing to reset them (the oldest WQE does not
      // complete), and seven such gaps ended the QP (the soak's CMP_SWAP, RETRY_EXC_ERR after
      // 19 minutes of 1% faults).
      if (d >= 0 && uint32_t(d) >= w.npkts) reissue(dev, qp, w);
      break;
    }
    if (!inclusive) --d;
    if (d < 0) break;
    // Packets sent before a restart count as sent (sent_max): a responder may acknowledge a
    // copy that went out before an RNR NAK or a NAK rewound the send point (a probe that reached
    // it after its receive was posted), before the resend goes out.
    const uint32_t sent = std::max(w.next_pkt, w.sent_max);
    if (uint32_t(d) + 1 < w.npkts || sent < w.npkts) {
      const uint32_t acked = std::min<uint32_t>(uint32_t(d) + 1, sent);
      if (acked > w.rcvd_pkts) {
        w.rcvd_pkts = acked;
        w.next_pkt = std::max(w.next_pkt, acked);  // no resend of what the responder has
        progress = true;
      }
      break;
    }
    w.rcvd_pkts = w.npkts;
    qp_ops::complete_wqe(qp, WcStatus::Success);
    progress = true;
  }
  if (progress) {
    const bool probing = t.probes > 0;
    made_progress(dev, qp, covered);
    t.rnr_retries_left = qp.attrs.rnr_retry;
    // The answer to a probe of the oldest unacknowledged packet acknowledges exactly that
    // packet although more went out after it: the responder expects the next PSN and dropped
    // everything after it (its NAK was lost; rxe stays silent about later packets until the gap
    // is filled). Resend from there. Any other ACK after a probe proves nothing: ACKs for
    // packets sent before the probe still arrive from a responder that was only slow (a
    // restart on them resent whole windows of packets the responder had, on a loaded machine).
    if (probing && inclusive && t.probe_oldest && psn == t.probe_psn && !t.sq.empty()) {
      const SendWqe& head = t.sq.front();
      if (head.started && !head.is_read_or_atomic() && (head.next_pkt > head.rcvd_pkts || t.send_idx > 0))
        recovery::restart_for_gap(dev, qp, psn_add(head.first_psn, head.rcvd_pkts));
    }
  }
}

// A READ or atomic completed: WQEs behind it that the responder already acknowledged follow.
void finish_rd_atomic(Device& dev, Qp& qp) {
  qp_ops::complete_wqe(qp, WcStatus::Success);
  if (qp.tx.acked_valid) complete_acked(dev, qp, qp.tx.acked_psn, true);
}

WcStatus nak_status(proto::NakCode c) {
  switch (c) {
    case proto::NakCode::InvalidRequest: return WcStatus::RemInvReqErr;
    case proto::NakCode::RemoteAccessError: return WcStatus::RemAccessErr;
    case proto::NakCode::InvalidRdRequest: return WcStatus::RemInvRdReqErr;
    default: return WcStatus::RemOpErr;
  }
}

// The outstanding READ (or atomic) WQE a response with `psn` answers: one whose request went
// out and whose PSN range holds `psn`. nullptr: it answers nothing outstanding (stale or
// forged), and must not move anything.
SendWqe* answered(Qp& qp, uint32_t psn, bool atomic) {
  SendSide& t = qp.tx;
  for (uint32_t i = 0; i < t.sq.size(); ++i) {
    SendWqe& w = t.sq.at(i);
    if (w.started && w.is_local()) continue;  // no PSN of its own
    if (!w.started || w.sent_max == 0) break;
    const int32_t d = psn_diff(psn, w.first_psn);
    if (d < 0) break;
    if (uint32_t(d) >= w.npkts) continue;
    const bool ok = atomic ? w.is_atomic() && d == 0 : w.takes_read_responses();
    return ok ? &w : nullptr;
  }
  return nullptr;
}

// Selective repeat: the answer to a READ or atomic behind one that still waits for its own.
// Kept (a READ response only when it is the next one of its READ); the WQE completes after the
// earlier one. False: not kept.
bool keep_later(Device& dev, Qp& qp, SendWqe& w, const proto::Packet& p) {
  const int32_t d = psn_diff(p.psn, w.first_psn);
  if (d < 0 || uint32_t(d) != w.rcvd_pkts || w.rcvd_pkts >= w.npkts) return false;
  if (!requester::resolve_sges(dev, qp, w)) return false;
  if (w.is_atomic()) {
    const uint64_t orig = p.atomic_ack_orig;
    sge_scatter(qp.tx, w, 0, reinterpret_cast<const uint8_t*>(&orig), 8);
  } else {
    const uint32_t off = uint32_t(d) * qp.mtu;
    const uint32_t expect = w.response_at(off, qp.mtu);
    if (p.payload.size() != expect) return false;
    sge_scatter(qp.tx, w, off, p.payload.data(), expect);
  }
  ++w.rcvd_pkts;
  return true;
}

CompState read_response(Device& dev, Qp& qp, const proto::Packet& p) {
  SendSide& t = qp.tx;
  SendWqe* target = answered(qp, p.psn, false);
  if (!target) return CompState::Ghost;
  complete_acked(dev, qp, p.psn, false);  // a response implies every earlier SEND/WRITE arrived
  if (t.sq.empty() || &t.sq.front() != target) {  // an earlier READ/atomic waits: its answer was lost
    earlier_lost(dev, qp, target);
    // Selective repeat: the responses of this READ are kept (in order within it); it
    // completes when the earlier one does.
    if (recovery::selective(dev, qp) && !t.sq.empty() && &t.sq.front() != target &&
        keep_later(dev, qp, *target, p))
      return CompState::Idle;
    return CompState::Ghost;
  }
  SendWqe& w = t.sq.front();
  const int32_t d = psn_diff(p.psn, w.first_psn);
  if (d < 0 || uint32_t(d) >= w.npkts || uint32_t(d) < w.rcvd_pkts) return CompState::Ghost;
  const bool sr = recovery::selective(dev, qp);
  if (uint32_t(d) > w.rcvd_pkts) {
    // A gap: responses were lost. Ask again for the rest, once per gap. With selective
    // repeat this one is placed and kept (its offset follows from its PSN) and only the part
    // before it is asked for again.
    ++qp.ctr.out_of_sequence;
    const uint32_t i = uint32_t(d) - w.rcvd_pkts - 1;
    if (sr && i < param::kSelectiveRepeatWindow && !held_bit(qp, i)) {
      const uint32_t off = uint32_t(d) * qp.mtu;
      const uint32_t expect = w.response_at(off, qp.mtu);
      if (p.payload.size() != expect) return CompState::Ghost;
      if (!requester::resolve_sges(dev, qp, w)) return CompState::Error;
      sge_scatter(qp.tx, w, off, p.payload.data(), expect);
      qp.tx.rd_held[i / 64] |= uint64_t(1) << (i % 64);
    }
    reissue(dev, qp, w);
    return CompState::Idle;
  }
  // In order. The opcode must fit the position and the length the expected size.
  const uint32_t k = uint32_t(d);
  const proto::Position pos = p.info().pos;
  const bool first = k == 0, last = k + 1 == w.npkts;
  const proto::Position want = first && last ? proto::Position::Only
                               : first       ? proto::Position::First
                               : last        ? proto::Position::Last
                                             : proto::Position::Middle;
  const uint32_t off = k * qp.mtu;
  const uint32_t expect = w.response_at(off, qp.mtu);
  // A re-issued READ restarts the response sequence: FIRST (or ONLY) where we expect MIDDLE
  // (or LAST) is what the responder sends for the remaining range.
  const bool restart_ok = (want == proto::Position::Middle && pos == proto::Position::First) ||
                          (want == proto::Position::Last && pos == proto::Position::Only);
  // Selective repeat: a re-requested part ends with LAST anywhere (the length is what counts).
  const bool part_ok = sr && (pos == proto::Position::Last || pos == proto::Position::Only);
  if ((pos != want && !restart_ok && !part_ok) || p.payload.size() != expect) {
    qp_ops::fail_wqe(qp, w, WcStatus::BadRespErr);
    return CompState::Error;
  }
  if (!requester::resolve_sges(dev, qp, w)) return CompState::Error;  // its MR was deregistered
  sge_scatter(qp.tx, w, off, p.payload.data(), expect);
  ++w.rcvd_pkts;
  t.read_retry_psn = UINT32_MAX;
  bool more_held = false;
  if (sr && held_any(qp)) {  // the responses kept after it follow in order
    while (held_bit(qp, 0)) {
      held_shift(qp);
      ++w.rcvd_pkts;
    }
    held_shift(qp);  // bit 0 was the packet now expected
    more_held = held_any(qp);
  }
  made_progress(dev, qp, psn_add(w.first_psn, w.rcvd_pkts - 1));
  if (w.rcvd_pkts == w.npkts) finish_rd_atomic(dev, qp);
  else if (more_held) reissue(dev, qp, w);  // the next gap: ask for it now
  return CompState::Idle;
}

CompState atomic_ack(Device& dev, Qp& qp, const proto::Packet& p) {
  SendSide& t = qp.tx;
  SendWqe* target = answered(qp, p.psn, true);
  if (!target) return CompState::Ghost;
  complete_acked(dev, qp, p.psn, false);
  if (!t.sq.empty() && &t.sq.front() != target) earlier_lost(dev, qp, target);
  if (recovery::selective(dev, qp) && !t.sq.empty() && &t.sq.front() != target && keep_later(dev, qp, *target, p))
    return CompState::Idle;
  if (t.sq.empty() || &t.sq.front() != target || target->rcvd_pkts) return CompState::Ghost;
  SendWqe& w = t.sq.front();
  if (!requester::resolve_sges(dev, qp, w)) return CompState::Error;
  // The original value lands in local memory in host byte order, as verbs returns it.
  const uint64_t orig = p.atomic_ack_orig;
  sge_scatter(qp.tx, w, 0, reinterpret_cast<const uint8_t*>(&orig), 8);
  w.rcvd_pkts = 1;
  made_progress(dev, qp, p.psn);
  finish_rd_atomic(dev, qp);
  return CompState::Idle;
}

}  // namespace

void on_response(Device& dev, Qp& qp, const proto::Packet& p) {
  using proto::AckKind;
  SendSide& t = qp.tx;
  const proto::Syndrome syn = proto::Syndrome::decode(p.aeth.syndrome);
  CompState s = CompState::Dispatch;
  for (;;) {
    switch (s) {
      case CompState::Dispatch:
        switch (p.info().op) {
          case proto::Operation::ReadResponse: s = CompState::ReadResponse; break;
          case proto::Operation::AtomicAck: s = CompState::AtomicAck; break;
          case proto::Operation::Ack: s = CompState::CheckAckPsn; break;
          default: s = CompState::Ghost; break;
        }
        break;
      case CompState::CheckAckPsn:
        // A PSN we have sent and not yet had acknowledged? (An ACK may repeat the PSN just
        // before the oldest WQE.)
        if (t.sq.empty() || !t.sq.front().started ||
            psn_diff(p.psn, t.sq.front().first_psn) < (syn.kind == AckKind::Ack ? -1 : 0) ||
            psn_diff(p.psn, t.sq_psn) >= 0)
          s = CompState::Ghost;
        else if (syn.kind == AckKind::Ack) s = CompState::Ack;
        else if (syn.kind == AckKind::RnrNak) s = CompState::RnrNak;
        else if (syn.kind == AckKind::Nak)
          s = syn.nak_code() == proto::NakCode::PsnSequenceError ? CompState::SeqNak : CompState::ErrorNak;
        else {
          ++qp.ctr.bad_responses;  // a reserved syndrome
          s = CompState::Idle;
        }
        break;
      case CompState::Ack:
        ++qp.ctr.acks_rcvd;
        complete_acked(dev, qp, p.psn, true);
        recovery::resend_answered(dev, qp, p.psn);
        s = CompState::Idle;
        break;
      case CompState::RnrNak:
        ++qp.ctr.rcvd_rnr_err;
        complete_acked(dev, qp, p.psn, false);
        if (t.sq.empty()) s = CompState::Idle;
        else if (!qp_ops::take_rnr_retry(qp)) {
          qp_ops::fail_wqe(qp, t.sq.front(), WcStatus::RnrRetryExcErr);
          s = CompState::Error;
        } else {
          t.rnr_until_ns = dev.step_ns() + uint64_t(proto::rnr_timer_us(syn.value)) * 1000;
          t.req_state = ReqState::WaitRnr;
          recovery::go_back_n(qp, p.psn);
          s = CompState::Idle;
        }
        break;
      case CompState::SeqNak:
      case CompState::ErrorNak:
        if (s == CompState::SeqNak && recovery::stale_nak(qp, p.psn)) {
          // The responder has moved past this PSN since (a late or duplicated NAK): nothing to
          // resend, and no retry taken (retry_cnt counts the requester's failures to progress).
          ++qp.ctr.rcvd_seq_err;
          ++qp.ctr.naks_ignored;
          s = CompState::Idle;
          break;
        }
        // A NAK acknowledges every PSN before its own.
        complete_acked(dev, qp, p.psn, false);
        if (t.sq.empty()) {
          s = CompState::Idle;
        } else if (s == CompState::ErrorNak) {
          ++qp.ctr.other_naks_rcvd;
          qp_ops::fail_wqe(qp, t.sq.front(), nak_status(syn.nak_code()));
          s = CompState::Error;
        } else {
          ++qp.ctr.rcvd_seq_err;
          if (recovery::same_gap(dev, qp, p.psn)) {
            ++qp.ctr.naks_ignored;  // the same gap, before our resend could have been answered
            s = CompState::Idle;
          } else if (!qp_ops::take_retry(qp)) {
            qp_ops::fail_wqe(qp, t.sq.front(), WcStatus::RetryExcErr);
            s = CompState::Error;
          } else {
            recovery::restart_for_gap(dev, qp, p.psn);
            s = CompState::Idle;
          }
        }
        break;
      case CompState::ReadResponse:
        s = read_response(dev, qp, p);
        break;
      case CompState::AtomicAck:
        s = atomic_ack(dev, qp, p);
        break;
      case CompState::Ghost:
        ++qp.ctr.ghost_responses;  // a stale, duplicate, unexpected or forged response
        t.comp_state = s;
        return;
      default:  // Idle, Error
        t.comp_state = s;
        return;
    }
  }
}

}  // namespace uroce::engine::completer
