// uroce's XDP program (port/xdp/roce_redirect.bpf.c) on literal frames, through the kernel's
// BPF_PROG_TEST_RUN: RoCEv2 frames (UDP 4791 over IPv4, IPv4 with options, IPv6, one or two VLAN
// tags) are handed to uroce; everything else, and every hostile or truncated frame, goes to the
// kernel. The program's own counters (map roce_counts: 0 to uroce, 1 to the kernel) tell which
// (with no AF_XDP socket bound, the redirect itself falls back to XDP_PASS). Needs root; skipped
// without it.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Frame = std::vector<uint8_t>;

struct Program {
  bpf_object* obj = nullptr;
  int prog_fd = -1, counts_fd = -1;
  Program() {
    const char* path = std::getenv("UROCE_XDP_PROG");
    if (!path || !*path) return;
    obj = bpf_object__open_file(path, nullptr);
    if (!obj || bpf_object__load(obj) != 0) return;
    prog_fd = bpf_program__fd(bpf_object__find_program_by_name(obj, "uroce_roce"));
    counts_fd = bpf_object__find_map_fd_by_name(obj, "roce_counts");
  }
  ~Program() {
    if (obj) bpf_object__close(obj);
  }
  uint64_t count(uint32_t which) const {
    std::vector<uint64_t> v(static_cast<size_t>(libbpf_num_possible_cpus()));
    if (bpf_map_lookup_elem(counts_fd, &which, v.data()) != 0) return ~0ull;
    uint64_t n = 0;
    for (uint64_t x : v) n += x;
    return n;
  }
  // 0: handed to uroce, 1: passed to the kernel, -1: the run failed.
  int verdict(Frame f) const {
    if (f.size() < 60) f.resize(60, 0);  // Ethernet's minimum, as on a wire
    const uint64_t before = count(0), passed = count(1);
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = f.data(), .data_size_in = uint32_t(f.size()), .repeat = 1);
    if (bpf_prog_test_run_opts(prog_fd, &o) != 0) return -1;
    if (o.retval != XDP_PASS && o.retval != XDP_REDIRECT) return -1;
    if (count(0) == before + 1 && count(1) == passed) return 0;
    if (count(1) == passed + 1 && count(0) == before) return 1;
    return -1;
  }
};

Frame eth(uint16_t type) {
  return {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, uint8_t(type >> 8), uint8_t(type)};
}
void add(Frame& f, std::initializer_list<uint8_t> b) { f.insert(f.end(), b); }
void vlan(Frame& f, uint16_t tpid, uint16_t inner) {
  f[12] = uint8_t(tpid >> 8), f[13] = uint8_t(tpid);
  add(f, {0, 100, uint8_t(inner >> 8), uint8_t(inner)});
}
// IPv4 header (20 bytes, or with `opt` 4-byte words of options) with protocol `proto`.
void ip4(Frame& f, uint8_t proto, uint16_t frag = 0x4000, int opt = 0) {
  add(f, {uint8_t(0x45 + opt), 0, 0, 100, 0, 1, uint8_t(frag >> 8), uint8_t(frag), 64, proto, 0, 0, 198, 18, 4, 1, 198, 18, 4, 2});
  for (int i = 0; i < opt; ++i) add(f, {1, 1, 1, 1});  // NOPs
}
void ip6(Frame& f, uint8_t next) {
  add(f, {0x60, 0, 0, 0, 0, 40, next, 64});
  for (int i = 0; i < 32; ++i) f.push_back(uint8_t(i));
}
void udp(Frame& f, uint16_t dport) { add(f, {0xc0, 0x00, uint8_t(dport >> 8), uint8_t(dport), 0, 40, 0, 0}); }

TEST(XdpProgram, RoceFramesToUroceTheRestToTheKernel) {
  if (geteuid() != 0) GTEST_SKIP() << "BPF_PROG_TEST_RUN needs root";
  Program p;
  ASSERT_GE(p.prog_fd, 0) << "cannot load $UROCE_XDP_PROG (" << (std::getenv("UROCE_XDP_PROG") ?: "unset") << ")";
  ASSERT_GE(p.counts_fd, 0);

  Frame f = eth(0x0800);
  ip4(f, 17), udp(f, 4791);
  EXPECT_EQ(p.verdict(f), 0) << "IPv4 RoCEv2";
  f = eth(0x0800), ip4(f, 17, 0x4000, 2), udp(f, 4791);
  EXPECT_EQ(p.verdict(f), 0) << "IPv4 with options";
  f = eth(0x86dd), ip6(f, 17), udp(f, 4791);
  EXPECT_EQ(p.verdict(f), 0) << "IPv6 RoCEv2";
  f = eth(0x0800), vlan(f, 0x8100, 0x0800), ip4(f, 17), udp(f, 4791);
  EXPECT_EQ(p.verdict(f), 0) << "802.1Q";
  f = eth(0x0800), vlan(f, 0x88a8, 0x8100), add(f, {0, 7, 0x86, 0xdd}), ip6(f, 17), udp(f, 4791);
  EXPECT_EQ(p.verdict(f), 0) << "802.1ad + 802.1Q, IPv6";

  f = eth(0x0800), ip4(f, 17), udp(f, 4792);
  EXPECT_EQ(p.verdict(f), 1) << "another UDP port";
  f = eth(0x0800), ip4(f, 6), udp(f, 4791);
  EXPECT_EQ(p.verdict(f), 1) << "TCP (its ports where UDP's would be)";
  f = eth(0x0806), add(f, {0, 1, 8, 0, 6, 4, 0, 1});
  EXPECT_EQ(p.verdict(f), 1) << "ARP";
  f = eth(0x0800), ip4(f, 17, 0x00b9), udp(f, 4791);
  EXPECT_EQ(p.verdict(f), 1) << "a later IPv4 fragment that looks like UDP 4791";
  f = eth(0x86dd), ip6(f, 0), udp(f, 4791);
  EXPECT_EQ(p.verdict(f), 1) << "IPv6 with an extension header first";
  f = eth(0x0800), vlan(f, 0x8100, 0x8100), add(f, {0, 7, 0x81, 0x00}), add(f, {0, 8, 0x08, 0x00}), ip4(f, 17), udp(f, 4791);
  EXPECT_EQ(p.verdict(f), 1) << "three VLAN tags (more than the program walks)";

  // Truncated: the bytes the program would read are past the frame's end (no padding here).
  for (size_t cut : {14u, 20u, 33u, 34u, 40u, 41u}) {
    Frame t = eth(0x0800);
    ip4(t, 17), udp(t, 4791);
    t.resize(cut);
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = t.data(), .data_size_in = uint32_t(t.size()), .repeat = 1);
    const uint64_t before = p.count(0);
    ASSERT_EQ(bpf_prog_test_run_opts(p.prog_fd, &o), 0) << cut;
    EXPECT_EQ(o.retval, uint32_t(XDP_PASS)) << "truncated at " << cut;
    EXPECT_EQ(p.count(0), cut >= 42 ? before + 1 : before) << "truncated at " << cut;
  }
}

}  // namespace
