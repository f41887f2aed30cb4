// Running a scenario (runner.hpp).
#include "tools/drill/runner.hpp"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <random>
#include <thread>

#include "proto/aeth.hpp"
#include "proto/icrc.hpp"
#include "proto/psn.hpp"

namespace uroce::drill {

using proto::OpcodeInfo;
using proto::Packet;

namespace {

constexpr uint32_t kPsnMask = 0xFFFFFF;
constexpr uint32_t kDrillQpnBase = 0xD0000;  // our QPNs: one per scenario from here
constexpr uint16_t kUdpSport = 0xD811;       // the drill's UDP source port (any value is valid)
constexpr uint32_t kDefaultQkey = 0x11111111;  // the agent's default Q_Key

bool is_v4mapped(const proto::Ip6& g) {
  static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g.data(), pre, 12) == 0;
}

std::string hex_of(const proto::Ip6& g) {
  std::string s;
  char b[3];
  for (uint8_t x : g) {
    std::snprintf(b, sizeof b, "%02x", x);
    s += b;
  }
  return s;
}

bool gid_of(const std::string& hex, proto::Ip6& out) {
  if (hex.size() != 32) return false;
  for (size_t i = 0; i < 16; ++i) {
    uint64_t v;
    if (!parse_u64("0x" + hex.substr(2 * i, 2), v)) return false;
    out[i] = uint8_t(v);
  }
  return true;
}

std::vector<uint8_t> unhex(const std::string& s) {
  std::vector<uint8_t> v;
  for (size_t i = 0; i + 1 < s.size(); i += 2) {
    uint64_t b = 0;
    parse_u64("0x" + s.substr(i, 2), b);
    v.push_back(uint8_t(b));
  }
  return v;
}

// Packets of a READ response (or of any message) of `len` bytes at path MTU `mtu`.
int64_t packets(uint64_t len, uint32_t mtu) { return len == 0 ? 1 : int64_t((len + mtu - 1) / mtu); }

// Whether `psn` is `base` + `rel` (a script's relative PSN), modulo 2^24.
bool psn_is(uint32_t psn, uint32_t base, int64_t rel) { return ((uint32_t(int64_t(base) + rel) ^ psn) & kPsnMask) == 0; }

// Relative PSN of `psn` from `base`, as the script would write it (-2^23 .. 2^23-1).
int64_t rel(uint32_t psn, uint32_t base) {
  int32_t d = int32_t(((psn - base) & kPsnMask) << 8) >> 8;
  return d;
}

std::string signed_text(int64_t v) { return (v >= 0 ? "+" : "") + std::to_string(v); }

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Conforms: return "conforms";
    case Verdict::Differs: return "differs";
    case Verdict::NotApplicable: return "not applicable";
  }
  return "?";
}

Runner::Runner(port::PortLink& link, AgentClient& agent, const RunOptions& opt)
    : link_(link), agent_(agent), opt_(opt) {}

