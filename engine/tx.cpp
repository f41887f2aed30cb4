// Transmit: frames are built straight into link buffers and handed to the link in batches.
#include "engine/engine.hpp"

namespace uroce::engine {

bool Tx::emit(Qp& qp, const proto::Packet& p, bool local) {
  local |= qp.loopback;  // RC/UC to this device (UD says so per datagram)
  if (n_ == bufs_.size()) flush();
  if (local && loop_n_ == loop_.size()) return ++refusals_, false;  // the loopback ring is full: try again later
  PacketBuf& b = local ? loop_[(loop_head_ + loop_n_) % loop_.size()] : bufs_[n_];
  const size_t len = proto::frame_len(qp.hdr, p);
  if (!link_.alloc(b, uint32_t(len))) return ++refusals_, ++link_refusals_, false;
  // A connected QP's frames: its prebuilt headers patched (byte for byte what build() writes).
  proto::BuildResult r = proto::build_from(qp.hdr, p, std::span<uint8_t>(b.data, b.cap));
  if (!r.ok()) {
    link_.release(b);
    return false;
  }
  b.len = uint32_t(r.len);
  if (local) {
    ++loop_n_;
    ++qp.ctr.loopback;
  } else {
    ++n_;
  }
  ++qp.ctr.sent_pkts;
  qp.ctr.tx_bytes += r.len;
  return true;
}

size_t Tx::take_loopback(PacketBuf* out, size_t max) {
  size_t n = 0;
  while (n < max && loop_n_) {
    out[n++] = loop_[loop_head_];
    loop_head_ = (loop_head_ + 1) % loop_.size();
    --loop_n_;
  }
  return n;
}

void Tx::flush() {
  size_t off = 0;
  while (off < n_) {
    size_t n = link_.send(bufs_.data() + off, n_ - off);
    if (n == 0) break;
    off += n;
  }
  for (size_t i = off; i < n_; ++i) link_.release(bufs_[i]);  // link refused: lost, as on a wire
  n_ = 0;
}

}  // namespace uroce::engine
