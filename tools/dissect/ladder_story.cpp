// The ladder as a story (ladder.hpp, tell_story): which frames are drawn, which quiet runs are
// folded into a band, and where the PSNs that were never seen were due.
#include <algorithm>
#include <map>

#include "proto/opcode.hpp"
#include "tools/dissect/ladder.hpp"
#include "tools/dissect/text.hpp"

namespace uroce::dissect {

using namespace uroce::proto;

namespace {

bool worth_showing(const LadderFrame& f, const FrameMarks& m) {
  return events_of(f, m) != 0 || m.duplicate || m.repeated_ack || !f.decoded;
}

std::string op_name(const LadderFrame& f) {
  if (!f.has_bth) return "frame";
  const OpcodeInfo& info = opcode_info(f.opcode);
  return info.valid ? std::string(info.name) : fmt("opcode 0x%02x", f.opcode);
}

// The band of selected[first..last]: its frames grouped by direction, opcode and whether they
// are resent, in order of first appearance: "52 x RC_RDMA_WRITE_MIDDLE psn 176..227, 3 x RC_ACK psn 180..222".
StoryRow band(const std::vector<LadderFrame>& frames, const Conversation& conv, const std::vector<size_t>& sel,
              size_t first, size_t last) {
  struct Group {
    std::string src, dst, name;
    bool resent = false;
    size_t n = 0;
    uint32_t psn_first = 0, psn_last = 0;
  };
  std::vector<Group> groups;
  StoryRow r;
  r.kind = StoryRow::Kind::Band, r.first = first, r.last = last;
  for (size_t k = first; k <= last; ++k) {
    const LadderFrame& f = frames[sel[k]];
    const bool resent = conv.marks[sel[k]].retransmission;
    r.resent |= resent;
    const std::string name = op_name(f);
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) {
      return x.src == f.src && x.dst == f.dst && x.name == name && x.resent == resent;
    });
    if (g == groups.end()) g = groups.insert(groups.end(), Group{f.src, f.dst, name, resent, 0, f.psn, f.psn});
    ++g->n, g->psn_last = f.psn;
  }
  const auto top = std::max_element(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.n < b.n; });
  r.src = top->src, r.dst = top->dst;
  constexpr size_t kShown = 2;
  for (size_t g = 0; g < groups.size() && g < kShown; ++g) {
    const Group& x = groups[g];
    if (g) r.label += ", ";
    r.label += fmt("%zu x %s psn %u", x.n, x.name.c_str(), x.psn_first);
    if (x.n > 1 && x.psn_last != x.psn_first) r.label += fmt("..%u", x.psn_last);
    if (x.resent) r.label += " sent again";
  }
  if (groups.size() > kShown) r.label += fmt(", and %zu more kind%s", groups.size() - kShown, groups.size() - kShown == 1 ? "" : "s");
  return r;
}

}  // namespace

std::vector<StoryRow> tell_story(const std::vector<LadderFrame>& frames, const Conversation& conv,
                                 const std::vector<size_t>& sel, bool fold) {
  const size_t n = sel.size();
  fold = fold && n > kStoryFoldAbove;
  // Which selected frames are drawn as they are: the events with their context, the ends.
  std::vector<bool> keep(n, !fold);
  for (size_t k = 0; k < n && fold; ++k) {
    if (k < kStoryContext || k + kStoryContext >= n) keep[k] = true;
    if (worth_showing(frames[sel[k]], conv.marks[sel[k]])) {
      const size_t a = k >= kStoryContext ? k - kStoryContext : 0, b = std::min(n - 1, k + kStoryContext);
      for (size_t j = a; j <= b; ++j) keep[j] = true;
    }
  }
  std::vector<StoryRow> rows;
  auto frame_row = [&](size_t k) {
    const size_t i = sel[k];
    const FrameMarks& m = conv.marks[i];
    if (m.reveals_gap) {
      StoryRow lost;
      lost.kind = StoryRow::Kind::Lost, lost.frame = i, lost.src = frames[i].src, lost.dst = frames[i].dst;
      lost.label = m.lost_first == m.lost_last ? fmt("not seen: psn %u", m.lost_first)
                                               : fmt("not seen: psn %u..%u", m.lost_first, m.lost_last);
      rows.push_back(lost);
    }
    StoryRow r;
    r.frame = i;
    rows.push_back(r);
  };
  for (size_t k = 0; k < n;) {
    if (keep[k]) {
      frame_row(k++);
      continue;
    }
    size_t e = k;
    while (e < n && !keep[e]) ++e;
    if (e - k >= kStoryFoldMin) {
      rows.push_back(band(frames, conv, sel, k, e - 1));
    } else {
      for (size_t j = k; j < e; ++j) frame_row(j);
    }
    k = e;
  }
  return rows;
}

size_t first_event(const std::vector<LadderFrame>& frames, const Conversation& conv, Event e) {
  for (size_t i = 0; i < frames.size(); ++i)
    if (events_of(frames[i], conv.marks[i]) & (1u << unsigned(e))) return i;
  return SIZE_MAX;
}

}  // namespace uroce::dissect
