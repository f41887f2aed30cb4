// Neighbour resolution on the link: a peer's MAC from the control plane's cache, or asked for
// (an ARP request or a neighbour solicitation) every param::kArpRetryMs until the answer or
// cfg.arp_timeout_ms. On a netdev shared with the kernel (key netdev) the kernel's route and
// neighbour tables answer instead, and the kernel resolves (port/netlink.hpp).
#include <rte_cycles.h>

#include "port/dpdk_link_impl.hpp"

namespace uroce::port {

using detail::M;

bool DpdkLink::lookup(const proto::Ip6& ip, proto::Mac& out) const {
  if (kernel_) {
    proto::Ip6 hop;
    std::string err;
    return kernel_->next_hop(ip, hop, err, &route_hop_limit_) && kernel_->lookup(hop, out) == KernelNeighbours::State::Valid;
  }
  return ctl_.neighbours().lookup(ip, out, now_ms());
}

// One step of a wait for an answer: the caller's pump (which takes the frames in), or our own
// receive, whose RoCE frames are dropped.
void DpdkLink::wait_step(const std::function<void()>& pump) {
  if (pump) {
    pump();
    return;
  }
  engine::PacketBuf b[param::kRxBurst];
  const size_t n = recv(b, param::kRxBurst);
  for (size_t i = 0; i < n; ++i) release(b[i]);
}

// The kernel's next hop towards `gid`, its MAC from the kernel's table, the kernel asked to
// resolve it when it has none (again after a failure), looked at every kNeighbourProbeMs.
bool DpdkLink::resolve_by_kernel(const proto::Ip6& gid, proto::Mac& out, const std::function<void()>& pump) {
  proto::Ip6 hop;
  if (!kernel_->next_hop(gid, hop, resolve_error_, &route_hop_limit_)) return false;
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t end = rte_get_tsc_cycles() + hz / 1000 * cfg_.arp_timeout_ms;
  bool asked = false;
  for (;;) {
    const KernelNeighbours::State st = kernel_->lookup(hop, out);
    if (st == KernelNeighbours::State::Valid) return true;
    if (rte_get_tsc_cycles() >= end) break;
    if (st == KernelNeighbours::State::Absent || (st == KernelNeighbours::State::Failed && !asked)) {
      if (!kernel_->probe(hop, resolve_error_)) return false;
      asked = true;
    }
    const uint64_t next = rte_get_tsc_cycles() + hz / 1000 * param::kNeighbourProbeMs;
    while (rte_get_tsc_cycles() < next) {
      wait_step(pump);
      if (!pump) sleep_ms(1);
    }
  }
  resolve_error_ = "the kernel did not resolve " + gid_str(hop) + " on " + cfg_.netdev + " within " +
                   std::to_string(cfg_.arp_timeout_ms) + " ms (ip neigh show dev " + cfg_.netdev + ")";
  return false;
}

// One ARP request (IPv4-mapped GID) or neighbour solicitation (IPv6) for `gid`.
void DpdkLink::ask(const proto::Ip6& gid) {
  rte_mbuf* m = rte_pktmbuf_alloc(static_cast<rte_mempool*>(pool_));
  if (!m) return;
  ctl_.set_time_ms(now_ms());
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  m->data_len = uint16_t(engine::gid_is_v4mapped(gid) ? ctl_.arp_request(f, gid.data() + 12)
                                                      : ctl_.neighbour_solicit(f, gid));
  m->pkt_len = m->data_len;
  if (!tx_one(m)) rte_pktmbuf_free(m);
}

bool DpdkLink::resolve(const proto::Ip6& gid, proto::Mac& out, const std::function<void()>& pump) {
  resolve_error_.clear();
  if (kernel_) return resolve_by_kernel(gid, out, pump);
  if (lookup(gid, out)) return true;
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t start = rte_get_tsc_cycles();
  const uint64_t end = start + hz / 1000 * cfg_.arp_timeout_ms;
  uint64_t next_ask = start;
  while (rte_get_tsc_cycles() < end) {
    if (rte_get_tsc_cycles() >= next_ask) {
      ask(gid);
      next_ask = rte_get_tsc_cycles() + hz / 1000 * param::kArpRetryMs;
    }
    wait_step(pump);
    if (lookup(gid, out)) return true;
  }
  return false;
}

}  // namespace uroce::port
