// uroce-dissect: one line per RoCE packet of a pcap or pcapng capture, optionally with the
// byte-level layout of the BTH and every extension header.
//
// Counting rules (also in --help):
//   frames     every frame in the file
//   roce       frames with UDP destination port 4791 or ethertype 0x8915 (RoCE v1), after --qp
//   icrc ok    RoCEv2 packets that parse and whose ICRC verifies
//   icrc bad   RoCEv2 packets that parse completely but whose ICRC does not verify
//   malformed  RoCEv2 packets that parse() rejects for any other reason
// RoCE v1 frames (GRH over Ethernet, no IP/UDP) count as roce and get a "RoCE v1, not decoded"
// line; they are neither icrc ok, icrc bad nor malformed. So roce = icrc ok + icrc bad +
// malformed + RoCE v1.
//
// The --bytes layout is read straight from the frame bytes (header views and the opcode
// table), not from parse()'s Packet, so it also shows the headers of malformed packets as far
// as the frame holds them.
#include <arpa/inet.h>
#include <pcap/pcap.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "proto/aeth.hpp"
#include "proto/cm.hpp"
#include "tools/dissect/cm_view.hpp"
#include "tools/dissect/ladder.hpp"
#include "tools/dissect/layout.hpp"
#include "tools/dissect/page.hpp"
#include "tools/pcap/pcapio.hpp"
#include "proto/headers.hpp"
#include "proto/locate.hpp"
#include "proto/opcode.hpp"
#include "proto/packet.hpp"

using namespace uroce::proto;
using uroce::dissect::Conversation;
using uroce::dissect::LadderFrame;
using uroce::dissect::LadderOptions;

