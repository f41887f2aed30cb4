// Flow isolation (key flow_isolate; docs/hardware.md): the port in rte_flow isolated mode
// receives only what these rules send to queue 0: frames to our MAC (unless we share the
// port's), RoCEv2 (UDP 4791) to our IPv4 address and, sharing the port's MAC, to each IPv6 GID.
#include <rte_ethdev.h>
#include <rte_flow.h>

#include <cstring>

#include "port/dpdk_link_impl.hpp"

namespace uroce::port {

bool DpdkLink::install_flows(std::string& err) {
  rte_flow_attr attr{};
  attr.ingress = 1;
  rte_flow_action_queue q{};
  q.index = 0;
  const rte_flow_action actions[] = {{RTE_FLOW_ACTION_TYPE_QUEUE, &q}, {RTE_FLOW_ACTION_TYPE_END, nullptr}};
  auto create = [&](const rte_flow_item* pattern, const char* what) {
    rte_flow_error fe{};
    rte_flow* f = rte_flow_create(port_, &attr, pattern, actions, &fe);
    if (!f) err = std::string("rte_flow_create (") + what + "): " + (fe.message ? fe.message : "?");
    else flows_.push_back(f);
    return f != nullptr;
  };
  // RoCEv2 to the address the IP item (IPv4 or IPv6, spec and mask) matches.
  auto roce_to = [&](rte_flow_item_type ip_type, const void* ip, const void* ip_mask, const char* what) {
    rte_flow_item_udp udp{}, udp_mask{};
    udp.hdr.dst_port = rte_cpu_to_be_16(proto::kRoceV2Port);
    udp_mask.hdr.dst_port = 0xFFFF;
    const rte_flow_item pattern[] = {{RTE_FLOW_ITEM_TYPE_ETH, nullptr, nullptr, nullptr},
                                     {ip_type, ip, nullptr, ip_mask},
                                     {RTE_FLOW_ITEM_TYPE_UDP, &udp, nullptr, &udp_mask},
                                     {RTE_FLOW_ITEM_TYPE_END, nullptr, nullptr, nullptr}};
    return create(pattern, what);
  };

  if (!cfg_.mac_from_port) {
    rte_flow_item_eth eth{}, eth_mask{};
    std::memcpy(eth.hdr.dst_addr.addr_bytes, mac_.data(), 6);
    std::memset(eth_mask.hdr.dst_addr.addr_bytes, 0xFF, 6);
    const rte_flow_item by_mac[] = {{RTE_FLOW_ITEM_TYPE_ETH, &eth, nullptr, &eth_mask},
                                    {RTE_FLOW_ITEM_TYPE_END, nullptr, nullptr, nullptr}};
    if (!create(by_mac, "our MAC")) return false;
  }
  if (have_ip4_) {
    rte_flow_item_ipv4 ip{}, ip_mask{};
    std::memcpy(&ip.hdr.dst_addr, ip4_, 4);
    ip_mask.hdr.dst_addr = 0xFFFFFFFF;
    if (!roce_to(RTE_FLOW_ITEM_TYPE_IPV4, &ip, &ip_mask, "UDP 4791")) return false;
  }
  // Sharing the port's MAC, IPv6 RoCE needs a rule per IPv6 GID too (with a MAC of our own the
  // MAC rule already takes it).
  for (size_t i = 0; cfg_.mac_from_port && i < gids_.size(); ++i) {
    if (i == 1 || gids_[i] == proto::Ip6{}) continue;  // 1: the IPv4 GID (rule above)
    rte_flow_item_ipv6 ip{}, ip_mask{};
    std::memcpy(ip.hdr.dst_addr, gids_[i].data(), 16);
    std::memset(ip_mask.hdr.dst_addr, 0xFF, 16);
    if (!roce_to(RTE_FLOW_ITEM_TYPE_IPV6, &ip, &ip_mask, "IPv6 UDP 4791")) return false;
  }
  return true;
}

}  // namespace uroce::port
