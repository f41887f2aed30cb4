// Reliability under a hostile link (issue: go-back-N, timeouts, RNR, NAK paths).
//
// 1. A property test: random mixes of every RC operation, random sizes up to 1 MiB, random
//    path MTU, under each fault alone and all together at 1%, 5% and 10%. Every byte is
//    verified, completions come in posting order with success, atomics run exactly once,
//    nothing hangs (bounded virtual time), and the counters agree with what the link did.
// 2. Scripted faults: the last packet of a message lost, an ACK lost, the first READ response
//    lost, an atomic replayed, RNR with rnr_retry 0 and 7, retry exhaustion, a peer that
//    vanishes.
// UROCE_LONG_OPS=N runs one long property run of N operations (scripts/reliability-long.sh).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <set>

#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

namespace op = proto::op;

struct RunStats {
  uint64_t ops = 0, bytes_verified = 0, virtual_ns = 0, frames_ab = 0, frames_ba = 0;
  Counters a, b;
  FaultCounters link_ab, link_ba;
};

struct Op {
  WrOpcode opc;
  uint32_t len;
  uint64_t a_off, b_off;
  uint32_t seed;
  uint64_t expect_orig;  // atomics
};

// Runs `nops` random operations in batches; returns false (with a gtest failure) on any error.
// `sr`: selective repeat on at both ends.
bool run_random(uint64_t seed, const FaultConfig& f, uint64_t nops, uint32_t max_size, RunStats& st,
                Mtu forced_mtu = Mtu(0), bool sr = false) {
  std::mt19937_64 rng(seed);
  PairOptions o;
  if (sr) o.config_a = o.config_b = [](Device::Config& c) { c.selective_repeat = true; };
  const Mtu mtus[] = {Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096};
  o.mtu = uint32_t(forced_mtu) ? forced_mtu : mtus[rng() % 5];
  o.mem = 6 << 20;
  o.timeout = 10;  // 4.2 ms
  o.retry_cnt = 7;
  o.rnr_retry = 7;
  o.seed = seed;
  o.max_send_wr = 64;
  o.max_recv_wr = 64;
  Pair pr(o);
  pr.wire.a().faults = f;
  pr.wire.b().faults = f;
  const uint64_t kArena = 2 << 20;          // per-batch data arena on each side
  const uint64_t kAtomicOff = 5 << 20;      // FETCH_ADD counter and CMP_SWAP word on B
  uint64_t fadd = 0, cswap = 0;
  std::memset(pr.b.buf() + kAtomicOff, 0, 16);
  std::set<uint64_t> fadd_results;
  const uint64_t t0 = pr.wire.clock().now_ns();
  uint64_t done = 0;
  uint64_t wr_id = 0;
  while (done < nops) {
    // Build a batch that fits the arena.
    std::vector<Op> batch;
    uint64_t off = 0;
    while (batch.size() < 32 && done + batch.size() < nops) {
      // Sizes log-uniform up to max_size: mostly small, some near 1 MiB.
      uint32_t bits = uint32_t(rng() % 21);
      uint32_t len = uint32_t(std::min<uint64_t>(max_size, (rng() % (1ull << bits)) + (rng() % 8 == 0 ? 0 : 1)));
      if (rng() % 16 == 0) len = 0;
      static constexpr WrOpcode kinds[] = {WrOpcode::Send, WrOpcode::SendWithImm, WrOpcode::RdmaWrite,
                                           WrOpcode::RdmaWriteWithImm, WrOpcode::RdmaRead,
                                           WrOpcode::AtomicFetchAdd, WrOpcode::AtomicCmpSwp};
      WrOpcode k = kinds[rng() % 7];
      if (k == WrOpcode::AtomicFetchAdd || k == WrOpcode::AtomicCmpSwp) len = 8;
      uint64_t need = (uint64_t(len) + 63) & ~63ull;
      if (off + need > kArena) break;
      batch.push_back({k, len, off, off, uint32_t(rng()), 0});
      off += need;
    }
    // Post receives first (SEND and WRITE_WITH_IMM consume one each), then the sends.
    for (Op& x : batch) {
      if (x.opc == WrOpcode::Send || x.opc == WrOpcode::SendWithImm) {
        std::memset(pr.b.buf() + x.b_off, 0, x.len);
        Sge s{pr.b.addr() + x.b_off, x.len, pr.b.mr->lkey};
        RecvWr r{x.seed, &s, 1};
        if (pr.b.dev->post_recv(pr.b.qp, r) != 0) return ADD_FAILURE() << "post_recv", false;
      } else if (x.opc == WrOpcode::RdmaWriteWithImm) {
        RecvWr r{x.seed, nullptr, 0};
        if (pr.b.dev->post_recv(pr.b.qp, r) != 0) return ADD_FAILURE() << "post_recv", false;
      }
    }
    const uint64_t first_id = wr_id;
    for (Op& x : batch) {
      SendWr wr;
      wr.wr_id = wr_id++;
      wr.opcode = x.opc;
      wr.send_flags = kSendSignaled;
      wr.imm_data = x.seed;
      wr.rkey = pr.b.mr->rkey;
      Sge s{pr.a.addr() + kArena + x.a_off, x.len, pr.a.mr->lkey};
      wr.sg_list = &s;
      wr.num_sge = 1;
      switch (x.opc) {
        case WrOpcode::RdmaRead:
          fill_pattern(pr.b.buf() + kArena + x.b_off, x.len, x.seed);
          std::memset(pr.a.buf() + x.a_off, 0, x.len);
          s.addr = pr.a.addr() + x.a_off;
          wr.remote_addr = pr.b.addr() + kArena + x.b_off;
          break;
        case WrOpcode::AtomicFetchAdd:
          s.addr = pr.a.addr() + x.a_off;
          wr.remote_addr = pr.b.addr() + kAtomicOff;
          wr.compare_add = 1;
          x.expect_orig = fadd++;
          break;
        case WrOpcode::AtomicCmpSwp:
          s.addr = pr.a.addr() + x.a_off;
          wr.remote_addr = pr.b.addr() + kAtomicOff + 8;
          wr.compare_add = cswap;
          wr.swap = cswap + 1;
          x.expect_orig = cswap++;
          break;
        default:  // SEND, WRITE: from A's second arena
          fill_pattern(pr.a.buf() + kArena + x.a_off, x.len, x.seed);
          wr.remote_addr = pr.b.addr() + x.b_off;
          if (x.opc == WrOpcode::RdmaWrite || x.opc == WrOpcode::RdmaWriteWithImm)
            std::memset(pr.b.buf() + x.b_off, 0, x.len);
          break;
      }
      if (int rc = pr.a.dev->post_send(pr.a.qp, wr); rc != 0) return ADD_FAILURE() << "post_send " << rc, false;
    }
    // Completions: in posting order, all successful.
    for (size_t i = 0; i < batch.size(); ++i) {
      Wc wc;
      if (!pr.next_wc(pr.a.scq, wc, 120'000'000'000ull))
        return ADD_FAILURE() << "hang: no completion for wr " << first_id + i << "\n  A: " << pr.a.qp->describe()
                             << "\n  B: " << pr.b.qp->describe() << "\n  now=" << pr.wire.clock().now_ns(),
               false;
      if (wc.status != WcStatus::Success || wc.wr_id != first_id + i)
        return ADD_FAILURE() << "wr " << first_id + i << ": got wr_id " << wc.wr_id << " status "
                             << wc_status_name(wc.status) << "\n  A: " << pr.a.qp->describe()
                             << "\n  A counters: " << pr.a.qp->counters().text()
                             << "\n  B: " << pr.b.qp->describe()
                             << "\n  B counters: " << pr.b.qp->counters().text()
                             << "\n  now=" << pr.wire.clock().now_ns(),
               false;
    }
    // Receive completions in order, then every byte.
    for (const Op& x : batch) {
      const bool recv = x.opc == WrOpcode::Send || x.opc == WrOpcode::SendWithImm || x.opc == WrOpcode::RdmaWriteWithImm;
      if (recv) {
        Wc wc;
        if (!pr.next_wc(pr.b.rcq, wc, 60'000'000'000ull)) return ADD_FAILURE() << "no receive completion", false;
        if (wc.status != WcStatus::Success || wc.wr_id != x.seed || wc.byte_len != x.len)
          return ADD_FAILURE() << "receive completion: status " << wc_status_name(wc.status) << " len " << wc.byte_len
                               << " want " << x.len,
                 false;
        if (x.opc != WrOpcode::Send && (!(wc.wc_flags & kWcWithImm) || wc.imm_data != x.seed))
          return ADD_FAILURE() << "immediate lost", false;
      }
      std::vector<uint8_t> want(x.len);
      fill_pattern(want.data(), x.len, x.seed);
      const uint8_t* got = nullptr;
      switch (x.opc) {
        case WrOpcode::RdmaRead: got = pr.a.buf() + x.a_off; break;
        case WrOpcode::AtomicFetchAdd:
        case WrOpcode::AtomicCmpSwp: {
          uint64_t v;
          std::memcpy(&v, pr.a.buf() + x.a_off, 8);
          if (v != x.expect_orig) return ADD_FAILURE() << "atomic returned " << v << " want " << x.expect_orig, false;
          if (x.opc == WrOpcode::AtomicFetchAdd && !fadd_results.insert(v).second)
            return ADD_FAILURE() << "FETCH_ADD value seen twice", false;
          continue;
        }
        default: got = pr.b.buf() + x.b_off; break;
      }
      if (x.len && std::memcmp(got, want.data(), x.len) != 0) return ADD_FAILURE() << wr_opcode_name(x.opc) << " of " << x.len << " bytes: data differs", false;
      st.bytes_verified += x.len;
    }
    done += batch.size();
  }
  uint64_t counters[2];
  std::memcpy(&counters[0], pr.b.buf() + kAtomicOff, 8);
  std::memcpy(&counters[1], pr.b.buf() + kAtomicOff + 8, 8);
  EXPECT_EQ(counters[0], fadd) << "every FETCH_ADD exactly once";
  EXPECT_EQ(counters[1], cswap) << "every CMP_SWAP exactly once";
  // Quiesce: let in-flight duplicates and retransmissions drain, then reconcile counters.
  pr.run_until([] { return false; }, 200'000'000);
  st.ops += done;
  st.virtual_ns += pr.wire.clock().now_ns() - t0;
  st.a = pr.a.dev->counters();
  st.b = pr.b.dev->counters();
  st.link_ab = pr.wire.a().counters;
  st.link_ba = pr.wire.b().counters;
  EXPECT_EQ(pr.wire.a().pending_rx() + pr.wire.b().pending_rx(), 0u);
  for (int dir = 0; dir < 2; ++dir) {
    const Counters& tx = dir == 0 ? st.a : st.b;
    const Counters& rx = dir == 0 ? st.b : st.a;
    const FaultCounters& l = dir == 0 ? st.link_ab : st.link_ba;
    SCOPED_TRACE(dir == 0 ? "A->B" : "B->A");
    EXPECT_EQ(tx.sent_pkts, l.sent) << "every frame the engine built went to the link";
    EXPECT_LE(tx.retransmitted, tx.sent_pkts) << "retransmissions are frames sent";
    const uint64_t processed = rx.rcvd_pkts + rx.dropped_pkey + rx.dropped_bad_state + rx.icrc_errors +
                               rx.malformed + rx.dropped_not_for_us + rx.dropped_unknown_qp;
    EXPECT_EQ(processed, l.delivered) << "every delivered frame was processed or counted as a drop";
    const uint64_t bad = rx.icrc_errors + rx.malformed + rx.dropped_not_for_us + rx.dropped_unknown_qp + rx.dropped_pkey;
    EXPECT_LE(bad, l.corrupted + l.duplicated) << "drops for damage without damage";
    if (l.corrupted == 0) {
      EXPECT_EQ(bad, 0u);
    }
    if (l.dropped > 0) {
      EXPECT_GT(tx.retransmitted + rx.retransmitted, 0u) << "losses but nothing was sent again";
    }
  }
  return !::testing::Test::HasFailure();
}

struct FaultCase {
  const char* name;
  FaultConfig f;
};

FaultConfig only(const char* what, double rate) {
  FaultConfig f;
  std::string w(what);
  if (w == "drop" || w == "all") f.drop = rate;
  if (w == "duplicate" || w == "all") f.duplicate = rate;
  if (w == "reorder" || w == "all") f.reorder = rate;
  if (w == "corrupt" || w == "all") f.corrupt = rate;
  if (w == "delay" || w == "all") f.delay = rate;
  return f;
}

// Three seeds of 60 random operations under fault `what` at `rate`, selective repeat on at both
// ends if `sr` (docs/reliability.md): where packets go missing or out of order, B then keeps
// those after a gap.
void survives_the_link(const char* what, double rate, bool sr) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RunStats st;
    ASSERT_TRUE(run_random(seed * 7919 + uint64_t(rate * 1000), only(what, rate), 60, 1 << 20, st, Mtu(0), sr));
    if (sr && (only(what, rate).drop > 0 || only(what, rate).reorder > 0)) {
      EXPECT_GT(st.b.sr_held, 0u) << "packets after a gap were kept";
    }
  }
}

using FaultParam = std::tuple<const char*, double>;
class Property : public ::testing::TestWithParam<FaultParam> {};

TEST_P(Property, RandomOperationsSurviveTheLink) {
  auto [what, rate] = GetParam();
  survives_the_link(what, rate, false);
}

// The same with selective repeat on at both ends.
class PropertySr : public ::testing::TestWithParam<FaultParam> {};

TEST_P(PropertySr, RandomOperationsSurviveTheLink) {
  auto [what, rate] = GetParam();
  survives_the_link(what, rate, true);
}

// Every fault alone and all together, at 1, 5 and 10%; named as drop_5pct.
const auto kFaults = ::testing::Combine(::testing::Values("drop", "duplicate", "reorder", "corrupt", "delay", "all"),
                                        ::testing::Values(0.01, 0.05, 0.10));
std::string fault_name(const ::testing::TestParamInfo<FaultParam>& i) {
  return std::string(std::get<0>(i.param)) + "_" + std::to_string(int(std::get<1>(i.param) * 100)) + "pct";
}

INSTANTIATE_TEST_SUITE_P(Faults, PropertySr, kFaults, fault_name);

INSTANTIATE_TEST_SUITE_P(Faults, Property, kFaults, fault_name);

// The long run: UROCE_LONG_OPS operations with every fault at UROCE_LONG_RATE (default 5%).
TEST(Long, MillionOperations) {
  const char* n = std::getenv("UROCE_LONG_OPS");
  if (!n) GTEST_SKIP() << "set UROCE_LONG_OPS to run (scripts/reliability-long.sh)";
  const uint64_t total = std::strtoull(n, nullptr, 10);
  const char* r = std::getenv("UROCE_LONG_RATE");
  const double rate = r ? std::atof(r) : 0.05;
  const uint32_t max_size = std::getenv("UROCE_LONG_MAX") ? uint32_t(std::atol(std::getenv("UROCE_LONG_MAX"))) : (1u << 20);
  // UROCE_LONG_SR=1: selective repeat on at both ends.
  const bool sr = std::getenv("UROCE_LONG_SR") && std::atoi(std::getenv("UROCE_LONG_SR")) != 0;
  auto w0 = std::chrono::steady_clock::now();
  RunStats all;
  Counters sum_a, sum_b;
  FaultCounters lab{}, lba{};
  uint64_t seed = 1;
  const uint64_t per_run = 20000;
  while (all.ops < total) {
    RunStats st;
    ASSERT_TRUE(run_random(1000003 * seed++, only("all", rate), std::min(per_run, total - all.ops), max_size, st, Mtu(0), sr));
    all.ops += st.ops;
    all.bytes_verified += st.bytes_verified;
    all.virtual_ns += st.virtual_ns;
    sum_a.add(st.a);
    sum_b.add(st.b);
    for (auto [d, s] : {std::pair{&lab, &st.link_ab}, std::pair{&lba, &st.link_ba}}) {
      d->sent += s->sent, d->delivered += s->delivered, d->dropped += s->dropped, d->duplicated += s->duplicated;
      d->reordered += s->reordered, d->corrupted += s->corrupted, d->delayed += s->delayed;
    }
  }
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  std::printf("long run%s: %llu operations, every fault at %.0f%%, %llu bytes verified, %.3f s virtual, %.1f s wall, %llu runs\n",
              sr ? " (selective repeat)" : "", (unsigned long long)all.ops, rate * 100, (unsigned long long)all.bytes_verified, all.virtual_ns / 1e9, wall,
              (unsigned long long)(seed - 1));
  for (auto [name, l] : {std::pair{"A->B", &lab}, std::pair{"B->A", &lba}})
    std::printf("link %s: sent %llu delivered %llu dropped %llu duplicated %llu reordered %llu corrupted %llu delayed %llu\n", name,
                (unsigned long long)l->sent, (unsigned long long)l->delivered, (unsigned long long)l->dropped,
                (unsigned long long)l->duplicated, (unsigned long long)l->reordered, (unsigned long long)l->corrupted,
                (unsigned long long)l->delayed);
  for (auto [name, c] : {std::pair{"A (requester)", &sum_a}, std::pair{"B (responder)", &sum_b}})
    std::printf("%s: sent_pkts %llu rcvd_pkts %llu retransmitted %llu timeouts %llu out_of_seq_request %llu rcvd_seq_err %llu "
                "send_rnr_err %llu rcvd_rnr_err %llu duplicate_request %llu out_of_sequence %llu icrc_errors %llu malformed %llu "
                "not_for_us %llu implied_naks %llu gap_restarts %llu naks_ignored %llu probes %llu sr_resends %llu sr_held %llu\n",
                name, (unsigned long long)c->sent_pkts, (unsigned long long)c->rcvd_pkts,
                (unsigned long long)c->retransmitted, (unsigned long long)c->timeouts,
                (unsigned long long)c->out_of_seq_request, (unsigned long long)c->rcvd_seq_err,
                (unsigned long long)c->send_rnr_err, (unsigned long long)c->rcvd_rnr_err,
                (unsigned long long)c->duplicate_request, (unsigned long long)c->out_of_sequence,
                (unsigned long long)c->icrc_errors, (unsigned long long)c->malformed,
                (unsigned long long)c->dropped_not_for_us, (unsigned long long)c->implied_naks,
                (unsigned long long)c->gap_restarts, (unsigned long long)c->naks_ignored, (unsigned long long)c->probes,
                (unsigned long long)c->sr_resends, (unsigned long long)c->sr_held);
}

// ---- Scripted faults -----------------------------------------------------------------------

// Drops the n-th frame (1-based) with the given opcode that passes through a link.
std::function<bool(const uint8_t*, uint32_t)> drop_nth(uint8_t opcode, int n, int* seen) {
  return [=](const uint8_t* d, uint32_t len) {
    proto::Packet p;
    if (proto::parse({d, len}, p, {false}).ok() && p.opcode == opcode && ++*seen == n) return false;
    return true;
  };
}

class Scripted : public ::testing::Test {
 protected:
  void make(PairOptions o = {}) {
    o.timeout = o.timeout == 14 ? 10 : o.timeout;
    pr = std::make_unique<Pair>(o);
  }
  // A pair whose peer is gone (nothing A sends arrives): ACK timeout 12 (16.8 ms), `retry_cnt`.
  void make_vanished_peer(uint8_t retry_cnt) {
    PairOptions o;
    o.retry_cnt = retry_cnt;
    o.timeout = 12;
    make(o);
    pr->wire.a().filter = [](const uint8_t*, uint32_t) { return false; };
  }
  SendWr wr(WrOpcode opc, uint32_t len, Sge& s, uint64_t id = 1) {
    s = {pr->a.addr(), len, pr->a.mr->lkey};
    SendWr w = signaled_wr(id, &s, opc);
    w.remote_addr = pr->b.addr() + 4096;
    w.rkey = pr->b.mr->rkey;
    return w;
  }
  // Posts WR 1, an `opc` of `len` bytes, and waits for its completion (in `wc`): a success.
  void post_one(WrOpcode opc, uint32_t len, Wc& wc) {
    ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, wr(opc, len, sge)), 0);
    ASSERT_TRUE(pr->next_wc(pr->a.scq, wc));
    EXPECT_EQ(wc.status, WcStatus::Success);
  }
  std::unique_ptr<Pair> pr;
  Sge sge;  // post_one's
  int seen = 0;
};

