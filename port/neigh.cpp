#include "port/neigh.hpp"

#include <cstdio>
#include <cstring>

#include "port/config.hpp"
#include "port/link_counters.hpp"
#include "proto/arp.hpp"
#include "proto/checksum.hpp"
#include "proto/headers.hpp"
#include "proto/icmp.hpp"
#include "proto/locate.hpp"
#include "proto/multicast.hpp"

namespace uroce::port {

using namespace proto;

namespace {

bool is_broadcast(const uint8_t* m) { return (m[0] & m[1] & m[2] & m[3] & m[4] & m[5]) == 0xFF; }

}  // namespace

Ip6 v4mapped(const uint8_t ip[4]) {
  Ip6 g{};
  g[10] = g[11] = 0xFF;
  std::memcpy(g.data() + 12, ip, 4);
  return g;
}

// ---- Neighbour cache ----------------------------------------------------------------------------
void Neighbours::asked(const Ip6& ip, uint64_t now_ms) {
  for (auto& p : pending_)
    if (p.valid && p.ip == ip) {
      p.at_ms = now_ms;
      return;
    }
  Pending& p = pending_[next_pending_++ % pending_.size()];
  p = {ip, now_ms, true};
}

Neighbours::Learnt Neighbours::learn(const Ip6& ip, const uint8_t* mac, uint64_t now_ms, bool may_create) {
  for (auto& n : entries_)
    if (n.valid && n.ip == ip) {
      const bool changed = std::memcmp(n.mac.data(), mac, 6) != 0;
      std::memcpy(n.mac.data(), mac, 6);
      n.at_ms = now_ms;
      return changed ? Learnt::Changed : Learnt::Refreshed;
    }
  bool solicited = may_create;
  for (auto& p : pending_)
    if (p.valid && p.ip == ip && now_ms - p.at_ms <= param::kNeighbourPendingMs) {
      solicited = true;
      p.valid = false;
    }
  if (!solicited) return Learnt::Ignored;  // gratuitous: no entry is created for it
  Entry& n = entries_[next_++ % entries_.size()];
  n.ip = ip;
  std::memcpy(n.mac.data(), mac, 6);
  n.at_ms = now_ms;
  n.valid = true;
  return Learnt::Added;
}

bool Neighbours::lookup(const Ip6& ip, Mac& out, uint64_t now_ms) const {
  for (auto& n : entries_)
    if (n.valid && n.ip == ip) {
      if (now_ms - n.at_ms > param::kNeighbourTtlMs) return false;  // aged out: resolve again
      out = n.mac;
      return true;
    }
  return false;
}

// ---- Control plane ------------------------------------------------------------------------------
bool ControlPlane::own4(const uint8_t* a) const {
  if (have_ip4_ && std::memcmp(a, ip4_, 4) == 0) return true;
  for (const auto& x : more4_)
    if (std::memcmp(a, x.data(), 4) == 0) return true;
  return false;
}

const Ip6* ControlPlane::own6(const uint8_t* a) const {
  for (const Ip6& x : ip6s_)
    if (std::memcmp(a, x.data(), 16) == 0) return &x;
  return nullptr;
}

void ControlPlane::init(const Mac& mac, const uint8_t* ip4, const std::vector<Ip6>& ip6s, LinkCounters* ctr) {
  mac_ = mac;
  have_ip4_ = ip4 != nullptr;
  if (ip4) std::memcpy(ip4_, ip4, 4);
  ip6s_.clear();
  more4_.clear();
  for (const Ip6& a : ip6s) {
    if (proto::gid_is_v4mapped(a)) more4_.push_back({a[12], a[13], a[14], a[15]});
    else ip6s_.push_back(a);
  }
  ctr_ = ctr;
}

void ControlPlane::learn(const Ip6& ip, const uint8_t* mac, bool may_create) {
  switch (neigh_.learn(ip, mac, now_ms_, may_create)) {
    case Neighbours::Learnt::Ignored: ++ctr_->neigh_unsolicited; break;
    case Neighbours::Learnt::Changed:
      ++ctr_->neigh_mac_changed;
      std::fprintf(stderr, "uroce: neighbour %s now answers from MAC %02x:%02x:%02x:%02x:%02x:%02x\n",
                   gid_str(ip).c_str(), mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]);
      break;
    default: break;
  }
}

void ControlPlane::answer_to(uint8_t* f, const uint8_t* dst) const {
  uint8_t d[6];
  std::memcpy(d, dst, 6);  // `dst` may point into the frame (its source MAC)
  EthView<uint8_t> eth(f);
  eth.set_dst(d);
  eth.set_src(mac_.data());
}

