// Many RC QP pairs between two engine Devices on a FakeWire (frames delivered at once), and the
// two scale scenarios of issue 30 that need them: an SRQ shared by every QP of one side with
// traffic on all of them, and one outstanding READ on every QP at once. Each scenario checks every
// byte and completion and returns what it found; tests/engine/scale_test.cpp asserts it,
// bench/scale_bench.cpp times it. Header-only (as pair.hpp).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "tests/support/pair.hpp"

namespace uroce::test {

struct ManyPairs {
  struct Options {
    uint32_t pairs = 1000;
    uint32_t send_depth = 4;     // each of A's QPs
    uint32_t srq_depth = 0;      // > 0: B's QPs share one SRQ of this depth (no receive queues of their own)
    size_t mem_a = 1 << 20, mem_b = 1 << 20;
    uint8_t max_rd_atomic = 1;
  };

  explicit ManyPairs(const Options& o) : opt(o), wire(65536, 9216, 1) {
    wire.latency_ns = 0;
    a = std::make_unique<Device>(wire.a(), wire.clock(), config(20, o.pairs));
    b = std::make_unique<Device>(wire.b(), wire.clock(), config(21, o.pairs));
    pa = a->alloc_pd();
    pb = b->alloc_pd();
    const uint32_t cqe = std::min<uint32_t>(param::kMaxCqe, o.pairs * o.send_depth + 64);
    sa = a->create_cq(cqe);
    ra = a->create_cq(64);
    sb = b->create_cq(64);
    rb = b->create_cq(std::max<uint32_t>(o.srq_depth, 64));
    ma.assign(o.mem_a, 0);
    mb.assign(o.mem_b, 0);
    mra = a->reg_mr(pa, ma.data(), ma.size(), kLocalWrite | kRemoteWrite | kRemoteRead);
    mrb = b->reg_mr(pb, mb.data(), mb.size(), kLocalWrite | kRemoteWrite | kRemoteRead);
    if (o.srq_depth) srq = b->create_srq(pb, o.srq_depth, 1);
    if (!sa || !ra || !sb || !rb || !mra || !mrb || (o.srq_depth && !srq)) {
      error = "PD, CQ, MR or SRQ not created";
      return;
    }
    Path p;
    p.max_rd_atomic = o.max_rd_atomic;
    for (uint32_t i = 0; i < o.pairs; ++i) {
      QpInitAttr ia;
      ia.pd = pa;
      ia.send_cq = sa;
      ia.recv_cq = ra;
      ia.cap.max_send_wr = o.send_depth;
      ia.cap.max_recv_wr = 1;
      ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
      Qp* x = a->create_qp(ia);
      ia.pd = pb;
      ia.send_cq = sb;
      ia.recv_cq = rb;
      ia.srq = srq;
      Qp* y = b->create_qp(ia);
      if (!x || !y || connect_qp(*a, x, *b, *y, p) || connect_qp(*b, y, *a, *x, p)) {
        error = "a QP pair not created or connected";
        return;
      }
      qa.push_back(x);
      qb.push_back(y);
    }
    while (a->progress() | b->progress()) {
    }
  }

  static Device::Config config(uint8_t id, uint32_t pairs) {
    Device::Config c;
    c.mac = {0x02, 0, 0, 0, 0, id};
    c.gid = v4gid(198, 18, 0, id);
    c.seed = id;
    c.max_qp = pairs + 8;
    c.max_cq = 8;
    return c;
  }

  // Runs both engines until pred() holds or `rounds` polls pass without it.
  template <typename P>
  bool run_until(P pred, uint64_t rounds = 100'000'000) {
    for (uint64_t i = 0; i < rounds; ++i) {
      if (pred()) return true;
      a->progress();
      b->progress();
      wire.clock().advance(1000);
    }
    return pred();
  }

