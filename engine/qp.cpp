// Device resources, the QP state machine (ibv_modify_qp rules), posting, and the polling loop.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine/engine.hpp"
#include "proto/entropy.hpp"

namespace uroce::engine {

std::string_view wc_status_name(WcStatus s) {
  static constexpr std::string_view names[] = {
      "success", "local length error", "local QP operation error", "local EE context operation error",
      "local protection error", "WR flushed", "memory window bind error", "bad response error",
      "local access error", "remote invalid request error", "remote access error",
      "remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
      "local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
      "invalid EE context state", "fatal error", "response timeout error", "general error"};
  auto i = uint32_t(s);
  return i < std::size(names) ? names[i] : "unknown";
}

std::string_view wr_opcode_name(WrOpcode o) {
  switch (o) {
    case WrOpcode::RdmaWrite: return "RDMA_WRITE";
    case WrOpcode::RdmaWriteWithImm: return "RDMA_WRITE_WITH_IMM";
    case WrOpcode::Send: return "SEND";
    case WrOpcode::SendWithImm: return "SEND_WITH_IMM";
    case WrOpcode::RdmaRead: return "RDMA_READ";
    case WrOpcode::AtomicCmpSwp: return "ATOMIC_CMP_AND_SWP";
    case WrOpcode::AtomicFetchAdd: return "ATOMIC_FETCH_AND_ADD";
    case WrOpcode::LocalInv: return "LOCAL_INV";
    case WrOpcode::BindMw: return "BIND_MW";
    case WrOpcode::SendWithInv: return "SEND_WITH_INV";
  }
  return "?";
}

std::string_view qp_state_name(QpState s) {
  static constexpr std::string_view names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  auto i = uint32_t(s);
  return i < std::size(names) ? names[i] : "?";
}

std::string_view req_state_name(ReqState s) {
  switch (s) {
    case ReqState::Idle: return "IDLE";
    case ReqState::Sending: return "SENDING";
    case ReqState::WaitWindow: return "WAIT_WINDOW";
    case ReqState::WaitRdAtomic: return "WAIT_RD_ATOMIC";
    case ReqState::WaitRnr: return "WAIT_RNR";
    case ReqState::Error: return "ERROR";
  }
  return "?";
}

std::string_view resp_state_name(RespState s) {
  switch (s) {
    case RespState::Idle: return "IDLE";
    case RespState::InSend: return "IN_SEND";
    case RespState::InWrite: return "IN_WRITE";
    case RespState::NakSeq: return "NAK_SEQ";
    case RespState::Error: return "ERROR";
  }
  return "?";
}

std::string Qp::describe() const {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf,
                        "qp 0x%x %s req=%s resp=%s sq=%u send_idx=%u sq_psn=0x%06x rd_atomic=%u epsn=0x%06x msn=%u"
                        " seq_nak_sent=%d ack_pending=%d rnr_until=%llu last_progress=%llu",
                        qpn_, std::string(qp_state_name(attr_.qp_state)).c_str(), std::string(req_state_name(req_state_)).c_str(),
                        std::string(resp_state_name(resp_state_)).c_str(), sq_.size(), send_idx_, sq_psn_, rd_atomic_inflight_,
                        epsn_, msn_, int(seq_nak_sent_), int(ack_pending_), (unsigned long long)rnr_until_ns_,
                        (unsigned long long)last_progress_ns_);
  std::string s(buf, size_t(n));
  if (!sq_.empty()) {
    const SendWqe& w = const_cast<Ring<SendWqe>&>(sq_).front();
    n = std::snprintf(buf, sizeof buf, " | head %s len=%u first_psn=0x%06x npkts=%u next=%u rcvd=%u started=%d",
                      std::string(wr_opcode_name(w.wr.opcode)).c_str(), w.length, w.first_psn, w.npkts, w.next_pkt,
                      w.rcvd_pkts, int(w.started));
    s.append(buf, size_t(n));
  }
  return s;
}

