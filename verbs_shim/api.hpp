// What the shim's files share: the export attribute, the libibverbs entry points verbs.h hides
// behind macros or does not declare, and the functions a uroce context and QP point to (the
// ibv_context ops, the verbs_context ops, the ibv_qp_ex builder), each defined in its concern's
// file. File map: docs/verbs_shim.md "Source layout".
#pragma once
#include <infiniband/verbs.h>

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

// The ibv_wr_* builder (wr_builder.cpp): the send operations it supports (send_ops_flags), and
// the function pointers of a QP created with them.
extern const uint64_t kSupportedSendOps;
void install_wr_ops(UQp* q);

// The engine's address vector for an application's ah_attr: the GID table entry, the GRH
// fields, the peer's MAC (link up, then ARP/ND; our own GIDs need neither). Without the token,
// which it takes step by step. 0, EINVAL or ETIMEDOUT. (verbs_shim/qp.cpp)
int resolve_peer(const ibv_ah_attr& ah, engine::AddressVector& out);

}  // namespace uroce::shim
