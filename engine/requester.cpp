// Requester: turns send WQEs into request packets. Segmentation by path MTU, PSN assignment,
// AckReq placement, the send window and the READ/atomic limit, the RNR wait. What is sent
// again after a loss, and when, is loss recovery (recovery.cpp).
//
// run() is a loop over ReqState (qp.hpp): NEXT_WQE -> [START_WQE] -> CHECK_WINDOW ->
// CHECK_RATE -> SEND_PACKET -> NEXT_WQE ..., ending in IDLE or in the state that says what it
// waits for.
#include <algorithm>
#include <cstring>

#include "engine/roles.hpp"
#include "engine/sge.hpp"
#include "proto/aeth.hpp"
#include "proto/entropy.hpp"
#include "proto/multicast.hpp"
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
  SendSide& t = qp.tx;
  uint8_t** host = t.host(w);
  if (w.is_inline) {
    host[0] = t.inline_data(w);
    return true;
  }
  const uint32_t need = w.is_read_or_atomic() ? uint32_t(kLocalWrite) : 0;
  const Sge* sge = t.sge(w);
  for (uint32_t i = 0; i < w.wr.num_sge; ++i) {
    if (sge[i].length == 0) continue;
    AccessCheck c = check_local(dev.mrs(), t.lkeys, sge[i].lkey, qp.init.pd, sge[i].addr, sge[i].length, need);
    if (!c.ok) {
      qp_ops::fail_wqe(qp, w, WcStatus::LocProtErr);
      return false;
    }
    host[i] = c.host;
  }
  w.mr_gen = dev.mrs().gen();
  return true;
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
  } else if (qp.init.qp_type == QpType::UD || w.is_placement()) {
    w.npkts = 1;  // a datagram is one packet (post_send checked its length); so is an ATOMIC WRITE or FLUSH
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

}  // namespace