Qp::Qp(Device& dev, uint32_t qpn, const QpInitAttr& init)
    : dev_(dev), qpn_(qpn), init_(init), sq_(init.cap.max_send_wr), rq_(init.srq ? 1 : init.cap.max_recv_wr) {
  attr_.cap = init.cap;
}

Device::Device(Link& link, Clock& clock, const Config& cfg)
    : link_(link), clock_(clock), cfg_(cfg), mrs_(cfg.max_mr), next_qpn_(kFirstQpn), scratch_(16384) {}

Device::~Device() = default;

uint32_t Device::mtu_limit() const {
  // Largest IB MTU whose frame fits: Ethernet + IPv6 + UDP + BTH + largest ETH + ICRC.
  const uint32_t overhead = 14 + 8 + 40 + 8 + 12 + 28 + 4;
  uint32_t m = 4096;
  while (m > 256 && m + overhead > link_.max_frame()) m /= 2;
  return m;
}

Pd* Device::alloc_pd() {
  pds_.push_back(std::make_unique<Pd>());
  pds_.back()->handle = ++pd_handles_;
  return pds_.back().get();
}

int Device::dealloc_pd(Pd* pd) {
  for (auto& q : qps_)
    if (q->init_.pd == pd) return EBUSY;
  for (auto& s : srqs_)
    if (s->pd() == pd) return EBUSY;
  auto it = std::find_if(pds_.begin(), pds_.end(), [&](auto& p) { return p.get() == pd; });
  if (it == pds_.end()) return EINVAL;
  pds_.erase(it);
  return 0;
}

Mr* Device::reg_mr(Pd* pd, void* addr, uint64_t length, uint32_t access) {
  return reg_mr_iova(pd, addr, length, reinterpret_cast<uintptr_t>(addr), access);
}

Mr* Device::reg_mr_iova(Pd* pd, void* addr, uint64_t length, uint64_t iova, uint32_t access) {
  if (!pd) return nullptr;
  // IB rule: remote write or atomic access needs local write access too.
  if ((access & (kRemoteWrite | kRemoteAtomic)) && !(access & kLocalWrite)) {
    errno = EINVAL;
    return nullptr;
  }
  Mr* mr = mrs_.reg(pd, addr, length, iova, access);
  if (!mr) errno = ENOMEM;
  return mr;
}

int Device::dereg_mr(Mr* mr) { return mr && mrs_.dereg(mr->lkey) ? 0 : EINVAL; }

Cq* Device::create_cq(uint32_t depth) {
  if (depth == 0 || depth > cfg_.max_cqe) return nullptr;
  cqs_.push_back(std::make_unique<Cq>(depth));
  return cqs_.back().get();
}

int Device::destroy_cq(Cq* cq) {
  for (auto& q : qps_)
    if (q->init_.send_cq == cq || q->init_.recv_cq == cq) return EBUSY;
  auto it = std::find_if(cqs_.begin(), cqs_.end(), [&](auto& c) { return c.get() == cq; });
  if (it == cqs_.end()) return EINVAL;
  cqs_.erase(it);
  return 0;
}

Srq* Device::create_srq(Pd* pd, uint32_t max_wr, uint32_t max_sge) {
  if (!pd || max_wr == 0 || max_wr > cfg_.max_qp_wr || max_sge == 0 || max_sge > kMaxSge) return nullptr;
  srqs_.push_back(std::make_unique<Srq>(pd, max_wr, max_sge));
  return srqs_.back().get();
}

int Device::destroy_srq(Srq* srq) {
  for (auto& q : qps_)
    if (q->init_.srq == srq) return EBUSY;
  auto it = std::find_if(srqs_.begin(), srqs_.end(), [&](auto& s) { return s.get() == srq; });
  if (it == srqs_.end()) return EINVAL;
  srqs_.erase(it);
  return 0;
}

