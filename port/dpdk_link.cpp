#include "port/dpdk_link.hpp"

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_flow.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_pdump.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <tuple>

#include "proto/headers.hpp"
#include "proto/locate.hpp"

namespace uroce::port {

namespace {

constexpr uint32_t kMinFrame = param::kMinFrame;
constexpr uint32_t kBurst = param::kLinkBurst;

bool eal_started = false;
bool pdump_started = false;

rte_mbuf* M(void* p) { return static_cast<rte_mbuf*>(p); }

// Sets the mbuf's lengths for the engine's frame, padded with zeros to the Ethernet minimum
// (without FCS); returns the length on the wire.
uint32_t finish_frame(engine::PacketBuf& b) {
  uint32_t len = b.len;
  if (len < kMinFrame) {
    std::memset(b.data + len, 0, kMinFrame - len);
    len = kMinFrame;
  }
  M(b.handle)->data_len = uint16_t(len);
  M(b.handle)->pkt_len = len;
  return len;
}

// The socket a memif client of this EAL line connects to: "@name" for an abstract one (DPDK's
// default), the path otherwise; empty when the line has no memif client.
std::string memif_client_socket(const std::vector<std::string>& eal) {
  for (const std::string& a : eal) {
    const size_t at = a.find("net_memif");
    if (at == std::string::npos) continue;
    std::string socket = "/run/memif.sock";
    bool client = false, abstract = true;
    std::stringstream args(a.substr(at));
    for (std::string kv; std::getline(args, kv, ',');) {
      if (kv == "role=client") client = true;
      else if (kv.rfind("socket=", 0) == 0) socket = kv.substr(7);
      else if (kv == "socket-abstract=no") abstract = false;
    }
    if (client) return abstract ? "@" + socket : socket;
  }
  return {};
}

// Is some process listening on this unix socket ("@name": abstract)? From /proc/net/unix, so that
// asking does not connect to it.
bool unix_socket_listening(const std::string& name) {
  FILE* f = std::fopen("/proc/net/unix", "r");
  if (!f) return true;  // cannot tell: start and let the PMD say
  bool found = false;
  char line[512];
  while (!found && std::fgets(line, sizeof line, f)) {
    std::string l(line);
    while (!l.empty() && (l.back() == '\n' || l.back() == ' ')) l.pop_back();
    found = l.size() >= name.size() && l.compare(l.size() - name.size(), name.size(), name) == 0 &&
            (l.size() == name.size() || l[l.size() - name.size() - 1] == ' ');
  }
  std::fclose(f);
  return found;
}

}  // namespace

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
  set_mtu(info);
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
  // A memif client cannot start before its server has made the socket (a failed start leaves the
  // PMD unable to connect later): two programs started together, as ucx_perftest's two sides open
  // their devices at the same moment, wait for it up to kLinkWaitMs, as they would for the link.
  const std::string server_socket = memif_client_socket(cfg_.eal);
  memif_client_ = !server_socket.empty();
  if (memif_client_) {
    for (uint32_t waited_ms = 0; !unix_socket_listening(server_socket) && waited_ms < param::kLinkWaitMs;
         waited_ms += param::kLinkCheckMs)
      rte_delay_us_sleep(param::kLinkCheckMs * 1000);
  }
  if (int rc = rte_eth_dev_start(port_); rc != 0) {
    err = "rte_eth_dev_start: " + std::string(rte_strerror(-rc));
    if (memif_client_) err += " (a memif client: is its server running?)";
    return false;
  }
  // In flow isolation the rte_flow rule for our MAC (below) receives for it; the MAC list and
  // promiscuous mode are not for isolated ports (mlx5 supports neither there).
  if (!cfg_.flow_isolate && !cfg_.mac_from_port && std::memcmp(pm.addr_bytes, mac_.data(), 6) != 0) {
    rte_ether_addr a;
    std::memcpy(a.addr_bytes, mac_.data(), 6);
    // A NIC filters on its MAC list: add ours, or fall back to promiscuous mode.
    if (rte_eth_dev_mac_addr_add(port_, &a, 0) != 0 && cfg_.promiscuous) rte_eth_promiscuous_enable(port_);
    if (cfg_.promiscuous) rte_eth_promiscuous_enable(port_);
  }
  if (!cfg_.capture.empty()) {
    CaptureOptions co;
    co.if_name = cfg_.name;
    co.snaplen = cfg_.capture_snaplen;
    co.max_frame = max_frame_;
    co.max_bytes = uint64_t(cfg_.capture_max_mb) << 20;
    if (!cap_.open(cfg_.capture, co, err)) return false;
    cap_all_ = cfg_.capture_all;
  }
  rx_fault_.configure(cfg_.fault_rx, cfg_.fault_seed * 2 + 1, cfg_.fault_all);
  tx_fault_.configure(cfg_.fault_tx, cfg_.fault_seed * 2 + 2, cfg_.fault_all);
  // DPDK's packet capture framework, for dpdk-dumpcap (a secondary process that attaches to
  // our hugepage memory and asks us for copies of the port's frames). Only a process with
  // shared hugepage memory can have secondaries: not with --no-huge or --in-memory.
  if (!pdump_started && rte_eal_has_hugepages() && rte_eal_process_type() == RTE_PROC_PRIMARY)
    pdump_started = rte_pdump_init() == 0;
  have_ip4_ = cfg_.have_ip4;
  std::memcpy(ip4_, cfg_.ip4, 4);
  // The GID table: 0 the link-local address, 1 the IPv4-mapped address (zero: none), 2.. each
  // configured IPv6 address. ND and ping are answered for every IPv6 entry.
  gids_.assign(2, proto::Ip6{});
  gids_[0] = link_local_from_mac(mac_);
  if (have_ip4_) gids_[1] = v4mapped(ip4_);
  std::vector<proto::Ip6> ip6s{gids_[0]};
  for (const proto::Ip6& a : cfg_.ip6s) {
    gids_.push_back(a);
    ip6s.push_back(a);
  }
  ip6_ = cfg_.have_ip6 ? cfg_.ip6 : gids_[0];
  gid_ = gids_[size_t(cfg_.gid_index)];
  ctl_.init(mac_, have_ip4_ ? ip4_ : nullptr, ip6s, &ctr_);

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
    // Sharing the port's MAC, IPv6 RoCE needs a rule per IPv6 GID too (with a MAC of our own
    // the MAC rule already takes it).
    for (size_t i = 0; cfg_.mac_from_port && i < gids_.size(); ++i) {
      if (i == 1 || gids_[i] == proto::Ip6{}) continue;  // 1: the IPv4 GID (rule above)
      rte_flow_item_ipv6 ip{}, ip_mask{};
      std::memcpy(ip.hdr.dst_addr, gids_[i].data(), 16);
      std::memset(ip_mask.hdr.dst_addr, 0xFF, 16);
      rte_flow_item_udp udp{}, udp_mask{};
      udp.hdr.dst_port = rte_cpu_to_be_16(proto::kRoceV2Port);
      udp_mask.hdr.dst_port = 0xFFFF;
      rte_flow_item pat[] = {{RTE_FLOW_ITEM_TYPE_ETH, nullptr, nullptr, nullptr},
                             {RTE_FLOW_ITEM_TYPE_IPV6, &ip, nullptr, &ip_mask},
                             {RTE_FLOW_ITEM_TYPE_UDP, &udp, nullptr, &udp_mask},
                             {RTE_FLOW_ITEM_TYPE_END, nullptr, nullptr, nullptr}};
      rte_flow* f = rte_flow_create(port_, &attr, pat, actions, &fe);
      if (!f) {
        err = std::string("rte_flow_create (IPv6 UDP 4791): ") + (fe.message ? fe.message : "?");
        return false;
      }
      flows_.push_back(f);
    }
  }
  return true;
}