// A frame to a multicast group: its IP destination (4 or 16 bytes at `ip`) is one, and the frame
// came to that group's MAC (proto/multicast.hpp).
static bool to_group(const uint8_t* f, const uint8_t* ip, size_t n) {
  Ip6 g{};
  if (n == 4) {
    g[10] = g[11] = 0xff;
    std::memcpy(g.data() + 12, ip, 4);
  } else {
    std::memcpy(g.data(), ip, 16);
  }
  if (!is_multicast_gid(g)) return false;
  const Mac m = multicast_mac(g);
  return std::memcmp(EthView<const uint8_t>(f).dst(), m.data(), 6) == 0;
}

Verdict ControlPlane::sort(uint8_t* f, uint32_t len, uint32_t cap) {
  LinkCounters& c = *ctr_;
  const Located at = locate({f, len});
  if (at.l3 == 0) {  // cut inside the Ethernet header or a VLAN tag
    ++c.drop_malformed;
    return {};
  }
  const bool to_us = std::memcmp(EthView<const uint8_t>(f).dst(), mac_.data(), 6) == 0;
  const bool roce = at.roce_v2() && at.ok();  // UDP 4791 with the whole UDP header
  if (at.ethertype == kEtherTypeIpv4) {
    if (at.l4 == 0) {  // bad version or IHL, or cut inside the IPv4 header
      ++c.drop_malformed;
    } else if (roce && to_group(f, Ipv4View<const uint8_t>(f + at.l3).dst(), 4)) {
      ++c.rx_roce;  // a multicast group's datagram: the engine knows the group's members
      return {Verdict::Deliver};
    } else if (!to_us) {
      ++c.drop_not_our_mac;
    } else if (!own4(Ipv4View<const uint8_t>(f + at.l3).dst())) {
      ++c.drop_not_our_ip;
    } else if (at.ip_proto == kIpProtoUdp) {
      if (roce) {
        ++c.rx_roce;
        return {Verdict::Deliver};
      }
      ++c.drop_udp_port;
    } else if (at.ip_proto == kIpProtoIcmp) {
      return on_icmp4(f, len, at.l3);
    } else {
      ++c.drop_ip_proto;
    }
  } else if (at.ethertype == kEtherTypeIpv6) {
    if (at.l4 == 0) {
      ++c.drop_malformed;
    } else if (!to_us && !is_ipv6_multicast_mac(f)) {
      ++c.drop_not_our_mac;
    } else {
      const uint8_t* dst = Ipv6View<const uint8_t>(f + at.l3).dst();
      const bool ours = own6(dst) != nullptr;
      if (roce && to_group(f, dst, 16)) {
        ++c.rx_roce;  // a multicast group's datagram, as for IPv4
        return {Verdict::Deliver};
      }
      if (at.ip_proto == kIpProtoUdp && ours && to_us) {
        if (roce) {
          ++c.rx_roce;
          return {Verdict::Deliver};
        }
        ++c.drop_udp_port;
      } else if (at.ip_proto == kIpProtoIcmp6 && (ours || is_link_local_multicast(dst))) {
        // Link-local multicast includes the solicited-node address of ours.
        return on_icmp6(f, len, cap, at.l3);
      } else if (!ours) {
        ++c.drop_not_our_ip;
      } else {
        ++c.drop_ip_proto;
      }
    }
  } else if (at.arp()) {
    if (!to_us && !is_broadcast(f)) ++c.drop_not_our_mac;
    else return on_arp(f, len, at.l3);
  } else {
    ++c.drop_ethertype;
  }
  return {};
}

// ARP for IPv4 over Ethernet: answer requests for our address, learn from replies (and from
// requests addressed to us, as the kernel does).
Verdict ControlPlane::on_arp(uint8_t* f, uint32_t len, size_t l3) {
  LinkCounters& c = *ctr_;
  if (len - l3 < ArpView<const uint8_t>::kSize || !ArpView<const uint8_t>(f + l3).is_ethernet_ipv4()) {
    ++c.drop_malformed;
    return {};
  }
  ArpView<uint8_t> a(f + l3);
  if (a.oper() == kArpReply) {
    ++c.arp_replies_rcvd;
    learn(v4mapped(a.spa()), a.sha(), false);
    return {};
  }
  if (a.oper() != kArpRequest || !have_ip4_ || std::memcmp(a.tpa(), ip4_, 4) != 0) {
    ++c.drop_not_our_ip;
    return {};
  }
  ++c.arp_requests;
  learn(v4mapped(a.spa()), a.sha(), true);
  // Turn the request into the reply in place.
  uint8_t req_sha[6], req_spa[4];
  std::memcpy(req_sha, a.sha(), 6);
  std::memcpy(req_spa, a.spa(), 4);
  answer_to(f, req_sha);
  a.set_oper(kArpReply);
  a.set_sha(mac_.data());
  a.set_spa(ip4_);
  a.set_tha(req_sha);
  a.set_tpa(req_spa);
  return {Verdict::Reply, uint32_t(l3 + ArpView<uint8_t>::kSize), &c.arp_replies_sent};
}

