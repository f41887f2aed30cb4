// The kernel's routes and neighbours, for a link on a netdev shared with the kernel (key netdev,
// port/netdev.hpp): as rxe does, uroce sends to the next hop the kernel's routing table names
// (the peer itself, or a gateway) at the MAC the kernel's neighbour table holds, and a missing
// neighbour is resolved by the kernel (its ARP or ND, its timers and its defences), not by uroce.
// rtnetlink requests through libmnl; no DPDK here (uroce_port_core).
#pragma once
#include <cstdint>
#include <string>

#include "proto/packet.hpp"

namespace uroce::port {

class KernelNeighbours {
 public:
  explicit KernelNeighbours(int ifindex) : ifindex_(ifindex) {}
  ~KernelNeighbours();
  KernelNeighbours(const KernelNeighbours&) = delete;
  KernelNeighbours& operator=(const KernelNeighbours&) = delete;

  // The next hop towards `dst` (an IPv4-mapped or IPv6 GID): `dst` itself on a connected route,
  // else the route's gateway; `hop_limit` the route's hop limit metric, else the kernel's
  // default (net.ipv4.ip_default_ttl, or the interface's IPv6 hop_limit), as the kernel gives
  // RoCE address handles (ib_resolve_unicast_gid_dmac). False and `err` when there is no route
  // or it leaves through another interface than ours.
  bool next_hop(const proto::Ip6& dst, proto::Ip6& hop, std::string& err, uint8_t* hop_limit = nullptr);

  enum class State : uint8_t { Valid, Pending, Failed, Absent };
  // The kernel's entry for `ip` on our interface: Valid (REACHABLE, STALE, DELAY, PROBE,
  // PERMANENT, NOARP: `mac` set), Pending (INCOMPLETE), Failed, or Absent.
  State lookup(const proto::Ip6& ip, proto::Mac& mac);
  // Asks the kernel to resolve `ip` on our interface (a neighbour entry created and used, as
  // `ip neigh replace IP dev IFACE use` does: the kernel sends its ARP request or solicitation).
  bool probe(const proto::Ip6& ip, std::string& err);

 private:
  bool open(std::string& err);
  // Sends one request and reads its answer(s) into `cb` (a libmnl callback); false and `err`
  // on a netlink error (errno in `nl_errno`).
  bool request(void* nlh, int (*cb)(const void*, void*), void* data, std::string& err, int* nl_errno = nullptr);

  int ifindex_;
  void* nl_ = nullptr;   // mnl_socket*
  uint32_t seq_ = 1;
};

// Address changes on one interface: rtnetlink's IPv4 and IPv6 address groups, read without
// blocking (the link's housekeeping asks now and then).
class AddressWatch {
 public:
  explicit AddressWatch(int ifindex) : ifindex_(ifindex) {}
  ~AddressWatch();
  AddressWatch(const AddressWatch&) = delete;
  AddressWatch& operator=(const AddressWatch&) = delete;
  bool open(std::string& err);
  // Whether an address of the interface was added or removed since the last call (also true
  // once after the socket's buffer overflowed: changes may have been missed).
  bool changed();

 private:
  int ifindex_;
  void* nl_ = nullptr;   // mnl_socket*
};

}  // namespace uroce::port
