// Responder: checks each request against the expected PSN, the opcode sequence, the MTU and
// the memory keys; places WRITEs, consumes receive WQEs for SENDs, answers READs and atomics,
// and acknowledges (coalesced: one ACK per QP per receive burst).
//
// on_request() is a loop over RespState (qp.hpp): CHECK_PSN -> CHECK_OP_SEQ -> CHECK_LENGTH
// -> EXEC_SEND | EXEC_WRITE | EXEC_READ | EXEC_ATOMIC, with DUPLICATE and OUT_OF_SEQUENCE
// off CHECK_PSN. It ends in IDLE, RNR_NAK or ERROR.
#include <algorithm>
#include <cassert>
#include <cstring>

#include "engine/roles.hpp"
#include "engine/sge.hpp"
#include "engine/wc.hpp"
#include "proto/aeth.hpp"
#include "proto/psn.hpp"

namespace uroce::engine::responder {

using proto::NakCode;
using proto::Operation;
using proto::Position;
using proto::psn_add;
using proto::psn_diff;
using proto::Syndrome;

namespace {

// Selective repeat: a kept packet is no longer kept (delivered, superseded, or inside a READ's
// range). A SEND's slot in the reorder store is free again with it.
void forget(RecvSide& r, RecvSide::Held& h) {
  if (h.is_send()) --r.held_sends;
  h.valid = false;
  --r.held_n;
}

void send_ack(Device& dev, Qp& qp, Syndrome s, uint32_t psn) {
  RecvSide& r = qp.rx;
  if (s.kind != proto::AckKind::Ack && r.ack_pending) {
    // A coalesced ACK for earlier packets goes out before a NAK.
    r.ack_pending = false;
    send_ack(dev, qp, Syndrome::ack(), r.ack_psn);
  }
  proto::Packet& p = qp.resp_pkt;
  p.opcode = proto::op::kAck;
  p.payload = {};
  p.psn = psn;
  p.aeth = {s.encode(), r.msn};
  r.unacked = 0;  // any ACK or NAK acknowledges what came before it
  switch (s.kind) {
    case proto::AckKind::Ack: ++qp.ctr.acks_sent; break;
    case proto::AckKind::RnrNak: ++qp.ctr.send_rnr_err; break;
    default:
      if (s.nak_code() == NakCode::PsnSequenceError) ++qp.ctr.out_of_seq_request;
      else ++qp.ctr.other_naks_sent;
      break;
  }
  dev.tx().emit(qp, p);
}

// A coalesced ACK still owed goes out now (before responses to a READ or atomic).
void ack_now(Device& dev, Qp& qp) {
  if (!qp.rx.ack_pending) return;
  qp.rx.ack_pending = false;
  send_ack(dev, qp, Syndrome::ack(), qp.rx.ack_psn);
}

// Before the responses to a new READ or atomic: a coalesced ACK for earlier SEND/WRITEs goes
// out now, unless responses to an earlier READ/atomic are still owed. Those must come first
// (an ACK beyond a READ whose responses have not all come tells the requester they were lost),
// and the new responses acknowledge the earlier requests anyway: the ACK is not needed.
void ack_before_responses(Device& dev, Qp& qp) {
  if (qp.rx.res_pending == 0) ack_now(dev, qp);
  else qp.rx.ack_pending = false;
}

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

// UC's sequence rule (IBA 9.8.3): no NAKs, no duplicates. A FIRST or ONLY at any PSN starts a
// new message there (an unfinished one is discarded, its receive WQE kept for the next one);
// a MIDDLE or LAST out of sequence, or after a discarded packet, is dropped with the rest of
// its message. True: go on checking this packet.
bool uc_check_psn(Qp& qp, const proto::Packet& p) {
  RecvSide& r = qp.rx;
  const Position pos = p.info().pos;
  const bool starts = pos == Position::First || pos == Position::Only;
  if (p.psn != r.epsn) {
    ++qp.ctr.out_of_sequence;
    if (r.msg != RespMsg::None) {  // the rest of the unfinished message was lost
      ++qp.ctr.dropped_messages;
      r.msg = RespMsg::None;
      r.recv_off = 0;
    }
    if (!starts) {
      r.uc_dropping = true;
      r.epsn = psn_add(p.psn, 1);
      return false;
    }
    r.epsn = p.psn;
  } else if (r.uc_dropping && !starts) {
    r.epsn = psn_add(p.psn, 1);
    return false;
  }
  r.uc_dropping = false;
  return true;
}

// Takes the next receive WQE (from the SRQ if the QP has one) for an incoming message.
bool take_recv(Qp& qp) {
  RecvSide& r = qp.rx;
  if (r.have_recv) return true;
  Ring<RecvWqe>& rq = qp.init.srq ? qp.init.srq->rq() : r.rq;
  if (rq.empty()) return false;
  r.cur_recv = rq.front();
  rq.pop();
  r.have_recv = true;
  r.recv_off = 0;
  return true;
}

uint32_t recv_capacity(const RecvWqe& r) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < r.num_sge; ++i) n += r.sge[i].length;
  return uint32_t(std::min<uint64_t>(n, UINT32_MAX));
}

