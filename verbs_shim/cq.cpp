// Completion queues: ibv_cq and ibv_cq_ex (ibv_start_poll / ibv_next_poll / ibv_wc_read_*), and
// completion channels (a pipe written by whoever drives progress, Runtime::drive, through
// notify_channels). ibv_poll_cq
// and ibv_req_notify_cq are in datapath.cpp.
#include <fcntl.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <endian.h>
#include <cerrno>
#include <type_traits>

#include "verbs_shim/api.hpp"

using namespace uroce;
using namespace uroce::shim;
namespace E = uroce::engine;

namespace {

UCq* create_cq_common(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector,
                      bool times = false) {
  Runtime& r = rt();
  if (cqe <= 0 || uint32_t(cqe) > r.dcfg.max_cqe || comp_vector < 0 || comp_vector >= ctx->num_comp_vectors ||
      (channel && !mine(channel->context))) {
    errno = EINVAL;
    return nullptr;
  }
  auto* u = new UCq{};
  E::Cq* e = with_token([&] { return u->e = r.engine->create_cq(uint32_t(cqe), times); });
  if (!e) {
    delete u;
    errno = ENOMEM;
    return nullptr;
  }
  ibv_cq* c = as_cq(u);
  c->context = ctx;
  c->channel = channel;
  c->cq_context = cq_context;
  c->handle = 0;
  c->cqe = cqe;
  init_sync(*c);
  u->ch = reinterpret_cast<UChannel*>(channel);
  if (channel) ++channel->refcnt;
  // Watched for IBV_EVENT_CQ_ERR (async.cpp) once whole, as QPs are (qp.cpp).
  with_token([&r, u] { r.registry.cqs.push_back(u); });
  return u;
}

// ibv_cq_ex: completions are read one at a time from a small buffer filled under the token.
thread_local E::Wc t_wc __attribute__((tls_model("initial-exec")));
int cqx_next(ibv_cq_ex* cq) {
  Runtime& r = rt();
  UCq* c = reinterpret_cast<UCq*>(cq);
  int k;
  r.token.lock();
  r.policy.app_poll_ns.store(r.now_ns(), std::memory_order_relaxed);
  r.drive();
  k = r.engine->poll_cq(c->e, 1, &t_wc);
  r.token.unlock();
  if (k == 0) return ENOENT;
  cq->wr_id = t_wc.wr_id;
  cq->status = ibv_wc_status(t_wc.status);
  return 0;
}
int cqx_start(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  if (attr->comp_mask) return EINVAL;
  return cqx_next(cq);
}
void cqx_end(ibv_cq_ex*) {}
ibv_wc_opcode cqx_opcode(ibv_cq_ex*) { return ibv_wc_opcode(t_wc.opcode); }
uint32_t cqx_vendor_err(ibv_cq_ex*) { return t_wc.vendor_err; }
uint32_t cqx_byte_len(ibv_cq_ex*) { return t_wc.byte_len; }
__be32 cqx_imm(ibv_cq_ex*) { return htobe32(t_wc.imm_data); }
uint32_t cqx_qp_num(ibv_cq_ex*) { return t_wc.qp_num; }
uint32_t cqx_src_qp(ibv_cq_ex*) { return t_wc.src_qp; }
unsigned int cqx_wc_flags(ibv_cq_ex*) { return t_wc.wc_flags; }
// Completion timestamps: ticks of the device clock (ns, param::kCoreClockKhz), and that moment
// on the system's real-time clock (how long ago it was, by the device clock, taken from now).
uint64_t cqx_completion_ts(ibv_cq_ex*) { return t_wc.completion_ns; }
uint64_t cqx_completion_wallclock_ns(ibv_cq_ex*) {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  const uint64_t ago = rt().now_ns() - t_wc.completion_ns;
  return uint64_t(now.tv_sec) * 1'000'000'000ull + uint64_t(now.tv_nsec) - ago;
}
uint32_t cqx_zero32(ibv_cq_ex*) { return 0; }
uint8_t cqx_zero8(ibv_cq_ex*) { return 0; }

}  // namespace

namespace uroce::shim {

void notify_channels(Registry& reg) {
  for (size_t i = 0; i < reg.armed.size();) {
    UCq* c = reg.armed[i];
    if (c->e->completions_pushed() != c->armed_at) {
      c->armed = false;
      c->events.fetch_add(1, std::memory_order_relaxed);
      ssize_t k = write(c->ch->wfd, &c, sizeof c);
      (void)k;
      reg.armed[i] = reg.armed.back();
      reg.armed.pop_back();
    } else {
      ++i;
    }
  }
}

ibv_cq_ex* vop_create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* ia) {
  constexpr uint64_t kTimes = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  constexpr uint64_t kFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                              IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                              IBV_WC_EX_WITH_DLID_PATH_BITS | kTimes;
  if ((ia->wc_flags & ~kFlags) || ia->comp_mask) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  UCq* u = create_cq_common(ctx, int(ia->cqe), ia->cq_context, ia->channel, int(ia->comp_vector),
                            (ia->wc_flags & kTimes) != 0);
  if (!u) return nullptr;
  ibv_cq_ex& x = u->cq;
  x.start_poll = cqx_start;
  x.next_poll = cqx_next;
  x.end_poll = cqx_end;
  x.read_opcode = cqx_opcode;
  x.read_vendor_err = cqx_vendor_err;
  x.read_byte_len = cqx_byte_len;
  x.read_imm_data = cqx_imm;
  x.read_qp_num = cqx_qp_num;
  x.read_src_qp = cqx_src_qp;
  x.read_wc_flags = cqx_wc_flags;
  x.read_slid = cqx_zero32;
  x.read_sl = cqx_zero8;
  x.read_dlid_path_bits = cqx_zero8;
  x.read_completion_ts = cqx_completion_ts;
  x.read_completion_wallclock_ns = cqx_completion_wallclock_ns;
  return &x;
}

}  // namespace uroce::shim

