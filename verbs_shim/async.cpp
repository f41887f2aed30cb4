// Asynchronous events: each context's queue and its pollable async_fd, the scan that finds the
// events where the shim drives the engine (Runtime::drive) among the objects of the registry
// (verbs_shim/registry.hpp), ibv_get_async_event and ibv_ack_async_event, and the destroy calls'
// wait for acknowledgements.
//
// async_fd is an eventfd in semaphore mode: each queued event adds 1, each ibv_get_async_event
// reads 1 (blocking, or EAGAIN when the application made the fd non-blocking with fcntl), so
// poll/select/epoll see it readable exactly while events are queued. Events are looked for with
// the ownership token held, at most every kShimAsyncScanNs (one clock read per drive otherwise):
//   IBV_EVENT_QP_FATAL          a QP the engine put in ERR (not one the application modified to ERR)
//   IBV_EVENT_QP_LAST_WQE_REACHED  a QP with an SRQ entered ERR (either way)
//   IBV_EVENT_CQ_ERR            the engine CQ overflowed (engine::Cq::overflowed), once per CQ
//   IBV_EVENT_SRQ_LIMIT_REACHED an SRQ armed by ibv_modify_srq(IBV_SRQ_LIMIT) has fewer receives
//                               outstanding than its limit; the SRQ is disarmed (srq_limit 0)
//   IBV_EVENT_PORT_ACTIVE / _PORT_ERR  the link came up / went down (every kShimLinkScanNs), to
//                               every open context
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "verbs_shim/api.hpp"

using namespace uroce;
using namespace uroce::shim;
namespace E = uroce::engine;

namespace uroce::shim {

namespace {

enum class Kind { Qp, Cq, Srq, None };

Kind kind_of(ibv_event_type t) {
  switch (t) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return Kind::Qp;
    case IBV_EVENT_CQ_ERR:
      return Kind::Cq;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      return Kind::Srq;
    default:
      return Kind::None;
  }
}

void* element_of(const ibv_async_event& ev) {
  switch (kind_of(ev.event_type)) {
    case Kind::Qp: return ev.element.qp;
    case Kind::Cq: return ev.element.cq;
    case Kind::Srq: return ev.element.srq;
    default: return nullptr;
  }
}

// Drops the queued events of `element` and returns how many of its events the application got.
template <typename Count>
uint32_t forget(ibv_context* ctx, void* element, Count&& reported) {
  UContext* c = uctx(ctx);
  std::lock_guard<std::mutex> g(c->ev_mu);
  c->events.erase(std::remove_if(c->events.begin(), c->events.end(),
                                 [element](const ibv_async_event& e) { return element_of(e) == element; }),
                  c->events.end());
  return reported();
}

// Waits until `completed` (the libibverbs object's acknowledgement counter) reaches `reported`.
template <typename T>
void wait_acks(T& obj, uint32_t reported, uint32_t T::*completed) {
  pthread_mutex_lock(&obj.mutex);
  while (obj.*completed < reported) pthread_cond_wait(&obj.cond, &obj.mutex);
  pthread_mutex_unlock(&obj.mutex);
}

}  // namespace

void post_async(ibv_context* ctx, ibv_event_type type, void* element) {
  UContext* c = uctx(ctx);
  ibv_async_event ev{};
  ev.event_type = type;
  switch (kind_of(type)) {
    case Kind::Qp: ev.element.qp = static_cast<ibv_qp*>(element); break;
    case Kind::Cq: ev.element.cq = static_cast<ibv_cq*>(element); break;
    case Kind::Srq: ev.element.srq = static_cast<ibv_srq*>(element); break;
    default: ev.element.port_num = 1; break;
  }
  {
    std::lock_guard<std::mutex> g(c->ev_mu);
    c->events.push_back(ev);
  }
  const uint64_t one = 1;
  ssize_t k = write(ctx->async_fd, &one, sizeof one);
  (void)k;
}

void qp_state_set(UQp* q, E::QpState s) {
  if (s == E::QpState::Err && q->seen != E::QpState::Err && q->qpx.qp_base.srq)
    post_async(q->qpx.qp_base.context, IBV_EVENT_QP_LAST_WQE_REACHED, &q->qpx.qp_base);
  q->seen = s;
}

void note_qp_state(UQp* q) {
  const E::QpState s = q->e->state();
  if (s == q->seen) return;
  if (s == E::QpState::Err) post_async(q->qpx.qp_base.context, IBV_EVENT_QP_FATAL, &q->qpx.qp_base);
  qp_state_set(q, s);
}

bool link_is_up(Runtime& r) {
  return r.link->link_up_now(r.registry.link_up);
}

