// Responder: checks each request against the expected PSN, the opcode sequence, the MTU and
// the memory keys; places WRITEs, consumes receive WQEs for SENDs, answers READs and atomics,
// and acknowledges (coalesced: one ACK per QP per receive burst).
#include <algorithm>
#include <cassert>
#include <cstring>

#include "engine/engine.hpp"
#include "proto/aeth.hpp"
#include "proto/psn.hpp"

namespace uroce::engine {

using proto::NakCode;
using proto::Operation;
using proto::Position;
using proto::psn_add;
using proto::psn_diff;
using proto::Syndrome;

void Device::send_ack(Qp& qp, Syndrome s, uint32_t psn) {
  if (s.kind != proto::AckKind::Ack && qp.ack_pending_) {
    // A coalesced ACK for earlier packets goes out before a NAK.
    qp.ack_pending_ = false;
    send_ack(qp, Syndrome::ack(), qp.ack_psn_);
  }
  proto::Packet& p = qp.resp_pkt_;
  p.opcode = proto::op::kAck;
  p.payload = {};
  p.psn = psn;
  p.aeth = {s.encode(), qp.msn_};
  switch (s.kind) {
    case proto::AckKind::Ack: ++qp.ctr_.acks_sent; break;
    case proto::AckKind::RnrNak: ++qp.ctr_.rnr_naks_sent; break;
    default:
      if (s.nak_code() == NakCode::PsnSequenceError) ++qp.ctr_.seq_naks_sent;
      else ++qp.ctr_.other_naks_sent;
      break;
  }
  emit(qp, p);
}

// Class A/C errors (IBA 9.9.3): NAK the request and move the QP to the error state.
void Device::send_nak_and_error(Qp& qp, NakCode code, uint32_t psn) {
  send_ack(qp, Syndrome::nak(code), psn);
  set_error(qp);
}

bool Device::send_atomic_ack(Qp& qp, const RdAtomicRes& r) {
  proto::Packet& p = qp.resp_pkt_;
  p.opcode = proto::op::kAtomicAck;
  p.payload = {};
  p.psn = r.psn;
  p.aeth = {Syndrome::ack().encode(), r.msn};
  p.atomic_ack_orig = r.orig;
  return emit(qp, p);
}

// Takes the next receive WQE (from the SRQ if the QP has one) for an incoming message.
bool Device::take_recv(Qp& qp) {
  if (qp.have_recv_) return true;
  Ring<RecvWqe>& rq = qp.init_.srq ? qp.init_.srq->rq() : qp.rq_;
  if (rq.empty()) return false;
  qp.cur_recv_ = rq.front();
  rq.pop();
  qp.have_recv_ = true;
  qp.recv_off_ = 0;
  return true;
}

// Copies a SEND's payload to the current receive WQE. False: it does not fit (length error)
// or an SGE is not valid local-write memory (protection error, reported through wc status).
bool Device::scatter_recv(Qp& qp, const uint8_t* data, uint32_t len) {
  RecvWqe& r = qp.cur_recv_;
  uint32_t base = 0, off = qp.recv_off_;
  for (uint32_t i = 0; i < r.num_sge && len; ++i) {
    const uint32_t l = r.sge[i].length;
    if (off < base + l) {
      uint32_t in = off - base, n = std::min(l - in, len);
      AccessCheck c = check_access(mrs_, r.sge[i].lkey, qp.init_.pd, r.sge[i].addr + in, n, kLocalWrite);
      if (!c.ok) return false;
      std::memcpy(c.host, data, n);
      data += n;
      off += n;
      len -= n;
    }
    base += l;
  }
  qp.recv_off_ = off;
  return len == 0;
}

namespace {

uint32_t recv_capacity(const RecvWqe& r) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < r.num_sge; ++i) n += r.sge[i].length;
  return uint32_t(std::min<uint64_t>(n, UINT32_MAX));
}

}  // namespace