// ICMP: echo requests to our IPv4 address become echo replies.
Verdict ControlPlane::on_icmp4(uint8_t* f, uint32_t len, size_t l3) {
  LinkCounters& c = *ctr_;
  Ipv4View<uint8_t> ip(f + l3);
  const size_t ihl = ip.header_len();
  const size_t tot = ip.total_len();
  if (tot < ihl + IcmpView<uint8_t>::kSize || l3 + tot > len) {
    ++c.drop_malformed;
    return {};
  }
  IcmpView<uint8_t> ic(f + l3 + ihl);
  if (ic.type() != kIcmpEchoRequest || ic.code() != 0) {
    ++c.drop_ip_proto;
    return {};
  }
  ++c.icmp_echo;
  answer_to(f, EthView<const uint8_t>(f).src());
  ip.set_dst(ip.src());
  ip.set_src(ip4_);
  ip.set_ttl(param::kControlTtl);
  ip.set_checksum(0);
  ip.set_checksum(inet_checksum(ip.data(), ihl));
  ic.set_type(kIcmpEchoReply);
  ic.set_checksum(0);
  ic.set_checksum(inet_checksum(ic.data(), tot - ihl));
  return {Verdict::Reply, uint32_t(l3 + tot), &c.icmp_replies_sent};
}

// ICMPv6: echo request to our address, neighbour solicitation for it, advertisements (learnt).
Verdict ControlPlane::on_icmp6(uint8_t* f, uint32_t len, uint32_t cap, size_t l3) {
  LinkCounters& c = *ctr_;
  Ipv6View<uint8_t> ip(f + l3);
  const size_t plen = ip.payload_len();
  const size_t l4 = l3 + Ipv6View<uint8_t>::kSize;
  if (plen < IcmpView<uint8_t>::kSize || l4 + plen > len) {
    ++c.drop_malformed;
    return {};
  }
  uint8_t* const ic = f + l4;
  const uint8_t type = IcmpView<const uint8_t>(ic).type();
  const std::span<const uint8_t> options(ic + NdView<uint8_t>::kSize,
                                         plen > NdView<uint8_t>::kSize ? plen - NdView<uint8_t>::kSize : 0);
  Ip6 src;
  std::memcpy(src.data(), ip.src(), 16);
  if ((type == kIcmp6NeighbourAdvert || type == kIcmp6NeighbourSolicit) && ip.hop_limit() != kNdHopLimit) {
    ++c.drop_nd_hop_limit;  // RFC 4861 7.1: not from the link itself
    return {};
  }
  if (type == kIcmp6NeighbourAdvert) {
    if (plen < NdView<uint8_t>::kSize) {
      ++c.drop_malformed;
      return {};
    }
    ++c.nd_adverts_rcvd;
    Ip6 target;
    std::memcpy(target.data(), NdView<const uint8_t>(ic).target(), 16);
    if (const uint8_t* o = find_nd_option(options, kNdOptTargetLinkAddr))
      learn(target, NdOptionView<const uint8_t>(o).lladdr(), false);
    return {};
  }
  if (type == kIcmp6NeighbourSolicit) {
    constexpr size_t kNaLen = NdView<uint8_t>::kSize + NdOptionView<uint8_t>::kSize;
    const Ip6* target = plen < NdView<uint8_t>::kSize ? nullptr : own6(NdView<const uint8_t>(ic).target());
    if (!target) {
      ++c.drop_not_our_ip;
      return {};
    }
    ++c.nd_solicits;
    const uint8_t* sll = find_nd_option(options, kNdOptSourceLinkAddr);
    uint8_t dst_mac[6];
    std::memcpy(dst_mac, sll ? NdOptionView<const uint8_t>(sll).lladdr() : EthView<const uint8_t>(f).src(), 6);
    if (sll) learn(src, dst_mac, true);
    if (cap < l4 + kNaLen) {  // no room for the advertisement (never with DpdkLink's mbufs)
      ++c.drop_malformed;
      return {};
    }
    // Reply: NA, solicited + override, with our link-layer address; to the solicitor.
    answer_to(f, dst_mac);
    ip.set_dst(src.data());
    ip.set_src(target->data());
    ip.set_hop_limit(kNdHopLimit);
    ip.set_payload_len(uint16_t(kNaLen));
    NdView<uint8_t> na(ic);
    na.set_type(kIcmp6NeighbourAdvert);
    na.set_code(0);
    na.set_flags(kNaSolicited | kNaOverride);
    na.set_target(target->data());
    NdOptionView<uint8_t>(ic + NdView<uint8_t>::kSize).set_lladdr_option(kNdOptTargetLinkAddr, mac_.data());
    na.set_checksum(0);
    na.set_checksum(icmp6_checksum(ip.data(), ic, kNaLen));
    return {Verdict::Reply, uint32_t(l4 + kNaLen), &c.nd_adverts_sent};
  }
  const Ip6* echo_dst = type == kIcmp6EchoRequest ? own6(ip.dst()) : nullptr;
  if (echo_dst) {
    ++c.icmp_echo;
    answer_to(f, EthView<const uint8_t>(f).src());
    const Ip6 me = *echo_dst;
    ip.set_dst(src.data());
    ip.set_src(me.data());
    ip.set_hop_limit(param::kControlTtl);
    IcmpView<uint8_t> echo(ic);
    echo.set_type(kIcmp6EchoReply);
    echo.set_checksum(0);
    echo.set_checksum(icmp6_checksum(ip.data(), ic, plen));
    return {Verdict::Reply, uint32_t(l4 + plen), &c.icmp_replies_sent};
  }
  ++c.drop_ip_proto;
  return {};
}

