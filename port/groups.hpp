// Multicast groups joined in the kernel, for a link on a netdev shared with the kernel (key
// netdev, docs/netdev.md): when the engine's first QP attaches to a group (ibv_attach_mcast,
// rdma_join_multicast), the kernel joins it on the interface, as rdma_cm has it join for rxe
// (cma_igmp_send): an IGMP report (MLD for IPv6) goes out, so that switches that snoop forward
// the group to us, and the interface lets the group's MAC in. The memberships are those of UDP
// sockets of ours (IP_ADD_MEMBERSHIP, IPV6_JOIN_GROUP on the interface's index): the kernel
// drops them when the sockets close, also when the process is killed. No DPDK here
// (uroce_port_core).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "proto/packet.hpp"

namespace uroce::port {

class KernelGroups {
 public:
  explicit KernelGroups(int ifindex) : ifindex_(ifindex) {}
  ~KernelGroups();
  KernelGroups(const KernelGroups&) = delete;
  KernelGroups& operator=(const KernelGroups&) = delete;

  // Joins (or leaves) `group`, an IPv4-mapped or IPv6 multicast GID. 0 or an errno (EINVAL: not
  // a multicast group; from the kernel: ENOBUFS past its limits, ENODEV).
  int join(const proto::Ip6& group);
  int leave(const proto::Ip6& group);
  size_t joined() const { return where_.size(); }

 private:
  struct Sock {
    int fd = -1;
    bool v6 = false;
    uint32_t groups = 0;
  };
  int ifindex_;
  std::vector<Sock> socks_;                 // each holds at most param::kGroupsPerSocket groups
  std::map<proto::Ip6, size_t> where_;      // group -> its socket in socks_
};

}  // namespace uroce::port
