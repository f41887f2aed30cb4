// A queue pair: its attributes, its queues, and the state of its three roles, grouped as the
// roles use it (requester and completer on the send side, responder on the receive side).
//
// Applications and the verbs shim use the accessors at the top of `Qp`. The members below
// them belong to the engine's roles (engine/*.cpp): plain data, like rxe's struct rxe_qp.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/cc.hpp"
#include "engine/param.hpp"
#include "engine/resources.hpp"
#include "engine/types.hpp"
#include "proto/packet.hpp"
#include "proto/psn.hpp"

namespace uroce::engine {

class Device;

struct QpInitAttr {
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  Xrcd* xrcd = nullptr;   // XrcTgt: its domain
  QpCap cap{};
  QpType qp_type = QpType::RC;
  bool sq_sig_all = false;
};

// A send work request as the send queue keeps it: SendWr without its SGE list (the WQE's slot
// holds a copy of the SGEs) and its address handle (UD: a copy in the slot too), in 64 bytes.
struct PostedWr {
  uint64_t wr_id = 0;
  uint64_t remote_addr = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  uint32_t rkey = 0;
  uint32_t imm_data = 0;
  uint32_t invalidate_rkey = 0;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  uint32_t xrc_srqn = 0;
  WrOpcode opcode = WrOpcode::Send;
  uint8_t send_flags = 0;     // SendFlags (four bits)
  uint8_t num_sge = 0;        // at most kMaxSge
  uint8_t flush_type = 0;
  uint8_t flush_level = 0;

  void set(const SendWr& w) {
    wr_id = w.wr_id;
    remote_addr = w.remote_addr;
    compare_add = w.compare_add;
    swap = w.swap;
    rkey = w.rkey;
    imm_data = w.imm_data;
    invalidate_rkey = w.invalidate_rkey;
    remote_qpn = w.remote_qpn;
    remote_qkey = w.remote_qkey;
    xrc_srqn = w.xrc_srqn;
    opcode = w.opcode;
    send_flags = uint8_t(w.send_flags);
    num_sge = uint8_t(w.num_sge);
    flush_type = w.flush_type;
    flush_level = w.flush_level;
  }
};
static_assert(sizeof(PostedWr) == 64);
static_assert(kMaxSge <= 255 && (kSendFence | kSendSignaled | kSendSolicited | kSendInline) <= 255);

// A send work request, copied at post time, with the requester's progress through it. Its
// variable parts lie in its QP's storage (SendSide), by the position of its slot in the ring
// (`slot`), sized by the QP's caps, not the device's maxima: max_send_sge (at least 1) SGEs
// and as many local addresses, resolved when the WQE starts; max_inline_data bytes of inline
// data; UD: its address handle.
struct SendWqe {
  PostedWr wr{};
  uint32_t slot = 0;          // its position in the send queue's storage (SendSide::sge() etc.)
  uint32_t length = 0;        // total bytes (8 for atomics)
  uint32_t npkts = 0;         // PSNs the message uses
  uint32_t first_psn = 0;
  uint32_t next_pkt = 0;      // next packet index to (re)send
  uint32_t rcvd_pkts = 0;     // packets acknowledged, or READ responses received, in order
  uint32_t sent_max = 0;      // highest packet index ever sent + 1 (below it: a retransmission)
  uint32_t read_upto = 0;     // READ re-issued for a part: its request asks up to this packet (0: to the end)
  uint64_t mr_gen = 0;        // MrTable::gen() when the local addresses were resolved
  WcStatus error = WcStatus::Success;  // set when this WQE failed: its completion status
  bool started = false;       // PSNs assigned, local buffers resolved
  bool is_inline = false;
  bool signaled = false;
  bool ah_local = false;      // UD: the address handle names this device
  bool ah_mcast = false;      // UD: a multicast group (out to the link, and round to members here)

