#include "port/netlink.hpp"

#include <libmnl/libmnl.h>
#include <linux/neighbour.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include <cstdio>

#include <cerrno>
#include <cstring>
#include <vector>

#include "engine/types.hpp"

namespace uroce::port {

namespace {

mnl_socket* S(void* p) { return static_cast<mnl_socket*>(p); }

// The address of a GID as the kernel wants it: 4 bytes (IPv4-mapped) or 16.
struct KAddr {
  int family;
  const uint8_t* bytes;
  uint16_t len;
};
KAddr kaddr(const proto::Ip6& g) {
  if (engine::gid_is_v4mapped(g)) return {AF_INET, g.data() + 12, 4};
  return {AF_INET6, g.data(), 16};
}
proto::Ip6 gid_of(int family, const void* a) {
  proto::Ip6 g{};
  if (family == AF_INET) {
    g[10] = g[11] = 0xff;
    std::memcpy(g.data() + 12, a, 4);
  } else {
    std::memcpy(g.data(), a, 16);
  }
  return g;
}

struct RouteAnswer {
  int family = 0;
  int oif = 0;
  uint32_t hop_limit = 0;   // RTAX_HOPLIMIT of RTA_METRICS (0: none)
  bool have_gw = false;
  proto::Ip6 gw{};
};
int metric_attr(const nlattr* a, void* data) {
  if (mnl_attr_get_type(a) == RTAX_HOPLIMIT && mnl_attr_validate(a, MNL_TYPE_U32) >= 0)
    static_cast<RouteAnswer*>(data)->hop_limit = mnl_attr_get_u32(a);
  return MNL_CB_OK;
}
int route_attr(const nlattr* a, void* data) {
  auto* r = static_cast<RouteAnswer*>(data);
  const int t = mnl_attr_get_type(a);
  if (t == RTA_METRICS) mnl_attr_parse_nested(a, metric_attr, data);
  if (t == RTA_OIF && mnl_attr_validate(a, MNL_TYPE_U32) >= 0) r->oif = int(mnl_attr_get_u32(a));
  if (t == RTA_GATEWAY && mnl_attr_get_payload_len(a) == (r->family == AF_INET ? 4u : 16u)) {
    r->gw = gid_of(r->family, mnl_attr_get_payload(a));
    r->have_gw = true;
  }
  return MNL_CB_OK;
}
int route_cb(const void* nlh_, void* data) {
  auto* nlh = static_cast<const nlmsghdr*>(nlh_);
  auto* rm = static_cast<const rtmsg*>(mnl_nlmsg_get_payload(nlh));
  static_cast<RouteAnswer*>(data)->family = rm->rtm_family;
  mnl_attr_parse(nlh, sizeof(*rm), route_attr, data);
  return MNL_CB_OK;
}

struct NeighAnswer {
  bool found = false;
  uint16_t state = 0;
  bool have_mac = false;
  proto::Mac mac{};
};
int neigh_attr(const nlattr* a, void* data) {
  auto* n = static_cast<NeighAnswer*>(data);
  if (mnl_attr_get_type(a) == NDA_LLADDR && mnl_attr_get_payload_len(a) == 6) {
    std::memcpy(n->mac.data(), mnl_attr_get_payload(a), 6);
    n->have_mac = true;
  }
  return MNL_CB_OK;
}
int neigh_cb(const void* nlh_, void* data) {
  auto* nlh = static_cast<const nlmsghdr*>(nlh_);
  auto* nd = static_cast<const ndmsg*>(mnl_nlmsg_get_payload(nlh));
  auto* n = static_cast<NeighAnswer*>(data);
  n->found = true;
  n->state = nd->ndm_state;
  mnl_attr_parse(nlh, sizeof(*nd), neigh_attr, data);
  return MNL_CB_OK;
}

}  // namespace

KernelNeighbours::~KernelNeighbours() {
  if (nl_) mnl_socket_close(S(nl_));
}

bool KernelNeighbours::open(std::string& err) {
  if (nl_) return true;
  mnl_socket* s = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
  if (!s || mnl_socket_bind(s, 0, MNL_SOCKET_AUTOPID) < 0) {
    err = std::string("netlink socket: ") + std::strerror(errno);
    if (s) mnl_socket_close(s);
    return false;
  }
  nl_ = s;
  return true;
}

bool KernelNeighbours::request(void* nlh_, int (*cb)(const void*, void*), void* data, std::string& err, int* nl_errno) {
  auto* nlh = static_cast<nlmsghdr*>(nlh_);
  if (!open(err)) return false;
  nlh->nlmsg_seq = seq_++;
  const uint32_t portid = mnl_socket_get_portid(S(nl_));
  if (mnl_socket_sendto(S(nl_), nlh, nlh->nlmsg_len) < 0) {
    err = std::string("netlink send: ") + std::strerror(errno);
    return false;
  }
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  for (;;) {
    const ssize_t n = mnl_socket_recvfrom(S(nl_), buf.data(), buf.size());
    if (n < 0) {
      err = std::string("netlink receive: ") + std::strerror(errno);
      return false;
    }
    const int rc = mnl_cb_run(buf.data(), size_t(n), nlh->nlmsg_seq, portid, reinterpret_cast<mnl_cb_t>(cb), data);
    if (rc == MNL_CB_ERROR) {
      if (nl_errno) *nl_errno = errno;
      err = std::string("netlink: ") + std::strerror(errno);
      return false;
    }
    if (rc == MNL_CB_STOP) return true;
  }
}

// A number in a /proc/sys file, or `dflt`.
uint32_t sysctl_u32(const std::string& path, uint32_t dflt) {
  FILE* f = std::fopen(path.c_str(), "r");
  unsigned v = 0;
  const bool ok = f && std::fscanf(f, "%u", &v) == 1;
  if (f) std::fclose(f);
  return ok ? v : dflt;
}

bool KernelNeighbours::next_hop(const proto::Ip6& dst, proto::Ip6& hop, std::string& err, uint8_t* hop_limit) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_GETROUTE;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  auto* rm = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)));
  const KAddr k = kaddr(dst);
  rm->rtm_family = uint8_t(k.family);
  rm->rtm_dst_len = uint8_t(k.len * 8);
  mnl_attr_put(nlh, RTA_DST, k.len, k.bytes);
  if (engine::gid_is_v4mapped(dst) == false && dst[0] == 0xfe && (dst[1] & 0xc0) == 0x80)
    mnl_attr_put_u32(nlh, RTA_OIF, uint32_t(ifindex_));  // a link-local address: our interface's scope
  RouteAnswer r;
  if (!request(nlh, route_cb, &r, err)) {
    err = "no route to the peer: " + err;
    return false;
  }
  if (r.oif != ifindex_) {
    err = "the route to the peer leaves through interface index " + std::to_string(r.oif) +
          ", not the netdev's (" + std::to_string(ifindex_) + ")";
    return false;
  }
  hop = r.have_gw ? r.gw : dst;
  if (hop_limit) {
    uint32_t h = r.hop_limit;
    if (h == 0 && r.family == AF_INET) h = sysctl_u32("/proc/sys/net/ipv4/ip_default_ttl", 64);
    if (h == 0) {
      char name[IF_NAMESIZE] = {};
      h = if_indextoname(unsigned(ifindex_), name) ? sysctl_u32(std::string("/proc/sys/net/ipv6/conf/") + name + "/hop_limit", 64) : 64;
    }
    *hop_limit = uint8_t(h > 255 || h == 0 ? 64 : h);
  }
  return true;
}