// The responder resource a new READ or atomic takes, or nullptr: the one in turn is still
// answering its original request, so the requester has more READs and atomics outstanding
// than max_dest_rd_atomic allows. (A slot replaying a duplicate is free: the requester's own
// limit says it has finished with it.)
RdAtomicRes* take_res(Qp& qp, uint32_t psn, uint32_t npkts) {
  RecvSide& r = qp.rx;
  RdAtomicRes& res = r.res[r.res_next];
  if (res.owes() && !res.replay) return nullptr;
  r.res_next = r.res_next + 1 == r.res_n ? 0 : r.res_next + 1;
  r.msn = (r.msn + 1) & proto::kPsnMask;
  if (res.owes()) --r.res_pending;  // a stale replay gives way
  res = RdAtomicRes{};
  ++r.res_pending;
  res.valid = true;
  res.psn = psn;
  res.npkts = res.end = npkts;
  res.msn = r.msn;
  r.epsn = psn_add(r.epsn, npkts);
  return &res;
}

// A SEND packet, in order: into the current receive WQE; the last one completes it.
RespState exec_send(Device& dev, Qp& qp, const proto::Packet& p) {
  RecvSide& r = qp.rx;
  const Position pos = p.info().pos;
  const uint32_t plen = uint32_t(p.payload.size());
  if ((pos == Position::First || pos == Position::Only) && !take_recv(qp)) return rnr_nak(dev, qp, p.psn);
  if (sge_scatter_recv(r.cur_recv, dev.mrs(), qp.init.pd, r.recv_off, p.payload.data(), plen) != plen) {
    const bool too_long = r.recv_off + plen > recv_capacity(r.cur_recv);
    r.have_recv = false;
    qp.init.recv_cq->push(recv_wc(qp, r.cur_recv.wr_id, too_long ? WcStatus::LocLenErr : WcStatus::LocProtErr));
    return nak_and_error(dev, qp, too_long ? NakCode::InvalidRequest : NakCode::RemoteOperationalError, p.psn);
  }
  r.recv_off += plen;
  if (pos == Position::Last || pos == Position::Only) {
    Wc wc = recv_wc(qp, r.cur_recv.wr_id, WcStatus::Success);
    wc.byte_len = r.recv_off;
    if (p.info().has(proto::kImmDt)) {
      wc.imm_data = p.imm;
      wc.wc_flags |= kWcWithImm;
    }
    if (p.info().has(proto::kIeth)) {
      wc.invalidated_rkey = p.ieth_rkey;
      wc.wc_flags |= kWcWithInv;
    }
    r.have_recv = false;
    r.msn = (r.msn + 1) & proto::kPsnMask;
    r.msg = RespMsg::None;
    qp.init.recv_cq->push(wc);
    ++qp.ctr.rdma_recvs;
  } else {
    r.msg = RespMsg::Send;
  }
  return RespState::Idle;
}

