// The polling loop: receive a burst, dispatch each frame to its QP's responder (requests) or
// completer (responses), then let every QP send what it owes (responses, a coalesced ACK,
// new requests), then hand the batch to the link.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "engine/cm.hpp"
#include "engine/dma.hpp"
#include "engine/roles.hpp"
#include "engine/sge.hpp"
#include "proto/multicast.hpp"

namespace uroce::engine {

bool Device::progress() {
  step_ns_ = clock_.now_ns();
  in_step_ = true;
  // Frames to our own address first (loopback), then a burst from the link.
  size_t n = tx_.take_loopback(rx_.data(), cfg_.rx_burst);
  bool did = n > 0;
  for (size_t i = 0; i < n; ++i) {
    rx_frame(rx_[i]);
    link_.release(rx_[i]);
  }
  n = link_.recv(rx_.data(), cfg_.rx_burst);
  for (size_t i = 0; i < n; ++i) {
    rx_frame(rx_[i]);
    link_.release(rx_[i]);
  }
  did |= n > 0;
  // Parked QPs whose timers are due come back on the list.
  while (!timers_.empty() && timers_.top().due <= step_ns_) {
    const TimerEntry e = timers_.top();
    timers_.pop();
    if (Qp* q = qp_by_num(e.qpn)) {
      if (q->timer_due == e.due) q->timer_due = 0;
      kick(q);
    }
  }
  // The active QPs (kick): each does its work, and leaves the list once it has none left, or is
  // parked when it is only waiting for answers or a timer (the timer heap brings it back when
  // that timer is due). A QP kicked meanwhile is appended and visited in this pass too.
  // When the link runs out of transmit buffers (its back-pressure) the pass ends: the QPs after
  // the one refused would find none either, and visiting each (its state cold when traffic is
  // spread over many QPs) would only slow the step down, and with it the receive side that
  // frees the buffers (issue 30). Fairness: the QP refused heads the list in the next pass,
  // the QPs not visited behind it, so none is starved by those ahead of it taking the buffers
  // first in every pass; a QP refused first in its pass (the link took nothing) goes to the end
  // instead, so that a link that takes nothing for long still has every QP visited in turn (its
  // timers: a peer that is gone ends in RETRY_EXC_ERR on every QP).
  size_t keep = 0, starved = SIZE_MAX, i = 0;
  const uint64_t link_refused = tx_.link_refusals();
  for (; i < active_.size() && tx_.link_refusals() == link_refused; ++i) {
    Qp& qp = *active_[i];
    const uint64_t refused = tx_.refusals();
    const QpState s = qp.attrs.qp_state;
    // Responses first, in request order; a coalesced ACK for later requests only after them.
    if (s == QpState::Rtr || s == QpState::Rts || s == QpState::Sqd) responder::send_responses(*this, qp);
    did |= responder::flush_ack(*this, qp);
    if (s == QpState::Rts || s == QpState::Sqd) {
      const uint64_t before = qp.ctr.sent_pkts;
      recovery::check_timers(*this, qp);
      requester::run(*this, qp);
      did |= qp.ctr.sent_pkts != before;
    }
    if (qp.quiescent()) {
      qp.active = false;
    } else if (qp.waiting()) {
      const uint64_t due = recovery::next_timer_ns(*this, qp);
      if (due <= step_ns_) {
        active_[keep++] = &qp;  // due now (a probe found no transmit buffer): again next step
        continue;
      }
      qp.active = false;
      // At most one entry per QP, never later than its timer (an earlier one brings it back
      // sooner, and it parks again with the time then).
      if (due != UINT64_MAX && (qp.timer_due == 0 || due < qp.timer_due)) {
        qp.timer_due = due;
        timers_.push({due, qp.qpn()});
      }
    } else {
      if (starved == SIZE_MAX && tx_.refusals() != refused) starved = keep;
      active_[keep++] = &qp;
    }
  }
  if (tx_.link_refusals() != link_refused) {
    // The pass ended at the link's refusal, in the visit of QP i - 1 (kept at keep - 1 when it
    // still has work, as a refused QP has). Next: it, then the QPs not visited, then those served.
    const bool kept = keep > 0 && active_[keep - 1] == active_[i - 1];
    const size_t head = kept ? keep - 1 : keep;
    std::move(active_.begin() + ptrdiff_t(i), active_.end(), active_.begin() + ptrdiff_t(keep));
    keep += active_.size() - i;
    active_.resize(keep);
    if (kept && head == 0) std::rotate(active_.begin(), active_.begin() + 1, active_.end());  // refused first: last
    else std::rotate(active_.begin(), active_.begin() + ptrdiff_t(head), active_.end());
  } else {
    active_.resize(keep);
    if (starved != SIZE_MAX && starved != 0) [[unlikely]]  // the loopback ring was full
      std::rotate(active_.begin(), active_.begin() + ptrdiff_t(starved), active_.end());
  }
  if (cm_) did |= cm_->progress();  // the CM's timers: resends, timeouts, TimeWait
  if (tx_.pending()) tx_.flush();
  // A telemetry snapshot asked for by another thread (engine/telemetry.hpp): one relaxed load
  // per call when nobody asks.
  if (telemetry_.wanted()) [[unlikely]] telemetry_.serve(*this);
  in_step_ = false;
  return did;
}

namespace {
bool same16(const proto::Ip6& a, const proto::Ip6& b) {
  uint64_t x[2], y[2];
  std::memcpy(x, a.data(), 16);
  std::memcpy(y, b.data(), 16);
  return ((x[0] ^ y[0]) | (x[1] ^ y[1])) == 0;
}

proto::Transport transport_of(QpType t) {
  switch (t) {
    case QpType::UC: return proto::Transport::UC;
    case QpType::UD: return proto::Transport::UD;
    case QpType::XrcIni: case QpType::XrcTgt: return proto::Transport::XRC;
    default: return proto::Transport::RC;
  }
}
}  // namespace

// Is the frame's destination IP one of our GIDs?
bool Device::to_us(const proto::Packet& p) const {
  if (p.ip_version == 4) {
    uint32_t dst;
    std::memcpy(&dst, p.ip_dst.data(), 4);
    for (uint32_t a : local4_)
      if (a == dst) return true;
    return false;
  }
  for (const proto::Ip6& g : local6_)
    if (same16(g, p.ip_dst)) return true;
  return false;
}

// One received frame: parse (the ICRC included), check it is ours, find the QP, check its
// P_Key, state and source address, then hand it to the role it is for.
void Device::rx_frame(PacketBuf& b) {
  proto::Packet& p = rx_pkt_;
  static constexpr proto::ParseOptions kDefer{.verify_icrc = true, .defer_payload_icrc = true};
  const proto::ParseResult r = proto::parse(std::span<const uint8_t>(b.data, b.len), p, kDefer);
  // An RC WRITE's or SEND's MIDDLE or LAST packet (no immediate, no invalidate) is checked as its
  // payload is placed; every other frame whose ICRC parse() left here is checked now (UC's and
  // XRC's too: their paths to the placement have other exits, the XRC SRQ's NAK among them).
  icrc_pending_ = r.ok() && p.icrc_deferred;
  icrc_qp_ = nullptr;
  if (icrc_pending_) {
    icrc_pending_len_ = b.len;
    const proto::OpcodeInfo& in = p.info();
    const bool placed_later = in.transport == proto::Transport::RC &&
                              (in.op == proto::Operation::Write || in.op == proto::Operation::Send) &&
                              in.request && !in.has(proto::kImmDt) && !in.has(proto::kIeth) &&
                              (in.pos == proto::Position::Middle || in.pos == proto::Position::Last);
    if (!placed_later && !settle_icrc(p)) return;
  }
  // An RC request with an opcode RC does not have (0x15, 0x18-0x1f) and a good ICRC is an invalid
  // request, which the responder NAKs at the expected PSN (IBA 9.7.5.2); everything else that does
  // not parse is dropped and counted. Its fields up to the BTH are in `p`; nothing after it is.
  const bool reserved_rc = r.error == proto::ParseError::OpcodeInvalidForTransport &&
                           proto::transport_bits(p.opcode) == proto::Transport::RC &&
                           proto::icrc_verifies(std::span<const uint8_t>(b.data, b.len));
  if (!r.ok() && !reserved_rc) {
    if (r.error == proto::ParseError::BadIcrc) ++dev_ctr_.icrc_errors;
    else ++dev_ctr_.malformed;
    return;
  }
  // QP 0xFFFFFF: a datagram to a multicast group, for every QP of this device attached to it.
  if (p.dest_qp == proto::kMulticastQpn && !reserved_rc) {
    rx_multicast(p, b);
    return;
  }
  // Ours? The destination MAC, and an IP address of this device's GID table.
  if (std::memcmp(p.eth_dst.data(), cfg_.mac.data(), 6) != 0 || !to_us(p)) {
    if (settle_icrc(p)) ++dev_ctr_.dropped_not_for_us;
    return;
  }
  // QP 1, the GSI: the connection manager's MADs (engine/cm.cpp). No data QP has number 1.
  if (p.dest_qp == proto::cm::kCmQpn && cm_) {
    cm_->on_frame(p);
    return;
  }
  Qp* qp = qp_by_num(p.dest_qp);
  if (qp) kick(qp);  // whatever the frame turns out to be, the QP looks at its work next
  const proto::Transport tr = reserved_rc ? proto::Transport::RC : p.info().transport;
  const bool cnp = tr == proto::Transport::CNP;  // to any QP type: its sender's rate, not a message
  // No such QP, or one of another transport; or, for XRC, a request to an initiator (which
  // only sends them) or a response to a target (which only answers).
  if (!qp || (tr != transport_of(qp->init.qp_type) && !cnp) ||
      (tr == proto::Transport::XRC && p.info().request != (qp->init.qp_type == QpType::XrcTgt))) {
    if (settle_icrc(p)) ++dev_ctr_.dropped_unknown_qp;
    return;
  }
  rx_to_qp(*qp, p, b, tr, reserved_rc);
}

// The group of a multicast datagram is its IP destination (proto/multicast.hpp); it must come to
// the group's MAC, be a UD SEND (only UD QPs take multicast) and have members here. Each member
// QP takes it as a datagram of its own (P_Key, state, Q_Key checked per QP).
void Device::rx_multicast(proto::Packet& p, PacketBuf& b) {
  proto::Ip6 group{};
  if (p.ip_version == 4) {
    group[10] = group[11] = 0xff;
    std::memcpy(group.data() + 12, p.ip_dst.data(), 4);
  } else {
    group = p.ip_dst;
  }
  if (!proto::is_multicast_gid(group) || p.eth_dst != proto::multicast_mac(group) ||
      p.info().transport != proto::Transport::UD) {
    ++dev_ctr_.dropped_not_for_us;
    return;
  }
  auto it = groups_.find(group);
  if (it == groups_.end()) {
    ++dev_ctr_.dropped_mcast;  // a group no QP of this device is attached to
    return;
  }
  for (Qp* qp : it->second) {
    kick(qp);
    ++qp->ctr.mcast_rcvd;
    rx_to_qp(*qp, p, b, proto::Transport::UD, false);
  }
}

// The checks of a frame that has found its QP (P_Key, state, source), then the role it is for.
void Device::rx_to_qp(Qp& qp, proto::Packet& p, PacketBuf& b, proto::Transport tr, bool reserved_rc) {
  const bool cnp = tr == proto::Transport::CNP;
  // P_Key: the low 15 bits must match and at least one side must be a full member.
  if ((p.pkey & 0x7FFF) != (qp.pkey & 0x7FFF) || !((p.pkey | qp.pkey) & 0x8000)) {
    if (settle_icrc(p)) ++qp.ctr.dropped_pkey;
    return;
  }
  const QpState s = qp.attrs.qp_state;
  if (s == QpState::Reset || s == QpState::Init || s == QpState::Err) {
    if (settle_icrc(p)) ++qp.ctr.dropped_bad_state;
    return;
  }
  // A connected QP takes frames from its peer's address to its own only (as rxe checks the IP
  // source): the address pair it was connected with. Datagrams come from anyone.
  if (qp.init.qp_type != QpType::UD &&
      (p.ip_version != qp.tmpl.ip_version || !same16(p.ip_src, qp.tmpl.ip_dst) || !same16(p.ip_dst, qp.tmpl.ip_src))) {
    if (settle_icrc(p)) ++qp.ctr.dropped_source;
    return;
  }
  // A CNP is counted and goes to the QP's reaction point, if it has one (engine/cc.hpp): no NAK,
  // no state change.
  if (cnp) {
    ++qp.ctr.cnp_rcvd;
    if (qp.cc) {
      const bool notes = link_.wants_notes();
      if (notes) qp.cc->catch_up(step_ns_);  // the rate the CNP finds, after the timers' raises
      const double before = qp.cc->rate_bps();
      qp.cc->on_cnp(step_ns_);
      if (notes) note_cnp(qp, before);
    }
    return;
  }
  // Congestion experienced on the way: tell the sender (notification point).
  if (p.ecn == 3) {
    if (!settle_icrc(p)) return;
    ++qp.ctr.ecn_ce_rcvd;
    // A datagram only with the QP's Q_Key: no CNPs towards any address a forged frame names.
    // Nor for a group's datagram: its destination is no address of ours to answer from.
    if (tr != proto::Transport::UD || (p.deth.qkey == qp.attrs.qkey && p.dest_qp != proto::kMulticastQpn))
      send_cnp(qp, p);
  }
  ++qp.ctr.rcvd_pkts;
  qp.ctr.rx_bytes += b.len;
  // The implicit RTU: the first packet on a QP whose connection waits for the RTU.
  if (icrc_pending_) icrc_qp_ = &qp;  // counted: uncounted if its ICRC turns out bad
  if (cm_ && cm_->awaiting_rtu() && tr != proto::Transport::UD) [[unlikely]] {
    if (!settle_icrc(p)) return;
    cm_->qp_data(qp.qpn());
  }
  if (reserved_rc) responder::on_reserved_opcode(*this, qp, p);  // a request, of no kind RC has
  else if (tr == proto::Transport::UD) responder::on_datagram(*this, qp, p);
  else if (p.info().request) {
    if (qp.init.qp_type == QpType::XrcTgt && !xrc_target_srq(qp, p)) {
      responder::on_bad_xrc_srq(*this, qp, p);
      return;
    }
    ++requests_rcvd_;
    last_request_ns_ = step_ns_;
    responder::on_request(*this, qp, p);
  }
  else if (s == QpState::Rts || s == QpState::Sqd || s == QpState::Sqe) completer::on_response(*this, qp, p);
  else ++qp.ctr.dropped_bad_state;
}

bool Device::settle_icrc(const proto::Packet& p) {
  if (!icrc_pending_) return true;
  return icrc_result(proto::icrc_finish(p));
}

bool Device::place_payload(uint8_t* dst, const proto::Packet& p) {
  const size_t n = p.payload.size();
  if (!icrc_pending_) {
    dma_copy(dst, p.payload.data(), n);
    return true;
  }
  return icrc_result(proto::icrc_finish(p, dma_copy_crc(dst, p.payload.data(), n, p.icrc_partial)));
}

bool Device::place_send_payload(const RecvWqe& r, const Pd* pd, uint32_t off, const proto::Packet& p,
                                uint32_t& placed) {
  const uint32_t n = uint32_t(p.payload.size());
  if (!icrc_pending_) {
    placed = sge_scatter_recv(r, mrs_, pd, off, p.payload.data(), n);
    return true;
  }
  uint32_t c = p.icrc_partial;
  placed = sge_scatter_recv_crc(r, mrs_, pd, off, p.payload.data(), n, c);
  if (placed < n) c = proto::crc32(c, p.payload.data() + placed, n - placed);  // what found no room
  return icrc_result(proto::icrc_finish(p, c));
}

// A pending ICRC checked: a bad one is counted, and the frame is no longer counted as received
// by the QP it found (it never arrived).
bool Device::icrc_result(bool good) {
  icrc_pending_ = false;
  Qp* const qp = std::exchange(icrc_qp_, nullptr);
  if (good) return true;
  ++dev_ctr_.icrc_errors;
  if (qp) {
    --qp->ctr.rcvd_pkts;
    qp->ctr.rx_bytes -= icrc_pending_len_;
  }
  return false;
}

// An XRC target QP's request: the XRC SRQ its XRCETH names, which must be of the QP's domain
// (IBA annex A14), becomes the receive side's SRQ (its PD, queue and CQ) for this packet. The
// packets of one SEND message all go to the SRQ of its first.
bool Device::xrc_target_srq(Qp& qp, const proto::Packet& p) {
  Srq* s = xrc_srq_by_num(p.xrceth.srqn);
  if (!s || s->xrcd() != qp.init.xrcd) return false;
  if (qp.rx.have_recv && s != qp.rx.xrc_srq) return false;
  qp.rx.xrc_srq = s;
  return true;
}

// The rate a CNP left the QP's sender at, for the capture (Link::note):
//   "QP 0x0000e1 cc=dcqcn: CNP 1: rate 40.00 -> 20.00 Gbit/s (cut), alpha 1.00, target 40.00 Gbit/s"
void Device::note_cnp(const Qp& qp, double before_bps) {
  const cc::ReactionPoint& r = *qp.cc;
  const std::string_view algo = cc::algo_name(r.algo());
  const std::string_view rule = r.rate_bps() != before_bps ? cc::rule_name(r.last().rule) : "unchanged";
  char t[200];
  int n = std::snprintf(t, sizeof t, "QP 0x%06x cc=%.*s: CNP %llu: rate %.2f -> %.2f Gbit/s (%.*s)", qp.qpn(),
                        int(algo.size()), algo.data(), (unsigned long long)r.cnps(), before_bps / 1e9,
                        r.rate_bps() / 1e9, int(rule.size()), rule.data());
  if (r.algo() == cc::Algo::Dcqcn && n > 0 && size_t(n) < sizeof t)
    std::snprintf(t + n, sizeof t - size_t(n), ", alpha %.2f, target %.2f Gbit/s", r.alpha(), r.target_bps() / 1e9);
  link_.note(t);
}


// A CNP (opcode 0x81, BECN set, PSN 0, 16 reserved zero bytes) to the QP that sent the
// CE-marked frame `p`, at most one per QP per cnp_interval_ns. A connected QP's CNP goes to
// its peer QP on its own address pair and UDP source port; a UD QP's to the datagram's source
// (DETH source QP, the frame's addresses). The IP header carries cnp_dscp and the device's ECN.
void Device::send_cnp(Qp& qp, const proto::Packet& p) {
  const uint64_t now = step_ns();
  if (now < qp.cnp_next_ns) return;
  proto::Packet c = qp.tmpl;
  if (qp.init.qp_type == QpType::UD) {
    c.eth_src = cfg_.mac;
    c.eth_dst = p.eth_src;
    c.ip_version = p.ip_version;
    c.ip_src = p.ip_dst;
    c.ip_dst = p.ip_src;
    c.dest_qp = p.deth.src_qp;
    c.ttl = param::kDefaultTtl;
  }
  c.vlan_count = 0;
  c.flow_label = 0;
  c.dscp = cfg_.cnp_dscp;
  c.ecn = cfg_.ecn;
  c.opcode = proto::op::kCnp;
  c.solicited = c.migreq = false;
  c.fecn = false;
  c.becn = true;
  c.bth_resv6a = 0;
  c.ack_req = false;
  c.bth_resv7 = 0;
  c.psn = 0;
  c.cnp_reserved = {};
  c.payload = {};
  c.l2_trailer = {};
  if (!tx_.emit(qp, c)) return;  // no transmit buffer now: the next CE-marked frame tries again
  ++qp.ctr.cnp_sent;
  qp.cnp_next_ns = now + cfg_.cnp_interval_ns;
}

}  // namespace uroce::engine