Qp* Device::create_qp(const QpInitAttr& init) {
  const QpCap& c = init.cap;
  if (!init.pd || !init.send_cq || !init.recv_cq || init.qp_type != QpType::RC) return nullptr;
  if (c.max_send_wr == 0 || c.max_send_wr > cfg_.max_qp_wr || c.max_recv_wr > cfg_.max_qp_wr ||
      c.max_send_sge > kMaxSge || c.max_recv_sge > kMaxSge || c.max_inline_data > kMaxInline)
    return nullptr;
  if (!init.srq && c.max_recv_wr == 0) return nullptr;
  if (qps_.size() >= cfg_.max_qp) return nullptr;
  uint32_t qpn = next_qpn_++;
  auto qp = std::unique_ptr<Qp>(new Qp(*this, qpn, init));
  Qp* raw = qp.get();
  qps_.push_back(std::move(qp));
  if (qp_table_.size() <= qpn - kFirstQpn) qp_table_.resize(qpn - kFirstQpn + 1, nullptr);
  qp_table_[qpn - kFirstQpn] = raw;
  return raw;
}

int Device::destroy_qp(Qp* qp) {
  auto it = std::find_if(qps_.begin(), qps_.end(), [&](auto& q) { return q.get() == qp; });
  if (it == qps_.end()) return EINVAL;
  dev_ctr_.add(qp->ctr_);
  qp_table_[qp->qpn_ - kFirstQpn] = nullptr;
  qps_.erase(it);
  return 0;
}

Qp* Device::qp_by_num(uint32_t qpn) const {
  if (qpn < kFirstQpn || qpn - kFirstQpn >= qp_table_.size()) return nullptr;
  return qp_table_[qpn - kFirstQpn];
}

Counters Device::counters() const {
  Counters c = dev_ctr_;
  for (auto& q : qps_) c.add(q->ctr_);
  return c;
}

// ---- The RC QP state machine ----------------------------------------------------------------
// Required and optional attributes per transition, for RC (IBA 11.2.4.2, ibv_modify_qp(3)).
namespace {

struct Transition {
  QpState from, to;
  uint32_t required, optional;
};

constexpr uint32_t kS = kAttrState;
constexpr Transition kRcTransitions[] = {
    {QpState::Reset, QpState::Init, kS | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, 0},
    {QpState::Init, QpState::Init, kS, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags},
    {QpState::Init, QpState::Rtr,
     kS | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic | kAttrMinRnrTimer,
     kAttrAltPath | kAttrAccessFlags | kAttrPkeyIndex},
    {QpState::Rtr, QpState::Rts, kS | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic,
     kAttrCurState | kAttrAltPath | kAttrAccessFlags | kAttrMinRnrTimer | kAttrPathMigState},
    {QpState::Rts, QpState::Rts, kS,
     kAttrCurState | kAttrAccessFlags | kAttrAltPath | kAttrPathMigState | kAttrMinRnrTimer},
    {QpState::Rts, QpState::Sqd, kS, kAttrEnSqdAsyncNotify},
    {QpState::Sqd, QpState::Rts, kS,
     kAttrCurState | kAttrAccessFlags | kAttrAltPath | kAttrMinRnrTimer | kAttrPathMigState},
    {QpState::Sqd, QpState::Sqd, kS,
     kAttrPkeyIndex | kAttrPort | kAttrAv | kAttrPathMtu | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
         kAttrMaxQpRdAtomic | kAttrMaxDestRdAtomic | kAttrAltPath | kAttrAccessFlags | kAttrMinRnrTimer |
         kAttrPathMigState | kAttrCurState},
    {QpState::Sqe, QpState::Rts, kS, kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer},
};

}  // namespace

