// The ibv_wr_* builder (struct ibv_qp_ex): work requests are collected between wr_start and
// wr_complete and posted together, under one hold of the ownership token.
#include <endian.h>
#include <cerrno>
#include <cstring>

#include "verbs_shim/api.hpp"

using namespace uroce;
using namespace uroce::shim;
namespace E = uroce::engine;

namespace {

UQp* from_ex(ibv_qp_ex* x) { return reinterpret_cast<UQp*>(x); }
E::SendWr& wr_new(ibv_qp_ex* x, E::WrOpcode op) {
  UQp* q = from_ex(x);
  q->batch.emplace_back();
  E::SendWr& w = q->batch.back();
  w.wr_id = x->wr_id;
  w.send_flags = x->wr_flags;
  w.opcode = op;
  return w;
}
E::SendWr* wr_cur(ibv_qp_ex* x) {
  UQp* q = from_ex(x);
  if (q->batch.empty()) {
    q->batch_err = EINVAL;
    return nullptr;
  }
  return &q->batch.back();
}
void wr_rdma_write(ibv_qp_ex* x, uint32_t rkey, uint64_t ra) {
  E::SendWr& w = wr_new(x, E::WrOpcode::RdmaWrite);
  w.rkey = rkey, w.remote_addr = ra;
}
void wr_rdma_write_imm(ibv_qp_ex* x, uint32_t rkey, uint64_t ra, __be32 imm) {
  E::SendWr& w = wr_new(x, E::WrOpcode::RdmaWriteWithImm);
  w.rkey = rkey, w.remote_addr = ra, w.imm_data = be32toh(imm);
}
void wr_rdma_read(ibv_qp_ex* x, uint32_t rkey, uint64_t ra) {
  E::SendWr& w = wr_new(x, E::WrOpcode::RdmaRead);
  w.rkey = rkey, w.remote_addr = ra;
}
void wr_send(ibv_qp_ex* x) { wr_new(x, E::WrOpcode::Send); }
void wr_send_imm(ibv_qp_ex* x, __be32 imm) { wr_new(x, E::WrOpcode::SendWithImm).imm_data = be32toh(imm); }
void wr_send_inv(ibv_qp_ex* x, uint32_t rkey) { wr_new(x, E::WrOpcode::SendWithInv).invalidate_rkey = rkey; }
void wr_cas(ibv_qp_ex* x, uint32_t rkey, uint64_t ra, uint64_t cmp, uint64_t swap) {
  E::SendWr& w = wr_new(x, E::WrOpcode::AtomicCmpSwp);
  w.rkey = rkey, w.remote_addr = ra, w.compare_add = cmp, w.swap = swap;
}
void wr_fadd(ibv_qp_ex* x, uint32_t rkey, uint64_t ra, uint64_t add) {
  E::SendWr& w = wr_new(x, E::WrOpcode::AtomicFetchAdd);
  w.rkey = rkey, w.remote_addr = ra, w.compare_add = add;
}
// IBA 1.5's ATOMIC WRITE: the 8 bytes at atomic_wr are copied now (the caller may reuse them
// at once, as with rdma-core's providers) and placed at the peer as one.
void wr_atomic_write(ibv_qp_ex* x, uint32_t rkey, uint64_t ra, const void* atomic_wr) {
  E::SendWr& w = wr_new(x, E::WrOpcode::AtomicWrite);
  w.rkey = rkey, w.remote_addr = ra;
  std::memcpy(&w.swap, atomic_wr, 8);
}
// IBA 1.5's FLUSH: type is IBV_FLUSH_GLOBAL and/or IBV_FLUSH_PERSISTENT, level IBV_FLUSH_RANGE
// ([remote_addr, remote_addr + len)) or IBV_FLUSH_MR (the whole region rkey names).
void wr_flush(ibv_qp_ex* x, uint32_t rkey, uint64_t ra, size_t len, uint8_t type, uint8_t level) {
  E::SendWr& w = wr_new(x, E::WrOpcode::Flush);
  w.rkey = rkey, w.remote_addr = ra;
  w.compare_add = len;
  w.flush_type = type;
  w.flush_level = level;
}
void wr_set_sge_list(ibv_qp_ex* x, size_t n, const ibv_sge* sg) {
  E::SendWr* w = wr_cur(x);
  if (!w) return;
  UQp* q = from_ex(x);
  if (n > E::kMaxSge) {
    q->batch_err = EINVAL;
    return;
  }
  size_t idx = q->batch.size() - 1;
  if (q->batch_sge.size() < (idx + 1) * E::kMaxSge) q->batch_sge.resize((idx + 1) * E::kMaxSge);
  std::memcpy(static_cast<void*>(&q->batch_sge[idx * E::kMaxSge]), sg, n * sizeof(ibv_sge));
  w->num_sge = uint32_t(n);
  w->sg_list = nullptr;  // set at complete (the vector may move)
}
void wr_set_sge(ibv_qp_ex* x, uint32_t lkey, uint64_t addr, uint32_t len) {
  ibv_sge s{addr, len, lkey};
  wr_set_sge_list(x, 1, &s);
}
void wr_set_inline_data(ibv_qp_ex* x, void* addr, size_t len) {
  // Inline data is copied by the engine at post time: describe it as an SGE with the INLINE flag.
  E::SendWr* w = wr_cur(x);
  if (!w) return;
  w->send_flags |= IBV_SEND_INLINE;
  ibv_sge s{reinterpret_cast<uintptr_t>(addr), uint32_t(len), 0};
  wr_set_sge_list(x, 1, &s);
}
void wr_set_inline_data_list(ibv_qp_ex* x, size_t n, const ibv_data_buf* b) {
  E::SendWr* w = wr_cur(x);
  if (!w) return;
  w->send_flags |= IBV_SEND_INLINE;
  ibv_sge s[E::kMaxSge];
  if (n > E::kMaxSge) {
    from_ex(x)->batch_err = EINVAL;
    return;
  }
  for (size_t i = 0; i < n; ++i) s[i] = ibv_sge{reinterpret_cast<uintptr_t>(b[i].addr), uint32_t(b[i].length), 0};
  wr_set_sge_list(x, n, s);
}
// The ownership token is held from wr_start to wr_complete or wr_abort (as rdma-core's
// providers hold the QP's lock): the batch is per-QP state that two threads must not build at
// once, and nothing else runs the engine in between.
void wr_start(ibv_qp_ex* x) {
  rt().token.lock();
  UQp* q = from_ex(x);
  q->batch.clear();
  q->batch_err = 0;
}
int wr_complete(ibv_qp_ex* x) {
  UQp* q = from_ex(x);
  Runtime& r = rt();
  int rc = q->batch_err;
  for (size_t i = 0; i < q->batch.size() && !rc; ++i) {
    E::SendWr& w = q->batch[i];
    w.sg_list = w.num_sge ? &q->batch_sge[i * E::kMaxSge] : nullptr;
    rc = r.engine->post_send(q->e, w);
  }
  if (!q->batch_err) r.drive();
  q->batch.clear();
  r.token.unlock();
  return rc;
}
void wr_abort(ibv_qp_ex* x) {
  from_ex(x)->batch.clear();
  rt().token.unlock();
}
void wr_set_ud_addr(ibv_qp_ex* x, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  E::SendWr* w = wr_cur(x);
  if (!w) return;
  w->ah = ah ? reinterpret_cast<const UAh*>(ah)->e : nullptr;
  w->remote_qpn = remote_qpn;
  w->remote_qkey = remote_qkey;
}
void wr_set_xrc_srqn(ibv_qp_ex* x, uint32_t remote_srqn) {
  if (E::SendWr* w = wr_cur(x)) w->xrc_srqn = remote_srqn;
}
void wr_local_inv(ibv_qp_ex* x, uint32_t rkey) { wr_new(x, E::WrOpcode::LocalInv).invalidate_rkey = rkey; }
void wr_bind_mw(ibv_qp_ex* x, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* b) {
  E::SendWr& w = wr_new(x, E::WrOpcode::BindMw);
  const uint64_t id = w.wr_id;
  const uint32_t flags = w.send_flags;
  bind_wr(w, mw, rkey, *b);
  w.wr_id = id;
  w.send_flags = flags;
}
void wr_unsupported_tso(ibv_qp_ex* x, void*, uint16_t, uint16_t) { from_ex(x)->batch_err = EOPNOTSUPP; }

}  // namespace

namespace uroce::shim {

const uint64_t kSupportedSendOps =
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_ATOMIC_WRITE |
    ext::kQpExWithFlush | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;

void install_wr_ops(UQp* u) {
  ibv_qp_ex& x = u->qpx;
  x.wr_rdma_write = wr_rdma_write;
  x.wr_rdma_write_imm = wr_rdma_write_imm;
  x.wr_rdma_read = wr_rdma_read;
  x.wr_send = wr_send;
  x.wr_send_imm = wr_send_imm;
  x.wr_send_inv = wr_send_inv;
  x.wr_atomic_cmp_swp = wr_cas;
  x.wr_atomic_fetch_add = wr_fadd;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_xrc_srqn = wr_set_xrc_srqn;
  x.wr_local_inv = wr_local_inv;
  x.wr_bind_mw = wr_bind_mw;
  x.wr_send_tso = wr_unsupported_tso;
  x.wr_atomic_write = wr_atomic_write;
  u->wr_flush = wr_flush;
  u->batch.reserve(param::kShimWrBatchReserve);
}

}  // namespace uroce::shim
