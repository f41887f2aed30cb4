// Event channels and events: the hook that takes the engine's CM events (token held) and queues
// them on the id's channel, and rdma_get_cm_event, which turns them into the application's
// rdma_cm events on its own thread (moving the QP where librdmacm does: the active side's QP to
// RTR and RTS when the REP arrives, then the RTU).
#include <algorithm>
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "verbs_shim/rdmacm/cma.hpp"

namespace uroce::rdmacm {

Lib& lib() {
  static Lib* l = new Lib;  // never destroyed: the poller's hook may run during exit
  return *l;
}

bool ready() {
  Lib& L = lib();
  {
    std::lock_guard<std::mutex> g(L.mu);
    if (L.tried) {
      if (!L.ok) errno = ENODEV;
      return L.ok;
    }
    L.tried = true;
  }
  // Only the first caller gets here; the others see `tried` (a program makes its first rdma_*
  // call from one thread).
  if (!cmb::start()) {
    std::fprintf(stderr, "uroce-rdmacm: no uroce device with a connection manager\n");
    errno = ENODEV;
    return false;
  }
  L.ctx = ibv_open_device(cmb::device());
  if (!L.ctx) return false;
  ibv_port_attr pa{};
  if (ibv_query_port(L.ctx, 1, &pa) == 0) L.mtu = pa.active_mtu;
  ibv_device_attr da{};
  if (ibv_query_device(L.ctx, &da) == 0) L.max_rd_atom = uint8_t(std::min(da.max_qp_rd_atom, 255));
  const engine::Device::Config dc = cmb::device_config();
  L.response_timeout = dc.cm_response_timeout;
  L.max_retries = dc.cm_max_retries;
  cmb::set_hook(hook);
  std::lock_guard<std::mutex> g(L.mu);
  L.ok = true;
  return true;
}

Channel* new_channel(bool sync) {
  int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (fd < 0) return nullptr;
  Channel* c = new Channel;
  c->ch.fd = fd;
  c->sync = sync;
  return c;
}

// A channel destroyed while another thread waits in rdma_get_cm_event on it (rping's CM thread
// when the main thread cleans up) is not freed: that thread stays blocked, as one blocked on a
// closed rdma_cm file descriptor does with the kernel's CM, instead of reading a closed fd (an
// error rping exits 255 on) or a freed channel. Nor is one freed at once that nobody reads:
// the last param::kRdmacmChannelGraveyard wait, so that a reader arriving just after the destroy
// blocks too; older ones are freed (unless a reader is inside: its leaving frees it).
void free_channel(Channel* c) {
  Channel* old = nullptr;
  {
    std::lock_guard<std::mutex> g(lib().mu);
    c->items.clear();
    c->destroyed = true;
    if (c->readers) return;
    lib().graveyard.push_back(c);
    if (lib().graveyard.size() <= param::kRdmacmChannelGraveyard) return;
    old = lib().graveyard.front();
    lib().graveyard.pop_front();
    if (old->readers) return;  // blocked in rdma_get_cm_event: freed when it leaves
  }
  close(old->ch.fd);
  delete old;
}

void post(Channel* c, Item&& it) {
  c->items.push_back(std::move(it));
  uint64_t one = 1;
  ssize_t k = write(c->ch.fd, &one, sizeof one);
  (void)k;
}

void unpost(Channel* c) {
  // The count, if a reader has not taken it yet (one that has finds the queue without the
  // entry and waits again). poll() first: the fd may be blocking.
  pollfd p{c->ch.fd, POLLIN, 0};
  uint64_t n = 0;
  if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) {
    const int fl = fcntl(c->ch.fd, F_GETFL);
    fcntl(c->ch.fd, F_SETFL, fl | O_NONBLOCK);
    ssize_t k = read(c->ch.fd, &n, sizeof n);
    (void)k;
    fcntl(c->ch.fd, F_SETFL, fl);
  }
}

void post_event(Id* id, rdma_cm_event_type t, int status) {
  Item it;
  it.id = id;
  it.type = t;
  it.status = status;
  std::lock_guard<std::mutex> g(lib().mu);
  post(id->chan, std::move(it));
}

