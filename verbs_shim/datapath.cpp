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

// With the token held, after a poll that returned only send-queue completions (or a post by an
// application that does not poll): a process that plays ping-pong (it received a request
// lately) and has had no request since its last post next waits for the peer's answer, often by
// spinning on memory (ib_write_lat), where no verbs call of its own would place it and the
// poller, napping beside a running application, would come 20 us late. So keep the engine
// turning until the next request arrives, up to linger_ns. A process whose lingers keep finding
// nothing (a bandwidth loop, a READ loop) stops lingering for a while; one whose lingers mostly
// find the answer (a ping-pong whose peer was descheduled now and then) goes on.
void linger(Runtime& r) {
  E::Device& d = *r.engine;
  const uint64_t start = d.last_step_ns();
  // The answer came already (a request since the last post), perhaps in the step that brought
  // the ACK; or this process has not been receiving requests.
  const uint64_t mark = r.linger_mark;
  if (d.requests_received() != mark) {
    ++r.linger_answered;
    return;
  }
  if (start < r.linger_off_until.load(std::memory_order_relaxed) || start - d.last_request_ns() > param::kShimLingerRecentNs) {
    ++r.linger_skipped;
    return;
  }
  while (d.requests_received() == mark) {
    if (d.last_step_ns() - start >= r.linger_ns) {
      ++r.linger_missed;
      if (r.linger_score < param::kShimLingerMissCost) {
        r.linger_score = 0;
        r.linger_off_until.store(start + param::kShimLingerBackoffNs, std::memory_order_relaxed);
      } else {
        r.linger_score -= param::kShimLingerMissCost;
      }
      return;
    }
    r.drive();
    r.note_app(d.last_step_ns());  // still driving: the poller stays away
  }
  r.linger_hits.store(r.linger_hits.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  r.linger_score = std::min(r.linger_score + 1, param::kShimLingerScoreMax);
}

}  // namespace

int op_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Runtime& r = rt();
  UQp* q = uqp(qp);
  int rc = 0;
  Guard g;
  r.linger_mark = r.engine->requests_received();  // the answer to this post is a request after it
  uint64_t n = 0;
  for (; wr; wr = wr->next, ++n) {
    rc = r.engine->post_send(q->e, to_engine(*wr, qp->qp_type));
    if (rc) {
      *bad = wr;
      break;
    }
  }
  r.count_ops(n);
  r.posted_undriven += uint32_t(n);
  // An application that is polling its CQ sends the frames with its next poll_cq (a progress()
  // per post would halve perftest's post-one/poll loops), or once kShimPostBurst WRs wait (a long
  // run of posts would otherwise leave the link idle: perftest posts 100 at a time); one that is
  // not polling (it waits on memory, as ib_write_lat does, or on a completion channel) gets them
  // sent now.
  const uint64_t now = r.now_ns();
  const bool polling = now - r.app_poll_ns.load(std::memory_order_relaxed) < r.app_active_ns;
  r.note_app(now);
  if (r.calls_drive() && (r.eager_post || !polling || r.posted_undriven >= param::kShimPostBurst)) {
    r.drive();
    // An application that posts without polling may spin on memory next for the answer.
    if (!polling && r.linger_ns) linger(r);
  }
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
  bool recv = false;
  const int total = int(c->e->poll_each(uint32_t(n), [&wc, &recv](const E::Wc& w) {
    to_ibv_wc(w, *wc);
    recv |= (wc->opcode & IBV_WC_RECV) != 0;
    ++wc;
  }));
  if (total) {
    r.count_ops(uint64_t(total));
    if (!recv && r.linger_ns && r.calls_drive()) linger(r);
  }
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
