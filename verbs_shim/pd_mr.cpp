// Protection domains, memory regions (ibv_rereg_mr by registering anew) and address handles
// (ibv_create_ah_from_wc / ibv_init_ah_from_wc read the GRH area: convert.cpp grh_to_ah_attr).
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "verbs_shim/api.hpp"
#include "verbs_shim/convert.hpp"

using namespace uroce;
using namespace uroce::shim;
namespace E = uroce::engine;

namespace {

// The application's objects for an engine PD or MR (a new one, or an imported one).
ibv_pd* wrap_pd(ibv_context* ctx, E::Pd* p, bool imported) {
  auto* u = new UPd{};
  u->pd.context = ctx;
  u->pd.handle = p->handle;
  u->e = p;
  u->imported = imported;
  return &u->pd;
}

ibv_mr* wrap_mr(ibv_pd* pd, E::Mr* m, void* addr, size_t length, bool imported) {
  auto* u = new UMr{};
  u->mr.context = pd->context;
  u->mr.pd = pd;
  u->mr.addr = addr;
  u->mr.length = length;
  u->mr.handle = m->lkey;
  u->mr.lkey = m->lkey;
  u->mr.rkey = m->rkey;
  u->e = m;
  u->imported = imported;
  return &u->mr;
}

ibv_mr* reg_mr_common(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  if (!mr_access(access, access)) {
    errno = EINVAL;
    return nullptr;
  }
  if (access & IBV_ACCESS_ZERO_BASED) iova = 0;
  errno = 0;
  E::Mr* m = with_token([&] { return rt().engine->reg_mr_iova(upd(pd)->e, addr, length, iova, access); });
  if (!m) {
    if (errno == 0) errno = ENOMEM;  // the engine says EFAULT (not mapped) or EINVAL (too long)
    return nullptr;
  }
  return wrap_mr(pd, m, addr, length, false);
}

}  // namespace

namespace uroce::shim {

// ibv_advise_mr (verbs_context op): prefetch of on-demand paging MRs, done before it returns
// (IBV_ADVISE_MR_FLAG_FLUSH or not). The errors of its man page: ENOTSUP an advice it does not
// know, EINVAL flags it does not know or a key of an MR that is not on demand, EFAULT a bad key, a
// range outside its MR or pages that cannot be faulted in (Device::advise_mr).
int vop_advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list, uint32_t num_sge) {
  E::Device::Advice a;
  switch (advice) {
    case IBV_ADVISE_MR_ADVICE_PREFETCH: a = E::Device::Advice::Prefetch; break;
    case IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE: a = E::Device::Advice::PrefetchWrite; break;
    case IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: a = E::Device::Advice::PrefetchNoFault; break;
    default: return ENOTSUP;
  }
  if (flags & ~uint32_t(IBV_ADVISE_MR_FLAG_FLUSH)) return EINVAL;
  if (num_sge && !sg_list) return EINVAL;
  return with_token([&] {
    return rt().engine->advise_mr(upd(pd)->e, a, reinterpret_cast<const E::Sge*>(sg_list), num_sge);
  });
}

}  // namespace uroce::shim

extern "C" {

// ---- PD -------------------------------------------------------------------------------------------
SHIM_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  if (!mine(ctx)) return REAL(ibv_alloc_pd)(ctx);
  E::Pd* p = with_token([] { return rt().engine->alloc_pd(); });
  if (!p) {
    errno = ENOMEM;
    return nullptr;
  }
  return wrap_pd(ctx, p, false);
}

SHIM_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  if (!mine(pd->context)) return REAL(ibv_dealloc_pd)(pd);
  int rc = with_token([pd] { return rt().engine->dealloc_pd(upd(pd)->e); });
  if (rc == 0) delete upd(pd);
  return rc;
}

// ---- MR -------------------------------------------------------------------------------------------
SHIM_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  if (!mine(pd->context)) return REAL(ibv_reg_mr)(pd, addr, length, access);
  return reg_mr_common(pd, addr, length, reinterpret_cast<uintptr_t>(addr), unsigned(access));
}

SHIM_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  if (!mine(pd->context)) return REAL(ibv_reg_mr_iova)(pd, addr, length, iova, access);
  return reg_mr_common(pd, addr, length, iova, unsigned(access));
}

SHIM_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  if (!mine(pd->context)) return REAL(ibv_reg_mr_iova2)(pd, addr, length, iova, access);
  return reg_mr_common(pd, addr, length, iova, access);
}

