// Protocol tests. (1) Crafted frames injected into a responder, and the exact frames it emits
// asserted: opcode, PSN, AETH syndrome, MSN. (2) Our frames for the operations Linux rxe was
// captured doing (../shared/golden/rxe) compared with rxe's, header field by header field.
#include <gtest/gtest.h>

#include <string>

#include "tools/pcap/pcapio.hpp"
#include "proto/entropy.hpp"
#include "tests/support/golden.hpp"
#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

namespace op = proto::op;

// Frames one device emits, parsed.
struct Captured {
  std::vector<std::vector<uint8_t>> frames;
  proto::Packet at(size_t i) const {
    proto::Packet p;
    EXPECT_TRUE(proto::parse(frames[i], p).ok());
    return p;
  }
};

class Responder : public ::testing::Test {
 protected:
  void SetUp() override {
    PairOptions o;
    o.mtu = Mtu::M256;
    o.min_rnr_timer = 14;
    pr = std::make_unique<Pair>(o);
    pr->wire.b().tap = [this](const uint8_t* d, uint32_t n) { out.frames.emplace_back(d, d + n); };
    epsn = pr->b.qp->expected_psn();
  }
  // A request as A's QP would send it to B.
  proto::Packet request(uint8_t opcode, uint32_t psn) {
    proto::Packet p;
    p.eth_src = pr->a.dev->config().mac;
    p.eth_dst = pr->b.dev->config().mac;
    std::memcpy(p.ip_src.data(), pr->a.dev->config().gid.data() + 12, 4);
    std::memcpy(p.ip_dst.data(), pr->b.dev->config().gid.data() + 12, 4);
    p.opcode = opcode;
    p.dest_qp = pr->b.qp->qpn();
    p.psn = psn;
    p.ack_req = true;
    return p;
  }
  void inject(const proto::Packet& p) {
    std::vector<uint8_t> f(proto::frame_len(p));
    ASSERT_TRUE(proto::build(p, f).ok());
    pr->wire.b().inject(f.data(), uint32_t(f.size()));
    pr->b.dev->progress();
    pr->b.dev->progress();
  }
  void post_recv(uint32_t len) {
    Sge s{pr->b.addr(), len, pr->b.mr->lkey};
    RecvWr r{77, &s, 1};
    ASSERT_EQ(pr->b.dev->post_recv(pr->b.qp, r), 0);
  }
  std::unique_ptr<Pair> pr;
  Captured out;
  uint32_t epsn = 0;
  std::vector<uint8_t> data = std::vector<uint8_t>(4096, 0xAB);
};

TEST_F(Responder, WriteOnlyIsPlacedAndAcked) {
  proto::Packet p = request(op::kWriteOnly, epsn);
  p.reth = {pr->b.addr() + 8, pr->b.mr->rkey, 100};
  p.payload = {data.data(), 100};
  inject(p);
  ASSERT_EQ(out.frames.size(), 1u);
  proto::Packet a = out.at(0);
  EXPECT_EQ(a.opcode, op::kAck);
  EXPECT_EQ(a.psn, epsn);
  EXPECT_EQ(a.aeth.syndrome, 0x1F);
  EXPECT_EQ(a.aeth.msn, 1u);
  EXPECT_EQ(a.dest_qp, pr->a.qp->qpn());
  EXPECT_EQ(std::memcmp(pr->b.buf() + 8, data.data(), 100), 0);
  EXPECT_EQ(pr->b.qp->expected_psn(), proto::psn_add(epsn, 1));
}

TEST_F(Responder, GapGetsOneSequenceNakThenRecovers) {
  proto::Packet p = request(op::kWriteOnly, proto::psn_add(epsn, 2));
  p.reth = {pr->b.addr(), pr->b.mr->rkey, 4};
  p.payload = {data.data(), 4};
  inject(p);
  p.psn = proto::psn_add(epsn, 3);
  inject(p);  // still out of sequence: no second NAK
  ASSERT_EQ(out.frames.size(), 1u);
  proto::Packet n = out.at(0);
  EXPECT_EQ(n.opcode, op::kAck);
  EXPECT_EQ(n.aeth.syndrome, 0x60) << "NAK PSN sequence error";
  EXPECT_EQ(n.psn, epsn) << "the NAK names the expected PSN";
  EXPECT_EQ(n.aeth.msn, 0u);
  p.psn = epsn;
  inject(p);
  ASSERT_EQ(out.frames.size(), 2u);
  EXPECT_EQ(out.at(1).aeth.syndrome, 0x1F);
  EXPECT_EQ(out.at(1).psn, epsn);
  EXPECT_EQ(pr->b.qp->counters().out_of_seq_request, 1u);
  EXPECT_EQ(pr->b.qp->counters().out_of_sequence, 2u);
}

TEST_F(Responder, DuplicateWriteIsAckedAgainNotReplayed) {
  proto::Packet p = request(op::kWriteOnly, epsn);
  p.reth = {pr->b.addr(), pr->b.mr->rkey, 4};
  p.payload = {data.data(), 4};
  inject(p);
  pr->b.buf()[0] = 0;  // a replay would overwrite this
  inject(p);
  ASSERT_EQ(out.frames.size(), 2u);
  EXPECT_EQ(out.at(1).opcode, op::kAck);
  EXPECT_EQ(out.at(1).psn, epsn);
  EXPECT_EQ(out.at(1).aeth.msn, 1u);
  EXPECT_EQ(pr->b.buf()[0], 0) << "a duplicate WRITE was executed again";
  EXPECT_EQ(pr->b.qp->counters().duplicate_request, 1u);
}

TEST_F(Responder, MiddleWithoutFirstIsInvalidRequest) {
  proto::Packet p = request(op::kWriteMiddle, epsn);
  p.payload = {data.data(), 256};
  inject(p);
  ASSERT_EQ(out.frames.size(), 1u);
  EXPECT_EQ(out.at(0).aeth.syndrome, 0x61);
  EXPECT_EQ(out.at(0).psn, epsn);
  EXPECT_EQ(pr->b.qp->state(), QpState::Err);
}

TEST_F(Responder, ShortFirstPacketIsInvalidRequest) {
  proto::Packet p = request(op::kSendFirst, epsn);
  post_recv(1024);
  p.payload = {data.data(), 200};  // FIRST must carry a whole MTU (256)
  inject(p);
  ASSERT_EQ(out.frames.size(), 1u);
  EXPECT_EQ(out.at(0).aeth.syndrome, 0x61);
}

TEST_F(Responder, SendWithoutReceiveGetsRnrNakWithTheQpTimer) {
  proto::Packet p = request(op::kSendOnly, epsn);
  p.payload = {data.data(), 10};
  inject(p);
  ASSERT_EQ(out.frames.size(), 1u);
  EXPECT_EQ(out.at(0).aeth.syndrome, 0x20 | 14);
  EXPECT_EQ(out.at(0).psn, epsn);
  EXPECT_EQ(pr->b.qp->expected_psn(), epsn) << "an RNR NAK does not consume the PSN";
  post_recv(64);
  inject(p);
  ASSERT_EQ(out.frames.size(), 2u);
  EXPECT_EQ(out.at(1).aeth.syndrome, 0x1F);
  EXPECT_EQ(out.at(1).aeth.msn, 1u);
  Wc wc;
  ASSERT_EQ(pr->b.rcq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.byte_len, 10u);
  EXPECT_EQ(wc.wr_id, 77u);
}

// A three-packet SEND with no receive posted: one RNR NAK for its FIRST packet, and the MIDDLE
// and LAST behind it dropped without a sequence NAK (found by docs/learn's RNR lesson).
TEST_F(Responder, RnrNakIsTheOnlyAnswerToTheRestOfTheMessage) {
  const uint8_t ops[3] = {op::kSendFirst, op::kSendMiddle, op::kSendLast};
  for (uint32_t i = 0; i < 3; ++i) {
    proto::Packet p = request(ops[i], proto::psn_add(epsn, i));
    p.ack_req = i == 2;
    p.payload = {data.data(), 256};
    inject(p);
  }
  ASSERT_EQ(out.frames.size(), 1u);
  EXPECT_EQ(out.at(0).aeth.syndrome, 0x20 | 14) << "RNR NAK";
  EXPECT_EQ(out.at(0).psn, epsn);
  EXPECT_EQ(pr->b.qp->counters().out_of_seq_request, 0u);
  post_recv(1024);
  for (uint32_t i = 0; i < 3; ++i) {  // the requester's resend, from the FIRST packet
    proto::Packet p = request(ops[i], proto::psn_add(epsn, i));
    p.ack_req = i == 2;
    p.payload = {data.data(), 256};
    inject(p);
  }
  ASSERT_EQ(out.frames.size(), 2u);
  EXPECT_EQ(out.at(1).aeth.syndrome, 0x1F);
  EXPECT_EQ(out.at(1).psn, proto::psn_add(epsn, 2));
  Wc wc;
  ASSERT_EQ(pr->b.rcq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.byte_len, 768u);
}

TEST_F(Responder, ReadRequestGetsSegmentedResponses) {
  for (int i = 0; i < 600; ++i) pr->b.buf()[i] = uint8_t(i);
  proto::Packet p = request(op::kReadRequest, epsn);
  p.reth = {pr->b.addr(), pr->b.mr->rkey, 600};  // 256 + 256 + 88
  inject(p);
  ASSERT_EQ(out.frames.size(), 3u);
  const uint8_t ops[] = {op::kReadRespFirst, op::kReadRespMiddle, op::kReadRespLast};
  for (int i = 0; i < 3; ++i) {
    proto::Packet r = out.at(size_t(i));
    EXPECT_EQ(r.opcode, ops[i]);
    EXPECT_EQ(r.psn, proto::psn_add(epsn, i));
    EXPECT_EQ(r.payload.size(), i < 2 ? 256u : 88u);
    EXPECT_EQ(r.payload[0], uint8_t(i * 256));
    if (r.info().has(proto::kAeth)) {
      EXPECT_EQ(r.aeth.syndrome, 0x1F);
      EXPECT_EQ(r.aeth.msn, 1u);
    }
  }
  EXPECT_EQ(pr->b.qp->expected_psn(), proto::psn_add(epsn, 3)) << "a READ consumes one PSN per response";
}

TEST_F(Responder, DuplicateAtomicIsAnsweredFromTheReplayCache) {
  uint64_t v = 40;
  std::memcpy(pr->b.buf() + 16, &v, 8);
  proto::Packet p = request(op::kFetchAdd, epsn);
  p.atomic = {pr->b.addr() + 16, pr->b.mr->rkey, 2, 0};
  inject(p);
  inject(p);  // the requester did not see the first ATOMIC ACKNOWLEDGE and sent it again
  ASSERT_EQ(out.frames.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    proto::Packet r = out.at(size_t(i));
    EXPECT_EQ(r.opcode, op::kAtomicAck);
    EXPECT_EQ(r.atomic_ack_orig, 40u);
    EXPECT_EQ(r.psn, epsn);
    EXPECT_EQ(r.aeth.msn, 1u);
  }
  std::memcpy(&v, pr->b.buf() + 16, 8);
  EXPECT_EQ(v, 42u) << "executed exactly once";
}

