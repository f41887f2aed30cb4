// The device over RDMA netlink (verbs_shim/device_netlink.cpp), asked as iproute2's rdma asks it,
// and with requests the kernel would refuse. Runs under the shim only (meson test shim-netlink:
// scripts/uroce-run --config config/memif-server.conf --no-device-view -- netlink_test): no link
// is started, the answers come from the config alone.
#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kSeq = 4791;

struct Reply {
  uint16_t type = 0, flags = 0;
  uint32_t seq = 0, pid = 0;
  int error = 1;                                    // NLMSG_ERROR's code (1: not an error message)
  std::map<uint16_t, std::vector<uint8_t>> attrs;   // a data message's attributes
  std::string str(uint16_t t) const {
    auto it = attrs.find(t);
    return it == attrs.end() || it->second.empty() ? "" : std::string(reinterpret_cast<const char*>(it->second.data()));
  }
  uint32_t u32(uint16_t t) const {
    uint32_t v = 0;
    auto it = attrs.find(t);
    if (it != attrs.end() && it->second.size() == 4) std::memcpy(&v, it->second.data(), 4);
    return v;
  }
  uint8_t u8(uint16_t t) const {
    auto it = attrs.find(t);
    return it != attrs.end() && it->second.size() == 1 ? it->second[0] : 0xFF;
  }
};

class Nl {
 public:
  Nl() : fd_(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA)) {}
  ~Nl() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

  // A request of `op` with `flags` and u32 attributes; returns its raw bytes.
  static std::vector<uint8_t> request(uint16_t op, uint16_t flags, std::vector<std::pair<uint16_t, uint32_t>> u32s) {
    std::vector<uint8_t> b(NLMSG_HDRLEN);
    for (auto [t, v] : u32s) {
      nlattr a{};
      a.nla_len = NLA_HDRLEN + 4;
      a.nla_type = t;
      const size_t o = b.size();
      b.resize(o + NLA_HDRLEN + 4);
      std::memcpy(b.data() + o, &a, sizeof a);
      std::memcpy(b.data() + o + NLA_HDRLEN, &v, 4);
    }
    nlmsghdr h{};
    h.nlmsg_len = uint32_t(b.size());
    h.nlmsg_type = uint16_t(RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op));
    h.nlmsg_flags = uint16_t(NLM_F_REQUEST | flags);
    h.nlmsg_seq = kSeq;
    std::memcpy(b.data(), &h, sizeof h);
    return b;
  }

  // Sends `bytes` and reads one record of answers (what the kernel sends for one request).
  std::vector<Reply> ask(const std::vector<uint8_t>& bytes) {
    sockaddr_nl k{};
    k.nl_family = AF_NETLINK;
    EXPECT_EQ(sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&k), sizeof k), ssize_t(bytes.size()));
    uint8_t buf[8192];
    sockaddr_nl from{};
    iovec iov{buf, sizeof buf};
    msghdr m{};
    m.msg_name = &from;
    m.msg_namelen = sizeof from;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    const ssize_t n = recvmsg(fd_, &m, MSG_DONTWAIT);
    std::vector<Reply> out;
    if (n <= 0) return out;
    // As libmnl checks it: a netlink address, the kernel's (port 0).
    EXPECT_EQ(m.msg_namelen, sizeof(sockaddr_nl));
    EXPECT_EQ(from.nl_family, AF_NETLINK);
    EXPECT_EQ(from.nl_pid, 0u);
    EXPECT_FALSE(m.msg_flags & MSG_TRUNC);
    size_t off = 0;
    while (off + NLMSG_HDRLEN <= size_t(n)) {
      nlmsghdr h;
      std::memcpy(&h, buf + off, sizeof h);
      EXPECT_GE(h.nlmsg_len, NLMSG_HDRLEN);
      EXPECT_LE(off + h.nlmsg_len, size_t(n));
      if (h.nlmsg_len < NLMSG_HDRLEN || off + h.nlmsg_len > size_t(n)) break;
      Reply r;
      r.type = h.nlmsg_type, r.flags = h.nlmsg_flags, r.seq = h.nlmsg_seq, r.pid = h.nlmsg_pid;
      if (h.nlmsg_type == NLMSG_ERROR) {
        EXPECT_GE(h.nlmsg_len, NLMSG_HDRLEN + sizeof(nlmsgerr));   // libmnl refuses a shorter one
        std::memcpy(&r.error, buf + off + NLMSG_HDRLEN, sizeof r.error);
      } else if (h.nlmsg_type != NLMSG_DONE) {
        size_t a = off + NLMSG_HDRLEN;
        while (a + NLA_HDRLEN <= off + h.nlmsg_len) {
          nlattr at;
          std::memcpy(&at, buf + a, sizeof at);
          EXPECT_GE(at.nla_len, NLA_HDRLEN);
          if (at.nla_len < NLA_HDRLEN || a + at.nla_len > off + h.nlmsg_len) break;
          if (at.nla_type != RDMA_NLDEV_ATTR_PAD)
            r.attrs[at.nla_type].assign(buf + a + NLA_HDRLEN, buf + a + at.nla_len);
          if (at.nla_type == RDMA_NLDEV_ATTR_CAP_FLAGS || at.nla_type == RDMA_NLDEV_ATTR_NODE_GUID ||
              at.nla_type == RDMA_NLDEV_ATTR_SYS_IMAGE_GUID) {
            EXPECT_EQ((a + NLA_HDRLEN - off) % 8, 0u) << "a u64 aligned, as the kernel's";
          }
          a += NLA_ALIGN(at.nla_len);
        }
      }
      out.push_back(r);
      off += NLMSG_ALIGN(h.nlmsg_len);
    }
    return out;
  }

 private:
  int fd_;
};

