// The QP state the three roles share: names for printing, the frame template, entering ERR
// and flushing, retiring send WQEs, the retry counters.
#include <cstdio>
#include <cstring>

#include "engine/roles.hpp"
#include "engine/wc.hpp"
#include "proto/entropy.hpp"

namespace uroce::engine {

namespace {
template <typename E, size_t N>
std::string_view name_in(const std::string_view (&names)[N], E v, std::string_view unknown = "?") {
  const auto i = size_t(v);
  return i < N ? names[i] : unknown;
}
}  // namespace

std::string_view wc_status_name(WcStatus s) {
  static constexpr std::string_view names[] = {
      "success", "local length error", "local QP operation error", "local EE context operation error",
      "local protection error", "WR flushed", "memory window bind error", "bad response error",
      "local access error", "remote invalid request error", "remote access error",
      "remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
      "local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
      "invalid EE context state", "fatal error", "response timeout error", "general error"};
  return name_in(names, s, "unknown");
}

std::string_view wr_opcode_name(WrOpcode o) {
  static constexpr std::string_view names[] = {
      "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ",
      "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV",
      "TSO", "DRIVER1", "?", "?", "FLUSH", "ATOMIC_WRITE"};
  return name_in(names, o);
}

std::string_view qp_state_name(QpState s) {
  static constexpr std::string_view names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return name_in(names, s);
}

std::string_view req_state_name(ReqState s) {
  static constexpr std::string_view names[] = {
      "NEXT_WQE", "START_WQE", "CHECK_WINDOW", "CHECK_RATE", "SEND_PACKET", "IDLE", "DRAINED", "WAIT_RNR",
      "WAIT_RD_ATOMIC", "WAIT_FENCE", "WAIT_WINDOW", "WAIT_RATE", "WAIT_TX_BUF", "ERROR"};
  return name_in(names, s);
}

std::string_view comp_state_name(CompState s) {
  static constexpr std::string_view names[] = {
      "DISPATCH", "CHECK_ACK_PSN", "ACK", "RNR_NAK", "SEQ_NAK", "ERROR_NAK", "READ_RESPONSE", "ATOMIC_ACK",
      "IDLE", "GHOST", "ERROR"};
  return name_in(names, s);
}

std::string_view resp_state_name(RespState s) {
  static constexpr std::string_view names[] = {
      "CHECK_PSN", "DUPLICATE", "OUT_OF_SEQUENCE", "CHECK_OP_SEQ", "CHECK_LENGTH", "EXEC_SEND", "EXEC_WRITE",
      "EXEC_READ", "EXEC_ATOMIC", "EXEC_ATOMIC_WRITE", "EXEC_FLUSH", "RNR_NAK", "BAD_ICRC", "IDLE", "ERROR"};
  return name_in(names, s);
}

namespace {
const char* msg_name(RespMsg m) { return m == RespMsg::Send ? "SEND" : m == RespMsg::Write ? "WRITE" : "none"; }
}  // namespace

std::string Qp::describe() const {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf,
                        "qp 0x%x %s req=%s comp=%s resp=%s in_msg=%s sq=%u send_idx=%u sq_psn=0x%06x rd_atomic=%u"
                        " epsn=0x%06x msn=%u seq_nak_sent=%d ack_pending=%d rnr_until=%llu last_progress=%llu",
                        qpn_, qp_state_name(attrs.qp_state).data(), req_state_name(tx.req_state).data(),
                        comp_state_name(tx.comp_state).data(), resp_state_name(rx.state).data(), msg_name(rx.msg),
                        tx.sq.size(), tx.send_idx, tx.sq_psn, tx.rd_atomic_inflight, rx.epsn, rx.msn,
                        int(rx.seq_nak_sent), int(rx.ack_pending), (unsigned long long)tx.rnr_until_ns,
                        (unsigned long long)tx.last_progress_ns);
  std::string s(buf, size_t(n));
  if (!tx.sq.empty()) {
    const SendWqe& w = tx.sq.front();
    n = std::snprintf(buf, sizeof buf, " | head %s len=%u first_psn=0x%06x npkts=%u next=%u rcvd=%u started=%d",
                      wr_opcode_name(w.wr.opcode).data(), w.length, w.first_psn, w.npkts, w.next_pkt,
                      w.rcvd_pkts, int(w.started));
    s.append(buf, size_t(n));
  }
  return s;
}