TEST_F(Responder, ReplayOfAnOldReadDoesNotBlockANewOne) {
  // 16 READs fill the responder resources (max_dest_rd_atomic 16). A late duplicate of the
  // first arrives in the same burst as a 17th: the new READ is served, not refused as an
  // "invalid request" (found by the long reliability run).
  std::vector<uint8_t> f;
  auto frame = [&](uint32_t psn) {
    proto::Packet p = request(op::kReadRequest, psn);
    p.reth = {pr->b.addr(), pr->b.mr->rkey, 8};
    f.assign(proto::frame_len(p), 0);
    EXPECT_TRUE(proto::build(p, f).ok());
    return f;
  };
  for (uint32_t i = 0; i < 16; ++i) {
    auto g = frame(proto::psn_add(epsn, i));
    pr->wire.b().inject(g.data(), uint32_t(g.size()));
    pr->b.dev->progress();
  }
  ASSERT_EQ(out.frames.size(), 16u);
  auto dup = frame(epsn);
  pr->wire.b().inject(dup.data(), uint32_t(dup.size()));
  auto next = frame(proto::psn_add(epsn, 16));
  pr->wire.b().inject(next.data(), uint32_t(next.size()));
  pr->b.dev->progress();
  pr->b.dev->progress();
  // The new READ takes the slot; the stale replay is dropped (the requester, bound by its own
  // max_rd_atomic, has finished with that READ). No NAK.
  ASSERT_EQ(out.frames.size(), 17u);
  EXPECT_EQ(out.at(16).opcode, op::kReadRespOnly);
  EXPECT_EQ(out.at(16).psn, proto::psn_add(epsn, 16));
  EXPECT_EQ(pr->b.qp->state(), QpState::Rts);
}

TEST_F(Responder, HostileFramesAreCountedDrops) {
  proto::Packet p = request(op::kWriteOnly, epsn);
  p.reth = {pr->b.addr(), pr->b.mr->rkey, 4};
  p.payload = {data.data(), 4};
  std::vector<uint8_t> f(proto::frame_len(p));
  ASSERT_TRUE(proto::build(p, f).ok());
  std::vector<uint8_t> bad = f;
  bad[bad.size() - 1] ^= 1;  // ICRC
  pr->wire.b().inject(bad.data(), uint32_t(bad.size()));
  std::vector<uint8_t> shortf(f.begin(), f.begin() + 30);
  pr->wire.b().inject(shortf.data(), uint32_t(shortf.size()));
  proto::Packet wrong_pkey = p;
  wrong_pkey.pkey = 0x8001;
  std::vector<uint8_t> g(proto::frame_len(wrong_pkey));
  ASSERT_TRUE(proto::build(wrong_pkey, g).ok());
  pr->wire.b().inject(g.data(), uint32_t(g.size()));
  proto::Packet other_qp = p;
  other_qp.dest_qp = 0x999;
  std::vector<uint8_t> h(proto::frame_len(other_qp));
  ASSERT_TRUE(proto::build(other_qp, h).ok());
  pr->wire.b().inject(h.data(), uint32_t(h.size()));
  // The same WRITE as XRC (an XRCETH after the BTH) to the RC QP: a QP of another transport.
  proto::Packet xrc = p;
  xrc.opcode = op::kXrc | op::kWriteOnly;
  xrc.xrceth = {0x1234, 0};
  std::vector<uint8_t> x(proto::frame_len(xrc));
  ASSERT_TRUE(proto::build(xrc, x).ok());
  pr->wire.b().inject(x.data(), uint32_t(x.size()));
  for (int i = 0; i < 4; ++i) pr->b.dev->progress();
  EXPECT_TRUE(out.frames.empty());
  Counters c = pr->b.dev->counters();
  EXPECT_EQ(c.icrc_errors, 1u);
  EXPECT_EQ(c.malformed, 1u);
  EXPECT_EQ(c.dropped_pkey, 1u);
  EXPECT_EQ(c.dropped_unknown_qp, 2u);
  EXPECT_EQ(pr->b.qp->expected_psn(), epsn);
  EXPECT_EQ(pr->b.qp->state(), QpState::Rts);
}

// A WRITE MIDDLE of 256 bytes or more has its ICRC checked as it is placed (Device::place_payload).
// A corrupt one is placed where its PSN's bytes go, then counted as an ICRC error and otherwise
// ignored: no answer, the expected PSN and the QP's receive count as they were; the good copy
// of that PSN overwrites it and the message completes with the right bytes, and nothing outside
// the WRITE's range is touched.
TEST_F(Responder, ACorruptWriteMiddleIsPlacedButNotTaken) {
  std::vector<uint8_t> msg(768);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = uint8_t(i * 7 + 1);
  std::memset(pr->b.buf(), 0x5A, 1024);
  proto::Packet first = request(op::kWriteFirst, epsn);
  first.ack_req = false;
  first.reth = {pr->b.addr() + 16, pr->b.mr->rkey, 768};
  first.payload = {msg.data(), 256};
  inject(first);
  proto::Packet mid = request(op::kWriteMiddle, proto::psn_add(epsn, 1));
  mid.ack_req = false;
  mid.payload = {msg.data() + 256, 256};
  std::vector<uint8_t> f(proto::frame_len(mid));
  ASSERT_TRUE(proto::build(mid, f).ok());
  std::vector<uint8_t> bad = f;
  bad[f.size() - 4 - 100] ^= 0x10;  // a payload byte
  pr->wire.b().inject(bad.data(), uint32_t(bad.size()));
  for (int i = 0; i < 2; ++i) pr->b.dev->progress();
  EXPECT_TRUE(out.frames.empty()) << "a corrupt frame drew an answer";
  EXPECT_EQ(pr->b.dev->counters().icrc_errors, 1u);
  EXPECT_EQ(pr->b.qp->expected_psn(), proto::psn_add(epsn, 1));
  EXPECT_EQ(pr->b.qp->counters().rcvd_pkts, 1u) << "the corrupt frame counted as received";
  pr->wire.b().inject(f.data(), uint32_t(f.size()));
  proto::Packet last = request(op::kWriteLast, proto::psn_add(epsn, 2));
  last.payload = {msg.data() + 512, 256};
  inject(last);
  ASSERT_EQ(out.frames.size(), 1u);
  EXPECT_EQ(out.at(0).aeth.syndrome, 0x1F);
  EXPECT_EQ(out.at(0).psn, proto::psn_add(epsn, 2));
  EXPECT_EQ(std::memcmp(pr->b.buf() + 16, msg.data(), msg.size()), 0);
  for (size_t i = 0; i < 1024; ++i) {
    if (i < 16 || i >= 16 + msg.size()) {
      ASSERT_EQ(pr->b.buf()[i], 0x5A) << "byte " << i;
    }
  }
  EXPECT_EQ(pr->b.qp->counters().rcvd_pkts, 3u);
  EXPECT_EQ(pr->b.dev->counters().icrc_errors, 1u);
}

// The same for a SEND MIDDLE: placed into the receive buffer and checked in one pass; the bad
// copy is counted and otherwise ignored, the good one completes the receive with the right bytes.
TEST_F(Responder, ACorruptSendMiddleIsPlacedButNotTaken) {
  std::vector<uint8_t> msg(768);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = uint8_t(i * 13 + 5);
  std::memset(pr->b.buf(), 0x5A, 1024);
  post_recv(1024);
  proto::Packet first = request(op::kSendFirst, epsn);
  first.ack_req = false;
  first.payload = {msg.data(), 256};
  inject(first);
  proto::Packet mid = request(op::kSendMiddle, proto::psn_add(epsn, 1));
  mid.ack_req = false;
  mid.payload = {msg.data() + 256, 256};
  std::vector<uint8_t> f(proto::frame_len(mid));
  ASSERT_TRUE(proto::build(mid, f).ok());
  std::vector<uint8_t> bad = f;
  bad[f.size() - 4 - 7] ^= 0x80;
  pr->wire.b().inject(bad.data(), uint32_t(bad.size()));
  for (int i = 0; i < 2; ++i) pr->b.dev->progress();
  EXPECT_TRUE(out.frames.empty());
  EXPECT_EQ(pr->b.dev->counters().icrc_errors, 1u);
  EXPECT_EQ(pr->b.qp->expected_psn(), proto::psn_add(epsn, 1));
  pr->wire.b().inject(f.data(), uint32_t(f.size()));
  proto::Packet last = request(op::kSendLast, proto::psn_add(epsn, 2));
  last.payload = {msg.data() + 512, 256};
  inject(last);
  ASSERT_EQ(out.frames.size(), 1u);
  EXPECT_EQ(out.at(0).aeth.syndrome, 0x1F);
  Wc wc{};
  ASSERT_EQ(pr->b.rcq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(wc.byte_len, 768u);
  EXPECT_EQ(std::memcmp(pr->b.buf(), msg.data(), msg.size()), 0);
  EXPECT_EQ(pr->b.buf()[768], 0x5A);
  EXPECT_EQ(pr->b.qp->counters().rcvd_pkts, 3u);
}

// What a large frame with a bad ICRC says is not acted on: a PSN ahead (a sequence NAK), behind
// (a duplicate's ACK), an opcode that breaks the message (an invalid request NAK and ERR), a QP
// number of nobody, a length the WRITE does not allow. Each is one ICRC error, nothing else.
TEST_F(Responder, NothingALargeCorruptFrameSaysIsActedOn) {
  std::vector<uint8_t> msg(1024, 0x77);
  proto::Packet first = request(op::kWriteFirst, epsn);
  first.ack_req = false;
  first.reth = {pr->b.addr(), pr->b.mr->rkey, 1024};
  first.payload = {msg.data(), 256};
  inject(first);
  proto::Packet mid = request(op::kWriteMiddle, proto::psn_add(epsn, 1));
  mid.payload = {msg.data(), 256};
  std::vector<uint8_t> f(proto::frame_len(mid));
  ASSERT_TRUE(proto::build(mid, f).ok());
  constexpr size_t kBth = 14 + 20 + 8;
  struct Damage {
    const char* what;
    size_t at;
    uint8_t x;
  } damages[] = {
      {"PSN ahead", kBth + 11, 0x04},       {"PSN behind", kBth + 11, 0x01}, {"opcode (SEND MIDDLE)", kBth, 0x07 ^ 0x01},
      {"QP number", kBth + 7, 0x40},        {"a pad count", kBth + 1, 0x10},
  };
  uint64_t errors = 0;
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    std::vector<uint8_t> bad = f;
    bad[d.at] ^= d.x;
    pr->wire.b().inject(bad.data(), uint32_t(bad.size()));
    for (int i = 0; i < 2; ++i) pr->b.dev->progress();
    const Counters c = pr->b.dev->counters();
    EXPECT_TRUE(out.frames.empty()) << "answered";
    EXPECT_EQ(c.icrc_errors + c.malformed, ++errors);
    EXPECT_EQ(pr->b.qp->state(), QpState::Rts);
    EXPECT_EQ(pr->b.qp->expected_psn(), proto::psn_add(epsn, 1));
    EXPECT_EQ(pr->b.qp->counters().rcvd_pkts, 1u);
    EXPECT_EQ(c.dropped_unknown_qp + pr->b.qp->counters().out_of_sequence + pr->b.qp->counters().duplicate_request,
              0u);
  }
  EXPECT_GE(pr->b.dev->counters().icrc_errors, 4u);
  pr->wire.b().inject(f.data(), uint32_t(f.size()));
  for (int i = 0; i < 2; ++i) pr->b.dev->progress();
  ASSERT_EQ(out.frames.size(), 1u);
  EXPECT_EQ(out.at(0).aeth.syndrome, 0x1F);
  EXPECT_EQ(out.at(0).psn, proto::psn_add(epsn, 1));
}

