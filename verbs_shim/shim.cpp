// liburoce-verbs.so: libibverbs entry points for LD_PRELOAD, backed by the uroce engine on a DPDK
// link. Objects of other devices are handed to the real libibverbs (dlsym RTLD_NEXT); uroce's
// objects never are. See docs/verbs_shim.md.
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rte_eal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>

#include "verbs_shim/runtime.hpp"

// verbs.h wraps some entry points in macros and inline functions; we define the real symbols.
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port
#undef ibv_get_device_list

using namespace uroce;
using namespace uroce::shim;
namespace E = uroce::engine;

extern "C" {
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);
int ibv_query_gid_type(struct ibv_context* context, uint8_t port_num, unsigned int index, int* type);
}

static_assert(sizeof(E::Sge) == sizeof(ibv_sge) && offsetof(E::Sge, length) == offsetof(ibv_sge, length) &&
              offsetof(E::Sge, lkey) == offsetof(ibv_sge, lkey));
static_assert(uint32_t(E::WcStatus::GeneralErr) == IBV_WC_GENERAL_ERR);
static_assert(uint32_t(E::WcOpcode::RecvRdmaWithImm) == IBV_WC_RECV_RDMA_WITH_IMM);
static_assert(uint32_t(E::WrOpcode::SendWithInv) == IBV_WR_SEND_WITH_INV);
static_assert(uint32_t(E::kAttrDestQpn) == IBV_QP_DEST_QPN && uint32_t(E::kAttrMaxDestRdAtomic) == IBV_QP_MAX_DEST_RD_ATOMIC);
static_assert(uint32_t(E::kRelaxedOrdering) == IBV_ACCESS_RELAXED_ORDERING);