TEST_F(Scripted, LastPacketOfAMessageLost) {
  make();
  pr->wire.a().filter = drop_nth(op::kWriteLast, 1, &seen);
  fill_pattern(pr->a.buf(), 5000, 3);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(post_one(WrOpcode::RdmaWrite, 5000, wc));
  EXPECT_EQ(std::memcmp(pr->b.buf() + 4096, pr->a.buf(), 5000), 0);
  EXPECT_EQ(seen, 2) << "the LAST packet went out twice";
  // Nothing follows a lost last packet: the tail-loss probe recovers it, not the QP timer.
  EXPECT_GE(pr->a.qp->counters().probes, 1u);
  EXPECT_EQ(pr->a.qp->counters().timeouts, 0u);
}

// The same with the probe disabled (probe_floor_us 0): only the QP timer recovers it.
TEST_F(Scripted, LastPacketLostWithoutProbes) {
  PairOptions o;
  o.config_a = [](Device::Config& c) { c.probe_floor_ns = 0; };
  make(o);
  pr->wire.a().filter = drop_nth(op::kWriteLast, 1, &seen);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(post_one(WrOpcode::RdmaWrite, 5000, wc));
  EXPECT_EQ(pr->a.qp->counters().probes, 0u);
  EXPECT_GE(pr->a.qp->counters().timeouts, 1u);
}

