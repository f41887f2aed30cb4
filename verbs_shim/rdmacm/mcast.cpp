// rdma_join_multicast(_ex) and rdma_leave_multicast: UD multicast groups, as the kernel's
// rdma_cm gives them on RoCE (drivers/infiniband/core/cma.c, cma_iboe_join_multicast) and
// librdmacm attaches them (ucma_process_join).
//
// On Ethernet there is no subnet administrator to ask: a join is local. The group's GID is its
// IP address (IPv4-mapped for IPv4), its MAC follows from it (proto/multicast.hpp), and the
// JOIN event carries what a sender needs for ibv_create_ah and ibv_post_send: QP 0xFFFFFF, the
// Q_Key of the port space, the group as the destination GID and the id's address as the source.
// When the event is taken (rdma_get_cm_event), the id's QP, if it has one and the join is not
// send-only, is attached to the group (ibv_attach_mcast); if that fails the event is
// MULTICAST_ERROR, as librdmacm makes it. rdma_leave_multicast detaches it again.
//
// Where uroce differs from the kernel: an IPv6 group is joined too (the kernel refuses IPv6
// groups on RoCEv2 with ENOTSUPP), and no IGMP or MLD report is sent, so a switch that snoops
// IGMP will not forward the group to this port (docs/rdma_cm.md).
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "proto/multicast.hpp"
#include "verbs_shim/rdmacm/cma.hpp"

namespace uroce::rdmacm {

Event* on_join(Id* id, const std::shared_ptr<Mc>& mc) {
  Event* e = make_event(id, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
  rdma_ud_param& u = e->ev.param.ud;
  u.private_data = mc->context;  // librdmacm hands the join's context back here
  u.private_data_len = 0;
  u.qp_num = proto::kMulticastQpn;
  u.qkey = id->id.ps == RDMA_PS_UDP ? RDMA_UDP_QKEY : 0;
  u.ah_attr.is_global = 1;
  u.ah_attr.port_num = 1;
  std::memcpy(u.ah_attr.grh.dgid.raw, mc->mgid.data(), 16);
  u.ah_attr.grh.sgid_index = id->sgid_index;
  u.ah_attr.grh.hop_limit = param::kDefaultHopLimit;
  u.ah_attr.grh.traffic_class = id->tos;
  // The attachment, outside mu (a verbs call). A leave that came first took the entry off the
  // queue, so the group is still joined here.
  if (id->id.qp && !mc->send_only) {
    ibv_gid g;
    std::memcpy(g.raw, mc->mgid.data(), 16);
    if (int rc = ibv_attach_mcast(id->id.qp, &g, 0)) {
      e->ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
      e->ev.status = -1;  // librdmacm's: rdma_seterrno's -1, errno holding the reason
      errno = rc;
      return e;
    }
    std::lock_guard<std::mutex> g2(lib().mu);
    mc->attached = true;
  }
  return e;
}

namespace {

int join(Id* id, const sockaddr* addr, bool send_only, void* context) {
  if (!addr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)) return EINVAL;
  // The kernel's rules: an id with an address (bound or resolved), of a UD port space.
  if (!id->bound && !id->addr_resolved) return EINVAL;
  if (id->id.qp_type != IBV_QPT_UD) return EINVAL;
  if (is_any(addr)) return EINVAL;
  const proto::Ip6 mgid = gid_of(addr);
  if (!proto::is_multicast_gid(mgid)) return EINVAL;
  auto mc = std::make_shared<Mc>();
  std::memcpy(&mc->addr, addr, sa_len(addr));
  mc->mgid = mgid;
  mc->context = context;
  mc->send_only = send_only;
  std::lock_guard<std::mutex> g(lib().mu);
  id->mcs.push_back(mc);
  Item it;
  it.id = id;
  it.type = RDMA_CM_EVENT_MULTICAST_JOIN;
  it.mc = mc;
  post(id->chan, std::move(it));
  return 0;
}

bool same_addr(const sockaddr_storage& a, const sockaddr* b) {
  if (a.ss_family != b->sa_family) return false;
  return gid_of(reinterpret_cast<const sockaddr*>(&a)) == gid_of(b);
}

}  // namespace

}  // namespace uroce::rdmacm

using namespace uroce::rdmacm;

extern "C" {

CMA_EXPORT int rdma_join_multicast_ex(rdma_cm_id* cid, rdma_cm_join_mc_attr_ex* attr, void* context) {
  if (!live_id(cid) || !attr) return fail(EINVAL);
  const uint32_t known = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  if ((attr->comp_mask & ~known) || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) ||
      !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS))
    return fail(EINVAL);
  if (attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return fail(EINVAL);
  const bool sync = to_id(cid)->chan->sync;
  if (int rc = join(to_id(cid), attr->addr, attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, context))
    return fail(rc);
  return sync ? sync_wait(to_id(cid)) : 0;
}

CMA_EXPORT int rdma_join_multicast(rdma_cm_id* cid, sockaddr* addr, void* context) {
  rdma_cm_join_mc_attr_ex attr{};
  attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  attr.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
  attr.addr = addr;
  return rdma_join_multicast_ex(cid, &attr, context);
}

CMA_EXPORT int rdma_leave_multicast(rdma_cm_id* cid, sockaddr* addr) {
  if (!live_id(cid) || !addr) return fail(EINVAL);
  Id* id = to_id(cid);
  std::shared_ptr<Mc> mc;
  {
    std::lock_guard<std::mutex> g(lib().mu);
    auto it = std::find_if(id->mcs.begin(), id->mcs.end(), [&](const auto& m) { return same_addr(m->addr, addr); });
    if (it == id->mcs.end()) return fail(EADDRNOTAVAIL);
    mc = *it;
    id->mcs.erase(it);
    // A JOIN not taken yet goes with it (and its count on the channel's fd).
    unpost_if(id->chan, [&](const Item& i) { return i.mc == mc; });
  }
  if (mc->attached && id->id.qp) {
    ibv_gid g;
    std::memcpy(g.raw, mc->mgid.data(), 16);
    ibv_detach_mcast(id->id.qp, &g, 0);  // a QP destroyed meanwhile left its groups already
  }
  return 0;
}

}  // extern "C"
