// The data path, reached through ibv_context ops by verbs.h's inline functions: ibv_post_send,
// ibv_post_recv, ibv_post_srq_recv, ibv_poll_cq, ibv_req_notify_cq. Each takes the ownership
// token once for the whole call; whether it also turns the engine is the progress policy's
// decision (verbs_shim/progress.cpp).
#include <algorithm>
#include <cerrno>

#include "verbs_shim/api.hpp"
#include "verbs_shim/convert.hpp"

namespace uroce::shim {

namespace E = uroce::engine;

namespace {

int post_recv_list(E::Qp* qp, E::Srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Runtime& r = rt();
  int rc = 0;
  Guard g;
  if (r.registry.device_lost) {
    *bad = wr;
    return EIO;
  }
  app_call(r);
  for (; wr; wr = wr->next) {
    E::RecvWr w = to_engine(*wr);
    rc = qp ? r.engine->post_recv(qp, w) : r.engine->post_srq_recv(srq, w);
    if (rc) {
      *bad = wr;
      break;
    }
  }
  return rc;
}

}  // namespace

int op_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Runtime& r = rt();
  UQp* q = uqp(qp);
  int rc = 0;
  Guard g;
  if (r.registry.device_lost) {
    *bad = wr;
    return EIO;
  }
  post_begin(r);
  uint64_t n = 0;
  for (; wr; wr = wr->next, ++n) {
    // ATOMIC WRITE and FLUSH have no place in struct ibv_send_wr (their 8 bytes, their placement
    // type): the ibv_wr_* API only, as in rdma-core's providers.
    rc = wr->opcode == IBV_WR_ATOMIC_WRITE || wr->opcode == ext::kWrFlush ? EINVAL
                                                                         : r.engine->post_send(q->e, to_engine(*wr, qp->qp_type));
    if (rc) {
      *bad = wr;
      break;
    }
  }
  posted(r, n);   // drive now, linger? (progress.cpp)
  return rc;
}

int op_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return post_recv_list(uqp(qp)->e, nullptr, wr, bad);
}

int op_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return post_recv_list(nullptr, usrq(srq)->e, wr, bad);
}

int op_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  Runtime& r = rt();
  UCq* c = ucq(cq);
  if (n <= 0) return 0;
  Guard g;
  poll_begin(r);   // drives, unless the poller does (progress.cpp)
  // Straight from the engine's ring into the application's array.
  bool recv = false;
  const int total = int(c->e->poll_each(uint32_t(n), [&wc, &recv](const E::Wc& w) {
    to_ibv_wc(w, *wc);
    recv |= (wc->opcode & IBV_WC_RECV) != 0;
    ++wc;
  }));
  polled(r, uint64_t(total), recv);   // linger for the answer? (progress.cpp)
  return total;
}

int op_req_notify_cq(ibv_cq* cq, int /*solicited_only*/) {
  Runtime& r = rt();
  UCq* c = ucq(cq);
  if (!c->ch) return EINVAL;
  Guard g;
  if (!c->armed) {
    c->armed = true;
    c->armed_at = c->e->completions_pushed();
    r.registry.armed.push_back(c);
  }
  return 0;
}

}  // namespace uroce::shim
