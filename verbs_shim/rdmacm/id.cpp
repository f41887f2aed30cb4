// Ids (rdma_cm_id): creation and destruction, addresses and ports (uroce's own addresses only:
// the config's IPv4 and IPv6 addresses, the GID table of the shim's device), route resolution
// (local: there is no subnet manager on RoCE), and the connection calls that drive the
// engine's CM: listen, connect, accept, reject, establish, disconnect; options.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <unordered_set>

#include "verbs_shim/rdmacm/cma.hpp"

namespace uroce::rdmacm {

namespace pcm = proto::cm;

ibv_qp_type qp_type_of(rdma_port_space ps) {
  return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
}

namespace {
std::mutex live_mu;
std::unordered_set<const void*> live_ids;  // (live_mu)
}  // namespace

void id_born(Id* i) {
  std::lock_guard<std::mutex> g(live_mu);
  live_ids.insert(i);
}

bool id_take(Id* i) {
  std::lock_guard<std::mutex> g(live_mu);
  return live_ids.erase(i) == 1;
}

Id* live_id(const rdma_cm_id* i) {
  if (!i) return nullptr;
  std::lock_guard<std::mutex> g(live_mu);
  return live_ids.count(i) ? to_id(const_cast<rdma_cm_id*>(i)) : nullptr;
}

Id* new_id(Channel* ch, void* context, rdma_port_space ps) {
  Id* i = new Id{};
  id_born(i);
  i->chan = ch;
  i->id.channel = &ch->ch;
  i->id.context = context;
  i->id.ps = ps;
  i->id.qp_type = qp_type_of(ps);
  return i;
}

uint32_t random_psn() {
  static thread_local std::mt19937 rng = [] {
    uint32_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = uint32_t(time(nullptr));
    return std::mt19937(seed);
  }();
  return rng() & 0xFFFFFF;
}

bool is_any(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) return reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr == htonl(INADDR_ANY);
  return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
}

uint16_t port_of(const sockaddr* sa) {
  return ntohs(sa->sa_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port
                                         : reinterpret_cast<const sockaddr_in*>(sa)->sin_port);
}

void set_port(sockaddr* sa, uint16_t port) {
  if (sa->sa_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(sa)->sin6_port = htons(port);
  else reinterpret_cast<sockaddr_in*>(sa)->sin_port = htons(port);
}

size_t sa_len(const sockaddr* sa) { return sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in); }