// A WRITE packet, in order: the first one checks the key for the whole RETH range; later
// ones check it again if an MR was deregistered meanwhile (so a deregistered MR stops the
// message at once: NAK remote access error).
RespState exec_write(Device& dev, Qp& qp, const proto::Packet& p) {
  RecvSide& r = qp.rx;
  const Position pos = p.info().pos;
  const uint32_t plen = uint32_t(p.payload.size());
  const MrTable& mrs = dev.mrs();
  if (pos == Position::First || pos == Position::Only) {
    const uint32_t len = p.reth.dma_len;
    r.write_host = nullptr;
    if (len != 0) {
      AccessCheck c = check_remote(mrs, r.rkeys, p.reth.rkey, qp.init.pd, p.reth.va, len, kRemoteWrite);
      if (!c.ok || !(qp.attrs.qp_access_flags & kRemoteWrite))
        return nak_and_error(dev, qp, NakCode::RemoteAccessError, p.psn);
      r.write_host = c.host;
    }
    r.write_left = r.write_total = len;
    r.write_rkey = p.reth.rkey;
    r.write_va = r.write_va0 = p.reth.va;
    r.write_first = p.psn;
    r.write_gen = mrs.gen();
  }
  const bool ends = pos == Position::Last || pos == Position::Only;
  if (plen > r.write_left || (ends && plen != r.write_left))
    return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  if (plen && r.write_gen != mrs.gen()) {
    AccessCheck c = check_remote(mrs, r.write_rkey, qp.init.pd, r.write_va, r.write_left, kRemoteWrite);
    if (!c.ok) return nak_and_error(dev, qp, NakCode::RemoteAccessError, p.psn);
    r.write_host = c.host;
    r.write_gen = mrs.gen();
  }
  const bool imm = p.info().has(proto::kImmDt);
  if (imm && ends && !take_recv(qp)) return rnr_nak(dev, qp, p.psn);
  if (plen && !r.replaying) std::memcpy(r.write_host, p.payload.data(), plen);  // a held one is in place
  r.write_host += plen;
  r.write_va += plen;
  r.write_left -= plen;
  if (!ends) {
    r.msg = RespMsg::Write;
    return RespState::Idle;
  }
  if (imm) {
    Wc wc = recv_wc(qp, r.cur_recv.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm);
    wc.imm_data = p.imm;
    wc.wc_flags = kWcWithImm;
    wc.byte_len = r.write_total;  // byte_len of a WRITE with immediate: the bytes it wrote
    r.have_recv = false;
    qp.init.recv_cq->push(wc);
    ++qp.ctr.rdma_recvs;
  }
  r.msn = (r.msn + 1) & proto::kPsnMask;
  r.msg = RespMsg::None;
  return RespState::Idle;
}

// A READ request: checked, then answered from progress() (paced by transmit buffers).
RespState exec_read(Device& dev, Qp& qp, const proto::Packet& p) {
  const uint32_t len = p.reth.dma_len;
  // No message is longer than 2^31 bytes (and the response PSNs must stay inside the window).
  if (len > param::kMaxMessage) return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  uint8_t* host = nullptr;
  if (len != 0) {
    AccessCheck c = check_remote(dev.mrs(), p.reth.rkey, qp.init.pd, p.reth.va, len, kRemoteRead);
    if (!c.ok || !(qp.attrs.qp_access_flags & kRemoteRead))
      return nak_and_error(dev, qp, NakCode::RemoteAccessError, p.psn);
    host = c.host;
  }
  ack_before_responses(dev, qp);
  const uint32_t npkts = len == 0 ? 1 : uint32_t((uint64_t(len) + qp.mtu - 1) / qp.mtu);
  RdAtomicRes* res = take_res(qp, p.psn, npkts);
  if (!res) return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  res->va = p.reth.va;
  res->rkey = p.reth.rkey;
  res->host = host;
  res->mr_gen = dev.mrs().gen();
  res->length = len;
  // Selective repeat: nothing held inside the range the READ's responses take.
  for (uint32_t i = 1; i < std::min(npkts, param::kSelectiveRepeatWindow) && qp.rx.held_n; ++i) {
    RecvSide::Held& h = qp.rx.held[psn_add(p.psn, int32_t(i)) & (param::kSelectiveRepeatWindow - 1)];
    if (h.valid && h.psn == psn_add(p.psn, int32_t(i))) forget(qp.rx, h);
  }
  return RespState::Idle;
}