// Sets the config's link MTU on the port when the device reports it can take it. Otherwise
// the port's MTU is left alone: asking would only log "Frame size (N) > device max frame size
// (M)", and setting a smaller one could shrink the link (af_packet sets the kernel interface's
// MTU). Our frames keep the config's size (max_frame()): af_packet reports 1518 yet carries
// whatever fits its framesz and the interface's MTU (the veth configs: path MTU 2048 on a veth
// of MTU 3000); memif takes link_mtu 8000.
void DpdkLink::set_mtu(const rte_eth_dev_info& info) {
  // The L2 overhead the device counts, as rte_eth_dev_set_mtu does.
  const uint32_t overhead = info.max_mtu != UINT16_MAX && info.max_rx_pktlen > info.max_mtu
                                ? info.max_rx_pktlen - info.max_mtu
                                : RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
  if (cfg_.link_mtu > info.max_mtu || cfg_.link_mtu + overhead > info.max_rx_pktlen || cfg_.link_mtu < info.min_mtu)
    return;
  // Not every PMD sets an MTU: a failure here is not fatal either.
  rte_eth_dev_set_mtu(port_, uint16_t(cfg_.link_mtu));
}

DpdkLink::~DpdkLink() {
  rte_flow_error fe{};
  for (void* f : flows_) rte_flow_destroy(port_, static_cast<rte_flow*>(f), &fe);
  for (; bl_n_; --bl_n_, bl_head_ = (bl_head_ + 1) % kBacklog) rte_pktmbuf_free(M(backlog_[bl_head_]));
  void* held[kBurst];
  for (FaultStage* st : {&rx_fault_, &tx_fault_})
    while (size_t n = st->release_all(held, kBurst))
      for (size_t i = 0; i < n; ++i) rte_pktmbuf_free(M(held[i]));
  cap_.close();
  while (stash_n_) rte_pktmbuf_free(M(stash_[--stash_n_]));
  rte_eth_dev_stop(port_);
  rte_eth_dev_close(port_);
  // The mempool and the EAL live until the process exits (rte_eal_cleanup there).
}

