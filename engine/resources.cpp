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

MrTable::MrTable(uint32_t max_mr, Rng& rng)
    : rng_(rng), slots_(max_mr), lkeys_(max_mr), rkeys_(max_mr), recent_(param::kRecentKeys, 0) {
  free_.reserve(max_mr);
  for (uint32_t i = max_mr; i-- > 0;) free_.push_back(i);
}

uint32_t MrTable::new_key() {
  for (;;) {
    const uint32_t k = rng_.next32();
    if (k == 0 || lkeys_.find(k) || rkeys_.find(k)) continue;
    if (std::find(recent_.begin(), recent_.end(), k) != recent_.end()) continue;
    return k;
  }
}

Mr* MrTable::reg(const Pd* pd, void* host, uint64_t length, uint64_t iova, uint32_t access) {
  if (free_.empty()) return nullptr;
  const uint32_t idx = free_.back();
  free_.pop_back();
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

bool MrTable::uses_pd(const Pd* pd) const {
  for (const Mr& mr : slots_)
    if (mr.valid && mr.pd == pd) return true;
  return false;
}

void Counters::add(const Counters& o) {
  const uint64_t* src = reinterpret_cast<const uint64_t*>(&o);
  uint64_t* dst = reinterpret_cast<uint64_t*>(this);
  for (size_t i = 0; i < sizeof(Counters) / sizeof(uint64_t); ++i) dst[i] += src[i];
}

}  // namespace uroce::engine