namespace uroce::shim {

Runtime& rt() {
  static Runtime* r = new Runtime;  // never destroyed: the poller may outlive static destructors
  return *r;
}

namespace {

std::mutex g_init_mu;

constexpr uint32_t kVendorId = 0xFFFFFF;      // no registered vendor (not Mellanox's 0x02c9)
constexpr uint32_t kVendorPartId = 0x7572;    // "ur"; in no perftest device table

void* real_sym(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (!p) {
    std::fprintf(stderr, "uroce-verbs: %s not found in the real libibverbs\n", name);
    abort();
  }
  return p;
}
#define REAL(fn) (reinterpret_cast<decltype(&::fn)>(real_sym(#fn)))

bool mine_dev(const ibv_device* d) { return d == &rt().dev; }
bool mine(const ibv_context* c) { return c && c->device == &rt().dev; }

UContext* uctx(ibv_context* c) { return reinterpret_cast<UContext*>(verbs_get_ctx(c)); }
UPd* upd(ibv_pd* p) { return reinterpret_cast<UPd*>(p); }
UMr* umr(ibv_mr* m) { return reinterpret_cast<UMr*>(m); }
UCq* ucq(ibv_cq* c) { return reinterpret_cast<UCq*>(c); }
UQp* uqp(ibv_qp* q) { return reinterpret_cast<UQp*>(q); }
USrq* usrq(ibv_srq* s) { return reinterpret_cast<USrq*>(s); }
ibv_cq* as_cq(UCq* c) { return reinterpret_cast<ibv_cq*>(&c->cq); }

void nap(uint64_t ns) {
  timespec ts{0, long(ns)};
  nanosleep(&ts, nullptr);
}

// ---- Configuration and start-up ---------------------------------------------------------------
bool load_cfg() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> g(g_init_mu);
  if (r.cfg_tried) return r.cfg_ok;
  r.cfg_tried = true;
  const char* env = getenv("UROCE_CONFIG");
  std::string path = env && *env ? env : "config/uroce.conf";
  auto c = port::load_config(path, r.cfg_err);
  if (!c) {
    std::fprintf(stderr, "uroce-verbs: no uroce device: %s (set UROCE_CONFIG=FILE)\n", r.cfg_err.c_str());
    return false;
  }
  r.cfg = *c;
  ibv_device& d = r.dev;
  d.node_type = IBV_NODE_CA;
  d.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(d.name, sizeof d.name, "%s", r.cfg.name.c_str());
  std::snprintf(d.dev_name, sizeof d.dev_name, "uverbs-%s", r.cfg.name.c_str());
  std::snprintf(d.dev_path, sizeof d.dev_path, "/sys/class/infiniband_verbs/uverbs-%s", r.cfg.name.c_str());
  std::snprintf(d.ibdev_path, sizeof d.ibdev_path, "/sys/class/infiniband/%s", r.cfg.name.c_str());
  r.cfg_ok = true;
  return true;
}

void build_gid_table(Runtime& r) {
  r.gids.assign(3, proto::Ip6{});
  r.gid_valid.assign(3, false);
  r.gids[0] = port::link_local_from_mac(r.link->mac());
  r.gid_valid[0] = true;
  if (r.cfg.have_ip4) {
    proto::Ip6 g{};
    g[10] = g[11] = 0xFF;
    std::memcpy(&g[12], r.cfg.ip4, 4);
    r.gids[1] = g;
    r.gid_valid[1] = true;
  }
  if (r.cfg.have_ip6) {
    r.gids[2] = r.cfg.ip6;
    r.gid_valid[2] = true;
  } else {
    r.gids.resize(2);
    r.gid_valid.resize(2);
  }
}

void poller_loop(Runtime& r) {
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  uint64_t last_work = r.now_ns();
  while (!r.stop.load(std::memory_order_relaxed)) {
    uint64_t now = r.now_ns();
    if (now - r.app_poll_ns.load(std::memory_order_relaxed) < r.app_active_ns) {
      r.poller_naps.fetch_add(1, std::memory_order_relaxed);
      nap(r.app_active_ns);
      continue;
    }
    bool did = false;
    if (!r.owner.exchange(true, std::memory_order_acquire)) {
      did = r.drive();
      r.unlock();
      r.poller_drives.fetch_add(1, std::memory_order_relaxed);
    }
    if (did) {
      last_work = now;
    } else if (now - last_work > r.idle_spin_ns) {
      r.poller_naps.fetch_add(1, std::memory_order_relaxed);
      nap(now - last_work > 10 * 1000 * 1000 ? 200'000 : 20'000);
    } else {
      __builtin_ia32_pause();
    }
  }
}

void poller_main(std::promise<bool>* ready) {
  Runtime& r = rt();
  port::EndpointConfig cfg = r.cfg;
  // A unique --file-prefix per process, whatever the config says.
  std::vector<std::string> eal;
  for (size_t i = 0; i < cfg.eal.size(); ++i) {
    if (cfg.eal[i] == "--file-prefix") {
      ++i;
      continue;
    }
    if (cfg.eal[i].rfind("--file-prefix=", 0) == 0) continue;
    eal.push_back(cfg.eal[i]);
  }
  eal.push_back("--file-prefix=uroce-shim-" + std::to_string(getpid()));
  eal.push_back("--no-telemetry");
  cfg.eal = eal;
  r.link = port::DpdkLink::open(cfg, r.start_err);
  if (!r.link) {
    ready->set_value(false);
    return;
  }
  r.clock = std::make_unique<port::TscClock>();
  r.dcfg.mac = r.link->mac();
  r.dcfg.gid = r.link->gid();
  r.engine = std::make_unique<E::Device>(*r.link, *r.clock, r.dcfg);
  if (E::mtu_bytes(r.cfg.path_mtu) > r.engine->mtu_limit()) {
    r.start_err = "path mtu " + std::to_string(E::mtu_bytes(r.cfg.path_mtu)) + " larger than the link carries";
    ready->set_value(false);
    return;
  }
  build_gid_table(r);
  ready->set_value(true);
  poller_loop(r);
  // Process exit: the port and the EAL are left to the process teardown. Closing the port here
  // (rte_eth_dev_close) races with the EAL interrupt thread handling the peer's memif disconnect
  // and crashed in the memif PMD; sockets (af_packet, memif's abstract socket) close with the
  // process anyway. Only the runtime directory is removed.
  r.lock();
  std::string dir = rte_eal_get_runtime_dir();
  std::error_code ec;
  if (dir.find("uroce-shim-") != std::string::npos) std::filesystem::remove_all(dir, ec);
}

void shim_fini();

void segv_handler(int sig) {
  void* bt[64];
  int n = backtrace(bt, 64);
  char msg[64];
  int k = std::snprintf(msg, sizeof msg, "uroce-verbs: signal %d, thread %ld\n", sig, long(gettid()));
  ssize_t w = write(2, msg, size_t(k));
  (void)w;
  backtrace_symbols_fd(bt, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

bool start_runtime() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> g(g_init_mu);
  if (r.started) return true;
  if (!r.start_err.empty()) return false;
  std::promise<bool> ready;
  auto fut = ready.get_future();
  r.poller = std::thread(poller_main, &ready);
  if (!fut.get()) {
    r.poller.join();
    std::fprintf(stderr, "uroce-verbs: cannot open %s (%s): %s\n", r.cfg.name.c_str(), r.cfg.file.c_str(),
                  r.start_err.c_str());
    if (r.start_err.empty()) r.start_err = "failed";
    return false;
  }
  r.started = true;
  if (const char* e = getenv("UROCE_SHIM_EAGER_POST")) r.eager_post = *e == '1';
  if (getenv("UROCE_SHIM_DEBUG")) signal(SIGSEGV, segv_handler);
  if (const char* e = getenv("UROCE_SHIM_APP_ACTIVE_NS")) r.app_active_ns = strtoull(e, nullptr, 0);
  if (const char* e = getenv("UROCE_SHIM_IDLE_SPIN_NS")) r.idle_spin_ns = strtoull(e, nullptr, 0);
  atexit(shim_fini);
  return true;
}

// Registered with atexit when the runtime starts, so it runs before the shared libraries' own
// destructors (DPDK's among them, in _dl_fini): the poller must stop before the PMDs go away.
void shim_fini() {
  Runtime& r = rt();
  if (!r.started || !r.poller.joinable()) return;
  if (getenv("UROCE_SHIM_STATS"))
    std::fprintf(stderr, "uroce-verbs: poller drives %lu naps %lu, application drives %lu\n",
                 (unsigned long)r.poller_drives.load(), (unsigned long)r.poller_naps.load(),
                 (unsigned long)r.app_drives.load());
  r.stop = true;
  r.poller.join();
  // Nothing here polls any more; on memif, give the peer (bounded) time to stop polling and
  // leave first, so that our exit cannot pull its rings from under it.
  if (r.link) r.link->await_peer_close(500);
}

// ---- Attributes ---------------------------------------------------------------------------------
uint64_t guid_from_mac(const proto::Mac& m) {
  // EUI-64 (as rxe), in network byte order as libibverbs reports GUIDs.
  uint8_t g[8] = {uint8_t(m[0] ^ 2), m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]};
  uint64_t v;
  std::memcpy(&v, g, 8);
  return v;
}

void fill_device_attr(ibv_device_attr* a) {
  Runtime& r = rt();
  std::memset(a, 0, sizeof *a);
  std::snprintf(a->fw_ver, sizeof a->fw_ver, "uroce 0.1.0");
  a->node_guid = guid_from_mac(r.link->mac());
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = UINT64_MAX;
  a->page_size_cap = 0xFFFFF000;
  a->vendor_id = kVendorId;
  a->vendor_part_id = kVendorPartId;
  a->hw_ver = 0;
  a->max_qp = int(r.dcfg.max_qp);
  a->max_qp_wr = int(r.dcfg.max_qp_wr);
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID;
  a->max_sge = int(E::kMaxSge);
  a->max_sge_rd = int(E::kMaxSge);
  a->max_cq = 16384;
  a->max_cqe = int(r.dcfg.max_cqe);
  a->max_mr = int(r.dcfg.max_mr) - 1;   // key index 0 is never used
  a->max_pd = 65536;
  a->max_qp_rd_atom = int(r.dcfg.max_rd_atomic);
  a->max_ee_rd_atom = 0;
  a->max_res_rd_atom = int(r.dcfg.max_rd_atomic * r.dcfg.max_qp);
  a->max_qp_init_rd_atom = int(r.dcfg.max_rd_atomic);
  a->atomic_cap = IBV_ATOMIC_HCA;
  a->max_srq = 16384;
  a->max_srq_wr = int(r.dcfg.max_qp_wr);
  a->max_srq_sge = int(E::kMaxSge);
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = 1;
}

enum ibv_mtu mtu_limit_enum() {
  uint32_t b = rt().engine->mtu_limit();
  if (b >= 4096) return IBV_MTU_4096;
  if (b >= 2048) return IBV_MTU_2048;
  if (b >= 1024) return IBV_MTU_1024;
  if (b >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

void fill_port_attr(ibv_port_attr* a) {
  Runtime& r = rt();
  std::memset(a, 0, sizeof *a);
  a->state = IBV_PORT_ACTIVE;
  a->max_mtu = mtu_limit_enum();
  a->active_mtu = ibv_mtu(r.cfg.path_mtu);
  a->gid_tbl_len = int(r.gids.size());
  a->port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
  a->max_msg_sz = 0x80000000u;
  a->pkey_tbl_len = 1;
  a->lid = 0;
  a->sm_lid = 0;
  a->max_vl_num = 1;
  a->active_width = 1;    // 1X
  a->active_speed = 32;   // 25 Gb/s (EDR); the real rate depends on the DPDK link
  a->phys_state = 5;      // LinkUp
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
}

// ---- Data path (ibv_context ops) --------------------------------------------------------------
int op_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Runtime& r = rt();
  UQp* q = uqp(qp);
  int rc = 0;
  r.lock();
  for (; wr; wr = wr->next) {
    E::SendWr w;
    w.wr_id = wr->wr_id;
    w.opcode = E::WrOpcode(wr->opcode);
    w.send_flags = wr->send_flags;
    w.sg_list = reinterpret_cast<const E::Sge*>(wr->sg_list);
    w.num_sge = uint32_t(wr->num_sge);
    w.imm_data = wr->imm_data;
    if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      w.remote_addr = wr->wr.atomic.remote_addr;
      w.rkey = wr->wr.atomic.rkey;
      w.compare_add = wr->wr.atomic.compare_add;
      w.swap = wr->wr.atomic.swap;
    } else {
      w.remote_addr = wr->wr.rdma.remote_addr;
      w.rkey = wr->wr.rdma.rkey;
      if (wr->opcode == IBV_WR_SEND_WITH_INV) w.invalidate_rkey = wr->invalidate_rkey;
    }
    rc = r.engine->post_send(q->e, w);
    if (rc) {
      *bad = wr;
      break;
    }
  }
  // An application that is polling its CQ sends the frames with its next poll_cq (a progress()
  // per post would halve perftest's post-one/poll loops); one that is not (it waits on memory,
  // as ib_write_lat does, or on a completion channel) gets them sent now.
  if (r.eager_post || r.now_ns() - r.app_poll_ns.load(std::memory_order_relaxed) >= r.app_active_ns) r.drive();
  r.unlock();
  return rc;
}

int post_recv_list(E::Qp* qp, E::Srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Runtime& r = rt();
  int rc = 0;
  r.lock();
  for (; wr; wr = wr->next) {
    E::RecvWr w;
    w.wr_id = wr->wr_id;
    w.sg_list = reinterpret_cast<const E::Sge*>(wr->sg_list);
    w.num_sge = uint32_t(wr->num_sge);
    rc = qp ? r.engine->post_recv(qp, w) : r.engine->post_srq_recv(srq, w);
    if (rc) {
      *bad = wr;
      break;
    }
  }
  r.unlock();
  return rc;
}

int op_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return post_recv_list(uqp(qp)->e, nullptr, wr, bad);
}
int op_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return post_recv_list(nullptr, usrq(srq)->e, wr, bad);
}