// An atomic: the only place one touches memory. Duplicates are answered from the saved
// resource, never executed twice.
RespState exec_atomic(Device& dev, Qp& qp, const proto::Packet& p) {
  const uint64_t va = p.atomic.va;
  AccessCheck c = check_remote(dev.mrs(), p.atomic.rkey, qp.init.pd, va, 8, kRemoteAtomic);
  if (!c.ok || !(qp.attrs.qp_access_flags & kRemoteAtomic))
    return nak_and_error(dev, qp, NakCode::RemoteAccessError, p.psn);
  if (va % 8 != 0) return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  const RdAtomicRes& next = qp.rx.res[qp.rx.res_next];
  if (next.owes() && !next.replay) return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  uint64_t cur;
  std::memcpy(&cur, c.host, 8);
  const uint64_t val = p.info().op == Operation::CmpSwap ? (cur == p.atomic.compare ? p.atomic.swap_add : cur)
                                                         : cur + p.atomic.swap_add;
  std::memcpy(c.host, &val, 8);
  ack_before_responses(dev, qp);
  RdAtomicRes* res = take_res(qp, p.psn, 1);  // the ATOMIC ACKNOWLEDGE goes out in order with READ responses
  res->atomic = true;
  res->orig = cur;
  return RespState::Idle;
}

// A request we have already executed. SEND/WRITE: acknowledge again. READ and atomics:
// answer again from the saved responder resources (an atomic never runs twice).
RespState duplicate(Qp& qp, const proto::Packet& p) {
  RecvSide& r = qp.rx;
  const Operation op = p.info().op;
  if (op == Operation::Send || op == Operation::Write) {
    r.ack_pending = true;
    r.ack_psn = psn_add(r.epsn, -1);
    return RespState::Idle;
  }
  for (uint32_t i = 0; i < r.res_n; ++i) {
    RdAtomicRes& res = r.res[i];
    if (!res.valid) continue;
    const int32_t d = psn_diff(p.psn, res.psn);
    if (d < 0 || uint32_t(d) >= res.npkts) continue;
    if (op == Operation::ReadRequest && !res.atomic) {
      // Re-issued for the rest of the range (or, from a requester using selective repeat, a
      // part of it: its RETH names the same key, the address of that packet and a shorter
      // length): answer from that packet on, to the end of what it asks for.
      uint32_t end = res.npkts;
      if (p.reth.rkey == res.rkey && p.reth.va == res.va + uint64_t(d) * qp.mtu) {
        const uint32_t n = p.reth.dma_len == 0 ? 1 : uint32_t((uint64_t(p.reth.dma_len) + qp.mtu - 1) / qp.mtu);
        if (n < res.npkts - uint32_t(d)) end = uint32_t(d) + n;
      }
      // What was still owed beyond the part goes out after it.
      uint32_t cont = res.owes() ? res.sent : res.npkts, cont_end = res.owes() ? res.end : 0;
      if (res.resume) {
        cont = std::min(cont, res.resume);
        cont_end = std::max(cont_end, res.resume_end);
      }
      cont = std::max(cont, end);
      res.resume = cont < cont_end ? cont : 0;
      res.resume_end = cont_end;
      if (!res.owes()) ++r.res_pending;
      res.sent = res.restart = uint32_t(d);
      res.end = end;
      res.replay = true;
      return RespState::Idle;
    }
    if ((op == Operation::CmpSwap || op == Operation::FetchAdd) && res.atomic && d == 0) {
      if (!res.owes()) ++r.res_pending;
      res.sent = 0;
      res.end = 1;
      res.replay = true;  // answer again with the saved original value
      return RespState::Idle;
    }
  }
  ++qp.ctr.stale_duplicates;  // nothing saved for it: too old to answer
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
  p.opcode = proto::op::kAtomicAck;
  p.payload = {};
  p.psn = r.psn;
  p.aeth = {Syndrome::ack().encode(), r.msn};
  p.atomic_ack_orig = r.orig;
  return dev.tx().emit(qp, p);
}

