// DpdkLink's set-up and teardown: open() starts the EAL (eal.cpp) and runs setup(), one named
// step after another: pick the port, create the mbuf pool, configure the queues and the MTU,
// start the port, the capture and fault hooks, our addresses, the flow rules (flow_rules.cpp).
// The data path is in burst.cpp, link waits and memif in memif.cpp, resolution in resolve.cpp.
#include "port/dpdk_link.hpp"

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_flow.h>
#include <rte_mempool.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include <unistd.h>

#include "port/dpdk_link_impl.hpp"
#include "port/netdev.hpp"

namespace uroce::port {

using detail::kBurst;
using detail::M;

std::unique_ptr<DpdkLink> DpdkLink::open(const EndpointConfig& cfg, std::string& err,
                                         const std::vector<std::string>& extra_eal) {
  std::unique_ptr<DpdkLink> l(new DpdkLink());
  l->cfg_ = cfg;
  // A netdev shared with the kernel: ours alone (a stale program of a killed uroce removed)
  // before the PMD attaches the XDP program; its neighbours are the kernel's.
  if (!cfg.netdev.empty()) {
    if (!l->claim_netdev(err)) return nullptr;
    l->kernel_ = std::make_unique<KernelNeighbours>(cfg.netdev_ifindex);
    l->addr_watch_ = std::make_unique<AddressWatch>(cfg.netdev_ifindex);
    l->groups_ = std::make_unique<KernelGroups>(cfg.netdev_ifindex);
    if (!l->addr_watch_->open(err)) return nullptr;
  }
  if (!detail::start_eal(cfg.eal, extra_eal, err)) return nullptr;
  // The held frames' clock, now that the EAL has measured the TSC's rate (made with the link,
  // before it, it counted cycles as nanoseconds: fault delays and the bottleneck ran fast).
  l->clock_ = TscClock();
  if (!l->setup(err)) return nullptr;
  return l;
}

bool DpdkLink::setup(std::string& err) {
  if (!pick_port(err)) return false;
  rte_eth_dev_info info;
  if (int rc = rte_eth_dev_info_get(port_, &info); rc != 0) {
    err = "rte_eth_dev_info_get: " + std::string(rte_strerror(-rc));
    return false;
  }
  is_memif_ = info.driver_name && std::string(info.driver_name) == "net_memif";
  if (!create_pool(err) || !configure_port(info, err) || !start_port(err) || !start_hooks(err)) return false;
  if (!cfg_.netdev.empty() && cfg_.netdev_link == "af_packet" && !share_packet_socket(err)) return false;
  set_addresses();
  return !cfg_.flow_isolate || install_flows(err);
}

// The config's port, or the first one the EAL found.
bool DpdkLink::pick_port(std::string& err) {
  if (cfg_.port >= 0) {
    if (!rte_eth_dev_is_valid_port(uint16_t(cfg_.port))) {
      err = "no DPDK port " + std::to_string(cfg_.port);
      return false;
    }
    port_ = uint16_t(cfg_.port);
    return true;
  }
  uint16_t p;
  RTE_ETH_FOREACH_DEV(p) {
    port_ = p;
    return true;
  }
  err = "no DPDK port (check the eal line: --vdev or a PCI address)";
  return false;
}

// mbufs x (headroom + max(largest frame, mbuf_size)), on the port's NUMA socket.
bool DpdkLink::create_pool(std::string& err) {
  max_frame_ = cfg_.max_frame();
  const uint32_t room = RTE_PKTMBUF_HEADROOM + ((std::max(max_frame_, cfg_.mbuf_size) + 63) & ~63u);
  if (room > 0xFFFF) {
    err = "link_mtu too large for one mbuf";
    return false;
  }
  const std::string pool_name = "uroce_mb_" + std::to_string(port_);
  pool_ = rte_pktmbuf_pool_create(pool_name.c_str(), cfg_.mbufs, cfg_.mbuf_cache, 0, uint16_t(room), socket());
  if (!pool_) {
    err = "rte_pktmbuf_pool_create(" + std::to_string(cfg_.mbufs) + " x " + std::to_string(room) +
          "): " + rte_strerror(rte_errno) + " (raise -m in the eal line or lower mbufs)";
    return false;
  }
  touch_pool();
  return true;
}

// Every page of the pool written once now, while every buffer is free. Creating the pool writes
// each buffer's header only; a page inside a data room would otherwise become resident the
// first time a long frame lands there, minutes into a run, and a process's resident memory
// would creep up by a few percent while nothing leaks (issue 35's soak judges it).
void DpdkLink::touch_pool() {
  rte_mempool_mem_iter(
      mempool(),
      [](rte_mempool*, void*, rte_mempool_memhdr* m, unsigned) {
        auto* p = static_cast<volatile char*>(m->addr);
        const long page = sysconf(_SC_PAGESIZE);
        for (size_t off = 0; off < m->len; off += size_t(page)) p[off] = p[off];
      },
      nullptr);
}

int DpdkLink::socket() const {
  const int s = rte_eth_dev_socket_id(port_);
  return s < 0 ? 0 : s;
}

// Isolation first (before the port is configured), then one rx and one tx queue and the MTU.
bool DpdkLink::configure_port(const rte_eth_dev_info& info, std::string& err) {
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
  if (rte_eth_rx_queue_setup(port_, 0, nrx, unsigned(socket()), nullptr, static_cast<rte_mempool*>(pool_)) != 0 ||
      rte_eth_tx_queue_setup(port_, 0, ntx, unsigned(socket()), nullptr) != 0) {
    err = "queue setup failed";
    return false;
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
  if (!cfg_.netdev.empty()) return;  // the kernel's interface: its MTU is the kernel's (af_xdp would set it)
  // The L2 overhead the device counts, as rte_eth_dev_set_mtu does.
  const uint32_t overhead = info.max_mtu != UINT16_MAX && info.max_rx_pktlen > info.max_mtu
                                ? info.max_rx_pktlen - info.max_mtu
                                : RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
  if (cfg_.link_mtu > info.max_mtu || cfg_.link_mtu + overhead > info.max_rx_pktlen || cfg_.link_mtu < info.min_mtu)
    return;
  // Not every PMD sets an MTU: a failure here is not fatal either.
  rte_eth_dev_set_mtu(port_, uint16_t(cfg_.link_mtu));
}

// Our MAC (the port's, or the config's), the start (a memif client once its server listens),
// and the port's MAC filter.
bool DpdkLink::start_port(std::string& err) {
  rte_ether_addr pm;
  rte_eth_macaddr_get(port_, &pm);
  if (cfg_.mac_from_port) std::memcpy(mac_.data(), pm.addr_bytes, 6);
  else mac_ = cfg_.mac;
  const std::string server_socket = detail::memif_client_socket(cfg_.eal);
  memif_client_ = !server_socket.empty();
  if (memif_client_) detail::await_memif_server(server_socket);
  if (int rc = rte_eth_dev_start(port_); rc != 0) {
    err = "rte_eth_dev_start: " + std::string(rte_strerror(-rc));
    if (memif_client_) err += " (a memif client: is its server running?)";
    return false;
  }
  // In flow isolation the rte_flow rule for our MAC (flow_rules.cpp) receives for it; the MAC
  // list and promiscuous mode are not for isolated ports (mlx5 supports neither there).
  if (!cfg_.flow_isolate && !cfg_.mac_from_port && std::memcmp(pm.addr_bytes, mac_.data(), 6) != 0) {
    rte_ether_addr a;
    std::memcpy(a.addr_bytes, mac_.data(), 6);
    // A NIC filters on its MAC list: add ours, or fall back to promiscuous mode.
    if (rte_eth_dev_mac_addr_add(port_, &a, 0) != 0 && cfg_.promiscuous) rte_eth_promiscuous_enable(port_);
    if (cfg_.promiscuous) rte_eth_promiscuous_enable(port_);
  }
  // Multicast groups' frames (ibv_attach_mcast): the engine keeps the membership, the NIC lets
  // every multicast MAC in (an error here means the driver cannot, or already does).
  if (!cfg_.flow_isolate) rte_eth_allmulticast_enable(port_);
  return true;
}

// The capture file (key capture), the fault stages (keys fault_*), dpdk-dumpcap's framework.
bool DpdkLink::start_hooks(std::string& err) {
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
  detail::start_pdump();
  return true;
}

// The GID table: 0 the link-local address, 1 the IPv4-mapped address (zero: none), 2.. each
// configured IPv6 address (and on a netdev the interface's other IPv4 addresses, IPv4-mapped).
// ND and ping are answered for every IPv6 entry; RoCE frames are taken for every address.
void DpdkLink::set_addresses() {
  have_ip4_ = cfg_.have_ip4;
  std::memcpy(ip4_, cfg_.ip4, 4);
  gids_.assign(2, proto::Ip6{});
  gids_[0] = cfg_.have_link_local ? cfg_.link_local : link_local_from_mac(mac_);
  if (have_ip4_) gids_[1] = v4mapped(ip4_);
  std::vector<proto::Ip6> ip6s{gids_[0]};
  for (const proto::Ip6& a : cfg_.ip6s) {
    gids_.push_back(a);
    if (a != proto::Ip6{}) ip6s.push_back(a);  // a zero: an index kept free (poll_addresses)
  }
  ip6_ = cfg_.have_ip6 ? cfg_.ip6 : gids_[0];
  gid_ = gids_[size_t(cfg_.gid_index)];
  ctl_.init(mac_, have_ip4_ ? ip4_ : nullptr, ip6s, &ctr_);
}

bool DpdkLink::poll_addresses() {
  if (!addr_watch_ || !addr_watch_->changed()) return false;
  NetdevInfo nd;
  std::string err;
  if (!read_netdev(cfg_.netdev, nd, err)) return false;
  const std::vector<proto::Ip6> before = gids_;
  // Addresses the config file set itself stay as set (as when it was loaded: port/netdev.cpp).
  auto from_file = [this](const char* key) { return std::find(cfg_.keys.begin(), cfg_.keys.end(), key) != cfg_.keys.end(); };
  if (!from_file("ip")) {
    cfg_.have_ip4 = nd.have_ip4;
    std::memcpy(cfg_.ip4, nd.ip4, 4);
  }
  if (nd.have_link_local) cfg_.link_local = nd.link_local, cfg_.have_link_local = true;
  if (from_file("ip6")) {
    set_addresses();
    return gids_ != before;
  }
  // Slots 2..: an address that stays keeps its index, a removed one leaves a zero, a new one
  // takes the first zero (or a new index, up to param::kGidTableMax).
  // The addresses of slots 2..: IPv6, then the IPv4 ones after the first (unless the file set `ip`).
  std::vector<proto::Ip6> now = nd.ip6s;
  if (!from_file("ip")) now.insert(now.end(), nd.ip4_more.begin(), nd.ip4_more.end());
  std::vector<proto::Ip6> slots(gids_.begin() + std::min<size_t>(2, gids_.size()), gids_.end());
  for (proto::Ip6& g : slots)
    if (std::find(now.begin(), now.end(), g) == now.end()) g = proto::Ip6{};
  for (const proto::Ip6& a : now) {
    if (std::find(slots.begin(), slots.end(), a) != slots.end()) continue;
    auto free = std::find(slots.begin(), slots.end(), proto::Ip6{});
    if (free != slots.end()) *free = a;
    else if (slots.size() + 2 < param::kGidTableMax) slots.push_back(a);
  }
  cfg_.ip6s = slots;
  set_addresses();
  return gids_ != before;
}

DpdkLink::~DpdkLink() {
  rte_flow_error fe{};
  for (void* f : flows_) rte_flow_destroy(port_, static_cast<rte_flow*>(f), &fe);
  for (; bl_n_; --bl_n_, bl_head_ = (bl_head_ + 1) % kBacklog) rte_pktmbuf_free(M(backlog_[bl_head_]));
  void* held[kBurst];
  for (const BnHeld& h : bn_q_) rte_pktmbuf_free(M(h.m));
  bn_q_.clear();
  for (FaultStage* st : {&rx_fault_, &tx_fault_})
    while (size_t n = st->release_all(held, kBurst))
      for (size_t i = 0; i < n; ++i) rte_pktmbuf_free(M(held[i]));
  cap_.close();
  while (stash_n_) rte_pktmbuf_free(M(stash_[--stash_n_]));
  rte_eth_dev_stop(port_);
  rte_eth_dev_close(port_);
  // The mempool and the EAL live until the process exits (rte_eal_cleanup there).
}

uint64_t DpdkLink::port_rx_frames() const {
  rte_eth_stats st{};
  return rte_eth_stats_get(port_, &st) == 0 ? st.ipackets : 0;
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

std::string DpdkLink::counters_text() const { return link_counters_text(ctr_, rx_fault_.on(), tx_fault_.on()); }

int DpdkLink::join_group(const std::array<uint8_t, 16>& group, bool join) {
  if (!groups_) return 0;  // uroce's own link: allmulticast lets every group's frames in (start_port)
  return join ? groups_->join(group) : groups_->leave(group);
}

}  // namespace uroce::port
