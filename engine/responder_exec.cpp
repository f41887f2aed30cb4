// The responder's execution of requests that passed the checks (responder.cpp): a SEND into
// a receive WQE, a WRITE into memory, a READ into a responder resource (answered later from
// progress(), responder_ack.cpp), an atomic; and a UD datagram (no PSN checks, no answer).
#include <algorithm>
#include <cstring>

#include "engine/dma.hpp"
#include "engine/responder.hpp"
#include "engine/sge.hpp"
#include "engine/wc.hpp"
#include "proto/aeth.hpp"
#include "proto/psn.hpp"

namespace uroce::engine::responder {

namespace {

// Takes the next receive WQE (from the SRQ if the QP has one) for an incoming message.
bool take_recv(Qp& qp) {
  RecvSide& r = qp.rx;
  if (r.have_recv) return true;
  RecvRing& rq = qp.rx_srq() ? qp.rx_srq()->rq() : r.rq;
  if (rq.empty()) return false;
  const RecvRing::Posted& f = rq.front();
  r.cur_recv.wr_id = f.wr_id;
  r.cur_recv.num_sge = f.num_sge;
  std::copy_n(rq.front_sge(), f.num_sge, r.cur_sge.data());
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
  RdAtomicRes& res = r.next_res();
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

}  // namespace

// A SEND packet, in order: into the current receive WQE; the last one completes it.
RespState exec_send(Device& dev, Qp& qp, const proto::Packet& p) {
  RecvSide& r = qp.rx;
  const Position pos = p.info().pos;
  const uint32_t plen = uint32_t(p.payload.size());
  if ((pos == Position::First || pos == Position::Only) && !take_recv(qp)) return rnr_nak(dev, qp, p.psn);
  uint32_t placed = 0;  // checked as it is placed, if its ICRC is not yet (Device::place_payload)
  if (!dev.place_send_payload(r.cur_recv, qp.rx_pd(), r.recv_off, p, placed)) return RespState::BadIcrc;
  if (placed != plen) {
    const bool too_long = r.recv_off + plen > recv_capacity(r.cur_recv);
    r.have_recv = false;
    qp.rx_cq()->push(recv_wc(qp, r.cur_recv.wr_id, too_long ? WcStatus::LocLenErr : WcStatus::LocProtErr));
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
      // SEND with Invalidate: the memory window it names is invalidated before the receive
      // completes. A key that names no bound type 2 window of this QP is an invalid request:
      // the receive completes with REM_INV_REQ_ERR (as rxe's), the NAK goes back, and the QP
      // goes to ERR (rxe ACKs the SEND all the same).
      if (!local_ops::remote_invalidate(dev, qp, p.ieth_rkey)) {
        r.have_recv = false;
        qp.rx_cq()->push(recv_wc(qp, r.cur_recv.wr_id, WcStatus::RemInvReqErr));
        return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
      }
      wc.invalidated_rkey = p.ieth_rkey;
      wc.wc_flags |= kWcWithInv;
    }
    r.have_recv = false;
    r.msn = (r.msn + 1) & proto::kPsnMask;
    r.msg = RespMsg::None;
    qp.rx_cq()->push(wc);
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
      AccessCheck c = check_remote(mrs, r.rkeys, p.reth.rkey, qp.rx_pd(), qp.qpn(), p.reth.va, len, kRemoteWrite);
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
    AccessCheck c = check_remote(mrs, r.write_rkey, qp.rx_pd(), qp.qpn(), r.write_va, r.write_left, kRemoteWrite);
    if (!c.ok) return nak_and_error(dev, qp, NakCode::RemoteAccessError, p.psn);
    r.write_host = c.host;
    r.write_gen = mrs.gen();
  }
  const bool imm = p.info().has(proto::kImmDt);
  if (imm && ends && !take_recv(qp)) return rnr_nak(dev, qp, p.psn);
  // A held one is in place; a new one may be checked as it is placed (Device::place_payload).
  if (plen && !r.replaying && !dev.place_payload(r.write_host, p)) return RespState::BadIcrc;
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
    qp.rx_cq()->push(wc);
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
    AccessCheck c = check_remote(dev.mrs(), p.reth.rkey, qp.rx_pd(), qp.qpn(), p.reth.va, len, kRemoteRead);
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
  AccessCheck c = check_remote(dev.mrs(), p.atomic.rkey, qp.rx_pd(), qp.qpn(), va, 8, kRemoteAtomic);
  if (!c.ok || !(qp.attrs.qp_access_flags & kRemoteAtomic))
    return nak_and_error(dev, qp, NakCode::RemoteAccessError, p.psn);
  if (va % 8 != 0) return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  if (!qp.rx.next_res_free()) return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  uint64_t cur;
  dma_copy(&cur, c.host, 8);
  const uint64_t val = p.info().op == Operation::CmpSwap ? (cur == p.atomic.compare ? p.atomic.swap_add : cur)
                                                         : cur + p.atomic.swap_add;
  dma_copy(c.host, &val, 8);
  ack_before_responses(dev, qp);
  RdAtomicRes* res = take_res(qp, p.psn, 1);  // the ATOMIC ACKNOWLEDGE goes out in order with READ responses
  res->atomic = true;
  res->orig = cur;
  return RespState::Idle;
}

// ATOMIC WRITE and FLUSH (IBA 1.5 annex A19) take a responder resource as a READ does: their
// answer, an RDMA READ response with no payload, goes out in order with READ responses and
// atomic ACKs, and a duplicate is answered again from it without executing twice.
namespace {
RespState take_placement_res(Device& dev, Qp& qp, const proto::Packet& p) {
  ack_before_responses(dev, qp);
  RdAtomicRes* res = take_res(qp, p.psn, 1);
  res->placement = true;  // length 0: the response carries nothing
  return RespState::Idle;
}

// Checked before anything is placed: a new request while the resource in turn still answers
// its own (more outstanding than max_dest_rd_atomic).
bool res_free(const Qp& qp) { return qp.rx.next_res_free(); }
}  // namespace

// An ATOMIC WRITE: 8 bytes, to an 8-byte aligned address the R_Key opens for remote write,
// placed as one store. The RETH says 8 and the packet carries 8 (rxe's check_rkey), else an
// invalid request; a misaligned address is one too (rxe: RESPST_ERR_MISALIGNED_ATOMIC).
RespState exec_atomic_write(Device& dev, Qp& qp, const proto::Packet& p) {
  if (p.payload.size() != 8 || p.reth.dma_len != 8) return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  AccessCheck c = check_remote(dev.mrs(), p.reth.rkey, qp.rx_pd(), qp.qpn(), p.reth.va, 8, kRemoteWrite);
  if (!c.ok || !(qp.attrs.qp_access_flags & kRemoteWrite))
    return nak_and_error(dev, qp, NakCode::RemoteAccessError, p.psn);
  if (p.reth.va % 8 != 0) return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  if (!res_free(qp)) return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  dma_store8(c.host, p.payload.data());
  ++qp.ctr.atomic_writes;
  return take_placement_res(dev, qp, p);
}

// A FLUSH: the placement types it names must be granted by the QP (else an invalid request, as
// rxe's check_qp_attr_access) and by the memory region its R_Key names (else a remote access
// error); selectivity "range" checks the RETH's range against the region, "memory region"
// takes the whole region. Every earlier request was executed before this one (in order; WRITE
// packets kept ahead of a gap were placed at once), so what it makes visible or persistent
// includes all the WRITEs before it: the ordering IBA 1.5 asks of a FLUSH.
RespState exec_flush(Device& dev, Qp& qp, const proto::Packet& p) {
  const uint8_t type = p.feth.placement, level = p.feth.selectivity;
  if ((type & ~uint32_t(kFlushToGlobal | kFlushToPersistence)) || level > kFlushMr)
    return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);  // reserved placement or selectivity
  const uint32_t need = ((type & kFlushToGlobal) ? uint32_t(kFlushGlobal) : 0u) |
                        ((type & kFlushToPersistence) ? uint32_t(kFlushPersistent) : 0u);
  if ((qp.attrs.qp_access_flags & need) != need) return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  const Mr* mr = dev.mrs().by_rkey(p.reth.rkey);
  if (!mr || mr->pd != qp.rx_pd() || (mr->access & need) != need)
    return nak_and_error(dev, qp, NakCode::RemoteAccessError, p.psn);
  const uint8_t* host = mr->host;
  uint64_t len = mr->length;
  if (level == kFlushRange) {
    if (p.reth.dma_len > param::kMaxMessage) return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
    const AccessCheck c = check_mr(mr, qp.rx_pd(), p.reth.va, p.reth.dma_len, need);
    if (!c.ok) return nak_and_error(dev, qp, NakCode::RemoteAccessError, p.psn);
    host = c.host;
    len = p.reth.dma_len;
  }
  if (!res_free(qp)) return nak_and_error(dev, qp, NakCode::InvalidRequest, p.psn);
  if (type & kFlushToPersistence) dma_writeback(host, len);
  else dma_visible();
  ++qp.ctr.flushes;
  return take_placement_res(dev, qp, p);
}

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
    qp.rx_cq()->push(recv_wc(qp, w.wr_id, WcStatus::LocLenErr));
    return;
  }
  uint8_t grh[param::kGrhBytes] = {};
  if (p.ip_version == 6) std::memcpy(grh, p.ip_header.data(), std::min<size_t>(p.ip_header.size(), 40));
  else std::memcpy(grh + 20, p.ip_header.data(), std::min<size_t>(p.ip_header.size(), 20));
  const MrTable& mrs = dev.mrs();
  if (sge_scatter_recv(w, mrs, qp.rx_pd(), 0, grh, param::kGrhBytes) != param::kGrhBytes ||
      sge_scatter_recv(w, mrs, qp.rx_pd(), param::kGrhBytes, p.payload.data(), plen) != plen) {
    qp.rx_cq()->push(recv_wc(qp, w.wr_id, WcStatus::LocProtErr));
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
  qp.rx_cq()->push(wc);
  ++qp.ctr.rdma_recvs;
}

}  // namespace uroce::engine::responder
