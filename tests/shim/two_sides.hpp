// What the two-process test programs of the shim (shim_data_test.cpp, soak.cpp) share: failing
// with one line, and the TCP connection over which the two sides swap QP numbers and keys.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

namespace shim_test {

// Prints "FAIL: ..." on stdout and exits 1 at once (no destructors: the shim's own exit runs).
[[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stdout, "FAIL: ");
  std::vfprintf(stdout, fmt, ap);
  std::fprintf(stdout, "\n");
  va_end(ap);
  std::fflush(stdout);
  _exit(1);
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
