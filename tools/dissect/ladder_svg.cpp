// Drawing the ladder diagram as plain SVG text.
//
// Layout, top to bottom: the title and filter, the legend, one column head per endpoint
// (address and the QPNs seen at it), then one row per frame. Rows are evenly spaced (the
// time of each frame is written on the left, with its frame number), because a capture's
// gaps range from nanoseconds to seconds; an idle gap much longer than the usual one gets
// a little extra room and a dashed line saying how long it was. Each arrow slopes slightly
// down from the sender's column to the receiver's, labelled above with the opcode name (from
// the one opcode table), the PSN and the fields that matter for that opcode. Notes right of
// the last column say what the marks found (retransmission, duplicate, which PSNs an ACK
// covers). Every frame is a <g class="frame ..."> with data-* attributes and a <title>
// holding its line-view text, so a browser shows the full line on hover.
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <span>
#include <string_view>

#include "proto/aeth.hpp"
#include "proto/opcode.hpp"
#include "tools/dissect/ladder.hpp"

namespace uroce::dissect {

using namespace uroce::proto;


namespace {

// Geometry, in SVG user units (pixels).
constexpr int kMargin = 16;
constexpr int kAxisWidth = 150;     // frame number and time, left of the first column
constexpr int kColumnGap = 600;     // between two endpoint columns: room for a label
constexpr int kNotesWidth = 540;    // right of the last column
constexpr int kRowHeight = 28;
constexpr int kSlope = 8;           // how far an arrow drops from sender to receiver
constexpr int kGapExtra = 22;       // extra room above a marked idle gap
constexpr int kHeadHeight = 44;     // column heads
constexpr int kLegendRowHeight = 18;
constexpr int kBracketOffset = 10;  // ACK coverage brackets sit this far beside the column
// An idle gap is marked when it is at least this long and at least kGapFactor times the
// median gap between the frames drawn.
constexpr double kGapMinSeconds = 100e-6;
constexpr double kGapFactor = 10;
constexpr size_t kMaxQpsInHead = 6;

std::string duration(double s) {
  if (s >= 1) return fmt("%.3f s", s);
  if (s >= 1e-3) return fmt("%.3f ms", s * 1e3);
  return fmt("%.1f us", s * 1e6);
}

using Style = ArrowStyle;
constexpr Style kStyles[] = {
    {"req", "#1f3a93", "request: SEND, WRITE, READ, atomic"},
    {"resp", "#2e7d32", "response: ACK, READ response, atomic ACK"},
    {"retx", "#ef6c00", "retransmission: this PSN was already sent on this flow"},
    {"nak-seq", "#c62828", "NAK: PSN sequence error"},
    {"rnr", "#7b1fa2", "RNR NAK (receiver not ready; retry after the timer)"},
    {"nak", "#6d1b1b", "NAK of another kind (access, invalid request, ...)"},
    {"bad", "#d81b60", "ICRC bad or malformed (the receiver drops it)"},
    {"cnp", "#00838f", "CNP (congestion notification)"},
    {"other", "#555555", "other (RoCE v1, not decoded)"},
};

}  // namespace

std::span<const ArrowStyle> arrow_styles() { return kStyles; }

const ArrowStyle& style_of(const LadderFrame& f, const FrameMarks& m) {
  auto by = [](std::string_view c) -> const Style& {
    for (const Style& s : kStyles)
      if (c == s.cls) return s;
    return kStyles[std::size(kStyles) - 1];
  };
  if (f.status == LadderFrame::Status::BadIcrc || f.status == LadderFrame::Status::Malformed) return by("bad");
  if (f.status == LadderFrame::Status::RoceV1) return by("other");
  if (m.seq_nak) return by("nak-seq");
  if (m.other_nak) return by("nak");
  if (m.rnr_nak) return by("rnr");
  if (m.retransmission) return by("retx");
  if (m.cnp) return by("cnp");
  const OpcodeInfo& info = opcode_info(f.opcode);
  if (info.valid && info.request) return by("req");
  if (info.valid) return by("resp");
  return by("other");
}

std::string frame_classes(const LadderFrame& f, const FrameMarks& m) {
  std::string c = std::string("frame ") + style_of(f, m).cls;
  auto add = [&](bool on, std::string_view cls) {
    if (on && (c + ' ').find(' ' + std::string(cls) + ' ') == std::string::npos) c += ' ' + std::string(cls);
  };
  add(m.retransmission, "retx");
  add(m.duplicate, "dup");
  add(m.seq_nak, "nak-seq");
  add(m.rnr_nak, "rnr");
  add(m.other_nak, "nak");
  add(m.cnp, "cnp");
  add(m.ce, "ce");
  add(m.acks_range, "acks");
  add(m.repeated_ack, "ack-again");
  add(f.status == LadderFrame::Status::BadIcrc, "icrc-bad");
  add(f.status == LadderFrame::Status::Malformed, "malformed");
  return c;
}

// The arrow's label: opcode, PSN and the fields that matter for that opcode.
std::string frame_label(const LadderFrame& f, bool show_qp) {
  if (f.status == LadderFrame::Status::RoceV1) return "RoCE v1 (not decoded)";
  if (!f.has_bth) return "MALFORMED (cut before the BTH)";
  const OpcodeInfo& info = opcode_info(f.opcode);
  std::string s = info.valid ? std::string(info.name) : fmt("opcode 0x%02x", f.opcode);
  if (show_qp || info.transport == Transport::CNP) s += fmt(" qp 0x%" PRIx32, f.dest_qp);
  if (info.transport != Transport::CNP) s += fmt(" psn %" PRIu32, f.psn);
  if (!f.decoded) return s + " MALFORMED";
  if (info.has(kAeth)) {
    const Syndrome syn = Syndrome::decode(f.syndrome);
    switch (syn.kind) {
      case AckKind::Ack: s += " ACK"; break;
      case AckKind::RnrNak: s += fmt(" RNR NAK timer %u (%" PRIu32 " us)", syn.value, rnr_timer_us(syn.value)); break;
      case AckKind::Nak: s += syn.value == 0 ? std::string(" NAK-seq") : fmt(" NAK %u", syn.value); break;
      case AckKind::Reserved: s += fmt(" syndrome 0x%02x", f.syndrome); break;
    }
    s += fmt(" msn %" PRIu32, f.msn);
  }
  if (info.has(kReth)) s += fmt(" len %" PRIu32, f.reth_len);
  if (info.has(kImmDt)) s += fmt(" imm 0x%08" PRIx32, f.imm);
  if (info.has(kDeth)) s += fmt(" srcqp 0x%" PRIx32, f.src_qp);
  if (f.ack_req) s += " A";
  return s;
}

// What the marks found, right of the last column.
std::string frame_notes(const LadderFrame& f, const FrameMarks& m) {
  std::vector<std::string> n;
  if (f.status == LadderFrame::Status::BadIcrc) n.push_back("ICRC BAD");
  if (f.status == LadderFrame::Status::Malformed) n.push_back("MALFORMED");
  if (m.retransmission && !m.resend_start) n.push_back("retransmission");
  if (m.duplicate) n.push_back("duplicate at the responder");
  if (m.seq_nak) n.push_back(fmt("sequence NAK: expects psn %" PRIu32, f.psn));
  if (m.rnr_nak) n.push_back("RNR NAK");
  if (m.acks_range) {
    n.push_back(m.acked_first == f.psn ? fmt("acks psn %" PRIu32 " (%zu request%s)", f.psn, m.acked_packets,
                                             m.acked_packets == 1 ? "" : "s")
                                       : fmt("acks psn %" PRIu32 "..%" PRIu32 " (%zu requests)", m.acked_first, f.psn,
                                             m.acked_packets));
  }
  if (m.repeated_ack) n.push_back("ACK again (answers a duplicate)");
  if (m.reveals_gap)
    n.push_back(m.lost_first == m.lost_last ? fmt("psn %u not seen before it", m.lost_first)
                                            : fmt("psn %u..%u not seen before it", m.lost_first, m.lost_last));
  if (m.resend_start) n.push_back(m.run);
  if (m.ce) n.push_back("CE");
  if (!f.comment.empty()) {
    // The first of the comment's notes (uroce joins a burst's with "; "), at most 160 characters:
    // the whole comment is in the frame's line.
    const size_t cut = f.comment.find("; ");
    std::string first = f.comment.substr(0, std::min<size_t>(cut, 160));
    if (first.size() < f.comment.size() && cut > 160) first += "...";
    size_t more = 0;
    for (size_t at = cut; at != std::string::npos; at = f.comment.find("; ", at + 2)) ++more;
    n.push_back("note: " + first + (more ? fmt(" (and %zu more)", more) : ""));
  }
  std::string s;
  for (const std::string& x : n) s += (s.empty() ? "" : ", ") + x;
  return s;
}

namespace {

double median_gap(const std::vector<LadderFrame>& frames, const std::vector<size_t>& sel) {
  std::vector<double> g;
  for (size_t k = 1; k < sel.size(); ++k) g.push_back(frames[sel[k]].time - frames[sel[k - 1]].time);
  if (g.empty()) return 0;
  std::nth_element(g.begin(), g.begin() + long(g.size() / 2), g.end());
  return g[g.size() / 2];
}

}  // namespace

std::string render_svg(const std::vector<LadderFrame>& frames, const Conversation& conv,
                       const std::vector<size_t>& sel, const std::vector<StoryRow>& story, const LadderOptions& opt) {
  // Columns: the endpoints of the frames drawn, in order of first appearance in the capture.
  std::vector<size_t> cols;  // indexes into conv.endpoints
  auto col_of = [&](const std::string& a) -> size_t {
    for (size_t c = 0; c < cols.size(); ++c)
      if (conv.endpoints[cols[c]].first == a) return c;
    return SIZE_MAX;
  };
  for (size_t e = 0; e < conv.endpoints.size(); ++e) {
    const std::string& a = conv.endpoints[e].first;
    for (size_t i : sel)
      if (frames[i].src == a || frames[i].dst == a) {
        cols.push_back(e);
        break;
      }
  }
  const size_t ncols = std::max<size_t>(cols.size(), 2);
  auto col_x = [&](size_t c) { return kMargin + kAxisWidth + 60 + int(c) * kColumnGap; };
  const int notes_x = col_x(ncols - 1) + 40;
  const int width = notes_x + kNotesWidth + kMargin;

  // Vertical positions: the legend, the heads, then rows (with extra room for idle gaps).
  const int legend_top = kMargin + 44;
  const int legend_rows = int((std::size(kStyles) + 6 + 1) / 2);
  const int head_top = legend_top + legend_rows * kLegendRowHeight + 12;
  const int rows_top = head_top + kHeadHeight + 24;
  const double med = median_gap(frames, sel);
  // The first and last frame (index) of each story row: a band's first and last, a lost row's
  // none (SIZE_MAX): an idle gap is measured between frames drawn or folded.
  auto first_of = [&](const StoryRow& r) {
    return r.kind == StoryRow::Kind::Band ? sel[r.first] : r.kind == StoryRow::Kind::Frame ? r.frame : SIZE_MAX;
  };
  auto last_of = [&](const StoryRow& r) {
    return r.kind == StoryRow::Kind::Band ? sel[r.last] : r.kind == StoryRow::Kind::Frame ? r.frame : SIZE_MAX;
  };
  std::vector<int> row_y(story.size());
  std::vector<double> gap_before(story.size(), 0);
  std::vector<int> y_of_frame(frames.size(), -1);  // frames drawn as rows
  int y = rows_top;
  size_t prev_last = SIZE_MAX;
  for (size_t k = 0; k < story.size(); ++k) {
    if (k > 0) y += kRowHeight;
    const size_t a = first_of(story[k]);
    if (a != SIZE_MAX && prev_last != SIZE_MAX) {
      const double g = frames[a].time - frames[prev_last].time;
      if (g >= kGapMinSeconds && g >= kGapFactor * med) gap_before[k] = g, y += kGapExtra;
    }
    if (a != SIZE_MAX) prev_last = last_of(story[k]);
    row_y[k] = y;
    if (story[k].kind == StoryRow::Kind::Frame) y_of_frame[story[k].frame] = y;
  }
  // A folded frame is where its band is (for the ACK brackets; links join drawn frames only).
  std::vector<int> y_near(y_of_frame);
  for (size_t k = 0; k < story.size(); ++k)
    if (story[k].kind == StoryRow::Kind::Band)
      for (size_t j = story[k].first; j <= story[k].last; ++j) y_near[sel[j]] = row_y[k];
  const int bottom = y + kRowHeight;
  const int height = bottom + kMargin;

  std::string o;
  o += fmt("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
           "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
           "font-family=\"DejaVu Sans Mono, monospace\" font-size=\"12\">\n",
           width, height, width, height);
  o += "<style>\n"
       "  .arrow { stroke-width: 1.6; fill: none; }\n"
       "  .dup .arrow { stroke-dasharray: 6 3; }\n"
       "  .retx .arrow, .nak-seq .arrow, .rnr .arrow, .bad .arrow { stroke-width: 2.6; }\n"
       "  .life { stroke: #999; stroke-width: 1; stroke-dasharray: 2 4; }\n"
       "  .axis { fill: #444; }\n"
       "  .note { fill: #333; font-style: italic; }\n"
       "  .gap { stroke: #bbb; stroke-width: 1; stroke-dasharray: 8 4; }\n"
       "  .gaptext { fill: #777; }\n"
       "  .bracket { stroke: #2e7d32; stroke-width: 1.2; fill: none; opacity: 0.7; }\n"
       "  .head { font-weight: bold; }\n"
       "  .band { fill: #eceff1; stroke: #b0bec5; stroke-width: 1; }\n"
       "  .band.resent { fill: #fff3e0; stroke: #ffb74d; }\n"
       "  .bandtext { fill: #37474f; }\n"
       "  .lost .arrow { stroke: #c62828; stroke-width: 2; stroke-dasharray: 5 4; }\n"
       "  .lost .cross { stroke: #c62828; stroke-width: 2.4; fill: none; }\n"
       "  .lost text { fill: #c62828; font-weight: bold; }\n"
       "  .link { stroke: #c62828; stroke-width: 1.4; fill: none; stroke-dasharray: 3 3; opacity: 0.8; }\n";
  for (const Style& s : kStyles)
    o += fmt("  .%s .arrow { stroke: %s; } .%s text.label { fill: %s; }\n", s.cls, s.colour, s.cls, s.colour);
  o += "</style>\n<defs>\n";
  for (const Style& s : kStyles)
    o += fmt("  <marker id=\"head-%s\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" "
             "markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"%s\"/></marker>\n",
             s.cls, s.colour);
  o += "</defs>\n";
  o += fmt("<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", width, height);

  // Title and what is drawn.
  size_t folded = 0;
  for (const StoryRow& r : story)
    if (r.kind == StoryRow::Kind::Band) folded += r.last - r.first + 1;
  std::string what = sel.empty() ? std::string("no frames selected")
                                 : fmt("frames %zu to %zu: %zu drawn", frames[sel.front()].number,
                                       frames[sel.back()].number, sel.size() - folded);
  if (folded) what += fmt(", %zu folded in bands", folded);
  if (opt.have_qp) what += fmt(", QP 0x%" PRIx32 " (either side)", opt.qp);
  o += fmt("<text x=\"%d\" y=\"%d\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", kMargin, kMargin + 14,
           xml(opt.title).c_str());
  o += fmt("<text x=\"%d\" y=\"%d\" class=\"axis\">%s; time runs down, rows evenly spaced</text>\n", kMargin,
           kMargin + 32, xml(what).c_str());

  // Legend: two columns of samples.
  {
    std::vector<std::pair<std::string, std::string>> items;  // (svg sample, text)
    for (const Style& s : kStyles)
      items.emplace_back(fmt("<line class=\"arrow\" x1=\"0\" y1=\"0\" x2=\"40\" y2=\"0\" stroke=\"%s\" "
                             "stroke-width=\"2\" marker-end=\"url(#head-%s)\"/>",
                             s.colour, s.cls),
                         s.legend);
    items.emplace_back("<line x1=\"0\" y1=\"0\" x2=\"40\" y2=\"0\" stroke=\"#1f3a93\" stroke-width=\"2\" "
                       "stroke-dasharray=\"6 3\"/>",
                       "dashed: duplicate (the responder already acknowledged this PSN)");
    items.emplace_back("<path class=\"bracket\" d=\"M20,-7 h-6 v14 h6\"/>",
                       "bracket: the requests one ACK acknowledges (ACK coalescing)");
    items.emplace_back("<rect class=\"band\" x=\"0\" y=\"-7\" width=\"40\" height=\"14\"/>",
                       "band: a run of quiet frames, folded (--no-fold draws them)");
    items.emplace_back("<g class=\"lost\"><line class=\"arrow\" x1=\"0\" y1=\"0\" x2=\"26\" y2=\"0\"/>"
                       "<path class=\"cross\" d=\"M26,-5 l10,10 M26,5 l10,-10\"/></g>",
                       "not seen: PSNs that were due and are not in the capture");
    items.emplace_back("<path class=\"link\" d=\"M40,-7 C10,-7 10,7 40,7\"/>",
                       "a NAK (or a gap) and the resend that answers it");
    items.emplace_back("<line class=\"gap\" x1=\"0\" y1=\"0\" x2=\"40\" y2=\"0\"/>",
                       fmt("idle gap (>= %.0f us and >= %.0fx the median gap)", kGapMinSeconds * 1e6, kGapFactor));
    o += "<g class=\"legend\">\n";
    for (size_t k = 0; k < items.size(); ++k) {
      const int lx = kMargin + int(k % 2) * 560, ly = legend_top + int(k / 2) * kLegendRowHeight;
      o += fmt("  <g transform=\"translate(%d,%d)\">%s<text x=\"50\" y=\"4\">%s</text></g>\n", lx, ly,
               items[k].first.c_str(), xml(items[k].second).c_str());
    }
    o += "</g>\n";
  }

  // Column heads and lifelines.
  for (size_t c = 0; c < cols.size(); ++c) {
    const auto& [addr, qps] = conv.endpoints[cols[c]];
    std::string q;
    for (size_t k = 0; k < qps.size() && k < kMaxQpsInHead; ++k) q += fmt("%s0x%" PRIx32, k ? ", " : "", qps[k]);
    if (qps.size() > kMaxQpsInHead) q += fmt(" +%zu more", qps.size() - kMaxQpsInHead);
    const int x = col_x(c);
    o += fmt("<g class=\"endpoint\" data-address=\"%s\">"
             "<text class=\"head\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>"
             "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"axis\">%s</text>"
             "<line class=\"life\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/></g>\n",
             xml(addr).c_str(), x, head_top + 14, xml(addr).c_str(), x, head_top + 32,
             xml(qps.empty() ? std::string("") : (qps.size() == 1 ? "QP " : "QPs ") + q).c_str(), x,
             head_top + kHeadHeight, x, bottom);
  }
  o += fmt("<text x=\"%d\" y=\"%d\" class=\"axis\" text-anchor=\"end\">frame</text>"
           "<text x=\"%d\" y=\"%d\" class=\"axis\">time (s)</text>\n",
           kMargin + 44, rows_top - 16, kMargin + 56, rows_top - 16);

  // Rows.
  for (size_t k = 0; k < story.size(); ++k) {
    const StoryRow& r = story[k];
    const int ry = row_y[k];
    if (gap_before[k] > 0) {
      const int gy = ry - kRowHeight / 2 - kGapExtra / 2 - 2;
      o += fmt("<g class=\"idle\"><line class=\"gap\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
               "<text class=\"gaptext\" x=\"%d\" y=\"%d\">idle %s</text></g>\n",
               kMargin, gy, width - kMargin, gy, notes_x, gy - 4, duration(gap_before[k]).c_str());
    }
    if (r.kind == StoryRow::Kind::Band) {
      const LadderFrame& f0 = frames[sel[r.first]];
      const LadderFrame& f1 = frames[sel[r.last]];
      const int x0 = col_x(0) - 20, x1 = width - kMargin;
      const size_t cs = col_of(r.src), cd = col_of(r.dst);
      o += fmt("<g class=\"fold\" data-from=\"%zu\" data-to=\"%zu\" data-frames=\"%zu\">\n  <title>frames %zu to %zu "
               "folded: %s</title>\n",
               f0.number, f1.number, r.last - r.first + 1, f0.number, f1.number, xml(r.label).c_str());
      o += fmt("  <text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"end\">%zu</text>"
               "<text class=\"axis\" x=\"%d\" y=\"%d\">%.6f</text>"
               "<text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"end\" font-size=\"10\">..%zu</text>\n",
               kMargin + 44, ry, f0.number, kMargin + 56, ry + 4, f0.time, kMargin + 44, ry + 10, f1.number);
      o += fmt("  <rect class=\"band%s\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"4\"/>\n",
               r.resent ? " resent" : "", x0, ry - kRowHeight / 2 + 3, x1 - x0, kRowHeight - 6);
      if (cs != cd && cs != SIZE_MAX && cd != SIZE_MAX)
        o += fmt("  <line class=\"arrow\" stroke=\"#90a4ae\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
                 "marker-end=\"url(#head-other)\"/>\n",
                 col_x(cs), ry + 8, col_x(cd), ry + 8);
      o += fmt("  <text class=\"bandtext\" x=\"%d\" y=\"%d\">%zu frames: %s</text>\n</g>\n", x0 + 8, ry,
               r.last - r.first + 1, xml(r.label).c_str());
      continue;
    }
    if (r.kind == StoryRow::Kind::Lost) {
      const int xs = col_x(col_of(r.src)), xd = col_x(col_of(r.dst));
      const int xm = (xs + xd) / 2;
      o += fmt("<g class=\"lost\" data-before=\"%zu\">\n  <title>%s (before frame %zu)</title>\n"
               "  <line class=\"arrow\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n"
               "  <path class=\"cross\" d=\"M%d,%d l10,10 M%d,%d l10,-10\"/>\n"
               "  <text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n"
               "  <text class=\"note\" x=\"%d\" y=\"%d\">lost on the way, or dropped before the capture point</text>\n</g>\n",
               frames[r.frame].number, xml(r.label).c_str(), frames[r.frame].number, xs, ry - kSlope / 2, xm, ry,
               xm - 5, ry - 5, xm - 5, ry + 5, (xs + xm) / 2, ry - 6, xml(r.label).c_str(), notes_x, ry + 4);
      continue;
    }
    const size_t i = r.frame;
    const LadderFrame& f = frames[i];
    const FrameMarks& m = conv.marks[i];
    const size_t cs = col_of(f.src), cd = col_of(f.dst);
    const int xs = col_x(cs), xd = col_x(cd);
    const Style& st = style_of(f, m);
    const bool show_qp = f.has_bth && conv.endpoints[cols[cd]].second.size() > 1;
    o += fmt("<g class=\"%s\" id=\"f%zu\" data-frame=\"%zu\" data-src=\"%s\" data-dst=\"%s\"", frame_classes(f, m).c_str(),
             f.number, f.number, xml(f.src).c_str(), xml(f.dst).c_str());
    if (f.has_bth) o += fmt(" data-opcode=\"0x%02x\" data-qp=\"0x%06" PRIx32 "\" data-psn=\"%" PRIu32 "\"", f.opcode, f.dest_qp, f.psn);
    if (m.acks_range) o += fmt(" data-acks=\"%" PRIu32 "..%" PRIu32 "\" data-acked-packets=\"%zu\"", m.acked_first, f.psn, m.acked_packets);
    o += fmt(">\n  <title>%s</title>\n", xml(f.line).c_str());
    o += fmt("  <text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"end\">%zu</text>"
             "<text class=\"axis\" x=\"%d\" y=\"%d\">%.6f</text>\n",
             kMargin + 44, ry + 4, f.number, kMargin + 56, ry + 4, f.time);
    if (cs == cd) {  // to itself (loopback): a small loop
      o += fmt("  <path class=\"arrow\" d=\"M%d,%d h40 v%d h-40\" marker-end=\"url(#head-%s)\"/>\n", xs, ry - 4, kSlope,
               st.cls);
    } else {
      o += fmt("  <line class=\"arrow\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" marker-end=\"url(#head-%s)\"/>\n", xs,
               ry - kSlope / 2, xd, ry + kSlope / 2, st.cls);
    }
    o += fmt("  <text class=\"label\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", (xs + xd) / 2, ry - 6,
             xml(frame_label(f, show_qp)).c_str());
    const std::string n = frame_notes(f, m);
    if (!n.empty()) o += fmt("  <text class=\"note\" x=\"%d\" y=\"%d\">%s</text>\n", notes_x, ry + 4, xml(n).c_str());
    // ACK coalescing: a bracket beside the responder's column from the first request this ACK
    // covers (or the top, if that request is not drawn) down to the ACK.
    if (m.acks_range && m.acked_packets > 1) {
      int top = rows_top - kRowHeight / 2;
      if (y_near[m.acked_first_frame] >= 0 && y_near[m.acked_first_frame] < ry) top = y_near[m.acked_first_frame];
      const int bx = xs + (xs < xd ? -kBracketOffset : kBracketOffset);
      const int tick = xs < xd ? 5 : -5;
      o += fmt("  <path class=\"bracket\" d=\"M%d,%d h%d V%d h%d\"/>\n", bx + tick, top, -tick, ry, tick);
    }
    o += "</g>\n";
  }
  // Links: a NAK (or the request that revealed a gap) and the resend that answers it, both drawn:
  // a curve beside the requester's column.
  for (const Link& l : conv.links) {
    const int y0 = y_of_frame[l.from], y1 = y_of_frame[l.to];
    if (y0 < 0 || y1 < 0) continue;
    const size_t c = col_of(frames[l.to].src);
    if (c == SIZE_MAX) continue;
    const int x = col_x(c), side = c + 1 == ncols && ncols > 1 ? 1 : -1, bulge = side * 70;
    o += fmt("<g class=\"linked\" data-from=\"%zu\" data-to=\"%zu\"><title>%s</title>"
             "<path class=\"link\" d=\"M%d,%d C%d,%d %d,%d %d,%d\"/></g>\n",
             frames[l.from].number, frames[l.to].number, xml(l.text).c_str(), x + side * 4, y0, x + bulge, y0, x + bulge,
             y1, x + side * 4, y1 - kSlope / 2);
  }
  o += "</svg>\n";
  return o;
}

}  // namespace uroce::dissect
