// Structure-aware fuzz target for the engine's protocol state machines: a connected pair of
// Devices on the FakeLink (tests/support/pair.hpp; RC, UC or UD QPs, or XRC: an initiator on
// one end, a target QP with its XRC SRQ on the other; the path MTU and selective repeat on or off
// at both ends, chosen by the input's first byte), driven by a sequence of actions decoded from
// the input: forged
// frames with a valid ICRC (any RC opcode, XRC's with its XRCETH naming the SRQ or any number,
// PSN near or far from the expected one, the real
// rkey, the lkey or a random key, addresses in and out of the MR, any length, AETH, atomic
// fields; one in eight then has a bit flipped, its ICRC bad) injected into either end in either direction, work requests posted on either end,
// memory deregistered and registered again, progress() and virtual time.
//
// Invariants, checked after every action:
//   - no byte outside a live registration changes (canaries around every buffer; a
//     deregistered buffer stays exactly as it was);
//   - send completions come in posting order with legal statuses;
//   - one progress() emits a bounded number of frames;
//   - no crash, no sanitizer report (the build uses ASan and UBSan), no hang (every loop is
//     bounded by the input).
//
// Built with clang -fsanitize=fuzzer by scripts/fuzz.sh; with g++ (tests/fuzz/meson.build) it
// is a regression program that runs seeded random inputs.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/engine.hpp"
#include "proto/aeth.hpp"
#include "proto/psn.hpp"
#include "tests/fuzz/fuzz_input.hpp"
#include "tests/support/pair.hpp"

using namespace uroce;
using namespace uroce::engine;
using uroce::test::canaries_intact;
using uroce::test::ConnectedPair;
using uroce::test::Endpoint;
using uroce::test::PairOptions;

namespace {

constexpr size_t kMem = 1 << 16;
constexpr uint32_t kMaxFramesPerProgress = 2048;  // far above what the limits allow (see below)

using uroce::fuzz::Input;  // tests/fuzz/fuzz_input.hpp

// What the target keeps of each end besides the pair's Endpoint.
struct Track {
  std::vector<uint8_t> frozen;  // the buffer as it was when deregistered (mr == nullptr)
  uint64_t next_wr = 1, last_done = 0;
};

PairOptions world_options(Mtu m, QpType t, bool sr) {
  PairOptions o;
  o.mtu = m;
  o.qp_type = t;
  o.mem = kMem;
  o.wire_frames = 1024;
  o.frame_cap = 4352;  // frames up to path MTU 4096 plus headers
  o.cq_depth = 1024;
  o.max_send_wr = o.max_recv_wr = 64;
  o.max_inline_data = 64;
  o.max_rd_atomic = 4;
  o.timeout = 10;
  o.retry_cnt = 3;
  o.rnr_retry = 3;
  if (t == QpType::UD) o.sq_psn_b = o.sq_psn_a;
  // sr: selective repeat on at both ends (docs/reliability.md: the responder keeps WRITE and
  // SEND packets after a gap, the requester resends only what is missing; RC only).
  o.config_a = [sr](Device::Config& c) {
    c.seed = 11;
    c.max_mr = 64;  // small tables: each input builds a new world
    c.max_qp = 8;
    c.selective_repeat = sr;
  };
  o.config_b = [a = o.config_a](Device::Config& c) {
    a(c);
    c.seed = 12;
  };
  return o;
}

struct World {
  ConnectedPair pair;
  Track track[2];
  uint32_t frames_out = 0;
  Mtu mtu;
  QpType type;

  World(Mtu m, QpType t, bool sr) : pair(world_options(m, t, sr)), mtu(m), type(t) {
    CHECK(pair.setup_error == 0);
    for (int i = 0; i < 2; ++i) pair.link(i).tap = [this](const uint8_t*, uint32_t) { ++frames_out; };
  }
  Endpoint& e(int i) { return pair.end(i); }

  void check(int who) {
    Endpoint& x = e(who);
    Track& t = track[who];
    CHECK(canaries_intact(x));
    if (!x.mr) CHECK(std::memcmp(x.buf(), t.frozen.data(), kMem) == 0);
    Wc wc[16];
    uint32_t n;
    while ((n = x.scq->poll(wc, 16)) > 0)
      for (uint32_t i = 0; i < n; ++i) {
        CHECK(uint32_t(wc[i].status) <= uint32_t(WcStatus::GeneralErr));
        CHECK(wc[i].wr_id > t.last_done && wc[i].wr_id < t.next_wr);  // posting order
        t.last_done = wc[i].wr_id;
      }
    while ((n = x.rcq->poll(wc, 16)) > 0)
      for (uint32_t i = 0; i < n; ++i) CHECK(uint32_t(wc[i].status) <= uint32_t(WcStatus::GeneralErr));
  }

