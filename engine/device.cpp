// The device's resources: PDs, MRs, CQs, SRQs and QPs, created and destroyed with verbs'
// rules; the device's counters.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/cm.hpp"
#include "engine/engine.hpp"
#include "engine/pages.hpp"
#include "proto/multicast.hpp"

namespace uroce::engine {

Device::Device(Link& link, Clock& clock, const Config& cfg)
    : link_(link),
      clock_(clock),
      cfg_(cfg),
      rng_(cfg.seed),
      mrs_(cfg.max_mr, rng_),
      tx_(link),
      xrc_srqs_(param::kMaxSrq),
      qp_table_(cfg.max_qp),
      recent_qpns_(param::kRecentQpns, 0),
      scratch_(param::kScratchBytes) {
  cfg_.rx_burst = std::min<uint32_t>(cfg_.rx_burst, param::kRxBurstMax);
  cfg_.max_unacked_psns = std::clamp<uint32_t>(cfg_.max_unacked_psns, 1, param::kMaxUnackedPsnsMax);
  cfg_.ack_req_every = std::clamp<uint32_t>(cfg_.ack_req_every, 1, param::kAckReqEveryMax);
  cfg_.ack_every = std::min<uint32_t>(cfg_.ack_every, param::kAckEveryMax);
  if (cfg_.ecn > 2) cfg_.ecn = 0;  // CE is a switch's mark, never an endpoint's
  cfg_.cnp_dscp &= 0x3F;
  if (cfg_.gids.empty()) cfg_.gids.push_back(cfg_.gid);
  index_gids();
  if (cfg_.cm) cm_ = std::make_unique<cm::Manager>(*this, rng_.next());
}

void Device::index_gids() {
  local4_.clear();
  local6_.clear();
  for (const proto::Ip6& g : cfg_.gids) {
    if (g == proto::Ip6{}) continue;
    if (gid_is_v4mapped(g)) {
      uint32_t a;
      std::memcpy(&a, g.data() + 12, 4);
      local4_.push_back(a);
    } else {
      local6_.push_back(g);
    }
  }
}

void Device::set_gids(const std::vector<proto::Ip6>& gids) {
  cfg_.gids = gids;
  if (cfg_.gids.empty()) cfg_.gids.push_back(proto::Ip6{});
  index_gids();
}

const proto::Ip6* Device::sgid(uint32_t index) const {
  if (index >= cfg_.gids.size() || cfg_.gids[index] == proto::Ip6{}) return nullptr;
  return &cfg_.gids[index];
}

bool Device::is_local(const proto::Ip6& gid) const {
  for (const proto::Ip6& g : cfg_.gids)
    if (g == gid && g != proto::Ip6{}) return true;
  return false;
}

Ah* Device::create_ah(Pd* pd, const AddressVector& av) {
  const proto::Ip6* src = sgid(av.sgid_index);
  if (!pd || !src || gid_is_v4mapped(*src) != gid_is_v4mapped(av.dgid)) {
    errno = EINVAL;
    return nullptr;
  }
  if (ahs_.size() >= param::kMaxAh) {
    errno = ENOMEM;
    return nullptr;
  }
  ahs_.push_back(std::make_unique<Ah>());
  Ah* ah = ahs_.back().get();
  ah->pd = pd;
  ah->av = av;
  ah->sgid = *src;
  if (is_local(av.dgid)) ah->av.dmac = cfg_.mac;  // loopback: no address resolution
  else if (proto::is_multicast_gid(av.dgid)) ah->av.dmac = proto::multicast_mac(av.dgid);  // a group's own MAC
  return ah;
}

int Device::destroy_ah(Ah* ah) {
  auto it = std::find_if(ahs_.begin(), ahs_.end(), [&](auto& a) { return a.get() == ah; });
  if (it == ahs_.end()) return EINVAL;
  ahs_.erase(it);
  return 0;
}

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

Pd* Device::pd_by_handle(uint32_t handle) const {
  for (const auto& p : pds_)
    if (p->handle == handle) return p.get();
  return nullptr;
}

int Device::dealloc_pd(Pd* pd) {
  if (mrs_.uses_pd(pd)) return EBUSY;
  for (auto& a : ahs_)
    if (a->pd == pd) return EBUSY;
  for (auto& q : qps_)
    if (q->init.pd == pd) return EBUSY;
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

// What reg_mr and rereg_mr check: 0 or an errno.
// An on-demand paging registration (kOnDemand) is not checked for pages: its accesses fault them
// in (engine/pages.hpp). The implicit one (address 0, length UINT64_MAX) covers the whole
// address space, its addresses the process's own.
int Device::check_registration(const Pd* pd, void* addr, uint64_t length, uint32_t access) const {
  if (!pd) return EINVAL;
  if (!is_implicit_odp(addr, length, access)) {
    if (length > param::kMaxMrSize) return EINVAL;
    if (!(access & kOnDemand) && !pages_mapped(addr, length)) return EFAULT;  // as the kernel, which cannot pin what is not there
  }
  // Writing back for persistence touches every page of the range; an ODP MR's may not be there.
  if ((access & kOnDemand) && (access & kFlushPersistent)) return EINVAL;
  // IB rule: remote write or atomic access needs local write access too.
  if ((access & (kRemoteWrite | kRemoteAtomic)) && !(access & kLocalWrite)) return EINVAL;
  return 0;
}

Mr* Device::reg_mr_iova(Pd* pd, void* addr, uint64_t length, uint64_t iova, uint32_t access) {
  if (int e = check_registration(pd, addr, length, access)) {
    errno = e;
    return nullptr;
  }
  if (is_implicit_odp(addr, length, access)) iova = 0;  // its addresses are the process's
  Mr* mr = mrs_.reg(pd, addr, length, iova, access);
  if (!mr) errno = ENOMEM;
  return mr;
}

int Device::rereg_mr(Mr* mr, Pd* pd, void* addr, uint64_t length, uint64_t iova, uint32_t access) {
  if (!mr || !mr->valid || mrs_.by_lkey(mr->lkey) != mr) return EINVAL;
  if (mr->windows) return EBUSY;  // its windows would point at what it no longer maps
  if (int e = check_registration(pd, addr, length, access)) return e;
  mrs_.modify(*mr, pd, addr, length, iova, access);
  return 0;
}

int Device::advise_mr(const Pd* pd, Advice advice, const Sge* sges, uint32_t n) const {
  const bool write = advice == Advice::PrefetchWrite;
  for (uint32_t i = 0; i < n; ++i) {
    const Sge& s = sges[i];
    const Mr* mr = mrs_.by_lkey(s.lkey);
    if (!mr || mr->pd != pd || (write && !(mr->access & kLocalWrite))) return EFAULT;
    if (!(mr->access & kOnDemand)) return EINVAL;
    if (!mr_contains(*mr, s.addr, s.length)) return EFAULT;
  }
  if (advice == Advice::PrefetchNoFault) return 0;
  for (uint32_t i = 0; i < n; ++i)
    if (!mr_bytes(*mrs_.by_lkey(sges[i].lkey), sges[i].addr, sges[i].length, write).ok) return EFAULT;
  return 0;
}

int Device::dereg_mr(Mr* mr) {
  if (mr && mr->valid && mr->windows) return EBUSY;  // IBA 10.6.7.2.6 (rxe says EINVAL)
  return mr && mrs_.dereg(mr->lkey) ? 0 : EINVAL;
}

Mw* Device::alloc_mw(Pd* pd, uint8_t type) {
  if (!pd || (type != 1 && type != 2)) {
    errno = EINVAL;
    return nullptr;
  }
  Mw* w = mrs_.alloc_mw(pd, type);
  if (!w) errno = ENOMEM;
  return w;
}

int Device::dealloc_mw(Mw* mw) {
  if (!mw || !mw->valid || mrs_.mw_by_rkey(mw->rkey) != mw) return EINVAL;
  mrs_.dealloc_mw(*mw);
  return 0;
}

Cq* Device::create_cq(uint32_t depth, bool completion_times) {
  if (depth == 0 || depth > cfg_.max_cqe || cqs_.size() >= cfg_.max_cq) return nullptr;
  cqs_.push_back(std::make_unique<Cq>(depth, completion_times ? &clock_ : nullptr));
  cqs_.back()->slot = uint32_t(cqs_.size() - 1);
  return cqs_.back().get();
}

// Objects are taken out of their vectors by their slot (the last one moves into it): creating
// and destroying N of them costs O(N), not O(N^2) (262,144 QPs and CQs: issue 30).
namespace {
template <typename T>
void take_out(std::vector<std::unique_ptr<T>>& v, uint32_t slot) {
  v[slot] = std::move(v.back());
  v[slot]->slot = slot;
  v.pop_back();
}
}  // namespace

int Device::destroy_cq(Cq* cq) {
  if (!cq || cq->slot >= cqs_.size() || cqs_[cq->slot].get() != cq) return EINVAL;
  if (cq->qp_refs) return EBUSY;
  take_out(cqs_, cq->slot);
  return 0;
}

Srq* Device::create_srq(Pd* pd, uint32_t max_wr, uint32_t max_sge) {
  return create_xrc_srq(pd, nullptr, nullptr, max_wr, max_sge);
}

Srq* Device::create_xrc_srq(Pd* pd, Xrcd* xrcd, Cq* cq, uint32_t max_wr, uint32_t max_sge) {
  if (!pd || max_wr == 0 || max_wr > cfg_.max_qp_wr || max_sge == 0 || max_sge > kMaxSge || (xrcd && !cq)) {
    errno = EINVAL;
    return nullptr;
  }
  if (srqs_.size() >= param::kMaxSrq) {
    errno = ENOMEM;
    return nullptr;
  }
  uint32_t srqn = 0;
  if (xrcd) {  // a random number, as QP numbers are: an off-path injector cannot guess it
    do {
      srqn = rng_.next32() & 0xFFFFFF;
    } while (srqn == 0 || xrc_srqs_.find(srqn));
  }
  srqs_.push_back(std::make_unique<Srq>(pd, max_wr, max_sge, xrcd, cq, srqn));
  Srq* s = srqs_.back().get();
  if (xrcd) {
    xrc_srqs_.insert(srqn, s);
    ++xrcd->users;
    ++cq->qp_refs;
  }
  return s;
}

Srq* Device::xrc_srq_by_num(uint32_t srqn) const {
  Srq* const* s = xrc_srqs_.find(srqn);
  return s ? *s : nullptr;
}

int Device::destroy_srq(Srq* srq) {
  auto it = std::find_if(srqs_.begin(), srqs_.end(), [&](auto& s) { return s.get() == srq; });
  if (it == srqs_.end()) return EINVAL;
  for (auto& q : qps_) {
    if (q->init.srq == srq) return EBUSY;
    // An XRC target QP whose request under way took a receive WQE of this SRQ: the WQE goes
    // with its queue, and the rest of that message finds no SRQ (an invalid request).
    if (q->rx.xrc_srq == srq) {
      q->rx.xrc_srq = nullptr;
      q->rx.have_recv = false;
    }
  }
  if (srq->xrcd()) {
    xrc_srqs_.erase(srq->srqn());
    --srq->xrcd()->users;
    --srq->cq()->qp_refs;
  }
  srqs_.erase(it);
  return 0;
}

Xrcd* Device::alloc_xrcd() {
  if (xrcds_.size() >= param::kMaxXrcd) {
    errno = ENOMEM;
    return nullptr;
  }
  xrcds_.push_back(std::make_unique<Xrcd>());
  return xrcds_.back().get();
}

int Device::dealloc_xrcd(Xrcd* xrcd) {
  auto it = std::find_if(xrcds_.begin(), xrcds_.end(), [&](auto& x) { return x.get() == xrcd; });
  if (it == xrcds_.end()) return EINVAL;
  if (xrcd->users) return EBUSY;
  xrcds_.erase(it);
  return 0;
}

Qp* Device::create_qp(const QpInitAttr& init) {
  const QpCap& c = init.cap;
  switch (init.qp_type) {
    case QpType::RC: case QpType::UC: case QpType::UD:
      if (!init.pd || !init.send_cq || !init.recv_cq || init.xrcd || (!init.srq && c.max_recv_wr == 0)) return nullptr;
      break;
    case QpType::XrcIni:  // a send queue only
      if (!init.pd || !init.send_cq || init.recv_cq || init.srq || init.xrcd) return nullptr;
      break;
    case QpType::XrcTgt:  // no queue: its domain's XRC SRQs receive
      if (!init.xrcd || init.pd || init.send_cq || init.recv_cq || init.srq) return nullptr;
      break;
    default:
      return nullptr;
  }
  const bool tgt = init.qp_type == QpType::XrcTgt;
  if ((c.max_send_wr == 0 && !tgt) || c.max_send_wr > cfg_.max_qp_wr || c.max_recv_wr > cfg_.max_qp_wr ||
      c.max_send_sge > kMaxSge || c.max_recv_sge > kMaxSge || c.max_inline_data > kMaxInline)
    return nullptr;
  if (qps_.size() >= cfg_.max_qp) return nullptr;
  // A random QP number (24 bits; not 0 or 1, which are special; not live; not destroyed
  // recently): an off-path injector cannot guess it.
  uint32_t qpn;
  do {
    qpn = tag_id(rng_.next32()) & 0xFFFFFF;
  } while (qpn < 2 || qp_table_.find(qpn) ||
           std::find(recent_qpns_.begin(), recent_qpns_.end(), qpn) != recent_qpns_.end());
  qps_.push_back(std::make_unique<Qp>(*this, qpn, init));
  Qp* raw = qps_.back().get();
  raw->slot = uint32_t(qps_.size() - 1);
  raw->made = qps_made_++;
  raw->cc = cc::make(cfg_.cc, raw->made);
  qp_table_.insert(qpn, raw);
  if (init.send_cq) ++init.send_cq->qp_refs;
  if (init.recv_cq) ++init.recv_cq->qp_refs;
  if (init.xrcd) ++init.xrcd->users;
  return raw;
}

int Device::destroy_qp(Qp* qp) {
  if (!qp || qp->slot >= qps_.size() || qps_[qp->slot].get() != qp) return EINVAL;
  dev_ctr_.add(qp->ctr);
  if (qp->mcast_groups) {  // out of its groups (ibv_destroy_qp does it for the application, as rxe)
    std::vector<proto::Ip6> of;
    for (const auto& [g, members] : groups_)
      if (std::find(members.begin(), members.end(), qp) != members.end()) of.push_back(g);
    for (const proto::Ip6& g : of) detach_mcast(qp, g);
  }
  if (qp->init.send_cq) --qp->init.send_cq->qp_refs;
  if (qp->init.recv_cq) --qp->init.recv_cq->qp_refs;
  if (qp->init.xrcd) --qp->init.xrcd->users;
  if (qp->active) active_.erase(std::find(active_.begin(), active_.end(), qp));
  qp_table_.erase(qp->qpn());
  recent_qpns_[recent_qpn_next_] = qp->qpn();
  recent_qpn_next_ = (recent_qpn_next_ + 1) % uint32_t(recent_qpns_.size());
  // A telemetry sum under way (counters_step) that has counted this QP takes it out again
  // (dev_ctr_ holds it now); the last QP, moved into its place, is counted now if the sum has
  // not reached it, since the sum will not come back to that place.
  if (CounterSum& s = ctr_sum_; s.active && qp->slot < s.cursor) {
    s.part.sub(qp->ctr);
    const uint32_t last = uint32_t(qps_.size() - 1);
    if (last >= s.cursor) s.part.add(qps_[last]->ctr);
  }
  take_out(qps_, qp->slot);
  return 0;
}

int Device::attach_mcast(Qp* qp, const proto::Ip6& group) {
  if (!qp || qp->init.qp_type != QpType::UD || !proto::is_multicast_gid(group)) return EINVAL;
  auto it = groups_.find(group);
  if (it != groups_.end() && std::find(it->second.begin(), it->second.end(), qp) != it->second.end()) return 0;
  if (it == groups_.end() ? groups_.size() >= param::kMaxMcastGrp : it->second.size() >= param::kMaxMcastQpAttach)
    return ENOMEM;
  if (mcast_attached_ >= param::kMaxTotalMcastQpAttach) return ENOMEM;
  if (it == groups_.end())
    if (int rc = link_.join_group(group, true)) return rc;  // the first member here: the kernel joins
  groups_[group].push_back(qp);
  ++mcast_attached_;
  ++qp->mcast_groups;
  return 0;
}

int Device::detach_mcast(Qp* qp, const proto::Ip6& group) {
  auto it = groups_.find(group);
  if (!qp || it == groups_.end()) return EINVAL;
  auto m = std::find(it->second.begin(), it->second.end(), qp);
  if (m == it->second.end()) return EINVAL;
  it->second.erase(m);
  if (it->second.empty()) {
    groups_.erase(it);
    link_.join_group(group, false);  // the last member here: the kernel leaves
  }
  --mcast_attached_;
  --qp->mcast_groups;
  return 0;
}

Qp* Device::qp_by_num(uint32_t qpn) const {
  Qp* const* q = qp_table_.find(qpn);
  return q ? *q : nullptr;
}

Counters Device::counters() const {
  Counters c = dev_ctr_;
  for (auto& q : qps_) c.add(q->ctr);
  return c;
}

bool Device::counters_step(uint64_t sum_id, uint32_t budget, Counters& out) {
  CounterSum& s = ctr_sum_;
  if (!s.active || s.id != sum_id) s = {true, sum_id, 0, Counters{}};
  const uint32_t end = uint32_t(std::min<size_t>(qps_.size(), size_t(s.cursor) + budget));
  for (; s.cursor < end; ++s.cursor) s.part.add(qps_[s.cursor]->ctr);
  if (s.cursor < qps_.size()) return false;
  out = dev_ctr_;
  out.add(s.part);
  s.active = false;
  return true;
}

}  // namespace uroce::engine
