// The device's identity (verbs_shim/identity.hpp): the config file read once and the device
// named after it; the GID table taken from the engine once it exists.
#include "verbs_shim/identity.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <mutex>

#include "verbs_shim/runtime.hpp"

namespace uroce::shim {

bool load_cfg() {
  static std::mutex mu;
  Identity& id = rt().identity;
  std::lock_guard<std::mutex> g(mu);
  if (id.cfg_tried) return id.cfg_ok;
  id.cfg_tried = true;
  const char* env = getenv("UROCE_CONFIG");
  // $UROCE_CONFIG, else ./config/uroce.conf (a source tree), else the installed default.
  std::string path = env && *env ? env : "config/uroce.conf";
  if (!(env && *env) && access(path.c_str(), F_OK) != 0) path = UROCE_SYSCONFDIR "/uroce/uroce.conf";
  auto c = port::load_config(path, id.cfg_err);
  if (!c) {
    std::fprintf(stderr, "uroce-verbs: no uroce device: %s (set UROCE_CONFIG=FILE)\n", id.cfg_err.c_str());
    return false;
  }
  // UROCE_CAPTURE, UROCE_FAULT_DROP, ...: the capture and fault keys from the environment.
  if (!port::apply_env(*c, getenv, id.cfg_err)) {
    std::fprintf(stderr, "uroce-verbs: no uroce device: %s\n", id.cfg_err.c_str());
    return false;
  }
  id.cfg = *c;
  ibv_device& d = id.dev;
  d.node_type = IBV_NODE_CA;
  d.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(d.name, sizeof d.name, "%s", id.cfg.name.c_str());
  std::snprintf(d.dev_name, sizeof d.dev_name, "uverbs-%s", id.cfg.name.c_str());
  std::snprintf(d.dev_path, sizeof d.dev_path, "/sys/class/infiniband_verbs/uverbs-%s", id.cfg.name.c_str());
  std::snprintf(d.ibdev_path, sizeof d.ibdev_path, "/sys/class/infiniband/%s", id.cfg.name.c_str());
  id.cfg_ok = true;
  device_view_node(id);
  return true;
}

// The GID table the application sees is the engine's (port::DpdkLink::gids(): 0 link-local,
// 1 IPv4-mapped, 2.. each configured IPv6 address); a zero entry is not valid.
void build_gid_table(Identity& id, const engine::Device& dev) {
  const std::vector<proto::Ip6>& g = dev.gids();
  // On a netdev the table has room for the addresses the interface may gain (poll_addresses):
  // its size is fixed at start-up, so that the threads that read it never see it move.
  size_t n = g.size();
  if (!id.cfg.netdev.empty()) n = std::max<size_t>(n, param::kGidTableMax);
  if (id.gids.size() < n) id.gids.resize(n), id.gid_valid.resize(n);
  for (size_t i = 0; i < id.gids.size(); ++i) {
    id.gids[i] = i < g.size() ? g[i] : proto::Ip6{};
    id.gid_valid[i] = dev.sgid(uint32_t(i)) != nullptr;
  }
  device_view_gids(id);
}

}  // namespace uroce::shim
