#include "bench/perf/size.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench/perf/context.hpp"
#include "bench/perf/loops.hpp"
#include "bench/perf/report.hpp"

namespace uroce::perf {

using namespace uroce::engine;

bool run_size(Ctx& c, uint64_t size) {
  const bool bw = c.o.mode == Mode::Bw;
  const bool pingpong = !bw && (c.o.test == Test::Write || c.o.test == Test::Send);
  const uint64_t seed = size * 131 + 7;
  Msg m;
  if (c.server) {
    m = c.wait_msg(kStart);
    // Prepare the target buffers: cleared (write, send), a pattern (read), counters (atomic).
    for (auto& x : c.q) {
      x.recv_posted = x.recv_done = 0;
      if (c.o.test == Test::Read) fill_pattern(x.rbuf, size, seed + x.qp->qpn());
      else std::memset(x.rbuf, 0, size);
      if (pingpong) std::memset(x.sbuf, 0, size);
      if (c.o.test == Test::Send) post_recvs(c, x, size, bw ? std::min<uint64_t>(c.o.rx_depth, c.o.iters) : 1);
    }
    Msg r;
    r.type = kReady;
    for (auto& x : c.q) r.a = r.a * 31 + checksum(x.rbuf, size);
    c.send_msg(r);
    if (pingpong) {
      run_pingpong(c, size);
    } else if (c.o.test == Test::Send) {
      run_send_server(c, size);
    }
    m = c.wait_msg(kDone);
    // Verify what arrived.
    Msg res;
    res.type = kResult;
    res.status = 0;
    if (c.o.test == Test::Write || c.o.test == Test::Send) {
      for (size_t i = 0; i < c.q.size(); ++i) {
        // The client's source pattern, with the last byte a ping-pong flag in lat mode.
        std::vector<uint8_t> want(size);
        fill_pattern(want.data(), size, seed + i);
        if (pingpong) want[size - 1] = c.q[i].rbuf[size - 1];
        if (std::memcmp(want.data(), c.q[i].rbuf, size) != 0) res.status = 1;
      }
    } else if (c.o.test == Test::Atomic) {
      for (auto& x : c.q) {
        uint64_t v;
        std::memcpy(&v, x.rbuf, 8);
        if (v != c.o.iters) res.status = 2, res.a = v;
      }
    }
    c.send_msg(res);
    if (res.status) {
      std::fprintf(stderr, "uroce-perf: size %lu: data verification FAILED on the server (status %u)\n",
                   (unsigned long)size, res.status);
      return false;
    }
    if (bw) print_bw_row(size, c.o.iters, BwResult{m.bw_peak, m.bw_avg, m.mpps, {}});
    else print_server_lat_row(size, c.o.iters);
    return true;
  }
  // Client.
  for (size_t i = 0; i < c.q.size(); ++i) {
    auto& x = c.q[i];
    if (c.o.test == Test::Read || c.o.test == Test::Atomic) std::memset(x.sbuf, 0, size);
    else fill_pattern(x.sbuf, size, seed + i);
    if (pingpong) std::memset(x.rbuf, 0, size);
    if (pingpong && c.o.test == Test::Send) post_recvs(c, x, size, 1);
  }
  m = Msg{};
  m.type = kStart;
  m.size = size;
  c.send_msg(m);
  Msg ready = c.wait_msg(kReady);
  BwResult br;
  LatResult lr{};
  std::vector<uint64_t> d;
  if (bw) {
    br = run_bw_client(c, size);
  } else if (pingpong) {
    d = run_pingpong(c, size);
    lr = lat_stats(d, double(c.hz), 2.0);  // half round trip, as perftest reports
  } else {
    d = run_lat_oneside(c, size);
    lr = lat_stats(d, double(c.hz), 1.0);
  }
  bool ok = true;
  if (c.o.test == Test::Read) {
    uint64_t a = 0;
    for (auto& x : c.q) a = a * 31 + checksum(x.sbuf, size);
    if (a != ready.a) {
      std::fprintf(stderr, "uroce-perf: size %lu: READ data differs from the server's buffer\n", (unsigned long)size);
      ok = false;
    }
  } else if (c.o.test == Test::Atomic) {
    // The last operation on each QP returned the value before it: iters - 1.
    for (auto& x : c.q) {
      uint64_t v;
      std::memcpy(&v, x.sbuf, 8);
      if (v != c.o.iters - 1) {
        std::fprintf(stderr, "uroce-perf: atomic: last original value %lu, expected %lu\n", (unsigned long)v,
                     (unsigned long)(c.o.iters - 1));
        ok = false;
      }
    }
  }
  Msg done;
  done.type = kDone;
  done.size = size;
  done.bw_peak = br.peak, done.bw_avg = br.avg, done.mpps = br.mpps;
  c.send_msg(done);
  Msg res = c.wait_msg(kResult);
  if (res.status) {
    std::fprintf(stderr, "uroce-perf: size %lu: the server found the data wrong (status %u, value %lu)\n",
                 (unsigned long)size, res.status, (unsigned long)res.a);
    ok = false;
  }
  if (bw) print_bw_row(size, c.o.iters, br);
  else print_lat_row(size, c.o.iters, lr);
  if (!br.flows.empty()) std::printf("%s\n", br.flows.c_str());
  return ok;
}


}  // namespace uroce::perf
