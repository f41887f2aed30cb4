// Requester: turns send WQEs into request packets. Segmentation by path MTU, PSN assignment,
// AckReq placement, the send window and the READ/atomic limit; go-back-N restarts and the
// retransmission and RNR timers.
//
// run() is a loop over ReqState (qp.hpp): NEXT_WQE -> [START_WQE] -> CHECK_WINDOW ->
// SEND_PACKET -> NEXT_WQE ..., ending in IDLE or in the state that says what it waits for.
#include <algorithm>
#include <cstring>

#include "engine/engine.hpp"
#include "engine/sge.hpp"
#include "proto/aeth.hpp"
#include "proto/entropy.hpp"
#include "proto/psn.hpp"

namespace uroce::engine::requester {

using proto::psn_add;
using proto::psn_diff;

// Resolves and checks the local buffers of a WQE: when it starts, and again before a packet
// is sent from or received into them if any MR was deregistered meanwhile, so that a
// deregistered MR stops it at once. False: a local protection error; the WQE completes with
// IBV_WC_LOC_PROT_ERR (its own wr_id, in posting order) and the QP goes to ERR.
bool resolve_sges(Device& dev, Qp& qp, SendWqe& w) {
  if (w.started && w.mr_gen == dev.mrs().gen()) return true;  // nothing deregistered since
  if (w.is_inline) {
    w.host[0] = w.inline_data;
    return true;
  }
  const uint32_t need = w.is_read_or_atomic() ? uint32_t(kLocalWrite) : 0;
  for (uint32_t i = 0; i < w.wr.num_sge; ++i) {
    if (w.sge[i].length == 0) continue;
    AccessCheck c = check_local(dev.mrs(), qp.tx.lkeys, w.sge[i].lkey, qp.init.pd, w.sge[i].addr, w.sge[i].length, need);
    if (!c.ok) {
      qp_ops::fail_wqe(qp, w, WcStatus::LocProtErr);
      return false;
    }
    w.host[i] = c.host;
  }
  w.mr_gen = dev.mrs().gen();
  return true;
}

// The send window now: max_unacked_psns, or less after losses (the loss window).
bool selective(const Device& dev, const Qp& qp) {
  return dev.config().selective_repeat && qp.init.qp_type == QpType::RC;
}

uint32_t window(const Device& dev, const Qp& qp) {
  uint32_t max = dev.config().max_unacked_psns;
  if (selective(dev, qp)) max = std::min(max, param::kSelectiveRepeatWindow);  // the responder keeps no more
  return qp.tx.loss_window ? std::min(qp.tx.loss_window, max) : max;
}

namespace {

// A new WQE: its buffers checked and its PSNs assigned.
bool start_wqe(Device& dev, Qp& qp, SendWqe& w) {
  SendSide& t = qp.tx;
  if (!resolve_sges(dev, qp, w)) return false;
  if (w.is_atomic()) {
    if (w.length < 8) {
      qp_ops::fail_wqe(qp, w, WcStatus::LocLenErr);
      return false;
    }
    w.npkts = 1;
  } else if (qp.init.qp_type == QpType::UD) {
    w.npkts = 1;  // a datagram is one packet (post_send checked its length)
  } else {
    w.npkts = w.length == 0 ? 1 : uint32_t((uint64_t(w.length) + qp.mtu - 1) / qp.mtu);
  }
  w.first_psn = t.sq_psn;
  t.sq_psn = psn_add(t.sq_psn, w.npkts);
  w.next_pkt = 0;
  w.rcvd_pkts = 0;
  w.started = true;
  if (w.is_read_or_atomic()) ++t.rd_atomic_inflight;
  return true;
}

// The BTH opcode of packet k of n for a SEND or WRITE message.
uint8_t message_opcode(WrOpcode o, bool first, bool last) {
  namespace op = proto::op;
  switch (o) {
    case WrOpcode::Send:
      return first && last ? op::kSendOnly : first ? op::kSendFirst : last ? op::kSendLast : op::kSendMiddle;
    case WrOpcode::SendWithImm:
      return first && last ? op::kSendOnlyImm : first ? op::kSendFirst : last ? op::kSendLastImm : op::kSendMiddle;
    case WrOpcode::SendWithInv:
      return first && last ? op::kSendOnlyInv : first ? op::kSendFirst : last ? op::kSendLastInv : op::kSendMiddle;
    case WrOpcode::RdmaWrite:
      return first && last ? op::kWriteOnly : first ? op::kWriteFirst : last ? op::kWriteLast : op::kWriteMiddle;
    default:  // RdmaWriteWithImm
      return first && last ? op::kWriteOnlyImm : first ? op::kWriteFirst : last ? op::kWriteLastImm : op::kWriteMiddle;
  }
}

// Builds and emits packet `next_pkt` of the WQE. False: no transmit buffer now, or the QP
// went to ERR (its local buffers are gone). `out_of_line`: a tail-loss probe or a selective
// resend (neither the QP timer nor the send point moves); `ack`: AckReq set.
bool send_packet(Device& dev, Qp& qp, SendWqe& w, bool out_of_line = false, bool ack = false) {
  SendSide& t = qp.tx;
  proto::Packet& p = qp.req_pkt;  // addresses are set; every per-packet field is set below
  const uint32_t k = w.next_pkt;
  const bool first = k == 0, last = k + 1 == w.npkts;
  p.psn = psn_add(w.first_psn, k);
  const SendWr& wr = w.wr;
  const bool ud = qp.init.qp_type == QpType::UD;
  const uint32_t off = k * qp.mtu;
  const uint32_t left = w.length - std::min(w.length, off);
  uint32_t len = 0;
  if (ud) {
    // A datagram: addressed by its AH, to remote_qpn, with a DETH.
    const Ah& ah = *wr.ah;
    qp_ops::address(p, dev, *dev.sgid(ah.av.sgid_index), ah.av);
    p.dest_qp = wr.remote_qpn;
    p.udp_sport = proto::udp_source_port(qp.qpn(), wr.remote_qpn);
    p.deth.qkey = (wr.remote_qkey & 0x80000000u) ? qp.attrs.qkey : wr.remote_qkey;
    p.deth.src_qp = qp.qpn();
    p.opcode = proto::op::kUd | (wr.opcode == WrOpcode::SendWithImm ? proto::op::kSendOnlyImm : proto::op::kSendOnly);
    p.imm = wr.imm_data;
    len = w.length;
  } else switch (wr.opcode) {
    case WrOpcode::Send:
    case WrOpcode::SendWithImm:
    case WrOpcode::SendWithInv:
      p.opcode = message_opcode(wr.opcode, first, last);
      p.imm = wr.imm_data;
      p.ieth_rkey = wr.invalidate_rkey;
      len = std::min(qp.mtu, left);
      break;
    case WrOpcode::RdmaWrite:
    case WrOpcode::RdmaWriteWithImm:
      p.opcode = message_opcode(wr.opcode, first, last);
      p.reth = {wr.remote_addr, wr.rkey, w.length};
      p.imm = wr.imm_data;
      len = std::min(qp.mtu, left);
      break;
    case WrOpcode::RdmaRead:
      // One request for the packets still missing: a re-issued READ asks for the rest only.
      p.opcode = proto::op::kReadRequest;
      p.reth = {wr.remote_addr + off, wr.rkey, left};
      // Selective repeat: a part only, up to the responses already here.
      if (w.read_upto > k) p.reth.dma_len = std::min<uint64_t>(left, uint64_t(w.read_upto - k) * qp.mtu);
      break;
    case WrOpcode::AtomicCmpSwp:
      p.opcode = proto::op::kCmpSwap;
      p.atomic = {wr.remote_addr, wr.rkey, wr.swap, wr.compare_add};
      break;
    case WrOpcode::AtomicFetchAdd:
      p.opcode = proto::op::kFetchAdd;
      p.atomic = {wr.remote_addr, wr.rkey, wr.compare_add, 0};
      break;
    default:
      return false;
  }
  if (len && w.mr_gen != dev.mrs().gen() && !resolve_sges(dev, qp, w)) return false;
  if (qp.init.qp_type == QpType::UC) p.opcode |= proto::op::kUc;  // the UC opcode of the same operation
  p.payload = sge_gather(w, off, len, dev.scratch());
  ++t.pkts_since_ackreq;
  // RC: AckReq on the last packet of every message (READ requests and atomics included, as
  // rxe does), at least every ack_req_every packets inside long ones, and on the packet that
  // fills the send window (its ACK opens the window again). UC and UD: never.
  bool fills_window = false;
  if (qp.init.qp_type == QpType::RC) {
    const SendWqe& head = t.sq.front();
    fills_window = psn_diff(psn_add(p.psn, 1), psn_add(head.first_psn, head.rcvd_pkts)) >= int32_t(window(dev, qp));
  }
  p.ack_req = qp.init.qp_type == QpType::RC &&
              (last || ack || fills_window || w.is_read_or_atomic() ||
               t.pkts_since_ackreq >= dev.config().ack_req_every);
  p.solicited = last && (wr.send_flags & kSendSolicited) &&
                (wr.opcode == WrOpcode::Send || wr.opcode == WrOpcode::SendWithImm ||
                 wr.opcode == WrOpcode::SendWithInv || wr.opcode == WrOpcode::RdmaWriteWithImm);
  const bool nothing_in_flight = !out_of_line && t.send_idx == 0 && k == w.rcvd_pkts;
  if (!dev.tx().emit(qp, p, ud && w.ah_local)) return false;
  const uint64_t now = dev.step_ns();
  if (p.ack_req) t.pkts_since_ackreq = 0;
  if (nothing_in_flight) t.last_progress_ns = t.probe_from_ns = now;  // the timers start
  // Time one AckReq packet at a time, never a resent one (its ACK may answer the first copy).
  if (p.ack_req && k >= w.sent_max && !t.rtt_timing && qp.init.qp_type == QpType::RC) {
    t.rtt_timing = true;
    t.rtt_psn = p.psn;
    t.rtt_sent_ns = now;
  }
  w.next_pkt = wr.opcode == WrOpcode::RdmaRead ? w.npkts : k + 1;
  if (k < w.sent_max) ++qp.ctr.retransmitted;  // this PSN went out before
  w.sent_max = std::max(w.sent_max, w.next_pkt);
  return true;
}

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
      if (++i >= t.sq.size()) break;
      w = &t.sq.at(i);
      if (!w->started) break;
      k = 0;
    } else {
      ++k;
    }
  }
  return end == psn ? psn_add(psn, 1) : end;
}

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
    const bool sent = send_packet(dev, qp, *w, true, psn_diff(t.sr_end, after) <= 0);
    w->next_pkt = next;
    if (!sent) return false;
    w->read_upto = 0;
    ++qp.ctr.sr_resends;
    t.sr_next = after;
  }
  return true;
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