void SendSide::resize_sq(uint32_t cap) {
  const bool ud = keeps_ah;
  std::vector<Sge> sge(size_t(cap) * sge_n);
  std::vector<uint8_t*> host(size_t(cap) * sge_n, nullptr);
  std::vector<uint8_t> inl(size_t(cap) * inline_n);
  std::vector<Ah> ah(ud ? cap : 0);
  sq.resize(cap, [&](SendWqe& w, uint32_t from, uint32_t to) {
    std::copy_n(sq_sge.data() + size_t(from) * sge_n, sge_n, sge.data() + size_t(to) * sge_n);
    std::copy_n(sq_host.data() + size_t(from) * sge_n, sge_n, host.data() + size_t(to) * sge_n);
    std::copy_n(sq_inline.data() + size_t(from) * inline_n, inline_n, inl.data() + size_t(to) * inline_n);
    if (ud) ah[to] = sq_ah[from];
    // Inline bytes are sent from the slot's own storage (resolve_sges): that moved.
    if (w.is_inline) host[size_t(to) * sge_n] = inl.data() + size_t(to) * inline_n;
    w.slot = to;
  });
  for (uint32_t i = sq.size(); i < cap; ++i) sq.slot(i).slot = i;
  sq_sge = std::move(sge);
  sq_host = std::move(host);
  sq_inline = std::move(inl);
  sq_ah = std::move(ah);
}

Qp::Qp(Device& d, uint32_t qpn, const QpInitAttr& ia) : dev(d), init(ia), qpn_(qpn) {
  attrs.cap = ia.cap;
  // Each WQE as wide as asked for; storage for param::kQueueFirstSlots of them at first, grown
  // by post_send up to the depth asked for (memory follows use: issue 30).
  tx.sge_n = std::max<uint32_t>(ia.cap.max_send_sge, 1);
  tx.inline_n = ia.cap.max_inline_data;
  tx.sq_limit = std::max<uint32_t>(ia.cap.max_send_wr, 1);
  tx.keeps_ah = ia.qp_type == QpType::UD;
  tx.resize_sq(std::min(tx.sq_limit, param::kQueueFirstSlots));
  // No receive queue of its own with an SRQ, nor for XRC (an initiator receives nothing, a
  // target's requests go to the XRC SRQs of its domain, as wide as kMaxSge).
  const bool own_rq = !ia.srq && ia.qp_type != QpType::XrcIni && ia.qp_type != QpType::XrcTgt;
  rx.rq = RecvRing(own_rq ? ia.cap.max_recv_wr : 1, own_rq ? std::max<uint32_t>(ia.cap.max_recv_sge, 1) : 0);
  const uint32_t cur_sge = ia.qp_type == QpType::XrcTgt ? kMaxSge : ia.srq ? ia.srq->max_sge() : ia.cap.max_recv_sge;
  rx.cur_sge.assign(std::max<uint32_t>(cur_sge, 1), Sge{});
  rx.cur_recv.sge = rx.cur_sge.data();
  if (dev.config().selective_repeat && ia.qp_type == QpType::RC) {  // XRC: go-back-N (recovery::selective)
    rx.held.assign(param::kSelectiveRepeatWindow, RecvSide::Held{});
    rx.store_slot = dev.mtu_limit();  // no path MTU can be larger; the store itself: hold_send
  }
}

namespace {

// Selective repeat: every packet kept after a gap forgotten (the reorder store's bytes with
// them; none of them is delivered).
void forget_held(Qp& qp) {
  RecvSide& r = qp.rx;
  for (auto& h : r.held) h = RecvSide::Held{};
  r.held_n = r.held_sends = 0;
  r.store_overflow = false;
}

}  // namespace