bool DpdkLink::wait_link(bool up, uint32_t timeout_ms) {
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t end = rte_get_tsc_cycles() + hz / 1000 * timeout_ms;
  for (;;) {
    rte_eth_link lk{};
    rte_eth_link_get_nowait(port_, &lk);
    if ((lk.link_status == RTE_ETH_LINK_UP) == up) {
      if (up) reconnect_at_ = 0;
      return true;
    }
    // A memif client whose server accepted it before the server's own port had started is
    // dropped and does not try again by itself (two programs that open their devices at the same
    // moment): it connects again, every kMemifReconnectMs while it waits for the link.
    if (up && memif_client_) {
      const uint64_t now = rte_get_tsc_cycles();
      if (!reconnect_at_) reconnect_at_ = now + hz / 1000 * param::kMemifReconnectMs;
      if (now >= reconnect_at_) {
        rte_eth_dev_stop(port_);
        rte_eth_dev_start(port_);
        reconnect_at_ = now + hz / 1000 * param::kMemifReconnectMs;
      }
    }
    if (rte_get_tsc_cycles() > end) return false;
    rte_delay_us_sleep(up ? 10'000 : 1'000);
  }
}

void DpdkLink::sleep_ms(uint32_t ms) { rte_delay_us_sleep(ms * 1000u); }

bool DpdkLink::link_up_now(bool last) const {
  rte_eth_link lk{};
  if (rte_eth_link_get_nowait(port_, &lk) != 0) return last;
  return lk.link_status == RTE_ETH_LINK_UP;
}

std::string DpdkLink::runtime_dir() {
  const char* d = rte_eal_get_runtime_dir();
  return d ? d : "";
}

namespace {
// One per thread that called register_thread(): gives the lcore id back when the thread ends.
struct ThreadRegistration {
  bool tried = false, registered = false;
  ~ThreadRegistration() {
    if (registered) rte_thread_unregister();
  }
};
thread_local ThreadRegistration t_registration;
}  // namespace

