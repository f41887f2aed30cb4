// port/config.cpp (load_config): every shipped example config loads; every error is one line
// that names the file, the line and the key (what uroce-run, uroce-perf and the shim print).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <vector>
#include <iterator>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "port/capture.hpp"
#include "port/config.hpp"

#ifndef UROCE_CONFIG_DIR
#error "UROCE_CONFIG_DIR must be defined by the build"
#endif

using uroce::port::load_config;

namespace {


struct TempConfig {
  std::string path;
  explicit TempConfig(const std::string& text) {
    char tmpl[] = "/tmp/uroce-config-test.XXXXXX";
    int fd = mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    path = tmpl;
    EXPECT_EQ(write(fd, text.data(), text.size()), ssize_t(text.size()));
    close(fd);
  }
  ~TempConfig() { std::remove(path.c_str()); }
};

const std::string kEal = "eal = -l 0 --no-huge --vdev=net_memif0\n";

std::string error_of(const std::string& text, std::string* path = nullptr) {
  TempConfig t(text);
  if (path) *path = t.path;
  std::string err;
  auto c = load_config(t.path, err);
  EXPECT_FALSE(c.has_value()) << text;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  return err;
}

}  // namespace

TEST(Config, ShippedExamplesLoad) {
  const char* dir = UROCE_CONFIG_DIR;  // the source tree's config/ (defined by the build)
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".conf") continue;
    std::string err;
    auto c = load_config(e.path().string(), err);
    EXPECT_TRUE(c.has_value()) << e.path() << ": " << err;
    if (c) {
      EXPECT_FALSE(c->eal.empty());
    }
    ++n;
  }
  EXPECT_GE(n, 4);
}

TEST(Config, BadValueNamesFileLineAndKey) {
  std::string path;
  const std::string err = error_of("# a comment\n" + kEal + "mtu = 1000\n", &path);
  EXPECT_EQ(err, path + ":3: key 'mtu' = '1000': path mtu must be 256, 512, 1024, 2048 or 4096");
}

TEST(Config, EachValueCheckedKeyNamed) {
  const char* bad[][2] = {{"port", "x"}, {"ip", "198.18.0.300"}, {"ip", "198.18.0.1/33"}, {"ip6", "fe80::zz"},
                          {"mac", "02:00:00"}, {"link_mtu", "100"}, {"mbufs", "10"}, {"mbuf_size", "1"},
                          {"mbuf_cache", "1000"}, {"rx_desc", "1"}, {"tx_desc", "99999"}, {"gid_index", "300"},
                          {"dscp", "64"}, {"ecn", "4"}, {"hop_limit", "0"}, {"flow_isolate", "maybe"},
                          {"promiscuous", "2"}, {"arp_timeout_ms", "-1"},
                          {"progress", "fast"}};
  for (auto& kv : bad) {
    std::string path;
    const std::string err = error_of(kEal + kv[0] + " = " + kv[1] + "   # comment\n", &path);
    EXPECT_EQ(err.rfind(path + ":2: key '" + kv[0] + "' = '" + kv[1] + "': ", 0), 0u) << err;
  }
}

