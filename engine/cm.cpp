// The connection manager's state machine (engine/cm.hpp): the library's calls, the MADs
// received (one handler per message, each a switch over the connection's state), the timers.
#include "engine/cm.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine/roles.hpp"
#include "proto/entropy.hpp"

namespace uroce::engine::cm {

namespace {

// Private data into a message's field at `off` (the caller checked the size; an empty span may
// have no data pointer at all, and memcpy must not see it).
template <size_t N>
void copy_pd(std::array<uint8_t, N>& dst, std::span<const uint8_t> src, size_t off = 0) {
  if (!src.empty() && off < N) std::memcpy(dst.data() + off, src.data(), std::min(N - off, src.size()));
}
template <size_t N>
std::vector<uint8_t> vec(const std::array<uint8_t, N>& a) {
  return std::vector<uint8_t>(a.begin(), a.end());
}

// A DREP: our communication ID, the peer's, the DREQ's transaction ID, private data.
pcm::Mad drep(uint32_t local_id, uint32_t remote_id, uint64_t tid, std::span<const uint8_t> pd = {}) {
  pcm::Drep r;
  r.local_comm_id = local_id;
  r.remote_comm_id = remote_id;
  copy_pd(r.private_data, pd);
  pcm::Mad m{{}, r};
  m.hdr.tid = tid;
  return m;
}

// The GID of a frame's source or destination address (IPv4 as ::ffff:a.b.c.d).
proto::Ip6 gid_of(const proto::Packet& p, bool src) {
  const proto::Ip6& a = src ? p.ip_src : p.ip_dst;
  if (p.ip_version == 6) return a;
  proto::Ip6 g{};
  g[10] = g[11] = 0xFF;
  std::memcpy(g.data() + 12, a.data(), 4);
  return g;
}

// The node GUID a RoCE device derives from its MAC (EUI-64: the U/L bit flipped, ff:fe inserted),
// as the REQ's and REP's local CA GUID.
uint64_t ca_guid(const proto::Mac& m) {
  const uint8_t b[8] = {uint8_t(m[0] ^ 2), m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]};
  uint64_t g = 0;
  for (uint8_t x : b) g = g << 8 | x;
  return g;
}

}  // namespace

std::string_view state_name(State s) {
  static constexpr std::string_view names[] = {
      "IDLE", "LISTEN", "REQ_SENT", "REQ_RCVD", "MRA_REQ_SENT", "MRA_REQ_RCVD", "REP_SENT", "REP_RCVD",
      "MRA_REP_SENT", "MRA_REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD", "TIMEWAIT", "SIDR_REQ_SENT",
      "SIDR_REQ_RCVD"};
  const auto i = size_t(s);
  return i < std::size(names) ? names[i] : "?";
}

std::string_view event_name(EventType t) {
  static constexpr std::string_view names[] = {
      "REQ_RECEIVED", "REP_RECEIVED", "ESTABLISHED", "REJ_RECEIVED", "MRA_RECEIVED", "DREQ_RECEIVED",
      "DISCONNECTED", "TIMEWAIT_EXIT", "SIDR_REQ_RECEIVED", "SIDR_REP_RECEIVED", "TIMEOUT"};
  const auto i = size_t(t);
  return i < std::size(names) ? names[i] : "?";
}

std::string Conn::describe() const {
  char buf[256];
  const int n = std::snprintf(buf, sizeof buf,
                              "cm id 0x%08x remote 0x%08x %s %s sid 0x%016llx qpn 0x%06x->0x%06x psn %u/%u timer %llu "
                              "retries %u",
                              local_id, remote_id, std::string(state_name(state)).c_str(), active ? "active" : "passive",
                              (unsigned long long)service_id, local_qpn, remote_qpn, local_psn, remote_psn,
                              (unsigned long long)timer_ns, retries_left);
  return std::string(buf, size_t(n));
}

std::string CmCounters::text() const {
  static constexpr struct {
    const char* name;
    uint64_t CmCounters::* m;
  } fields[] = {{"mads_rcvd", &CmCounters::mads_rcvd},
                {"mads_sent", &CmCounters::mads_sent},
                {"resent", &CmCounters::resent},
                {"dropped_bad_keys", &CmCounters::dropped_bad_keys},
                {"dropped_bad_mad", &CmCounters::dropped_bad_mad},
                {"dropped_unknown_id", &CmCounters::dropped_unknown_id},
                {"dropped_wrong_state", &CmCounters::dropped_wrong_state},
                {"dropped_duplicate", &CmCounters::dropped_duplicate},
                {"dropped_no_tx", &CmCounters::dropped_no_tx},
                {"dropped_events", &CmCounters::dropped_events},
                {"rej_no_listener", &CmCounters::rej_no_listener},
                {"rej_stale", &CmCounters::rej_stale},
                {"rej_no_resources", &CmCounters::rej_no_resources},
                {"rej_bad_cma", &CmCounters::rej_bad_cma},
                {"rej_mtu", &CmCounters::rej_mtu},
                {"timeouts", &CmCounters::timeouts}};
  std::string s;
  for (const auto& f : fields) {
    if (this->*f.m == 0) continue;
    if (!s.empty()) s += ' ';
    s += f.name;
    s += '=';
    s += std::to_string(this->*f.m);
  }
  return s.empty() ? "(all zero)" : s;
}

