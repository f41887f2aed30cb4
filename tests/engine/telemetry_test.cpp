// The telemetry hand-off (engine/telemetry.hpp): another thread asks a Device's SnapshotMailbox
// for a snapshot and the polling thread fills it at its next progress(); nobody polling means
// "busy" after the bounded wait, and a withdrawn request is never written later.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

// Asks `dev` for a snapshot from a second thread while this thread polls, until answered.
bool ask_while_polling(Pair& p, Device& dev, const SnapshotRequest& req, Snapshot& out) {
  std::atomic<bool> done{false};
  bool served = false;
  std::thread t([&] {
    served = dev.telemetry().request(req, out, 10'000);
    done = true;
  });
  while (!done) {
    p.a.dev->progress();
    p.b.dev->progress();
  }
  t.join();
  return served;
}

TEST(Telemetry, SnapshotTakenByThePollingThread) {
  Pair p;
  // Some traffic first, so the counters have something to show.
  Sge sge{p.a.addr(), 4096, p.a.mr->lkey};
  ASSERT_EQ(p.a.dev->post_send(p.a.qp, wr_to(p.b, 1, WrOpcode::RdmaWrite, &sge)), 0);
  Wc wc;
  ASSERT_TRUE(p.next_wc(p.a.scq, wc));
  ASSERT_EQ(wc.status, WcStatus::Success);

  int extra_calls = 0;
  p.a.dev->telemetry().set_extra([&](Snapshot& s) {
    ++extra_calls;
    s.extra.emplace_back("link_thing", 7);
  });
  Snapshot s;
  ASSERT_TRUE(ask_while_polling(p, *p.a.dev, SnapshotRequest{false, 0, 16}, s));
  EXPECT_EQ(extra_calls, 1);
  ASSERT_EQ(s.extra.size(), 1u);
  EXPECT_EQ(s.extra[0].second, 7u);
  EXPECT_EQ(s.qp_total, 1u);
  ASSERT_EQ(s.qps.size(), 1u);
  const QpInfo& q = s.qps[0];
  EXPECT_EQ(q.qpn, p.a.qp->qpn());
  EXPECT_EQ(q.dest_qpn, p.b.qp->qpn());
  EXPECT_EQ(q.state, QpState::Rts);
  EXPECT_EQ(q.type, QpType::RC);
  EXPECT_EQ(q.path_mtu, p.a.qp->mtu);
  EXPECT_EQ(q.sq_psn, p.a.qp->next_send_psn());
  EXPECT_EQ(q.sq_outstanding, 0u);
  EXPECT_EQ(q.req_state, req_state_name(p.a.qp->req_state()));
  EXPECT_EQ(q.comp_state, comp_state_name(p.a.qp->comp_state()));
  EXPECT_EQ(q.resp_state, resp_state_name(p.a.qp->resp_state()));
  EXPECT_FALSE(q.remote_gid.empty());
  EXPECT_EQ(s.counters.sent_pkts, p.a.dev->counters().sent_pkts);
  EXPECT_GE(s.counters.sent_pkts, 4u);      // 4 KiB at the default 1 KiB MTU
  EXPECT_GE(q.counters.rcvd_pkts, 1u);      // the ACK
  EXPECT_EQ(q.counters.rdma_sends, 0u);     // a WRITE is not a SEND
}

// Paging (issue 30): 1,000 QPs read 96 at a time from increasing offsets, every QP exactly
// once; a page asked without counters has none.
TEST(Telemetry, PagesCoverEveryQpOnce) {
  Pair p;
  for (int i = 0; i < 999; ++i) ASSERT_NE(p.a.dev->create_qp(p.a.init_attr(QpType::RC)), nullptr);
  std::set<uint32_t> seen;
  uint32_t offset = 0, pages = 0;
  for (;;) {
    Snapshot s;
    ASSERT_TRUE(ask_while_polling(p, *p.a.dev, SnapshotRequest{false, 0, 96, offset, false}, s));
    EXPECT_EQ(s.qp_total, 1000u);
    EXPECT_EQ(s.counters.sent_pkts + s.counters.rcvd_pkts, 0u) << "no counters asked for";
    EXPECT_LE(s.qps.size(), 96u);
    for (const QpInfo& q : s.qps) EXPECT_TRUE(seen.insert(q.qpn).second) << "QP " << q.qpn << " twice";
    ++pages;
    offset += uint32_t(s.qps.size());
    if (s.qps.empty() || offset >= s.qp_total) break;
  }
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_EQ(pages, 11u);  // 10 pages of 96 and one of 40
  EXPECT_TRUE(seen.count(p.a.qp->qpn()));
}

// The device's counters for telemetry, summed param::kTelemetrySumQpsPerStep QPs per step
// (at 262,144 QPs one sum in one step held the polling thread 35 ms): the sum takes several
// steps and is exact, also when QPs are destroyed behind, ahead of and at the sum's place.
TEST(Telemetry, CountersSummedAPartAStepAndExactThroughDestroys) {
  Pair p;
  Device& d = *p.a.dev;
  constexpr uint32_t kStep = param::kTelemetrySumQpsPerStep;
  std::vector<Qp*> made;
  for (uint32_t i = 0; i < 2 * kStep + 100; ++i) {
    Qp* q = d.create_qp(p.a.init_attr(QpType::RC));
    ASSERT_NE(q, nullptr);
    q->ctr.sent_pkts = i + 1;  // a value of its own: a QP counted twice or missed shows
    q->ctr.tx_bytes = uint64_t(i) << 20;
    made.push_back(q);
  }
  const Counters whole = d.counters();
  Counters sum;
  EXPECT_FALSE(d.counters_step(1, kStep, sum));
  EXPECT_FALSE(d.counters_step(1, kStep, sum));
  ASSERT_TRUE(d.counters_step(1, kStep, sum)) << "three steps for 2 x kStep + 101 QPs";
  EXPECT_EQ(sum.sent_pkts, whole.sent_pkts);
  EXPECT_EQ(sum.tx_bytes, whole.tx_bytes);

  // A second sum, one step in: destroy a QP it has counted (the last QP takes its place), one it
  // has not, and the one it is about to count; then finish.
  ASSERT_FALSE(d.counters_step(2, kStep, sum));
  ASSERT_EQ(d.destroy_qp(made[10]), 0);          // behind the sum
  ASSERT_EQ(d.destroy_qp(made[kStep + 50]), 0);  // ahead of it
  ASSERT_EQ(d.destroy_qp(made[kStep]), 0);       // at it
  while (!d.counters_step(2, kStep, sum)) {
  }
  const Counters after = d.counters();
  EXPECT_EQ(after.sent_pkts, whole.sent_pkts) << "destroyed QPs' counters stay in the device's";
  EXPECT_EQ(sum.sent_pkts, after.sent_pkts);
  EXPECT_EQ(sum.tx_bytes, after.tx_bytes);

  // Through the mailbox: the same total, served over several progress() steps.
  Snapshot s;
  ASSERT_TRUE(ask_while_polling(p, d, SnapshotRequest{false, 0, 0, 0, true}, s));
  EXPECT_EQ(s.counters.sent_pkts, after.sent_pkts);
  EXPECT_EQ(s.qp_total, 2 * kStep + 101 - 3);
}

TEST(Telemetry, OneQpAndAnUnknownOne) {
  Pair p;
  Snapshot s;
  ASSERT_TRUE(ask_while_polling(p, *p.b.dev, SnapshotRequest{true, p.b.qp->qpn(), 1}, s));
  ASSERT_EQ(s.qps.size(), 1u);
  EXPECT_EQ(s.qps[0].qpn, p.b.qp->qpn());
  ASSERT_TRUE(ask_while_polling(p, *p.b.dev, SnapshotRequest{true, (p.b.qp->qpn() + 1) & 0xFFFFFF, 1}, s));
  EXPECT_TRUE(s.qps.empty());
  EXPECT_EQ(s.qp_total, 1u);
}

TEST(Telemetry, NobodyPollingIsBusyAndTheWithdrawnRequestIsNotWritten) {
  Pair p;
  Snapshot s;
  s.qp_total = 12345;  // a marker: a late progress() must not overwrite the withdrawn request
  EXPECT_FALSE(p.a.dev->telemetry().request(SnapshotRequest{false, 0, 16}, s, 20));
  EXPECT_FALSE(p.a.dev->telemetry().wanted());
  p.a.dev->progress();
  EXPECT_EQ(s.qp_total, 12345u);
  // And the mailbox still works afterwards.
  ASSERT_TRUE(ask_while_polling(p, *p.a.dev, SnapshotRequest{false, 0, 16}, s));
  EXPECT_EQ(s.qp_total, 1u);
}

TEST(Telemetry, RxeCounterNamesAreListed) {
  // The names a user compares with rxe's hw_counters (docs/observability.md).
  const char* rxe[] = {"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
                       "send_rnr_err", "rcvd_seq_err", "retry_exceeded_err", "retry_rnr_exceeded_err",
                       "completer_retry_err", "rdma_sends", "rdma_recvs"};
  for (const char* n : rxe) {
    bool found = false;
    for (size_t i = 0; i < kCounterFieldCount; ++i) found |= std::string(kCounterFields[i].name) == n;
    EXPECT_TRUE(found) << n;
  }
}

}  // namespace
}  // namespace uroce::test
