// Every limit and default of uroce in one place (as rxe_param.h is for the kernel's rxe).
// Sections: the engine (what the device reports and enforces), the port (DPDK link and
// control plane), the verbs shim (progress policy). Config files and environment variables
// override some of them; the key is named next to each such value.
#pragma once
#include <cstdint>

namespace uroce::param {

// ---- Engine: device limits (ibv_query_device reports these) --------------------------------
inline constexpr uint32_t kMaxQp = 1024;
inline constexpr uint32_t kMaxMr = 4096;
inline constexpr uint32_t kMaxCqe = 65536;
inline constexpr uint32_t kMaxQpWr = 16384;
inline constexpr uint32_t kMaxSge = 16;
inline constexpr uint32_t kMaxInline = 256;
inline constexpr uint32_t kMaxRdAtomic = 128;        // outstanding READ/atomics per QP, as rxe
inline constexpr uint64_t kMaxMessage = 1ull << 31;  // bytes in one work request (max_msg_sz)
inline constexpr uint32_t kFirstQpn = 0x11;          // as rxe: QPN 0 and 1 are special

// ---- Engine: transport defaults ---------------------------------------------------------------
inline constexpr uint32_t kMaxUnackedPsns = 128;     // send window in packets (rxe uses 128 too)
inline constexpr uint32_t kAckReqEvery = 64;         // AckReq at least this often inside long messages
inline constexpr uint16_t kDefaultPkey = 0xFFFF;
inline constexpr uint32_t kRxBurst = 32;             // frames taken from the link per progress()
inline constexpr uint32_t kTxBatch = 64;             // frames handed to the link at once
inline constexpr uint32_t kScratchBytes = 16384;     // gather buffer for a multi-SGE packet payload
inline constexpr uint8_t kDefaultTtl = 64;

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
// Fixed (no key).
inline constexpr uint32_t kArpRetryMs = 200;         // ARP request / neighbour solicitation re-sent
inline constexpr uint32_t kNeighbours = 16;          // neighbour cache entries (ARP and ND)
inline constexpr uint32_t kLinkWaitMs = 20000;       // bound on waiting for the link (memif: the peer)
inline constexpr uint32_t kTxBacklog = 4096;         // frames the tx ring did not take, kept in order
inline constexpr uint32_t kTxStash = 32;             // transmit mbufs taken from the pool at once
inline constexpr uint32_t kLinkBurst = 64;           // frames per rte_eth_rx_burst / rte_eth_tx_burst
inline constexpr uint32_t kMinFrame = 60;            // Ethernet minimum without FCS: shorter ones padded
inline constexpr uint32_t kMemifCloseWaitMs = 2000;  // uroce-perf server: wait for a memif peer to close

// ---- Verbs shim: progress policy ---------------------------------------------------------------

}  // namespace uroce::param
