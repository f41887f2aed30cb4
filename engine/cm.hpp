// The IB connection manager (CM) of one device: it owns QP 1 (the GSI), speaks the CM MADs of
// proto/cm.hpp as UD SEND_ONLY datagrams to the peer's QP 1, and keeps one connection object per
// communication ID with an explicit state (IBA vol. 1 chapter 12; the Linux kernel's cm.c uses
// the same names). The rdma_cm library (liburoce-rdmacm, verbs_shim/rdmacm/) drives it through
// the calls below and polls its events; the CM itself never touches a data QP: it carries QP
// numbers and PSNs between the two sides, and the library moves its QPs through INIT, RTR and
// RTS. The files: cm.cpp (bookkeeping, sending, timers), cm_calls.cpp (the library's calls),
// cm_receive.cpp (the MADs received), cm_util.hpp (helpers they share).
//
//   active side                                   passive side
//   connect() ---- REQ ---------------------->    [listen()] REQ_RCVD, event ReqReceived
//   REQ_SENT  <--- (MRA: "answer comes later") -  (a duplicate REQ before accept())
//   REP_RCVD  <--- REP ------------------------   accept(): REP_SENT
//   event RepReceived; establish(): RTU --------> ESTABLISHED, event Established
//   ESTABLISHED                                   (or the first data packet on the QP: qp_data())
//   disconnect(): DREQ -----------------------> DREQ_RCVD, event DreqReceived
//   DREQ_SENT                                     disconnect(): DREP, TIMEWAIT
//   TIMEWAIT  <--- DREP ------------------------
//   ... TimeWait later: event TimewaitExit, the ID is freed (its QP number may be reused)
//
// Every MAD that expects an answer (REQ, REP, DREQ, SIDR_REQ) is resent on a timer (the
// peer's announced response timeout, 4.096 us * 2^t) up to max_cm_retries times; then the
// connection gives up (a REJ "timeout" for REQ and REP) and reports Timeout. A duplicate REQ
// is answered with the REP again (or an MRA while the application has not accepted yet), a
// duplicate REP with the RTU again, a duplicate DREQ in TimeWait with the DREP again.
//
// Single-threaded, like the rest of the engine: Device::progress() delivers frames and runs
// the timers. Unlike the data path it allocates (connection map, event queue): it is the
// control path, bounded by cm_max_conns and kCmMaxEvents.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/param.hpp"
#include "engine/qp.hpp"
#include "engine/resources.hpp"
#include "engine/types.hpp"
#include "proto/cm.hpp"
#include "proto/packet.hpp"

namespace uroce::engine {
class Device;
}

