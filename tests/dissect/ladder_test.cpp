// The ladder's reading of a conversation (tools/dissect/ladder_marks.cpp) on frames written
// here: PSN wrap, go-back-N, duplicates, ACK coalescing, NAKs, QP pairing with several QPs.
#include <gtest/gtest.h>

#include <algorithm>

#include "proto/aeth.hpp"
#include "proto/opcode.hpp"
#include "tools/dissect/ladder.hpp"

using namespace uroce;
using namespace uroce::dissect;

namespace {

constexpr const char* kA = "198.18.0.1";
constexpr const char* kB = "198.18.0.2";

struct Builder {
  std::vector<LadderFrame> frames;
  LadderFrame& add(const char* src, const char* dst, uint8_t opcode, uint32_t qp, uint32_t psn) {
    LadderFrame f;
    f.number = frames.size() + 1;
    f.time = double(frames.size()) * 1e-6;
    f.src = src, f.dst = dst;
    f.has_bth = f.decoded = true;
    f.opcode = opcode, f.dest_qp = qp, f.psn = psn;
    frames.push_back(f);
    return frames.back();
  }
  void req(uint32_t qp, uint32_t psn, uint8_t op = proto::op::kSendOnly) { add(kA, kB, op, qp, psn); }
  void ack(uint32_t qp, uint32_t psn, proto::Syndrome s = proto::Syndrome::ack()) {
    add(kB, kA, proto::op::kAck, qp, psn).syndrome = s.encode();
  }
};

std::vector<size_t> numbers_where(const Builder& b, const Conversation& c, bool FrameMarks::*m) {
  std::vector<size_t> out;
  for (size_t i = 0; i < b.frames.size(); ++i)
    if (c.marks[i].*m) out.push_back(b.frames[i].number);
  return out;
}

TEST(Ladder, WrappedPsnsAreNotRetransmissions) {
  Builder b;
  for (uint32_t p : {0xFFFFFDu, 0xFFFFFEu, 0xFFFFFFu, 0u, 1u}) b.req(0x11, p);  // frames 1-5
  b.ack(0x22, 1);                                                             // 6
  const Conversation c = read_conversation(b.frames);
  EXPECT_TRUE(numbers_where(b, c, &FrameMarks::retransmission).empty());
  ASSERT_TRUE(c.marks[5].acks_range);
  EXPECT_EQ(c.marks[5].acked_first, 0xFFFFFDu);
  EXPECT_EQ(c.marks[5].acked_packets, 5u);
}

TEST(Ladder, GoBackNAcrossTheWrapAndDuplicates) {
  Builder b;
  b.req(0x11, 0xFFFFFE);                                            // 1
  b.req(0x11, 0xFFFFFF);                                            // 2 (lost)
  b.req(0x11, 0);                                                   // 3
  b.ack(0x22, 0xFFFFFF, proto::Syndrome::nak(proto::NakCode::PsnSequenceError));  // 4: expects 0xffffff
  b.req(0x11, 0xFFFFFF);                                            // 5 retransmission
  b.req(0x11, 0);                                                   // 6 retransmission
  b.ack(0x22, 0);                                                   // 7 acks 0xffffff..0
  b.req(0x11, 0xFFFFFE);                                            // 8 retransmission and duplicate
  b.ack(0x22, 0);                                                   // 9 ACK again
  const Conversation c = read_conversation(b.frames);
  EXPECT_EQ(numbers_where(b, c, &FrameMarks::retransmission), (std::vector<size_t>{5, 6, 8}));
  EXPECT_EQ(numbers_where(b, c, &FrameMarks::duplicate), (std::vector<size_t>{8}));
  EXPECT_EQ(numbers_where(b, c, &FrameMarks::seq_nak), (std::vector<size_t>{4}));
  EXPECT_EQ(numbers_where(b, c, &FrameMarks::repeated_ack), (std::vector<size_t>{9}));
  ASSERT_TRUE(c.marks[6].acks_range);
  EXPECT_EQ(c.marks[6].acked_first, 0xFFFFFEu);  // frame 1 was never acknowledged before
  EXPECT_EQ(c.marks[6].acked_packets, 3u);
}

TEST(Ladder, RnrNakAndOtherNak) {
  Builder b;
  b.req(0x11, 5);
  b.ack(0x22, 5, proto::Syndrome::rnr(14));
  b.req(0x11, 5);
  b.ack(0x22, 5, proto::Syndrome::nak(proto::NakCode::RemoteAccessError));
  const Conversation c = read_conversation(b.frames);
  EXPECT_EQ(numbers_where(b, c, &FrameMarks::rnr_nak), (std::vector<size_t>{2}));
  EXPECT_EQ(numbers_where(b, c, &FrameMarks::other_nak), (std::vector<size_t>{4}));
  EXPECT_EQ(numbers_where(b, c, &FrameMarks::retransmission), (std::vector<size_t>{3}));
  EXPECT_TRUE(numbers_where(b, c, &FrameMarks::duplicate).empty());  // the RNR NAK did not accept 5
}

// Two connections between the same hosts, both starting at PSN 0 (as NCCL's do): one
// response is ambiguous, the capture as a whole is not. Each flow keeps its own PSNs.
TEST(Ladder, PairsQpsBetweenTheSameHosts) {
  Builder b;
  b.req(0x101, 0);  // 1: A(0xa1) -> B(0x101)
  b.req(0x102, 0);  // 2: A(0xa2) -> B(0x102)
  b.ack(0xa1, 0);   // 3: ambiguous
  b.ack(0xa2, 0);   // 4: ambiguous
  b.req(0x101, 1);  // 5
  b.ack(0xa1, 1);   // 6: only 0x101 had PSN 1
  b.req(0x102, 1);  // 7
  b.ack(0xa2, 1);   // 8
  b.req(0x101, 2);
  b.ack(0xa1, 2);
  const Conversation c = read_conversation(b.frames);
  for (size_t i = 0; i < b.frames.size(); ++i) ASSERT_TRUE(c.marks[i].sender_qp_known) << "frame " << i + 1;
  EXPECT_EQ(c.marks[0].sender_qp, 0xa1u);
  EXPECT_EQ(c.marks[1].sender_qp, 0xa2u);
  EXPECT_EQ(c.marks[2].sender_qp, 0x101u);
  EXPECT_EQ(c.marks[3].sender_qp, 0x102u);
  EXPECT_TRUE(numbers_where(b, c, &FrameMarks::retransmission).empty());
  LadderOptions o;
  o.have_qp = true, o.qp = 0xa2;
  const std::vector<size_t> sel = select_frames(b.frames, c, o);
  EXPECT_EQ(sel, (std::vector<size_t>{1, 3, 6, 7}));  // indexes: frames 2, 4, 7, 8
  ASSERT_EQ(c.endpoints.size(), 2u);
  EXPECT_EQ(c.endpoints[0].second, (std::vector<uint32_t>{0xa1, 0xa2}));
}

TEST(Ladder, SvgHasOneArrowPerFrameAndEscapesText) {
  Builder b;
  b.req(0x11, 1);
  b.frames.back().line = "line <with> \"markup\" & more";
  b.ack(0x22, 1);
  const Conversation c = read_conversation(b.frames);
  LadderOptions o;
  o.title = "a&b.pcap";
  const std::vector<size_t> sel = select_frames(b.frames, c, o);
  const std::string svg = render_svg(b.frames, c, sel, tell_story(b.frames, c, sel, true), o);
  size_t groups = 0;
  for (size_t at = 0; (at = svg.find("<g class=\"frame ", at)) != std::string::npos; ++at) ++groups;
  EXPECT_EQ(groups, 2u);
  EXPECT_NE(svg.find("id=\"f1\""), std::string::npos);
  EXPECT_NE(svg.find("id=\"f2\""), std::string::npos);
  EXPECT_NE(svg.find("line &lt;with&gt; &quot;markup&quot; &amp; more"), std::string::npos);
  EXPECT_NE(svg.find("a&amp;b.pcap"), std::string::npos);
  EXPECT_EQ(svg.find("a&b"), std::string::npos);
}

// A stream of WRITE MIDDLEs from PSN 100 with PSN `lost` missing, a sequence NAK for it after
// `before_nak` more frames, then the resends `resent` and new PSNs from `next` (count `more`).
struct LossStory {
  Builder b;
  size_t reveal = 0, nak = 0, resend = 0;  // frame indexes
  LossStory(uint32_t lost, uint32_t last, std::vector<uint32_t> resent, uint32_t next, uint32_t more) {
    for (uint32_t p = 100; p <= last; ++p) {
      if (p == lost) continue;
      if (p == lost + 1) reveal = b.frames.size();
      b.req(0x11, p, proto::op::kWriteMiddle);
    }
    nak = b.frames.size();
    b.ack(0x22, lost, proto::Syndrome::nak(proto::NakCode::PsnSequenceError));
    resend = b.frames.size();
    for (uint32_t p : resent) b.req(0x11, p, proto::op::kWriteMiddle);
    for (uint32_t p = next; p < next + more; ++p) b.req(0x11, p, proto::op::kWriteMiddle);
    b.ack(0x22, next + more - 1);
  }
};

std::vector<uint32_t> range(uint32_t a, uint32_t b) {
  std::vector<uint32_t> v;
  for (uint32_t p = a; p <= b; ++p) v.push_back(p);
  return v;
}

TEST(Story, AGapIsNotSeenAndTheNakLinksToItsGoBackNResend) {
  LossStory s(110, 140, range(110, 140), 141, 3);
  const Conversation c = read_conversation(s.b.frames);
  const FrameMarks& r = c.marks[s.reveal];
  ASSERT_TRUE(r.reveals_gap);
  EXPECT_EQ(r.lost_first, 110u);
  EXPECT_EQ(r.lost_last, 110u);
  for (size_t i = 0; i < c.marks.size(); ++i) {
    if (i != s.reveal) {
      EXPECT_FALSE(c.marks[i].reveals_gap) << "frame " << i + 1;
    }
  }
  const FrameMarks& first = c.marks[s.resend];
  EXPECT_TRUE(first.resend_start);
  EXPECT_FALSE(first.timeout_resend);
  EXPECT_EQ(first.answers, s.nak);
  EXPECT_EQ(first.run.rfind("go-back-N: psn 110..140 sent again (31 packets)", 0), 0u) << first.run;
  // Two links: the NAK to the resend, and the gap to the resend of its PSN.
  ASSERT_EQ(c.links.size(), 2u);
  bool nak_link = false, gap_link = false;
  for (const Link& l : c.links) {
    EXPECT_EQ(l.to, s.resend);
    nak_link |= l.from == s.nak;
    gap_link |= l.from == s.reveal;
  }
  EXPECT_TRUE(nak_link && gap_link);
  EXPECT_EQ(first_event(s.b.frames, c, Event::Loss), s.reveal);
  EXPECT_EQ(first_event(s.b.frames, c, Event::Nak), s.nak);
  EXPECT_EQ(first_event(s.b.frames, c, Event::Retx), s.resend);
  EXPECT_EQ(first_event(s.b.frames, c, Event::Timeout), SIZE_MAX);
}

TEST(Story, ASelectiveResendIsToldApartFromGoBackN) {
  LossStory s(110, 140, {110}, 141, 5);
  const Conversation c = read_conversation(s.b.frames);
  const FrameMarks& first = c.marks[s.resend];
  ASSERT_TRUE(first.resend_start);
  EXPECT_EQ(first.run.rfind("selective repeat: psn 110 sent again (1 packet), not psn 111..140", 0), 0u)
      << first.run;
  // The new PSNs after it are not retransmissions, and reveal no gap.
  for (size_t i = s.resend + 1; i < c.marks.size(); ++i) {
    EXPECT_FALSE(c.marks[i].retransmission) << "frame " << i + 1;
    EXPECT_FALSE(c.marks[i].reveals_gap) << "frame " << i + 1;
  }
}

TEST(Story, APacketLostFromAResendRunIsAGapToo) {
  std::vector<uint32_t> resent = range(110, 140);
  resent.erase(resent.begin() + 5);  // psn 115 lost again
  LossStory s(110, 140, resent, 141, 3);
  const Conversation c = read_conversation(s.b.frames);
  const size_t at = s.resend + 5;  // the resend of psn 116
  ASSERT_TRUE(c.marks[at].reveals_gap);
  EXPECT_EQ(c.marks[at].lost_first, 115u);
  EXPECT_EQ(c.marks[at].lost_last, 115u);
  EXPECT_FALSE(c.marks[at].resend_start);
}

TEST(Story, AResendNoNakAskedForIsATimeoutOrProbe) {
  Builder b;
  for (uint32_t p = 1; p <= 5; ++p) b.req(0x11, p);
  b.req(0x11, 5);  // the tail again (a probe): no NAK before it
  b.ack(0x22, 5);
  const Conversation c = read_conversation(b.frames);
  EXPECT_TRUE(c.marks[5].resend_start);
  EXPECT_TRUE(c.marks[5].timeout_resend);
  EXPECT_EQ(c.marks[5].answers, SIZE_MAX);
  EXPECT_NE(c.marks[5].run.find("no NAK"), std::string::npos) << c.marks[5].run;
  EXPECT_TRUE(c.links.empty());
  EXPECT_EQ(first_event(b.frames, c, Event::Timeout), 5u);
}

TEST(Story, NoGapAfterAReadWhoseResponsesTakeThePsns) {
  Builder b;
  b.add(kA, kB, proto::op::kReadRequest, 0x11, 10).reth_len = 4096;  // 4 responses: PSNs 10..13
  b.req(0x11, 14);  // sent before the responses came
  for (uint32_t p = 10; p <= 13; ++p) b.add(kB, kA, proto::op::kReadRespMiddle, 0x22, p);
  b.ack(0x22, 14);
  const Conversation c = read_conversation(b.frames);
  for (size_t i = 0; i < c.marks.size(); ++i) EXPECT_FALSE(c.marks[i].reveals_gap) << "frame " << i + 1;
}

TEST(Story, QuietRunsFoldIntoBandsAndEventsKeepTheirContext) {
  LossStory s(150, 200, range(150, 200), 201, 40);
  const Conversation c = read_conversation(s.b.frames);
  std::vector<size_t> all(s.b.frames.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::vector<StoryRow> story = tell_story(s.b.frames, c, all, true);
  // Every frame is in exactly one row (drawn or folded), in order.
  std::vector<size_t> seen;
  size_t bands = 0, lost = 0;
  for (const StoryRow& r : story) {
    if (r.kind == StoryRow::Kind::Frame) seen.push_back(r.frame);
    if (r.kind == StoryRow::Kind::Band) {
      ++bands;
      EXPECT_GE(r.last - r.first + 1, kStoryFoldMin);
      for (size_t k = r.first; k <= r.last; ++k) seen.push_back(k);
    }
    if (r.kind == StoryRow::Kind::Lost) {
      ++lost;
      EXPECT_EQ(r.frame, s.reveal);
      EXPECT_EQ(r.label, "not seen: psn 150");
    }
  }
  EXPECT_EQ(seen, all);
  EXPECT_EQ(lost, 1u);
  EXPECT_GE(bands, 3u);  // before the loss, between the gap and the NAK, in the resends, after them
  EXPECT_LT(story.size(), all.size() / 3);
  // The first band: "48 x RC_RDMA_WRITE_MIDDLE psn 102..147" (frames 3..48 of the stream).
  const StoryRow& b0 = *std::find_if(story.begin(), story.end(),
                                     [](const StoryRow& r) { return r.kind == StoryRow::Kind::Band; });
  EXPECT_EQ(b0.label, "46 x RC_RDMA_WRITE_MIDDLE psn 102..147");
  EXPECT_FALSE(b0.resent);
  // The frames that tell the story are drawn: the gap, the NAK, the first resend.
  for (size_t i : {s.reveal, s.nak, s.resend})
    EXPECT_TRUE(std::any_of(story.begin(), story.end(), [&](const StoryRow& r) {
      return r.kind == StoryRow::Kind::Frame && r.frame == i;
    })) << "frame " << i + 1;
  // Without folding, every frame is a row of its own (and the lost row).
  EXPECT_EQ(tell_story(s.b.frames, c, all, false).size(), all.size() + 1);
  // The SVG draws the bands, the lost PSN and the links.
  LadderOptions o;
  const std::string svg = render_svg(s.b.frames, c, all, story, o);
  EXPECT_NE(svg.find("class=\"fold\""), std::string::npos);
  EXPECT_NE(svg.find("not seen: psn 150"), std::string::npos);
  EXPECT_NE(svg.find("class=\"linked\""), std::string::npos);
}

}  // namespace