int Device::modify_qp(Qp* qp, const QpAttr& a, uint32_t mask) {
  if (!qp) return EINVAL;
  QpState cur = qp->attr_.qp_state;
  if (mask & kAttrCurState) {
    if (a.cur_qp_state != cur) return EINVAL;
  }
  QpState to = (mask & kAttrState) ? a.qp_state : cur;
  if (uint32_t(to) > uint32_t(QpState::Err)) return EINVAL;

  uint32_t required = 0, optional = 0;
  bool legal = false;
  if (!(mask & kAttrState)) {
    // No STATE: a modify within the current state (INIT->INIT, RTS->RTS, SQD->SQD), as Linux
    // treats it; RESET, RTR, SQE and ERR take no attributes this way.
    for (const Transition& t : kRcTransitions)
      if (t.from == cur && t.to == cur) {
        legal = true;
        required = t.required & ~kS;
        optional = t.optional;
      }
  } else {
    if (to == QpState::Reset || to == QpState::Err) {
      legal = true;  // from any state, STATE only (CUR_STATE allowed)
      required = kS;
      optional = kAttrCurState;
    } else {
      for (const Transition& t : kRcTransitions)
        if (t.from == cur && t.to == to) {
          legal = true;
          required = t.required;
          optional = t.optional;
        }
    }
  }
  if (!legal) return EINVAL;
  if ((mask & required) != required || (mask & ~(required | optional))) return EINVAL;

  // Values.
  if ((mask & kAttrPathMtu) && (uint32_t(a.path_mtu) < 1 || uint32_t(a.path_mtu) > 5 ||
                                mtu_bytes(a.path_mtu) > mtu_limit()))
    return EINVAL;
  if ((mask & kAttrPort) && a.port_num != 1) return EINVAL;
  if ((mask & kAttrPkeyIndex) && a.pkey_index != 0) return EINVAL;
  if ((mask & kAttrMaxQpRdAtomic) && a.max_rd_atomic > cfg_.max_rd_atomic) return EINVAL;
  if ((mask & kAttrMaxDestRdAtomic) && a.max_dest_rd_atomic > cfg_.max_rd_atomic) return EINVAL;
  if ((mask & kAttrDestQpn) && a.dest_qp_num > 0xFFFFFF) return EINVAL;
  if ((mask & kAttrRetryCnt) && a.retry_cnt > 7) return EINVAL;
  if ((mask & kAttrRnrRetry) && a.rnr_retry > 7) return EINVAL;
  if ((mask & kAttrMinRnrTimer) && a.min_rnr_timer > 31) return EINVAL;
  if ((mask & kAttrTimeout) && a.timeout > 31) return EINVAL;

  // Apply.
  QpAttr& q = qp->attr_;
  if (mask & kAttrAccessFlags) q.qp_access_flags = a.qp_access_flags;
  if (mask & kAttrPkeyIndex) q.pkey_index = a.pkey_index;
  if (mask & kAttrPort) q.port_num = a.port_num;
  if (mask & kAttrAv) q.ah_attr = a.ah_attr;
  if (mask & kAttrPathMtu) {
    q.path_mtu = a.path_mtu;
    qp->mtu_ = mtu_bytes(a.path_mtu);
  }
  if (mask & kAttrDestQpn) q.dest_qp_num = a.dest_qp_num;
  if (mask & kAttrRqPsn) {
    q.rq_psn = a.rq_psn & proto::kPsnMask;
    qp->epsn_ = q.rq_psn;
  }
  if (mask & kAttrMaxDestRdAtomic) {
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    qp->res_.assign(std::max<uint32_t>(1, a.max_dest_rd_atomic), RdAtomicRes{});
    qp->res_next_ = 0;
    qp->res_pending_ = 0;
  }
  if (mask & kAttrMinRnrTimer) q.min_rnr_timer = a.min_rnr_timer;
  if (mask & kAttrSqPsn) {
    q.sq_psn = a.sq_psn & proto::kPsnMask;
    qp->sq_psn_ = q.sq_psn;
  }
  if (mask & kAttrTimeout) q.timeout = a.timeout;
  if (mask & kAttrRetryCnt) {
    q.retry_cnt = a.retry_cnt;
    qp->retries_left_ = a.retry_cnt;
  }
  if (mask & kAttrRnrRetry) {
    q.rnr_retry = a.rnr_retry;
    qp->rnr_retries_left_ = a.rnr_retry;
  }
  if (mask & kAttrMaxQpRdAtomic) q.max_rd_atomic = a.max_rd_atomic;
  if (mask & kAttrEnSqdAsyncNotify) q.en_sqd_async_notify = a.en_sqd_async_notify;

  q.qp_state = to;
  q.cur_qp_state = to;
  if (to == QpState::Reset) reset_qp(*qp);
  if (to == QpState::Rtr) build_template(*qp);
  if (to == QpState::Rts && cur != QpState::Rts) qp->last_progress_ns_ = clock_.now_ns();
  if (to == QpState::Err && cur != QpState::Err) set_error(*qp);
  return 0;
}