uint64_t Runner::now_us() const {
  return uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

void Runner::pump() {
  engine::PacketBuf bufs[32];
  size_t n = link_.recv(bufs, 32);
  const uint64_t t = now_us();
  for (size_t i = 0; i < n; ++i) {
    if (cap_) cap_->write(bufs[i].data, bufs[i].len, port::Capture::Dir::In);
    rx_.push_back(Rx{std::vector<uint8_t>(bufs[i].data, bufs[i].data + bufs[i].len), t});
    link_.release(bufs[i]);
  }
  if (n == 0) std::this_thread::yield();
}

bool Runner::agent(const std::string& line, Reply& r, std::string& why) {
  std::string err;
  if (!agent_.call(line, r, err, [this] { pump(); })) {
    why = err;
    return false;
  }
  return true;
}

bool Runner::next_frame(uint64_t deadline_us, Rx& out) {
  for (;;) {
    while (!rx_.empty()) {
      Rx f = std::move(rx_.front());
      rx_.pop_front();
      Packet p;
      proto::ParseResult r = proto::parse(f.bytes, p);
      // A frame whose BTH could not be read, or for another QPN, is not this scenario's.
      bool bth = r.ok() || r.error == proto::ParseError::BadIcrc;
      if (bth && p.dest_qp != drill_qpn_) {
        ++stale_;
        continue;
      }
      out = std::move(f);
      return true;
    }
    if (now_us() >= deadline_us) return false;
    pump();
  }
}

uint64_t Runner::value(const std::string& key, const std::string& v) const {
  uint64_t n;
  if (parse_u64(v, n)) return n;
  size_t op = v.find_first_of("+-^");
  std::string name = v.substr(0, op);
  uint64_t base = 0;
  if (name == "peer_qpn") base = peer_qpn_;
  else if (name == "drill_qpn") base = drill_qpn_;
  else {
    auto it = mrs_.find(name);
    if (it != mrs_.end()) base = key.find("rkey") != std::string::npos || key == "ieth" ? it->second.rkey : it->second.va;
  }
  if (op == std::string::npos) return base;
  uint64_t x = 0;
  parse_u64(v.substr(op + 1), x);
  return v[op] == '+' ? base + x : v[op] == '-' ? base - x : base ^ x;
}

std::string Runner::describe(const Packet& p, bool icrc_ok) const {
  const OpcodeInfo& o = p.info();
  // A response or an ACK counts on our request stream; a request of the peer's on its own.
  bool ours = !o.request;
  std::string s = std::string(o.name) + " psn=" + signed_text(rel(p.psn, ours ? drill_psn_ : peer_psn_));
  char b[96];
  if (o.has(proto::kAeth)) s += " syndrome=" + syndrome_name(p.aeth.syndrome) + " msn=" + std::to_string(p.aeth.msn);
  if (o.has(proto::kReth)) {
    std::snprintf(b, sizeof b, " va=0x%" PRIx64 " rkey=0x%x dma_len=%u", p.reth.va, p.reth.rkey, p.reth.dma_len);
    s += b;
  }
  if (o.has(proto::kAtomicEth)) {
    std::snprintf(b, sizeof b, " va=0x%" PRIx64 " rkey=0x%x swap_add=0x%" PRIx64 " compare=0x%" PRIx64, p.atomic.va,
                  p.atomic.rkey, p.atomic.swap_add, p.atomic.compare);
    s += b;
  }
  if (o.has(proto::kAtomicAckEth)) {
    std::snprintf(b, sizeof b, " orig=0x%" PRIx64, p.atomic_ack_orig);
    s += b;
  }
  if (o.has(proto::kImmDt)) {
    std::snprintf(b, sizeof b, " imm=0x%x", p.imm);
    s += b;
  }
  if (o.payload) s += " len=" + std::to_string(p.payload.size());
  if (p.ack_req) s += " ack_req=1";
  if (p.ecn) s += " ecn=" + std::to_string(p.ecn);
  if (!icrc_ok) s += " icrc=bad";
  return s;
}

bool Runner::setup(const Scenario& sc, std::string& why, bool& na) {
  na = false;
  Reply r;
  if (!agent("reset", r, why)) return false;
  std::string open = "open type=" + sc.qp_type + " gid=" + std::to_string(opt_.agent_gid);
  if (!opt_.agent_dev.empty()) open += " dev=" + opt_.agent_dev;
  for (const Field& f : sc.qp_options)
    if (f.key == "psn" || f.key == "qkey") open += " " + f.key + "=" + f.value;
  if (!agent(open, r, why)) return false;
  if (!r.ok) {
    why = "the agent could not open a " + sc.qp_type + " QP: " + r.text;
    na = true;
    return false;
  }
  peer_qpn_ = uint32_t(r.num("qpn"));
  peer_psn_ = uint32_t(r.num("psn")) & kPsnMask;
  if (!gid_of(r.kv["gid"], peer_gid_) || peer_gid_ == proto::Ip6{}) {
    why = "the peer's GID index " + std::to_string(opt_.agent_gid) + " is empty or unreadable: " + r.text;
    na = true;
    return false;
  }
  if (r.num("mtu_active") && r.num("mtu_active") < sc.mtu) {
    why = "the peer's port MTU " + r.kv["mtu_active"] + " is below the scenario's " + std::to_string(sc.mtu);
    na = true;
    return false;
  }
  // A full-MTU RC packet with the largest extension headers over IPv4 (the drill's own link must
  // carry it too).
  const uint32_t biggest = sc.mtu + 14 + 20 + 8 + 12 + 16 + 4 + 4;
  if (biggest > link_.max_frame()) {
    why = "the drill's link carries frames of at most " + std::to_string(link_.max_frame()) + " bytes, not " +
          std::to_string(biggest) + " (path MTU " + std::to_string(sc.mtu) + ")";
    na = true;
    return false;
  }
  mrs_.clear();
  for (const MrDecl& m : sc.mrs) {
    std::string line = "mr " + m.name + " len=" + std::to_string(m.len) + " access=" + m.access;
    if (m.fill >= 0) line += " fill=" + std::to_string(m.fill);
    if (!agent(line, r, why)) return false;
    if (!r.ok) {
      why = "the agent could not register mr " + m.name + ": " + r.text;
      na = true;
      return false;
    }
    mrs_[m.name] = PeerMr{r.num("va"), r.num("len"), uint32_t(r.num("rkey")), uint32_t(r.num("lkey"))};
  }
  std::string conn = "connect dqpn=" + std::to_string(drill_qpn_) + " dgid=" + hex_of(link_.gid()) +
                     " mtu=" + std::to_string(sc.mtu) + " rq_psn=" + std::to_string(drill_psn_) +
                     " sq_psn=" + std::to_string(peer_psn_);
  bool has_timeout = false;
  for (const Field& f : sc.qp_options)
    if (f.key != "psn" && f.key != "qkey" && f.key != "mtu" && f.key != "drill_psn") {
      if (sc.qp_type != "rc" && f.key != "timeout") continue;
      conn += " " + f.key + "=" + f.value;
      has_timeout |= f.key == "timeout";
    }
  // The peer's local ACK timeout: about a second unless the scenario says (4.096 us * 2^18),
  // far above any window of a scenario, so that it retransmits only where a scenario waits for it.
  if (sc.qp_type == "rc" && !has_timeout) conn += " timeout=18";
  if (!link_.resolve(peer_gid_, peer_mac_, [this] { pump(); })) {
    why = "the peer's MAC: no answer to our ARP / neighbour solicitation";
    return false;
  }
  if (!agent(conn, r, why)) return false;
  if (!r.ok) {
    why = "the agent could not connect its QP: " + r.text;
    return false;
  }
  return true;
}

bool Runner::do_send(const Step& st, std::string& why) {
  const Scenario& sc = *sc_;
  Packet p;
  p.opcode = st.opcode;
  const OpcodeInfo& o = proto::opcode_info(st.opcode);
  p.eth_dst = peer_mac_;
  p.eth_src = link_.mac();
  const proto::Ip6& ours = link_.gid();
  if (is_v4mapped(peer_gid_) && is_v4mapped(ours)) {
    p.ip_version = 4;
    std::memcpy(p.ip_src.data(), ours.data() + 12, 4);
    std::memcpy(p.ip_dst.data(), peer_gid_.data() + 12, 4);
  } else {
    p.ip_version = 6;
    p.ip_src = ours;
    p.ip_dst = peer_gid_;
  }
  p.udp_sport = kUdpSport;
  p.dest_qp = peer_qpn_;
  const bool req = o.request || !o.valid;
  // PSN: ours for requests, the peer's for responses; by default the next request PSN, or the
  // PSN of the peer's last request.
  int64_t r = req ? next_req_ : last_peer_req_;
  const Field* f = st.find("psn");
  if (f) parse_i64(f->value, r);
  p.psn = uint32_t(int64_t(req ? drill_psn_ : peer_psn_) + r) & kPsnMask;
  p.ack_req = req && sc.qp_type == "rc" && o.ends_message();
  // Payload.
  std::vector<uint8_t> payload;
  if (const Field* d = st.find("data")) payload = unhex(d->value);
  else if (const Field* l = st.find("len")) {
    uint64_t n = 0;
    parse_u64(l->value, n);
    payload.resize(n);
    uint64_t fill = 0;
    const Field* fl = st.find("fill");
    for (size_t i = 0; i < n; ++i) payload[i] = fl ? (parse_u64(fl->value, fill), uint8_t(fill)) : uint8_t(i);
  }
  p.payload = payload;
  // The first MR is where a RETH or an AtomicETH points unless the script says otherwise.
  uint64_t va0 = 0, rkey0 = 0;
  if (!sc.mrs.empty()) {
    const PeerMr& m = mrs_.at(sc.mrs.front().name);
    va0 = m.va, rkey0 = m.rkey;
  }
  auto num = [&](const char* key, uint64_t def) {
    const Field* x = st.find(key);
    return x ? value(key, x->value) : def;
  };
  p.reth.va = num("va", va0);
  p.reth.rkey = uint32_t(num("rkey", rkey0));
  p.reth.dma_len = uint32_t(num("dma_len", payload.size()));
  p.atomic.va = p.reth.va;
  p.atomic.rkey = p.reth.rkey;
  p.atomic.swap_add = num("swap", num("add", 0));
  p.atomic.compare = num("compare", 0);
  p.imm = uint32_t(num("imm", 0));
  p.ieth_rkey = uint32_t(num("ieth", rkey0));
  uint8_t syn = proto::Syndrome::ack().encode();
  if (const Field* s = st.find("syndrome")) {
    bool any = false;
    syndrome_by_name(s->value, syn, any);
    if (any && syn == 0x00) syn = uint8_t(num("credits", proto::kCreditsUnlimited));
    if (any && syn == 0x20) syn = uint8_t(0x20 | (num("rnr_timer", 0) & 0x1F));
  }
  p.aeth.syndrome = syn;
  p.aeth.msn = uint32_t(num("msn", peer_msgs_)) & kPsnMask;
  p.atomic_ack_orig = num("orig", 0);
  uint64_t qkey = kDefaultQkey;
  for (const Field& q : sc.qp_options)
    if (q.key == "qkey") parse_u64(q.value, qkey);
  p.deth.qkey = uint32_t(num("qkey", qkey));
  p.deth.src_qp = uint32_t(num("src_qp", drill_qpn_));
  p.ack_req = num("ack_req", p.ack_req) != 0;
  p.solicited = num("se", 0) != 0;
  p.migreq = num("migreq", 0) != 0;
  p.fecn = num("fecn", 0) != 0;
  p.becn = num("becn", 0) != 0;
  p.ecn = uint8_t(num("ecn", 0));
  p.tver = uint8_t(num("tver", 0));
  p.pkey = uint16_t(num("pkey", 0xFFFF));
  p.dest_qp = uint32_t(num("qpn", peer_qpn_)) & kPsnMask;
  if (req) next_req_ = r + (o.op == proto::Operation::ReadRequest ? packets(p.reth.dma_len, sc.mtu) : 1);
  // An opcode byte outside the table (a number in the script) goes out with an opcode the
  // table has, the byte patched in afterwards.
  if (!o.valid) p.opcode = 0x04;
  engine::PacketBuf b;
  const size_t len = proto::frame_len(p);
  if (len > link_.max_frame() || !link_.alloc(b, uint32_t(len))) {
    why = "no transmit buffer for a frame of " + std::to_string(len) + " bytes";
    return false;
  }
  proto::BuildResult br = proto::build(p, std::span<uint8_t>(b.data, b.cap));
  if (!br.ok()) {
    link_.release(b);
    why = "the frame cannot be built: " + std::string(proto::error_name(br.error));
    return false;
  }
  b.len = uint32_t(br.len);
  // Changes the builder would not make, ICRC recomputed: an opcode byte outside the table, a
  // pad count that disagrees with the payload.
  const size_t l3 = 14, iphl = p.ip_version == 4 ? 20 : 40, bth = l3 + iphl + 8;
  bool patched = false;
  if (!o.valid) b.data[bth] = st.opcode, patched = true;
  if (const Field* pd = st.find("pad")) {
    uint64_t v = 0;
    parse_u64(pd->value, v);
    b.data[bth + 1] = uint8_t((b.data[bth + 1] & ~0x30) | ((v & 3) << 4));
    patched = true;
  }
  if (patched) {
    uint32_t c = proto::icrc_compute_inplace(b.data + l3, b.len - l3 - proto::kIcrcSize, iphl);
    std::memcpy(b.data + b.len - proto::kIcrcSize, &c, 4);
  }
  if (const Field* ic = st.find("icrc"); ic && ic->value == "bad") b.data[b.len - 1] ^= 0xFF;
  if (cap_) cap_->write(b.data, b.len, port::Capture::Dir::Out);
  const uint64_t end = now_us() + 1'000'000;
  while (link_.send(&b, 1) == 0) {
    if (now_us() > end) {
      link_.release(b);
      why = "the link took no frame for a second";
      return false;
    }
    pump();
  }
  return true;
}

bool Runner::match_frame(const Step& st, const Rx& f, uint64_t t0, std::string& why, std::string& seen) {
  Packet p;
  proto::ParseResult pr = proto::parse(f.bytes, p);
  const bool icrc_ok = pr.ok();
  if (!pr.ok() && pr.error != proto::ParseError::BadIcrc) {
    why = "a malformed frame came: " + pr.message();
    seen = "a malformed frame (" + pr.message() + ")";
    return false;
  }
  seen = describe(p, icrc_ok);
  const OpcodeInfo& o = p.info();
  auto differ = [&](const std::string& what) {
    why = "got " + seen + ": " + what;
    return false;
  };
  if (p.opcode != st.opcode)
    return differ("opcode " + std::string(o.name) + ", not " + std::string(proto::opcode_info(st.opcode).name));
  const Field* ic = st.find("icrc");
  if ((ic && ic->value == "bad") == icrc_ok) return differ(icrc_ok ? "the ICRC is good" : "the ICRC is bad");
  const bool ours = !o.request;  // an answer to our requests
  const uint32_t base = ours ? drill_psn_ : peer_psn_;
  const int64_t got_rel = rel(p.psn, base);
  if (o.request) last_peer_req_ = got_rel;
  for (const Field& fl : st.fields) {
    const std::string& k = fl.key;
    if (k == "icrc" || k == "skip") continue;
    if (k == "after") {
      // A lower bound: the frame may not come sooner than this after the step began (a timer the
      // peer must wait out: the RNR NAK's, the local ACK timeout).
      uint64_t min_us = 0;
      parse_time_us(fl.value, min_us);
      // (not multiplied by --time-scale: a slow peer only comes later)
      const uint64_t took = f.t_us > t0 ? f.t_us - t0 : 0;
      if (took < min_us) {
        char b[96];
        std::snprintf(b, sizeof b, "it came %.3f ms after the step began, sooner than %s", double(took) / 1000.0,
                      fl.value.c_str());
        return differ(b);
      }
      continue;
    }
    if (k == "psn") {
      int64_t want = 0;
      parse_i64(fl.value, want);
      if (!psn_is(p.psn, base, want))
        return differ("psn " + signed_text(got_rel) + ", not " + signed_text(want));
      continue;
    }
    if (k == "syndrome") {
      uint8_t want = 0;
      bool any = false;
      syndrome_by_name(fl.value, want, any);
      bool match = any ? (p.aeth.syndrome & 0xE0) == want : p.aeth.syndrome == want;
      if (!match) return differ("syndrome " + syndrome_name(p.aeth.syndrome) + ", not " + fl.value);
      continue;
    }
    if (k == "fill" || k == "data") {
      std::vector<uint8_t> want;
      if (k == "data") want = unhex(fl.value);
      else {
        uint64_t b = 0;
        parse_u64(fl.value, b);
        const Field* l = st.find("len");
        uint64_t n = p.payload.size();
        if (l) parse_u64(l->value, n);
        want.assign(n, uint8_t(b));
      }
      if (want.size() != p.payload.size() || !std::equal(want.begin(), want.end(), p.payload.begin()))
        return differ("the payload is not " + k + "=" + fl.value);
      continue;
    }
    uint64_t got;
    if (k == "len") got = p.payload.size();
    else if (k == "va") got = o.has(proto::kReth) ? p.reth.va : p.atomic.va;
    else if (k == "rkey") got = o.has(proto::kReth) ? p.reth.rkey : p.atomic.rkey;
    else if (k == "dma_len") got = p.reth.dma_len;
    else if (k == "imm") got = p.imm;
    else if (k == "ieth") got = p.ieth_rkey;
    else if (k == "rnr_timer" || k == "credits") got = p.aeth.syndrome & 0x1F;
    else if (k == "msn") got = p.aeth.msn;
    else if (k == "swap" || k == "add") got = p.atomic.swap_add;
    else if (k == "compare") got = p.atomic.compare;
    else if (k == "orig") got = p.atomic_ack_orig;
    else if (k == "qkey") got = p.deth.qkey;
    else if (k == "src_qp") got = p.deth.src_qp;
    else if (k == "ack_req") got = p.ack_req;
    else if (k == "se") got = p.solicited;
    else if (k == "migreq") got = p.migreq;
    else if (k == "fecn") got = p.fecn;
    else if (k == "becn") got = p.becn;
    else if (k == "ecn") got = p.ecn;
    else if (k == "tver") got = p.tver;
    else if (k == "pad") got = p.pad_count();
    else if (k == "pkey") got = p.pkey;
    else if (k == "qpn") got = p.dest_qp;
    else continue;
    uint64_t want = value(k, fl.value);
    if (got != want) {
      char b[96];
      std::snprintf(b, sizeof b, "%s 0x%" PRIx64 ", not 0x%" PRIx64, k.c_str(), got, want);
      return differ(b);
    }
  }
  if (o.request) peer_reqs_seen_.emplace_back(p.opcode, p.psn);
  if (o.request && o.ends_message()) ++peer_msgs_;
  char t[32];
  std::snprintf(t, sizeof t, " (%.1f ms)", double(f.t_us > t0 ? f.t_us - t0 : 0) / 1000.0);
  seen += t;
  return true;
}

bool Runner::do_expect(const Step& st, std::string& why, std::string& seen) {
  const uint64_t window = scaled(st.within_us);
  const uint64_t t0 = now_us();
  // skip=OPCODE: frames of that opcode that do not match come and go (an ACK the peer may or may
  // not send before the one the scenario is about).
  uint8_t skip = 0;
  bool have_skip = false;
  if (const Field* k = st.find("skip")) have_skip = opcode_by_name(sc_->qp_type, k->value, skip);
  std::string skipped;
  for (;;) {
    Rx f;
    if (!next_frame(t0 + window, f)) {
      why = "nothing came within " + std::to_string(window / 1000) + " ms";
      seen = skipped + "nothing";
      return false;
    }
    Packet p;
    proto::ParseResult pr = proto::parse(f.bytes, p);
    if (pr.ok() && resent_request(st, p)) {
      // A requester may send a packet again at any time (uroce's tail-loss probe, a timer): while
      // the scenario waits for a new PSN, a resend of one it already saw is not the answer.
      skipped += "(resent " + describe(p, true) + ") ";
      continue;
    }
    if (match_frame(st, f, t0, why, seen)) {
      seen = skipped + seen;
      return true;
    }
    if (!(have_skip && pr.ok() && p.opcode == skip)) {
      seen = skipped + seen;
      return false;
    }
    skipped += "(skipped " + describe(p, true) + ") ";
  }
}

bool Runner::resent_request(const Step& st, const Packet& p) const {
  if (!p.info().request) return false;
  const Field* f = st.find("psn");
  int64_t want = 0;
  if (!f || !parse_i64(f->value, want)) return false;
  if (psn_is(p.psn, peer_psn_, want)) return false;  // the PSN waited for
  return std::find(peer_reqs_seen_.begin(), peer_reqs_seen_.end(), std::make_pair(p.opcode, p.psn)) !=
         peer_reqs_seen_.end();
}

bool Runner::do_nothing(const Step& st, std::string& why, std::string& seen) {
  Rx f;
  const uint64_t window = scaled(st.within_us);
  if (!next_frame(now_us() + window, f)) {
    seen = "nothing";
    return true;
  }
  Packet p;
  proto::ParseResult pr = proto::parse(f.bytes, p);
  seen = pr.ok() || pr.error == proto::ParseError::BadIcrc ? describe(p, pr.ok()) : "a malformed frame";
  why = "expected nothing within " + std::to_string(window / 1000) + " ms, got " + seen;
  return false;
}

bool Runner::do_peer(const Step& st, std::string& why, bool& na) {
  std::string line = st.verb;
  for (const Field& f : st.fields) {
    if (f.key.empty()) line += " " + f.value;
    else if (f.key == "mr" || f.key == "state") line += " " + f.key + "=" + f.value;
    else line += " " + f.key + "=" + std::to_string(value(f.key, f.value));
  }
  Reply r;
  if (!agent(line, r, why)) return false;
  if (!r.ok) {
    why = "the peer refused '" + line + "': " + r.text;
    // An operation the device does not have is not a difference from the spec.
    na = r.text.find("not supported") != std::string::npos || r.text.find("Function not implemented") != std::string::npos;
    return false;
  }
  return true;
}

bool Runner::do_peer_wc(const Step& st, std::string& why, std::string& seen) {
  Reply r;
  const uint64_t window_ms = std::max<uint64_t>(1, scaled(st.within_us) / 1000);
  if (!agent("poll timeout_ms=" + std::to_string(window_ms), r, why)) return false;
  if (!r.ok) {
    why = "the peer's poll failed: " + r.text;
    return false;
  }
  seen = r.none ? "no completion" : "wc " + r.text.substr(3);
  if (st.kind == StepKind::PeerNoWc) {
    if (r.none) return true;
    why = "expected no completion within " + std::to_string(window_ms) + " ms, got " + seen;
    return false;
  }
  if (r.none) {
    why = "no completion within " + std::to_string(window_ms) + " ms";
    return false;
  }
  for (const Field& f : st.fields) {
    auto it = r.kv.find(f.key);
    std::string got = it == r.kv.end() ? "(none)" : it->second;
    bool match = f.key == "status" || f.key == "opcode" ? got == f.value
                                                        : it != r.kv.end() && r.num(f.key) == value(f.key, f.value);
    if (!match) {
      why = "got " + seen + ": " + f.key + " " + got + ", not " + f.value;
      return false;
    }
  }
  return true;
}

bool Runner::do_peer_state(const Step& st, std::string& why, std::string& seen) {
  const std::string& want = st.find("state")->value;
  const uint64_t end = now_us() + scaled(st.within_us);
  for (;;) {
    Reply r;
    if (!agent("state", r, why)) return false;
    seen = "state " + r.kv["state"];
    if (r.ok && r.kv["state"] == want) return true;
    if (now_us() >= end) {
      why = "the QP is in " + r.kv["state"] + ", not " + want;
      return false;
    }
    const uint64_t nap = now_us() + 5000;
    while (now_us() < nap) pump();
  }
}

bool Runner::do_peer_mem(const Step& st, std::string& why, std::string& seen) {
  uint64_t off = 0, len = 0;
  if (const Field* f = st.find("off")) parse_u64(f->value, off);
  parse_u64(st.find("len")->value, len);
  // The agent reads at most 1024 bytes at a time.
  std::string h;
  for (uint64_t done = 0; done < len;) {
    const uint64_t n = std::min<uint64_t>(1024, len - done);
    Reply r;
    if (!agent("read " + st.verb + " off=" + std::to_string(off + done) + " len=" + std::to_string(n), r, why))
      return false;
    if (!r.ok) {
      why = "the peer could not read its memory: " + r.text;
      return false;
    }
    h += r.kv["hex"];
    done += n;
  }
  std::vector<uint8_t> got = unhex(h), want;
  if (const Field* d = st.find("data")) want = unhex(d->value);
  else {
    uint64_t b = 0;
    parse_u64(st.find("fill")->value, b);
    want.assign(len, uint8_t(b));
  }
  seen = "mem " + st.verb + "+" + std::to_string(off) + " = " + (h.size() > 32 ? h.substr(0, 32) + "..." : h);
  if (got != want) {
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    char b[96];
    std::snprintf(b, sizeof b, "byte %zu is 0x%02x, not 0x%02x", i, i < got.size() ? got[i] : 0, i < want.size() ? want[i] : 0);
    why = "the peer's memory differs: " + std::string(b);
    return false;
  }
  return true;
}

ScenarioResult Runner::run(const Scenario& sc) {
  ScenarioResult res;
  sc_ = &sc;
  const uint64_t t_start = now_us();
  ++scenario_no_;
  drill_qpn_ = kDrillQpnBase + scenario_no_;
  static std::mt19937 rng(std::random_device{}());
  drill_psn_ = rng() & kPsnMask;
  for (const Field& f : sc.qp_options) {
    uint64_t v;
    if (f.key == "drill_psn" && parse_u64(f.value, v)) drill_psn_ = uint32_t(v) & kPsnMask;
  }
  next_req_ = 0, last_peer_req_ = 0, peer_msgs_ = 0;
  peer_reqs_seen_.clear();
  rx_.clear();
  cap_.reset();
  if (!opt_.capture_dir.empty()) {
    std::string name = sc.name;
    for (char& c : name)
      if (c == '/') c = '-';
    res.capture = opt_.capture_dir + "/" + name + ".pcapng";
    cap_ = std::make_unique<port::Capture>();
    std::string err;
    port::CaptureOptions co;
    co.if_name = "uroce-drill";
    co.snaplen = 65535;  // whole frames: a scenario's frames are few, and their ICRCs are checked when read
    if (!cap_->open(res.capture, co, err)) {
      std::fprintf(opt_.out, "  (no capture: %s)\n", err.c_str());
      cap_.reset();
      res.capture.clear();
    }
  }
  std::fprintf(opt_.out, "%s: %s\n", sc.name.c_str(), sc.title.c_str());
  std::string why;
  bool na = false;
  if (!setup(sc, why, na)) {
    res.verdict = na ? Verdict::NotApplicable : Verdict::Differs;
    res.why = "set-up: " + why;
    std::fprintf(opt_.out, "  set-up: %s\n", why.c_str());
  } else {
    std::fprintf(opt_.out, "  set-up: peer qpn 0x%x psn 0x%06x, drill qpn 0x%x psn 0x%06x\n", peer_qpn_, peer_psn_,
                 drill_qpn_, drill_psn_);
    for (const Step& st : sc.steps) {
      std::string seen;
      bool ok = false;
      switch (st.kind) {
        case StepKind::Send: ok = do_send(st, why); break;
        case StepKind::Expect: ok = do_expect(st, why, seen); break;
        case StepKind::Nothing: ok = do_nothing(st, why, seen); break;
        case StepKind::Wait: {
          const uint64_t end = now_us() + scaled(st.within_us);
          while (now_us() < end) pump();
          ok = true;
          break;
        }
        case StepKind::Peer: ok = do_peer(st, why, na); break;
        case StepKind::PeerWc:
        case StepKind::PeerNoWc: ok = do_peer_wc(st, why, seen); break;
        case StepKind::PeerState: ok = do_peer_state(st, why, seen); break;
        case StepKind::PeerMem: ok = do_peer_mem(st, why, seen); break;
      }
      std::fprintf(opt_.out, "  %4d %-58s %s%s%s\n", st.line, st.text.c_str(), ok ? "ok" : "FAILED",
                   seen.empty() ? "" : ": ", seen.c_str());
      if (!seen.empty() && st.kind != StepKind::Send && st.kind != StepKind::Peer) {
        if (!res.observed.empty()) res.observed += "; ";
        res.observed += seen;
      }
      if (!ok) {
        res.verdict = na ? Verdict::NotApplicable : Verdict::Differs;
        res.failed_line = st.line;
        // The library's scenarios by their place in it (psn/gap.drill), others by the path given.
        const size_t lib = sc.path.rfind("/scenarios/");
        const std::string shown = lib == std::string::npos ? sc.path : sc.path.substr(lib + 11);
        res.why = shown + ":" + std::to_string(st.line) + ": " + why;
        std::fprintf(opt_.out, "       %s\n", res.why.c_str());
        break;
      }
    }
  }
  Reply r;
  std::string err;
  agent("reset", r, err);
  cap_.reset();
  res.seconds = double(now_us() - t_start) / 1e6;
  std::fprintf(opt_.out, "  verdict: %s (%.2f s)\n", verdict_name(res.verdict), res.seconds);
  return res;
}

}  // namespace uroce::drill