  Options opt;
  FakeWire wire;
  std::unique_ptr<Device> a, b;
  Pd *pa = nullptr, *pb = nullptr;
  Cq *sa = nullptr, *ra = nullptr, *sb = nullptr, *rb = nullptr;
  Srq* srq = nullptr;
  std::vector<uint8_t> ma, mb;
  Mr *mra = nullptr, *mrb = nullptr;
  std::vector<Qp*> qa, qb;
  const char* error = nullptr;  // set when the set-up failed
};

struct ScaleResult {
  uint64_t done = 0;       // messages received (SRQ) or READs completed
  uint64_t wrong = 0;      // a byte, a QP, an order or a status not as sent
  double seconds = 0;      // from the first post to the last completion
  const char* error = nullptr;
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// An SRQ shared by all of B's QPs: each of A's QPs sends `per_qp` SENDs of 64 bytes (its index
// and the message's sequence number in the first 8 bytes, a pattern after them); B's receive
// buffers are the SRQ's, posted again as each completes. Every message must arrive once, into
// a buffer of the SRQ, on the QP it was sent to, in order per QP, every byte as sent.
inline ScaleResult srq_shared_by_all(ManyPairs& m, uint32_t per_qp) {
  ScaleResult r;
  if (m.error || !m.srq) return {0, 0, 0, m.error ? m.error : "no SRQ"};
  constexpr uint32_t kLen = 64;
  const uint32_t n = uint32_t(m.qa.size()), slots = m.opt.srq_depth;
  if (size_t(n) * per_qp * kLen > m.ma.size() || size_t(slots) * kLen > m.mb.size())
    return {0, 0, 0, "buffers too small"};
  auto message = [](uint8_t* p, uint32_t qp, uint32_t seq) {
    std::memcpy(p, &qp, 4);
    std::memcpy(p + 4, &seq, 4);
    fill_pattern(p + 8, kLen - 8, qp * 131 + seq);
  };
  for (uint32_t s = 0; s < slots; ++s) {
    Sge g{uint64_t(uintptr_t(m.mb.data())) + uint64_t(s) * kLen, kLen, m.mrb->lkey};
    RecvWr w{s, &g, 1};
    if (m.b->post_srq_recv(m.srq, w)) return {0, 0, 0, "post_srq_recv refused"};
  }
  std::vector<std::pair<uint32_t, uint32_t>> by_qpn;  // B's QP number -> the pair's index
  by_qpn.reserve(n);
  for (uint32_t i = 0; i < n; ++i) by_qpn.emplace_back(m.qb[i]->qpn(), i);
  std::sort(by_qpn.begin(), by_qpn.end());
  auto index_of = [&](uint32_t qpn) -> int64_t {
    auto it = std::lower_bound(by_qpn.begin(), by_qpn.end(), std::make_pair(qpn, 0u));
    return it != by_qpn.end() && it->first == qpn ? int64_t(it->second) : -1;
  };
  std::vector<uint32_t> next_seq(n, 0);
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t k = 0; k < per_qp; ++k)
    for (uint32_t i = 0; i < n; ++i) {
      uint8_t* src = m.ma.data() + (size_t(i) * per_qp + k) * kLen;
      message(src, i, k);
      Sge g{uint64_t(uintptr_t(src)), kLen, m.mra->lkey};
      SendWr w;
      w.wr_id = uint64_t(i) * per_qp + k;
      w.opcode = WrOpcode::Send;
      w.send_flags = kSendSignaled;
      w.sg_list = &g;
      w.num_sge = 1;
      if (m.a->post_send(m.qa[i], w)) return {0, 0, 0, "post_send refused"};
    }
  const uint64_t total = uint64_t(n) * per_qp;
  uint64_t sent = 0;
  uint8_t want[kLen];
  Wc wc[64];
  m.run_until([&] {
    int k;
    while ((k = m.a->poll_cq(m.sa, 64, wc)) > 0)
      for (int j = 0; j < k; ++j) {
        ++sent;
        if (wc[j].status != WcStatus::Success) ++r.wrong;
      }
    while ((k = m.b->poll_cq(m.rb, 64, wc)) > 0)
      for (int j = 0; j < k; ++j) {
        const Wc& c = wc[j];
        ++r.done;
        const int64_t i = index_of(c.qp_num);
        const uint32_t s = uint32_t(c.wr_id);
        if (c.status != WcStatus::Success || i < 0 || s >= slots || c.byte_len != kLen) {
          ++r.wrong;
          continue;
        }
        const uint8_t* got = m.mb.data() + size_t(s) * kLen;
        message(want, uint32_t(i), next_seq[size_t(i)]++);
        if (std::memcmp(got, want, kLen) != 0) ++r.wrong;
        Sge g{uint64_t(uintptr_t(got)), kLen, m.mrb->lkey};
        RecvWr w{s, &g, 1};
        if (m.b->post_srq_recv(m.srq, w)) ++r.wrong;
      }
    return (r.done == total && sent == total) || r.wrong;
  });
  r.seconds = seconds_since(t0);
  for (uint32_t i = 0; i < n; ++i)
    if (next_seq[i] != per_qp) ++r.wrong;
  return r;
}

// One READ of 64 bytes outstanding on every QP at once: A's QP i reads B's bytes [64 i, 64 i +
// 64) (a pattern of i) into its own. Every READ must complete, each with its own bytes.
inline ScaleResult one_read_per_qp(ManyPairs& m) {
  ScaleResult r;
  if (m.error) return {0, 0, 0, m.error};
  constexpr uint32_t kLen = 64;
  const uint32_t n = uint32_t(m.qa.size());
  if (size_t(n) * kLen > std::min(m.ma.size(), m.mb.size())) return {0, 0, 0, "buffers too small"};
  for (uint32_t i = 0; i < n; ++i) fill_pattern(m.mb.data() + size_t(i) * kLen, kLen, i + 1);
  std::memset(m.ma.data(), 0, size_t(n) * kLen);
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < n; ++i) {
    Sge g{uint64_t(uintptr_t(m.ma.data())) + uint64_t(i) * kLen, kLen, m.mra->lkey};
    SendWr w;
    w.wr_id = i;
    w.opcode = WrOpcode::RdmaRead;
    w.send_flags = kSendSignaled;
    w.sg_list = &g;
    w.num_sge = 1;
    w.remote_addr = uint64_t(uintptr_t(m.mb.data())) + uint64_t(i) * kLen;
    w.rkey = m.mrb->rkey;
    if (m.a->post_send(m.qa[i], w)) return {0, 0, 0, "post_send refused"};
  }
  std::vector<uint8_t> seen(n, 0);
  Wc wc[64];
  m.run_until([&] {
    int k;
    while ((k = m.a->poll_cq(m.sa, 64, wc)) > 0)
      for (int j = 0; j < k; ++j) {
        const Wc& c = wc[j];
        ++r.done;
        if (c.status != WcStatus::Success || c.wr_id >= n || seen[c.wr_id]++ || c.opcode != WcOpcode::RdmaRead ||
            c.qp_num != m.qa[c.wr_id]->qpn())
          ++r.wrong;
      }
    return r.done == n || r.wrong;
  });
  r.seconds = seconds_since(t0);
  if (std::memcmp(m.ma.data(), m.mb.data(), size_t(n) * kLen) != 0) ++r.wrong;
  return r;
}

}  // namespace uroce::test
