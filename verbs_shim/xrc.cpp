// XRC (IBA annex A14): domains (ibv_open_xrcd, ibv_close_xrcd), XRC SRQs (ibv_create_srq_ex,
// ibv_get_srq_num). Its QPs (IBV_QPT_XRC_SEND and _RECV) are made in qp.cpp, their requests'
// XRCETH in convert.cpp and wr_builder.cpp; the engine does the rest (docs/verbs_shim.md "XRC").
//
// The domain's file rules are the kernel's (ib_uverbs_open_xrcd): a domain opened with a file
// descriptor belongs to that file's inode, and every open of the same file (any descriptor,
// any context of this process) gets the same domain, counted; O_CREAT makes it when the file
// has none, O_EXCL refuses one that exists; fd -1 with O_CREAT is a domain of its own. The last
// close frees it, or fails with EBUSY while XRC SRQs or target QPs are in it (they keep it).
// Domains are per process: another process's open of the same file gets a domain of its own.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <vector>

#include "verbs_shim/api.hpp"

using namespace uroce;
using namespace uroce::shim;
namespace E = uroce::engine;

namespace {

// One engine domain and the inode it belongs to (none: opened with fd -1), with its opens.
struct Domain {
  E::Xrcd* e;
  bool has_file;
  dev_t dev;
  ino_t ino;
  uint32_t opens;
};
std::vector<Domain>& domains() {   // token held
  static std::vector<Domain> d;
  return d;
}

}  // namespace

namespace uroce::shim {

ibv_xrcd* vop_open_xrcd(ibv_context* ctx, ibv_xrcd_init_attr* ia) {
  if (!ia || (ia->comp_mask & ~uint32_t(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS))) {
    errno = ia ? EOPNOTSUPP : EINVAL;
    return nullptr;
  }
  if (!(ia->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(ia->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ||
      (ia->oflags & ~uint32_t(O_CREAT | O_EXCL))) {
    errno = EINVAL;
    return nullptr;
  }
  struct stat st {};
  const bool has_file = ia->fd != -1;
  if (has_file && fstat(ia->fd, &st) != 0) {
    errno = EBADF;
    return nullptr;
  }
  Guard g;
  std::vector<Domain>& ds = domains();
  Domain* d = nullptr;
  if (has_file)
    for (Domain& x : ds)
      if (x.has_file && x.dev == st.st_dev && x.ino == st.st_ino) d = &x;
  if (d && (ia->oflags & O_EXCL)) {
    errno = EEXIST;
    return nullptr;
  }
  if (!d) {
    if (!(ia->oflags & O_CREAT)) {
      errno = EINVAL;   // no domain for this file yet, and none to be made
      return nullptr;
    }
    E::Xrcd* e = rt().engine->alloc_xrcd();
    if (!e) return nullptr;   // errno ENOMEM
    ds.push_back(Domain{e, has_file, st.st_dev, st.st_ino, 0});
    d = &ds.back();
  }
  ++d->opens;
  auto* u = new UXrcd{};
  u->xrcd.context = ctx;
  u->e = d->e;
  return &u->xrcd;
}

int vop_close_xrcd(ibv_xrcd* xrcd) {
  UXrcd* u = uxrcd(xrcd);
  {
    Guard g;
    std::vector<Domain>& ds = domains();
    auto it = std::find_if(ds.begin(), ds.end(), [u](const Domain& d) { return d.e == u->e; });
    if (it == ds.end()) return EINVAL;
    if (it->opens == 1) {
      if (int rc = rt().engine->dealloc_xrcd(u->e)) return rc;   // EBUSY: SRQs or target QPs in it
      ds.erase(it);
    } else {
      --it->opens;
    }
  }
  delete u;
  return 0;
}

// ibv_create_srq_ex: libibverbs makes a basic SRQ with a PD alone itself (ibv_create_srq); here
// the rest: an XRC SRQ (domain, CQ and PD), or a basic one asked through the extended call.
ibv_srq* vop_create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* ia) {
  constexpr uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                              IBV_SRQ_INIT_ATTR_CQ;
  if (ia->comp_mask & ~kKnown) {
    errno = EOPNOTSUPP;   // tag matching (IBV_SRQ_INIT_ATTR_TM) is not offered
    return nullptr;
  }
  const ibv_srq_type type = (ia->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? ia->srq_type : IBV_SRQT_BASIC;
  if (!(ia->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !ia->pd || !mine(ia->pd->context)) {
    errno = EINVAL;
    return nullptr;
  }
  if (type == IBV_SRQT_BASIC) {
    ibv_srq_init_attr a{ia->srq_context, ia->attr};
    ibv_srq* s = ibv_create_srq(ia->pd, &a);
    if (s) ia->attr = a.attr;
    return s;
  }
  if (type != IBV_SRQT_XRC) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  constexpr uint32_t kXrc = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  Runtime& r = rt();
  if ((ia->comp_mask & kXrc) != kXrc || !ia->xrcd || !ia->cq || !mine(ia->cq->context) ||
      ia->attr.max_wr == 0 || ia->attr.max_wr > r.dcfg.max_qp_wr || ia->attr.max_sge == 0 ||
      ia->attr.max_sge > E::kMaxSge) {
    errno = EINVAL;
    return nullptr;
  }
  E::Srq* e = with_token([&] {
    return r.engine->create_xrc_srq(upd(ia->pd)->e, uxrcd(ia->xrcd)->e, ucq(ia->cq)->e, ia->attr.max_wr,
                                    ia->attr.max_sge);
  });
  if (!e) return nullptr;   // errno from the engine
  return wrap_srq(ctx, ia->srq_context, ia->pd, e);
}

int vop_get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
  const E::Srq* e = usrq(srq)->e;
  if (!e->xrcd()) return EINVAL;   // a basic SRQ has no number on the wire
  *srq_num = e->srqn();
  return 0;
}

}  // namespace uroce::shim
