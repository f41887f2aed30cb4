// The device: the device list, open/close, query device/port/GID/P_Key, the sysfs answers, and
// the device-level calls uroce cannot serve (device index, imported DM). Asynchronous events:
// async.cpp.
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "verbs_shim/api.hpp"
#include "verbs_shim/convert.hpp"
#include "verbs_shim/param.hpp"

using namespace uroce;
using namespace uroce::shim;

// ---- verbs_context ops ------------------------------------------------------------------------
namespace uroce::shim {

int vop_query_port(ibv_context* /*ctx*/, uint8_t port, ibv_port_attr* attr, size_t len) {
  if (port != 1) return EINVAL;
  ibv_port_attr a;
  fill_port_attr(&a);
  std::memset(attr, 0, len);
  std::memcpy(attr, &a, std::min(len, sizeof a));
  return 0;
}

int vop_query_device_ex(ibv_context* /*ctx*/, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                        size_t len) {
  if (input && input->comp_mask) return EINVAL;
  if (len < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex a;
  std::memset(&a, 0, sizeof a);
  fill_device_attr(&a.orig_attr);
  // As rxe's: the same capabilities in the 64-bit field, the port count in the wide one.
  a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
  // IBA 1.5 annex A19, as rxe since Linux 6.2 announces them: FLUSH of both placement types
  // (IBV_ACCESS_FLUSH_GLOBAL / _PERSISTENT registrations) and ATOMIC WRITE.
  a.device_cap_flags_ex |= ext::kDeviceFlushGlobal | ext::kDeviceFlushPersistent | ext::kDeviceAtomicWrite;
  a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
  a.max_dm_size = 0;
  // Completion timestamps (ibv_create_cq_ex): 64-bit ticks of a 1 GHz clock (the engine's).
  a.completion_timestamp_mask = UINT64_MAX;
  a.hca_core_clock = param::kCoreClockKhz;
  // On-demand paging, explicit and implicit (a ConnectX's pair; rxe's ODP, newer than the lab's
  // Linux 6.1, has no implicit MR): every operation of each transport on ODP MRs
  // (engine/pages.hpp), FLUSH to global visibility and ATOMIC WRITE too.
  a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  constexpr uint32_t kOdpTwoSided = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
  a.odp_caps.per_transport_caps.rc_odp_caps = kOdpTwoSided | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                                              IBV_ODP_SUPPORT_ATOMIC | ext::kOdpSupportFlush |
                                              ext::kOdpSupportAtomicWrite;
  a.odp_caps.per_transport_caps.uc_odp_caps = kOdpTwoSided | IBV_ODP_SUPPORT_WRITE;
  a.odp_caps.per_transport_caps.ud_odp_caps = kOdpTwoSided;
  // XRC: an initiator's operations (RC's but ATOMIC WRITE and FLUSH), an XRC SRQ's receives.
  a.xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                   IBV_ODP_SUPPORT_ATOMIC;
  std::memset(attr, 0, len);
  std::memcpy(attr, &a, std::min(len, sizeof a));
  return 0;
}

// The device clock now, as a ConnectX's provider gives it: ticks in tv_nsec, tv_sec 0.
int vop_query_rt_values(ibv_context* /*ctx*/, ibv_values_ex* values) {
  if (values->comp_mask & ~uint32_t(IBV_VALUES_MASK_RAW_CLOCK)) return EINVAL;
  uint32_t done = 0;
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
    values->raw_clock.tv_sec = 0;
    values->raw_clock.tv_nsec = long(rt().now_ns());
    done |= IBV_VALUES_MASK_RAW_CLOCK;
  }
  values->comp_mask = done;
  return 0;
}

}  // namespace uroce::shim

