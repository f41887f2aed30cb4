// The port's limits and defaults (port/: the DPDK link, its control plane, capture, fault
// injection, telemetry commands), with the config file key that overrides each where one does.
// The engine's own limits, and those the port shares with it, are in engine/param.hpp (same
// namespace, uroce::param). engine/ and proto/ never include this file.
#pragma once
#include <cstdint>

namespace uroce::param {

// ---- Port: DPDK link and control plane --------------------------------------------------------
// Endpoint config defaults (port/config.hpp); the config file key that overrides each is named.
inline constexpr uint32_t kPathMtu = 1024;           // RoCE path MTU in bytes, 256..4096 (key mtu)
inline constexpr uint32_t kLinkMtu = 1500;           // IP MTU of the link, frame = +14 (key link_mtu)
inline constexpr uint32_t kMbufs = 8191;             // mbufs in the port's pool (key mbufs)
inline constexpr uint32_t kMbufCache = 256;          // per-lcore mempool cache (key mbuf_cache)
inline constexpr uint16_t kRxDesc = 1024;            // rx ring, adjusted to the PMD (key rx_desc)
inline constexpr uint16_t kTxDesc = 1024;            // tx ring, adjusted to the PMD (key tx_desc)
inline constexpr uint8_t kPrefix4 = 24;              // IPv4 prefix length (key ip = a.b.c.d/N)
inline constexpr int kGidIndex = 1;                  // 0: IPv6, 1: IPv4-mapped (key gid_index)
inline constexpr uint32_t kArpTimeoutMs = 3000;      // bound on ARP/ND resolution (key arp_timeout_ms)
// Capture (port/capture.hpp; keys capture, capture_all, capture_snaplen, capture_max_mb).
inline constexpr uint32_t kCaptureSnapPayload = 64;  // default snap: the frame's headers + this many bytes
inline constexpr uint32_t kCaptureSnapMin = 64;      // the smallest capture_snaplen a config may set
inline constexpr uint32_t kCaptureMaxMb = 1024;      // the file stops growing at this size (key capture_max_mb)
inline constexpr uint32_t kCaptureMaxMbLimit = 1u << 20;  // the largest capture_max_mb (1 TiB)
inline constexpr uint32_t kCaptureNoteMax = 8192;  // bytes of the engine's notes one frame carries as its comment (a receive burst of CNPs fits; more are cut)
inline constexpr uint32_t kCaptureBuffer = 1u << 20; // bytes of blocks gathered before one write(2)
inline constexpr uint64_t kCaptureFlushNs = 100'000'000;  // and written at least this often (when frames come)
// Fault injection (port/fault_stage.hpp, engine/fault.hpp; keys fault_*).
inline constexpr uint64_t kFaultSeed = 1;            // key fault_seed
inline constexpr uint32_t kFaultReorderWindow = 4;   // a reordered frame goes after 1..4 later ones
inline constexpr uint32_t kFaultDelayMaxUs = 1'000'000;  // the largest fault_delay_us
inline constexpr uint32_t kFaultHold = 512;          // frames one direction holds back at most (delay,
                                                     // reorder); more pass undelayed (counted)
inline constexpr uint64_t kFaultReorderHoldNs = 100'000;  // a reordered frame waits no longer than this
// A netdev shared with the kernel (key netdev, port/netdev.hpp).
inline constexpr uint32_t kRoceMaxHeaders = 80;      // IPv6 40 + UDP 8 + BTH 12 + RETH 16 + ICRC 4: the path
                                                     // MTU is the largest 256..4096 that fits MTU - this (rxe's rule)
inline constexpr uint32_t kAfXdpMaxPathMtu = 2048;   // AF_XDP's 4 KiB frames (less XDP's headroom) carry no 4096
inline constexpr uint32_t kAfXdpMaxLinkMtu = 3000;   // the largest frame uroce builds on af_xdp (the netdev's MTU
                                                     // is never changed)
inline constexpr uint32_t kAfXdpMinMbufSize = 2048; // an mbuf of the AF_XDP umem is one chunk: >= 2 KiB (the
                                                     // kernel's XDP_UMEM_MIN_CHUNK_SIZE) with its header
inline constexpr uint32_t kGidTableMax = 16;        // GID table entries at most (rxe: 1024; a netdev's addresses)
inline constexpr uint32_t kNeighbourProbeMs = 100;   // the kernel's neighbour table looked at again while resolving
inline constexpr uint32_t kGroupsPerSocket = 20;     // multicast groups joined per kernel socket (port/groups.cpp):
                                                     // the kernel's default net.ipv4.igmp_max_memberships
// Fixed (no key).
inline constexpr uint32_t kArpRetryMs = 200;         // ARP request / neighbour solicitation re-sent
inline constexpr uint32_t kNeighbours = 16;          // neighbour cache entries (ARP and ND)
inline constexpr uint8_t kControlTtl = 64;           // TTL / hop limit of ICMP echo replies
inline constexpr uint64_t kNeighbourTtlMs = 30'000;  // a neighbour entry is trusted this long (the kernel's
                                                     // base_reachable_time), then resolved again
inline constexpr uint64_t kNeighbourPendingMs = 3'000;  // an answer this late to our request creates nothing
inline constexpr uint32_t kLinkWaitMs = 20000;       // bound on waiting for the link (memif: the peer)
inline constexpr uint32_t kLinkCheckMs = 10;         // looks at the link status while waiting
inline constexpr uint32_t kMemifReconnectMs = 1000;  // a memif client waiting for the link connects again
inline constexpr uint32_t kTxBacklog = 4096;         // frames the tx ring did not take, kept in order
// Back-pressure: with this many frames in the backlog the link lends no transmit buffer (the
// engine's requester waits, WaitTxBuf, its WQEs unbuilt), as a NIC stops taking WQEs when its
// transmit queue is full: frames are never built only to be dropped, and the queueing delay in
// front of the wire stays short (1,024 QPs x 128 WRITEs: the backlog used to overflow, and the
// dropped frames and late ACKs cost 16 % of the frames in resends and probes).
inline constexpr uint32_t kTxBacklogHigh = 256;
// The congestion point on a link's transmit side (keys bottleneck_*, docs/congestion.md).
inline constexpr uint32_t kBottleneckQueueKb = 512;    // bottleneck_queue_kb: what its queue holds
inline constexpr uint32_t kBottleneckQueueMaxKb = 65536;
inline constexpr uint32_t kBottleneckLogMax = 1u << 22;  // frames uroce-perf --flow-log records at most
inline constexpr uint32_t kBottleneckHold = 4096;      // frames it holds at most (mbufs of the pool), past that dropped
inline constexpr uint32_t kTxStash = 32;             // transmit mbufs taken from the pool at once
inline constexpr uint32_t kLinkBurst = 64;           // frames per rte_eth_rx_burst / rte_eth_tx_burst
inline constexpr uint32_t kMinFrame = 60;            // Ethernet minimum without FCS: shorter ones padded
inline constexpr uint32_t kMemifCloseWaitMs = 2000;  // uroce-perf server: wait for a memif peer to close

// ---- Port: telemetry commands (port/telemetry.cpp, docs/observability.md) ----------------------
// /uroce/qps lists at most this many QPs (DPDK's telemetry reply is at most 16 KB; the rest are
// counted in qps_total and reachable one by one with /uroce/qp,<qpn>).
inline constexpr uint32_t kTelemetryMaxQpRows = 96;

// ---- Port: the uroce service (uroced, port/service/, docs/service.md) -------------------------
inline constexpr uint32_t kServiceTagBits = 6;       // low bits of QPNs and CM IDs naming the process
inline constexpr uint32_t kServiceMaxProcs = 1u << kServiceTagBits;  // processes on one device at once
inline constexpr uint32_t kServiceRing = 2048;       // entries of each of a process's four rings
inline constexpr uint32_t kServiceMaxGroups = 64;    // multicast groups a device's processes share (pump.hpp)
inline constexpr uint32_t kServiceFill = 512;        // empty buffers kept in a process's fill ring, at most
// The processes of a device share half its pool (the other half is the port's: its rx and tx
// rings, the daemon's backlog): each may hold share = pool / 2 / processes buffers, at least
// kServiceShareMin; a quarter in its fill ring, half in its rx ring (frames past that are dropped,
// counted ring_full), a quarter in its tx ring (past that it is lent no buffer: back-pressure).
// So idle or stopped processes cannot take the buffers that frames of the others need.
inline constexpr uint32_t kServiceShareMin = 128;
inline constexpr uint32_t kServiceBurst = 32;        // frames moved per ring operation
inline constexpr uint32_t kServiceUsed = 256;        // buffers a process keeps before giving them back (a few bursts)
inline constexpr uint32_t kServiceTxBursts = 4;      // bursts of a process's tx ring moved per step at most
inline constexpr uint64_t kServiceControlNs = 1'000'000;  // the daemon looks at its sockets this often
inline constexpr uint64_t kServiceIdleSpinNs = 200'000;   // busy polling this long after the last frame,
inline constexpr uint32_t kServiceIdleSleepUs = 50;       // then sleeping this long between looks
// The daemon's data-path thread runs at SCHED_FIFO this priority (key service_rt_priority; 0: the
// fair scheduler, as every other thread). It is the device: with more busy-polling threads than
// cores, the fair scheduler left it off the CPU for up to half a second at a time (measured on 2
// cores, eight perftest and pingpong programs, docs/service.md "Scheduling"), longer than a
// perftest QP's retry budget (7 x 67 ms), and every QP of the device stalled with it. rxe's
// device work runs in softirq, ahead of every user thread. It still sleeps when idle
// (kServiceIdleSpinNs), and the kernel's RT throttling leaves the other threads their 5%.
inline constexpr uint32_t kServiceRtPriority = 1;
inline constexpr uint32_t kServiceRtPriorityMax = 99;
inline constexpr uint64_t kServiceDrivenNs = 500'000;     // a process drove the port this recently: the daemon leaves it,
inline constexpr uint32_t kServiceDrivenWaitMs = 10;      // waiting on its sockets and doorbell this long between looks
inline constexpr uint64_t kServiceDrivenMarkNs = 100'000; // a driver marks the time it drives this often
inline constexpr uint32_t kServiceHugepagesMb = 256;      // hugepage memory uroced makes sure of (2 MB pages)
inline constexpr uint32_t kServiceDaemonMemMb = 96;       // its EAL's -m
inline constexpr uint32_t kServiceReplyWaitMs = 5000;     // a process waits this long for the daemon's answer
inline constexpr uint32_t kServiceWillMax = 512;          // bytes of a frame the daemon sends for a dead process

}  // namespace uroce::param
