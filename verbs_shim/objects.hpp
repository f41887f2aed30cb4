// The shim's verbs objects: each wrapper starts with the libibverbs structure the application
// sees, followed by uroce's engine object; plus the casts between them and the test "is this
// object uroce's?" that every exported entry point asks first (docs/verbs_shim.md).
#pragma once
#include <infiniband/verbs.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "engine/engine.hpp"
#include "verbs_shim/runtime.hpp"
#include "verbs_shim/verbs_ext.hpp"

namespace uroce::shim {

// Wrappers: the ibv_* object first, then uroce's.
struct UContext {
  verbs_context vctx;
  // Asynchronous events (async.cpp): vctx.context.async_fd is an eventfd in semaphore mode
  // whose count is the number of events queued in `events` (or fewer: the events of a
  // destroyed object are dropped from the queue, and a read then finds nothing and reads again).
  std::mutex ev_mu;
  std::deque<ibv_async_event> events;
};
struct UPd {
  ibv_pd pd;
  engine::Pd* e;
  bool imported = false;  // by ibv_import_pd: ibv_unimport_pd frees this wrapper only
};
struct UMr {
  ibv_mr mr;
  engine::Mr* e;
  bool imported = false;  // by ibv_import_mr
};
struct UMw {
  ibv_mw mw;
  engine::Mw* e;
  uint32_t alloc_rkey;  // its R_Key at allocation: the index part names it in bind work requests
};
struct UChannel {
  ibv_comp_channel ch;
  int wfd;
};
struct UCq {
  ibv_cq_ex cq;      // starts with the ibv_cq fields
  engine::Cq* e;
  UChannel* ch;
  bool armed;
  uint64_t armed_at;
  std::atomic<uint32_t> events;      // events written to the channel's pipe
  std::atomic<uint32_t> events_read; // events returned by ibv_get_cq_event
  std::atomic<bool> dead;            // destroyed with events still in the pipe (kept, skipped)
  uint32_t async_reported = 0;       // async events returned by ibv_get_async_event (ctx ev_mu)
  bool overflow_reported = false;    // IBV_EVENT_CQ_ERR queued (token)
};
struct USrq {
  ibv_srq srq;
  engine::Srq* e;
  bool limit_armed = false;          // ibv_modify_srq set srq_limit; IBV_EVENT_SRQ_LIMIT_REACHED disarms (token)
  uint32_t async_reported = 0;       // (ctx ev_mu)
};
struct UQp {
  ibv_qp_ex qpx;     // qpx.qp_base is the ibv_qp
  ext::WrFlushFn wr_flush;  // ibv_qp_ex's next member in rdma-core 45 and later (verbs_ext.hpp)
  engine::Qp* e;
  bool ex;           // created with ibv_create_qp_ex and send_ops_flags: ibv_wr_* work
  // ibv_wr_* batch between wr_start and wr_complete
  std::vector<engine::SendWr> batch;
  std::vector<engine::Sge> batch_sge;   // kMaxSge per entry
  int batch_err;
  engine::QpState seen = engine::QpState::Reset;  // the state last seen by the shim (token)
  uint32_t async_reported = 0;       // (ctx ev_mu)
};
// wr_flush sits right after qpx, with no padding between: where a newer rdma-core puts it.
static_assert(sizeof(ibv_qp_ex) % alignof(ext::WrFlushFn) == 0);
struct UXrcd {
  ibv_xrcd xrcd;
  engine::Xrcd* e;   // shared by every open of its file (xrc.cpp)
};
struct UAh {
  ibv_ah ah;
  ibv_ah_attr attr;
  engine::Ah* e;     // the engine's address handle (UD sends)
};

// Is this device / this context's device uroce's?
inline bool mine_dev(const ibv_device* d) { return d == &rt().identity.dev; }
inline bool mine(const ibv_context* c) { return c && c->device == &rt().identity.dev; }

inline UContext* uctx(ibv_context* c) { return reinterpret_cast<UContext*>(verbs_get_ctx(c)); }
inline UPd* upd(ibv_pd* p) { return reinterpret_cast<UPd*>(p); }
inline UMr* umr(ibv_mr* m) { return reinterpret_cast<UMr*>(m); }
inline UMw* umw(ibv_mw* m) { return reinterpret_cast<UMw*>(m); }
inline UCq* ucq(ibv_cq* c) { return reinterpret_cast<UCq*>(c); }
inline UQp* uqp(ibv_qp* q) { return reinterpret_cast<UQp*>(q); }
inline UXrcd* uxrcd(ibv_xrcd* x) { return reinterpret_cast<UXrcd*>(x); }
inline USrq* usrq(ibv_srq* s) { return reinterpret_cast<USrq*>(s); }
inline ibv_cq* as_cq(UCq* c) { return reinterpret_cast<ibv_cq*>(&c->cq); }

// The mutex and condition variable of an ibv_cq, ibv_qp or ibv_srq (the library's event counting).
template <typename T>
void init_sync(T& o) {
  pthread_mutex_init(&o.mutex, nullptr);
  pthread_cond_init(&o.cond, nullptr);
}
template <typename T>
void destroy_sync(T& o) {
  pthread_mutex_destroy(&o.mutex);
  pthread_cond_destroy(&o.cond);
}

}  // namespace uroce::shim
