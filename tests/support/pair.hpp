// The connected pair, without GoogleTest: two engine Devices joined by a FakeWire under its
// virtual clock, each with a PD, CQs, a registered buffer (canary bytes around it) and one QP,
// the two QPs connected to each other (RC or UC: INIT, RTR, RTS at both ends; UD: RTS and an
// address handle to the peer; PairOptions::qp_type XrcIni: an XRC initiator on a, an XRC target
// QP with its domain and one XRC SRQ on b), a loop that polls both ends until a condition holds, and the
// helpers that fill a buffer, forge a frame and aim a work request at the peer.
//
// One builder for every program that needs the pair: the test harness (harness.hpp adds the
// GoogleTest checks), the benches (bench/loss_bench.cpp, bench/engine_bench.cpp) and the fuzz
// targets (tests/fuzz/). Header-only, because scripts/fuzz.sh compiles the fuzz targets with
// clang from the sources it lists.
#pragma once
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "engine/engine.hpp"
#include "tests/support/fake_link.hpp"

namespace uroce::test {

using namespace uroce::engine;

// The IPv4-mapped GID ::ffff:a.b.c.d.
inline proto::Ip6 v4gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  proto::Ip6 g{};
  g[10] = g[11] = 0xFF;
  g[12] = a, g[13] = b, g[14] = c, g[15] = d;
  return g;
}

// How one RC, UC or XRC QP is taken to RTS towards its peer (the attributes of INIT, RTR and RTS).
struct Path {
  Mtu mtu = Mtu::M1024;
  uint32_t sq_psn = 0, rq_psn = 0;
  uint32_t access = kRemoteWrite | kRemoteRead | kRemoteAtomic;  // the QP's qp_access_flags
  uint8_t timeout = 14, retry_cnt = 7, rnr_retry = 7;            // RC only
  uint8_t min_rnr_timer = 1;                                     // RC only
  uint8_t max_rd_atomic = 16;  // both directions' READ / atomic depth (RC only)
  uint8_t traffic_class = 0;   // in the address vector (DSCP << 2 | ECN)
  uint8_t sgid_index = 0;
  int dgid_index = -1;         // the peer's GID: -1 its config().gid, else its config().gids[i]
};

// Takes RC, UC or XRC QP q of d through INIT and RTR to RTS towards peer_qp of peer (with each
// type's attribute masks: an XRC initiator's RTR takes no responder resources or RNR timer, an
// XRC target's RTS no retry counts or READ/atomic limit). 0, or the errno of the first step the
// engine refused.
inline int connect_qp(Device& d, Qp* q, const Device& peer, const Qp& peer_qp, const Path& p) {
  const QpType t = q->init_attr().qp_type;
  const bool responds = t == QpType::RC || t == QpType::XrcTgt;   // READ/atomic responder, RNR NAKs
  const bool requests = t == QpType::RC || t == QpType::XrcIni;   // retries, READ/atomic limit
  QpAttr a;
  a.qp_state = QpState::Init;
  a.qp_access_flags = p.access;
  if (int e = d.modify_qp(q, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags)) return e;
  a.qp_state = QpState::Rtr;
  a.path_mtu = p.mtu;
  a.dest_qp_num = peer_qp.qpn();
  a.rq_psn = p.rq_psn;
  a.max_dest_rd_atomic = p.max_rd_atomic;
  a.min_rnr_timer = p.min_rnr_timer;
  a.ah_attr.dgid = p.dgid_index < 0 ? peer.config().gid : peer.config().gids[size_t(p.dgid_index)];
  a.ah_attr.dmac = peer.config().mac;
  a.ah_attr.traffic_class = p.traffic_class;
  a.ah_attr.sgid_index = p.sgid_index;
  uint32_t m = kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn;
  if (responds) m |= kAttrMaxDestRdAtomic | kAttrMinRnrTimer;
  if (int e = d.modify_qp(q, a, m)) return e;
  a.qp_state = QpState::Rts;
  a.sq_psn = p.sq_psn;
  a.timeout = p.timeout;
  a.retry_cnt = p.retry_cnt;
  a.rnr_retry = p.rnr_retry;
  a.max_rd_atomic = p.max_rd_atomic;
  m = kAttrState | kAttrSqPsn;
  if (t != QpType::UC) m |= kAttrTimeout;
  if (requests) m |= kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic;
  return d.modify_qp(q, a, m);
}

