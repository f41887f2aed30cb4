// The test harness: the connected pair of pair.hpp (two engines joined by a FakeLink, each with
// a PD, CQs and one connected QP, polled under the virtual clock) with GoogleTest checks, and
// the helpers the engine and security tests share to fill, forge and inject.
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

 private:
  void check_setup() { ASSERT_EQ(setup_error, 0) << failed_step; }
};

inline void fill_pattern(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    p[i] = uint8_t(x >> 16);
  }
}

// A frame as `from`'s QP would send it to `to`'s QP (addresses, QPN; the caller sets the
// opcode's fields), for tests that forge traffic with a valid ICRC.
inline proto::Packet forge(const Endpoint& from, const Endpoint& to, uint8_t opcode, uint32_t psn) {
  proto::Packet p;
  p.eth_src = from.dev->config().mac;
  p.eth_dst = to.dev->config().mac;
  std::memcpy(p.ip_src.data(), from.dev->config().gid.data() + 12, 4);
  std::memcpy(p.ip_dst.data(), to.dev->config().gid.data() + 12, 4);
  p.opcode = opcode;
  p.dest_qp = to.qp->qpn();
  p.psn = psn;
  p.ack_req = true;
  return p;
}

// A signaled work request of `op` from `sge` to the start of `peer`'s registered buffer.
inline SendWr wr_to(const Endpoint& peer, uint64_t id, WrOpcode op, const Sge* sge) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.send_flags = kSendSignaled;
  wr.sg_list = sge;
  wr.num_sge = 1;
  wr.remote_addr = reinterpret_cast<uintptr_t>(peer.mem.data() + Endpoint::kCanary);
  wr.rkey = peer.mr->rkey;
  return wr;
}

// Builds `p` (ICRC included) into the receive queue of `link`, as if the wire delivered it.
inline void inject(FakeLink& link, const proto::Packet& p) {
  std::vector<uint8_t> f(proto::frame_len(p));
  ASSERT_TRUE(proto::build(p, f).ok());
  link.inject(f.data(), uint32_t(f.size()));
}

}  // namespace uroce::test