namespace {
QpInitAttr gsi_init() {
  QpInitAttr ia;
  ia.qp_type = QpType::UD;
  ia.cap.max_send_wr = 1;  // QP 1 posts nothing: the CM builds its datagrams itself
  ia.cap.max_recv_wr = 1;
  return ia;
}
}  // namespace

Manager::Manager(Device& dev, uint64_t seed) : dev_(dev), rng_(seed), gsi_(dev, pcm::kCmQpn, gsi_init()) {
  gsi_.attrs.qp_state = QpState::Rts;
  gsi_.attrs.qkey = pcm::kGsiQkey;
  gsi_psn_ = rng_.next32() & 0xFFFFFF;
}

// ---- Bookkeeping ------------------------------------------------------------------------------

Conn* Manager::get(uint32_t id) {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second;
}
const Conn* Manager::find(uint32_t id) const {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second;
}

// A new connection object with a fresh communication ID (never 0, never one in use: an ID in
// TimeWait is still in the map).
Conn* Manager::new_conn(State s) {
  if (conns_.size() >= dev_.config().cm_max_conns) return nullptr;
  uint32_t id;
  do id = rng_.next32();
  while (id == 0 || conns_.count(id));
  Conn& c = conns_[id];
  c.local_id = id;
  c.state = s;
  return &c;
}

void Manager::free_conn(uint32_t id) {
  Conn* c = get(id);
  if (!c) return;
  set_state(*c, State::Idle);
  conns_.erase(id);
}

// The connection `id` names, if the frame comes from that connection's peer (a MAD naming our ID
// from another address is not for it).
Conn* Manager::get_from(uint32_t id, const proto::Packet& p) {
  Conn* c = get(id);
  return c && c->state != State::Listen && c->peer.dgid == gid_of(p, true) ? c : nullptr;
}

Conn* Manager::find_remote(uint32_t remote_id, const proto::Ip6& peer_gid) {
  for (auto& [id, c] : conns_)
    if (c.state != State::Listen && c.remote_id == remote_id && c.peer.dgid == peer_gid) return &c;
  return nullptr;
}

Conn* Manager::find_listener(uint64_t service_id) {
  for (auto& [id, c] : conns_)
    if (c.state == State::Listen && c.service_id == service_id) return &c;
  return nullptr;
}

void Manager::push(Event&& e) {
  if (events_.size() >= param::kCmMaxEvents) {
    ++ctr_.dropped_events;
    return;
  }
  events_.push_back(std::move(e));
}

bool Manager::poll_event(Event& e) {
  if (events_.empty()) return false;
  e = std::move(events_.front());
  events_.pop_front();
  return true;
}

Event Manager::event(EventType t, const Conn& c) const {
  Event e;
  e.type = t;
  e.id = c.local_id;
  e.service_id = c.service_id;
  e.remote_qpn = c.remote_qpn;
  e.starting_psn = c.local_psn;
  return e;
}

// Every state change goes through here: it keeps the count of connections waiting for an RTU
// (the implicit-RTU check on the receive path is one integer compare while there are none).
void Manager::set_state(Conn& c, State s) {
  const bool was = c.state == State::RepSent || c.state == State::MraRepRcvd;
  const bool is = s == State::RepSent || s == State::MraRepRcvd;
  if (was && !is) --awaiting_rtu_;
  if (!was && is) ++awaiting_rtu_;
  if (s == State::Established) c.was_established = true;
  c.state = s;
}

// 4.096 us * 2^exp, the exponent capped (a forged MAD cannot park a connection for hours).
uint64_t Manager::cm_time_ns(uint8_t exp) const {
  return 4096ull << std::min<uint8_t>(exp, param::kCmMaxTimeoutExp);
}

void Manager::arm(Conn& c, uint64_t timeout_ns, uint8_t retries) {
  c.timeout_ns = timeout_ns;
  c.retries_left = retries;
  c.timer_ns = dev_.step_ns() + timeout_ns;
}

void Manager::enter_timewait(Conn& c) {
  set_state(c, State::TimeWait);
  c.retries_left = 0;
  c.timer_ns = dev_.step_ns() + dev_.config().cm_timewait_ns;
}

// ---- Sending ------------------------------------------------------------------------------------