// ---- Our frames next to Linux rxe's ----------------------------------------------------------

std::vector<std::vector<uint8_t>> golden(const std::string& name) {
  uroce::pcapio::Capture cap;
  std::string err;
  EXPECT_TRUE(uroce::pcapio::read_file(golden_path("rxe/" + name), cap, err)) << err;
  std::vector<std::vector<uint8_t>> out;
  for (auto& f : cap.frames) {
    proto::Packet p;
    if (proto::parse(f.bytes, p).ok()) out.push_back(f.bytes);
  }
  return out;
}

// Same opcodes in the same order, and the same header fields apart from QPN, PSN, rkey, VA,
// addresses, UDP source port and IPv4 ID (which identify the run, not the protocol).
void compare(const std::vector<std::vector<uint8_t>>& ours, const std::vector<std::vector<uint8_t>>& theirs,
             const std::string& what) {
  ASSERT_EQ(ours.size(), theirs.size()) << what << ": packet count";
  for (size_t i = 0; i < ours.size(); ++i) {
    proto::Packet a, b;
    ASSERT_TRUE(proto::parse(ours[i], a).ok());
    ASSERT_TRUE(proto::parse(theirs[i], b).ok());
    SCOPED_TRACE(what + " packet " + std::to_string(i) + " " + std::string(b.info().name));
    ASSERT_EQ(a.opcode, b.opcode) << a.info().name << " vs rxe " << b.info().name;
    EXPECT_EQ(a.ip_version, b.ip_version);
    EXPECT_EQ(a.dscp, b.dscp);
    EXPECT_EQ(a.ecn, b.ecn);
    EXPECT_EQ(a.ttl, b.ttl);
    EXPECT_EQ(a.ipv4_flags_frag, b.ipv4_flags_frag);
    EXPECT_EQ(a.udp_dport, b.udp_dport);
    EXPECT_EQ(a.udp_checksum, b.udp_checksum);
    EXPECT_EQ(proto::udp_source_port(1) >= 0xC000, b.udp_sport >= 0xC000);
    EXPECT_EQ(a.solicited, b.solicited);
    EXPECT_EQ(a.migreq, b.migreq);
    EXPECT_EQ(a.tver, b.tver);
    EXPECT_EQ(a.pkey, b.pkey);
    EXPECT_EQ(a.fecn, b.fecn);
    EXPECT_EQ(a.becn, b.becn);
    EXPECT_EQ(a.ack_req, b.ack_req);
    EXPECT_EQ(a.pad_count(), b.pad_count());
    EXPECT_EQ(a.payload.size(), b.payload.size());
    if (a.info().has(proto::kReth)) {
      EXPECT_EQ(a.reth.dma_len, b.reth.dma_len);
    }
    if (a.info().has(proto::kAeth)) {
      EXPECT_EQ(a.aeth.syndrome, b.aeth.syndrome);
      EXPECT_EQ(a.aeth.msn, b.aeth.msn);
    }
    if (a.info().has(proto::kAtomicEth)) {
      EXPECT_EQ(a.atomic.swap_add, b.atomic.swap_add);
      EXPECT_EQ(a.atomic.compare, b.atomic.compare);
    }
    if (a.info().has(proto::kAtomicAckEth)) {
      EXPECT_EQ(a.atomic_ack_orig, b.atomic_ack_orig);
    }
  }
}

class AgainstRxe : public ::testing::Test {
 protected:
  void SetUp() override {
    PairOptions o;
    o.mtu = Mtu::M1024;  // the golden captures' path MTU
    o.min_rnr_timer = 14;
    pr = std::make_unique<Pair>(o);
    pr->wire.a().tap = [this](const uint8_t* d, uint32_t n) { wire.emplace_back(d, d + n); };
    pr->wire.b().tap = [this](const uint8_t* d, uint32_t n) { wire.emplace_back(d, d + n); };
  }
  void post(WrOpcode opc, uint32_t len, uint64_t remote_off = 0) {
    Sge s{pr->a.addr(), len, pr->a.mr->lkey};
    SendWr wr = signaled_wr(1, &s, opc);
    wr.remote_addr = pr->b.addr() + remote_off;
    wr.rkey = pr->b.mr->rkey;
    ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, wr), 0);
  }
  void recv(uint32_t len) {
    Sge s{pr->b.addr(), len, pr->b.mr->lkey};
    RecvWr r{2, &s, 1};
    ASSERT_EQ(pr->b.dev->post_recv(pr->b.qp, r), 0);
  }
  void finish() {
    Wc wc;
    ASSERT_TRUE(pr->next_wc(pr->a.scq, wc));
    ASSERT_EQ(wc.status, WcStatus::Success) << wc_status_name(wc.status);
    pr->run_until([] { return false; }, 100'000);
  }
  std::unique_ptr<Pair> pr;
  std::vector<std::vector<uint8_t>> wire;
};

TEST_F(AgainstRxe, Write64k) {
  post(WrOpcode::RdmaWrite, 65536);
  finish();
  compare(wire, golden("write_64k.pcap"), "write_64k");
}

TEST_F(AgainstRxe, Send64k) {
  recv(65536);
  post(WrOpcode::Send, 65536);
  finish();
  compare(wire, golden("send_64k.pcap"), "send_64k");
}

TEST_F(AgainstRxe, Read64k) {
  post(WrOpcode::RdmaRead, 65536);
  finish();
  compare(wire, golden("read_64k.pcap"), "read_64k");
}

TEST_F(AgainstRxe, Atomics) {
  for (const char* name : {"atomic_fadd.pcap", "atomic_cswap.pcap"}) {
    SetUp();  // a fresh QP pair for each capture: MSNs start again
    wire.clear();
    auto g = golden(name);
    ASSERT_EQ(g.size(), 4u);
    // Replay rxe's operands: the same target value, add/compare/swap values.
    proto::Packet req, ack;
    ASSERT_TRUE(proto::parse(g[0], req).ok());
    ASSERT_TRUE(proto::parse(g[1], ack).ok());
    for (int k = 0; k < 2; ++k) {
      ASSERT_TRUE(proto::parse(g[size_t(2 * k)], req).ok());
      ASSERT_TRUE(proto::parse(g[size_t(2 * k + 1)], ack).ok());
      uint64_t target = ack.atomic_ack_orig;  // the value rxe found at its target
      std::memcpy(pr->b.buf() + 64, &target, 8);
      Sge s{pr->a.addr(), 8, pr->a.mr->lkey};
      SendWr wr;
      wr.opcode = req.opcode == op::kFetchAdd ? WrOpcode::AtomicFetchAdd : WrOpcode::AtomicCmpSwp;
      wr.send_flags = kSendSignaled;
      wr.sg_list = &s;
      wr.num_sge = 1;
      wr.remote_addr = pr->b.addr() + 64;
      wr.rkey = pr->b.mr->rkey;
      wr.compare_add = req.opcode == op::kFetchAdd ? req.atomic.swap_add : req.atomic.compare;
      wr.swap = req.atomic.swap_add;
      ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, wr), 0);
      finish();
    }
    compare(wire, g, name);
  }
}

TEST_F(AgainstRxe, RnrNakThenSuccess) {
  // rxe's capture: a SEND meets an empty receive queue three times, then a receive is posted.
  post(WrOpcode::Send, 64);
  size_t rnr_seen = 0;
  ASSERT_TRUE(pr->run_until([&] {
    rnr_seen = 0;
    for (auto& f : wire) {
      proto::Packet p;
      if (proto::parse(f, p).ok() && p.opcode == op::kAck && (p.aeth.syndrome >> 5) == 1) ++rnr_seen;
    }
    return rnr_seen == 3;
  }));
  recv(64);
  finish();
  compare(wire, golden("send_rnr_nak.pcap"), "send_rnr_nak");
  EXPECT_EQ(pr->a.qp->counters().rcvd_rnr_err, 3u);
}

TEST_F(AgainstRxe, RemoteAccessErrorNak) {
  Sge s{pr->a.addr(), 16, pr->a.mr->lkey};
  SendWr wr;
  wr.opcode = WrOpcode::RdmaWrite;
  wr.send_flags = kSendSignaled;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.remote_addr = pr->b.addr();
  wr.rkey = pr->b.mr->rkey ^ 0x100;  // another key
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, wr), 0);
  Wc wc;
  ASSERT_TRUE(pr->next_wc(pr->a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::RemAccessErr);
  auto g = golden("write_nak_rkey.pcap");
  // rxe's WRITE carried a different length; compare the NAK, and the request's opcode.
  ASSERT_EQ(wire.size(), 2u);
  proto::Packet ours, theirs;
  ASSERT_TRUE(proto::parse(wire[1], ours).ok());
  ASSERT_TRUE(proto::parse(g[1], theirs).ok());
  EXPECT_EQ(ours.opcode, theirs.opcode);
  EXPECT_EQ(ours.aeth.syndrome, theirs.aeth.syndrome);
  EXPECT_EQ(ours.aeth.msn, theirs.aeth.msn);
  EXPECT_EQ(ours.ack_req, theirs.ack_req);
}


