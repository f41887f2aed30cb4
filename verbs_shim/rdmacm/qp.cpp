// The QP of an id: rdma_create_qp makes it on the shim's device (with CQs and completion
// channels of its own when the application gives none, as librdmacm does, for the
// <rdma/rdma_verbs.h> helpers) and moves it to INIT; the library moves it to RTR and RTS with
// the numbers the CM exchanged (the peer's QPN, both starting PSNs, RDMA READ credits, MTU),
// on the active side when the REP arrives, on the passive side in rdma_accept. UD QPs go to
// RTS at once (Q_Key RDMA_UDP_QKEY). rdma_init_qp_attr gives the same attributes to an
// application that moves its own QP.
#include <cerrno>
#include <cstring>

#include <rdma/rdma_verbs.h>

#include "verbs_shim/rdmacm/cma.hpp"

namespace uroce::rdmacm {

int fill_qp_attr(Id* id, ibv_qp_attr* a, int* mask) {
  const ibv_qp_state want = a->qp_state;
  std::memset(a, 0, sizeof *a);
  a->qp_state = want;
  const bool ud = id->id.qp_type == IBV_QPT_UD;
  switch (want) {
    case IBV_QPS_INIT:
      a->pkey_index = 0;
      a->port_num = 1;
      *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (ud) {
        a->qkey = RDMA_UDP_QKEY;
        *mask |= IBV_QP_QKEY;
      } else {
        a->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                             IBV_ACCESS_REMOTE_ATOMIC;
        *mask |= IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTR:
      *mask = IBV_QP_STATE;
      if (ud) return 0;
      if (!id->remote_qpn) return EINVAL;  // no REQ or REP yet
      a->path_mtu = id->mtu;
      a->dest_qp_num = id->remote_qpn;
      a->rq_psn = id->rq_psn;
      a->max_dest_rd_atomic = id->responder_resources;
      a->min_rnr_timer = param::kRdmacmMinRnrTimer;
      a->ah_attr.is_global = 1;
      a->ah_attr.port_num = 1;
      std::memcpy(a->ah_attr.grh.dgid.raw, id->peer.dgid.data(), 16);
      a->ah_attr.grh.sgid_index = id->sgid_index;
      a->ah_attr.grh.hop_limit = id->peer.hop_limit ? id->peer.hop_limit : 64;
      a->ah_attr.grh.traffic_class = id->tos;
      *mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
               IBV_QP_MIN_RNR_TIMER;
      return 0;
    case IBV_QPS_RTS:
      a->sq_psn = ud ? 0 : id->sq_psn;
      *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (ud) return 0;
      a->timeout = id->ack_timeout;
      a->retry_cnt = id->retry_count;
      a->rnr_retry = id->rnr_retry_count;
      a->max_rd_atomic = id->initiator_depth;
      *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      return 0;
    default:
      return EINVAL;
  }
}

namespace {
int move(Id* id, ibv_qp_state s) {
  if (!id->id.qp) return 0;
  ibv_qp_attr a{};
  a.qp_state = s;
  int mask = 0;
  if (int rc = fill_qp_attr(id, &a, &mask)) return rc;
  return ibv_modify_qp(id->id.qp, &a, mask);
}
}  // namespace

int qp_init(Id* id) { return move(id, IBV_QPS_INIT); }
int qp_rtr(Id* id) { return move(id, IBV_QPS_RTR); }
int qp_rts(Id* id) { return move(id, IBV_QPS_RTS); }

void qp_error(Id* id) {
  if (!id->id.qp) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE);
}

namespace {

void destroy_cqs(Id* id) {
  if (!id->own_cqs) return;
  if (id->id.send_cq && id->id.send_cq != id->id.recv_cq) ibv_destroy_cq(id->id.send_cq);
  if (id->id.recv_cq) ibv_destroy_cq(id->id.recv_cq);
  if (id->id.send_cq_channel) ibv_destroy_comp_channel(id->id.send_cq_channel);
  if (id->id.recv_cq_channel) ibv_destroy_comp_channel(id->id.recv_cq_channel);
  id->id.send_cq = id->id.recv_cq = nullptr;
  id->id.send_cq_channel = id->id.recv_cq_channel = nullptr;
  id->own_cqs = false;
}

// The CQs the application did not give: one per direction, each with its completion channel.
int make_cqs(Id* id, ibv_qp_init_attr_ex* a) {
  if (a->send_cq && a->recv_cq) return 0;
  id->own_cqs = true;
  ibv_context* ctx = id->id.verbs;
  if (!a->recv_cq) {
    id->id.recv_cq_channel = ibv_create_comp_channel(ctx);
    id->id.recv_cq = id->id.recv_cq_channel
                         ? ibv_create_cq(ctx, int(std::max(a->cap.max_recv_wr, 1u)), id, id->id.recv_cq_channel, 0)
                         : nullptr;
    if (!id->id.recv_cq) return errno ? errno : ENOMEM;
    a->recv_cq = id->id.recv_cq;
  }
  if (!a->send_cq) {
    id->id.send_cq_channel = ibv_create_comp_channel(ctx);
    id->id.send_cq = id->id.send_cq_channel
                         ? ibv_create_cq(ctx, int(std::max(a->cap.max_send_wr, 1u)), id, id->id.send_cq_channel, 0)
                         : nullptr;
    if (!id->id.send_cq) return errno ? errno : ENOMEM;
    a->send_cq = id->id.send_cq;
  }
  return 0;
}

}  // namespace

// The device's PD, made once: every id's `pd` (as librdmacm gives each id its device's PD), and
// rdma_create_qp's without one. Its own lock, not `mu`: ibv_alloc_pd takes the shim's token.
ibv_pd* default_pd(ibv_context* ctx) {
  static std::mutex pd_mu;
  std::lock_guard<std::mutex> g(pd_mu);
  if (!lib().pd) lib().pd = ibv_alloc_pd(ctx);
  return lib().pd;
}

}  // namespace uroce::rdmacm