// One MAD as a UD SEND_ONLY from QP 1 to the peer's QP 1. `keep`: the connection that may have
// to resend it (its timer, or a duplicate of the message it answers).
bool Manager::send(const Peer& to, const proto::Ip6& from, const pcm::Mad& m, Conn* keep) {
  std::array<uint8_t, pcm::kMadSize> mad{};
  if (pcm::emit(m, mad) != pcm::kMadSize) return false;
  if (keep) {
    keep->last = mad;
    keep->have_last = true;
  }
  proto::Packet p;
  const bool local = dev_.is_local(to.dgid);
  qp_ops::address(p, dev_, from, to);
  if (local) p.eth_dst = dev_.config().mac;
  p.ipv4_flags_frag = 0x4000;
  p.udp_sport = proto::udp_source_port(pcm::kCmQpn, pcm::kCmQpn);
  p.opcode = proto::op::kUd | proto::op::kSendOnly;
  p.pkey = pcm::kGsiPkey;
  p.dest_qp = pcm::kCmQpn;
  p.psn = gsi_psn_;
  gsi_psn_ = (gsi_psn_ + 1) & 0xFFFFFF;
  p.deth.qkey = pcm::kGsiQkey;
  p.deth.src_qp = pcm::kCmQpn;
  p.payload = {mad.data(), mad.size()};
  if (!dev_.tx().emit(gsi_, p, local)) {
    ++ctr_.dropped_no_tx;  // lost as on a wire: the timer (or the peer's) resends
    return false;
  }
  ++ctr_.mads_sent;
  return true;
}

bool Manager::resend(Conn& c) {
  if (!c.have_last) return false;
  pcm::Mad m;
  if (pcm::parse(c.last, m) != pcm::Error::Ok) return false;
  ++ctr_.resent;
  return send(c.peer, c.local_gid, m, nullptr);
}

// A stateless answer (REJ to an unknown service, DREP to an unknown DREQ) to the frame's sender.
void Manager::reply_to(const proto::Packet& p, const pcm::Mad& m) {
  Peer to;
  to.dgid = gid_of(p, true);
  to.dmac = p.eth_src;
  send(to, gid_of(p, false), m, nullptr);
}

void Manager::send_rej(Conn& c, uint8_t msg, uint16_t reason, std::span<const uint8_t> pd) {
  pcm::Rej r;
  r.local_comm_id = c.local_id;
  r.remote_comm_id = c.remote_id;
  r.message_rejected = msg;
  r.reason = reason;
  copy_pd(r.private_data, pd);
  pcm::Mad m{{}, r};
  m.hdr.tid = c.tid;
  send(c.peer, c.local_gid, m, nullptr);
}

// ---- The library's calls ------------------------------------------------------------------------

// The source GID exists and is of the destination's family (IPv4 to IPv4, IPv6 to IPv6).
bool Manager::same_family(const Peer& to) const {
  const proto::Ip6* src = dev_.sgid(to.sgid_index);
  return src && gid_is_v4mapped(*src) == gid_is_v4mapped(to.dgid);
}

int Manager::listen(uint64_t service_id, uint32_t* id) {
  if (find_listener(service_id)) return EADDRINUSE;
  Conn* c = new_conn(State::Listen);
  if (!c) return ENOMEM;
  c->service_id = service_id;
  *id = c->local_id;
  return 0;
}

int Manager::connect(const ConnectParams& p, uint32_t* id) {
  const size_t room = pcm::ReqView<uint8_t>::kPrivateDataSize - (p.cma ? pcm::CmaHeaderView<uint8_t>::kSize : 0);
  if (p.private_data.size() > room || !same_family(p.peer) || p.qpn == 0 || p.qpn > 0xFFFFFF ||
      p.max_retries > 15 || p.response_timeout > 31 || p.local_response_timeout > 31)
    return EINVAL;
  // TimeWait: a QP number still reserved by a finished connection is not used again yet.
  for (const auto& [cid, c] : conns_)
    if (c.state == State::TimeWait && c.local_qpn == p.qpn) return EBUSY;
  Conn* c = new_conn(State::ReqSent);
  if (!c) return ENOMEM;
  c->active = true;
  c->service_id = p.service_id;
  c->peer = p.peer;
  c->local_gid = *dev_.sgid(p.peer.sgid_index);
  c->local_qpn = p.qpn;
  c->remote_psn = p.starting_psn;
  c->responder_resources = p.responder_resources;
  c->initiator_depth = p.initiator_depth;
  c->retry_count = p.retry_count;
  c->rnr_retry_count = p.rnr_retry_count;
  c->path_mtu = p.path_mtu;
  c->max_retries = p.max_retries;
  c->tid = uint64_t(rng_.next32()) << 32 | c->local_id;  // echoed by the REP and our RTU

  pcm::Req r;
  r.local_comm_id = c->local_id;
  r.service_id = p.service_id;
  r.local_ca_guid = ca_guid(dev_.config().mac);
  r.local_qpn = p.qpn;
  r.responder_resources = p.responder_resources;
  r.initiator_depth = p.initiator_depth;
  r.remote_cm_response_timeout = p.response_timeout;
  r.transport_service_type = p.uc ? 1 : 0;
  r.starting_psn = p.starting_psn & 0xFFFFFF;
  r.local_cm_response_timeout = p.local_response_timeout;
  r.retry_count = p.retry_count & 7;
  r.path_mtu = uint8_t(p.path_mtu);
  r.rnr_retry_count = p.rnr_retry_count & 7;
  r.max_cm_retries = p.max_retries;
  r.srq = p.srq;
  r.primary.local_gid = c->local_gid;
  r.primary.remote_gid = p.peer.dgid;
  r.primary.flow_label = p.peer.flow_label & 0xFFFFF;
  r.primary.traffic_class = p.peer.traffic_class;
  r.primary.hop_limit = p.peer.hop_limit;
  r.primary.local_ack_timeout = p.local_ack_timeout & 0x1F;
  r.alternate = pcm::Path{0, 0};
  size_t off = 0;
  if (p.cma) {
    pcm::emit_cma_header(*p.cma, r.private_data);
    off = pcm::CmaHeaderView<uint8_t>::kSize;
  }
  copy_pd(r.private_data, p.private_data, off);
  pcm::Mad m{{}, r};
  m.hdr.tid = c->tid;
  send(c->peer, c->local_gid, m, c);  // a lost (or unsent) REQ is resent by the timer
  arm(*c, cm_time_ns(p.response_timeout), p.max_retries);
  *id = c->local_id;
  return 0;
}

