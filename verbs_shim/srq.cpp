// Shared receive queues (their receives are posted by op_post_srq_recv, datapath.cpp).
#include <cerrno>

#include "verbs_shim/api.hpp"

using namespace uroce;
using namespace uroce::shim;
namespace E = uroce::engine;

extern "C" {

SHIM_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* ia) {
  if (!mine(pd->context)) return REAL(ibv_create_srq)(pd, ia);
  Runtime& r = rt();
  if (ia->attr.max_wr == 0 || ia->attr.max_wr > r.dcfg.max_qp_wr || ia->attr.max_sge == 0 ||
      ia->attr.max_sge > E::kMaxSge) {
    errno = EINVAL;
    return nullptr;
  }
  E::Srq* e;
  {
    Guard g;
    e = r.engine->create_srq(upd(pd)->e, ia->attr.max_wr, ia->attr.max_sge);
    if (e) e->srq_limit = ia->attr.srq_limit;
  }
  if (!e) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* u = new USrq{};
  u->srq.context = pd->context;
  u->srq.srq_context = ia->srq_context;
  u->srq.pd = pd;
  init_sync(u->srq);
  u->e = e;
  return &u->srq;
}

SHIM_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  if (!mine(srq->context)) return REAL(ibv_query_srq)(srq, attr);
  Guard g;
  E::Srq* e = usrq(srq)->e;
  attr->max_wr = e->rq().capacity();
  attr->max_sge = e->max_sge();
  attr->srq_limit = e->srq_limit;
  return 0;
}

SHIM_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  if (!mine(srq->context)) return REAL(ibv_modify_srq)(srq, attr, mask);
  if (mask & IBV_SRQ_MAX_WR) return EINVAL;   // no resize
  if (mask & IBV_SRQ_LIMIT) {
    Guard g;
    usrq(srq)->e->srq_limit = attr->srq_limit;
  }
  return 0;
}

SHIM_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  if (!mine(srq->context)) return REAL(ibv_destroy_srq)(srq);
  int rc = with_token([srq] { return rt().engine->destroy_srq(usrq(srq)->e); });
  if (rc) return rc;
  destroy_sync(*srq);
  delete usrq(srq);
  return 0;
}

}  // extern "C"
