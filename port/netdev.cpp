#include "port/netdev.hpp"

#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "port/config.hpp"
#include "port/param.hpp"

#ifndef UROCE_XDP_PROG_INSTALLED  // meson defines it (port/meson.build); other builds have none
#define UROCE_XDP_PROG_INSTALLED ""
#endif

namespace uroce::port {

namespace {

uint8_t prefix_of(const sockaddr_in* mask) {
  return mask ? uint8_t(__builtin_popcount(mask->sin_addr.s_addr)) : 32;
}

bool file_exists(const std::string& p) {
  struct stat st;
  return !p.empty() && ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool key_set(const EndpointConfig& c, const char* key) {
  return std::find(c.keys.begin(), c.keys.end(), key) != c.keys.end();
}


void add_words(std::vector<std::string>& out, const std::string& line) {
  for (size_t a = 0; a < line.size();) {
    size_t b = line.find(' ', a);
    if (b == std::string::npos) b = line.size();
    if (b > a) out.push_back(line.substr(a, b - a));
    a = b + 1;
  }
}

}  // namespace

bool read_netdev(const std::string& name, NetdevInfo& out, std::string& err) {
  out = NetdevInfo{};
  out.name = name;
  out.ifindex = int(if_nametoindex(name.c_str()));
  if (out.ifindex == 0) {
    err = "netdev '" + name + "': no such interface in this network namespace";
    return false;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    err = std::string("getifaddrs: ") + std::strerror(errno);
    return false;
  }
  bool have_mac = false;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || name != a->ifa_name) continue;
    out.up = (a->ifa_flags & IFF_UP) != 0;
    switch (a->ifa_addr->sa_family) {
      case AF_PACKET: {
        auto* ll = reinterpret_cast<const sockaddr_ll*>(a->ifa_addr);
        if (ll->sll_halen == 6) std::memcpy(out.mac.data(), ll->sll_addr, 6), have_mac = true;
        break;
      }
      case AF_INET:
        if (!out.have_ip4) {
          std::memcpy(out.ip4, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, 4);
          out.prefix4 = prefix_of(reinterpret_cast<const sockaddr_in*>(a->ifa_netmask));
          out.have_ip4 = true;
        } else {
          proto::Ip6 g{};
          g[10] = g[11] = 0xff;
          std::memcpy(g.data() + 12, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, 4);
          out.ip4_more.push_back(g);
        }
        break;
      case AF_INET6: {
        proto::Ip6 g;
        std::memcpy(g.data(), &reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr, 16);
        if (g[0] == 0xfe && (g[1] & 0xc0) == 0x80) {
          if (!out.have_link_local) out.link_local = g, out.have_link_local = true;
        } else {
          out.ip6s.push_back(g);
        }
        break;
      }
      default:
        break;
    }
  }
  freeifaddrs(list);
  if (!have_mac) {
    err = "netdev '" + name + "': no Ethernet address (uroce needs an Ethernet interface)";
    return false;
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name.c_str());
  if (fd < 0 || ioctl(fd, SIOCGIFMTU, &ifr) != 0) {
    err = "netdev '" + name + "': SIOCGIFMTU: " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  ::close(fd);
  out.mtu = uint32_t(ifr.ifr_mtu);
  return true;
}

uint32_t path_mtu_for(uint32_t if_mtu) {
  uint32_t best = 0;
  for (uint32_t m = 256; m <= 4096; m *= 2)
    if (m + param::kRoceMaxHeaders <= if_mtu) best = m;
  return best;
}

std::string xdp_program(const EndpointConfig& c) {
  if (!c.xdp_prog.empty()) return c.xdp_prog;
  if (const char* e = std::getenv("UROCE_XDP_PROG"); e && *e) return e;
  if (file_exists(UROCE_XDP_PROG_INSTALLED)) return UROCE_XDP_PROG_INSTALLED;
  return {};
}

bool apply_netdev(EndpointConfig& c, std::string& err) {
  NetdevInfo nd;
  if (!read_netdev(c.netdev, nd, err)) return false;
  if (!nd.up) {
    err = "netdev '" + c.netdev + "' is down (ip link set " + c.netdev + " up)";
    return false;
  }
  c.netdev_ifindex = nd.ifindex;
  if (!key_set(c, "mac")) c.mac = nd.mac, c.mac_from_port = false;
  if (!key_set(c, "ip") && nd.have_ip4) {
    std::memcpy(c.ip4, nd.ip4, 4);
    c.prefix4 = nd.prefix4;
    c.have_ip4 = true;
  }
  if (!key_set(c, "ip6")) {
    c.ip6s = nd.ip6s;
    c.have_ip6 = !nd.ip6s.empty();
    if (c.have_ip6) c.ip6 = nd.ip6s.front();
  }
  // The interface's other IPv4 addresses after its IPv6 ones (GIDs 2..), unless the file set `ip`.
  if (!key_set(c, "ip"))
    for (const proto::Ip6& g : nd.ip4_more)
      if (c.ip6s.size() + 2 < param::kGidTableMax) c.ip6s.push_back(g);
  if (nd.have_link_local) c.link_local = nd.link_local, c.have_link_local = true;
  const bool packet = c.netdev_link == "af_packet";
  // af_packet: one frame of framesz bytes per slot, the TPACKET header included.
  const uint32_t framesz = nd.mtu + 14 + 128 <= 2048 ? 2048 : nd.mtu + 14 + 128 <= 4096 ? 4096 : 8192;
  const uint32_t max_link = packet ? std::min<uint32_t>(framesz - 14 - 128, 8000) : param::kAfXdpMaxLinkMtu;
  if (!key_set(c, "link_mtu")) c.link_mtu = std::min(nd.mtu, max_link);
  if (!key_set(c, "mbuf_size")) c.mbuf_size = packet ? framesz : param::kAfXdpMinMbufSize;
  if (!key_set(c, "mtu")) {
    const uint32_t m = std::min(path_mtu_for(nd.mtu), packet ? path_mtu_for(c.link_mtu) : param::kAfXdpMaxPathMtu);
    if (m == 0) {
      err = "netdev '" + c.netdev + "': MTU " + std::to_string(nd.mtu) + " is below the smallest RoCE path MTU (256 + " +
            std::to_string(param::kRoceMaxHeaders) + " bytes of headers)";
      return false;
    }
    c.path_mtu = *path_mtu_of(m);
  }
  if (!key_set(c, "gid_index") && !c.have_ip4) c.gid_index = 0;
  if (c.eal.empty() && packet) {
    const std::string eal = lcores_of_affinity() + " --no-huge -m 256 --no-pci --log-level=warning --file-prefix uroce-" +
                            c.name + " --vdev=net_af_packet0,iface=" + c.netdev + ",qdisc_bypass=0,blocksz=" +
                            std::to_string(std::max<uint32_t>(framesz, 4096)) + ",framesz=" + std::to_string(framesz) +
                            ",framecnt=4096";
    add_words(c.eal, eal);
  }
  if (c.eal.empty()) {
    const std::string prog = xdp_program(c);
    if (prog.empty()) {
      err = "netdev '" + c.netdev + "': uroce's XDP program (roce_redirect.bpf.o) is not found: set key xdp_prog "
            "or UROCE_XDP_PROG";
      return false;
    }
    const std::string eal = lcores_of_affinity() + " --no-huge -m 256 --no-pci --log-level=warning --file-prefix uroce-" +
                            c.name + " --vdev=net_af_xdp0,iface=" + c.netdev +
                            ",start_queue=0,queue_count=1,xdp_prog=" + prog;
    add_words(c.eal, eal);
  }
  return true;
}

// "--lcores=0@(0-1)": the EAL's lcore on every CPU this process may run on, so the scheduler places its
// thread as it places the program's others (a fixed -l N would put every process on CPU N).
std::string lcores_of_affinity(unsigned lcore) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "--lcores=" + std::to_string(lcore) + "@0";
  std::string list;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    if (!list.empty()) list += ',';
    list += std::to_string(cpu);
    if (last > cpu) list += '-' + std::to_string(last);
    cpu = last;
  }
  return "--lcores=" + std::to_string(lcore) + "@(" + list + ")";
}

}  // namespace uroce::port
