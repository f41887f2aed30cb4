// Endpoint configuration for the DPDK port: one endpoint per file, `key = value` lines,
// `#` starts a comment. The keys are documented in config/README.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/bottleneck.hpp"
#include "engine/cc.hpp"
#include "engine/fault.hpp"
#include "engine/param.hpp"
#include "port/param.hpp"
#include "engine/types.hpp"
#include "proto/packet.hpp"

namespace uroce::port {

// The path MTU for 256, 512, 1024, 2048 or 4096 bytes; nullopt for any other size.
constexpr std::optional<engine::Mtu> path_mtu_of(uint32_t bytes) {
  for (uint32_t m = uint32_t(engine::Mtu::M256); m <= uint32_t(engine::Mtu::M4096); ++m)
    if (engine::mtu_bytes(engine::Mtu(m)) == bytes) return engine::Mtu(m);
  return std::nullopt;
}

// Defaults: port/param.hpp, and engine/param.hpp for the engine's (kDefaultTtl, ECN, CNP, CM...).
struct EndpointConfig {
  std::string file;                    // where it was read from (for messages)
  std::string name = "uroce0";         // device name (what ibv_get_device_list would show)
  std::vector<std::string> eal;        // EAL arguments, split at whitespace
  std::vector<std::string> keys;       // the keys the file set, in order (defaults fill the rest)
  // A netdev of the host, shared with the kernel (port/netdev.hpp, docs/netdev.md): MAC, MTU and
  // addresses come from it; af_xdp with uroce's XDP program takes only its RoCEv2 frames; the
  // kernel resolves neighbours (port/netlink.hpp). Empty: uroce's own link and addresses.
  std::string netdev;
  std::string xdp_prog;                // the XDP program file (default: port/netdev.hpp xdp_program())
  std::string netdev_link = "af_xdp";  // af_xdp, or af_packet for interfaces without XDP
  int netdev_ifindex = 0;
  // The uroce service (docs/service.md): auto attaches to the daemon that serves this device
  // name when one runs (else the link is this process's own), on requires it, off never does.
  std::string service = "auto";              // set from the interface when the config is loaded
  // uroced's: attached processes may drive the port themselves where a DPDK secondary can poll it
  // (memif), so that a busy device needs no busy daemon (port/service/pump.hpp).
  bool service_drive = true;
  // uroced's: a group whose members may attach besides root and the daemon's user (a name or a
  // number; empty: none), as /dev/infiniband/uverbs* may be a group's (port/service/access.hpp).
  std::string service_group;
  // uroced's: SCHED_FIFO priority of its data-path thread (0: the fair scheduler; param.hpp).
  uint32_t service_rt_priority = param::kServiceRtPriority;
  bool have_link_local = false;        // the netdev's own link-local address (else made from the MAC)
  proto::Ip6 link_local{};
  int port = -1;                       // DPDK port id; -1: the first available
  bool have_ip4 = false;
  uint8_t ip4[4] = {};
  uint8_t prefix4 = param::kPrefix4;
  bool have_ip6 = false;
  proto::Ip6 ip6{};                    // explicit IPv6 address (else link-local from the MAC)
  bool mac_from_port = true;
  proto::Mac mac{};
  engine::Mtu path_mtu = *path_mtu_of(param::kPathMtu);
  uint32_t link_mtu = param::kLinkMtu; // IP MTU of the link (frame = link_mtu + 14)
  uint32_t mbufs = param::kMbufs;      // mbufs in the pool
  uint32_t mbuf_cache = param::kMbufCache;
  uint32_t mbuf_size = 0;              // mbuf data room after the headroom; 0: the largest frame
  uint16_t rx_desc = param::kRxDesc, tx_desc = param::kTxDesc;
  std::vector<proto::Ip6> ip6s;        // every `ip6` line (global addresses), in order
  // The default source GID (tools that do not ask for one). The GID table (DpdkLink::gids()):
  // 0 the IPv6 link-local address from the MAC, 1 the IPv4-mapped address, 2.. each ip6.
  int gid_index = param::kGidIndex;
  uint8_t dscp = 0, hop_limit = param::kDefaultTtl;
  uint8_t ecn = param::kEcnMark;       // ECN field of every frame: 0 off, 2 ect0, 1 ect1
  uint32_t cnp_interval_us = uint32_t(param::kCnpIntervalNs / 1000);  // one CNP per QP at most this often
  uint8_t cnp_dscp = param::kCnpDscp;  // DSCP of the CNPs sent
  engine::cc::Config cc;               // congestion control: cc, cc_line_rate, the DCQCN and TIMELY keys
  // Transport knobs (docs/reliability.md): send window, AckReq spacing, responder ACK spacing,
  // tail-loss probe floor.
  uint32_t max_unacked_psns = param::kMaxUnackedPsns;
  uint32_t ack_req_every = param::kAckReqEvery;
  uint32_t ack_every = param::kAckEvery;
  uint32_t probe_floor_us = uint32_t(param::kProbeFloorNs / 1000);
  bool selective_repeat = param::kSelectiveRepeat;  // both ends must have it on (docs/reliability.md)
  bool flow_isolate = false;           // rte_flow isolation (share a NIC port with the kernel)
  bool promiscuous = true;             // enable promiscuous mode when our MAC is not the port's
  uint32_t arp_timeout_ms = param::kArpTimeoutMs;  // bounded address resolution
  // The connection manager (engine/cm.hpp, docs/rdma_cm.md), used by liburoce-rdmacm: TimeWait,
  // connections kept, the service timeout of our MRAs, the response timeout our REQs announce
  // and the resends before a REQ, REP or DREQ is given up.
  uint32_t cm_timewait_ms = uint32_t(param::kCmTimewaitNs / 1'000'000);
  uint32_t cm_max_conns = param::kCmMaxConns;
  uint8_t cm_mra_timeout = param::kCmMraTimeout;
  uint8_t cm_response_timeout = param::kRdmacmResponseTimeout;
  uint8_t cm_max_retries = param::kCmMaxRetries;
  // Who turns the engine in a program run through the verbs shim (docs/verbs_shim.md):
  // "thread" (the application inside its verbs calls, a polling thread otherwise), "inline"
  // (only the application's verbs calls; no polling thread) or "dedicated" (a polling thread
  // that never sleeps, for a spare core per process). UROCE_PROGRESS overrides it.
  std::string progress = "thread";
  // Capture (port/capture.hpp, docs/observability.md): a pcapng file of the frames
  // received and sent. UROCE_CAPTURE etc. override these for programs run through the shim.
  std::string capture;                 // the file; empty: no capture
  bool capture_all = false;            // also ARP, ND, ICMP and every other frame, not only RoCE
  uint32_t capture_snaplen = 0;        // bytes kept of each frame; 0: its headers + kCaptureSnapPayload
  uint32_t capture_max_mb = param::kCaptureMaxMb;  // the file stops growing here (frames counted)
  // Fault injection (port/fault_stage.hpp): per direction, RoCE frames only unless fault_all.
  engine::FaultConfig fault_rx, fault_tx;
  uint64_t fault_seed = param::kFaultSeed;
  bool fault_all = false;             // also received ARP, ND, ICMP (the port sends its own without faults)
  // A congestion point on what the link sends (engine/bottleneck.hpp, docs/congestion.md): keys
  // bottleneck_mbps or bottleneck_pps (the rate), bottleneck_queue_kb, bottleneck_k_kb and
  // bottleneck_kmax_kb (marking: a step at K, or RED up to kmax), bottleneck_pmax.
  engine::BottleneckConfig bottleneck = default_bottleneck();
  static engine::BottleneckConfig default_bottleneck() {
    engine::BottleneckConfig b;
    b.queue_bytes = param::kBottleneckQueueKb * 1024;
    return b;
  }