// READ, WRITE, READ in one receive burst: the WRITE's coalesced ACK must not overtake the first
// READ's responses (an ACK beyond a READ whose responses have not all come means to the
// requester that they were lost). The second READ's responses acknowledge the WRITE.
TEST_F(Responder, NoAckOvertakesOwedReadResponses) {
  auto frame = [](const proto::Packet& p) {
    std::vector<uint8_t> f(proto::frame_len(p));
    EXPECT_TRUE(proto::build(p, f).ok());
    return f;
  };
  proto::Packet r1 = request(op::kReadRequest, epsn);
  r1.reth = {pr->b.addr(), pr->b.mr->rkey, 4 * 256};
  proto::Packet w = request(op::kWriteOnly, proto::psn_add(epsn, 4));
  w.reth = {pr->b.addr() + 8192, pr->b.mr->rkey, 16};
  w.payload = {data.data(), 16};
  proto::Packet r2 = request(op::kReadRequest, proto::psn_add(epsn, 5));
  r2.reth = {pr->b.addr(), pr->b.mr->rkey, 256};
  for (const proto::Packet* p : {&r1, &w, &r2}) {
    auto f = frame(*p);
    pr->wire.b().inject(f.data(), uint32_t(f.size()));
  }
  for (int i = 0; i < 4; ++i) pr->b.dev->progress();
  std::vector<uint8_t> ops;
  std::vector<int32_t> psns;
  for (size_t i = 0; i < out.frames.size(); ++i) {
    ops.push_back(out.at(i).opcode);
    psns.push_back(proto::psn_diff(out.at(i).psn, epsn));
  }
  EXPECT_EQ(ops, (std::vector<uint8_t>{op::kReadRespFirst, op::kReadRespMiddle, op::kReadRespMiddle, op::kReadRespLast,
                                        op::kReadRespOnly}));
  EXPECT_EQ(psns, (std::vector<int32_t>{0, 1, 2, 3, 5}));
}

// ACK coalescing (config key ack_every): without AckReq the responder still acknowledges every
// N in-order packets; by default (0) only when asked.
TEST(AckEvery, TheResponderAcknowledgesEveryNPackets) {
  for (uint32_t every : {0u, 2u}) {
    SCOPED_TRACE("ack_every " + std::to_string(every));
    PairOptions o;
    o.mtu = Mtu::M256;
    o.config_b = [every](Device::Config& c) { c.ack_every = every; };
    Pair pr(o);
    std::vector<proto::Packet> acks;
    pr.wire.b().tap = [&](const uint8_t* d, uint32_t n) {
      proto::Packet p;
      if (proto::parse({d, n}, p).ok()) acks.push_back(p);
    };
    const uint32_t epsn = pr.b.qp->expected_psn();
    std::vector<uint8_t> data(256, 0x5A);
    const uint8_t ops[] = {op::kWriteFirst, op::kWriteMiddle, op::kWriteMiddle, op::kWriteMiddle, op::kWriteLast};
    for (uint32_t i = 0; i < 5; ++i) {
      proto::Packet p = forge(pr.a, pr.b, ops[i], proto::psn_add(epsn, i));
      p.ack_req = i == 4;
      p.reth = {pr.b.addr(), pr.b.mr->rkey, 5 * 256};
      p.payload = {data.data(), 256};
      inject(pr.wire.b(), p);
      pr.b.dev->progress();
      pr.b.dev->progress();
    }
    std::vector<int32_t> psns;
    for (const auto& a : acks) {
      EXPECT_EQ(a.aeth.syndrome, 0x1F);
      psns.push_back(proto::psn_diff(a.psn, epsn));
    }
    const std::vector<int32_t> want = every == 0 ? std::vector<int32_t>{4} : std::vector<int32_t>{1, 3, 4};
    EXPECT_EQ(psns, want);
  }
}

// ---- The requester's loss recovery (docs/reliability.md) -----------------------------------
// A's frames are captured and never reach B; the test plays the responder by injecting ACKs
// and NAKs into A.
class Recovery : public ::testing::Test {
 protected:
  void make(uint32_t window = param::kMaxUnackedPsns, uint8_t timeout = 14, bool sr = false) {
    PairOptions o;
    o.mtu = Mtu::M256;
    o.timeout = timeout;
    o.config_a = [window, sr](Device::Config& c) {
      c.max_unacked_psns = window;
      c.selective_repeat = sr;
    };
    pr = std::make_unique<Pair>(o);
    pr->wire.a().tap = [this](const uint8_t* d, uint32_t n) {
      proto::Packet p;
      if (proto::parse({d, n}, p).ok()) sent.push_back(p);
    };
    pr->wire.a().filter = [](const uint8_t*, uint32_t) { return false; };
    first = pr->a.qp->next_send_psn();
  }
  void post_write(uint32_t len, uint64_t id) {
    Sge s{pr->a.addr(), len, pr->a.mr->lkey};
    ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, wr_to(pr->b, id, WrOpcode::RdmaWrite, &s)), 0);
  }
  // The responder's answer to A: an ACK (syndrome 0x1f) or a NAK, for `psn`.
  void answer(uint8_t syndrome, uint32_t psn, uint32_t msn = 0) {
    proto::Packet p = forge(pr->b, pr->a, op::kAck, psn);
    p.ack_req = false;
    p.aeth = {syndrome, msn};
    inject(pr->wire.a(), p);
  }
  void turn() {  // A runs, the clock stands still
    for (int i = 0; i < 4; ++i) pr->a.dev->progress();
  }
  // A four-packet WRITE sent, and nothing answers it.
  void unanswered_burst() {
    make();
    post_write(4 * 256, 1);
    turn();
    ASSERT_EQ(sent.size(), 4u);
  }
  // The clock runs in 1 us steps, A turning at each, until A has sent `count` frames in all or
  // `limit_ns` have passed: the time that took.
  uint64_t run_until_sent(size_t count, uint64_t limit_ns = 100'000'000) {
    const uint64_t t0 = pr->wire.clock().now_ns();
    while (sent.size() < count && pr->wire.clock().now_ns() - t0 < limit_ns) {
      pr->wire.clock().advance(1000);
      turn();
    }
    return pr->wire.clock().now_ns() - t0;
  }
  // PSNs (relative to the first) of the frames A sent from index `from` on.
  std::vector<int32_t> psns(size_t from) const {
    std::vector<int32_t> v;
    for (size_t i = from; i < sent.size(); ++i) v.push_back(proto::psn_diff(sent[i].psn, first));
    return v;
  }
  std::unique_ptr<Pair> pr;
  std::vector<proto::Packet> sent;
  uint32_t first = 0;
};

// A sequence NAK restarts once from its PSN; the same NAK again (a duplicate on the wire, or
// one sent before our resend could have arrived) changes nothing. Once the gap is acknowledged
// the window fills with new work.
TEST_F(Recovery, OneResendPerGapAndTheWindowRefilled) {
  make(8);
  post_write(8 * 256, 1);
  post_write(8 * 256, 2);
  turn();
  ASSERT_EQ(psns(0), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7})) << "the window: 8 PSNs";
  answer(0x60, proto::psn_add(first, 3));  // NAK PSN sequence error at +3: 0..2 arrived
  turn();
  EXPECT_EQ(psns(8), (std::vector<int32_t>{3, 4, 5, 6, 7, 8, 9, 10}))
      << "resent from the NAKed PSN once, the window (from +3) topped up with new packets";
  const size_t n = sent.size();
  answer(0x60, proto::psn_add(first, 3));  // the same gap again
  turn();
  EXPECT_EQ(sent.size(), n) << "a second NAK for the same gap resends nothing";
  EXPECT_EQ(pr->a.qp->counters().gap_restarts, 1u);
  EXPECT_EQ(pr->a.qp->counters().naks_ignored, 1u);
  EXPECT_EQ(pr->a.qp->counters().rcvd_seq_err, 2u);
  answer(0x1F, proto::psn_add(first, 10), 1);  // the gap repaired: everything up to +10 arrived
  turn();
  EXPECT_EQ(psns(n), (std::vector<int32_t>{11, 12, 13, 14, 15})) << "the rest of the work, new PSNs only";
  Wc wc;
  ASSERT_EQ(pr->a.dev->poll_cq(pr->a.scq, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 1u);
}

// A sequence NAK that arrives late (delayed or duplicated on the wire), for a PSN the responder
// has passed since, resends nothing and takes no retry: retry_cnt counts the requester's failures
// to make progress, and with seven of them a link that reorders would otherwise end a QP that
// is progressing. A NAK for the current gap after its answer time does take one.
TEST_F(Recovery, ALateNakForAPassedPsnTakesNoRetry) {
  make(8);
  post_write(8 * 256, 1);
  post_write(8 * 256, 2);
  turn();
  ASSERT_EQ(sent.size(), 8u);
  const uint8_t retries = pr->a.qp->attrs.retry_cnt;
  answer(0x60, proto::psn_add(first, 3));  // a gap at +3: one restart, one retry
  turn();
  EXPECT_EQ(pr->a.qp->counters().gap_restarts, 1u);
  answer(0x1F, proto::psn_add(first, 5), 0);  // then an ACK through +5: progress
  turn();
  const size_t n = sent.size();
  for (int k : {1, 2, 4}) {  // late NAKs at +1, +2 (before the gap) and +4 (before the ACK's end)
    answer(0x60, proto::psn_add(first, k));
    turn();
  }
  EXPECT_EQ(sent.size(), n) << "nothing resent for a PSN the responder has passed";
  EXPECT_EQ(pr->a.qp->counters().gap_restarts, 1u);
  EXPECT_EQ(pr->a.qp->counters().naks_ignored, 3u);
  EXPECT_EQ(pr->a.qp->counters().rcvd_seq_err, 4u);
  EXPECT_EQ(pr->a.qp->state(), QpState::Rts);
  EXPECT_EQ(pr->a.qp->tx.retries_left, retries) << "the ACK gave every retry back, and no late NAK took one";
  answer(0x60, proto::psn_add(first, 6));  // a new gap, past the ACK: resent, a retry taken
  turn();
  EXPECT_EQ(pr->a.qp->counters().gap_restarts, 2u);
  EXPECT_GT(sent.size(), n);
  EXPECT_EQ(pr->a.qp->tx.retries_left, retries - 1);
}

// The loss window: a restart halves the PSNs in flight (here 32 -> 16), each ACK that makes
// progress gives one back; the packet that fills the window asks for an ACK.
TEST_F(Recovery, ARestartHalvesTheWindowAndAcksReopenIt) {
  make(32);
  post_write(64 * 256, 1);
  turn();
  ASSERT_EQ(sent.size(), 32u);
  EXPECT_TRUE(sent[31].ack_req) << "the packet that fills the window";
  EXPECT_FALSE(sent[30].ack_req);
  answer(0x60, proto::psn_add(first, 4));
  turn();
  std::vector<int32_t> want;
  for (int32_t i = 4; i < 20; ++i) want.push_back(i);
  EXPECT_EQ(psns(32), want) << "16 PSNs from the gap";
  EXPECT_EQ(pr->a.qp->tx.loss_window, 16u);
  const size_t n = sent.size();
  answer(0x1F, proto::psn_add(first, 19));
  turn();
  want.clear();
  for (int32_t i = 20; i < 37; ++i) want.push_back(i);
  EXPECT_EQ(psns(n), want) << "17 PSNs: one more after the ACK";
}

