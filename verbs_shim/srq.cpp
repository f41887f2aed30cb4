// Shared receive queues (their receives are posted by op_post_srq_recv, datapath.cpp).
#include <algorithm>
#include <cerrno>

#include "verbs_shim/api.hpp"

using namespace uroce;
using namespace uroce::shim;
namespace E = uroce::engine;

namespace uroce::shim {

ibv_srq* wrap_srq(ibv_context* ctx, void* srq_context, ibv_pd* pd, engine::Srq* e) {
  auto* u = new USrq{};
  u->srq.context = ctx;
  u->srq.srq_context = srq_context;
  u->srq.pd = pd;
  init_sync(u->srq);
  u->e = e;
  with_token([u] { rt().registry.srqs.push_back(u); });   // watched for IBV_EVENT_SRQ_LIMIT_REACHED (async.cpp)
  return &u->srq;
}

}  // namespace uroce::shim

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
  }
  if (!e) {
    errno = ENOMEM;
    return nullptr;
  }
  return wrap_srq(pd->context, ia->srq_context, pd, e);
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
    // Arms IBV_EVENT_SRQ_LIMIT_REACHED (0 disarms): queued by the next scan once fewer than
    // srq_limit receives are outstanding, then disarmed (srq_limit reads 0 again), as on an RNIC.
    Runtime& r = rt();
    USrq* u = usrq(srq);
    if (attr->srq_limit > u->e->rq().capacity()) return EINVAL;
    Guard g;
    u->e->srq_limit = attr->srq_limit;
    u->limit_armed = attr->srq_limit != 0;
    r.registry.next_scan_ns = 0;
  }
  return 0;
}

SHIM_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  if (!mine(srq->context)) return REAL(ibv_destroy_srq)(srq);
  return destroy_object(rt().registry.srqs, usrq(srq), *srq, &engine::Device::destroy_srq, async_forget_srq);
}

}  // extern "C"