// A lost ATOMIC ACKNOWLEDGE and a lost last READ response, with the QP timer at 268 ms: a
// probe asks again within a few round trips, the QP timer never fires.
TEST_F(Scripted, AtomicAckLostRecoveredByAProbe) {
  PairOptions o;
  o.timeout = 16;
  make(o);
  pr->wire.b().filter = drop_nth(op::kAtomicAck, 1, &seen);
  uint64_t v = 1000;
  std::memcpy(pr->b.buf() + 4096, &v, 8);
  Sge s;
  SendWr w = wr(WrOpcode::AtomicFetchAdd, 8, s);
  w.compare_add = 7;
  const uint64_t t0 = pr->wire.clock().now_ns();
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, w), 0);
  Wc wc;
  ASSERT_TRUE(pr->next_wc(pr->a.scq, wc));
  const uint64_t took = pr->wire.clock().now_ns() - t0;
  EXPECT_EQ(wc.status, WcStatus::Success);
  std::memcpy(&v, pr->b.buf() + 4096, 8);
  EXPECT_EQ(v, 1007u) << "executed once";
  EXPECT_EQ(pr->a.qp->counters().probes, 1u);
  EXPECT_EQ(pr->a.qp->counters().timeouts, 0u);
  EXPECT_LE(took, param::kProbeInitialNs + 100'000) << "the probe time, not the QP timeout";
  EXPECT_LT(took, proto::local_ack_timeout_ns(16) / 100);
}

