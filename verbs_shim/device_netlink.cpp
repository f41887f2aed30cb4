// The device over RDMA netlink: what the kernel's ib_core answers on a NETLINK_RDMA socket, for
// programs that ask it rather than libibverbs. iproute2's `rdma dev` and `rdma link` do: run
// through scripts/uroce-run they list uroce's device as they list rxe's,
//
//   $ uroce-run --netdev veth0 -- rdma link show
//   link uroce_veth0/1 state ACTIVE physical_state LINK_UP netdev veth0
//
// A socket(AF_NETLINK, *, NETLINK_RDMA) of the program becomes one end of an AF_UNIX
// SOCK_SEQPACKET pair; what the program sends on it is read here and the answer written to the
// other end at once, so its next recvmsg finds it (one record per request, as the kernel's
// replies fit one read). bind, getsockname and setsockopt succeed as on a netlink socket, and a
// message read carries the kernel's address (sockaddr_nl, port 0), which libmnl checks.
//
// Answered (the kernel's attributes, drivers/infiniband/core/nldev.c): RDMA_NLDEV_CMD_GET (dump,
// or one device by index) and RDMA_NLDEV_CMD_PORT_GET (dump of a device's ports, or one port).
// Everything else gets the error the kernel gives for a command it lacks, EOPNOTSUPP
// (`rdma res` included: `uroce-stat res qp` lists the device's QPs). Only uroce's device is
// listed, index param::kShimNetlinkDevIndex; a host's kernel devices are not (ibv_devices, through
// the shim, lists both).
//
// Every other socket, and every other call on any other descriptor, goes straight to the C
// library; the descriptor check costs one load while no such socket is open.
#include <dlfcn.h>
#include <endian.h>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "port/netdev.hpp"
#include "verbs_shim/api.hpp"
#include "verbs_shim/convert.hpp"
#include "verbs_shim/identity.hpp"
#include "verbs_shim/param.hpp"
#include "verbs_shim/runtime.hpp"

