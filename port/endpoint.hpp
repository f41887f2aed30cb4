// Endpoint: one uroce endpoint on DPDK, as an application brings it up: its link, a TscClock, and
// the engine Device on them (MAC and GID from the link, i.e. from the config's mac and gid_index).
// The link is this process's own DpdkLink (embedded mode), or its share of a device the uroce
// service owns (port/service/client.hpp; config key service). Single-threaded like the engine.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "port/clock.hpp"
#include "port/config.hpp"
#include "port/dpdk_link.hpp"
#include "port/port_link.hpp"

namespace uroce::port {

class Endpoint {
 public:
  // Opens the link (starting the EAL with cfg.eal plus `extra_eal`) and creates the Device
  // with `dev_cfg` (its mac and gid are replaced by the link's). Fails, with `err`, when the
  // link does not open or the config's path MTU does not fit the link's frames. With the config's
  // service on, or auto while a uroced serves the config's device name, the link is the
  // service's: the Device then tags its QP numbers and CM IDs with the process's slot and sends
  // its loopback frames through the daemon.
  static std::unique_ptr<Endpoint> open(const EndpointConfig& cfg, std::string& err,
                                        const engine::Device::Config& dev_cfg = {},
                                        const std::vector<std::string>& extra_eal = {});
  ~Endpoint();  // the Device before the link

  engine::Device& device() { return *dev_; }
  PortLink& link() { return *link_; }
  DpdkLink* dpdk() { return dpdk_; }   // the process's own link; nullptr when attached to the service
  bool attached() const { return dpdk_ == nullptr; }
  const EndpointConfig& config() const { return link_->config(); }
  TscClock& clock() { return *clock_; }
  bool progress() { return dev_->progress(); }

  // The address vector to reach the peer with GID `gid`: waits (bounded, param::kLinkWaitMs)
  // for the link to be up (memif: the peer connected), resolves the peer's MAC on the link
  // (ARP or ND, bounded by the config's arp_timeout_ms) while `pump` runs between looks
  // (default: progress(), so this endpoint keeps answering and acknowledging; the verbs shim's
  // pump also lets other threads in), and fills `av`: dgid,
  // dmac, and hop limit, traffic class and sgid_index from the config. False and `err` on
  // failure.
  bool resolve_peer(const proto::Ip6& gid, engine::AddressVector& av, std::string& err,
                    const std::function<void()>& pump = {});

 private:
  Endpoint() = default;
  std::unique_ptr<PortLink> link_;
  DpdkLink* dpdk_ = nullptr;
  std::unique_ptr<TscClock> clock_;
  std::unique_ptr<engine::Device> dev_;
};

}  // namespace uroce::port
