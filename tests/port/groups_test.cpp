// The kernel's multicast memberships of a link on a netdev (port/groups.hpp), on this
// namespace's loopback interface: joined groups appear in /proc/net/igmp (IPv4) and
// /proc/net/igmp6 (IPv6) on that interface and go when left; more groups than one socket may
// hold (param::kGroupsPerSocket) are joined; a unicast GID is EINVAL; the destructor leaves all.
#include <gtest/gtest.h>
#include <net/if.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "port/groups.hpp"
#include "port/param.hpp"

namespace uroce::port {
namespace {

proto::Ip6 v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  proto::Ip6 g{};
  g[10] = g[11] = 0xff;
  g[12] = a, g[13] = b, g[14] = c, g[15] = d;
  return g;
}

std::string slurp(const char* path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// /proc/net/igmp names a group by its address as a little-endian hex word: 239.18.9.1 -> 010912EF.
std::string igmp_hex(const proto::Ip6& g) {
  char b[9];
  std::snprintf(b, sizeof b, "%02X%02X%02X%02X", g[15], g[14], g[13], g[12]);
  return b;
}

bool in_igmp(const proto::Ip6& g) { return slurp("/proc/net/igmp").find(igmp_hex(g)) != std::string::npos; }

TEST(KernelGroups, JoinLeaveAndTheKernelsTables) {
  const int lo = int(if_nametoindex("lo"));
  ASSERT_GT(lo, 0);
  const proto::Ip6 g = v4(239, 18, 9, 1);
  proto::Ip6 g6{};
  g6[0] = 0xff, g6[1] = 0x0e, g6[14] = 0x09, g6[15] = 0x01;  // ff0e::901
  {
    KernelGroups k(lo);
    EXPECT_EQ(k.join(v4(198, 18, 0, 1)), EINVAL) << "a unicast address";
    ASSERT_FALSE(in_igmp(g));
    ASSERT_EQ(k.join(g), 0);
    EXPECT_TRUE(in_igmp(g));
    EXPECT_EQ(k.join(g), 0) << "twice is once";
    ASSERT_EQ(k.join(g6), 0);
    EXPECT_NE(slurp("/proc/net/igmp6").find("ff0e0000000000000000000000000901"), std::string::npos);
    // More groups than one socket holds: a second socket takes the rest.
    for (uint32_t i = 0; i < param::kGroupsPerSocket + 5; ++i) ASSERT_EQ(k.join(v4(239, 18, 10, uint8_t(i))), 0) << i;
    EXPECT_EQ(k.joined(), size_t(param::kGroupsPerSocket) + 7);
    EXPECT_TRUE(in_igmp(v4(239, 18, 10, uint8_t(param::kGroupsPerSocket + 4))));
    ASSERT_EQ(k.leave(g), 0);
    EXPECT_FALSE(in_igmp(g));
    EXPECT_EQ(k.leave(g), EINVAL) << "not joined";
  }
  EXPECT_FALSE(in_igmp(v4(239, 18, 10, 0))) << "gone with the sockets";
  EXPECT_EQ(slurp("/proc/net/igmp6").find("ff0e0000000000000000000000000901"), std::string::npos);
}

}  // namespace
}  // namespace uroce::port