// ---- Selective repeat (docs/reliability.md) ------------------------------------------------
constexpr uint32_t kSrMask = param::kSelectiveRepeatWindow - 1;

enum class Ahead : uint8_t {
  Held,     // placed and kept
  Have,     // kept already (a resend or a probe)
  Dropped,  // not kept: its place is not known, it fails a check, or no room; it comes again
};

// A WRITE packet ahead of the expected PSN: kept only when its destination is known, a FIRST
// or ONLY (its RETH), or a MIDDLE or LAST of a message whose FIRST came (kept here, or the
// message in progress in order); its offset in the message follows from its PSN. The key is
// checked for exactly the bytes this packet writes, then they are placed at once; the in-order
// pass later checks the message as a whole again. False: not kept (it comes again).
bool hold_write(Device& dev, Qp& qp, const proto::Packet& p, RecvSide::Held& h) {
  RecvSide& r = qp.rx;
  const Position pos = p.info().pos;
  const uint32_t plen = uint32_t(p.payload.size());
  if (plen > qp.mtu || ((pos == Position::First || pos == Position::Middle) && plen != qp.mtu)) return false;
  // The message's first PSN and RETH.
  uint32_t first = 0, rkey = 0, len = 0;
  uint64_t va = 0;
  if (pos == Position::First || pos == Position::Only) {
    first = p.psn;
    va = p.reth.va;
    rkey = p.reth.rkey;
    len = p.reth.dma_len;
  } else {
    bool found = false;  // the nearest kept packet before this one: of the same message?
    for (uint32_t q = psn_add(p.psn, -1); q != r.epsn; q = psn_add(q, -1)) {
      const RecvSide::Held& e = r.held[q & kSrMask];
      if (!e.valid || e.psn != q) continue;
      if (e.is_send()) return false;  // a SEND between: this WRITE's FIRST was lost
      first = e.msg_first;
      va = e.va;
      rkey = e.rkey;
      len = e.dma_len;
      found = true;
      break;
    }
    if (!found) {
      if (r.msg != RespMsg::Write) return false;  // its FIRST has not come
      first = r.write_first;  // the message in progress
      va = r.write_va0;
      rkey = r.write_rkey;
      len = r.write_total;
    }
  }
  const int32_t idx = psn_diff(p.psn, first);
  const uint32_t npkts = len == 0 ? 1 : uint32_t((uint64_t(len) + qp.mtu - 1) / qp.mtu);
  if (idx < 0 || uint32_t(idx) >= npkts) return false;  // another message, its FIRST lost
  const bool is_first = idx == 0, is_last = uint32_t(idx) + 1 == npkts;
  const Position want = is_first && is_last ? Position::Only
                        : is_first          ? Position::First
                        : is_last           ? Position::Last
                                            : Position::Middle;
  const uint64_t off = uint64_t(idx) * qp.mtu;
  if (pos != want || (is_last && plen != len - off)) return false;
  if (plen) {
    if (!(qp.attrs.qp_access_flags & kRemoteWrite)) return false;
    AccessCheck c = check_remote(dev.mrs(), rkey, qp.init.pd, va + off, plen, kRemoteWrite);
    if (!c.ok) return false;  // the in-order pass NAKs it, when it comes again
    std::memcpy(c.host, p.payload.data(), plen);
  }
  h.msg_first = first;
  h.va = va;
  h.rkey = rkey;
  h.dma_len = len;
  return true;
}