TEST(Config, ProgressModes) {
  for (const char* m : {"thread", "inline", "dedicated"}) {
    TempConfig t(kEal + "ip = 198.18.0.1/24\nprogress = " + m + "\n");
    std::string err;
    auto c = load_config(t.path, err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_EQ(c->progress, m);
  }
  TempConfig t(kEal + "ip = 198.18.0.1/24\n");
  std::string err;
  auto c = load_config(t.path, err);
  ASSERT_TRUE(c.has_value()) << err;
  EXPECT_EQ(c->progress, "thread");
}

TEST(Config, UnknownKeyAndSyntax) {
  std::string path;
  std::string err = error_of(kEal + "mtuu = 1024\n", &path);
  EXPECT_EQ(err, path + ":2: unknown key 'mtuu' (the keys: config/README.md)");
  err = error_of("name uroce0\n", &path);
  EXPECT_EQ(err, path + ":1: expected key = value, got 'name uroce0'");
}

TEST(Config, WholeFileChecksNameTheKey) {
  std::string path;
  const std::string err = error_of("name = x\n", &path);
  EXPECT_EQ(err, path + ": key 'eal' missing (the EAL arguments, with the port)");
  EXPECT_NE(error_of(kEal + "gid_index = 1\n").find("key 'gid_index' = 1 (IPv4) needs an 'ip' line"),
            std::string::npos);
  EXPECT_NE(error_of(kEal + "gid_index = 3\n").find("key 'gid_index' = 3 names no GID"), std::string::npos);
  const std::string mtu_err = error_of(kEal + "gid_index = 0\nmtu = 4096\n");
  EXPECT_NE(mtu_err.find("key 'mtu' = 4096 does not fit key 'link_mtu' = 1500"), std::string::npos) << mtu_err;
}

TEST(Config, MissingFile) {
  std::string err;
  EXPECT_FALSE(load_config("/nonexistent/uroce.conf", err).has_value());
  EXPECT_EQ(err, "/nonexistent/uroce.conf: cannot open: No such file or directory");
}

// ---- ECN, CNP and capture keys; the capture writer ----

using namespace uroce;

namespace ecn_keys {

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

}  // namespace ecn_keys

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
  auto d = ecn_keys::load_text("", err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(d->ecn, 0);
  EXPECT_EQ(uint64_t(d->cnp_interval_us) * 1000, param::kCnpIntervalNs);
  EXPECT_EQ(d->cnp_dscp, param::kCnpDscp);
  EXPECT_TRUE(d->capture.empty());
  const std::pair<const char*, int> ecn[] = {{"off", 0}, {"ect0", 2}, {"ect1", 1}};
  for (auto [text, want] : ecn) {
    auto c = ecn_keys::load_text(std::string("ecn = ") + text + "\n", err);
    ASSERT_TRUE(c) << err;
    EXPECT_EQ(c->ecn, want) << text;
  }
  for (const char* bad : {"ecn = 2\n", "ecn = ce\n", "ecn = 3\n", "cnp_interval_us = 2000000\n", "cnp_dscp = 64\n",
                          "capture =\n"}) {
    EXPECT_FALSE(ecn_keys::load_text(bad, err)) << bad;
  }
  auto c = ecn_keys::load_text("cnp_interval_us = 7\ncnp_dscp = 0\ncapture = /tmp/x.pcap\n", err);
  ASSERT_TRUE(c) << err;
  EXPECT_EQ(c->cnp_interval_us, 7u);
  EXPECT_EQ(c->cnp_dscp, 0);
  EXPECT_EQ(c->capture, "/tmp/x.pcap");
}

// The transport knobs (docs/reliability.md): defaults from engine/param.hpp, ranges checked.
TEST(Config, TransportKeys) {
  std::string err;
  auto d = ecn_keys::load_text("", err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(d->max_unacked_psns, param::kMaxUnackedPsns);
  EXPECT_EQ(d->ack_req_every, param::kAckReqEvery);
  EXPECT_EQ(d->ack_every, param::kAckEvery);
  EXPECT_EQ(uint64_t(d->probe_floor_us) * 1000, param::kProbeFloorNs);
  auto c = ecn_keys::load_text("max_unacked_psns = 32\nack_req_every = 8\nack_every = 4\nprobe_floor_us = 0\n", err);
  ASSERT_TRUE(c) << err;
  EXPECT_EQ(c->max_unacked_psns, 32u);
  EXPECT_EQ(c->ack_req_every, 8u);
  EXPECT_EQ(c->ack_every, 4u);
  EXPECT_EQ(c->probe_floor_us, 0u);
  for (const char* bad : {"max_unacked_psns = 0\n", "max_unacked_psns = 4194305\n", "ack_req_every = 0\n",
                          "ack_req_every = 65537\n", "ack_every = 65537\n", "ack_every = -1\n",
                          "probe_floor_us = 1000001\n", "probe_floor_us = x\n"}) {
    EXPECT_FALSE(ecn_keys::load_text(bad, err)) << bad;
    EXPECT_NE(err.find(std::string(bad).substr(0, std::string(bad).find(' '))), std::string::npos) << err;
  }
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
