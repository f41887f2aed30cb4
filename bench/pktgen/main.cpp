// uroce-pktgen: the minimal DPDK packet generator and counter that scripts/bench-port.sh puts
// next to uroce-perf, to show the raw packet rate of a link. One side transmits fixed frames
// as fast as the port takes them (tx); the other counts what arrives (rx). No protocol, no
// copy beyond writing each frame's header; the same config files and EAL set-up as uroce-perf.
//
//   uroce-pktgen --config FILE rx [-t seconds]          prints Mpps received
//   uroce-pktgen --config FILE tx [-s frame] [-t seconds]
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "port/dpdk_link.hpp"
#include "port/param.hpp"

using namespace uroce;

int main(int argc, char** argv) {
  std::string cfg_path, mode;
  uint32_t frame = 64, seconds = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) cfg_path = argv[++i];
    else if (a == "-s" && i + 1 < argc) frame = uint32_t(std::stoul(argv[++i]));
    else if (a == "-t" && i + 1 < argc) seconds = uint32_t(std::stoul(argv[++i]));
    else if (a == "tx" || a == "rx") mode = a;
    else if (a == "-h" || a == "--help") {
      std::printf("usage: uroce-pktgen --config FILE tx|rx [-s frame_bytes] [-t seconds]\n"
                  "The raw DPDK packet rate of a link: tx sends fixed frames (default 64 bytes) as fast\n"
                  "as the port takes them, rx counts what arrives; both for -t seconds (default 5) and\n"
                  "print Mpps. The config is a uroce endpoint config (as for uroce-perf).\n");
      return 0;
    } else {
      std::fprintf(stderr, "usage: uroce-pktgen --config FILE tx|rx [-s frame_bytes] [-t seconds]\n");
      return 2;
    }
  }
  if (cfg_path.empty() || mode.empty()) {
    std::fprintf(stderr, "usage: uroce-pktgen --config FILE tx|rx [-s frame_bytes] [-t seconds]\n");
    return 2;
  }
  std::string err;
  auto cfg = port::load_config(cfg_path, err);
  if (!cfg) {
    std::fprintf(stderr, "uroce-pktgen: %s\n", err.c_str());
    return 2;
  }
  auto link = port::DpdkLink::open(*cfg, err);
  if (!link) {
    std::fprintf(stderr, "uroce-pktgen: %s\n", err.c_str());
    return 1;
  }
  if (!link->wait_link_up(param::kLinkWaitMs)) {
    std::fprintf(stderr, "uroce-pktgen: link down\n");
    return 1;
  }
  const uint64_t hz = rte_get_tsc_hz();
  const uint16_t pid = link->port_id();
  if (mode == "tx") {
    // An Ethernet frame to a locally administered MAC nobody uses (counted by the rx side,
    // dropped by any kernel): ethertype 0x88B5 (local experimental).
    uint8_t tmpl[64] = {0x02, 0, 0xc6, 0x12, 0xff, 0xff};
    std::memcpy(tmpl + 6, link->mac().data(), 6);
    tmpl[12] = 0x88, tmpl[13] = 0xB5;
    rte_mempool* pool = link->mempool();
    uint64_t sent = 0;
    const uint64_t t0 = rte_get_tsc_cycles(), end = t0 + hz * seconds;
    rte_mbuf* ms[32];
    while (rte_get_tsc_cycles() < end) {
      if (rte_pktmbuf_alloc_bulk(pool, ms, 32) != 0) continue;
      for (auto* m : ms) {
        std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), tmpl, sizeof tmpl);
        m->data_len = uint16_t(frame);
        m->pkt_len = frame;
      }
      uint16_t n = rte_eth_tx_burst(pid, 0, ms, 32);
      sent += n;
      if (n < 32) rte_pktmbuf_free_bulk(ms + n, 32 - n);
    }
    const double s = double(rte_get_tsc_cycles() - t0) / double(hz);
    std::printf("tx frames=%lu seconds=%.3f Mpps=%.3f frame=%u\n", (unsigned long)sent, s, double(sent) / s / 1e6,
                frame);
  } else {
    uint64_t got = 0, first = 0, last = 0;
    const uint64_t t0 = rte_get_tsc_cycles(), end = t0 + hz * (seconds + 20);
    rte_mbuf* ms[64];
    for (;;) {
      uint64_t now = rte_get_tsc_cycles();
      uint16_t n = rte_eth_rx_burst(pid, 0, ms, 64);
      if (n) {
        // Count only the generator's frames (ethertype 0x88B5), not the kernel's chatter.
        uint16_t mine = 0;
        for (uint16_t i = 0; i < n; ++i) {
          const uint8_t* f = rte_pktmbuf_mtod(ms[i], const uint8_t*);
          mine += ms[i]->data_len >= 14 && f[12] == 0x88 && f[13] == 0xB5;
        }
        rte_pktmbuf_free_bulk(ms, n);
        if (!mine) continue;
        if (!got) first = now;
        got += mine;
        last = now;
      } else if ((got && now - last > hz / 2) || now > end) {
        break;
      }
    }
    const double s = got ? double(last - first) / double(hz) : 0;
    std::printf("rx frames=%lu seconds=%.3f Mpps=%.3f\n", (unsigned long)got, s,
                s > 0 ? double(got) / s / 1e6 : 0.0);
  }
  link.reset();
  rte_eal_cleanup();
  return 0;
}
