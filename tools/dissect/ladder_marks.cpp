// Reading the conversation of a capture for the ladder diagram: which QP talks to which,
// which frames are retransmissions or duplicates, which are NAKs, and which request PSNs each
// ACK newly acknowledges (ACK coalescing).
//
// Terms used below:
//   flow        the requests one QP sends to another: (sender address, receiver address,
//               destination QPN; for UD also the DETH source QPN). Its responses (ACKs, NAKs,
//               READ responses, atomic ACKs) travel the other way to the requester's QPN.
//   pairing     RC frames do not carry the sender's QPN. A response's PSN repeats the PSN of
//               a request it answers (an ACK: the last request PSN it covers; the first READ
//               response: the READ request's PSN), so responses whose PSNs match requests of
//               the opposite direction pair the two QPs (by votes, see pair_qps). UD frames
//               name their sender in the DETH.
//   retransmission  a request (or READ response) whose PSN is not after the highest PSN that
//               flow already sent. PSNs wrap at 2^24: "after" is proto's psn_diff (within half
//               the space), so 0xfffffe, 0xffffff, 0, 1 is a clean run, not a retransmission.
//   gap         a request whose PSN is more than one after the highest PSN its flow sent (and
//               the flow's last request was not a READ, whose responses take PSNs): the PSNs
//               between were due and are not in the capture ("not seen").
//               A resend run that skips PSNs reveals a gap too (its packets are consecutive).
//   resend run  consecutive retransmissions of a flow. It answers the sequence NAK or RNR NAK
//               that came before it, or nothing (the QP's timer or a tail-loss probe). A run
//               after a sequence NAK that reaches the highest PSN sent is go-back-N; one that
//               stops before it (and the flow goes on with new PSNs) is selective repeat.
//   duplicate   a request whose PSN the responder had already acknowledged (by an ACK, or as
//               the PSN before the one a NAK or RNR NAK expects): the responder will treat it as
//               a duplicate and answer it again rather than execute it.
#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "proto/aeth.hpp"
#include "proto/opcode.hpp"
#include "proto/psn.hpp"
#include "tools/dissect/ladder.hpp"
#include "tools/dissect/text.hpp"

