// Fuzz target for the connection manager's state machine (engine/cm.hpp): two Devices with the
// CM on, joined by the FakeLink, driven by a sequence of actions decoded from the input: MADs
// injected into either end (raw bytes, or a MAD one of the CMs really sent with some of its
// bytes replaced: that reaches the deep states), the library's calls on either end with ids
// the CMs reported (or arbitrary ones), progress() and virtual time. The input's first byte
// picks a prologue: nothing, a listener and a REQ, or a connection established.
//
// Invariants, checked after every action and at the end:
//   - every MAD a CM sends parses with proto::cm::parse() and goes to QP 1 with the GSI's keys;
//   - one progress() sends a bounded number of frames; the connection count stays within
//     cm_max_conns; every connection's state has a name;
//   - once the input is used up and virtual time runs on far past every timeout, retry and
//     TimeWait, no connection is left in a state that waits on a timer (no leak, no hang);
//   - no crash, no sanitizer report, no unbounded loop.
//
// Built with clang -fsanitize=fuzzer (scripts/fuzz.sh cm_engine) this is a libFuzzer target;
// with g++ (tests/fuzz/meson.build) a regression program over seeded random inputs.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/cm.hpp"
#include "engine/engine.hpp"
#include "proto/cm.hpp"
#include "tests/fuzz/fuzz_input.hpp"
#include "tests/support/pair.hpp"

using namespace uroce;
using namespace uroce::engine;
namespace pcm = uroce::proto::cm;

namespace {

constexpr uint32_t kMaxConns = 32;
// Events seen over all runs, by type (the regression run prints them: how deep the inputs go).
uint64_t g_events[16];
constexpr uint32_t kMaxFramesPerProgress = 4 * kMaxConns + 64;

using uroce::fuzz::Input;  // tests/fuzz/fuzz_input.hpp

// Two Devices with the CM on, joined by the FakeLink (tests/support/pair.hpp, without QPs).
test::PairOptions world_options() {
  test::PairOptions o;
  o.endpoints = false;
  o.wire_frames = 512;
  o.frame_cap = 2048;
  o.config_a = [](Device::Config& c) {
    c.seed = 1;
    c.cm = true;
    c.cm_max_conns = kMaxConns;
    c.cm_timewait_ns = 10'000'000;
  };
  o.config_b = [a = o.config_a](Device::Config& c) {
    a(c);
    c.seed = 2;
  };
  return o;
}

struct World {
  test::ConnectedPair pair{world_options()};
  FakeWire& wire = pair.wire;
  Device* dev[2] = {pair.a.dev.get(), pair.b.dev.get()};
  std::vector<uint32_t> ids[2];                      // ids each CM reported or returned
  std::vector<std::array<uint8_t, 256>> seen;        // MADs the CMs sent (mutation templates)
  uint32_t frames = 0;
  pcm::CmaHeader cma{};  // rdma_cm's IP header (an IP service ID without one is refused)