TEST_F(Scripted, LastReadResponseLostRecoveredByAProbe) {
  PairOptions o;
  o.timeout = 16;
  make(o);
  pr->wire.b().filter = drop_nth(op::kReadRespLast, 1, &seen);
  fill_pattern(pr->b.buf() + 4096, 10000, 6);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(post_one(WrOpcode::RdmaRead, 10000, wc));
  EXPECT_EQ(std::memcmp(pr->a.buf(), pr->b.buf() + 4096, 10000), 0);
  EXPECT_EQ(pr->a.qp->counters().probes, 1u);
  EXPECT_EQ(pr->a.qp->counters().timeouts, 0u);
  EXPECT_EQ(pr->b.qp->counters().replayed_responses, 1u) << "only the missing response sent again";
}

TEST_F(Scripted, AckLostAlone) {
  make();
  pr->wire.b().filter = drop_nth(op::kAck, 1, &seen);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(post_one(WrOpcode::RdmaWrite, 100, wc));
  EXPECT_EQ(pr->b.qp->counters().duplicate_request, 1u) << "the resent WRITE is a duplicate, acknowledged again";
  EXPECT_EQ(seen, 2);
}

TEST_F(Scripted, FirstReadResponseLost) {
  make();
  pr->wire.b().filter = drop_nth(op::kReadRespFirst, 1, &seen);
  fill_pattern(pr->b.buf() + 4096, 10000, 5);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(post_one(WrOpcode::RdmaRead, 10000, wc));
  EXPECT_EQ(wc.byte_len, 10000u);
  EXPECT_EQ(std::memcmp(pr->a.buf(), pr->b.buf() + 4096, 10000), 0);
  EXPECT_GE(pr->a.qp->counters().implied_naks, 1u) << "the gap in the responses re-issued the READ";
}

