// Goodput under loss: two engines on the FakeLink with its link-rate model (FakeWire::rate_bps,
// latency_ns), everything in virtual time, so the figures do not depend on the machine. For
// 64 KiB RDMA WRITE, 4 KiB SEND and 8 B FETCH_ADD, at several random loss rates (each
// direction) and with reordering: goodput as a fraction of the link rate and of the clean run,
// and frames sent (both directions) per MiB delivered. scripts/bench-loss.sh runs it.
//
//   loss_bench [--rate-gbps G] [--latency-ns N] [--mtu BYTES] [--scale F] [--case NAME]
//              [--set key=value ...]   (Device::Config knobs: docs/reliability.md)
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "tests/support/pair.hpp"

using namespace uroce::engine;
using uroce::test::ConnectedPair;
using uroce::test::Endpoint;
using uroce::test::PairOptions;

namespace {

struct Options {
  double rate_gbps = 25;
  uint64_t latency_ns = 2000;   // propagation, each direction
  uint32_t mtu = 1024;
  double scale = 1;             // multiplies the number of messages of every workload
  std::string only;             // run only workloads whose name contains this
  std::vector<std::pair<std::string, uint64_t>> knobs;  // Device::Config overrides
};

Mtu mtu_enum(uint32_t bytes) {
  switch (bytes) {
    case 256: return Mtu::M256;
    case 512: return Mtu::M512;
    case 2048: return Mtu::M2048;
    case 4096: return Mtu::M4096;
    default: return Mtu::M1024;
  }
}

// Sets the Device::Config field a knob names. False: no such knob.
bool apply_knob(Device::Config& c, const std::string& k, uint64_t v) {
  if (k == "max_unacked_psns") c.max_unacked_psns = uint32_t(v);
  else if (k == "ack_req_every") c.ack_req_every = uint32_t(v);
  else if (k == "probe_floor_us") c.probe_floor_ns = v * 1000;
  else if (k == "selective_repeat") c.selective_repeat = v != 0;
  else return false;
  return true;
}

enum class Kind { Write, Send, FetchAdd };

struct Workload {
  const char* name;
  Kind kind;
  uint32_t size;   // bytes per message
  uint32_t count;  // messages (before --scale)
};

struct Fault {
  const char* name;
  FaultConfig f;
};

struct Result {
  bool ok = false;
  uint64_t bytes = 0;       // payload delivered (atomics: 8 per operation)
  uint64_t messages = 0;
  uint64_t virtual_ns = 0;
  uint64_t frames = 0;      // sent by both ends
  Counters a, b;            // requester, responder
};

constexpr uint32_t kSqDepth = 128;   // WRs in flight, as perftest's default tx depth
constexpr uint32_t kRqDepth = 256;

// Two engines on the FakeLink (tests/support/pair.hpp), their RC QPs connected with
// perftest's defaults: QP timeout 14 (4.096 us * 2^14 = 67 ms), 7 retries.
PairOptions pair_options(const Options& o, uint64_t seed) {
  PairOptions p;
  p.mtu = mtu_enum(o.mtu);
  p.seed = seed;
  p.max_send_wr = kSqDepth;
  p.max_recv_wr = kRqDepth;
  p.max_inline_data = 0;
  p.min_rnr_timer = 12;
  p.config_a = p.config_b = [&o](Device::Config& c) {
    for (auto& [k, v] : o.knobs) apply_knob(c, k, v);
  };
  return p;
}

class Run {
 public:
  Run(const Options& o, const Fault& fault, uint64_t seed) : pair_(pair_options(o, seed)) {
    wire_.rate_bps = uint64_t(o.rate_gbps * 1e9);
    wire_.latency_ns = o.latency_ns;
    wire_.a().faults = fault.f;
    wire_.b().faults = fault.f;
  }
  bool up() const { return pair_.setup_error == 0; }

