// liburoce-rdmacm: the librdmacm API (rdma_*) on uroce's own connection manager (engine/cm.hpp),
// reached through the verbs shim's door (verbs_shim/cm_bridge.hpp) in the same process. What
// the files of verbs_shim/rdmacm/ share: the library's objects and its one lock.
//
//   channel.cpp   event channels, the engine's events turned into rdma_cm events, get/ack
//   id.cpp        ids, addresses and ports, listen/connect/accept/reject/disconnect, options
//   qp.cpp        rdma_create_qp (and the CQs it may make), the QP's INIT/RTR/RTS moves,
//                 rdma_init_qp_attr, SRQs
//   mcast.cpp     rdma_join_multicast(_ex), rdma_leave_multicast: UD groups, the JOIN event
//   ep.cpp        rdma_getaddrinfo, rdma_create_ep / rdma_get_request (synchronous ids),
//                 rdma_get_devices, rdma_event_str, what is refused
//
// Threads and locks: the engine's events are taken by a hook that runs inside the shim's
// progress step (with the shim's ownership token, usually on its poller thread while the
// application blocks in rdma_get_cm_event); it queues them on the id's channel and counts them
// on the channel's eventfd. rdma_get_cm_event turns them into rdma_cm events on the
// application's thread, where moving a QP (which takes the token) is allowed. The library's
// lock `mu` is taken after the token, never before: code holding `mu` makes no verbs or bridge
// call.
#pragma once
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "verbs_shim/cm_bridge.hpp"
#include "verbs_shim/param.hpp"

#define CMA_EXPORT __attribute__((visibility("default")))