SHIM_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  if (!mine(mr->context)) return REAL(ibv_dereg_mr)(mr);
  int rc = with_token([mr] { return rt().engine->dereg_mr(umr(mr)->e); });
  if (rc == 0) delete umr(mr);
  return rc;
}

// Re-registration changes the engine's MR in place (engine::Device::rereg_mr): the same lkey and
// rkey, as rxe and ConnectX keep them, so a peer that holds the rkey gets the new rights at
// once. On failure the old registration is kept (IBV_REREG_MR_ERR_INPUT).
SHIM_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  if (!mine(mr->context)) return REAL(ibv_rereg_mr)(mr, flags, pd, addr, length, access);
  UMr* u = umr(mr);
  if (flags <= 0 || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
      ((flags & IBV_REREG_MR_CHANGE_PD) && (!pd || !mine(pd->context))) ||
      ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length))) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  ibv_pd* npd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : mr->pd;
  void* naddr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : u->e->host;
  uint64_t nlen = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : u->e->length;
  uint64_t niova = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? reinterpret_cast<uintptr_t>(addr) : u->e->iova;
  unsigned nacc = u->e->access;
  if ((flags & IBV_REREG_MR_CHANGE_ACCESS) && !mr_access(unsigned(access), nacc)) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (nacc & IBV_ACCESS_ZERO_BASED) niova = 0;
  Runtime& r = rt();
  Guard g;
  if (int rc = r.engine->rereg_mr(u->e, upd(npd)->e, naddr, nlen, niova, nacc)) {
    errno = rc;
    return IBV_REREG_MR_ERR_INPUT;   // the old registration is unchanged
  }
  mr->pd = npd;
  mr->addr = naddr;
  mr->length = nlen;
  return 0;
}

}  // extern "C"

// ---- MW -------------------------------------------------------------------------------------------
// Memory windows (docs/verbs_shim.md, "Memory windows"): type 1 bound by ibv_bind_mw, type 2 by a
// BIND_MW work request; both executed by the engine in the QP's send queue order.
namespace uroce::shim {

ibv_mw* op_alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  errno = 0;
  E::Mw* m = with_token([&] { return rt().engine->alloc_mw(upd(pd)->e, uint8_t(type)); });
  if (!m) {
    if (errno == 0) errno = ENOMEM;
    return nullptr;
  }
  auto* u = new UMw{};
  u->mw.context = pd->context;
  u->mw.pd = pd;
  u->mw.rkey = m->rkey;
  u->mw.handle = m->rkey >> 8;
  u->mw.type = type;
  u->e = m;
  u->alloc_rkey = m->rkey;
  return &u->mw;
}

int op_dealloc_mw(ibv_mw* mw) {
  const int rc = with_token([mw] { return rt().engine->dealloc_mw(umw(mw)->e); });
  if (rc == 0) delete umw(mw);
  return rc;
}

void bind_wr(E::SendWr& w, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& b) {
  w.opcode = E::WrOpcode::BindMw;
  w.invalidate_rkey = mw ? umw(mw)->alloc_rkey : 0;
  w.rkey = rkey;
  w.remote_addr = b.addr;
  w.compare_add = b.length;
  w.swap = uint64_t(b.mr ? b.mr->lkey : 0) | uint64_t(b.mw_access_flags) << 32;
  w.sg_list = nullptr;
  w.num_sge = 0;
}

// ibv_bind_mw (libibverbs checked the type, the MR's PD and an MR for a range): a BIND_MW work
// request with the next key (ibv_inc_rkey), as rdma-core's providers post it; the window's
// rkey is that key once it is posted.
int op_bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mb) {
  E::SendWr w;
  bind_wr(w, mw, ibv_inc_rkey(mw->rkey), mb->bind_info);
  w.wr_id = mb->wr_id;
  w.send_flags = mb->send_flags;
  Runtime& r = rt();
  Guard g;
  if (r.registry.device_lost) return EIO;
  post_begin(r);
  const int rc = r.engine->post_send(uqp(qp)->e, w);
  posted(r, rc == 0);
  if (rc == 0) mw->rkey = w.rkey;
  return rc;
}

}  // namespace uroce::shim

extern "C" {

// dma-buf memory (device memory exported by a GPU driver) cannot be reached by a user-space engine.
SHIM_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) {
  if (!mine(pd->context)) return REAL(ibv_reg_dmabuf_mr)(pd, offset, length, iova, fd, access);
  errno = EOPNOTSUPP;
  return nullptr;
}