void to_ibv_wc(const E::Wc& s, ibv_wc& d) {
  d.wr_id = s.wr_id;
  d.status = ibv_wc_status(s.status);
  d.opcode = ibv_wc_opcode(s.opcode);
  d.vendor_err = s.vendor_err;
  d.byte_len = s.byte_len;
  d.imm_data = s.imm_data;
  d.qp_num = s.qp_num;
  d.src_qp = s.src_qp;
  d.wc_flags = s.wc_flags;
  d.pkey_index = 0;
  d.slid = 0;
  d.sl = 0;
  d.dlid_path_bits = 0;
}

int op_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  Runtime& r = rt();
  UCq* c = ucq(cq);
  if (n <= 0) return 0;
  E::Wc tmp[32];
  int total = 0;
  r.lock();
  r.app_poll_ns.store(r.now_ns(), std::memory_order_relaxed);
  r.drive();
  while (total < n) {
    int k = r.engine->poll_cq(c->e, std::min(n - total, 32), tmp);
    for (int i = 0; i < k; ++i) to_ibv_wc(tmp[i], wc[total + i]);
    total += k;
    if (k < 32) break;
  }
  r.unlock();
  r.app_drives.fetch_add(1, std::memory_order_relaxed);
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

// ---- verbs_context ops ------------------------------------------------------------------------
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
  a.max_dm_size = 0;
  std::memset(attr, 0, len);
  std::memcpy(attr, &a, std::min(len, sizeof a));
  return 0;
}

ibv_qp* create_qp_common(ibv_context* ctx, ibv_pd* pd, ibv_qp_init_attr* ia, bool ex);
ibv_qp* vop_create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* ia);
ibv_cq_ex* vop_create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* ia);

}  // namespace

bool Runtime::drive() {
  bool did = engine->progress();
  for (size_t i = 0; i < armed.size();) {
    UCq* c = armed[i];
    if (c->e->completions_pushed() != c->armed_at) {
      c->armed = false;
      c->events.fetch_add(1, std::memory_order_relaxed);
      ssize_t k = write(c->ch->wfd, &c, sizeof c);
      (void)k;
      armed[i] = armed.back();
      armed.pop_back();
    } else {
      ++i;
    }
  }
  return did;
}

}  // namespace uroce::shim

using uroce::shim::Runtime;

