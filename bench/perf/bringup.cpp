#include "bench/perf/bringup.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rte_cycles.h>
#include <sys/socket.h>

#include <algorithm>
#include <random>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/perf/context.hpp"
#include "bench/perf/report.hpp"

namespace uroce::perf {

using namespace uroce::engine;

void setup(Ctx& c) {
  std::string err;
  auto cfg = port::load_config(c.o.config, err);
  if (!cfg) die("%s", err.c_str());
  c.cfg = *cfg;
  if (c.o.mtu) {
    const auto m = port::path_mtu_of(uint32_t(c.o.mtu));
    if (!m) die("bad path mtu %d", c.o.mtu);
    c.cfg.path_mtu = *m;
  }
  Device::Config dc;
  dc.max_qp_wr = 16384;
  dc.max_cqe = param::kMaxCqe;  // one CQ for every QP's sends (its depth below): -q 1024 asks 262,208
  if (c.o.window) dc.max_unacked_psns = c.o.window;
  c.ep = port::Endpoint::open(c.cfg, err, dc, c.o.eal_extra);
  if (!c.ep) die("%s", err.c_str());
  c.link = &c.ep->link();
  c.dev = &c.ep->device();
  c.hz = rte_get_tsc_hz();
  c.mtu = c.cfg.path_mtu;
  c.pd = c.dev->alloc_pd();
  const uint32_t depth = std::max(c.o.tx_depth, c.o.rx_depth) * c.o.qps * 2 + 64;
  c.scq = c.dev->create_cq(depth);
  c.rcq = c.dev->create_cq(depth);
  if (!c.pd || !c.scq || !c.rcq) die("cannot create PD/CQ");
  const uint64_t maxs = c.o.all ? c.o.max_size : c.o.size;
  c.region = (std::max<uint64_t>(maxs, 64) + 4095) & ~uint64_t(4095);
  const size_t total = c.region * 2 * c.o.qps;
  c.mem = static_cast<uint8_t*>(aligned_alloc(4096, total));
  if (!c.mem) die("out of memory (%zu bytes)", total);
  c.mem_owner.reset(c.mem);
  std::memset(c.mem, 0, total);
  c.mr = c.dev->reg_mr(c.pd, c.mem, total, kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic);
  if (!c.mr) die("reg_mr failed");
  c.q.resize(c.o.qps);
  for (uint32_t i = 0; i < c.o.qps; ++i) {
    QpInitAttr ia;
    ia.pd = c.pd;
    ia.send_cq = c.scq;
    ia.recv_cq = c.rcq;
    ia.cap.max_send_wr = c.o.tx_depth + 8;
    ia.cap.max_recv_wr = c.o.rx_depth + 8;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = 0;
    c.q[i].qp = c.dev->create_qp(ia);
    if (!c.q[i].qp) die("create_qp failed");
    c.by_qpn[c.q[i].qp->qpn()] = &c.q[i];
    c.q[i].rbuf = c.mem + c.region * 2 * i;
    c.q[i].sbuf = c.q[i].rbuf + c.region;
  }
}

void connect_qps(Ctx& c) {
  // Exchange connection data over TCP.
  const auto pump = [&] { c.pump(); };
  c.tcp.fd = c.server ? tcp_server(c.o.tcp_port, pump) : tcp_client(c.o.peer, c.o.tcp_port, 30, pump);
  int one = 1;
  setsockopt(c.tcp.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  Hello h;
  h.qps = c.o.qps;
  h.test = uint32_t(c.o.test);
  h.mode = uint32_t(c.o.mode);
  h.mtu = uint32_t(c.mtu);
  h.size = c.o.all ? 0 : c.o.size;
  h.iters = c.o.iters;
  std::memcpy(h.gid, c.link->gid().data(), 16);
  std::memcpy(h.mac, c.link->mac().data(), 6);
  std::vector<QpInfo> mine(c.o.qps), theirs(c.o.qps);
  std::random_device psn_rng;
  for (uint32_t i = 0; i < c.o.qps; ++i) {
    mine[i].qpn = c.q[i].qp->qpn();
    mine[i].psn = psn_rng() & 0xFFFFFF;  // random initial PSNs, as perftest (lrand48) and rdma_cm
    mine[i].rkey = c.mr->rkey;
    mine[i].rbuf = reinterpret_cast<uintptr_t>(c.q[i].rbuf);
    mine[i].sbuf = reinterpret_cast<uintptr_t>(c.q[i].sbuf);
  }
  c.tcp.send_all(&h, sizeof h);
  c.tcp.send_all(mine.data(), sizeof(QpInfo) * mine.size());
  Hello ph;
  while (!c.tcp.try_recv(&ph, sizeof ph)) c.pump();
  if (ph.magic != h.magic || ph.qps != h.qps || ph.test != h.test || ph.mode != h.mode || ph.size != h.size ||
      ph.iters != h.iters)
    die("the peer runs a different test (same --test, --mode, -s/-a, -n, -q on both sides)");
  if (ph.mtu != h.mtu) die("path MTU differs from the peer's (%u vs %u bytes)", mtu_bytes(c.mtu), mtu_bytes(Mtu(ph.mtu)));
  while (!c.tcp.try_recv(theirs.data(), sizeof(QpInfo) * theirs.size())) c.pump();

  // The DPDK link must be up (memif: the peer connected), then the peer's MAC is resolved
  // on the link itself (ARP or ND), not taken from the TCP exchange.
  proto::Ip6 pgid;
  std::memcpy(pgid.data(), ph.gid, 16);
  AddressVector av;
  std::string err;
  if (!c.ep->resolve_peer(pgid, av, err)) die("%s", err.c_str());
  const proto::Mac& pmac = av.dmac;
  proto::Mac tmac;
  std::memcpy(tmac.data(), ph.mac, 6);
  if (tmac != pmac)
    die("%s resolved to %s but the peer says its MAC is %s", port::gid_str(pgid).c_str(),
        port::mac_str(pmac).c_str(), port::mac_str(tmac).c_str());

  for (uint32_t i = 0; i < c.o.qps; ++i) {
    QpCtx& x = c.q[i];
    x.remote = theirs[i];
    QpAttr at;
    at.qp_state = QpState::Init;
    at.pkey_index = 0;
    at.port_num = 1;
    at.qp_access_flags = kRemoteWrite | kRemoteRead | kRemoteAtomic;
    if (c.dev->modify_qp(x.qp, at, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags) != 0)
      die("modify_qp INIT");
    at.qp_state = QpState::Rtr;
    at.path_mtu = c.mtu;
    at.dest_qp_num = theirs[i].qpn;
    at.rq_psn = theirs[i].psn;
    at.max_dest_rd_atomic = 16;
    at.min_rnr_timer = 1;
    at.ah_attr = av;
    if (c.dev->modify_qp(x.qp, at,
                         kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic |
                             kAttrMinRnrTimer) != 0)
      die("modify_qp RTR");
    at.qp_state = QpState::Rts;
    at.sq_psn = mine[i].psn;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.max_rd_atomic = 16;
    if (c.dev->modify_qp(x.qp, at,
                         kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
                             kAttrMaxQpRdAtomic) != 0)
      die("modify_qp RTS");
  }
  // Barrier: both sides are in RTS.
  Msg m;
  m.type = kReady;
  c.send_msg(m);
  c.wait_msg(kReady);
  std::printf("local  address: %s  QPN 0x%06x PSN 0x%06x RKey 0x%08x VA 0x%016lx\n",
              port::gid_str(c.link->gid()).c_str(), mine[0].qpn, mine[0].psn, mine[0].rkey,
              (unsigned long)mine[0].rbuf);
  std::printf("remote address: %s  QPN 0x%06x PSN 0x%06x RKey 0x%08x VA 0x%016lx MAC %s (resolved)\n",
              port::gid_str(pgid).c_str(), theirs[0].qpn, theirs[0].psn, theirs[0].rkey,
              (unsigned long)theirs[0].rbuf, port::mac_str(pmac).c_str());
  std::fflush(stdout);  // seen at once by whoever reads a log file (the port suite does)
}

}  // namespace uroce::perf