namespace uroce::engine::cm {

namespace pcm = proto::cm;

// The state of one connection object (IBA 12.9; the kernel's enum ib_cm_state).
enum class State : uint8_t {
  Idle,          // created, nothing sent (never seen in a poll: a transient)
  Listen,        // a listener: takes REQs / SIDR_REQs for its service ID
  ReqSent,       // active: REQ sent, waiting for REP (or MRA, REJ)
  ReqRcvd,       // passive: REQ received and reported; the application decides
  MraReqSent,    // passive: a duplicate REQ came before accept(): an MRA went out
  MraReqRcvd,    // active: the peer MRAed our REQ: waiting longer, no more resends
  RepSent,       // passive: REP sent, waiting for RTU (or the first data packet)
  RepRcvd,       // active: REP received and reported; establish() sends the RTU
  MraRepSent,    // active: MRA sent for the REP (not sent by this CM; named for completeness)
  MraRepRcvd,    // passive: the peer MRAed our REP: waiting longer
  Established,
  DreqSent,      // DREQ sent, waiting for DREP
  DreqRcvd,      // DREQ received and reported; disconnect() sends the DREP
  TimeWait,      // finished: ID and QP number stay reserved until the TimeWait timer ends
  SidrReqSent,   // UD: SIDR_REQ sent, waiting for SIDR_REP
  SidrReqRcvd,   // UD: SIDR_REQ received and reported; sidr_reply() answers
};
std::string_view state_name(State s);

enum class EventType : uint8_t {
  ReqReceived,     // passive: a REQ for a listener (new id `id`, listener `listen_id`)
  RepReceived,     // active: the REP (remote QPN and PSN, private data)
  Established,     // passive: RTU received (or the first data packet on the QP)
  RejReceived,     // either side: the peer rejected (reason, private data)
  MraReceived,     // the peer will answer later (informational; the timer was stretched)
  DreqReceived,    // the peer disconnects (call disconnect() to answer with the DREP)
  Disconnected,    // our DREQ was answered (DREP) or timed out
  TimewaitExit,    // an id that was established has left TimeWait and is freed
  SidrReqReceived, // passive UD: a SIDR_REQ for a listener (new id `id`)
  SidrRepReceived, // active UD: the SIDR_REP (status, QPN, Q_Key); the id is freed
  Timeout,         // no answer to `timed_out` (REQ, REP, DREQ, SIDR_REQ) after all retries
};
std::string_view event_name(EventType t);

struct Event {
  EventType type = EventType::ReqReceived;
  uint32_t id = 0;          // the connection's local communication ID
  uint32_t listen_id = 0;   // ReqReceived, SidrReqReceived: the listener that took it
  uint64_t service_id = 0;
  uint32_t remote_qpn = 0;  // REQ / REP: the peer's QP; SIDR_REP: the QPN to send to
  // REQ / REP: the starting PSN the peer announced, which is the PSN *our* QP sends from
  // (Conn::local_psn; the library sets it as the QP's sq_psn).
  uint32_t starting_psn = 0;
  uint32_t qkey = 0;        // SIDR_REP
  uint16_t reason = 0;      // RejReceived: the REJ reason
  uint8_t status = 0;       // SidrRepReceived: the SIDR status
  pcm::Attr timed_out = pcm::Attr::Req;  // Timeout: the message that went unanswered
  bool has_cma = false;     // ReqReceived / SidrReqReceived: rdma_cm's IP header parsed
  pcm::CmaHeader cma{};
  std::vector<uint8_t> private_data;  // the message's whole private-data field
};

// How the CM reaches a peer's QP 1: the peer's GID (IP) and MAC (resolved by the caller: the
// port answers ARP / ND), and which of our GIDs the MADs come from.
using Peer = AddressVector;

struct ConnectParams {
  uint64_t service_id = 0;
  Peer peer{};
  uint32_t qpn = 0;                 // our QP
  uint32_t starting_psn = 0;        // the PSN the *peer* will send from (what our QP expects)
  uint8_t responder_resources = 0;  // RDMA READs / atomics we accept in flight
  uint8_t initiator_depth = 0;      // RDMA READs / atomics we issue in flight
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  Mtu path_mtu = Mtu::M1024;
  uint8_t local_ack_timeout = 17;   // into the REQ's primary path
  bool uc = false;                  // transport service type UC (else RC)
  bool srq = false;
  // The REQ's remote CM response timeout: how long we wait for the peer's answers (REP, DREP).
  uint8_t response_timeout = param::kCmResponseTimeout;
  // The REQ's local CM response timeout: how long we may take to answer (the peer waits that
  // long for our RTU and DREP before resending).
  uint8_t local_response_timeout = param::kCmResponseTimeout;
  uint8_t max_retries = param::kCmMaxRetries;
  const pcm::CmaHeader* cma = nullptr;  // rdma_cm's IP header, first 36 bytes of the private data
  std::span<const uint8_t> private_data{};  // up to 92 bytes (56 after the IP header)
};

struct AcceptParams {
  uint32_t qpn = 0;                 // our QP
  uint32_t starting_psn = 0;        // the PSN the peer will send from
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t rnr_retry_count = 7;
  uint8_t target_ack_delay = 15;
  bool srq = false;
  std::span<const uint8_t> private_data{};  // up to 196 bytes
};

struct SidrParams {
  uint64_t service_id = 0;
  Peer peer{};
  uint8_t response_timeout = param::kCmResponseTimeout;
  uint8_t max_retries = param::kCmMaxRetries;
  const pcm::CmaHeader* cma = nullptr;
  std::span<const uint8_t> private_data{};  // up to 216 bytes (180 after the IP header)
};

// One connection (or listener, or SIDR exchange): what the kernel calls a cm_id.
struct Conn {
  uint32_t local_id = 0;    // our communication ID (the handle)
  uint32_t remote_id = 0;   // the peer's, from its REQ or REP
  State state = State::Idle;
  bool active = false;      // we sent the REQ / SIDR_REQ
  bool was_established = false;
  uint64_t service_id = 0;
  uint64_t tid = 0;         // the transaction ID of the exchange in progress
  // Addresses: the peer's QP 1 (its GID and MAC), our GID the MADs come from.
  Peer peer{};
  proto::Ip6 local_gid{};
  // Both QPs and both starting PSNs. local_psn: the PSN *our* QP sends from (the peer's REQ or
  // REP announced it); remote_psn: the PSN the peer's QP sends from (what we announced).
  uint32_t local_qpn = 0, remote_qpn = 0;
  uint32_t local_psn = 0, remote_psn = 0;
  uint8_t responder_resources = 0, initiator_depth = 0;
  uint8_t retry_count = 0, rnr_retry_count = 0;
  Mtu path_mtu = Mtu::M1024;
  // Timer: the MAD in `last` is resent at timer_ns while retries_left > 0.
  uint64_t timeout_ns = 0;  // one wait for the peer's answer
  uint64_t timer_ns = 0;    // 0: no timer
  uint8_t max_retries = 0;
  uint8_t retries_left = 0;
  std::array<uint8_t, pcm::kMadSize> last{};  // the last MAD sent (resent on the timer or a duplicate)
  bool have_last = false;
  bool indexed = false;     // in the peer indexes (Manager::index_peer) under these two:
  uint32_t idx_remote_id = 0, idx_remote_qpn = 0;
  std::string describe() const;
};

// What the CM dropped or did, in the engine's counters style ("name=value").
struct CmCounters {
  uint64_t mads_rcvd = 0, mads_sent = 0, resent = 0;
  uint64_t dropped_bad_keys = 0;      // not UD SEND_ONLY, wrong P_Key or Q_Key
  uint64_t dropped_bad_mad = 0;       // cm::parse() refused it (length, class, attribute...)
  uint64_t dropped_unknown_id = 0;    // names a communication ID we do not have
  uint64_t dropped_wrong_state = 0;   // a message the connection's state does not take
  uint64_t dropped_duplicate = 0;     // a duplicate that needs no answer
  uint64_t dropped_no_tx = 0;         // no transmit buffer: the timer resends
  uint64_t dropped_events = 0;        // the event queue was full
  uint64_t rej_no_listener = 0;       // REJ "invalid service ID" sent
  uint64_t rej_stale = 0;             // REJ "stale connection" sent
  uint64_t rej_no_resources = 0;      // REJ "no resources" (cm_max_conns)
  uint64_t rej_bad_cma = 0;           // REJ for a REQ with a bad rdma_cm IP header
  uint64_t rej_mtu = 0;               // REJ "invalid path MTU": the REQ's is above the port's
  uint64_t timeouts = 0;              // exchanges given up after all retries
  std::string text() const;
};

class Manager {
 public:
  Manager(Device& dev, uint64_t seed);

