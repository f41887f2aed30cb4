// The link's state and memif's specifics: a memif client waits for its server's socket before
// it starts, connects again while it waits for the link, and on memif a closing process waits
// for its peer to disconnect first (docs/port.md "Shutting down a memif pair").
#include <rte_cycles.h>
#include <rte_ethdev.h>

#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <sstream>

#include "port/dpdk_link_impl.hpp"

namespace uroce::port {

std::string detail::memif_client_socket(const std::vector<std::string>& eal) {
  for (const std::string& a : eal) {
    const size_t at = a.find("net_memif");
    if (at == std::string::npos) continue;
    std::string socket = "/run/memif.sock";
    bool client = false, abstract = true;
    std::stringstream args(a.substr(at));
    for (std::string kv; std::getline(args, kv, ',');) {
      if (kv == "role=client") client = true;
      else if (kv.rfind("socket=", 0) == 0) socket = kv.substr(7);
      else if (kv == "socket-abstract=no") abstract = false;
    }
    if (client) return abstract ? "@" + socket : socket;
  }
  return {};
}

namespace {
// Is some process listening on this unix socket ("@name": abstract)? From /proc/net/unix, so that
// asking does not connect to it.
bool unix_socket_listening(const std::string& name) {
  FILE* f = std::fopen("/proc/net/unix", "r");
  if (!f) return true;  // cannot tell: start and let the PMD say
  bool found = false;
  char line[512];
  while (!found && std::fgets(line, sizeof line, f)) {
    std::string l(line);
    while (!l.empty() && (l.back() == '\n' || l.back() == ' ')) l.pop_back();
    found = l.size() >= name.size() && l.compare(l.size() - name.size(), name.size(), name) == 0 &&
            (l.size() == name.size() || l[l.size() - name.size() - 1] == ' ');
  }
  std::fclose(f);
  return found;
}
}  // namespace

// A memif client cannot start before its server has made the socket (a failed start leaves the
// PMD unable to connect later): two programs started together, as ucx_perftest's two sides open
// their devices at the same moment, wait for it up to kLinkWaitMs, as they would for the link.
void detail::await_memif_server(const std::string& socket) {
  for (uint32_t waited_ms = 0; !unix_socket_listening(socket) && waited_ms < param::kLinkWaitMs;
       waited_ms += param::kLinkCheckMs)
    rte_delay_us_sleep(param::kLinkCheckMs * 1000);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// The memif PMD maps the shared regions (its rings and their buffers, memfd "memif_region_N") at
// connection, and each page becomes this process's on its first touch: a page fault of several
// microseconds on each of the 2,048 slots of a ring, the first time round. A ping-pong's first
// 1,024 round trips took 15 us instead of 1.3 us, 1% of a 100,000-iteration ib_write_lat, all of
// its 99th percentile. Each region is mapped now instead, with the kernel's write faults
// (MADV_POPULATE_WRITE: the pages' bytes are not changed, the peer may already be writing them).
size_t detail::populate_memif_regions() {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return 0;
  size_t done = 0;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    if (!std::strstr(line, "/memfd:memif_region_")) continue;
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) != 2 || hi <= lo) continue;
    if (madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE) == 0) done += hi - lo;
  }
  std::fclose(f);
  return done;
}

bool DpdkLink::wait_link(bool up, uint32_t timeout_ms) {
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t end = rte_get_tsc_cycles() + hz / 1000 * timeout_ms;
  for (;;) {
    rte_eth_link lk{};
    rte_eth_link_get_nowait(port_, &lk);
    if ((lk.link_status == RTE_ETH_LINK_UP) == up) {
      if (up) reconnect_at_ = 0;
      if (up && is_memif_) ctr_.memif_mapped = detail::populate_memif_regions();
      return true;
    }
    // A memif client whose server accepted it before the server's own port had started is
    // dropped and does not try again by itself (two programs that open their devices at the same
    // moment): it connects again, every kMemifReconnectMs while it waits for the link.
    if (up && memif_client_) {
      const uint64_t now = rte_get_tsc_cycles();
      if (!reconnect_at_) reconnect_at_ = now + hz / 1000 * param::kMemifReconnectMs;
      if (now >= reconnect_at_) {
        rte_eth_dev_stop(port_);
        rte_eth_dev_start(port_);
        reconnect_at_ = now + hz / 1000 * param::kMemifReconnectMs;
      }
    }
    if (rte_get_tsc_cycles() > end) return false;
    rte_delay_us_sleep(up ? 10'000 : 1'000);
  }
}

bool DpdkLink::link_up_now(bool last) const {
  rte_eth_link lk{};
  if (rte_eth_link_get_nowait(port_, &lk) != 0) return last;
  return lk.link_status == RTE_ETH_LINK_UP;
}

void DpdkLink::await_peer_close(uint32_t timeout_ms) {
  if (!is_memif_) return;
  if (wait_link(false, timeout_ms)) rte_delay_us_sleep(100'000);  // let the disconnect finish
}

}  // namespace uroce::port