extern "C" {

// ---- Device list ----------------------------------------------------------------------------------
SHIM_EXPORT ibv_device** ibv_get_device_list(int* num) {
  int nreal = 0;
  ibv_device** real = REAL(ibv_get_device_list)(&nreal);
  if (!real) nreal = 0;
  const bool have = load_cfg();
  int n = nreal + (have ? 1 : 0);
  // [ours, real..., NULL, real list pointer (freed with the real ibv_free_device_list)]
  auto** list = static_cast<ibv_device**>(calloc(size_t(n) + 2, sizeof(ibv_device*)));
  if (!list) {
    if (real) REAL(ibv_free_device_list)(real);
    errno = ENOMEM;
    return nullptr;
  }
  int k = 0;
  if (have) list[k++] = &rt().identity.dev;
  for (int i = 0; i < nreal; ++i) list[k++] = real[i];
  list[n] = nullptr;
  list[n + 1] = reinterpret_cast<ibv_device*>(real);
  if (num) *num = n;
  return list;
}

SHIM_EXPORT void ibv_free_device_list(ibv_device** list) {
  if (!list) return;
  int n = 0;
  while (list[n]) ++n;
  auto** real = reinterpret_cast<ibv_device**>(list[n + 1]);
  if (real) REAL(ibv_free_device_list)(real);
  free(list);
}

SHIM_EXPORT const char* ibv_get_device_name(ibv_device* dev) {
  if (mine_dev(dev)) return dev->name;
  return REAL(ibv_get_device_name)(dev);
}

SHIM_EXPORT __be64 ibv_get_device_guid(ibv_device* dev) {
  if (mine_dev(dev)) {
    if (!start_runtime()) return 0;
    return guid_from_mac(rt().link->mac());
  }
  return REAL(ibv_get_device_guid)(dev);
}

// ---- Open and close ----------------------------------------------------------------------------
namespace {

// A context of uroce's device. Its command fd is a memfd of its own (the kernel's is a file of
// /dev/infiniband): the file a dup() or a process that receives it refers to, which
// ibv_import_device recognizes (same device and inode). `cmd_fd` >= 0: the imported one, which
// the context now owns.
ibv_context* open_context(ibv_device* dev, int cmd_fd) {
  if (!start_runtime()) {
    errno = ENODEV;
    return nullptr;
  }
  const int afd = new_async_fd();
  if (afd < 0) return nullptr;
  if (cmd_fd < 0) cmd_fd = memfd_create("uroce-context", MFD_CLOEXEC);
  auto* u = new UContext{};
  verbs_context& v = u->vctx;
  ibv_context& c = v.context;
  c.device = dev;
  c.ops.poll_cq = op_poll_cq;
  c.ops.req_notify_cq = op_req_notify_cq;
  c.ops.post_send = op_post_send;
  c.ops.post_recv = op_post_recv;
  c.ops.post_srq_recv = op_post_srq_recv;
  c.ops.alloc_mw = op_alloc_mw;
  c.ops.dealloc_mw = op_dealloc_mw;
  c.ops.bind_mw = op_bind_mw;
  c.cmd_fd = cmd_fd;
  c.async_fd = afd;   // pollable; async.cpp
  c.num_comp_vectors = 1;
  pthread_mutex_init(&c.mutex, nullptr);
  c.abi_compat = __VERBS_ABI_IS_EXTENDED;
  v.sz = sizeof(verbs_context);
  v.query_port = vop_query_port;
  v.query_device_ex = vop_query_device_ex;
  v.create_qp_ex = vop_create_qp_ex;
  v.create_cq_ex = vop_create_cq_ex;
  v.query_rt_values = vop_query_rt_values;
  v.advise_mr = vop_advise_mr;
  v.open_xrcd = vop_open_xrcd;
  v.close_xrcd = vop_close_xrcd;
  v.create_srq_ex = vop_create_srq_ex;
  v.get_srq_num = vop_get_srq_num;
  with_token([u] { async_open(u); });
  return &c;
}

// Is `fd` the command fd of one of our contexts (or a dup of one, or one passed from a process
// of this device)? Compared by the file it refers to.
bool our_cmd_fd(int fd) {
  struct stat want;
  if (fd < 0 || fstat(fd, &want) != 0) return false;
  Guard g;
  for (UContext* c : rt().registry.contexts) {
    struct stat st;
    const int cfd = c->vctx.context.cmd_fd;
    if (cfd >= 0 && fstat(cfd, &st) == 0 && st.st_dev == want.st_dev && st.st_ino == want.st_ino) return true;
  }
  return false;
}

}  // namespace

SHIM_EXPORT ibv_context* ibv_open_device(ibv_device* dev) {
  if (!mine_dev(dev)) return REAL(ibv_open_device)(dev);
  return open_context(dev, -1);
}

// Another context on the device a command fd belongs to (rdma-core's import: the context takes
// the fd and closes it with itself). Across processes once the device is the host's (issue 29);
// today the fd must come from a context of this process (a dup of its cmd_fd).
SHIM_EXPORT ibv_context* ibv_import_device(int cmd_fd) {
  if (!rt().started || !our_cmd_fd(cmd_fd)) return REAL(ibv_import_device)(cmd_fd);
  return open_context(&rt().identity.dev, cmd_fd);
}

SHIM_EXPORT int ibv_close_device(ibv_context* ctx) {
  if (!mine(ctx)) return REAL(ibv_close_device)(ctx);
  with_token([ctx] { async_close(uctx(ctx)); });
  if (ctx->async_fd >= 0) close(ctx->async_fd);
  if (ctx->cmd_fd >= 0) close(ctx->cmd_fd);
  pthread_mutex_destroy(&ctx->mutex);
  delete uctx(ctx);
  return 0;
}

// ---- Queries --------------------------------------------------------------------------------------
SHIM_EXPORT int ibv_query_device(ibv_context* ctx, ibv_device_attr* attr) {
  if (!mine(ctx)) return REAL(ibv_query_device)(ctx, attr);
  fill_device_attr(attr);
  return 0;
}

SHIM_EXPORT int ibv_query_port(ibv_context* ctx, uint8_t port, struct _compat_ibv_port_attr* attr) {
  if (!mine(ctx)) return REAL(ibv_query_port)(ctx, port, attr);
  if (port != 1) return EINVAL;
  // Old callers pass the layout without port_cap_flags2.
  ibv_port_attr a;
  fill_port_attr(&a);
  std::memcpy(attr, &a, offsetof(ibv_port_attr, port_cap_flags2));
  return 0;
}

SHIM_EXPORT int ibv_query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  if (!mine(ctx)) return REAL(ibv_query_gid)(ctx, port, index, gid);
  Runtime& r = rt();
  if (port != 1 || index < 0 || size_t(index) >= r.identity.gids.size()) return -1;
  std::memcpy(gid->raw, r.identity.gids[size_t(index)].data(), 16);
  return 0;
}

