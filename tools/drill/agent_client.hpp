// The drill's end of the TCP channel to uroce-drill-agent (tools/drill/agent.c has the protocol):
// one request line, one reply line. While it waits for a reply it calls `pump`, so that the
// drill's link keeps answering ARP and keeping frames while the peer works (a verbs call of the
// peer's may itself wait for the network: ibv_modify_qp resolving our MAC).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace uroce::drill {

struct Reply {
  bool ok = false;
  std::string text;                        // the whole line
  std::map<std::string, std::string> kv;   // ok's key=value words
  bool none = false;                       // "ok none" (poll: no completion)
  uint64_t num(const std::string& k) const;  // 0 if absent
};

class AgentClient {
 public:
  ~AgentClient();
  // HOST:PORT; retries for up to timeout_ms (the agent may still be starting).
  bool connect(const std::string& addr, uint32_t timeout_ms, std::string& err);
  // Sends one request and waits (at most timeout_ms) for its reply; false and `err` if the
  // channel failed or timed out (a reply `err ...` is a Reply with ok false, not a failure).
  bool call(const std::string& line, Reply& out, std::string& err, const std::function<void()>& pump,
            uint32_t timeout_ms = 30000);
  bool connected() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  std::string buf_;
};

}  // namespace uroce::drill
