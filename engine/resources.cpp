#include "engine/resources.hpp"

#include <algorithm>
#include <random>

#include "engine/param.hpp"

namespace uroce::engine {

Rng::Rng(uint64_t seed) {
  if (seed == 0) {
    std::random_device rd;
    seed = (uint64_t(rd()) << 32) ^ rd();
  }
  for (auto& x : s_) {  // splitmix64 fills the state
    seed += 0x9E3779B97F4A7C15ull;
    uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    x = z ^ (z >> 31);
  }
}

uint64_t Rng::next() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t r = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return r;
}

MrTable::MrTable(uint32_t max_mr, Rng& rng, uint32_t max_mw)
    : rng_(rng), max_mr_(max_mr), lkeys_(max_mr), rkeys_(max_mr), recent_(param::kRecentKeys, 0), max_mw_(max_mw),
      mw_index_(max_mw) {}

// An MR's key: random, bit 31 clear (a memory window's R_Key has it set).
uint32_t MrTable::new_key() {
  for (;;) {
    const uint32_t k = rng_.next32() & ~kMwKeyBit;
    if (k == 0 || lkeys_.find(k) || rkeys_.find(k)) continue;
    if (std::find(recent_.begin(), recent_.end(), k) != recent_.end()) continue;
    return k;
  }
}

Mr* MrTable::reg(const Pd* pd, void* host, uint64_t length, uint64_t iova, uint32_t access) {
  uint32_t idx;
  if (!free_.empty()) {
    idx = free_.back();
    free_.pop_back();
  } else if (slots_.size() < max_mr_) {
    idx = uint32_t(slots_.size());
    slots_.emplace_back();
  } else {
    return nullptr;
  }
  Mr& mr = slots_[idx];
  mr.lkey = new_key();
  lkeys_.insert(mr.lkey, idx);
  mr.rkey = new_key();
  rkeys_.insert(mr.rkey, idx);
  mr.iova = iova;
  mr.host = static_cast<uint8_t*>(host);
  mr.length = length;
  mr.access = access;
  mr.pd = pd;
  mr.valid = true;
  return &mr;
}

bool MrTable::dereg(uint32_t lkey) {
  const uint32_t* i = lkeys_.find(lkey);
  if (!i) return false;
  const uint32_t idx = *i;
  Mr& mr = slots_[idx];
  lkeys_.erase(mr.lkey);
  rkeys_.erase(mr.rkey);
  for (uint32_t k : {mr.lkey, mr.rkey}) {
    recent_[recent_next_] = k;
    recent_next_ = (recent_next_ + 1) % uint32_t(recent_.size());
  }
  mr = Mr{};
  free_.push_back(idx);
  ++gen_;
  return true;
}

void MrTable::modify(Mr& mr, const Pd* pd, void* host, uint64_t length, uint64_t iova, uint32_t access) {
  mr.pd = pd;
  mr.host = static_cast<uint8_t*>(host);
  mr.length = length;
  mr.iova = iova;
  mr.access = access;
  ++gen_;
}

bool MrTable::uses_pd(const Pd* pd) const {
  for (const Mr& mr : slots_)
    if (mr.valid && mr.pd == pd) return true;
  for (const Mw& w : mws_)
    if (w.valid && w.pd == pd) return true;
  return false;
}

Mr* MrTable::mr_by_lkey(uint32_t lkey) {
  const uint32_t* i = lkeys_.find(lkey);
  return i ? &slots_[*i] : nullptr;
}

Mw* MrTable::alloc_mw(const Pd* pd, uint8_t type) {
  if (mw_free_.empty() && mws_.size() >= max_mw_) return nullptr;
  uint32_t index;  // bits 30:8 of the R_Key, never one in use
  do index = (rng_.next32() >> 9) | (kMwKeyBit >> 8);
  while (mw_index_.find(index));
  uint32_t idx;
  if (!mw_free_.empty()) {
    idx = mw_free_.back();
    mw_free_.pop_back();
  } else {
    idx = uint32_t(mws_.size());
    mws_.emplace_back();
  }
  Mw& w = mws_[idx];
  w = Mw{};
  w.slot = idx;
  w.rkey = index << 8 | (rng_.next32() & 0xFF);
  w.type = type;
  w.pd = pd;
  w.valid = true;
  mw_index_.insert(index, idx);
  return &w;
}

void MrTable::dealloc_mw(Mw& w) {
  unbind_mw(w);
  mw_index_.erase(w.rkey >> 8);
  mw_free_.push_back(w.slot);
  w = Mw{};
}

Mw* MrTable::mw_by_rkey(uint32_t rkey) {
  if (!is_mw_key(rkey)) return nullptr;
  const uint32_t* i = mw_index_.find(rkey >> 8);
  return i && mws_[*i].rkey == rkey ? &mws_[*i] : nullptr;
}
Mw* MrTable::mw_by_index(uint32_t rkey) {
  if (!is_mw_key(rkey)) return nullptr;
  const uint32_t* i = mw_index_.find(rkey >> 8);
  return i ? &mws_[*i] : nullptr;
}

const Mw* MrTable::mw_by_rkey(uint32_t rkey) const { return const_cast<MrTable*>(this)->mw_by_rkey(rkey); }

