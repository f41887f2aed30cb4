// Conversions between the ibv_* structures and the engine's types (verbs_shim/convert.hpp).
#include "verbs_shim/convert.hpp"
#include "verbs_shim/api.hpp"
#include "verbs_shim/objects.hpp"

#include <endian.h>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "verbs_shim/param.hpp"
#include "verbs_shim/runtime.hpp"

namespace E = uroce::engine;

// The engine's enums and flags have the ibv_* values: converted with casts.
static_assert(sizeof(E::Sge) == sizeof(ibv_sge) && offsetof(E::Sge, length) == offsetof(ibv_sge, length) &&
              offsetof(E::Sge, lkey) == offsetof(ibv_sge, lkey));
static_assert(uint32_t(E::WcStatus::GeneralErr) == IBV_WC_GENERAL_ERR);
static_assert(uint32_t(E::WcOpcode::RecvRdmaWithImm) == IBV_WC_RECV_RDMA_WITH_IMM);
static_assert(uint32_t(E::WrOpcode::SendWithInv) == IBV_WR_SEND_WITH_INV);
static_assert(uint32_t(E::kAttrDestQpn) == IBV_QP_DEST_QPN && uint32_t(E::kAttrMaxDestRdAtomic) == IBV_QP_MAX_DEST_RD_ATOMIC);
static_assert(uint32_t(E::kRelaxedOrdering) == IBV_ACCESS_RELAXED_ORDERING && uint32_t(E::kOnDemand) == IBV_ACCESS_ON_DEMAND);
static_assert(uint32_t(E::kFlushGlobal) == uroce::shim::ext::kAccessFlushGlobal &&
              uint32_t(E::kFlushPersistent) == uroce::shim::ext::kAccessFlushPersistent);
static_assert(int(E::WrOpcode::Flush) == uroce::shim::ext::kWrFlush && int(E::WrOpcode::AtomicWrite) == IBV_WR_ATOMIC_WRITE);
static_assert(int(E::WcOpcode::Flush) == uroce::shim::ext::kWcFlush && int(E::WcOpcode::AtomicWrite) == IBV_WC_ATOMIC_WRITE);

namespace uroce::shim {

// ---- Attribute tables ---------------------------------------------------------------------------
uint64_t guid_from_mac(const proto::Mac& m) {
  // EUI-64 (as rxe), in network byte order as libibverbs reports GUIDs.
  uint8_t g[8] = {uint8_t(m[0] ^ 2), m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]};
  uint64_t v;
  std::memcpy(&v, g, 8);
  return v;
}

// Memory windows of type 1 and 2B, as rxe announces them; XRC (verbs_shim/xrc.cpp).
uint64_t device_cap_flags() {
  return IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_MEM_WINDOW |
         IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
}

// IP-based GIDs (RoCE); no CM: IBV_PORT_CM_SUP is not advertised.
uint32_t port_cap_flags() { return IBV_PORT_IP_BASED_GIDS; }

void fill_device_attr(ibv_device_attr* a) {
  Runtime& r = rt();
  std::memset(a, 0, sizeof *a);
  std::snprintf(a->fw_ver, sizeof a->fw_ver, "%s", param::kShimFwVer);
  a->node_guid = guid_from_mac(r.link->mac());
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = param::kMaxMrSize;
  a->page_size_cap = 0xFFFFF000;   // any page size from 4 KiB
  a->vendor_id = param::kShimVendorId;
  a->vendor_part_id = param::kShimVendorPartId;
  a->hw_ver = 0;
  a->max_qp = int(r.dcfg.max_qp);
  a->max_qp_wr = int(r.dcfg.max_qp_wr);
  a->device_cap_flags = unsigned(device_cap_flags());
  a->max_sge = int(E::kMaxSge);
  a->max_sge_rd = int(E::kMaxSge);
  a->max_cq = int(r.dcfg.max_cq);
  a->max_cqe = int(r.dcfg.max_cqe);
  a->max_mr = int(r.dcfg.max_mr);
  a->max_pd = int(param::kShimMaxPd);
  a->max_qp_rd_atom = int(r.dcfg.max_rd_atomic);
  a->max_ee_rd_atom = 0;
  a->max_res_rd_atom = int(r.dcfg.max_rd_atomic * r.dcfg.max_qp);
  a->max_qp_init_rd_atom = int(r.dcfg.max_rd_atomic);
  a->atomic_cap = IBV_ATOMIC_HCA;
  a->max_mw = int(uroce::param::kMaxMw);
  a->max_ah = int(uroce::param::kMaxAh);
  a->max_mcast_grp = int(uroce::param::kMaxMcastGrp);
  a->max_mcast_qp_attach = int(uroce::param::kMaxMcastQpAttach);
  a->max_total_mcast_qp_attach = int(uroce::param::kMaxTotalMcastQpAttach);
  a->max_srq = int(param::kMaxSrq);
  a->max_srq_wr = int(r.dcfg.max_qp_wr);
  a->max_srq_sge = int(E::kMaxSge);
  a->max_pkeys = 1;
  a->local_ca_ack_delay = param::kShimLocalCaAckDelay;
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
  a->active_mtu = ibv_mtu(r.identity.cfg.path_mtu);
  a->gid_tbl_len = int(r.identity.gids.size());
  a->port_cap_flags = port_cap_flags();
  a->max_msg_sz = uint32_t(param::kMaxMessage);
  a->pkey_tbl_len = 1;
  a->lid = 0;
  a->sm_lid = 0;
  a->max_vl_num = 1;
  a->active_width = param::kShimPortActiveWidth;
  a->active_speed = param::kShimPortActiveSpeed;
  a->phys_state = param::kShimPortPhysState;
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
}