// The last packets of a burst unanswered: long before the QP timer (67 ms here), the last
// packet is sent again with AckReq; the next probe (after twice the wait) resends the oldest
// unacknowledged one, in case the gap's NAK was lost. Probes take no retry.
TEST_F(Recovery, TailLossProbeBeforeTheTimer) {
  ASSERT_NO_FATAL_FAILURE(unanswered_burst());
  EXPECT_FALSE(sent[2].ack_req) << "a MIDDLE packet asks for no ACK";
  const uint64_t first_probe = run_until_sent(5);
  ASSERT_EQ(sent.size(), 5u);
  EXPECT_EQ(proto::psn_diff(sent[4].psn, first), 3) << "the last packet sent";
  EXPECT_EQ(sent[4].opcode, op::kWriteLast);
  EXPECT_TRUE(sent[4].ack_req);
  // No RTT sample yet: the initial probe time.
  EXPECT_GE(first_probe, param::kProbeInitialNs);
  EXPECT_LT(first_probe, param::kProbeInitialNs + 10'000);
  EXPECT_LT(first_probe, proto::local_ack_timeout_ns(14) / 10);
  const uint64_t second_probe = first_probe + run_until_sent(6);
  ASSERT_EQ(sent.size(), 6u);
  EXPECT_EQ(proto::psn_diff(sent[5].psn, first), 0) << "the oldest unacknowledged packet";
  EXPECT_EQ(sent[5].opcode, op::kWriteFirst);
  EXPECT_TRUE(sent[5].ack_req) << "a probe always asks for an ACK";
  EXPECT_GE(second_probe - first_probe, 2 * param::kProbeInitialNs) << "each probe doubles the wait";
  EXPECT_EQ(pr->a.qp->counters().probes, 2u);
  EXPECT_EQ(pr->a.qp->counters().timeouts, 0u);
  // The probe is answered: the whole message completes, no timer involved.
  answer(0x1F, proto::psn_add(first, 3), 1);
  turn();
  Wc wc;
  ASSERT_EQ(pr->a.dev->poll_cq(pr->a.scq, 1, &wc), 1);
  EXPECT_EQ(wc.status, WcStatus::Success);
  // Karn's rule: that ACK may answer a probe; it is no round-trip sample (it would count the
  // probe waits, ms, as RTT, and every later probe would wait that long).
  EXPECT_EQ(pr->a.qp->counters().rtt_samples, 0u);
  EXPECT_EQ(pr->a.qp->tx.srtt_ns, 0u);
}

// A slow responder, not a lossy one: the probe fires, then the ACKs for packets sent before it
// arrive. They stop short of what was sent, as they would after a lost NAK, but they answer the
// first copies: nothing is resent (a restart on them resent up to a window of packets each time
// the peer was descheduled for longer than the probe time).
TEST_F(Recovery, LateAcksAfterAProbeRestartNothing) {
  ASSERT_NO_FATAL_FAILURE(unanswered_burst());
  run_until_sent(5);
  ASSERT_EQ(sent.size(), 5u);
  EXPECT_EQ(proto::psn_diff(sent[4].psn, first), 3) << "the probe: the last packet sent";
  answer(0x1F, proto::psn_add(first, 1));  // the responder's ACK for the first two, late
  turn();
  EXPECT_EQ(sent.size(), 5u) << "nothing resent";
  EXPECT_EQ(pr->a.qp->counters().gap_restarts, 0u);
  answer(0x1F, proto::psn_add(first, 3), 1);
  turn();
  Wc wc;
  ASSERT_EQ(pr->a.dev->poll_cq(pr->a.scq, 1, &wc), 1);
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(pr->a.qp->counters().retransmitted, 1u) << "the probe alone";
}

// The gap's NAK was lost and the responder (as rxe) is silent about the packets after the gap:
// the second probe resends the oldest packet, its ACK acknowledges exactly that packet, and the
// rest is resent from the next PSN at once.
TEST_F(Recovery, AnswerToTheOldestProbeRestartsAfterIt) {
  ASSERT_NO_FATAL_FAILURE(unanswered_burst());
  run_until_sent(6);
  ASSERT_EQ(sent.size(), 6u);
  EXPECT_EQ(proto::psn_diff(sent[5].psn, first), 0) << "the second probe: the oldest";
  answer(0x1F, first);
  turn();
  EXPECT_EQ(psns(6), (std::vector<int32_t>{1, 2, 3})) << "everything after the probed packet";
  EXPECT_EQ(pr->a.qp->counters().gap_restarts, 1u);
}

// Selective repeat: the answer to a later atomic is kept while the first one waits; a resend
// from before them sends the first again and skips the answered one (a bug once sent it with
// the next PSN: an atomic at another packet's PSN).
TEST_F(Recovery, SelectiveResendSkipsAnAnsweredAtomic) {
  make(param::kMaxUnackedPsns, 14, true);
  for (uint64_t id = 1; id <= 2; ++id) {
    Sge s{pr->a.addr() + 8 * id, 8, pr->a.mr->lkey};
    SendWr w = wr_to(pr->b, id, WrOpcode::AtomicFetchAdd, &s);
    w.compare_add = 1;
    ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, w), 0);
  }
  post_write(256, 3);
  turn();
  ASSERT_EQ(psns(0), (std::vector<int32_t>{0, 1, 2}));
  proto::Packet ack = forge(pr->b, pr->a, op::kAtomicAck, proto::psn_add(first, 1));
  ack.ack_req = false;
  ack.aeth = {0x1F, 2};
  ack.atomic_ack_orig = 41;
  inject(pr->wire.a(), ack);  // the second atomic's answer; the first one's was lost
  turn();
  ASSERT_EQ(psns(3), (std::vector<int32_t>{0})) << "the first atomic asked again, alone";
  pr->wire.clock().advance(2 * param::kProbeInitialNs);  // past the answer time
  answer(0x60, first);  // the responder never saw the first: a sequence NAK for it
  turn();
  const std::vector<int32_t> again = psns(4);
  ASSERT_FALSE(again.empty());
  for (size_t i = 4; i < sent.size(); ++i) {
    const int32_t d = proto::psn_diff(sent[i].psn, first);
    if (sent[i].opcode == op::kFetchAdd) {
      EXPECT_EQ(d, 0) << "only the unanswered atomic, at its own PSN";
    }
    EXPECT_NE(d, 1) << "the answered atomic is not sent again";
  }
  uint64_t v = 0;
  std::memcpy(&v, pr->a.buf() + 16, 8);
  EXPECT_EQ(v, 41u) << "the kept answer is in place";
}

// An atomic's answer lost, and a sequence NAK for a later gap: the NAK names the PSN the
// responder expects, so it has the atomic; the atomic is asked again at once, beside the resend
// from the gap. Before, only an ACK beyond it did that: NAKs for gaps behind it each took a
// retry, none was given back while it waited, and the soak's CMP_SWAP ended with RETRY_EXC_ERR.
TEST_F(Recovery, ANakBeyondAnUnansweredAtomicAsksItAgain) {
  make(16);
  Sge s{pr->a.addr(), 8, pr->a.mr->lkey};
  SendWr w = wr_to(pr->b, 1, WrOpcode::AtomicCmpSwp, &s);
  w.compare_add = 0;
  w.swap = 7;
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, w), 0);
  post_write(8 * 256, 2);
  turn();
  ASSERT_EQ(psns(0), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  const uint8_t retries = pr->a.qp->attrs.retry_cnt;
  answer(0x60, proto::psn_add(first, 4));  // the atomic and +1..+3 arrived; its answer did not
  turn();
  bool atomic_again = false;
  for (size_t i = 9; i < sent.size(); ++i)
    if (sent[i].opcode == op::kCmpSwap && sent[i].psn == first) atomic_again = true;
  EXPECT_TRUE(atomic_again) << "the atomic asked again: " << ::testing::PrintToString(psns(9));
  proto::Packet ack = forge(pr->b, pr->a, op::kAtomicAck, first);  // its answer, replayed
  ack.ack_req = false;
  ack.aeth = {0x1F, 1};
  ack.atomic_ack_orig = 0;
  inject(pr->wire.a(), ack);
  turn();
  Wc wc;
  ASSERT_EQ(pr->a.dev->poll_cq(pr->a.scq, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(pr->a.qp->tx.retries_left, retries) << "its answer is progress: every retry given back";
}

// Gaps NAKed one after another behind an atomic whose answer is lost (and lost again when asked
// again): each NAK names a PSN the responder had not acknowledged before, which is progress,
// so none of them ends the QP. Before, each took a retry and nothing gave one back while the
// atomic waited: the eighth gap ended the QP with RETRY_EXC_ERR.
TEST_F(Recovery, GapsBehindAWaitingAtomicEndNothing) {
  make(64);
  Sge s{pr->a.addr(), 8, pr->a.mr->lkey};
  SendWr w = wr_to(pr->b, 1, WrOpcode::AtomicFetchAdd, &s);
  w.compare_add = 1;
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, w), 0);
  post_write(32 * 256, 2);
  turn();
  ASSERT_EQ(sent.size(), 33u);
  const uint8_t retries = pr->a.qp->attrs.retry_cnt;
  for (uint32_t gap = 2; gap <= 32; gap += 3) {  // eleven gaps, each past the one before
    answer(0x60, proto::psn_add(first, gap));
    turn();
    ASSERT_EQ(pr->a.qp->state(), QpState::Rts) << "after the NAK at +" << gap;
  }
  EXPECT_EQ(pr->a.qp->tx.retries_left, retries - 1) << "the last gap's retry only";
  EXPECT_EQ(pr->a.qp->counters().retry_exceeded_err, 0u);
}

