// uroce-dissect --html OUT.html: one self-contained page per capture (docs/learn, the golden
// captures). The page is tools/dissect/page.html (HTML, CSS and JavaScript, no external file),
// built into the program; the dissector fills in the data below as JSON, and the page's script
// draws the ladder (only the rows in view: 50,000 frames stay responsive), the selected frame's
// line, field table and bytes, the filters and the summary. Everything the page shows is
// decided here, in C++ (labels, marks, notes, the story rows, the field rows): the script only
// lays it out, so the page, the SVG ladder and the line view never disagree.
//
// The data, `<script id="uroce-data" type="application/json">` in the page (every "</" of a
// string written as "<\/"):
//
// {
//   "version": 1,
//   "title": "write_small.pcap",               the capture's file name
//   "command": "uroce-dissect --html ...",     what made the page
//   "summary": {                               counts over the whole capture
//     "frames", "roce", "icrc_ok", "icrc_bad", "malformed", "roce_v1", "snapped",
//     "retransmissions", "duplicates", "seq_naks", "rnr_naks", "other_naks", "cnps", "ce",
//     "lost" (request PSNs inferred missing: "not seen"), "timeouts" (resends no NAK asked for),
//     "last": "4 frames, 4 roce, 4 icrc ok, 0 icrc bad, 0 malformed"   (the line view's last line)
//   },
//   "endpoints": [ {"addr": "198.18.0.1", "qps": ["0x000011", ...]}, ... ],  ladder columns, in order
//   "styles": [ {"cls": "req", "colour": "#1f3a93", "legend": "request: SEND, ..."}, ... ],
//   "extra_legend": [ "dashed: duplicate ...", ... ],   legend lines without a colour
//   "frames": [                                 every RoCE frame, in capture order
//     { "n": 75,                                frame number in the capture (from 1)
//       "t": 0.000733,                          seconds since the first frame
//       "src": 0, "dst": 1,                     indexes into endpoints
//       "style": "retx",                        the arrow's style: one of styles[].cls
//       "classes": "frame retx dup",            every mark that applies (as the SVG's <g> classes)
//       "label": "RC_RDMA_WRITE_MIDDLE psn 175",  the arrow's label
//       "note": "retransmission",               right of the last column ("" if none)
//       "qp": 8168093,                          destination QPN (-1 if the frame has no BTH)
//       "sqp": 11,                              sending QPN if known, else -1
//       "oc": "req",                            opcode class for the filters: req, resp, nak,
//                                               rnr, cnp, bad, other
//       "ev": ["retx"],                         events for next/previous-event navigation, of:
//                                               loss (reveals a PSN gap), nak, rnr, cnp, error
//                                               (ICRC bad or malformed), retx, timeout
//       "line": "   75   0.000733  198.19...",  the line view's line for this frame
//       "fr": [[o, n, h, t, hoff], ...],        the --bytes layout, one row per line it prints:
//                                               o = frame offset, n = byte count (0: a line with
//                                               no bytes of its own, text is the whole line
//                                               after the offset), h = header name and t = the
//                                               field text as indexes into "strings", hoff =
//                                               offset inside the header
//       "sp": 0,                                where each header's bytes are: an index into
//                                               "span_sets", each a list [[start, end, h], ...]
//                                               (h into "strings")
//                                               (the page's script turns these into "fields"
//                                               [[o, n, header, text, hoff]] and "spans"
//                                               [[start, end, header]] when a frame is shown)
//       "len": 1082,                            the frame's length
//       "hex": "0011...",                       the embedded bytes, two hex digits each
//       "cut": [256, 1066] or null              bytes [a, b) are not embedded (hex is [0,a) then
//                                               [b,len)): large payloads are cut in the page
//     }, ...
//   ],
//   "strings": ["BTH", "OpCode      = 0x0a RC_RDMA_WRITE_ONLY", ...],  every field text once
//   "span_sets": [[[0, 14, 5], [14, 34, 6], ...], ...],              every span list once
//   "rows": [                                   the ladder, top to bottom (the story)
//     {"k": "f", "i": 0},                       one frame: index into frames
//     {"k": "band", "from": 5, "to": 56,        frames[from..to] folded into one band (a click
//      "label": "52 x RC_RDMA_WRITE_MIDDLE psn 176..227", "src": 0, "dst": 1,  unfolds it;
//      "resent": false},                        resent: it holds retransmissions)
//     {"k": "lost", "src": 0, "dst": 1, "at": 74,   a request PSN that was expected and not seen,
//      "label": "not seen: psn 174"},           drawn where it was due, before frames[at]
//   ],
//   "links": [ {"from": 190, "to": 205, "text": "go-back-N: psn 174..296 sent again"} ],
//                                               a NAK (or a loss) and the resend that answers it,
//                                               indexes into frames
//   "focus": {"loss": 74, "nak": 190, ...}      first frame index of each event kind present
// }
#pragma once
#include <string>
#include <vector>

#include "tools/dissect/ladder.hpp"

namespace uroce::dissect {

// One line of the --bytes layout (the text view prints these; the page shows them as a table).
struct FieldRow {
  size_t off = 0;      // frame offset of the field (or of the line)
  size_t n = 0;        // bytes the field covers; 0: a line of its own with no bytes (`text` is it)
  std::string header;  // BTH, RETH, ...
  size_t hoff = 0;     // offset inside the header
  std::string text;    // the field's decoded value (empty: a continuation of a long field)
};

// Where each header's bytes are in a frame, [start, end).
struct Span {
  size_t start = 0, end = 0;
  std::string header;
};

// What the page needs of a frame beyond its LadderFrame.
struct PageFrame {
  std::vector<FieldRow> fields;
  std::vector<Span> spans;
  std::vector<uint8_t> bytes;  // the whole frame
};

struct PageSummary {
  size_t frames = 0, roce = 0, icrc_ok = 0, icrc_bad = 0, malformed = 0, roce_v1 = 0, snapped = 0;
  std::string last;  // the line view's last line
};

// The page template (page.html, built in by embed_page.py): "@@TITLE@@" and "@@DATA@@" are
// filled in.
extern const char* const kPageHtml;

// The page (the template with the data filled in).
std::string render_page(const std::vector<LadderFrame>& frames, const std::vector<PageFrame>& detail,
                        const Conversation& conv, const PageSummary& sum, const std::string& title,
                        const std::string& command);

}  // namespace uroce::dissect
