// The link counters' name table and their one-line text (port/link_counters.hpp).
#include "port/link_counters.hpp"

#include <sstream>
#include <tuple>

namespace uroce::port {

// A counter's name is its member's name.
#define UROCE_FIELD(type, m) {#m, &type::m}

const LinkCounterField kLinkCounterFields[] = {
#define F(m) UROCE_FIELD(LinkCounters, m)
    F(rx_frames),        F(rx_roce),          F(tx_frames),         F(tx_refused),       F(alloc_failed),
    F(tx_full),          F(bottleneck_frames), F(bottleneck_marked), F(bottleneck_dropped), F(bottleneck_max_queue),
    F(arp_requests),     F(arp_replies_sent), F(arp_replies_rcvd),  F(icmp_echo),        F(icmp_replies_sent),
    F(nd_solicits),      F(nd_adverts_sent),  F(nd_adverts_rcvd),   F(drop_not_our_mac), F(drop_not_our_ip),
    F(drop_udp_port),    F(drop_ip_proto),    F(drop_ethertype),    F(drop_malformed),   F(drop_multiseg),
    F(drop_nd_hop_limit), F(neigh_unsolicited), F(neigh_mac_changed), F(capture_frames), F(capture_skipped), F(memif_mapped),
#undef F
};
const size_t kLinkCounterFieldCount = sizeof kLinkCounterFields / sizeof kLinkCounterFields[0];
// Every plain counter (those before the fault stages' counts, printed per direction) is in the table.
static_assert(sizeof kLinkCounterFields / sizeof kLinkCounterFields[0] == offsetof(LinkCounters, rx_fault) / sizeof(uint64_t),
              "every link counter is in kLinkCounterFields");

namespace {
struct FaultCountField {
  const char* name;
  uint64_t FaultCounts::* member;
};
constexpr FaultCountField kFaultCountFields[] = {
    UROCE_FIELD(FaultCounts, dropped),   UROCE_FIELD(FaultCounts, duplicated), UROCE_FIELD(FaultCounts, reordered),
    UROCE_FIELD(FaultCounts, corrupted), UROCE_FIELD(FaultCounts, delayed),    UROCE_FIELD(FaultCounts, hold_full),
};
static_assert(sizeof kFaultCountFields / sizeof kFaultCountFields[0] == sizeof(FaultCounts) / sizeof(uint64_t),
              "every fault count is in kFaultCountFields");
}  // namespace
#undef UROCE_FIELD

std::string link_counters_text(const LinkCounters& c, bool rx_fault_on, bool tx_fault_on) {
  std::ostringstream o;
  for (size_t i = 0; i < kLinkCounterFieldCount; ++i)
    o << (i ? " " : "") << kLinkCounterFields[i].name << '=' << c.*kLinkCounterFields[i].member;
  for (auto [dir, on, f] : {std::tuple{"rx", rx_fault_on, &c.rx_fault}, std::tuple{"tx", tx_fault_on, &c.tx_fault}}) {
    if (!on) continue;
    for (const FaultCountField& ff : kFaultCountFields) o << " " << dir << "_fault_" << ff.name << '=' << f->*ff.member;
  }
  return o.str();
}

}  // namespace uroce::port
