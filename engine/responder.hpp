// The pieces the responder's files share (engine-internal: engine/responder*.cpp only). The
// responder's entry points are in engine/roles.hpp; responder.cpp has the checks and the state
// loop, responder_exec.cpp the execution, responder_ack.cpp the answers.
#pragma once
#include <cstdint>

#include "engine/qp.hpp"
#include "engine/roles.hpp"
#include "proto/aeth.hpp"
#include "proto/packet.hpp"
#include "proto/psn.hpp"

namespace uroce::engine::responder {

// The names every responder file uses.
using proto::NakCode;
using proto::Operation;
using proto::Position;
using proto::psn_add;
using proto::psn_diff;
using proto::Syndrome;

// Selective repeat: a kept packet is no longer kept (delivered, superseded, or inside a READ's
// range). A SEND's slot in the reorder store is free again with it.
inline void forget(RecvSide& r, RecvSide::Held& h) {
  if (h.is_send()) --r.held_sends;
  h.valid = false;
  --r.held_n;
}

// The answers (responder_ack.cpp). send_ack: an ACK or NAK for `psn` now (a coalesced ACK still
// owed goes before a NAK); false when the link had no transmit buffer (nothing was sent or
// counted). ack_now: the coalesced ACK still owed, now (still owed if no buffer). ack_before_responses:
// the same before the responses to a new READ or atomic, unless earlier responses are owed.
// nak_and_error: class A/C errors (IBA 9.9.3): NAK, and the QP to ERR (UC: the message is
// discarded). rnr_nak: no receive WQE (UC: the message is discarded).
bool send_ack(Device& dev, Qp& qp, Syndrome s, uint32_t psn);
void ack_now(Device& dev, Qp& qp);
void ack_before_responses(Device& dev, Qp& qp);
RespState nak_and_error(Device& dev, Qp& qp, NakCode code, uint32_t psn);
RespState rnr_nak(Device& dev, Qp& qp, uint32_t psn);

// The execution of an in-order request that passed the checks (responder_exec.cpp).
RespState exec_send(Device& dev, Qp& qp, const proto::Packet& p);
RespState exec_write(Device& dev, Qp& qp, const proto::Packet& p);
RespState exec_read(Device& dev, Qp& qp, const proto::Packet& p);
RespState exec_atomic(Device& dev, Qp& qp, const proto::Packet& p);
RespState exec_atomic_write(Device& dev, Qp& qp, const proto::Packet& p);
RespState exec_flush(Device& dev, Qp& qp, const proto::Packet& p);

}  // namespace uroce::engine::responder