// The GID (IPv4-mapped for IPv4) of an address.
proto::Ip6 gid_of(const sockaddr* sa) {
  proto::Ip6 g{};
  if (sa->sa_family == AF_INET6) {
    std::memcpy(g.data(), &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
  } else {
    g[10] = g[11] = 0xff;
    std::memcpy(g.data() + 12, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, 4);
  }
  return g;
}

namespace {

// rdma_cm's IP header carries an IPv4 address after 12 zero bytes.
pcm::Gid cma_addr(const sockaddr* sa) {
  pcm::Gid g{};
  if (sa->sa_family == AF_INET6) std::memcpy(g.data(), &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
  else std::memcpy(g.data() + 12, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, 4);
  return g;
}

// Binds `id` to `sa` (our address or the wildcard; port 0: an ephemeral one).
int bind_id(Id* id, const sockaddr* sa) {
  if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) return EAFNOSUPPORT;
  uint8_t sgid = 1;
  int rc = local_address(sa->sa_family, is_any(sa) ? nullptr : sa, sgid);
  if (rc) return rc;
  Lib& L = lib();
  std::lock_guard<std::mutex> g(L.mu);
  if (id->bound) {
    L.ports.erase(uint32_t(id->id.ps) << 16 | id->port);
    id->bound = false;
  }
  uint16_t port = port_of(sa);
  const uint32_t ps = uint32_t(id->id.ps) << 16;
  if (port == 0) {
    // An ephemeral port, as Linux picks them (32768..60999), not bound by another id.
    for (int tries = 0; tries < 65536 && port == 0; ++tries) {
      const uint16_t p = uint16_t(32768 + random_psn() % (61000 - 32768));
      if (!L.ports.count(ps | p)) port = p;
    }
    if (port == 0) return EADDRINUSE;
  } else if (L.ports.count(ps | port)) {
    return EADDRINUSE;
  }
  L.ports[ps | port] = id;
  id->port = port;
  id->bound = true;
  id->sgid_index = sgid;
  std::memset(&id->id.route.addr.src_storage, 0, sizeof id->id.route.addr.src_storage);
  std::memcpy(&id->id.route.addr.src_storage, sa, sa_len(sa));
  set_port(&id->id.route.addr.src_addr, port);
  id->id.verbs = L.ctx;
  id->id.port_num = 1;
  const auto gids = cmb::gids();
  if (sgid < gids.size()) std::memcpy(id->id.route.addr.addr.ibaddr.sgid.raw, gids[sgid].data(), 16);
  id->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
  return 0;
}

int result(int rc) { return rc ? fail(rc) : 0; }

}  // namespace

int local_address(int family, const void* addr, uint8_t& sgid_index) {
  const auto gids = cmb::gids();
  const proto::Ip6 zero{};
  if (addr) {
    const proto::Ip6 want = gid_of(static_cast<const sockaddr*>(addr));
    for (size_t i = 0; i < gids.size(); ++i)
      if (gids[i] != zero && gids[i] == want) {
        sgid_index = uint8_t(i);
        return 0;
      }
    return EADDRNOTAVAIL;
  }
  // The wildcard: the IPv4 GID (index 1), or for IPv6 the first configured address (2..),
  // else the link-local one (0).
  if (family == AF_INET) {
    if (gids.size() > 1 && gids[1] != zero) {
      sgid_index = 1;
      return 0;
    }
    return EADDRNOTAVAIL;
  }
  for (size_t i = 2; i < gids.size(); ++i)
    if (gids[i] != zero) {
      sgid_index = uint8_t(i);
      return 0;
    }
  sgid_index = gids.size() > 1 && gids[1] != zero ? 1 : 0;
  return 0;
}

uint64_t service_id(const Id* id) {
  return pcm::service_id(uint16_t(id->id.ps), port_of(&id->id.route.addr.dst_addr));
}

}  // namespace uroce::rdmacm

using namespace uroce::rdmacm;
namespace proto = uroce::proto;
namespace engine = uroce::engine;
namespace param = uroce::param;

extern "C" {

CMA_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps) {
  if (!id) return fail(EINVAL);
  // The port spaces rdma_cm knows (the kernel refuses others with EINVAL).
  if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IPOIB && ps != RDMA_PS_IB) return fail(EINVAL);
  if (!ready()) return -1;
  Channel* ch = channel ? to_ch(channel) : new_channel(true);
  if (!ch) return -1;
  ibv_pd* pd = default_pd(lib().ctx);
  if (!pd) return -1;
  Id* i = new_id(ch, context, ps);
  // One device: every id is on it from the start, with the device's PD (librdmacm's rsockets
  // register their buffers in it: ibv_reg_mr(id->pd, ...)).
  i->id.verbs = lib().ctx;
  i->id.pd = pd;
  i->id.port_num = 1;
  *id = &i->id;
  return 0;
}

