#include "port/groups.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "port/param.hpp"
#include "proto/multicast.hpp"

namespace uroce::port {

namespace {

// IP_ADD_MEMBERSHIP / IP_DROP_MEMBERSHIP, IPV6_JOIN_GROUP / IPV6_LEAVE_GROUP on interface `ifindex`.
int membership(int fd, bool v6, const proto::Ip6& g, int ifindex, bool join) {
  int rc;
  if (v6) {
    ipv6_mreq m{};
    std::memcpy(&m.ipv6mr_multiaddr, g.data(), 16);
    m.ipv6mr_interface = unsigned(ifindex);
    rc = setsockopt(fd, IPPROTO_IPV6, join ? IPV6_JOIN_GROUP : IPV6_LEAVE_GROUP, &m, sizeof m);
  } else {
    ip_mreqn m{};
    std::memcpy(&m.imr_multiaddr, g.data() + 12, 4);
    m.imr_ifindex = ifindex;
    rc = setsockopt(fd, IPPROTO_IP, join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP, &m, sizeof m);
  }
  return rc == 0 ? 0 : errno;
}

}  // namespace

KernelGroups::~KernelGroups() {
  for (Sock& s : socks_)
    if (s.fd >= 0) close(s.fd);  // the kernel leaves the socket's groups
}

int KernelGroups::join(const proto::Ip6& g) {
  if (!proto::is_multicast_gid(g)) return EINVAL;
  if (where_.count(g)) return 0;
  const bool v6 = !proto::gid_is_v4mapped(g);
  size_t i = 0;
  while (i < socks_.size() && (socks_[i].v6 != v6 || socks_[i].groups >= param::kGroupsPerSocket)) ++i;
  if (i == socks_.size()) {
    const int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    socks_.push_back({fd, v6, 0});
  }
  if (int rc = membership(socks_[i].fd, v6, g, ifindex_, true)) return rc;
  ++socks_[i].groups;
  where_[g] = i;
  return 0;
}

int KernelGroups::leave(const proto::Ip6& g) {
  auto it = where_.find(g);
  if (it == where_.end()) return EINVAL;
  Sock& s = socks_[it->second];
  const int rc = membership(s.fd, s.v6, g, ifindex_, false);
  --s.groups;  // (a failed leave: the socket's close at the end drops it)
  where_.erase(it);
  return rc;
}

}  // namespace uroce::port