// Takes UD QP q of d through INIT (with its Q_Key) and RTR to RTS. 0, or the errno of the first
// step the engine refused.
inline int ud_up(Device& d, Qp* q, uint32_t qkey, uint32_t sq_psn) {
  QpAttr a;
  a.qp_state = QpState::Init;
  a.qkey = qkey;
  if (int e = d.modify_qp(q, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrQkey)) return e;
  a.qp_state = QpState::Rtr;
  if (int e = d.modify_qp(q, a, kAttrState)) return e;
  a.qp_state = QpState::Rts;
  a.sq_psn = sq_psn;
  return d.modify_qp(q, a, kAttrState | kAttrSqPsn);
}

struct Endpoint {
  std::unique_ptr<Device> dev;
  Pd* pd = nullptr;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  Qp* qp = nullptr;
  std::vector<uint8_t> mem;  // registered buffer, with canary bytes around the MR
  Mr* mr = nullptr;
  Ah* ah = nullptr;          // UD: to the peer
  Xrcd* xrcd = nullptr;      // XRC pair, end b: its domain and the XRC SRQ its target QP serves
  Srq* srq = nullptr;        // (receive completions on rcq)
  static constexpr size_t kCanary = 64;
  uint8_t* buf() { return mem.data() + kCanary; }
  size_t buf_len() const { return mem.size() - 2 * kCanary; }
  uint64_t addr() { return reinterpret_cast<uintptr_t>(buf()); }
  // The attributes of a new QP of `type` on this end's PD and CQs (the engine's default caps).
  QpInitAttr init_attr(QpType type = QpType::RC) const {
    QpInitAttr ia;
    ia.pd = pd;
    ia.send_cq = scq;
    ia.recv_cq = rcq;
    ia.qp_type = type;
    return ia;
  }
};

struct PairOptions {
  Mtu mtu = Mtu::M1024;
  QpType qp_type = QpType::RC;
  size_t mem = 1 << 20;
  uint32_t max_send_wr = 256;
  uint32_t max_recv_wr = 256;
  uint32_t max_inline_data = 256;
  uint32_t cq_depth = 4096;
  bool one_cq = false;        // one CQ per end for sends and receives (scq == rcq)
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;
  uint8_t max_rd_atomic = 16;
  uint32_t access = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic;  // the MRs'
  uint32_t qp_access = kRemoteWrite | kRemoteRead | kRemoteAtomic;              // the QPs'
  uint32_t sq_psn_a = 0x100, sq_psn_b = 0x200;
  uint32_t qkey = 0x11111111;  // UD: both QPs' Q_Key
  uint64_t seed = 1;
  uint32_t wire_frames = 16384;
  uint32_t frame_cap = 9216;
  uint8_t traffic_class = 0;  // in both QPs' address vectors (DSCP << 2 | ECN)
  bool endpoints = true;      // false: the two Devices alone (no PD, CQ, MR or QP)
  // Last changes to each device's config before it is created (ECN, CNP interval, addresses).
  std::function<void(Device::Config&)> config_a, config_b;
};

