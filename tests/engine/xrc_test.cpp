// XRC (IBA annex A14) in the engine: an initiator QP on one device, a target QP and XRC SRQs of
// one domain on the other. Each test checks the bytes placed, the completion and its CQ, and
// the frames on the wire (opcodes 0xa0-0xb7, the XRCETH).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "proto/opcode.hpp"
#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

namespace op = proto::op;

// A pair of devices (the harness's, with its PDs, CQs and MRs) plus XRC: on a, an initiator QP;
// on b, a domain with two XRC SRQs (each with its CQ) and a target QP, connected to a's
// initiator. Frames a sends and b sends are kept, parsed.
struct Xrc {
  Pair pr{[] {
    PairOptions o;
    o.endpoints = true;
    return o;
  }()};
  Device& da = *pr.a.dev;
  Device& db = *pr.b.dev;
  Qp* ini = nullptr;
  Qp* tgt = nullptr;
  Xrcd* xrcd = nullptr;
  Cq* cq1 = nullptr;
  Cq* cq2 = nullptr;
  Srq* srq1 = nullptr;
  Srq* srq2 = nullptr;
  std::vector<proto::Packet> a_sent, b_sent;
  std::vector<std::vector<uint8_t>> bytes;

  Xrc() {
    for (int side : {0, 1}) {
      pr.link(side).tap = [this, side](const uint8_t* d, uint32_t n) {
        bytes.emplace_back(d, d + n);
        proto::Packet p;
        EXPECT_TRUE(proto::parse(bytes.back(), p).ok());
        (side ? b_sent : a_sent).push_back(p);
      };
    }
    QpInitAttr ia;
    ia.qp_type = QpType::XrcIni;
    ia.pd = pr.a.pd;
    ia.send_cq = pr.a.scq;
    ia.cap.max_send_wr = 16;
    ini = da.create_qp(ia);
    xrcd = db.alloc_xrcd();
    cq1 = db.create_cq(16);
    cq2 = db.create_cq(16);
    srq1 = db.create_xrc_srq(pr.b.pd, xrcd, cq1, 16, 2);
    srq2 = db.create_xrc_srq(pr.b.pd, xrcd, cq2, 16, 2);
    QpInitAttr it;
    it.qp_type = QpType::XrcTgt;
    it.xrcd = xrcd;
    tgt = db.create_qp(it);
    EXPECT_NE(ini, nullptr);
    EXPECT_NE(tgt, nullptr);
    EXPECT_NE(srq1, nullptr);
    EXPECT_NE(srq2, nullptr);
    if (!ini || !tgt || !srq1 || !srq2) return;
    EXPECT_NE(srq1->srqn(), 0u);
    EXPECT_NE(srq1->srqn(), srq2->srqn());
    // pair.hpp's connect_qp with each half's masks, those xsrq_pingpong uses: a target's RTR takes
    // responder resources and the RNR timer, its RTS the timeout and send PSN only; an
    // initiator's RTR neither, its RTS RC's.
    Path p;
    p.sq_psn = p.rq_psn = 100;
    p.max_rd_atomic = 4;
    EXPECT_EQ(connect_qp(da, ini, db, *tgt, p), 0);
    EXPECT_EQ(connect_qp(db, tgt, da, *ini, p), 0);
  }

  void post_srq(Srq* s, uint64_t id, uint64_t off, uint32_t len) {
    Sge sg{pr.b.addr() + off, len, pr.b.mr->lkey};
    RecvWr r{id, &sg, 1};
    ASSERT_EQ(db.post_srq_recv(s, r), 0);
  }
  int send(uint64_t id, uint32_t srqn, WrOpcode opc, uint64_t off, uint32_t len, uint64_t raddr = 0) {
    Sge sg{pr.a.addr() + off, len, pr.a.mr->lkey};
    SendWr w;
    w.wr_id = id;
    w.opcode = opc;
    w.send_flags = kSendSignaled;
    w.sg_list = &sg;
    w.num_sge = 1;
    w.xrc_srqn = srqn;
    w.remote_addr = raddr;
    w.rkey = pr.b.mr->rkey;
    return da.post_send(ini, w);
  }
};

