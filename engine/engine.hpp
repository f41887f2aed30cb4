// The uroce engine: one Device per endpoint, polled through progress().
//
//   post_send -> [requester] -> frames -> Link ... Link -> [responder] -> memory, RQ, ACKs
//   ACKs / READ responses -> [completer] -> CQ
//
// Single-threaded by design: every call, including progress(), comes from one thread.
// No allocation after a QP is created; no locks.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/link.hpp"
#include "engine/resources.hpp"
#include "engine/types.hpp"
#include "proto/aeth.hpp"
#include "proto/packet.hpp"
#include "proto/psn.hpp"

namespace uroce::engine {

struct QpInitAttr {
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  QpCap cap{};
  QpType qp_type = QpType::RC;
  bool sq_sig_all = false;
};

// A send work request, copied at post time, with the engine's progress through it.
struct SendWqe {
  SendWr wr{};
  Sge sge[kMaxSge];
  uint8_t* host[kMaxSge];     // local addresses, resolved when the WQE starts
  uint8_t inline_data[kMaxInline];
  uint32_t length = 0;        // total bytes (8 for atomics)
  uint32_t npkts = 0;         // PSNs the message uses
  uint32_t first_psn = 0;
  uint32_t next_pkt = 0;      // next packet index to (re)send
  uint32_t rcvd_pkts = 0;     // READ responses received in order
  uint32_t sent_max = 0;      // highest packet index ever sent + 1 (below it: a retransmission)
  bool started = false;       // PSNs assigned, local buffers resolved
  bool is_inline = false;
  bool signaled = false;

  uint32_t last_psn() const { return (first_psn + npkts - 1) & 0xFFFFFF; }
  bool is_read_or_atomic() const {
    return wr.opcode == WrOpcode::RdmaRead || wr.opcode == WrOpcode::AtomicCmpSwp ||
           wr.opcode == WrOpcode::AtomicFetchAdd;
  }
  bool all_sent() const { return started && next_pkt >= npkts; }
};

// Responder resources for READ and atomic requests (IBA 9.5: max_dest_rd_atomic of them):
// kept so that a duplicate request is answered again without executing it twice.
struct RdAtomicRes {
  bool valid = false;
  bool atomic = false;
  uint32_t psn = 0;           // first PSN of the request
  uint32_t npkts = 0;         // response packets
  uint32_t sent = 0;          // response packets emitted (READ)
  uint32_t restart = 0;       // packet a re-sent range starts from (it opens with FIRST)
  bool replay = false;        // answering a duplicate request: the requester may have moved on
  uint64_t va = 0;
  uint8_t* host = nullptr;
  uint32_t length = 0;
  uint64_t orig = 0;          // atomic: the value before the operation
  uint32_t msn = 0;           // MSN after this request
};

// Printable states of the three QP roles (as rxe prints its requester/responder states).
enum class ReqState : uint8_t { Idle, Sending, WaitWindow, WaitRdAtomic, WaitRnr, Error };
enum class RespState : uint8_t { Idle, InSend, InWrite, NakSeq, Error };
std::string_view req_state_name(ReqState s);
std::string_view resp_state_name(RespState s);

class Device;

class Qp {
 public:
  uint32_t qpn() const { return qpn_; }
  QpState state() const { return attr_.qp_state; }
  const QpAttr& attr() const { return attr_; }
  const QpInitAttr& init_attr() const { return init_; }
  const Counters& counters() const { return ctr_; }
  ReqState req_state() const { return req_state_; }
  RespState resp_state() const { return resp_state_; }
  uint32_t sq_outstanding() const { return sq_.size(); }
  uint32_t rq_outstanding() const { return rq_.size(); }
  uint32_t expected_psn() const { return epsn_; }
  uint32_t next_send_psn() const { return sq_psn_; }
  // One line of state for logs and failed tests: QP, requester and responder states, PSNs,
  // the oldest send WQE.
  std::string describe() const;