int Manager::accept(uint32_t id, const AcceptParams& p) {
  Conn* c = get(id);
  if (!c || (c->state != State::ReqRcvd && c->state != State::MraReqSent)) return EINVAL;
  if (p.private_data.size() > pcm::RepView<uint8_t>::kPrivateDataSize || p.qpn == 0 || p.qpn > 0xFFFFFF) return EINVAL;
  c->local_qpn = p.qpn;
  c->remote_psn = p.starting_psn & 0xFFFFFF;
  c->responder_resources = p.responder_resources;
  c->initiator_depth = p.initiator_depth;
  pcm::Rep r;
  r.local_comm_id = c->local_id;
  r.remote_comm_id = c->remote_id;
  r.local_qpn = p.qpn;
  r.starting_psn = c->remote_psn;
  r.responder_resources = p.responder_resources;
  r.initiator_depth = p.initiator_depth;
  r.target_ack_delay = p.target_ack_delay & 0x1F;
  r.rnr_retry_count = p.rnr_retry_count & 7;
  r.srq = p.srq;
  r.local_ca_guid = ca_guid(dev_.config().mac);
  copy_pd(r.private_data, p.private_data);
  pcm::Mad m{{}, r};
  m.hdr.tid = c->tid;
  set_state(*c, State::RepSent);
  send(c->peer, c->local_gid, m, c);
  arm(*c, c->timeout_ns, c->max_retries);
  return 0;
}

int Manager::reject(uint32_t id, uint16_t reason, std::span<const uint8_t> pd) {
  Conn* c = get(id);
  if (!c || pd.size() > pcm::RejView<uint8_t>::kPrivateDataSize) return EINVAL;
  if (c->state == State::ReqRcvd || c->state == State::MraReqSent) send_rej(*c, pcm::kMsgReq, reason, pd);
  else if (c->state == State::RepRcvd) send_rej(*c, pcm::kMsgRep, reason, pd);
  else return EINVAL;
  free_conn(id);
  return 0;
}

int Manager::establish(uint32_t id, std::span<const uint8_t> pd) {
  Conn* c = get(id);
  if (!c || c->state != State::RepRcvd || pd.size() > pcm::RtuView<uint8_t>::kPrivateDataSize) return EINVAL;
  pcm::Rtu r;
  r.local_comm_id = c->local_id;
  r.remote_comm_id = c->remote_id;
  copy_pd(r.private_data, pd);
  pcm::Mad m{{}, r};
  m.hdr.tid = c->tid;
  set_state(*c, State::Established);
  c->timer_ns = 0;
  send(c->peer, c->local_gid, m, c);  // kept: a duplicate REP (our RTU was lost) gets it again
  return 0;
}

int Manager::disconnect(uint32_t id, std::span<const uint8_t> pd) {
  Conn* c = get(id);
  if (!c) return EINVAL;
  if (c->state == State::Established) {
    if (pd.size() > pcm::DreqView<uint8_t>::kPrivateDataSize) return EINVAL;
    pcm::Dreq r;
    r.local_comm_id = c->local_id;
    r.remote_comm_id = c->remote_id;
    r.remote_qpn = c->remote_qpn;
    copy_pd(r.private_data, pd);
    pcm::Mad m{{}, r};
    c->tid = uint64_t(rng_.next32()) << 32 | c->local_id;  // a new exchange: the DREP echoes it
    m.hdr.tid = c->tid;
    set_state(*c, State::DreqSent);
    send(c->peer, c->local_gid, m, c);
    arm(*c, c->timeout_ns, c->max_retries);
    return 0;
  }
  if (c->state == State::DreqRcvd) {
    if (pd.size() > pcm::DrepView<uint8_t>::kPrivateDataSize) return EINVAL;
    send(c->peer, c->local_gid, drep(c->local_id, c->remote_id, c->tid, pd), c);  // kept: a duplicate DREQ in TimeWait gets it again
    enter_timewait(*c);
    return 0;
  }
  return EINVAL;
}