// =================================================================================================
// Exported entry points
// =================================================================================================
extern "C" {

__attribute__((visibility("default"))) ibv_device** ibv_get_device_list(int* num) {
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
  if (have) list[k++] = &rt().dev;
  for (int i = 0; i < nreal; ++i) list[k++] = real[i];
  list[n] = nullptr;
  list[n + 1] = reinterpret_cast<ibv_device*>(real);
  if (num) *num = n;
  return list;
}

__attribute__((visibility("default"))) void ibv_free_device_list(ibv_device** list) {
  if (!list) return;
  int n = 0;
  while (list[n]) ++n;
  auto** real = reinterpret_cast<ibv_device**>(list[n + 1]);
  if (real) REAL(ibv_free_device_list)(real);
  free(list);
}

__attribute__((visibility("default"))) const char* ibv_get_device_name(ibv_device* dev) {
  if (mine_dev(dev)) return dev->name;
  return REAL(ibv_get_device_name)(dev);
}

__attribute__((visibility("default"))) __be64 ibv_get_device_guid(ibv_device* dev) {
  if (mine_dev(dev)) {
    if (!start_runtime()) return 0;
    return guid_from_mac(rt().link->mac());
  }
  return REAL(ibv_get_device_guid)(dev);
}

__attribute__((visibility("default"))) ibv_context* ibv_open_device(ibv_device* dev) {
  if (!mine_dev(dev)) return REAL(ibv_open_device)(dev);
  if (!start_runtime()) {
    errno = ENODEV;
    return nullptr;
  }
  auto* u = static_cast<UContext*>(calloc(1, sizeof(UContext)));
  if (!u) {
    errno = ENOMEM;
    return nullptr;
  }
  verbs_context& v = u->vctx;
  ibv_context& c = v.context;
  c.device = dev;
  c.ops.poll_cq = op_poll_cq;
  c.ops.req_notify_cq = op_req_notify_cq;
  c.ops.post_send = op_post_send;
  c.ops.post_recv = op_post_recv;
  c.ops.post_srq_recv = op_post_srq_recv;
  c.cmd_fd = -1;
  c.async_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);   // no asynchronous events are generated
  c.num_comp_vectors = 1;
  pthread_mutex_init(&c.mutex, nullptr);
  c.abi_compat = __VERBS_ABI_IS_EXTENDED;
  v.sz = sizeof(verbs_context);
  v.query_port = vop_query_port;
  v.query_device_ex = vop_query_device_ex;
  v.create_qp_ex = vop_create_qp_ex;
  v.create_cq_ex = vop_create_cq_ex;
  return &c;
}

__attribute__((visibility("default"))) int ibv_close_device(ibv_context* ctx) {
  if (!mine(ctx)) return REAL(ibv_close_device)(ctx);
  if (ctx->async_fd >= 0) close(ctx->async_fd);
  pthread_mutex_destroy(&ctx->mutex);
  free(uctx(ctx));
  return 0;
}

__attribute__((visibility("default"))) int ibv_query_device(ibv_context* ctx, ibv_device_attr* attr) {
  if (!mine(ctx)) return REAL(ibv_query_device)(ctx, attr);
  fill_device_attr(attr);
  return 0;
}

__attribute__((visibility("default"))) int ibv_query_port(ibv_context* ctx, uint8_t port,
                                                          struct _compat_ibv_port_attr* attr) {
  if (!mine(ctx)) return REAL(ibv_query_port)(ctx, port, attr);
  if (port != 1) return EINVAL;
  // Old callers pass the layout without port_cap_flags2.
  ibv_port_attr a;
  fill_port_attr(&a);
  std::memcpy(attr, &a, offsetof(ibv_port_attr, port_cap_flags2));
  return 0;
}

__attribute__((visibility("default"))) int ibv_query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  if (!mine(ctx)) return REAL(ibv_query_gid)(ctx, port, index, gid);
  Runtime& r = rt();
  if (port != 1 || index < 0 || size_t(index) >= r.gids.size()) return -1;
  std::memcpy(gid->raw, r.gids[size_t(index)].data(), 16);
  return 0;
}

