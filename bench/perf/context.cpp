#include "bench/perf/context.hpp"

#include <cstring>
#include <string>

#include "bench/perf/report.hpp"
#include "proto/icrc.hpp"

namespace uroce::perf {

using namespace uroce::engine;

Msg Ctx::wait_msg(uint32_t type) {
  Msg m;
  uint32_t spin = 0;
  for (;;) {
    dev->progress();
    if ((++spin & 255) == 0 && tcp.try_recv(&m, sizeof m)) break;
  }
  if (m.type != type) die("protocol: expected message %u, got %u (status %u)", type, m.type, m.status);
  return m;
}

void Ctx::check_wc(const Wc& wc) {
  if (wc.status != WcStatus::Success)
    die("error completion: qp 0x%x wr_id %lu status %s (%u) opcode %u", wc.qp_num, (unsigned long)wc.wr_id,
        std::string(wc_status_name(wc.status)).c_str(), unsigned(wc.status), unsigned(wc.opcode));
}

uint32_t checksum(const uint8_t* p, size_t n) { return proto::crc32(0, p, n); }

void fill_pattern(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) p[i] = uint8_t(x >> (8 * (i & 7)));
}

void post_op(Ctx& c, QpCtx& x, uint64_t size, uint64_t idx, bool signaled) {
  Sge sge{reinterpret_cast<uintptr_t>(x.sbuf), uint32_t(size), c.mr->lkey};
  SendWr wr;
  wr.wr_id = idx;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = signaled ? uint32_t(kSendSignaled) : 0u;
  switch (c.o.test) {
    case Test::Write:
      wr.opcode = WrOpcode::RdmaWrite;
      wr.remote_addr = x.remote.rbuf;
      wr.rkey = x.remote.rkey;
      break;
    case Test::Send: wr.opcode = WrOpcode::Send; break;
    case Test::Read:
      wr.opcode = WrOpcode::RdmaRead;
      wr.remote_addr = x.remote.rbuf;
      wr.rkey = x.remote.rkey;
      break;
    case Test::Atomic:
      wr.remote_addr = x.remote.rbuf;
      wr.rkey = x.remote.rkey;
      sge.length = 8;
      if (c.o.cas) {
        wr.opcode = WrOpcode::AtomicCmpSwp;
        wr.compare_add = idx;
        wr.swap = idx + 1;
      } else {
        wr.opcode = WrOpcode::AtomicFetchAdd;
        wr.compare_add = 1;
      }
      break;
  }
  int rc = c.dev->post_send(x.qp, wr);
  if (rc != 0) die("post_send: %s", std::strerror(rc));
}

void post_recvs(Ctx& c, QpCtx& x, uint64_t size, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    Sge sge{reinterpret_cast<uintptr_t>(x.rbuf), uint32_t(size), c.mr->lkey};
    RecvWr wr;
    wr.wr_id = x.recv_posted++;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    int rc = c.dev->post_recv(x.qp, wr);
    if (rc != 0) die("post_recv: %s", std::strerror(rc));
  }
}

}  // namespace uroce::perf