namespace uroce::rdmacm {

namespace ecm = engine::cm;
namespace cmb = shim::cmb;

struct Id;

// A multicast group an id joined (rdma_join_multicast; mcast.cpp).
struct Mc {
  sockaddr_storage addr{};  // as the application named it (rdma_leave_multicast finds it by this)
  proto::Ip6 mgid{};        // the group's GID
  void* context = nullptr;  // the JOIN event's private_data, as librdmacm hands it back
  bool send_only = false;   // RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: the QP is not attached
  bool attached = false;    // the JOIN event attached the id's QP (rdma_leave_multicast detaches it)
};

// One entry of a channel's queue (one count on its eventfd): an engine event to be turned into
// the application's event, or one the library made itself (ADDR_RESOLVED, ...).
struct Item {
  Id* id = nullptr;
  bool from_engine = false;
  ecm::Event ev;                      // from_engine
  rdma_cm_event_type type{};          // !from_engine
  int status = 0;                     // !from_engine
  bool report = true;                 // DreqReceived: also report DISCONNECTED (the first of the connection)
  std::shared_ptr<Mc> mc;             // MULTICAST_JOIN: the group joined
};

struct Channel {
  rdma_event_channel ch;  // first: the application's pointer is this
  std::deque<Item> items; // (mu)
  bool sync = false;      // the library's own, for a synchronous id (rdma_create_ep, migrate to NULL)
  int readers = 0;        // (mu) threads inside rdma_get_cm_event on it
  bool destroyed = false; // (mu) destroyed while a reader was inside: it stays, the reader blocks
};

// An event handed to the application, freed by rdma_ack_cm_event.
struct Event {
  rdma_cm_event ev;  // first
  Id* id = nullptr;  // its unacked count
  std::vector<uint8_t> pd;
};

struct Id {
  rdma_cm_id id;       // first: the application's pointer is this
  Channel* chan = nullptr;
  uint32_t cm = 0;     // the engine's communication ID of the connection or listener (0: none)
  bool bound = false, listening = false, addr_resolved = false, route_resolved = false;
  uint16_t port = 0;   // host order (the bound port)
  uint8_t sgid_index = 1;
  engine::AddressVector peer{};  // the peer's address (GID, MAC) after resolve_addr / a REQ
  // The connection's numbers, from the REQ or the REP: the peer's QP, the PSN our QP sends from,
  // the PSN the peer's QP sends from (which we announced), RDMA READ credits, retries, MTU.
  uint32_t remote_qpn = 0, sq_psn = 0, rq_psn = 0;
  uint8_t responder_resources = 0, initiator_depth = 0, retry_count = 7, rnr_retry_count = 7;
  ibv_mtu mtu = IBV_MTU_1024;
  uint32_t remote_qkey = RDMA_UDP_QKEY;  // UD: the Q_Key of the peer's QP (SIDR_REP)
  uint8_t tos = 0, ack_timeout = param::kRdmacmAckTimeout;
  bool own_cqs = false;                 // rdma_create_qp made the CQs and channels
  bool disconnected = false;            // DISCONNECTED queued (once per connection; mu, set by the hook)
  bool connect_reported = false;
  // rdma_create_ep on a passive id: the QP each rdma_get_request makes.
  bool ep_attr_set = false;
  ibv_qp_init_attr ep_attr{};
  ibv_pd* ep_pd = nullptr;
  uint32_t unacked = 0;  // events handed out and not acknowledged (mu)
  ibv_sa_path_rec path{};  // route.path_rec after rdma_resolve_route (one path, computed locally)
  std::vector<std::shared_ptr<Mc>> mcs;  // groups joined (mu)
};

struct Lib {
  std::mutex mu;
  std::condition_variable acked;                // an event was acknowledged (mu)
  std::unordered_map<uint32_t, Id*> by_cm;       // engine ID -> id (mu)
  std::map<uint32_t, Id*> ports;                 // (port space << 16 | port) -> bound id (mu)
  std::deque<Channel*> graveyard;                // destroyed channels not freed yet, oldest first (mu)
  bool tried = false, ok = false;
  ibv_context* ctx = nullptr;  // the uroce device, opened once
  ibv_pd* pd = nullptr;        // the device's PD: each id's, and rdma_create_qp's default (default_pd)
  ibv_mtu mtu = IBV_MTU_1024;  // the port's active MTU
  uint8_t max_rd_atom = 16;
  // What our REQs and SIDR_REQs announce (config keys cm_response_timeout, cm_max_retries).
  uint8_t response_timeout = 0, max_retries = 0;
};
Lib& lib();

// The uroce device, once: the shim's runtime with the CM on, the context, the hook. False with
// errno ENODEV when there is none.
bool ready();
inline Id* to_id(rdma_cm_id* i) { return reinterpret_cast<Id*>(i); }
// Every id the library made and has not destroyed (a set of its own, its lock taken alone): a
// call with an id the application has destroyed fails with EINVAL instead of reading freed
// memory (perftest 4.5's client retries a REJ with the ids it has just destroyed). id.cpp.
void id_born(Id* i);
bool id_take(Id* i);                   // false: not a live id (then nothing is done)
Id* live_id(const rdma_cm_id* i);      // nullptr: null, not ours, or destroyed
inline Channel* to_ch(rdma_event_channel* c) { return reinterpret_cast<Channel*>(c); }
inline int fail(int e) {
  errno = e;
  return -1;
}

// channel.cpp
Channel* new_channel(bool sync);
void free_channel(Channel* c);
void post(Channel* c, Item&& it);       // mu held: queue and count on the fd
void unpost(Channel* c);                // mu held: one entry was taken off the queue: one count less
// mu held: the queued entries `drop(item)` names taken off the channel's queue, with their counts
// (drop may move the entry elsewhere first).
template <typename F>
void unpost_if(Channel* c, F drop) {
  for (auto it = c->items.begin(); it != c->items.end();) {
    if (drop(*it)) {
      it = c->items.erase(it);
      unpost(c);
    } else {
      ++it;
    }
  }
}
void post_event(Id* id, rdma_cm_event_type t, int status);  // takes mu
void hook();                            // the shim's progress hook (token held)
Event* make_event(Id* id, rdma_cm_event_type t, int status);  // an application event of the id (mu not held)
// A synchronous id's next event (rdma_create_ep, migrate to NULL): kept in id->event; -1 with
// errno when it reports an error (ECONNREFUSED for a REJECTED).
int sync_wait(Id* id);

// id.cpp
Id* new_id(Channel* ch, void* context, rdma_port_space ps);
ibv_pd* default_pd(ibv_context* ctx);  // the device's PD, made on first use (qp.cpp)
ibv_qp_type qp_type_of(rdma_port_space ps);
int local_address(int family, const void* addr, uint8_t& sgid_index);  // 0 or EADDRNOTAVAIL
bool is_any(const sockaddr* sa);        // the wildcard address of its family
size_t sa_len(const sockaddr* sa);      // sizeof its sockaddr_in or sockaddr_in6
proto::Ip6 gid_of(const sockaddr* sa);  // its GID (IPv4-mapped for IPv4)
uint64_t service_id(const Id* id);  // the peer's: port space and destination port
uint32_t random_psn();

// mcast.cpp: a MULTICAST_JOIN queued by rdma_join_multicast, turned into the application's event
// (the id's QP attached to the group, or MULTICAST_ERROR if that fails).
Event* on_join(Id* id, const std::shared_ptr<Mc>& mc);

// qp.cpp: the QP's moves with the id's numbers (0 or an errno).
int qp_init(Id* id);
int qp_rtr(Id* id);
int qp_rts(Id* id);
void qp_error(Id* id);
int fill_qp_attr(Id* id, ibv_qp_attr* a, int* mask);

}  // namespace uroce::rdmacm
