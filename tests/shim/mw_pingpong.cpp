// mw_pingpong: memory windows through the plain libibverbs API, two processes (run each with
// scripts/uroce-run; the shim-mw test runs them over the veth pair). The server allocates a
// type 2 window and binds it with an IBV_WR_BIND_MW work request, allocates a type 1 window and
// binds it with ibv_bind_mw, and sends both keys to the client over TCP. The client WRITEs
// through the type 2 window and READs through the type 1 window, then sends a SEND with
// Invalidate naming the type 2 window; the server sees the invalidated key in its receive
// completion, and the client's next WRITE through that key fails with a remote access error.
// Every byte is checked on both sides; the server checks that its MR cannot be deregistered
// while a window is bound to it, and can be once the windows are freed.
//
//   server: mw_pingpong [--port N] [-d DEVICE] [-g GID_INDEX]
//   client: mw_pingpong [--port N] [-d DEVICE] [-g GID_INDEX] SERVER_IP
// The interop matrix runs it against Linux rxe (the lab's guest gets this binary: it is linked
// with libstdc++ and libgcc statically, the guest has only the C libraries).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/shim/two_sides.hpp"

namespace {

using shim_test::fail;
using shim_test::xfer;

constexpr size_t kBuf = 1 << 20;
constexpr size_t kWin2 = 65536, kWin1 = 131072, kWinLen = 4096;  // the windows' offsets in the server's buffer
int g_gid_index = 1;  // -g: the GID index both sides send from (uroce's and rxe's IPv4 GID)

struct Info {
  uint32_t qpn, psn;
  uint64_t addr;
  uint8_t gid[16];
  uint32_t rkey2, rkey1;  // the server's windows (type 2, type 1)
};

uint8_t pattern(size_t i) { return uint8_t(i * 31 + 7); }

struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buf = nullptr;

  ibv_wc wait(const char* what) {
    ibv_wc wc{};
    for (long spins = 0;; ++spins) {
      int k = ibv_poll_cq(cq, 1, &wc);
      if (k < 0) fail("%s: ibv_poll_cq %d", what, k);
      if (k == 1) return wc;
      if (spins > 300000000L) fail("%s: no completion", what);
    }
  }
  ibv_wc wait_ok(const char* what, ibv_wc_opcode op) {
    ibv_wc wc = wait(what);
    if (wc.status != IBV_WC_SUCCESS) fail("%s: status %s", what, ibv_wc_status_str(wc.status));
    if (wc.opcode != op) fail("%s: opcode %d, expected %d", what, int(wc.opcode), int(op));
    return wc;
  }
  void post(ibv_send_wr& wr, const char* what) {
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(qp, &wr, &bad)) fail("%s: ibv_post_send %s", what, std::strerror(rc));
  }
  // A signaled work request of `op` from `len` bytes at local offset `loff` (`sge` holds them).
  ibv_send_wr signaled(ibv_wr_opcode op, ibv_sge& sge, size_t loff, size_t len, uint64_t id) {
    sge = {reinterpret_cast<uintptr_t>(buf + loff), uint32_t(len), mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return wr;
  }
  // One RDMA WRITE or READ of kWinLen bytes at local offset `loff`, through `rkey` at `raddr`.
  ibv_wc rdma(ibv_wr_opcode op, size_t loff, uint64_t raddr, uint32_t rkey, const char* what) {
    ibv_sge s;
    ibv_send_wr wr = signaled(op, s, loff, kWinLen, 7);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    post(wr, what);
    return wait(what);
  }
};

void connect_qp(Side& s, const Info& peer, uint32_t my_psn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(s.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) fail("INIT");
  shim_test::to_rts(s.qp, IBV_MTU_1024, peer.qpn, peer.psn, peer.gid, g_gid_index, my_psn, 4);
}

}  // namespace

