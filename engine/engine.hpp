// The uroce engine: one Device per endpoint, polled through progress().
//
//   post_send -> [requester] -> frames -> Link ... Link -> [responder] -> memory, RQ, ACKs
//   ACKs / READ responses -> [completer] -> CQ
//
// Single-threaded by design: every call, including progress(), comes from one thread. No
// locks (the one exception, telemetry(), is a mailbox other threads post to and progress()
// answers: engine/telemetry.hpp). Queues, responder resources and transmit buffers are sized
// when a QP is created: modify_qp, posting and progress() allocate nothing.
//
// This header is the public API (what the port, the verbs shim, the tools and the benches use).
// The roles' internals (requester, completer, responder, loss recovery, the QP operations they
// share) are declared in engine/roles.hpp, which only engine/*.cpp include; the files are
// listed in docs/engine.md.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <queue>
#include <vector>

#include "engine/link.hpp"
#include "engine/param.hpp"
#include "engine/qp.hpp"
#include "engine/resources.hpp"
#include "engine/telemetry.hpp"
#include "engine/tx.hpp"
#include "engine/types.hpp"
#include "proto/packet.hpp"

namespace uroce::engine {

namespace cm {
class Manager;  // the connection manager on QP 1 (engine/cm.hpp)
}

class Device {
 public:
  struct Config {
    proto::Mac mac{};
    proto::Ip6 gid{};              // ::ffff:a.b.c.d for IPv4, or an IPv6 address
    uint32_t max_qp = param::kMaxQp;
    uint32_t max_cq = param::kMaxCq;
    uint32_t max_mr = param::kMaxMr;
    uint32_t max_cqe = param::kMaxCqe;
    uint32_t max_qp_wr = param::kMaxQpWr;
    uint32_t max_rd_atomic = param::kMaxRdAtomic;
    uint32_t max_unacked_psns = param::kMaxUnackedPsns;
    uint32_t ack_req_every = param::kAckReqEvery;   // requester: AckReq at least this often
    uint32_t ack_every = param::kAckEvery;           // responder: ACK at least this often (0: when asked)
    // Tail-loss probe floor (0: no probes; the QP timer alone recovers a tail loss).
    uint64_t probe_floor_ns = param::kProbeFloorNs;
    // Selective repeat (both ends must have it on; docs/reliability.md).
    bool selective_repeat = param::kSelectiveRepeat;
    uint16_t pkey = param::kDefaultPkey;
    uint32_t rx_burst = param::kRxBurst;
    uint64_t seed = 0;             // keys and QP numbers; 0: from std::random_device (tests fix it)
    // ECN: the codepoint every frame sent carries (0 Not-ECT, 2 ECT(0), 1 ECT(1); 3 is taken as
    // 0); the DSCP comes from the QP's or AH's traffic class. A received frame marked CE (3)
    // makes its QP send a CNP to the sender, at most one per cnp_interval_ns; CNPs carry
    // cnp_dscp.
    uint8_t ecn = param::kEcnMark;
    uint64_t cnp_interval_ns = param::kCnpIntervalNs;
    uint8_t cnp_dscp = param::kCnpDscp;
    // Congestion control (engine/cc.hpp, docs/congestion.md): each QP's reaction point, its
    // algorithm and parameters (keys cc, cc_line_rate, the DCQCN keys by their mlx5 names, timely_*).
    cc::Config cc;
    // The GID table: a QP or address handle sends from gids[sgid_index]. Zero entries are
    // unused. Empty: {gid}.
    std::vector<proto::Ip6> gids;
    // The IB connection manager on QP 1 (engine/cm.hpp; keys cm_timewait_ms, cm_max_conns,
    // cm_mra_timeout). Off: frames to QP 1 are dropped as for an unknown QP (liburoce-rdmacm
    // turns it on). The response timeout and resends are what liburoce-rdmacm puts in its
    // REQs and SIDR_REQs (keys cm_response_timeout, cm_max_retries); the engine keeps them.
    bool cm = param::kCmEnabled;
    uint64_t cm_timewait_ns = param::kCmTimewaitNs;
    uint32_t cm_max_conns = param::kCmMaxConns;
    uint8_t cm_mra_timeout = param::kCmMraTimeout;
    uint8_t cm_response_timeout = param::kRdmacmResponseTimeout;
    uint8_t cm_max_retries = param::kCmMaxRetries;
    // The port's path MTU (config key mtu): the CM refuses a REQ asking for more (REJ 26).
    Mtu port_mtu = Mtu::M1024;  // the port sets it from its config (default port/param.hpp kPathMtu)
    // A device shared by several processes (the uroce service, docs/service.md): the low
    // id_tag_bits bits of every QP number and CM communication ID this process makes are id_tag,
    // so that the service hands each frame (and each CM MAD) to the process that owns it; the
    // other bits stay random. 0 bits: all random.
    uint32_t id_tag = 0;
    uint8_t id_tag_bits = 0;
    // Frames to the device's own addresses go round inside the engine (true), or out to the
    // link like any other (false: the service delivers them, to this process or another).
    bool loopback = true;
  };

