// Live telemetry, the engine's half (telemetry.hpp): QP rows and the snapshot hand-off.
#include "engine/telemetry.hpp"

#include <arpa/inet.h>

#include <chrono>

#include "engine/engine.hpp"

namespace uroce::engine {

namespace {
std::string gid_text(const proto::Ip6& g) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (gid_is_v4mapped(g)) inet_ntop(AF_INET, g.data() + 12, buf, sizeof buf);
  else inet_ntop(AF_INET6, g.data(), buf, sizeof buf);
  return buf;
}
}  // namespace

QpInfo qp_info(const Qp& qp) {
  QpInfo i;
  const QpAttr& a = qp.attr();
  i.qpn = qp.qpn();
  i.type = qp.init_attr().qp_type;
  i.state = a.qp_state;
  i.dest_qpn = i.type == QpType::UD ? 0 : a.dest_qp_num;
  i.path_mtu = qp.mtu;
  i.sq_psn = qp.tx.sq_psn;
  i.rq_psn = qp.rx.epsn;
  i.acked_psn = qp.tx.acked_psn;
  i.sq_outstanding = qp.sq_outstanding();
  i.rq_outstanding = qp.init_attr().srq ? 0 : qp.rq_outstanding();
  i.rd_atomic_inflight = qp.tx.rd_atomic_inflight;
  i.retry_cnt = a.retry_cnt;
  i.retries_left = qp.tx.retries_left;
  i.rnr_retry = a.rnr_retry;
  i.rnr_retries_left = qp.tx.rnr_retries_left;
  i.timeout = a.timeout;
  // Before RTR a connected QP has no peer yet; UD QPs never have one.
  if (i.type != QpType::UD && a.qp_state != QpState::Reset && a.qp_state != QpState::Init)
    i.remote_gid = gid_text(a.ah_attr.dgid);
  i.req_state = req_state_name(qp.tx.req_state);
  i.comp_state = comp_state_name(qp.tx.comp_state);
  i.resp_state = resp_state_name(qp.rx.state);
  if (qp.cc) {
    i.cc = qp.cc->describe();
    i.cc_rate_mbps = qp.cc->limited() ? uint64_t(qp.cc->rate_bps() / 1e6) : 0;
  }
  i.counters = qp.ctr;
  return i;
}

bool SnapshotMailbox::request(const SnapshotRequest& req, Snapshot& out, uint32_t wait_ms) {
  std::lock_guard<std::mutex> one(one_at_a_time_);
  std::unique_lock<std::mutex> lk(m_);
  req_ = &req;
  out_ = &out;
  ++seq_;
  want_.store(true, std::memory_order_release);
  const bool served = cv_.wait_for(lk, std::chrono::milliseconds(wait_ms), [&] { return out_ == nullptr; });
  // Not served in time: withdraw, so that a progress() arriving later finds nothing to fill.
  want_.store(false, std::memory_order_relaxed);
  req_ = nullptr;
  out_ = nullptr;
  return served;
}

void SnapshotMailbox::serve(Device& dev) {
  std::unique_lock<std::mutex> lk(m_);
  if (!out_) {  // withdrawn meanwhile
    want_.store(false, std::memory_order_relaxed);
    return;
  }
  const SnapshotRequest& r = *req_;
  Counters sum;
  if (r.with_counters && !dev.counters_step(seq_, param::kTelemetrySumQpsPerStep, sum)) return;  // more next step
  want_.store(false, std::memory_order_relaxed);
  Snapshot& s = *out_;
  s = Snapshot{};
  s.counters = sum;
  const auto& qps = dev.qps();
  s.qp_total = uint32_t(qps.size());
  if (r.one_qp) {
    if (const Qp* q = dev.qp_by_num(r.qpn)) s.qps.push_back(qp_info(*q));
  } else {
    for (size_t i = r.offset; i < qps.size() && s.qps.size() < r.max_qps; ++i) s.qps.push_back(qp_info(*qps[i]));
  }
  if (extra_) extra_(s);
  out_ = nullptr;
  req_ = nullptr;
  lk.unlock();
  cv_.notify_all();
}

void SnapshotMailbox::set_extra(std::function<void(Snapshot&)> f) {
  std::lock_guard<std::mutex> lk(m_);
  extra_ = std::move(f);
}

}  // namespace uroce::engine
