// Neighbour resolution on the link: a peer's MAC from the control plane's cache, or asked for
// (an ARP request or a neighbour solicitation) every param::kArpRetryMs until the answer or
// cfg.arp_timeout_ms.
#include <rte_cycles.h>

#include "port/dpdk_link_impl.hpp"

namespace uroce::port {

using detail::M;

bool DpdkLink::lookup(const proto::Ip6& ip, proto::Mac& out) const { return ctl_.neighbours().lookup(ip, out, now_ms()); }

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
    if (pump) {
      pump();
    } else {
      engine::PacketBuf b[param::kRxBurst];
      size_t n = recv(b, param::kRxBurst);
      for (size_t i = 0; i < n; ++i) release(b[i]);
    }
    if (lookup(gid, out)) return true;
  }
  return false;
}

}  // namespace uroce::port
