// A drill scenario (docs/drill.md): the text of one .drill file, read into its set-up and a
// time-ordered list of steps. Everything a run could trip on that the text alone decides (an
// unknown opcode, field, MR or syndrome name, a bad number, a field an opcode does not carry) is
// an error here, naming the file, the line and the field; what only the peer decides (its QPN,
// PSN, R_Keys and addresses) is looked up when the step runs.
//
// The language, line by line ('#' starts a comment; words are separated by blanks):
//   title TEXT            what the scenario shows (one line)
//   rule TEXT             the spec rule it checks ("IBA 9.7.5.1.2 C9-112: ...")
//   chapter NAME          psn, ack, rnr, read, atomic, error, mtu, pkey, ecn, ...
//   qp TYPE [key=value]   the peer's QP: rc, uc or ud; mtu=, timeout=, retry=, rnr_retry=,
//                         min_rnr=, rd_atomic=, dest_rd_atomic= (passed to the agent's connect)
//   mr NAME len=N [access=lw,rw,rr,ra|none] [fill=BYTE]   a region the peer registers
//   send OPCODE [field=value ...]      a frame from the drill to the peer's QP
//   expect OPCODE [field=value ...] [within=T]   the next frame from the peer, within T
//   nothing [within=T]                 no frame from the peer within T
//   wait T                             time passes (frames that come are kept for later expects)
//   peer VERB [key=value ...]          an action of the peer's application (the agent's command:
//                                      recv, post, modify, fill), MR names allowed as values
//   peer expect wc [key=value ...] [within=T]    a completion with these fields
//   peer expect no_wc [within=T]       no completion within T
//   peer expect state=STATE            the QP's state
//   peer expect mem MR off=N len=N fill=BYTE|data=HEX   bytes of the peer's memory
// Times: 200ms, 1s, 500us (multiplied by the runner's --time-scale).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace uroce::drill {

struct Field {
  std::string key, value;
};

enum class StepKind : uint8_t { Send, Expect, Nothing, Wait, Peer, PeerWc, PeerNoWc, PeerState, PeerMem };

struct Step {
  int line = 0;
  std::string text;     // the source line, without its comment
  StepKind kind = StepKind::Send;
  uint8_t opcode = 0;   // Send, Expect
  std::vector<Field> fields;  // Send, Expect: frame fields; Peer*: the agent's key=value words
  std::string verb;     // Peer: the agent's command; PeerMem: the MR
  uint64_t within_us = 0;  // Expect, Nothing, PeerWc, PeerNoWc; Wait: the time
  const Field* find(const std::string& key) const;
};

struct MrDecl {
  std::string name;
  uint64_t len = 0;
  std::string access = "lw,rw,rr,ra";
  int fill = -1;  // -1: the agent's default (zero)
};

struct Scenario {
  std::string path;     // the file
  std::string name;     // chapter/stem, as --list prints it
  std::string title, rule, chapter;
  std::string qp_type = "rc";
  uint32_t mtu = 1024;
  std::vector<Field> qp_options;  // timeout=, retry=, ... for the agent's connect
  std::vector<MrDecl> mrs;
  std::vector<Step> steps;
  const MrDecl* mr(const std::string& name) const;
};

// Default windows (before --time-scale).
inline constexpr uint64_t kDefaultWithinUs = 500'000;

// Reads one scenario. False and `err` ("FILE:LINE: field 'psn': ...") on the first error.
bool parse_scenario(const std::string& path, const std::string& text, Scenario& out, std::string& err);
bool load_scenario(const std::string& path, Scenario& out, std::string& err);

// Helpers shared with the runner.
bool parse_time_us(const std::string& s, uint64_t& out);
bool parse_u64(const std::string& s, uint64_t& out);   // decimal or 0x hex
bool parse_i64(const std::string& s, int64_t& out);    // [+-] decimal or 0x hex
// An opcode by name for a QP type: SEND_ONLY (with the type's prefix), a full name
// (RC_SEND_ONLY), CNP, or a number (0x04). False if none.
bool opcode_by_name(const std::string& qp_type, const std::string& name, uint8_t& out);
// AETH syndromes by name: ACK, RNR_NAK, NAK_PSN_SEQ_ERR, NAK_INV_REQ, NAK_REM_ACCESS_ERR,
// NAK_REM_OP_ERR, NAK_INV_RD_REQ, or a number. For expect, ACK and RNR_NAK match any credit count /
// timer (`any` set); for send, ACK carries credits 31 and RNR_NAK needs rnr_timer=.
bool syndrome_by_name(const std::string& name, uint8_t& value, bool& any_low_bits);
std::string syndrome_name(uint8_t s);  // as the drill prints it: ACK, RNR_NAK(14), NAK_PSN_SEQ_ERR

}  // namespace uroce::drill
