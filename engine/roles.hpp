// The roles' internals (engine-internal: only engine/*.cpp and tests of internals include it):
// the entry points of the requester, the completer and the responder, loss recovery (which the
// requester's timers and the completer's ACKs and NAKs both drive), and the QP operations the
// roles share. The public API is engine/engine.hpp.
#pragma once
#include <algorithm>
#include <cstdint>

#include "engine/engine.hpp"
#include "engine/param.hpp"
#include "engine/qp.hpp"
#include "proto/packet.hpp"

namespace uroce::engine {

namespace requester {
void run(Device& dev, Qp& qp);                 // send what the window and limits allow
// Builds and sends packet `w.next_pkt` of `w` (recovery sends with it too). False: no transmit
// buffer now, or the QP went to ERR. `out_of_line`: a tail-loss probe or a selective resend
// (neither the QP timer nor the send point moves); `ack`: AckReq set.
bool send_packet(Device& dev, Qp& qp, SendWqe& w, bool out_of_line = false, bool ack = false);
bool resolve_sges(Device& dev, Qp& qp, SendWqe& w);  // false: LOC_PROT_ERR, the QP is in ERR
}  // namespace requester

// Loss recovery (recovery.cpp; docs/reliability.md): go-back-N, selective repeat, tail-loss
// probes, the QP timer and the round-trip estimate.
namespace recovery {
// Selective repeat is on for this QP: the config says on, and it is RC.
inline bool selective(const Device& dev, const Qp& qp) {
  return dev.config().selective_repeat && qp.init.qp_type == QpType::RC;
}
// The send window now (PSNs a QP may have in flight): max_unacked_psns, or less after losses
// (the loss window), and no more than the responder keeps under selective repeat.
inline uint32_t window(const Device& dev, const Qp& qp) {
  uint32_t max = dev.config().max_unacked_psns;
  if (selective(dev, qp)) max = std::min(max, param::kSelectiveRepeatWindow);  // the responder keeps no more
  return qp.tx.loss_window ? std::min(qp.tx.loss_window, max) : max;
}
void check_timers(Device& dev, Qp& qp);        // the retransmission (ACK) timer and the probes
// When check_timers (or the RNR wait) next has something to do: the QP timer, the probe timer,
// the end of an RNR wait, whichever is first; UINT64_MAX: no timer runs (nothing in flight, or
// no timeout). Never later than check_timers would act: a QP parked until then misses nothing.
uint64_t next_timer_ns(const Device& dev, const Qp& qp);
void go_back_n(Qp& qp, uint32_t psn);          // resend from `psn`
// restart_for_gap: a sequence NAK or an implied NAK for `psn`: resend from there, unless a
// resend from `psn` was started less than an answer time ago (then the NAK is ignored and
// counted; false). begin_resend: the restart itself (the QP timer uses it too). acked_through:
// the responder answered up to `psn` (progress): the probe timer starts again and the RTT is
// sampled. answer_time_ns: about when a resend can be answered.
bool restart_for_gap(Device& dev, Qp& qp, uint32_t psn);
bool same_gap(Device& dev, const Qp& qp, uint32_t psn);  // a restart from `psn` is on its way
// A sequence NAK for `psn` the responder has moved past since: before what was acknowledged, or
// before the PSN of the last resend (a past expected PSN of the responder, or its oldest unacknowledged).
bool stale_nak(const Qp& qp, uint32_t psn);
void begin_resend(Device& dev, Qp& qp, uint32_t psn);
void acked_through(Device& dev, Qp& qp, uint32_t psn);
uint64_t answer_time_ns(const Device& dev, const Qp& qp);
// Selective repeat (only when selective()). selective_resend: resend `psn` and what the
// responder cannot have kept after it (a restart for a gap does this instead of go-back-N).
// send_resends: sends what a selective resend still has to send (false: no transmit buffer
// now). reissue_read: a READ asks again for its responses from the first missing one up to
// packet `upto` (0: to the end). resend_answered: an ACK up to `psn` came (checks the answer
// to a selective resend).
void selective_resend(Device& dev, Qp& qp, uint32_t psn);
bool send_resends(Device& dev, Qp& qp);
bool reissue_read(Device& dev, Qp& qp, SendWqe& w, uint32_t upto);
void resend_answered(Device& dev, Qp& qp, uint32_t psn);
}  // namespace recovery

namespace completer {
void on_response(Device& dev, Qp& qp, const proto::Packet& p);  // ACK/NAK, READ response, atomic ACK
}  // namespace completer

namespace responder {
void on_request(Device& dev, Qp& qp, const proto::Packet& p);    // RC and UC
void on_datagram(Device& dev, Qp& qp, const proto::Packet& p);   // UD
// An RC packet whose opcode is reserved (its ICRC good; only its BTH and the headers before it
// are in `p`): at the expected PSN a NAK-invalid request and the QP to ERR; ahead of it the one
// sequence NAK of a gap; behind it (a duplicate of something it never was) nothing.
void on_reserved_opcode(Device& dev, Qp& qp, const proto::Packet& p);
// An XRC target QP's request naming no XRC SRQ of its domain: the same invalid request NAK.
void on_bad_xrc_srq(Device& dev, Qp& qp, const proto::Packet& p);
void send_responses(Device& dev, Qp& qp);      // READ responses and atomic ACKs owed, in order
bool flush_ack(Device& dev, Qp& qp);           // a coalesced ACK, once no response is owed
}  // namespace responder

// BIND_MW and LOCAL_INV on the send queue, and the responder's remote invalidation
// (local_ops.cpp). execute: false when the operation failed (the WQE completes MW_BIND_ERR or
// LOC_QP_OP_ERR, the QP is in ERR). remote_invalidate: false when `rkey` names no bound type 2
// window of this QP (the SEND with Invalidate is an invalid request).
namespace local_ops {
bool execute(Device& dev, Qp& qp, SendWqe& w);
bool remote_invalidate(Device& dev, Qp& qp, uint32_t rkey);
}  // namespace local_ops

namespace qp_ops {
void set_error(Qp& qp);                        // to ERR: stop, flush every outstanding WR
void flush(Qp& qp);
void complete_wqe(Qp& qp, WcStatus st);        // retire the oldest send WQE
void fail_wqe(Qp& qp, SendWqe& w, WcStatus st);  // `w` completes with `st`, the QP goes to ERR
bool take_retry(Qp& qp);                       // false: retry_cnt exhausted (7 is seven, as the IBA)
bool take_rnr_retry(Qp& qp);                   // false: rnr_retry exhausted (7 = infinite)
void reset(Qp& qp);
void build_template(Qp& qp, const Device& dev);
// The addresses and ports of a frame from `src` (a GID of this device) to `av`; DSCP from the
// AV's traffic class, ECN from the device (Device::Config::ecn).
void address(proto::Packet& t, const Device& dev, const proto::Ip6& src, const AddressVector& av);
}  // namespace qp_ops

}  // namespace uroce::engine