int main(int argc, char** argv) {
  const shim_test::Args args = shim_test::parse_args(argc, argv, 18620);
  const bool server = args.server();
  Side s;
  if (args.gid >= 0) g_gid_index = args.gid;
  s.ctx = shim_test::open_first_device(args.dev);
  ibv_device_attr da{};
  if (ibv_query_device(s.ctx, &da)) fail("ibv_query_device");
  if (!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) || !(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) ||
      da.max_mw <= 0)
    fail("the device announces no memory windows (flags 0x%x, max_mw %d)", da.device_cap_flags, da.max_mw);
  s.pd = ibv_alloc_pd(s.ctx);
  s.buf = static_cast<uint8_t*>(aligned_alloc(4096, kBuf));
  for (size_t i = 0; i < kBuf; ++i) s.buf[i] = server ? pattern(i) : uint8_t(i * 13 + 1);
  s.mr = ibv_reg_mr(s.pd, s.buf, kBuf,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
  s.cq = ibv_create_cq(s.ctx, 64, nullptr, nullptr, 0);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = s.cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  s.qp = s.pd && s.mr && s.cq ? ibv_create_qp(s.pd, &ia) : nullptr;
  if (!s.qp) fail("pd/mr/cq/qp: %s", std::strerror(errno));

  const int fd = shim_test::tcp_connect(args.port, args.peer);
  Info mine{}, theirs{};
  mine.qpn = s.qp->qp_num;
  mine.psn = server ? 0x111111 : 0x222222;
  mine.addr = reinterpret_cast<uintptr_t>(s.buf);
  ibv_gid gid;
  if (ibv_query_gid(s.ctx, 1, g_gid_index, &gid)) fail("ibv_query_gid");
  std::memcpy(mine.gid, gid.raw, 16);
  xfer(fd, &mine, offsetof(Info, rkey2), true);
  xfer(fd, &theirs, offsetof(Info, rkey2), false);
  connect_qp(s, theirs, mine.psn);
  char sync = 0;

  if (server) {
    // A receive for the client's SEND with Invalidate.
    ibv_sge rs{reinterpret_cast<uintptr_t>(s.buf + 900000), 64, s.mr->lkey};
    ibv_recv_wr rw{}, *rbad;
    rw.wr_id = 50;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    if (ibv_post_recv(s.qp, &rw, &rbad)) fail("ibv_post_recv");
    // Type 2: bound by a work request on our QP (the client's requests come on it).
    ibv_mw* mw2 = ibv_alloc_mw(s.pd, IBV_MW_TYPE_2);
    if (!mw2) fail("ibv_alloc_mw(type 2): %s", std::strerror(errno));
    ibv_send_wr bw{};
    bw.wr_id = 60;
    bw.opcode = IBV_WR_BIND_MW;
    bw.send_flags = IBV_SEND_SIGNALED;
    bw.bind_mw.mw = mw2;
    bw.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
    bw.bind_mw.bind_info.mr = s.mr;
    bw.bind_mw.bind_info.addr = reinterpret_cast<uintptr_t>(s.buf + kWin2);
    bw.bind_mw.bind_info.length = kWinLen;
    bw.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    s.post(bw, "BIND_MW (type 2)");
    s.wait_ok("BIND_MW (type 2)", IBV_WC_BIND_MW);
    const uint32_t key2 = bw.bind_mw.rkey;
    // Type 1: ibv_bind_mw, read only.
    ibv_mw* mw1 = ibv_alloc_mw(s.pd, IBV_MW_TYPE_1);
    if (!mw1) fail("ibv_alloc_mw(type 1): %s", std::strerror(errno));
    ibv_mw_bind mb{};
    mb.wr_id = 61;
    mb.send_flags = IBV_SEND_SIGNALED;
    mb.bind_info.mr = s.mr;
    mb.bind_info.addr = reinterpret_cast<uintptr_t>(s.buf + kWin1);
    mb.bind_info.length = kWinLen;
    mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
    const uint32_t before = mw1->rkey;
    if (int rc = ibv_bind_mw(s.qp, mw1, &mb)) fail("ibv_bind_mw: %s", std::strerror(rc));
    if (mw1->rkey != ibv_inc_rkey(before)) fail("ibv_bind_mw left the rkey at 0x%x", mw1->rkey);
    s.wait_ok("ibv_bind_mw (type 1)", IBV_WC_BIND_MW);
    std::printf("verified binds: type 2 key 0x%08x, type 1 key 0x%08x (MR rkey 0x%08x)\n", key2, mw1->rkey,
                s.mr->rkey);
    if (ibv_dereg_mr(s.mr) == 0) fail("an MR with bound windows was deregistered");
    std::printf("verified: ibv_dereg_mr refused while windows are bound\n");
    mine.rkey2 = key2;
    mine.rkey1 = mw1->rkey;
    xfer(fd, &mine.rkey2, 8, true);
    // The client wrote through the type 2 window and read through the type 1 window.
    xfer(fd, &sync, 1, false);
    for (size_t i = 0; i < kWinLen; ++i)
      if (s.buf[kWin2 + i] != uint8_t(i * 13 + 1)) fail("window 2 byte %zu is 0x%02x", i, s.buf[kWin2 + i]);
    if (s.buf[kWin2 - 1] != pattern(kWin2 - 1) || s.buf[kWin2 + kWinLen] != pattern(kWin2 + kWinLen))
      fail("a byte beside window 2 changed");
    std::printf("verified WRITE through the type 2 window: %zu bytes, nothing beside it\n", kWinLen);
    ibv_wc wc = s.wait("SEND with Invalidate");
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.wr_id != 50)
      fail("receive: status %s opcode %d", ibv_wc_status_str(wc.status), int(wc.opcode));
    // rxe writes the CQEs of a user CQ with the kernel's flag values (rxe_resp.c, do_complete):
    // its IB_WC_WITH_INVALIDATE is 1 << 2, which libibverbs calls IBV_WC_IP_CSUM_OK. Taken as
    // the invalidation flag on rxe only, and said.
    const bool rxe = std::strncmp(ibv_get_device_name(s.ctx->device), "rxe", 3) == 0;
    const bool rxe_flag = rxe && !(wc.wc_flags & IBV_WC_WITH_INV) && (wc.wc_flags & (1u << 2));
    if (!((wc.wc_flags & IBV_WC_WITH_INV) || rxe_flag) || wc.invalidated_rkey != key2)
      fail("receive: flags 0x%x, invalidated 0x%x, expected 0x%x", wc.wc_flags, wc.invalidated_rkey, key2);
    if (rxe_flag)
      std::printf("note: rxe reports the invalidation with the kernel's flag bit (wc_flags 0x%x: 1 << 2, "
                  "IBV_WC_IP_CSUM_OK to libibverbs, not IBV_WC_WITH_INV)\n", wc.wc_flags);
    std::printf("verified SEND with Invalidate: window 0x%08x invalidated\n", key2);
    sync = 'I';
    xfer(fd, &sync, 1, true);
    xfer(fd, &sync, 1, false);  // the client's WRITE through the old key was refused
    if (sync != 'R') fail("the client's WRITE through the invalidated window was not refused");
    if (ibv_dealloc_mw(mw2) || ibv_dealloc_mw(mw1)) fail("ibv_dealloc_mw");
    if (ibv_dereg_mr(s.mr)) fail("ibv_dereg_mr after the windows were freed");
    std::printf("verified: windows freed, MR deregistered\n");
  } else {
    xfer(fd, &theirs.rkey2, 8, false);
    const uint64_t w2 = theirs.addr + kWin2, w1 = theirs.addr + kWin1;
    ibv_wc wc = s.rdma(IBV_WR_RDMA_WRITE, 0, w2, theirs.rkey2, "WRITE through the type 2 window");
    if (wc.status != IBV_WC_SUCCESS) fail("WRITE through the type 2 window: %s", ibv_wc_status_str(wc.status));
    wc = s.rdma(IBV_WR_RDMA_READ, 8192, w1, theirs.rkey1, "READ through the type 1 window");
    if (wc.status != IBV_WC_SUCCESS) fail("READ through the type 1 window: %s", ibv_wc_status_str(wc.status));
    for (size_t i = 0; i < kWinLen; ++i)
      if (s.buf[8192 + i] != pattern(kWin1 + i)) fail("READ byte %zu is 0x%02x", i, s.buf[8192 + i]);
    std::printf("verified READ through the type 1 window: %zu bytes\n", kWinLen);
    xfer(fd, &sync, 1, true);
    ibv_sge ss;
    ibv_send_wr sw = s.signaled(IBV_WR_SEND_WITH_INV, ss, 0, 64, 8);
    sw.invalidate_rkey = theirs.rkey2;
    s.post(sw, "SEND with Invalidate");
    s.wait_ok("SEND with Invalidate", IBV_WC_SEND);
    xfer(fd, &sync, 1, false);
    if (sync != 'I') fail("the server did not see the invalidation");
    wc = s.rdma(IBV_WR_RDMA_WRITE, 0, w2, theirs.rkey2, "WRITE through the invalidated window");
    if (wc.status != IBV_WC_REM_ACCESS_ERR)
      fail("WRITE through the invalidated window: %s, expected remote access error", ibv_wc_status_str(wc.status));
    std::printf("verified: WRITE through the invalidated window refused (%s)\n", ibv_wc_status_str(wc.status));
    sync = 'R';
    xfer(fd, &sync, 1, true);
  }
  close(fd);
  std::printf("PASS (%s)\n", server ? "server" : "client");
  return 0;
}
