// A netdev shared with the kernel (key netdev) is used by one uroce process at a time until the
// uroce service shares it (docs/netdev.md). claim_netdev() marks it ours with an abstract Unix
// socket named after the interface (per network namespace, gone when the process ends however it
// ends), and clears an XDP program of uroce's that a killed process left attached; any other XDP
// program on the interface is not ours to replace. release_netdev() detaches our program when a
// process ends without closing the port (the verbs shim), so the kernel has its interface back.
//
// The af_packet fallback (netdev_link = af_packet, for interfaces without XDP): af_packet sees a
// copy of every frame while the kernel still gets the original. share_packet_socket() gives the
// PMD's socket a socket filter that keeps only RoCEv2 frames, and holds UDP port 4791 on the
// interface with a socket whose filter drops everything: the kernel then delivers RoCE frames
// to that socket, where they are dropped (UdpInErrors), instead of answering them with ICMP port
// unreachable.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/filter.h>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <dirent.h>

#include <cerrno>
#include <cstdlib>
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

// Classic BPF: accept UDP destination port 4791 over IPv4 (not a later fragment) or IPv6 (UDP
// right after the fixed header); drop the rest. Offsets from the Ethernet header (VLAN tags
// are metadata on a packet socket).
constexpr uint32_t kAccept = 0x40000, kDrop = 0;
const sock_filter kRoceOnly[] = {
    BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),                  // 0 ethertype
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x86dd, 0, 4),       // 1 IPv6?
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 14 + 6),              // 2 next header
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 0, 11), // 3 else -> 15 drop
    BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 14 + 40 + 2),         // 4 UDP destination port
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 4791, 8, 9),         // 5 -> 14 accept / 15 drop
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0800, 0, 8),       // 6 IPv4? else -> 15 drop
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 14 + 9),              // 7 protocol
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 0, 6),  // 8 else -> 15 drop
    BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 14 + 6),              // 9 fragment offset
    BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, 4, 0),      // 10 a later fragment: -> 15 drop
    BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 14),                 // 11 X = IPv4 header length
    BPF_STMT(BPF_LD | BPF_H | BPF_IND, 14 + 2),              // 12 UDP destination port
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 4791, 0, 1),         // 13 -> 14 accept / 15 drop
    BPF_STMT(BPF_RET | BPF_K, kAccept),                      // 14
    BPF_STMT(BPF_RET | BPF_K, kDrop),                        // 15
};
const sock_filter kDropAll[] = {BPF_STMT(BPF_RET | BPF_K, 0)};

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

bool DpdkLink::share_packet_socket(std::string& err) {
  // The PMD's packet socket: the AF_PACKET socket of this process bound to our interface.
  int attached = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      const int fd = std::atoi(e->d_name);
      if (fd <= 2) continue;
      int domain = 0;
      socklen_t len = sizeof domain;
      if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_PACKET) continue;
      sockaddr_ll ll{};
      len = sizeof ll;
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&ll), &len) != 0 || ll.sll_ifindex != cfg_.netdev_ifindex) continue;
      sock_fprog prog{uint16_t(sizeof kRoceOnly / sizeof kRoceOnly[0]), const_cast<sock_filter*>(kRoceOnly)};
      if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) {
        err = std::string("af_packet socket filter: ") + std::strerror(errno);
        closedir(d);
        return false;
      }
      ++attached;
    }
    closedir(d);
  }
  if (attached == 0) {
    err = "af_packet: the PMD's packet socket on " + cfg_.netdev + " was not found";
    return false;
  }
  // UDP 4791 held on the interface, IPv4 and IPv6, every datagram dropped by its filter.
  for (int family : {AF_INET, AF_INET6}) {
    const int fd = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sock_fprog drop{1, const_cast<sock_filter*>(kDropAll)};
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &drop, sizeof drop);
    if (family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, cfg_.netdev.c_str(), socklen_t(cfg_.netdev.size()));
    sockaddr_storage a{};
    socklen_t alen;
    if (family == AF_INET) {
      auto* a4 = reinterpret_cast<sockaddr_in*>(&a);
      a4->sin_family = AF_INET, a4->sin_port = htons(4791), alen = sizeof *a4;
    } else {
      auto* a6 = reinterpret_cast<sockaddr_in6*>(&a);
      a6->sin6_family = AF_INET6, a6->sin6_port = htons(4791), alen = sizeof *a6;
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), alen) != 0) {
      err = "af_packet: UDP port 4791 on " + cfg_.netdev + " is taken (" + std::strerror(errno) +
            "; rxe on this host?): the kernel would answer RoCE frames with ICMP";
      ::close(fd);
      return false;
    }
    port_guard_fds_.push_back(fd);
  }
  return true;
}

void DpdkLink::release_netdev() {
  if (claim_fd_ < 0) return;
  std::string prog;
  if (attached_program(cfg_.netdev_ifindex, prog) && prog == kOurProgram) bpf_xdp_detach(cfg_.netdev_ifindex, 0, nullptr);
}

}  // namespace uroce::port