KernelNeighbours::State KernelNeighbours::lookup(const proto::Ip6& ip, proto::Mac& mac) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_GETNEIGH;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;  // the answer, then the ACK that ends request()
  auto* nd = static_cast<ndmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ndmsg)));
  const KAddr k = kaddr(ip);
  nd->ndm_family = uint8_t(k.family);
  nd->ndm_ifindex = ifindex_;
  mnl_attr_put(nlh, NDA_DST, k.len, k.bytes);
  NeighAnswer n;
  std::string err;
  int e = 0;
  if (!request(nlh, neigh_cb, &n, err, &e) || !n.found) return State::Absent;
  if (n.state & NUD_FAILED) return State::Failed;
  if (n.state & NUD_INCOMPLETE) return State::Pending;
  // The kernel's NUD_VALID (include/net/neighbour.h, not exported to user space).
  constexpr uint16_t kValid = NUD_PERMANENT | NUD_NOARP | NUD_REACHABLE | NUD_PROBE | NUD_STALE | NUD_DELAY;
  if ((n.state & kValid) && n.have_mac) {
    mac = n.mac;
    return State::Valid;
  }
  return n.state == NUD_NONE ? State::Pending : State::Absent;
}

bool KernelNeighbours::probe(const proto::Ip6& ip, std::string& err) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_NEWNEIGH;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
  auto* nd = static_cast<ndmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ndmsg)));
  const KAddr k = kaddr(ip);
  nd->ndm_family = uint8_t(k.family);
  nd->ndm_ifindex = ifindex_;
  nd->ndm_flags = NTF_USE;
  mnl_attr_put(nlh, NDA_DST, k.len, k.bytes);
  return request(nlh, [](const void*, void*) { return int(MNL_CB_OK); }, nullptr, err);
}

AddressWatch::~AddressWatch() {
  if (nl_) mnl_socket_close(S(nl_));
}

bool AddressWatch::open(std::string& err) {
  mnl_socket* s = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (!s || mnl_socket_bind(s, RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR, MNL_SOCKET_AUTOPID) < 0) {
    err = std::string("netlink address watch: ") + std::strerror(errno);
    if (s) mnl_socket_close(s);
    return false;
  }
  nl_ = s;
  return true;
}

bool AddressWatch::changed() {
  if (!nl_) return false;
  bool any = false;
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  for (;;) {
    const ssize_t n = mnl_socket_recvfrom(S(nl_), buf.data(), buf.size());
    if (n < 0) return any || errno == ENOBUFS;  // EAGAIN: nothing more; ENOBUFS: some were lost
    int len = int(n);
    for (auto* h = reinterpret_cast<const nlmsghdr*>(buf.data()); mnl_nlmsg_ok(h, len); h = mnl_nlmsg_next(h, &len)) {
      if (h->nlmsg_type != RTM_NEWADDR && h->nlmsg_type != RTM_DELADDR) continue;
      auto* ifa = static_cast<const ifaddrmsg*>(mnl_nlmsg_get_payload(h));
      if (int(ifa->ifa_index) == ifindex_) any = true;
    }
  }
}

}  // namespace uroce::port