  Device(Link& link, Clock& clock, const Config& cfg);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const Config& config() const { return cfg_; }

  Pd* alloc_pd();
  Pd* pd_by_handle(uint32_t handle) const;  // ibv_import_pd; nullptr if there is none
  int dealloc_pd(Pd* pd);              // EBUSY while MRs, QPs or SRQs use it
  Mr* reg_mr(Pd* pd, void* addr, uint64_t length, uint32_t access);
  Mr* reg_mr_iova(Pd* pd, void* addr, uint64_t length, uint64_t iova, uint32_t access);
  int dereg_mr(Mr* mr);                // EBUSY while memory windows are bound to it
  // Memory windows (ibv_alloc_mw; bound and invalidated by work requests: engine/local_ops.cpp).
  // nullptr and errno EINVAL (type not 1 or 2, no PD) or ENOMEM (max_mw allocated).
  Mw* alloc_mw(Pd* pd, uint8_t type);
  int dealloc_mw(Mw* mw);              // a bound window is unbound first
  // ibv_rereg_mr: the same MR (the same keys, as rxe and ConnectX keep them) with another PD,
  // range or rights, checked as reg_mr checks them. 0 or an errno; on failure nothing changes.
  int rereg_mr(Mr* mr, Pd* pd, void* addr, uint64_t length, uint64_t iova, uint32_t access);
  // ibv_advise_mr's prefetch: faults the pages of each range in now (for writing when `write`;
  // `fault` false: PREFETCH_NO_FAULT, nothing to do, the CPU's pages being the device's). Each
  // range lies in an on-demand paging MR of `pd` named by its lkey. 0, or EFAULT (a key of no MR
  // of the PD, no local write right for `write`, a range outside its MR, pages that cannot be
  // faulted in), or EINVAL (the key's MR is not on demand: mlx5's answer).
  enum class Advice : uint8_t { Prefetch, PrefetchWrite, PrefetchNoFault };
  int advise_mr(const Pd* pd, Advice advice, const Sge* sges, uint32_t n) const;
  // nullptr above max_cqe (EINVAL) or past max_cq CQs (ENOMEM). completion_times: each CQE carries the device clock
  // (Wc::completion_ns) from the moment it is written.
  Cq* create_cq(uint32_t depth, bool completion_times = false);
  int destroy_cq(Cq* cq);              // EBUSY while a QP uses it
  // nullptr and errno EINVAL (no PD, a size out of range) or ENOMEM (max_srq SRQs).
  Srq* create_srq(Pd* pd, uint32_t max_wr, uint32_t max_sge);
  int destroy_srq(Srq* srq);           // EBUSY while a QP uses it (an XRC SRQ: never)
  // XRC (IBA annex A14). A domain: nullptr and ENOMEM past param::kMaxXrcd. Closed with EBUSY
  // while XRC SRQs or target QPs are in it.
  Xrcd* alloc_xrcd();
  int dealloc_xrcd(Xrcd* xrcd);
  // An XRC SRQ of `xrcd` whose receive completions go to `cq`, with a random 24-bit number
  // (nonzero, unused): nullptr and errno as create_srq. Destroyed by destroy_srq; a request that
  // names it afterwards is an invalid request.
  Srq* create_xrc_srq(Pd* pd, Xrcd* xrcd, Cq* cq, uint32_t max_wr, uint32_t max_sge);
  Srq* xrc_srq_by_num(uint32_t srqn) const;  // nullptr if there is none
  // nullptr on bad attributes. RC, UC, UD: pd, both CQs, a receive queue or an SRQ. XrcIni: pd
  // and send_cq (no receive side). XrcTgt: xrcd only (no PD, CQs or queues of its own).
  Qp* create_qp(const QpInitAttr& init);
  // Address handles (UD): nullptr and EINVAL for a GID index not in the table or a family
  // mismatch (IPv4 source, IPv6 destination), ENOMEM past max_ah (param::kMaxAh). The caller resolved av.dmac (unless the
  // destination is this device's own address).
  Ah* create_ah(Pd* pd, const AddressVector& av);
  int destroy_ah(Ah* ah);
  // The source GID of table entry `index`, or nullptr when it is not a valid entry.
  const proto::Ip6* sgid(uint32_t index) const;
  // Is this one of this device's own addresses (loopback)?
  bool is_local(const proto::Ip6& gid) const;
  // A frame to `gid` goes round inside the engine (is_local, and the config's loopback).
  bool loops_back(const proto::Ip6& gid) const { return cfg_.loopback && is_local(gid); }
  // A random 24-bit (qpn) or 32-bit id with the config's id tag in its low bits.
  uint32_t tag_id(uint32_t random) const {
    const uint32_t mask = cfg_.id_tag_bits ? (1u << cfg_.id_tag_bits) - 1 : 0;
    return (random & ~mask) | (cfg_.id_tag & mask);
  }
  // A new GID table (the addresses of a netdev changed; zero entries unused). QPs keep the
  // source address they were connected with, address handles the one they were created with;
  // new ones use the new table, and frames to a removed address are no longer ours.
  void set_gids(const std::vector<proto::Ip6>& gids);
  const std::vector<proto::Ip6>& gids() const { return cfg_.gids; }
  int destroy_qp(Qp* qp);  // and out of every multicast group it was attached to
  Qp* qp_by_num(uint32_t qpn) const;