CMA_EXPORT int rdma_destroy_id(rdma_cm_id* cid) {
  if (!cid || !id_take(to_id(cid))) return fail(EINVAL);  // destroyed already (or never ours)
  Id* id = to_id(cid);
  Lib& L = lib();
  if (id->id.event) {
    rdma_ack_cm_event(id->id.event);
    id->id.event = nullptr;
  }
  {
    // librdmacm's rule: every event of the id is acknowledged before it goes.
    std::unique_lock<std::mutex> g(L.mu);
    L.acked.wait(g, [&] { return id->unacked == 0; });
  }
  if (id->cm) {
    cmb::lock();
    ecm::Conn c;
    if (cmb::find(id->cm, c)) {
      using S = ecm::State;
      switch (c.state) {
        case S::Listen:
        case S::ReqSent:
        case S::MraReqRcvd:
        case S::RepSent:
        case S::MraRepRcvd:
        case S::SidrReqSent:
          cmb::destroy(id->cm);
          break;
        case S::ReqRcvd:
        case S::MraReqSent:
        case S::RepRcvd:
          cmb::reject(id->cm, pcm::rej::kConsumerDefined, {});
          break;
        case S::SidrReqRcvd:
          cmb::sidr_reply(id->cm, pcm::sidr::kReject, 0, 0, {});
          break;
        case S::Established:
        case S::DreqRcvd:
          cmb::disconnect(id->cm);  // DREQ (or the DREP); the engine finishes it and TimeWait
          break;
        default:  // DREQ_SENT, TIMEWAIT: the engine finishes on its own
          break;
      }
    }
    std::lock_guard<std::mutex> g(L.mu);  // token, then mu: the hook's order
    if (auto it = L.by_cm.find(id->cm); it != L.by_cm.end() && it->second == id) L.by_cm.erase(it);
    cmb::unlock();
  }
  Channel* sync = nullptr;
  {
    std::unique_lock<std::mutex> g(L.mu);
    if (id->bound) {
      auto it = L.ports.find(uint32_t(id->id.ps) << 16 | id->port);
      if (it != L.ports.end() && it->second == id) L.ports.erase(it);
    }
    // Queued entries of this id go with it, and their counts on the channel's fd.
    unpost_if(id->chan, [&](const Item& i) { return i.id == id; });
    // An entry another thread took from the channel meanwhile (an event the engine posted
    // before the id left its index): that reader holds the id until its event is made, and
    // the event must be acknowledged like any other (a reader touched the freed id before:
    // ThreadSanitizer, rping's CM thread against its main thread in rdma_destroy_id).
    L.acked.wait(g, [&] { return id->unacked == 0; });
    if (id->chan->sync) sync = id->chan;
  }
  if (sync) free_channel(sync);
  delete id;
  return 0;
}

CMA_EXPORT int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  if (!live_id(id) || !addr) return fail(EINVAL);
  return result(bind_id(to_id(id), addr));
}

CMA_EXPORT int rdma_resolve_addr(rdma_cm_id* cid, sockaddr* src, sockaddr* dst_in, int /*timeout_ms*/) {
  if (!live_id(cid) || !dst_in || (dst_in->sa_family != AF_INET && dst_in->sa_family != AF_INET6)) return fail(EINVAL);
  // A copy: the caller may pass the id's own route.addr.dst_addr (librdmacm's rsockets do),
  // which is cleared below.
  sockaddr_storage dst_copy{};
  std::memcpy(&dst_copy, dst_in, sa_len(dst_in));
  sockaddr* dst = reinterpret_cast<sockaddr*>(&dst_copy);
  Id* id = to_id(cid);
  // Read before the request is handed over: from then on another thread may be told of its end and destroy id.
  const bool sync = id->chan->sync;
  if (src && (src->sa_family == dst->sa_family)) {
    if (int rc = bind_id(id, src)) return fail(rc);
  } else if (!id->bound) {
    sockaddr_storage any{};
    any.ss_family = dst->sa_family;
    if (int rc = bind_id(id, reinterpret_cast<sockaddr*>(&any))) return fail(rc);
  }
  // The source GID of the destination's family.
  uint8_t sgid = id->sgid_index;
  if (id->id.route.addr.src_addr.sa_family != dst->sa_family || is_any(&id->id.route.addr.src_addr)) {
    if (int rc = local_address(dst->sa_family, nullptr, sgid)) return fail(rc);
    id->sgid_index = sgid;
    const auto gids = cmb::gids();
    std::memcpy(id->id.route.addr.addr.ibaddr.sgid.raw, gids[sgid].data(), 16);
    // The source address the header and the application see: our address of that family.
    sockaddr_storage& s = id->id.route.addr.src_storage;
    const uint16_t port = id->port;
    std::memset(&s, 0, sizeof s);
    if (dst->sa_family == AF_INET) {
      auto* s4 = reinterpret_cast<sockaddr_in*>(&s);
      s4->sin_family = AF_INET;
      std::memcpy(&s4->sin_addr, gids[sgid].data() + 12, 4);
    } else {
      auto* s6 = reinterpret_cast<sockaddr_in6*>(&s);
      s6->sin6_family = AF_INET6;
      std::memcpy(&s6->sin6_addr, gids[sgid].data(), 16);
    }
    set_port(reinterpret_cast<sockaddr*>(&s), port);
  }
  std::memset(&id->id.route.addr.dst_storage, 0, sizeof id->id.route.addr.dst_storage);
  std::memcpy(&id->id.route.addr.dst_storage, dst, sa_len(dst));
  const proto::Ip6 dgid = gid_of(dst);
  std::memcpy(id->id.route.addr.addr.ibaddr.dgid.raw, dgid.data(), 16);
  // The peer's MAC: the port's ARP / neighbour discovery, bounded by the config's arp_timeout_ms.
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = 1;
  std::memcpy(ah.grh.dgid.raw, dgid.data(), 16);
  ah.grh.sgid_index = sgid;
  ah.grh.hop_limit = param::kDefaultHopLimit;
  engine::AddressVector av{};
  const int rc = cmb::resolve(ah, av);
  if (rc == 0) {
    id->peer = av;
    id->peer.sgid_index = sgid;
    id->addr_resolved = true;
  }
  post_event(id, rc ? RDMA_CM_EVENT_ADDR_ERROR : RDMA_CM_EVENT_ADDR_RESOLVED, rc ? -EHOSTUNREACH : 0);
  return sync ? sync_wait(id) : 0;
}

