// The TCP channel to uroce-drill-agent.
#include "tools/drill/agent_client.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "tools/drill/script.hpp"

namespace uroce::drill {

namespace {
uint64_t now_ms() {
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}
}  // namespace

uint64_t Reply::num(const std::string& k) const {
  auto it = kv.find(k);
  uint64_t v = 0;
  if (it != kv.end()) parse_u64(it->second, v);
  return v;
}

AgentClient::~AgentClient() {
  if (fd_ >= 0) ::close(fd_);
}

bool AgentClient::connect(const std::string& addr, uint32_t timeout_ms, std::string& err) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) {
    err = "agent address '" + addr + "' is not HOST:PORT";
    return false;
  }
  std::string host = addr.substr(0, colon), port = addr.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const uint64_t end = now_ms() + timeout_ms;
  for (;;) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) {
      err = "agent address '" + addr + "': " + gai_strerror(rc);
      return false;
    }
    for (addrinfo* a = res; a; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fd_ = fd;
        break;
      }
      ::close(fd);
    }
    freeaddrinfo(res);
    if (fd_ >= 0) return true;
    if (now_ms() >= end) {
      err = "no agent at " + addr + " (uroce-drill-agent running there?)";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

bool AgentClient::call(const std::string& line, Reply& out, std::string& err, const std::function<void()>& pump,
                       uint32_t timeout_ms) {
  out = Reply{};
  if (fd_ < 0) {
    err = "not connected to the agent";
    return false;
  }
  std::string req = line + "\n";
  for (size_t off = 0; off < req.size();) {
    ssize_t n = ::send(fd_, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      err = "agent channel: send failed: " + std::string(std::strerror(errno));
      return false;
    }
    off += size_t(n);
  }
  const uint64_t end = now_ms() + timeout_ms;
  for (;;) {
    size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      out.text = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      break;
    }
    pollfd p{fd_, POLLIN, 0};
    // With a pump, look at the socket without sleeping (the pump polls the link); without one,
    // sleep in poll().
    int rc = ::poll(&p, 1, pump ? 0 : 10);
    if (rc > 0) {
      char b[4096];
      ssize_t n = ::recv(fd_, b, sizeof b, 0);
      if (n <= 0) {
        err = "agent channel closed";
        ::close(fd_);
        fd_ = -1;
        return false;
      }
      buf_.append(b, size_t(n));
      continue;
    }
    if (pump) pump();
    if (now_ms() >= end) {
      err = "no reply from the agent within " + std::to_string(timeout_ms) + " ms to '" + line + "'";
      return false;
    }
  }
  std::istringstream ws(out.text);
  std::string w;
  ws >> w;
  out.ok = w == "ok";
  if (out.ok)
    while (ws >> w) {
      if (w == "none") out.none = true;
      size_t eq = w.find('=');
      if (eq != std::string::npos) out.kv[w.substr(0, eq)] = w.substr(eq + 1);
    }
  return true;
}

}  // namespace uroce::drill