uint32_t portid_of(int fd) {
  sockaddr_nl a{};
  socklen_t l = sizeof a;
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &l), 0);
  EXPECT_EQ(l, sizeof a);
  EXPECT_EQ(a.nl_family, AF_NETLINK);
  return a.nl_pid;
}

TEST(Netlink, TheSocketOpensBindsAndTakesOptionsAsTheKernelsDoes) {
  Nl nl;
  ASSERT_GE(nl.fd(), 0) << "socket(NETLINK_RDMA): " << std::strerror(errno) << " (run under the shim)";
  sockaddr_nl me{};
  me.nl_family = AF_NETLINK;
  EXPECT_EQ(bind(nl.fd(), reinterpret_cast<sockaddr*>(&me), sizeof me), 0);
  int one = 1;
  EXPECT_EQ(setsockopt(nl.fd(), SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one), 0);
  EXPECT_EQ(setsockopt(nl.fd(), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one), 0);
  EXPECT_NE(portid_of(nl.fd()), 0u);
  Nl second;
  EXPECT_NE(portid_of(second.fd()), portid_of(nl.fd())) << "each socket its own port id";
}

TEST(Netlink, ADeviceDumpListsUroceSDeviceThenDone) {
  Nl nl;
  ASSERT_GE(nl.fd(), 0);
  const uint32_t me = portid_of(nl.fd());
  auto r = nl.ask(Nl::request(RDMA_NLDEV_CMD_GET, NLM_F_DUMP | NLM_F_ACK, {}));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].type, RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET));
  EXPECT_TRUE(r[0].flags & NLM_F_MULTI);
  EXPECT_EQ(r[0].seq, kSeq);
  EXPECT_EQ(r[0].pid, me);
  EXPECT_EQ(r[0].u32(RDMA_NLDEV_ATTR_DEV_INDEX), 0u);
  EXPECT_EQ(r[0].str(RDMA_NLDEV_ATTR_DEV_NAME), "uroce-memif-s");   // config/memif-server.conf
  EXPECT_EQ(r[0].u32(RDMA_NLDEV_ATTR_PORT_INDEX), 1u) << "a device's answer: its number of ports";
  EXPECT_EQ(r[0].u8(RDMA_NLDEV_ATTR_DEV_NODE_TYPE), 1) << "a CA";
  EXPECT_EQ(r[0].str(RDMA_NLDEV_ATTR_DEV_PROTOCOL), "roce");
  EXPECT_EQ(r[0].attrs.count(RDMA_NLDEV_ATTR_NODE_GUID), 1u);
  EXPECT_EQ(r[1].type, NLMSG_DONE);
  EXPECT_EQ(r[1].seq, kSeq);
}

TEST(Netlink, AQueryOfThePortAnswersThenAcknowledges) {
  Nl nl;
  ASSERT_GE(nl.fd(), 0);
  auto r = nl.ask(Nl::request(RDMA_NLDEV_CMD_PORT_GET, NLM_F_ACK, {{RDMA_NLDEV_ATTR_DEV_INDEX, 0}, {RDMA_NLDEV_ATTR_PORT_INDEX, 1}}));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].type, RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_PORT_GET));
  EXPECT_EQ(r[0].u32(RDMA_NLDEV_ATTR_PORT_INDEX), 1u);
  EXPECT_EQ(r[0].u8(RDMA_NLDEV_ATTR_PORT_STATE), 4) << "ACTIVE, as ibv_query_port says";
  EXPECT_EQ(r[0].u8(RDMA_NLDEV_ATTR_PORT_PHYS_STATE), 5) << "LinkUp";
  EXPECT_EQ(r[0].attrs.count(RDMA_NLDEV_ATTR_NDEV_NAME), 0u) << "memif: no interface of the host";
  EXPECT_EQ(r[1].type, NLMSG_ERROR);
  EXPECT_EQ(r[1].error, 0) << "the acknowledgement";
}

