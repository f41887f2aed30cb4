// The transmit side of a Device as the roles see it (engine-internal; the Device holds one,
// which is why engine/engine.hpp includes this file): frames are built into link buffers and
// handed over in batches, loopback frames are kept for the next progress() (tx.cpp).
#pragma once
#include <array>
#include <cstddef>

#include "engine/link.hpp"
#include "engine/param.hpp"
#include "engine/qp.hpp"
#include "proto/packet.hpp"

namespace uroce::engine {

class Tx {
 public:
  explicit Tx(Link& link) : link_(link) {}
  // Builds `p` into a link buffer (counted on `qp`); false when the link has none now.
  // `local`: the destination is this device's own address (loopback): the frame never goes
  // on the wire; the next progress() receives it.
  bool emit(Qp& qp, const proto::Packet& p, bool local = false);
  void flush();
  bool pending() const { return n_ != 0; }
  // Frames that found no buffer (or room in the loopback ring) so far: progress() compares it
  // before and after a QP's visit (fairness under the link's back-pressure).
  uint64_t refusals() const { return refusals_; }
  // Of those, the link's own (no transmit buffer for any QP now: its back-pressure).
  uint64_t link_refusals() const { return link_refusals_; }
  // Loopback frames waiting to be received (the caller releases each to the link).
  size_t take_loopback(PacketBuf* out, size_t max);

 private:
  Link& link_;
  std::array<PacketBuf, param::kTxBatch> bufs_{};
  size_t n_ = 0;
  std::array<PacketBuf, param::kLoopbackRing> loop_{};
  size_t loop_head_ = 0, loop_n_ = 0;
  uint64_t refusals_ = 0, link_refusals_ = 0;
};


}  // namespace uroce::engine