  bool is_atomic() const { return wr.opcode == WrOpcode::AtomicCmpSwp || wr.opcode == WrOpcode::AtomicFetchAdd; }
  // BIND_MW, LOCAL_INV: executed by the requester, no packet (engine/local_ops.cpp).
  bool is_local() const { return wr.opcode == WrOpcode::BindMw || wr.opcode == WrOpcode::LocalInv; }
  // ATOMIC WRITE and FLUSH (IBA 1.5 A19): one request packet, answered by one RDMA READ
  // response carrying nothing; like a READ they take a READ/atomic slot and are answered again,
  // never executed twice, when repeated.
  bool is_placement() const { return wr.opcode == WrOpcode::AtomicWrite || wr.opcode == WrOpcode::Flush; }
  // Answered by RDMA READ responses (the READ's data; nothing for a placement operation).
  bool takes_read_responses() const { return wr.opcode == WrOpcode::RdmaRead || is_placement(); }
  // The bytes its READ responses carry.
  uint32_t response_bytes() const { return wr.opcode == WrOpcode::RdmaRead ? length : 0; }
  // The bytes the READ response at byte offset `off` carries.
  uint32_t response_at(uint32_t off, uint32_t mtu) const {
    const uint32_t n = response_bytes();
    return std::min(mtu, n - std::min(n, off));
  }
  bool is_read_or_atomic() const { return takes_read_responses() || is_atomic(); }
  bool all_sent() const { return started && next_pkt >= npkts; }
  uint32_t num_sge() const { return is_inline ? 1 : wr.num_sge; }
};

// Responder resources for READ and atomic requests (IBA 9.5: max_dest_rd_atomic of them):
// kept so that a duplicate request is answered again without executing it twice.
struct RdAtomicRes {
  bool valid = false;
  bool atomic = false;
  bool placement = false;     // ATOMIC WRITE or FLUSH: one zero-length READ response
  uint32_t psn = 0;           // first PSN of the request
  uint32_t npkts = 0;         // response packets
  uint32_t sent = 0;          // response packets emitted (READ)
  uint32_t restart = 0;       // packet a re-sent range starts from (it opens with FIRST)
  uint32_t end = 0;           // packets [sent, end) are owed: npkts, or the end of a re-requested part
  uint32_t resume = 0;        // after a re-requested part: go on from here to resume_end (0: nothing)
  uint32_t resume_end = 0;
  bool replay = false;        // answering a duplicate request: the requester may have moved on
  uint64_t va = 0;
  uint32_t rkey = 0;          // READ: checked again when an MR was deregistered meanwhile
  uint8_t* host = nullptr;    // resolved under MrTable generation `mr_gen`
  uint64_t mr_gen = 0;
  uint32_t length = 0;
  uint64_t orig = 0;          // atomic: the value before the operation
  uint32_t msn = 0;           // MSN after this request
  bool owes() const { return valid && sent < end; }
};

// The roles' states. Each role is a loop over its states (requester.cpp, completer.cpp,
// responder.cpp); the state a pass ends in is kept and printed by Qp::describe().
enum class ReqState : uint8_t {
  NextWqe,      // pick the WQE at the send point
  StartWqe,     // a new WQE: check the READ/atomic limit and fence, resolve buffers, take PSNs
  CheckWindow,  // is its next PSN inside the send window?
  CheckRate,    // may it go now at the QP's rate (congestion control; always yes without)?
  SendPacket,   // build and emit one packet
  Idle,         // (end) nothing to send
  Drained,      // (end) SQD: nothing new starts
  WaitRnr,      // (end) an RNR NAK's timer runs
  WaitRdAtomic, // (end) max_rd_atomic READs/atomics outstanding
  WaitFence,    // (end) a fenced WQE waits for earlier READs/atomics
  WaitWindow,   // (end) the send window is full
  WaitRate,     // (end) the reaction point's pacer holds the next packet (engine/cc.hpp)
  WaitTxBuf,    // (end) the link has no transmit buffer now
  Error,        // (end) the QP is in ERR
};
enum class CompState : uint8_t {
  Dispatch,     // by opcode: ACK/NAK, READ response, atomic ACK
  CheckAckPsn,  // is the ACK/NAK's PSN one we sent and have not had acknowledged?
  Ack, RnrNak, SeqNak, ErrorNak,
  ReadResponse, AtomicAck,
  Idle,         // (end) handled
  Ghost,        // (end) a stale, duplicate or unexpected response: counted, ignored
  Error,        // (end) the QP went to ERR
};
enum class RespState : uint8_t {
  CheckPsn,     // expected, duplicate, or ahead (a gap)?
  Duplicate,    // already executed: re-acknowledge or answer again from the saved resources
  OutOfSequence,// a gap: one sequence NAK, then silence until the expected PSN
  CheckOpSeq,   // MIDDLE/LAST only inside a message of the same kind
  CheckLength,  // FIRST/MIDDLE carry exactly one MTU, nothing carries more
  ExecSend, ExecWrite, ExecRead, ExecAtomic,
  ExecAtomicWrite,  // 8 bytes placed as one (IBA 1.5 A19), answered like a READ of nothing
  ExecFlush,        // earlier writes made visible (or persistent), answered the same way
  RnrNak,       // (end) no receive WQE: RNR NAK, the expected PSN does not move
  BadIcrc,      // (end) the payload was placed as its ICRC was checked, and the ICRC is bad: the
                //       frame counts as never received (Device::place_payload), nothing moves
  Idle,         // (end) handled
  Error,        // (end) a NAK went out and the QP is in ERR, or it was already
};
// The message the responder is inside (what MIDDLE and LAST must continue).
enum class RespMsg : uint8_t { None, Send, Write };

std::string_view req_state_name(ReqState s);
std::string_view comp_state_name(CompState s);
std::string_view resp_state_name(RespState s);

// Requester and completer: the send side.
struct SendSide {
  Ring<SendWqe> sq;
  std::vector<Sge> sq_sge;         // each send WQE's SGEs, local addresses and inline bytes,
  std::vector<uint8_t*> sq_host;   // by its slot (SendWqe::slot)
  std::vector<uint8_t> sq_inline;
  // UD: each send WQE's address handle, copied when posted (as rxe copies the AV into its WQE),
  // so that an application may destroy the AH before the datagram has gone (mckey does). Empty
  // for connected QPs.
  std::vector<Ah> sq_ah;
  uint32_t sge_n = 1;              // SGEs (and local addresses) per slot: max_send_sge, at least 1
  uint32_t inline_n = 0;           // inline bytes per slot: max_inline_data
  bool keeps_ah = false;           // UD: sq_ah holds each WQE's AH
  uint32_t sq_limit = 1;           // WQEs at most: max_send_wr (the ring holds storage for fewer
                                   // until posts need it: param::kQueueFirstSlots, doubled)
  bool sq_full() const { return sq.size() == sq_limit; }
  // Storage for `cap` WQEs (at least sq.size()), the WQEs kept in order with their SGEs, local
  // addresses, inline bytes and AH copies (post_send: never during progress()).
  void resize_sq(uint32_t cap);
  Sge* sge(const SendWqe& w) { return sq_sge.data() + size_t(w.slot) * sge_n; }
  const Sge* sge(const SendWqe& w) const { return sq_sge.data() + size_t(w.slot) * sge_n; }
  uint8_t** host(const SendWqe& w) { return sq_host.data() + size_t(w.slot) * sge_n; }
  uint8_t* const* host(const SendWqe& w) const { return sq_host.data() + size_t(w.slot) * sge_n; }
  uint8_t* inline_data(const SendWqe& w) { return sq_inline.data() + size_t(w.slot) * inline_n; }
  const Ah& ah(const SendWqe& w) const { return sq_ah[w.slot]; }  // UD only
  KeyCache lkeys;             // the last lkey resolved (resources.hpp)
  uint32_t send_idx = 0;      // index (from the oldest) of the WQE being sent
  uint32_t sq_psn = 0;        // next PSN for a new message
  uint32_t rd_atomic_inflight = 0;
  uint32_t pkts_since_ackreq = 0;
  uint8_t retries_left = 7;
  uint8_t rnr_retries_left = 7;
  uint64_t last_progress_ns = 0;   // last time an ACK moved us forward (or we first sent)
  uint64_t rnr_until_ns = 0;       // RNR wait in progress until this time
  uint32_t read_retry_psn = UINT32_MAX;  // a READ re-issue already asked for this PSN
  uint32_t acked_psn = 0;          // highest PSN the responder has acknowledged
  bool acked_valid = false;
  // Loss recovery (docs/reliability.md). The gap being repaired: a go-back-N restart from
  // gap_psn was made; another NAK (or implied NAK) for the same PSN before gap_until_ns comes
  // from before the resend could have been answered, and is ignored.
  uint32_t gap_psn = 0;
  bool gap_valid = false;
  uint64_t gap_until_ns = 0;
  // Round-trip time, from one timed AckReq packet at a time (never a resent one: Karn's rule).
  uint64_t srtt_ns = 0;            // smoothed RTT; 0: no sample yet
  uint64_t rttvar_ns = 0;          // RTT variation
  uint32_t rtt_psn = 0;            // the packet being timed
  uint64_t rtt_sent_ns = 0;
  bool rtt_timing = false;
  // Tail-loss probes sent since the responder was last heard from (each doubles the wait).
  uint32_t loss_window = 0;        // PSNs allowed in flight after losses (0: max_unacked_psns)
  uint32_t probes = 0;
  uint64_t probe_from_ns = 0;      // the probe timer runs from here (progress, a restart, a probe)
  uint32_t probe_psn = 0;          // the PSN the last probe resent
  bool probe_oldest = false;       // ... and it was the oldest unacknowledged packet
  // Selective repeat (docs/reliability.md): PSNs [sr_next, sr_end) are to be resent, before
  // anything new. gap_end: the end of the last such run. sr_check: packets after the run went
  // out before it, and the answer to the run is awaited; an ACK that stops exactly at gap_end
  // means the responder kept none of them: go-back-N from there.
  uint32_t sr_next = 0;
  uint32_t sr_end = 0;
  uint32_t gap_end = 0;
  bool sr_check = false;
  // READ responses that came ahead of the oldest READ's next one, placed (bit i: packet
  // rcvd_pkts + 1 + i of the front WQE). Selective repeat only.
  uint64_t rd_held[param::kSelectiveRepeatWindow / 64] = {};
  ReqState req_state = ReqState::Idle;
  CompState comp_state = CompState::Idle;
};

// Responder: the receive side.
struct RecvSide {
  RecvRing rq;                     // (none of its own with an SRQ, or for XRC: one slot)
  KeyCache rkeys;             // the last WRITE rkey resolved (resources.hpp)
  uint32_t epsn = 0;
  uint32_t msn = 0;
  RespState state = RespState::Idle;
  RespMsg msg = RespMsg::None;
  bool uc_dropping = false;    // UC: discarding the rest of a message, until a FIRST or ONLY
  bool seq_nak_sent = false;
  RecvWqe cur_recv{};           // the receive WQE being filled: a copy, its SGEs in cur_sge
  std::vector<Sge> cur_sge;
  bool have_recv = false;
  uint32_t recv_off = 0;
  uint32_t write_rkey = 0;     // the WRITE in progress: key and next address, checked again
  uint64_t write_va = 0;       // when an MR was deregistered since write_host was resolved
  uint8_t* write_host = nullptr;
  uint64_t write_gen = 0;
  uint32_t write_left = 0;
  uint32_t write_total = 0;
  bool ack_pending = false;
  uint32_t ack_psn = 0;
  uint32_t unacked = 0;            // in-order SEND/WRITE packets since the last ACK (ack_every)
  // res_n slots (max_dest_rd_atomic), allocated when the first READ, atomic, ATOMIC WRITE or
  // FLUSH arrives (a QP that only carries SENDs and WRITEs has none), given back when the QP is
  // reset or max_dest_rd_atomic set again.
  std::vector<RdAtomicRes> res;
  uint32_t res_n = 1;              // slots: max_dest_rd_atomic
  // The slot a new READ/atomic takes (the slots allocated on the first).
  RdAtomicRes& next_res() {
    if (res.empty()) [[unlikely]]
      res.assign(res_n, RdAtomicRes{});
    return res[res_next];
  }
  // A new READ/atomic may take it: free, or replaying a duplicate (see take_res).
  bool next_res_free() const { return res.empty() || !res[res_next].owes() || res[res_next].replay; }
  uint32_t res_next = 0;
  uint32_t res_pending = 0;        // slots that still owe responses
  bool res_paced = false;          // the pacer holds the next READ response (congestion control)
  // Selective repeat (docs/reliability.md): packets that came ahead of epsn, kept by PSN modulo
  // the window until epsn reaches them; then each goes through the in-order pass (checks,
  // receive WQE, completion, MSN) and completes in order. WRITE packets are placed at once and
  // replayed without copying; SEND packets wait in the reorder store (send_store) and are
  // scattered into their receive WQE by the in-order pass.
  struct Held {
    bool valid = false;
    uint8_t opcode = 0;
    bool ack_req = false;
    bool solicited = false;
    uint32_t psn = 0;
    uint32_t plen = 0;
    uint32_t imm = 0;
    uint32_t ieth_rkey = 0;        // SEND with invalidate: the key it names
    uint32_t store_off = 0;        // SEND: where its payload is in send_store
    uint32_t msg_first = 0;        // WRITE: the PSN of its message's FIRST (or ONLY)
    uint64_t va = 0;               // WRITE: its message's RETH
    uint32_t rkey = 0;
    uint32_t dma_len = 0;
    bool is_send() const { return proto::opcode_info(opcode).op == proto::Operation::Send; }
  };
  std::vector<Held> held;          // kSelectiveRepeatWindow entries when selective_repeat is on
  uint32_t held_n = 0;             // valid entries
  bool replaying = false;          // an in-order pass over a held packet
  // The reorder store of kept SEND payloads (when selective_repeat is on): kSelectiveRepeatSendSlots
  // slots of store_slot bytes, PSN p in slot p modulo the slot count; it reaches that many PSNs
  // from epsn, so every PSN in reach has its own slot. Allocated when the first SEND packet is
  // kept (a QP that never meets a gap in its SENDs has none), given back when the QP is reset.
  std::vector<uint8_t> send_store;
  uint32_t store_slot = 0;         // bytes per slot: the largest path MTU of the link
  uint32_t held_sends = 0;         // valid entries that are SEND packets
  bool store_overflow = false;     // a SEND packet beyond the store's reach was dropped
  uint32_t write_first = 0;        // the WRITE in progress: the PSN of its FIRST and its RETH
  uint64_t write_va0 = 0;
  // XRC target QPs: the XRC SRQ the request being handled names (its XRCETH, looked up and
  // checked against the QP's domain for each packet: Device::rx_to_qp); its PD, queue and CQ
  // serve the request (Qp::rx_pd, rx_srq, rx_cq).
  Srq* xrc_srq = nullptr;
};

class Qp {
 public:
  uint32_t qpn() const { return qpn_; }
  QpState state() const { return attrs.qp_state; }
  const QpAttr& attr() const { return attrs; }
  const QpInitAttr& init_attr() const { return init; }
  const Counters& counters() const { return ctr; }
  ReqState req_state() const { return tx.req_state; }
  CompState comp_state() const { return tx.comp_state; }
  RespState resp_state() const { return rx.state; }
  uint32_t sq_outstanding() const { return tx.sq.size(); }
  uint32_t rq_outstanding() const { return rx.rq.size(); }
  uint32_t expected_psn() const { return rx.epsn; }
  uint32_t next_send_psn() const { return tx.sq_psn; }
  // Acknowledged, resent and ordered by PSN: RC and both halves of XRC.
  bool reliable() const {
    return init.qp_type == QpType::RC || init.qp_type == QpType::XrcIni || init.qp_type == QpType::XrcTgt;
  }
  bool xrc() const { return init.qp_type == QpType::XrcIni || init.qp_type == QpType::XrcTgt; }
  // The high bits of every opcode it sends (proto/opcode.hpp): RC 0x00, UC 0x20, XRC 0xa0.
  uint8_t opcode_base() const { return init.qp_type == QpType::UC ? proto::op::kUc : xrc() ? proto::op::kXrc : 0; }
  // The receive side's PD, SRQ and CQ: the QP's own, or a target QP's current XRC SRQ's
  // (nullptr before a request named one).
  const Pd* rx_pd() const { return init.qp_type != QpType::XrcTgt ? init.pd : rx.xrc_srq ? rx.xrc_srq->pd() : nullptr; }
  Srq* rx_srq() const { return init.qp_type != QpType::XrcTgt ? init.srq : rx.xrc_srq; }
  Cq* rx_cq() const { return init.qp_type != QpType::XrcTgt ? init.recv_cq : rx.xrc_srq ? rx.xrc_srq->cq() : nullptr; }
  // One line of state for logs and failed tests: QP, requester, completer and responder
  // states, PSNs, the oldest send WQE.
  std::string describe() const;

