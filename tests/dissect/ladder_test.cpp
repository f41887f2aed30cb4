// The ladder's reading of a conversation (tools/dissect/ladder_marks.cpp) on frames written
// here: PSN wrap, go-back-N, duplicates, ACK coalescing, NAKs, QP pairing with several QPs.
#include <gtest/gtest.h>

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
  const std::string svg = render_svg(b.frames, c, select_frames(b.frames, c, o), o);
  size_t groups = 0;
  for (size_t at = 0; (at = svg.find("<g class=\"frame ", at)) != std::string::npos; ++at) ++groups;
  EXPECT_EQ(groups, 2u);
  EXPECT_NE(svg.find("id=\"f1\""), std::string::npos);
  EXPECT_NE(svg.find("id=\"f2\""), std::string::npos);
  EXPECT_NE(svg.find("line &lt;with&gt; &quot;markup&quot; &amp; more"), std::string::npos);
  EXPECT_NE(svg.find("a&amp;b.pcap"), std::string::npos);
  EXPECT_EQ(svg.find("a&b"), std::string::npos);
}

}  // namespace