namespace {

constexpr const char* kUsage =
    "usage: uroce-dissect [--qp N] [--errors] [--bytes] FILE\n"
    "       uroce-dissect --ladder OUT.svg [--qp N] [--from N] [--count N] [--focus KIND] [--no-fold] FILE\n"
    "       uroce-dissect --html OUT.html FILE\n"
    "\n"
    "Prints one line per RoCE packet of a pcap or pcapng capture (Ethernet or Linux cooked\n"
    "link type): frame number, time since the first frame, addresses, UDP source port, opcode,\n"
    "destination QP, PSN, flags (A = AckReq, SE, FECN, BECN; the IP ECN field ECT0, ECT1 or\n"
    "CE; dscp N when nonzero), the extension headers, payload length and whether the ICRC\n"
    "verifies. CNPs (opcode 0x81) and ECN marks are also counted on a line before the last.\n"
    "A UD SEND to QP 1 is a management datagram: its line adds the CM message (REQ, REP, RTU,\n"
    "REJ with its reason, MRA, DREQ, DREP, SIDR_REQ, SIDR_REP), its communication IDs, service\n"
    "ID (port space and port), QPN, starting PSN and rdma_cm's IP addresses and ports.\n"
    "\n"
    "  --qp N     only packets for destination QP N (decimal or 0x hex)\n"
    "  --errors   only malformed packets and packets with a bad ICRC\n"
    "  --bytes    under each packet, the byte layout of the BTH and every extension header\n"
    "             (and of a CM MAD, field by field)\n"
    "  -h, --help this text\n"
    "\n"
    "  --ladder OUT.svg  instead of lines, draw the ladder (sequence) diagram of the conversation\n"
    "             as SVG: one column per endpoint, one arrow per RoCE frame, time running down,\n"
    "             labelled with opcode, PSN, AETH syndrome and MSN, RETH length, immediate;\n"
    "             retransmissions, duplicates, sequence NAKs, RNR NAKs, bad ICRCs and CNPs\n"
    "             highlighted, each ACK with the request PSNs it acknowledges. With --ladder:\n"
    "    --qp N     frames to or from QP N (either side's QPN; the sender's QPN is learnt\n"
    "               from the responses, or the DETH)\n"
    "    --from N   start at frame number N (numbers as in the line view)\n"
    "    --count N  draw at most N RoCE frames\n"
    "    --focus KIND  the window around the first event of KIND: loss (a PSN gap), nak,\n"
    "               rnr, cnp (or a CE mark), error (bad ICRC or malformed), retx (a resend\n"
    "               that answers a NAK), timeout (a resend no NAK asked for), note (a frame\n"
    "               the capture commented: uroce notes what a CNP did to its QP's rate):\n"
    "               from a few frames before it (--from and --count override)\n"
    "    --no-fold  draw every frame (by default runs of quiet frames are folded into one\n"
    "               band, \"52 x RC_RDMA_WRITE_MIDDLE psn 176..227\", a few frames are drawn\n"
    "               either side of every event)\n"
    "             Marks are worked out from the whole capture, whatever is drawn. PSNs that\n"
    "             were due and are not in the capture are drawn as \"not seen\" where they were\n"
    "             due; a NAK and the resend answering it are linked, and the resend is told as\n"
    "             go-back-N or selective repeat.\n"
    "\n"
    "  --html OUT.html  one self-contained page (no network, works from a file:// URL): the\n"
    "             ladder (folded, click a band to unfold), and for the selected frame its line,\n"
    "             its --bytes fields as a table and its bytes, the field under the pointer\n"
    "             highlighted; keys: j/k or arrows next/previous frame, n/p next/previous\n"
    "             event; filters by QP and opcode class; the capture's summary. A #f75 in the\n"
    "             address selects frame 75, #focus=loss the first loss (kinds as --focus).\n"
    "\n"
    "A RoCE frame is one with UDP destination port 4791 or ethertype 0x8915. RoCE v1 frames\n"
    "(ethertype 0x8915) are counted as roce and listed as \"RoCE v1, not decoded\"; they are\n"
    "neither icrc ok, icrc bad nor malformed. Other frames are counted and skipped.\n"
    "With --qp, roce and the counts after it cover that QP's packets only (RoCE v1 frames and\n"
    "packets cut before the BTH have no QP to match and are left out); with --ladder they\n"
    "cover the whole capture, whatever is drawn.\n"
    "The last line is: N frames, N roce, N icrc ok, N icrc bad, N malformed\n"
    "Exit status: 0 all RoCE packets valid, 1 a malformed packet or bad ICRC, 2 usage or file error.\n";

struct Options {
  bool bytes = false;
  bool errors_only = false;
  bool have_qp = false;
  uint32_t qp = 0;
  std::string file;
  std::string ladder;  // --ladder OUT.svg
  std::string html;    // --html OUT.html
  size_t from = 1, count = 0;
  bool have_range = false;  // --from or --count given
  int focus = -1;           // --focus KIND: an Event
  bool fold = true;         // --no-fold clears it
  std::string command;      // the command line (the page says what made it)
};

bool parse_number(const char* s, unsigned long long max, unsigned long long& out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) ? 16 : 10);
  if (errno || *end || v > max || s[0] == '-') return false;
  out = v;
  return true;
}

bool parse_number(const char* s, uint32_t& out) {
  unsigned long long v = 0;
  if (!parse_number(s, 0xFFFFFF, v)) return false;
  out = uint32_t(v);
  return true;
}

// The value of an option given as "--name VALUE" or "--name=VALUE" (nullptr if missing).
const char* option_value(std::string_view a, std::string_view name, int& i, int argc, char** argv) {
  if (a == name) return i + 1 < argc ? argv[++i] : nullptr;
  return argv[i] + name.size() + 1;
}
bool is_option(std::string_view a, std::string_view name) {
  return a == name || (a.starts_with(name) && a.size() > name.size() && a[name.size()] == '=');
}

// ---- formatting helpers ------------------------------------------------------------------

using uroce::dissect::fmt;
using uroce::dissect::aeth_text;
using uroce::dissect::feth_text;

