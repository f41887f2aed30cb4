// uroce-perf's TCP connection exchange, as perftest's: the parameters both sides must share,
// per-QP connection data, and the small messages that step both sides through each size.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace uroce::perf {

struct Msg {
  uint32_t type = 0;
  uint32_t status = 0;
  uint64_t size = 0;
  uint64_t a = 0, b = 0;
  double bw_peak = 0, bw_avg = 0, mpps = 0;
};
enum MsgType : uint32_t { kStart = 1, kReady, kDone, kResult, kBye, kQuiet };

struct QpInfo {
  uint32_t qpn, psn, rkey, pad;
  uint64_t rbuf, sbuf;
};
struct Hello {
  uint32_t magic = 0x75726f63;  // "uroc"
  uint32_t qps = 0, test = 0, mode = 0, mtu = 0, pad = 0;
  uint64_t size = 0, iters = 0;
  uint8_t gid[16] = {}, mac[6] = {}, pad2[2] = {};
};


// One TCP connection to the peer. Errors other than "not yet" exit (die).
class Tcp {
 public:
  int fd = -1;
  std::string rxbuf;
  void send_all(const void* p, size_t n);
  // Non-blocking: true when n bytes are available (copied to p).
  bool try_recv(void* p, size_t n);
  // Blocking, bounded: true when n bytes arrived; false when the peer closed, on an error, or
  // after timeout_ms.
  bool recv_wait(void* p, size_t n, int timeout_ms);
};

// Accepts one connection, calling pump() while waiting so the endpoint keeps answering ARP,
// ND and ping (and acknowledging) in the meantime.
int tcp_server(uint16_t port, const std::function<void()>& pump);
// Connects, retrying for timeout_s while the server is not listening yet (pumping meanwhile).
int tcp_client(const std::string& host, uint16_t port, uint32_t timeout_s, const std::function<void()>& pump);

}  // namespace uroce::perf