  // ---- The library's calls. An id is the connection's local communication ID. ----
  // 0 and the listener's id in *id, or EADDRINUSE (someone listens on it), ENOMEM.
  int listen(uint64_t service_id, uint32_t* id);
  // Told when a service ID gets its listener (true) and loses it (false): the uroce service
  // hands a REQ or SIDR_REQ to the process that listens on its service ID.
  std::function<void(uint64_t service_id, bool listening)> on_listen;
  // Told when connection `id` starts to owe its peer a goodbye (true) and stops (false): from
  // our REP on (the peer is established once the REP arrives) or from our RTU, until our DREQ is
  // answered (a DREQ sent may still be in a ring when the process dies: DREQ_SENT owes it too),
  // we answer theirs, or the connection is rejected, times out or is freed. owes_goodbye().
  std::function<void(uint32_t id, bool owed)> on_goodbye_owed;
  static bool owes_goodbye(State s) {
    return s == State::RepSent || s == State::MraRepRcvd || s == State::Established || s == State::DreqSent;
  }
  // The frame of a DREQ for connection `id` while it owes a goodbye (empty otherwise): what the
  // uroce service sends for a process that dies with the connection up, as the kernel's CM does
  // when a process's cm_ids are destroyed at its exit.
  std::vector<uint8_t> goodbye_frame(uint32_t id);
  // Sends the REQ: 0 and the new id, or EINVAL (private data too long, no such GID), EBUSY
  // (the QP number is still in TimeWait), ENOMEM.
  int connect(const ConnectParams& p, uint32_t* id);
  int accept(uint32_t id, const AcceptParams& p);   // REP; EINVAL unless REQ_RCVD / MRA_REQ_SENT
  // REJ with `reason` (28, consumer defined, for rdma_reject) and private data (<= 148 bytes);
  // passive before accept() or active after the REP. The id is freed.
  int reject(uint32_t id, uint16_t reason, std::span<const uint8_t> private_data = {});
  // RTU (active, after RepReceived): the connection is ESTABLISHED.
  int establish(uint32_t id, std::span<const uint8_t> private_data = {});
  // ESTABLISHED: DREQ (timer, retries). DREQ_RCVD: the DREP, then TimeWait.
  int disconnect(uint32_t id, std::span<const uint8_t> private_data = {});
  int sidr_request(const SidrParams& p, uint32_t* id);
  // Answers a SidrReqReceived (status 0 with the QPN and Q_Key to use); the id is freed.
  int sidr_reply(uint32_t id, uint8_t status, uint32_t qpn, uint32_t qkey, std::span<const uint8_t> private_data = {});
  // Forgets an id at once (a listener, or an id the library destroys); no MAD is sent.
  int destroy(uint32_t id);
  // The process is leaving (the verbs shim's exit), as the kernel ends the ids of a process that
  // closes its rdma_cm file: an ESTABLISHED connection gets a DREQ, a DREQ received its DREP, a
  // request not answered yet (REQ or SIDR_REQ received, REP received) a REJ. Returns
  // disconnecting(): the caller may drive the engine a moment longer for the DREPs.
  size_t shutdown();
  size_t disconnecting() const;  // connections in DREQ_SENT (waiting for the peer's DREP)
  // The implicit RTU: the first packet arrived on our QP `qpn` while its connection waits for
  // the RTU (REP_SENT, MRA_REP_RCVD): it is ESTABLISHED. The engine calls it from rx_frame.
  void qp_data(uint32_t qpn);
  bool awaiting_rtu() const { return awaiting_rtu_ != 0; }