class ConnectedPair {
 public:
  explicit ConnectedPair(const PairOptions& o = {}) : opt(o), wire(o.wire_frames, o.frame_cap, o.seed) {
    Device::Config ca, cb;
    ca.seed = 2 * o.seed + 1;  // keys and QP numbers are random, but reproducible in a test
    cb.seed = 2 * o.seed + 2;
    ca.mac = {0x02, 0, 0, 0, 0, 0x0a};
    cb.mac = {0x02, 0, 0, 0, 0, 0x0b};
    ca.gid = v4gid(198, 18, 0, 10);
    cb.gid = v4gid(198, 18, 0, 11);
    if (o.config_a) o.config_a(ca);
    if (o.config_b) o.config_b(cb);
    a.dev = std::make_unique<Device>(wire.a(), wire.clock(), ca);
    b.dev = std::make_unique<Device>(wire.b(), wire.clock(), cb);
    if (!o.endpoints) return;
    for (Endpoint* e : {&a, &b}) {
      e->pd = e->dev->alloc_pd();
      e->scq = e->dev->create_cq(o.cq_depth);
      e->rcq = o.one_cq ? e->scq : e->dev->create_cq(o.cq_depth);
      e->mem.assign(o.mem + 2 * Endpoint::kCanary, 0xCC);
      e->mr = e->dev->reg_mr(e->pd, e->buf(), o.mem, o.access);
      QpInitAttr ia = e->init_attr(o.qp_type);
      ia.cap.max_send_wr = o.max_send_wr;
      ia.cap.max_recv_wr = o.max_recv_wr;
      ia.cap.max_inline_data = o.max_inline_data;
      if (o.qp_type == QpType::XrcIni) {  // XRC: an initiator on a; on b a target QP and an XRC SRQ
        ia.recv_cq = nullptr;
        ia.cap.max_recv_wr = 0;
        if (e == &b) {
          e->xrcd = e->dev->alloc_xrcd();
          e->srq = e->xrcd ? e->dev->create_xrc_srq(e->pd, e->xrcd, e->rcq, o.max_recv_wr, 4) : nullptr;
          ia = QpInitAttr{};
          ia.qp_type = QpType::XrcTgt;
          ia.xrcd = e->xrcd;
        }
      }
      e->qp = e->dev->create_qp(ia);
      if (!e->qp) fail(ENOMEM, "create_qp");
    }
    if (!a.qp || !b.qp) return;
    if (o.qp_type == QpType::UD) {
      fail(ud_up(*a.dev, a.qp, o.qkey, o.sq_psn_a), "UD QP a to RTS");
      fail(ud_up(*b.dev, b.qp, o.qkey, o.sq_psn_b), "UD QP b to RTS");
      for (Endpoint* e : {&a, &b}) {
        const Endpoint& peer = e == &a ? b : a;
        AddressVector av;
        av.dgid = peer.dev->config().gid;
        av.dmac = peer.dev->config().mac;
        av.traffic_class = o.traffic_class;
        e->ah = e->dev->create_ah(e->pd, av);
        if (!e->ah) fail(EINVAL, "create_ah");
      }
      return;
    }
    fail(connect_qp(*a.dev, a.qp, *b.dev, *b.qp, path(o.sq_psn_a, o.sq_psn_b)), "QP a to RTS");
    fail(connect_qp(*b.dev, b.qp, *a.dev, *a.qp, path(o.sq_psn_b, o.sq_psn_a)), "QP b to RTS");
  }

  // The path of the options, from one end's send PSN and its peer's.
  Path path(uint32_t my_psn, uint32_t peer_psn) const {
    Path p;
    p.mtu = opt.mtu;
    p.sq_psn = my_psn;
    p.rq_psn = peer_psn;
    p.access = opt.qp_access;
    p.timeout = opt.timeout;
    p.retry_cnt = opt.retry_cnt;
    p.rnr_retry = opt.rnr_retry;
    p.min_rnr_timer = opt.min_rnr_timer;
    p.max_rd_atomic = opt.max_rd_atomic;
    p.traffic_class = opt.traffic_class;
    return p;
  }

  Endpoint& end(int side) { return side ? b : a; }
  FakeLink& link(int side) { return side ? wire.b() : wire.a(); }

  // Polls both ends until pred() holds. Virtual time advances when both are idle. Returns
  // false if max_ns of virtual time or max_rounds polls pass first.
  bool run_until(const std::function<bool()>& pred, uint64_t max_ns = 10'000'000'000ull, uint64_t max_rounds = 50'000'000) {
    const uint64_t start = wire.clock().now_ns();
    for (uint64_t i = 0; i < max_rounds; ++i) {
      if (pred()) return true;
      bool did = a.dev->progress();
      did |= b.dev->progress();
      if (!did) {
        uint64_t due = std::min({wire.next_due(), a.dev->next_timer_due(), b.dev->next_timer_due()});
        uint64_t now = wire.clock().now_ns();
        uint64_t step = 1000;
        if (due != UINT64_MAX && due > now) step = due - now;
        else if (due == UINT64_MAX) step = 10'000;
        wire.clock().advance(step);
      }
      if (wire.clock().now_ns() - start > max_ns) return pred();
    }
    return pred();
  }

