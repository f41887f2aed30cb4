#include "port/endpoint.hpp"

#include "engine/cm.hpp"
#include "proto/multicast.hpp"

#include "port/service/client.hpp"
#include "port/telemetry.hpp"

namespace uroce::port {

std::unique_ptr<Endpoint> Endpoint::open(const EndpointConfig& cfg, std::string& err,
                                         const engine::Device::Config& dev_cfg,
                                         const std::vector<std::string>& extra_eal) {
  std::unique_ptr<Endpoint> e(new Endpoint());
  service::ServiceLink* shared = nullptr;
  if (cfg.service == "on" || (cfg.service == "auto" && service::ServiceLink::available(cfg.name))) {
    auto l = service::ServiceLink::attach(cfg, err);
    if (!l) return nullptr;
    shared = l.get();
    e->link_ = std::move(l);
  } else {
    auto l = DpdkLink::open(cfg, err, extra_eal);
    if (!l) return nullptr;
    e->dpdk_ = l.get();
    e->link_ = std::move(l);
  }
  const EndpointConfig& lc = e->link_->config();  // the service's path MTU
  e->clock_ = std::make_unique<TscClock>();
  engine::Device::Config dc = dev_cfg;
  dc.mac = e->link_->mac();
  dc.gid = e->link_->gid();
  dc.gids = e->link_->gids();
  dc.ecn = cfg.ecn;
  dc.cnp_interval_ns = uint64_t(cfg.cnp_interval_us) * 1000;
  dc.cnp_dscp = cfg.cnp_dscp;
  dc.cc = cfg.cc;
  dc.max_unacked_psns = cfg.max_unacked_psns;
  dc.ack_req_every = cfg.ack_req_every;
  dc.ack_every = cfg.ack_every;
  dc.probe_floor_ns = uint64_t(cfg.probe_floor_us) * 1000;
  dc.selective_repeat = cfg.selective_repeat;
  dc.port_mtu = lc.path_mtu;
  if (shared) {
    dc.id_tag = shared->tag();
    dc.id_tag_bits = shared->tag_bits();
    dc.loopback = false;
  }
  dc.cm_timewait_ns = uint64_t(cfg.cm_timewait_ms) * 1'000'000;
  dc.cm_max_conns = cfg.cm_max_conns;
  dc.cm_mra_timeout = cfg.cm_mra_timeout;
  dc.cm_response_timeout = cfg.cm_response_timeout;
  dc.cm_max_retries = cfg.cm_max_retries;
  e->dev_ = std::make_unique<engine::Device>(*e->link_, *e->clock_, dc);
  if (engine::mtu_bytes(lc.path_mtu) > e->dev_->mtu_limit()) {
    err = "path mtu " + std::to_string(engine::mtu_bytes(lc.path_mtu)) + " larger than the link carries";
    return nullptr;
  }
  if (shared && e->dev_->cm()) {
    engine::cm::Manager* cm = e->dev_->cm();
    cm->on_listen = [shared](uint64_t sid, bool on) { shared->announce_listen(sid, on); };
    cm->on_goodbye_owed = [shared, cm](uint32_t id, bool owed) {
      shared->leave_will(id, owed ? cm->goodbye_frame(id) : std::vector<uint8_t>{});
    };
  }
  // /uroce/* telemetry commands (port/telemetry.hpp): this process's QPs, also when attached.
  telemetry::add(*e->dev_, e->dpdk_, cfg.name);
  return e;
}

Endpoint::~Endpoint() {
  if (dev_) telemetry::remove(*dev_);
  dev_.reset();
  link_.reset();
}

bool Endpoint::resolve_peer(const proto::Ip6& gid, engine::AddressVector& av, std::string& err,
                            const std::function<void()>& pump) {
  const EndpointConfig& c = config();
  av.dgid = gid;
  av.hop_limit = c.hop_limit;
  av.traffic_class = uint8_t(c.dscp << 2);  // the ECN bits are the device's (config key ecn)
  av.sgid_index = uint8_t(c.gid_index);
  if (dev_->is_local(gid)) {  // loopback: our own address, no resolution
    av.dmac = link_->mac();
    return true;
  }
  if (proto::is_multicast_gid(gid)) {  // a multicast group: its own MAC, nothing to ask
    av.dmac = proto::multicast_mac(gid);
    return true;
  }
  const std::function<void()> step = pump ? pump : std::function<void()>([this] { progress(); });
  // Link up (memif: the peer connected), looked at every 10 ms while `step` runs in between.
  const uint64_t end = dev_->now_ns() + uint64_t(param::kLinkWaitMs) * 1'000'000;
  while (!link_->wait_link_up(0)) {
    if (dev_->now_ns() > end) {
      err = "DPDK link did not come up within " + std::to_string(param::kLinkWaitMs / 1000) + " s";
      return false;
    }
    link_->sleep_ms(param::kLinkCheckMs);
    step();
  }
  proto::Mac mac;
  if (link_->lookup(gid, mac)) {
    // known already (a reply or a request from the peer taught it)
  } else if (!link_->resolve(gid, mac, step)) {
    err = "address resolution of " + gid_str(gid) + " failed (" +
          (!link_->resolve_error().empty() ? link_->resolve_error() : engine::gid_is_v4mapped(gid) ? "ARP" : "ND") + ")";
    return false;
  }
  av.dmac = mac;
  if (link_->route_hop_limit()) av.hop_limit = link_->route_hop_limit();  // a netdev: the kernel's route's
  return true;
}

}  // namespace uroce::port
