// The page of a capture (page.hpp): the data as JSON, filled into the template.
#include "tools/dissect/page.hpp"

#include <algorithm>
#include <cinttypes>
#include <string_view>
#include <unordered_map>

#include "proto/opcode.hpp"
#include "tools/dissect/text.hpp"

namespace uroce::dissect {

using namespace uroce::proto;

namespace {

// Frames of a larger size are embedded in part: the headers and the first kPayloadBytes of the
// payload (kHeadBytes if the payload's start is not known), and the last kTailBytes (pad, ICRC).
constexpr size_t kWholeUpTo = 512;
constexpr size_t kPayloadBytes = 32;
constexpr size_t kHeadBytes = 256;
constexpr size_t kTailBytes = 16;

// A JSON string, also safe inside <script> (no "</").
std::string js(std::string_view s) {
  std::string o = "\"";
  for (size_t k = 0; k < s.size(); ++k) {
    const unsigned char c = static_cast<unsigned char>(s[k]);
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '/': o += (k > 0 && s[k - 1] == '<') ? "\\/" : "/"; break;
      default:
        if (c < 0x20) o += fmt("\\u%04x", c);
        else o += char(c);
    }
  }
  return o + "\"";
}

// The opcode class the page's filters use.
const char* opcode_class(const LadderFrame& f, const FrameMarks& m) {
  if (f.status == LadderFrame::Status::BadIcrc || f.status == LadderFrame::Status::Malformed) return "bad";
  if (f.status == LadderFrame::Status::RoceV1 || !f.has_bth) return "other";
  if (m.rnr_nak) return "rnr";
  if (m.seq_nak || m.other_nak) return "nak";
  if (m.cnp) return "cnp";
  const OpcodeInfo& info = opcode_info(f.opcode);
  if (!info.valid) return "other";
  return info.request ? "req" : "resp";
}

const char* kHex = "0123456789abcdef";

void hex_into(std::string& o, const uint8_t* p, size_t n) {
  for (size_t k = 0; k < n; ++k) o += kHex[p[k] >> 4], o += kHex[p[k] & 15];
}

}  // namespace

