// Completer: ACKs, NAKs, READ responses and atomic ACKs retire send WQEs in posting order.
#include <algorithm>
#include <cstring>

#include "engine/engine.hpp"
#include "proto/aeth.hpp"
#include "proto/psn.hpp"

namespace uroce::engine {

using proto::psn_add;
using proto::psn_diff;

namespace {

WcOpcode wc_opcode(WrOpcode o) {
  switch (o) {
    case WrOpcode::RdmaWrite:
    case WrOpcode::RdmaWriteWithImm: return WcOpcode::RdmaWrite;
    case WrOpcode::RdmaRead: return WcOpcode::RdmaRead;
    case WrOpcode::AtomicCmpSwp: return WcOpcode::CompSwap;
    case WrOpcode::AtomicFetchAdd: return WcOpcode::FetchAdd;
    case WrOpcode::LocalInv: return WcOpcode::LocalInv;
    case WrOpcode::BindMw: return WcOpcode::BindMw;
    default: return WcOpcode::Send;
  }
}

// Copies `len` bytes to byte offset `off` of the WQE's local buffers.
void scatter(SendWqe& w, uint32_t off, const uint8_t* data, uint32_t len) {
  uint32_t base = 0;
  for (uint32_t i = 0; i < w.wr.num_sge && len; ++i) {
    const uint32_t l = w.sge[i].length;
    if (off < base + l) {
      uint32_t in = off - base, n = std::min(l - in, len);
      std::memcpy(w.host[i] + in, data, n);
      data += n;
      off += n;
      len -= n;
    }
    base += l;
  }
}

}  // namespace

// Retires the oldest WQE with status `st`. Successful unsignaled WQEs make no completion.
void Device::complete_wqe(Qp& qp, WcStatus st) {
  SendWqe& w = qp.sq_.front();
  if (w.signaled || st != WcStatus::Success) {
    Wc wc;
    wc.wr_id = w.wr.wr_id;
    wc.status = st;
    wc.opcode = wc_opcode(w.wr.opcode);
    wc.qp_num = qp.qpn_;
    wc.byte_len = st == WcStatus::Success ? w.length : 0;
    qp.init_.send_cq->push(wc);
  }
  if (w.started && w.is_read_or_atomic() && qp.rd_atomic_inflight_) --qp.rd_atomic_inflight_;
  qp.sq_.pop();
  if (qp.send_idx_) --qp.send_idx_;
}

// Completes SEND/WRITE WQEs acknowledged up to `psn` (inclusive) or before it (exclusive).
// Stops at a READ or atomic: those finish only with their responses. Returns true on progress.
bool Device::complete_acked(Qp& qp, uint32_t psn, bool inclusive) {
  bool progress = false;
  // Remember how far the responder has acknowledged: WQEs behind a READ or atomic that is
  // still waiting for its responses complete as soon as it does.
  const uint32_t covered = inclusive ? psn : psn_add(psn, -1);
  if (!qp.acked_valid_ || proto::psn_after(covered, qp.acked_psn_)) {
    qp.acked_psn_ = covered;
    qp.acked_valid_ = true;
  }
  while (!qp.sq_.empty()) {
    SendWqe& w = qp.sq_.front();
    if (!w.started) break;
    int32_t d = psn_diff(psn, w.first_psn);  // how far the ACK reaches into this WQE
    if (!inclusive) --d;
    if (d < 0) break;
    if (w.is_read_or_atomic()) {
      // An ACK beyond a READ or atomic whose responses never came: they were lost.
      if (uint32_t(d) >= w.npkts && inclusive) {
        uint32_t again = psn_add(w.first_psn, w.rcvd_pkts);
        if (qp.read_retry_psn_ != again) {
          qp.read_retry_psn_ = again;
          ++qp.ctr_.implied_naks;
          go_back_n(qp, again);
        }
      }
      break;
    }
    if (uint32_t(d) + 1 < w.npkts || !w.all_sent()) {
      uint32_t acked = std::min<uint32_t>(uint32_t(d) + 1, w.next_pkt);
      if (acked > w.rcvd_pkts) {
        w.rcvd_pkts = acked;
        progress = true;
      }
      break;
    }
    w.rcvd_pkts = w.npkts;
    complete_wqe(qp, WcStatus::Success);
    progress = true;
  }
  if (progress) {
    qp.retries_left_ = qp.attr_.retry_cnt;
    qp.rnr_retries_left_ = qp.attr_.rnr_retry;
    qp.last_progress_ns_ = clock_.now_ns();
  }
  return progress;
}

void Device::completer(Qp& qp, const proto::Packet& p) {
  using proto::AckKind;
  using proto::NakCode;
  const proto::OpcodeInfo& info = p.info();
  switch (info.op) {
    case proto::Operation::ReadResponse: on_read_response(qp, p); return;
    case proto::Operation::AtomicAck: on_atomic_ack(qp, p); return;
    case proto::Operation::Ack: break;
    default: return;
  }
  proto::Syndrome s = proto::Syndrome::decode(p.aeth.syndrome);
  // Is this PSN one we have sent and not yet had acknowledged?
  if (qp.sq_.empty() || !qp.sq_.front().started ||
      psn_diff(p.psn, qp.sq_.front().first_psn) < (s.kind == AckKind::Ack ? -1 : 0) ||
      psn_diff(p.psn, qp.sq_psn_) >= 0) {
    ++qp.ctr_.duplicates;  // a stale or ghost ACK
    return;
  }
  switch (s.kind) {
    case AckKind::Ack:
      ++qp.ctr_.acks_rcvd;
      complete_acked(qp, p.psn, true);
      return;
    case AckKind::RnrNak: {
      ++qp.ctr_.rnr_naks_rcvd;
      complete_acked(qp, p.psn, false);
      if (qp.sq_.empty()) return;
      if (qp.attr_.rnr_retry != 7) {
        if (qp.rnr_retries_left_ == 0) {
          complete_wqe(qp, WcStatus::RnrRetryExcErr);
          set_error(qp);
          return;
        }
        --qp.rnr_retries_left_;
      }
      qp.rnr_until_ns_ = clock_.now_ns() + uint64_t(proto::rnr_timer_us(s.value)) * 1000;
      qp.req_state_ = ReqState::WaitRnr;
      go_back_n(qp, p.psn);
      return;
    }
    case AckKind::Nak: {
      complete_acked(qp, p.psn, false);
      if (qp.sq_.empty()) return;
      if (s.nak_code() == NakCode::PsnSequenceError) {
        ++qp.ctr_.seq_naks_rcvd;
        if (qp.attr_.retry_cnt != 7) {
          if (qp.retries_left_ == 0) {
            complete_wqe(qp, WcStatus::RetryExcErr);
            set_error(qp);
            return;
          }
          --qp.retries_left_;
        }
        go_back_n(qp, p.psn);
        return;
      }
      ++qp.ctr_.other_naks_rcvd;
      WcStatus st = WcStatus::RemOpErr;
      switch (s.nak_code()) {
        case NakCode::InvalidRequest: st = WcStatus::RemInvReqErr; break;
        case NakCode::RemoteAccessError: st = WcStatus::RemAccessErr; break;
        case NakCode::RemoteOperationalError: st = WcStatus::RemOpErr; break;
        case NakCode::InvalidRdRequest: st = WcStatus::RemInvRdReqErr; break;
        default: st = WcStatus::RemOpErr; break;
      }
      complete_wqe(qp, st);
      set_error(qp);
      return;
    }
    case AckKind::Reserved:
      ++qp.ctr_.bad_responses;
      return;
  }
}

void Device::on_read_response(Qp& qp, const proto::Packet& p) {
  complete_acked(qp, p.psn, false);  // a response implies every earlier SEND/WRITE arrived
  if (qp.sq_.empty()) {
    ++qp.ctr_.duplicates;
    return;
  }
  SendWqe& w = qp.sq_.front();
  if (w.wr.opcode != WrOpcode::RdmaRead || !w.started) {
    ++qp.ctr_.duplicates;
    return;
  }
  const int32_t d = psn_diff(p.psn, w.first_psn);
  if (d < 0 || uint32_t(d) >= w.npkts) {
    ++qp.ctr_.duplicates;
    return;
  }
  if (uint32_t(d) < w.rcvd_pkts) {
    ++qp.ctr_.duplicates;
    return;
  }
  if (uint32_t(d) > w.rcvd_pkts) {
    // A gap: responses were lost. Ask again for the rest, once per gap.
    ++qp.ctr_.out_of_sequence;
    uint32_t again = psn_add(w.first_psn, w.rcvd_pkts);
    if (qp.read_retry_psn_ != again) {
      qp.read_retry_psn_ = again;
      ++qp.ctr_.implied_naks;
      go_back_n(qp, again);
    }
    return;
  }
  // In order. The opcode must fit the position and the length the expected size.
  const uint32_t k = uint32_t(d);
  const proto::Position pos = p.info().pos;
  const bool first = k == 0, last = k + 1 == w.npkts;
  const proto::Position want = first && last ? proto::Position::Only
                               : first       ? proto::Position::First
                               : last        ? proto::Position::Last
                                             : proto::Position::Middle;
  const uint32_t off = k * qp.mtu_;
  const uint32_t expect = std::min(qp.mtu_, w.length - std::min(w.length, off));
  // A re-issued READ restarts the response sequence: FIRST (or ONLY) where we expect MIDDLE
  // (or LAST) is what the responder sends for the remaining range.
  const bool restart_ok = (want == proto::Position::Middle && pos == proto::Position::First) ||
                          (want == proto::Position::Last && pos == proto::Position::Only);
  if ((pos != want && !restart_ok) || p.payload.size() != expect) {
    complete_wqe(qp, WcStatus::BadRespErr);
    set_error(qp);
    return;
  }
  scatter(w, off, p.payload.data(), expect);
  ++w.rcvd_pkts;
  qp.read_retry_psn_ = UINT32_MAX;
  qp.retries_left_ = qp.attr_.retry_cnt;
  qp.last_progress_ns_ = clock_.now_ns();
  if (w.rcvd_pkts == w.npkts) {
    complete_wqe(qp, WcStatus::Success);
    if (qp.acked_valid_) complete_acked(qp, qp.acked_psn_, true);
  }
}

void Device::on_atomic_ack(Qp& qp, const proto::Packet& p) {
  complete_acked(qp, p.psn, false);
  if (qp.sq_.empty()) return;
  SendWqe& w = qp.sq_.front();
  const bool atomic = w.wr.opcode == WrOpcode::AtomicCmpSwp || w.wr.opcode == WrOpcode::AtomicFetchAdd;
  if (!atomic || !w.started || p.psn != w.first_psn || w.rcvd_pkts) {
    ++qp.ctr_.duplicates;
    return;
  }
  // The original value lands in local memory in host byte order, as verbs returns it.
  uint64_t orig = p.atomic_ack_orig;
  scatter(w, 0, reinterpret_cast<const uint8_t*>(&orig), 8);
  w.rcvd_pkts = 1;
  qp.retries_left_ = qp.attr_.retry_cnt;
  qp.last_progress_ns_ = clock_.now_ns();
  complete_wqe(qp, WcStatus::Success);
  if (qp.acked_valid_) complete_acked(qp, qp.acked_psn_, true);
}

}  // namespace uroce::engine