// A SEND packet ahead of the expected PSN. Which receive WQE it belongs to and at which offset
// is not known yet (the lost packets before it may end a message, or start one), so nothing is
// checked against a receive WQE or a registration here: its payload is copied into the reorder
// store, and the in-order pass does all of that when the gap is filled, exactly as for a packet
// that has just arrived. False: not kept (it comes again): its length cannot be right, or it is
// beyond the store's reach.
bool hold_send(Qp& qp, const proto::Packet& p, RecvSide::Held& h) {
  RecvSide& r = qp.rx;
  const Position pos = p.info().pos;
  const uint32_t plen = uint32_t(p.payload.size());
  if (plen > qp.mtu || ((pos == Position::First || pos == Position::Middle) && plen != qp.mtu)) return false;
  // The store reaches kSelectiveRepeatSendSlots PSNs from the expected one, PSN p in slot p
  // modulo that: every PSN in reach has its own slot. A SEND packet beyond it (a send window
  // above the default) is dropped, and the answer after the gap is filled says so (replay_held).
  constexpr uint32_t kSlots = param::kSelectiveRepeatSendSlots;
  static_assert((kSlots & (kSlots - 1)) == 0 && kSlots <= param::kSelectiveRepeatWindow);
  if (uint32_t(psn_diff(p.psn, r.epsn)) >= kSlots || plen > r.store_slot) {
    r.store_overflow = true;
    return false;
  }
  h.store_off = (p.psn & (kSlots - 1)) * r.store_slot;
  if (plen) std::memcpy(r.send_store.data() + h.store_off, p.payload.data(), plen);
  h.ieth_rkey = p.ieth_rkey;
  ++r.held_sends;
  return true;
}

// A packet ahead of the expected PSN, with selective repeat on: a WRITE packet whose
// destination is known (hold_write) or any SEND packet (hold_send) is kept. READ requests and
// atomics are not: executed only in order. The requester knows this rule (requester.cpp,
// resend_end) and resends those with the gap.
Ahead hold(Device& dev, Qp& qp, const proto::Packet& p) {
  RecvSide& r = qp.rx;
  const int32_t d = psn_diff(p.psn, r.epsn);
  if (d <= 0 || uint32_t(d) >= param::kSelectiveRepeatWindow) return Ahead::Dropped;
  RecvSide::Held& h = r.held[p.psn & kSrMask];
  if (h.valid && h.psn == p.psn) return Ahead::Have;
  const Operation op = p.info().op;
  const bool kept = op == Operation::Send    ? hold_send(qp, p, h)
                    : op == Operation::Write ? hold_write(dev, qp, p, h)
                                             : false;
  if (!kept) return Ahead::Dropped;
  h.valid = true;
  h.opcode = p.opcode;
  h.ack_req = p.ack_req;
  h.solicited = p.solicited;
  h.psn = p.psn;
  h.plen = uint32_t(p.payload.size());
  h.imm = p.imm;
  ++r.held_n;
  ++qp.ctr.sr_held;
  return Ahead::Held;
}

void process(Device& dev, Qp& qp, const proto::Packet& p);

// After an in-order packet: the held packets that now follow in order go through the in-order
// pass (checks, receive WQEs, completions, the MSN) as if they had just arrived: a WRITE
// without copying (its bytes are in place), a SEND from the reorder store into its receive WQE.
// The pass stops where it would for a new packet: an RNR NAK (no receive WQE: the requester
// sends that packet again, and the packets kept after it stay kept), or a NAK and the error
// state (an invalid request: nothing kept after it is delivered). Otherwise one answer: the
// ACK up to the new expected PSN, or, if packets beyond a further gap are held (or SEND
// packets beyond the reorder store's reach were dropped: the requester cannot know), the
// sequence NAK for the new expected PSN (it acknowledges everything before it; sent once).
void replay_held(Device& dev, Qp& qp) {
  RecvSide& r = qp.rx;
  bool replayed = false;
  while (r.held_n && r.state == RespState::Idle) {
    RecvSide::Held& h = r.held[r.epsn & kSrMask];
    if (!h.valid || h.psn != r.epsn) break;
    proto::Packet q;
    q.opcode = h.opcode;
    q.psn = h.psn;
    q.ack_req = h.ack_req;
    q.solicited = h.solicited;
    q.imm = h.imm;
    q.ieth_rkey = h.ieth_rkey;
    if (q.opcode == proto::op::kWriteFirst || q.opcode == proto::op::kWriteOnly || q.opcode == proto::op::kWriteOnlyImm)
      q.reth = {h.va, h.rkey, h.dma_len};
    if (h.is_send()) q.payload = {r.send_store.data() + h.store_off, h.plen};
    else q.payload = {static_cast<const uint8_t*>(nullptr), h.plen};  // the bytes are in place
    forget(r, h);  // (its bytes in the store stay until the slot is taken again)
    r.replaying = true;
    process(dev, qp, q);
    r.replaying = false;
    replayed = true;
  }
  if (!replayed || r.state != RespState::Idle) return;
  const bool missing = r.held_n || r.store_overflow;
  r.store_overflow = false;
  if (missing && r.res_pending == 0) {
    r.ack_pending = false;  // the NAK acknowledges it
    r.seq_nak_sent = true;
    send_ack(dev, qp, Syndrome::nak(NakCode::PsnSequenceError), r.epsn);
  } else {
    r.ack_pending = true;
    r.ack_psn = psn_add(r.epsn, -1);
  }
}

}  // namespace