CMA_EXPORT int rdma_resolve_route(rdma_cm_id* cid, int /*timeout_ms*/) {
  if (!live_id(cid)) return fail(EINVAL);
  Id* id = to_id(cid);
  // Read before the request is handed over: from then on another thread may be told of its end and destroy id.
  const bool sync = id->chan->sync;
  if (!id->addr_resolved) return fail(EINVAL);
  // One path, computed here: on RoCE the route is the two GIDs (no subnet manager to ask).
  ibv_sa_path_rec& p = id->path;
  p = {};
  p.sgid = id->id.route.addr.addr.ibaddr.sgid;
  p.dgid = id->id.route.addr.addr.ibaddr.dgid;
  p.dlid = p.slid = htons(0xffff);
  p.hop_limit = id->peer.hop_limit;
  p.traffic_class = id->tos;
  p.reversible = htonl(1u << 31);
  p.numb_path = 1;
  p.pkey = htons(0xffff);
  p.mtu_selector = 2;
  p.mtu = lib().mtu;
  p.rate_selector = 2;
  p.rate = 0;
  p.packet_life_time_selector = 2;
  p.packet_life_time = 0;
  id->id.route.path_rec = &id->path;
  id->id.route.num_paths = 1;
  id->route_resolved = true;
  id->mtu = lib().mtu;
  post_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  return sync ? sync_wait(id) : 0;
}

CMA_EXPORT int rdma_listen(rdma_cm_id* cid, int /*backlog*/) {
  if (!live_id(cid)) return fail(EINVAL);
  Id* id = to_id(cid);
  if (!id->bound) {
    sockaddr_in any{};
    any.sin_family = AF_INET;
    if (int rc = bind_id(id, reinterpret_cast<sockaddr*>(&any))) return fail(rc);
  }
  if (id->listening) return 0;
  const uint64_t sid = pcm::service_id(uint16_t(id->id.ps), id->port);
  uint32_t cm = 0;
  cmb::lock();
  const int rc = cmb::listen(sid, &cm);
  if (!rc) {
    std::lock_guard<std::mutex> g(lib().mu);
    lib().by_cm[cm] = id;
    id->cm = cm;
    id->listening = true;
  }
  cmb::unlock();
  return result(rc);
}