// ---- Work requests and completions ------------------------------------------------------------
E::SendWr to_engine(const ibv_send_wr& wr, ibv_qp_type type) {
  E::SendWr w;
  w.wr_id = wr.wr_id;
  w.opcode = E::WrOpcode(wr.opcode);
  w.send_flags = wr.send_flags;
  w.sg_list = reinterpret_cast<const E::Sge*>(wr.sg_list);
  w.num_sge = uint32_t(wr.num_sge);
  w.imm_data = be32toh(wr.imm_data);  // ibverbs' __be32 -> the engine's number
  if (type == IBV_QPT_UD) {  // wr.ud shares its union with wr.rdma and wr.atomic
    w.ah = wr.wr.ud.ah ? reinterpret_cast<const UAh*>(wr.wr.ud.ah)->e : nullptr;
    w.remote_qpn = wr.wr.ud.remote_qpn;
    w.remote_qkey = wr.wr.ud.remote_qkey;
  } else if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    w.remote_addr = wr.wr.atomic.remote_addr;
    w.rkey = wr.wr.atomic.rkey;
    w.compare_add = wr.wr.atomic.compare_add;
    w.swap = wr.wr.atomic.swap;
  } else if (wr.opcode == IBV_WR_BIND_MW) {
    bind_wr(w, wr.bind_mw.mw, wr.bind_mw.rkey, wr.bind_mw.bind_info);
  } else {
    w.remote_addr = wr.wr.rdma.remote_addr;
    w.rkey = wr.wr.rdma.rkey;
    if (wr.opcode == IBV_WR_SEND_WITH_INV || wr.opcode == IBV_WR_LOCAL_INV) w.invalidate_rkey = wr.invalidate_rkey;
  }
  if (type == IBV_QPT_XRC_SEND) w.xrc_srqn = wr.qp_type.xrc.remote_srqn;
  return w;
}

E::RecvWr to_engine(const ibv_recv_wr& wr) {
  E::RecvWr w;
  w.wr_id = wr.wr_id;
  w.sg_list = reinterpret_cast<const E::Sge*>(wr.sg_list);
  w.num_sge = uint32_t(wr.num_sge);
  return w;
}

void to_ibv_wc(const E::Wc& s, ibv_wc& d) {
  d.wr_id = s.wr_id;
  d.status = ibv_wc_status(s.status);
  d.opcode = ibv_wc_opcode(s.opcode);
  d.vendor_err = s.vendor_err;
  d.byte_len = s.byte_len;
  // imm_data and invalidated_rkey share a union in ibv_wc: the immediate is big-endian (as on the
  // wire), the invalidated R_Key a host number.
  if (s.wc_flags & IBV_WC_WITH_INV) d.invalidated_rkey = s.invalidated_rkey;
  else d.imm_data = htobe32(s.imm_data);
  d.qp_num = s.qp_num;
  d.src_qp = s.src_qp;
  d.wc_flags = s.wc_flags;
  d.pkey_index = s.pkey_index;
  d.slid = 0;
  // A UD receive's sl is the RoCE packet type, as ConnectX reports it: bit 3 set for RoCE v2 (a UDP
  // header), bits 0-2 the network header (1 IPv6, 2 IPv4). UCX reads it to know where the
  // destination address sits in the 40-byte GRH area. (rxe reports 0.) Elsewhere 0.
  d.sl = s.ip_version == 4 ? 0x8 | 0x2 : s.ip_version == 6 ? 0x8 | 0x1 : 0;
  d.dlid_path_bits = 0;
}

// ---- QP attributes ------------------------------------------------------------------------------
namespace {

// The attributes ibv_qp_attr and the engine's QpAttr name alike (and alike typed), either way.
template <typename To, typename From>
void copy_same_named(To& d, const From& s) {
  d.qkey = s.qkey;
  d.rq_psn = s.rq_psn;
  d.sq_psn = s.sq_psn;
  d.dest_qp_num = s.dest_qp_num;
  d.qp_access_flags = s.qp_access_flags;
  d.pkey_index = s.pkey_index;
  d.en_sqd_async_notify = s.en_sqd_async_notify;
  d.sq_draining = s.sq_draining;
  d.max_rd_atomic = s.max_rd_atomic;
  d.max_dest_rd_atomic = s.max_dest_rd_atomic;
  d.min_rnr_timer = s.min_rnr_timer;
  d.timeout = s.timeout;
  d.retry_cnt = s.retry_cnt;
  d.rnr_retry = s.rnr_retry;
}

}  // namespace