void async_scan(Runtime& r, uint64_t now) {
  r.registry.next_scan_ns = now + param::kShimAsyncScanNs;
  for (UQp* q : r.registry.qps) note_qp_state(q);
  for (UCq* c : r.registry.cqs) {
    if (!c->overflow_reported && c->e->overflowed()) {
      c->overflow_reported = true;
      post_async(as_cq(c)->context, IBV_EVENT_CQ_ERR, as_cq(c));
    }
  }
  for (USrq* s : r.registry.srqs) {
    if (s->limit_armed && s->e->rq().size() < s->e->srq_limit) {
      s->limit_armed = false;
      s->e->srq_limit = 0;
      post_async(s->srq.context, IBV_EVENT_SRQ_LIMIT_REACHED, &s->srq);
    }
  }
  if (now >= r.registry.next_link_ns) {
    r.registry.next_link_ns = now + param::kShimLinkScanNs;
    // The GID table changed (a netdev's addresses, or the service's): the new table everywhere,
    // and IBV_EVENT_GID_CHANGE.
    if (r.link && r.link->poll_addresses() && r.link->alive()) {
      r.engine->set_gids(r.link->gids());
      build_gid_table(r.identity, *r.engine);
      for (UContext* c : r.registry.contexts) post_async(&c->vctx.context, IBV_EVENT_GID_CHANGE, nullptr);
    }
    // The service's daemon stopped: as rxe when its device goes away, the device is fatal for
    // every context, and every QP flushes its work requests (no poller waits forever).
    if (r.link && !r.link->alive() && !r.registry.device_lost) {
      r.registry.device_lost = true;
      E::QpAttr a;
      a.qp_state = E::QpState::Err;
      for (UQp* q : r.registry.qps) {
        r.engine->modify_qp(q->e, a, E::kAttrState);
        note_qp_state(q);
      }
      for (UContext* c : r.registry.contexts) post_async(&c->vctx.context, IBV_EVENT_DEVICE_FATAL, nullptr);
    }
    const bool up = link_is_up(r);
    if (up != r.registry.link_up) {
      r.registry.link_up = up;
      for (UContext* c : r.registry.contexts) post_async(&c->vctx.context, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR, nullptr);
    }
  }
}

void async_open(UContext* c) {
  Runtime& r = rt();
  // The link's state at open: a context hears of changes from now on (not of the state it opened in).
  const bool up = link_is_up(r);
  if (up != r.registry.link_up) {
    r.registry.link_up = up;
    for (UContext* o : r.registry.contexts) post_async(&o->vctx.context, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR, nullptr);
  }
  r.registry.next_link_ns = r.now_ns() + param::kShimLinkScanNs;
  r.registry.contexts.push_back(c);
}

void async_close(UContext* c) {
  Runtime& r = rt();
  std::erase(r.registry.contexts, c);
  // Objects the application did not destroy before closing their context: no more events
  // (their queue goes away with the context).
  const ibv_context* ctx = &c->vctx.context;
  auto of_ctx = [ctx](auto* o) { return o->context == ctx; };
  std::erase_if(r.registry.qps, [&](UQp* q) { return of_ctx(&q->qpx.qp_base); });
  std::erase_if(r.registry.cqs, [&](UCq* q) { return of_ctx(as_cq(q)); });
  std::erase_if(r.registry.srqs, [&](USrq* q) { return of_ctx(&q->srq); });
}

void async_forget_qp(UQp* q) {
  ibv_qp& b = q->qpx.qp_base;
  uint32_t n = forget(b.context, &b, [q] { return q->async_reported; });
  wait_acks(b, n, &ibv_qp::events_completed);
}

void async_forget_cq(UCq* u) {
  ibv_cq* c = as_cq(u);
  uint32_t n = forget(c->context, c, [u] { return u->async_reported; });
  wait_acks(*c, n, &ibv_cq::async_events_completed);
}

void async_forget_srq(USrq* s) {
  uint32_t n = forget(s->srq.context, &s->srq, [s] { return s->async_reported; });
  wait_acks(s->srq, n, &ibv_srq::events_completed);
}

int new_async_fd() { return eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE); }

}  // namespace uroce::shim

extern "C" {

SHIM_EXPORT int ibv_get_async_event(ibv_context* ctx, ibv_async_event* ev) {
  if (!mine(ctx)) return REAL(ibv_get_async_event)(ctx, ev);
  UContext* c = uctx(ctx);
  for (;;) {
    uint64_t v;
    // Blocks unless the application made async_fd non-blocking (then -1 with EAGAIN).
    if (read(ctx->async_fd, &v, sizeof v) != ssize_t(sizeof v)) {
      if (errno == EINTR) continue;
      return -1;
    }
    std::lock_guard<std::mutex> g(c->ev_mu);
    if (c->events.empty()) continue;   // the event of an object destroyed meanwhile
    *ev = c->events.front();
    c->events.pop_front();
    switch (kind_of(ev->event_type)) {
      case Kind::Qp: ++uqp(ev->element.qp)->async_reported; break;
      case Kind::Cq: ++ucq(ev->element.cq)->async_reported; break;
      case Kind::Srq: ++usrq(ev->element.srq)->async_reported; break;
      default: break;
    }
    return 0;
  }
}

SHIM_EXPORT void ibv_ack_async_event(ibv_async_event* ev) {
  const ibv_context* ctx = nullptr;
  switch (kind_of(ev->event_type)) {
    case Kind::Qp: ctx = ev->element.qp->context; break;
    case Kind::Cq: ctx = ev->element.cq->context; break;
    case Kind::Srq: ctx = ev->element.srq->context; break;
    default: return;   // port and device events: nothing to count
  }
  if (!mine(ctx)) return REAL(ibv_ack_async_event)(ev);
  auto ack = [](auto& o, uint32_t& completed) {
    pthread_mutex_lock(&o.mutex);
    ++completed;
    pthread_cond_signal(&o.cond);
    pthread_mutex_unlock(&o.mutex);
  };
  switch (kind_of(ev->event_type)) {
    case Kind::Qp: ack(*ev->element.qp, ev->element.qp->events_completed); break;
    case Kind::Cq: ack(*ev->element.cq, ev->element.cq->async_events_completed); break;
    case Kind::Srq: ack(*ev->element.srq, ev->element.srq->events_completed); break;
    default: break;
  }
}

}  // extern "C"
