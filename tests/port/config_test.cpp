// Endpoint config files (port/config.cpp) without DPDK: every file in config/ loads; the ECN,
// CNP and capture keys take what config/README.md says and refuse the rest.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "port/config.hpp"

#ifndef UROCE_CONFIG_DIR
#error "UROCE_CONFIG_DIR must be defined by the build"
#endif

using namespace uroce;

namespace {

std::optional<port::EndpointConfig> load_text(const std::string& text, std::string& err) {
  const std::string path = testing::TempDir() + "uroce-config-test.conf";
  {
    std::ofstream f(path);
    f << "eal = -l 0 --no-huge\nip = 198.18.0.5\n" << text;
  }
  auto c = port::load_config(path, err);
  std::remove(path.c_str());
  return c;
}

TEST(Config, EveryShippedFileLoads) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(UROCE_CONFIG_DIR)) {
    if (e.path().extension() != ".conf") continue;
    std::string err;
    EXPECT_TRUE(port::load_config(e.path().string(), err).has_value()) << err;
    ++n;
  }
  EXPECT_GE(n, 8);
}

TEST(Config, TheMlx5ExampleAsTheRunbookDescribesIt) {
  std::string err;
  auto c = port::load_config(std::string(UROCE_CONFIG_DIR) + "/mlx5-example.conf", err);
  ASSERT_TRUE(c) << err;
  EXPECT_TRUE(c->flow_isolate);
  EXPECT_FALSE(c->promiscuous);
  EXPECT_FALSE(c->mac_from_port);
  EXPECT_EQ(c->ecn, 2);  // ECT(0)
  EXPECT_EQ(c->cnp_interval_us, 50u);
  EXPECT_EQ(c->cnp_dscp, 48);
}

TEST(Config, EcnCnpAndCaptureKeys) {
  std::string err;
  auto d = load_text("", err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(d->ecn, 0);
  EXPECT_EQ(uint64_t(d->cnp_interval_us) * 1000, param::kCnpIntervalNs);
  EXPECT_EQ(d->cnp_dscp, param::kCnpDscp);
  EXPECT_TRUE(d->capture.empty());
  const std::pair<const char*, int> ecn[] = {{"off", 0}, {"ect0", 2}, {"ect1", 1}};
  for (auto [text, want] : ecn) {
    auto c = load_text(std::string("ecn = ") + text + "\n", err);
    ASSERT_TRUE(c) << err;
    EXPECT_EQ(c->ecn, want) << text;
  }
  for (const char* bad : {"ecn = 2\n", "ecn = ce\n", "ecn = 3\n", "cnp_interval_us = 2000000\n", "cnp_dscp = 64\n",
                          "capture =\n"}) {
    EXPECT_FALSE(load_text(bad, err)) << bad;
  }
  auto c = load_text("cnp_interval_us = 7\ncnp_dscp = 0\ncapture = /tmp/x.pcap\n", err);
  ASSERT_TRUE(c) << err;
  EXPECT_EQ(c->cnp_interval_us, 7u);
  EXPECT_EQ(c->cnp_dscp, 0);
  EXPECT_EQ(c->capture, "/tmp/x.pcap");
}

}  // namespace