SHIM_EXPORT int _ibv_query_gid_ex(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* entry,
                                  uint32_t flags, size_t entry_size) {
  if (!mine(ctx)) return REAL(_ibv_query_gid_ex)(ctx, port, index, entry, flags, entry_size);
  Runtime& r = rt();
  if (flags) return EINVAL;
  if (port != 1 || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  if (index >= r.identity.gids.size()) return EINVAL;
  if (!r.identity.gid_valid[index]) return ENODATA;
  std::memset(entry, 0, entry_size);
  std::memcpy(entry->gid.raw, r.identity.gids[index].data(), 16);
  entry->gid_index = index;
  entry->port_num = port;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  entry->ndev_ifindex = uint32_t(r.identity.cfg.netdev_ifindex);  // a netdev shared with the kernel; else none
  return 0;
}

SHIM_EXPORT ssize_t _ibv_query_gid_table(ibv_context* ctx, ibv_gid_entry* entries, size_t max_entries,
                                         uint32_t flags, size_t entry_size) {
  if (!mine(ctx)) return REAL(_ibv_query_gid_table)(ctx, entries, max_entries, flags, entry_size);
  Runtime& r = rt();
  if (flags || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  size_t k = 0;
  for (uint32_t i = 0; i < r.identity.gids.size(); ++i) {
    if (!r.identity.gid_valid[i]) continue;
    if (k == max_entries) return -EINVAL;
    auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<uint8_t*>(entries) + k * entry_size);
    _ibv_query_gid_ex(ctx, 1, i, e, 0, entry_size);
    ++k;
  }
  return ssize_t(k);
}

SHIM_EXPORT int ibv_query_gid_type(ibv_context* ctx, uint8_t port, unsigned int index, int* type) {
  if (!mine(ctx)) return REAL(ibv_query_gid_type)(ctx, port, index, type);
  Runtime& r = rt();
  if (port != 1 || index >= r.identity.gids.size()) return -1;
  *type = 1;   // IBV_GID_TYPE_SYSFS_ROCE_V2
  return 0;
}

SHIM_EXPORT int ibv_query_pkey(ibv_context* ctx, uint8_t port, int index, __be16* pkey) {
  if (!mine(ctx)) return REAL(ibv_query_pkey)(ctx, port, index, pkey);
  if (port != 1 || index != 0) return -1;
  *pkey = param::kDefaultPkey;
  return 0;
}

// ---- sysfs -----------------------------------------------------------------------------
SHIM_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  Runtime& r = rt();
  if (load_cfg() && dir && std::strcmp(dir, r.identity.dev.ibdev_path) == 0) {
    std::string v;
    if (!sysfs_device_file(r.identity, file, v)) {
      errno = ENOENT;
      return -1;
    }
    if (size == 0) return 0;
    size_t n = std::min(v.size(), size - 1);
    std::memcpy(buf, v.data(), n);
    buf[n] = 0;
    return int(n);
  }
  return REAL(ibv_read_sysfs_file)(dir, file, buf, size);
}

