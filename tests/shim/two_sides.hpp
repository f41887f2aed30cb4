// What the two-process test programs of the shim (shim_data_test.cpp, soak.cpp, mw_pingpong.cpp)
// share: their command line, the device they open, failing with one line, and the TCP
// connection over which the two sides swap QP numbers and keys.
#pragma once
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace shim_test {

// Prints "FAIL: ..." on stdout and exits 1 at once: _exit, no destructors and no atexit handlers
// (other threads may still be inside the shim). UROCE_TEST_FAIL_EXIT=1 exits with exit(1)
// instead, so that the shim's exit handler prints its counters (UROCE_SHIM_STATS) for a failure
// being looked into.
[[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stdout, "FAIL: ");
  std::vfprintf(stdout, fmt, ap);
  std::fprintf(stdout, "\n");
  va_end(ap);
  std::fflush(stdout);
  const char* e = std::getenv("UROCE_TEST_FAIL_EXIT");
  if (e && *e == '1') std::exit(1);
  _exit(1);
}

// "[--port N | -p N] [-d DEVICE] [-g GID_INDEX] [SERVER_IP]": the server is the side without an
// address; -d and -g as perftest takes them (the interop matrix runs a program against another
// device so). Also makes stdout line buffered (the test driver reads both sides' output as they go).
struct Args {
  std::string peer;
  int port = 0;
  std::string dev;  // empty: the first device
  int gid = -1;     // -1: the program's own
  bool server() const { return peer.empty(); }
};
inline Args parse_args(int argc, char** argv, int default_port) {
  Args a;
  a.port = default_port;
  for (int i = 1; i < argc; ++i) {
    const bool more = i + 1 < argc;
    if ((!std::strcmp(argv[i], "--port") || !std::strcmp(argv[i], "-p")) && more) a.port = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "-d") && more) a.dev = argv[++i];
    else if (!std::strcmp(argv[i], "-g") && more) a.gid = std::atoi(argv[++i]);
    else a.peer = argv[i];
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return a;
}

// The device named `name`, or the first (uroce's under scripts/uroce-run), opened.
inline ibv_context* open_first_device(const std::string& name = "") {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) fail("no device (run under scripts/uroce-run)");
  int k = 0;
  while (!name.empty() && k < n && name != ibv_get_device_name(list[k])) ++k;
  if (k == n) fail("no device %s", name.c_str());
  ibv_context* ctx = ibv_open_device(list[k]);
  if (!ctx) fail("ibv_open_device: %s", std::strerror(errno));
  std::printf("device %s\n", ibv_get_device_name(list[k]));
  ibv_free_device_list(list);
  return ctx;
}

// An RC QP in INIT to RTR and RTS towards the peer's QP `dest_qpn` at GID `dgid` (from our
// GID `sgid_index`): it expects PSN `rq_psn`, sends from `sq_psn`, `rd_atomic` READs and atomics
// each way.
inline void to_rts(ibv_qp* qp, ibv_mtu mtu, uint32_t dest_qpn, uint32_t rq_psn, const uint8_t* dgid, int sgid_index,
                   uint32_t sq_psn, uint8_t rd_atomic) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = rd_atomic;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
  a.ah_attr.grh.sgid_index = uint8_t(sgid_index);
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    fail("RTR: %s", std::strerror(rc));
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = sq_psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = rd_atomic;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
    fail("RTS: %s", std::strerror(rc));
}

// Sends or receives exactly n bytes.
inline void xfer(int fd, void* p, size_t n, bool send) {
  auto* c = static_cast<char*>(p);
  while (n) {
    ssize_t k = send ? ::send(fd, c, n, MSG_NOSIGNAL) : ::recv(fd, c, n, 0);
    if (k <= 0) fail("TCP %s: %s", send ? "send" : "recv", k == 0 ? "closed" : std::strerror(errno));
    c += k, n -= size_t(k);
  }
}

// The server (peer empty) accepts one connection on `port`; the client connects to peer:port,
// trying for 15 s.
inline int tcp_connect(int port, const std::string& peer) {
  int fd = -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  if (peer.empty()) {
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(ls, 1)) fail("listen: %s", std::strerror(errno));
    fd = accept(ls, nullptr, nullptr);
    close(ls);
  } else {
    if (inet_pton(AF_INET, peer.c_str(), &a.sin_addr) != 1) fail("not an IPv4 address: %s", peer.c_str());
    for (int t = 0; t < 150 && fd < 0; ++t) {
      fd = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(fd);
        fd = -1;
        usleep(100000);
      }
    }
  }
  if (fd < 0) fail("TCP connection: %s", std::strerror(errno));
  return fd;
}

}  // namespace shim_test