void Device::responder(Qp& qp, const proto::Packet& p) {
  if (qp.resp_state_ == RespState::Error) return;
  const int32_t d = psn_diff(p.psn, qp.epsn_);
  if (d < 0) {
    ++qp.ctr_.duplicates;
    on_duplicate(qp, p);
    return;
  }
  if (d > 0) {
    // A gap: one PSN sequence NAK, then silence until the expected PSN arrives.
    ++qp.ctr_.out_of_sequence;
    if (!qp.seq_nak_sent_) {
      qp.seq_nak_sent_ = true;
      send_ack(qp, Syndrome::nak(NakCode::PsnSequenceError), qp.epsn_);
    }
    return;
  }
  qp.seq_nak_sent_ = false;

  const proto::OpcodeInfo& info = p.info();
  const Operation op = info.op;
  const Position pos = info.pos;
  const uint32_t plen = uint32_t(p.payload.size());

  // Opcode sequence: MIDDLE and LAST only inside a message of the same kind, and nothing
  // else inside one.
  const bool in_send = qp.resp_state_ == RespState::InSend, in_write = qp.resp_state_ == RespState::InWrite;
  const bool continues = pos == Position::Middle || pos == Position::Last;
  if ((in_send && !(op == Operation::Send && continues)) || (in_write && !(op == Operation::Write && continues)) ||
      (!in_send && !in_write && continues)) {
    send_nak_and_error(qp, NakCode::InvalidRequest, p.psn);
    return;
  }
  // Length: FIRST and MIDDLE carry exactly one MTU, nothing carries more.
  if (plen > qp.mtu_ || ((pos == Position::First || pos == Position::Middle) && plen != qp.mtu_)) {
    send_nak_and_error(qp, NakCode::InvalidRequest, p.psn);
    return;
  }

  const uint32_t qp_access = qp.attr_.qp_access_flags;
  switch (op) {
    case Operation::Send: {
      if (pos == Position::First || pos == Position::Only) {
        if (!take_recv(qp)) {
          send_ack(qp, Syndrome::rnr(qp.attr_.min_rnr_timer), p.psn);
          return;  // the expected PSN does not move: the requester sends it again
        }
      }
      if (!scatter_recv(qp, p.payload.data(), plen)) {
        const bool too_long = qp.recv_off_ + plen > recv_capacity(qp.cur_recv_);
        Wc wc;
        wc.wr_id = qp.cur_recv_.wr_id;
        wc.status = too_long ? WcStatus::LocLenErr : WcStatus::LocProtErr;
        wc.opcode = WcOpcode::Recv;
        wc.qp_num = qp.qpn_;
        qp.have_recv_ = false;
        qp.init_.recv_cq->push(wc);
        send_nak_and_error(qp, too_long ? NakCode::InvalidRequest : NakCode::RemoteOperationalError, p.psn);
        return;
      }
      if (pos == Position::Last || pos == Position::Only) {
        Wc wc;
        wc.wr_id = qp.cur_recv_.wr_id;
        wc.opcode = WcOpcode::Recv;
        wc.byte_len = qp.recv_off_;
        wc.qp_num = qp.qpn_;
        wc.src_qp = qp.attr_.dest_qp_num;
        if (info.has(proto::kImmDt)) {
          wc.imm_data = p.imm;
          wc.wc_flags |= kWcWithImm;
        }
        if (info.has(proto::kIeth)) {
          wc.invalidated_rkey = p.ieth_rkey;
          wc.wc_flags |= kWcWithInv;
        }
        qp.have_recv_ = false;
        qp.msn_ = (qp.msn_ + 1) & proto::kPsnMask;
        qp.resp_state_ = RespState::Idle;
        qp.init_.recv_cq->push(wc);
      } else {
        qp.resp_state_ = RespState::InSend;
      }
      break;
    }
    case Operation::Write: {
      if (pos == Position::First || pos == Position::Only) {
        const uint32_t len = p.reth.dma_len;
        if (len != 0) {
          AccessCheck c = check_access(mrs_, p.reth.rkey, qp.init_.pd, p.reth.va, len, kRemoteWrite);
          if (!c.ok || !(qp_access & kRemoteWrite)) {
            send_nak_and_error(qp, NakCode::RemoteAccessError, p.psn);
            return;
          }
          qp.write_host_ = c.host;
        } else {
          qp.write_host_ = nullptr;
        }
        qp.write_left_ = len;
        qp.write_total_ = len;
      }
      const bool ends = pos == Position::Last || pos == Position::Only;
      if (plen > qp.write_left_ || (ends && plen != qp.write_left_)) {
        send_nak_and_error(qp, NakCode::InvalidRequest, p.psn);
        return;
      }
      const bool imm = info.has(proto::kImmDt);
      if (imm && ends && !take_recv(qp)) {
        send_ack(qp, Syndrome::rnr(qp.attr_.min_rnr_timer), p.psn);
        return;
      }
      if (plen) std::memcpy(qp.write_host_, p.payload.data(), plen);
      qp.write_host_ += plen;
      qp.write_left_ -= plen;
      if (ends) {
        if (imm) {
          Wc wc;
          wc.wr_id = qp.cur_recv_.wr_id;
          wc.opcode = WcOpcode::RecvRdmaWithImm;
          wc.imm_data = p.imm;
          wc.wc_flags = kWcWithImm;
          wc.qp_num = qp.qpn_;
          wc.src_qp = qp.attr_.dest_qp_num;
          // byte_len of a WRITE with immediate: the bytes the message wrote.
          wc.byte_len = qp.write_total_;
          qp.have_recv_ = false;
          qp.init_.recv_cq->push(wc);
        }
        qp.msn_ = (qp.msn_ + 1) & proto::kPsnMask;
        qp.resp_state_ = RespState::Idle;
      } else {
        qp.resp_state_ = RespState::InWrite;
      }
      break;
    }
    case Operation::ReadRequest: {
      const uint32_t len = p.reth.dma_len;
      uint8_t* host = nullptr;
      if (len != 0) {
        AccessCheck c = check_access(mrs_, p.reth.rkey, qp.init_.pd, p.reth.va, len, kRemoteRead);
        if (!c.ok || !(qp_access & kRemoteRead)) {
          send_nak_and_error(qp, NakCode::RemoteAccessError, p.psn);
          return;
        }
        host = c.host;
      }
      if (qp.ack_pending_) {  // an ACK for earlier requests goes before the responses
        qp.ack_pending_ = false;
        send_ack(qp, Syndrome::ack(), qp.ack_psn_);
      }
      RdAtomicRes& r = qp.res_[qp.res_next_];
      // A slot still answering its original request means the requester has more READs and
      // atomics outstanding than max_dest_rd_atomic allows. (A slot replaying a duplicate is
      // free: the requester's own limit says it has finished with it.)
      if (r.valid && r.sent < r.npkts && !r.replay) {
        send_nak_and_error(qp, NakCode::InvalidRequest, p.psn);
        return;
      }
      qp.res_next_ = (qp.res_next_ + 1) % uint32_t(qp.res_.size());
      qp.msn_ = (qp.msn_ + 1) & proto::kPsnMask;
      if (r.valid && r.sent < r.npkts) --qp.res_pending_;  // a stale replay gives way
      r = RdAtomicRes{};
      ++qp.res_pending_;
      r.valid = true;
      r.psn = p.psn;
      r.npkts = len == 0 ? 1 : (len + qp.mtu_ - 1) / qp.mtu_;
      r.va = p.reth.va;
      r.host = host;
      r.length = len;
      r.msn = qp.msn_;
      qp.epsn_ = psn_add(qp.epsn_, r.npkts);
      return;  // responses go out from progress(), paced by transmit buffers
    }
    case Operation::CmpSwap:
    case Operation::FetchAdd: {
      const uint64_t va = p.atomic.va;
      AccessCheck c = check_access(mrs_, p.atomic.rkey, qp.init_.pd, va, 8, kRemoteAtomic);
      if (!c.ok || !(qp_access & kRemoteAtomic)) {
        send_nak_and_error(qp, NakCode::RemoteAccessError, p.psn);
        return;
      }
      if (va % 8 != 0) {
        send_nak_and_error(qp, NakCode::InvalidRequest, p.psn);
        return;
      }
      RdAtomicRes& r = qp.res_[qp.res_next_];
      if (r.valid && r.sent < r.npkts && !r.replay) {  // as for READ: too many outstanding
        send_nak_and_error(qp, NakCode::InvalidRequest, p.psn);
        return;
      }
      // Execute: the only place an atomic touches memory. Duplicates are answered from `r`.
      uint64_t cur;
      std::memcpy(&cur, c.host, 8);
      uint64_t next = op == Operation::CmpSwap ? (cur == p.atomic.compare ? p.atomic.swap_add : cur)
                                               : cur + p.atomic.swap_add;
      std::memcpy(c.host, &next, 8);
      if (qp.ack_pending_) {
        qp.ack_pending_ = false;
        send_ack(qp, Syndrome::ack(), qp.ack_psn_);
      }
      qp.res_next_ = (qp.res_next_ + 1) % uint32_t(qp.res_.size());
      qp.msn_ = (qp.msn_ + 1) & proto::kPsnMask;
      if (r.valid && r.sent < r.npkts) --qp.res_pending_;
      r = RdAtomicRes{};
      ++qp.res_pending_;
      r.valid = true;
      r.atomic = true;
      r.psn = p.psn;
      r.npkts = 1;
      r.sent = 0;  // the ATOMIC ACKNOWLEDGE goes out in order with READ responses
      r.orig = cur;
      r.msn = qp.msn_;
      qp.epsn_ = psn_add(qp.epsn_, 1);
      return;
    }
    default:
      return;  // not a request opcode: the dispatcher sends only requests here
  }
  qp.epsn_ = psn_add(qp.epsn_, 1);
  if (p.ack_req) {
    qp.ack_pending_ = true;
    qp.ack_psn_ = p.psn;
  }
}

