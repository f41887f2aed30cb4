// PortLink: what an application (the verbs shim, uroce-perf) asks of the port beyond the engine's
// Link: the device's addresses, the peer's MAC, the link's state, the end of a run. Two kinds:
// DpdkLink (port/dpdk_link.hpp), a link of this process's own (embedded mode), and ServiceLink
// (port/service/client.hpp), this process's share of a device the uroce service owns. No DPDK
// type appears here.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/link.hpp"
#include "port/config.hpp"
#include "proto/packet.hpp"

namespace uroce::port {

class PortLink : public engine::Link {
 public:
  const proto::Mac& mac() const { return mac_; }
  const proto::Ip6& gid() const { return gid_; }                 // the default source GID (gid_index)
  const std::vector<proto::Ip6>& gids() const { return gids_; }  // the GID table (zero: unused)
  const EndpointConfig& config() const { return cfg_; }

  // Waits (bounded) until the link is up; now, without waiting (`last` if it cannot say).
  virtual bool wait_link_up(uint32_t timeout_ms) = 0;
  virtual bool link_up_now(bool last) const = 0;
  // The peer's MAC from its GID: known now (lookup), or asked for, waiting at most the config's
  // arp_timeout_ms while `pump` runs (resolve); why it failed when it knows more than "no answer".
  virtual bool lookup(const proto::Ip6& gid, proto::Mac& out) const = 0;
  virtual bool resolve(const proto::Ip6& gid, proto::Mac& out, const std::function<void()>& pump = {}) = 0;
  const std::string& resolve_error() const { return resolve_error_; }
  // The hop limit the kernel's route gives the last peer found on a netdev (0: the config's).
  uint8_t route_hop_limit() const { return route_hop_limit_; }
  // Takes in changes of the GID table; true when gids() changed. Cheap; call it now and then.
  virtual bool poll_addresses() = 0;
  // False once the device is gone for good (the uroce service stopped): every later call fails.
  virtual bool alive() const { return true; }
  // The end of a run: the capture written out, a netdev given back to the kernel, a memif peer
  // given time to leave first (each a no-op where it does not apply).
  virtual void flush_capture() {}
  virtual void release_netdev() {}
  virtual void await_peer_close(uint32_t timeout_ms) { (void)timeout_ms; }
  virtual std::string describe() const = 0;        // driver, port, MAC, addresses
  virtual std::string counters_text() const = 0;
  // This process's DPDK runtime directory of its own (its telemetry socket), for removal at
  // exit; empty if it has none.
  virtual std::string runtime_dir() const = 0;
  // Sleeps (no polling): for waits between looks at the link.
  static void sleep_ms(uint32_t ms);

 protected:
  EndpointConfig cfg_;
  proto::Mac mac_{};
  proto::Ip6 gid_{};
  std::vector<proto::Ip6> gids_;
  std::string resolve_error_;
  mutable uint8_t route_hop_limit_ = 0;
};

}  // namespace uroce::port