// Builds and emits packet `next_pkt` of the WQE. False: no transmit buffer now, or the QP
// went to ERR (its local buffers are gone). `out_of_line`: a tail-loss probe or a selective
// resend (neither the QP timer nor the send point moves); `ack`: AckReq set.
bool send_packet(Device& dev, Qp& qp, SendWqe& w, bool out_of_line, bool ack) {
  SendSide& t = qp.tx;
  proto::Packet& p = qp.req_pkt;  // addresses are set; every per-packet field is set below
  const uint32_t k = w.next_pkt;
  const bool first = k == 0, last = k + 1 == w.npkts;
  p.psn = psn_add(w.first_psn, k);
  const PostedWr& wr = w.wr;
  const bool ud = qp.init.qp_type == QpType::UD;
  const uint32_t off = k * qp.mtu;
  const uint32_t left = w.length - std::min(w.length, off);
  uint32_t len = 0;
  if (ud) {
    // A datagram: addressed by its AH, to remote_qpn, with a DETH.
    const Ah& ah = qp.tx.ah(w);
    const proto::Ip6* src = dev.sgid(ah.av.sgid_index);  // the table may have changed since the post
    qp_ops::address(p, dev, src ? *src : ah.sgid, ah.av);
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
    case WrOpcode::AtomicWrite:
      // The RETH names the 8 bytes' place; the bytes travel as the caller gave them.
      p.opcode = proto::op::kAtomicWrite;
      p.reth = {wr.remote_addr, wr.rkey, 8};
      break;
    case WrOpcode::Flush:
      p.opcode = proto::op::kFlush;
      p.feth = {wr.flush_type, wr.flush_level, 0};
      p.reth = {wr.remote_addr, wr.rkey, w.length};
      break;
    default:
      return false;
  }
  if (len && w.mr_gen != dev.mrs().gen() && !resolve_sges(dev, qp, w)) return false;
  p.opcode |= qp.opcode_base();  // the UC or XRC opcode of the same operation
  if (qp.xrc()) p.xrceth = {wr.xrc_srqn, 0};
  if (wr.opcode == WrOpcode::AtomicWrite) p.payload = {reinterpret_cast<const uint8_t*>(&w.wr.swap), 8};
  else p.payload = sge_gather(qp.tx, w, off, len, dev.scratch());
  ++t.pkts_since_ackreq;
  // RC: AckReq on the last packet of every message (READ requests and atomics included, as
  // rxe does), at least every ack_req_every packets inside long ones, and on the packet that
  // fills the send window (its ACK opens the window again). UC and UD: never.
  bool fills_window = false;
  if (qp.reliable()) {
    const SendWqe& head = t.sq.front();
    fills_window = psn_diff(psn_add(p.psn, 1), psn_add(head.first_psn, head.rcvd_pkts)) >= int32_t(recovery::window(dev, qp));
  }
  p.ack_req = qp.reliable() &&
              (last || ack || fills_window || w.is_read_or_atomic() ||
               t.pkts_since_ackreq >= dev.config().ack_req_every);
  p.solicited = last && (wr.send_flags & kSendSolicited) &&
                (wr.opcode == WrOpcode::Send || wr.opcode == WrOpcode::SendWithImm ||
                 wr.opcode == WrOpcode::SendWithInv || wr.opcode == WrOpcode::RdmaWriteWithImm);
  const bool nothing_in_flight = !out_of_line && t.send_idx == 0 && k == w.rcvd_pkts;
  if (!dev.tx().emit(qp, p, ud && w.ah_local)) return false;
  if (qp.cc) qp.cc->sent(dev.step_ns(), uint32_t(proto::frame_len(p)));
  if (ud && w.ah_mcast) {
    ++qp.ctr.mcast_sent;
    // The group's members on this device get their copy here (none if the loopback ring is full:
    // a datagram lost, as on a wire).
    if (dev.mcast_loops_back(qp.tx.ah(w).av.dgid)) dev.tx().emit(qp, p, true);
  }
  const uint64_t now = dev.step_ns();
  if (p.ack_req) t.pkts_since_ackreq = 0;
  if (nothing_in_flight) t.last_progress_ns = t.probe_from_ns = now;  // the timers start
  // A paced QP (congestion control) sends its window over a while: its tail is the packet it
  // sent last, so both timers run from there, as if its packets had all gone at once then.
  // (Unpaced, a window leaves at once and nothing changes.) A dead peer is still found: the
  // window fills, nothing more is sent, and the timers run out.
  else if (qp.cc && qp.cc->limited()) t.last_progress_ns = t.probe_from_ns = now;
  // Time one AckReq packet at a time, never a resent one (its ACK may answer the first copy).
  if (p.ack_req && k >= w.sent_max && !t.rtt_timing && qp.reliable()) {
    t.rtt_timing = true;
    t.rtt_psn = p.psn;
    t.rtt_sent_ns = now;
  }
  w.next_pkt = wr.opcode == WrOpcode::RdmaRead ? w.npkts : k + 1;
  if (k < w.sent_max) ++qp.ctr.retransmitted;  // this PSN went out before
  w.sent_max = std::max(w.sent_max, w.next_pkt);
  return true;
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
  if (t.sr_next != t.sr_end && !recovery::send_resends(dev, qp)) {
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
          if (w->started && w->is_local()) ++t.send_idx;  // executed once (a restart walks past it)
          else s = w->started ? ReqState::CheckWindow : ReqState::StartWqe;
        }
        break;
      case ReqState::StartWqe:
        if (qp.attrs.qp_state == QpState::Sqd) s = ReqState::Drained;  // draining: nothing new starts
        else if (w->is_read_or_atomic() && t.rd_atomic_inflight >= max_rd) s = ReqState::WaitRdAtomic;
        else if ((w->wr.send_flags & kSendFence) && t.rd_atomic_inflight > 0) s = ReqState::WaitFence;
        else if (w->is_local()) s = local_ops::execute(dev, qp, *w) ? ReqState::NextWqe : ReqState::Error;
        else s = start_wqe(dev, qp, *w) ? ReqState::CheckWindow : ReqState::Error;
        break;
      case ReqState::CheckWindow: {
        if (!qp.reliable()) {  // nothing is acknowledged: no window
          s = ReqState::CheckRate;
          break;
        }
        // The window counts PSNs from the oldest one not yet acknowledged.
        const SendWqe& head = t.sq.front();
        const uint32_t una = psn_add(head.first_psn, head.rcvd_pkts);
        const uint32_t psn = psn_add(w->first_psn, w->next_pkt);
        s = psn_diff(psn, una) >= int32_t(recovery::window(dev, qp)) ? ReqState::WaitWindow : ReqState::CheckRate;
        break;
      }
      case ReqState::CheckRate:
        // Congestion control: the pacer lets the packet go at the QP's rate (engine/cc.hpp).
        s = !qp.cc || qp.cc->may_send(dev.step_ns()) ? ReqState::SendPacket : ReqState::WaitRate;
        break;
      case ReqState::SendPacket:
        if (!send_packet(dev, qp, *w)) {
          // No transmit buffer: try again on the next progress(). Or a local error.
          s = qp.attrs.qp_state == QpState::Err ? ReqState::Error : ReqState::WaitTxBuf;
          break;
        }
        if (w->all_sent()) {
          if (qp.reliable()) ++t.send_idx;     // completes when acknowledged
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

}  // namespace uroce::engine::requester
