#include "engine/resources.hpp"

namespace uroce::engine {

Mr* MrTable::reg(const Pd* pd, void* host, uint64_t length, uint64_t iova, uint32_t access) {
  for (uint32_t tries = 0; tries < slots_.size(); ++tries) {
    uint32_t idx = next_;
    next_ = next_ + 1 >= slots_.size() ? 1 : next_ + 1;
    if (idx == 0 || slots_[idx].mr.valid) continue;
    Slot& s = slots_[idx];
    s.key_byte = uint8_t(s.key_byte + 1);
    Mr& mr = s.mr;
    mr.lkey = mr.rkey = idx << 8 | s.key_byte;
    mr.iova = iova;
    mr.host = static_cast<uint8_t*>(host);
    mr.length = length;
    mr.access = access;
    mr.pd = pd;
    mr.valid = true;
    ++live_;
    return &mr;
  }
  return nullptr;
}

bool MrTable::dereg(uint32_t lkey) {
  uint32_t idx = lkey >> 8;
  if (idx >= slots_.size()) return false;
  Slot& s = slots_[idx];
  if (!s.mr.valid || (lkey & 0xFF) != s.key_byte) return false;
  s.mr.valid = false;
  --live_;
  return true;
}

void Counters::add(const Counters& o) {
  const uint64_t* src = reinterpret_cast<const uint64_t*>(&o);
  uint64_t* dst = reinterpret_cast<uint64_t*>(this);
  for (size_t i = 0; i < sizeof(Counters) / sizeof(uint64_t); ++i) dst[i] += src[i];
}

}  // namespace uroce::engine