__attribute__((visibility("default"))) int _ibv_query_gid_ex(ibv_context* ctx, uint32_t port, uint32_t index,
                                                             ibv_gid_entry* entry, uint32_t flags,
                                                             size_t entry_size) {
  if (!mine(ctx)) return REAL(_ibv_query_gid_ex)(ctx, port, index, entry, flags, entry_size);
  Runtime& r = rt();
  if (flags) return EINVAL;
  if (port != 1 || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  if (index >= r.gids.size()) return EINVAL;
  if (!r.gid_valid[index]) return ENODATA;
  std::memset(entry, 0, entry_size);
  std::memcpy(entry->gid.raw, r.gids[index].data(), 16);
  entry->gid_index = index;
  entry->port_num = port;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  entry->ndev_ifindex = 0;
  return 0;
}

__attribute__((visibility("default"))) ssize_t _ibv_query_gid_table(ibv_context* ctx, ibv_gid_entry* entries,
                                                                    size_t max_entries, uint32_t flags,
                                                                    size_t entry_size) {
  if (!mine(ctx)) return REAL(_ibv_query_gid_table)(ctx, entries, max_entries, flags, entry_size);
  Runtime& r = rt();
  if (flags || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  size_t k = 0;
  for (uint32_t i = 0; i < r.gids.size(); ++i) {
    if (!r.gid_valid[i]) continue;
    if (k == max_entries) return -EINVAL;
    auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<uint8_t*>(entries) + k * entry_size);
    _ibv_query_gid_ex(ctx, 1, i, e, 0, entry_size);
    ++k;
  }
  return ssize_t(k);
}

__attribute__((visibility("default"))) int ibv_query_gid_type(ibv_context* ctx, uint8_t port, unsigned int index,
                                                              int* type) {
  if (!mine(ctx)) return REAL(ibv_query_gid_type)(ctx, port, index, type);
  Runtime& r = rt();
  if (port != 1 || index >= r.gids.size()) return -1;
  *type = 1;   // IBV_GID_TYPE_SYSFS_ROCE_V2
  return 0;
}

__attribute__((visibility("default"))) int ibv_query_pkey(ibv_context* ctx, uint8_t port, int index, __be16* pkey) {
  if (!mine(ctx)) return REAL(ibv_query_pkey)(ctx, port, index, pkey);
  if (port != 1 || index != 0) return -1;
  *pkey = 0xFFFF;
  return 0;
}

__attribute__((visibility("default"))) int ibv_read_sysfs_file(const char* dir, const char* file, char* buf,
                                                               size_t size) {
  Runtime& r = rt();
  if (load_cfg() && dir && std::strcmp(dir, r.dev.ibdev_path) == 0) {
    std::string v;
    if (!std::strcmp(file, "board_id")) v = "UROCE_DPDK";
    else if (!std::strcmp(file, "node_desc")) v = "uroce " + r.cfg.name;
    else if (!std::strcmp(file, "hca_type")) v = "uroce";
    else if (!std::strcmp(file, "fw_ver")) v = "uroce 0.1.0";
    else if (!std::strcmp(file, "node_type")) v = "1: CA";
    else {
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

// ---- PD, MR ---------------------------------------------------------------------------------------
__attribute__((visibility("default"))) ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  if (!mine(ctx)) return REAL(ibv_alloc_pd)(ctx);
  Runtime& r = rt();
  E::Pd* p;
  {
    Guard g;
    p = r.engine->alloc_pd();
  }
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

__attribute__((visibility("default"))) int ibv_dealloc_pd(ibv_pd* pd) {
  if (!mine(pd->context)) return REAL(ibv_dealloc_pd)(pd);
  int rc;
  {
    Guard g;
    rc = rt().engine->dealloc_pd(upd(pd)->e);
  }
  if (rc == 0) delete upd(pd);
  return rc;
}

static ibv_mr* reg_mr_common(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  constexpr unsigned kSupported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                                  IBV_ACCESS_RELAXED_ORDERING;
  // Optional-range flags (relaxed ordering and the like) may be ignored by a device; others may not.
  access &= ~(IBV_ACCESS_OPTIONAL_RANGE & ~IBV_ACCESS_RELAXED_ORDERING);
  if ((access & ~kSupported) ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
    errno = EINVAL;
    return nullptr;
  }
  if (access & IBV_ACCESS_ZERO_BASED) iova = 0;
  E::Mr* m;
  {
    Guard g;
    m = rt().engine->reg_mr_iova(upd(pd)->e, addr, length, iova, access);
  }
  if (!m) {
    errno = ENOMEM;
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

__attribute__((visibility("default"))) ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  if (!mine(pd->context)) return REAL(ibv_reg_mr)(pd, addr, length, access);
  return reg_mr_common(pd, addr, length, reinterpret_cast<uintptr_t>(addr), unsigned(access));
}

__attribute__((visibility("default"))) ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                                               int access) {
  if (!mine(pd->context)) return REAL(ibv_reg_mr_iova)(pd, addr, length, iova, access);
  return reg_mr_common(pd, addr, length, iova, unsigned(access));
}

__attribute__((visibility("default"))) ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                                                unsigned int access) {
  if (!mine(pd->context)) return REAL(ibv_reg_mr_iova2)(pd, addr, length, iova, access);
  return reg_mr_common(pd, addr, length, iova, access);
}

__attribute__((visibility("default"))) int ibv_dereg_mr(ibv_mr* mr) {
  if (!mine(mr->context)) return REAL(ibv_dereg_mr)(mr);
  int rc;
  {
    Guard g;
    rc = rt().engine->dereg_mr(umr(mr)->e);
  }
  if (rc == 0) delete umr(mr);
  return rc;
}

// ---- Completion channels and CQs -----------------------------------------------------------------
__attribute__((visibility("default"))) ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx) {
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

__attribute__((visibility("default"))) int ibv_destroy_comp_channel(ibv_comp_channel* ch) {
  if (!mine(ch->context)) return REAL(ibv_destroy_comp_channel)(ch);
  auto* u = reinterpret_cast<UChannel*>(ch);
  if (ch->refcnt) return EBUSY;
  close(u->ch.fd);
  close(u->wfd);
  delete u;
  return 0;
}

static UCq* create_cq_common(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel,
                             int comp_vector) {
  Runtime& r = rt();
  if (cqe <= 0 || uint32_t(cqe) > r.dcfg.max_cqe || comp_vector < 0 || comp_vector >= ctx->num_comp_vectors ||
      (channel && !mine(channel->context))) {
    errno = EINVAL;
    return nullptr;
  }
  E::Cq* e;
  {
    Guard g;
    e = r.engine->create_cq(uint32_t(cqe));
  }
  if (!e) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* u = new UCq{};
  ibv_cq* c = as_cq(u);
  c->context = ctx;
  c->channel = channel;
  c->cq_context = cq_context;
  c->handle = 0;
  c->cqe = cqe;
  pthread_mutex_init(&c->mutex, nullptr);
  pthread_cond_init(&c->cond, nullptr);
  u->e = e;
  u->ch = reinterpret_cast<UChannel*>(channel);
  if (channel) ++channel->refcnt;
  return u;
}

__attribute__((visibility("default"))) ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cq_context,
                                                             ibv_comp_channel* channel, int comp_vector) {
  if (!mine(ctx)) return REAL(ibv_create_cq)(ctx, cqe, cq_context, channel, comp_vector);
  UCq* u = create_cq_common(ctx, cqe, cq_context, channel, comp_vector);
  return u ? as_cq(u) : nullptr;
}

__attribute__((visibility("default"))) int ibv_destroy_cq(ibv_cq* cq) {
  if (!mine(cq->context)) return REAL(ibv_destroy_cq)(cq);
  Runtime& r = rt();
  UCq* u = ucq(cq);
  int rc;
  {
    Guard g;
    rc = r.engine->destroy_cq(u->e);
    if (rc == 0) r.armed.erase(std::remove(r.armed.begin(), r.armed.end(), u), r.armed.end());
  }
  if (rc) return rc;
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
  pthread_mutex_destroy(&cq->mutex);
  pthread_cond_destroy(&cq->cond);
  delete u;
  return 0;
}

__attribute__((visibility("default"))) int ibv_get_cq_event(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context) {
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

__attribute__((visibility("default"))) void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (!mine(cq->context)) return REAL(ibv_ack_cq_events)(cq, nevents);
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

__attribute__((visibility("default"))) int ibv_resize_cq(ibv_cq* cq, int cqe) {
  if (!mine(cq->context)) return REAL(ibv_resize_cq)(cq, cqe);
  return EOPNOTSUPP;
}

// ---- SRQ ------------------------------------------------------------------------------------------
__attribute__((visibility("default"))) ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* ia) {
  if (!mine(pd->context)) return REAL(ibv_create_srq)(pd, ia);
  Runtime& r = rt();
  if (ia->attr.max_wr == 0 || ia->attr.max_wr > r.dcfg.max_qp_wr || ia->attr.max_sge == 0 ||
      ia->attr.max_sge > E::kMaxSge) {
    errno = EINVAL;
    return nullptr;
  }
  E::Srq* e;
  {
    Guard g;
    e = r.engine->create_srq(upd(pd)->e, ia->attr.max_wr, ia->attr.max_sge);
    if (e) e->srq_limit = ia->attr.srq_limit;
  }
  if (!e) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* u = new USrq{};
  u->srq.context = pd->context;
  u->srq.srq_context = ia->srq_context;
  u->srq.pd = pd;
  pthread_mutex_init(&u->srq.mutex, nullptr);
  pthread_cond_init(&u->srq.cond, nullptr);
  u->e = e;
  return &u->srq;
}

__attribute__((visibility("default"))) int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  if (!mine(srq->context)) return REAL(ibv_query_srq)(srq, attr);
  Guard g;
  E::Srq* e = usrq(srq)->e;
  attr->max_wr = e->rq().capacity();
  attr->max_sge = e->max_sge();
  attr->srq_limit = e->srq_limit;
  return 0;
}

__attribute__((visibility("default"))) int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  if (!mine(srq->context)) return REAL(ibv_modify_srq)(srq, attr, mask);
  if (mask & IBV_SRQ_MAX_WR) return EINVAL;   // no resize
  if (mask & IBV_SRQ_LIMIT) {
    Guard g;
    usrq(srq)->e->srq_limit = attr->srq_limit;
  }
  return 0;
}

