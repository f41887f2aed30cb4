// shim_data_test: two processes, each on its own uroce device through liburoce-verbs.so and the
// plain libibverbs API only (run with scripts/uroce-run). The client writes, sends, reads and
// runs atomics against the server, then an ATOMIC WRITE and a FLUSH (IBA 1.5) through the
// ibv_wr_* API; both sides check the data byte for byte. Before connecting, each side checks
// that illegal RTR transitions fail with EINVAL at once.
//
//   server: shim_data_test [--port N]
//   client: shim_data_test [--port N] SERVER_IP
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "tests/shim/two_sides.hpp"

namespace {

using shim_test::fail;
using shim_test::xfer;

constexpr size_t kBuf = 4 << 20;
constexpr uint32_t kGidIndex = 1;

// IBA 1.5's FLUSH as rdma-core 45 and later declare it (Debian 12's rdma-core 44 headers lack
// it): the values, and wr_flush right after wr_atomic_write in struct ibv_qp_ex. A program built
// against a newer rdma-core calls it there; so does this one.
constexpr int kWcFlush = 8;                              // IBV_WC_FLUSH
constexpr uint64_t kQpExWithFlush = 1 << 11;             // IBV_QP_EX_WITH_FLUSH
constexpr unsigned kAccessFlushGlobal = 1 << 8;          // IBV_ACCESS_FLUSH_GLOBAL
constexpr unsigned kAccessFlushPersistent = 1 << 9;      // IBV_ACCESS_FLUSH_PERSISTENT
constexpr uint64_t kDeviceFlushGlobal = 1ULL << 38;      // IB_UVERBS_DEVICE_FLUSH_GLOBAL
constexpr uint64_t kDeviceFlushPersistent = 1ULL << 39;  // IB_UVERBS_DEVICE_FLUSH_PERSISTENT
constexpr uint64_t kDeviceAtomicWrite = 1ULL << 40;      // IB_UVERBS_DEVICE_ATOMIC_WRITE
constexpr uint8_t kFlushPersistent = 2, kFlushRange = 0;  // IBV_FLUSH_PERSISTENT, IBV_FLUSH_RANGE
struct QpEx45 {
  ibv_qp_ex base;
  void (*wr_flush)(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, size_t len, uint8_t type, uint8_t level);
};

struct Info {
  uint32_t qpn, psn, rkey, pad;
  uint64_t addr;
  uint8_t gid[16];
};

void pattern(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 7;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p[i] = uint8_t(x);
  }
}

struct Ctx {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buf = nullptr;

  ibv_wc wait(uint32_t n_expected_opcode_any = 1) {
    ibv_wc wc{};
    (void)n_expected_opcode_any;
    for (long spins = 0;; ++spins) {
      int k = ibv_poll_cq(cq, 1, &wc);
      if (k < 0) fail("ibv_poll_cq: %d", k);
      if (k == 1) break;
      if (spins > 200000000L) fail("no completion");
    }
    if (wc.status != IBV_WC_SUCCESS)
      fail("completion wr_id %lu status %s", (unsigned long)wc.wr_id, ibv_wc_status_str(wc.status));
    return wc;
  }
};

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// An RTR modify towards a peer that does not exist (nobody answers ARP for 198.18.0.99): when
// the transition or the mask is illegal, the shim must say EINVAL at once, before any address
// resolution (which would take the link's ARP timeout and end in ETIMEDOUT).
void expect_rtr_refused(ibv_qp* qp, ibv_mtu mtu, int mask, const char* what) {
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = mtu;
  at.dest_qp_num = 0x12;
  at.max_dest_rd_atomic = 1;
  at.min_rnr_timer = 12;
  at.ah_attr.is_global = 1;
  const uint8_t ghost[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 198, 18, 0, 99};
  std::memcpy(at.ah_attr.grh.dgid.raw, ghost, 16);
  at.ah_attr.grh.sgid_index = kGidIndex;
  at.ah_attr.grh.hop_limit = 64;
  at.ah_attr.port_num = 1;
  double t0 = now_s();
  int rc = ibv_modify_qp(qp, &at, mask);
  double dt = now_s() - t0;
  if (rc != EINVAL) fail("%s: ibv_modify_qp gave %d (%s), expected EINVAL", what, rc, std::strerror(rc));
  if (dt > 0.5) fail("%s: EINVAL after %.3f s, expected at once", what, dt);
  std::printf("verified %s: EINVAL in %.1f ms\n", what, dt * 1e3);
}

constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;

void compare(const uint8_t* got, const uint8_t* want, size_t n, const char* what) {
  for (size_t i = 0; i < n; ++i)
    if (got[i] != want[i]) fail("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, got[i], want[i]);
  std::printf("verified %s: %zu bytes\n", what, n);
}

// The attributes of an RC QP on `cq` (send and receive) with `wr` work requests of `sge` SGEs
// each way.
ibv_qp_init_attr rc_attr(ibv_cq* cq, uint32_t wr, uint32_t sge) {
  ibv_qp_init_attr ia{};
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = wr;
  ia.cap.max_recv_wr = wr;
  ia.cap.max_send_sge = sge;
  ia.cap.max_recv_sge = sge;
  return ia;
}

}  // namespace

// Loopback: two RC QPs of this one device, connected to each other through the device's own
// GID, as ConnectX and rxe allow. A WRITE from one into memory the other registered must land,
// with no address resolution of our own address (it used to fail in RTR with ETIMEDOUT).
void loopback(Ctx& c, ibv_mtu mtu) {
  ibv_qp_init_attr ia = rc_attr(c.cq, 8, 1);
  ibv_qp* q[2] = {ibv_create_qp(c.pd, &ia), ibv_create_qp(c.pd, &ia)};
  if (!q[0] || !q[1]) fail("loopback: ibv_create_qp: %s", std::strerror(errno));
  ibv_gid own;
  if (ibv_query_gid(c.ctx, 1, 1, &own)) fail("loopback: ibv_query_gid");
  for (int i = 0; i < 2; ++i) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(q[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      fail("loopback: INIT");
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = q[1 - i]->qp_num;
    a.rq_psn = 7;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.dgid = own;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 64;
    const double t0 = now_s();
    int rc = ibv_modify_qp(q[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc) fail("loopback: RTR: %s", std::strerror(rc));
    if (now_s() - t0 > 0.5) fail("loopback: RTR took %.3f s (resolved our own address?)", now_s() - t0);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 7;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(q[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                    IBV_QP_MAX_QP_RD_ATOMIC))
      fail("loopback: RTS");
  }
  uint8_t* src = c.buf + 300000;
  uint8_t* dst = c.buf + 400000;
  pattern(src, 9000, 77);
  std::memset(dst, 0, 9000);
  ibv_sge sge{reinterpret_cast<uintptr_t>(src), 9000, c.mr->lkey};
  ibv_send_wr wr{}, *bad;
  wr.wr_id = 4242;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst);
  wr.wr.rdma.rkey = c.mr->rkey;
  if (ibv_post_send(q[0], &wr, &bad)) fail("loopback: post WRITE");
  ibv_wc wc = c.wait();
  if (wc.wr_id != 4242) fail("loopback: completion for wr_id %lu", (unsigned long)wc.wr_id);
  compare(dst, src, 9000, "loopback WRITE");
  ibv_destroy_qp(q[0]);
  ibv_destroy_qp(q[1]);
  std::printf("loopback: 9000-byte WRITE between two QPs of %s: ok\n", ibv_get_device_name(c.ctx->device));
}

int main(int argc, char** argv) {
  const shim_test::Args args = shim_test::parse_args(argc, argv, 18600);
  const std::string& peer = args.peer;
  const int port = args.port;
  const bool server = args.server();
  Ctx c;
  c.ctx = shim_test::open_first_device();
  ibv_port_attr pa{};
  if (ibv_query_port(c.ctx, 1, &pa)) fail("ibv_query_port");
  if (pa.link_layer != IBV_LINK_LAYER_ETHERNET || pa.state != IBV_PORT_ACTIVE) fail("port attributes");
  c.pd = ibv_alloc_pd(c.ctx);
  c.buf = static_cast<uint8_t*>(aligned_alloc(4096, kBuf));
  std::memset(c.buf, 0, kBuf);
  c.mr = ibv_reg_mr(c.pd, c.buf, kBuf,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC | kAccessFlushGlobal | kAccessFlushPersistent);
  c.cq = ibv_create_cq(c.ctx, 256, nullptr, nullptr, 0);
  if (!c.pd || !c.mr || !c.cq) fail("pd/mr/cq: %s", std::strerror(errno));
  // The device announces IBA 1.5's placement operations, as rxe does since Linux 6.2.
  ibv_device_attr_ex dx{};
  if (ibv_query_device_ex(c.ctx, nullptr, &dx)) fail("ibv_query_device_ex");
  const uint64_t a15 = kDeviceFlushGlobal | kDeviceFlushPersistent | kDeviceAtomicWrite;
  if ((dx.device_cap_flags_ex & a15) != a15)
    fail("device_cap_flags_ex 0x%llx lacks FLUSH/ATOMIC WRITE", (unsigned long long)dx.device_cap_flags_ex);
  ibv_qp_init_attr ia = rc_attr(c.cq, 64, 4);
  // An extended QP: ibv_post_send and the ibv_wr_* builder, ATOMIC WRITE and FLUSH included.
  ibv_qp_init_attr_ex iax{};
  iax.send_cq = iax.recv_cq = c.cq;
  iax.qp_type = IBV_QPT_RC;
  iax.cap = ia.cap;
  iax.pd = c.pd;
  iax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  iax.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_WRITE | kQpExWithFlush;
  c.qp = ibv_create_qp_ex(c.ctx, &iax);
  if (!c.qp) fail("ibv_create_qp_ex: %s", std::strerror(errno));
  // A UD QP is created; a raw packet QP (not a RoCE transport) is refused cleanly.
  ibv_qp_init_attr ud = ia;
  ud.qp_type = IBV_QPT_UD;
  ibv_qp* udq = ibv_create_qp(c.pd, &ud);
  if (!udq || udq->qp_type != IBV_QPT_UD) fail("UD QP not created: %s", std::strerror(errno));
  ibv_destroy_qp(udq);
  ibv_qp_init_attr raw = ia;
  raw.qp_type = IBV_QPT_RAW_PACKET;
  errno = 0;
  if (ibv_create_qp(c.pd, &raw) || errno != EOPNOTSUPP) fail("raw packet QP not refused with EOPNOTSUPP");
  // Illegal: RESET -> RTR. The QP stays in RESET.
  expect_rtr_refused(c.qp, pa.active_mtu, kRtrMask, "RESET->RTR");
  loopback(c, pa.active_mtu);

  // TCP exchange.
  const int fd = shim_test::tcp_connect(port, server ? std::string() : peer);
  Info mine{}, theirs{};
  mine.qpn = c.qp->qp_num;
  mine.psn = server ? 0x123456 : 0x654321;
  mine.rkey = c.mr->rkey;
  mine.addr = reinterpret_cast<uintptr_t>(c.buf);
  ibv_gid gid;
  if (ibv_query_gid(c.ctx, 1, kGidIndex, &gid)) fail("ibv_query_gid");
  std::memcpy(mine.gid, gid.raw, 16);
  xfer(fd, &mine, sizeof mine, true);
  xfer(fd, &theirs, sizeof theirs, false);

  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.port_num = 1;
  at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                       kAccessFlushGlobal | kAccessFlushPersistent;
  if (ibv_modify_qp(c.qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    fail("INIT");
  // INIT -> RTR without a required attribute (RQ_PSN).
  expect_rtr_refused(c.qp, pa.active_mtu, kRtrMask & ~IBV_QP_RQ_PSN, "INIT->RTR without RQ_PSN");
  // Server: receives for the client's SENDs, posted in INIT, before RTR.
  if (server) {
    for (int i = 0; i < 2; ++i) {
      ibv_sge s{reinterpret_cast<uintptr_t>(c.buf + 3 * 1048576 + i * 262144), 262144, c.mr->lkey};
      ibv_recv_wr r{}, *bad;
      r.wr_id = 100 + i;
      r.sg_list = &s;
      r.num_sge = 1;
      if (ibv_post_recv(c.qp, &r, &bad)) fail("ibv_post_recv");
    }
  }
  shim_test::to_rts(c.qp, pa.active_mtu, theirs.qpn, theirs.psn, theirs.gid, kGidIndex, mine.psn, 16);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qia{};
  if (ibv_query_qp(c.qp, &qa, IBV_QP_STATE, &qia) || qa.qp_state != IBV_QPS_RTS || qa.dest_qp_num != theirs.qpn)
    fail("ibv_query_qp");
  char sync = 0;
  xfer(fd, &sync, 1, true);
  xfer(fd, &sync, 1, false);

  // Transfers: (offset, length) of WRITEs into the server's first MiB; SENDs land at 3 MiB.
  const size_t writes[][2] = {{0, 1}, {17, 4095}, {8192, 4097}, {20000, 100000}, {131072, 917504}};
  const size_t sends[] = {3000, 262144};
  std::vector<uint8_t> want(kBuf);
  pattern(want.data(), 2 << 20, 42);
  if (!server) {
    std::memcpy(c.buf, want.data(), 2 << 20);   // local source: the first 2 MiB
    uint64_t id = 1;
    for (auto& w : writes) {
      // Three SGEs for the larger ones: gathered from separate pieces of the source.
      ibv_sge s[3];
      int ns = w[1] > 3 ? 3 : 1;
      size_t part = w[1] / size_t(ns), off = 0;
      for (int i = 0; i < ns; ++i) {
        size_t len = i == ns - 1 ? w[1] - off : part;
        s[i] = {reinterpret_cast<uintptr_t>(c.buf + w[0] + off), uint32_t(len), c.mr->lkey};
        off += len;
      }
      ibv_send_wr wr{}, *bad;
      wr.wr_id = id++;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.sg_list = s;
      wr.num_sge = ns;
      wr.wr.rdma.remote_addr = theirs.addr + w[0];
      wr.wr.rdma.rkey = theirs.rkey;
      if (ibv_post_send(c.qp, &wr, &bad)) fail("post WRITE");
      c.wait();
    }
    for (size_t i = 0; i < 2; ++i) {
      ibv_sge s{reinterpret_cast<uintptr_t>(c.buf + 1048576 + i * 262144), uint32_t(sends[i]), c.mr->lkey};
      ibv_send_wr wr{}, *bad;
      wr.wr_id = 10 + i;
      wr.opcode = i ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
      wr.imm_data = htonl(0xC0FFEE);
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.sg_list = &s;
      wr.num_sge = 1;
      if (ibv_post_send(c.qp, &wr, &bad)) fail("post SEND");
      c.wait();
    }
    // READ back the server's first MiB (written above) into 2 MiB .. 3 MiB and compare.
    ibv_sge s{reinterpret_cast<uintptr_t>(c.buf + (2 << 20)), 1 << 20, c.mr->lkey};
    ibv_send_wr wr{}, *bad;
    wr.wr_id = 20;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = theirs.addr;
    wr.wr.rdma.rkey = theirs.rkey;
    if (ibv_post_send(c.qp, &wr, &bad)) fail("post READ");
    c.wait();
    std::vector<uint8_t> expect(1 << 20, 0);
    for (auto& w : writes) std::memcpy(expect.data() + w[0], want.data() + w[0], w[1]);
    compare(c.buf + (2 << 20), expect.data(), 1 << 20, "RDMA READ of the written region");
    // Atomics on the server's 8 bytes at 3.5 MiB (zero): FETCH_ADD 5, then CMP_SWAP 5 -> 77.
    uint64_t* res = reinterpret_cast<uint64_t*>(c.buf + (3 << 20) + 4096);
    ibv_sge as{reinterpret_cast<uintptr_t>(res), 8, c.mr->lkey};
    wr = {};
    wr.wr_id = 30;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &as;
    wr.num_sge = 1;
    wr.wr.atomic.remote_addr = theirs.addr + (7 << 19);
    wr.wr.atomic.rkey = theirs.rkey;
    wr.wr.atomic.compare_add = 5;
    if (ibv_post_send(c.qp, &wr, &bad)) fail("post FETCH_ADD");
    c.wait();
    if (*res != 0) fail("FETCH_ADD returned %lu", (unsigned long)*res);
    wr.wr_id = 31;
    wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    wr.wr.atomic.compare_add = 5;
    wr.wr.atomic.swap = 77;
    if (ibv_post_send(c.qp, &wr, &bad)) fail("post CMP_SWAP");
    c.wait();
    if (*res != 5) fail("CMP_SWAP returned %lu", (unsigned long)*res);
    std::printf("verified atomics: FETCH_ADD returned 0, CMP_SWAP returned 5\n");
    // IBA 1.5: an ATOMIC WRITE of 8 bytes (placed as given), then a FLUSH to persistence of the
    // range, both through the ibv_wr_* API; ibv_post_send has no place for them (EINVAL).
    wr = {};
    wr.opcode = IBV_WR_ATOMIC_WRITE;
    wr.sg_list = &as;
    wr.num_sge = 1;
    if (ibv_post_send(c.qp, &wr, &bad) != EINVAL) fail("ibv_post_send took an ATOMIC WRITE");
    ibv_qp_ex* qx = ibv_qp_to_qp_ex(c.qp);
    const uint8_t aw[8] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe};
    ibv_wr_start(qx);
    qx->wr_id = 40;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_write(qx, theirs.rkey, theirs.addr + (7 << 19) + 64, aw);
    qx->wr_id = 41;
    reinterpret_cast<QpEx45*>(qx)->wr_flush(qx, theirs.rkey, theirs.addr + (7 << 19), 128, kFlushPersistent,
                                            kFlushRange);
    if (int e = ibv_wr_complete(qx)) fail("ibv_wr_complete: %s", std::strerror(e));
    ibv_wc w1 = c.wait(), w2 = c.wait();
    if (w1.wr_id != 40 || w1.opcode != IBV_WC_ATOMIC_WRITE || w2.wr_id != 41 || int(w2.opcode) != kWcFlush)
      fail("placement completions: wr_id %lu opcode %d, wr_id %lu opcode %d", (unsigned long)w1.wr_id, int(w1.opcode),
           (unsigned long)w2.wr_id, int(w2.opcode));
    std::printf("verified ATOMIC WRITE and FLUSH completions (opcodes %d, %d)\n", int(w1.opcode), int(w2.opcode));
    xfer(fd, &sync, 1, true);   // done: the server checks its memory
    xfer(fd, &sync, 1, false);
    if (sync != 'P') fail("the server found wrong data");
  } else {
    // Two receive completions: the SEND and the SEND with immediate.
    for (int i = 0; i < 2; ++i) {
      ibv_wc wc = c.wait();
      if (wc.opcode != IBV_WC_RECV || wc.byte_len != sends[wc.wr_id - 100]) fail("receive completion");
      if (wc.wr_id == 101 && (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != 0xC0FFEE))
        fail("immediate data");
    }
    xfer(fd, &sync, 1, false);
    std::vector<uint8_t> expect(1 << 20, 0);
    for (auto& w : writes) std::memcpy(expect.data() + w[0], want.data() + w[0], w[1]);
    compare(c.buf, expect.data(), 1 << 20, "RDMA WRITEs in the server's buffer");
    for (int i = 0; i < 2; ++i)
      compare(c.buf + 3 * 1048576 + i * 262144, want.data() + 1048576 + i * 262144, sends[i], "SEND payload");
    uint64_t v;
    std::memcpy(&v, c.buf + (7 << 19), 8);
    if (v != 77) fail("atomic target is %lu, expected 77", (unsigned long)v);
    std::printf("verified atomic target: 77\n");
    const uint8_t aw[8] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe};
    compare(c.buf + (7 << 19) + 64, aw, 8, "ATOMIC WRITE target");
    sync = 'P';
    xfer(fd, &sync, 1, true);
  }
  close(fd);
  if (ibv_destroy_qp(c.qp) || ibv_destroy_cq(c.cq) || ibv_dereg_mr(c.mr) || ibv_dealloc_pd(c.pd) ||
      ibv_close_device(c.ctx))
    fail("teardown");
  std::printf("PASS (%s)\n", server ? "server" : "client");
  return 0;
}