 private:
  friend class Device;
  Qp(Device& dev, uint32_t qpn, const QpInitAttr& init);

  Device& dev_;
  uint32_t qpn_;
  QpInitAttr init_;
  QpAttr attr_{};
  uint32_t mtu_ = 1024;
  uint16_t pkey_ = 0xFFFF;
  proto::Packet tmpl_{};       // addresses and ports of every frame this QP sends
  proto::Packet req_pkt_{};    // the requester's packet: tmpl_ plus per-packet fields
  proto::Packet resp_pkt_{};   // the responder's (ACKs, READ responses, atomic ACKs)
  Counters ctr_{};

  // Requester / completer
  Ring<SendWqe> sq_;
  uint32_t send_idx_ = 0;      // index (from the oldest) of the WQE being sent
  uint32_t sq_psn_ = 0;        // next PSN for a new message
  uint32_t rd_atomic_inflight_ = 0;
  uint32_t pkts_since_ackreq_ = 0;
  uint8_t retries_left_ = 7;
  uint8_t rnr_retries_left_ = 7;
  uint64_t last_progress_ns_ = 0;   // last time an ACK moved us forward (or we first sent)
  uint64_t rnr_until_ns_ = 0;       // RNR wait in progress until this time
  uint32_t read_retry_psn_ = UINT32_MAX;  // a READ re-issue already asked for this PSN
  uint32_t acked_psn_ = 0;          // highest PSN the responder has acknowledged
  bool acked_valid_ = false;
  ReqState req_state_ = ReqState::Idle;

  // Responder
  Ring<RecvWqe> rq_;
  uint32_t epsn_ = 0;
  uint32_t msn_ = 0;
  RespState resp_state_ = RespState::Idle;
  bool seq_nak_sent_ = false;
  RecvWqe cur_recv_{};
  bool have_recv_ = false;
  uint32_t recv_off_ = 0;
  uint8_t* write_host_ = nullptr;
  uint32_t write_left_ = 0;
  uint32_t write_total_ = 0;
  bool ack_pending_ = false;
  uint32_t ack_psn_ = 0;
  std::vector<RdAtomicRes> res_;   // ring of max_dest_rd_atomic responder resources
  uint32_t res_next_ = 0;
  uint32_t res_pending_ = 0;       // slots of res_ that still owe responses (sent < npkts)
  bool in_error_flush_ = false;
};

class Device {
 public:
  struct Config {
    proto::Mac mac{};
    proto::Ip6 gid{};              // ::ffff:a.b.c.d for IPv4, or an IPv6 address
    uint32_t max_qp = 1024;
    uint32_t max_mr = 4096;
    uint32_t max_cqe = 65536;
    uint32_t max_qp_wr = 16384;
    uint32_t max_rd_atomic = 128;       // outstanding READ/atomics per QP, as rxe
    uint32_t max_unacked_psns = 128;    // send window, in packets (rxe uses 128 too)
    uint32_t ack_req_every = 64;        // AckReq at least this often inside long messages
    uint16_t pkey = 0xFFFF;
    uint32_t rx_burst = 32;
  };

  Device(Link& link, Clock& clock, const Config& cfg);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const Config& config() const { return cfg_; }

  Pd* alloc_pd();
  int dealloc_pd(Pd* pd);              // EBUSY while MRs, QPs or SRQs use it
  Mr* reg_mr(Pd* pd, void* addr, uint64_t length, uint32_t access);
  Mr* reg_mr_iova(Pd* pd, void* addr, uint64_t length, uint64_t iova, uint32_t access);
  int dereg_mr(Mr* mr);
  Cq* create_cq(uint32_t depth);       // nullptr (EINVAL) above max_cqe
  int destroy_cq(Cq* cq);              // EBUSY while a QP uses it
  Srq* create_srq(Pd* pd, uint32_t max_wr, uint32_t max_sge);
  int destroy_srq(Srq* srq);
  Qp* create_qp(const QpInitAttr& init);  // nullptr on bad attributes
  int destroy_qp(Qp* qp);
  Qp* qp_by_num(uint32_t qpn) const;

