// Work requests, completions and QP attributes, modelled on libibverbs. The numeric values
// of every enum are those of <infiniband/verbs.h>, so the verbs shim passes them through.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

#include "engine/param.hpp"
#include "proto/packet.hpp"

namespace uroce::engine {

enum class WcStatus : uint32_t {
  Success = 0, LocLenErr = 1, LocQpOpErr = 2, LocEecOpErr = 3, LocProtErr = 4, WrFlushErr = 5,
  MwBindErr = 6, BadRespErr = 7, LocAccessErr = 8, RemInvReqErr = 9, RemAccessErr = 10, RemOpErr = 11,
  RetryExcErr = 12, RnrRetryExcErr = 13, LocRddViolErr = 14, RemInvRdReqErr = 15, RemAbortErr = 16,
  InvEecnErr = 17, InvEecStateErr = 18, FatalErr = 19, RespTimeoutErr = 20, GeneralErr = 21,
};
std::string_view wc_status_name(WcStatus s);

enum class WcOpcode : uint32_t {
  Send = 0, RdmaWrite = 1, RdmaRead = 2, CompSwap = 3, FetchAdd = 4, BindMw = 5, LocalInv = 6,
  Flush = 8, AtomicWrite = 9,  // IBV_WC_FLUSH, IBV_WC_ATOMIC_WRITE (rdma-core 45 names the first)
  Recv = 128, RecvRdmaWithImm = 129,
};

enum class WrOpcode : uint32_t {
  RdmaWrite = 0, RdmaWriteWithImm = 1, Send = 2, SendWithImm = 3, RdmaRead = 4,
  AtomicCmpSwp = 5, AtomicFetchAdd = 6, LocalInv = 7, BindMw = 8, SendWithInv = 9,
  Flush = 14, AtomicWrite = 15,  // IBV_WR_FLUSH, IBV_WR_ATOMIC_WRITE (IBA 1.5 annex A19)
};
std::string_view wr_opcode_name(WrOpcode o);

enum SendFlags : uint32_t { kSendFence = 1, kSendSignaled = 2, kSendSolicited = 4, kSendInline = 8 };
enum WcFlags : uint32_t { kWcGrh = 1, kWcWithImm = 2, kWcWithInv = 8 };

enum Access : uint32_t {
  kLocalWrite = 1, kRemoteWrite = 2, kRemoteRead = 4, kRemoteAtomic = 8, kMwBind = 16,
  kZeroBased = 32, kOnDemand = 64,
  kFlushGlobal = 0x100, kFlushPersistent = 0x200,  // IBV_ACCESS_FLUSH_GLOBAL / _PERSISTENT: a FLUSH may target it
  kRelaxedOrdering = 0x100000,
};

// A FLUSH's placement types (the FETH's bits 3:0) and selectivity levels (bits 5:4), as
// rdma-core's enum ibv_placement_type and enum ibv_selectivity_level number them.
enum FlushType : uint8_t { kFlushToGlobal = 1, kFlushToPersistence = 2 };
enum FlushLevel : uint8_t { kFlushRange = 0, kFlushMr = 1 };

enum class QpState : uint32_t { Reset = 0, Init = 1, Rtr = 2, Rts = 3, Sqd = 4, Sqe = 5, Err = 6 };
std::string_view qp_state_name(QpState s);

// XrcIni and XrcTgt: an XRC initiator QP (send side only: requests with an XRCETH naming the
// remote XRC SRQ) and an XRC target QP (receive side only: each request goes to the XRC SRQ of its
// domain that the XRCETH names; IBA annex A14), ibv_qp_type's IBV_QPT_XRC_SEND and _RECV.
enum class QpType : uint32_t { RC = 2, UC = 3, UD = 4, XrcIni = 9, XrcTgt = 10 };

enum QpAttrMask : uint32_t {
  kAttrState = 1 << 0, kAttrCurState = 1 << 1, kAttrEnSqdAsyncNotify = 1 << 2, kAttrAccessFlags = 1 << 3,
  kAttrPkeyIndex = 1 << 4, kAttrPort = 1 << 5, kAttrQkey = 1 << 6, kAttrAv = 1 << 7, kAttrPathMtu = 1 << 8,
  kAttrTimeout = 1 << 9, kAttrRetryCnt = 1 << 10, kAttrRnrRetry = 1 << 11, kAttrRqPsn = 1 << 12,
  kAttrMaxQpRdAtomic = 1 << 13, kAttrAltPath = 1 << 14, kAttrMinRnrTimer = 1 << 15, kAttrSqPsn = 1 << 16,
  kAttrMaxDestRdAtomic = 1 << 17, kAttrPathMigState = 1 << 18, kAttrCap = 1 << 19, kAttrDestQpn = 1 << 20,
};

// IB path MTU enum (1..5 = 256..4096) and its byte value.
enum class Mtu : uint32_t { M256 = 1, M512 = 2, M1024 = 3, M2048 = 4, M4096 = 5 };
constexpr uint32_t mtu_bytes(Mtu m) { return 128u << uint32_t(m); }

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

inline constexpr uint32_t kMaxSge = param::kMaxSge;
inline constexpr uint32_t kMaxInline = param::kMaxInline;

struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::Send;
  uint32_t send_flags = 0;
  const Sge* sg_list = nullptr;
  uint32_t num_sge = 0;
  // The ImmDt header's value (its four bytes read big-endian): 0x01020304 goes on the wire as
  // 01 02 03 04. ibverbs' imm_data is those bytes in memory (__be32): the verbs shim converts.
  uint32_t imm_data = 0;
  uint32_t invalidate_rkey = 0;  // SEND_WITH_INV, LOCAL_INV: the R_Key to invalidate; BIND_MW: the
                                 // window (an R_Key it had: its index part names it)
  // BIND_MW (engine/local_ops.cpp): rkey the window's R_Key after the bind (its index part the
  // window's), remote_addr and compare_add the window's address and length (0: unbind, type 1),
  // swap the MR's lkey (bits 31:0) and the window's rights (bits 63:32, Access).
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint8_t flush_type = 0;        // FLUSH: FlushType bits
  uint8_t flush_level = 0;       // FLUSH: FlushLevel
  uint64_t compare_add = 0;      // compare (CMP_SWAP), add (FETCH_ADD), the range's length (FLUSH)
  uint64_t swap = 0;             // swap (CMP_SWAP); ATOMIC WRITE: its 8 bytes as they lie in the
                                 // caller's memory, sent as they are (memcpy in and out)
  // UD only: where the datagram goes.
  const struct Ah* ah = nullptr;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;      // top bit set: use the QP's own Q_Key (IBA 10.2.5)
  // XRC initiator QPs only: the XRC SRQ at the target the message is for (its XRCETH).
  uint32_t xrc_srqn = 0;
};