// Source or destination address of the IP header locate() found.
std::string ip_str(std::span<const uint8_t> f, const Located& at, bool src) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (at.ip_version == 4) {
    Ipv4View<const uint8_t> ip(f.data() + at.l3);
    inet_ntop(AF_INET, src ? ip.src() : ip.dst(), buf, sizeof buf);
  } else if (at.ip_version == 6) {
    Ipv6View<const uint8_t> ip(f.data() + at.l3);
    inet_ntop(AF_INET6, src ? ip.src() : ip.dst(), buf, sizeof buf);
  }
  return buf;
}

// ---- the one-line summary of a packet ------------------------------------------------------

std::string ext_summary(const Packet& p) {
  const OpcodeInfo& info = p.info();
  std::string s;
  for (Ext e : kExtOrder) {
    if (!info.has(e)) continue;
    switch (e) {
      case kDeth: s += fmt("  DETH qkey=0x%08" PRIx32 " srcqp=0x%06" PRIx32, p.deth.qkey, p.deth.src_qp); break;
      case kXrceth: s += fmt("  XRCETH srq=0x%06" PRIx32, p.xrceth.srqn); break;
      case kFeth: s += "  FETH " + feth_text(p.feth.placement, p.feth.selectivity); break;
      case kReth:
        s += fmt("  RETH va=0x%016" PRIx64 " rkey=0x%08" PRIx32 " len=%" PRIu32, p.reth.va, p.reth.rkey, p.reth.dma_len);
        break;
      case kAtomicEth:
        if (info.op == Operation::CmpSwap)
          s += fmt("  AtomicETH va=0x%016" PRIx64 " rkey=0x%08" PRIx32 " swap=0x%016" PRIx64 " compare=0x%016" PRIx64,
                   p.atomic.va, p.atomic.rkey, p.atomic.swap_add, p.atomic.compare);
        else
          s += fmt("  AtomicETH va=0x%016" PRIx64 " rkey=0x%08" PRIx32 " add=0x%016" PRIx64, p.atomic.va,
                   p.atomic.rkey, p.atomic.swap_add);
        break;
      case kAeth: s += "  AETH " + aeth_text(p.aeth.syndrome) + fmt(" msn=%" PRIu32, p.aeth.msn); break;
      case kAtomicAckEth: s += fmt("  AtomicAckETH orig=0x%016" PRIx64, p.atomic_ack_orig); break;
      case kImmDt: s += fmt("  imm=0x%08" PRIx32, p.imm); break;
      case kIeth: s += fmt("  IETH rkey=0x%08" PRIx32, p.ieth_rkey); break;
      case kCnpBody: break;
    }
  }
  return s;
}

std::string flags(const Packet& p) {
  std::string s;
  if (p.ack_req) s += " A";
  if (p.solicited) s += " SE";
  if (p.fecn) s += " FECN";
  if (p.becn) s += " BECN";
  // The IP header's ECN field (Not-ECT shows nothing) and a nonzero DSCP.
  static constexpr const char* kEcn[4] = {"", " ECT1", " ECT0", " CE"};
  s += kEcn[p.ecn & 3];
  if (p.dscp) s += fmt(" dscp %u", unsigned(p.dscp));
  return s;
}

std::string line_prefix(size_t index, double t, std::span<const uint8_t> f, const Located& o) {
  std::string s = fmt("%5zu %10.6f  ", index, t);
  if (o.roce_v2()) {
    s += ip_str(f, o, true) + " > " + ip_str(f, o, false);
    s += fmt(" sport %u", o.udp_sport);
    if (o.vlan_count) s += fmt(" vlan %u", o.outer_tci & 0x0FFFu);  // outer tag's VLAN ID
  } else if (f.size() >= o.l3 + 40) {
    // RoCE v1: the GRH (IPv6 layout) carries the source and destination GIDs.
    char a[INET6_ADDRSTRLEN], b[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, f.data() + o.l3 + 8, a, sizeof a);
    inet_ntop(AF_INET6, f.data() + o.l3 + 24, b, sizeof b);
    s += fmt("GID %s > %s", a, b);
  } else {
    s += fmt("%02x:%02x:%02x:%02x:%02x:%02x > %02x:%02x:%02x:%02x:%02x:%02x", f[6], f[7], f[8], f[9], f[10], f[11],
             f[0], f[1], f[2], f[3], f[4], f[5]);
  }
  return s;
}

