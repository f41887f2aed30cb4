// uroce-perf's state for one run (the endpoint, its PD, CQs, MR and QPs, the TCP connection)
// and the helpers every loop uses: posting, the control messages, completion checks, the
// data pattern.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <unordered_map>
#include <vector>

#include "bench/perf/exchange.hpp"
#include "bench/perf/options.hpp"
#include "engine/engine.hpp"
#include "port/endpoint.hpp"

namespace uroce::perf {

struct QpCtx {
  engine::Qp* qp = nullptr;
  uint8_t* rbuf = nullptr;  // the peer writes / sends here; READ and atomic target
  uint8_t* sbuf = nullptr;  // WRITE/SEND source, READ destination, atomic result
  QpInfo remote{};
  uint64_t posted = 0, completed = 0;
  uint64_t recv_posted = 0, recv_done = 0;
};

struct Ctx {
  Opts o;
  port::EndpointConfig cfg;             // the config file with the command line's overrides
  std::unique_ptr<port::Endpoint> ep;
  port::PortLink* link = nullptr;       // ep's
  engine::Device* dev = nullptr;        // ep's
  engine::Pd* pd = nullptr;
  engine::Cq* scq = nullptr;
  engine::Cq* rcq = nullptr;
  engine::Mr* mr = nullptr;
  uint8_t* mem = nullptr;                // the registered buffers (owned by mem_owner)
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> mem_owner;
  size_t region = 0;
  std::vector<QpCtx> q;
  std::unordered_map<uint32_t, QpCtx*> by_qpn;  // a completion's QP (-q 1024: no scan of them all)
  Tcp tcp;
  bool server = true;
  engine::Mtu mtu = engine::Mtu::M1024;
  uint64_t hz = 1;

  void pump() { dev->progress(); }
  // Waits for the peer's next message, progressing meanwhile; exits unless it has `type`.
  Msg wait_msg(uint32_t type);
  void send_msg(const Msg& m) { tcp.send_all(&m, sizeof m); }
  void check_wc(const engine::Wc& wc);  // exits on an error completion
};

uint32_t checksum(const uint8_t* p, size_t n);
void fill_pattern(uint8_t* p, size_t n, uint64_t seed);

// One operation of the test (--test) from x.sbuf, wr_id idx.
void post_op(Ctx& c, QpCtx& x, uint64_t size, uint64_t idx, bool signaled);
// n receives of `size` bytes into x.rbuf.
void post_recvs(Ctx& c, QpCtx& x, uint64_t size, uint64_t n);

}  // namespace uroce::perf
