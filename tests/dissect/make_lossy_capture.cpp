// make_lossy_capture OUT.pcap [SEED]: a capture of two uroce engines talking over the FakeLink
// (tests/support) with a seeded loss rate, for uroce-dissect --ladder's tests and for the
// lessons. Test-only: built with the tests, never installed.
//
// What it does, in virtual time (the same frames on every run and every machine, but for the
// RETH addresses, which are where the buffers happen to be, and so the ICRCs):
//   1. no loss: A SENDs before B has posted a receive, so B answers with an RNR NAK; once A's
//      tap has seen the RNR NAK, B posts the receive and A's retry gets through;
//   2. with loss (kDropRate both ways, wire seed kSeed): three 8 KiB WRITEs (8 packets each at
//      path MTU 1024), two SENDs of 3 KiB and two 4 KiB READs, one after the other, each
//      waited for. The drops cause sequence NAKs (a later packet arrives first) and timeouts.
// Each end's tap sees every frame that end sends, before the fault stage: the capture is what
// a switch in front of the lossy link would record, so dropped frames are in it too.
//
// The pcap has microsecond timestamps taken from the virtual clock. The last output line lists
// the frames the fault stage dropped (the capture itself cannot say). The program checks that the
// capture holds at least one RNR NAK, one sequence NAK and one repeated request PSN, and exits
// 1 if not (a change in the engine's timing would then need another seed).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "proto/aeth.hpp"
#include "proto/bytes.hpp"
#include "proto/opcode.hpp"
#include "tests/support/pair.hpp"

using namespace uroce;
using namespace uroce::test;

namespace {

constexpr double kDropRate = 0.08;
constexpr uint64_t kSeed = 8;

struct Captured {
  uint64_t ns;
  std::vector<uint8_t> bytes;
};

// BTH fields of an untagged IPv4 RoCEv2 frame (what the engine sends on the FakeLink).
constexpr size_t kBth = 14 + 20 + 8;
uint8_t opcode(const Captured& c) { return c.bytes.size() > kBth ? c.bytes[kBth] : 0; }
uint32_t psn(const Captured& c) { return proto::load_be24(c.bytes.data() + kBth + 9); }
proto::AckKind ack_kind(const Captured& c) {
  return proto::Syndrome::decode(c.bytes[kBth + 12]).kind;
}

bool write_pcap(const char* path, const std::vector<Captured>& frames) {
  FILE* f = std::fopen(path, "wb");
  if (!f) return false;
  auto u32 = [&](uint32_t v) { std::fwrite(&v, 4, 1, f); };
  auto u16 = [&](uint16_t v) { std::fwrite(&v, 2, 1, f); };
  u32(0xA1B2C3D4), u16(2), u16(4), u32(0), u32(0), u32(65535), u32(1);  // classic pcap, Ethernet
  for (const Captured& c : frames) {
    u32(uint32_t(c.ns / 1'000'000'000)), u32(uint32_t(c.ns % 1'000'000'000 / 1000));
    u32(uint32_t(c.bytes.size())), u32(uint32_t(c.bytes.size()));
    std::fwrite(c.bytes.data(), 1, c.bytes.size(), f);
  }
  return std::fclose(f) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: make_lossy_capture OUT.pcap [SEED]\n");
    return 2;
  }
  PairOptions o;
  o.seed = argc == 3 ? std::strtoull(argv[2], nullptr, 0) : kSeed;  // another seed: another pattern of loss
  o.timeout = 10;       // local ACK timeout 4.096 us * 2^10 = 4.2 ms
  o.min_rnr_timer = 1;  // B's RNR NAKs ask for 10 us
  ConnectedPair pr(o);
  if (pr.setup_error) {
    std::fprintf(stderr, "make_lossy_capture: the pair did not come up (%s)\n", pr.failed_step);
    return 1;
  }
  std::vector<Captured> cap;
  // Which frames the fault stage dropped: it decides after the tap has seen a frame, so a
  // link's drop counter that grew since its previous frame was tapped means that frame was lost.
  std::vector<size_t> dropped;  // frame numbers in the capture, from 1
  struct TapState {
    uint64_t drops_seen = 0;
    size_t last_frame = 0;
  } tap_state[2];
  auto note_drop = [&](FakeLink& l, TapState& t) {
    if (l.counters.dropped != t.drops_seen) dropped.push_back(t.last_frame), t.drops_seen = l.counters.dropped;
  };
  for (int k = 0; k < 2; ++k) {
    FakeLink& l = k ? pr.wire.b() : pr.wire.a();
    l.tap = [&, k](const uint8_t* d, uint32_t n) {
      note_drop(l, tap_state[k]);
      cap.push_back({pr.wire.clock().now_ns(), {d, d + n}});
      tap_state[k].last_frame = cap.size();
    };
  }