// With a round trip measured, the probe comes after a few of them (at least the floor).
TEST_F(Recovery, ProbeTimeFollowsTheMeasuredRtt) {
  make();
  post_write(256, 1);
  turn();
  pr->wire.clock().advance(30'000);  // the ACK comes 30 us later
  answer(0x1F, first, 1);
  turn();
  EXPECT_EQ(pr->a.qp->counters().rtt_samples, 1u);
  EXPECT_EQ(pr->a.qp->tx.srtt_ns, 30'000u);
  post_write(256, 2);
  turn();
  const uint64_t waited = run_until_sent(sent.size() + 1, 10'000'000);
  // 2 * srtt + 4 * rttvar = 60 + 60 us.
  EXPECT_GE(waited, 120'000u);
  EXPECT_LE(waited, 121'000u);
  EXPECT_EQ(pr->a.qp->counters().probes, 1u);
}


// ---- Selective repeat (docs/reliability.md) --------------------------------------------------

// The responder with selective_repeat on: WRITE packets after a gap are placed at once and
// kept; the gap gets one sequence NAK; when it is filled, the kept packets complete in order
// and one ACK covers them.
class SrResponder : public Responder {
 protected:
  void SetUp() override {
    PairOptions o;
    o.mtu = Mtu::M256;
    o.access |= kMwBind;  // a window for the SEND with Invalidate (SrSend)
    o.config_b = [](Device::Config& c) { c.selective_repeat = true; };
    pr = std::make_unique<Pair>(o);
    pr->wire.b().tap = [this](const uint8_t* d, uint32_t n) { out.frames.emplace_back(d, d + n); };
    epsn = pr->b.qp->expected_psn();
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7 + 1);
  }
  proto::Packet write(uint8_t opcode, int32_t k, uint32_t off, uint32_t len) {
    proto::Packet p = request(opcode, proto::psn_add(epsn, k));
    p.reth = {pr->b.addr() + 1024, pr->b.mr->rkey, 768};
    p.payload = {data.data() + off, len};
    p.ack_req = false;
    return p;
  }
};

TEST_F(SrResponder, HeldWritesArePlacedAtOnceAndCompleteInOrder) {
  post_recv(64);
  inject(write(op::kWriteFirst, 0, 0, 256));   // a 768-byte WRITE: FIRST, (MIDDLE lost), LAST
  proto::Packet last = write(op::kWriteLast, 2, 512, 256);
  last.ack_req = true;
  inject(last);
  proto::Packet imm = request(op::kWriteOnlyImm, proto::psn_add(epsn, 3));  // then a WRITE with immediate
  imm.reth = {pr->b.addr() + 4096, pr->b.mr->rkey, 16};
  imm.payload = {data.data() + 2000, 16};
  imm.imm = 0x1234;
  inject(imm);
  ASSERT_EQ(out.frames.size(), 1u) << "one NAK for the gap, nothing for the packets after it";
  EXPECT_EQ(out.at(0).aeth.syndrome, 0x60);
  EXPECT_EQ(out.at(0).psn, proto::psn_add(epsn, 1)) << "the NAK names the missing PSN";
  EXPECT_EQ(std::memcmp(pr->b.buf() + 1024 + 512, data.data() + 512, 256), 0) << "the LAST is in place already";
  EXPECT_EQ(std::memcmp(pr->b.buf() + 4096, data.data() + 2000, 16), 0);
  EXPECT_EQ(pr->b.qp->counters().sr_held, 2u);
  EXPECT_TRUE(pr->b.qp->rx.send_store.empty()) << "kept WRITEs are placed at once: no reorder store (issue 30)";
  Wc wc;
  EXPECT_EQ(pr->b.dev->poll_cq(pr->b.rcq, 1, &wc), 0) << "no completion before the gap is filled";
  EXPECT_EQ(pr->b.qp->expected_psn(), proto::psn_add(epsn, 1));
  inject(write(op::kWriteMiddle, 1, 256, 256));  // the missing packet
  ASSERT_EQ(out.frames.size(), 2u);
  EXPECT_EQ(out.at(1).aeth.syndrome, 0x1F) << "one ACK for everything kept";
  EXPECT_EQ(out.at(1).psn, proto::psn_add(epsn, 3));
  EXPECT_EQ(out.at(1).aeth.msn, 2u) << "both messages completed";
  EXPECT_EQ(pr->b.qp->expected_psn(), proto::psn_add(epsn, 4));
  EXPECT_EQ(std::memcmp(pr->b.buf() + 1024, data.data(), 768), 0);
  ASSERT_EQ(pr->b.dev->poll_cq(pr->b.rcq, 1, &wc), 1);
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(wc.imm_data, 0x1234u);
  EXPECT_EQ(wc.byte_len, 16u);
}

// A MIDDLE whose FIRST was lost has no known address: not kept (the requester resends it with
// the FIRST). A packet whose key does not cover its bytes is not placed.
TEST_F(SrResponder, NothingIsPlacedWithoutAKnownAddressAndAValidKey) {
  std::vector<uint8_t> before(pr->b.buf(), pr->b.buf() + 4096);
  inject(write(op::kWriteMiddle, 1, 256, 256));  // FIRST (at epsn) lost
  proto::Packet bad = write(op::kWriteOnly, 2, 0, 256);
  bad.reth = {pr->b.addr() + 1024, pr->b.mr->rkey ^ 0x100, 256};  // not a key of B's
  inject(bad);
  EXPECT_EQ(pr->b.qp->counters().sr_held, 0u);
  EXPECT_EQ(std::memcmp(pr->b.buf(), before.data(), 4096), 0) << "no byte written";
  ASSERT_EQ(out.frames.size(), 1u);
  EXPECT_EQ(out.at(0).aeth.syndrome, 0x60);
  EXPECT_EQ(out.at(0).psn, epsn);
}

// SEND packets after a gap are kept too (their payload in the reorder store: the receive WQE
// and the offset are known only once the gap is filled). Here: a 3-packet SEND whose MIDDLE is
// lost, then a SEND with immediate and a SEND with invalidate, each into its own receive WQE.
class SrSend : public SrResponder {
 protected:
  // Receive WQE `id` into B's buffer at `off`, `len` bytes.
  void recv_at(uint64_t id, uint32_t off, uint32_t len) {
    Sge s{pr->b.addr() + off, len, pr->b.mr->lkey};
    RecvWr r{id, &s, 1};
    ASSERT_EQ(pr->b.dev->post_recv(pr->b.qp, r), 0);
  }
  proto::Packet send(uint8_t opcode, int32_t k, uint32_t off, uint32_t len) {
    proto::Packet p = request(opcode, proto::psn_add(epsn, k));
    p.payload = {data.data() + off, len};
    p.ack_req = false;
    return p;
  }
  std::vector<Wc> recv_wcs() {
    std::vector<Wc> v;
    Wc wc;
    while (pr->b.dev->poll_cq(pr->b.rcq, 1, &wc) == 1) v.push_back(wc);
    return v;
  }
};

TEST_F(SrSend, HeldSendsReachTheirReceiveBuffersInOrder) {
  EXPECT_TRUE(pr->b.qp->rx.send_store.empty()) << "no reorder store before a SEND is kept (issue 30)";
  const uint32_t window = bound_window(*pr, 1);  // what the SEND with Invalidate invalidates
  ASSERT_NE(window, 0u);
  std::memset(pr->b.buf(), 0, 16384);
  recv_at(1, 0, 1024);
  recv_at(2, 4096, 64);
  recv_at(3, 8192, 64);
  inject(send(op::kSendFirst, 0, 0, 256));  // 256 + (256 lost) + 100 bytes
  proto::Packet last = send(op::kSendLast, 2, 512, 100);
  last.ack_req = true;
  inject(last);
  proto::Packet imm = send(op::kSendOnlyImm, 3, 1000, 50);
  imm.imm = 0x5566;
  inject(imm);
  proto::Packet inv = send(op::kSendOnlyInv, 4, 2000, 20);
  inv.ieth_rkey = window;
  inv.ack_req = true;
  inject(inv);
  ASSERT_EQ(out.frames.size(), 1u) << "one NAK for the gap, nothing for the packets after it";
  EXPECT_EQ(out.at(0).aeth.syndrome, 0x60);
  EXPECT_EQ(out.at(0).psn, proto::psn_add(epsn, 1));
  EXPECT_EQ(pr->b.qp->counters().sr_held, 3u);
  EXPECT_EQ(pr->b.qp->rx.held_sends, 3u);
  EXPECT_EQ(pr->b.qp->rx.send_store.size(), size_t(param::kSelectiveRepeatSendSlots) * pr->b.qp->rx.store_slot)
      << "the first kept SEND made the store";
  EXPECT_TRUE(recv_wcs().empty()) << "no completion before the gap is filled";
  EXPECT_EQ(pr->b.buf()[4096], 0) << "a kept SEND is not placed: its receive WQE is not known yet";
  EXPECT_EQ(pr->b.buf()[512], 0);
  // A resend of a kept packet (AckReq: a probe, or its NAK was lost) draws the NAK again.
  inject(inv);
  ASSERT_EQ(out.frames.size(), 2u);
  EXPECT_EQ(out.at(1).aeth.syndrome, 0x60);
  EXPECT_EQ(out.at(1).psn, proto::psn_add(epsn, 1));
  EXPECT_EQ(pr->b.qp->counters().sr_held, 3u) << "kept once";
  inject(send(op::kSendMiddle, 1, 256, 256));  // the missing packet
  ASSERT_EQ(out.frames.size(), 3u);
  EXPECT_EQ(out.at(2).aeth.syndrome, 0x1F) << "one ACK for everything kept";
  EXPECT_EQ(out.at(2).psn, proto::psn_add(epsn, 4));
  EXPECT_EQ(out.at(2).aeth.msn, 3u) << "three messages completed";
  EXPECT_EQ(pr->b.qp->expected_psn(), proto::psn_add(epsn, 5));
  EXPECT_EQ(pr->b.qp->rx.held_n, 0u);
  EXPECT_EQ(std::memcmp(pr->b.buf(), data.data(), 612), 0) << "the first SEND's bytes in order";
  EXPECT_EQ(pr->b.buf()[612], 0);
  EXPECT_EQ(std::memcmp(pr->b.buf() + 4096, data.data() + 1000, 50), 0);
  EXPECT_EQ(std::memcmp(pr->b.buf() + 8192, data.data() + 2000, 20), 0);
  const std::vector<Wc> wcs = recv_wcs();
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::Success);
  EXPECT_EQ(wcs[0].byte_len, 612u);
  EXPECT_EQ(wcs[0].wc_flags, 0u);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].byte_len, 50u);
  EXPECT_EQ(wcs[1].wc_flags, kWcWithImm);
  EXPECT_EQ(wcs[1].imm_data, 0x5566u);
  EXPECT_EQ(wcs[2].wr_id, 3u);
  EXPECT_EQ(wcs[2].byte_len, 20u);
  EXPECT_EQ(wcs[2].wc_flags, kWcWithInv);
  EXPECT_EQ(wcs[2].invalidated_rkey, window);
  EXPECT_EQ(pr->b.mr->windows, 0u) << "invalidated when its message was delivered";
  // Reset gives the store back.
  QpAttr a;
  a.qp_state = QpState::Reset;
  ASSERT_EQ(pr->b.dev->modify_qp(pr->b.qp, a, kAttrState), 0);
  EXPECT_TRUE(pr->b.qp->rx.send_store.empty());
  EXPECT_EQ(pr->b.qp->rx.send_store.capacity(), 0u);
}

