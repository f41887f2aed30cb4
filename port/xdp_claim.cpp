// A netdev shared with the kernel (key netdev) is used by one uroce process at a time until the
// uroce service shares it (docs/netdev.md). claim_netdev() marks it ours with an abstract Unix
// socket named after the interface (per network namespace, gone when the process ends however it
// ends), and clears an XDP program of uroce's that a killed process left attached; any other XDP
// program on the interface is not ours to replace. release_netdev() detaches our program when a
// process ends without closing the port (the verbs shim), so the kernel has its interface back.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "port/dpdk_link.hpp"

namespace uroce::port {

namespace {

constexpr const char* kOurProgram = "uroce_roce";  // the function name in port/xdp/roce_redirect.bpf.c

// The attached XDP program's id and name (0 when there is none).
uint32_t attached_program(int ifindex, std::string& name) {
  uint32_t id = 0;
  if (bpf_xdp_query_id(ifindex, 0, &id) != 0 || id == 0) return 0;
  const int fd = bpf_prog_get_fd_by_id(id);
  if (fd >= 0) {
    bpf_prog_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) name = info.name;
    close(fd);
  }
  return id;
}

}  // namespace

bool DpdkLink::claim_netdev(std::string& err) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = "uroce-netdev-" + cfg_.netdev;
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // abstract: sun_path[0] == 0
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), socklen_t(offsetof(sockaddr_un, sun_path) + 1 + name.size())) != 0) {
    err = "netdev '" + cfg_.netdev + "' is in use by another uroce process on this host (one process per netdev " +
          "until the uroce service shares it: docs/netdev.md)";
    if (fd >= 0) ::close(fd);
    return false;
  }
  claim_fd_ = fd;
  std::string prog;
  if (uint32_t id = attached_program(cfg_.netdev_ifindex, prog)) {
    if (prog != kOurProgram) {
      err = "netdev '" + cfg_.netdev + "' has an XDP program already (id " + std::to_string(id) + ", '" + prog +
            "'): uroce attaches its own only to an interface without one (ip link set " + cfg_.netdev + " xdp off)";
      return false;
    }
    // Ours, and nobody holds the claim: left by a process that was killed.
    if (int rc = bpf_xdp_detach(cfg_.netdev_ifindex, 0, nullptr); rc != 0) {
      err = "netdev '" + cfg_.netdev + "': removing the XDP program a killed uroce process left: " + std::strerror(-rc);
      return false;
    }
  }
  return true;
}

void DpdkLink::release_netdev() {
  if (claim_fd_ < 0) return;
  std::string prog;
  if (attached_program(cfg_.netdev_ifindex, prog) && prog == kOurProgram) bpf_xdp_detach(cfg_.netdev_ifindex, 0, nullptr);
}

}  // namespace uroce::port