bool DpdkLink::register_thread() {
  ThreadRegistration& t = t_registration;
  if (t.tried) return t.registered || rte_lcore_id() != LCORE_ID_ANY;
  t.tried = true;
  if (rte_lcore_id() != LCORE_ID_ANY) return true;  // an EAL thread already
  t.registered = rte_thread_register() == 0;
  return t.registered;
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

const LinkCounterField kLinkCounterFields[] = {
    {"rx_frames", &LinkCounters::rx_frames},
    {"rx_roce", &LinkCounters::rx_roce},
    {"tx_frames", &LinkCounters::tx_frames},
    {"tx_refused", &LinkCounters::tx_refused},
    {"alloc_failed", &LinkCounters::alloc_failed},
    {"arp_requests", &LinkCounters::arp_requests},
    {"arp_replies_sent", &LinkCounters::arp_replies_sent},
    {"arp_replies_rcvd", &LinkCounters::arp_replies_rcvd},
    {"icmp_echo", &LinkCounters::icmp_echo},
    {"icmp_replies_sent", &LinkCounters::icmp_replies_sent},
    {"nd_solicits", &LinkCounters::nd_solicits},
    {"nd_adverts_sent", &LinkCounters::nd_adverts_sent},
    {"nd_adverts_rcvd", &LinkCounters::nd_adverts_rcvd},
    {"drop_not_our_mac", &LinkCounters::drop_not_our_mac},
    {"drop_not_our_ip", &LinkCounters::drop_not_our_ip},
    {"drop_udp_port", &LinkCounters::drop_udp_port},
    {"drop_ip_proto", &LinkCounters::drop_ip_proto},
    {"drop_ethertype", &LinkCounters::drop_ethertype},
    {"drop_malformed", &LinkCounters::drop_malformed},
    {"drop_multiseg", &LinkCounters::drop_multiseg},
    {"drop_nd_hop_limit", &LinkCounters::drop_nd_hop_limit},
    {"neigh_unsolicited", &LinkCounters::neigh_unsolicited},
    {"neigh_mac_changed", &LinkCounters::neigh_mac_changed},
    {"capture_frames", &LinkCounters::capture_frames},
    {"capture_skipped", &LinkCounters::capture_skipped},
};
const size_t kLinkCounterFieldCount = sizeof kLinkCounterFields / sizeof kLinkCounterFields[0];
// Every plain counter (those before the fault stages' counts, printed per direction) is in the table.
static_assert(sizeof kLinkCounterFields / sizeof kLinkCounterFields[0] == offsetof(LinkCounters, rx_fault) / sizeof(uint64_t),
              "every link counter is in kLinkCounterFields");

std::string DpdkLink::counters_text() const {
  std::ostringstream o;
  for (size_t i = 0; i < kLinkCounterFieldCount; ++i)
    o << (i ? " " : "") << kLinkCounterFields[i].name << '=' << ctr_.*kLinkCounterFields[i].member;
  const LinkCounters& c = ctr_;
  for (auto [dir, st, f] : {std::tuple{"rx", &rx_fault_, &c.rx_fault}, std::tuple{"tx", &tx_fault_, &c.tx_fault}}) {
    if (!st->on()) continue;
    o << " " << dir << "_fault_dropped=" << f->dropped << " " << dir << "_fault_duplicated=" << f->duplicated << " "
      << dir << "_fault_reordered=" << f->reordered << " " << dir << "_fault_corrupted=" << f->corrupted << " " << dir
      << "_fault_delayed=" << f->delayed << " " << dir << "_fault_hold_full=" << f->hold_full;
  }
  return o.str();
}

// ---- Data path --------------------------------------------------------------------------------------
bool DpdkLink::alloc(engine::PacketBuf& b, uint32_t len) {
  if (stash_n_ == 0) {
    if (rte_pktmbuf_alloc_bulk(static_cast<rte_mempool*>(pool_), reinterpret_cast<rte_mbuf**>(stash_), param::kTxStash) == 0) {
      stash_n_ = param::kTxStash;
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
    const uint32_t k = std::min<uint32_t>(bl_n_, std::min<uint32_t>(kBurst, kBacklog - bl_head_));
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
  if (tx_fault_.on()) return send_with_faults(bufs, n);
  rte_mbuf* ms[kBurst];
  size_t total = 0;
  const bool clear = drain_backlog();
  while (total < n) {
    const size_t k = std::min<size_t>(n - total, kBurst);
    for (size_t i = 0; i < k; ++i) {
      engine::PacketBuf& b = bufs[total + i];
      rte_mbuf* m = M(b.handle);
      const uint32_t len = finish_frame(b);
      ms[i] = m;
      if (cap_.on()) capture(b.data, len, Capture::Dir::Out);
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
          const uint32_t len = finish_frame(b);
          backlog_[(bl_head_ + bl_n_++) % kBacklog] = m;
          if (cap_.on()) capture(b.data, len, Capture::Dir::Out);
        }
        if (total < n) ctr_.tx_refused += n - total;
        break;
      }
    }
  }
  if (cap_.on()) cap_.maybe_flush();
  return total;
}

void DpdkLink::release(engine::PacketBuf& b) {
  if (b.handle) rte_pktmbuf_free(M(b.handle));
  b.handle = nullptr;
}

size_t DpdkLink::recv(engine::PacketBuf* bufs, size_t max) {
  rte_mbuf* ms[kBurst];
  size_t k = 0;
  if (bl_n_) drain_backlog();
  if (tx_fault_.holding()) release_tx_held();
  const size_t want = std::min<size_t>(max, kBurst);
  // Frames the receive fault stage held back and that are due now come first (they were
  // captured and decided on when they arrived).
  size_t first = 0;
  if (rx_fault_.holding()) first = rx_fault_.release(clock_.now_ns(), reinterpret_cast<void**>(ms), want);
  const uint16_t fresh = first < want ? rte_eth_rx_burst(port_, 0, ms + first, uint16_t(want - first)) : 0;
  ctr_.rx_frames += fresh;
  if (cap_.on()) {
    for (size_t i = first; i < first + fresh; ++i) capture(rte_pktmbuf_mtod(ms[i], uint8_t*), ms[i]->data_len, Capture::Dir::In);
    cap_.maybe_flush();
  }
  size_t n = first + fresh;
  if (rx_fault_.on() && fresh) n = rx_faults(reinterpret_cast<void**>(ms), fresh, first, want);
  if (n) ctl_.set_time_ms(now_ms());  // the neighbour cache's clock
  for (size_t i = 0; i < n; ++i) {
    if (i + 1 < n) rte_prefetch0(rte_pktmbuf_mtod(ms[i + 1], void*));
    classify(ms[i], bufs, k);
  }
  return k;
}

// ---- Capture and fault injection -----------------------------------------------------------------
void DpdkLink::capture(const uint8_t* f, uint32_t len, Capture::Dir dir) {
  if (!cap_all_ && !proto::locate({f, len}).roce_v2()) return;
  cap_.write(f, len, dir);
  ctr_.capture_frames = cap_.written();
  ctr_.capture_skipped = cap_.skipped();
}

// The receive fault stage on the `fresh` frames at ms[first..]: drops, corrupts, duplicates
// and holds back as the stage decides. The frames that go on now are left at ms[first..] in
// order (at most `cap` in all); returns how many frames ms holds.
size_t DpdkLink::rx_faults(void** ms, size_t fresh, size_t first, size_t cap) {
  void* in[kBurst];
  std::memcpy(in, ms + first, fresh * sizeof(void*));
  size_t out = first;
  const uint64_t now = clock_.now_ns();
  for (size_t i = 0; i < fresh; ++i) {
    rte_mbuf* m = M(in[i]);
    const engine::FaultDecision d = rx_fault_.decide(rte_pktmbuf_mtod(m, uint8_t*), m->data_len);
    if (d.drop) {
      rte_pktmbuf_free(m);
      continue;
    }
    // The copy of a duplicated frame goes on now, if the burst has room for it and everything
    // after it.
    if (d.duplicate && out + (fresh - i) < cap)
      if (rte_mbuf* c = rte_pktmbuf_copy(m, static_cast<rte_mempool*>(pool_), 0, UINT32_MAX)) {
        ms[out++] = c;
        rx_fault_.count_duplicate();
      }
    if ((d.delay || d.reorder) && rx_fault_.hold(m, d, now)) continue;
    ms[out++] = m;
    rx_fault_.passed();
  }
  ctr_.rx_fault = rx_fault_.counts();
  return out;
}

// send() with a transmit fault stage: each frame is dropped, corrupted, duplicated, held back
// or sent as the stage decides. Everything to send goes behind the backlog (so a held frame
// released later keeps its place); takes as many frames as the backlog has room for.
size_t DpdkLink::send_with_faults(engine::PacketBuf* bufs, size_t n) {
  drain_backlog();
  release_tx_held();
  const uint64_t now = clock_.now_ns();
  size_t taken = 0;
  for (; taken < n && kBacklog - bl_n_ >= 2; ++taken) {  // room for the frame and a copy
    engine::PacketBuf& b = bufs[taken];
    rte_mbuf* m = M(b.handle);
    const uint32_t len = finish_frame(b);
    const engine::FaultDecision d = tx_fault_.decide(b.data, len);
    if (d.drop) {
      rte_pktmbuf_free(m);
      continue;
    }
    if (d.duplicate)
      if (rte_mbuf* c = rte_pktmbuf_copy(m, static_cast<rte_mempool*>(pool_), 0, UINT32_MAX)) {
        to_wire(c);
        tx_fault_.count_duplicate();
      }
    if ((d.delay || d.reorder) && tx_fault_.hold(m, d, now)) continue;
    to_wire(m);
    tx_fault_.passed();
    release_tx_held();  // reordered frames whose turn has come
  }
  drain_backlog();
  ctr_.tx_fault = tx_fault_.counts();
  if (cap_.on()) cap_.maybe_flush();
  return taken;
}

void DpdkLink::to_wire(void* mp) {
  rte_mbuf* m = M(mp);
  if (cap_.on()) capture(rte_pktmbuf_mtod(m, uint8_t*), m->data_len, Capture::Dir::Out);
  backlog_[(bl_head_ + bl_n_++) % kBacklog] = m;
}

// Held transmit frames that are due go behind the backlog (as many as it has room for).
void DpdkLink::release_tx_held() {
  void* out[kBurst];
  const size_t room = std::min<size_t>(kBacklog - bl_n_, kBurst);
  const size_t n = tx_fault_.release(clock_.now_ns(), out, room);
  for (size_t i = 0; i < n; ++i) to_wire(out[i]);
  if (n) drain_backlog();
}

// Sorts one received frame (ControlPlane::sort): RoCEv2 for us goes to out[k++]; ARP, ND and
// echo requests are answered (the mbuf is reused for the reply); everything else is counted
// and freed.
uint64_t DpdkLink::now_ms() const { return rte_get_tsc_cycles() / (rte_get_tsc_hz() / 1000); }

void DpdkLink::classify(void* mp, engine::PacketBuf* out, size_t& k) {
  rte_mbuf* m = M(mp);
  if (m->nb_segs != 1) {
    ++ctr_.drop_multiseg;
    rte_pktmbuf_free(m);
    return;
  }
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  const uint32_t len = m->data_len;
  const Verdict v = ctl_.sort(f, len, uint32_t(m->buf_len - m->data_off));
  if (v.kind == Verdict::Deliver) [[likely]] {
    engine::PacketBuf& b = out[k++];
    b.data = f, b.len = len, b.cap = len, b.handle = m;
    return;
  }
  if (v.kind == Verdict::Reply) {
    m->data_len = uint16_t(v.len);
    m->pkt_len = v.len;
    if (tx_one(m)) {
      ++*v.sent;
      return;
    }
  }
  rte_pktmbuf_free(m);
}

bool DpdkLink::tx_one(void* mp) {
  rte_mbuf* m = M(mp);
  if (m->data_len < kMinFrame) {
    std::memset(rte_pktmbuf_mtod(m, uint8_t*) + m->data_len, 0, kMinFrame - m->data_len);
    m->data_len = uint16_t(kMinFrame);
    m->pkt_len = kMinFrame;
  }
  if (cap_all_) capture(rte_pktmbuf_mtod(m, uint8_t*), m->data_len, Capture::Dir::Out);
  if (rte_eth_tx_burst(port_, 0, &m, 1) == 1) {
    ++ctr_.tx_frames;
    return true;
  }
  ++ctr_.tx_refused;
  return false;  // the caller frees it
}

bool DpdkLink::lookup(const proto::Ip6& ip, proto::Mac& out) const { return ctl_.neighbours().lookup(ip, out, now_ms()); }

// One ARP request (IPv4-mapped GID) or neighbour solicitation (IPv6) for `gid`.
void DpdkLink::ask(const proto::Ip6& gid) {
  rte_mbuf* m = rte_pktmbuf_alloc(static_cast<rte_mempool*>(pool_));
  if (!m) return;
  ctl_.set_time_ms(now_ms());
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  m->data_len = uint16_t(engine::gid_is_v4mapped(gid) ? ctl_.arp_request(f, gid.data() + 12)
                                                      : ctl_.neighbour_solicit(f, gid));
  m->pkt_len = m->data_len;
  if (!tx_one(m)) rte_pktmbuf_free(m);
}

bool DpdkLink::resolve(const proto::Ip6& gid, proto::Mac& out, const std::function<void()>& pump) {
  if (lookup(gid, out)) return true;
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t start = rte_get_tsc_cycles();
  const uint64_t end = start + hz / 1000 * cfg_.arp_timeout_ms;
  uint64_t next_ask = start;
  while (rte_get_tsc_cycles() < end) {
    if (rte_get_tsc_cycles() >= next_ask) {
      ask(gid);
      next_ask = rte_get_tsc_cycles() + hz / 1000 * param::kArpRetryMs;
    }
    if (pump) {
      pump();
    } else {
      engine::PacketBuf b[param::kRxBurst];
      size_t n = recv(b, param::kRxBurst);
      for (size_t i = 0; i < n; ++i) release(b[i]);
    }
    if (lookup(gid, out)) return true;
  }
  return false;
}

}  // namespace uroce::port