TEST(Xrc, SendsLandInTheSrqTheXrcethNamesWithCompletionsOnItsCq) {
  Xrc x;
  ASSERT_NE(x.tgt, nullptr);
  fill_pattern(x.pr.a.buf(), 6000, 7);
  x.post_srq(x.srq1, 11, 0, 4096);
  x.post_srq(x.srq2, 22, 8192, 4096);
  ASSERT_EQ(x.send(1, x.srq2->srqn(), WrOpcode::Send, 0, 3000), 0);     // three packets at MTU 1024
  ASSERT_EQ(x.send(2, x.srq1->srqn(), WrOpcode::Send, 3000, 100), 0);
  Wc wc;
  x.pr.expect_wc(x.pr.a.scq, wc, 1, WcStatus::Success);
  x.pr.expect_wc(x.pr.a.scq, wc, 2, WcStatus::Success);
  // Each message in its SRQ's buffer, completed on that SRQ's CQ, naming the target QP.
  x.pr.expect_wc(x.cq2, wc, 22, WcStatus::Success);
  EXPECT_EQ(wc.opcode, WcOpcode::Recv);
  EXPECT_EQ(wc.byte_len, 3000u);
  EXPECT_EQ(wc.qp_num, x.tgt->qpn());
  EXPECT_EQ(std::memcmp(x.pr.b.buf() + 8192, x.pr.a.buf(), 3000), 0);
  x.pr.expect_wc(x.cq1, wc, 11, WcStatus::Success);
  EXPECT_EQ(wc.byte_len, 100u);
  EXPECT_EQ(std::memcmp(x.pr.b.buf(), x.pr.a.buf() + 3000, 100), 0);
  Wc none;
  EXPECT_EQ(x.pr.b.rcq->poll(&none, 1), 0u);   // nothing on the pair's own CQs
  // On the wire: XRC SEND FIRST, MIDDLE, LAST and ONLY, each with the XRCETH; XRC ACKs back.
  std::vector<uint8_t> ops;
  for (const proto::Packet& p : x.a_sent) {
    ops.push_back(p.opcode);
    EXPECT_EQ(p.dest_qp, x.tgt->qpn());
    EXPECT_EQ(p.xrceth.srqn, ops.size() <= 3 ? x.srq2->srqn() : x.srq1->srqn());
  }
  EXPECT_EQ(ops, (std::vector<uint8_t>{op::kXrc | op::kSendFirst, op::kXrc | op::kSendMiddle, op::kXrc | op::kSendLast,
                                       op::kXrc | op::kSendOnly}));
  ASSERT_FALSE(x.b_sent.empty());
  for (const proto::Packet& p : x.b_sent) {
    EXPECT_EQ(p.opcode, op::kXrc | op::kAck);
    EXPECT_EQ(p.dest_qp, x.ini->qpn());
  }
}

TEST(Xrc, WriteReadAndAtomicsUseTheSrqsPd) {
  Xrc x;
  ASSERT_NE(x.tgt, nullptr);
  fill_pattern(x.pr.a.buf(), 2048, 3);
  fill_pattern(x.pr.b.buf() + 65536, 2048, 4);
  ASSERT_EQ(x.send(1, x.srq1->srqn(), WrOpcode::RdmaWrite, 0, 2048, x.pr.b.addr() + 4096), 0);
  ASSERT_EQ(x.send(2, x.srq1->srqn(), WrOpcode::RdmaRead, 8192, 2048, x.pr.b.addr() + 65536), 0);
  Wc wc;
  x.pr.expect_wc(x.pr.a.scq, wc, 1, WcStatus::Success);
  x.pr.expect_wc(x.pr.a.scq, wc, 2, WcStatus::Success);
  EXPECT_EQ(std::memcmp(x.pr.b.buf() + 4096, x.pr.a.buf(), 2048), 0);
  EXPECT_EQ(std::memcmp(x.pr.a.buf() + 8192, x.pr.b.buf() + 65536, 2048), 0);
  // A fetch-and-add on b's memory: 8 bytes back, the target's value changed.
  uint64_t v = 40;
  std::memcpy(x.pr.b.buf() + 128, &v, 8);
  Sge sg{x.pr.a.addr() + 256, 8, x.pr.a.mr->lkey};
  SendWr w;
  w.wr_id = 3;
  w.opcode = WrOpcode::AtomicFetchAdd;
  w.send_flags = kSendSignaled;
  w.sg_list = &sg;
  w.num_sge = 1;
  w.remote_addr = x.pr.b.addr() + 128;
  w.rkey = x.pr.b.mr->rkey;
  w.compare_add = 2;
  w.xrc_srqn = x.srq1->srqn();
  ASSERT_EQ(x.da.post_send(x.ini, w), 0);
  x.pr.expect_wc(x.pr.a.scq, wc, 3, WcStatus::Success);
  uint64_t got = 0, now = 0;
  std::memcpy(&got, x.pr.a.buf() + 256, 8);
  std::memcpy(&now, x.pr.b.buf() + 128, 8);
  EXPECT_EQ(got, 40u);
  EXPECT_EQ(now, 42u);
  // Responses are XRC's: READ response FIRST and LAST, the atomic ACK.
  std::vector<uint8_t> resp;
  for (const proto::Packet& p : x.b_sent)
    if (p.opcode != (op::kXrc | op::kAck)) resp.push_back(p.opcode);
  EXPECT_EQ(resp, (std::vector<uint8_t>{op::kXrc | op::kReadRespFirst, op::kXrc | op::kReadRespLast,
                                        op::kXrc | op::kAtomicAck}));
}

