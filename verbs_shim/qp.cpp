// Queue pairs: create (ibv_create_qp, ibv_create_qp_ex), modify, query, destroy, multicast
// (ibv_attach_mcast, ibv_detach_mcast), and the address work of modify_qp: resolve_peer.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "verbs_shim/api.hpp"
#include "verbs_shim/convert.hpp"

using namespace uroce;
using namespace uroce::shim;
namespace E = uroce::engine;

namespace {

// RC, UC, UD and XRC's two halves (no raw packet or driver QPs). An XRC initiator (XRC_SEND) has
// a PD and a send CQ only; an XRC target (XRC_RECV) a domain only (`xrcd`; `pd` nullptr): its
// domain's XRC SRQs receive, each with its CQ. Whatever else the application passed for them
// (rdma-core's ibv_create_qp_ex leaves the fields as given) is ignored, as mlx5 does.
ibv_qp* create_qp_common(ibv_context* ctx, ibv_pd* pd, ibv_qp_init_attr* ia, bool ex, ibv_xrcd* xrcd = nullptr) {
  Runtime& r = rt();
  const ibv_qp_type t = ia->qp_type;
  if (t != IBV_QPT_RC && t != IBV_QPT_UC && t != IBV_QPT_UD && t != IBV_QPT_XRC_SEND && t != IBV_QPT_XRC_RECV) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const bool ini = t == IBV_QPT_XRC_SEND, tgt = t == IBV_QPT_XRC_RECV;
  if (tgt) {
    ia->send_cq = ia->recv_cq = nullptr;
    ia->srq = nullptr;
    ia->cap = {};
  } else if (ini) {
    ia->recv_cq = nullptr;
    ia->srq = nullptr;
    ia->cap.max_recv_wr = ia->cap.max_recv_sge = 0;
  }
  const bool bad_cqs = tgt ? !xrcd
                     : ini ? !pd || !ia->send_cq || !mine(ia->send_cq->context)
                           : !pd || !ia->send_cq || !ia->recv_cq || !mine(ia->send_cq->context) ||
                                 !mine(ia->recv_cq->context) || (ia->srq && !mine(ia->srq->context));
  if (bad_cqs || ia->cap.max_send_wr > r.dcfg.max_qp_wr ||
      ia->cap.max_recv_wr > r.dcfg.max_qp_wr || ia->cap.max_send_sge > E::kMaxSge ||
      ia->cap.max_recv_sge > E::kMaxSge || ia->cap.max_inline_data > E::kMaxInline) {
    errno = EINVAL;
    return nullptr;
  }
  E::QpInitAttr e;
  e.pd = pd ? upd(pd)->e : nullptr;
  e.send_cq = ia->send_cq ? ucq(ia->send_cq)->e : nullptr;
  e.recv_cq = ia->recv_cq ? ucq(ia->recv_cq)->e : nullptr;
  e.srq = ia->srq ? usrq(ia->srq)->e : nullptr;
  e.xrcd = tgt ? uxrcd(xrcd)->e : nullptr;
  e.cap.max_send_wr = tgt ? 0 : std::max<uint32_t>(ia->cap.max_send_wr, 1);
  e.cap.max_recv_wr = ia->srq || ini || tgt ? 0 : std::max<uint32_t>(ia->cap.max_recv_wr, 1);
  e.cap.max_send_sge = tgt ? 0 : std::max<uint32_t>(ia->cap.max_send_sge, 1);
  e.cap.max_recv_sge = ini || tgt ? 0 : std::max<uint32_t>(ia->cap.max_recv_sge, 1);
  e.cap.max_inline_data = ia->cap.max_inline_data;
  e.qp_type = E::QpType(t);  // IBV_QPT_RC/UC/UD/XRC_SEND/XRC_RECV are the engine's values
  e.sq_sig_all = ia->sq_sig_all != 0;
  auto* u = new UQp{};
  E::Qp* q = with_token([&] { return u->e = r.engine->create_qp(e); });
  if (!q) {
    delete u;
    errno = ENOMEM;
    return nullptr;
  }
  ibv_qp& b = u->qpx.qp_base;
  b.context = ctx;
  b.qp_context = ia->qp_context;
  b.pd = pd;
  b.send_cq = ia->send_cq;
  b.recv_cq = ia->recv_cq;
  b.srq = ia->srq;
  b.handle = q->qpn();
  b.qp_num = q->qpn();
  b.state = IBV_QPS_RESET;
  b.qp_type = ia->qp_type;
  init_sync(b);
  u->ex = ex;
  if (ex) install_wr_ops(u);
  ia->cap = to_ibv(q->init_attr().cap, ia->srq != nullptr);
  // Watched for asynchronous events (async.cpp) once whole: the scan reads it under the token
  // from any thread (ThreadSanitizer saw the fields above written while a scan read them).
  with_token([&r, u] { r.registry.qps.push_back(u); });
  return &b;
}

// ---- The peer's address -------------------------------------------------------------------------
}  // namespace

