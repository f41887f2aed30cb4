// The engine's limits and defaults (as rxe_param.h is for the kernel's rxe): what the device
// reports and enforces, security, transport, loss recovery, ECN, the connection manager, and
// the defaults the port and the shim share with the engine. Each limit is in exactly one place,
// the parameter file of the lowest layer that uses it, all in namespace uroce::param:
// port/param.hpp (link, control plane, capture, fault injection) and verbs_shim/param.hpp (the
// progress policy, the shim's and liburoce-rdmacm's limits) hold the rest. Config files and
// environment variables override some of them; the key is named next to each such value.
#pragma once
#include <cstdint>

namespace uroce::param {

// ---- Engine: device limits (ibv_query_device reports these) --------------------------------
// QPs and CQs: a ConnectX's 2^18 QPs, each with a send and a receive CQ of its own. Neither costs
// anything until created (the QP number table is mapped lazily: engine/id_map.hpp), and progress()
// visits only QPs with work (Device::kick), so the limit is the memory the QPs' queues take.
inline constexpr uint32_t kMaxQp = 262144;
inline constexpr uint32_t kMaxCq = 2 * kMaxQp;
// MRs and memory windows: rxe's 0x40000 each (RXE_MAX_MR, RXE_MAX_MW), as many as QPs; their
// tables grow as registrations need them (engine/resources.hpp MrTable).
inline constexpr uint32_t kMaxMr = 262144;
inline constexpr uint32_t kMaxMw = 262144;   // memory windows (max_mw)
// SRQs (max_srq) and XRC domains (a ConnectX reports 2^24 of these; 65,536, as max_pd, here).
inline constexpr uint32_t kMaxSrq = 16384;
inline constexpr uint32_t kMaxXrcd = 65536;
inline constexpr uint32_t kMaxAh = 32767;  // address handles (max_ah), rxe's RXE_MAX_AH
// Multicast (ibv_attach_mcast): rxe's RXE_MAX_MCAST_GRP, RXE_MAX_MCAST_QP_ATTACH and
// RXE_MAX_TOT_MCAST_QP_ATTACH (max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach).
inline constexpr uint32_t kMaxMcastGrp = 8192;
inline constexpr uint32_t kMaxMcastQpAttach = 56;
inline constexpr uint32_t kMaxTotalMcastQpAttach = 0x70000;
inline constexpr uint32_t kMaxCqe = (1u << 22) - 1;  // a ConnectX's: perftest -q 1024 asks 128 x 1024 in one CQ
inline constexpr uint32_t kMaxQpWr = 16384;
// Queues (send, receive, SRQ, completion) hold storage for this many entries when created, and
// double it as entries are posted (or completions written) beyond it, up to the depth asked
// for: memory follows use (issue 30), and never moves during progress() but for a CQ's.
inline constexpr uint32_t kQueueFirstSlots = 8;
inline constexpr uint32_t kMaxSge = 16;
inline constexpr uint32_t kMaxInline = 256;
inline constexpr uint32_t kMaxRdAtomic = 128;        // outstanding READ/atomics per QP, as rxe
inline constexpr uint64_t kMaxMessage = 1ull << 31;  // bytes in one work request (max_msg_sz)
inline constexpr uint64_t kMaxMrSize = 1ull << 40;   // bytes in one MR (max_mr_size)
// The device's free-running clock (the engine's Clock: nanoseconds): completion timestamps count
// its ticks, as a ConnectX's count its core clock's. hca_core_clock is in kHz: 1 GHz.
inline constexpr uint64_t kCoreClockKhz = 1'000'000;

// ---- Engine: security (docs/security.md) ----------------------------------------------------
inline constexpr uint32_t kRecentKeys = 4096;        // deregistered keys never handed out again soon
inline constexpr uint32_t kRecentQpns = 4096;        // destroyed QP numbers never reused soon
inline constexpr uint32_t kRespBurst = 64;           // response packets one QP emits per progress()

// ---- Engine: transport defaults ---------------------------------------------------------------
// The GRH's hop limit (IPv4 TTL) when nothing else sets it: IPv6's default (the kernel's
// IPV6_DEFAULT_HOPLIMIT), which rdma_cm's address handles and multicast JOINs carry too.
inline constexpr uint8_t kDefaultHopLimit = 64;
// Send window in packets: PSNs sent beyond the oldest unacknowledged one (rxe uses 128 too).
// Key max_unacked_psns (1..kMaxUnackedPsnsMax). Go-back-N resends what is in flight behind a
// loss, so a window much larger than the bandwidth-delay product costs frames under loss.
inline constexpr uint32_t kMaxUnackedPsns = 128;
inline constexpr uint32_t kMaxUnackedPsnsMax = 1u << 22;  // half of the 24-bit PSN space at most
// AckReq at least this often inside long messages (the responder's ACK coalescing is bounded by
// it: it acknowledges at AckReq packets, once per receive burst). Key ack_req_every (1..65536).
inline constexpr uint32_t kAckReqEvery = 64;
inline constexpr uint32_t kAckReqEveryMax = 65536;
// ACK coalescing at the responder: it acknowledges at packets with AckReq, one ACK per QP per
// receive burst (at most kRxBurst packets). With ack_every N > 0 it also acknowledges at least
// every N in-order SEND/WRITE packets without waiting to be asked. Key ack_every (0..65536).
inline constexpr uint32_t kAckEvery = 0;
inline constexpr uint32_t kAckEveryMax = 65536;
// ---- Engine: loss recovery (docs/reliability.md) ----------------------------------------------
// Tail-loss probe: packets in flight and nothing heard from the responder for the probe time
// (2 * smoothed RTT + 4 * RTT variation, measured per QP from ACK timing, at least this floor):
// the requester resends one packet with AckReq set, a duplicate the responder must answer,
// long before the QP timer (4.096 us * 2^timeout) fires. Key probe_floor_us (0: no probes).
inline constexpr uint64_t kProbeFloorNs = 50'000;
inline constexpr uint32_t kProbeFloorMaxUs = 1'000'000;   // the largest probe_floor_us a config may set
inline constexpr uint64_t kProbeInitialNs = 1'000'000;    // the probe time before any RTT sample
// Loss window: each go-back-N restart (a gap, or the QP timer) halves the PSNs a QP may have in
// flight, down to this many; each ACK that makes progress gives one back, up to
// max_unacked_psns. Go-back-N resends what is in flight behind a loss: on a lossy path the
// window shrinks until a loss costs little, on a clean one it stays at max_unacked_psns.
inline constexpr uint32_t kLossWindowMin = 8;
// Selective repeat between uroce peers (docs/reliability.md). Key selective_repeat = on | off;
// both ends must have it on (the wire toward a peer with it off, rxe included, stays go-back-N,
// and with it off nothing on the wire changes). On: the responder keeps WRITE and SEND packets
// that come ahead of the expected PSN (completed in order) in a window of this many PSNs, and the
// requester resends only what is missing; in this mode the send window is at most this.
inline constexpr bool kSelectiveRepeat = false;
inline constexpr uint32_t kSelectiveRepeatWindow = 256;  // a power of two
// The reorder store of a QP with selective repeat on: SEND packets after a gap wait there, their
// payload copied (which receive WQE and which offset they belong to is known only once the gap
// is filled), one slot per PSN for this many PSNs from the expected one (the default send
// window), each slot the largest path MTU the link carries: 128 KiB on a 1500-byte link, 512 KiB
// with jumbo frames. Allocated with the QP only when the mode is on. A SEND packet beyond its
// reach is dropped and resent (the answer after the gap says it is missing). Fixed (no key). A
// power of two, at most kSelectiveRepeatWindow.
inline constexpr uint32_t kSelectiveRepeatSendSlots = 128;
inline constexpr uint16_t kDefaultPkey = 0xFFFF;
inline constexpr uint32_t kRxBurst = 32;             // frames taken from the link per progress()
inline constexpr uint32_t kRxBurstMax = 64;          // the most a Device::Config may ask for
inline constexpr uint32_t kTxBatch = 64;             // frames handed to the link at once
inline constexpr uint32_t kLoopbackRing = 1024;      // frames to the device's own address in flight
inline constexpr uint32_t kScratchBytes = 16384;     // gather buffer for a multi-SGE packet payload
inline constexpr uint8_t kDefaultTtl = 64;
inline constexpr uint32_t kGrhBytes = 40;            // the GRH area before a UD receive's payload
inline constexpr uint32_t kGsiQkey = 0x80010000;     // QP 1 (the connection manager's), reserved

// ---- Engine: ECN and congestion notification (RoCEv2 Annex A17.9; docs/engine.md) -------------
// The ECN field of every frame uroce sends: 0 Not-ECT, 2 ECT(0), 1 ECT(1); never 3 (CE, a
// switch's mark). Port config key ecn = off | ect0 | ect1.
inline constexpr uint8_t kEcnMark = 0;
// Notification point: a QP receiving CE-marked frames sends at most one CNP per this interval
// (the DCQCN notification point's 50 us). Key cnp_interval_us.
inline constexpr uint64_t kCnpIntervalNs = 50'000;
inline constexpr uint32_t kCnpIntervalMaxUs = 1'000'000;  // the largest cnp_interval_us a config may set
// DSCP of the CNPs uroce sends: 48, as in the CNP captured from a ConnectX-4 Lx
// (../shared/golden/hardware). Key cnp_dscp.
inline constexpr uint8_t kCnpDscp = 48;

// ---- Engine: congestion control, the reaction point (engine/cc.hpp, docs/congestion.md) ---------
// Which algorithm each QP runs: off (none: the QP is never paced), dcqcn or timely. Key cc.
// The rate a limited QP may not exceed and at which its limiter is released: its line rate, in
// Mbit/s (a software link has none of its own: 100 Gbit/s). Key cc_line_rate (Mbit/s).
inline constexpr uint32_t kCcLineRateMbps = 100'000;
// The pacer's bucket: a limited QP may send this many bytes at once after an idle time.
inline constexpr uint32_t kPaceBurstBytes = 8192;
// DCQCN, with the names, units and defaults of a ConnectX's firmware (mlx5's roce_rp keys,
// mlxconfig's RPG_* / DCE_TCP_* values; docs/congestion.md has the table). Keys of the same names.
inline constexpr uint32_t kRpgTimeResetUs = 300;      // rpg_time_reset: the rate increase timer
inline constexpr uint32_t kRpgByteResetBytes = 32767; // rpg_byte_reset: the byte counter (0: off)
inline constexpr uint32_t kRpgThreshold = 1;          // rpg_threshold: F, the stages of fast recovery
inline constexpr uint32_t kRpgMaxRateMbps = 0;        // rpg_max_rate: 0, the line rate
inline constexpr uint32_t kRpgAiRateMbps = 5;         // rpg_ai_rate: additive increase step
inline constexpr uint32_t kRpgHaiRateMbps = 50;       // rpg_hai_rate: hyper increase step
inline constexpr uint32_t kRpgGd = 11;                // rpg_gd: a CNP cuts the rate by alpha * 1024 / 2^gd
inline constexpr uint32_t kRpgMinDecFac = 50;         // rpg_min_dec_fac: one cut keeps >= this % of the rate
inline constexpr uint32_t kRpgMinRateMbps = 1;        // rpg_min_rate: never below
inline constexpr uint32_t kRateToSetOnFirstCnpMbps = 0;  // rate_to_set_on_first_cnp: 0, the line rate
inline constexpr uint32_t kDceTcpG = 1019;            // dce_tcp_g: alpha keeps g/1024 of itself per update
inline constexpr uint32_t kDceTcpRttUs = 1;           // dce_tcp_rtt: the alpha update period
inline constexpr uint32_t kRateReduceMonitorPeriodUs = 4;  // rate_reduce_monitor_period: cuts at most this often
inline constexpr uint32_t kInitialAlphaValue = 1023;  // initial_alpha_value: alpha at the first CNP (/1024)
inline constexpr bool kClampTgtRate = false;          // clamp_tgt_rate: every cut sets the target to the rate
inline constexpr bool kClampTgtRateAfterTimeInc = true;  // clamp_tgt_rate_after_time_inc: ... once the timer raised it
// TIMELY (Mittal et al., SIGCOMM 2015), with the paper's values (its Table 1).
inline constexpr uint32_t kTimelyTLowUs = 50;         // timely_t_low: below, additive increase
inline constexpr uint32_t kTimelyTHighUs = 500;       // timely_t_high: above, cut by beta * (1 - t_high / rtt)
inline constexpr uint32_t kTimelyMinRttUs = 20;       // timely_min_rtt: normalises the gradient
inline constexpr uint32_t kTimelyAddStepMbps = 10;    // timely_add_step: delta
inline constexpr uint32_t kTimelyBeta = 800;          // timely_beta: multiplicative decrease, per mille
inline constexpr uint32_t kTimelyAlpha = 875;         // timely_alpha: EWMA weight of a new RTT difference, per mille
inline constexpr uint32_t kTimelyHaiAfter = 5;        // timely_hai_after: N negative gradients, then N * delta

// ---- Engine: the IB connection manager on QP 1 (engine/cm.hpp, docs/rdma_cm.md) ----------------
// Off unless a Device::Config turns it on (key cm: 0 or 1): without it, frames to QP 1 are dropped
// as for any unknown QP.
inline constexpr bool kCmEnabled = false;
// CM response timeout a side announces in its REQ (how long it may take to answer, and how long
// it waits for the peer's answer): 4.096 us * 2^t. 20 is about 4.3 s, the Linux kernel's
// CMA_CM_RESPONSE_TIMEOUT. The default of engine::cm::ConnectParams; liburoce-rdmacm announces
// kRdmacmResponseTimeout (key cm_response_timeout) instead.
inline constexpr uint8_t kCmResponseTimeout = 20;
// A peer's announced timeouts are capped at this exponent (4.096 us * 2^24, about 69 s), so that a
// forged or odd MAD cannot hold a connection's state for hours.
inline constexpr uint8_t kCmMaxTimeoutExp = 24;
// Resends of a REQ, REP or DREQ (or SIDR_REQ) before giving up (4 bits in the REQ; the kernel's
// CMA_MAX_CM_RETRIES). Key cm_max_retries (0..15).
inline constexpr uint8_t kCmMaxRetries = 15;
// The service timeout our MRAs announce (the peer waits 4.096 us * 2^t longer). Key cm_mra_timeout.
inline constexpr uint8_t kCmMraTimeout = 24;
// TimeWait: how long a finished connection's communication ID and QP number stay reserved (a
// late MAD of the old connection is answered, not mistaken for a new one). Key cm_timewait_ms.
inline constexpr uint64_t kCmTimewaitNs = 1'000'000'000;
inline constexpr uint32_t kCmTimewaitMaxMs = 600'000;  // the key's upper bound (10 minutes)
// Connections (listeners, SIDR requests and ids in TimeWait included) one device keeps; a REQ
// beyond that is rejected with "no resources". Key cm_max_conns. Every lookup is a hash probe and
// the timers a heap (engine/cm.hpp), so the number costs memory only (about 450 bytes each,
// allocated as they are used): cmtime -c 10000 needs 10,000 at once and as many in TimeWait.
inline constexpr uint32_t kCmMaxConns = 65536;
inline constexpr uint32_t kCmMaxConnsMax = 1u << 20;  // the key's upper bound
// Events waiting for the library to poll; further ones are dropped and counted. As many as
// connections: 10,000 REQs that arrive together are 10,000 events before the first accept.
inline constexpr uint32_t kCmMaxEvents = 65536;
// liburoce-rdmacm's own REQs (verbs_shim/rdmacm/; the key's default in engine::Device::Config and
// port::EndpointConfig, so it stays here).
// The CM response timeouts the library's REQs announce (both: how long we wait for the peer's
// REP and DREP, and how long the peer waits for our RTU and DREP): 4.096 us * 2^16, about 268 ms,
// times kCmMaxRetries resends. Shorter than the kernel's 20 (4.3 s): the kernel's own DREQ waits
// follow the path's packet lifetime, not this value, and a uroce peer that has exited (memif) answers
// nothing, so a DREQ to it ends with DISCONNECTED after about 4 s rather than a minute.
// Key cm_response_timeout (0..kCmMaxTimeoutExp); key cm_max_retries sets the resends.
inline constexpr uint8_t kRdmacmResponseTimeout = 16;

// ---- Telemetry (engine/telemetry.hpp, port/telemetry.cpp, docs/observability.md) -----------------
// Fixed (no key). A telemetry command asks the thread that polls the engine for a snapshot and
// waits at most this long for its next progress(); no progress by then: the answer is "busy".
inline constexpr uint32_t kTelemetryWaitMs = 250;
// The device's counters for telemetry are a sum over every QP, made this many QPs per
// progress() step (Device::counters_step): at 262,144 QPs one sum in one step held the polling
// thread 35 ms; 4,096 QPs take about half a millisecond.
inline constexpr uint32_t kTelemetrySumQpsPerStep = 4096;

}  // namespace uroce::param
