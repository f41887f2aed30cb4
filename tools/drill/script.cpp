// Reading a .drill file (script.hpp has the language).
#include "tools/drill/script.hpp"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "proto/aeth.hpp"
#include "proto/opcode.hpp"

namespace uroce::drill {

using proto::Ext;
using proto::OpcodeInfo;

const Field* Step::find(const std::string& key) const {
  for (const Field& f : fields)
    if (f.key == key) return &f;
  return nullptr;
}

const MrDecl* Scenario::mr(const std::string& name) const {
  for (const MrDecl& m : mrs)
    if (m.name == name) return &m;
  return nullptr;
}

bool parse_u64(const std::string& s, uint64_t& out) {
  if (s.empty()) return false;
  size_t i = 0;
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) base = 16, i = 2;
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    int d;
    char c = char(std::tolower(static_cast<unsigned char>(s[i])));
    if (c >= '0' && c <= '9') d = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    if (v > (UINT64_MAX - uint64_t(d)) / uint64_t(base)) return false;
    v = v * uint64_t(base) + uint64_t(d);
  }
  out = v;
  return true;
}

bool parse_i64(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  bool neg = s[0] == '-';
  std::string body = (s[0] == '-' || s[0] == '+') ? s.substr(1) : s;
  uint64_t v;
  if (!parse_u64(body, v) || v > uint64_t(INT64_MAX)) return false;
  out = neg ? -int64_t(v) : int64_t(v);
  return true;
}

bool parse_time_us(const std::string& s, uint64_t& out) {
  size_t n = 0;
  while (n < s.size() && (std::isdigit(static_cast<unsigned char>(s[n])) || s[n] == '.')) ++n;
  if (n == 0) return false;
  double v;
  try {
    v = std::stod(s.substr(0, n));
  } catch (...) {
    return false;
  }
  std::string unit = s.substr(n);
  double mul;
  if (unit == "us") mul = 1;
  else if (unit == "ms") mul = 1e3;
  else if (unit == "s") mul = 1e6;
  else return false;
  out = uint64_t(v * mul);
  return true;
}

bool opcode_by_name(const std::string& qp_type, const std::string& name, uint8_t& out) {
  uint64_t n;
  if (parse_u64(name, n)) {
    if (n > 0xff) return false;
    out = uint8_t(n);
    return true;
  }
  std::string prefix = qp_type == "uc" ? "UC_" : qp_type == "ud" ? "UD_" : "RC_";
  for (int pass = 0; pass < 3; ++pass) {
    // The QP's own transport first, then RC (ACKs and READ responses of any RC scenario),
    // then the name as it stands.
    std::string full = pass == 0 ? prefix + name : pass == 1 ? "RC_" + name : name;
    for (const OpcodeInfo& o : proto::kOpcodes)
      if (o.valid && o.name == full) {
        out = o.code;
        return true;
      }
  }
  return false;
}

namespace {

struct SyndromeName {
  const char* name;
  uint8_t value;
  bool any;
};
constexpr SyndromeName kSyndromes[] = {
    {"ACK", 0x00, true},
    {"RNR_NAK", 0x20, true},
    {"NAK_PSN_SEQ_ERR", 0x60, false},
    {"NAK_INV_REQ", 0x61, false},
    {"NAK_REM_ACCESS_ERR", 0x62, false},
    {"NAK_REM_OP_ERR", 0x63, false},
    {"NAK_INV_RD_REQ", 0x64, false},
};

}  // namespace

bool syndrome_by_name(const std::string& name, uint8_t& value, bool& any) {
  for (const SyndromeName& s : kSyndromes)
    if (name == s.name) {
      value = s.value, any = s.any;
      return true;
    }
  uint64_t n;
  if (parse_u64(name, n) && n <= 0xff) {
    value = uint8_t(n), any = false;
    return true;
  }
  return false;
}

std::string syndrome_name(uint8_t s) {
  proto::Syndrome d = proto::Syndrome::decode(s);
  char buf[48];
  switch (d.kind) {
    case proto::AckKind::Ack: std::snprintf(buf, sizeof buf, "ACK(credits %u)", d.value); return buf;
    case proto::AckKind::RnrNak: std::snprintf(buf, sizeof buf, "RNR_NAK(timer %u)", d.value); return buf;
    case proto::AckKind::Nak:
      for (const SyndromeName& n : kSyndromes)
        if (n.value == s) return n.name;
      break;
    case proto::AckKind::Reserved: break;
  }
  std::snprintf(buf, sizeof buf, "0x%02x", s);
  return buf;
}