TEST_F(Scripted, AtomicReplayedExecutesOnce) {
  make();
  pr->wire.b().filter = drop_nth(op::kAtomicAck, 1, &seen);  // the requester resends the FETCH_ADD
  uint64_t v = 1000;
  std::memcpy(pr->b.buf() + 4096, &v, 8);
  Sge s;
  SendWr w = wr(WrOpcode::AtomicFetchAdd, 8, s);
  w.compare_add = 7;
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, w), 0);
  Wc wc;
  ASSERT_TRUE(pr->next_wc(pr->a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  std::memcpy(&v, pr->a.buf(), 8);
  EXPECT_EQ(v, 1000u);
  std::memcpy(&v, pr->b.buf() + 4096, 8);
  EXPECT_EQ(v, 1007u) << "executed once, not twice";
  EXPECT_EQ(pr->b.qp->counters().duplicate_request, 1u);
}

TEST_F(Scripted, RnrRetryZeroFailsAtTheFirstRnrNak) {
  PairOptions o;
  o.rnr_retry = 0;
  make(o);
  Sge s;
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, wr(WrOpcode::Send, 10, s, 1)), 0);
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, wr(WrOpcode::RdmaWrite, 10, s, 2)), 0);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(pr->expect_wc(pr->a.scq, wc, 1u, WcStatus::RnrRetryExcErr));
  ASSERT_NO_FATAL_FAILURE(pr->expect_wc(pr->a.scq, wc, 2u, WcStatus::WrFlushErr));
  EXPECT_EQ(pr->a.qp->state(), QpState::Err);
  EXPECT_EQ(pr->a.qp->counters().rcvd_rnr_err, 1u);
}

