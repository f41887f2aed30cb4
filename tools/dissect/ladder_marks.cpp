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
};

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
    if (f.status != Frame::Status::Ok) continue;  // a bad ICRC: the receiver drops it, so do the marks

    if (is_request(f)) {
      FlowState& s = flows[{f.src, f.dst, f.dest_qp, info.has(kDeth) ? f.src_qp : 0}];
      if (s.sent_any && psn_diff(f.psn, s.sent_max) <= 0) {
        m.retransmission = true;
      } else {
        s.sent_any = true;
        s.sent_max = f.psn;
        s.unacked.emplace_back(f.psn, i);
      }
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
  for (const std::string& a : order) conv.endpoints.emplace_back(a, std::vector<uint32_t>(qps_at[a].begin(), qps_at[a].end()));
  return conv;
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
