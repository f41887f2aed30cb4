// The test harness: the connected pair of pair.hpp (two engines joined by a FakeLink, each with
// a PD, CQs and one connected QP, polled under the virtual clock) with GoogleTest checks, one
// for the next completion of a CQ, and inject(), which puts a forged frame on the wire.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "engine/engine.hpp"
#include "proto/aeth.hpp"
#include "proto/psn.hpp"
#include "tests/support/pair.hpp"

namespace uroce::test {

using namespace uroce::engine;

// The connected pair of pair.hpp, with its set-up checked: a test whose pair did not come up
// fails there.
class Pair : public ConnectedPair {
 public:
  explicit Pair(const PairOptions& o = {}) : ConnectedPair(o) { check_setup(); }

  // (Re)connects self's QP to peer's with the pair's options: self sends from my_psn, expects
  // peer_psn.
  void connect(Endpoint& self, const Endpoint& peer, uint32_t my_psn, uint32_t peer_psn) {
    ASSERT_EQ(connect_qp(*self.dev, self.qp, *peer.dev, *peer.qp, path(my_psn, peer_psn)), 0);
  }

  // The next completion on `cq` (polled for up to max_ns of virtual time, as next_wc) into
  // `wc`: it must be WR `id`'s, with `status`.
  void expect_wc(Cq* cq, Wc& wc, uint64_t id, WcStatus status, uint64_t max_ns = 10'000'000'000ull) {
    ASSERT_TRUE(next_wc(cq, wc, max_ns)) << "no completion for WR " << id;
    EXPECT_EQ(wc.wr_id, id);
    EXPECT_EQ(wc.status, status) << wc_status_name(wc.status);
  }

 private:
  void check_setup() { ASSERT_EQ(setup_error, 0) << failed_step; }
};

// Builds `p` (ICRC included) into the receive queue of `link`, as if the wire delivered it.
inline void inject(FakeLink& link, const proto::Packet& p) {
  std::vector<uint8_t> f(proto::frame_len(p));
  ASSERT_TRUE(proto::build(p, f).ok());
  link.inject(f.data(), uint32_t(f.size()));
}

}  // namespace uroce::test
