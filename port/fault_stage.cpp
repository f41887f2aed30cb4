#include "port/fault_stage.hpp"

#include <algorithm>
#include <span>

#include "proto/bytes.hpp"
#include "proto/locate.hpp"
#include "proto/opcode.hpp"

namespace uroce::port {

namespace {

// The bytes of `frame` a corruption may hit, as [start, end); {0, 0} when the frame is not
// one the stage applies to.
struct Span {
  uint32_t start = 0, end = 0;
};

Span corruptible(const uint8_t* frame, uint32_t len, bool all) {
  const proto::Located o = proto::locate({frame, len});
  if (!o.roce_v2() || o.ip_version == 0) {
    if (!all) return {};
    const uint32_t l2 = uint32_t(std::min<size_t>(o.l3 ? o.l3 : 14, len));
    return {l2, l2 < len ? len : l2};
  }
  size_t start = o.bth + 12;
  if (o.bth < len) {
    const proto::OpcodeInfo& info = proto::opcode_info(frame[o.bth]);
    if (info.valid) start += info.ext_bytes();
  }
  // The IP packet's end (an Ethernet pad after it is not covered by the ICRC).
  size_t end = len;
  if (o.ip_version == 4 && o.l3 + 4 <= len) end = o.l3 + proto::load_be16(frame + o.l3 + 2);
  else if (o.ip_version == 6 && o.l3 + 6 <= len) end = o.l3 + 40 + proto::load_be16(frame + o.l3 + 4);
  end = std::min<size_t>(end, len);
  if (start >= end) return {1, 1};  // RoCE, but nothing to corrupt (a truncated frame)
  return {uint32_t(start), uint32_t(end)};
}

}  // namespace

engine::FaultDecision FaultStage::decide(uint8_t* frame, uint32_t len) {
  const Span s = corruptible(frame, len, all_);
  if (s.end == 0) return {};  // not a frame the stage applies to
  engine::FaultDecision d = dice_.decide(cfg_, uint64_t(s.end - s.start) * 8, held_.size() < param::kFaultHold);
  if (d.drop) {
    ++counts_.dropped;
    return d;
  }
  if (d.corrupt) {
    frame[s.start + d.corrupt_bit / 8] ^= uint8_t(1u << (d.corrupt_bit % 8));
    ++counts_.corrupted;
  }
  return d;
}

bool FaultStage::hold(void* frame, const engine::FaultDecision& d, uint64_t now_ns) {
  if (held_.size() >= param::kFaultHold) {
    ++counts_.hold_full;
    return false;
  }
  if (d.reorder) {
    held_.push_back({frame, now_ns + d.delay_ns + param::kFaultReorderHoldNs, d.reorder_after, false});
    ++counts_.reordered;
  } else {
    held_.push_back({frame, now_ns + d.delay_ns, 0, false});
  }
  if (d.delay) ++counts_.delayed;
  return true;
}

size_t FaultStage::release(uint64_t now_ns, void** out, size_t max) {
  size_t n = 0;
  auto keep = held_.begin();
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (n < max && (it->ready || it->due_ns <= now_ns)) out[n++] = it->frame;
    else *keep++ = *it;
  }
  held_.erase(keep, held_.end());
  return n;
}

}  // namespace uroce::port
