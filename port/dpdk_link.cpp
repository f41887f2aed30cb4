#include "port/dpdk_link.hpp"

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_flow.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstring>
#include <sstream>

#include "proto/bytes.hpp"
#include "proto/checksum.hpp"
#include "proto/headers.hpp"

namespace uroce::port {

using proto::load_be16;
using proto::load_be32;
using proto::store_be16;
using proto::store_be32;

namespace {

constexpr uint16_t kEthArp = 0x0806, kEthIp4 = 0x0800, kEthIp6 = 0x86DD;
constexpr uint8_t kProtoIcmp = 1, kProtoUdp = 17, kProtoIcmp6 = 58;
constexpr uint32_t kMinFrame = 60;  // Ethernet minimum without FCS

bool eal_started = false;

rte_mbuf* M(void* p) { return static_cast<rte_mbuf*>(p); }

// One's-complement sum (RFC 1071) over bytes, continuing `sum`.
uint32_t csum_add(uint32_t sum, const uint8_t* p, size_t len) {
  for (size_t i = 0; i + 1 < len; i += 2) sum += load_be16(p + i);
  if (len & 1) sum += uint32_t(p[len - 1]) << 8;
  return sum;
}
uint16_t csum_fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return uint16_t(~sum);
}

// ICMPv6 checksum over the pseudo header and the message at f + l3 + 40.
uint16_t icmp6_checksum(const uint8_t* ip6, const uint8_t* msg, uint32_t len) {
  uint32_t s = csum_add(0, ip6 + 8, 32);
  s += len >> 16;
  s += len & 0xFFFF;
  s += kProtoIcmp6;
  return csum_fold(csum_add(s, msg, len));
}

bool is_broadcast(const uint8_t* m) {
  return (m[0] & m[1] & m[2] & m[3] & m[4] & m[5]) == 0xFF;
}

proto::Ip6 v4mapped(const uint8_t ip[4]) {
  proto::Ip6 g{};
  g[10] = g[11] = 0xFF;
  std::memcpy(g.data() + 12, ip, 4);
  return g;
}

}  // namespace