int uroce::shim::resolve_peer(const ibv_ah_attr& ah, E::AddressVector& out) {
  Runtime& r = rt();
  // RoCE: the address vector must carry a GRH and name a valid entry of the GID table (any:
  // each QP sends from its own, IPv4 or IPv6; the engine checks the family against the dgid).
  if (!ah.is_global || ah.grh.sgid_index >= r.identity.gids.size() || !r.identity.gid_valid[ah.grh.sgid_index]) return EINVAL;
  std::memcpy(out.dgid.data(), ah.grh.dgid.raw, 16);
  out.hop_limit = ah.grh.hop_limit;
  out.traffic_class = ah.grh.traffic_class;
  out.flow_label = ah.grh.flow_label;
  out.sgid_index = ah.grh.sgid_index;
  // port::Endpoint's one sequence (link up, then ARP/ND), with the token held only for each
  // step: between steps the pump gives it up for kShimResolveNapNs, takes it back and runs one
  // progress() (which takes the replies in).
  E::AddressVector resolved;
  std::string err;
  bool ok;
  {
    Guard g;
    ok = r.ep->resolve_peer(out.dgid, resolved, err, [&r] {
      r.token.unlock();
      nap(param::kShimResolveNapNs);
      r.token.lock();
      r.drive();
    });
  }
  if (!ok) {
    std::fprintf(stderr, "uroce-verbs: cannot reach %s on %s: %s\n", port::gid_str(out.dgid).c_str(),
                 r.identity.cfg.name.c_str(), err.c_str());
    return ETIMEDOUT;
  }
  out.dmac = resolved.dmac;
  // On a netdev shared with the kernel the hop limit is the route's, whatever the program asked
  // (ibv_rc_pingpong asks 1), as the kernel sets it for RoCE address handles: so a routed peer
  // is reached. On uroce's own link the program's value stands.
  if (!r.identity.cfg.netdev.empty()) out.hop_limit = resolved.hop_limit;
  return 0;
}

namespace uroce::shim {

ibv_qp* vop_create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* ia) {
  constexpr uint32_t kMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_XRCD;
  if (ia->comp_mask & ~kMask) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // An XRC target QP has a domain and no PD; every other QP a PD of this device.
  const bool tgt = ia->qp_type == IBV_QPT_XRC_RECV;
  if (tgt ? !(ia->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !ia->xrcd || !mine(ia->xrcd->context)
          : !(ia->comp_mask & IBV_QP_INIT_ATTR_PD) || !ia->pd || !mine(ia->pd->context)) {
    errno = EINVAL;
    return nullptr;
  }
  bool ex = false;
  if (ia->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    if (ia->send_ops_flags & ~kSupportedSendOps) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
    ex = true;
  }
  ibv_qp_init_attr a{};
  a.qp_context = ia->qp_context;
  a.send_cq = ia->send_cq;
  a.recv_cq = ia->recv_cq;
  a.srq = ia->srq;
  a.cap = ia->cap;
  a.qp_type = ia->qp_type;
  a.sq_sig_all = ia->sq_sig_all;
  ibv_qp* q = create_qp_common(ctx, tgt ? nullptr : ia->pd, &a, ex, tgt ? ia->xrcd : nullptr);
  if (q) ia->cap = a.cap;
  return q;
}

// Datagrams (UD) and unreliable messages (UC) posted and not yet sent: nothing from the wire's
// side will ever complete them, so an application may post and destroy at once (mckey's sender
// does). A QP that cannot send (not in RTS or SQD) has nothing to put out.
void send_posted(Runtime& r, E::Qp* q) {
  const auto t = q->init_attr().qp_type;
  if (t != E::QpType::UD && t != E::QpType::UC) return;
  if (q->state() != E::QpState::Rts && q->state() != E::QpState::Sqd) return;
  const uint64_t end = r.engine->now_ns() + param::kShimSendPostedWaitNs;
  while (q->sq_outstanding() > 0 && r.engine->now_ns() < end) r.drive();
}

}  // namespace uroce::shim