int Manager::sidr_request(const SidrParams& p, uint32_t* id) {
  const size_t room = pcm::SidrReqView<uint8_t>::kPrivateDataSize - (p.cma ? pcm::CmaHeaderView<uint8_t>::kSize : 0);
  if (p.private_data.size() > room || !same_family(p.peer) || p.max_retries > 15) return EINVAL;
  Conn* c = new_conn(State::SidrReqSent);
  if (!c) return ENOMEM;
  c->active = true;
  c->service_id = p.service_id;
  c->peer = p.peer;
  c->local_gid = *dev_.sgid(p.peer.sgid_index);
  c->max_retries = p.max_retries;
  c->tid = uint64_t(rng_.next32()) << 32 | c->local_id;
  pcm::SidrReq r;
  r.request_id = c->local_id;
  r.service_id = p.service_id;
  size_t off = 0;
  if (p.cma) {
    pcm::emit_cma_header(*p.cma, r.private_data);
    off = pcm::CmaHeaderView<uint8_t>::kSize;
  }
  copy_pd(r.private_data, p.private_data, off);
  pcm::Mad m{{}, r};
  m.hdr.tid = c->tid;
  send(c->peer, c->local_gid, m, c);
  arm(*c, cm_time_ns(p.response_timeout), p.max_retries);
  *id = c->local_id;
  return 0;
}

int Manager::sidr_reply(uint32_t id, uint8_t status, uint32_t qpn, uint32_t qkey, std::span<const uint8_t> pd) {
  Conn* c = get(id);
  if (!c || c->state != State::SidrReqRcvd || pd.size() > pcm::SidrRepView<uint8_t>::kPrivateDataSize) return EINVAL;
  pcm::SidrRep r;
  r.request_id = c->remote_id;
  r.status = status;
  r.qpn = qpn & 0xFFFFFF;
  r.service_id = c->service_id;
  r.qkey = qkey;
  copy_pd(r.private_data, pd);
  pcm::Mad m{{}, r};
  m.hdr.tid = c->tid;
  send(c->peer, c->local_gid, m, nullptr);
  free_conn(id);
  return 0;
}

int Manager::destroy(uint32_t id) {
  if (!get(id)) return EINVAL;
  free_conn(id);
  return 0;
}

size_t Manager::shutdown() {
  std::vector<uint32_t> ids;
  for (const auto& [id, c] : conns_) ids.push_back(id);
  for (uint32_t id : ids) {
    const Conn* c = get(id);
    if (!c) continue;
    switch (c->state) {
      case State::Established:
      case State::DreqRcvd:
        disconnect(id);
        break;
      case State::ReqRcvd:
      case State::MraReqSent:
      case State::RepRcvd:
        reject(id, pcm::rej::kConsumerDefined);
        break;
      case State::SidrReqRcvd:
        sidr_reply(id, pcm::sidr::kReject, 0, 0, {});
        break;
      default:  // listeners, requests of ours in flight, DREQ_SENT, TimeWait: nothing to say
        break;
    }
  }
  return disconnecting();
}

size_t Manager::disconnecting() const {
  size_t n = 0;
  for (const auto& [id, c] : conns_) n += c.state == State::DreqSent;
  return n;
}

void Manager::qp_data(uint32_t qpn) {
  for (auto& [id, c] : conns_) {
    if ((c.state == State::RepSent || c.state == State::MraRepRcvd) && c.local_qpn == qpn) {
      set_state(c, State::Established);
      c.timer_ns = 0;
      push(event(EventType::Established, c));
      return;
    }
  }
}

// ---- Receiving ----------------------------------------------------------------------------------

// A frame for QP 1: it must be a UD SEND_ONLY with the GSI's P_Key and Q_Key (rxe checks the
// same), and its payload a CM MAD.
void Manager::on_frame(const proto::Packet& p) {
  if (!pcm::is_gsi_send(p.opcode, p.dest_qp) || (p.pkey & 0x7FFF) != (pcm::kGsiPkey & 0x7FFF) ||
      p.deth.qkey != pcm::kGsiQkey) {
    ++ctr_.dropped_bad_keys;
    return;
  }
  ++gsi_.ctr.rcvd_pkts;
  gsi_.ctr.rx_bytes += p.payload.size();
  pcm::Mad m;
  if (pcm::parse(p.payload, m) != pcm::Error::Ok) {
    ++ctr_.dropped_bad_mad;
    return;
  }
  ++ctr_.mads_rcvd;
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, pcm::Req>) on_req(p, m.hdr, msg);
        else if constexpr (std::is_same_v<T, pcm::Mra>) on_mra(p, msg);
        else if constexpr (std::is_same_v<T, pcm::Rej>) on_rej(p, msg);
        else if constexpr (std::is_same_v<T, pcm::Rep>) on_rep(p, m.hdr, msg);
        else if constexpr (std::is_same_v<T, pcm::Rtu>) on_rtu(p, msg);
        else if constexpr (std::is_same_v<T, pcm::Dreq>) on_dreq(p, m.hdr, msg);
        else if constexpr (std::is_same_v<T, pcm::Drep>) on_drep(p, msg);
        else if constexpr (std::is_same_v<T, pcm::SidrReq>) on_sidr_req(p, m.hdr, msg);
        else if constexpr (std::is_same_v<T, pcm::SidrRep>) on_sidr_rep(p, msg);
      },
      m.msg);
}

