// The device as files: what the kernel would show for a verbs device, for programs that look at the
// files rather than ask libibverbs (UCX checks /dev/infiniband/<dev_name> and reads the GID types
// from /sys/class/infiniband/<dev>/ports/1/gid_attrs/types/<i>).
//
// The files are written only inside a private view: scripts/uroce-run runs the program in its own
// mount namespace with a writable overlay (a tmpfs) over /dev and over /sys/class, and sets
// UROCE_DEVICE_VIEW=1. The host sees none of it and nothing remains when the program exits.
// Without that variable nothing is written. The same answers serve ibv_read_sysfs_file.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "verbs_shim/api.hpp"
#include "verbs_shim/identity.hpp"
#include "verbs_shim/param.hpp"

namespace uroce::shim {

namespace {

bool view_enabled() {
  const char* e = getenv("UROCE_DEVICE_VIEW");
  return e && std::strcmp(e, "1") == 0;
}

void say_once(const std::string& what) {
  static bool said = false;
  if (said) return;
  said = true;
  std::fprintf(stderr, "uroce-verbs: device view: %s: %s (programs that read the device's files will not find it)\n",
               what.c_str(), std::strerror(errno));
}

// mkdir -p
bool make_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    std::string d = path.substr(0, i);
    if (mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
      say_once("mkdir " + d);
      return false;
    }
  }
  return true;
}

bool write_file(const std::string& dir, const std::string& name, const std::string& text) {
  if (!make_dirs(dir)) return false;
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    say_once("write " + path);
    return false;
  }
  std::fprintf(f, "%s\n", text.c_str());
  std::fclose(f);
  return true;
}

std::string gid_text(const proto::Ip6& g) {
  char s[48];
  std::snprintf(s, sizeof s, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1],
                g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]);
  return s;
}

}  // namespace

bool sysfs_device_file(const Identity& r, const char* file, std::string& v) {
  if (!std::strcmp(file, "board_id")) v = "UROCE_DPDK";
  else if (!std::strcmp(file, "node_desc")) v = "uroce " + r.cfg.name;
  else if (!std::strcmp(file, "hca_type")) v = "uroce";
  else if (!std::strcmp(file, "fw_ver")) v = param::kShimFwVer;
  else if (!std::strcmp(file, "node_type")) v = "1: CA";
  else return false;
  return true;
}

void device_view_node(const Identity& r) {
  if (!view_enabled()) return;
  // The device node: a character device the program may read and write. Its number is /dev/null's
  // (1:3): nothing opens it as a verbs device, since the shim answers every libibverbs call.
  const std::string node = std::string("/dev/infiniband/") + r.dev.dev_name;
  if (!make_dirs("/dev/infiniband")) return;
  if (mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0 && errno != EEXIST) {
    say_once("mknod " + node);
    return;
  }
  chmod(node.c_str(), 0666);  // not narrowed by the umask
  const std::string dev = r.dev.ibdev_path;
  for (const char* f : {"board_id", "node_desc", "hca_type", "fw_ver", "node_type"}) {
    std::string v;
    sysfs_device_file(r, f, v);
    if (!write_file(dev, f, v)) return;
  }
  write_file(dev + "/ports/1", "link_layer", "Ethernet");
  write_file(r.dev.dev_path, "ibdev", r.cfg.name);
}

void device_view_gids(const Identity& r) {
  if (!view_enabled()) return;
  const std::string port = std::string(r.dev.ibdev_path) + "/ports/1";
  for (size_t i = 0; i < r.gids.size(); ++i) {
    const std::string n = std::to_string(i);
    if (!r.gid_valid[i]) {
      // An empty entry (a netdev lost the address): a zero GID and no type, as rxe's sysfs.
      if (access((port + "/gids/" + n).c_str(), F_OK) == 0) write_file(port + "/gids", n, gid_text(proto::Ip6{}));
      unlink((port + "/gid_attrs/types/" + n).c_str());
      unlink((port + "/gid_attrs/ndevs/" + n).c_str());
      continue;
    }
    if (!write_file(port + "/gids", n, gid_text(r.gids[i]))) return;
    if (!write_file(port + "/gid_attrs/types", n, "RoCE v2")) return;
    // The interface of each GID, as rxe's: on a netdev shared with the kernel, its name.
    if (!r.cfg.netdev.empty() && !write_file(port + "/gid_attrs/ndevs", n, r.cfg.netdev)) return;
  }
}

}  // namespace uroce::shim