  uint32_t max_frame() const { return link_mtu + 14; }
};

// Reads a config file; on error returns nullopt and sets `err` ("file:line: message").
std::optional<EndpointConfig> load_config(const std::string& path, std::string& err);

// The keys the environment may override (for programs run through the shim): UROCE_CAPTURE,
// UROCE_CAPTURE_ALL, UROCE_CAPTURE_SNAPLEN, UROCE_CAPTURE_MAX_MB, UROCE_FAULT_DROP,
// UROCE_FAULT_RX_DROP, ... (every fault_* key, upper case, prefixed UROCE_). `getenv_fn` is
// getenv in programs (a stand-in in tests). False and `err` ("UROCE_X = 'v': message") when a
// value is bad.
bool apply_env(EndpointConfig& c, char* (*getenv_fn)(const char*), std::string& err);
const std::vector<std::string>& env_keys();

// Text helpers, shared with uroce-perf.
bool parse_mac(const std::string& s, proto::Mac& out);
bool parse_ip4(const std::string& s, uint8_t out[4]);
bool parse_ip6(const std::string& s, proto::Ip6& out);
std::string mac_str(const proto::Mac& m);
std::string gid_str(const proto::Ip6& g);   // a.b.c.d for IPv4-mapped, else IPv6 text

// The IPv6 link-local address (fe80::/64, modified EUI-64) for a MAC, as rxe's GID index 0.
proto::Ip6 link_local_from_mac(const proto::Mac& m);

}  // namespace uroce::port