// ---- --ladder: what the ladder needs of each frame, and writing it --------------------------

// A RoCE v1 frame: its GRH's GIDs as addresses, nothing else decoded.
LadderFrame ladder_frame_v1(size_t number, double t, std::span<const uint8_t> f, const Located& o,
                            const std::string& prefix) {
  LadderFrame lf;
  lf.number = number;
  lf.time = t;
  lf.status = LadderFrame::Status::RoceV1;
  lf.src = lf.dst = "?";
  if (f.size() >= o.l3 + 40) {
    char a[INET6_ADDRSTRLEN], b[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, f.data() + o.l3 + 8, a, sizeof a);
    inet_ntop(AF_INET6, f.data() + o.l3 + 24, b, sizeof b);
    lf.src = a, lf.dst = b;
  }
  lf.line = prefix + "  RoCE v1 (ethertype 0x8915, GRH), not decoded";
  return lf;
}

// A RoCEv2 frame after parse(): every field if it parsed completely (ICRC good or bad), else
// the BTH fields the frame holds.
LadderFrame ladder_frame(size_t number, double t, std::span<const uint8_t> f, const Located& o, const Packet& p,
                         const ParseResult& r, const std::string& line) {
  LadderFrame lf;
  lf.number = number;
  lf.time = t;
  lf.src = ip_str(f, o, true);
  lf.dst = ip_str(f, o, false);
  lf.line = line;
  const bool complete = r.ok() || r.error == ParseError::BadIcrc;
  lf.status = r.ok() ? LadderFrame::Status::Ok : complete ? LadderFrame::Status::BadIcrc : LadderFrame::Status::Malformed;
  lf.decoded = complete;
  if (complete) {
    lf.has_bth = true;
    lf.opcode = p.opcode, lf.dest_qp = p.dest_qp, lf.psn = p.psn, lf.ack_req = p.ack_req, lf.ecn = p.ecn;
    lf.syndrome = p.aeth.syndrome, lf.msn = p.aeth.msn, lf.reth_len = p.reth.dma_len, lf.imm = p.imm;
    lf.src_qp = p.deth.src_qp, lf.payload = p.payload.size();
  } else if (o.bth + 12 <= f.size()) {
    lf.has_bth = true;
    lf.opcode = f[o.bth], lf.dest_qp = load_be24(f.data() + o.bth + 5), lf.psn = load_be24(f.data() + o.bth + 9);
  }
  return lf;
}

// --focus: the window starts this many frames before the event and holds this many (folded).
constexpr size_t kFocusBefore = 12;
constexpr size_t kFocusFrames = 400;

