#include "bench/perf/exchange.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <rte_cycles.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "bench/perf/report.hpp"

namespace uroce::perf {

void Tcp::send_all(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die("TCP send: %s", std::strerror(errno));
    c += k, n -= size_t(k);
  }
}

bool Tcp::try_recv(void* p, size_t n) {
  char tmp[4096];
  while (rxbuf.size() < n) {
    ssize_t k = ::recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (k == 0) die("peer closed the TCP connection");
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      if (errno == EINTR) continue;
      die("TCP recv: %s", std::strerror(errno));
    }
    rxbuf.append(tmp, size_t(k));
  }
  std::memcpy(p, rxbuf.data(), n);
  rxbuf.erase(0, n);
  return true;
}

bool Tcp::recv_wait(void* p, size_t n, int timeout_ms) {
  const uint64_t end = rte_get_tsc_cycles() + rte_get_tsc_hz() / 1000 * uint64_t(timeout_ms);
  char tmp[4096];
  while (rxbuf.size() < n) {
    const uint64_t now = rte_get_tsc_cycles();
    if (now >= end) return false;
    pollfd pf{fd, POLLIN, 0};
    const int r = ::poll(&pf, 1, int((end - now) * 1000 / rte_get_tsc_hz()) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    const ssize_t k = ::recv(fd, tmp, sizeof tmp, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    rxbuf.append(tmp, size_t(k));
  }
  std::memcpy(p, rxbuf.data(), n);
  rxbuf.erase(0, n);
  return true;
}


int tcp_server(uint16_t port, const std::function<void()>& pump) {
  int ls = socket(AF_INET6, SOCK_STREAM, 0);
  bool v6 = ls >= 0;
  if (!v6) ls = socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0) die("socket: %s", std::strerror(errno));
  int one = 1, zero = 0;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {
    setsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    a.sin6_addr = in6addr_any;
    rc = bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    rc = bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0) die("bind TCP port %u: %s", port, std::strerror(errno));
  if (listen(ls, 1) != 0) die("listen: %s", std::strerror(errno));
  fcntl(ls, F_SETFL, fcntl(ls, F_GETFL) | O_NONBLOCK);
  for (;;) {
    int fd = accept(ls, nullptr, nullptr);
    if (fd >= 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      close(ls);
      return fd;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("accept: %s", std::strerror(errno));
    for (int i = 0; i < 1024; ++i) pump();
  }
}

int tcp_client(const std::string& host, uint16_t port, uint32_t timeout_s, const std::function<void()>& pump) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  std::string ps = std::to_string(port);
  if (getaddrinfo(host.c_str(), ps.c_str(), &hints, &res) != 0 || !res) die("cannot resolve %s", host.c_str());
  const uint64_t end = rte_get_tsc_cycles() + rte_get_tsc_hz() * timeout_s;
  for (;;) {
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd < 0) die("socket: %s", std::strerror(errno));
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      freeaddrinfo(res);
      return fd;
    }
    close(fd);
    if (rte_get_tsc_cycles() > end) die("cannot connect to %s:%u", host.c_str(), port);
    // The server may not be listening yet: keep the endpoint alive for 100 ms, then retry.
    const uint64_t until = rte_get_tsc_cycles() + rte_get_tsc_hz() / 10;
    while (rte_get_tsc_cycles() < until) pump();
  }
}

}  // namespace uroce::perf