void on_request(Device& dev, Qp& qp, const proto::Packet& p) {
  RecvSide& r = qp.rx;
  if (r.held.empty()) return process(dev, qp, p);  // selective repeat off
  if (p.psn == r.epsn) {  // a held copy of this PSN (a stale or forged one) gives way
    RecvSide::Held& h = r.held[p.psn & kSrMask];
    if (h.valid && h.psn == p.psn) forget(r, h);
  }
  process(dev, qp, p);
  if (r.held_n) replay_held(dev, qp);
  else r.store_overflow = false;  // nothing kept to replay: the gap's own NAK covers it
}

namespace {

void process(Device& dev, Qp& qp, const proto::Packet& p) {
  RecvSide& r = qp.rx;
  if (r.state == RespState::Error) return;
  const proto::OpcodeInfo& info = p.info();
  const Operation op = info.op;
  const Position pos = info.pos;
  const uint32_t plen = uint32_t(p.payload.size());
  RespState s = RespState::CheckPsn;
  for (;;) {
    switch (s) {
      case RespState::CheckPsn: {
        if (qp.init.qp_type == QpType::UC) {
          s = uc_check_psn(qp, p) ? RespState::CheckOpSeq : RespState::Idle;
          break;
        }
        const int32_t d = psn_diff(p.psn, r.epsn);
        s = d < 0 ? RespState::Duplicate : d > 0 ? RespState::OutOfSequence : RespState::CheckOpSeq;
        break;
      }
      case RespState::Duplicate:
        ++qp.ctr.duplicate_request;
        s = duplicate(qp, p);
        break;
      case RespState::OutOfSequence:
        // A gap: one PSN sequence NAK, then silence until the expected PSN arrives.
        ++qp.ctr.out_of_sequence;
        if (!r.held.empty() && qp.init.qp_type == QpType::RC) {
          // Selective repeat: kept if its place is known. A resend or probe of one we keep
          // asks for an answer: the NAK for the gap again (its first one may have been lost).
          const Ahead a = hold(dev, qp, p);
          if (!r.seq_nak_sent || (a == Ahead::Have && p.ack_req)) {
            r.seq_nak_sent = true;
            send_ack(dev, qp, Syndrome::nak(NakCode::PsnSequenceError), r.epsn);
          }
        } else if (!r.seq_nak_sent) {
          r.seq_nak_sent = true;
          send_ack(dev, qp, Syndrome::nak(NakCode::PsnSequenceError), r.epsn);
        }
        s = RespState::Idle;
        break;
      case RespState::CheckOpSeq: {
        r.seq_nak_sent = false;
        // MIDDLE and LAST only inside a message of the same kind, and nothing else inside one.
        const bool continues = pos == Position::Middle || pos == Position::Last;
        const bool ok = r.msg == RespMsg::Send    ? op == Operation::Send && continues
                        : r.msg == RespMsg::Write ? op == Operation::Write && continues
                                                  : !continues;
        s = ok ? RespState::CheckLength : nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
        break;
      }
      case RespState::CheckLength:
        // FIRST and MIDDLE carry exactly one MTU, nothing carries more.
        if (plen > qp.mtu || ((pos == Position::First || pos == Position::Middle) && plen != qp.mtu))
          s = nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
        else if (op == Operation::Send) s = RespState::ExecSend;
        else if (op == Operation::Write) s = RespState::ExecWrite;
        else if (op == Operation::ReadRequest) s = RespState::ExecRead;
        else if (op == Operation::CmpSwap || op == Operation::FetchAdd) s = RespState::ExecAtomic;
        else s = RespState::Idle;  // not a request opcode: the dispatcher sends only requests
        break;
      case RespState::ExecSend:
      case RespState::ExecWrite: {
        s = s == RespState::ExecSend ? exec_send(dev, qp, p) : exec_write(dev, qp, p);
        if (s != RespState::Idle) break;
        r.epsn = psn_add(r.epsn, 1);
        if (qp.init.qp_type == QpType::RC &&
            (p.ack_req || (dev.config().ack_every && ++r.unacked >= dev.config().ack_every))) {
          r.ack_pending = true;
          r.ack_psn = p.psn;
        }
        break;
      }
      case RespState::ExecRead:
        s = exec_read(dev, qp, p);  // the expected PSN moves past the whole response range
        break;
      case RespState::ExecAtomic:
        s = exec_atomic(dev, qp, p);
        break;
      default:  // Idle, RnrNak, Error
        r.state = s;
        return;
    }
  }
}

}  // namespace