void Manager::on_req(const proto::Packet& p, const pcm::MadHeader& h, const pcm::Req& m) {
  const proto::Ip6 peer_gid = gid_of(p, true);
  // A duplicate: our answer was lost, or the peer's timer is shorter than our application.
  if (Conn* c = find_remote(m.local_comm_id, peer_gid); c && !c->active) {
    switch (c->state) {
      case State::ReqRcvd: {  // not accepted yet: tell the peer to wait longer
        pcm::Mra a;
        a.local_comm_id = c->local_id;
        a.remote_comm_id = c->remote_id;
        a.message_mraed = pcm::kMsgReq;
        a.service_timeout = dev_.config().cm_mra_timeout;
        pcm::Mad out{{}, a};
        out.hdr.tid = c->tid;
        set_state(*c, State::MraReqSent);
        send(c->peer, c->local_gid, out, c);
        return;
      }
      case State::MraReqSent:
      case State::RepSent:
      case State::MraRepRcvd:
        resend(*c);  // the MRA or the REP again
        return;
      default:
        ++ctr_.dropped_duplicate;
        return;
    }
  }
  // Stale: a live connection (or one in TimeWait) already joins this peer's QP to one of ours.
  for (auto& [id, c] : conns_) {
    if (c.state != State::Listen && c.state != State::SidrReqRcvd && c.state != State::SidrReqSent &&
        c.remote_qpn == m.local_qpn && c.peer.dgid == peer_gid) {
      pcm::Rej r;
      r.remote_comm_id = m.local_comm_id;
      r.message_rejected = pcm::kMsgReq;
      r.reason = pcm::rej::kStaleConn;
      pcm::Mad out{{}, r};
      out.hdr.tid = h.tid;
      reply_to(p, out);
      ++ctr_.rej_stale;
      return;
    }
  }
  auto reject_now = [&](uint16_t reason, uint64_t& counter) {
    pcm::Rej r;
    r.remote_comm_id = m.local_comm_id;
    r.message_rejected = pcm::kMsgReq;
    r.reason = reason;
    pcm::Mad out{{}, r};
    out.hdr.tid = h.tid;
    reply_to(p, out);
    ++counter;
  };
  Conn* l = find_listener(m.service_id);
  if (!l) return reject_now(pcm::rej::kInvalidServiceId, ctr_.rej_no_listener);
  Event e;
  if (pcm::is_ip_service_id(m.service_id)) {
    // rdma_cm's IP header must be there and well formed (the kernel's cma_save_ip_info).
    if (pcm::parse_cma_header(m.private_data, e.cma) != pcm::CmaError::Ok)
      return reject_now(pcm::rej::kConsumerDefined, ctr_.rej_bad_cma);
    e.has_cma = true;
  }
  // Both ends of an RC or UC connection must use the same path MTU (a first or middle packet
  // carries exactly that many bytes), and a REP has no field to lower it: a REQ asking for more
  // than this port carries (config key mtu) is refused now, not accepted into a connection
  // whose larger messages would be lost.
  if (m.path_mtu > uint8_t(dev_.config().port_mtu)) return reject_now(pcm::rej::kInvalidMtu, ctr_.rej_mtu);
  const uint32_t listen_id = l->local_id;
  Conn* c = new_conn(State::ReqRcvd);
  if (!c) return reject_now(pcm::rej::kNoResources, ctr_.rej_no_resources);
  c->remote_id = m.local_comm_id;
  c->service_id = m.service_id;
  c->tid = h.tid;
  c->peer.dgid = peer_gid;
  c->peer.dmac = p.eth_src;
  c->peer.hop_limit = m.primary.hop_limit ? m.primary.hop_limit : param::kDefaultTtl;
  c->peer.traffic_class = m.primary.traffic_class;
  c->local_gid = gid_of(p, false);
  c->remote_qpn = m.local_qpn;
  c->local_psn = m.starting_psn;  // the REQ announces the PSN *we* send from
  c->responder_resources = m.initiator_depth;  // what the peer issues is what we must accept
  c->initiator_depth = m.responder_resources;
  c->retry_count = m.retry_count;
  c->rnr_retry_count = m.rnr_retry_count;
  c->path_mtu = m.path_mtu >= 1 && m.path_mtu <= 5 ? Mtu(m.path_mtu) : Mtu::M1024;
  // We wait for the active side's answers (RTU, DREP) as long as it said it may take.
  c->timeout_ns = cm_time_ns(m.local_cm_response_timeout);
  c->max_retries = m.max_cm_retries;
  e.type = EventType::ReqReceived;
  e.id = c->local_id;
  e.listen_id = listen_id;
  e.service_id = m.service_id;
  e.remote_qpn = m.local_qpn;
  e.starting_psn = m.starting_psn;
  e.private_data = vec(m.private_data);
  push(std::move(e));
}

