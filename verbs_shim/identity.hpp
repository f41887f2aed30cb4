// The device's identity: the configuration liburoce-verbs was started with and the device as
// libibverbs programs see it (its ibv_device names and paths, the GID table). Loaded once, on
// the first verbs call that needs it (load_cfg); the GID table when the engine exists.
#pragma once
#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "port/config.hpp"
#include "proto/packet.hpp"

namespace uroce::engine {
class Device;
}

namespace uroce::shim {

struct Identity {
  bool cfg_tried = false;
  bool cfg_ok = false;
  port::EndpointConfig cfg;
  std::string cfg_err;

  // The device as libibverbs programs see it: "is this device uroce's?" compares with &dev.
  ibv_device dev{};
  std::vector<proto::Ip6> gids;   // GID table (index 0 link-local, 1 IPv4-mapped, 2.. IPv6 if set)
  std::vector<bool> gid_valid;
};

// Configuration (identity.cpp): reads rt().identity's config once (UROCE_CONFIG, else
// ./config/uroce.conf, else the installed one) and names the device. Idempotent and
// thread-safe; false if it failed (said on stderr).
bool load_cfg();
// The GID table from the engine (at start-up; identity.cpp), then the device view's GID files.
void build_gid_table(Identity& id, const engine::Device& dev);

// The device as files (device_view.cpp). sysfs_device_file: the answer for one of the device's
// sysfs attributes (board_id, node_desc, hca_type, fw_ver, node_type), false for others.
// device_view_node (after load_cfg) and device_view_gids (after the GID table is known) write
// the device node and the sysfs files when scripts/uroce-run made a private view
// (UROCE_DEVICE_VIEW=1); otherwise they do nothing.
bool sysfs_device_file(const Identity& id, const char* file, std::string& v);
void device_view_node(const Identity& id);
void device_view_gids(const Identity& id);

}  // namespace uroce::shim
