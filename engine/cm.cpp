// The connection manager (engine/cm.hpp): names and counters, the connection objects'
// bookkeeping, sending MADs, and the timers (resends, giving up, the end of TimeWait). The
// library's calls are in cm_calls.cpp, the MADs received in cm_receive.cpp.
#include "engine/cm.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine/cm_util.hpp"
#include "engine/roles.hpp"
#include "proto/entropy.hpp"

namespace uroce::engine::cm {

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
  do id = dev_.tag_id(rng_.next32());
  while (id == 0 || conns_.count(id));
  Conn& c = conns_[id];
  c.local_id = id;
  c.state = s;
  return &c;
}

void Manager::free_conn(uint32_t id) {
  Conn* c = get(id);
  if (!c) return;
  if (c->state == State::Listen) {
    if (auto it = listeners_.find(c->service_id); it != listeners_.end() && it->second == id) listeners_.erase(it);
    if (on_listen) on_listen(c->service_id, false);
  }
  set_state(*c, State::Idle);
  unindex_peer(*c);
  conns_.erase(id);
}

size_t Manager::PeerKeyHash::operator()(const PeerKey& k) const {
  uint64_t h = k.v * 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < k.gid.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, k.gid.data() + i, 8);
    h = (h ^ w) * 0xC2B2AE3D27D4EB4Full;
  }
  return size_t(h ^ (h >> 29));
}

void Manager::index_peer(Conn& c) {
  unindex_peer(c);
  c.indexed = true;
  c.idx_remote_id = c.remote_id;
  c.idx_remote_qpn = c.remote_qpn;
  by_remote_id_.emplace(PeerKey{c.remote_id, c.peer.dgid}, c.local_id);
  if (c.remote_qpn) by_remote_qpn_.emplace(PeerKey{c.remote_qpn, c.peer.dgid}, c.local_id);
}

void Manager::unindex_peer(Conn& c) {
  if (!c.indexed) return;
  c.indexed = false;
  auto drop = [&](auto& index, uint32_t v) {
    auto [b, e] = index.equal_range(PeerKey{v, c.peer.dgid});
    for (auto it = b; it != e; ++it)
      if (it->second == c.local_id) {
        index.erase(it);
        return;
      }
  };
  drop(by_remote_id_, c.idx_remote_id);
  if (c.idx_remote_qpn) drop(by_remote_qpn_, c.idx_remote_qpn);
}

void Manager::set_timer(Conn& c, uint64_t due_ns) {
  c.timer_ns = due_ns;
  if (due_ns) timers_.push({due_ns, c.local_id});
}

// The connection `id` names, if the frame comes from that connection's peer (a MAD naming our ID
// from another address is not for it).
Conn* Manager::get_from(uint32_t id, const proto::Packet& p) {
  Conn* c = get(id);
  return c && c->state != State::Listen && c->peer.dgid == gid_of(p, true) ? c : nullptr;
}

// The same, for a message that names both IDs (ours, then the peer's as we know it); nullptr
// (counted: dropped_unknown_id) when there is no such connection.
Conn* Manager::get_pair(uint32_t id, uint32_t remote_id, const proto::Packet& p) {
  Conn* c = get_from(id, p);
  if (c && c->remote_id == remote_id) return c;
  ++ctr_.dropped_unknown_id;
  return nullptr;
}

Conn* Manager::find_remote(uint32_t remote_id, const proto::Ip6& peer_gid) {
  auto [b, e] = by_remote_id_.equal_range(PeerKey{remote_id, peer_gid});
  for (auto it = b; it != e; ++it)
    if (Conn* c = get(it->second); c && c->state != State::Listen) return c;
  return nullptr;
}

// A connection, live or in TimeWait, that already joins the peer's QP `remote_qpn` to one of
// ours (a REQ naming it again is stale).
Conn* Manager::find_stale(uint32_t remote_qpn, const proto::Ip6& peer_gid) {
  auto [b, e] = by_remote_qpn_.equal_range(PeerKey{remote_qpn, peer_gid});
  for (auto it = b; it != e; ++it)
    if (Conn* c = get(it->second);
        c && c->state != State::Listen && c->state != State::SidrReqRcvd && c->state != State::SidrReqSent)
      return c;
  return nullptr;
}

Conn* Manager::find_listener(uint64_t service_id) {
  auto it = listeners_.find(service_id);
  Conn* c = it == listeners_.end() ? nullptr : get(it->second);
  return c && c->state == State::Listen ? c : nullptr;
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
  if (was && !is) {
    --awaiting_rtu_;
    if (auto it = rtu_by_qpn_.find(c.local_qpn); it != rtu_by_qpn_.end() && it->second == c.local_id)
      rtu_by_qpn_.erase(it);
  }
  if (!was && is) {
    ++awaiting_rtu_;
    rtu_by_qpn_[c.local_qpn] = c.local_id;
  }
  const bool tw = c.state == State::TimeWait, to_tw = s == State::TimeWait;
  if (tw && !to_tw) {
    if (auto it = timewait_qpns_.find(c.local_qpn); it != timewait_qpns_.end() && --it->second == 0)
      timewait_qpns_.erase(it);
  }
  if (!tw && to_tw) ++timewait_qpns_[c.local_qpn];
  if (s == State::Established) c.was_established = true;
  const bool owed = owes_goodbye(s), was_owed = owes_goodbye(c.state);
  c.state = s;
  if (owed != was_owed && on_goodbye_owed) on_goodbye_owed(c.local_id, owed);
}