// Importing: another object for a PD or MR that exists (by its handle), as rdma-core's providers
// make one for an object the kernel holds. The device's objects live in this process until it
// is the host's (issue 29), so an import names an object of this process (a context imported
// with ibv_import_device from a dup of the first one's cmd_fd, a library sharing its caller's
// PD). ibv_unimport_* frees the imported object only; ibv_dealloc_pd / ibv_dereg_mr on it
// destroys the object itself, as with rdma-core.
SHIM_EXPORT ibv_pd* ibv_import_pd(ibv_context* ctx, uint32_t handle) {
  if (!mine(ctx)) return REAL(ibv_import_pd)(ctx, handle);
  E::Pd* p = with_token([handle] { return rt().engine->pd_by_handle(handle); });
  if (!p) {
    errno = EINVAL;
    return nullptr;
  }
  return wrap_pd(ctx, p, true);
}

SHIM_EXPORT void ibv_unimport_pd(ibv_pd* pd) {
  if (!mine(pd->context)) return REAL(ibv_unimport_pd)(pd);
  if (upd(pd)->imported) delete upd(pd);
}

SHIM_EXPORT ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t handle) {
  if (!mine(pd->context)) return REAL(ibv_import_mr)(pd, handle);
  E::Mr* m = with_token([pd, handle]() -> E::Mr* {
    E::Mr* x = rt().engine->mrs().mr_by_lkey(handle);  // an MR's handle is its lkey
    return x && x->pd == upd(pd)->e ? x : nullptr;
  });
  if (!m) {
    errno = EINVAL;
    return nullptr;
  }
  return wrap_mr(pd, m, m->host, m->length, true);
}

SHIM_EXPORT void ibv_unimport_mr(ibv_mr* mr) {
  if (!mine(mr->context)) return REAL(ibv_unimport_mr)(mr);
  if (umr(mr)->imported) delete umr(mr);
}

// ---- AH -------------------------------------------------------------------------------------------
SHIM_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (!mine(pd->context)) return REAL(ibv_create_ah)(pd, attr);
  // An engine address handle for UD sends, with the peer's MAC resolved now (ARP/ND), as
  // rdma-core's providers do for RoCE.
  if (attr->port_num != 1 || !attr->is_global) {
    errno = EINVAL;
    return nullptr;
  }
  E::AddressVector av;
  if (int rc = resolve_peer(*attr, av)) {
    errno = rc;
    return nullptr;
  }
  errno = 0;
  E::Ah* e = with_token([&] { return rt().engine->create_ah(upd(pd)->e, av); });
  if (!e) {
    // EINVAL: a GID index not in the table, or an IPv4 source for an IPv6 destination;
    // ENOMEM: max_ah address handles exist.
    if (errno == 0) errno = EINVAL;
    return nullptr;
  }
  auto* u = new UAh{};
  u->ah.context = pd->context;
  u->ah.pd = pd;
  u->attr = *attr;
  u->e = e;
  return &u->ah;
}

// The sender's address from a UD receive: wc (IBV_WC_GRH) and the 40-byte GRH area.
SHIM_EXPORT int ibv_init_ah_from_wc(ibv_context* ctx, uint8_t port, ibv_wc* wc, ibv_grh* grh, ibv_ah_attr* ah) {
  if (!mine(ctx)) return REAL(ibv_init_ah_from_wc)(ctx, port, wc, grh, ah);
  Runtime& r = rt();
  // RoCE: every packet has a GRH (an IPv4 or IPv6 header).
  if (!wc || !grh || !ah || port != 1 || !(wc->wc_flags & IBV_WC_GRH)) {
    errno = EINVAL;
    return -1;
  }
  std::memset(ah, 0, sizeof *ah);
  if (int rc = grh_to_ah_attr(reinterpret_cast<const uint8_t*>(grh), r.identity.gids, r.identity.gid_valid, *ah)) {
    errno = rc;
    return -1;
  }
  ah->sl = wc->sl;
  ah->src_path_bits = wc->dlid_path_bits;
  ah->port_num = port;
  return 0;
}

SHIM_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port) {
  if (!mine(pd->context)) return REAL(ibv_create_ah_from_wc)(pd, wc, grh, port);
  ibv_ah_attr a;
  if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &a)) return nullptr;
  return ibv_create_ah(pd, &a);
}

SHIM_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  if (!mine(ah->context)) return REAL(ibv_destroy_ah)(ah);
  UAh* u = reinterpret_cast<UAh*>(ah);
  if (int rc = with_token([u] { return rt().engine->destroy_ah(u->e); })) return rc;
  delete u;
  return 0;
}

}  // extern "C"
