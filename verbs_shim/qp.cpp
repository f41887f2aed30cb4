// Queue pairs: create (ibv_create_qp, ibv_create_qp_ex), modify, query, destroy, multicast
// (not supported).
#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "verbs_shim/api.hpp"
#include "verbs_shim/convert.hpp"

using namespace uroce;
using namespace uroce::shim;
namespace E = uroce::engine;

namespace {

ibv_qp* create_qp_common(ibv_context* ctx, ibv_pd* pd, ibv_qp_init_attr* ia, bool ex) {
  Runtime& r = rt();
  if (ia->qp_type != IBV_QPT_RC) {
    errno = EOPNOTSUPP;   // the engine implements RC only
    return nullptr;
  }
  if (!ia->send_cq || !ia->recv_cq || !mine(ia->send_cq->context) || !mine(ia->recv_cq->context) ||
      (ia->srq && !mine(ia->srq->context)) || ia->cap.max_send_wr > r.dcfg.max_qp_wr ||
      ia->cap.max_recv_wr > r.dcfg.max_qp_wr || ia->cap.max_send_sge > E::kMaxSge ||
      ia->cap.max_recv_sge > E::kMaxSge || ia->cap.max_inline_data > E::kMaxInline) {
    errno = EINVAL;
    return nullptr;
  }
  E::QpInitAttr e;
  e.pd = upd(pd)->e;
  e.send_cq = ucq(ia->send_cq)->e;
  e.recv_cq = ucq(ia->recv_cq)->e;
  e.srq = ia->srq ? usrq(ia->srq)->e : nullptr;
  e.cap.max_send_wr = std::max<uint32_t>(ia->cap.max_send_wr, 1);
  e.cap.max_recv_wr = ia->srq ? 1 : std::max<uint32_t>(ia->cap.max_recv_wr, 1);
  e.cap.max_send_sge = std::max<uint32_t>(ia->cap.max_send_sge, 1);
  e.cap.max_recv_sge = std::max<uint32_t>(ia->cap.max_recv_sge, 1);
  e.cap.max_inline_data = ia->cap.max_inline_data;
  e.qp_type = E::QpType::RC;
  e.sq_sig_all = ia->sq_sig_all != 0;
  E::Qp* q;
  {
    Guard g;
    q = r.engine->create_qp(e);
  }
  if (!q) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* u = new UQp{};
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
  b.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&b.mutex, nullptr);
  pthread_cond_init(&b.cond, nullptr);
  u->e = q;
  u->ex = ex;
  if (ex) install_wr_ops(u);
  const E::QpCap& cap = q->init_attr().cap;
  ia->cap.max_send_wr = cap.max_send_wr;
  ia->cap.max_recv_wr = ia->srq ? 0 : cap.max_recv_wr;
  ia->cap.max_send_sge = cap.max_send_sge;
  ia->cap.max_recv_sge = cap.max_recv_sge;
  ia->cap.max_inline_data = cap.max_inline_data;
  return &b;
}

}  // namespace

namespace uroce::shim {

ibv_qp* vop_create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* ia) {
  constexpr uint32_t kMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if ((ia->comp_mask & ~kMask) || !(ia->comp_mask & IBV_QP_INIT_ATTR_PD) || !ia->pd || !mine(ia->pd->context)) {
    errno = (ia->comp_mask & ~kMask) ? EOPNOTSUPP : EINVAL;
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
  ibv_qp* q = create_qp_common(ctx, ia->pd, &a, ex);
  if (q) ia->cap = a.cap;
  return q;
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

SHIM_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  if (!mine(qp->context)) return REAL(ibv_modify_qp)(qp, a, mask);
  Runtime& r = rt();
  UQp* u = uqp(qp);
  const uint32_t m = uint32_t(mask);
  E::QpAttr e = to_engine(*a);
  if ((m & IBV_QP_PORT) && a->port_num != 1) return EINVAL;
  if ((m & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > mtu_limit_enum())) return EINVAL;
  if ((m & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > r.dcfg.max_rd_atomic) return EINVAL;
  if ((m & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > r.dcfg.max_rd_atomic) return EINVAL;
  Guard g;
  if (m & IBV_QP_AV) {
    const ibv_ah_attr& ah = a->ah_attr;
    // RoCE: the address vector must carry a GRH, and the source GID must be the one this
    // endpoint sends from (the config's gid_index).
    if (!ah.is_global || ah.grh.sgid_index >= r.gids.size() || !r.gid_valid[ah.grh.sgid_index] ||
        r.gids[ah.grh.sgid_index] != r.link->gid()) {
      if (ah.is_global && ah.grh.sgid_index < r.gids.size())
        std::fprintf(stderr, "uroce-verbs: %s sends from GID %s only (sgid_index %u asked)\n", r.cfg.name.c_str(),
                     port::gid_str(r.link->gid()).c_str(), unsigned(ah.grh.sgid_index));
      return EINVAL;
    }
    std::memcpy(e.ah_attr.dgid.data(), ah.grh.dgid.raw, 16);
    e.ah_attr.hop_limit = ah.grh.hop_limit;
    e.ah_attr.traffic_class = ah.grh.traffic_class;
    e.ah_attr.flow_label = ah.grh.flow_label;
    e.ah_attr.sgid_index = ah.grh.sgid_index;
    // The peer's MAC, resolved on the link (ARP or ND) while progress keeps running.
    if (!r.link->lookup(e.ah_attr.dgid, e.ah_attr.dmac)) {
      if (!r.link->wait_link_up(param::kShimLinkWaitMs) ||
          !r.link->resolve(e.ah_attr.dgid, e.ah_attr.dmac, [&] { r.drive(); })) {
        std::fprintf(stderr, "uroce-verbs: cannot resolve %s on %s\n", port::gid_str(e.ah_attr.dgid).c_str(),
                     r.cfg.name.c_str());
        return ETIMEDOUT;
      }
    }
  }
  int rc = r.engine->modify_qp(u->e, e, m);
  if (rc == 0 && (m & IBV_QP_STATE)) qp->state = a->qp_state;
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
    ia->qp_type = IBV_QPT_RC;
    ia->sq_sig_all = init.sq_sig_all;
  }
  return 0;
}

SHIM_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  if (!mine(qp->context)) return REAL(ibv_destroy_qp)(qp);
  int rc;
  {
    Guard g;
    rc = rt().engine->destroy_qp(uqp(qp)->e);
  }
  if (rc) return rc;
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  delete uqp(qp);
  return 0;
}

SHIM_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (!mine(qp->context)) return REAL(ibv_attach_mcast)(qp, gid, lid);
  return EOPNOTSUPP;
}

SHIM_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (!mine(qp->context)) return REAL(ibv_detach_mcast)(qp, gid, lid);
  return EOPNOTSUPP;
}

}  // extern "C"