void Device::reset_qp(Qp& qp) {
  qp.sq_.clear();
  qp.rq_.clear();
  qp.send_idx_ = 0;
  qp.rd_atomic_inflight_ = 0;
  qp.pkts_since_ackreq_ = 0;
  qp.rnr_until_ns_ = 0;
  qp.read_retry_psn_ = UINT32_MAX;
  qp.acked_valid_ = false;
  qp.req_state_ = ReqState::Idle;
  qp.resp_state_ = RespState::Idle;
  qp.seq_nak_sent_ = false;
  qp.have_recv_ = false;
  qp.recv_off_ = 0;
  qp.write_host_ = nullptr;
  qp.write_left_ = 0;
  qp.ack_pending_ = false;
  qp.msn_ = 0;
  for (auto& r : qp.res_) r = RdAtomicRes{};
  qp.res_pending_ = 0;
  qp.attr_ = QpAttr{};
  qp.attr_.cap = qp.init_.cap;
}

void Device::build_template(Qp& qp) {
  proto::Packet& t = qp.tmpl_;
  t = proto::Packet{};
  const AddressVector& av = qp.attr_.ah_attr;
  t.eth_src = cfg_.mac;
  t.eth_dst = av.dmac;
  if (gid_is_v4mapped(av.dgid)) {
    t.ip_version = 4;
    std::memcpy(t.ip_src.data(), cfg_.gid.data() + 12, 4);
    std::memcpy(t.ip_dst.data(), av.dgid.data() + 12, 4);
  } else {
    t.ip_version = 6;
    t.ip_src = cfg_.gid;
    t.ip_dst = av.dgid;
    t.flow_label = av.flow_label;
  }
  t.dscp = av.traffic_class >> 2;
  t.ecn = av.traffic_class & 3;
  t.ttl = av.hop_limit ? av.hop_limit : 64;
  t.ipv4_flags_frag = 0x4000;
  t.udp_sport = proto::udp_source_port(qp.qpn_, qp.attr_.dest_qp_num);
  t.pkey = qp.pkey_ = cfg_.pkey;
  t.dest_qp = qp.attr_.dest_qp_num;
  qp.req_pkt_ = t;
  qp.resp_pkt_ = t;
}

// Entering ERR: the requester and responder stop; every outstanding WR completes flushed.
void Device::set_error(Qp& qp) {
  qp.attr_.qp_state = QpState::Err;
  qp.attr_.cur_qp_state = QpState::Err;
  qp.req_state_ = ReqState::Error;
  qp.resp_state_ = RespState::Error;
  flush(qp);
}

void Device::flush(Qp& qp) {
  while (!qp.sq_.empty()) complete_wqe(qp, WcStatus::WrFlushErr);
  qp.send_idx_ = 0;
  qp.rd_atomic_inflight_ = 0;
  auto flush_recv = [&](uint64_t wr_id) {
    Wc wc;
    wc.wr_id = wr_id;
    wc.status = WcStatus::WrFlushErr;
    wc.opcode = WcOpcode::Recv;
    wc.qp_num = qp.qpn_;
    qp.init_.recv_cq->push(wc);
  };
  if (qp.have_recv_) {
    flush_recv(qp.cur_recv_.wr_id);
    qp.have_recv_ = false;
  }
  if (!qp.init_.srq) {
    while (!qp.rq_.empty()) {
      flush_recv(qp.rq_.front().wr_id);
      qp.rq_.pop();
    }
  }
}

