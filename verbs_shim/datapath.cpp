// The data path, reached through ibv_context ops by verbs.h's inline functions: ibv_post_send,
// ibv_post_recv, ibv_post_srq_recv, ibv_poll_cq, ibv_req_notify_cq. Each takes the ownership
// token once for the whole call (progress policy: verbs_shim/runtime.hpp).
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
  r.note_app(r.now_ns());
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
  uint64_t n = 0;
  for (; wr; wr = wr->next, ++n) {
    rc = r.engine->post_send(q->e, to_engine(*wr, qp->qp_type));
    if (rc) {
      *bad = wr;
      break;
    }
  }
  r.count_ops(n);
  // An application that is polling its CQ sends the frames with its next poll_cq (a progress()
  // per post would halve perftest's post-one/poll loops); one that is not (it waits on memory,
  // as ib_write_lat does, or on a completion channel) gets them sent now.
  const uint64_t now = r.now_ns();
  const bool polling = now - r.app_poll_ns.load(std::memory_order_relaxed) < r.app_active_ns;
  r.note_app(now);
  if (r.calls_drive() && (r.eager_post || !polling)) r.drive();
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
  if (r.calls_drive()) {
    r.drive();
    r.note_app(r.engine->last_step_ns());  // the step's time: no second clock read
    r.app_drives.store(r.app_drives.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  } else {
    r.note_app(r.now_ns());
  }
  // Straight from the engine's ring into the application's array.
  const int total = int(c->e->poll_each(uint32_t(n), [&wc](const E::Wc& w) { to_ibv_wc(w, *wc++); }));
  if (total) r.count_ops(uint64_t(total));
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
    r.armed.push_back(c);
  }
  return 0;
}

}  // namespace uroce::shim