// Reads the conversation, selects the frames, writes the SVG and one line saying what it shows.
bool write_ladder(const Options& opt, const std::vector<LadderFrame>& frames) {
  LadderOptions lo;
  lo.have_qp = opt.have_qp, lo.qp = opt.qp, lo.from = opt.from, lo.count = opt.count;
  const size_t slash = opt.file.find_last_of('/');
  lo.title = slash == std::string::npos ? opt.file : opt.file.substr(slash + 1);
  namespace ld = uroce::dissect;
  const Conversation c = ld::read_conversation(frames);
  if (opt.focus >= 0) {
    const size_t at = ld::first_event(frames, c, ld::Event(opt.focus));
    if (at == SIZE_MAX) {
      std::fprintf(stderr, "uroce-dissect: --focus %s: no such event in %s\n", ld::kEventNames[opt.focus],
                   opt.file.c_str());
      return false;
    }
    if (opt.from == 1) lo.from = frames[at >= kFocusBefore ? at - kFocusBefore : 0].number;
    if (opt.count == 0) lo.count = kFocusFrames;
  }
  const std::vector<size_t> sel = ld::select_frames(frames, c, lo);
  const std::vector<ld::StoryRow> story = ld::tell_story(frames, c, sel, opt.fold);
  std::ofstream out(opt.ladder, std::ios::binary | std::ios::trunc);
  out << ld::render_svg(frames, c, sel, story, lo);
  out.close();
  if (!out) {
    std::fprintf(stderr, "uroce-dissect: cannot write %s\n", opt.ladder.c_str());
    return false;
  }
  size_t n_retx = 0, n_dup = 0, n_seq = 0, n_rnr = 0, n_gaps = 0, n_bands = 0, n_folded = 0;
  for (size_t k : sel) {
    n_retx += c.marks[k].retransmission, n_dup += c.marks[k].duplicate;
    n_seq += c.marks[k].seq_nak, n_rnr += c.marks[k].rnr_nak, n_gaps += c.marks[k].reveals_gap;
  }
  for (const ld::StoryRow& r : story)
    if (r.kind == ld::StoryRow::Kind::Band) ++n_bands, n_folded += r.last - r.first + 1;
  std::printf("ladder %s: %zu frames, %zu drawn, %zu folded in %zu band%s, %zu retransmissions, %zu duplicates, "
              "%zu sequence NAKs, %zu RNR NAKs, %zu gap%s not seen\n",
              opt.ladder.c_str(), sel.size(), sel.size() - n_folded, n_folded, n_bands, n_bands == 1 ? "" : "s", n_retx,
              n_dup, n_seq, n_rnr, n_gaps, n_gaps == 1 ? "" : "s");
  return true;
}