using namespace uroce::rdmacm;

extern "C" {

CMA_EXPORT int rdma_create_qp_ex(rdma_cm_id* cid, ibv_qp_init_attr_ex* attr) {
  if (!live_id(cid) || !attr || !cid->verbs) return fail(EINVAL);
  Id* id = to_id(cid);
  if (id->id.qp) return fail(EINVAL);
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
    ibv_pd* pd = id->id.pd ? id->id.pd : default_pd(id->id.verbs);
    if (!pd) return -1;
    attr->pd = pd;
    attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
  }
  if (attr->pd->context != id->id.verbs) return fail(EINVAL);
  ibv_qp_init_attr_ex a = *attr;
  // The port space decides UD; otherwise the application's type (RC or UC), RC when it gave none.
  a.qp_type = id->id.qp_type == IBV_QPT_UD ? IBV_QPT_UD
              : attr->qp_type == IBV_QPT_RC || attr->qp_type == IBV_QPT_UC ? attr->qp_type
                                                                           : IBV_QPT_RC;
  if (int rc = make_cqs(id, &a)) {
    destroy_cqs(id);
    return fail(rc);
  }
  ibv_qp* qp = ibv_create_qp_ex(id->id.verbs, &a);
  if (!qp) {
    const int e = errno;
    destroy_cqs(id);
    return fail(e ? e : ENOMEM);
  }
  id->id.qp = qp;
  id->id.qp_type = qp->qp_type;
  id->id.pd = attr->pd;
  int rc = qp_init(id);
  if (!rc && qp->qp_type == IBV_QPT_UD) {
    rc = qp_rtr(id);
    if (!rc) rc = qp_rts(id);
  }
  // The CM may already have the peer's numbers (a passive id): the QP waits in INIT for
  // rdma_accept; the active side's waits for the REP.
  if (rc) {
    ibv_destroy_qp(qp);
    id->id.qp = nullptr;
    destroy_cqs(id);
    return fail(rc);
  }
  attr->cap = a.cap;
  return 0;
}

CMA_EXPORT int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (!live_id(id) || !qp_init_attr) return fail(EINVAL);
  ibv_qp_init_attr_ex a{};
  a.qp_context = qp_init_attr->qp_context;
  a.send_cq = qp_init_attr->send_cq;
  a.recv_cq = qp_init_attr->recv_cq;
  a.srq = qp_init_attr->srq ? qp_init_attr->srq : id->srq;
  a.cap = qp_init_attr->cap;
  a.qp_type = qp_init_attr->qp_type;
  a.sq_sig_all = qp_init_attr->sq_sig_all;
  if (pd) {
    a.pd = pd;
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
  }
  if (int rc = rdma_create_qp_ex(id, &a)) return rc;
  qp_init_attr->cap = a.cap;
  qp_init_attr->send_cq = id->send_cq ? id->send_cq : qp_init_attr->send_cq;
  qp_init_attr->recv_cq = id->recv_cq ? id->recv_cq : qp_init_attr->recv_cq;
  return 0;
}

CMA_EXPORT void rdma_destroy_qp(rdma_cm_id* cid) {
  if (!live_id(cid) || !cid->qp) return;
  Id* id = to_id(cid);
  ibv_destroy_qp(id->id.qp);
  id->id.qp = nullptr;
  destroy_cqs(id);
}

CMA_EXPORT int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (!live_id(id) || !qp_attr || !qp_attr_mask) return fail(EINVAL);
  const int rc = fill_qp_attr(to_id(id), qp_attr, qp_attr_mask);
  return rc ? fail(rc) : 0;
}

CMA_EXPORT int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  if (!live_id(id) || !attr || !id->verbs) return fail(EINVAL);
  if (attr->comp_mask & ~uint32_t(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE)) return fail(EOPNOTSUPP);
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC) return fail(EOPNOTSUPP);
  ibv_pd* pd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) && attr->pd ? attr->pd : id->pd;
  if (!pd) return fail(EINVAL);
  ibv_srq_init_attr a{};
  a.srq_context = attr->srq_context;
  a.attr = attr->attr;
  ibv_srq* srq = ibv_create_srq(pd, &a);
  if (!srq) return -1;
  id->srq = srq;
  id->pd = pd;
  return 0;
}

CMA_EXPORT int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (!live_id(id) || !attr) return fail(EINVAL);
  ibv_srq_init_attr_ex a{};
  a.srq_context = attr->srq_context;
  a.attr = attr->attr;
  a.comp_mask = IBV_SRQ_INIT_ATTR_PD;
  a.pd = pd ? pd : id->pd;
  if (!a.pd) return fail(EINVAL);
  if (int rc = rdma_create_srq_ex(id, &a)) return rc;
  attr->attr = a.attr;
  return 0;
}

CMA_EXPORT void rdma_destroy_srq(rdma_cm_id* id) {
  if (!live_id(id) || !id->srq) return;
  ibv_destroy_srq(id->srq);
  id->srq = nullptr;
}

}  // extern "C"