CMA_EXPORT int rdma_connect(rdma_cm_id* cid, rdma_conn_param* param) {
  if (!live_id(cid)) return fail(EINVAL);
  Id* id = to_id(cid);
  // Read before the request is handed over: from then on another thread may be told of its end and destroy id.
  const bool sync = id->chan->sync;
  if (!id->route_resolved || id->cm) return fail(EINVAL);
  Lib& L = lib();
  const uint32_t qpn = id->id.qp ? id->id.qp->qp_num : param ? param->qp_num : 0;
  pcm::CmaHeader h;
  h.ip_version = id->id.route.addr.dst_addr.sa_family == AF_INET6 ? 6 : 4;
  h.src_port = id->port;
  h.src_addr = cma_addr(&id->id.route.addr.src_addr);
  h.dst_addr = cma_addr(&id->id.route.addr.dst_addr);
  std::span<const uint8_t> pd;
  if (param && param->private_data && param->private_data_len)
    pd = {static_cast<const uint8_t*>(param->private_data), param->private_data_len};
  uint32_t cm = 0;
  int rc;
  if (id->id.qp_type == IBV_QPT_UD) {
    ecm::SidrParams p;
    p.service_id = service_id(id);
    p.peer = id->peer;
    p.response_timeout = L.response_timeout;
    p.max_retries = L.max_retries;
    p.cma = &h;
    p.private_data = pd;
    cmb::lock();
    rc = cmb::sidr_request(p, &cm);
  } else {
    id->rq_psn = random_psn();
    id->responder_resources = param ? std::min(param->responder_resources, L.max_rd_atom) : L.max_rd_atom;
    id->initiator_depth = param ? std::min(param->initiator_depth, L.max_rd_atom) : L.max_rd_atom;
    id->retry_count = param ? std::min<uint8_t>(param->retry_count, 7) : 7;
    id->rnr_retry_count = param ? std::min<uint8_t>(param->rnr_retry_count, 7) : 7;
    ecm::ConnectParams p;
    p.service_id = service_id(id);
    p.peer = id->peer;
    p.peer.traffic_class = id->tos;
    p.qpn = qpn;
    p.starting_psn = id->rq_psn;
    p.responder_resources = id->responder_resources;
    p.initiator_depth = id->initiator_depth;
    p.retry_count = id->retry_count;
    p.rnr_retry_count = id->rnr_retry_count;
    p.path_mtu = engine::Mtu(int(id->mtu));
    p.local_ack_timeout = id->ack_timeout;
    p.response_timeout = p.local_response_timeout = L.response_timeout;
    p.max_retries = L.max_retries;
    p.uc = id->id.qp_type == IBV_QPT_UC;
    p.srq = id->id.qp && id->id.qp->srq;
    p.cma = &h;
    p.private_data = pd;
    cmb::lock();
    rc = cmb::connect(p, &cm);
  }
  if (!rc) {
    std::lock_guard<std::mutex> g(L.mu);
    L.by_cm[cm] = id;
    id->cm = cm;
    id->disconnected = false;  // (mu)
  }
  cmb::unlock();
  if (rc) return fail(rc);
  return sync ? sync_wait(id) : 0;
}

CMA_EXPORT int rdma_accept(rdma_cm_id* cid, rdma_conn_param* param) {
  if (!live_id(cid)) return fail(EINVAL);
  Id* id = to_id(cid);
  // Read before the request is handed over: from then on another thread may be told of its end and destroy id.
  const bool sync = id->chan->sync;
  if (!id->cm) return fail(EINVAL);
  Lib& L = lib();
  std::span<const uint8_t> pd;
  if (param && param->private_data && param->private_data_len)
    pd = {static_cast<const uint8_t*>(param->private_data), param->private_data_len};
  if (id->id.qp_type == IBV_QPT_UD) {
    const uint32_t qpn = id->id.qp ? id->id.qp->qp_num : param ? param->qp_num : 0;
    cmb::lock();
    const int rc = cmb::sidr_reply(id->cm, pcm::sidr::kSuccess, qpn, RDMA_UDP_QKEY, pd);
    cmb::unlock();
    return result(rc);
  }
  if (param) {
    id->responder_resources = std::min(param->responder_resources, L.max_rd_atom);
    id->initiator_depth = std::min(param->initiator_depth, L.max_rd_atom);
    id->rnr_retry_count = std::min<uint8_t>(param->rnr_retry_count, 7);
  }
  id->rq_psn = random_psn();
  if (id->id.qp) {
    int rc = qp_rtr(id);
    if (!rc) rc = qp_rts(id);
    if (rc) return fail(rc);
  }
  ecm::AcceptParams p;
  p.qpn = id->id.qp ? id->id.qp->qp_num : param ? param->qp_num : 0;
  p.starting_psn = id->rq_psn;
  p.responder_resources = id->responder_resources;
  p.initiator_depth = id->initiator_depth;
  p.rnr_retry_count = id->rnr_retry_count;
  p.srq = id->id.qp && id->id.qp->srq;
  p.private_data = pd;
  cmb::lock();
  const int rc = cmb::accept(id->cm, p);
  cmb::unlock();
  if (rc) return fail(rc);
  return sync ? sync_wait(id) : 0;
}