void Manager::on_mra(const proto::Packet& p, const pcm::Mra& m) {
  Conn* c = get_from(m.remote_comm_id, p);
  if (!c) {
    ++ctr_.dropped_unknown_id;
    return;
  }
  // The peer will answer, later: wait its service timeout on top of ours, resend no more.
  const uint64_t wait = cm_time_ns(m.service_timeout) + c->timeout_ns;
  if (m.message_mraed == pcm::kMsgReq && c->state == State::ReqSent) set_state(*c, State::MraReqRcvd);
  else if (m.message_mraed == pcm::kMsgRep && c->state == State::RepSent) set_state(*c, State::MraRepRcvd);
  else if (!(c->state == State::MraReqRcvd && m.message_mraed == pcm::kMsgReq) &&
           !(c->state == State::MraRepRcvd && m.message_mraed == pcm::kMsgRep)) {
    ++ctr_.dropped_wrong_state;
    return;
  }
  c->timer_ns = dev_.step_ns() + wait;
  c->retries_left = 0;
  push(event(EventType::MraReceived, *c));
}

void Manager::on_rej(const proto::Packet& p, const pcm::Rej& m) {
  Conn* c = get_from(m.remote_comm_id, p);
  if (!c) {
    ++ctr_.dropped_unknown_id;
    return;
  }
  Event e = event(EventType::RejReceived, *c);
  e.reason = m.reason;
  e.private_data = vec(m.private_data);
  switch (c->state) {
    case State::ReqSent:
    case State::MraReqRcvd:
    case State::ReqRcvd:
    case State::MraReqSent:
      // Refused before the peer knew our QP as connected: the id is done (the kernel's
      // cm_reset_to_idle), unless the peer says our QP looks stale to it (then TimeWait).
      push(std::move(e));
      if (m.reason == pcm::rej::kStaleConn) enter_timewait(*c);
      else free_conn(c->local_id);
      return;
    case State::RepSent:
    case State::MraRepRcvd:
    case State::RepRcvd:
    case State::Established:
      push(std::move(e));
      // The peer may still send to our QP: keep its number reserved for a while.
      enter_timewait(*c);
      return;
    default:
      ++ctr_.dropped_wrong_state;
  }
}

void Manager::on_rep(const proto::Packet& p, const pcm::MadHeader&, const pcm::Rep& m) {
  Conn* c = get_from(m.remote_comm_id, p);
  if (!c || !c->active) {
    ++ctr_.dropped_unknown_id;
    return;
  }
  switch (c->state) {
    case State::ReqSent:
    case State::MraReqRcvd: {
      c->remote_id = m.local_comm_id;
      c->remote_qpn = m.local_qpn;
      c->local_psn = m.starting_psn;  // the REP announces the PSN *we* send from
      c->timer_ns = 0;
      // Our RTU and DREQ wait for answers as long as our REQ said the peer may take.
      set_state(*c, State::RepRcvd);
      Event e = event(EventType::RepReceived, *c);
      e.private_data = vec(m.private_data);
      push(std::move(e));
      return;
    }
    case State::Established:
      if (m.local_comm_id == c->remote_id) {
        resend(*c);  // our RTU was lost: send it again
        return;
      }
      ++ctr_.dropped_wrong_state;
      return;
    case State::RepRcvd:
      ++ctr_.dropped_duplicate;  // the application has it; establish() answers
      return;
    default:
      ++ctr_.dropped_wrong_state;
  }
}

void Manager::on_rtu(const proto::Packet& p, const pcm::Rtu& m) {
  Conn* c = get_from(m.remote_comm_id, p);
  if (!c || c->remote_id != m.local_comm_id) {
    ++ctr_.dropped_unknown_id;
    return;
  }
  if (c->state != State::RepSent && c->state != State::MraRepRcvd) {
    ++ctr_.dropped_duplicate;  // already established (a duplicate RTU, or data came first)
    return;
  }
  set_state(*c, State::Established);
  c->timer_ns = 0;
  Event e = event(EventType::Established, *c);
  e.private_data = vec(m.private_data);
  push(std::move(e));
}

void Manager::on_dreq(const proto::Packet& p, const pcm::MadHeader& h, const pcm::Dreq& m) {
  Conn* c = get_from(m.remote_comm_id, p);
  if (!c || c->remote_id != m.local_comm_id) {
    // Nothing to disconnect (the connection is long gone): answer anyway, so the peer's
    // DREQ_SENT ends now rather than after all its retries (the kernel does the same).
    reply_to(p, drep(m.remote_comm_id, m.local_comm_id, h.tid));
    ++ctr_.dropped_unknown_id;
    return;
  }
  switch (c->state) {
    case State::RepSent:
    case State::MraRepRcvd:
    case State::Established: {
      c->tid = h.tid;
      c->timer_ns = 0;
      set_state(*c, State::DreqRcvd);
      Event e = event(EventType::DreqReceived, *c);
      e.private_data = vec(m.private_data);
      push(std::move(e));
      return;
    }
    case State::DreqSent: {  // both sides disconnect at once: answer, and we are done too
      send(c->peer, c->local_gid, drep(c->local_id, c->remote_id, h.tid), c);
      enter_timewait(*c);
      push(event(EventType::Disconnected, *c));
      return;
    }
    case State::TimeWait: {  // our DREP was lost (or our DREQ crossed theirs): answer again
      ++ctr_.resent;
      send(c->peer, c->local_gid, drep(c->local_id, c->remote_id, h.tid), nullptr);
      return;
    }
    default:
      ++ctr_.dropped_wrong_state;
  }
}