extern "C" {

// ---- Completion channels --------------------------------------------------------------------------
SHIM_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx) {
  if (!mine(ctx)) return REAL(ibv_create_comp_channel)(ctx);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
  auto* u = new UChannel{};
  u->ch.context = ctx;
  u->ch.fd = fds[0];
  u->ch.refcnt = 0;
  u->wfd = fds[1];
  return &u->ch;
}

SHIM_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* ch) {
  if (!mine(ch->context)) return REAL(ibv_destroy_comp_channel)(ch);
  auto* u = reinterpret_cast<UChannel*>(ch);
  if (ch->refcnt) return EBUSY;
  close(u->ch.fd);
  close(u->wfd);
  delete u;
  return 0;
}

SHIM_EXPORT int ibv_get_cq_event(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context) {
  if (!mine(ch->context)) return REAL(ibv_get_cq_event)(ch, cq, cq_context);
  UCq* u = nullptr;
  for (;;) {
    ssize_t k;
    do {
      k = read(ch->fd, &u, sizeof u);
    } while (k < 0 && errno == EINTR);
    if (k != ssize_t(sizeof u)) return -1;
    u->events_read.fetch_add(1);
    if (!u->dead) break;
  }
  *cq = as_cq(u);
  *cq_context = as_cq(u)->cq_context;
  return 0;
}

SHIM_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (!mine(cq->context)) return REAL(ibv_ack_cq_events)(cq, nevents);
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

// ---- CQ -------------------------------------------------------------------------------------------
SHIM_EXPORT ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel,
                                  int comp_vector) {
  if (!mine(ctx)) return REAL(ibv_create_cq)(ctx, cqe, cq_context, channel, comp_vector);
  UCq* u = create_cq_common(ctx, cqe, cq_context, channel, comp_vector);
  return u ? as_cq(u) : nullptr;
}

SHIM_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  if (!mine(cq->context)) return REAL(ibv_destroy_cq)(cq);
  Runtime& r = rt();
  UCq* u = ucq(cq);
  int rc = destroy_watched(r.registry.cqs, u, [&r, u] {
    int k = r.engine->destroy_cq(u->e);
    if (k == 0) std::erase(r.registry.armed, u);
    return k;
  });
  if (rc) return rc;
  async_forget_cq(u);
  // As the real library: wait until every event the application got has been acknowledged.
  pthread_mutex_lock(&cq->mutex);
  while (cq->comp_events_completed < u->events_read.load()) pthread_cond_wait(&cq->cond, &cq->mutex);
  pthread_mutex_unlock(&cq->mutex);
  if (cq->channel) --cq->channel->refcnt;
  if (u->events.load() != u->events_read.load()) {
    // Events still unread in the pipe name this CQ: keep the (small) wrapper so that
    // ibv_get_cq_event can recognise and skip them, as the kernel drops a destroyed CQ's events.
    u->dead = true;
    return 0;
  }
  destroy_sync(*cq);
  delete u;
  return 0;
}

// The engine's CQ is a fixed ring that QPs point to. Resizing builds a ring of the new depth
// with the completions not yet polled, in order, and assigns it to the same engine::Cq (its
// address, which the QPs hold, does not change), under the token. The new depth must hold the
// completions outstanding. The CQ's completion count restarts (an armed notification that is
// due stays due); an overflow already reported is not reported again.
static_assert(std::is_move_assignable_v<E::Cq>, "ibv_resize_cq assigns a new ring to the engine CQ");
SHIM_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
  if (!mine(cq->context)) return REAL(ibv_resize_cq)(cq, cqe);
  Runtime& r = rt();
  UCq* u = ucq(cq);
  if (cqe <= 0 || uint32_t(cqe) > r.dcfg.max_cqe) return EINVAL;
  Guard g;
  E::Cq& e = *u->e;
  if (uint32_t(cqe) < e.size()) return EINVAL;
  const bool due = u->armed && e.completions_pushed() != u->armed_at;
  E::Cq n{uint32_t(cqe)};
  E::Wc w;
  while (e.poll(&w, 1)) n.push(w);
  e = std::move(n);
  if (u->armed) u->armed_at = e.completions_pushed() + (due ? 1 : 0);
  cq->cqe = cqe;
  return 0;
}

}  // extern "C"