// A kept SEND replayed with no receive WQE: an RNR NAK at its PSN (after the ACK owed for the
// packet before it); the packets kept after it stay kept and follow when it comes again.
TEST_F(SrSend, NoReceiveWqeOnReplayIsAnRnrNak) {
  recv_at(1, 0, 64);
  inject(send(op::kSendOnly, 1, 100, 30));
  inject(send(op::kSendOnly, 2, 200, 40));
  proto::Packet p0 = send(op::kSendOnly, 0, 0, 20);
  p0.ack_req = true;
  inject(p0);
  ASSERT_EQ(out.frames.size(), 3u);
  EXPECT_EQ(out.at(0).aeth.syndrome, 0x60);
  EXPECT_EQ(out.at(1).aeth.syndrome, 0x1F) << "the packet before it acknowledged";
  EXPECT_EQ(out.at(1).psn, epsn);
  EXPECT_EQ(out.at(2).aeth.syndrome >> 5, 1) << "RNR NAK";
  EXPECT_EQ(out.at(2).psn, proto::psn_add(epsn, 1));
  EXPECT_EQ(pr->b.qp->expected_psn(), proto::psn_add(epsn, 1));
  EXPECT_EQ(pr->b.qp->rx.held_n, 1u) << "the packet after it stays kept";
  recv_at(2, 4096, 64);
  recv_at(3, 8192, 64);
  proto::Packet p1 = send(op::kSendOnly, 1, 100, 30);  // sent again after the RNR timer
  p1.ack_req = true;
  inject(p1);
  ASSERT_EQ(out.frames.size(), 4u);
  EXPECT_EQ(out.at(3).aeth.syndrome, 0x1F);
  EXPECT_EQ(out.at(3).psn, proto::psn_add(epsn, 2));
  EXPECT_EQ(out.at(3).aeth.msn, 3u);
  const std::vector<Wc> wcs = recv_wcs();
  ASSERT_EQ(wcs.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].status, WcStatus::Success);
  }
  EXPECT_EQ(std::memcmp(pr->b.buf() + 4096, data.data() + 100, 30), 0);
  EXPECT_EQ(std::memcmp(pr->b.buf() + 8192, data.data() + 200, 40), 0);
}

// An invalid request found on replay (too long for its receive WQE): NAK invalid request at its
// PSN, the QP in ERR, nothing kept after it delivered (and the store forgotten).
TEST_F(SrSend, AnInvalidKeptSendIsNakedOnReplay) {
  recv_at(1, 0, 300);
  recv_at(2, 4096, 100);
  recv_at(3, 8192, 100);
  inject(send(op::kSendOnly, 1, 0, 200));  // 200 bytes for a 100-byte receive WQE
  inject(send(op::kSendOnly, 2, 0, 50));
  proto::Packet p0 = send(op::kSendOnly, 0, 0, 256);
  p0.ack_req = true;
  inject(p0);
  ASSERT_EQ(out.frames.size(), 3u);
  EXPECT_EQ(out.at(1).aeth.syndrome, 0x1F);
  EXPECT_EQ(out.at(1).psn, epsn);
  EXPECT_EQ(out.at(2).aeth.syndrome, 0x61) << "NAK invalid request";
  EXPECT_EQ(out.at(2).psn, proto::psn_add(epsn, 1));
  EXPECT_EQ(pr->b.qp->state(), QpState::Err);
  EXPECT_EQ(pr->b.qp->rx.held_n, 0u);
  EXPECT_EQ(pr->b.qp->rx.held_sends, 0u);
  const std::vector<Wc> wcs = recv_wcs();
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].status, WcStatus::Success);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, WcStatus::LocLenErr);
  EXPECT_EQ(wcs[2].wr_id, 3u);
  EXPECT_EQ(wcs[2].status, WcStatus::WrFlushErr) << "the SEND kept after it is not delivered";
}

// A receive buffer deregistered while a SEND for it is kept: the kept bytes are scattered only
// on replay, into a live registration or not at all (LocProtErr, NAK remote operational error).
TEST_F(SrSend, ADeregisteredReceiveBufferIsNotWritten) {
  Mr* mr = pr->b.dev->reg_mr(pr->b.pd, pr->b.buf() + 4096, 4096, kLocalWrite);
  ASSERT_NE(mr, nullptr);
  std::memset(pr->b.buf() + 4096, 0, 64);
  Sge sg{pr->b.addr() + 4096, 64, mr->lkey};
  RecvWr rw{5, &sg, 1};
  ASSERT_EQ(pr->b.dev->post_recv(pr->b.qp, rw), 0);
  inject(send(op::kSendOnly, 1, 0, 40));  // kept
  ASSERT_EQ(pr->b.dev->dereg_mr(mr), 0);
  proto::Packet w = write(op::kWriteOnly, 0, 0, 0);  // fills the gap (no receive WQE, no bytes)
  w.reth = {0, 0, 0};
  w.ack_req = true;
  inject(w);
  ASSERT_EQ(out.frames.size(), 3u);
  EXPECT_EQ(out.at(2).aeth.syndrome, 0x63) << "NAK remote operational error";
  EXPECT_EQ(out.at(2).psn, proto::psn_add(epsn, 1));
  EXPECT_EQ(pr->b.buf()[4096], 0) << "nothing written outside a live registration";
  const std::vector<Wc> wcs = recv_wcs();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::LocProtErr);
}

// The reorder store reaches kSelectiveRepeatSendSlots PSNs from the expected one (fewer than
// the window, which a larger max_unacked_psns may fill): a SEND packet beyond that is dropped,
// the answer after the gap is filled is the NAK for the first PSN not kept (not an ACK: the
// requester must learn it is missing), and it is kept when it comes again within reach.
TEST_F(SrSend, ASendBeyondTheStoresReachIsNotKept) {
  const int32_t reach = int32_t(param::kSelectiveRepeatSendSlots);
  ASSERT_LT(uint32_t(reach), param::kSelectiveRepeatWindow);
  for (uint64_t i = 0; i < 4; ++i) recv_at(i + 1, uint32_t(i) * 64, 64);
  inject(send(op::kSendOnly, 1, 10, 10));
  inject(send(op::kSendOnly, reach, 30, 10));  // out of reach
  inject(send(op::kSendOnly, 2, 20, 10));
  EXPECT_EQ(pr->b.qp->counters().sr_held, 2u) << "+1 and +2 kept, +128 not";
  ASSERT_EQ(out.frames.size(), 1u);
  inject(send(op::kSendOnly, 0, 0, 10));  // the gap filled: +1 and +2 delivered
  EXPECT_EQ(pr->b.qp->expected_psn(), proto::psn_add(epsn, 3));
  ASSERT_EQ(out.frames.size(), 2u);
  EXPECT_EQ(out.at(1).aeth.syndrome, 0x60) << "a NAK: what was dropped beyond the reach is missing";
  EXPECT_EQ(out.at(1).psn, proto::psn_add(epsn, 3));
  EXPECT_EQ(out.at(1).aeth.msn, 3u);
  inject(send(op::kSendOnly, reach, 30, 10));
  EXPECT_EQ(pr->b.qp->counters().sr_held, 3u) << "in reach now: kept";
  EXPECT_EQ(out.frames.size(), 2u) << "the gap's NAK went out already";
  const std::vector<Wc> wcs = recv_wcs();
  ASSERT_EQ(wcs.size(), 3u);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(std::memcmp(pr->b.buf() + 64 * i, data.data() + 10 * i, 10), 0) << "message " << i;
}

// Two engines over the fake link, one frame of A's dropped once (by PSN), A's frames recorded.
class Selective : public ::testing::Test {
 protected:
  void make(bool sr_a, bool sr_b) {
    PairOptions o;
    o.mtu = Mtu::M256;
    o.access |= kMwBind;  // three_sends' SEND with Invalidate names a window of B's
    o.config_a = [sr_a](Device::Config& c) { c.selective_repeat = sr_a; };
    o.config_b = [sr_b](Device::Config& c) { c.selective_repeat = sr_b; };
    pr = std::make_unique<Pair>(o);
    first = pr->a.qp->next_send_psn();
    pr->wire.a().filter = [this](const uint8_t* d, uint32_t n) {
      proto::Packet p;
      if (!proto::parse({d, n}, p).ok()) return true;
      sent.push_back(p);
      if (p.opcode == drop_opcode && p.psn == proto::psn_add(first, drop_at) && !dropped) return !(dropped = true);
      return true;
    };
    pr->wire.b().filter = [this](const uint8_t* d, uint32_t n) {
      proto::Packet p;
      if (!proto::parse({d, n}, p).ok()) return true;
      if (p.opcode == drop_resp_opcode && ++resp_seen == drop_resp_nth) return false;
      return true;
    };
  }
  // A's three WRs (ids 1 to 3) complete, successful and in order.
  void a_completes_three() {
    for (uint64_t i = 0; i < 3; ++i) {
      Wc wc;
      ASSERT_TRUE(pr->next_wc(pr->a.scq, wc));
      EXPECT_EQ(wc.status, WcStatus::Success);
      EXPECT_EQ(wc.wr_id, i + 1) << "completions in order";
    }
  }
  // Every PSN sent once but `psn` (relative to the first), sent twice.
  void expect_resent_alone(int psn) {
    std::vector<int> want(24, 1);
    want[size_t(psn)] = 2;
    EXPECT_EQ(times_sent(), want) << "only the lost PSN went out again";
  }
  // The hole at PSN 3 repaired selectively: that PSN resent alone, one NAK, all after it kept.
  void expect_hole_repaired() {
    expect_resent_alone(3);
    EXPECT_EQ(pr->a.qp->counters().retransmitted, 1u);
    EXPECT_EQ(pr->a.qp->counters().sr_resends, 1u);
    EXPECT_EQ(pr->b.qp->counters().sr_held, 20u) << "every packet after the gap kept";
    EXPECT_EQ(pr->b.qp->counters().out_of_seq_request, 1u) << "one NAK for the gap";
  }
  // A on toward B off: one selective resend, then go-back-N; B kept nothing.
  void expect_selective_then_go_back_n() {
    EXPECT_EQ(pr->a.qp->counters().sr_resends, 1u);
    EXPECT_EQ(pr->a.qp->counters().gap_restarts, 2u) << "the selective resend, then go-back-N from the next PSN";
    EXPECT_EQ(pr->b.qp->counters().sr_held, 0u);
  }
  // A off: plain go-back-N.
  void expect_go_back_n() {
    EXPECT_EQ(pr->a.qp->counters().sr_resends, 0u);
    EXPECT_GT(pr->a.qp->counters().retransmitted, 1u);
  }
  // Three WRITEs of 8 packets each (the last with immediate), completed and checked.
  void three_writes() {
    fill_pattern(pr->a.buf(), 3 * 2048, 11);
    Sge r{pr->b.addr() + 65536, 64, pr->b.mr->lkey};
    RecvWr rw{9, &r, 1};
    ASSERT_EQ(pr->b.dev->post_recv(pr->b.qp, rw), 0);
    for (uint64_t i = 0; i < 3; ++i) {
      Sge s{pr->a.addr() + i * 2048, 2048, pr->a.mr->lkey};
      SendWr w = wr_to(pr->b, i + 1, i == 2 ? WrOpcode::RdmaWriteWithImm : WrOpcode::RdmaWrite, &s);
      w.remote_addr = pr->b.addr() + i * 2048;
      ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, w), 0);
    }
    a_completes_three();
    Wc wc;
    ASSERT_TRUE(pr->next_wc(pr->b.rcq, wc));
    EXPECT_EQ(wc.wr_id, 9u);
    EXPECT_EQ(std::memcmp(pr->b.buf(), pr->a.buf(), 3 * 2048), 0) << "every byte in its place";
    EXPECT_EQ(pr->a.qp->counters().timeouts, 0u);
  }
  // Three SENDs of 8 packets each (with immediate, plain, with invalidate), each into its own
  // receive WQE: bytes, completions and their order checked.
  void three_sends() {
    fill_pattern(pr->a.buf(), 3 * 2048, 13);
    for (uint64_t i = 0; i < 3; ++i) {
      Sge r{pr->b.addr() + i * 4096, 4096, pr->b.mr->lkey};
      RecvWr rw{10 + i, &r, 1};
      ASSERT_EQ(pr->b.dev->post_recv(pr->b.qp, rw), 0);
    }
    const uint32_t window = bound_window(*pr, 1);
    ASSERT_NE(window, 0u);
    static constexpr WrOpcode kOps[] = {WrOpcode::SendWithImm, WrOpcode::Send, WrOpcode::SendWithInv};
    for (uint64_t i = 0; i < 3; ++i) {
      Sge s{pr->a.addr() + i * 2048, 2048, pr->a.mr->lkey};
      SendWr w = wr_to(pr->b, i + 1, kOps[i], &s);
      w.imm_data = 0x100 + uint32_t(i);
      w.invalidate_rkey = window;
      ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, w), 0);
    }
    a_completes_three();
    for (uint64_t i = 0; i < 3; ++i) {
      Wc wc;
      ASSERT_TRUE(pr->next_wc(pr->b.rcq, wc));
      EXPECT_EQ(wc.status, WcStatus::Success);
      EXPECT_EQ(wc.wr_id, 10 + i) << "receive completions in order";
      EXPECT_EQ(wc.byte_len, 2048u);
      EXPECT_EQ(wc.wc_flags, i == 0 ? kWcWithImm : i == 2 ? kWcWithInv : 0u);
      if (i == 0) {
        EXPECT_EQ(wc.imm_data, 0x100u);
      }
      if (i == 2) {
        EXPECT_EQ(wc.invalidated_rkey, window);
      }
      EXPECT_EQ(std::memcmp(pr->b.buf() + i * 4096, pr->a.buf() + i * 2048, 2048), 0) << "message " << i;
    }
    EXPECT_EQ(pr->a.qp->counters().timeouts, 0u);
  }
  // How many times A sent each PSN (relative to the first), 24 PSNs.
  std::vector<int> times_sent() const {
    std::vector<int> n(24, 0);
    for (const proto::Packet& p : sent) {
      const int32_t d = proto::psn_diff(p.psn, first);
      if (d >= 0 && d < 24) ++n[size_t(d)];
    }
    return n;
  }
  std::unique_ptr<Pair> pr;
  std::vector<proto::Packet> sent;
  uint32_t first = 0;
  uint8_t drop_opcode = op::kWriteMiddle;
  int32_t drop_at = 3;
  bool dropped = false;
  uint8_t drop_resp_opcode = 0;
  int drop_resp_nth = 0, resp_seen = 0;
};