  Qp(Device& dev, uint32_t qpn, const QpInitAttr& init);
  Qp(const Qp&) = delete;
  Qp& operator=(const Qp&) = delete;

  // ---- The engine's (roles in engine/*.cpp) ----
  Device& dev;
  const QpInitAttr init;
  QpAttr attrs{};
  uint32_t mtu = 1024;
  uint16_t pkey = param::kDefaultPkey;
  bool loopback = false;      // RC/UC: the peer is this device (frames never reach the wire)
  proto::Packet tmpl{};       // addresses and ports of every frame this QP sends
  proto::Packet req_pkt{};    // the requester's packet: tmpl plus per-packet fields
  proto::Packet resp_pkt{};   // the responder's (ACKs, READ responses, atomic ACKs)
  proto::HeaderTemplate hdr{};  // tmpl's L2-L4 headers prebuilt (connected QPs; UD: unusable)
  Counters ctr{};
  uint64_t cnp_next_ns = 0;   // notification point: no CNP before this time
  // Reaction point (engine/cc.hpp): the rate this QP may send at, from its congestion control
  // (Device::Config::cc); null without one (nothing is paced).
  std::unique_ptr<cc::ReactionPoint> cc;
  SendSide tx;
  RecvSide rx;
  bool active = false;        // in the device's active list: progress() visits it (Device::kick)
  uint64_t timer_due = 0;     // parked: the due time of its entry in the device's timer heap (0: none)
  uint32_t slot = 0;          // where the device holds it (Device::qps_): destroy_qp takes it in O(1)
  uint32_t made = 0;          // the device's QPs made before it (congestion control's cc_per_qp)
  uint16_t mcast_groups = 0;  // multicast groups it is attached to (destroy_qp detaches it)
  // Nothing for progress() to do until a verb or a frame gives it work: no send WQE (so no timer
  // either), no resend range, no RNR wait, no ACK or READ/atomic response owed.
  bool quiescent() const {
    return tx.sq.empty() && tx.sr_next == tx.sr_end && tx.rnr_until_ns == 0 && !rx.ack_pending &&
           rx.res_pending == 0;
  }
  // Only waiting: for the peer's answers (a frame kicks it) or for a timer (the device's timer
  // heap does), with nothing to send meanwhile: no ACK owed, no response owed but those the
  // pacer holds (its time is a timer), no resend range, and a
  // requester that ended waiting for those (not for a transmit buffer, which nothing announces).
  bool waiting() const {
    if (rx.ack_pending || (rx.res_pending && !rx.res_paced) || tx.sr_next != tx.sr_end) return false;
    switch (tx.req_state) {
      case ReqState::Idle: case ReqState::Drained: case ReqState::WaitRnr: case ReqState::WaitRdAtomic:
      case ReqState::WaitFence: case ReqState::WaitWindow: case ReqState::WaitRate: return true;
      default: return false;
    }
  }

 private:
  uint32_t qpn_;
};

}  // namespace uroce::engine
