// The ladder diagram of a capture (uroce-dissect --ladder OUT.svg): one column per endpoint,
// one arrow per RoCE frame from the sender's column to the receiver's, time running down.
//
// Three steps, one file each:
//   dissect.cpp        decodes every frame into a LadderFrame (the same decode as the line view)
//   ladder_marks.cpp   reads the conversation: which frames are retransmissions, duplicates,
//                      NAKs; which request PSNs each ACK covers; which QPs talk to which;
//                      and selects the frames to draw (--qp, --from, --count)
//   ladder_svg.cpp     draws the selected frames as SVG text
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tools/dissect/text.hpp"

namespace uroce::dissect {


// What the dissector learnt about one RoCE frame.
struct LadderFrame {
  enum class Status : uint8_t {
    Ok,         // parses, ICRC verifies
    BadIcrc,    // parses completely, ICRC does not verify (proto's parse() checks it)
    Malformed,  // parse() rejects it for another reason; fields below only if has_bth
    RoceV1,     // ethertype 0x8915: addresses are GIDs, nothing else decoded
  };
  size_t number = 0;  // frame number in the capture, from 1 (as in the line view)
  double time = 0;    // seconds since the capture's first frame
  std::string src, dst;  // IP addresses (GIDs for RoCE v1)
  std::string line;      // the line view of this frame (the tooltip)
  Status status = Status::Ok;
  bool has_bth = false;  // opcode, dest_qp and psn are read from the frame
  bool decoded = false;  // status Ok or BadIcrc: every field below is meaningful
  uint8_t opcode = 0;
  uint32_t dest_qp = 0;
  uint32_t psn = 0;
  bool ack_req = false;
  uint8_t ecn = 0;          // the IP ECN field (3 = CE)
  uint8_t syndrome = 0;     // AETH, if the opcode has one
  uint32_t msn = 0;         // AETH
  uint32_t reth_len = 0;    // RETH DMA length, if the opcode has one
  uint32_t imm = 0;         // immediate data, if the opcode has it
  uint32_t src_qp = 0;      // DETH source QP (UD), if the opcode has one
  size_t payload = 0;       // payload bytes
  std::string comment;      // the capture's comment on the frame (uroce: the rate a CNP left its QP at)
};

// How the ladder reads one frame in its conversation (indexes match the LadderFrame vector).
struct FrameMarks {
  bool retransmission = false;  // the sender already sent this PSN (or a later one) on this flow;
                                // READ responses count as PSNs the requester sent
  bool duplicate = false;       // a request PSN the responder had already acknowledged
  bool seq_nak = false;         // NAK, PSN sequence error
  bool rnr_nak = false;         // RNR NAK
  bool other_nak = false;       // NAK of another kind (access, invalid request, ...)
  bool cnp = false;
  bool repeated_ack = false;    // an ACK of a PSN already acknowledged (it answers a duplicate)
  bool ce = false;              // the IP header says Congestion Experienced
  // An ACK (or READ response / atomic ACK carrying an AETH with ACK syndrome) that newly
  // acknowledges request PSNs: from acked_first to psn, acked_packets request frames of the capture.
  bool acks_range = false;
  uint32_t acked_first = 0;
  size_t acked_packets = 0;
  size_t acked_first_frame = 0;  // index of the request frame of acked_first
  uint32_t sender_qp = 0;  // the sending QP, if known (learnt from the peer's frames or DETH)
  bool sender_qp_known = false;
  // A request whose PSN skips some: PSNs lost_first..lost_last of its flow were due before it
  // and are not in the capture (lost on the way, or dropped before the capture point). Not
  // looked for after a READ request, whose responses take PSNs the capture cannot count until
  // they come.
  bool reveals_gap = false;
  uint32_t lost_first = 0, lost_last = 0;
  // The first retransmission of a resend run: it answers the sequence NAK or RNR NAK of frame
  // index `answers`, or nothing asked for it (`timeout_resend`: the QP's timer or a tail-loss
  // probe). `run` says what the run sent again (go-back-N or selective repeat).
  bool resend_start = false;
  bool timeout_resend = false;
  size_t answers = SIZE_MAX;
  std::string run;
};

// Two frames of one story: a NAK (or a request that revealed a gap) and the resend that answers
// it. Indexes into the LadderFrame vector.
struct Link {
  size_t from = 0, to = 0;
  std::string text;
};

// The conversation read from all frames (not only those drawn: marks need the history).
struct Conversation {
  std::vector<FrameMarks> marks;
  // Endpoint address -> the QPNs seen at it (as destination, or learnt as a sender).
  std::vector<std::pair<std::string, std::vector<uint32_t>>> endpoints;  // in order of appearance
  std::vector<Link> links;  // in the order their resends appear
};

// The events a reader looks for, each a --focus kind and a step of the page's "next event".
// Note: a frame the capture commented (uroce's port notes there what a CNP did to its QP's rate).
enum class Event : uint8_t { Loss, Nak, Rnr, Cnp, Error, Retx, Timeout, Note };
inline constexpr const char* kEventNames[] = {"loss", "nak", "rnr", "cnp", "error", "retx", "timeout", "note"};
// The events of one frame (a bit per Event).
unsigned events_of(const LadderFrame& f, const FrameMarks& m);

Conversation read_conversation(const std::vector<LadderFrame>& frames);

struct LadderOptions {
  bool have_qp = false;
  uint32_t qp = 0;   // --qp: frames to or from this QP (either side's QPN)
  size_t from = 1;   // --from: first frame number drawn
  size_t count = 0;  // --count: at most this many frames drawn (0 = all)
  std::string title; // shown at the top (the capture's file name)
};

// The frames drawn: indexes into `frames`, in capture order.
std::vector<size_t> select_frames(const std::vector<LadderFrame>& frames, const Conversation& conv,
                                  const LadderOptions& opt);

// The ladder as a story: the rows drawn, top to bottom (ladder_story.cpp). In a selection of
// more than kStoryFoldAbove frames (a short one is drawn whole), frames with an event
// (events_of), a duplicate or a repeated ACK are drawn with kStoryContext frames either side;
// a longer run of the frames between is folded into one band ("52 x RC_RDMA_WRITE_MIDDLE psn
// 176..227"); a gap's PSNs are drawn where they were due, as "not seen".
struct StoryRow {
  enum class Kind : uint8_t { Frame, Band, Lost };
  Kind kind = Kind::Frame;
  size_t frame = 0;            // Frame: the frame; Lost: the frame that revealed the gap (drawn after)
  size_t first = 0, last = 0;  // Band: positions in `selected` of its first and last frame
  std::string src, dst;        // Band (its most frequent direction), Lost: the direction
  std::string label;           // Band, Lost
  bool resent = false;         // Band: some of its frames are retransmissions
};
inline constexpr size_t kStoryContext = 2;  // frames drawn either side of an event
inline constexpr size_t kStoryFoldMin = 4;  // a shorter run of quiet frames is drawn, not folded
inline constexpr size_t kStoryFoldAbove = 60;  // a selection of at most this many frames is not folded

std::vector<StoryRow> tell_story(const std::vector<LadderFrame>& frames, const Conversation& conv,
                                 const std::vector<size_t>& selected, bool fold);

// The first frame (index) with the event `e`, if any (SIZE_MAX if none).
size_t first_event(const std::vector<LadderFrame>& frames, const Conversation& conv, Event e);

// The kinds of arrow, each a CSS class with its own colour and arrowhead (ladder_svg.cpp). An
// arrow gets the first that applies, in this order; every mark that applies is also a class of
// its frame (frame_classes).
struct ArrowStyle {
  const char* cls;
  const char* colour;
  const char* legend;
};
std::span<const ArrowStyle> arrow_styles();
const ArrowStyle& style_of(const LadderFrame& f, const FrameMarks& m);
// "frame retx dup ...": the style and every mark that applies.
std::string frame_classes(const LadderFrame& f, const FrameMarks& m);
// The arrow's label: opcode, PSN and the fields that matter for that opcode.
std::string frame_label(const LadderFrame& f, bool show_qp);
// What the marks found ("retransmission", "acks psn 3..9 (7 requests)", ...), "" if nothing.
std::string frame_notes(const LadderFrame& f, const FrameMarks& m);

// The SVG document of the story rows.
std::string render_svg(const std::vector<LadderFrame>& frames, const Conversation& conv,
                       const std::vector<size_t>& selected, const std::vector<StoryRow>& story,
                       const LadderOptions& opt);

}  // namespace uroce::dissect
