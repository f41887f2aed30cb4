// The verbs shim's limits and defaults (verbs_shim/, verbs_shim/rdmacm/; docs/verbs_shim.md,
// docs/rdma_cm.md): what liburoce-verbs reports as its device, the progress policy's timing, and
// liburoce-rdmacm's QP values. Same namespace as the engine's and the port's limits (which it
// includes), so a shim file names every limit as param::k...; each is defined in one place.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/param.hpp"

namespace uroce::param {

// ---- Verbs shim: the device, the progress policy -----------------------------------------------
// (verbs_shim/, docs/verbs_shim.md.) The environment overrides (UROCE_SHIM_*) are named at their
// values (read when the runtime starts); every other value of this section is fixed at build time.
// The device as ibv_query_device reports it (verbs_shim/convert.cpp). Not an mlx5 or EFA id, so
// perftest uses ibv_post_send rather than the ibv_wr_* API.
inline constexpr uint32_t kShimVendorId = 0xFFFFFF;      // no registered vendor (not Mellanox's 0x02c9)
inline constexpr uint32_t kShimVendorPartId = 0x7572;    // "ur"; in no perftest device table
inline constexpr const char* kShimFwVer = "uroce 0.1.0";  // fw_ver (ibv_query_device, sysfs)
inline constexpr uint32_t kShimMaxPd = 65536;            // max_pd reported
inline constexpr uint8_t kShimLocalCaAckDelay = 15;      // local_ca_ack_delay reported (4.096 us * 2^15)
inline constexpr uint8_t kShimPortActiveWidth = 1;       // 1X
inline constexpr uint8_t kShimPortActiveSpeed = 32;      // EDR, 25 Gb/s; the real rate depends on the link
inline constexpr uint8_t kShimPortPhysState = 5;        // LinkUp (ibv_query_port, RDMA netlink)
// The device over RDMA netlink (verbs_shim/device_netlink.cpp: `rdma dev`, `rdma link`): its index
// (the kernel numbers its devices from 0) and how many NETLINK_RDMA sockets a program may hold
// open at once (iproute2's rdma opens one per request and closes it).
inline constexpr uint32_t kShimNetlinkDevIndex = 0;
inline constexpr size_t kShimNetlinkSockets = 16;
// Progress (verbs_shim/progress.hpp, docs/verbs_shim.md). The application called a data-path
// verb (poll_cq, post_send, post_recv) within this many ns: it is driving the engine, and the
// poller leaves it alone (UROCE_SHIM_APP_ACTIVE_NS). Also the post_send rule: a post runs
// progress() itself when the application has not called the data path for this long.
inline constexpr uint64_t kShimAppActiveNs = 5'000;
// ibv_post_send by a polling application runs progress() itself once this many WRs wait since
// the last one (verbs_shim/progress.cpp, posted).
inline constexpr uint32_t kShimPostBurst = 16;
// A poller alone on its core (the application thread blocked, or on another core) spins this
// long after its last work before it naps (UROCE_SHIM_IDLE_SPIN_NS). A poller that shares its
// core with a running application thread never spins: it naps at once and gives the core back.
inline constexpr uint64_t kShimIdleSpinNs = 200'000;
// One short nap (20 us; 5 us made ib_write_lat on a quiet machine take a scheduler tick, 4 ms, per
// round trip: the waking poller did not get the core from the spinning application). Every wake-up of a sleeping thread costs the thread it preempts: about 20 us of
// CPU time on the reference VM (docs/performance.md), so the poller checks rarely when it can.
inline constexpr uint64_t kShimPollerNapNs = 20'000;
// The most of a late wake-up that the poller credits to the application as time it may have
// been preempted rather than away (verbs_shim/progress.cpp, poller_loop).
inline constexpr uint64_t kShimWakeSlackNs = 20'000;
// The poller found the application driving (at least kShimSteadyOps WRs posted or completions
// taken since the previous check) at this many successive checks: it checks only every
// kShimPollerSteadyNapNs until it finds the application away or idle (a bandwidth loop then
// loses almost nothing to the poller's wake-ups, and a latency test's round trip is not taken
// by them: each wake-up beside a running thread costs it about 20 us here). An application that
// waits for the peer's answer by spinning on memory is covered by the linger below, which keeps
// its own verbs call driving until the answer has come.
inline constexpr uint32_t kShimSteadyChecks = 16;
inline constexpr uint64_t kShimSteadyOps = 1;
inline constexpr uint64_t kShimPollerSteadyNapNs = 1'000'000;
// Linger (verbs_shim/progress.cpp): an ibv_poll_cq that returns only send-queue completions, in
// a process that received a request within kShimLingerRecentNs, keeps the engine turning until
// the next request arrives, at most kShimLingerNs (UROCE_SHIM_LINGER_NS; 0: never): a ping-pong
// application (ib_write_lat) next spins on memory for the peer's answer, which no verbs call of
// its own would place, and the poller's naps made each round trip wait 20 us.
// A score (from kShimLingerScoreStart) counts lingers that found the request (+1, up to
// kShimLingerScoreMax) against those that did not (-kShimLingerMissCost); a miss that takes it
// below zero stops lingering for kShimLingerBackoffNs. A ping-pong must not stop lingering for a
// few misses (its peer descheduled now and then): while one side does not linger, the other's
// lingers miss too, and both fall back to their pollers.
inline constexpr uint64_t kShimLingerNs = 20'000;
inline constexpr uint64_t kShimLingerRecentNs = 10'000'000;
inline constexpr uint32_t kShimLingerScoreMax = 64;
inline constexpr uint32_t kShimLingerMissCost = 1;
inline constexpr uint32_t kShimLingerScoreStart = 16;
inline constexpr uint64_t kShimLingerBackoffNs = 10'000'000;
inline constexpr uint64_t kShimPollerLongIdleNs = 10'000'000;  // idle this long: naps get longer
inline constexpr uint64_t kShimPollerLongNapNs = 200'000;   // one nap after kShimPollerLongIdleNs
// progress = inline: the poller turns the engine only when the application has made no data-path
// call for this long, and checks this often (the port's ARP/ND and a passive peer still served).
inline constexpr uint64_t kShimInlineCheckNs = 1'000'000;
// How often the poller reads the application thread's scheduler state (/proc/self/task/TID/stat)
// to know whether it shares a core with it.
inline constexpr uint64_t kShimAppStateCheckNs = 1'000'000;
inline constexpr unsigned long kShimPollerTimerSlackNs = 1'000;
inline constexpr uint32_t kShimTokenSpins = 256;    // ownership token (token.hpp): pause this often, then yield
inline constexpr uint32_t kShimWrBatchReserve = 64;  // ibv_wr_* batch entries reserved per QP
// modify_qp with an address vector waits for link-up and resolves the peer's MAC
// (port::Endpoint::resolve_peer: kLinkWaitMs, then the config's arp_timeout_ms), pausing
// kShimResolveNapNs without the ownership token between steps.
inline constexpr uint64_t kShimResolveNapNs = 20'000;
// ibv_destroy_qp of a UD or UC QP, and the process's exit, first send what the application
// posted on it (an RNIC has sent it by then: mckey's sender posts unsignaled datagrams and
// destroys its QP at once), driving the engine at most this long.
inline constexpr uint64_t kShimSendPostedWaitNs = 100'000'000;
// At exit, on memif: wait this long for the peer to leave first (DpdkLink::await_peer_close).
inline constexpr uint32_t kShimPeerLeaveWaitMs = 500;
inline constexpr int kShimBacktraceDepth = 64;  // frames printed on SIGSEGV (UROCE_SHIM_DEBUG=1)
// How often Runtime::drive() looks for asynchronous events (verbs_shim/async.cpp): QP, CQ and
// SRQ state every kShimAsyncScanNs, the port's link every kShimLinkScanNs.
inline constexpr uint64_t kShimAsyncScanNs = 1'000'000;
inline constexpr uint64_t kShimLinkScanNs = 100'000'000;

// ---- liburoce-rdmacm (verbs_shim/rdmacm/, docs/rdma_cm.md) -------------------------------------
// The local ACK timeout of an id's QP (IBV_QP_TIMEOUT, RDMA_OPTION_ID_ACK_TIMEOUT changes it):
// 4.096 us * 2^14, about 67 ms; and the RNR timer its RTR announces (12: 0.64 ms).
inline constexpr uint8_t kRdmacmAckTimeout = 14;
inline constexpr uint8_t kRdmacmMinRnrTimer = 12;
// A process leaving with connections open sends their DREQs (verbs_shim/runtime.cpp cm_leave)
// and drives the engine at most this long for the DREPs (a DREQ lost then is resent within it
// only with a short cm_response_timeout; the peer's own DREQ timeout covers the rest).
inline constexpr uint64_t kShimCmLeaveWaitNs = 300'000'000;
// Destroyed event channels kept (their eventfd open, never signalled) before they are freed: a
// thread that calls rdma_get_cm_event on one just after another thread destroyed it (rping's CM
// thread, between two events, while its main thread ends) blocks there as it would had it
// called a moment earlier, instead of reading a closed fd (EBADF: rping exits 255).
inline constexpr uint32_t kRdmacmChannelGraveyard = 64;

}  // namespace uroce::param
