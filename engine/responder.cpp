// Responder: checks each request against the expected PSN, the opcode sequence and the MTU,
// answers duplicates, and keeps packets that come after a gap (selective repeat). What passes
// is executed in responder_exec.cpp (memory keys, WRITEs placed, receive WQEs consumed for
// SENDs, READs and atomics); the ACKs (coalesced: one per QP per receive burst), NAKs and
// responses go out from responder_ack.cpp.
//
// on_request() is a loop over RespState (qp.hpp): CHECK_PSN -> CHECK_OP_SEQ -> CHECK_LENGTH
// -> EXEC_SEND | EXEC_WRITE | EXEC_READ | EXEC_ATOMIC, with DUPLICATE and OUT_OF_SEQUENCE
// off CHECK_PSN. It ends in IDLE, RNR_NAK or ERROR.
#include <algorithm>
#include <cassert>
#include <cstring>

#include "engine/dma.hpp"
#include "engine/responder.hpp"
#include "proto/aeth.hpp"
#include "proto/psn.hpp"

namespace uroce::engine::responder {

namespace {

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
  for (uint32_t i = 0; i < r.res.size(); ++i) {  // none before the first READ/atomic
    RdAtomicRes& res = r.res[i];
    if (!res.valid) continue;
    const int32_t d = psn_diff(p.psn, res.psn);
    if (d < 0 || uint32_t(d) >= res.npkts) continue;
    if (op == Operation::ReadRequest && !res.atomic && !res.placement) {
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
    if (((op == Operation::CmpSwap || op == Operation::FetchAdd) && res.atomic && d == 0) ||
        ((op == Operation::AtomicWrite || op == Operation::Flush) && res.placement && d == 0)) {
      if (!res.owes()) ++r.res_pending;
      res.sent = 0;
      res.end = 1;
      res.replay = true;  // answer again (an atomic: with the saved original value), never execute again
      return RespState::Idle;
    }
  }
  ++qp.ctr.stale_duplicates;  // nothing saved for it: too old to answer
  return RespState::Idle;
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
    AccessCheck c = check_remote(dev.mrs(), rkey, qp.rx_pd(), qp.qpn(), va + off, plen, kRemoteWrite);
    if (!c.ok) return false;  // the in-order pass NAKs it, when it comes again
    dma_copy(c.host, p.payload.data(), plen);
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
  if (r.send_store.empty()) r.send_store.assign(size_t(kSlots) * r.store_slot, 0);  // its first use
  h.store_off = (p.psn & (kSlots - 1)) * r.store_slot;
  if (plen) std::memcpy(r.send_store.data() + h.store_off, p.payload.data(), plen);
  h.ieth_rkey = p.ieth_rkey;
  ++r.held_sends;
  return true;
}

// A packet ahead of the expected PSN, with selective repeat on: a WRITE packet whose
// destination is known (hold_write) or any SEND packet (hold_send) is kept. READ requests and
// atomics are not: executed only in order. The requester knows this rule (recovery.cpp,
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
    if (h.valid && h.psn == p.psn) {
      if (!dev.settle_icrc(p)) return;  // to a frame that is not corrupt
      forget(r, h);
    }
  }
  process(dev, qp, p);
  if (r.held_n) replay_held(dev, qp);
  else r.store_overflow = false;  // nothing kept to replay: the gap's own NAK covers it
}

namespace {
// A request the responder cannot take at all: at the expected PSN an invalid request NAK and the
// QP to ERR (IBA 9.7.5.2.2), counted in `counter`; ahead of it a sequence NAK; behind it a duplicate.
void invalid_request(Device& dev, Qp& qp, const proto::Packet& p, uint64_t& counter) {
  RecvSide& r = qp.rx;
  if (r.state == RespState::Error) return;
  const int32_t d = psn_diff(p.psn, r.epsn);
  if (d == 0) {
    ++counter;
    nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  } else if (d > 0) {
    ++qp.ctr.out_of_sequence;
    if (!r.seq_nak_sent) {
      r.seq_nak_sent = true;
      send_ack(dev, qp, Syndrome::nak(NakCode::PsnSequenceError), r.epsn);
    }
  } else {
    ++qp.ctr.duplicate_request;
  }
}
}  // namespace

void on_reserved_opcode(Device& dev, Qp& qp, const proto::Packet& p) { invalid_request(dev, qp, p, qp.ctr.reserved_opcode); }
void on_bad_xrc_srq(Device& dev, Qp& qp, const proto::Packet& p) { invalid_request(dev, qp, p, qp.ctr.xrc_bad_srqn); }

namespace {

// Whether a WRITE or SEND packet whose ICRC is not checked yet (Device::icrc_pending) passes
// every check up to its placement: the expected PSN of an RC QP, inside a message of its kind,
// of a length the message allows; a WRITE into a registration that did not change, a SEND into
// the receive WQE its FIRST took (whose buffers are checked piece by piece as it is placed).
// Then its ICRC is checked as it is placed; any other packet's is checked before the responder
// looks at it, so that nothing a corrupt frame says (its PSN, its length) draws a NAK or moves a
// state.
bool places_unchecked(const Device& dev, const Qp& qp, const proto::Packet& p) {
  const RecvSide& r = qp.rx;
  const uint32_t plen = uint32_t(p.payload.size());
  const bool last = p.info().pos == Position::Last;
  if (qp.init.qp_type != QpType::RC || p.psn != r.epsn || (last ? plen > qp.mtu : plen != qp.mtu)) return false;
  if (p.info().op == Operation::Send) return r.msg == RespMsg::Send && r.have_recv;
  return r.msg == RespMsg::Write && plen <= r.write_left && (!last || plen == r.write_left) &&
         r.write_gen == dev.mrs().gen();
}

void process(Device& dev, Qp& qp, const proto::Packet& p) {
  RecvSide& r = qp.rx;
  if (r.state == RespState::Error) {
    dev.settle_icrc(p);  // a corrupt frame is still counted as one
    return;
  }
  if (dev.icrc_pending() && !places_unchecked(dev, qp, p) && !dev.settle_icrc(p)) return;
  const bool seq_nak_sent = r.seq_nak_sent;  // as it was, if the frame turns out corrupt
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
        if (!r.held.empty() && qp.reliable()) {
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
        else if (op == Operation::AtomicWrite) s = RespState::ExecAtomicWrite;
        else if (op == Operation::Flush) s = RespState::ExecFlush;
        else s = RespState::Idle;  // not a request opcode: the dispatcher sends only requests
        break;
      case RespState::ExecSend:
      case RespState::ExecWrite: {
        s = s == RespState::ExecSend ? exec_send(dev, qp, p) : exec_write(dev, qp, p);
        if (s != RespState::Idle) break;
        r.epsn = psn_add(r.epsn, 1);
        if (qp.reliable() &&
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
      case RespState::ExecAtomicWrite:
        s = exec_atomic_write(dev, qp, p);
        break;
      case RespState::ExecFlush:
        s = exec_flush(dev, qp, p);
        break;
      case RespState::BadIcrc:  // as if it had never come
        r.seq_nak_sent = seq_nak_sent;
        return;
      default:  // Idle, RnrNak, Error
        r.state = s;
        return;
    }
  }
}

}  // namespace

}  // namespace uroce::engine::responder