  // Polls one completion from cq (running the engines as needed).
  bool next_wc(Cq* cq, Wc& wc, uint64_t max_ns = 10'000'000'000ull) {
    bool got = false;
    run_until([&] { return got || (got = cq->poll(&wc, 1) == 1); }, max_ns);
    return got;
  }

  PairOptions opt;
  FakeWire wire;
  Endpoint a, b;
  // 0 when the whole set-up succeeded; else the errno of the first step that failed, which
  // failed_step names.
  int setup_error = 0;
  const char* failed_step = "";

 private:
  void fail(int err, const char* step) {
    if (err && !setup_error) setup_error = err, failed_step = step;
  }
};

// Fills n bytes at p with a pseudo-random pattern of seed (the same bytes for the same seed).
inline void fill_pattern(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    p[i] = uint8_t(x >> 16);
  }
}

// A frame as `from`'s QP would send it to `to`'s QP (addresses, QPN; the caller sets the
// opcode's fields), for tests that forge traffic with a valid ICRC.
inline proto::Packet forge(const Endpoint& from, const Endpoint& to, uint8_t opcode, uint32_t psn) {
  proto::Packet p;
  p.eth_src = from.dev->config().mac;
  p.eth_dst = to.dev->config().mac;
  std::memcpy(p.ip_src.data(), from.dev->config().gid.data() + 12, 4);
  std::memcpy(p.ip_dst.data(), to.dev->config().gid.data() + 12, 4);
  p.opcode = opcode;
  p.dest_qp = to.qp->qpn();
  p.psn = psn;
  p.ack_req = true;
  return p;
}

// A type 2 memory window on `side`'s PD, bound by its QP over [off, off + len) of its buffer
// with remote read and write (the MR needs kMwBind: PairOptions::access), for a peer's SEND with
// Invalidate or its RDMA through the window. Its R_Key, or 0 if the bind failed.
inline uint32_t bound_window(ConnectedPair& pr, int side, uint64_t off = 0, uint64_t len = 4096) {
  Endpoint& e = pr.end(side);
  Mw* mw = e.dev->alloc_mw(e.pd, 2);
  if (!mw) return 0;
  SendWr w;
  w.wr_id = 0xB1D;
  w.opcode = WrOpcode::BindMw;
  w.send_flags = kSendSignaled;
  w.invalidate_rkey = mw->rkey;
  w.rkey = (mw->rkey & ~0xFFu) | ((mw->rkey + 1) & 0xFF);
  w.remote_addr = e.addr() + off;
  w.compare_add = len;
  w.swap = uint64_t(e.mr->lkey) | uint64_t(kRemoteRead | kRemoteWrite) << 32;
  if (e.dev->post_send(e.qp, w)) return 0;
  Wc wc;
  if (!pr.next_wc(e.scq, wc) || wc.status != WcStatus::Success || wc.wr_id != 0xB1D) return 0;
  return mw->rkey;
}

// A signaled work request of `op` (a SEND unless named) from the one SGE `sge`.
inline SendWr signaled_wr(uint64_t id, const Sge* sge, WrOpcode op = WrOpcode::Send) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.send_flags = kSendSignaled;
  wr.sg_list = sge;
  wr.num_sge = 1;
  return wr;
}

// A UD send of one SGE to `qpn` through `ah`.
inline SendWr ud_wr(const Sge* s, const Ah* ah, uint32_t qpn, uint32_t qkey, WrOpcode op = WrOpcode::Send) {
  SendWr w;
  w.opcode = op;
  w.sg_list = s;
  w.num_sge = 1;
  w.ah = ah;
  w.remote_qpn = qpn;
  w.remote_qkey = qkey;
  return w;
}

// A signaled work request of `op` from `sge` to the start of `peer`'s registered buffer.
inline SendWr wr_to(const Endpoint& peer, uint64_t id, WrOpcode op, const Sge* sge) {
  SendWr wr = signaled_wr(id, sge, op);
  wr.remote_addr = reinterpret_cast<uintptr_t>(peer.mem.data() + Endpoint::kCanary);
  wr.rkey = peer.mr->rkey;
  return wr;
}

inline bool canaries_intact(const Endpoint& e) {
  for (size_t i = 0; i < Endpoint::kCanary; ++i)
    if (e.mem[i] != 0xCC || e.mem[e.mem.size() - 1 - i] != 0xCC) return false;
  return true;
}

}  // namespace uroce::test