TEST_F(Scripted, RnrRetrySevenWaitsForever) {
  PairOptions o;
  o.rnr_retry = 7;
  o.min_rnr_timer = 14;  // 1.28 ms
  make(o);
  Sge s;
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, wr(WrOpcode::Send, 10, s)), 0);
  // 40 RNR NAKs (more than any finite rnr_retry), then a receive appears.
  ASSERT_TRUE(pr->run_until([&] { return pr->a.qp->counters().rcvd_rnr_err >= 40; }));
  Sge rs{pr->b.addr(), 64, pr->b.mr->lkey};
  RecvWr r{9, &rs, 1};
  ASSERT_EQ(pr->b.dev->post_recv(pr->b.qp, r), 0);
  Wc wc;
  ASSERT_TRUE(pr->next_wc(pr->a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  ASSERT_TRUE(pr->next_wc(pr->b.rcq, wc));
  EXPECT_EQ(wc.byte_len, 10u);
}

// An ACK that arrives while the requester waits out an RNR NAK's timer, for the PSN the NAK
// rewound (the responder acknowledged an earlier copy: a probe that reached it once a receive
// was posted), completes the WQE at once and nothing is resent. uroce-drill's
// rnr/requester-retries met it under load: the ACK was dropped and the SEND never completed.
TEST_F(Scripted, AckDuringTheRnrWaitCompletes) {
  PairOptions o;
  o.rnr_retry = 3;
  o.min_rnr_timer = 31;  // 491.52 ms: the wait outlasts the ACK
  make(o);
  uint32_t psn = 0;
  int sends = 0;
  pr->wire.a().tap = [&](const uint8_t* d, uint32_t n) {
    proto::Packet p;
    if (proto::parse({d, n}, p, {false}).ok() && p.opcode == op::kSendOnly) {
      psn = p.psn;
      ++sends;
    }
  };
  Sge s;
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, wr(WrOpcode::Send, 10, s, 1)), 0);
  ASSERT_TRUE(pr->run_until([&] { return pr->a.qp->counters().rcvd_rnr_err >= 1; }));
  const int sends_at_nak = sends;
  proto::Packet ack = forge(pr->b, pr->a, op::kAck, psn);
  ack.ack_req = false;
  ack.aeth.syndrome = 0x1f;
  ack.aeth.msn = 1;
  inject(pr->wire.a(), ack);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(pr->expect_wc(pr->a.scq, wc, 1u, WcStatus::Success, 100'000'000));  // 100 ms, within the wait
  EXPECT_EQ(sends, sends_at_nak) << "the SEND was resent although acknowledged";
  EXPECT_EQ(pr->a.qp->state(), QpState::Rts);
}