// ---- Posting ------------------------------------------------------------------------------
int Device::post_send(Qp* qp, const SendWr& wr) {
  if (!qp) return EINVAL;
  QpState s = qp->attr_.qp_state;
  if (s == QpState::Reset || s == QpState::Init || s == QpState::Rtr) return EINVAL;
  if (wr.num_sge > qp->init_.cap.max_send_sge && !(wr.send_flags & kSendInline)) return EINVAL;
  if (wr.num_sge > kMaxSge) return EINVAL;
  switch (wr.opcode) {
    case WrOpcode::Send: case WrOpcode::SendWithImm: case WrOpcode::SendWithInv:
    case WrOpcode::RdmaWrite: case WrOpcode::RdmaWriteWithImm: case WrOpcode::RdmaRead:
    case WrOpcode::AtomicCmpSwp: case WrOpcode::AtomicFetchAdd:
      break;
    default:
      return EINVAL;
  }
  uint64_t len = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) len += wr.sg_list[i].length;
  const bool atomic = wr.opcode == WrOpcode::AtomicCmpSwp || wr.opcode == WrOpcode::AtomicFetchAdd;
  const bool is_inline = (wr.send_flags & kSendInline) && !atomic && wr.opcode != WrOpcode::RdmaRead;
  if (is_inline && len > qp->init_.cap.max_inline_data) return EINVAL;
  if (len > (1ull << 31)) return EINVAL;
  if (qp->sq_.full()) return ENOMEM;

  // Fill only what the engine reads (the WQE is large; zeroing it all costs per message).
  SendWqe& w = qp->sq_.push_slot();
  w.wr = wr;
  w.wr.sg_list = nullptr;
  w.npkts = w.first_psn = w.next_pkt = w.rcvd_pkts = w.sent_max = 0;
  w.started = false;
  w.length = uint32_t(len);
  w.signaled = qp->init_.sq_sig_all || (wr.send_flags & kSendSignaled);
  w.is_inline = is_inline;
  if (is_inline) {
    uint32_t off = 0;
    for (uint32_t i = 0; i < wr.num_sge; ++i) {
      std::memcpy(w.inline_data + off, reinterpret_cast<const void*>(wr.sg_list[i].addr), wr.sg_list[i].length);
      off += wr.sg_list[i].length;
    }
    w.wr.num_sge = len ? 1 : 0;
    w.sge[0] = Sge{0, uint32_t(len), 0};
  } else {
    for (uint32_t i = 0; i < wr.num_sge; ++i) w.sge[i] = wr.sg_list[i];
  }
  if (s == QpState::Err) flush(*qp);  // a WR posted in ERR completes at once, flushed
  return 0;
}

int Device::post_recv(Qp* qp, const RecvWr& wr) {
  if (!qp || qp->init_.srq) return EINVAL;
  if (qp->attr_.qp_state == QpState::Reset) return EINVAL;
  if (wr.num_sge > qp->init_.cap.max_recv_sge || wr.num_sge > kMaxSge) return EINVAL;
  if (qp->rq_.full()) return ENOMEM;
  RecvWqe& r = qp->rq_.push_slot();
  r.wr_id = wr.wr_id;
  r.num_sge = wr.num_sge;
  for (uint32_t i = 0; i < wr.num_sge; ++i) r.sge[i] = wr.sg_list[i];
  if (qp->attr_.qp_state == QpState::Err) flush(*qp);
  return 0;
}