std::string render_page(const std::vector<LadderFrame>& frames, const std::vector<PageFrame>& detail,
                        const Conversation& conv, const PageSummary& sum, const std::string& title,
                        const std::string& command) {
  std::vector<size_t> all(frames.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::vector<StoryRow> story = tell_story(frames, conv, all, true);
  auto endpoint_of = [&](const std::string& a) -> long {
    for (size_t e = 0; e < conv.endpoints.size(); ++e)
      if (conv.endpoints[e].first == a) return long(e);
    return -1;
  };

  size_t retx = 0, dup = 0, seq = 0, rnr = 0, other = 0, cnp = 0, ce = 0, lost = 0, timeouts = 0;
  for (const FrameMarks& m : conv.marks) {
    retx += m.retransmission, dup += m.duplicate, seq += m.seq_nak, rnr += m.rnr_nak, other += m.other_nak;
    cnp += m.cnp, ce += m.ce, timeouts += m.timeout_resend;
    if (m.reveals_gap) lost += size_t(m.lost_last - m.lost_first) % (1u << 24) + 1;
  }

  std::string d;
  d.reserve(frames.size() * 1200 + 4096);
  d += "{\"version\":1,\"title\":" + js(title) + ",\"command\":" + js(command) + ",\n\"summary\":{";
  d += fmt("\"frames\":%zu,\"roce\":%zu,\"icrc_ok\":%zu,\"icrc_bad\":%zu,\"malformed\":%zu,\"roce_v1\":%zu,"
           "\"snapped\":%zu,",
           sum.frames, sum.roce, sum.icrc_ok, sum.icrc_bad, sum.malformed, sum.roce_v1, sum.snapped);
  d += fmt("\"retransmissions\":%zu,\"duplicates\":%zu,\"seq_naks\":%zu,\"rnr_naks\":%zu,\"other_naks\":%zu,"
           "\"cnps\":%zu,\"ce\":%zu,\"lost\":%zu,\"timeouts\":%zu,",
           retx, dup, seq, rnr, other, cnp, ce, lost, timeouts);
  d += "\"last\":" + js(sum.last) + "},\n\"endpoints\":[";
  for (size_t e = 0; e < conv.endpoints.size(); ++e) {
    const auto& [addr, qps] = conv.endpoints[e];
    d += std::string(e ? "," : "") + "{\"addr\":" + js(addr) + ",\"qps\":[";
    for (size_t q = 0; q < qps.size(); ++q) d += fmt("%s\"0x%06" PRIx32 "\"", q ? "," : "", qps[q]);
    d += "]}";
  }
  d += "],\n\"styles\":[";
  bool first = true;
  for (const ArrowStyle& s : arrow_styles()) {
    d += std::string(first ? "" : ",") + "{\"cls\":" + js(s.cls) + ",\"colour\":" + js(s.colour) +
         ",\"legend\":" + js(s.legend) + "}";
    first = false;
  }
  d += "],\n\"extra_legend\":[";
  d += js("dashed: duplicate (the responder already acknowledged this PSN)") + ",";
  d += js("grey band: a run of quiet frames, folded (click to unfold)") + ",";
  d += js("red X: PSNs that were due and are not in the capture (\"not seen\")") + ",";
  d += js("red curve: a NAK (or a gap) and the resend that answers it");
  d += "],\n\"frames\":[\n";
  // Field texts, header names and span lists repeat from frame to frame: each is written once.
  std::unordered_map<std::string, size_t> string_at;
  std::vector<const std::string*> strings;
  auto intern = [&](const std::string& x) {
    auto [it, fresh] = string_at.try_emplace(x, strings.size());
    if (fresh) strings.push_back(&it->first);
    return it->second;
  };
  std::unordered_map<std::string, size_t> span_set;
  std::vector<std::string> span_sets;
  for (size_t i = 0; i < frames.size(); ++i) {
    const LadderFrame& f = frames[i];
    const FrameMarks& m = conv.marks[i];
    const PageFrame& p = detail[i];
    const long dst = endpoint_of(f.dst);
    const bool show_qp = f.has_bth && dst >= 0 && conv.endpoints[size_t(dst)].second.size() > 1;
    d += fmt("%s{\"n\":%zu,\"t\":%.6f,\"src\":%ld,\"dst\":%ld,", i ? ",\n" : "", f.number, f.time, endpoint_of(f.src),
             dst);
    d += "\"style\":" + js(style_of(f, m).cls) + ",\"classes\":" + js(frame_classes(f, m)) +
         ",\"label\":" + js(frame_label(f, show_qp)) + ",\"note\":" + js(frame_notes(f, m));
    d += fmt(",\"qp\":%ld,\"sqp\":%ld,\"oc\":\"%s\",\"ev\":[", f.has_bth ? long(f.dest_qp) : -1L,
             m.sender_qp_known ? long(m.sender_qp) : -1L, opcode_class(f, m));
    const unsigned ev = events_of(f, m);
    bool fe = true;
    for (unsigned e = 0; e < std::size(kEventNames); ++e)
      if (ev & (1u << e)) d += fmt("%s\"%s\"", fe ? "" : ",", kEventNames[e]), fe = false;
    d += "],\"line\":" + js(f.line) + ",\"fr\":[";
    for (size_t k = 0; k < p.fields.size(); ++k) {
      const FieldRow& r = p.fields[k];
      d += fmt("%s[%zu,%zu,%zu,%zu,%zu]", k ? "," : "", r.off, r.n, intern(r.header), intern(r.text), r.hoff);
    }
    std::string set;
    for (size_t k = 0; k < p.spans.size(); ++k)
      set += fmt("%s[%zu,%zu,%zu]", k ? "," : "", p.spans[k].start, p.spans[k].end, intern(p.spans[k].header));
    auto [it, fresh] = span_set.try_emplace(set, span_sets.size());
    if (fresh) span_sets.push_back(set);
    d += fmt("],\"sp\":%zu,", it->second);
    const size_t len = p.bytes.size();
    d += fmt("\"len\":%zu,\"hex\":\"", len);
    if (len <= kWholeUpTo) {
      hex_into(d, p.bytes.data(), len);
      d += "\",\"cut\":null}";
    } else {
      size_t head = kHeadBytes;
      for (const Span& sp : p.spans)
        if (sp.header == "payload") head = (sp.start + kPayloadBytes + 15) / 16 * 16;
      head = std::min(head, len - kTailBytes);
      hex_into(d, p.bytes.data(), head);
      hex_into(d, p.bytes.data() + len - kTailBytes, kTailBytes);
      d += fmt("\",\"cut\":[%zu,%zu]}", head, len - kTailBytes);
    }
  }
  d += "],\n\"strings\":[";
  for (size_t k = 0; k < strings.size(); ++k) d += (k ? "," : "") + js(*strings[k]);
  d += "],\n\"span_sets\":[";
  for (size_t k = 0; k < span_sets.size(); ++k) d += (k ? ",[" : "[") + span_sets[k] + "]";
  d += "],\n\"rows\":[\n";
  for (size_t k = 0; k < story.size(); ++k) {
    const StoryRow& r = story[k];
    d += k ? ",\n" : "";
    switch (r.kind) {
      case StoryRow::Kind::Frame: d += fmt("{\"k\":\"f\",\"i\":%zu}", r.frame); break;
      case StoryRow::Kind::Band:
        d += fmt("{\"k\":\"band\",\"from\":%zu,\"to\":%zu,\"src\":%ld,\"dst\":%ld,\"resent\":%s,\"label\":", r.first,
                 r.last, endpoint_of(r.src), endpoint_of(r.dst), r.resent ? "true" : "false") +
             js(r.label) + "}";
        break;
      case StoryRow::Kind::Lost:
        d += fmt("{\"k\":\"lost\",\"at\":%zu,\"src\":%ld,\"dst\":%ld,\"label\":", r.frame, endpoint_of(r.src),
                 endpoint_of(r.dst)) +
             js(r.label) + "}";
        break;
    }
  }
  d += "],\n\"links\":[";
  for (size_t k = 0; k < conv.links.size(); ++k)
    d += fmt("%s{\"from\":%zu,\"to\":%zu,\"text\":", k ? ",\n" : "", conv.links[k].from, conv.links[k].to) +
         js(conv.links[k].text) + "}";
  d += "],\n\"focus\":{";
  first = true;
  for (unsigned e = 0; e < std::size(kEventNames); ++e) {
    const size_t at = first_event(frames, conv, Event(e));
    if (at == SIZE_MAX) continue;
    d += fmt("%s\"%s\":%zu", first ? "" : ",", kEventNames[e], at);
    first = false;
  }
  d += "}}\n";

  std::string page = kPageHtml;
  auto fill = [&](std::string_view key, const std::string& value) {
    for (size_t at = page.find(key); at != std::string::npos; at = page.find(key, at + value.size()))
      page.replace(at, key.size(), value);
  };
  fill("@@TITLE@@", xml(title));
  fill("@@DATA@@", d);
  return page;
}

}  // namespace uroce::dissect