// A request we have already executed. SEND/WRITE: acknowledge again. READ and atomics:
// answer again from the saved responder resources (an atomic never runs twice).
void Device::on_duplicate(Qp& qp, const proto::Packet& p) {
  const Operation op = p.info().op;
  if (op == Operation::Send || op == Operation::Write) {
    qp.ack_pending_ = true;
    qp.ack_psn_ = psn_add(qp.epsn_, -1);
    return;
  }
  for (RdAtomicRes& r : qp.res_) {
    if (!r.valid) continue;
    const int32_t d = psn_diff(p.psn, r.psn);
    if (d < 0 || uint32_t(d) >= r.npkts) continue;
    if (op == Operation::ReadRequest && !r.atomic) {
      // Re-issued for the rest of the range: answer from that packet on.
      if (r.sent >= r.npkts) ++qp.res_pending_;
      r.sent = r.restart = uint32_t(d);
      r.replay = true;
      return;
    }
    if ((op == Operation::CmpSwap || op == Operation::FetchAdd) && r.atomic && d == 0) {
      if (r.sent >= r.npkts) ++qp.res_pending_;
      r.sent = 0;
      r.replay = true;  // answer again with the saved original value; never execute twice
      return;
    }
  }
  ++qp.ctr_.stale_duplicates;  // nothing saved for it: too old to answer
}