  bool poll_event(Event& e);
  const Conn* find(uint32_t id) const;
  size_t conns() const { return conns_.size(); }
  const CmCounters& counters() const { return ctr_; }
  const Qp& gsi() const { return gsi_; }

  // ---- The engine's ----
  void on_frame(const proto::Packet& p);  // a frame to QP 1 (rx_frame checked it is ours)
  bool progress();                        // timers; true if anything was sent or changed

 private:
  Conn* get(uint32_t id);
  Conn* new_conn(State s);
  Conn* new_active(State s, uint64_t service_id, const Peer& peer, uint8_t max_retries);
  void free_conn(uint32_t id);
  Conn* get_from(uint32_t id, const proto::Packet& p);
  Conn* get_pair(uint32_t id, uint32_t remote_id, const proto::Packet& p);
  Conn* find_remote(uint32_t remote_id, const proto::Ip6& peer_gid);
  Conn* find_stale(uint32_t remote_qpn, const proto::Ip6& peer_gid);
  Conn* find_listener(uint64_t service_id);
  void index_peer(Conn& c);    // after remote_id, remote_qpn and peer.dgid are set
  void unindex_peer(Conn& c);
  void set_timer(Conn& c, uint64_t due_ns);  // every timer_ns that is not 0 goes through here
  void push(Event&& e);
  Event event(EventType t, const Conn& c) const;
  void set_state(Conn& c, State s);
  void arm(Conn& c, uint64_t timeout_ns, uint8_t retries);
  void enter_timewait(Conn& c);
  uint64_t cm_time_ns(uint8_t exp) const;
  bool same_family(const Peer& to) const;

