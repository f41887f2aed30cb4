// Local operations of the send queue: BIND_MW and LOCAL_INV (IBA 10.6.7, 10.7.3), executed by
// the requester when it reaches them in posting order, with no packet; and the remote
// invalidation a SEND with Invalidate asks of the responder. The checks are the spec's, as the
// kernel's rxe makes them (rxe_mw.c): a failed bind completes IBV_WC_MW_BIND_ERR, a failed
// local invalidation IBV_WC_LOC_QP_OP_ERR, and the QP goes to ERR.
#include "engine/roles.hpp"

namespace uroce::engine::local_ops {

namespace {

// BIND_MW: the window is found by the index part of the R_Key it was allocated with (the key
// part changes with each bind; the shim passes the allocation's), its new R_Key keeps that index.
bool bind(Device& dev, Qp& qp, const PostedWr& wr) {
  MrTable& t = dev.mrs();
  Mw* w = t.mw_by_index(wr.invalidate_rkey);
  if (!w) return false;
  const uint64_t addr = wr.remote_addr, len = wr.compare_add;
  const uint32_t lkey = uint32_t(wr.swap), access = uint32_t(wr.swap >> 32);
  if ((wr.rkey >> 8) != (w->rkey >> 8)) return false;  // another window's index
  // Remote read, write and atomic rights (local write is implied by the MR); zero-based
  // windows and the rest are not offered (the device does not announce them).
  if (access & ~uint32_t(kRemoteRead | kRemoteWrite | kRemoteAtomic | kLocalWrite)) return false;
  if (w->type == 2) {
    if (w->bound) return false;                // o10-37.2.30: a type 2 window binds only when free
    if (qp.init.pd != w->pd) return false;     // C10-72
    if (len == 0) return false;                // o10-37.2.40: no unbinding by a zero-length bind
  }
  Mr* mr = nullptr;
  if (len) {
    mr = t.mr_by_lkey(lkey);
    if (!mr || mr->pd != w->pd) return false;
    if (mr->access & kZeroBased) return false;
    if (!(mr->access & kMwBind)) return false;  // C10-73
    if ((access & (kRemoteWrite | kRemoteAtomic)) && !(mr->access & kLocalWrite)) return false;  // C10-74
    if (!mr_contains(*mr, addr, len)) return false;  // C10-75
  }
  t.bind_mw(*w, mr, addr, len, access, wr.rkey, qp.qpn());
  return true;
}

// An invalidation: a type 2 window of the QP's PD that is bound (o10-37.2.26: a type 1 window
// cannot be invalidated); a remote one also bound by this QP. uroce has no fast-register MRs,
// so an MR's key is never invalidated.
bool invalidate(Device& dev, Qp& qp, uint32_t rkey, bool remote) {
  MrTable& t = dev.mrs();
  Mw* w = t.mw_by_rkey(rkey);
  if (!w || w->type != 2 || !w->bound || w->pd != (remote ? qp.rx_pd() : qp.init.pd) || (remote && w->qpn != qp.qpn())) return false;
  t.unbind_mw(*w);
  return true;
}

}  // namespace

bool execute(Device& dev, Qp& qp, SendWqe& w) {
  const bool ok = w.wr.opcode == WrOpcode::BindMw ? bind(dev, qp, w.wr) : invalidate(dev, qp, w.wr.invalidate_rkey, false);
  if (!ok) {
    qp_ops::fail_wqe(qp, w, w.wr.opcode == WrOpcode::BindMw ? WcStatus::MwBindErr : WcStatus::LocQpOpErr);
    return false;
  }
  SendSide& t = qp.tx;
  w.started = true;
  w.npkts = w.next_pkt = w.rcvd_pkts = 0;
  w.first_psn = t.sq_psn;  // it takes no PSN
  // Done: it completes in posting order, at once when nothing before it is outstanding.
  if (qp.reliable()) {
    ++t.send_idx;
    if (&t.sq.front() == &w) qp_ops::complete_wqe(qp, WcStatus::Success);
  } else {
    qp_ops::complete_wqe(qp, WcStatus::Success);  // UC: every WQE before it completed when sent
  }
  return true;
}

// Bound by this QP too (type 2B: its peer's requests come on it); rxe checks the type and state only.
bool remote_invalidate(Device& dev, Qp& qp, uint32_t rkey) { return invalidate(dev, qp, rkey, true); }

}  // namespace uroce::engine::local_ops