  void progress(int who) {
    frames_out = 0;
    e(who).dev->progress();
    CHECK(frames_out <= kMaxFramesPerProgress);
  }

  // A frame as the other end's QP would send it to e(to)'s QP, with fields from the input.
  void forge(Input& in, int to) {
    Endpoint& dst = e(to);
    Endpoint& src = e(1 - to);
    static constexpr uint8_t kOps[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B,
                                       0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17,
                                       0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x2B,
                                       0x64, 0x65};
    const uint8_t sel = in.u8();
    uint8_t op = kOps[sel % sizeof kOps];
    if (type == QpType::XrcIni && op <= 0x17) op |= proto::op::kXrc;  // RC's operations as XRC's
    proto::Packet p = uroce::test::forge(src, dst, op, 0);
    if (sel & 0x80) p.dest_qp = in.u32() & 0xFFFFFF;
    // The XRC SRQ a request names: the target's, or any number (another domain's, none).
    const Endpoint& tgt = e(1);
    p.xrceth.srqn = (in.u8() & 3) && tgt.srq ? tgt.srq->srqn() : in.u32() & 0xFFFFFF;
    const uint8_t psn_mode = in.u8() % 4;
    const int32_t delta = int8_t(in.u8());
    const uint32_t base = p.info().request ? dst.qp->expected_psn() : proto::psn_add(dst.qp->next_send_psn(), -1);
    p.psn = psn_mode == 3 ? in.u32() & 0xFFFFFF : proto::psn_add(base, psn_mode == 0 ? 0 : delta);
    p.ack_req = in.u8() & 1;
    const uint8_t key_mode = in.u8() % 4;
    const uint32_t key = !dst.mr ? in.u32()
                         : key_mode == 0 ? dst.mr->rkey
                         : key_mode == 1 ? dst.mr->lkey
                         : key_mode == 2 ? dst.mr->rkey ^ (1u << (in.u8() % 32))
                                         : in.u32();
    const uint8_t va_mode = in.u8() % 3;
    const uint64_t va = va_mode == 0 ? dst.addr() + (in.u16() % kMem)
                        : va_mode == 1 ? dst.addr() + kMem - (in.u8() % 16)
                                       : in.u64();
    const uint32_t dma = (in.u8() & 1) ? in.u32() : in.u16() % (kMem + 64);
    p.reth = {va, key, dma};
    p.atomic = {va & ~7ull, key, in.u64(), in.u64()};
    p.aeth = {in.u8(), in.u32() & 0xFFFFFF};
    p.atomic_ack_orig = in.u64();
    p.imm = in.u32();
    p.ieth_rkey = key;
    p.deth.qkey = (in.u8() & 1) ? 0x11111111 : in.u32();
    p.deth.src_qp = in.u32() & 0xFFFFFF;
    static uint8_t payload[4200];
    const uint32_t plen = p.info().payload ? in.u16() % (mtu_bytes(mtu) + 2) : 0;
    std::memset(payload, in.u8(), plen);
    p.payload = {payload, plen};
    std::vector<uint8_t> f(proto::frame_len(p));
    if (!proto::build(p, f).ok()) return;
    // One frame in eight damaged on the way (a bit flipped anywhere): a large WRITE's or SEND's
    // MIDDLE or LAST packet is then placed before its bad ICRC is found (Device::place_payload).
    const uint8_t damage = in.u8();
    if ((damage & 7) == 0) f[in.u16() % f.size()] ^= uint8_t(1u << (damage >> 5));
    pair.link(to).inject(f.data(), uint32_t(f.size()));
  }