int Device::post_srq_recv(Srq* srq, const RecvWr& wr) {
  if (!srq || wr.num_sge > srq->max_sge()) return EINVAL;
  if (srq->rq().full()) return ENOMEM;
  RecvWqe& r = srq->rq().push_slot();
  r.wr_id = wr.wr_id;
  r.num_sge = wr.num_sge;
  for (uint32_t i = 0; i < wr.num_sge; ++i) r.sge[i] = wr.sg_list[i];
  return 0;
}

// ---- Transmit and the polling loop ------------------------------------------------------------
bool Device::emit(Qp& qp, proto::Packet& p) {
  if (tx_n_ == tx_.size()) flush_tx();
  PacketBuf& b = tx_[tx_n_];
  const size_t len = proto::frame_len(p);
  if (!link_.alloc(b, uint32_t(len))) return false;
  proto::BuildResult r = proto::build(p, std::span<uint8_t>(b.data, b.cap));
  if (!r.ok()) {
    link_.release(b);
    return false;
  }
  b.len = uint32_t(r.len);
  ++tx_n_;
  ++qp.ctr_.tx_packets;
  qp.ctr_.tx_bytes += r.len;
  return true;
}

void Device::flush_tx() {
  size_t off = 0;
  while (off < tx_n_) {
    size_t n = link_.send(tx_.data() + off, tx_n_ - off);
    if (n == 0) break;
    off += n;
  }
  for (size_t i = off; i < tx_n_; ++i) link_.release(tx_[i]);  // link refused: lost, as on a wire
  tx_n_ = 0;
}

void Device::rx_frame(PacketBuf& b) {
  proto::Packet& p = rx_pkt_;
  proto::ParseResult r = proto::parse(std::span<const uint8_t>(b.data, b.len), p);
  if (!r.ok()) {
    if (r.error == proto::ParseError::BadIcrc) ++dev_ctr_.icrc_errors;
    else ++dev_ctr_.malformed;
    return;
  }
  // Ours? Destination MAC and IP must be this device's.
  bool ip_ok = p.ip_version == 4 ? (gid_is_v4mapped(cfg_.gid) && std::memcmp(p.ip_dst.data(), cfg_.gid.data() + 12, 4) == 0)
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
  if ((p.pkey & 0x7FFF) != (qp->pkey_ & 0x7FFF) || !((p.pkey | qp->pkey_) & 0x8000)) {
    ++qp->ctr_.dropped_pkey;
    return;
  }
  QpState s = qp->attr_.qp_state;
  if (s == QpState::Reset || s == QpState::Init || s == QpState::Err) {
    ++qp->ctr_.dropped_bad_state;
    return;
  }
  ++qp->ctr_.rx_packets;
  qp->ctr_.rx_bytes += b.len;
  if (p.info().request) responder(*qp, p);
  else if (s == QpState::Rts || s == QpState::Sqd || s == QpState::Sqe) completer(*qp, p);
  else ++qp->ctr_.dropped_bad_state;
}

bool Device::progress() {
  bool did = false;
  size_t n = link_.recv(rx_.data(), std::min<size_t>(cfg_.rx_burst, rx_.size()));
  for (size_t i = 0; i < n; ++i) {
    rx_frame(rx_[i]);
    link_.release(rx_[i]);
  }
  did = n > 0;
  for (auto& qpp : qps_) {
    Qp& qp = *qpp;
    QpState s = qp.attr_.qp_state;
    // Responses first, in request order; a coalesced ACK for later requests only after them.
    if (s == QpState::Rtr || s == QpState::Rts || s == QpState::Sqd) send_read_responses(qp);
    if (qp.ack_pending_ && !responses_pending(qp)) {
      qp.ack_pending_ = false;
      send_ack(qp, proto::Syndrome::ack(), qp.ack_psn_);
      did = true;
    }
    if (s == QpState::Rts || s == QpState::Sqd) {
      uint64_t before = qp.ctr_.tx_packets;
      check_timers(qp);
      requester(qp);
      did |= qp.ctr_.tx_packets != before;
    }
  }
  if (tx_n_) flush_tx();
  return did;
}

}  // namespace uroce::engine