// ---- Calls uroce's device cannot serve, or serves without the kernel ------------------------------
// The real functions read the provider's private data (verbs_context.priv, verbs_device's sysfs
// entry) that a uroce context does not have: each answers here for uroce's objects.

// The kernel's device index: uroce's device has none. The API's "no index" answer.
SHIM_EXPORT int ibv_get_device_index(ibv_device* dev) {
  if (!mine_dev(dev)) return REAL(ibv_get_device_index)(dev);
  errno = EOPNOTSUPP;
  return -1;
}

// Device memory is never allocated on uroce (no alloc_dm op): there is nothing to import.
SHIM_EXPORT ibv_dm* ibv_import_dm(ibv_context* ctx, uint32_t handle) {
  if (!mine(ctx)) return REAL(ibv_import_dm)(ctx, handle);
  errno = EOPNOTSUPP;
  return nullptr;
}

SHIM_EXPORT void ibv_unimport_dm(ibv_dm* dm) {
  if (!dm || !mine(dm->context)) return REAL(ibv_unimport_dm)(dm);
  // No uroce DM exists; nothing to release.
}

// One P_Key, the default, at index 0.
SHIM_EXPORT int ibv_get_pkey_index(ibv_context* ctx, uint8_t port, __be16 pkey) {
  if (!mine(ctx)) return REAL(ibv_get_pkey_index)(ctx, port, pkey);
  if (port != 1 || pkey != param::kDefaultPkey) {
    errno = ENOENT;
    return -1;
  }
  return 0;
}

// The peer's MAC for an address vector, from the port's neighbour cache (no resolution is
// started here: ibv_modify_qp does that). No VLAN: vid 0xffff.
SHIM_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context* ctx, ibv_ah_attr* attr, uint8_t eth_mac[ETHERNET_LL_SIZE],
                                            uint16_t* vid) {
  if (!mine(ctx)) return REAL(ibv_resolve_eth_l2_from_gid)(ctx, attr, eth_mac, vid);
  Runtime& r = rt();
  if (!attr || !attr->is_global || attr->port_num != 1 || attr->grh.sgid_index >= r.identity.gids.size() ||
      !r.identity.gid_valid[attr->grh.sgid_index]) {
    errno = EINVAL;
    return -1;
  }
  proto::Ip6 gid;
  std::memcpy(gid.data(), attr->grh.dgid.raw, 16);
  proto::Mac mac;
  bool ok = with_token([&] { return r.link->lookup(gid, mac); });
  if (!ok) {
    errno = EHOSTUNREACH;
    return -1;
  }
  std::memcpy(eth_mac, mac.data(), ETHERNET_LL_SIZE);
  if (vid) *vid = 0xffff;
  return 0;
}

}  // extern "C"
