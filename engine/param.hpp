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
inline constexpr uint64_t kMaxMrSize = 1ull << 40;   // bytes in one MR (max_mr_size)

// ---- Engine: security (docs/security.md) ----------------------------------------------------
inline constexpr uint32_t kRecentKeys = 4096;        // deregistered keys never handed out again soon
inline constexpr uint32_t kRecentQpns = 4096;        // destroyed QP numbers never reused soon
inline constexpr uint32_t kRespBurst = 64;           // response packets one QP emits per progress()

// ---- Engine: transport defaults ---------------------------------------------------------------
inline constexpr uint32_t kMaxUnackedPsns = 128;     // send window in packets (rxe uses 128 too)
inline constexpr uint32_t kAckReqEvery = 64;         // AckReq at least this often inside long messages
inline constexpr uint16_t kDefaultPkey = 0xFFFF;
inline constexpr uint32_t kRxBurst = 32;             // frames taken from the link per progress()
inline constexpr uint32_t kRxBurstMax = 64;          // the most a Device::Config may ask for
inline constexpr uint32_t kTxBatch = 64;             // frames handed to the link at once
inline constexpr uint32_t kScratchBytes = 16384;     // gather buffer for a multi-SGE packet payload
inline constexpr uint8_t kDefaultTtl = 64;

// ---- Port: DPDK link and control plane --------------------------------------------------------

// ---- Verbs shim: progress policy ---------------------------------------------------------------

}  // namespace uroce::param