__attribute__((visibility("default"))) int ibv_destroy_srq(ibv_srq* srq) {
  if (!mine(srq->context)) return REAL(ibv_destroy_srq)(srq);
  int rc;
  {
    Guard g;
    rc = rt().engine->destroy_srq(usrq(srq)->e);
  }
  if (rc) return rc;
  pthread_mutex_destroy(&srq->mutex);
  pthread_cond_destroy(&srq->cond);
  delete usrq(srq);
  return 0;
}

}  // extern "C"

// ---- QP -------------------------------------------------------------------------------------------
namespace uroce::shim {
namespace {

// ibv_wr_* (struct ibv_qp_ex): work requests are collected between wr_start and wr_complete and
// posted together.
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
  w.rkey = rkey, w.remote_addr = ra, w.imm_data = imm;
}
void wr_rdma_read(ibv_qp_ex* x, uint32_t rkey, uint64_t ra) {
  E::SendWr& w = wr_new(x, E::WrOpcode::RdmaRead);
  w.rkey = rkey, w.remote_addr = ra;
}
void wr_send(ibv_qp_ex* x) { wr_new(x, E::WrOpcode::Send); }
void wr_send_imm(ibv_qp_ex* x, __be32 imm) { wr_new(x, E::WrOpcode::SendWithImm).imm_data = imm; }
void wr_send_inv(ibv_qp_ex* x, uint32_t rkey) { wr_new(x, E::WrOpcode::SendWithInv).invalidate_rkey = rkey; }
void wr_cas(ibv_qp_ex* x, uint32_t rkey, uint64_t ra, uint64_t cmp, uint64_t swap) {
  E::SendWr& w = wr_new(x, E::WrOpcode::AtomicCmpSwp);
  w.rkey = rkey, w.remote_addr = ra, w.compare_add = cmp, w.swap = swap;
}
void wr_fadd(ibv_qp_ex* x, uint32_t rkey, uint64_t ra, uint64_t add) {
  E::SendWr& w = wr_new(x, E::WrOpcode::AtomicFetchAdd);
  w.rkey = rkey, w.remote_addr = ra, w.compare_add = add;
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
void wr_start(ibv_qp_ex* x) {
  UQp* q = from_ex(x);
  q->batch.clear();
  q->batch_err = 0;
}
int wr_complete(ibv_qp_ex* x) {
  UQp* q = from_ex(x);
  Runtime& r = rt();
  int rc = q->batch_err;
  if (!rc) {
    r.lock();
    for (size_t i = 0; i < q->batch.size() && !rc; ++i) {
      E::SendWr& w = q->batch[i];
      w.sg_list = w.num_sge ? &q->batch_sge[i * E::kMaxSge] : nullptr;
      rc = r.engine->post_send(q->e, w);
    }
    r.drive();
    r.unlock();
  }
  q->batch.clear();
  return rc;
}
void wr_abort(ibv_qp_ex* x) { from_ex(x)->batch.clear(); }
void wr_unsupported_ud(ibv_qp_ex* x, ibv_ah*, uint32_t, uint32_t) { from_ex(x)->batch_err = EOPNOTSUPP; }
void wr_unsupported_xrc(ibv_qp_ex* x, uint32_t) { from_ex(x)->batch_err = EOPNOTSUPP; }
void wr_unsupported_inv(ibv_qp_ex* x, uint32_t) { from_ex(x)->batch_err = EOPNOTSUPP; }
void wr_unsupported_bind(ibv_qp_ex* x, ibv_mw*, uint32_t, const ibv_mw_bind_info*) {
  from_ex(x)->batch_err = EOPNOTSUPP;
}
void wr_unsupported_tso(ibv_qp_ex* x, void*, uint16_t, uint16_t) { from_ex(x)->batch_err = EOPNOTSUPP; }
void wr_unsupported_aw(ibv_qp_ex* x, uint32_t, uint64_t, const void*) { from_ex(x)->batch_err = EOPNOTSUPP; }

constexpr uint64_t kSupportedSendOps =
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

ibv_qp* create_qp_common(ibv_context* ctx, ibv_pd* pd, ibv_qp_init_attr* ia, bool ex) {
  Runtime& r = rt();
  if (ia->qp_type != IBV_QPT_RC) {
    errno = EOPNOTSUPP;   // the engine implements RC only
    return nullptr;
  }
  if (!ia->send_cq || !ia->recv_cq || !mine(ia->send_cq->context) || !mine(ia->recv_cq->context) ||
      (ia->srq && !mine(ia->srq->context)) || ia->cap.max_send_wr > r.dcfg.max_qp_wr ||
      ia->cap.max_recv_wr > r.dcfg.max_qp_wr || ia->cap.max_send_sge > E::kMaxSge ||
      ia->cap.max_recv_sge > E::kMaxSge || ia->cap.max_inline_data > E::kMaxInline) {
    errno = EINVAL;
    return nullptr;
  }
  E::QpInitAttr e;
  e.pd = upd(pd)->e;
  e.send_cq = ucq(ia->send_cq)->e;
  e.recv_cq = ucq(ia->recv_cq)->e;
  e.srq = ia->srq ? usrq(ia->srq)->e : nullptr;
  e.cap.max_send_wr = std::max<uint32_t>(ia->cap.max_send_wr, 1);
  e.cap.max_recv_wr = ia->srq ? 1 : std::max<uint32_t>(ia->cap.max_recv_wr, 1);
  e.cap.max_send_sge = std::max<uint32_t>(ia->cap.max_send_sge, 1);
  e.cap.max_recv_sge = std::max<uint32_t>(ia->cap.max_recv_sge, 1);
  e.cap.max_inline_data = ia->cap.max_inline_data;
  e.qp_type = E::QpType::RC;
  e.sq_sig_all = ia->sq_sig_all != 0;
  E::Qp* q;
  {
    Guard g;
    q = r.engine->create_qp(e);
  }
  if (!q) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* u = new UQp{};
  ibv_qp& b = u->qpx.qp_base;
  b.context = ctx;
  b.qp_context = ia->qp_context;
  b.pd = pd;
  b.send_cq = ia->send_cq;
  b.recv_cq = ia->recv_cq;
  b.srq = ia->srq;
  b.handle = q->qpn();
  b.qp_num = q->qpn();
  b.state = IBV_QPS_RESET;
  b.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&b.mutex, nullptr);
  pthread_cond_init(&b.cond, nullptr);
  u->e = q;
  u->ex = ex;
  if (ex) {
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
    x.wr_set_ud_addr = wr_unsupported_ud;
    x.wr_set_xrc_srqn = wr_unsupported_xrc;
    x.wr_local_inv = wr_unsupported_inv;
    x.wr_bind_mw = wr_unsupported_bind;
    x.wr_send_tso = wr_unsupported_tso;
    x.wr_atomic_write = wr_unsupported_aw;
    u->batch.reserve(64);
  }
  const E::QpCap& cap = q->init_attr().cap;
  ia->cap.max_send_wr = cap.max_send_wr;
  ia->cap.max_recv_wr = ia->srq ? 0 : cap.max_recv_wr;
  ia->cap.max_send_sge = cap.max_send_sge;
  ia->cap.max_recv_sge = cap.max_recv_sge;
  ia->cap.max_inline_data = cap.max_inline_data;
  return &b;
}

ibv_qp* vop_create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* ia) {
  constexpr uint32_t kMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if ((ia->comp_mask & ~kMask) || !(ia->comp_mask & IBV_QP_INIT_ATTR_PD) || !ia->pd || !mine(ia->pd->context)) {
    errno = (ia->comp_mask & ~kMask) ? EOPNOTSUPP : EINVAL;
    return nullptr;
  }
  bool ex = false;
  if (ia->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    if (ia->send_ops_flags & ~kSupportedSendOps) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
    ex = true;
  }
  ibv_qp_init_attr a{};
  a.qp_context = ia->qp_context;
  a.send_cq = ia->send_cq;
  a.recv_cq = ia->recv_cq;
  a.srq = ia->srq;
  a.cap = ia->cap;
  a.qp_type = ia->qp_type;
  a.sq_sig_all = ia->sq_sig_all;
  ibv_qp* q = create_qp_common(ctx, ia->pd, &a, ex);
  if (q) ia->cap = a.cap;
  return q;
}

