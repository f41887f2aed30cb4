// The polling loop: receive a burst, dispatch each frame to its QP's responder (requests) or
// completer (responses), then let every QP send what it owes (responses, a coalesced ACK,
// new requests), then hand the batch to the link.
#include <algorithm>
#include <cstring>

#include "engine/engine.hpp"

namespace uroce::engine {

bool Device::progress() {
  const size_t n = link_.recv(rx_.data(), cfg_.rx_burst);
  for (size_t i = 0; i < n; ++i) {
    rx_frame(rx_[i]);
    link_.release(rx_[i]);
  }
  bool did = n > 0;
  for (auto& qpp : qps_) {
    Qp& qp = *qpp;
    const QpState s = qp.attrs.qp_state;
    // Responses first, in request order; a coalesced ACK for later requests only after them.
    if (s == QpState::Rtr || s == QpState::Rts || s == QpState::Sqd) responder::send_responses(*this, qp);
    did |= responder::flush_ack(*this, qp);
    if (s == QpState::Rts || s == QpState::Sqd) {
      const uint64_t before = qp.ctr.tx_packets;
      requester::check_timers(*this, qp);
      requester::run(*this, qp);
      did |= qp.ctr.tx_packets != before;
    }
  }
  if (tx_.pending()) tx_.flush();
  return did;
}

// One received frame: parse (the ICRC included), check it is ours, find the QP, check its
// P_Key, state and source address, then hand it to the role it is for.
void Device::rx_frame(PacketBuf& b) {
  proto::Packet& p = rx_pkt_;
  const proto::ParseResult r = proto::parse(std::span<const uint8_t>(b.data, b.len), p);
  if (!r.ok()) {
    if (r.error == proto::ParseError::BadIcrc) ++dev_ctr_.icrc_errors;
    else ++dev_ctr_.malformed;
    return;
  }
  // Ours? Destination MAC and IP must be this device's.
  const bool ip_ok = p.ip_version == 4
                         ? (gid_is_v4mapped(cfg_.gid) && std::memcmp(p.ip_dst.data(), cfg_.gid.data() + 12, 4) == 0)
                         : p.ip_dst == cfg_.gid;
  if (!ip_ok || p.eth_dst != cfg_.mac) {
    ++dev_ctr_.dropped_not_for_us;
    return;
  }
  Qp* qp = qp_by_num(p.dest_qp);
  if (!qp || p.info().transport != proto::Transport::RC) {
    ++dev_ctr_.dropped_unknown_qp;
    return;
  }
  // P_Key: the low 15 bits must match and at least one side must be a full member.
  if ((p.pkey & 0x7FFF) != (qp->pkey & 0x7FFF) || !((p.pkey | qp->pkey) & 0x8000)) {
    ++qp->ctr.dropped_pkey;
    return;
  }
  const QpState s = qp->attrs.qp_state;
  if (s == QpState::Reset || s == QpState::Init || s == QpState::Err) {
    ++qp->ctr.dropped_bad_state;
    return;
  }
  // A connected QP takes frames from its peer's address only (as rxe checks the IP source).
  if (p.ip_version != qp->tmpl.ip_version || p.ip_src != qp->tmpl.ip_dst) {
    ++qp->ctr.dropped_source;
    return;
  }
  ++qp->ctr.rx_packets;
  qp->ctr.rx_bytes += b.len;
  if (p.info().request) responder::on_request(*this, *qp, p);
  else if (s == QpState::Rts || s == QpState::Sqd || s == QpState::Sqe) completer::on_response(*this, *qp, p);
  else ++qp->ctr.dropped_bad_state;
}

}  // namespace uroce::engine
