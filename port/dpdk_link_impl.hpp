// What the files of DpdkLink share and nobody else sees (DPDK types allowed here, unlike in
// dpdk_link.hpp): the mbuf cast, the burst size, the Ethernet minimum, the EAL start-up, and
// the memif helpers set-up calls. dpdk_link.cpp: open, set-up in named steps, describe;
// eal.cpp: EAL start-up and thread registration; flow_rules.cpp: rte_flow isolation;
// burst.cpp: the data path and its hooks; memif.cpp: link waits and memif specifics;
// resolve.cpp: neighbour resolution.
#pragma once
#include <rte_mbuf.h>

#include <cstdint>
#include <string>
#include <vector>

#include "port/dpdk_link.hpp"

namespace uroce::port::detail {

constexpr uint32_t kMinFrame = param::kMinFrame;
constexpr uint32_t kBurst = param::kLinkBurst;

inline rte_mbuf* M(void* p) { return static_cast<rte_mbuf*>(p); }

// Lends the empty mbuf `m` as a transmit buffer of at least `len` bytes; false (b untouched, the
// caller keeps m) when it has less room than that.
inline bool lend(rte_mbuf* m, uint32_t len, engine::PacketBuf& b) {
  const uint32_t cap = rte_pktmbuf_tailroom(m);
  if (cap < len) return false;
  b.data = rte_pktmbuf_mtod(m, uint8_t*);
  b.cap = cap;
  b.len = 0;
  b.handle = m;
  return true;
}

// Starts the EAL once per process with `eal` then `extra` (after "uroce" and the quiet-logging
// default); false and `err` on failure. Later calls return true at once.
bool start_eal(const std::vector<std::string>& eal, const std::vector<std::string>& extra, std::string& err);
// Starts DPDK's packet capture framework (for dpdk-dumpcap) once, where the process can have one.
void start_pdump();

// The socket a memif client of this EAL line connects to ("@name": abstract); empty when the
// line has no memif client.
std::string memif_client_socket(const std::vector<std::string>& eal);
// Waits (bounded, param::kLinkWaitMs) until some process listens on that socket.
void await_memif_server(const std::string& socket);
// Maps every page of the memif rings' shared regions into this process (a link that came up).
// Returns the bytes it asked for.
size_t populate_memif_regions();

}  // namespace uroce::port::detail