TEST(Xrc, AnSrqOfAnotherDomainOrNoneIsAnInvalidRequest) {
  Xrc x;
  ASSERT_NE(x.tgt, nullptr);
  Xrcd* other = x.db.alloc_xrcd();
  Cq* cq = x.db.create_cq(4);
  Srq* foreign = x.db.create_xrc_srq(x.pr.b.pd, other, cq, 4, 1);
  ASSERT_NE(foreign, nullptr);
  x.post_srq(foreign, 9, 0, 64);
  ASSERT_EQ(x.send(1, foreign->srqn(), WrOpcode::Send, 0, 64), 0);
  Wc wc;
  x.pr.expect_wc(x.pr.a.scq, wc, 1, WcStatus::RemInvReqErr);
  EXPECT_EQ(x.tgt->counters().xrc_bad_srqn, 1u);
  EXPECT_EQ(x.tgt->state(), QpState::Err);
  EXPECT_EQ(foreign->rq().size(), 1u);   // its receive untouched
  Wc none;
  EXPECT_EQ(cq->poll(&none, 1), 0u);
  ASSERT_FALSE(x.b_sent.empty());
  EXPECT_EQ(x.b_sent.back().opcode, op::kXrc | op::kAck);   // the NAK
  // A number no SRQ has: the same, on a fresh pair.
  Xrc y;
  ASSERT_EQ(y.send(1, (y.srq1->srqn() ^ 0x5a5a5a) | 1, WrOpcode::Send, 0, 64), 0);
  y.pr.expect_wc(y.pr.a.scq, wc, 1, WcStatus::RemInvReqErr);
  EXPECT_EQ(y.tgt->counters().xrc_bad_srqn, 1u);
}

// Forged frames that reach an XRC QP the wrong way round, each a counted drop that changes
// nothing: a request to the initiator (it only sends them), an ACK to the target (it only answers),
// an RC request to the target (another transport); then a real SEND still goes through.
TEST(Xrc, ARequestToTheInitiatorOrAResponseToTheTargetIsACountedDrop) {
  Xrc x;
  ASSERT_NE(x.tgt, nullptr);
  x.post_srq(x.srq1, 7, 0, 256);
  const uint32_t ini_epsn = x.ini->next_send_psn(), tgt_epsn = x.tgt->expected_psn();
  proto::Packet req = forge(x.pr.b, x.pr.a, op::kXrc | op::kSendOnly, 100);  // b -> a's initiator
  req.dest_qp = x.ini->qpn();
  req.xrceth = {x.srq1->srqn(), 0};
  inject(x.pr.link(0), req);
  proto::Packet ack = forge(x.pr.a, x.pr.b, op::kXrc | op::kAck, tgt_epsn);  // a -> b's target
  ack.dest_qp = x.tgt->qpn();
  ack.aeth = {0, 1};
  inject(x.pr.link(1), ack);
  proto::Packet rc = forge(x.pr.a, x.pr.b, op::kSendOnly, tgt_epsn);
  rc.dest_qp = x.tgt->qpn();
  inject(x.pr.link(1), rc);
  for (int i = 0; i < 4; ++i) {
    x.da.progress();
    x.db.progress();
  }
  EXPECT_EQ(x.da.counters().dropped_unknown_qp, 1u);
  EXPECT_EQ(x.db.counters().dropped_unknown_qp, 2u);
  EXPECT_TRUE(x.a_sent.empty());
  EXPECT_TRUE(x.b_sent.empty());
  EXPECT_EQ(x.ini->next_send_psn(), ini_epsn);
  EXPECT_EQ(x.tgt->expected_psn(), tgt_epsn);
  EXPECT_EQ(x.srq1->rq().size(), 1u);
  fill_pattern(x.pr.a.buf(), 64, 5);
  ASSERT_EQ(x.send(1, x.srq1->srqn(), WrOpcode::Send, 0, 64), 0);
  Wc wc;
  x.pr.expect_wc(x.cq1, wc, 7, WcStatus::Success);
  EXPECT_EQ(std::memcmp(x.pr.b.buf(), x.pr.a.buf(), 64), 0);
}