  Result go(const Workload& w, uint32_t count) {
    Result r;
    Sge sge{reinterpret_cast<uintptr_t>(a_.buf()), w.kind == Kind::FetchAdd ? 8u : w.size, a_.mr->lkey};
    SendWr wr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = kSendSignaled;
    wr.remote_addr = reinterpret_cast<uintptr_t>(b_.buf());
    wr.rkey = b_.mr->rkey;
    wr.opcode = w.kind == Kind::Write ? WrOpcode::RdmaWrite : w.kind == Kind::Send ? WrOpcode::Send
                                                                                  : WrOpcode::AtomicFetchAdd;
    wr.compare_add = 1;
    Sge rsge{reinterpret_cast<uintptr_t>(b_.buf()), w.size, b_.mr->lkey};
    RecvWr rwr;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    uint32_t posted = 0, done = 0, recvs = 0;
    const uint64_t t0 = wire_.clock().now_ns();
    uint64_t idle_since = 0;
    bool idle = false;
    // 600 s of virtual time at most: a hang is reported, not waited for.
    while (done < count && wire_.clock().now_ns() - t0 < 600'000'000'000ull) {
      if (w.kind == Kind::Send)
        while (recvs < count && b_.qp->rq_outstanding() < kRqDepth && b_.dev->post_recv(b_.qp, rwr) == 0) ++recvs;
      while (posted < count && posted - done < kSqDepth) {
        wr.wr_id = posted;
        if (a_.dev->post_send(a_.qp, wr) != 0) break;
        ++posted;
      }
      bool did = a_.dev->progress();
      did |= b_.dev->progress();
      Wc wc[64];
      for (int n; (n = a_.dev->poll_cq(a_.scq, 64, wc)) > 0;) {
        for (int i = 0; i < n; ++i) {
          if (wc[i].status != WcStatus::Success) {
            std::fprintf(stderr, "%s: completion %s\n", w.name, std::string(wc_status_name(wc[i].status)).c_str());
            return r;
          }
        }
        done += uint32_t(n);
        did = true;
      }
      while (b_.dev->poll_cq(b_.rcq, 64, wc) > 0) did = true;
      if (did) {
        idle = false;
        continue;
      }
      // Both idle: jump to the next frame due. With none in flight only a timer can act: step
      // 1 us for the first 100 us (short timers keep their precision), then 10 us.
      const uint64_t now = wire_.clock().now_ns();
      if (!idle) idle = true, idle_since = now;
      const uint64_t due = wire_.next_due();
      if (due != UINT64_MAX && due > now) wire_.clock().advance(due - now);
      else wire_.clock().advance(now - idle_since < 100'000 ? 1'000 : 10'000);
    }
    r.ok = done == count;
    r.messages = done;
    r.bytes = uint64_t(done) * (w.kind == Kind::FetchAdd ? 8 : w.size);
    r.virtual_ns = wire_.clock().now_ns() - t0;
    r.a = a_.dev->counters();
    r.b = b_.dev->counters();
    r.frames = wire_.a().counters.sent + wire_.b().counters.sent;
    return r;
  }

 private:
  ConnectedPair pair_;
  FakeWire& wire_ = pair_.wire;
  Endpoint& a_ = pair_.a;
  Endpoint& b_ = pair_.b;
};

FaultConfig loss(double p) {
  FaultConfig f;
  f.drop = p;
  return f;
}

FaultConfig reorder(double p) {
  FaultConfig f;
  f.reorder = p;
  f.reorder_window = 4;
  return f;
}

int usage() {
  std::fprintf(stderr,
               "usage: loss_bench [--rate-gbps G] [--latency-ns N] [--mtu BYTES] [--scale F] [--case NAME]\n"
               "                  [--set max_unacked_psns=N] [--set ack_req_every=N] [--set probe_floor_us=N]\n"
               "                  [--set selective_repeat=0|1]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (a == "--rate-gbps") o.rate_gbps = std::atof(v);
    else if (a == "--latency-ns") o.latency_ns = std::strtoull(v, nullptr, 10);
    else if (a == "--mtu") o.mtu = uint32_t(std::atoi(v));
    else if (a == "--scale") o.scale = std::atof(v);
    else if (a == "--case") o.only = v;
    else if (a == "--set") {
      const char* eq = std::strchr(v, '=');
      Device::Config probe;
      if (!eq || !apply_knob(probe, std::string(v, eq), std::strtoull(eq + 1, nullptr, 10))) return usage();
      o.knobs.emplace_back(std::string(v, eq), std::strtoull(eq + 1, nullptr, 10));
    } else return usage();
  }
  if (o.rate_gbps <= 0) return usage();
  const Workload workloads[] = {
      {"WRITE 64 KiB", Kind::Write, 65536, 512},
      {"SEND 4 KiB", Kind::Send, 4096, 4096},
      {"FETCH_ADD 8 B", Kind::FetchAdd, 8, 20000},
  };
  const Fault faults[] = {
      {"clean", {}},
      {"loss 0.1%", loss(0.001)},
      {"loss 1%", loss(0.01)},
      {"loss 3%", loss(0.03)},
      {"reorder 1%", reorder(0.01)},
  };
  Device::Config mode;
  for (auto& [k, v] : o.knobs) apply_knob(mode, k, v);
  std::printf("link %.1f Gbit/s each way, %" PRIu64 " ns propagation, path MTU %u, %u WRs in flight, QP timeout 14 (67 ms), %s\n",
              o.rate_gbps, o.latency_ns, o.mtu, kSqDepth,
              mode.selective_repeat ? "selective repeat (both ends)" : "go-back-N");
  std::printf("| workload | link | goodput | of link | of clean | frames/MiB | x clean | resent | timeouts |"
              " seq NAKs rcvd | restarts | NAKs ignored | probes |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  int failed = 0;
  for (const Workload& w : workloads) {
    if (!o.only.empty() && std::string(w.name).find(o.only) == std::string::npos) continue;
    const uint32_t count = std::max<uint32_t>(1, uint32_t(w.count * o.scale));
    double clean_rate = 0, clean_fpm = 0;
    uint64_t seed = 1;
    for (const Fault& f : faults) {
      Run run(o, f, seed++);
      if (!run.up()) {
        std::printf("| %s | %s | FAILED: the pair did not come up |\n", w.name, f.name);
        ++failed;
        continue;
      }
      const Result r = run.go(w, count);
      if (!r.ok) {
        std::printf("| %s | %s | FAILED after %" PRIu64 " messages |\n", w.name, f.name, r.messages);
        ++failed;
        continue;
      }
      const double secs = double(r.virtual_ns) / 1e9;
      const double bits = double(r.bytes) * 8;
      const double mib = double(r.bytes) / (1 << 20);
      const double rate = w.kind == Kind::FetchAdd ? double(r.messages) / secs : bits / secs;
      const double fpm = double(r.frames) / mib;
      if (&f == &faults[0]) clean_rate = rate, clean_fpm = fpm;
      char good[32];
      if (w.kind == Kind::FetchAdd) std::snprintf(good, sizeof good, "%.3f Mop/s", rate / 1e6);
      else std::snprintf(good, sizeof good, "%.2f Gbit/s", rate / 1e9);
      std::printf("| %s | %s | %s | %.3f | %.3f | %.0f | %.2f | %" PRIu64 " | %" PRIu64 " | %" PRIu64 " | %" PRIu64
                  " | %" PRIu64 " | %" PRIu64 " |\n",
                  w.name, f.name, good, bits / secs / (o.rate_gbps * 1e9), rate / clean_rate, fpm, fpm / clean_fpm,
                  r.a.retransmitted, r.a.timeouts, r.a.rcvd_seq_err, r.a.gap_restarts, r.a.naks_ignored, r.a.probes);
      std::fflush(stdout);
    }
  }
  return failed ? 1 : 0;
}