void run(Device& dev, Qp& qp) {
  SendSide& t = qp.tx;
  if (t.rnr_until_ns) {
    if (dev.step_ns() < t.rnr_until_ns) {
      t.req_state = ReqState::WaitRnr;
      return;
    }
    t.rnr_until_ns = 0;
    t.last_progress_ns = t.probe_from_ns = dev.step_ns();  // the timers start again with the resend
  }
  if (t.sr_next != t.sr_end && !send_resends(dev, qp)) {
    t.req_state = qp.attrs.qp_state == QpState::Err ? ReqState::Error : ReqState::WaitTxBuf;
    return;
  }
  const uint32_t max_rd = std::max<uint32_t>(1, qp.attrs.max_rd_atomic);
  SendWqe* w = nullptr;
  ReqState s = ReqState::NextWqe;
  for (;;) {
    switch (s) {
      case ReqState::NextWqe:
        if (qp.attrs.qp_state == QpState::Err) s = ReqState::Error;
        else if (t.send_idx >= t.sq.size()) s = ReqState::Idle;
        else {
          w = &t.sq.at(t.send_idx);
          s = w->started ? ReqState::CheckWindow : ReqState::StartWqe;
        }
        break;
      case ReqState::StartWqe:
        if (qp.attrs.qp_state == QpState::Sqd) s = ReqState::Drained;  // draining: nothing new starts
        else if (w->is_read_or_atomic() && t.rd_atomic_inflight >= max_rd) s = ReqState::WaitRdAtomic;
        else if ((w->wr.send_flags & kSendFence) && t.rd_atomic_inflight > 0) s = ReqState::WaitFence;
        else s = start_wqe(dev, qp, *w) ? ReqState::CheckWindow : ReqState::Error;
        break;
      case ReqState::CheckWindow: {
        if (qp.init.qp_type != QpType::RC) {  // nothing is acknowledged: no window
          s = ReqState::SendPacket;
          break;
        }
        // The window counts PSNs from the oldest one not yet acknowledged.
        const SendWqe& head = t.sq.front();
        const uint32_t una = psn_add(head.first_psn, head.rcvd_pkts);
        const uint32_t psn = psn_add(w->first_psn, w->next_pkt);
        s = psn_diff(psn, una) >= int32_t(window(dev, qp)) ? ReqState::WaitWindow : ReqState::SendPacket;
        break;
      }
      case ReqState::SendPacket:
        if (!send_packet(dev, qp, *w)) {
          // No transmit buffer: try again on the next progress(). Or a local error.
          s = qp.attrs.qp_state == QpState::Err ? ReqState::Error : ReqState::WaitTxBuf;
          break;
        }
        if (w->all_sent()) {
          if (qp.init.qp_type == QpType::RC) ++t.send_idx;     // completes when acknowledged
          else qp_ops::complete_wqe(qp, WcStatus::Success);  // UC, UD: complete once sent
        }
        s = ReqState::NextWqe;
        break;
      default:  // an end state
        t.req_state = s;
        return;
    }
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
  const bool sent = send_packet(dev, qp, *w, true, true);
  w->next_pkt = next;  // the send point does not move
  if (!sent) return;   // no transmit buffer: the next progress() tries again
  ++qp.ctr.probes;
  ++t.probes;
  t.probe_from_ns = dev.step_ns();
  t.probe_psn = psn_add(w->first_psn, k);
  t.probe_oldest = oldest;
  t.rtt_timing = false;  // Karn's rule: the ACK that comes may answer the probe, not the timed packet
}

}  // namespace

void check_timers(Device& dev, Qp& qp) {
  SendSide& t = qp.tx;
  if (t.sq.empty() || qp.init.qp_type != QpType::RC) return;  // UC and UD never resend
  SendWqe& head = t.sq.front();
  if (!head.started || head.next_pkt <= head.rcvd_pkts) return;  // nothing in flight
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

}  // namespace uroce::engine::requester