// A UD datagram (SEND ONLY, with or without immediate): the Q_Key, a receive WQE, then the
// 40-byte GRH area (the IPv6 header, or 20 zero bytes and the IPv4 header, as rxe and ConnectX
// write it) and the payload. No PSN checks, no acknowledgement; what cannot be received is a
// counted drop or an error completion, never a change of the QP's state.
void on_datagram(Device& dev, Qp& qp, const proto::Packet& p) {
  RecvSide& r = qp.rx;
  if (p.deth.qkey != qp.attrs.qkey) {
    ++qp.ctr.dropped_qkey;
    return;
  }
  if (!take_recv(qp)) {
    ++qp.ctr.dropped_no_recv;
    return;
  }
  r.have_recv = false;
  const RecvWqe& w = r.cur_recv;
  const uint32_t plen = uint32_t(p.payload.size());
  if (param::kGrhBytes + plen > recv_capacity(w)) {
    qp.init.recv_cq->push(recv_wc(qp, w.wr_id, WcStatus::LocLenErr));
    return;
  }
  uint8_t grh[param::kGrhBytes] = {};
  if (p.ip_version == 6) std::memcpy(grh, p.ip_header.data(), std::min<size_t>(p.ip_header.size(), 40));
  else std::memcpy(grh + 20, p.ip_header.data(), std::min<size_t>(p.ip_header.size(), 20));
  const MrTable& mrs = dev.mrs();
  if (sge_scatter_recv(w, mrs, qp.init.pd, 0, grh, param::kGrhBytes) != param::kGrhBytes ||
      sge_scatter_recv(w, mrs, qp.init.pd, param::kGrhBytes, p.payload.data(), plen) != plen) {
    qp.init.recv_cq->push(recv_wc(qp, w.wr_id, WcStatus::LocProtErr));
    return;
  }
  Wc wc = recv_wc(qp, w.wr_id, WcStatus::Success);
  wc.byte_len = param::kGrhBytes + plen;
  wc.wc_flags = kWcGrh;
  wc.src_qp = p.deth.src_qp;
  wc.pkey_index = 0;
  wc.ip_version = p.ip_version;
  if (p.info().has(proto::kImmDt)) {
    wc.imm_data = p.imm;
    wc.wc_flags |= kWcWithImm;
  }
  qp.init.recv_cq->push(wc);
  ++qp.ctr.rdma_recvs;
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
      AccessCheck c = check_remote(mrs, r.rkey, qp.init.pd, r.va, r.length, kRemoteRead);
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
      p.opcode = first && last ? op::kReadRespOnly : first ? op::kReadRespFirst : last ? op::kReadRespLast : op::kReadRespMiddle;
      p.psn = psn_add(r.psn, k);
      p.aeth = {Syndrome::ack().encode(), r.msn};
      p.payload = {r.host ? r.host + off : nullptr, len};
      if (!dev.tx().emit(qp, p)) return;
      ++r.sent;
      --budget;
      if (r.replay) ++qp.ctr.replayed_responses;
    }
    --rs.res_pending;
  }
}

}  // namespace uroce::engine::responder