E::QpAttr to_engine(const ibv_qp_attr& a) {
  E::QpAttr e;
  e.qp_state = E::QpState(a.qp_state);
  e.cur_qp_state = E::QpState(a.cur_qp_state);
  e.path_mtu = E::Mtu(a.path_mtu);
  e.port_num = a.port_num;
  e.cap.max_send_wr = a.cap.max_send_wr;
  e.cap.max_recv_wr = a.cap.max_recv_wr;
  e.cap.max_send_sge = a.cap.max_send_sge;
  e.cap.max_recv_sge = a.cap.max_recv_sge;
  e.cap.max_inline_data = a.cap.max_inline_data;
  copy_same_named(e, a);
  return e;
}

ibv_qp_cap to_ibv(const E::QpCap& c, bool srq) {
  ibv_qp_cap d{};
  d.max_send_wr = c.max_send_wr;
  d.max_recv_wr = srq ? 0 : c.max_recv_wr;
  d.max_send_sge = c.max_send_sge;
  d.max_recv_sge = c.max_recv_sge;
  d.max_inline_data = c.max_inline_data;
  return d;
}

void to_ibv_qp_attr(const E::QpAttr& e, const E::QpInitAttr& init, ibv_qp_attr* a) {
  std::memset(a, 0, sizeof *a);
  a->qp_state = ibv_qp_state(e.qp_state);
  a->cur_qp_state = ibv_qp_state(e.qp_state);
  a->path_mtu = ibv_mtu(e.path_mtu);
  a->path_mig_state = IBV_MIG_MIGRATED;
  a->port_num = 1;
  a->cap = to_ibv(init.cap, init.srq != nullptr);
  copy_same_named(*a, e);
  std::memcpy(a->ah_attr.grh.dgid.raw, e.ah_attr.dgid.data(), 16);
  a->ah_attr.grh.flow_label = e.ah_attr.flow_label;
  a->ah_attr.grh.sgid_index = e.ah_attr.sgid_index;
  a->ah_attr.grh.hop_limit = e.ah_attr.hop_limit;
  a->ah_attr.grh.traffic_class = e.ah_attr.traffic_class;
  a->ah_attr.is_global = 1;
  a->ah_attr.port_num = 1;
}

// ---- Access flags -------------------------------------------------------------------------------
bool mr_access(unsigned access, unsigned& out) {
  constexpr unsigned kSupported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                                  IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_ON_DEMAND | ext::kAccessFlushGlobal |
                                  ext::kAccessFlushPersistent;
  // Optional-range flags (relaxed ordering and the like) may be ignored by a device; others may not.
  access &= ~(IBV_ACCESS_OPTIONAL_RANGE & ~IBV_ACCESS_RELAXED_ORDERING);
  if ((access & ~kSupported) ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)))
    return false;
  out = access;
  return true;
}

// ---- The GRH area of a UD receive --------------------------------------------------------------
int grh_to_ah_attr(const uint8_t* g, const std::vector<proto::Ip6>& gids, const std::vector<bool>& valid,
                   ibv_ah_attr& ah) {
  proto::Ip6 src{}, dst{};
  uint8_t tclass, hop;
  uint32_t flow = 0;
  if ((g[0] >> 4) == 6) {
    // IPv6: version 4 bits, traffic class 8, flow label 20; ...; hop limit at 7; addresses at 8, 24.
    tclass = uint8_t((g[0] & 0x0F) << 4 | g[1] >> 4);
    flow = uint32_t(g[1] & 0x0F) << 16 | uint32_t(g[2]) << 8 | g[3];
    hop = g[7];
    std::memcpy(src.data(), g + 8, 16);
    std::memcpy(dst.data(), g + 24, 16);
  } else if ((g[20] >> 4) == 4) {
    // IPv4 in bytes 20-39 (its first 20 bytes: options do not fit): TOS at +1, TTL at +8,
    // addresses at +12, +16.
    const uint8_t* h = g + 20;
    tclass = h[1];
    hop = h[8];
    src[10] = src[11] = dst[10] = dst[11] = 0xFF;
    std::memcpy(&src[12], h + 12, 4);
    std::memcpy(&dst[12], h + 16, 4);
  } else {
    return EINVAL;
  }
  size_t idx = 0;
  while (idx < gids.size() && !(valid[idx] && gids[idx] == dst)) ++idx;
  if (idx == gids.size()) return ENOENT;
  ah.is_global = 1;
  std::memcpy(ah.grh.dgid.raw, src.data(), 16);
  ah.grh.flow_label = flow;
  ah.grh.hop_limit = hop;
  ah.grh.traffic_class = tclass;
  ah.grh.sgid_index = uint8_t(idx);
  return 0;
}

}  // namespace uroce::shim