  Endpoint &a = pr.a, &b = pr.b;
  fill_pattern(a.buf(), 64 * 1024, 1);
  Wc wc;
  auto done = [&](Cq* cq, const char* what) {
    if (pr.next_wc(cq, wc) && wc.status == WcStatus::Success) return true;
    std::fprintf(stderr, "make_lossy_capture: %s did not complete\n", what);
    return false;
  };

  // 1. SEND before the receive: RNR NAK, then the retry once the receive is posted.
  Sge s1{a.addr(), 256, a.mr->lkey};
  SendWr w = wr_to(b, 1, WrOpcode::Send, &s1);
  if (a.dev->post_send(a.qp, w)) return 1;
  auto rnr_seen = [&] {
    for (const Captured& c : cap)
      if (opcode(c) == proto::op::kAck && ack_kind(c) == proto::AckKind::RnrNak) return true;
    return false;
  };
  if (!pr.run_until(rnr_seen)) {
    std::fprintf(stderr, "make_lossy_capture: no RNR NAK\n");
    return 1;
  }
  Sge r1{b.addr(), 64 * 1024, b.mr->lkey};
  if (b.dev->post_recv(b.qp, RecvWr{1, &r1, 1})) return 1;
  if (!done(a.scq, "the first SEND") || !done(b.rcq, "the first receive")) return 1;

  // 2. With loss both ways.
  pr.wire.a().faults.drop = kDropRate;
  pr.wire.b().faults.drop = kDropRate;
  uint64_t id = 10;
  for (int i = 0; i < 3; ++i) {
    Sge s{a.addr() + uint64_t(i) * 8192, 8192, a.mr->lkey};
    SendWr ww = wr_to(b, ++id, WrOpcode::RdmaWrite, &s);
    ww.remote_addr += uint64_t(i) * 8192;
    if (a.dev->post_send(a.qp, ww) || !done(a.scq, "a WRITE")) return 1;
  }
  for (int i = 0; i < 2; ++i) {
    Sge r{b.addr(), 64 * 1024, b.mr->lkey};
    if (b.dev->post_recv(b.qp, RecvWr{uint64_t(20 + i), &r, 1})) return 1;
    Sge s{a.addr(), 3072, a.mr->lkey};
    SendWr sw = wr_to(b, ++id, WrOpcode::Send, &s);
    if (a.dev->post_send(a.qp, sw) || !done(a.scq, "a SEND") || !done(b.rcq, "a receive")) return 1;
  }
  for (int i = 0; i < 2; ++i) {
    Sge s{a.addr() + 32768, 4096, a.mr->lkey};
    SendWr rw = wr_to(b, ++id, WrOpcode::RdmaRead, &s);
    if (a.dev->post_send(a.qp, rw) || !done(a.scq, "a READ")) return 1;
  }
  // Let the last ACKs and anything still in flight pass.
  pr.run_until([] { return false; }, 20'000'000);

  note_drop(pr.wire.a(), tap_state[0]);
  note_drop(pr.wire.b(), tap_state[1]);
  std::sort(dropped.begin(), dropped.end());

  // The capture must show what it is for.
  size_t rnr = 0, seq = 0, repeated = 0;
  std::vector<uint32_t> sent;  // request PSNs from A
  const auto& amac = a.dev->config().mac;
  for (const Captured& c : cap) {
    const bool from_a = std::memcmp(c.bytes.data() + 6, amac.data(), 6) == 0;
    const uint8_t op = opcode(c);
    if (!from_a && (op == proto::op::kAck || proto::opcode_info(op).has(proto::kAeth))) {
      const proto::Syndrome syn = proto::Syndrome::decode(c.bytes[kBth + 12]);
      rnr += syn.kind == proto::AckKind::RnrNak;
      seq += syn.kind == proto::AckKind::Nak && syn.nak_code() == proto::NakCode::PsnSequenceError;
    }
    if (from_a && proto::opcode_info(op).request) {
      for (uint32_t p : sent) repeated += p == psn(c);
      sent.push_back(psn(c));
    }
  }
  if (!write_pcap(argv[1], cap)) {
    std::fprintf(stderr, "make_lossy_capture: cannot write %s\n", argv[1]);
    return 2;
  }
  const FaultCounters &ca = pr.wire.a().counters, &cb = pr.wire.b().counters;
  std::printf("%s: %zu frames; dropped %llu of A's, %llu of B's; %zu RNR NAK, %zu sequence NAK, %zu repeated request PSNs\n",
              argv[1], cap.size(), (unsigned long long)ca.dropped, (unsigned long long)cb.dropped, rnr, seq, repeated);
  std::printf("dropped frames:");
  for (size_t n : dropped) std::printf(" %zu", n);
  std::printf("\n");
  return rnr && seq && repeated ? 0 : 1;
}
