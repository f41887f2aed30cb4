// The port's counters (LinkCounters) and the table of their names (kLinkCounterFields), which
// DpdkLink::counters_text, uroce-perf --stats and the /uroce/stats telemetry command print.
// No DPDK: the control plane (port/neigh.cpp) counts into them as DpdkLink does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "port/fault_stage.hpp"  // FaultCounts

namespace uroce::port {

struct LinkCounters {
  uint64_t rx_frames = 0, rx_roce = 0, tx_frames = 0, tx_refused = 0, alloc_failed = 0;
  uint64_t tx_full = 0;  // transmit buffers not lent: the backlog was full (back-pressure)
  // The congestion point on the transmit side (keys bottleneck_*): frames admitted, marked CE,
  // dropped (its queue full), and the largest queue in bytes.
  uint64_t bottleneck_frames = 0, bottleneck_marked = 0, bottleneck_dropped = 0, bottleneck_max_queue = 0;
  uint64_t arp_requests = 0, arp_replies_sent = 0, arp_replies_rcvd = 0;
  uint64_t icmp_echo = 0, icmp_replies_sent = 0;
  uint64_t nd_solicits = 0, nd_adverts_sent = 0, nd_adverts_rcvd = 0;
  uint64_t drop_not_our_mac = 0, drop_not_our_ip = 0, drop_udp_port = 0, drop_ip_proto = 0, drop_ethertype = 0,
           drop_malformed = 0, drop_multiseg = 0, drop_nd_hop_limit = 0;
  uint64_t neigh_unsolicited = 0;   // replies/advertisements nobody asked for: no entry created
  uint64_t neigh_mac_changed = 0;   // a known neighbour answered from another MAC (logged)
  // Capture (key capture): frames in the file, frames not written (the file's size limit).
  uint64_t capture_frames = 0, capture_skipped = 0;
  // memif: bytes of the rings' shared regions mapped into this process when the link came up
  // (detail::populate_memif_regions), so that no first use of a ring slot takes a page fault.
  uint64_t memif_mapped = 0;
  // Fault injection (keys fault_*), per direction: what each stage did.
  FaultCounts rx_fault, tx_fault;
  uint64_t dropped() const {
    return drop_not_our_mac + drop_not_our_ip + drop_udp_port + drop_ip_proto + drop_ethertype + drop_malformed +
           drop_multiseg + drop_nd_hop_limit;
  }
};

// Every plain link counter's name and member (the fault stages' counts are printed per direction).
struct LinkCounterField {
  const char* name;
  uint64_t LinkCounters::* member;
};
extern const LinkCounterField kLinkCounterFields[];
extern const size_t kLinkCounterFieldCount;

// "name=value ..." for every plain counter, then, for each direction whose fault stage is on,
// its counts as "rx_fault_dropped=..." (the line uroce-perf --stats prints).
std::string link_counters_text(const LinkCounters& c, bool rx_fault_on, bool tx_fault_on);

}  // namespace uroce::port
