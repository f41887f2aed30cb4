// Running one scenario (script.hpp) against a peer: the peer's QP set up through its agent
// (agent_client.hpp), the drill's frames built with the wire library and sent on a uroce link, the
// peer's frames taken from that link and compared field by field, the peer's completions, QP
// state and memory read through the agent. One line per step; a verdict at the end.
//
// PSNs in a scenario are relative. The drill's requests (and the peer's answers to them) count
// from the PSN the drill starts its requests at; the peer's requests (and the drill's answers)
// from the peer's starting send PSN. Which one applies follows from the opcode: a request sent by
// the drill or a response expected from the peer is on the drill's stream, the others on the
// peer's. Each scenario runs on a fresh peer QP and a fresh drill QPN; frames for earlier QPNs
// (late retransmissions of the previous scenario) are counted and ignored.
#pragma once
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "port/capture.hpp"
#include "port/port_link.hpp"
#include "proto/packet.hpp"
#include "tools/drill/agent_client.hpp"
#include "tools/drill/script.hpp"

namespace uroce::drill {

enum class Verdict : uint8_t { Conforms, Differs, NotApplicable };
const char* verdict_name(Verdict v);  // "conforms", "differs", "not applicable"

struct RunOptions {
  double time_scale = 1.0;      // every window and wait is multiplied by it (a slow peer)
  std::string capture_dir;      // a pcapng file per scenario there; empty: none
  std::string agent_dev;        // the peer's RDMA device (empty: its first)
  uint32_t agent_gid = 1;       // the peer's GID index
  FILE* out = stdout;           // one line per step
};

struct ScenarioResult {
  Verdict verdict = Verdict::Conforms;
  std::string why;              // differs / not applicable: the first step that did, and how
  int failed_line = 0;
  std::string observed;         // what the peer did, in short (the report's middle column)
  std::string capture;          // the capture file, if any
  double seconds = 0;
};

class Runner {
 public:
  Runner(port::PortLink& link, AgentClient& agent, const RunOptions& opt);
  ScenarioResult run(const Scenario& sc);
  uint64_t stale_frames() const { return stale_; }

 private:
  struct PeerMr {
    uint64_t va = 0, len = 0;
    uint32_t rkey = 0, lkey = 0;
  };
  struct Rx {
    std::vector<uint8_t> bytes;
    uint64_t t_us = 0;
  };
  // Set-up and the steps (false: the step did not go as the script says; `why` says how).
  bool setup(const Scenario& sc, std::string& why, bool& not_applicable);
  bool do_send(const Step& st, std::string& why);
  bool do_expect(const Step& st, std::string& why, std::string& seen);
  bool match_frame(const Step& st, const Rx& f, uint64_t t0, std::string& why, std::string& seen);
  // A request of the peer's that an expect of this scenario matched already, while `st` waits for
  // another PSN.
  bool resent_request(const Step& st, const proto::Packet& p) const;
  bool do_nothing(const Step& st, std::string& why, std::string& seen);
  bool do_peer(const Step& st, std::string& why, bool& not_applicable);
  bool do_peer_wc(const Step& st, std::string& why, std::string& seen);
  bool do_peer_state(const Step& st, std::string& why, std::string& seen);
  bool do_peer_mem(const Step& st, std::string& why, std::string& seen);
  // The link: frames taken in (ARP answered by the link itself), kept in rx_.
  void pump();
  bool next_frame(uint64_t deadline_us, Rx& out);  // the next frame for this scenario's QPN
  bool agent(const std::string& line, Reply& r, std::string& why);
  // Values: numbers, MR names (its va, or its rkey for a key field), peer_qpn, drill_qpn.
  uint64_t value(const std::string& key, const std::string& v) const;
  std::string describe(const proto::Packet& p, bool icrc_ok) const;
  uint64_t now_us() const;
  uint64_t scaled(uint64_t us) const { return uint64_t(double(us) * opt_.time_scale); }

  port::PortLink& link_;
  AgentClient& agent_;
  RunOptions opt_;
  const Scenario* sc_ = nullptr;
  std::deque<Rx> rx_;
  uint64_t stale_ = 0;
  uint32_t scenario_no_ = 0;
  // This scenario's two ends.
  uint32_t drill_qpn_ = 0, drill_psn_ = 0;   // our QPN; the first PSN of our requests
  uint32_t peer_qpn_ = 0, peer_psn_ = 0;     // the peer's QPN; the first PSN of its requests
  proto::Ip6 peer_gid_{};
  proto::Mac peer_mac_{};
  std::map<std::string, PeerMr> mrs_;
  int64_t next_req_ = 0;         // our next request PSN, relative
  int64_t last_peer_req_ = 0;    // the peer's last request PSN we expected, relative
  uint32_t peer_msgs_ = 0;       // the peer's messages we have seen end (the MSN we answer with)
  // The peer's requests this scenario's expects have matched: (opcode, PSN). A resend of one of
  // them while an expect waits for another PSN is passed over (do_expect).
  std::vector<std::pair<uint8_t, uint32_t>> peer_reqs_seen_;
  std::unique_ptr<port::Capture> cap_;  // this scenario's capture file
};

}  // namespace uroce::drill
