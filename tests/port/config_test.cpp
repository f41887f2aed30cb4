// port/config.cpp (load_config): every shipped example config loads; every error is one line
// that names the file, the line and the key (what uroce-run, uroce-perf and the shim print).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "port/config.hpp"

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
  const char* dir = std::getenv("UROCE_CONFIG_DIR");  // the source tree's config/
  ASSERT_NE(dir, nullptr);
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