void MrTable::bind_mw(Mw& w, Mr* mr, uint64_t addr, uint64_t length, uint32_t access, uint32_t rkey, uint32_t qpn) {
  unbind_mw(w);
  w.rkey = (w.rkey & ~0xFFu) | (rkey & 0xFF);  // the index stays: only the consumer's key changes
  w.access = access;
  w.qpn = qpn;
  if (length) {
    w.bound = true;
    w.mr = mr;
    w.addr = addr;
    w.length = length;
    ++mr->windows;
  }
  ++gen_;
}

void MrTable::unbind_mw(Mw& w) {
  if (w.bound && w.mr) --w.mr->windows;
  w.bound = false;
  w.mr = nullptr;
  w.addr = w.length = 0;
  ++gen_;  // host pointers resolved through it are checked again
}

void Counters::add(const Counters& o) {
  const uint64_t* src = reinterpret_cast<const uint64_t*>(&o);
  uint64_t* dst = reinterpret_cast<uint64_t*>(this);
  for (size_t i = 0; i < sizeof(Counters) / sizeof(uint64_t); ++i) dst[i] += src[i];
}

void Counters::sub(const Counters& o) {
  const uint64_t* src = reinterpret_cast<const uint64_t*>(&o);
  uint64_t* dst = reinterpret_cast<uint64_t*>(this);
  for (size_t i = 0; i < sizeof(Counters) / sizeof(uint64_t); ++i) dst[i] -= src[i];
}

const CounterField kCounterFields[] = {
    {"sent_pkts", &Counters::sent_pkts},
    {"rcvd_pkts", &Counters::rcvd_pkts},
    {"duplicate_request", &Counters::duplicate_request},
    {"out_of_seq_request", &Counters::out_of_seq_request},
    {"rcvd_rnr_err", &Counters::rcvd_rnr_err},
    {"send_rnr_err", &Counters::send_rnr_err},
    {"rcvd_seq_err", &Counters::rcvd_seq_err},
    {"retry_exceeded_err", &Counters::retry_exceeded_err},
    {"retry_rnr_exceeded_err", &Counters::retry_rnr_exceeded_err},
    {"completer_retry_err", &Counters::completer_retry_err},
    {"rdma_sends", &Counters::rdma_sends},
    {"rdma_recvs", &Counters::rdma_recvs},
    {"tx_bytes", &Counters::tx_bytes},
    {"rx_bytes", &Counters::rx_bytes},
    {"retransmitted", &Counters::retransmitted},
    {"timeouts", &Counters::timeouts},
    {"other_naks_sent", &Counters::other_naks_sent},
    {"other_naks_rcvd", &Counters::other_naks_rcvd},
    {"out_of_sequence", &Counters::out_of_sequence},
    {"icrc_errors", &Counters::icrc_errors},
    {"malformed", &Counters::malformed},
    {"dropped_not_for_us", &Counters::dropped_not_for_us},
    {"dropped_unknown_qp", &Counters::dropped_unknown_qp},
    {"dropped_bad_state", &Counters::dropped_bad_state},
    {"dropped_pkey", &Counters::dropped_pkey},
    {"acks_sent", &Counters::acks_sent},
    {"acks_rcvd", &Counters::acks_rcvd},
    {"implied_naks", &Counters::implied_naks},
    {"stale_duplicates", &Counters::stale_duplicates},
    {"bad_responses", &Counters::bad_responses},
    {"reserved_opcode", &Counters::reserved_opcode},
    {"ghost_responses", &Counters::ghost_responses},
    {"dropped_source", &Counters::dropped_source},
    {"replayed_responses", &Counters::replayed_responses},
    {"dropped_qkey", &Counters::dropped_qkey},
    {"dropped_no_recv", &Counters::dropped_no_recv},
    {"dropped_messages", &Counters::dropped_messages},
    {"loopback", &Counters::loopback},
    {"cnp_rcvd", &Counters::cnp_rcvd},
    {"cnp_sent", &Counters::cnp_sent},
    {"ecn_ce_rcvd", &Counters::ecn_ce_rcvd},
    {"gap_restarts", &Counters::gap_restarts},
    {"naks_ignored", &Counters::naks_ignored},
    {"probes", &Counters::probes},
    {"rtt_samples", &Counters::rtt_samples},
    {"sr_resends", &Counters::sr_resends},
    {"sr_held", &Counters::sr_held},
    {"atomic_writes", &Counters::atomic_writes},
    {"flushes", &Counters::flushes},
    {"mcast_sent", &Counters::mcast_sent},
    {"mcast_rcvd", &Counters::mcast_rcvd},
    {"dropped_mcast", &Counters::dropped_mcast},
    {"xrc_bad_srqn", &Counters::xrc_bad_srqn},
};
const size_t kCounterFieldCount = sizeof kCounterFields / sizeof kCounterFields[0];
static_assert(sizeof kCounterFields / sizeof kCounterFields[0] == sizeof(Counters) / sizeof(uint64_t),
              "every counter is in kCounterFields");

std::string Counters::text() const {
  std::string s;
  for (size_t i = 0; i < kCounterFieldCount; ++i) {
    const uint64_t v = this->*kCounterFields[i].member;
    if (v == 0) continue;
    if (!s.empty()) s += ' ';
    s += kCounterFields[i].name;
    s += '=';
    s += std::to_string(v);
  }
  return s.empty() ? "(all zero)" : s;
}

}  // namespace uroce::engine
