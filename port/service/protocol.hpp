// The uroce service's control channel (docs/service.md): what the daemon (uroced, port/service/
// daemon.hpp) and an attached process (port/service/client.hpp) say to each other over one
// SOCK_SEQPACKET socket per process, one fixed-size message a datagram. Frames never pass here:
// they go through DPDK rings in the daemon's shared memory (the process is a DPDK secondary).
// The socket's end is the process's end: the kernel closes it however the process stops, and
// the daemon then takes back everything the process had on the device.
#pragma once
#include <cstdint>
#include <cstring>
#include <sys/types.h>
#include <string>

#include "port/param.hpp"

namespace uroce::port::service {

inline constexpr uint32_t kVersion = 4;
inline constexpr uint32_t kMaxGids = param::kGidTableMax;

// The abstract socket the daemon of device `name` listens on (per network namespace, as the
// device's addresses are).
inline std::string socket_name(const std::string& device) { return "uroced-" + device; }

enum class Msg : uint32_t {
  Hello = 1,   // process -> daemon: who I am
  Welcome,     // daemon -> process: your slot, the device, where the rings are
  Refused,     // daemon -> process: why not (text)
  Listen,      // process -> daemon: hand me REQs and SIDR_REQs for this service ID (on), no more (off)
  Resolve,     // process -> daemon: the MAC of this GID
  Resolved,    // daemon -> process: the answer
  Gids,        // daemon -> process: the GID table changed
  Will,        // process -> daemon: a frame to send for connection `id` if I die (none: forget it)
  Group,       // process -> daemon: a QP of mine joined multicast group `gid` (on), or my last one left
};

struct Hello {
  Msg type = Msg::Hello;
  uint32_t version = kVersion;
  int32_t pid = 0;
  char comm[16] = {};
};

struct Gids {
  Msg type = Msg::Gids;
  uint32_t n = 0;
  uint8_t gid[kMaxGids][16] = {};
};

struct Welcome {
  Msg type = Msg::Welcome;
  uint32_t version = kVersion;
  uint32_t slot = 0;          // this process's id tag (the low bits of its QPNs and CM IDs)
  uint32_t tag_bits = 0;
  uint32_t lcore = 0;         // this process's EAL lcore id (unique on the device)
  uint32_t max_frame = 0;
  uint32_t path_mtu = 0;      // engine::Mtu's value
  uint32_t netdev_ifindex = 0;
  uint8_t mac[6] = {};
  char file_prefix[64] = {};  // the daemon's EAL --file-prefix (the secondary's must match)
  char runtime_dir[108] = {}; // the daemon's EAL runtime directory (a process of another user finds it so)
  char netdev[16] = {};
  char describe[128] = {};
  char pool[32] = {};         // (the slot's rings: pump.hpp slot_ring_names)         // the mbuf pool (a process that drives the port takes from it)
  Gids gids;
};

struct Refused {
  Msg type = Msg::Refused;
  char why[200] = {};
};

struct Listen {
  Msg type = Msg::Listen;
  uint32_t on = 0;
  uint64_t service_id = 0;
};

struct Group {
  Msg type = Msg::Group;
  uint32_t on = 0;
  uint8_t gid[16] = {};
};

struct Resolve {
  Msg type = Msg::Resolve;
  uint8_t gid[16] = {};
};

struct Resolved {
  Msg type = Msg::Resolved;
  uint32_t ok = 0;
  uint8_t mac[6] = {};
  uint8_t hop_limit = 0;
  uint8_t gid[16] = {};
  char error[120] = {};
};

// The frame is a DREQ (engine cm::Manager::goodbye_frame): a process that dies with an rdma_cm
// connection up disconnects it, as the kernel's CM does for a process that exits.
struct Will {
  Msg type = Msg::Will;
  uint32_t id = 0;
  uint32_t len = 0;
  uint8_t frame[param::kServiceWillMax] = {};
};

// A message with a file descriptor beside it (the Welcome carries the daemon's doorbell, an
// eventfd a driver rings when it hands the daemon frames: port/service/pump.hpp).
ssize_t send_with_fd(int sock, const void* msg, size_t len, int fd);
ssize_t recv_with_fd(int sock, void* msg, size_t len, int& fd);  // fd: -1 if none came

inline void copy_str(char* dst, size_t n, const std::string& s) {
  std::memset(dst, 0, n);
  std::memcpy(dst, s.data(), s.size() < n - 1 ? s.size() : n - 1);
}

}  // namespace uroce::port::service