extern "C" {

SHIM_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* ia) {
  if (!mine(pd->context)) return REAL(ibv_create_qp)(pd, ia);
  return create_qp_common(pd->context, pd, ia, false);
}

SHIM_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  if (!mine(qp->context)) return REAL(ibv_qp_to_qp_ex)(qp);
  UQp* u = uqp(qp);
  return u->ex ? &u->qpx : nullptr;
}

// Validate first (EINVAL at once for an illegal transition or value), then resolve the peer
// without holding the token through the wait, then apply with the token.
SHIM_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  if (!mine(qp->context)) return REAL(ibv_modify_qp)(qp, a, mask);
  Runtime& r = rt();
  UQp* u = uqp(qp);
  const uint32_t m = uint32_t(mask);
  E::QpAttr e = to_engine(*a);
  std::unique_lock<Token> token(r.token);
  // The engine's whole rule (transition, mask, values), before any address work.
  if (int rc = r.engine->check_modify_qp(u->e, e, m)) return rc;
  if (m & IBV_QP_AV) {
    token.unlock();
    if (int rc = resolve_peer(a->ah_attr, e.ah_attr)) return rc;
    token.lock();
  }
  // The engine applies the full rule (the QP's state may have changed while the token was free).
  note_qp_state(u);   // an error the engine found before this call is reported as such
  int rc = r.engine->modify_qp(u->e, e, m);
  if (rc == 0 && (m & IBV_QP_STATE)) {
    qp->state = a->qp_state;
    qp_state_set(u, u->e->state());   // the application's own transition: no IBV_EVENT_QP_FATAL
  }
  return rc;
}

SHIM_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* a, int mask, ibv_qp_init_attr* ia) {
  if (!mine(qp->context)) return REAL(ibv_query_qp)(qp, a, mask, ia);
  UQp* u = uqp(qp);
  E::QpAttr e;
  E::QpInitAttr init;
  {
    Guard g;
    e = u->e->attr();
    init = u->e->init_attr();
  }
  to_ibv_qp_attr(e, init, a);
  if (ia) {
    std::memset(ia, 0, sizeof *ia);
    ia->qp_context = qp->qp_context;
    ia->send_cq = qp->send_cq;
    ia->recv_cq = qp->recv_cq;
    ia->srq = qp->srq;
    ia->cap = a->cap;
    ia->qp_type = qp->qp_type;
    ia->sq_sig_all = init.sq_sig_all;
  }
  return 0;
}

SHIM_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  if (!mine(qp->context)) return REAL(ibv_destroy_qp)(qp);
  with_token([&] { send_posted(rt(), uqp(qp)->e); });
  return destroy_object(rt().registry.qps, uqp(qp), *qp, &engine::Device::destroy_qp, async_forget_qp);
}

// Enhanced Connection Establishment: no vendor options to negotiate.
SHIM_EXPORT int ibv_set_ece(ibv_qp* qp, ibv_ece* ece) {
  if (!mine(qp->context)) return REAL(ibv_set_ece)(qp, ece);
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

SHIM_EXPORT int ibv_query_ece(ibv_qp* qp, ibv_ece* ece) {
  if (!mine(qp->context)) return REAL(ibv_query_ece)(qp, ece);
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

// The engine places a message's payload in PSN order, one packet after the other, from one
// thread (x86 stores become visible in program order): data arrives in order on RC.
SHIM_EXPORT int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op, uint32_t flags) {
  if (!mine(qp->context)) return REAL(ibv_query_qp_data_in_order)(qp, op, flags);
  if (flags) return 0;
  return qp->qp_type == IBV_QPT_RC ? 1 : 0;
}

// Multicast (UD QPs): the engine keeps the groups and hands each group datagram to every QP of
// the device attached to it (engine Device::attach_mcast). The LID is not used on RoCE.
SHIM_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (!mine(qp->context)) return REAL(ibv_attach_mcast)(qp, gid, lid);
  if (!gid) return EINVAL;
  proto::Ip6 g;
  std::memcpy(g.data(), gid->raw, 16);
  Guard guard;
  return rt().engine->attach_mcast(uqp(qp)->e, g);
}

SHIM_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (!mine(qp->context)) return REAL(ibv_detach_mcast)(qp, gid, lid);
  if (!gid) return EINVAL;
  proto::Ip6 g;
  std::memcpy(g.data(), gid->raw, 16);
  Guard guard;
  return rt().engine->detach_mcast(uqp(qp)->e, g);
}

}  // extern "C"
