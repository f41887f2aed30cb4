// Endpoint config files (port/config.cpp) without DPDK: every file in config/ loads; the ECN,
// CNP and capture keys take what config/README.md says and refuse the rest.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <vector>
#include <filesystem>
#include <fstream>
#include <string>

#include "port/capture.hpp"
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

// The capture file (config key capture): a classic pcap, Ethernet, one record per frame, cut
// at the snap length; readable by libpcap (uroce-dissect reads it in the interop runs).
TEST(Capture, WritesAPcapOfTheFrames) {
  const std::string path = testing::TempDir() + "uroce-capture-test.pcap";
  {
    port::Capture cap;
    std::string err;
    ASSERT_TRUE(cap.open(path, 100, err)) << err;
    std::vector<uint8_t> a(60, 0xAA), b(150, 0xBB);
    cap.write(a.data(), uint32_t(a.size()));
    cap.write(b.data(), uint32_t(b.size()));
  }
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> d((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  ASSERT_EQ(d.size(), 24u + 16 + 60 + 16 + 100);
  auto u32 = [&](size_t at) { uint32_t v; std::memcpy(&v, &d[at], 4); return v; };
  EXPECT_EQ(u32(0), 0xa1b2c3d4u);
  EXPECT_EQ(u32(16), 100u);  // snap length
  EXPECT_EQ(u32(20), 1u);    // Ethernet
  EXPECT_EQ(u32(24 + 8), 60u);
  EXPECT_EQ(u32(24 + 12), 60u);
  EXPECT_EQ(d[24 + 16], 0xAA);
  const size_t r2 = 24 + 16 + 60;
  EXPECT_EQ(u32(r2 + 8), 100u);   // captured
  EXPECT_EQ(u32(r2 + 12), 150u);  // on the wire
  EXPECT_EQ(d[r2 + 16 + 99], 0xBB);
  std::string err;
  port::Capture bad;
  EXPECT_FALSE(bad.open("/nonexistent-dir/x.pcap", 100, err));
  EXPECT_NE(err.find("capture"), std::string::npos);
}

}  // namespace