TEST_F(Selective, AHoleInAWriteBurstIsRepairedByResendingOnlyThatPsn) {
  make(true, true);
  three_writes();
  expect_hole_repaired();
}

// A lost FIRST: its MIDDLEs cannot be placed; the requester resends the message so far, and
// nothing of the next message (its FIRST carries its address: kept).
TEST_F(Selective, ALostFirstResendsItsMessageOnly) {
  drop_opcode = op::kWriteFirst;
  drop_at = 8;
  make(true, true);
  three_writes();
  std::vector<int> want(24, 1);
  for (int i = 8; i < 16; ++i) want[size_t(i)] = 2;
  EXPECT_EQ(times_sent(), want);
}

// Selective repeat off at both ends: go-back-N, everything sent after the hole goes again.
TEST_F(Selective, OffIsGoBackN) {
  make(false, false);
  three_writes();
  const std::vector<int> n = times_sent();
  EXPECT_EQ(n[3], 2);
  EXPECT_GT(pr->a.qp->counters().retransmitted, 1u) << "the packets after the hole too";
  EXPECT_EQ(pr->a.qp->counters().sr_resends, 0u);
  EXPECT_EQ(pr->b.qp->counters().sr_held, 0u);
}

// On a clean link the mode changes nothing on the wire: the same frames, byte for byte.
TEST(SelectiveClean, TheSameFramesWithoutLoss) {
  std::vector<std::vector<uint8_t>> frames[2];
  for (int sr = 0; sr < 2; ++sr) {
    PairOptions o;
    o.mtu = Mtu::M256;
    o.config_a = o.config_b = [sr](Device::Config& c) { c.selective_repeat = sr != 0; };
    Pair pr(o);
    // The RETH addresses are B's buffer, wherever this run allocated it: made relative to it.
    const uint64_t base = pr.b.addr();
    auto tap = [&, sr, base](const uint8_t* d, uint32_t n) {
      proto::Packet p;
      ASSERT_TRUE(proto::parse({d, n}, p).ok());
      if (p.info().has(proto::kReth)) p.reth.va -= base;
      std::vector<uint8_t> f(proto::frame_len(p));
      ASSERT_TRUE(proto::build(p, f).ok());
      frames[sr].push_back(f);
    };
    pr.wire.a().tap = tap;
    pr.wire.b().tap = tap;
    fill_pattern(pr.b.buf() + 8192, 3000, 5);
    Sge s{pr.a.addr(), 5000, pr.a.mr->lkey};
    ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr_to(pr.b, 1, WrOpcode::RdmaWrite, &s)), 0);
    Sge rd{pr.a.addr() + 8192, 3000, pr.a.mr->lkey};
    SendWr r = wr_to(pr.b, 2, WrOpcode::RdmaRead, &rd);
    r.remote_addr = pr.b.addr() + 8192;
    ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, r), 0);
    for (int i = 0; i < 2; ++i) {
      Wc wc;
      ASSERT_TRUE(pr.next_wc(pr.a.scq, wc));
    }
  }
  ASSERT_FALSE(frames[0].empty());
  EXPECT_EQ(frames[0], frames[1]);
}

// One end on, the other off: never selective toward a go-back-N peer for long. A (on) resends
// the lost PSN alone; B (off) kept nothing after it and acknowledges just that one; A goes
// back N from there. The bytes and completions are right.
TEST_F(Selective, OnTowardAnOffResponderFallsBackToGoBackN) {
  make(true, false);
  three_writes();
  expect_selective_then_go_back_n();
}

// B on, A off: A is plain go-back-N (its frames as if B were off too); B keeps what it can.
TEST_F(Selective, OffTowardAnOnResponderIsGoBackN) {
  make(false, true);
  three_writes();
  expect_go_back_n();
}

// SEND: the same hole repaired the same way (the responder keeps the SEND packets after it in
// its reorder store, and hands them to their receive WQEs once the hole is filled).
TEST_F(Selective, AHoleInASendBurstIsRepairedByResendingOnlyThatPsn) {
  drop_opcode = op::kSendMiddle;
  make(true, true);
  three_sends();
  expect_hole_repaired();
}

// A lost LAST (the end of a message: the packets after it start the next one) and a lost FIRST.
TEST_F(Selective, ALostSendLastOrFirstResendsOnlyThatPsn) {
  for (const uint8_t opc : {op::kSendLast, op::kSendFirst}) {
    SCOPED_TRACE(int(opc));
    sent.clear();
    dropped = false;
    drop_opcode = opc;
    drop_at = opc == op::kSendLast ? 15 : 8;  // the plain SEND's LAST, or its FIRST
    make(true, true);
    three_sends();
    expect_resent_alone(drop_at);
  }
}

// SEND toward a go-back-N responder (on toward off): the resend of the lost PSN alone is
// answered with an ACK that stops there; A goes back N. Off toward on: plain go-back-N.
TEST_F(Selective, SendsBetweenMixedModesStillComplete) {
  drop_opcode = op::kSendMiddle;
  make(true, false);
  three_sends();
  expect_selective_then_go_back_n();
  sent.clear();
  dropped = false;
  make(false, true);
  three_sends();
  expect_go_back_n();
}

// A lost READ response: the responses after it are placed, and the READ is asked again for
// the missing part only: a request at the missing PSN, for one MTU, at its address.
TEST_F(Selective, ALostReadResponseIsAskedForAsAPart) {
  drop_resp_opcode = op::kReadRespMiddle;
  drop_resp_nth = 2;  // the third response
  make(true, true);
  fill_pattern(pr->b.buf() + 8192, 2048, 21);
  Sge s{pr->a.addr(), 2048, pr->a.mr->lkey};
  SendWr r = wr_to(pr->b, 1, WrOpcode::RdmaRead, &s);
  r.remote_addr = pr->b.addr() + 8192;
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, r), 0);
  Wc wc;
  ASSERT_TRUE(pr->next_wc(pr->a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(std::memcmp(pr->a.buf(), pr->b.buf() + 8192, 2048), 0);
  ASSERT_EQ(sent.size(), 2u) << "the READ and one request for the missing part";
  EXPECT_EQ(sent[1].opcode, op::kReadRequest);
  EXPECT_EQ(sent[1].psn, proto::psn_add(first, 2));
  EXPECT_EQ(sent[1].reth.va, pr->b.addr() + 8192 + 512);
  EXPECT_EQ(sent[1].reth.dma_len, 256u);
  EXPECT_EQ(pr->b.qp->counters().replayed_responses, 1u) << "one response sent again";
  EXPECT_EQ(pr->a.qp->counters().timeouts, 0u);
}

}  // namespace
}  // namespace uroce::test

namespace uroce::test {

// FakeLink::inject of a frame longer than a pool slot is refused without taking a slot.
TEST(FakeLinkTest, OversizedInjectTakesNoSlot) {
  FakeWire wire(16, 256, 1);
  const uint32_t before = wire.free_slots();
  std::vector<uint8_t> big(257, 0xAB);
  wire.a().inject(big.data(), uint32_t(big.size()));
  EXPECT_EQ(wire.free_slots(), before);
  EXPECT_EQ(wire.a().pending_rx(), 0u);
  std::vector<uint8_t> ok(256, 0xAB);
  wire.a().inject(ok.data(), uint32_t(ok.size()));
  EXPECT_EQ(wire.free_slots(), before - 1);
  EXPECT_EQ(wire.a().pending_rx(), 1u);
}

}  // namespace uroce::test