  // Multicast (ibv_attach_mcast; proto/multicast.hpp): a datagram to a group reaches every QP of
  // this device attached to it, one sent from here included (a copy goes round inside as well as
  // out to the link, as rxe's copy comes back through the kernel's multicast loop). 0, or EINVAL
  // (not a UD QP, not a multicast GID; detach: not attached), ENOMEM (max_mcast_grp groups,
  // max_mcast_qp_attach QPs in the group, max_total_mcast_qp_attach in all). Attaching twice
  // is one attachment (as rxe).
  int attach_mcast(Qp* qp, const proto::Ip6& group);
  int detach_mcast(Qp* qp, const proto::Ip6& group);
  // Has this device members of `group` that a datagram sent here goes round to?
  bool mcast_loops_back(const proto::Ip6& group) const { return cfg_.loopback && groups_.count(group); }
  size_t mcast_groups() const { return groups_.size(); }

  // ibv_modify_qp semantics: 0, or EINVAL for an illegal transition or a wrong attribute
  // mask (required attribute missing, or one the transition does not take); the QP is then
  // unchanged. check_modify_qp says the same without changing anything.
  int modify_qp(Qp* qp, const QpAttr& attr, uint32_t mask);
  int check_modify_qp(const Qp* qp, const QpAttr& attr, uint32_t mask) const;

  // 0, or EINVAL (QP state, opcode, too many SGEs, inline too long), ENOMEM (queue full).
  int post_send(Qp* qp, const SendWr& wr);
  int post_recv(Qp* qp, const RecvWr& wr);
  int post_srq_recv(Srq* srq, const RecvWr& wr);
  int poll_cq(Cq* cq, int n, Wc* wc) { return int(cq->poll(wc, uint32_t(n))); }

  // Processes received frames, posted work and timers. Returns true if it did anything.
  bool progress();