CMA_EXPORT int rdma_reject(rdma_cm_id* cid, const void* private_data, uint8_t len) {
  if (!live_id(cid)) return fail(EINVAL);
  Id* id = to_id(cid);
  if (!id->cm) return fail(EINVAL);
  std::span<const uint8_t> pd;
  if (private_data && len) pd = {static_cast<const uint8_t*>(private_data), len};
  cmb::lock();
  const int rc = id->id.qp_type == IBV_QPT_UD ? cmb::sidr_reply(id->cm, pcm::sidr::kReject, 0, 0, pd)
                                              : cmb::reject(id->cm, pcm::rej::kConsumerDefined, pd);
  cmb::unlock();
  return result(rc);
}

CMA_EXPORT int rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t len) {
  return rdma_reject(id, private_data, len);
}

CMA_EXPORT int rdma_establish(rdma_cm_id* cid) {
  if (!live_id(cid)) return fail(EINVAL);
  Id* id = to_id(cid);
  if (!id->cm) return fail(EINVAL);
  cmb::lock();
  const int rc = cmb::establish(id->cm);
  cmb::unlock();
  return result(rc);
}

CMA_EXPORT int rdma_disconnect(rdma_cm_id* cid) {
  if (!live_id(cid)) return fail(EINVAL);
  Id* id = to_id(cid);
  // Read before the request is handed over: from then on another thread may be told of its end and destroy id.
  const bool sync = id->chan->sync;
  qp_error(id);  // as librdmacm: the QP to ERR first (its WRs flush)
  if (!id->cm) return 0;
  bool sent_dreq = false;
  cmb::lock();
  ecm::Conn c;
  if (cmb::find(id->cm, c) && (c.state == ecm::State::Established || c.state == ecm::State::DreqRcvd)) {
    sent_dreq = c.state == ecm::State::Established;
    cmb::disconnect(id->cm);
  }
  cmb::unlock();
  // A synchronous id waits for its DISCONNECTED: our DREQ was sent from ESTABLISHED (under the
  // token, so no DREQ of the peer was taken first), and its answer, a crossing DREQ or its
  // timeout brings exactly one.
  return sync && sent_dreq ? sync_wait(id) : 0;
}

CMA_EXPORT int rdma_notify(rdma_cm_id* id, ibv_event_type /*event*/) {
  // IB_EVENT_COMM_EST: the engine already takes the first data packet as the RTU.
  return id ? 0 : fail(EINVAL);
}

CMA_EXPORT int rdma_migrate_id(rdma_cm_id* cid, rdma_event_channel* channel) {
  if (!live_id(cid)) return fail(EINVAL);
  Id* id = to_id(cid);
  Channel* to = channel ? to_ch(channel) : new_channel(true);
  if (!to) return -1;
  Channel* old = nullptr;
  {
    std::lock_guard<std::mutex> g(lib().mu);
    // Queued entries of the id move with it.
    unpost_if(id->chan, [&](Item& i) {
      if (i.id != id) return false;
      post(to, std::move(i));
      return true;
    });
    if (id->chan->sync) old = id->chan;
    id->chan = to;
    id->id.channel = &to->ch;
  }
  if (old) free_channel(old);
  return 0;
}

CMA_EXPORT int rdma_set_option(rdma_cm_id* cid, int level, int optname, void* optval, size_t optlen) {
  if (!live_id(cid) || !optval) return fail(EINVAL);
  Id* id = to_id(cid);
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        if (optlen != sizeof(uint8_t)) return fail(EINVAL);
        id->tos = *static_cast<uint8_t*>(optval);
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
      case RDMA_OPTION_ID_AFONLY:
        return optlen == sizeof(int) ? 0 : fail(EINVAL);
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(uint8_t)) return fail(EINVAL);
        id->ack_timeout = std::min<uint8_t>(*static_cast<uint8_t*>(optval), 31);
        return 0;
      default:
        return fail(ENOSYS);
    }
  }
  // RDMA_OPTION_IB_PATH: a path record from the application (no subnet manager here: refused).
  return fail(ENOSYS);
}

CMA_EXPORT __be16 rdma_get_src_port(rdma_cm_id* id) {
  return live_id(id) ? htons(port_of(&id->route.addr.src_addr)) : 0;
}

CMA_EXPORT __be16 rdma_get_dst_port(rdma_cm_id* id) {
  return live_id(id) ? htons(port_of(&id->route.addr.dst_addr)) : 0;
}

}  // extern "C"
