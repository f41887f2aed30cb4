// A netdev of the host as uroce's link, beside the kernel (config key `netdev`, docs/netdev.md):
// what uroce takes from the interface (its MAC, MTU, IPv4 and IPv6 addresses, hence the GID
// table as rxe builds it) and the EAL line that attaches DPDK's af_xdp PMD to it with uroce's
// XDP program (port/xdp/roce_redirect.bpf.c: RoCEv2 frames to uroce, every other frame to the
// kernel). Neighbours and routes come from the kernel: port/netlink.hpp.
//
// No DPDK here (this is uroce_port_core): the interface is read with getifaddrs(3) and ioctl(2).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "proto/packet.hpp"

namespace uroce::port {

struct EndpointConfig;  // port/config.hpp

struct NetdevInfo {
  std::string name;
  int ifindex = 0;
  proto::Mac mac{};
  uint32_t mtu = 0;                 // the interface's (IP) MTU
  bool up = false;                  // IFF_UP
  bool have_ip4 = false;
  uint8_t ip4[4] = {};              // its first IPv4 address
  uint8_t prefix4 = 0;
  bool have_link_local = false;
  proto::Ip6 link_local{};          // its fe80::/10 address
  std::vector<proto::Ip6> ip6s;     // its other IPv6 addresses, in the kernel's order
  std::vector<proto::Ip6> ip4_more; // its IPv4 addresses after the first, IPv4-mapped (GIDs 2.., as rxe
                                    // has a GID for each address of the interface)
};

// Reads interface `name` of this network namespace. False and `err` when there is none.
bool read_netdev(const std::string& name, NetdevInfo& out, std::string& err);

// The largest RoCE path MTU (bytes: 256..4096) that fits an interface MTU, as rxe chooses it:
// the MTU less the largest RoCEv2 headers (IPv6, UDP, BTH, RETH, ICRC: param::kRoceMaxHeaders).
uint32_t path_mtu_for(uint32_t if_mtu);

// The XDP program file: the config's xdp_prog, else UROCE_XDP_PROG (uroce-run sets it to the
// build tree's when run from one), else the installed one. Empty if none of them exists.
std::string xdp_program(const EndpointConfig& c);

// Fills a config whose key `netdev` is set from the interface: mac (the interface's), ip (its
// first IPv4 address), ip6 (its other IPv6 addresses), the link-local GID (its own, not one made
// from the MAC), link_mtu (its MTU), mtu (path_mtu_for() of it, capped by what AF_XDP carries)
// and, unless the config has an eal line, one that attaches af_xdp to it with xdp_program().
// Keys the file set itself are kept. False and `err` when the interface is missing or lacks what
// the config needs.
bool apply_netdev(EndpointConfig& c, std::string& err);

// "--lcores=N@(CPUS)": EAL lcore `lcore` on every CPU this process may run on (its affinity).
std::string lcores_of_affinity(unsigned lcore = 0);

}  // namespace uroce::port