  bool send(const Peer& to, const proto::Ip6& from, const pcm::Mad& m, Conn* keep);
  void mad_packet(const Peer& to, const proto::Ip6& from, std::span<const uint8_t> mad, proto::Packet& p);
  bool resend(Conn& c);
  void reply_to(const proto::Packet& p, const pcm::Mad& m);  // stateless answer to the sender
  void send_rej(Conn& c, uint8_t msg, uint16_t reason, std::span<const uint8_t> pd = {});

  void on_req(const proto::Packet& p, const pcm::MadHeader& h, const pcm::Req& m);
  void on_mra(const proto::Packet& p, const pcm::Mra& m);
  void on_rej(const proto::Packet& p, const pcm::Rej& m);
  void on_rep(const proto::Packet& p, const pcm::MadHeader& h, const pcm::Rep& m);
  void on_rtu(const proto::Packet& p, const pcm::Rtu& m);
  void on_dreq(const proto::Packet& p, const pcm::MadHeader& h, const pcm::Dreq& m);
  void on_drep(const proto::Packet& p, const pcm::Drep& m);
  void on_sidr_req(const proto::Packet& p, const pcm::MadHeader& h, const pcm::SidrReq& m);
  void on_sidr_rep(const proto::Packet& p, const pcm::SidrRep& m);

  Device& dev_;
  Rng rng_;
  Qp gsi_;                   // QP 1: its counters and transmit bookkeeping
  uint32_t gsi_psn_ = 0;     // the BTH PSN of QP 1's datagrams (each side its own sequence)
  std::unordered_map<uint32_t, Conn> conns_;
  std::deque<Event> events_;
  uint32_t awaiting_rtu_ = 0;  // connections in REP_SENT / MRA_REP_RCVD (qp_data's fast check)
  // Indexes, so that no MAD, timer or data packet walks every connection (issue 30: 10,000 and
  // more): the peer's communication ID and its QP, each with the peer's GID (a REQ's duplicate
  // and stale checks, SIDR duplicates); listeners by service ID; local QP numbers held in
  // TimeWait (connect's EBUSY) and waiting for the RTU (qp_data). All kept by set_state,
  // index_peer, listen and free_conn.
  struct PeerKey {
    uint32_t v;
    proto::Ip6 gid;
    bool operator==(const PeerKey& o) const { return v == o.v && gid == o.gid; }
  };
  struct PeerKeyHash {
    size_t operator()(const PeerKey& k) const;
  };
  std::unordered_multimap<PeerKey, uint32_t, PeerKeyHash> by_remote_id_, by_remote_qpn_;
  std::unordered_map<uint64_t, uint32_t> listeners_;
  std::unordered_map<uint32_t, uint32_t> timewait_qpns_;   // local QPN -> connections in TimeWait with it
  std::unordered_map<uint32_t, uint32_t> rtu_by_qpn_;      // local QPN -> the connection waiting for its RTU
  // Timers: (due, id), earliest first. An entry whose connection is gone or whose timer_ns has
  // changed since is stale and skipped when it comes up.
  struct Timer {
    uint64_t due;
    uint32_t id;
    bool operator>(const Timer& o) const { return due > o.due; }
  };
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  CmCounters ctr_{};
};

}  // namespace uroce::engine::cm