  // Counters of the device (all QPs, including destroyed ones, plus device-level drops).
  Counters counters() const;
  // The same sum made a part at a time, `budget` QPs per call, for telemetry (whose request is
  // served over several progress() steps instead of holding one): true when `out` holds the
  // whole sum. A call with another `sum_id` starts a new sum. QPs destroyed meanwhile are
  // counted once (Device::destroy_qp keeps the partial sum right), QPs made meanwhile too.
  bool counters_step(uint64_t sum_id, uint32_t budget, Counters& out);
  uint64_t now_ns() const { return clock_.now_ns(); }
  // The time of the progress() step under way, read once at its start; outside progress() (a
  // verb that sends at once, modify_qp) the clock itself. The roles take their timestamps from
  // here: a clock read costs ~16 ns on a VM (rdtsc), and a step reading it per packet sent,
  // per ACK and per timer check spent more on it than on the ICRC of a 64 B frame.
  uint64_t step_ns() const { return in_step_ ? step_ns_ : clock_.now_ns(); }
  // The time the last progress() step started (0 before the first): a recent time at no cost,
  // for a caller that has just called progress().
  uint64_t last_step_ns() const { return step_ns_; }
  // Requests received on connected QPs (RC, UC), and when the last one came (a step's time): the
  // verbs shim's sign that the application plays ping-pong (verbs_shim/progress.cpp, linger).
  uint64_t requests_received() const { return requests_rcvd_; }
  uint64_t last_request_ns() const { return last_request_ns_; }
  uint32_t mtu_limit() const;          // the largest path MTU the link can carry
  // Live telemetry (engine/telemetry.hpp): another thread asks the mailbox for a snapshot,
  // progress() fills it. qps(): every QP, for the snapshot (polling thread only).
  SnapshotMailbox& telemetry() { return telemetry_; }
  const std::vector<std::unique_ptr<Qp>>& qps() const { return qps_; }
  // The connection manager, or nullptr when Config::cm is off.
  cm::Manager* cm() { return cm_.get(); }

  // ---- For the roles (engine/*.cpp, engine/roles.hpp) ----
  // Puts a QP on the active list, which progress() walks instead of every QP: a QP is put there
  // by what gives it work (post_send, modify_qp, a frame for it, its timer coming due) and leaves
  // it after a visit when quiescent or only waiting (then parked in timers_). progress() costs
  // what the active QPs need, however many QPs exist (issue 30).
  void kick(Qp* qp) {
    if (!qp->active) {
      qp->active = true;
      active_.push_back(qp);
    }
  }
  size_t active_qps() const { return active_.size(); }
  size_t timer_entries() const { return timers_.size(); }
  // The earliest time a parked QP's timer is due (UINT64_MAX: none): how long a caller may wait.
  uint64_t next_timer_due() const { return timers_.empty() ? UINT64_MAX : timers_.top().due; }
  const MrTable& mrs() const { return mrs_; }
  MrTable& mrs() { return mrs_; }  // the roles' own (binds and invalidations of memory windows)
  Clock& clock() { return clock_; }
  Tx& tx() { return tx_; }
  std::vector<uint8_t>& scratch() { return scratch_; }

  // The received frame's ICRC, when parse() left it for the payload's copy (a WRITE's or SEND's
  // MIDDLE or LAST packet with a payload of proto::kCrcCopyMin bytes or more, engine/progress.cpp):
  // whoever acts on the frame settles it first (true: good; false: the frame is dropped and
  // counted as an ICRC error), except the payload's placement, which copies and checks in one pass
  // (place_payload: false, and the frame counts as never received, if the ICRC is bad; the bytes
  // it put in place are where the packet of this PSN that does verify will put its own).
  bool icrc_pending() const { return icrc_pending_; }
  bool settle_icrc(const proto::Packet& p);
  bool place_payload(uint8_t* dst, const proto::Packet& p);
  // A SEND's payload into a receive WQE's buffers at `off`, checked the same way (false: bad
  // ICRC, as place_payload). `placed`: the bytes written (fewer if a buffer is too short or not
  // writable, which the caller answers as before once the ICRC is known to be good).
  bool place_send_payload(const RecvWqe& r, const Pd* pd, uint32_t off, const proto::Packet& p, uint32_t& placed);