void Manager::on_drep(const proto::Packet& p, const pcm::Drep& m) {
  Conn* c = get_from(m.remote_comm_id, p);
  if (!c || c->remote_id != m.local_comm_id) {
    ++ctr_.dropped_unknown_id;
    return;
  }
  if (c->state != State::DreqSent) {
    ++ctr_.dropped_duplicate;
    return;
  }
  enter_timewait(*c);
  push(event(EventType::Disconnected, *c));
}

void Manager::on_sidr_req(const proto::Packet& p, const pcm::MadHeader& h, const pcm::SidrReq& m) {
  const proto::Ip6 peer_gid = gid_of(p, true);
  if (Conn* c = find_remote(m.request_id, peer_gid); c && c->state == State::SidrReqRcvd) {
    ++ctr_.dropped_duplicate;  // the application has it; sidr_reply() answers
    return;
  }
  auto answer_now = [&](uint8_t status) {
    pcm::SidrRep r;
    r.request_id = m.request_id;
    r.status = status;
    r.service_id = m.service_id;
    pcm::Mad out{{}, r};
    out.hdr.tid = h.tid;
    reply_to(p, out);
  };
  Conn* l = find_listener(m.service_id);
  if (!l) {
    ++ctr_.rej_no_listener;
    return answer_now(pcm::sidr::kUnsupported);
  }
  Event e;
  if (pcm::is_ip_service_id(m.service_id)) {
    if (pcm::parse_cma_header(m.private_data, e.cma) != pcm::CmaError::Ok) {
      ++ctr_.rej_bad_cma;
      return answer_now(pcm::sidr::kReject);
    }
    e.has_cma = true;
  }
  const uint32_t listen_id = l->local_id;
  Conn* c = new_conn(State::SidrReqRcvd);
  if (!c) {
    ++ctr_.rej_no_resources;
    return answer_now(pcm::sidr::kNoQp);
  }
  c->remote_id = m.request_id;
  c->service_id = m.service_id;
  c->tid = h.tid;
  c->peer.dgid = peer_gid;
  c->peer.dmac = p.eth_src;
  c->local_gid = gid_of(p, false);
  e.type = EventType::SidrReqReceived;
  e.id = c->local_id;
  e.listen_id = listen_id;
  e.service_id = m.service_id;
  e.private_data = vec(m.private_data);
  push(std::move(e));
}

void Manager::on_sidr_rep(const proto::Packet& p, const pcm::SidrRep& m) {
  Conn* c = get_from(m.request_id, p);
  if (!c || c->state != State::SidrReqSent) {
    ++ctr_.dropped_unknown_id;
    return;
  }
  Event e = event(EventType::SidrRepReceived, *c);
  e.status = m.status;
  e.remote_qpn = m.qpn;
  e.qkey = m.qkey;
  e.private_data = vec(m.private_data);
  push(std::move(e));
  free_conn(c->local_id);
}

// ---- Timers -------------------------------------------------------------------------------------

// Resend what is unanswered, give up after the retries, end TimeWait.
bool Manager::progress() {
  const uint64_t now = dev_.step_ns();
  bool did = false;
  std::vector<uint32_t> gone;
  for (auto& [id, c] : conns_) {
    if (c.timer_ns == 0 || now < c.timer_ns) continue;
    did = true;
    if (c.state == State::TimeWait) {
      c.timer_ns = 0;
      if (c.was_established) push(event(EventType::TimewaitExit, c));
      gone.push_back(id);
      continue;
    }
    if (c.retries_left > 0 && c.state != State::MraReqRcvd && c.state != State::MraRepRcvd) {
      --c.retries_left;
      c.timer_ns = now + c.timeout_ns;
      resend(c);
      continue;
    }
    // Out of retries: give up.
    ++ctr_.timeouts;
    Event e = event(EventType::Timeout, c);
    switch (c.state) {
      case State::ReqSent:
      case State::MraReqRcvd:
        e.timed_out = pcm::Attr::Req;
        send_rej(c, pcm::kMsgReq, pcm::rej::kTimeout);
        enter_timewait(c);
        break;
      case State::RepSent:
      case State::MraRepRcvd:
        e.timed_out = pcm::Attr::Rep;
        send_rej(c, pcm::kMsgRep, pcm::rej::kTimeout);
        enter_timewait(c);
        break;
      case State::DreqSent:  // the peer is gone: we are disconnected all the same
        e.timed_out = pcm::Attr::Dreq;
        enter_timewait(c);
        push(std::move(e));
        e = event(EventType::Disconnected, c);
        break;
      case State::SidrReqSent:
        e.timed_out = pcm::Attr::SidrReq;
        gone.push_back(id);
        break;
      default:  // no timer runs in other states
        c.timer_ns = 0;
        continue;
    }
    push(std::move(e));
  }
  for (uint32_t id : gone) free_conn(id);
  return did;
}

}  // namespace uroce::engine::cm