namespace {

// An IP address from rdma_cm's header (IPv4: the last 4 of 16 bytes) into a sockaddr.
void set_sockaddr(sockaddr_storage& ss, uint8_t ip_version, const proto::cm::Gid& a, uint16_t port) {
  std::memset(&ss, 0, sizeof ss);
  if (ip_version == 6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    std::memcpy(&s6->sin6_addr, a.data(), 16);
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    std::memcpy(&s4->sin_addr, a.data() + 12, 4);
  }
}

// The new id of a REQ or SIDR_REQ for listener `l` (the hook, token and mu held): bound to the
// device, its addresses from rdma_cm's IP header, its numbers from the connection object.
Id* passive_id(Id* l, const ecm::Event& e) {
  ecm::Conn c;
  if (!cmb::find(e.id, c)) return nullptr;
  Channel* ch = l->chan->sync ? new_channel(true) : l->chan;
  if (!ch) return nullptr;
  Id* n = new_id(ch, l->id.context, l->id.ps);
  n->id.verbs = l->id.verbs;
  n->id.pd = lib().pd;  // the device's (made with the listener)
  n->id.port_num = 1;
  n->id.qp_type = l->id.qp_type;
  n->cm = e.id;
  n->bound = true;
  n->port = l->port;
  const uint8_t ipv = e.has_cma ? e.cma.ip_version : 4;
  set_sockaddr(n->id.route.addr.src_storage, ipv, e.cma.dst_addr, l->port);
  set_sockaddr(n->id.route.addr.dst_storage, ipv, e.cma.src_addr, e.cma.src_port);
  const auto gids = cmb::gids();
  for (size_t i = 0; i < gids.size(); ++i)
    if (gids[i] == c.local_gid) n->sgid_index = uint8_t(i);
  n->peer = c.peer;
  n->peer.sgid_index = n->sgid_index;
  std::memcpy(n->id.route.addr.addr.ibaddr.sgid.raw, c.local_gid.data(), 16);
  std::memcpy(n->id.route.addr.addr.ibaddr.dgid.raw, c.peer.dgid.data(), 16);
  n->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
  n->remote_qpn = e.remote_qpn;
  n->sq_psn = e.starting_psn;
  n->responder_resources = c.responder_resources;
  n->initiator_depth = c.initiator_depth;
  n->retry_count = c.retry_count;
  n->rnr_retry_count = c.rnr_retry_count;
  n->mtu = std::min(ibv_mtu(int(c.path_mtu)), lib().mtu);  // the engine refused a REQ above ours (REJ 26)
  n->addr_resolved = n->route_resolved = true;
  return n;
}

}  // namespace

// The shim's progress hook (token held): the engine's events onto their ids' channels.
void hook() {
  Lib& L = lib();
  ecm::Event e;
  while (cmb::poll_event(e)) {
    std::lock_guard<std::mutex> g(L.mu);
    const bool request = e.type == ecm::EventType::ReqReceived || e.type == ecm::EventType::SidrReqReceived;
    auto it = L.by_cm.find(request ? e.listen_id : e.id);
    if (it == L.by_cm.end()) {
      // The id was destroyed: a request for a listener that is gone is refused, anything else
      // is dropped (the engine finishes the connection on its own).
      if (request) {
        if (e.type == ecm::EventType::ReqReceived) cmb::reject(e.id, proto::cm::rej::kConsumerDefined, {});
        else cmb::sidr_reply(e.id, proto::cm::sidr::kReject, 0, 0, {});
      }
      continue;
    }
    Id* id = it->second;
    if (request) {
      Id* n = passive_id(id, e);
      if (!n) {
        cmb::reject(e.id, proto::cm::rej::kNoResources, {});
        continue;
      }
      L.by_cm[e.id] = n;
      id = n;
    }
    Item item;
    // Events that will give the application nothing are not queued: a wake-up of the channel's
    // fd without an event would leave rdma_get_cm_event reading again, perhaps after the
    // application has closed the channel (rping's CM thread polls it to the end).
    using T = ecm::EventType;
    if (e.type == T::MraReceived || (e.type == T::Timeout && e.timed_out == proto::cm::Attr::Dreq)) continue;
    if (e.type == T::DreqReceived) {
      // The peer is gone or going: our QP to the error state now, not when the application reads
      // the event, so that a program blocked on its CQ (ucmatose waiting for receives that will
      // never come, perftest's writers) sees its work requests flushed instead of waiting for ever.
      // By the connection's QP number: the id's qp pointer is the application's thread's to change.
      if (ecm::Conn c; cmb::find(e.id, c) && c.local_qpn) cmb::qp_to_error(c.local_qpn);
    }
    if (e.type == T::Disconnected || e.type == T::DreqReceived) {
      // DISCONNECTED once per connection; a DREQ after it is still answered (its entry's actions).
      if (id->disconnected && e.type == T::Disconnected) continue;
      item.report = !id->disconnected;
      id->disconnected = true;
    }
    item.id = id;
    item.from_engine = true;
    item.ev = std::move(e);
    // A request is reported on the listener's channel; the new id keeps its own afterwards.
    post(request ? L.by_cm[item.ev.listen_id]->chan : id->chan, std::move(item));
    e = ecm::Event{};
  }
}

