// What the shim's files share: the export attribute, the libibverbs entry points verbs.h hides
// behind macros or does not declare, and the functions a uroce context and QP point to (the
// ibv_context ops, the verbs_context ops, the ibv_qp_ex builder), each defined in its concern's
// file. File map: docs/verbs_shim.md "Source layout".
#pragma once
#include <infiniband/verbs.h>

#include <algorithm>
#include <vector>

#include "verbs_shim/objects.hpp"
#include "verbs_shim/real.hpp"

// verbs.h wraps some entry points in macros and inline functions; the shim defines the real symbols.
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port
#undef ibv_get_device_list

// The library is built with hidden visibility: only the ibv_* entry points are exported.
#define SHIM_EXPORT __attribute__((visibility("default")))

extern "C" {
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);
int ibv_query_gid_type(struct ibv_context* context, uint8_t port_num, unsigned int index, int* type);
}

namespace uroce::shim {

// ibv_context ops: the data path (datapath.cpp).
int op_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int op_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);
int op_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad);
int op_poll_cq(ibv_cq* cq, int n, ibv_wc* wc);
int op_req_notify_cq(ibv_cq* cq, int solicited_only);

// verbs_context ops (device.cpp, qp.cpp, cq.cpp).
int vop_query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t len);
int vop_query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                        size_t len);
ibv_qp* vop_create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* ia);
ibv_cq_ex* vop_create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* ia);
int vop_query_rt_values(ibv_context* ctx, ibv_values_ex* values);
// An engine SRQ's ibv_srq, watched for asynchronous events (srq.cpp; ibv_create_srq, XRC SRQs).
ibv_srq* wrap_srq(ibv_context* ctx, void* srq_context, ibv_pd* pd, engine::Srq* e);
// XRC (xrc.cpp): domains and XRC SRQs.
ibv_xrcd* vop_open_xrcd(ibv_context* ctx, ibv_xrcd_init_attr* ia);
int vop_close_xrcd(ibv_xrcd* xrcd);
ibv_srq* vop_create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* ia);
int vop_get_srq_num(ibv_srq* srq, uint32_t* srq_num);
int vop_advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list, uint32_t num_sge);

// Asynchronous events (async.cpp). post_async queues one event on the context's queue and
// counts it on async_fd (element: the ibv_qp, ibv_cq or ibv_srq; nullptr for a port event).
// note_qp_state (token held): if the engine put the QP in ERR since the shim last looked,
// IBV_EVENT_QP_FATAL (and IBV_EVENT_QP_LAST_WQE_REACHED with an SRQ); then remembers the state.
// qp_state_set (token held): the application moved the QP to `s` (ibv_modify_qp): no QP_FATAL;
// IBV_EVENT_QP_LAST_WQE_REACHED when a QP with an SRQ enters ERR.
// async_forget_*: after the object left the watched lists (token), drop its queued events and
// wait until the application has acknowledged every event it got for it (as for CQ events).
void post_async(ibv_context* ctx, ibv_event_type type, void* element);
void note_qp_state(UQp* q);
void qp_state_set(UQp* q, engine::QpState s);
void async_forget_qp(UQp* q);
void async_forget_cq(UCq* c);
void async_forget_srq(USrq* s);
// async_scan (token held): compare the watched objects' state with what was last seen and queue
// the events (IBV_EVENT_QP_FATAL, _QP_LAST_WQE_REACHED, _CQ_ERR, _SRQ_LIMIT_REACHED, and the
// port's _PORT_ACTIVE / _PORT_ERR when the link changed); `now` from the engine's clock.
// link_is_up (token held): the link's state now (DpdkLink::link_up_now).
void async_scan(Runtime& r, uint64_t now);
bool link_is_up(Runtime& r);
void async_open(UContext* c);     // token held: watch the context (port events from now on)
void async_close(UContext* c);    // token held
int new_async_fd();               // the eventfd behind a context's async_fd

// A destroy call's engine part, with the token: `destroy()` (0 or an errno), and on success the
// object leaves the list of objects watched for asynchronous events.
template <typename U, typename F>
int destroy_watched(std::vector<U*>& watched, U* u, F&& destroy) {
  Guard g;
  int rc = destroy();
  if (rc == 0) std::erase(watched, u);
  return rc;
}
// The whole destroy call of a QP or SRQ (`obj` its libibverbs object, `u` the wrapper, `watched`
// its registry list): the engine's destroy (engine::Device::destroy_qp or _srq) as above, then
// the object's asynchronous events forgotten (async_forget_qp or _srq) and the wrapper freed.
// 0, or the engine's errno (the object then stays).
template <typename U, typename Obj, typename E>
int destroy_object(std::vector<U*>& watched, U* u, Obj& obj, int (engine::Device::*destroy)(E*), void (*forget)(U*)) {
  if (int rc = destroy_watched(watched, u, [u, destroy] { return (rt().engine->*destroy)(u->e); })) return rc;
  forget(u);
  destroy_sync(obj);
  delete u;
  return 0;
}

// Completion channels (cq.cpp), token held, after a progress step: each armed CQ with a new
// completion writes its event to its channel's pipe and leaves the armed list.
void notify_channels(Registry& reg);

// Memory windows (pd_mr.cpp): the context ops behind ibv_alloc_mw, ibv_dealloc_mw and
// ibv_bind_mw (type 1), and the engine's BIND_MW work request for a bind's description (also
// ibv_post_send's IBV_WR_BIND_MW and ibv_wr_bind_mw).
ibv_mw* op_alloc_mw(ibv_pd* pd, ibv_mw_type type);
int op_dealloc_mw(ibv_mw* mw);
int op_bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);
void bind_wr(engine::SendWr& w, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& b);

// The ibv_wr_* builder (wr_builder.cpp): the send operations it supports (send_ops_flags), and
// the function pointers of a QP created with them.
extern const uint64_t kSupportedSendOps;
void install_wr_ops(UQp* q);

// Before a UD or UC QP goes (ibv_destroy_qp, the process's exit): its posted sends are put on
// the wire, driving the engine at most param::kShimSendPostedWaitNs. Token held.
// (verbs_shim/qp.cpp)
void send_posted(Runtime& r, engine::Qp* q);

// The engine's address vector for an application's ah_attr: the GID table entry, the GRH
// fields, the peer's MAC (link up, then ARP/ND; our own GIDs need neither). Without the token,
// which it takes step by step. 0, EINVAL or ETIMEDOUT. (verbs_shim/qp.cpp)
int resolve_peer(const ibv_ah_attr& ah, engine::AddressVector& out);

}  // namespace uroce::shim