namespace uroce::shim {

// ---- the C library's own calls -----------------------------------------------------------------
template <typename F>
F next_sym(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

namespace {
#define LIBC(fn)                                                             \
  ([]() -> decltype(&::fn) {                                                 \
    static const auto p = ::uroce::shim::next_sym<decltype(&::fn)>(#fn);    \
    return p;                                                                \
  }())

// ---- the program's RDMA netlink sockets ----------------------------------------------------------
struct Fake {
  int fd = -1;      // the program's end
  int peer = -1;    // ours: answers are written here
  uint32_t portid = 0;
};

std::mutex fakes_mu;
std::array<Fake, param::kShimNetlinkSockets> fakes;
std::atomic<int> open_fakes{0};   // 0: every call goes straight through
uint32_t next_portid = 0;

// The socket's entry (a copy), or false when `fd` is not one of them.
bool find_fake(int fd, Fake& out) {
  if (open_fakes.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> g(fakes_mu);
  for (const Fake& f : fakes)
    if (f.fd == fd && fd >= 0) {
      out = f;
      return true;
    }
  return false;
}

// ---- answers --------------------------------------------------------------------------------------
// One netlink message being written: header, then attributes (4-byte aligned; a u64's value
// 8-byte aligned behind a pad attribute, as the kernel's nla_put_u64_64bit does).
class Msg {
 public:
  Msg(std::vector<uint8_t>& out, uint16_t type, uint16_t flags, uint32_t seq, uint32_t portid) : out_(out) {
    start_ = out_.size();
    nlmsghdr h{};
    h.nlmsg_type = type;
    h.nlmsg_flags = flags;
    h.nlmsg_seq = seq;
    h.nlmsg_pid = portid;
    put(&h, sizeof h);
  }
  ~Msg() {
    const uint32_t len = uint32_t(out_.size() - start_);
    std::memcpy(out_.data() + start_, &len, sizeof len);   // nlmsg_len, the first field
  }
  void u8(uint16_t type, uint8_t v) { attr(type, &v, 1); }
  void u32(uint16_t type, uint32_t v) { attr(type, &v, 4); }
  void u64(uint16_t type, uint64_t v) {
    if ((out_.size() - start_ + NLA_HDRLEN) % 8 != 0) attr(RDMA_NLDEV_ATTR_PAD, nullptr, 0);
    attr(type, &v, 8);
  }
  void str(uint16_t type, const std::string& s) { attr(type, s.c_str(), s.size() + 1); }
  void raw(const void* p, size_t n) { put(p, n); }

 private:
  void attr(uint16_t type, const void* v, size_t n) {
    nlattr a{};
    a.nla_len = uint16_t(NLA_HDRLEN + n);
    a.nla_type = type;
    put(&a, sizeof a);
    put(v, n);
    out_.resize((out_.size() + NLA_ALIGNTO - 1) & ~size_t(NLA_ALIGNTO - 1), 0);
  }
  void put(const void* p, size_t n) {
    if (n) out_.insert(out_.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  }
  std::vector<uint8_t>& out_;
  size_t start_;
};

uint16_t nldev_type(uint16_t op) { return uint16_t(RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)); }

// An error, or with 0 the acknowledgement, of request `req` (its header only: NLM_F_CAPPED).
void put_error(std::vector<uint8_t>& out, const nlmsghdr& req, int error, uint32_t portid) {
  Msg m(out, NLMSG_ERROR, NLM_F_CAPPED, req.nlmsg_seq, portid);
  m.raw(&error, sizeof error);
  m.raw(&req, sizeof req);
}

void put_done(std::vector<uint8_t>& out, const nlmsghdr& req, uint32_t portid) {
  Msg m(out, NLMSG_DONE, NLM_F_MULTI, req.nlmsg_seq, portid);
  const int zero = 0;
  m.raw(&zero, sizeof zero);
}

// What the device's answers name: the config (load_cfg), and on a netdev the interface as it is now.
struct DeviceFacts {
  std::string name;
  std::string netdev;
  int ifindex = 0;
  bool have_guid = false;
  uint64_t guid = 0;   // as the kernel puts it: the value of the big-endian GUID
};

bool device_facts(DeviceFacts& d) {
  if (!load_cfg()) return false;
  const Identity& id = rt().identity;
  d.name = id.cfg.name;
  d.netdev = id.cfg.netdev;
  proto::Mac mac{};
  if (!d.netdev.empty()) {
    port::NetdevInfo ni;
    std::string err;
    if (port::read_netdev(d.netdev, ni, err)) {
      d.ifindex = ni.ifindex;
      mac = ni.mac;
      d.have_guid = true;
    }
  } else if (!id.cfg.mac_from_port) {
    mac = id.cfg.mac;
    d.have_guid = true;
  }
  if (d.have_guid) d.guid = be64toh(guid_from_mac(mac));
  return true;
}

void put_device(std::vector<uint8_t>& out, const nlmsghdr& req, uint16_t flags, const DeviceFacts& d, uint32_t portid) {
  Msg m(out, nldev_type(RDMA_NLDEV_CMD_GET), flags, req.nlmsg_seq, portid);
  m.u32(RDMA_NLDEV_ATTR_DEV_INDEX, param::kShimNetlinkDevIndex);
  m.str(RDMA_NLDEV_ATTR_DEV_NAME, d.name);
  m.u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);   // in a device's answer: how many ports it has
  m.u64(RDMA_NLDEV_ATTR_CAP_FLAGS, device_cap_flags());
  m.str(RDMA_NLDEV_ATTR_FW_VERSION, param::kShimFwVer);
  if (d.have_guid) {
    m.u64(RDMA_NLDEV_ATTR_NODE_GUID, d.guid);
    m.u64(RDMA_NLDEV_ATTR_SYS_IMAGE_GUID, d.guid);
  }
  m.u8(RDMA_NLDEV_ATTR_DEV_NODE_TYPE, 1);   // RDMA_NODE_IB_CA, as rxe's
  m.u8(RDMA_NLDEV_ATTR_DEV_DIM, 0);
  m.str(RDMA_NLDEV_ATTR_DEV_PROTOCOL, "roce");
}

void put_port(std::vector<uint8_t>& out, const nlmsghdr& req, uint16_t flags, const DeviceFacts& d, uint32_t portid) {
  Msg m(out, nldev_type(RDMA_NLDEV_CMD_PORT_GET), flags, req.nlmsg_seq, portid);
  m.u32(RDMA_NLDEV_ATTR_DEV_INDEX, param::kShimNetlinkDevIndex);
  m.str(RDMA_NLDEV_ATTR_DEV_NAME, d.name);
  m.u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
  m.u64(RDMA_NLDEV_ATTR_CAP_FLAGS, port_cap_flags());
  // The states ibv_query_port gives (convert.cpp fill_port_attr): active, link up.
  m.u8(RDMA_NLDEV_ATTR_PORT_STATE, uint8_t(IBV_PORT_ACTIVE));
  m.u8(RDMA_NLDEV_ATTR_PORT_PHYS_STATE, param::kShimPortPhysState);
  if (!d.netdev.empty() && d.ifindex > 0) {
    m.u32(RDMA_NLDEV_ATTR_NDEV_INDEX, uint32_t(d.ifindex));
    m.str(RDMA_NLDEV_ATTR_NDEV_NAME, d.netdev);
  }
}

// The u32 attribute `type` of a request, if it has a well-formed one.
bool req_u32(const uint8_t* msg, size_t len, uint16_t type, uint32_t& v) {
  size_t off = NLMSG_HDRLEN;
  while (off + NLA_HDRLEN <= len) {
    nlattr a;
    std::memcpy(&a, msg + off, sizeof a);
    if (a.nla_len < NLA_HDRLEN || off + a.nla_len > len) return false;
    if ((a.nla_type & NLA_TYPE_MASK) == type && a.nla_len == NLA_HDRLEN + 4) {
      std::memcpy(&v, msg + off + NLA_HDRLEN, 4);
      return true;
    }
    off += NLA_ALIGN(a.nla_len);
  }
  return false;
}

// The answer to one request (nlmsg_len checked by the caller).
void answer(const uint8_t* msg, size_t len, uint32_t portid, std::vector<uint8_t>& out) {
  nlmsghdr h;
  std::memcpy(&h, msg, sizeof h);
  if (!(h.nlmsg_flags & NLM_F_REQUEST) || h.nlmsg_type < NLMSG_MIN_TYPE) return;   // as the kernel: ignored
  const bool ack = h.nlmsg_flags & NLM_F_ACK;
  const bool dump = (h.nlmsg_flags & NLM_F_DUMP) == NLM_F_DUMP;
  const unsigned client = h.nlmsg_type >> 10, op = h.nlmsg_type & ((1u << 10) - 1);
  if (client != RDMA_NL_NLDEV) return put_error(out, h, -EINVAL, portid);
  DeviceFacts d;
  if ((op == RDMA_NLDEV_CMD_GET || op == RDMA_NLDEV_CMD_PORT_GET) && !device_facts(d))
    return put_error(out, h, -ENODEV, portid);
  uint32_t dev = 0, port = 0;
  const bool have_dev = req_u32(msg, len, RDMA_NLDEV_ATTR_DEV_INDEX, dev);
  const bool have_port = req_u32(msg, len, RDMA_NLDEV_ATTR_PORT_INDEX, port);
  if (op == RDMA_NLDEV_CMD_GET) {
    if (dump) {
      put_device(out, h, NLM_F_MULTI, d, portid);
      return put_done(out, h, portid);
    }
    if (!have_dev || dev != param::kShimNetlinkDevIndex) return put_error(out, h, -EINVAL, portid);
    put_device(out, h, 0, d, portid);
    if (ack) put_error(out, h, 0, portid);
    return;
  }
  if (op == RDMA_NLDEV_CMD_PORT_GET) {
    // The kernel's port dump and port query both name the device; the query a valid port too.
    if (!have_dev || dev != param::kShimNetlinkDevIndex) return put_error(out, h, -EINVAL, portid);
    if (dump) {
      put_port(out, h, NLM_F_MULTI, d, portid);
      return put_done(out, h, portid);
    }
    if (!have_port || port != 1) return put_error(out, h, -EINVAL, portid);
    put_port(out, h, 0, d, portid);
    if (ack) put_error(out, h, 0, portid);
    return;
  }
  put_error(out, h, -EOPNOTSUPP, portid);
}

// Everything the program sent in one call: each message answered, the answers as one record.
ssize_t take_request(const Fake& f, const uint8_t* buf, size_t len) {
  std::vector<uint8_t> out;
  size_t off = 0;
  while (off + NLMSG_HDRLEN <= len) {
    nlmsghdr h;
    std::memcpy(&h, buf + off, sizeof h);
    if (h.nlmsg_len < NLMSG_HDRLEN || off + h.nlmsg_len > len) break;
    answer(buf + off, h.nlmsg_len, f.portid, out);
    off += NLMSG_ALIGN(h.nlmsg_len);
  }
  if (!out.empty() && LIBC(send)(f.peer, out.data(), out.size(), MSG_NOSIGNAL) < 0) return -1;
  return ssize_t(len);
}

void kernel_address(sockaddr* a, socklen_t* alen) {
  if (!a || !alen) return;
  sockaddr_nl nl{};
  nl.nl_family = AF_NETLINK;
  std::memcpy(a, &nl, std::min<size_t>(*alen, sizeof nl));
  *alen = sizeof nl;
}

}  // namespace
}  // namespace uroce::shim

using uroce::shim::Fake;
using uroce::shim::find_fake;

extern "C" {

SHIM_EXPORT int socket(int domain, int type, int protocol) {
  using namespace uroce::shim;
  if (domain != AF_NETLINK || protocol != NETLINK_RDMA || !load_cfg()) return LIBC(socket)(domain, type, protocol);
  int sv[2];
  if (LIBC(socketpair)(AF_UNIX, SOCK_SEQPACKET | (type & (SOCK_CLOEXEC | SOCK_NONBLOCK)), 0, sv) != 0) return -1;
  std::lock_guard<std::mutex> g(fakes_mu);
  for (Fake& f : fakes)
    if (f.fd < 0) {
      f.fd = sv[0];
      f.peer = sv[1];
      // Port ids as the kernel's autobind gives them: the process id first, then others.
      f.portid = next_portid++ == 0 ? uint32_t(getpid()) : 0x80000000u | next_portid;
      open_fakes.fetch_add(1, std::memory_order_release);
      return sv[0];
    }
  LIBC(close)(sv[0]);
  LIBC(close)(sv[1]);
  errno = EMFILE;
  return -1;
}

SHIM_EXPORT int close(int fd) {
  using namespace uroce::shim;
  if (open_fakes.load(std::memory_order_acquire) != 0) {
    int peer = -1;
    {
      std::lock_guard<std::mutex> g(fakes_mu);
      for (Fake& f : fakes)
        if (f.fd == fd && fd >= 0) {
          peer = f.peer;
          f = Fake{};
          open_fakes.fetch_sub(1, std::memory_order_release);
          break;
        }
    }
    if (peer >= 0) LIBC(close)(peer);
  }
  return LIBC(close)(fd);
}

SHIM_EXPORT int bind(int fd, const sockaddr* a, socklen_t alen) {
  Fake f;
  if (find_fake(fd, f)) return 0;
  return LIBC(bind)(fd, a, alen);
}

SHIM_EXPORT int getsockname(int fd, sockaddr* a, socklen_t* alen) {
  Fake f;
  if (!find_fake(fd, f)) return LIBC(getsockname)(fd, a, alen);
  sockaddr_nl nl{};
  nl.nl_family = AF_NETLINK;
  nl.nl_pid = f.portid;
  std::memcpy(a, &nl, std::min<size_t>(*alen, sizeof nl));
  *alen = sizeof nl;
  return 0;
}

SHIM_EXPORT int setsockopt(int fd, int level, int name, const void* v, socklen_t vlen) {
  Fake f;
  if (find_fake(fd, f)) return 0;   // NETLINK_EXT_ACK, NETLINK_CAP_ACK, buffer sizes: taken
  return LIBC(setsockopt)(fd, level, name, v, vlen);
}

SHIM_EXPORT ssize_t sendto(int fd, const void* buf, size_t len, int flags, const sockaddr* a, socklen_t alen) {
  Fake f;
  if (find_fake(fd, f)) return uroce::shim::take_request(f, static_cast<const uint8_t*>(buf), len);
  return LIBC(sendto)(fd, buf, len, flags, a, alen);
}

SHIM_EXPORT ssize_t send(int fd, const void* buf, size_t len, int flags) {
  Fake f;
  if (find_fake(fd, f)) return uroce::shim::take_request(f, static_cast<const uint8_t*>(buf), len);
  return LIBC(send)(fd, buf, len, flags);
}

SHIM_EXPORT ssize_t sendmsg(int fd, const msghdr* m, int flags) {
  Fake f;
  if (!find_fake(fd, f)) return LIBC(sendmsg)(fd, m, flags);
  std::vector<uint8_t> all;
  for (size_t i = 0; i < m->msg_iovlen; ++i) {
    const auto* p = static_cast<const uint8_t*>(m->msg_iov[i].iov_base);
    all.insert(all.end(), p, p + m->msg_iov[i].iov_len);
  }
  return uroce::shim::take_request(f, all.data(), all.size());
}

SHIM_EXPORT ssize_t recvmsg(int fd, msghdr* m, int flags) {
  Fake f;
  if (!find_fake(fd, f)) return LIBC(recvmsg)(fd, m, flags);
  // The room the caller gave for the address (the unix socket's recvmsg sets it to 0: no name).
  socklen_t room = m->msg_namelen;
  const ssize_t n = LIBC(recvmsg)(fd, m, flags);
  if (n >= 0 && m->msg_name) {
    uroce::shim::kernel_address(static_cast<sockaddr*>(m->msg_name), &room);
    m->msg_namelen = room;
  }
  return n;
}

SHIM_EXPORT ssize_t recvfrom(int fd, void* buf, size_t len, int flags, sockaddr* a, socklen_t* alen) {
  Fake f;
  if (!find_fake(fd, f)) return LIBC(recvfrom)(fd, buf, len, flags, a, alen);
  const ssize_t n = LIBC(recvfrom)(fd, buf, len, flags, nullptr, nullptr);
  if (n >= 0) uroce::shim::kernel_address(a, alen);
  return n;
}

}  // extern "C"
