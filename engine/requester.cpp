// Requester: turns send WQEs into request packets. Segmentation by path MTU, PSN assignment,
// AckReq placement, the send window and the READ/atomic limit; go-back-N restarts and the
// retransmission and RNR timers.
#include <algorithm>
#include <cstring>

#include "engine/engine.hpp"
#include "proto/aeth.hpp"
#include "proto/psn.hpp"

namespace uroce::engine {

using proto::psn_add;
using proto::psn_diff;

// Resolves and checks the local buffers of a WQE and assigns its PSNs. On a local protection
// error the WQE completes with IBV_WC_LOC_PROT_ERR and the QP goes to ERR.
bool Device::start_wqe(Qp& qp, SendWqe& w) {
  const bool read_or_atomic = w.is_read_or_atomic();
  const uint32_t need = read_or_atomic ? uint32_t(kLocalWrite) : 0;
  if (w.is_inline) {
    w.host[0] = w.inline_data;
  } else {
    for (uint32_t i = 0; i < w.wr.num_sge; ++i) {
      AccessCheck c = check_access(mrs_, w.sge[i].lkey, qp.init_.pd, w.sge[i].addr, w.sge[i].length, need);
      if (!c.ok && w.sge[i].length != 0) {
        w.started = false;
        complete_wqe(qp, WcStatus::LocProtErr);
        set_error(qp);
        return false;
      }
      w.host[i] = c.host;
    }
  }
  switch (w.wr.opcode) {
    case WrOpcode::AtomicCmpSwp:
    case WrOpcode::AtomicFetchAdd:
      if (w.length < 8) {
        complete_wqe(qp, WcStatus::LocLenErr);
        set_error(qp);
        return false;
      }
      w.npkts = 1;
      break;
    default:
      w.npkts = w.length == 0 ? 1 : (w.length + qp.mtu_ - 1) / qp.mtu_;
      break;
  }
  w.first_psn = qp.sq_psn_;
  qp.sq_psn_ = psn_add(qp.sq_psn_, w.npkts);
  w.next_pkt = 0;
  w.rcvd_pkts = 0;
  w.started = true;
  if (read_or_atomic) ++qp.rd_atomic_inflight_;
  return true;
}

namespace {

// Bytes [off, off + len) of the WQE's local buffers: a direct span when they lie in one SGE,
// otherwise gathered into `scratch`.
std::span<const uint8_t> gather(const SendWqe& w, uint32_t off, uint32_t len, std::vector<uint8_t>& scratch) {
  if (len == 0) return {};
  const uint32_t nsge = w.is_inline ? 1 : w.wr.num_sge;
  uint32_t base = 0, i = 0;
  while (i < nsge && off >= base + w.sge[i].length) base += w.sge[i++].length;
  if (i < nsge && off + len <= base + w.sge[i].length) return {w.host[i] + (off - base), len};
  uint32_t done = 0;
  while (done < len && i < nsge) {
    uint32_t in = off + done - base;
    uint32_t n = std::min(w.sge[i].length - in, len - done);
    std::memcpy(scratch.data() + done, w.host[i] + in, n);
    done += n;
    base += w.sge[i++].length;
  }
  return {scratch.data(), len};
}

}  // namespace

bool Device::send_request_packet(Qp& qp, SendWqe& w) {
  proto::Packet& p = qp.req_pkt_;  // addresses are set; every per-packet field is set below
  const uint32_t k = w.next_pkt;
  const bool first = k == 0, last = k + 1 == w.npkts;
  p.psn = psn_add(w.first_psn, k);
  const SendWr& wr = w.wr;
  namespace op = proto::op;
  const uint32_t off = k * qp.mtu_;
  uint32_t len = 0;
  switch (wr.opcode) {
    case WrOpcode::Send:
    case WrOpcode::SendWithImm:
    case WrOpcode::SendWithInv: {
      const bool imm = wr.opcode == WrOpcode::SendWithImm, inv = wr.opcode == WrOpcode::SendWithInv;
      if (first && last) p.opcode = imm ? op::kSendOnlyImm : inv ? op::kSendOnlyInv : op::kSendOnly;
      else if (first) p.opcode = op::kSendFirst;
      else if (last) p.opcode = imm ? op::kSendLastImm : inv ? op::kSendLastInv : op::kSendLast;
      else p.opcode = op::kSendMiddle;
      p.imm = wr.imm_data;
      p.ieth_rkey = wr.invalidate_rkey;
      len = std::min(qp.mtu_, w.length - std::min(w.length, off));
      break;
    }
    case WrOpcode::RdmaWrite:
    case WrOpcode::RdmaWriteWithImm: {
      const bool imm = wr.opcode == WrOpcode::RdmaWriteWithImm;
      if (first && last) p.opcode = imm ? op::kWriteOnlyImm : op::kWriteOnly;
      else if (first) p.opcode = op::kWriteFirst;
      else if (last) p.opcode = imm ? op::kWriteLastImm : op::kWriteLast;
      else p.opcode = op::kWriteMiddle;
      p.reth = {wr.remote_addr, wr.rkey, w.length};
      p.imm = wr.imm_data;
      len = std::min(qp.mtu_, w.length - std::min(w.length, off));
      break;
    }
    case WrOpcode::RdmaRead: {
      // One request for the packets still missing: a re-issued READ asks for the rest only.
      p.opcode = op::kReadRequest;
      p.reth = {wr.remote_addr + off, wr.rkey, w.length - std::min(w.length, off)};
      break;
    }
    case WrOpcode::AtomicCmpSwp:
    case WrOpcode::AtomicFetchAdd:
      p.opcode = wr.opcode == WrOpcode::AtomicCmpSwp ? op::kCmpSwap : op::kFetchAdd;
      p.atomic = {wr.remote_addr, wr.rkey, wr.opcode == WrOpcode::AtomicCmpSwp ? wr.swap : wr.compare_add,
                  wr.opcode == WrOpcode::AtomicCmpSwp ? wr.compare_add : 0};
      break;
    default:
      return false;
  }
  p.payload = gather(w, off, len, scratch_);
  ++qp.pkts_since_ackreq_;
  // AckReq on the last packet of every message (READ requests and atomics included, as rxe
  // does) and at least every ack_req_every packets inside long ones.
  p.ack_req = last || w.is_read_or_atomic() || qp.pkts_since_ackreq_ >= cfg_.ack_req_every;
  p.solicited = last && (wr.send_flags & kSendSolicited) &&
                (wr.opcode == WrOpcode::Send || wr.opcode == WrOpcode::SendWithImm ||
                 wr.opcode == WrOpcode::SendWithInv || wr.opcode == WrOpcode::RdmaWriteWithImm);
  const bool nothing_in_flight = qp.send_idx_ == 0 && k == w.rcvd_pkts;
  if (!emit(qp, p)) return false;
  if (p.ack_req) qp.pkts_since_ackreq_ = 0;
  if (nothing_in_flight) qp.last_progress_ns_ = clock_.now_ns();
  w.next_pkt = wr.opcode == WrOpcode::RdmaRead ? w.npkts : k + 1;
  if (k < w.sent_max) ++qp.ctr_.retransmitted;  // this PSN went out before
  w.sent_max = std::max(w.sent_max, w.next_pkt);
  return true;
}

void Device::requester(Qp& qp) {
  if (qp.rnr_until_ns_) {
    if (clock_.now_ns() < qp.rnr_until_ns_) {
      qp.req_state_ = ReqState::WaitRnr;
      return;
    }
    qp.rnr_until_ns_ = 0;
    qp.last_progress_ns_ = clock_.now_ns();  // the ACK timer starts again with the resend
  }
  const uint32_t max_rd = std::max<uint32_t>(1, qp.attr_.max_rd_atomic);
  while (qp.send_idx_ < qp.sq_.size() && qp.attr_.qp_state != QpState::Err) {
    SendWqe& w = qp.sq_.at(qp.send_idx_);
    if (!w.started) {
      if (qp.attr_.qp_state == QpState::Sqd) break;  // draining: nothing new starts
      if (w.is_read_or_atomic() && qp.rd_atomic_inflight_ >= max_rd) {
        qp.req_state_ = ReqState::WaitRdAtomic;
        return;
      }
      if ((w.wr.send_flags & kSendFence) && qp.rd_atomic_inflight_ > 0) {
        qp.req_state_ = ReqState::WaitRdAtomic;
        return;
      }
      if (!start_wqe(qp, w)) return;
    }
    // The window counts PSNs from the oldest one not yet acknowledged.
    const SendWqe& head = qp.sq_.front();
    const uint32_t una = psn_add(head.first_psn, head.rcvd_pkts);
    const uint32_t psn = psn_add(w.first_psn, w.next_pkt);
    if (psn_diff(psn, una) >= int32_t(cfg_.max_unacked_psns)) {
      qp.req_state_ = ReqState::WaitWindow;
      return;
    }
    qp.req_state_ = ReqState::Sending;
    if (!send_request_packet(qp, w)) return;  // no transmit buffer now: try again next round
    if (w.all_sent()) ++qp.send_idx_;
  }
  qp.req_state_ = ReqState::Idle;
}

// Restart sending at `psn` (the oldest PSN the responder has not seen): every packet from
// there on is sent again, with the opcodes its position in its message calls for.
void Device::go_back_n(Qp& qp, uint32_t psn) {
  for (uint32_t i = 0; i < qp.sq_.size(); ++i) {
    SendWqe& w = qp.sq_.at(i);
    if (!w.started) break;
    int32_t d = psn_diff(psn, w.first_psn);
    if (d < 0 || uint32_t(d) >= w.npkts) continue;
    // Only ever move the send point back: an earlier restart that is still resending covers
    // this one (moving forward would skip WQEs that restart reset to their first packet).
    if (i > qp.send_idx_ || (i == qp.send_idx_ && uint32_t(d) >= w.next_pkt)) return;
    w.next_pkt = uint32_t(d);
    for (uint32_t j = i + 1; j < qp.sq_.size(); ++j) {
      SendWqe& x = qp.sq_.at(j);
      if (!x.started) break;
      x.next_pkt = 0;
    }
    qp.send_idx_ = i;
    return;
  }
}

void Device::check_timers(Qp& qp) {
  if (qp.sq_.empty()) return;
  SendWqe& head = qp.sq_.front();
  if (!head.started || head.next_pkt <= head.rcvd_pkts) return;  // nothing in flight
  if (qp.rnr_until_ns_) return;                                   // waiting for an RNR timer
  const uint64_t t = proto::local_ack_timeout_ns(qp.attr_.timeout);
  if (t == 0) return;
  const uint64_t now = clock_.now_ns();
  if (now - qp.last_progress_ns_ < t) return;
  ++qp.ctr_.timeouts;
  qp.last_progress_ns_ = now;
  if (qp.attr_.retry_cnt != 7) {
    if (qp.retries_left_ == 0) {
      complete_wqe(qp, WcStatus::RetryExcErr);
      set_error(qp);
      return;
    }
    --qp.retries_left_;
  }
  go_back_n(qp, psn_add(head.first_psn, head.rcvd_pkts));
}

}  // namespace uroce::engine