// ibv_cq_ex: completions are read one at a time from a small buffer filled under the token.
thread_local E::Wc t_wc;
int cqx_next(ibv_cq_ex* cq) {
  Runtime& r = rt();
  UCq* c = reinterpret_cast<UCq*>(cq);
  int k;
  r.lock();
  r.app_poll_ns.store(r.now_ns(), std::memory_order_relaxed);
  r.drive();
  k = r.engine->poll_cq(c->e, 1, &t_wc);
  r.unlock();
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
__be32 cqx_imm(ibv_cq_ex*) { return t_wc.imm_data; }
uint32_t cqx_qp_num(ibv_cq_ex*) { return t_wc.qp_num; }
uint32_t cqx_src_qp(ibv_cq_ex*) { return t_wc.src_qp; }
unsigned int cqx_wc_flags(ibv_cq_ex*) { return t_wc.wc_flags; }
uint32_t cqx_zero32(ibv_cq_ex*) { return 0; }
uint8_t cqx_zero8(ibv_cq_ex*) { return 0; }

ibv_cq_ex* vop_create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* ia) {
  constexpr uint64_t kFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                              IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                              IBV_WC_EX_WITH_DLID_PATH_BITS;
  if ((ia->wc_flags & ~kFlags) || ia->comp_mask) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  UCq* u = create_cq_common(ctx, int(ia->cqe), ia->cq_context, ia->channel, int(ia->comp_vector));
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
  return &x;
}

}  // namespace
}  // namespace uroce::shim

extern "C" {

__attribute__((visibility("default"))) ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* ia) {
  if (!mine(pd->context)) return REAL(ibv_create_qp)(pd, ia);
  return create_qp_common(pd->context, pd, ia, false);
}

__attribute__((visibility("default"))) ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  if (!mine(qp->context)) return REAL(ibv_qp_to_qp_ex)(qp);
  UQp* u = uqp(qp);
  return u->ex ? &u->qpx : nullptr;
}

