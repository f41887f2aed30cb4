// ProgressThread: two engines on a FakeWire driven only by the helper's polling thread; the
// test thread posts through call() and sees completions land, then the thread backs off to
// sleeping when idle and wakes up for new work.
#include "port/progress_thread.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/support/harness.hpp"

namespace {

using namespace uroce;
using namespace uroce::engine;

TEST(ProgressThread, WritesCompleteWithoutTheApplicationPolling) {
  test::Pair pair;
  port::ProgressThread::Options o;
  o.spin_rounds = 100;
  o.pause_rounds = 100;
  o.max_sleep_us = 200;
  port::ProgressThread pt({pair.a.dev.get(), pair.b.dev.get()}, o);
  pt.on_idle = [&] { pair.wire.clock().advance(1000); };  // virtual time moves when idle
  pt.start();
  test::fill_pattern(pair.a.buf(), 65536, 7);
  for (int i = 0; i < 50; ++i) {
    Sge sge{pair.a.addr(), 65536, pair.a.mr->lkey};
    SendWr wr;
    wr.wr_id = uint64_t(i);
    wr.opcode = WrOpcode::RdmaWrite;
    wr.send_flags = kSendSignaled;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.remote_addr = pair.b.addr();
    wr.rkey = pair.b.mr->rkey;
    int rc = -1;
    pt.call([&] { rc = pair.a.dev->post_send(pair.a.qp, wr); });
    ASSERT_EQ(rc, 0);
  }
  int got = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (got < 50 && std::chrono::steady_clock::now() < end) {
    Wc wc[8];
    int n = 0;
    pt.call([&] { n = pair.a.dev->poll_cq(pair.a.scq, 8, wc); });
    for (int i = 0; i < n; ++i) EXPECT_EQ(wc[i].status, WcStatus::Success);
    got += n;
    if (!n) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  EXPECT_EQ(got, 50);
  EXPECT_EQ(std::memcmp(pair.a.buf(), pair.b.buf(), 65536), 0);
  // Idle: the thread goes to sleep, and still answers.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GT(pt.stats().sleeps.load(), 0u);
  int state = -1;
  pt.call([&] { state = int(pair.b.qp->state()); });
  EXPECT_EQ(state, int(QpState::Rts));
  pt.stop();
}

}  // namespace
