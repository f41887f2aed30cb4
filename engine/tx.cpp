// Transmit: frames are built straight into link buffers and handed to the link in batches.
#include "engine/engine.hpp"

namespace uroce::engine {

bool Tx::emit(Qp& qp, const proto::Packet& p) {
  if (n_ == bufs_.size()) flush();
  PacketBuf& b = bufs_[n_];
  const size_t len = proto::frame_len(p);
  if (!link_.alloc(b, uint32_t(len))) return false;
  proto::BuildResult r = proto::build(p, std::span<uint8_t>(b.data, b.cap));
  if (!r.ok()) {
    link_.release(b);
    return false;
  }
  b.len = uint32_t(r.len);
  ++n_;
  ++qp.ctr.tx_packets;
  qp.ctr.tx_bytes += r.len;
  return true;
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
