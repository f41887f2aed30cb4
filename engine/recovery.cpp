// Loss recovery (docs/reliability.md): what the requester sends again after a loss, and when.
// Go-back-N restarts (one per gap: a NAK for the same PSN within the answer time is about
// packets sent before the restart), selective repeat between uroce peers (resend only what the
// responder lacks; a READ asks again for its missing part only), tail-loss probes, the QP timer
// (local ACK timeout, retry_cnt) and the round-trip estimate. The completer calls in with what
// ACKs and NAKs say; the requester's progress() step calls check_timers() and send_resends().
#include <algorithm>

#include "engine/roles.hpp"
#include "proto/aeth.hpp"
#include "proto/psn.hpp"

namespace uroce::engine::recovery {

using proto::psn_add;
using proto::psn_diff;

namespace {

// ---- Selective repeat (docs/reliability.md) ------------------------------------------------

// The started WQE whose PSNs hold `psn` (index i from the oldest, packet k), or nullptr.
SendWqe* wqe_at(Qp& qp, uint32_t psn, uint32_t& i, uint32_t& k) {
  SendSide& t = qp.tx;
  for (i = 0; i < t.sq.size(); ++i) {
    SendWqe& w = t.sq.at(i);
    if (!w.started) return nullptr;
    const int32_t d = psn_diff(psn, w.first_psn);
    if (d < 0) return nullptr;
    if (uint32_t(d) < w.npkts) {
      k = uint32_t(d);
      return &w;
    }
  }
  return nullptr;
}

// Where a selective resend from `psn` (the responder's first missing PSN) ends: that packet,
// and after it every packet already sent that the responder cannot have kept (responder.cpp,
// hold()): READ requests, atomics, and MIDDLE/LAST packets of a WRITE whose FIRST is in the
// run. It stops at the first one that was kept if it came: a SEND packet (any: the responder
// keeps its payload until it knows its receive WQE), a WRITE FIRST or ONLY, or a WRITE packet
// whose FIRST came before the gap. (If that one was lost too, or the responder had no room for
// it, its answer says so: its NAK for it, or an ACK ending just before it.)
uint32_t resend_end(Qp& qp, uint32_t psn) {
  uint32_t i = 0, k = 0;
  SendWqe* w = wqe_at(qp, psn, i, k);
  if (!w) return psn_add(psn, 1);
  uint32_t end = psn;
  SendSide& t = qp.tx;
  for (bool at_gap = true;; at_gap = false) {
    if (k >= w->sent_max) break;  // not sent yet: new work, not a resend
    const WrOpcode o = w->wr.opcode;
    const bool write = o == WrOpcode::RdmaWrite || o == WrOpcode::RdmaWriteWithImm;
    const bool send = o == WrOpcode::Send || o == WrOpcode::SendWithImm || o == WrOpcode::SendWithInv;
    if (!at_gap && (send || (write && (k == 0 || psn_diff(w->first_psn, psn) < 0)))) break;
    end = w->is_read_or_atomic() ? psn_add(w->first_psn, w->npkts) : psn_add(w->first_psn, k + 1);
    if (psn_diff(end, psn) >= int32_t(param::kSelectiveRepeatWindow)) break;
    if (w->is_read_or_atomic() || k + 1 == w->npkts) {
      do {
        if (++i >= t.sq.size()) break;
        w = &t.sq.at(i);
      } while (w->started && w->is_local());  // no PSN of its own
      if (i >= t.sq.size() || !w->started) break;
      k = 0;
    } else {
      ++k;
    }
  }
  return end == psn ? psn_add(psn, 1) : end;
}

// The gap bookkeeping of a resend from `psn` up to `end` (exclusive).
void mark_gap(Device& dev, Qp& qp, uint32_t psn, uint32_t end) {
  SendSide& t = qp.tx;
  const uint64_t now = dev.step_ns();
  t.gap_valid = true;
  t.gap_psn = psn;
  t.gap_end = end;
  t.gap_until_ns = now + answer_time_ns(dev, qp);
  t.rtt_timing = false;  // Karn: an ACK from now on may answer either copy
  t.probe_from_ns = now;
  t.sr_check = false;    // (a selective run sets it again)
}

// Was packet `psn` sent (at least once)?
bool was_sent(Qp& qp, uint32_t psn) {
  uint32_t i = 0, k = 0;
  const SendWqe* w = wqe_at(qp, psn, i, k);
  return w && k < w->sent_max;
}

}  // namespace

// Sends the PSNs [sr_next, sr_end) again, out of line (the send point stays), AckReq on the
// last. False: no transmit buffer now (or the QP went to ERR); the next progress() goes on.
bool send_resends(Device& dev, Qp& qp) {
  SendSide& t = qp.tx;
  while (t.sr_next != t.sr_end) {
    uint32_t i = 0, k = 0;
    SendWqe* w = wqe_at(qp, t.sr_next, i, k);
    if (!w || psn_diff(t.sr_end, t.sr_next) < 0) {  // acknowledged meanwhile, or gone
      t.sr_next = t.sr_end;
      break;
    }
    if (k < w->rcvd_pkts && !w->is_read_or_atomic()) {  // acknowledged meanwhile
      t.sr_next = psn_add(w->first_psn, w->rcvd_pkts);
      continue;
    }
    const uint32_t after_wqe = psn_add(w->first_psn, w->npkts);
    if (w->is_read_or_atomic() && w->rcvd_pkts >= w->npkts) {  // answered already (kept)
      t.sr_next = after_wqe;
      continue;
    }
    if (w->is_read_or_atomic()) k = w->rcvd_pkts;  // the request for what is still missing
    const uint32_t after = w->is_read_or_atomic() ? after_wqe : psn_add(t.sr_next, 1);
    const uint32_t next = w->next_pkt;
    w->next_pkt = k;
    const bool sent = requester::send_packet(dev, qp, *w, true, psn_diff(t.sr_end, after) <= 0);
    w->next_pkt = next;
    if (!sent) return false;
    w->read_upto = 0;
    ++qp.ctr.sr_resends;
    t.sr_next = after;
  }
  return true;
}

void selective_resend(Device& dev, Qp& qp, uint32_t psn) {
  SendSide& t = qp.tx;
  const uint32_t end = resend_end(qp, psn);
  if (psn_diff(end, psn) > 1 && !was_sent(qp, end)) {
    // Nothing after the gap can have been kept (READs and atomics, say): that is go-back-N,
    // and go-back-N's own way (the send point moves back, the loss window paces it) sends it.
    begin_resend(dev, qp, psn);
    return;
  }
  mark_gap(dev, qp, psn, end);
  t.sr_next = psn;
  t.sr_end = end;
  // Packets after the run went out before it: the answer to the run says whether the
  // responder kept them (resend_answered).
  t.sr_check = was_sent(qp, end);
  // A run of more than the gap (a WRITE whose FIRST was lost, a READ before a SEND): the loss
  // window halves as for go-back-N.
  if (psn_diff(end, psn) > 1) t.loss_window = std::max(param::kLossWindowMin, window(dev, qp) / 2);
}

bool reissue_read(Device& dev, Qp& qp, SendWqe& w, uint32_t upto) {
  const uint32_t psn = psn_add(w.first_psn, w.rcvd_pkts);
  if (same_gap(dev, qp, psn)) {
    ++qp.ctr.naks_ignored;
    return false;
  }
  ++qp.ctr.gap_restarts;
  SendSide& t = qp.tx;
  mark_gap(dev, qp, psn, psn_add(psn, 1));
  w.read_upto = upto;
  t.sr_next = psn;
  t.sr_end = psn_add(w.first_psn, w.npkts);
  return true;
}

void resend_answered(Device& dev, Qp& qp, uint32_t psn) {
  SendSide& t = qp.tx;
  if (!t.sr_check) return;
  const int32_t d = psn_diff(psn_add(psn, 1), t.gap_end);
  if (d < 0) return;  // an answer to something before the resend
  t.sr_check = false;
  // The responder expects gap_end next although later packets went out: it kept none of them
  // (a go-back-N responder, or all of them were lost). Go back to it.
  if (d == 0 && was_sent(qp, t.gap_end)) {
    ++qp.ctr.gap_restarts;
    begin_resend(dev, qp, t.gap_end);
  }
}

// Restart sending at `psn` (the oldest PSN the responder has not seen): every packet from
// there on is sent again, with the opcodes its position in its message calls for.
void go_back_n(Qp& qp, uint32_t psn) {
  SendSide& t = qp.tx;
  for (uint32_t i = 0; i < t.sq.size(); ++i) {
    SendWqe& w = t.sq.at(i);
    if (!w.started) break;
    const int32_t d = psn_diff(psn, w.first_psn);
    if (d < 0 || uint32_t(d) >= w.npkts) continue;
    // Only ever move the send point back: an earlier restart that is still resending covers
    // this one (moving forward would skip WQEs that restart reset to their first packet).
    if (i > t.send_idx || (i == t.send_idx && uint32_t(d) >= w.next_pkt)) return;
    w.next_pkt = uint32_t(d);
    for (uint32_t j = i + 1; j < t.sq.size(); ++j) {
      SendWqe& x = t.sq.at(j);
      if (!x.started) break;
      x.next_pkt = 0;
    }
    t.send_idx = i;
    return;
  }
}

// Restart at `psn` with the gap bookkeeping: a NAK for the same PSN within the answer time
// (about one round trip) is about packets sent before this restart.
void begin_resend(Device& dev, Qp& qp, uint32_t psn) {
  SendSide& t = qp.tx;
  mark_gap(dev, qp, psn, psn_add(psn, 1));
  t.sr_next = t.sr_end;  // go-back-N covers any selective resend still to go
  t.loss_window = std::max(param::kLossWindowMin, window(dev, qp) / 2);
  go_back_n(qp, psn);
}

bool same_gap(Device& dev, const Qp& qp, uint32_t psn) {
  const SendSide& t = qp.tx;
  return t.gap_valid && t.gap_psn == psn && dev.step_ns() < t.gap_until_ns;
}

bool stale_nak(const Qp& qp, uint32_t psn) {
  const SendSide& t = qp.tx;
  return (t.acked_valid && psn_diff(psn, psn_add(t.acked_psn, 1)) < 0) || (t.gap_valid && psn_diff(psn, t.gap_psn) < 0);
}

bool restart_for_gap(Device& dev, Qp& qp, uint32_t psn) {
  if (same_gap(dev, qp, psn)) {
    ++qp.ctr.naks_ignored;  // the resend from psn is on its way: this NAK came before it
    return false;
  }
  ++qp.ctr.gap_restarts;
  if (selective(dev, qp)) selective_resend(dev, qp, psn);  // only what the responder lacks
  else begin_resend(dev, qp, psn);
  return true;
}

uint64_t answer_time_ns(const Device& dev, const Qp& qp) {
  const SendSide& t = qp.tx;
  const uint64_t rtt = t.srtt_ns ? 2 * t.srtt_ns + 4 * t.rttvar_ns : param::kProbeInitialNs;
  return std::max(rtt, dev.config().probe_floor_ns);
}

void acked_through(Device& dev, Qp& qp, uint32_t psn) {
  SendSide& t = qp.tx;
  const uint64_t now = dev.step_ns();
  t.probes = 0;
  t.probe_from_ns = now;
  if (t.loss_window && ++t.loss_window >= dev.config().max_unacked_psns) t.loss_window = 0;  // back to full
  if (!t.rtt_timing || psn_diff(psn, t.rtt_psn) < 0) return;
  // RFC 6298's estimator: variation 1/4, mean 1/8 of each new sample.
  const uint64_t r = now - t.rtt_sent_ns;
  t.rtt_timing = false;
  ++qp.ctr.rtt_samples;
  if (qp.cc) qp.cc->on_rtt(now, r);  // a delay-based congestion control hears each sample
  if (t.srtt_ns == 0) {
    t.srtt_ns = std::max<uint64_t>(r, 1);
    t.rttvar_ns = r / 2;
  } else {
    const uint64_t dev_ns = r > t.srtt_ns ? r - t.srtt_ns : t.srtt_ns - r;
    t.rttvar_ns = (3 * t.rttvar_ns + dev_ns) / 4;
    t.srtt_ns = std::max<uint64_t>((7 * t.srtt_ns + r) / 8, 1);
  }
}

namespace {

// The packet a tail-loss probe resends: the last one sent (it reveals a tail loss: in
// sequence it is acknowledged with everything before it; out of sequence it draws the
// sequence NAK for the gap), or, at every second probe, the oldest unacknowledged one (the
// gap's NAK was lost: the responder stays silent about later packets until this one comes).
// READ: the request for the responses still missing; atomic: the request again.
SendWqe* probe_target(Qp& qp, bool oldest, uint32_t& k) {
  SendSide& t = qp.tx;
  SendWqe* w = nullptr;
  if (oldest) {
    w = &t.sq.front();
  } else if (t.send_idx < t.sq.size() && t.sq.at(t.send_idx).started && t.sq.at(t.send_idx).next_pkt > 0) {
    w = &t.sq.at(t.send_idx);
  } else if (t.send_idx > 0) {
    w = &t.sq.at(t.send_idx - 1);
  } else {
    w = &t.sq.front();
  }
  if (w->is_read_or_atomic()) k = w->rcvd_pkts;
  else if (oldest) k = w->rcvd_pkts;
  else k = (w->next_pkt > 0 ? w->next_pkt : w->npkts) - 1;
  return w;
}

void probe(Device& dev, Qp& qp) {
  SendSide& t = qp.tx;
  uint32_t k = 0;
  bool oldest = t.probes % 2 == 1;
  SendWqe* w = probe_target(qp, oldest, k);
  if (w->started && k >= w->npkts) {  // answered already (kept): the oldest
    oldest = true;
    w = probe_target(qp, true, k);
  }
  if (!w->started || k >= w->npkts) return;
  const uint32_t next = w->next_pkt;
  w->next_pkt = k;
  const bool sent = requester::send_packet(dev, qp, *w, true, true);
  w->next_pkt = next;  // the send point does not move
  if (!sent) return;   // no transmit buffer: the next progress() tries again
  ++qp.ctr.probes;
  ++t.probes;
  t.probe_from_ns = dev.step_ns();
  t.probe_psn = psn_add(w->first_psn, k);
  t.probe_oldest = oldest;
  t.rtt_timing = false;  // Karn's rule: the ACK that comes may answer the probe, not the timed packet
}

// Packets of the oldest WQE sent and not yet acknowledged: the QP's timers run. Sent before a
// restart counts (sent_max): go-back-N moves the send point back, and when the link then takes
// nothing (its back-pressure, a peer gone behind a full ring) the resend does not go out; the
// timer must still run out (RETRY_EXC_ERR), not stop as if nothing were outstanding.
bool unacknowledged(const SendWqe& head) {
  return head.started && std::max(head.next_pkt, head.sent_max) > head.rcvd_pkts;
}
}  // namespace

uint64_t next_timer_ns(const Device& dev, const Qp& qp) {
  const SendSide& t = qp.tx;
  // The pacer holds the next packet until its time (congestion control, engine/cc.hpp).
  // So are READ responses (responder::send_responses).
  const uint64_t paced = (t.req_state == ReqState::WaitRate || qp.rx.res_paced) && qp.cc ? qp.cc->send_at() : UINT64_MAX;
  if (t.rnr_until_ns) return std::min(paced, t.rnr_until_ns);  // requester::run ends the wait then
  if (t.sq.empty() || !qp.reliable()) return paced;
  const SendWqe& head = t.sq.front();
  if (!unacknowledged(head)) return paced;
  uint64_t due = paced;
  const uint64_t timeout = proto::local_ack_timeout_ns(qp.attrs.timeout);
  if (timeout != 0) due = std::min(due, t.last_progress_ns + timeout);
  if (dev.config().probe_floor_ns != 0)
    due = std::min(due, t.probe_from_ns + (answer_time_ns(dev, qp) << std::min<uint32_t>(t.probes, 16)));
  return due;
}

void check_timers(Device& dev, Qp& qp) {
  SendSide& t = qp.tx;
  if (t.sq.empty() || !qp.reliable()) return;  // UC and UD never resend
  SendWqe& head = t.sq.front();
  if (!unacknowledged(head)) return;  // nothing in flight
  if (t.rnr_until_ns) return;                                     // waiting for an RNR timer
  const uint64_t timeout = proto::local_ack_timeout_ns(qp.attrs.timeout);
  const uint64_t now = dev.step_ns();
  // The QP timer (the local ACK timeout of the IBA): nothing acknowledged for the local ACK timeout. It alone
  // takes retry_cnt; probes neither take a retry nor restart it, so a dead peer fails after
  // retry_cnt + 1 timeouts exactly as without probes.
  if (timeout != 0 && now - t.last_progress_ns >= timeout) {
    ++qp.ctr.timeouts;
    t.last_progress_ns = now;
    if (!qp_ops::take_retry(qp)) {
      qp_ops::fail_wqe(qp, head, WcStatus::RetryExcErr);
      return;
    }
    begin_resend(dev, qp, psn_add(head.first_psn, head.rcvd_pkts));
    return;
  }
  // The tail-loss probe: nothing heard for the answer time, doubled after each probe.
  if (dev.config().probe_floor_ns == 0) return;
  const uint64_t wait = answer_time_ns(dev, qp) << std::min<uint32_t>(t.probes, 16);
  if (now - t.probe_from_ns >= wait) probe(dev, qp);
}

}  // namespace uroce::engine::recovery