  // ibv_modify_qp semantics: 0, or EINVAL for an illegal transition or a wrong attribute
  // mask (required attribute missing, or one the transition does not take); the QP is then
  // unchanged.
  int modify_qp(Qp* qp, const QpAttr& attr, uint32_t mask);

  // 0, or EINVAL (QP state, opcode, too many SGEs, inline too long), ENOMEM (queue full).
  int post_send(Qp* qp, const SendWr& wr);
  int post_recv(Qp* qp, const RecvWr& wr);
  int post_srq_recv(Srq* srq, const RecvWr& wr);
  int poll_cq(Cq* cq, int n, Wc* wc) { return int(cq->poll(wc, uint32_t(n))); }

  // Processes received frames, posted work and timers. Returns true if it did anything.
  bool progress();

  // Counters of the device (all QPs, including destroyed ones, plus device-level drops).
  Counters counters() const;
  uint64_t now_ns() const { return clock_.now_ns(); }
  uint32_t mtu_limit() const;          // the largest path MTU the link can carry

 private:
  friend class Qp;
  // Requester (requester.cpp)
  void requester(Qp& qp);
  bool start_wqe(Qp& qp, SendWqe& w);
  bool send_request_packet(Qp& qp, SendWqe& w);
  void go_back_n(Qp& qp, uint32_t psn);
  void check_timers(Qp& qp);
  // Completer (completer.cpp)
  void completer(Qp& qp, const proto::Packet& p);
  bool complete_acked(Qp& qp, uint32_t psn, bool inclusive);
  void complete_wqe(Qp& qp, WcStatus st);
  void on_read_response(Qp& qp, const proto::Packet& p);
  void on_atomic_ack(Qp& qp, const proto::Packet& p);
  // Responder (responder.cpp)
  void responder(Qp& qp, const proto::Packet& p);
  void on_duplicate(Qp& qp, const proto::Packet& p);
  void send_ack(Qp& qp, proto::Syndrome s, uint32_t psn);
  void send_nak_and_error(Qp& qp, proto::NakCode code, uint32_t psn);
  void send_read_responses(Qp& qp);
  bool send_atomic_ack(Qp& qp, const RdAtomicRes& r);
  bool responses_pending(const Qp& qp) const;
  bool take_recv(Qp& qp);
  bool scatter_recv(Qp& qp, const uint8_t* data, uint32_t len);
  // QP state (qp.cpp)
  void set_error(Qp& qp);
  void flush(Qp& qp);
  void reset_qp(Qp& qp);
  void build_template(Qp& qp);

  // Transmit path
  bool emit(Qp& qp, proto::Packet& p);
  void flush_tx();
  void rx_frame(PacketBuf& b);

  Link& link_;
  Clock& clock_;
  Config cfg_;
  MrTable mrs_;
  std::vector<std::unique_ptr<Pd>> pds_;
  std::vector<std::unique_ptr<Cq>> cqs_;
  std::vector<std::unique_ptr<Srq>> srqs_;
  std::vector<std::unique_ptr<Qp>> qps_;   // owned, any order
  std::vector<Qp*> qp_table_;              // indexed by qpn - kFirstQpn
  uint32_t next_qpn_;
  uint32_t pd_handles_ = 0;
  std::array<PacketBuf, 64> tx_{};
  size_t tx_n_ = 0;
  std::vector<uint8_t> scratch_;           // gather buffer for multi-SGE payloads
  Counters dev_ctr_{};                     // device-level drops and destroyed QPs' counters
  std::array<PacketBuf, 64> rx_{};
  proto::Packet rx_pkt_{};                 // reused for every received frame
};

inline constexpr uint32_t kFirstQpn = 0x11;  // as rxe: QPN 0 and 1 are special

}  // namespace uroce::engine