namespace {

// What a frame field needs: its kind of value and the extension header that carries it.
enum class Kind : uint8_t { Rel, U64, Byte, Hex, Expr, Bool, Syndrome, Icrc, Time, Opcode };
struct FieldDef {
  const char* key;
  Kind kind;
  uint16_t needs_ext;  // a mask of proto::Ext; 0: any opcode
  bool needs_payload;
  uint64_t max;        // largest value (Byte/U64), 0: no limit
  bool expect_only;
};
constexpr FieldDef kFrameFields[] = {
    {"psn", Kind::Rel, 0, false, 0, false},
    {"len", Kind::U64, 0, true, 1u << 16, false},
    {"fill", Kind::Byte, 0, true, 0xff, false},
    {"data", Kind::Hex, 0, true, 0, false},
    {"va", Kind::Expr, Ext(proto::kReth | proto::kAtomicEth), false, 0, false},
    {"rkey", Kind::Expr, Ext(proto::kReth | proto::kAtomicEth), false, 0, false},
    {"dma_len", Kind::Expr, proto::kReth, false, 0, false},
    {"imm", Kind::Expr, proto::kImmDt, false, 0, false},
    {"ieth", Kind::Expr, proto::kIeth, false, 0, false},
    {"syndrome", Kind::Syndrome, proto::kAeth, false, 0, false},
    {"rnr_timer", Kind::Byte, proto::kAeth, false, 31, false},
    {"credits", Kind::Byte, proto::kAeth, false, 31, false},
    {"msn", Kind::U64, proto::kAeth, false, 0xffffff, false},
    {"swap", Kind::Expr, proto::kAtomicEth, false, 0, false},
    {"add", Kind::Expr, proto::kAtomicEth, false, 0, false},
    {"compare", Kind::Expr, proto::kAtomicEth, false, 0, false},
    {"orig", Kind::Expr, proto::kAtomicAckEth, false, 0, false},
    {"qkey", Kind::Expr, proto::kDeth, false, 0, false},
    {"src_qp", Kind::Expr, proto::kDeth, false, 0, false},
    {"ack_req", Kind::Bool, 0, false, 1, false},
    {"se", Kind::Bool, 0, false, 1, false},
    {"migreq", Kind::Bool, 0, false, 1, false},
    {"fecn", Kind::Bool, 0, false, 1, false},
    {"becn", Kind::Bool, 0, false, 1, false},
    {"ecn", Kind::Byte, 0, false, 3, false},
    {"tver", Kind::Byte, 0, false, 15, false},
    {"pad", Kind::Byte, 0, false, 3, false},
    {"pkey", Kind::Expr, 0, false, 0, false},
    {"qpn", Kind::Expr, 0, false, 0, false},
    {"icrc", Kind::Icrc, 0, false, 0, false},
    {"within", Kind::Time, 0, false, 0, true},
    {"after", Kind::Time, 0, false, 0, true},
    {"skip", Kind::Opcode, 0, false, 0, true},
};

const FieldDef* field_def(const std::string& key) {
  for (const FieldDef& d : kFrameFields)
    if (key == d.key) return &d;
  return nullptr;
}

bool is_hex(const std::string& s) {
  if (s.empty() || s.size() % 2) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// NAME, NAME+N, NAME-N, NAME^N or a number; NAME a declared MR (or the peer's QPN, qpn).
bool check_expr(const Scenario& sc, const std::string& v, std::string& why) {
  uint64_t n;
  if (parse_u64(v, n)) return true;
  size_t op = v.find_first_of("+-^");
  std::string name = v.substr(0, op);
  if (name != "peer_qpn" && name != "drill_qpn" && !sc.mr(name)) {
    why = "'" + name + "' is neither a number nor a declared mr";
    return false;
  }
  if (op != std::string::npos && !parse_u64(v.substr(op + 1), n)) {
    why = "bad number after '" + std::string(1, v[op]) + "' in '" + v + "'";
    return false;
  }
  return true;
}

bool split_fields(const std::vector<std::string>& words, size_t from, std::vector<Field>& out, std::string& err) {
  std::set<std::string> seen;
  for (size_t i = from; i < words.size(); ++i) {
    size_t eq = words[i].find('=');
    if (eq == std::string::npos || eq == 0) {
      err = "expected key=value, got '" + words[i] + "'";
      return false;
    }
    Field f{words[i].substr(0, eq), words[i].substr(eq + 1)};
    if (!seen.insert(f.key).second) {
      err = "field '" + f.key + "' given twice";
      return false;
    }
    out.push_back(f);
  }
  return true;
}

bool check_frame_fields(const Scenario& sc, Step& st, bool expect, std::string& err) {
  const OpcodeInfo& info = proto::opcode_info(st.opcode);
  for (const Field& f : st.fields) {
    const FieldDef* d = field_def(f.key);
    if (!d || (d->expect_only && !expect)) {
      err = "field '" + f.key + "': unknown field";
      return false;
    }
    auto bad = [&](const std::string& why) {
      err = "field '" + f.key + "': " + why;
      return false;
    };
    if (d->needs_ext && !(info.exts & d->needs_ext))
      return bad(std::string(info.name) + " carries no " +
                 std::string(proto::ext_name(Ext(d->needs_ext & -d->needs_ext))) + " for it");
    if (d->needs_payload && !info.payload) return bad(std::string(info.name) + " carries no payload");
    uint64_t u;
    int64_t s;
    std::string why;
    switch (d->kind) {
      case Kind::Rel:
        if (!parse_i64(f.value, s)) return bad("'" + f.value + "' is not a PSN offset (+N, -N or N)");
        break;
      case Kind::U64:
      case Kind::Byte:
      case Kind::Bool:
        if (!parse_u64(f.value, u)) return bad("'" + f.value + "' is not a number");
        if (d->max && u > d->max) return bad(f.value + " is larger than " + std::to_string(d->max));
        break;
      case Kind::Hex:
        if (!is_hex(f.value)) return bad("'" + f.value + "' is not an even number of hex digits");
        break;
      case Kind::Expr:
        if (!check_expr(sc, f.value, why)) return bad(why);
        break;
      case Kind::Syndrome: {
        uint8_t v;
        bool any;
        if (!syndrome_by_name(f.value, v, any))
          return bad("'" + f.value + "' is not a syndrome (ACK, RNR_NAK, NAK_PSN_SEQ_ERR, NAK_INV_REQ, "
                     "NAK_REM_ACCESS_ERR, NAK_REM_OP_ERR, NAK_INV_RD_REQ or a number)");
        break;
      }
      case Kind::Icrc:
        if (f.value != "good" && f.value != "bad") return bad("'" + f.value + "' is neither good nor bad");
        break;
      case Kind::Opcode: {
        uint8_t op;
        if (!opcode_by_name(sc.qp_type, f.value, op)) return bad("'" + f.value + "' is not an opcode");
        break;
      }
      case Kind::Time: {
        uint64_t t;
        if (!parse_time_us(f.value, t)) return bad("'" + f.value + "' is not a time (200ms, 1s, 500us)");
        break;
      }
    }
  }
  if (!expect && info.op == proto::Operation::Ack) {
    const Field* sy = st.find("syndrome");
    if (sy && sy->value == "RNR_NAK" && !st.find("rnr_timer")) {
      err = "field 'syndrome': RNR_NAK to send needs rnr_timer=";
      return false;
    }
  }
  return true;
}

bool take_within(Step& st, std::string& err) {
  st.within_us = kDefaultWithinUs;
  std::vector<Field> rest;
  for (const Field& f : st.fields) {
    if (f.key == "within") {
      if (!parse_time_us(f.value, st.within_us)) {
        err = "field 'within': '" + f.value + "' is not a time (200ms, 1s, 500us)";
        return false;
      }
    } else {
      rest.push_back(f);
    }
  }
  st.fields = rest;
  return true;
}

const std::set<std::string> kPeerVerbs = {"recv", "post", "modify", "fill"};
const std::set<std::string> kQpOptions = {"mtu", "timeout", "retry", "rnr_retry", "min_rnr", "rd_atomic",
                                          "dest_rd_atomic", "psn", "qkey", "drill_psn"};
const std::set<std::string> kWcKeys = {"wr", "status", "opcode", "len", "imm", "inv_rkey", "src_qp", "qp"};

bool parse_line(Scenario& sc, const std::vector<std::string>& w, Step& st, bool& is_step, std::string& err) {
  is_step = false;
  const std::string& cmd = w[0];
  auto rest_text = [&](size_t from) {
    std::string s;
    for (size_t i = from; i < w.size(); ++i) s += (s.empty() ? "" : " ") + w[i];
    return s;
  };
  if (cmd == "title" || cmd == "rule" || cmd == "chapter") {
    if (w.size() < 2) {
      err = "'" + cmd + "' needs text";
      return false;
    }
    (cmd == "title" ? sc.title : cmd == "rule" ? sc.rule : sc.chapter) = rest_text(1);
    return true;
  }
  if (cmd == "qp") {
    if (w.size() < 2 || (w[1] != "rc" && w[1] != "uc" && w[1] != "ud")) {
      err = "'qp' needs a type: rc, uc or ud";
      return false;
    }
    sc.qp_type = w[1];
    std::vector<Field> fs;
    if (!split_fields(w, 2, fs, err)) return false;
    for (const Field& f : fs) {
      uint64_t v;
      if (!kQpOptions.count(f.key)) {
        err = "field '" + f.key + "': not a qp option (mtu, timeout, retry, rnr_retry, min_rnr, rd_atomic, "
              "dest_rd_atomic, psn, qkey, drill_psn)";
        return false;
      }
      if (!parse_u64(f.value, v)) {
        err = "field '" + f.key + "': '" + f.value + "' is not a number";
        return false;
      }
      if (f.key == "mtu") {
        if (v != 256 && v != 512 && v != 1024 && v != 2048 && v != 4096) {
          err = "field 'mtu': " + f.value + " is not a path MTU (256, 512, 1024, 2048, 4096)";
          return false;
        }
        sc.mtu = uint32_t(v);
      } else {
        sc.qp_options.push_back(f);
      }
    }
    return true;
  }
  if (cmd == "mr") {
    if (w.size() < 2 || w[1].find('=') != std::string::npos) {
      err = "'mr' needs a name";
      return false;
    }
    if (sc.mr(w[1])) {
      err = "mr '" + w[1] + "' declared twice";
      return false;
    }
    MrDecl m;
    m.name = w[1];
    std::vector<Field> fs;
    if (!split_fields(w, 2, fs, err)) return false;
    for (const Field& f : fs) {
      uint64_t v;
      if (f.key == "len" || f.key == "fill") {
        if (!parse_u64(f.value, v) || (f.key == "fill" && v > 0xff)) {
          err = "field '" + f.key + "': '" + f.value + "' is not a " + (f.key == "fill" ? "byte" : "number");
          return false;
        }
        if (f.key == "len") m.len = v;
        else m.fill = int(v);
      } else if (f.key == "access") {
        m.access = f.value;
      } else {
        err = "field '" + f.key + "': not an mr option (len, access, fill)";
        return false;
      }
    }
    if (!m.len) {
      err = "mr '" + m.name + "' needs len=";
      return false;
    }
    sc.mrs.push_back(m);
    return true;
  }
  is_step = true;
  if (cmd == "send" || cmd == "expect") {
    bool expect = cmd == "expect";
    st.kind = expect ? StepKind::Expect : StepKind::Send;
    if (w.size() < 2) {
      err = "'" + cmd + "' needs an opcode";
      return false;
    }
    if (!opcode_by_name(sc.qp_type, w[1], st.opcode) || !proto::opcode_info(st.opcode).valid) {
      // A number names any opcode byte (an invalid one on purpose); a name must be in the table.
      uint64_t n;
      if (!(parse_u64(w[1], n) && n <= 0xff)) {
        err = "opcode '" + w[1] + "': no such opcode (SEND_ONLY, RDMA_WRITE_FIRST, ACKNOWLEDGE, ... as "
              "uroce-dissect prints them, with or without RC_/UC_/UD_, or a number)";
        return false;
      }
    }
    if (!split_fields(w, 2, st.fields, err)) return false;
    if (!check_frame_fields(sc, st, expect, err)) return false;
    if (expect) return take_within(st, err);
    return true;
  }
  if (cmd == "nothing") {
    st.kind = StepKind::Nothing;
    if (!split_fields(w, 1, st.fields, err) || !take_within(st, err)) return false;
    if (!st.fields.empty()) {
      err = "field '" + st.fields[0].key + "': 'nothing' takes only within=";
      return false;
    }
    return true;
  }
  if (cmd == "wait") {
    st.kind = StepKind::Wait;
    if (w.size() != 2 || !parse_time_us(w[1], st.within_us)) {
      err = "'wait' needs one time (200ms, 1s, 500us)";
      return false;
    }
    return true;
  }
  if (cmd == "peer") {
    if (w.size() < 2) {
      err = "'peer' needs a verb (recv, post, modify, fill, expect)";
      return false;
    }
    if (w[1] == "expect") {
      if (w.size() < 3) {
        err = "'peer expect' needs wc, no_wc, state=STATE or mem";
        return false;
      }
      if (w[2] == "wc" || w[2] == "no_wc") {
        st.kind = w[2] == "wc" ? StepKind::PeerWc : StepKind::PeerNoWc;
        if (!split_fields(w, 3, st.fields, err) || !take_within(st, err)) return false;
        for (const Field& f : st.fields)
          if (st.kind == StepKind::PeerNoWc || !kWcKeys.count(f.key)) {
            err = "field '" + f.key + "': not a completion field (wr, status, opcode, len, imm, inv_rkey, src_qp, qp)";
            return false;
          }
        return true;
      }
      if (w[2].rfind("state=", 0) == 0) {
        st.kind = StepKind::PeerState;
        st.fields.push_back({"state", w[2].substr(6)});
        return split_fields(w, 3, st.fields, err) && take_within(st, err);
      }
      if (w[2] == "mem") {
        st.kind = StepKind::PeerMem;
        if (w.size() < 4 || !sc.mr(w[3])) {
          err = "'peer expect mem' needs a declared mr";
          return false;
        }
        st.verb = w[3];
        if (!split_fields(w, 4, st.fields, err)) return false;
        if (!st.find("len") || !(st.find("fill") || st.find("data"))) {
          err = "'peer expect mem' needs len= and fill= or data=";
          return false;
        }
        return true;
      }
      err = "'peer expect " + w[2] + "': not wc, no_wc, state=STATE or mem";
      return false;
    }
    if (!kPeerVerbs.count(w[1])) {
      err = "'peer " + w[1] + "': not a peer action (recv, post, modify, fill, expect)";
      return false;
    }
    st.kind = StepKind::Peer;
    st.verb = w[1];
    size_t from = 2;
    if (w[1] == "post" && w.size() > 2 && w[2].find('=') == std::string::npos) {
      st.fields.push_back({"", w[2]});  // the operation: send, write, read, cas, fadd, ...
      from = 3;
    } else if ((w[1] == "recv" || w[1] == "fill") && w.size() > 2 && w[2].find('=') == std::string::npos) {
      if (!sc.mr(w[2])) {
        err = "'" + w[2] + "' is not a declared mr";
        return false;
      }
      st.fields.push_back({"", w[2]});  // the MR, a bare word for the agent
      from = 3;
    }
    if (!split_fields(w, from, st.fields, err)) return false;
    for (const Field& f : st.fields)
      if (f.key == "mr" && !sc.mr(f.value)) {
        err = "field 'mr': '" + f.value + "' is not a declared mr";
        return false;
      }
    return true;
  }
  is_step = false;
  err = "'" + cmd + "': not a statement (title, rule, chapter, qp, mr, send, expect, nothing, wait, peer)";
  return false;
}

}  // namespace

bool parse_scenario(const std::string& path, const std::string& text, Scenario& out, std::string& err) {
  out = Scenario{};
  out.path = path;
  std::istringstream in(text);
  std::string line;
  int no = 0;
  while (std::getline(in, line)) {
    ++no;
    std::string body = line.substr(0, line.find('#'));
    std::istringstream ws(body);
    std::vector<std::string> words;
    for (std::string w; ws >> w;) words.push_back(w);
    if (words.empty()) continue;
    Step st;
    st.line = no;
    bool is_step = false;
    std::string e;
    if (!parse_line(out, words, st, is_step, e)) {
      err = path + ":" + std::to_string(no) + ": " + e;
      return false;
    }
    if (is_step) {
      while (!body.empty() && std::isspace(static_cast<unsigned char>(body.back()))) body.pop_back();
      size_t b = body.find_first_not_of(" \t");
      st.text = body.substr(b);
      out.steps.push_back(st);
    }
  }
  if (out.title.empty() || out.rule.empty() || out.chapter.empty()) {
    err = path + ": a scenario needs title, rule and chapter";
    return false;
  }
  if (out.steps.empty()) {
    err = path + ": no steps";
    return false;
  }
  size_t slash = path.find_last_of('/');
  std::string stem = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (stem.size() > 6 && stem.substr(stem.size() - 6) == ".drill") stem.resize(stem.size() - 6);
  out.name = out.chapter + "/" + stem;
  return true;
}

bool load_scenario(const std::string& path, Scenario& out, std::string& err) {
  std::ifstream f(path);
  if (!f) {
    err = path + ": cannot read";
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_scenario(path, ss.str(), out, err);
}

}  // namespace uroce::drill