uint32_t ControlPlane::arp_request(uint8_t* f, const uint8_t ip[4]) {
  neigh_.asked(v4mapped(ip), now_ms_);
  static constexpr uint8_t kBroadcast[6] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  static constexpr uint8_t kUnknown[6] = {};
  EthView<uint8_t> eth(f);
  eth.set_dst(kBroadcast);
  eth.set_src(mac_.data());
  eth.set_ethertype(kEtherTypeArp);
  ArpView<uint8_t> a(f + EthView<uint8_t>::kSize);
  a.set_ethernet_ipv4();
  a.set_oper(kArpRequest);
  a.set_sha(mac_.data());
  a.set_spa(ip4_);
  a.set_tha(kUnknown);
  a.set_tpa(ip);
  return EthView<uint8_t>::kSize + ArpView<uint8_t>::kSize;
}

uint32_t ControlPlane::neighbour_solicit(uint8_t* f, const Ip6& target) {
  neigh_.asked(target, now_ms_);
  constexpr size_t kNsLen = NdView<uint8_t>::kSize + NdOptionView<uint8_t>::kSize;
  uint8_t group[16], group_mac[6];
  solicited_node(target.data(), group);
  ipv6_multicast_mac(group, group_mac);
  EthView<uint8_t> eth(f);
  eth.set_dst(group_mac);
  eth.set_src(mac_.data());
  eth.set_ethertype(kEtherTypeIpv6);
  Ipv6View<uint8_t> ip(f + EthView<uint8_t>::kSize);
  ip.set_vtf(0, 0);
  ip.set_payload_len(uint16_t(kNsLen));
  ip.set_next_header(kIpProtoIcmp6);
  ip.set_hop_limit(kNdHopLimit);
  ip.set_src(ip6s_.front().data());  // solicitations come from the link-local address
  ip.set_dst(group);
  uint8_t* ic = f + EthView<uint8_t>::kSize + Ipv6View<uint8_t>::kSize;
  std::memset(ic, 0, kNsLen);
  NdView<uint8_t> ns(ic);
  ns.set_type(kIcmp6NeighbourSolicit);
  ns.set_target(target.data());
  NdOptionView<uint8_t>(ic + NdView<uint8_t>::kSize).set_lladdr_option(kNdOptSourceLinkAddr, mac_.data());
  ns.set_checksum(icmp6_checksum(ip.data(), ic, kNsLen));
  return uint32_t(EthView<uint8_t>::kSize + Ipv6View<uint8_t>::kSize + kNsLen);
}

}  // namespace uroce::port