__attribute__((visibility("default"))) int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  if (!mine(qp->context)) return REAL(ibv_modify_qp)(qp, a, mask);
  Runtime& r = rt();
  UQp* u = uqp(qp);
  const uint32_t m = uint32_t(mask);
  E::QpAttr e;
  e.qp_state = E::QpState(a->qp_state);
  e.cur_qp_state = E::QpState(a->cur_qp_state);
  e.path_mtu = E::Mtu(a->path_mtu);
  e.qkey = a->qkey;
  e.rq_psn = a->rq_psn;
  e.sq_psn = a->sq_psn;
  e.dest_qp_num = a->dest_qp_num;
  e.qp_access_flags = a->qp_access_flags;
  e.cap.max_send_wr = a->cap.max_send_wr;
  e.cap.max_recv_wr = a->cap.max_recv_wr;
  e.cap.max_send_sge = a->cap.max_send_sge;
  e.cap.max_recv_sge = a->cap.max_recv_sge;
  e.cap.max_inline_data = a->cap.max_inline_data;
  e.pkey_index = a->pkey_index;
  e.en_sqd_async_notify = a->en_sqd_async_notify;
  e.sq_draining = a->sq_draining;
  e.max_rd_atomic = a->max_rd_atomic;
  e.max_dest_rd_atomic = a->max_dest_rd_atomic;
  e.min_rnr_timer = a->min_rnr_timer;
  e.port_num = a->port_num;
  e.timeout = a->timeout;
  e.retry_cnt = a->retry_cnt;
  e.rnr_retry = a->rnr_retry;
  if ((m & IBV_QP_PORT) && a->port_num != 1) return EINVAL;
  if ((m & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > mtu_limit_enum())) return EINVAL;
  if ((m & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > r.dcfg.max_rd_atomic) return EINVAL;
  if ((m & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > r.dcfg.max_rd_atomic) return EINVAL;
  Guard g;
  if (m & IBV_QP_AV) {
    const ibv_ah_attr& ah = a->ah_attr;
    // RoCE: the address vector must carry a GRH, and the source GID must be the one this
    // endpoint sends from (the config's gid_index).
    if (!ah.is_global || ah.grh.sgid_index >= r.gids.size() || !r.gid_valid[ah.grh.sgid_index] ||
        r.gids[ah.grh.sgid_index] != r.link->gid()) {
      if (ah.is_global && ah.grh.sgid_index < r.gids.size())
        std::fprintf(stderr, "uroce-verbs: %s sends from GID %s only (sgid_index %u asked)\n", r.cfg.name.c_str(),
                     port::gid_str(r.link->gid()).c_str(), unsigned(ah.grh.sgid_index));
      return EINVAL;
    }
    std::memcpy(e.ah_attr.dgid.data(), ah.grh.dgid.raw, 16);
    e.ah_attr.hop_limit = ah.grh.hop_limit;
    e.ah_attr.traffic_class = ah.grh.traffic_class;
    e.ah_attr.flow_label = ah.grh.flow_label;
    e.ah_attr.sgid_index = ah.grh.sgid_index;
    // The peer's MAC, resolved on the link (ARP or ND) while progress keeps running.
    if (!r.link->lookup(e.ah_attr.dgid, e.ah_attr.dmac)) {
      if (!r.link->wait_link_up(20000) ||
          !r.link->resolve(e.ah_attr.dgid, e.ah_attr.dmac, [&] { r.drive(); })) {
        std::fprintf(stderr, "uroce-verbs: cannot resolve %s on %s\n", port::gid_str(e.ah_attr.dgid).c_str(),
                     r.cfg.name.c_str());
        return ETIMEDOUT;
      }
    }
  }
  int rc = r.engine->modify_qp(u->e, e, m);
  if (rc == 0 && (m & IBV_QP_STATE)) qp->state = a->qp_state;
  return rc;
}

__attribute__((visibility("default"))) int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* a, int mask,
                                                         ibv_qp_init_attr* ia) {
  if (!mine(qp->context)) return REAL(ibv_query_qp)(qp, a, mask, ia);
  UQp* u = uqp(qp);
  E::QpAttr e;
  E::QpInitAttr init;
  {
    Guard g;
    e = u->e->attr();
    init = u->e->init_attr();
  }
  std::memset(a, 0, sizeof *a);
  a->qp_state = ibv_qp_state(e.qp_state);
  a->cur_qp_state = ibv_qp_state(e.qp_state);
  a->path_mtu = ibv_mtu(e.path_mtu);
  a->path_mig_state = IBV_MIG_MIGRATED;
  a->qkey = e.qkey;
  a->rq_psn = e.rq_psn;
  a->sq_psn = e.sq_psn;
  a->dest_qp_num = e.dest_qp_num;
  a->qp_access_flags = e.qp_access_flags;
  a->cap.max_send_wr = init.cap.max_send_wr;
  a->cap.max_recv_wr = init.srq ? 0 : init.cap.max_recv_wr;
  a->cap.max_send_sge = init.cap.max_send_sge;
  a->cap.max_recv_sge = init.cap.max_recv_sge;
  a->cap.max_inline_data = init.cap.max_inline_data;
  std::memcpy(a->ah_attr.grh.dgid.raw, e.ah_attr.dgid.data(), 16);
  a->ah_attr.grh.flow_label = e.ah_attr.flow_label;
  a->ah_attr.grh.sgid_index = e.ah_attr.sgid_index;
  a->ah_attr.grh.hop_limit = e.ah_attr.hop_limit;
  a->ah_attr.grh.traffic_class = e.ah_attr.traffic_class;
  a->ah_attr.is_global = 1;
  a->ah_attr.port_num = 1;
  a->pkey_index = e.pkey_index;
  a->en_sqd_async_notify = e.en_sqd_async_notify;
  a->sq_draining = e.sq_draining;
  a->max_rd_atomic = e.max_rd_atomic;
  a->max_dest_rd_atomic = e.max_dest_rd_atomic;
  a->min_rnr_timer = e.min_rnr_timer;
  a->port_num = 1;
  a->timeout = e.timeout;
  a->retry_cnt = e.retry_cnt;
  a->rnr_retry = e.rnr_retry;
  if (ia) {
    std::memset(ia, 0, sizeof *ia);
    ia->qp_context = qp->qp_context;
    ia->send_cq = qp->send_cq;
    ia->recv_cq = qp->recv_cq;
    ia->srq = qp->srq;
    ia->cap = a->cap;
    ia->qp_type = IBV_QPT_RC;
    ia->sq_sig_all = init.sq_sig_all;
  }
  return 0;
}

__attribute__((visibility("default"))) int ibv_destroy_qp(ibv_qp* qp) {
  if (!mine(qp->context)) return REAL(ibv_destroy_qp)(qp);
  int rc;
  {
    Guard g;
    rc = rt().engine->destroy_qp(uqp(qp)->e);
  }
  if (rc) return rc;
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  delete uqp(qp);
  return 0;
}

// ---- AH, multicast ------------------------------------------------------------------------------
__attribute__((visibility("default"))) ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (!mine(pd->context)) return REAL(ibv_create_ah)(pd, attr);
  // Address handles are only used by UD QPs, which the engine does not implement: a plain object.
  if (attr->port_num != 1 || !attr->is_global) {
    errno = EINVAL;
    return nullptr;
  }
  auto* u = new UAh{};
  u->ah.context = pd->context;
  u->ah.pd = pd;
  u->attr = *attr;
  return &u->ah;
}

__attribute__((visibility("default"))) ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh,
                                                                     uint8_t port) {
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

__attribute__((visibility("default"))) int ibv_destroy_ah(ibv_ah* ah) {
  if (!mine(ah->context)) return REAL(ibv_destroy_ah)(ah);
  delete reinterpret_cast<UAh*>(ah);
  return 0;
}

__attribute__((visibility("default"))) int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (!mine(qp->context)) return REAL(ibv_attach_mcast)(qp, gid, lid);
  return EOPNOTSUPP;
}

__attribute__((visibility("default"))) int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (!mine(qp->context)) return REAL(ibv_detach_mcast)(qp, gid, lid);
  return EOPNOTSUPP;
}

__attribute__((visibility("default"))) int ibv_get_async_event(ibv_context* ctx, ibv_async_event* ev) {
  if (!mine(ctx)) return REAL(ibv_get_async_event)(ctx, ev);
  errno = EAGAIN;   // uroce reports no asynchronous events
  return -1;
}

}  // extern "C"
