// Posting work requests: checked and copied into the send or receive queue; nothing is sent
// here (the requester does that from progress()).
#include <cerrno>
#include <cstring>

#include "engine/roles.hpp"
#include "proto/multicast.hpp"

namespace uroce::engine {

int Device::post_send(Qp* qp, const SendWr& wr) {
  if (!qp) return EINVAL;
  const QpState s = qp->attrs.qp_state;
  if (s == QpState::Reset || s == QpState::Init || s == QpState::Rtr) return EINVAL;
  if (wr.num_sge > kMaxSge) return EINVAL;
  const QpType type = qp->init.qp_type;
  if (type == QpType::XrcTgt) return EINVAL;  // a target QP has no send queue
  // An initiator's messages name their XRC SRQ in 24 bits (any: a ConnectX target numbers its
  // SRQs as it will; a number no SRQ has is the target's invalid request).
  if (type == QpType::XrcIni && wr.xrc_srqn > 0xFFFFFF) return EINVAL;
  const bool rc_ops = type == QpType::RC || type == QpType::XrcIni;  // RC's operations
  switch (wr.opcode) {
    case WrOpcode::Send: case WrOpcode::SendWithImm:
      break;
    case WrOpcode::RdmaWrite: case WrOpcode::RdmaWriteWithImm:
      if (type == QpType::UD) return EINVAL;  // UD: SENDs only
      break;
    case WrOpcode::SendWithInv: case WrOpcode::RdmaRead: case WrOpcode::AtomicCmpSwp: case WrOpcode::AtomicFetchAdd:
      if (!rc_ops) return EINVAL;  // UC: SEND and WRITE only
      break;
    case WrOpcode::BindMw: case WrOpcode::LocalInv:
      // Local operations (engine/local_ops.cpp): no buffers; RC and UC (rxe: LOCAL_INV on RC).
      if (type == QpType::UD || wr.num_sge != 0) return EINVAL;
      break;
    case WrOpcode::AtomicWrite: case WrOpcode::Flush:
      // RC only (IBA 1.5 A19: XRC has no opcodes for them), no local buffers: the 8 bytes travel
      // in the WR, a FLUSH has none.
      if (type != QpType::RC || wr.num_sge != 0) return EINVAL;
      if (wr.opcode == WrOpcode::Flush &&
          ((wr.flush_type & ~uint32_t(kFlushToGlobal | kFlushToPersistence)) || wr.flush_type == 0 ||
           wr.flush_level > kFlushMr || wr.compare_add > param::kMaxMessage))
        return EINVAL;
      break;
    default:
      return EINVAL;
  }
  uint64_t len = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) len += wr.sg_list[i].length;
  bool ah_local = false, ah_mcast = false;
  if (type == QpType::UD) {
    // A datagram: an address handle of this device's, one packet of at most the path MTU.
    if (!wr.ah || len > mtu_limit() || wr.remote_qpn > 0xFFFFFF) return EINVAL;
    ah_local = loops_back(wr.ah->av.dgid);
    ah_mcast = proto::is_multicast_gid(wr.ah->av.dgid);
  }
  const bool placement = wr.opcode == WrOpcode::AtomicWrite || wr.opcode == WrOpcode::Flush;
  if (wr.opcode == WrOpcode::AtomicWrite) len = 8;
  if (wr.opcode == WrOpcode::Flush) len = wr.compare_add;  // the range's length: the RETH's, and byte_len
  const bool local = wr.opcode == WrOpcode::BindMw || wr.opcode == WrOpcode::LocalInv;
  const bool atomic = wr.opcode == WrOpcode::AtomicCmpSwp || wr.opcode == WrOpcode::AtomicFetchAdd || placement || local;
  const bool is_inline = (wr.send_flags & kSendInline) && !atomic && wr.opcode != WrOpcode::RdmaRead;
  // Inline data is copied whole into the WQE (any number of SGEs); otherwise the WQE holds the
  // SGEs, at most the QP's max_send_sge (a READ or an atomic flagged inline is not inline).
  if (!is_inline && wr.num_sge > qp->init.cap.max_send_sge) return EINVAL;
  if (is_inline && len > qp->init.cap.max_inline_data) return EINVAL;
  if (len > param::kMaxMessage) return EINVAL;
  if (qp->tx.sq_full()) return ENOMEM;
  if (qp->tx.sq.full()) [[unlikely]]  // storage for more WQEs (param::kQueueFirstSlots, doubled)
    qp->tx.resize_sq(uint32_t(std::min<uint64_t>(uint64_t(qp->tx.sq.capacity()) * 2, qp->tx.sq_limit)));

  // Fill only what the engine reads (the WQE is large; zeroing it all costs per message).
  SendSide& t = qp->tx;
  SendWqe& w = t.sq.push_slot();
  w.wr.set(wr);
  w.npkts = w.first_psn = w.next_pkt = w.rcvd_pkts = w.sent_max = 0;
  w.started = false;
  w.error = WcStatus::Success;
  w.length = uint32_t(len);
  w.signaled = qp->init.sq_sig_all || (wr.send_flags & kSendSignaled);
  w.is_inline = is_inline;
  w.ah_local = ah_local;
  w.ah_mcast = ah_mcast;
  if (type == QpType::UD) t.sq_ah[w.slot] = *wr.ah;
  Sge* sge = t.sge(w);
  if (is_inline) {
    uint8_t* data = t.inline_data(w);
    uint32_t off = 0;
    for (uint32_t i = 0; i < wr.num_sge; ++i) {
      std::memcpy(data + off, reinterpret_cast<const void*>(wr.sg_list[i].addr), wr.sg_list[i].length);
      off += wr.sg_list[i].length;
    }
    w.wr.num_sge = len ? 1 : 0;
    sge[0] = Sge{0, uint32_t(len), 0};
  } else {
    for (uint32_t i = 0; i < wr.num_sge; ++i) sge[i] = wr.sg_list[i];
  }
  if (s == QpState::Err) qp_ops::flush(*qp);  // a WR posted in ERR completes at once, flushed
  kick(qp);
  return 0;
}

namespace {

int push_recv(RecvRing& rq, const RecvWr& wr) {
  if (rq.full()) return ENOMEM;
  rq.push(wr);
  return 0;
}

}  // namespace

int Device::post_recv(Qp* qp, const RecvWr& wr) {
  if (!qp || qp->init.srq || qp->xrc()) return EINVAL;  // XRC: no receive queue of its own
  if (qp->attrs.qp_state == QpState::Reset) return EINVAL;
  if (wr.num_sge > qp->init.cap.max_recv_sge || wr.num_sge > kMaxSge) return EINVAL;
  if (int rc = push_recv(qp->rx.rq, wr)) return rc;
  if (qp->attrs.qp_state == QpState::Err) qp_ops::flush(*qp);
  return 0;
}

int Device::post_srq_recv(Srq* srq, const RecvWr& wr) {
  if (!srq || wr.num_sge > srq->max_sge()) return EINVAL;
  return push_recv(srq->rq(), wr);
}

}  // namespace uroce::engine
