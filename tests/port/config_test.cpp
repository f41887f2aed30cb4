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

#include <map>

#include "port/capture.hpp"
#include "tools/pcap/pcapio.hpp"
#include "port/config.hpp"
#include "port/netdev.hpp"

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
                          {"promiscuous", "2"}, {"arp_timeout_ms", "-1"}, {"cm_timewait_ms", "600001"},
                          {"cm_max_conns", "0"}, {"cm_response_timeout", "25"}, {"cm_mra_timeout", "x"},
                          {"cm_max_retries", "16"},
                          {"progress", "fast"}};
  for (auto& kv : bad) {
    std::string path;
    const std::string err = error_of(kEal + kv[0] + " = " + kv[1] + "   # comment\n", &path);
    EXPECT_EQ(err.rfind(path + ":2: key '" + kv[0] + "' = '" + kv[1] + "': ", 0), 0u) << err;
  }
}

TEST(Config, ConnectionManagerKeys) {
  TempConfig t(kEal + "ip = 198.18.0.1/24\ncm_timewait_ms = 250\ncm_max_conns = 64\ncm_response_timeout = 12\n"
                      "cm_mra_timeout = 20\ncm_max_retries = 3\n");
  std::string err;
  auto c = load_config(t.path, err);
  ASSERT_TRUE(c.has_value()) << err;
  EXPECT_EQ(c->cm_timewait_ms, 250u);
  EXPECT_EQ(c->cm_max_conns, 64u);
  EXPECT_EQ(c->cm_response_timeout, 12);
  EXPECT_EQ(c->cm_mra_timeout, 20);
  EXPECT_EQ(c->cm_max_retries, 3);
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

TEST(Config, ServiceKeys) {
  std::string err;
  {
    TempConfig t(kEal + "ip = 198.18.0.1/24\n");
    auto c = load_config(t.path, err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_EQ(c->service, "auto");
    EXPECT_TRUE(c->service_drive);
  }
  {
    TempConfig t(kEal + "ip = 198.18.0.1/24\nservice = on\nservice_drive = off\n");
    auto c = load_config(t.path, err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_EQ(c->service, "on");
    EXPECT_FALSE(c->service_drive);
  }
  TempConfig bad(kEal + "ip = 198.18.0.1/24\nservice_drive = maybe\n");
  EXPECT_FALSE(load_config(bad.path, err).has_value());
  EXPECT_NE(err.find("service_drive"), std::string::npos) << err;
}

TEST(Config, ServiceRtPriority) {
  std::string err;
  {
    TempConfig t(kEal + "ip = 198.18.0.1/24\n");
    auto c = load_config(t.path, err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_EQ(c->service_rt_priority, uroce::param::kServiceRtPriority);
  }
  for (uint32_t v : {0u, 99u}) {
    TempConfig t(kEal + "ip = 198.18.0.1/24\nservice_rt_priority = " + std::to_string(v) + "\n");
    auto c = load_config(t.path, err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_EQ(c->service_rt_priority, v);
  }
  for (const char* v : {"100", "-1", "fifo"}) {
    TempConfig bad(kEal + "ip = 198.18.0.1/24\nservice_rt_priority = " + v + "\n");
    EXPECT_FALSE(load_config(bad.path, err).has_value()) << v;
    EXPECT_NE(err.find("service_rt_priority is 0"), std::string::npos) << err;
  }
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
  EXPECT_EQ(err, path + ": key 'eal' missing (the EAL arguments, with the port; or key 'netdev' names an interface)");
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
  EXPECT_EQ(d->selective_repeat, param::kSelectiveRepeat);
  EXPECT_FALSE(d->selective_repeat) << "off unless both ends say on";
  auto c = ecn_keys::load_text(
      "max_unacked_psns = 32\nack_req_every = 8\nack_every = 4\nprobe_floor_us = 0\nselective_repeat = on\n", err);
  ASSERT_TRUE(c) << err;
  EXPECT_TRUE(c->selective_repeat);
  EXPECT_EQ(c->max_unacked_psns, 32u);
  EXPECT_EQ(c->ack_req_every, 8u);
  EXPECT_EQ(c->ack_every, 4u);
  EXPECT_EQ(c->probe_floor_us, 0u);
  for (const char* bad : {"max_unacked_psns = 0\n", "max_unacked_psns = 4194305\n", "ack_req_every = 0\n",
                          "ack_req_every = 65537\n", "ack_every = 65537\n", "ack_every = -1\n",
                          "probe_floor_us = 1000001\n", "probe_floor_us = x\n", "selective_repeat = maybe\n"}) {
    EXPECT_FALSE(ecn_keys::load_text(bad, err)) << bad;
    EXPECT_NE(err.find(std::string(bad).substr(0, std::string(bad).find(' '))), std::string::npos) << err;
  }
}

// ---- Capture and fault keys; the environment ----

TEST(Config, CaptureAndFaultKeys) {
  std::string err;
  auto d = ecn_keys::load_text("", err);
  ASSERT_TRUE(d) << err;
  EXPECT_FALSE(d->capture_all);
  EXPECT_EQ(d->capture_snaplen, 0u);
  EXPECT_EQ(d->capture_max_mb, param::kCaptureMaxMb);
  EXPECT_FALSE(d->fault_rx.any());
  EXPECT_FALSE(d->fault_tx.any());
  EXPECT_EQ(d->fault_seed, param::kFaultSeed);
  auto c = ecn_keys::load_text("capture = /tmp/x.pcapng\ncapture_all = yes\ncapture_snaplen = 200\ncapture_max_mb = 5\n"
                               "fault_drop = 0.01\nfault_rx_duplicate = 0.5\nfault_tx_reorder = 0.25\n"
                               "fault_corrupt = 0.001\nfault_tx_delay_us = 300\nfault_seed = 42\nfault_all = yes\n",
                               err);
  ASSERT_TRUE(c) << err;
  EXPECT_TRUE(c->capture_all);
  EXPECT_EQ(c->capture_snaplen, 200u);
  EXPECT_EQ(c->capture_max_mb, 5u);
  EXPECT_EQ(c->fault_rx.drop, 0.01);
  EXPECT_EQ(c->fault_tx.drop, 0.01);
  EXPECT_EQ(c->fault_rx.duplicate, 0.5);
  EXPECT_EQ(c->fault_tx.duplicate, 0);
  EXPECT_EQ(c->fault_tx.reorder, 0.25);
  EXPECT_EQ(c->fault_rx.reorder, 0);
  EXPECT_EQ(c->fault_rx.corrupt, 0.001);
  EXPECT_EQ(c->fault_tx.delay, 1);  // every frame
  EXPECT_EQ(c->fault_tx.min_delay_ns, 300'000u);
  EXPECT_EQ(c->fault_tx.max_delay_ns, 300'000u);
  EXPECT_EQ(c->fault_rx.delay, 0);
  EXPECT_EQ(c->fault_seed, 42u);
  EXPECT_TRUE(c->fault_all);
  for (const char* bad : {"fault_drop = 1.5\n", "fault_drop = -0.1\n", "fault_drop = x\n", "fault_rx_delay_us = 2000000\n",
                          "fault_seed = z\n", "fault_all = maybe\n", "capture_snaplen = 10\n", "capture_max_mb = 0\n",
                          "capture_all = 2\n", "fault_up_drop = 0.1\n", "fault_lose = 0.1\n"}) {
    EXPECT_FALSE(ecn_keys::load_text(bad, err)) << bad;
    EXPECT_NE(err.find("key '"), std::string::npos) << err;
  }
}

// The congestion point on the transmit side (docs/congestion.md "On memif, in real time").
TEST(Config, BottleneckKeys) {
  std::string err;
  auto d = ecn_keys::load_text("", err);
  ASSERT_TRUE(d) << err;
  EXPECT_FALSE(d->bottleneck.on());
  EXPECT_EQ(d->bottleneck.queue_bytes, param::kBottleneckQueueKb * 1024);
  auto c = ecn_keys::load_text("bottleneck_mbps = 10000\nbottleneck_queue_kb = 256\nbottleneck_k_kb = 32\n"
                               "bottleneck_kmax_kb = 128\nbottleneck_pmax = 0.5\n", err);
  ASSERT_TRUE(c) << err;
  EXPECT_TRUE(c->bottleneck.on());
  EXPECT_EQ(c->bottleneck.rate_bps, 10'000'000'000ull);
  EXPECT_EQ(c->bottleneck.queue_bytes, 256u * 1024);
  EXPECT_EQ(c->bottleneck.mark_bytes, 32u * 1024);
  EXPECT_EQ(c->bottleneck.mark_max_bytes, 128u * 1024);
  EXPECT_EQ(c->bottleneck.mark_pmax, 0.5);
  auto p = ecn_keys::load_text("bottleneck_pps = 100000\n", err);
  ASSERT_TRUE(p) << err;
  EXPECT_TRUE(p->bottleneck.on());
  EXPECT_EQ(p->bottleneck.pps, 100000u);
  for (const char* bad : {"bottleneck_mbps = x\n", "bottleneck_mbps = 1000001\n", "bottleneck_queue_kb = 65537\n",
                          "bottleneck_pmax = 2\n", "bottleneck_k_kb = -1\n", "bottleneck_speed = 1\n"}) {
    EXPECT_FALSE(ecn_keys::load_text(bad, err)) << bad;
    EXPECT_NE(err.find("key 'bottleneck_"), std::string::npos) << err;
  }
}

namespace env_keys {
std::map<std::string, std::string> vars;
char* get(const char* name) {
  auto it = vars.find(name);
  return it == vars.end() ? nullptr : it->second.data();
}
}  // namespace env_keys

TEST(Config, TheEnvironmentOverridesCaptureAndFaults) {
  std::string err;
  auto c = ecn_keys::load_text("capture = /tmp/a.pcapng\nfault_drop = 0.5\n", err);
  ASSERT_TRUE(c) << err;
  env_keys::vars = {{"UROCE_CAPTURE", "/tmp/b.pcapng"}, {"UROCE_FAULT_RX_DROP", "0.02"}, {"UROCE_FAULT_SEED", "7"},
                    {"UROCE_CAPTURE_ALL", "yes"}, {"UROCE_FAULT_TX_DELAY_US", "10"}, {"UROCE_BOTTLENECK_MBPS", "2000"}};
  ASSERT_TRUE(port::apply_env(*c, env_keys::get, err)) << err;
  EXPECT_EQ(c->capture, "/tmp/b.pcapng");
  EXPECT_TRUE(c->capture_all);
  EXPECT_EQ(c->fault_rx.drop, 0.02);
  EXPECT_EQ(c->fault_tx.drop, 0.5);  // the file's, untouched
  EXPECT_EQ(c->fault_tx.min_delay_ns, 10'000u);
  EXPECT_EQ(c->fault_seed, 7u);
  EXPECT_EQ(c->bottleneck.rate_bps, 2'000'000'000ull);
  env_keys::vars = {{"UROCE_FAULT_DROP", "lots"}};
  EXPECT_FALSE(port::apply_env(*c, env_keys::get, err));
  EXPECT_EQ(err.rfind("UROCE_FAULT_DROP = 'lots': ", 0), 0u) << err;
  // + the bottleneck's 6, ecn and cnp_interval_us
  EXPECT_EQ(port::env_keys().size(), 6u + 6u + 2u + 15u + engine::cc::keys().size());
}

TEST(Config, CongestionControlKeysInTheFileAndTheEnvironment) {
  std::string err;
  auto c = ecn_keys::load_text("cc = dcqcn\nrpg_ai_rate = 20\ncc_line_rate = 25000\nclamp_tgt_rate = 1\n", err);
  ASSERT_TRUE(c) << err;
  EXPECT_EQ(c->cc.algo, engine::cc::Algo::Dcqcn);
  EXPECT_EQ(c->cc.dcqcn.rpg_ai_rate, 20u);
  EXPECT_EQ(c->cc.line_rate_mbps, 25000u);
  EXPECT_TRUE(c->cc.dcqcn.clamp_tgt_rate);
  EXPECT_EQ(c->cc.dcqcn.rpg_gd, uroce::param::kRpgGd);  // untouched: the ConnectX's default
  env_keys::vars = {{"UROCE_CC", "timely"}, {"UROCE_TIMELY_T_HIGH", "300"}, {"UROCE_RPG_AI_RATE", "7"}};
  ASSERT_TRUE(port::apply_env(*c, env_keys::get, err)) << err;
  EXPECT_EQ(c->cc.algo, engine::cc::Algo::Timely);
  EXPECT_EQ(c->cc.timely.t_high_us, 300u);
  EXPECT_EQ(c->cc.dcqcn.rpg_ai_rate, 7u);
  EXPECT_FALSE(ecn_keys::load_text("cc = bbr\n", err));
  EXPECT_NE(err.find("cc is off, dcqcn or timely"), std::string::npos) << err;
  EXPECT_FALSE(ecn_keys::load_text("rpg_gd = 99\n", err));
  EXPECT_NE(err.find("bad rpg_gd (0..15)"), std::string::npos) << err;
  env_keys::vars.clear();
}

// ---- The capture writer (pcapng) ----

namespace pcapng {

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
uint32_t u32(const std::vector<uint8_t>& d, size_t at) {
  uint32_t v;
  std::memcpy(&v, &d[at], 4);
  return v;
}

// An IPv4 RoCEv2 RDMA WRITE ONLY frame with `payload` bytes (fields other than the ones the
// header walker needs are zero): Ethernet 14, IPv4 20, UDP 8, BTH 12, RETH 16, payload, ICRC 4.
std::vector<uint8_t> write_only(uint32_t payload) {
  std::vector<uint8_t> f(14 + 20 + 8 + 12 + 16 + payload + 4, 0x5A);
  f[12] = 0x08, f[13] = 0x00;
  f[14] = 0x45;
  const uint16_t tot = uint16_t(f.size() - 14);
  f[16] = uint8_t(tot >> 8), f[17] = uint8_t(tot);
  f[23] = 17;
  f[34] = 0xC0, f[35] = 0x00, f[36] = 0x12, f[37] = 0xB7;  // UDP 49152 -> 4791
  f[42] = 0x0A;  // RC RDMA WRITE ONLY
  return f;
}

}  // namespace pcapng

// The section header and interface description blocks, byte for byte (little-endian host).
TEST(Capture, WritesThePcapngHeaderBlocks) {
  const std::string path = testing::TempDir() + "uroce-capture-hdr.pcapng";
  {
    port::Capture cap;
    std::string err;
    port::CaptureOptions o;
    o.if_name = "uroce0";
    o.snaplen = 100;
    ASSERT_TRUE(cap.open(path, o, err)) << err;
  }
  const std::vector<uint8_t> d = pcapng::read_all(path);
  std::remove(path.c_str());
  const std::vector<uint8_t> want = {
      // SHB: type, length 44, byte-order magic, version 1.0, section length -1
      0x0A, 0x0D, 0x0D, 0x0A, 44, 0, 0, 0, 0x4D, 0x3C, 0x2B, 0x1A, 1, 0, 0, 0,
      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
      4, 0, 5, 0, 'u', 'r', 'o', 'c', 'e', 0, 0, 0,  // shb_userappl "uroce"
      0, 0, 0, 0, 44, 0, 0, 0,                       // opt_endofopt, length
      // IDB: type 1, length 44, LINKTYPE_ETHERNET, reserved, snap length 100
      1, 0, 0, 0, 44, 0, 0, 0, 1, 0, 0, 0, 100, 0, 0, 0,
      2, 0, 6, 0, 'u', 'r', 'o', 'c', 'e', '0', 0, 0,  // if_name
      9, 0, 1, 0, 9, 0, 0, 0,                          // if_tsresol: 10^-9
      0, 0, 0, 0, 44, 0, 0, 0};
  EXPECT_EQ(d, want);
}

// Enhanced packet blocks: interface 0, the nanosecond time, the lengths, the bytes padded to 4
// and epb_flags inbound (1) / outbound (2).
TEST(Capture, WritesEnhancedPacketBlocksWithDirectionAndSnapLength) {
  const std::string path = testing::TempDir() + "uroce-capture-epb.pcapng";
  std::vector<uint8_t> a(61, 0xAA), b(150, 0xBB);
  {
    port::Capture cap;
    std::string err;
    port::CaptureOptions o;
    o.snaplen = 100;
    ASSERT_TRUE(cap.open(path, o, err)) << err;
    cap.write_at(a.data(), uint32_t(a.size()), port::Capture::Dir::In, 0x0000000123456789ull);
    cap.write_at(b.data(), uint32_t(b.size()), port::Capture::Dir::Out, 1'700'000'000'123'456'789ull);
    EXPECT_EQ(cap.written(), 2u);
  }
  const std::vector<uint8_t> d = pcapng::read_all(path);
  std::remove(path.c_str());
  const size_t e1 = 44 + 44, len1 = 28 + 64 + 12 + 4;  // 61 bytes padded to 64
  ASSERT_EQ(d.size(), e1 + len1 + 28 + 100 + 12 + 4);
  using pcapng::u32;
  EXPECT_EQ(u32(d, e1), 6u);
  EXPECT_EQ(u32(d, e1 + 4), len1);
  EXPECT_EQ(u32(d, e1 + 8), 0u);            // interface 0
  EXPECT_EQ(u32(d, e1 + 12), 0x1u);         // time, high word
  EXPECT_EQ(u32(d, e1 + 16), 0x23456789u);  // time, low word
  EXPECT_EQ(u32(d, e1 + 20), 61u);          // captured
  EXPECT_EQ(u32(d, e1 + 24), 61u);          // on the wire
  EXPECT_EQ(d[e1 + 28], 0xAA);
  EXPECT_EQ(d[e1 + 28 + 60], 0xAA);
  EXPECT_EQ(d[e1 + 28 + 61], 0);            // padding
  EXPECT_EQ(u32(d, e1 + 28 + 64), 2u | 4u << 16);  // option epb_flags, 4 bytes
  EXPECT_EQ(u32(d, e1 + 28 + 68), 1u);             // inbound
  EXPECT_EQ(u32(d, e1 + 28 + 72), 0u);             // end of options
  EXPECT_EQ(u32(d, e1 + len1 - 4), len1);
  const size_t e2 = e1 + len1;
  EXPECT_EQ(uint64_t(u32(d, e2 + 12)) << 32 | u32(d, e2 + 16), 1'700'000'000'123'456'789ull);
  EXPECT_EQ(u32(d, e2 + 20), 100u);  // cut at the snap length
  EXPECT_EQ(u32(d, e2 + 24), 150u);
  EXPECT_EQ(d[e2 + 28 + 99], 0xBB);
  EXPECT_EQ(u32(d, e2 + 28 + 100 + 4), 2u);  // outbound

  std::string err;
  port::Capture bad;
  EXPECT_FALSE(bad.open("/nonexistent-dir/x.pcapng", {}, err));
  EXPECT_NE(err.find("capture"), std::string::npos);
}

// A frame with a comment (the engine's note, engine::Link::note): opt_comment (code 1) before
// epb_flags, the text padded to 4; what the tools read (tools/pcap/pcapio) gives it back, and a
// frame without one has none.
TEST(Capture, ANoteGoesOnTheFrameAsItsComment) {
  const std::string path = testing::TempDir() + "uroce-capture-comment.pcapng";
  const std::vector<uint8_t> f = pcapng::write_only(64);
  const std::string note = "QP 0x0000e1 cc=dcqcn: CNP 1: rate 40.00 -> 20.00 Gbit/s (cut)";
  {
    port::Capture cap;
    std::string err;
    port::CaptureOptions o;
    o.snaplen = 4096;
    ASSERT_TRUE(cap.open(path, o, err)) << err;
    cap.write_at(f.data(), uint32_t(f.size()), port::Capture::Dir::In, 1000, note);
    cap.write_at(f.data(), uint32_t(f.size()), port::Capture::Dir::Out, 2000);
  }
  const std::vector<uint8_t> d = pcapng::read_all(path);
  const size_t e1 = 44 + 44, opts = e1 + 28 + ((f.size() + 3) & ~size_t(3));
  using pcapng::u32;
  EXPECT_EQ(u32(d, opts), 1u | uint32_t(note.size()) << 16);  // opt_comment, its length
  EXPECT_EQ(std::string(d.begin() + long(opts + 4), d.begin() + long(opts + 4 + note.size())), note);
  const size_t flags = opts + 4 + ((note.size() + 3) & ~size_t(3));
  EXPECT_EQ(u32(d, flags), 2u | 4u << 16);
  EXPECT_EQ(u32(d, flags + 4), 1u);
  EXPECT_EQ(u32(d, flags + 8), 0u);
  EXPECT_EQ(u32(d, e1 + 4), flags + 16 - e1);  // the block's length counts the comment
  pcapio::Capture c;
  std::string err;
  ASSERT_TRUE(pcapio::read_file(path, c, err)) << err;
  std::remove(path.c_str());
  ASSERT_EQ(c.frames.size(), 2u);
  EXPECT_EQ(c.frames[0].comment, note);
  EXPECT_EQ(c.frames[0].dir, pcapio::Frame::Dir::In);
  EXPECT_EQ(c.frames[0].bytes, f);
  EXPECT_EQ(c.frames[1].comment, "");
  EXPECT_EQ(c.frames[1].dir, pcapio::Frame::Dir::Out);
}

// The default snap length: the headers (proto::locate, the opcode's extension headers) and 64
// bytes after them.
TEST(Capture, DefaultSnapLengthIsTheHeadersAndSixtyFourBytes) {
  const std::vector<uint8_t> w = pcapng::write_only(1024);
  EXPECT_EQ(port::header_bytes(w), 14u + 20 + 8 + 12 + 16);
  std::vector<uint8_t> udp = w;
  udp[37] = 0x35;  // UDP port 53: the UDP header ends the headers
  EXPECT_EQ(port::header_bytes(udp), 14u + 20 + 8);
  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08, arp[13] = 0x06;
  EXPECT_EQ(port::header_bytes(arp), 14u);
  EXPECT_EQ(port::header_bytes(std::span<const uint8_t>(w.data(), 40)), 40u);  // never past the end
  EXPECT_EQ(port::header_bytes(std::span<const uint8_t>(w.data(), 20)), 14u);  // the IP header incomplete
  // A CM MAD (UD SEND_ONLY to QP 1) is kept whole: BTH, DETH and the 256-byte MAD.
  std::vector<uint8_t> mad = w;
  mad[42] = 0x64, mad[42 + 5] = 0, mad[42 + 6] = 0, mad[42 + 7] = 1;
  EXPECT_EQ(port::header_bytes(mad), 14u + 20 + 8 + 12 + 8 + 256);
  mad[42 + 7] = 2;  // a UD SEND to another QP: its payload is data
  EXPECT_EQ(port::header_bytes(mad), 14u + 20 + 8 + 12 + 8);

  const std::string path = testing::TempDir() + "uroce-capture-snap.pcapng";
  const std::vector<uint8_t> small = pcapng::write_only(16);
  {
    port::Capture cap;
    std::string err;
    ASSERT_TRUE(cap.open(path, {}, err)) << err;
    cap.write_at(w.data(), uint32_t(w.size()), port::Capture::Dir::Out, 1);
    cap.write_at(small.data(), uint32_t(small.size()), port::Capture::Dir::In, 2);
  }
  const std::vector<uint8_t> d = pcapng::read_all(path);
  std::remove(path.c_str());
  const size_t e1 = 88;
  EXPECT_EQ(pcapng::u32(d, e1 + 20), 70u + 64);      // headers + 64
  EXPECT_EQ(pcapng::u32(d, e1 + 24), uint32_t(w.size()));
  const size_t e2 = e1 + pcapng::u32(d, e1 + 4);
  EXPECT_EQ(pcapng::u32(d, e2 + 20), uint32_t(small.size()));  // shorter than that: whole
}

// The size limit: frames that would take the file past it are counted, not written.
TEST(Capture, StopsAtTheSizeLimitAndCounts) {
  const std::string path = testing::TempDir() + "uroce-capture-limit.pcapng";
  std::vector<uint8_t> f(1000, 0x11);
  {
    port::Capture cap;
    std::string err;
    port::CaptureOptions o;
    o.snaplen = 65535;
    o.max_bytes = 10'000;
    ASSERT_TRUE(cap.open(path, o, err)) << err;
    for (int i = 0; i < 20; ++i) cap.write_at(f.data(), uint32_t(f.size()), port::Capture::Dir::In, uint64_t(i));
    EXPECT_EQ(cap.written(), 9u);  // 88 + 9 * 1044 <= 10000 < 88 + 10 * 1044
    EXPECT_EQ(cap.skipped(), 11u);
  }
  const std::vector<uint8_t> d = pcapng::read_all(path);
  std::remove(path.c_str());
  EXPECT_EQ(d.size(), 88u + 9 * 1044);
}

// What uroce-dissect and the tools read it with (tools/pcap/pcapio, libpcap underneath): every
// frame, the nanosecond time, the snapped and wire lengths, the interface and the direction.
TEST(Capture, PcapioReadsItBack) {
  const std::string path = testing::TempDir() + "uroce-capture-read.pcapng";
  const std::vector<uint8_t> w = pcapng::write_only(256);
  {
    port::Capture cap;
    std::string err;
    ASSERT_TRUE(cap.open(path, {}, err)) << err;
    cap.write_at(w.data(), uint32_t(w.size()), port::Capture::Dir::Out, 1'700'000'000'000'000'123ull);
    cap.write_at(w.data(), uint32_t(w.size()), port::Capture::Dir::In, 1'700'000'000'000'001'000ull);
  }
  pcapio::Capture c;
  std::string err;
  ASSERT_TRUE(pcapio::read_file(path, c, err)) << err;
  std::remove(path.c_str());
  EXPECT_EQ(c.linktype, 1);
  ASSERT_EQ(c.frames.size(), 2u);
  EXPECT_EQ(c.frames[0].dir, pcapio::Frame::Dir::Out);
  EXPECT_EQ(c.frames[1].dir, pcapio::Frame::Dir::In);
  EXPECT_EQ(c.frames[0].interface_id, 0u);
  EXPECT_EQ(c.frames[0].bytes.size(), 70u + 64);
  EXPECT_EQ(c.frames[0].orig_len, uint32_t(w.size()));
  EXPECT_TRUE(std::equal(c.frames[0].bytes.begin(), c.frames[0].bytes.end(), w.begin()));
  EXPECT_NEAR(c.frames[0].time, 1'700'000'000.0, 1e-6);
  EXPECT_NEAR(c.frames[1].time - c.frames[0].time, 877e-9, 3e-7);  // a double near 1.7e9 s: 0.24 us steps
}

// A netdev shared with the kernel (key netdev, port/netdev.cpp): the path MTU rxe would choose,
// a missing interface named in one line, and every key filled from a real interface (lo, which
// every network namespace has) unless the file set it.
TEST(Netdev, PathMtuAsRxeChoosesIt) {
  EXPECT_EQ(uroce::port::path_mtu_for(1500), 1024u);
  EXPECT_EQ(uroce::port::path_mtu_for(9000), 4096u);
  EXPECT_EQ(uroce::port::path_mtu_for(4096 + 80), 4096u);
  EXPECT_EQ(uroce::port::path_mtu_for(4096 + 79), 2048u);
  EXPECT_EQ(uroce::port::path_mtu_for(576), 256u);
  EXPECT_EQ(uroce::port::path_mtu_for(335), 0u);
}

TEST(Netdev, AMissingInterfaceIsOneLineNamingIt) {
  TempConfig t("name = x\nnetdev = uroce-nosuch0\n");
  std::string err;
  EXPECT_FALSE(load_config(t.path, err));
  EXPECT_NE(err.find(t.path + ": "), std::string::npos) << err;
  EXPECT_NE(err.find("netdev 'uroce-nosuch0': no such interface"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
}

TEST(Netdev, KeysComeFromTheInterfaceUnlessTheFileSetsThem) {
  uroce::port::NetdevInfo lo;
  std::string err;
  ASSERT_TRUE(uroce::port::read_netdev("lo", lo, err)) << err;
  ASSERT_TRUE(lo.up);
  TempConfig only("name = dev0\nnetdev = lo\n");
  auto c = load_config(only.path, err);
  ASSERT_TRUE(c) << err;
  EXPECT_EQ(c->netdev_ifindex, lo.ifindex);
  EXPECT_EQ(c->have_ip4, lo.have_ip4);
  if (lo.have_ip4) {
    EXPECT_EQ(std::memcmp(c->ip4, lo.ip4, 4), 0);
  }
  EXPECT_EQ(c->ip6s, lo.ip6s);
  EXPECT_EQ(c->mac, lo.mac);
  EXPECT_FALSE(c->mac_from_port);
  EXPECT_EQ(c->link_mtu, std::min(lo.mtu, uroce::param::kAfXdpMaxLinkMtu));
  EXPECT_EQ(uroce::engine::mtu_bytes(c->path_mtu),
            std::min(uroce::port::path_mtu_for(lo.mtu), uroce::param::kAfXdpMaxPathMtu));
  std::string eal;
  for (const std::string& w : c->eal) eal += w + " ";
  EXPECT_NE(eal.find("--vdev=net_af_xdp0,iface=lo,start_queue=0,queue_count=1,xdp_prog=/"), std::string::npos) << eal;
  EXPECT_NE(eal.find("roce_redirect.bpf.o"), std::string::npos) << eal;

  TempConfig set("name = dev0\nnetdev = lo\nip = 198.18.1.1/24\nmtu = 512\nlink_mtu = 1500\neal = -l 0 --vdev=net_null0\n");
  c = load_config(set.path, err);
  ASSERT_TRUE(c) << err;
  EXPECT_EQ(c->ip4[0], 198);
  EXPECT_EQ(c->ip4[3], 1);
  EXPECT_EQ(uroce::engine::mtu_bytes(c->path_mtu), 512u);
  EXPECT_EQ(c->link_mtu, 1500u);
  EXPECT_EQ(c->eal, (std::vector<std::string>{"-l", "0", "--vdev=net_null0"}));
}