// retry_cnt 6: a peer that is gone ends in RETRY_EXC_ERR after seven timeouts.
TEST_F(Scripted, RetryCountSixGivesUpAfterSevenTimeouts) {
  make_vanished_peer(6);
  Sge s;
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, wr(WrOpcode::Send, 10, s, 1)), 0);
  const uint64_t t0 = pr->wire.clock().now_ns();
  Wc wc;
  ASSERT_TRUE(pr->next_wc(pr->a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::RetryExcErr);
  const uint64_t t = proto::local_ack_timeout_ns(12);
  EXPECT_GE(pr->wire.clock().now_ns() - t0, 7 * t);
  EXPECT_LT(pr->wire.clock().now_ns() - t0, 8 * t + 1'000'000);
  EXPECT_EQ(pr->a.qp->counters().retry_exceeded_err, 1u);
}

// retry_cnt 7 is seven retries, as the IBA defines it and a ConnectX reads it (rxe reads it as
// "for ever"; only rnr_retry 7 is): what perftest and rping ask for ends in RETRY_EXC_ERR after
// eight timeouts when the peer is gone, never a requester that resends until it is stopped.
TEST_F(Scripted, RetryCountSevenGivesUpAfterEightTimeouts) {
  make_vanished_peer(7);
  Sge s;
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, wr(WrOpcode::RdmaWrite, 100, s, 1)), 0);
  const uint64_t t0 = pr->wire.clock().now_ns();
  Wc wc;
  ASSERT_TRUE(pr->next_wc(pr->a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::RetryExcErr);
  const uint64_t t = proto::local_ack_timeout_ns(12);
  EXPECT_GE(pr->wire.clock().now_ns() - t0, 8 * t);
  EXPECT_LT(pr->wire.clock().now_ns() - t0, 9 * t + 1'000'000);
  EXPECT_EQ(pr->a.qp->counters().timeouts, 8u);
  EXPECT_EQ(pr->a.qp->counters().retry_exceeded_err, 1u);
  EXPECT_EQ(pr->a.qp->state(), QpState::Err);
}