 private:
  int check_registration(const Pd* pd, void* addr, uint64_t length, uint32_t access) const;
  void rx_frame(PacketBuf& b);
  void rx_multicast(proto::Packet& p, PacketBuf& b);
  void rx_to_qp(Qp& qp, proto::Packet& p, PacketBuf& b, proto::Transport tr, bool reserved_rc);
  void send_cnp(Qp& qp, const proto::Packet& p);  // to the sender of the CE-marked frame `p`
  void note_cnp(const Qp& qp, double before_bps);  // what a CNP did to the QP's rate, for a capture (Link::note)
  bool xrc_target_srq(Qp& qp, const proto::Packet& p);  // false: no SRQ of the QP's domain
  bool to_us(const proto::Packet& p) const;

  Link& link_;
  Clock& clock_;
  uint64_t step_ns_ = 0;   // step_ns(): set by progress()
  bool in_step_ = false;
  uint64_t requests_rcvd_ = 0, last_request_ns_ = 0;
  Config cfg_;
  Rng rng_;                                // before mrs_: the MR table draws keys from it
  MrTable mrs_;
  Tx tx_;
  std::vector<std::unique_ptr<Pd>> pds_;
  std::vector<std::unique_ptr<Cq>> cqs_;
  std::vector<std::unique_ptr<Srq>> srqs_;
  std::vector<std::unique_ptr<Xrcd>> xrcds_;
  IdMap<Srq*> xrc_srqs_;                   // XRC SRQ number -> SRQ
  std::vector<std::unique_ptr<Ah>> ahs_;
  std::vector<std::unique_ptr<Qp>> qps_;   // owned, any order
  uint32_t qps_made_ = 0;                 // QPs made so far (Qp::made)
  std::vector<Qp*> active_;                // the QPs progress() visits (kick)
  // QPs off the list that are only waiting, by when their timers are next due (Qp::timer_due):
  // progress() kicks each when its time comes. An entry names the QP by number (a destroyed
  // QP's entry finds nothing); a stale one (the QP was kicked meanwhile) kicks it for nothing.
  struct TimerEntry {
    uint64_t due;
    uint32_t qpn;
    bool operator>(const TimerEntry& o) const { return due > o.due; }
  };
  std::priority_queue<TimerEntry, std::vector<TimerEntry>, std::greater<TimerEntry>> timers_;
  IdMap<Qp*> qp_table_;                    // random QP number -> QP
  std::vector<uint32_t> recent_qpns_;      // destroyed QP numbers (a ring): not reused soon
  uint32_t recent_qpn_next_ = 0;
  uint32_t pd_handles_ = 0;
  std::vector<uint8_t> scratch_;           // gather buffer for multi-SGE payloads
  void index_gids();                       // local4_, local6_ from cfg_.gids
  std::vector<uint32_t> local4_;           // the GID table's IPv4 addresses, as on the wire
  std::vector<proto::Ip6> local6_;         // and its IPv6 ones
  Counters dev_ctr_{};                     // device-level drops and destroyed QPs' counters
  std::array<PacketBuf, param::kRxBurstMax> rx_{};
  proto::Packet rx_pkt_{};                 // reused for every received frame
  bool icrc_pending_ = false;              // rx_pkt_'s ICRC not checked yet (icrc_pending())
  uint32_t icrc_pending_len_ = 0;          // its frame's length, counted in rx_bytes before the check
  Qp* icrc_qp_ = nullptr;                  // the QP that counted it received (rx_to_qp)
  bool icrc_result(bool good);             // the check's end (progress.cpp)
  SnapshotMailbox telemetry_;              // telemetry requests from other threads
  struct CounterSum {                      // counters_step's sum under way
    bool active = false;
    uint64_t id = 0;
    uint32_t cursor = 0;                   // qps_[0, cursor) are in `part`
    Counters part;
  } ctr_sum_;
  std::map<proto::Ip6, std::vector<Qp*>> groups_;  // multicast group -> its attached QPs
  uint32_t mcast_attached_ = 0;            // attachments in all groups
  std::unique_ptr<cm::Manager> cm_;        // QP 1, when Config::cm is on
};

}  // namespace uroce::engine