TEST(Netlink, WhatTheKernelRefusesIsRefusedAlike) {
  Nl nl;
  ASSERT_GE(nl.fd(), 0);
  auto one_error = [&](const std::vector<uint8_t>& req) {
    auto r = nl.ask(req);
    return r.size() == 1 && r[0].type == NLMSG_ERROR ? r[0].error : 1;
  };
  EXPECT_EQ(one_error(Nl::request(RDMA_NLDEV_CMD_GET, NLM_F_ACK, {{RDMA_NLDEV_ATTR_DEV_INDEX, 7}})), -EINVAL) << "no device 7";
  EXPECT_EQ(one_error(Nl::request(RDMA_NLDEV_CMD_GET, NLM_F_ACK, {})), -EINVAL) << "a query names its device";
  EXPECT_EQ(one_error(Nl::request(RDMA_NLDEV_CMD_PORT_GET, NLM_F_ACK, {{RDMA_NLDEV_ATTR_DEV_INDEX, 0}, {RDMA_NLDEV_ATTR_PORT_INDEX, 2}})),
            -EINVAL) << "no port 2";
  EXPECT_EQ(one_error(Nl::request(RDMA_NLDEV_CMD_PORT_GET, NLM_F_DUMP, {})), -EINVAL) << "a port dump names its device";
  EXPECT_EQ(one_error(Nl::request(RDMA_NLDEV_CMD_RES_QP_GET, NLM_F_DUMP, {})), -EOPNOTSUPP);
  EXPECT_EQ(one_error(Nl::request(RDMA_NLDEV_CMD_NEWLINK, NLM_F_ACK, {})), -EOPNOTSUPP);
  // Another netlink client than NLDEV (RDMA_NL_IWCM's type space).
  auto other = Nl::request(RDMA_NLDEV_CMD_GET, NLM_F_ACK, {});
  const uint16_t iwcm = uint16_t(RDMA_NL_GET_TYPE(RDMA_NL_IWCM, 1));
  std::memcpy(other.data() + offsetof(nlmsghdr, nlmsg_type), &iwcm, 2);
  EXPECT_EQ(one_error(other), -EINVAL);
}

TEST(Netlink, MalformedRequestsAreNotAnsweredAndBreakNothing) {
  Nl nl;
  ASSERT_GE(nl.fd(), 0);
  // A length past the bytes sent, one shorter than a header, a header cut short, an attribute
  // whose length runs past its message: no answer (the kernel drops such a request), no crash.
  auto req = Nl::request(RDMA_NLDEV_CMD_GET, NLM_F_DUMP, {});
  auto longer = req;
  const uint32_t big = 4096;
  std::memcpy(longer.data(), &big, 4);
  EXPECT_TRUE(nl.ask(longer).empty());
  auto tiny = req;
  const uint32_t small = 8;
  std::memcpy(tiny.data(), &small, 4);
  EXPECT_TRUE(nl.ask(tiny).empty());
  EXPECT_TRUE(nl.ask(std::vector<uint8_t>(req.begin(), req.begin() + 10)).empty());
  auto bad_attr = Nl::request(RDMA_NLDEV_CMD_GET, NLM_F_ACK, {{RDMA_NLDEV_ATTR_DEV_INDEX, 0}});
  const uint16_t huge = 200;
  std::memcpy(bad_attr.data() + NLMSG_HDRLEN, &huge, 2);
  EXPECT_EQ(nl.ask(bad_attr).size(), 1u) << "its device unnamed: refused";
  // Still answering after all that.
  EXPECT_EQ(nl.ask(Nl::request(RDMA_NLDEV_CMD_GET, NLM_F_DUMP, {})).size(), 2u);
}

TEST(Netlink, OtherSocketsAreTheCLibrarysOwn) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  EXPECT_EQ(send(sv[0], "uroce", 5, 0), 5);
  char b[8] = {};
  EXPECT_EQ(recv(sv[1], b, sizeof b, 0), 5);
  EXPECT_STREQ(b, "uroce");
  close(sv[0]);
  close(sv[1]);
  const int route = socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
  ASSERT_GE(route, 0);
  sockaddr_nl a{};
  socklen_t l = sizeof a;
  sockaddr_nl me{};
  me.nl_family = AF_NETLINK;
  ASSERT_EQ(bind(route, reinterpret_cast<sockaddr*>(&me), sizeof me), 0);
  ASSERT_EQ(getsockname(route, reinterpret_cast<sockaddr*>(&a), &l), 0);
  EXPECT_NE(a.nl_pid, 0u) << "the kernel's own port id";
  close(route);
}

}  // namespace