Event* make_event(Id* id, rdma_cm_event_type t, int status) {
  Event* e = new Event{};
  e->ev.id = &id->id;
  e->ev.event = t;
  e->ev.status = status;
  e->id = id;
  std::lock_guard<std::mutex> g(lib().mu);
  ++id->unacked;
  return e;
}

namespace {

void set_private_data(Event* e, const std::vector<uint8_t>& pd, size_t skip, bool ud) {
  if (pd.size() > skip) e->pd.assign(pd.begin() + long(skip), pd.end());
  auto& p = ud ? e->ev.param.ud.private_data : e->ev.param.conn.private_data;
  auto& n = ud ? e->ev.param.ud.private_data_len : e->ev.param.conn.private_data_len;
  p = e->pd.empty() ? nullptr : e->pd.data();
  n = uint8_t(std::min<size_t>(e->pd.size(), 255));
}

void fill_conn(Event* e, const Id* id) {
  rdma_conn_param& c = e->ev.param.conn;
  c.responder_resources = id->responder_resources;
  c.initiator_depth = id->initiator_depth;
  c.retry_count = id->retry_count;
  c.rnr_retry_count = id->rnr_retry_count;
  c.qp_num = id->remote_qpn;
}

void fill_ud(Event* e, const Id* id, uint32_t qpn, uint32_t qkey) {
  rdma_ud_param& u = e->ev.param.ud;
  u.qp_num = qpn;
  u.qkey = qkey;
  u.ah_attr.is_global = 1;
  u.ah_attr.port_num = 1;
  std::memcpy(u.ah_attr.grh.dgid.raw, id->peer.dgid.data(), 16);
  u.ah_attr.grh.sgid_index = id->sgid_index;
  u.ah_attr.grh.hop_limit = id->peer.hop_limit;
  u.ah_attr.grh.traffic_class = id->tos;
}

// The active side's REP: the QP to RTR and RTS, then the RTU (librdmacm's
// ucma_process_conn_resp); without a QP the application calls rdma_establish.
Event* on_rep(Id* id, const ecm::Event& ev) {
  ecm::Conn c;
  cmb::lock();
  const bool have = cmb::find(id->cm, c);
  cmb::unlock();
  id->remote_qpn = ev.remote_qpn;
  id->sq_psn = ev.starting_psn;
  if (have) {
    // The REP's credits, as the connection object holds them for our side.
    id->responder_resources = std::min(id->responder_resources, c.responder_resources);
    id->initiator_depth = std::min(id->initiator_depth, c.initiator_depth);
  }
  if (!id->id.qp) {
    Event* e = make_event(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
    fill_conn(e, id);
    set_private_data(e, ev.private_data, 0, false);
    return e;
  }
  int rc = qp_rtr(id);
  if (!rc) rc = qp_rts(id);
  cmb::lock();
  if (!rc) rc = cmb::establish(id->cm);
  else cmb::reject(id->cm, proto::cm::rej::kConsumerDefined, {});
  cmb::unlock();
  if (rc) {
    qp_error(id);
    return make_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -rc);
  }
  Event* e = make_event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
  fill_conn(e, id);
  set_private_data(e, ev.private_data, 0, false);
  return e;
}

// The application's event for an engine event, or nullptr (nothing to report).
Event* from_engine(Id* id, const ecm::Event& ev, bool report) {
  using T = ecm::EventType;
  const bool ud = id->id.qp_type == IBV_QPT_UD;
  switch (ev.type) {
    case T::ReqReceived: {
      Event* e = make_event(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
      std::lock_guard<std::mutex> g(lib().mu);
      e->ev.listen_id = nullptr;
      if (auto it = lib().by_cm.find(ev.listen_id); it != lib().by_cm.end()) e->ev.listen_id = &it->second->id;
      fill_conn(e, id);
      set_private_data(e, ev.private_data, ev.has_cma ? proto::cm::CmaHeaderView<uint8_t>::kSize : 0, false);
      return e;
    }
    case T::SidrReqReceived: {
      Event* e = make_event(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
      std::lock_guard<std::mutex> g(lib().mu);
      if (auto it = lib().by_cm.find(ev.listen_id); it != lib().by_cm.end()) e->ev.listen_id = &it->second->id;
      fill_ud(e, id, 0, 0);
      set_private_data(e, ev.private_data, ev.has_cma ? proto::cm::CmaHeaderView<uint8_t>::kSize : 0, true);
      return e;
    }
    case T::RepReceived:
      return on_rep(id, ev);
    case T::Established:
      return make_event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
    case T::RejReceived: {
      qp_error(id);
      Event* e = make_event(id, RDMA_CM_EVENT_REJECTED, ev.reason);
      set_private_data(e, ev.private_data, 0, ud);
      return e;
    }
    case T::MraReceived:  // (not queued by the hook)
      return nullptr;
    case T::DreqReceived: {
      // The peer disconnects: our QP to ERR and the DREP at once (the kernel's CM answers when
      // the application calls rdma_disconnect or destroys the id; answering now keeps a program
      // that does neither from holding the peer for all its DREQ retries).
      qp_error(id);
      cmb::lock();
      cmb::disconnect(id->cm);
      cmb::unlock();
      return report ? make_event(id, RDMA_CM_EVENT_DISCONNECTED, 0) : nullptr;
    }
    case T::Disconnected:  // the hook queued it only if it is the connection's first
      return make_event(id, RDMA_CM_EVENT_DISCONNECTED, 0);
    case T::TimewaitExit:
      return make_event(id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
    case T::SidrRepReceived: {
      if (ev.status != 0) return make_event(id, RDMA_CM_EVENT_UNREACHABLE, -ECONNREFUSED);
      id->remote_qpn = ev.remote_qpn;
      id->remote_qkey = ev.qkey;
      Event* e = make_event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
      fill_ud(e, id, ev.remote_qpn, ev.qkey);
      set_private_data(e, ev.private_data, 0, true);
      return e;
    }
    case T::Timeout:
      if (ev.timed_out == proto::cm::Attr::Dreq) return nullptr;  // DISCONNECTED follows
      qp_error(id);
      return make_event(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
  }
  return nullptr;
}

}  // namespace

int sync_wait(Id* id) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(&id->chan->ch, &ev)) return -1;
  if (id->id.event) rdma_ack_cm_event(id->id.event);
  id->id.event = ev;
  if (ev->status) {
    if (ev->event == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED);
    return fail(ev->status < 0 ? -ev->status : ev->status);
  }
  return 0;
}

}  // namespace uroce::rdmacm

using namespace uroce::rdmacm;

extern "C" {

CMA_EXPORT rdma_event_channel* rdma_create_event_channel(void) {
  if (!ready()) return nullptr;
  Channel* c = new_channel(false);
  return c ? &c->ch : nullptr;
}

CMA_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (!channel) return;
  free_channel(to_ch(channel));
}

CMA_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (!channel || !event) return fail(EINVAL);
  Channel* c = to_ch(channel);
  {
    std::lock_guard<std::mutex> g(lib().mu);
    ++c->readers;
  }
  // Leaving: the last reader of a channel destroyed meanwhile frees it.
  auto leave = [c](int rc) {
    int err = errno;
    bool last;
    {
      std::lock_guard<std::mutex> g(lib().mu);
      last = --c->readers == 0 && c->destroyed &&
             std::find(lib().graveyard.begin(), lib().graveyard.end(), c) == lib().graveyard.end();
    }
    if (last) {
      close(c->ch.fd);
      delete c;
    }
    errno = err;
    return rc;
  };
  for (;;) {
    uint64_t n = 0;
    if (read(c->ch.fd, &n, sizeof n) != sizeof n) {
      if (errno == EINTR) continue;
      return leave(-1);  // EAGAIN on a non-blocking fd with nothing queued
    }
    Item it;
    {
      std::lock_guard<std::mutex> g(lib().mu);
      if (c->items.empty()) continue;  // destroyed: nothing more comes, the read blocks
      it = std::move(c->items.front());
      c->items.pop_front();
      // Held while its event is made (counted as one not acknowledged): rdma_destroy_id waits
      // until its id has none, so it cannot free the id between this pop and make_event's count.
      ++it.id->unacked;
    }
    Event* e = it.from_engine ? from_engine(it.id, it.ev, it.report)
               : it.mc        ? on_join(it.id, it.mc)
                              : make_event(it.id, it.type, it.status);
    {
      std::lock_guard<std::mutex> g(lib().mu);
      --it.id->unacked;  // the event, if one was made, counts for itself
    }
    lib().acked.notify_all();
    if (e) {
      *event = &e->ev;
      return leave(0);
    }
  }
}

CMA_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  if (!event) return fail(EINVAL);
  Event* e = reinterpret_cast<Event*>(event);
  {
    std::lock_guard<std::mutex> g(lib().mu);
    --e->id->unacked;
  }
  lib().acked.notify_all();
  delete e;
  return 0;
}

}  // extern "C"

// Loaded: the shim's runtime will start with the connection manager on, whoever opens the
// device first (a program may call ibv_open_device before its first rdma_* call).
__attribute__((constructor)) static void uroce_rdmacm_init() { cmb::want_cm(); }