namespace qp_ops {

void reset(Qp& qp) {
  qp.tx.sq.clear();
  if (qp.tx.sq.capacity() > param::kQueueFirstSlots) qp.tx.resize_sq(param::kQueueFirstSlots);  // storage goes back
  qp.rx.rq.clear();
  SendSide& t = qp.tx;
  t.send_idx = t.rd_atomic_inflight = t.pkts_since_ackreq = 0;
  t.rnr_until_ns = 0;
  t.read_retry_psn = UINT32_MAX;
  t.acked_valid = false;
  t.gap_valid = t.rtt_timing = false;
  t.srtt_ns = t.rttvar_ns = 0;
  t.probes = t.loss_window = 0;
  t.probe_from_ns = 0;
  t.probe_psn = 0;
  t.probe_oldest = false;
  t.sr_next = t.sr_end = t.gap_end = 0;
  t.sr_check = false;
  for (auto& b : t.rd_held) b = 0;
  t.req_state = ReqState::Idle;
  t.comp_state = CompState::Idle;
  qp.cc = cc::make(qp.dev.config().cc, qp.made);  // a new connection starts unlimited
  RecvSide& r = qp.rx;
  r.state = RespState::Idle;
  r.msg = RespMsg::None;
  r.seq_nak_sent = r.have_recv = r.ack_pending = r.uc_dropping = false;
  r.recv_off = r.write_left = r.unacked = 0;
  r.write_rkey = 0;
  r.write_va = 0;
  r.msn = 0;
  std::vector<RdAtomicRes>().swap(r.res);  // the responder's slots go back (RecvSide::next_res)
  r.res_n = 1;
  r.res_pending = r.res_next = 0;
  forget_held(qp);
  std::vector<uint8_t>().swap(r.send_store);  // the reorder store goes back (hold_send)
  r.replaying = false;
  qp.attrs = QpAttr{};
  qp.attrs.cap = qp.init.cap;
}

// The addresses and ports of a frame from `src` (a GID of this device) to `av`.
void address(proto::Packet& t, const Device& dev, const proto::Ip6& src, const AddressVector& av) {
  t.eth_src = dev.config().mac;
  t.eth_dst = av.dmac;
  t.ip_src = {};
  t.ip_dst = {};
  if (gid_is_v4mapped(av.dgid)) {
    t.ip_version = 4;
    std::memcpy(t.ip_src.data(), src.data() + 12, 4);
    std::memcpy(t.ip_dst.data(), av.dgid.data() + 12, 4);
    t.flow_label = 0;
  } else {
    t.ip_version = 6;
    t.ip_src = src;
    t.ip_dst = av.dgid;
    t.flow_label = av.flow_label;
  }
  // DSCP from the traffic class (IPv4 TOS and IPv6 traffic class alike); the ECN bits are the
  // device's (an application does not claim ECN capability for the transport).
  t.dscp = av.traffic_class >> 2;
  t.ecn = dev.config().ecn;
  t.ttl = av.hop_limit ? av.hop_limit : param::kDefaultTtl;
}

void build_template(Qp& qp, const Device& dev) {
  proto::Packet& t = qp.tmpl;
  t = proto::Packet{};
  const Device::Config& cfg = dev.config();
  if (qp.init.qp_type != QpType::UD) {  // a UD QP's frames take their addresses from each send's AH
    const AddressVector& av = qp.attrs.ah_attr;
    address(t, dev, *dev.sgid(av.sgid_index), av);  // check_modify_qp checked the index
    qp.loopback = dev.loops_back(av.dgid);
    if (dev.is_local(av.dgid)) t.eth_dst = cfg.mac;
  }
  t.ipv4_flags_frag = 0x4000;
  t.udp_sport = proto::udp_source_port(qp.qpn(), qp.attrs.dest_qp_num);
  t.pkey = qp.pkey = cfg.pkey;
  t.dest_qp = qp.attrs.dest_qp_num;
  qp.req_pkt = t;
  qp.resp_pkt = t;
  // Every frame of a connected QP has tmpl's addresses: build_from() patches the rest. A UD
  // QP's requester takes each datagram's addresses from its AH: build() for those.
  qp.hdr = qp.init.qp_type == QpType::UD ? proto::HeaderTemplate{} : proto::make_template(t);
}

// Entering ERR: the requester and responder stop; every outstanding WR completes flushed.
void set_error(Qp& qp) {
  qp.attrs.qp_state = QpState::Err;
  qp.attrs.cur_qp_state = QpState::Err;
  qp.tx.req_state = ReqState::Error;
  qp.rx.state = RespState::Error;
  forget_held(qp);  // nothing kept after a gap is delivered now
  flush(qp);
}

void flush(Qp& qp) {
  // In posting order: a WQE that failed completes with its own status, every other one flushed.
  while (!qp.tx.sq.empty()) {
    const WcStatus st = qp.tx.sq.front().error;
    complete_wqe(qp, st != WcStatus::Success ? st : WcStatus::WrFlushErr);
  }
  qp.tx.send_idx = 0;
  qp.tx.rd_atomic_inflight = 0;
  RecvSide& r = qp.rx;
  if (r.have_recv) {
    qp.rx_cq()->push(recv_wc(qp, r.cur_recv.wr_id, WcStatus::WrFlushErr));
    r.have_recv = false;
  }
  if (!qp.init.srq && qp.init.recv_cq) {
    while (!r.rq.empty()) {
      qp.init.recv_cq->push(recv_wc(qp, r.rq.front().wr_id, WcStatus::WrFlushErr));
      r.rq.pop();
    }
  }
}

// Retires the oldest WQE with status `st`. Successful unsignaled WQEs make no completion. A
// local operation (BIND_MW, LOCAL_INV) that was executed behind it follows it at once.
void complete_wqe(Qp& qp, WcStatus st) {
  SendSide& t = qp.tx;
  for (;;) {
    SendWqe& w = t.sq.front();
    if (w.signaled || st != WcStatus::Success) qp.init.send_cq->push(send_wc(qp, w, st));
    if (st == WcStatus::Success && (w.wr.opcode == WrOpcode::Send || w.wr.opcode == WrOpcode::SendWithImm ||
                                    w.wr.opcode == WrOpcode::SendWithInv))
      ++qp.ctr.rdma_sends;
    if (w.started && w.is_read_or_atomic() && t.rd_atomic_inflight) --t.rd_atomic_inflight;
    t.sq.pop();
    if (t.send_idx) --t.send_idx;
    if (st != WcStatus::Success || t.sq.empty() || !t.sq.front().started || !t.sq.front().is_local()) return;
  }
}

void fail_wqe(Qp& qp, SendWqe& w, WcStatus st) {
  w.error = st;
  set_error(qp);
}

bool take_retry(Qp& qp) {
  // retry_cnt is a count, 7 included, as the IBA defines it and a ConnectX reads it (only
  // rnr_retry 7 means for ever). rxe retries for ever at 7; uroce does not: a peer that is gone
  // must end in RETRY_EXC_ERR, never a requester that resends until it is stopped
  // (docs/rdma_cm.md "A peer that disappears").
  if (qp.tx.retries_left == 0) {
    ++qp.ctr.retry_exceeded_err;
    return false;
  }
  --qp.tx.retries_left;
  ++qp.ctr.completer_retry_err;
  return true;
}

bool take_rnr_retry(Qp& qp) {
  if (qp.attrs.rnr_retry == 7) return true;  // 7: retry for ever (IBA)
  if (qp.tx.rnr_retries_left == 0) {
    ++qp.ctr.retry_rnr_exceeded_err;
    return false;
  }
  --qp.tx.rnr_retries_left;
  return true;
}

}  // namespace qp_ops
}  // namespace uroce::engine