TEST_F(Scripted, RetryExhaustionAndAVanishedPeer) {
  make_vanished_peer(2);
  Sge s;
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, wr(WrOpcode::RdmaWrite, 3000, s, i)), 0);
  const uint64_t t0 = pr->wire.clock().now_ns();
  Wc wc;
  ASSERT_TRUE(pr->next_wc(pr->a.scq, wc));
  const uint64_t took = pr->wire.clock().now_ns() - t0;
  EXPECT_EQ(wc.status, WcStatus::RetryExcErr);
  EXPECT_EQ(wc.wr_id, 1u);
  const uint64_t t = proto::local_ack_timeout_ns(12);
  EXPECT_GE(took, 3 * t) << "first try + retry_cnt retries, each waiting one timeout";
  EXPECT_LT(took, 4 * t + 1'000'000) << "the error comes within the configured timeout";
  for (uint64_t i = 2; i <= 3; ++i) {
    ASSERT_NO_FATAL_FAILURE(pr->expect_wc(pr->a.scq, wc, i, WcStatus::WrFlushErr));
  }
  EXPECT_EQ(pr->a.qp->state(), QpState::Err);
  EXPECT_EQ(pr->a.qp->counters().timeouts, 3u);
  EXPECT_GT(pr->a.qp->counters().probes, 0u) << "probes went out meanwhile, and took no retry";
  EXPECT_EQ(pr->wire.free_slots(), pr->wire.total_slots()) << "no frame buffer leaked";
}

}  // namespace
}  // namespace uroce::test
