// What rdma-core 45 and later add to <infiniband/verbs.h> for IBA 1.5's FLUSH (and the device
// flags of ATOMIC WRITE), which Debian 12's rdma-core 44 headers lack: the values, with our own
// names, checked against rdma-core's libibverbs/verbs.h and kernel-headers/rdma/ib_user_verbs.h.
// A program built against a newer rdma-core passes these numbers and finds wr_flush right after
// wr_atomic_write in struct ibv_qp_ex: the shim answers to both (objects.hpp, UQp).
#pragma once
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

namespace uroce::shim::ext {

inline constexpr int kWrFlush = 14;                      // IBV_WR_FLUSH
inline constexpr int kWcFlush = 8;                       // IBV_WC_FLUSH
inline constexpr uint64_t kQpExWithFlush = 1 << 11;      // IBV_QP_EX_WITH_FLUSH
inline constexpr unsigned kAccessFlushGlobal = 1 << 8;   // IBV_ACCESS_FLUSH_GLOBAL
inline constexpr unsigned kAccessFlushPersistent = 1 << 9;  // IBV_ACCESS_FLUSH_PERSISTENT
inline constexpr uint64_t kDeviceFlushGlobal = 1ULL << 38;      // IB_UVERBS_DEVICE_FLUSH_GLOBAL
inline constexpr uint64_t kDeviceFlushPersistent = 1ULL << 39;  // IB_UVERBS_DEVICE_FLUSH_PERSISTENT
inline constexpr uint64_t kDeviceAtomicWrite = 1ULL << 40;      // IB_UVERBS_DEVICE_ATOMIC_WRITE
// ODP of those two operations (rdma-core 57's enum ibv_odp_transport_cap_bits).
inline constexpr uint32_t kOdpSupportFlush = 1 << 6;        // IBV_ODP_SUPPORT_FLUSH
inline constexpr uint32_t kOdpSupportAtomicWrite = 1 << 7;  // IBV_ODP_SUPPORT_ATOMIC_WRITE

// struct ibv_qp_ex's member after wr_atomic_write in rdma-core 45 and later.
using WrFlushFn = void (*)(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, size_t len, uint8_t type,
                           uint8_t level);

static_assert(IBV_WR_ATOMIC_WRITE == 15 && IBV_WC_ATOMIC_WRITE == 9 && IBV_QP_EX_WITH_ATOMIC_WRITE == (1 << 12),
              "the rdma-core 44 values these follow");

}  // namespace uroce::shim::ext