namespace uroce::dissect {

using namespace uroce::proto;

namespace {

using Frame = LadderFrame;

// One QP as the capture sees it: an endpoint address and a QPN.
using QpId = std::pair<std::string, uint32_t>;
// A flow of requests: sender address, receiver address, destination QPN, UD source QPN (0 for RC/UC).
using FlowKey = std::tuple<std::string, std::string, uint32_t, uint32_t>;

bool usable(const Frame& f) { return f.decoded && f.status == Frame::Status::Ok; }

bool is_request(const Frame& f) {
  const OpcodeInfo& info = opcode_info(f.opcode);
  return info.valid && info.request && info.transport != Transport::CNP;
}
bool is_response(const Frame& f) {
  const OpcodeInfo& info = opcode_info(f.opcode);
  return info.valid && !info.request && info.transport == Transport::RC;
}

// Which QP at the other end each QP talks to, learnt from responses (RC) and DETHs (UD).
// Every response votes for each QP its PSN could answer: the QPs at its sender that had
// received a request with that PSN from its receiver. Many QPs start at the same PSN (NCCL's
// all start at 0), so one response can be ambiguous; the votes of the whole capture are not.
// An RC QP has one peer, so the pairs are then taken greedily, most votes first.
std::map<QpId, QpId> pair_qps(const std::vector<Frame>& frames) {
  std::map<QpId, QpId> peer;
  // (sender, receiver, PSN) -> the destination QPNs of requests with that PSN so far.
  std::map<std::tuple<std::string, std::string, uint32_t>, std::set<uint32_t>> requested;
  std::map<std::pair<QpId, QpId>, size_t> votes;  // unordered pair, stored smaller first
  std::map<std::pair<QpId, QpId>, size_t> first_vote;  // frame index: the tie-break
  for (size_t i = 0; i < frames.size(); ++i) {
    const Frame& f = frames[i];
    if (!usable(f)) continue;
    if (is_request(f)) {
      requested[{f.src, f.dst, f.psn}].insert(f.dest_qp);
      if (opcode_info(f.opcode).has(kDeth)) peer.try_emplace({f.src, f.src_qp}, QpId{f.dst, f.dest_qp});
    } else if (is_response(f) && opcode_info(f.opcode).has(kAeth)) {
      // A response from f.src to the requester's QP f.dest_qp at f.dst.
      auto it = requested.find({f.dst, f.src, f.psn});
      if (it == requested.end()) continue;
      for (uint32_t q : it->second) {
        QpId x{f.dst, f.dest_qp}, y{f.src, q};
        if (y < x) std::swap(x, y);
        ++votes[{x, y}];
        first_vote.try_emplace({x, y}, i);
      }
    }
  }
  std::vector<std::pair<std::pair<QpId, QpId>, size_t>> ranked(votes.begin(), votes.end());
  std::stable_sort(ranked.begin(), ranked.end(), [&](const auto& l, const auto& r) {
    if (l.second != r.second) return l.second > r.second;
    return first_vote[l.first] < first_vote[r.first];
  });
  for (const auto& [qps, n] : ranked) {
    const auto& [x, y] = qps;
    if (peer.count(x) || peer.count(y)) continue;
    peer.emplace(x, y);
    peer.emplace(y, x);
  }
  return peer;
}

struct FlowState {
  bool sent_any = false;
  uint32_t sent_max = 0;       // highest request PSN sent (psn_diff order)
  bool acked_any = false;
  uint32_t acked = 0;          // the responder has handled every request PSN up to this one
  // Request PSNs sent and not yet acknowledged, oldest first, with their frame indexes.
  std::deque<std::pair<uint32_t, size_t>> unacked;
  bool resp_sent_any = false;  // READ responses of this flow, for their retransmissions
  uint32_t resp_max = 0;
  bool after_read = false;     // the last request was a READ: its responses take PSNs
  // Gaps not yet filled: (first, last) PSN not seen, the frame that revealed them.
  std::vector<std::tuple<uint32_t, uint32_t, size_t>> gaps;
  // The NAK or RNR NAK the next resend answers (frame index), if any.
  size_t asked = SIZE_MAX;
  bool asked_rnr = false;
  // The resend run in progress.
  bool in_run = false;
  size_t run_frame = 0, run_cause = SIZE_MAX, run_packets = 0;
  bool run_rnr = false;
  uint32_t run_first = 0, run_last = 0, run_frontier = 0;
};

std::string psns(uint32_t a, uint32_t b) { return a == b ? fmt("psn %u", a) : fmt("psn %u..%u", a, b); }

// Ends a flow's resend run: what it sent again, noted on its first frame and linked to its cause.
void finish_run(FlowState& s, const std::vector<Frame>& frames, Conversation& conv) {
  if (!s.in_run) return;
  s.in_run = false;
  const std::string what = fmt("%s sent again (%zu packet%s)", psns(s.run_first, s.run_last).c_str(), s.run_packets,
                               s.run_packets == 1 ? "" : "s");
  std::string text, cause;  // the note on the resend; the link adds its cause
  if (s.run_cause == SIZE_MAX) {
    text = what + ", no NAK: timer or tail-loss probe";
  } else if (s.run_rnr) {
    text = what + " after the RNR timer";
    cause = fmt(", answering the RNR NAK of frame %zu", frames[s.run_cause].number);
  } else if (s.run_last == s.run_frontier) {
    text = "go-back-N: " + what;
    cause = fmt(", everything from the PSN the NAK of frame %zu expects", frames[s.run_cause].number);
  } else {
    text = "selective repeat: " + what + ", not " + psns(psn_add(s.run_last, 1), s.run_frontier);
    cause = fmt(", answering the NAK of frame %zu", frames[s.run_cause].number);
  }
  conv.marks[s.run_frame].run = text;
  if (s.run_cause != SIZE_MAX) conv.links.push_back(Link{s.run_cause, s.run_frame, text + cause});
}

}  // namespace

Conversation read_conversation(const std::vector<LadderFrame>& frames) {
  Conversation conv;
  conv.marks.resize(frames.size());
  const std::map<QpId, QpId> peer = pair_qps(frames);
  std::map<FlowKey, FlowState> flows;
  std::map<std::string, std::set<uint32_t>> qps_at;
  std::vector<std::string> order;
  auto endpoint = [&](const std::string& a) -> std::set<uint32_t>& {
    auto [it, fresh] = qps_at.try_emplace(a);
    if (fresh) order.push_back(a);
    return it->second;
  };

  for (size_t i = 0; i < frames.size(); ++i) {
    const Frame& f = frames[i];
    FrameMarks& m = conv.marks[i];
    endpoint(f.src);
    std::set<uint32_t>& dst_qps = endpoint(f.dst);
    if (!f.has_bth) continue;
    dst_qps.insert(f.dest_qp);
    if (f.status == Frame::Status::RoceV1 || f.status == Frame::Status::Malformed) continue;

    const OpcodeInfo& info = opcode_info(f.opcode);
    m.ce = f.ecn == 3;
    if (info.transport == Transport::CNP) {
      m.cnp = true;
      continue;
    }
    // The sender's QPN: the DETH names it (UD), else the QP paired with the destination.
    if (info.has(kDeth)) {
      m.sender_qp = f.src_qp, m.sender_qp_known = true;
    } else if (auto it = peer.find({f.dst, f.dest_qp}); it != peer.end() && it->second.first == f.src) {
      m.sender_qp = it->second.second, m.sender_qp_known = true;
    }
    if (m.sender_qp_known) endpoint(f.src).insert(m.sender_qp);
    if (f.status != Frame::Status::Ok) {  // a bad ICRC: the receiver drops it, so do the marks
      // ... but it was seen: its PSN is no gap.
      if (is_request(f)) {
        FlowState& s = flows[{f.src, f.dst, f.dest_qp, info.has(kDeth) ? f.src_qp : 0}];
        if (!s.sent_any || psn_diff(f.psn, s.sent_max) > 0) s.sent_any = true, s.sent_max = f.psn;
      }
      continue;
    }

    if (is_request(f)) {
      FlowState& s = flows[{f.src, f.dst, f.dest_qp, info.has(kDeth) ? f.src_qp : 0}];
      if (s.sent_any && psn_diff(f.psn, s.sent_max) <= 0) {
        m.retransmission = true;
        if (!s.in_run) {
          s.in_run = true, s.run_frame = i, s.run_cause = s.asked, s.run_rnr = s.asked_rnr;
          s.run_first = f.psn, s.run_packets = 0, s.run_frontier = s.sent_max;
          m.resend_start = true, m.answers = s.asked, m.timeout_resend = s.asked == SIZE_MAX;
          s.asked = SIZE_MAX;
        }
        // A resend run skips PSNs only if some of its packets were lost (a run is contiguous).
        if (!m.resend_start && !s.after_read && psn_diff(f.psn, s.run_last) > 1) {
          m.reveals_gap = true, m.lost_first = psn_add(s.run_last, 1), m.lost_last = psn_add(f.psn, -1);
          s.gaps.emplace_back(m.lost_first, m.lost_last, i);
        }
        s.run_last = f.psn, ++s.run_packets;
        // The resend of a PSN not seen before: link it to the frame that revealed the gap.
        for (auto g = s.gaps.begin(); g != s.gaps.end(); ++g) {
          const auto [first, last, at] = *g;
          if (psn_diff(f.psn, first) < 0 || psn_diff(f.psn, last) > 0) continue;
          conv.links.push_back(Link{at, i, fmt("%s not seen before frame %zu; sent again in frame %zu",
                                               psns(first, last).c_str(), frames[at].number, f.number)});
          s.gaps.erase(g);
          break;
        }
      } else {
        finish_run(s, frames, conv);
        if (s.sent_any && !s.after_read && psn_diff(f.psn, s.sent_max) > 1) {
          m.reveals_gap = true, m.lost_first = psn_add(s.sent_max, 1), m.lost_last = psn_add(f.psn, -1);
          s.gaps.emplace_back(m.lost_first, m.lost_last, i);
        }
        s.sent_any = true;
        s.sent_max = f.psn;
        s.unacked.emplace_back(f.psn, i);
      }
      s.after_read = info.op == Operation::ReadRequest;
      if (info.transport == Transport::RC && s.acked_any && psn_diff(f.psn, s.acked) <= 0) m.duplicate = true;
      continue;
    }
    if (!is_response(f) || !m.sender_qp_known) continue;
    // A response: its flow is the requests the receiver's QP sends to the sender's QP.
    FlowState& s = flows[{f.dst, f.src, m.sender_qp, 0}];
    if (info.op == Operation::ReadResponse) {
      if (s.resp_sent_any && psn_diff(f.psn, s.resp_max) <= 0) m.retransmission = true;
      else s.resp_sent_any = true, s.resp_max = f.psn;
      // READ responses use the requester's PSNs: a READ request of n packets takes n PSNs. A
      // later request at one of them (a READ resumed part way) is a retransmission.
      if (!s.sent_any || psn_diff(f.psn, s.sent_max) > 0) s.sent_any = true, s.sent_max = f.psn;
    }
    if (!info.has(kAeth)) continue;
    const Syndrome syn = Syndrome::decode(f.syndrome);
    // The last PSN the responder says it has handled.
    uint32_t handled = f.psn;
    switch (syn.kind) {
      case AckKind::Ack: break;
      case AckKind::RnrNak: m.rnr_nak = true; handled = psn_add(f.psn, -1); break;
      case AckKind::Nak:
        if (syn.nak_code() == NakCode::PsnSequenceError) m.seq_nak = true, handled = psn_add(f.psn, -1);
        else m.other_nak = true;
        break;
      case AckKind::Reserved: m.other_nak = true; break;
    }
    if (syn.kind == AckKind::RnrNak || m.seq_nak) {  // the next resend of this flow answers it
      finish_run(s, frames, conv);
      s.asked = i, s.asked_rnr = syn.kind == AckKind::RnrNak;
    }
    if (syn.kind == AckKind::Ack || syn.kind == AckKind::RnrNak || m.seq_nak) {
      if (!s.acked_any || psn_diff(handled, s.acked) > 0) s.acked_any = true, s.acked = handled;
      else if (syn.kind == AckKind::Ack && info.op == Operation::Ack) m.repeated_ack = true;
    }
    if (syn.kind != AckKind::Ack) continue;
    // Coalescing: every request PSN up to this one is now acknowledged.
    while (!s.unacked.empty() && psn_diff(s.unacked.front().first, f.psn) <= 0) {
      if (!m.acks_range) m.acks_range = true, m.acked_first = s.unacked.front().first, m.acked_first_frame = s.unacked.front().second;
      ++m.acked_packets;
      s.unacked.pop_front();
    }
  }
  for (auto& [key, s] : flows) finish_run(s, frames, conv);
  std::stable_sort(conv.links.begin(), conv.links.end(), [](const Link& a, const Link& b) { return a.to < b.to; });
  for (const std::string& a : order) conv.endpoints.emplace_back(a, std::vector<uint32_t>(qps_at[a].begin(), qps_at[a].end()));
  return conv;
}

unsigned events_of(const LadderFrame& f, const FrameMarks& m) {
  auto bit = [](Event e) { return 1u << unsigned(e); };
  unsigned e = 0;
  if (m.reveals_gap) e |= bit(Event::Loss);
  if (m.seq_nak || m.other_nak) e |= bit(Event::Nak);
  if (m.rnr_nak) e |= bit(Event::Rnr);
  if (m.cnp || m.ce) e |= bit(Event::Cnp);
  if (f.status == LadderFrame::Status::BadIcrc || f.status == LadderFrame::Status::Malformed) e |= bit(Event::Error);
  if (m.resend_start) e |= bit(m.timeout_resend ? Event::Timeout : Event::Retx);
  if (!f.comment.empty()) e |= bit(Event::Note);
  return e;
}

std::vector<size_t> select_frames(const std::vector<LadderFrame>& frames, const Conversation& conv,
                                  const LadderOptions& opt) {
  std::vector<size_t> out;
  for (size_t i = 0; i < frames.size(); ++i) {
    const Frame& f = frames[i];
    if (f.number < opt.from) continue;
    if (opt.have_qp) {
      const FrameMarks& m = conv.marks[i];
      const bool to = f.has_bth && f.dest_qp == opt.qp;
      const bool from = m.sender_qp_known && m.sender_qp == opt.qp;
      if (!to && !from) continue;
    }
    if (opt.count && out.size() == opt.count) break;
    out.push_back(i);
  }
  return out;
}

}  // namespace uroce::dissect