bool Device::responses_pending(const Qp& qp) const {
#ifndef NDEBUG
  uint32_t owed = 0;  // the counter must equal a recount (test builds check it every call)
  for (const RdAtomicRes& r : qp.res_) owed += r.valid && r.sent < r.npkts;
  assert(owed == qp.res_pending_);
#endif
  return qp.res_pending_ != 0;
}

void Device::send_read_responses(Qp& qp) {
  if (qp.res_pending_ == 0) return;  // the common case: nothing owed, no walk of the ring
  const uint32_t n = uint32_t(qp.res_.size());
  namespace op = proto::op;
  // Oldest first, from res_next_ round the ring (no division: this runs on every progress()).
  for (uint32_t i = 0, j = qp.res_next_; i < n; ++i, j = j + 1 == n ? 0 : j + 1) {
    RdAtomicRes& r = qp.res_[j];
    if (!r.valid) continue;
    if (r.atomic) {
      if (r.sent == 0) {
        if (!send_atomic_ack(qp, r)) return;
        r.sent = 1;
        --qp.res_pending_;
      }
      continue;
    }
    if (r.sent >= r.npkts) continue;
    while (r.sent < r.npkts) {
      const uint32_t k = r.sent;
      proto::Packet& p = qp.resp_pkt_;
      const uint32_t off = k * qp.mtu_;
      const uint32_t len = std::min(qp.mtu_, r.length - std::min(r.length, off));
      const bool last = k + 1 == r.npkts;
      const bool first = k == r.restart;
      p.opcode = first && last ? op::kReadRespOnly : first ? op::kReadRespFirst : last ? op::kReadRespLast : op::kReadRespMiddle;
      p.psn = psn_add(r.psn, k);
      p.aeth = {Syndrome::ack().encode(), r.msn};
      p.payload = {r.host ? r.host + off : nullptr, len};
      if (!emit(qp, p)) return;
      ++r.sent;
    }
    --qp.res_pending_;
  }
}

}  // namespace uroce::engine
