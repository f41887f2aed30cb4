// Two engines joined by a FakeLink, each with a PD, CQs and one connected RC QP, and a
// loop that polls both under the virtual clock until a condition holds (bounded).
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "engine/engine.hpp"
#include "proto/aeth.hpp"
#include "proto/psn.hpp"
#include "tests/support/fake_link.hpp"

namespace uroce::test {

using namespace uroce::engine;

inline proto::Ip6 v4gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  proto::Ip6 g{};
  g[10] = g[11] = 0xFF;
  g[12] = a, g[13] = b, g[14] = c, g[15] = d;
  return g;
}

struct Endpoint {
  std::unique_ptr<Device> dev;
  Pd* pd = nullptr;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  Qp* qp = nullptr;
  std::vector<uint8_t> mem;  // registered buffer, with canary bytes around the MR
  Mr* mr = nullptr;
  static constexpr size_t kCanary = 64;
  uint8_t* buf() { return mem.data() + kCanary; }
  size_t buf_len() const { return mem.size() - 2 * kCanary; }
  uint64_t addr() { return reinterpret_cast<uintptr_t>(buf()); }
};

struct PairOptions {
  Mtu mtu = Mtu::M1024;
  size_t mem = 1 << 20;
  uint32_t max_send_wr = 256;
  uint32_t max_recv_wr = 256;
  uint32_t cq_depth = 4096;
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;
  uint8_t max_rd_atomic = 16;
  uint32_t access = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic;
  uint32_t sq_psn_a = 0x100, sq_psn_b = 0x200;
  uint64_t seed = 1;
  uint32_t frame_cap = 9216;
  uint8_t traffic_class = 0;  // in both QPs' address vectors (DSCP << 2 | ECN)
  // Last changes to each device's config before it is created (ECN, CNP interval, addresses).
  std::function<void(Device::Config&)> config_a, config_b;
};

class Pair {
 public:
  explicit Pair(const PairOptions& o = {}) : opt(o), wire(16384, o.frame_cap, o.seed) {
    Device::Config ca, cb;
    ca.seed = 2 * o.seed + 1;  // keys and QP numbers are random, but reproducible in a test
    cb.seed = 2 * o.seed + 2;
    ca.mac = {0x02, 0, 0, 0, 0, 0x0a};
    cb.mac = {0x02, 0, 0, 0, 0, 0x0b};
    ca.gid = v4gid(198, 18, 0, 10);
    cb.gid = v4gid(198, 18, 0, 11);
    if (o.config_a) o.config_a(ca);
    if (o.config_b) o.config_b(cb);
    a.dev = std::make_unique<Device>(wire.a(), wire.clock(), ca);
    b.dev = std::make_unique<Device>(wire.b(), wire.clock(), cb);
    for (Endpoint* e : {&a, &b}) {
      e->pd = e->dev->alloc_pd();
      e->scq = e->dev->create_cq(o.cq_depth);
      e->rcq = e->dev->create_cq(o.cq_depth);
      e->mem.assign(o.mem + 2 * Endpoint::kCanary, 0xCC);
      e->mr = e->dev->reg_mr(e->pd, e->buf(), o.mem, o.access);
      QpInitAttr ia;
      ia.pd = e->pd;
      ia.send_cq = e->scq;
      ia.recv_cq = e->rcq;
      ia.cap.max_send_wr = o.max_send_wr;
      ia.cap.max_recv_wr = o.max_recv_wr;
      ia.cap.max_send_sge = 4;
      ia.cap.max_recv_sge = 4;
      ia.cap.max_inline_data = 256;
      e->qp = e->dev->create_qp(ia);
    }
    connect(a, b, ca, o.sq_psn_a, o.sq_psn_b);
    connect(b, a, cb, o.sq_psn_b, o.sq_psn_a);
  }

  void connect(Endpoint& self, Endpoint& peer, const Device::Config&, uint32_t my_psn, uint32_t peer_psn) {
    QpAttr at;
    at.qp_state = QpState::Init;
    at.pkey_index = 0;
    at.port_num = 1;
    at.qp_access_flags = kRemoteWrite | kRemoteRead | kRemoteAtomic;
    ASSERT_EQ(self.dev->modify_qp(self.qp, at, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags), 0);
    at.qp_state = QpState::Rtr;
    at.path_mtu = opt.mtu;
    at.dest_qp_num = peer.qp->qpn();
    at.rq_psn = peer_psn;
    at.max_dest_rd_atomic = opt.max_rd_atomic;
    at.min_rnr_timer = opt.min_rnr_timer;
    at.ah_attr.dgid = peer.dev->config().gid;
    at.ah_attr.dmac = peer.dev->config().mac;
    at.ah_attr.hop_limit = 64;
    at.ah_attr.traffic_class = opt.traffic_class;
    ASSERT_EQ(self.dev->modify_qp(self.qp, at,
                                  kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                                      kAttrMaxDestRdAtomic | kAttrMinRnrTimer),
              0);
    at.qp_state = QpState::Rts;
    at.sq_psn = my_psn;
    at.timeout = opt.timeout;
    at.retry_cnt = opt.retry_cnt;
    at.rnr_retry = opt.rnr_retry;
    at.max_rd_atomic = opt.max_rd_atomic;
    ASSERT_EQ(self.dev->modify_qp(self.qp, at,
                                  kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
                                      kAttrMaxQpRdAtomic),
              0);
  }

  // Polls both ends until pred() holds. Virtual time advances when both are idle. Returns
  // false if max_ns of virtual time or max_rounds polls pass first.
  bool run_until(const std::function<bool()>& pred, uint64_t max_ns = 10'000'000'000ull, uint64_t max_rounds = 50'000'000) {
    const uint64_t start = wire.clock().now_ns();
    for (uint64_t i = 0; i < max_rounds; ++i) {
      if (pred()) return true;
      bool did = a.dev->progress();
      did |= b.dev->progress();
      if (!did) {
        uint64_t due = wire.next_due();
        uint64_t now = wire.clock().now_ns();
        uint64_t step = 1000;
        if (due != UINT64_MAX && due > now) step = due - now;
        else if (due == UINT64_MAX) step = 10'000;
        wire.clock().advance(step);
      }
      if (wire.clock().now_ns() - start > max_ns) return pred();
    }
    return pred();
  }

  // Polls one completion from cq (running the engines as needed).
  bool next_wc(Cq* cq, Wc& wc, uint64_t max_ns = 10'000'000'000ull) {
    bool got = false;
    run_until([&] { return got || (got = cq->poll(&wc, 1) == 1); }, max_ns);
    return got;
  }

  PairOptions opt;
  FakeWire wire;
  Endpoint a, b;
};

inline void fill_pattern(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    p[i] = uint8_t(x >> 16);
  }
}

inline bool canaries_intact(const Endpoint& e) {
  for (size_t i = 0; i < Endpoint::kCanary; ++i)
    if (e.mem[i] != 0xCC || e.mem[e.mem.size() - 1 - i] != 0xCC) return false;
  return true;
}

}  // namespace uroce::test

namespace uroce::test {

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