  void post(Input& in, int who) {
    Endpoint& x = e(who);
    Track& t = track[who];
    static constexpr WrOpcode kOps[] = {WrOpcode::RdmaWrite, WrOpcode::RdmaWriteWithImm, WrOpcode::Send,
                                        WrOpcode::SendWithImm, WrOpcode::RdmaRead, WrOpcode::AtomicCmpSwp,
                                        WrOpcode::AtomicFetchAdd};
    Endpoint& peer = e(1 - who);
    const uint8_t sel = in.u8();
    Sge sge{x.addr() + (in.u16() % kMem), uint32_t(in.u16() % 9000), x.mr ? x.mr->lkey : in.u32()};
    if (sel & 0x40) sge.lkey = in.u32();
    if (sge.addr + sge.length > x.addr() + kMem) sge.length = uint32_t(x.addr() + kMem - sge.addr);
    SendWr wr;
    wr.wr_id = t.next_wr;
    wr.opcode = kOps[sel % std::size(kOps)];
    wr.send_flags = kSendSignaled;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (wr.opcode == WrOpcode::AtomicCmpSwp || wr.opcode == WrOpcode::AtomicFetchAdd) {
      sge.length = 8;
      sge.addr &= ~7ull;
    }
    wr.remote_addr = peer.addr() + (in.u16() % kMem);
    if (wr.opcode == WrOpcode::AtomicCmpSwp || wr.opcode == WrOpcode::AtomicFetchAdd) wr.remote_addr &= ~7ull;
    wr.rkey = peer.mr && !(sel & 0x80) ? peer.mr->rkey : in.u32();
    wr.compare_add = in.u64();
    wr.swap = in.u64();
    if (type == QpType::UD) {
      wr.ah = x.ah;
      wr.remote_qpn = (sel & 0x20) ? in.u32() & 0xFFFFFF : peer.qp->qpn();
      wr.remote_qkey = (sel & 0x10) ? in.u32() : 0x80000000u;
    }
    if (type == QpType::XrcIni) wr.xrc_srqn = peer.srq && !(sel & 0x20) ? peer.srq->srqn() : in.u32() & 0xFFFFFF;
    if (x.dev->post_send(x.qp, wr) == 0) ++t.next_wr;
    Sge rs{x.addr() + (in.u16() % kMem), 0, x.mr ? x.mr->lkey : 1};
    rs.length = uint32_t(std::min<uint64_t>(in.u16() % 9000, x.addr() + kMem - rs.addr));
    RecvWr rw{t.next_wr, &rs, 1};
    if (x.srq) x.dev->post_srq_recv(x.srq, rw);   // XRC: the target's receives are its SRQ's
    else x.dev->post_recv(x.qp, rw);
  }

  void toggle_mr(int who) {
    Endpoint& x = e(who);
    if (x.mr) {
      CHECK(x.dev->dereg_mr(x.mr) == 0);
      x.mr = nullptr;
      track[who].frozen.assign(x.buf(), x.buf() + kMem);
    } else {
      x.mr = x.dev->reg_mr(x.pd, x.buf(), kMem, kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic);
      CHECK(x.mr != nullptr);
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Input in{data, size};
  static constexpr Mtu kMtus[] = {Mtu::M256, Mtu::M1024, Mtu::M4096};
  static constexpr QpType kTypes[] = {QpType::RC, QpType::RC, QpType::UC, QpType::UD};
  // The first byte: the path MTU (first % 3), the QP type (bits 2-3; bit 5: XRC instead) and
  // selective repeat (bit 4, a bit no other choice reads alone, so older inputs keep their MTU,
  // type and actions).
  // UROCE_FUZZ_SR=on or off in the environment fixes the mode for a whole run instead.
  static const char* const force_sr = std::getenv("UROCE_FUZZ_SR");
  const uint8_t first = in.u8();
  const bool sr = force_sr && !std::strcmp(force_sr, "on")    ? true
                  : force_sr && !std::strcmp(force_sr, "off") ? false
                                                               : (first & 0x10) != 0;
  World w(kMtus[first % 3], (first & 0x20) ? QpType::XrcIni : kTypes[(first >> 2) % 4], sr);
  for (int steps = 0; steps < 256 && !in.empty(); ++steps) {
    const uint8_t a = in.u8();
    const int who = a & 1;
    switch ((a >> 1) % 6) {
      case 0: case 1: w.forge(in, who); break;
      case 2: w.post(in, who); break;
      case 3: w.toggle_mr(who); break;
      case 4: w.pair.wire.clock().advance(uint64_t(in.u16()) * 1000); break;
      default: break;
    }
    const int rounds = 1 + in.u8() % 4;
    for (int r = 0; r < rounds; ++r) {
      w.progress(0);
      w.progress(1);
    }
    w.check(0);
    w.check(1);
  }
  return 0;
}

#ifndef UROCE_LIBFUZZER
// The regression program: seeded random inputs (and any files named on the command line).
#include "tests/fuzz/fuzz_regress.hpp"

int main(int argc, char** argv) {
  const int runs = uroce::fuzz::run_regression(argc, argv, 20261130, 3000, 2048);
  if (runs) std::printf("fuzz_engine regression: %d random inputs, every invariant held\n", runs);
  return 0;
}
#endif