// Writes the page of the capture (--html).
bool write_page(const Options& opt, const std::vector<LadderFrame>& frames,
                const std::vector<uroce::dissect::PageFrame>& detail, const uroce::dissect::PageSummary& sum) {
  namespace ld = uroce::dissect;
  const size_t slash = opt.file.find_last_of('/');
  const std::string title = slash == std::string::npos ? opt.file : opt.file.substr(slash + 1);
  const Conversation c = ld::read_conversation(frames);
  std::ofstream out(opt.html, std::ios::binary | std::ios::trunc);
  out << ld::render_page(frames, detail, c, sum, title, opt.command);
  out.close();
  if (!out) {
    std::fprintf(stderr, "uroce-dissect: cannot write %s\n", opt.html.c_str());
    return false;
  }
  std::printf("page %s: %zu frames, %zu links\n", opt.html.c_str(), frames.size(), c.links.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--bytes") {
      opt.bytes = true;
    } else if (a == "--errors") {
      opt.errors_only = true;
    } else if (is_option(a, "--ladder")) {
      const char* v = option_value(a, "--ladder", i, argc, argv);
      if (!v || !*v) {
        std::fprintf(stderr, "uroce-dissect: --ladder needs an output file name\n");
        return 2;
      }
      opt.ladder = v;
    } else if (is_option(a, "--html")) {
      const char* v = option_value(a, "--html", i, argc, argv);
      if (!v || !*v) {
        std::fprintf(stderr, "uroce-dissect: --html needs an output file name\n");
        return 2;
      }
      opt.html = v;
    } else if (is_option(a, "--focus")) {
      const char* v = option_value(a, "--focus", i, argc, argv);
      for (int e = 0; v && e < int(std::size(uroce::dissect::kEventNames)); ++e)
        if (std::string_view(v) == uroce::dissect::kEventNames[e]) opt.focus = e;
      if (opt.focus < 0) {
        std::fprintf(stderr, "uroce-dissect: --focus needs one of loss, nak, rnr, cnp, error, retx, timeout\n");
        return 2;
      }
    } else if (a == "--no-fold") {
      opt.fold = false;
    } else if (is_option(a, "--from") || is_option(a, "--count")) {
      const bool from = is_option(a, "--from");
      unsigned long long v = 0;
      if (!parse_number(option_value(a, from ? "--from" : "--count", i, argc, argv), SIZE_MAX, v) || v == 0) {
        std::fprintf(stderr, "uroce-dissect: %s needs a number from 1\n", from ? "--from" : "--count");
        return 2;
      }
      (from ? opt.from : opt.count) = size_t(v);
      opt.have_range = true;
    } else if (is_option(a, "--qp")) {
      const char* v = option_value(a, "--qp", i, argc, argv);
      if (!parse_number(v, opt.qp)) {
        std::fprintf(stderr, "uroce-dissect: --qp needs a QP number (0 to 0xffffff, decimal or 0x hex)\n");
        return 2;
      }
      opt.have_qp = true;
    } else if (a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "uroce-dissect: unknown option %s\n%s", argv[i], kUsage);
      return 2;
    } else if (opt.file.empty()) {
      opt.file = argv[i];
    } else {
      std::fprintf(stderr, "uroce-dissect: one capture file only\n%s", kUsage);
      return 2;
    }
  }
  if (opt.file.empty()) {
    std::fprintf(stderr, "uroce-dissect: no capture file given\n%s", kUsage);
    return 2;
  }
  const bool ladder = !opt.ladder.empty();
  const bool html = !opt.html.empty();
  if (!ladder && (opt.have_range || opt.focus >= 0 || !opt.fold)) {
    std::fprintf(stderr, "uroce-dissect: --from, --count, --focus and --no-fold go with --ladder\n");
    return 2;
  }
  if (html && (ladder || opt.bytes || opt.errors_only || opt.have_qp)) {
    std::fprintf(stderr, "uroce-dissect: --html shows every frame with its bytes (the page filters by QP); "
                         "it goes with no other option\n");
    return 2;
  }
  // The command the page says made it, file names without their folders (the page moves).
  auto base = [](std::string_view p) { return std::string(p.substr(p.find_last_of('/') + 1)); };
  opt.command = "uroce-dissect --html " + base(opt.html) + " " + base(opt.file);
  if (ladder && (opt.bytes || opt.errors_only)) {
    std::fprintf(stderr, "uroce-dissect: --ladder draws every frame; --bytes and --errors are for the line view\n");
    return 2;
  }

  uroce::pcapio::Capture cap;
  std::string err;
  if (!uroce::pcapio::read_file(opt.file, cap, err)) {
    std::fprintf(stderr, "uroce-dissect: %s: %s\n", opt.file.c_str(), err.c_str());
    return 2;
  }
  // Linux cooked captures (tcpdump -i any) carry the ethertype without MAC addresses: give
  // them an Ethernet header with zero MACs so that everything below sees Ethernet.
  size_t cooked_hdr = 0, cooked_type_at = 0;
  if (cap.linktype == DLT_LINUX_SLL) cooked_hdr = 16, cooked_type_at = 14;
#ifdef DLT_LINUX_SLL2
  else if (cap.linktype == DLT_LINUX_SLL2) cooked_hdr = 20, cooked_type_at = 0;
