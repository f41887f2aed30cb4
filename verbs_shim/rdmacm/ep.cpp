// rdma_getaddrinfo (names and ports to addresses, without the kernel's rdma_cm), the
// synchronous endpoint API (rdma_create_ep, rdma_get_request, rdma_destroy_ep: ids on a channel
// of their own whose calls wait for their event), the device list, event names, and what is
// refused (ECE).
#include <arpa/inet.h>
#include <netdb.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <rdma/rdma_verbs.h>

#include "verbs_shim/rdmacm/cma.hpp"

using namespace uroce::rdmacm;

namespace {

// One rdma_addrinfo with room for its addresses (freed whole by rdma_freeaddrinfo).
struct AddrInfo {
  rdma_addrinfo ai;
  sockaddr_storage src, dst;
};

}  // namespace

extern "C" {

CMA_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                rdma_addrinfo** res) {
  if (!res || (!node && !service)) return fail(EINVAL);
  const int flags = hints ? hints->ai_flags : 0;
  const bool passive = flags & RAI_PASSIVE;
  addrinfo h{};
  h.ai_family = hints && hints->ai_family ? hints->ai_family : 0;
  h.ai_socktype = SOCK_STREAM;
  h.ai_flags = (passive ? AI_PASSIVE : 0) | ((flags & RAI_NUMERICHOST) ? AI_NUMERICHOST : 0);
  // A wildcard listener of no given family is an IPv4 one (0.0.0.0), as librdmacm's default.
  if (!node && !h.ai_family) h.ai_family = AF_INET;
  addrinfo* r = nullptr;
  const int rc = getaddrinfo(node, service, &h, &r);
  if (rc) {
    errno = rc == EAI_SYSTEM ? errno : ENOENT;
    return rc;
  }
  AddrInfo* a = static_cast<AddrInfo*>(calloc(1, sizeof(AddrInfo)));
  if (!a) {
    freeaddrinfo(r);
    return fail(ENOMEM);
  }
  a->ai.ai_flags = flags;
  a->ai.ai_family = r->ai_family;
  a->ai.ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
  a->ai.ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space
                        : a->ai.ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP
                                                         : RDMA_PS_TCP;
  sockaddr_storage& where = passive ? a->src : a->dst;
  std::memcpy(&where, r->ai_addr, r->ai_addrlen);
  if (passive) {
    a->ai.ai_src_addr = reinterpret_cast<sockaddr*>(&a->src);
    a->ai.ai_src_len = r->ai_addrlen;
  } else {
    a->ai.ai_dst_addr = reinterpret_cast<sockaddr*>(&a->dst);
    a->ai.ai_dst_len = r->ai_addrlen;
    if (hints && hints->ai_src_addr && hints->ai_src_len <= sizeof a->src) {
      std::memcpy(&a->src, hints->ai_src_addr, hints->ai_src_len);
      a->ai.ai_src_addr = reinterpret_cast<sockaddr*>(&a->src);
      a->ai.ai_src_len = hints->ai_src_len;
    }
  }
  freeaddrinfo(r);
  *res = &a->ai;
  return 0;
}

CMA_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    free(res);  // one AddrInfo, allocated whole (the library never sets the name or route fields)
    res = next;
  }
}

CMA_EXPORT int rdma_create_ep(rdma_cm_id** out, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (!out || !res) return fail(EINVAL);
  rdma_cm_id* cid = nullptr;
  if (rdma_create_id(nullptr, &cid, nullptr, rdma_port_space(res->ai_port_space))) return -1;
  Id* id = to_id(cid);
  if (qp_init_attr) qp_init_attr->qp_type = ibv_qp_type(res->ai_qp_type);  // as librdmacm does
  int rc;
  if (res->ai_flags & RAI_PASSIVE) {
    rc = rdma_bind_addr(cid, res->ai_src_addr);
    if (!rc && qp_init_attr) {
      // rdma_get_request makes each new connection's QP with these.
      id->ep_attr = *qp_init_attr;
      id->ep_attr_set = true;
      id->ep_pd = pd;
    }
  } else {
    rc = rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (!rc) rc = rdma_resolve_route(cid, 2000);
    if (!rc && qp_init_attr) rc = rdma_create_qp(cid, pd, qp_init_attr);
  }
  if (rc) {
    const int e = errno;
    rdma_destroy_id(cid);
    errno = e;
    return -1;
  }
  *out = cid;
  return 0;
}

CMA_EXPORT void rdma_destroy_ep(rdma_cm_id* id) {
  if (!live_id(id)) return;
  if (id->qp) rdma_destroy_qp(id);
  if (id->srq) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

CMA_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** out) {
  if (!live_id(listen) || !out) return fail(EINVAL);
  Id* l = to_id(listen);
  if (!l->chan->sync) return fail(EINVAL);
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(&l->chan->ch, &ev)) return -1;
    if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {  // nothing else is expected on a listener
      rdma_ack_cm_event(ev);
      continue;
    }
    rdma_cm_id* n = ev->id;
    n->event = ev;  // acknowledged by the next synchronous call or rdma_destroy_id
    if (l->ep_attr_set) {
      ibv_qp_init_attr a = l->ep_attr;
      if (rdma_create_qp(n, l->ep_pd, &a)) {
        const int e = errno;
        rdma_reject(n, nullptr, 0);
        rdma_destroy_id(n);
        return fail(e);
      }
    }
    *out = n;
    return 0;
  }
}

CMA_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
  if (!ready()) {
    if (num_devices) *num_devices = 0;
    return static_cast<ibv_context**>(calloc(1, sizeof(ibv_context*)));
  }
  auto** list = static_cast<ibv_context**>(calloc(2, sizeof(ibv_context*)));
  if (!list) return nullptr;
  list[0] = lib().ctx;
  if (num_devices) *num_devices = 1;
  return list;
}

CMA_EXPORT void rdma_free_devices(ibv_context** list) { free(list); }

CMA_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

// ECE (vendor options carried in the CM): the device has none (ibv_query_ece is refused too).
CMA_EXPORT int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) { return fail(EOPNOTSUPP); }
CMA_EXPORT int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) { return fail(EOPNOTSUPP); }

}  // extern "C"