TEST(Xrc, TheRulesOfItsObjects) {
  Xrc x;
  ASSERT_NE(x.tgt, nullptr);
  // No receive queue on either half, no send queue on the target, an initiator's SRQ number
  // in 24 bits, RC-only operations refused.
  Sge sg{x.pr.b.addr(), 8, x.pr.b.mr->lkey};
  RecvWr r{1, &sg, 1};
  EXPECT_EQ(x.db.post_recv(x.tgt, r), EINVAL);
  EXPECT_EQ(x.da.post_recv(x.ini, r), EINVAL);
  SendWr w;
  EXPECT_EQ(x.db.post_send(x.tgt, w), EINVAL);
  EXPECT_EQ(x.send(1, 1u << 24, WrOpcode::Send, 0, 8), EINVAL);
  SendWr aw;
  aw.opcode = WrOpcode::AtomicWrite;
  aw.xrc_srqn = x.srq1->srqn();
  EXPECT_EQ(x.da.post_send(x.ini, aw), EINVAL);   // no XRC opcode for it
  // Wrong attributes at creation.
  QpInitAttr bad;
  bad.qp_type = QpType::XrcTgt;
  EXPECT_EQ(x.db.create_qp(bad), nullptr);        // no domain
  bad.xrcd = x.xrcd;
  bad.pd = x.pr.b.pd;
  EXPECT_EQ(x.db.create_qp(bad), nullptr);        // a PD of its own
  QpInitAttr ib = x.pr.a.init_attr(QpType::XrcIni);  // a receive CQ
  EXPECT_EQ(x.da.create_qp(ib), nullptr);
  EXPECT_EQ(x.db.create_xrc_srq(x.pr.b.pd, x.xrcd, nullptr, 4, 1), nullptr);   // no CQ
  // The domain stays while its SRQs and target QPs do; an SRQ's CQ likewise.
  EXPECT_EQ(x.db.dealloc_xrcd(x.xrcd), EBUSY);
  EXPECT_EQ(x.db.destroy_cq(x.cq1), EBUSY);
  EXPECT_EQ(x.db.xrc_srq_by_num(x.srq1->srqn()), x.srq1);
  const uint32_t n1 = x.srq1->srqn();
  EXPECT_EQ(x.db.destroy_srq(x.srq1), 0);
  EXPECT_EQ(x.db.xrc_srq_by_num(n1), nullptr);
  EXPECT_EQ(x.db.destroy_cq(x.cq1), 0);
  EXPECT_EQ(x.db.destroy_srq(x.srq2), 0);
  EXPECT_EQ(x.db.dealloc_xrcd(x.xrcd), EBUSY);    // the target QP
  EXPECT_EQ(x.db.destroy_qp(x.tgt), 0);
  EXPECT_EQ(x.db.dealloc_xrcd(x.xrcd), 0);
}

TEST(Xrc, ALostPacketIsResentGoBackN) {
  Xrc x;
  ASSERT_NE(x.tgt, nullptr);
  fill_pattern(x.pr.a.buf(), 5000, 9);
  x.post_srq(x.srq1, 5, 0, 8192);
  int n = 0;
  x.pr.link(0).filter = [&n](const uint8_t*, uint32_t) { return ++n != 2; };  // the second frame lost
  ASSERT_EQ(x.send(1, x.srq1->srqn(), WrOpcode::Send, 0, 5000), 0);
  Wc wc;
  x.pr.expect_wc(x.pr.a.scq, wc, 1, WcStatus::Success);
  x.pr.expect_wc(x.cq1, wc, 5, WcStatus::Success);
  EXPECT_EQ(wc.byte_len, 5000u);
  EXPECT_EQ(std::memcmp(x.pr.b.buf(), x.pr.a.buf(), 5000), 0);
  EXPECT_GE(x.ini->counters().retransmitted, 1u);
}

}  // namespace
}  // namespace uroce::test
