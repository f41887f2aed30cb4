// Protection domains, memory regions and address handles.
#include <cerrno>
#include <cstdint>

#include "verbs_shim/api.hpp"
#include "verbs_shim/convert.hpp"

using namespace uroce;
using namespace uroce::shim;
namespace E = uroce::engine;

namespace {

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
  auto* u = new UMr{};
  u->mr.context = pd->context;
  u->mr.pd = pd;
  u->mr.addr = addr;
  u->mr.length = length;
  u->mr.handle = m->lkey;
  u->mr.lkey = m->lkey;
  u->mr.rkey = m->rkey;
  u->e = m;
  return &u->mr;
}

}  // namespace

extern "C" {

// ---- PD -------------------------------------------------------------------------------------------
SHIM_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  if (!mine(ctx)) return REAL(ibv_alloc_pd)(ctx);
  E::Pd* p = with_token([] { return rt().engine->alloc_pd(); });
  if (!p) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* u = new UPd{};
  u->pd.context = ctx;
  u->pd.handle = p->handle;
  u->e = p;
  return &u->pd;
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
  E::Ah* e = with_token([&] { return rt().engine->create_ah(upd(pd)->e, av); });
  if (!e) {
    errno = EINVAL;  // a GID index not in the table, or an IPv4 source for an IPv6 destination
    return nullptr;
  }
  auto* u = new UAh{};
  u->ah.context = pd->context;
  u->ah.pd = pd;
  u->attr = *attr;
  u->e = e;
  return &u->ah;
}

SHIM_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port) {
  if (!mine(pd->context)) return REAL(ibv_create_ah_from_wc)(pd, wc, grh, port);
  ibv_ah_attr a{};
  a.is_global = 1;
  a.port_num = port;
  if (grh) {
    a.grh.dgid = grh->sgid;
    a.grh.hop_limit = 0xFF;
  }
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