#endif
  else if (cap.linktype != DLT_EN10MB) {
    std::fprintf(stderr, "uroce-dissect: %s: link type %d is not Ethernet or Linux cooked capture\n",
                 opt.file.c_str(), cap.linktype);
    return 2;
  }

  size_t n_frames = 0, n_roce = 0, n_ok = 0, n_bad = 0, n_malformed = 0, n_v1 = 0, n_snapped = 0;
  size_t n_cnp = 0, n_ecn[4] = {};
  const double t0 = cap.frames.empty() ? 0 : cap.frames.front().time;
  std::vector<uint8_t> conv;
  std::vector<LadderFrame> ladder_frames;  // --ladder and --html: every RoCE frame
  std::vector<uroce::dissect::PageFrame> page_frames;  // --html: each one's fields and bytes
  for (size_t i = 0; i < cap.frames.size(); ++i) {
    const auto& fr = cap.frames[i];
    ++n_frames;
    std::span<const uint8_t> f = fr.bytes;
    if (cooked_hdr) {
      if (f.size() < cooked_hdr) continue;
      conv.assign(12, 0);
      conv.push_back(f[cooked_type_at]);
      conv.push_back(f[cooked_type_at + 1]);
      conv.insert(conv.end(), f.begin() + long(cooked_hdr), f.end());
      f = conv;
    }
    // A RoCE frame: ethertype 0x8915 (RoCE v1), or UDP to port 4791 whatever parse() says.
    const Located o = locate(f);
    if (!o.roce_v1() && !o.roce_v2()) continue;
    const std::string prefix = line_prefix(i + 1, fr.time - t0, f, o);

    if (o.roce_v1()) {
      if (opt.have_qp && !ladder) continue;  // the QP of a RoCE v1 frame is not decoded
      ++n_roce;
      ++n_v1;
      if (ladder || html) {
        ladder_frames.push_back(ladder_frame_v1(i + 1, fr.time - t0, f, o, prefix));
        if (html) page_frames.push_back(uroce::dissect::PageFrame{{}, {}, std::vector<uint8_t>(f.begin(), f.end())});
      } else if (!opt.errors_only) {
        std::printf("%s  RoCE v1 (ethertype 0x8915, GRH), not decoded\n", prefix.c_str());
      }
      continue;
    }

    Packet p;
    ParseResult r = parse(f, p);
    // A frame the capture cut short (its snap length: uroce's port keeps the headers and 64
    // bytes by default): decode its headers from a copy filled up to the length it had on the
    // wire with zeros. Only the ICRC and the missing payload bytes differ from the frame that was
    // sent, so what parse() says of the headers holds for it; the ICRC cannot be checked.
    std::vector<uint8_t> filled;
    bool snapped = false;
    if (!r.ok() && fr.orig_len > fr.bytes.size() && !cooked_hdr) {
      filled.assign(f.begin(), f.end());
      filled.resize(fr.orig_len, 0);
      Packet q;
      if (parse(filled, q).error == ParseError::BadIcrc) {
        p = q;
        r = ParseResult{};
        snapped = true;
      }
    }
    // The BTH is in the frame if parse() got that far; for earlier errors read what is there.
    const size_t b = o.bth;
    const bool bth_present = b + 12 <= f.size();
    const uint32_t qp = bth_present ? load_be24(f.data() + b + 5) : 0;
    if (opt.have_qp && !ladder && (!bth_present || qp != opt.qp)) continue;  // (--html has no --qp)
    ++n_roce;

    std::string line = prefix;
    const bool complete = r.ok() || r.error == ParseError::BadIcrc;
    if (complete) {
      line += fmt("  %s qp 0x%06" PRIx32 " psn %" PRIu32, std::string(p.info().name).c_str(), p.dest_qp, p.psn);
      line += flags(p);
      line += ext_summary(p);
      if (p.opcode == op::kCnp) ++n_cnp;
      ++n_ecn[p.ecn & 3];
      if (p.info().payload) {
        line += fmt("  payload %zu", p.payload.size());
        if (p.pad_count()) line += fmt(" (pad %u)", p.pad_count());
      }
      // The connection manager's MADs: a UD SEND to QP 1 (proto/cm.hpp).
      if (uroce::proto::cm::is_gsi_send(p.opcode, p.dest_qp)) line += uroce::dissect::cm_line(p.payload);
      if (snapped) {
        ++n_snapped;
        line += fmt("  (snapped: %zu of %u bytes captured, icrc not checked)", fr.bytes.size(), unsigned(fr.orig_len));
      } else if (r.ok()) {
        ++n_ok;
        line += "  icrc ok";
      } else {
        ++n_bad;
        line += fmt("  ICRC BAD (wire 0x%08" PRIx32 ", computed 0x%08" PRIx32 ")", p.icrc_wire, p.icrc_computed);
      }
    } else {
      ++n_malformed;
      if (bth_present) {
        const uint8_t opc = f[b];
        const OpcodeInfo& info = opcode_info(opc);
        line += info.valid ? "  " + std::string(info.name) : fmt("  opcode 0x%02x", opc);
        line += fmt(" qp 0x%06" PRIx32 " psn %" PRIu32, qp, load_be24(f.data() + b + 9));
      }
      line += "  MALFORMED: " + r.message();
      if (fr.orig_len > fr.bytes.size())
        line += fmt(" (capture snapped: %zu of %u bytes)", fr.bytes.size(), unsigned(fr.orig_len));
    }
    // The capture's comment (pcapng opt_comment): uroce's port notes there the rate a CNP left
    // its QP's sender at (engine::Link::note), on the next frame it captured.
    if (!fr.comment.empty()) line += "  [note: " + fr.comment + "]";
    std::string verdict;  // the ICRC row's ending in --bytes
    if (snapped) verdict = ", not checked (snapped)";
    else if (r.ok()) verdict = ", ok";
    else if (r.error == ParseError::BadIcrc) verdict = fmt(", BAD: computed 0x%08" PRIx32, p.icrc_computed);
    if (ladder || html) {
      ladder_frames.push_back(ladder_frame(i + 1, fr.time - t0, f, o, p, r, line));
      ladder_frames.back().comment = fr.comment;
      if (html) {
        uroce::dissect::PageFrame pf;
        pf.fields = uroce::dissect::layout_rows(f, o, verdict, &pf.spans);
        pf.bytes.assign(f.begin(), f.end());
        page_frames.push_back(std::move(pf));
      }
      continue;
    }
    const bool is_error = !r.ok();
    if (opt.errors_only && !is_error) continue;
    std::printf("%s\n", line.c_str());
    if (opt.bytes) uroce::dissect::print_rows(f, uroce::dissect::layout_rows(f, o, verdict));
  }
  if (ladder && !write_ladder(opt, ladder_frames)) return 2;
  if (html) {
    uroce::dissect::PageSummary sum;
    sum.frames = n_frames, sum.roce = n_roce, sum.icrc_ok = n_ok, sum.icrc_bad = n_bad, sum.malformed = n_malformed;
    sum.roce_v1 = n_v1, sum.snapped = n_snapped;
    sum.last = fmt("%zu frames, %zu roce, %zu icrc ok, %zu icrc bad, %zu malformed", n_frames, n_roce, n_ok, n_bad,
                   n_malformed);
    if (!write_page(opt, ladder_frames, page_frames, sum)) return 2;
  }
  if (n_cnp || n_ecn[1] || n_ecn[2] || n_ecn[3])
    std::printf("(%zu CNP, ECN: %zu ECT0, %zu ECT1, %zu CE)\n", n_cnp, n_ecn[2], n_ecn[1], n_ecn[3]);
  if (n_v1) std::printf("(%zu RoCE v1 frame%s counted as roce, not decoded)\n", n_v1, n_v1 == 1 ? "" : "s");
  if (n_snapped)
    std::printf("(%zu frame%s cut short by the capture's snap length: headers decoded, ICRC not checked)\n", n_snapped,
                n_snapped == 1 ? "" : "s");
  std::printf("%zu frames, %zu roce, %zu icrc ok, %zu icrc bad, %zu malformed\n", n_frames, n_roce, n_ok, n_bad,
              n_malformed);
  return (n_bad || n_malformed) ? 1 : 0;
}