// 4.096 us * 2^exp, the exponent capped (a forged MAD cannot park a connection for hours).
uint64_t Manager::cm_time_ns(uint8_t exp) const {
  return 4096ull << std::min<uint8_t>(exp, param::kCmMaxTimeoutExp);
}

void Manager::arm(Conn& c, uint64_t timeout_ns, uint8_t retries) {
  c.timeout_ns = timeout_ns;
  c.retries_left = retries;
  set_timer(c, dev_.step_ns() + timeout_ns);
}

void Manager::enter_timewait(Conn& c) {
  set_state(c, State::TimeWait);
  c.retries_left = 0;
  set_timer(c, dev_.step_ns() + dev_.config().cm_timewait_ns);
}

// ---- Sending ------------------------------------------------------------------------------------

// The frame of one MAD: a UD SEND_ONLY from QP 1 to the peer's QP 1.
void Manager::mad_packet(const Peer& to, const proto::Ip6& from, std::span<const uint8_t> mad, proto::Packet& p) {
  qp_ops::address(p, dev_, from, to);
  if (dev_.is_local(to.dgid)) p.eth_dst = dev_.config().mac;
  p.ipv4_flags_frag = 0x4000;
  p.udp_sport = proto::udp_source_port(pcm::kCmQpn, pcm::kCmQpn);
  p.opcode = proto::op::kUd | proto::op::kSendOnly;
  p.pkey = pcm::kGsiPkey;
  p.dest_qp = pcm::kCmQpn;
  p.psn = gsi_psn_;
  gsi_psn_ = (gsi_psn_ + 1) & 0xFFFFFF;
  p.deth.qkey = pcm::kGsiQkey;
  p.deth.src_qp = pcm::kCmQpn;
  p.payload = mad;
}

std::vector<uint8_t> Manager::goodbye_frame(uint32_t id) {
  const Conn* c = find(id);
  if (!c || !owes_goodbye(c->state)) return {};
  std::array<uint8_t, pcm::kMadSize> mad{};
  if (pcm::emit(dreq(*c, uint64_t(rng_.next32()) << 32 | c->local_id), mad) != pcm::kMadSize) return {};
  proto::Packet p;
  mad_packet(c->peer, c->local_gid, mad, p);
  std::vector<uint8_t> f(proto::frame_len(p));
  const proto::BuildResult b = proto::build(p, f);
  if (!b.ok()) return {};
  f.resize(b.len);
  return f;
}

// One MAD to the peer's QP 1. `keep`: the connection that may have to resend it (its timer, or a
// duplicate of the message it answers).
bool Manager::send(const Peer& to, const proto::Ip6& from, const pcm::Mad& m, Conn* keep) {
  std::array<uint8_t, pcm::kMadSize> mad{};
  if (pcm::emit(m, mad) != pcm::kMadSize) return false;
  if (keep) {
    keep->last = mad;
    keep->have_last = true;
  }
  proto::Packet p;
  mad_packet(to, from, mad, p);
  if (!dev_.tx().emit(gsi_, p, dev_.loops_back(to.dgid))) {
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

// ---- Timers -------------------------------------------------------------------------------------

// Resend what is unanswered, give up after the retries, end TimeWait.
bool Manager::progress() {
  const uint64_t now = dev_.step_ns();
  if (timers_.empty() || timers_.top().due > now) return false;  // the common case: nothing due
  bool did = false;
  std::vector<uint32_t> gone;
  std::vector<uint32_t> rearmed;  // resent: their next timers go on the heap after this pass
  while (!timers_.empty() && timers_.top().due <= now) {
    const Timer t = timers_.top();
    timers_.pop();
    Conn* cp = get(t.id);
    if (!cp || cp->timer_ns != t.due) continue;  // stale: the timer was stopped or moved since
    const uint32_t id = t.id;
    Conn& c = *cp;
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
      rearmed.push_back(id);
      resend(c);
      continue;
    }
    // Out of retries: give up.
    ++ctr_.timeouts;
    Event e = event(EventType::Timeout, c);
    switch (c.state) {
      case State::ReqSent:
      case State::MraReqRcvd:
      case State::RepSent:
      case State::MraRepRcvd: {  // a REJ "timeout" for the REQ or REP that was not answered
        const bool req = c.state == State::ReqSent || c.state == State::MraReqRcvd;
        e.timed_out = req ? pcm::Attr::Req : pcm::Attr::Rep;
        send_rej(c, req ? pcm::kMsgReq : pcm::kMsgRep, pcm::rej::kTimeout);
        enter_timewait(c);
        break;
      }
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
  for (uint32_t id : rearmed)
    if (Conn* c = get(id); c && c->timer_ns) timers_.push({c->timer_ns, id});
  for (uint32_t id : gone) free_conn(id);
  return did;
}

}  // namespace uroce::engine::cm