struct RecvWr {
  uint64_t wr_id = 0;
  const Sge* sg_list = nullptr;
  uint32_t num_sge = 0;
};

struct Wc {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::Success;
  WcOpcode opcode = WcOpcode::Send;
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;          // the ImmDt value, as in SendWr (the shim converts)
  uint32_t invalidated_rkey = 0;
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  uint32_t wc_flags = 0;
  uint16_t pkey_index = 0;        // UD receives
  uint8_t ip_version = 0;         // UD receives: the datagram came over IPv4 (4) or IPv6 (6)
  uint64_t completion_ns = 0;     // the device clock when the CQE was written (a CQ that keeps times)
};

// Where a QP sends: the peer's addresses. For RoCEv2 over IPv4 the GID is ::ffff:a.b.c.d.
struct AddressVector {
  proto::Ip6 dgid{};
  proto::Mac dmac{};
  uint8_t hop_limit = param::kDefaultHopLimit;
  uint8_t traffic_class = 0;   // DSCP << 2 | ECN
  uint32_t flow_label = 0;
  uint8_t sgid_index = 0;
};

struct QpCap {
  uint32_t max_send_wr = 128;
  uint32_t max_recv_wr = 128;
  uint32_t max_send_sge = 4;
  uint32_t max_recv_sge = 4;
  uint32_t max_inline_data = 0;
};

struct QpAttr {
  QpState qp_state = QpState::Reset;
  QpState cur_qp_state = QpState::Reset;
  Mtu path_mtu = Mtu::M1024;
  uint32_t qkey = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint32_t dest_qp_num = 0;
  uint32_t qp_access_flags = 0;
  QpCap cap{};
  AddressVector ah_attr{};
  uint16_t pkey_index = 0;
  uint8_t en_sqd_async_notify = 0;
  uint8_t sq_draining = 0;
  uint8_t max_rd_atomic = 1;
  uint8_t max_dest_rd_atomic = 1;
  uint8_t min_rnr_timer = 12;
  uint8_t port_num = 1;
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
};

using proto::gid_is_v4mapped;  // ::ffff:a.b.c.d (proto/packet.hpp)

}  // namespace uroce::engine