// ---- Clock --------------------------------------------------------------------------------------
TscClock::TscClock() {
  uint64_t hz = rte_get_tsc_hz();
  mult_ = hz ? (uint64_t(1'000'000'000) << 32) / hz : (1ull << 32);
}
uint64_t TscClock::now_ns() const {
  return uint64_t((unsigned __int128)rte_get_tsc_cycles() * mult_ >> 32);
}

// ---- Set-up ---------------------------------------------------------------------------------------
std::unique_ptr<DpdkLink> DpdkLink::open(const EndpointConfig& cfg, std::string& err,
                                         const std::vector<std::string>& extra_eal) {
  if (!eal_started) {
    static std::vector<std::string> args;  // the EAL keeps pointers into argv
    static std::vector<char*> argv;
    args.clear();
    args.push_back("uroce");
    for (auto& a : cfg.eal) args.push_back(a);
    for (auto& a : extra_eal) args.push_back(a);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (rte_eal_init(int(args.size()), argv.data()) < 0) {
      err = std::string("rte_eal_init: ") + rte_strerror(rte_errno);
      return nullptr;
    }
    eal_started = true;
  }
  std::unique_ptr<DpdkLink> l(new DpdkLink());
  l->cfg_ = cfg;
  if (!l->setup(err)) return nullptr;
  return l;
}

bool DpdkLink::setup(std::string& err) {
  uint16_t pid = RTE_MAX_ETHPORTS;
  if (cfg_.port >= 0) {
    if (!rte_eth_dev_is_valid_port(uint16_t(cfg_.port))) {
      err = "no DPDK port " + std::to_string(cfg_.port);
      return false;
    }
    pid = uint16_t(cfg_.port);
  } else {
    uint16_t p;
    RTE_ETH_FOREACH_DEV(p) {
      pid = p;
      break;
    }
    if (pid == RTE_MAX_ETHPORTS) {
      err = "no DPDK port (check the eal line: --vdev or a PCI address)";
      return false;
    }
  }
  port_ = pid;
  rte_eth_dev_info info;
  if (int rc = rte_eth_dev_info_get(port_, &info); rc != 0) {
    err = "rte_eth_dev_info_get: " + std::string(rte_strerror(-rc));
    return false;
  }
  max_frame_ = cfg_.max_frame();
  is_memif_ = info.driver_name && std::string(info.driver_name) == "net_memif";
  const uint32_t room = RTE_PKTMBUF_HEADROOM + ((std::max(max_frame_, cfg_.mbuf_size) + 63) & ~63u);
  if (room > 0xFFFF) {
    err = "link_mtu too large for one mbuf";
    return false;
  }
  std::string pool_name = "uroce_mb_" + std::to_string(port_);
  pool_ = rte_pktmbuf_pool_create(pool_name.c_str(), cfg_.mbufs, cfg_.mbuf_cache, 0, uint16_t(room),
                                  int(rte_eth_dev_socket_id(port_)) < 0 ? 0 : rte_eth_dev_socket_id(port_));
  if (!pool_) {
    err = "rte_pktmbuf_pool_create(" + std::to_string(cfg_.mbufs) + " x " + std::to_string(room) +
          "): " + rte_strerror(rte_errno) + " (raise -m in the eal line or lower mbufs)";
    return false;
  }
  if (cfg_.flow_isolate) {
    rte_flow_error fe{};
    if (rte_flow_isolate(port_, 1, &fe) != 0) {
      err = std::string("rte_flow_isolate: ") + (fe.message ? fe.message : "not supported by this PMD");
      return false;
    }
  }
  rte_eth_conf conf{};
  if (rte_eth_dev_configure(port_, 1, 1, &conf) != 0) {
    err = "rte_eth_dev_configure failed";
    return false;
  }
  // Not every PMD sets an MTU (af_packet reports 1518 yet carries jumbo frames when its
  // framesz allows): a failure here is not fatal.
  if (rte_eth_dev_set_mtu(port_, uint16_t(cfg_.link_mtu)) != 0 && info.max_mtu < cfg_.link_mtu)
    fprintf(stderr, "uroce: port %u: MTU %u not set (driver max %u); continuing\n", port_, cfg_.link_mtu,
            info.max_mtu);
  uint16_t nrx = cfg_.rx_desc, ntx = cfg_.tx_desc;
  rte_eth_dev_adjust_nb_rx_tx_desc(port_, &nrx, &ntx);
  int sock = rte_eth_dev_socket_id(port_);
  if (sock < 0) sock = 0;
  if (rte_eth_rx_queue_setup(port_, 0, nrx, unsigned(sock), nullptr, static_cast<rte_mempool*>(pool_)) != 0 ||
      rte_eth_tx_queue_setup(port_, 0, ntx, unsigned(sock), nullptr) != 0) {
    err = "queue setup failed";
    return false;
  }
  rte_ether_addr pm;
  rte_eth_macaddr_get(port_, &pm);
  if (cfg_.mac_from_port) std::memcpy(mac_.data(), pm.addr_bytes, 6);
  else mac_ = cfg_.mac;
  if (int rc = rte_eth_dev_start(port_); rc != 0) {
    err = "rte_eth_dev_start: " + std::string(rte_strerror(-rc));
    return false;
  }
  if (!cfg_.mac_from_port && std::memcmp(pm.addr_bytes, mac_.data(), 6) != 0) {
    rte_ether_addr a;
    std::memcpy(a.addr_bytes, mac_.data(), 6);
    // A NIC filters on its MAC list: add ours, or fall back to promiscuous mode.
    if (rte_eth_dev_mac_addr_add(port_, &a, 0) != 0 && cfg_.promiscuous) rte_eth_promiscuous_enable(port_);
    if (cfg_.promiscuous) rte_eth_promiscuous_enable(port_);
  }
  have_ip4_ = cfg_.have_ip4;
  std::memcpy(ip4_, cfg_.ip4, 4);
  ip6_ = cfg_.have_ip6 ? cfg_.ip6 : link_local_from_mac(mac_);
  gid_ = cfg_.gid_index == 1 ? v4mapped(ip4_) : ip6_;

  if (cfg_.flow_isolate) {
    // Only our traffic comes to DPDK: frames to our MAC, and RoCEv2 to our IPv4 address.
    rte_flow_attr attr{};
    attr.ingress = 1;
    rte_flow_action_queue q{};
    q.index = 0;
    rte_flow_action actions[] = {{RTE_FLOW_ACTION_TYPE_QUEUE, &q}, {RTE_FLOW_ACTION_TYPE_END, nullptr}};
    rte_flow_error fe{};
    rte_flow_item_eth eth{}, eth_mask{};
    std::memcpy(eth.hdr.dst_addr.addr_bytes, mac_.data(), 6);
    std::memset(eth_mask.hdr.dst_addr.addr_bytes, 0xFF, 6);
    rte_flow_item by_mac[] = {{RTE_FLOW_ITEM_TYPE_ETH, &eth, nullptr, &eth_mask},
                              {RTE_FLOW_ITEM_TYPE_END, nullptr, nullptr, nullptr}};
    if (!cfg_.mac_from_port) {
      rte_flow* f = rte_flow_create(port_, &attr, by_mac, actions, &fe);
      if (!f) {
        err = std::string("rte_flow_create (our MAC): ") + (fe.message ? fe.message : "?");
        return false;
      }
      flows_.push_back(f);
    }
    if (have_ip4_) {
      rte_flow_item_ipv4 ip{}, ip_mask{};
      std::memcpy(&ip.hdr.dst_addr, ip4_, 4);
      ip_mask.hdr.dst_addr = 0xFFFFFFFF;
      rte_flow_item_udp udp{}, udp_mask{};
      udp.hdr.dst_port = rte_cpu_to_be_16(proto::kRoceV2Port);
      udp_mask.hdr.dst_port = 0xFFFF;
      rte_flow_item pat[] = {{RTE_FLOW_ITEM_TYPE_ETH, nullptr, nullptr, nullptr},
                             {RTE_FLOW_ITEM_TYPE_IPV4, &ip, nullptr, &ip_mask},
                             {RTE_FLOW_ITEM_TYPE_UDP, &udp, nullptr, &udp_mask},
                             {RTE_FLOW_ITEM_TYPE_END, nullptr, nullptr, nullptr}};
      rte_flow* f = rte_flow_create(port_, &attr, pat, actions, &fe);
      if (!f) {
        err = std::string("rte_flow_create (UDP 4791): ") + (fe.message ? fe.message : "?");
        return false;
      }
      flows_.push_back(f);
    }
  }
  return true;
}

DpdkLink::~DpdkLink() {
  rte_flow_error fe{};
  for (void* f : flows_) rte_flow_destroy(port_, static_cast<rte_flow*>(f), &fe);
  for (; bl_n_; --bl_n_, bl_head_ = (bl_head_ + 1) % kBacklog) rte_pktmbuf_free(M(backlog_[bl_head_]));
  while (stash_n_) rte_pktmbuf_free(M(stash_[--stash_n_]));
  rte_eth_dev_stop(port_);
  rte_eth_dev_close(port_);
  // The mempool and the EAL live until the process exits (rte_eal_cleanup there).
}

bool DpdkLink::wait_link(bool up, uint32_t timeout_ms) {
  const uint64_t end = rte_get_tsc_cycles() + rte_get_tsc_hz() / 1000 * timeout_ms;
  for (;;) {
    rte_eth_link lk{};
    rte_eth_link_get_nowait(port_, &lk);
    if ((lk.link_status == RTE_ETH_LINK_UP) == up) return true;
    if (rte_get_tsc_cycles() > end) return false;
    rte_delay_us_sleep(up ? 10'000 : 1'000);
  }
}

void DpdkLink::await_peer_close(uint32_t timeout_ms) {
  if (!is_memif_) return;
  if (wait_link(false, timeout_ms)) rte_delay_us_sleep(100'000);  // let the disconnect finish
}

std::string DpdkLink::describe() const {
  rte_eth_dev_info info{};
  rte_eth_dev_info_get(port_, &info);
  std::ostringstream o;
  o << cfg_.name << ": port " << port_ << " (" << (info.driver_name ? info.driver_name : "?") << "), mac "
    << mac_str(mac_);
  if (have_ip4_) o << ", ip " << gid_str(v4mapped(ip4_)) << "/" << int(cfg_.prefix4);
  o << ", ip6 " << gid_str(ip6_) << ", gid[" << cfg_.gid_index << "] " << gid_str(gid_) << ", path mtu "
    << engine::mtu_bytes(cfg_.path_mtu) << ", max frame " << max_frame_;
  return o.str();
}

std::string DpdkLink::counters_text() const {
  const LinkCounters& c = ctr_;
  std::ostringstream o;
  o << "rx_frames=" << c.rx_frames << " rx_roce=" << c.rx_roce << " tx_frames=" << c.tx_frames
    << " tx_refused=" << c.tx_refused << " alloc_failed=" << c.alloc_failed << " arp_requests=" << c.arp_requests
    << " arp_replies_sent=" << c.arp_replies_sent << " arp_replies_rcvd=" << c.arp_replies_rcvd
    << " icmp_echo=" << c.icmp_echo << " icmp_replies_sent=" << c.icmp_replies_sent
    << " nd_solicits=" << c.nd_solicits << " nd_adverts_sent=" << c.nd_adverts_sent
    << " nd_adverts_rcvd=" << c.nd_adverts_rcvd << " drop_not_our_mac=" << c.drop_not_our_mac
    << " drop_not_our_ip=" << c.drop_not_our_ip << " drop_udp_port=" << c.drop_udp_port
    << " drop_ip_proto=" << c.drop_ip_proto << " drop_ethertype=" << c.drop_ethertype
    << " drop_malformed=" << c.drop_malformed << " drop_multiseg=" << c.drop_multiseg;
  return o.str();
}

// ---- Data path --------------------------------------------------------------------------------------
bool DpdkLink::alloc(engine::PacketBuf& b, uint32_t len) {
  if (stash_n_ == 0) {
    if (rte_pktmbuf_alloc_bulk(static_cast<rte_mempool*>(pool_), reinterpret_cast<rte_mbuf**>(stash_), 32) == 0) {
      stash_n_ = 32;
    } else if (rte_mbuf* one = rte_pktmbuf_alloc(static_cast<rte_mempool*>(pool_))) {
      stash_[0] = one;
      stash_n_ = 1;
    } else {
      ++ctr_.alloc_failed;
      return false;
    }
  }
  rte_mbuf* m = M(stash_[--stash_n_]);
  const uint32_t cap = rte_pktmbuf_tailroom(m);
  if (cap < len) {
    rte_pktmbuf_free(m);
    return false;
  }
  b.data = rte_pktmbuf_mtod(m, uint8_t*);
  b.cap = cap;
  b.len = 0;
  b.handle = m;
  return true;
}

// Sends what the backlog holds; true when it is empty.
bool DpdkLink::drain_backlog() {
  while (bl_n_) {
    const uint32_t k = std::min<uint32_t>(bl_n_, std::min<uint32_t>(64, kBacklog - bl_head_));
    const uint16_t sent =
        rte_eth_tx_burst(port_, 0, reinterpret_cast<rte_mbuf**>(backlog_.data() + bl_head_), uint16_t(k));
    ctr_.tx_frames += sent;
    bl_head_ = (bl_head_ + sent) % kBacklog;
    bl_n_ -= sent;
    if (sent < k) return false;
  }
  return true;
}

size_t DpdkLink::send(engine::PacketBuf* bufs, size_t n) {
  rte_mbuf* ms[64];
  size_t total = 0;
  const bool clear = drain_backlog();
  while (total < n) {
    const size_t k = std::min<size_t>(n - total, 64);
    for (size_t i = 0; i < k; ++i) {
      engine::PacketBuf& b = bufs[total + i];
      rte_mbuf* m = M(b.handle);
      uint32_t len = b.len;
      if (len < kMinFrame) {
        std::memset(b.data + len, 0, kMinFrame - len);
        len = kMinFrame;
      }
      m->data_len = uint16_t(len);
      m->pkt_len = len;
      ms[i] = m;
    }
    const uint16_t sent = clear ? rte_eth_tx_burst(port_, 0, ms, uint16_t(k)) : 0;
    ctr_.tx_frames += sent;
    total += sent;
    if (sent < k) {
      // The ring is full: keep the rest in the backlog while it has room.
      size_t i = sent;
      for (; i < k && bl_n_ < kBacklog; ++i) backlog_[(bl_head_ + bl_n_++) % kBacklog] = ms[i];
      total += i - sent;
      if (i < k) {
        ctr_.tx_refused += n - total;
        break;
      }
      if (total < n) {
        // Everything after this goes behind the backlog too.
        for (size_t j = total; j < n && bl_n_ < kBacklog; ++j, ++total) {
          engine::PacketBuf& b = bufs[j];
          rte_mbuf* m = M(b.handle);
          const uint32_t len = std::max(b.len, kMinFrame);
          if (b.len < kMinFrame) std::memset(b.data + b.len, 0, kMinFrame - b.len);
          m->data_len = uint16_t(len);
          m->pkt_len = len;
          backlog_[(bl_head_ + bl_n_++) % kBacklog] = m;
        }
        if (total < n) ctr_.tx_refused += n - total;
        break;
      }
    }
  }
  return total;
}

void DpdkLink::release(engine::PacketBuf& b) {
  if (b.handle) rte_pktmbuf_free(M(b.handle));
  b.handle = nullptr;
}

size_t DpdkLink::recv(engine::PacketBuf* bufs, size_t max) {
  rte_mbuf* ms[64];
  size_t k = 0;
  if (bl_n_) drain_backlog();
  const uint16_t n = rte_eth_rx_burst(port_, 0, ms, uint16_t(std::min<size_t>(max, 64)));
  for (uint16_t i = 0; i < n; ++i) {
    if (i + 1 < n) rte_prefetch0(rte_pktmbuf_mtod(ms[i + 1], void*));
    classify(ms[i], bufs, k);
  }
  ctr_.rx_frames += n;
  return k;
}

// Sorts one received frame: RoCEv2 for us goes to out[k++]; ARP, ND and echo requests are
// answered (the mbuf is reused for the reply); everything else is counted and freed.
void DpdkLink::classify(void* mp, engine::PacketBuf* out, size_t& k) {
  rte_mbuf* m = M(mp);
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  const uint32_t len = m->data_len;
  if (m->nb_segs != 1) {
    ++ctr_.drop_multiseg;
    rte_pktmbuf_free(m);
    return;
  }
  if (len < 14) {
    ++ctr_.drop_malformed;
    rte_pktmbuf_free(m);
    return;
  }
  const bool to_us = std::memcmp(f, mac_.data(), 6) == 0;
  const uint16_t et = load_be16(f + 12);
  bool keep = false;  // true: the mbuf was reused (sent) or handed on
  if (et == kEthIp4) {
    if (len < 34 || (f[14] >> 4) != 4 || (f[14] & 0xF) < 5 || len < 14u + (f[14] & 0xF) * 4u) {
      ++ctr_.drop_malformed;
    } else if (!to_us) {
      ++ctr_.drop_not_our_mac;
    } else if (!have_ip4_ || std::memcmp(f + 30, ip4_, 4) != 0) {
      ++ctr_.drop_not_our_ip;
    } else {
      const uint32_t l4 = 14 + (f[14] & 0xF) * 4u;
      const uint8_t proto = f[23];
      if (proto == kProtoUdp) {
        if (len >= l4 + 8 && load_be16(f + l4 + 2) == proto::kRoceV2Port) {
          engine::PacketBuf& b = out[k++];
          b.data = f, b.len = len, b.cap = len, b.handle = m;
          ++ctr_.rx_roce;
          return;
        }
        ++ctr_.drop_udp_port;
      } else if (proto == kProtoIcmp) {
        keep = handle_icmp4(m, f, len, 14);
      } else {
        ++ctr_.drop_ip_proto;
      }
    }
  } else if (et == kEthIp6) {
    const bool mcast = f[0] == 0x33 && f[1] == 0x33;
    if (len < 54 || (f[14] >> 4) != 6) {
      ++ctr_.drop_malformed;
    } else if (!to_us && !mcast) {
      ++ctr_.drop_not_our_mac;
    } else {
      const uint8_t nh = f[20];
      const uint8_t* dst = f + 38;
      const bool ours = std::memcmp(dst, ip6_.data(), 16) == 0;
      // Solicited-node multicast ff02::1:ffXX:XXXX for our address.
      const bool solicited = dst[0] == 0xff && dst[1] == 0x02 && dst[11] == 0x01 && dst[12] == 0xff &&
                             std::memcmp(dst + 13, ip6_.data() + 13, 3) == 0;
      if (nh == kProtoUdp && ours && to_us) {
        if (len >= 62 && load_be16(f + 56) == proto::kRoceV2Port) {
          engine::PacketBuf& b = out[k++];
          b.data = f, b.len = len, b.cap = len, b.handle = m;
          ++ctr_.rx_roce;
          return;
        }
        ++ctr_.drop_udp_port;
      } else if (nh == kProtoIcmp6 && (ours || solicited || (dst[0] == 0xff && dst[1] == 0x02))) {
        keep = handle_icmp6(m, f, len, 14);
      } else if (!ours) {
        ++ctr_.drop_not_our_ip;
      } else {
        ++ctr_.drop_ip_proto;
      }
    }
  } else if (et == kEthArp) {
    if (!to_us && !is_broadcast(f)) ++ctr_.drop_not_our_mac;
    else keep = handle_arp(m, f, len);
  } else {
    ++ctr_.drop_ethertype;
  }
  if (!keep) rte_pktmbuf_free(m);
}

bool DpdkLink::tx_one(void* mp) {
  rte_mbuf* m = M(mp);
  if (m->data_len < kMinFrame) {
    std::memset(rte_pktmbuf_mtod(m, uint8_t*) + m->data_len, 0, kMinFrame - m->data_len);
    m->data_len = uint16_t(kMinFrame);
    m->pkt_len = kMinFrame;
  }
  if (rte_eth_tx_burst(port_, 0, &m, 1) == 1) {
    ++ctr_.tx_frames;
    return true;
  }
  ++ctr_.tx_refused;
  return false;  // the caller frees it
}

void DpdkLink::learn(const proto::Ip6& ip, const uint8_t* mac) {
  for (auto& n : neigh_)
    if (n.valid && n.ip == ip) {
      std::memcpy(n.mac.data(), mac, 6);
      return;
    }
  Neighbour& n = neigh_[neigh_next_++ % neigh_.size()];
  n.ip = ip;
  std::memcpy(n.mac.data(), mac, 6);
  n.valid = true;
}

bool DpdkLink::lookup(const proto::Ip6& ip, proto::Mac& out) const {
  for (auto& n : neigh_)
    if (n.valid && n.ip == ip) {
      out = n.mac;
      return true;
    }
  return false;
}

// ARP for IPv4 over Ethernet: answer requests for our address, learn from replies (and from
// requests addressed to us, as the kernel does).
bool DpdkLink::handle_arp(void* m, uint8_t* f, uint32_t len) {
  if (len < 42 || load_be16(f + 14) != 1 || load_be16(f + 16) != kEthIp4 || f[18] != 6 || f[19] != 4) {
    ++ctr_.drop_malformed;
    return false;
  }
  uint8_t* a = f + 14;
  const uint16_t op = load_be16(a + 6);
  const uint8_t* sha = a + 8;
  const uint8_t* spa = a + 14;
  const uint8_t* tpa = a + 24;
  const bool for_us = have_ip4_ && std::memcmp(tpa, ip4_, 4) == 0;
  if (op == 2) {
    ++ctr_.arp_replies_rcvd;
    learn(v4mapped(spa), sha);
    return false;
  }
  if (op != 1 || !for_us) {
    ++ctr_.drop_not_our_ip;
    return false;
  }
  ++ctr_.arp_requests;
  learn(v4mapped(spa), sha);
  // Turn the request into the reply in place.
  uint8_t req_sha[6], req_spa[4];
  std::memcpy(req_sha, sha, 6);
  std::memcpy(req_spa, spa, 4);
  std::memcpy(f, req_sha, 6);
  std::memcpy(f + 6, mac_.data(), 6);
  store_be16(a + 6, 2);
  std::memcpy(a + 8, mac_.data(), 6);
  std::memcpy(a + 14, ip4_, 4);
  std::memcpy(a + 18, req_sha, 6);
  std::memcpy(a + 24, req_spa, 4);
  rte_mbuf* mb = M(m);
  mb->data_len = 42;
  mb->pkt_len = 42;
  if (!tx_one(m)) return false;
  ++ctr_.arp_replies_sent;
  return true;
}

bool DpdkLink::handle_icmp4(void* m, uint8_t* f, uint32_t len, uint32_t l3) {
  const uint32_t ihl = (f[l3] & 0xF) * 4u;
  const uint32_t tot = load_be16(f + l3 + 2);
  if (tot < ihl + 8 || l3 + tot > len) {
    ++ctr_.drop_malformed;
    return false;
  }
  uint8_t* ic = f + l3 + ihl;
  if (ic[0] != 8 || ic[1] != 0) {  // echo request only
    ++ctr_.drop_ip_proto;
    return false;
  }
  ++ctr_.icmp_echo;
  uint8_t tmp[6];
  std::memcpy(tmp, f + 6, 6);
  std::memcpy(f, tmp, 6);
  std::memcpy(f + 6, mac_.data(), 6);
  uint8_t* ip = f + l3;
  std::memcpy(ip + 16, ip + 12, 4);
  std::memcpy(ip + 12, ip4_, 4);
  ip[8] = 64;
  store_be16(ip + 10, 0);
  store_be16(ip + 10, proto::inet_checksum(ip, ihl));
  ic[0] = 0;
  store_be16(ic + 2, 0);
  store_be16(ic + 2, csum_fold(csum_add(0, ic, tot - ihl)));
  rte_mbuf* mb = M(m);
  mb->data_len = uint16_t(l3 + tot);
  mb->pkt_len = l3 + tot;
  if (!tx_one(m)) return false;
  ++ctr_.icmp_replies_sent;
  return true;
}

// ICMPv6: echo request to our address, neighbour solicitation for it, advertisements (learnt).
bool DpdkLink::handle_icmp6(void* m, uint8_t* f, uint32_t len, uint32_t l3) {
  uint8_t* ip = f + l3;
  const uint32_t plen = load_be16(ip + 4);
  if (plen < 8 || l3 + 40 + plen > len) {
    ++ctr_.drop_malformed;
    return false;
  }
  uint8_t* ic = ip + 40;
  const uint8_t type = ic[0];
  proto::Ip6 src;
  std::memcpy(src.data(), ip + 8, 16);
  rte_mbuf* mb = M(m);
  if (type == 136) {  // neighbour advertisement: target at 8, options from 24
    if (plen < 24) {
      ++ctr_.drop_malformed;
      return false;
    }
    ++ctr_.nd_adverts_rcvd;
    proto::Ip6 target;
    std::memcpy(target.data(), ic + 8, 16);
    for (uint32_t o = 24; o + 8 <= plen && ic[o + 1] != 0; o += ic[o + 1] * 8u)
      if (ic[o] == 2) learn(target, ic + o + 2);  // target link-layer address
    return false;
  }
  if (type == 135) {  // neighbour solicitation
    if (plen < 24 || std::memcmp(ic + 8, ip6_.data(), 16) != 0) {
      ++ctr_.drop_not_our_ip;
      return false;
    }
    ++ctr_.nd_solicits;
    const uint8_t* sll = nullptr;
    for (uint32_t o = 24; o + 8 <= plen && ic[o + 1] != 0; o += ic[o + 1] * 8u)
      if (ic[o] == 1) sll = ic + o + 2;
    uint8_t dst_mac[6];
    std::memcpy(dst_mac, sll ? sll : f + 6, 6);
    if (sll) learn(src, sll);
    // Reply: NA, solicited + override, with our link-layer address; to the solicitor.
    std::memcpy(f, dst_mac, 6);
    std::memcpy(f + 6, mac_.data(), 6);
    std::memcpy(ip + 24, ip + 8, 16);
    std::memcpy(ip + 8, ip6_.data(), 16);
    ip[7] = 255;
    store_be16(ip + 4, 32);
    ic[0] = 136, ic[1] = 0;
    store_be32(ic + 4, 0x60000000);
    std::memcpy(ic + 8, ip6_.data(), 16);
    ic[24] = 2, ic[25] = 1;
    std::memcpy(ic + 26, mac_.data(), 6);
    store_be16(ic + 2, 0);
    store_be16(ic + 2, icmp6_checksum(ip, ic, 32));
    mb->data_len = uint16_t(l3 + 40 + 32);
    mb->pkt_len = mb->data_len;
    if (!tx_one(m)) return false;
    ++ctr_.nd_adverts_sent;
    return true;
  }
  if (type == 128 && std::memcmp(ip + 24, ip6_.data(), 16) == 0) {  // echo request to us
    ++ctr_.icmp_echo;
    uint8_t tmp[6];
    std::memcpy(tmp, f + 6, 6);
    std::memcpy(f, tmp, 6);
    std::memcpy(f + 6, mac_.data(), 6);
    std::memcpy(ip + 24, ip + 8, 16);
    std::memcpy(ip + 8, ip6_.data(), 16);
    ip[7] = 64;
    ic[0] = 129;
    store_be16(ic + 2, 0);
    store_be16(ic + 2, icmp6_checksum(ip, ic, plen));
    mb->data_len = uint16_t(l3 + 40 + plen);
    mb->pkt_len = mb->data_len;
    if (!tx_one(m)) return false;
    ++ctr_.icmp_replies_sent;
    return true;
  }
  ++ctr_.drop_ip_proto;
  return false;
}

void DpdkLink::send_arp_request(const uint8_t ip[4]) {
  rte_mbuf* m = rte_pktmbuf_alloc(static_cast<rte_mempool*>(pool_));
  if (!m) return;
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  std::memset(f, 0xFF, 6);
  std::memcpy(f + 6, mac_.data(), 6);
  store_be16(f + 12, kEthArp);
  uint8_t* a = f + 14;
  store_be16(a, 1);
  store_be16(a + 2, kEthIp4);
  a[4] = 6, a[5] = 4;
  store_be16(a + 6, 1);
  std::memcpy(a + 8, mac_.data(), 6);
  std::memcpy(a + 14, ip4_, 4);
  std::memset(a + 18, 0, 6);
  std::memcpy(a + 24, ip, 4);
  m->data_len = 42;
  m->pkt_len = 42;
  if (!tx_one(m)) rte_pktmbuf_free(m);
}

void DpdkLink::send_neighbour_solicit(const proto::Ip6& t) {
  rte_mbuf* m = rte_pktmbuf_alloc(static_cast<rte_mempool*>(pool_));
  if (!m) return;
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  const uint8_t dmac[6] = {0x33, 0x33, 0xff, t[13], t[14], t[15]};
  std::memcpy(f, dmac, 6);
  std::memcpy(f + 6, mac_.data(), 6);
  store_be16(f + 12, kEthIp6);
  uint8_t* ip = f + 14;
  store_be32(ip, 6u << 28);
  store_be16(ip + 4, 32);
  ip[6] = kProtoIcmp6;
  ip[7] = 255;
  std::memcpy(ip + 8, ip6_.data(), 16);
  const uint8_t sn[16] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, t[13], t[14], t[15]};
  std::memcpy(ip + 24, sn, 16);
  uint8_t* ic = ip + 40;
  std::memset(ic, 0, 32);
  ic[0] = 135;
  std::memcpy(ic + 8, t.data(), 16);
  ic[24] = 1, ic[25] = 1;
  std::memcpy(ic + 26, mac_.data(), 6);
  store_be16(ic + 2, icmp6_checksum(ip, ic, 32));
  m->data_len = 14 + 40 + 32;
  m->pkt_len = m->data_len;
  if (!tx_one(m)) rte_pktmbuf_free(m);
}

bool DpdkLink::resolve(const proto::Ip6& gid, proto::Mac& out, const std::function<void()>& pump) {
  if (lookup(gid, out)) return true;
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t start = rte_get_tsc_cycles();
  const uint64_t end = start + hz / 1000 * cfg_.arp_timeout_ms;
  uint64_t next_ask = start;
  const bool v4 = engine::gid_is_v4mapped(gid);
  while (rte_get_tsc_cycles() < end) {
    if (rte_get_tsc_cycles() >= next_ask) {
      if (v4) send_arp_request(gid.data() + 12);
      else send_neighbour_solicit(gid);
      next_ask = rte_get_tsc_cycles() + hz / 5;
    }
    if (pump) {
      pump();
    } else {
      engine::PacketBuf b[32];
      size_t n = recv(b, 32);
      for (size_t i = 0; i < n; ++i) release(b[i]);
    }
    if (lookup(gid, out)) return true;
  }
  return false;
}

}  // namespace uroce::port