  World() {
    for (int s = 0; s < 2; ++s) {
      FakeLink& l = s ? wire.b() : wire.a();
      l.tap = [this](const uint8_t* d, uint32_t n) {
        ++frames;
        proto::Packet p;
        CHECK(proto::parse(std::span<const uint8_t>(d, n), p).ok());
        CHECK(pcm::is_gsi_send(p.opcode, p.dest_qp));
        CHECK(p.deth.qkey == pcm::kGsiQkey && p.deth.src_qp == pcm::kCmQpn && p.pkey == pcm::kGsiPkey);
        pcm::Mad m;
        CHECK(pcm::parse(p.payload, m) == pcm::Error::Ok);
        if (seen.size() < 64) {
          std::array<uint8_t, 256> a;
          std::memcpy(a.data(), p.payload.data(), 256);
          seen.push_back(a);
        }
      };
    }
  }
  cm::Manager& cm(int s) { return *dev[s]->cm(); }
  uint32_t pick_id(Input& in, int s) {
    const uint8_t k = in.u8();
    if (ids[s].empty() || k == 0xFF) return in.u32();
    return ids[s][k % ids[s].size()];
  }
  void poll_events() {
    for (int s = 0; s < 2; ++s) {
      cm::Event e;
      while (cm(s).poll_event(e)) {
        CHECK(cm::event_name(e.type) != "?");
        ++g_events[size_t(e.type) & 15];
        if (ids[s].size() < 256) ids[s].push_back(e.id);
      }
    }
  }
  void progress() {
    wire.clock().advance(wire.latency_ns);  // what is on the wire arrives
    for (int s = 0; s < 2; ++s) {
      const uint32_t before = frames;
      dev[s]->progress();
      CHECK(frames - before <= kMaxFramesPerProgress);
      CHECK(cm(s).conns() <= kMaxConns);
    }
    poll_events();
  }
  // A MAD from the peer's QP 1, with a valid ICRC, delivered to side s.
  void inject(int s, const uint8_t* mad) {
    proto::Packet p;
    const Device::Config& from = dev[1 - s]->config();
    const Device::Config& to = dev[s]->config();
    p.eth_src = from.mac;
    p.eth_dst = to.mac;
    std::memcpy(p.ip_src.data(), from.gid.data() + 12, 4);
    std::memcpy(p.ip_dst.data(), to.gid.data() + 12, 4);
    p.opcode = proto::op::kUd | proto::op::kSendOnly;
    p.dest_qp = pcm::kCmQpn;
    p.pkey = pcm::kGsiPkey;
    p.deth.qkey = pcm::kGsiQkey;
    p.deth.src_qp = pcm::kCmQpn;
    p.payload = {mad, 256};
    std::vector<uint8_t> f(proto::frame_len(p));
    CHECK(proto::build(p, f).ok());
    (s ? wire.b() : wire.a()).inject(f.data(), uint32_t(f.size()));
  }
  cm::ConnectParams req(Input& in, int s) {
    cm::ConnectParams p;
    p.service_id = pcm::service_id(pcm::ps::kTcp, uint16_t(in.u8() & 3));
    p.peer.dgid = dev[1 - s]->config().gid;
    p.peer.dmac = dev[1 - s]->config().mac;
    p.qpn = 2 + (in.u8() & 7);
    p.starting_psn = in.u32() & 0xFFFFFF;
    p.response_timeout = in.u8() % 24;
    p.local_response_timeout = in.u8() % 24;
    p.max_retries = in.u8() & 15;
    if (in.u8() & 7) p.cma = &cma;
    return p;
  }
  void act(Input& in) {
    const uint8_t what = in.u8();
    const int s = what & 1;
    switch ((what >> 1) % 12) {
      case 0: {  // a raw MAD
        std::array<uint8_t, 256> mad{};
        for (auto& b : mad) b = in.u8();
        inject(s, mad.data());
        break;
      }
      case 1:
      case 2: {  // a real MAD with a few bytes replaced
        if (seen.empty()) break;
        std::array<uint8_t, 256> mad = seen[in.u8() % seen.size()];
        for (int k = in.u8() & 7; k > 0; --k) mad[in.u8()] = in.u8();
        inject(s, mad.data());
        break;
      }
      case 3: {
        uint32_t id;
        const uint8_t k = in.u8();
        const uint16_t space = k & 4 ? pcm::ps::kUdp : pcm::ps::kTcp;
        if (cm(s).listen(pcm::service_id(space, uint16_t(k & 3)), &id) == 0) ids[s].push_back(id);
        break;
      }
      case 4: {
        uint32_t id;
        if (cm(s).connect(req(in, s), &id) == 0) ids[s].push_back(id);
        break;
      }
      case 5: {
        cm::AcceptParams a;
        a.qpn = 2 + (in.u8() & 7);
        a.starting_psn = in.u32() & 0xFFFFFF;
        cm(s).accept(pick_id(in, s), a);
        break;
      }
      case 6: cm(s).reject(pick_id(in, s), in.u16()); break;
      case 7: cm(s).establish(pick_id(in, s)); break;
      case 8: cm(s).disconnect(pick_id(in, s)); break;
      case 9: {
        if (in.u8() & 1) {
          cm::SidrParams p;
          p.service_id = pcm::service_id(pcm::ps::kUdp, uint16_t(in.u8() & 3));
          p.peer.dgid = dev[1 - s]->config().gid;
          p.peer.dmac = dev[1 - s]->config().mac;
          p.response_timeout = in.u8() % 24;
          p.max_retries = in.u8() & 15;
          if (in.u8() & 7) p.cma = &cma;
          uint32_t id;
          if (cm(s).sidr_request(p, &id) == 0) ids[s].push_back(id);
        } else {
          cm(s).sidr_reply(pick_id(in, s), in.u8() & 7, in.u32(), in.u32());
        }
        break;
      }
      case 10: cm(s).destroy(pick_id(in, s)); break;
      default:
        wire.clock().advance(uint64_t(in.u16()) * in.u16() * 16);  // up to ~69 s
        break;
    }
    for (int k = (in.u8() & 3) + 1; k > 0; --k) progress();
    for (int k = 0; k < 2; ++k)
      for (uint32_t id : ids[k])
        if (const cm::Conn* c = cm(k).find(id)) CHECK(cm::state_name(c->state) != "?");
  }
};

bool timed_state(cm::State s) {
  using S = cm::State;
  return s == S::ReqSent || s == S::MraReqRcvd || s == S::RepSent || s == S::MraRepRcvd || s == S::DreqSent ||
         s == S::TimeWait || s == S::SidrReqSent;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  World w;
  const uint8_t prologue = in.u8() % 3;
  if (prologue >= 1) {
    uint32_t id;
    cm::ConnectParams p;
    p.service_id = pcm::service_id(pcm::ps::kTcp, 1);
    p.peer.dgid = w.dev[1]->config().gid;
    p.peer.dmac = w.dev[1]->config().mac;
    p.qpn = 2;
    p.response_timeout = p.local_response_timeout = 10;
    p.cma = &w.cma;
    CHECK(w.cm(1).listen(p.service_id, &id) == 0);
    CHECK(w.cm(0).connect(p, &id) == 0);
    w.ids[0].push_back(id);
    for (int k = 0; k < 4; ++k) w.progress();
    if (prologue == 2 && !w.ids[1].empty()) {
      cm::AcceptParams a;
      a.qpn = 3;
      w.cm(1).accept(w.ids[1].back(), a);
      for (int k = 0; k < 4; ++k) w.progress();
      w.cm(0).establish(id);
      for (int k = 0; k < 4; ++k) w.progress();
    }
  }
  for (int steps = 0; !in.empty() && steps < 256; ++steps) w.act(in);
  // Time runs on: every timer ends (the longest wait: an MRA's 4.096 us * 2^24 on top of a
  // capped response timeout, about 137 s; 16 sends of a REQ; then TimeWait).
  for (int k = 0; k < 40; ++k) {
    w.wire.clock().advance(140'000'000'000ull);
    for (int j = 0; j < 3; ++j) w.progress();
  }
  for (int s = 0; s < 2; ++s)
    for (uint32_t id : w.ids[s])
      if (const cm::Conn* c = w.cm(s).find(id)) {
        if (timed_state(c->state)) std::fprintf(stderr, "left: %s\n", c->describe().c_str());
        CHECK(!timed_state(c->state));
      }
  return 0;
}

#ifndef UROCE_LIBFUZZER
#include "tests/fuzz/fuzz_regress.hpp"

int main(int argc, char** argv) {
  const int runs = uroce::fuzz::run_regression(argc, argv, 20261201, 20000, 1024);
  if (!runs) return 0;
  std::printf("fuzz_cm_engine regression: %d random inputs, every invariant held; events:", runs);
  for (int t = 0; t <= int(cm::EventType::Timeout); ++t)
    std::printf(" %s=%llu", std::string(cm::event_name(cm::EventType(t))).c_str(), (unsigned long long)g_events[t]);
  std::printf("\n");
  return 0;
}
#endif
