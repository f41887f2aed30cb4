// A plain TCP program (socket, bind, listen, accept, connect, send, recv: no RDMA call in it),
// for librspreload, which turns its sockets into rsockets over uroce (docs/rdma_cm.md). Its
// sockets are made without SOCK_CLOEXEC: librspreload takes a socket only when its type is
// exactly SOCK_STREAM.
//   socket_echo server ADDR PORT    accepts one connection, reads BYTES, sends back their FNV-1a hash
//   socket_echo client ADDR PORT    sends BYTES of a pattern, compares the hash it gets back
// Exit 0 when the bytes arrived whole; the server prints the peer's address.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kBytes = 4 << 20;

uint64_t fnv(uint64_t h, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

uint8_t pattern(size_t i) { return uint8_t((i * 131) ^ (i >> 9)); }

bool send_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n) {
    const ssize_t k = send(fd, b, n, 0);
    if (k <= 0) return false;
    b += k;
    n -= size_t(k);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: socket_echo server|client ADDR PORT\n");
    return 2;
  }
  const bool server = std::strcmp(argv[1], "server") == 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(std::atoi(argv[3])));
  if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) return 2;
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return perror("socket"), 1;
  const uint64_t start = 0xcbf29ce484222325ull;
  if (server) {
    if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return perror("bind"), 1;
    if (listen(s, 1) != 0) return perror("listen"), 1;
    std::printf("socket_echo: listening\n");
    std::fflush(stdout);
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    const int c = accept(s, reinterpret_cast<sockaddr*>(&peer), &len);
    if (c < 0) return perror("accept"), 1;
    std::vector<uint8_t> buf(65536);
    uint64_t h = start;
    size_t got = 0;
    while (got < kBytes) {
      const ssize_t k = recv(c, buf.data(), buf.size(), 0);
      if (k <= 0) break;
      h = fnv(h, buf.data(), size_t(k));
      got += size_t(k);
    }
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
    std::printf("socket_echo: %zu bytes from %s, hash %016llx\n", got, ip, (unsigned long long)h);
    const bool ok = got == kBytes && send_all(c, &h, sizeof h);
    close(c);
    close(s);
    return ok ? 0 : 1;
  }
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return perror("connect"), 1;
  std::vector<uint8_t> data(kBytes);
  for (size_t i = 0; i < kBytes; ++i) data[i] = pattern(i);
  if (!send_all(s, data.data(), data.size())) return perror("send"), 1;
  uint64_t back = 0;
  size_t got = 0;
  while (got < sizeof back) {
    const ssize_t k = recv(s, reinterpret_cast<uint8_t*>(&back) + got, sizeof back - got, 0);
    if (k <= 0) break;
    got += size_t(k);
  }
  const uint64_t want = fnv(start, data.data(), data.size());
  std::printf("socket_echo: sent %zu bytes, the server's hash %016llx, ours %016llx: %s\n", kBytes,
              (unsigned long long)back, (unsigned long long)want, back == want ? "the same" : "DIFFERENT");
  close(s);
  return got == sizeof back && back == want ? 0 : 1;
}
