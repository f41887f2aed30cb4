#include "port/config.hpp"

#include "port/netdev.hpp"

#include <arpa/inet.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace uroce::port {

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return {};
  size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

bool parse_u32(const std::string& s, uint32_t& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  unsigned long v = std::strtoul(s.c_str(), &end, 0);
  if (*end != 0 || v > 0xFFFFFFFFul) return false;
  out = uint32_t(v);
  return true;
}

bool parse_bool(const std::string& s, bool& out) {
  if (s == "yes" || s == "true" || s == "1" || s == "on") return out = true, true;
  if (s == "no" || s == "false" || s == "0" || s == "off") return out = false, true;
  return false;
}

}  // namespace

bool parse_mac(const std::string& s, proto::Mac& out) {
  unsigned v[6];
  char tail;
  if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6)
    return false;
  for (int i = 0; i < 6; ++i) {
    if (v[i] > 255) return false;
    out[i] = uint8_t(v[i]);
  }
  return true;
}

bool parse_ip4(const std::string& s, uint8_t out[4]) { return inet_pton(AF_INET, s.c_str(), out) == 1; }
bool parse_ip6(const std::string& s, proto::Ip6& out) { return inet_pton(AF_INET6, s.c_str(), out.data()) == 1; }

std::string mac_str(const proto::Mac& m) {
  char b[18];
  std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return b;
}

std::string gid_str(const proto::Ip6& g) {
  char b[INET6_ADDRSTRLEN];
  if (engine::gid_is_v4mapped(g)) inet_ntop(AF_INET, g.data() + 12, b, sizeof b);
  else inet_ntop(AF_INET6, g.data(), b, sizeof b);
  return b;
}

proto::Ip6 link_local_from_mac(const proto::Mac& m) {
  proto::Ip6 a{};
  a[0] = 0xfe, a[1] = 0x80;
  a[8] = m[0] ^ 0x02, a[9] = m[1], a[10] = m[2], a[11] = 0xff, a[12] = 0xfe, a[13] = m[3], a[14] = m[4], a[15] = m[5];
  return a;
}

namespace {

bool parse_probability(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (*end != 0 || !(v >= 0 && v <= 1)) return false;
  out = v;
  return true;
}

// fault_KIND, fault_rx_KIND, fault_tx_KIND: the directions the key names (rx, tx or both) and KIND.
bool fault_key(const std::string& key, bool& rx, bool& tx, std::string& kind) {
  if (key.rfind("fault_", 0) != 0) return false;
  kind = key.substr(6);
  rx = tx = true;
  if (kind.rfind("rx_", 0) == 0) tx = false, kind = kind.substr(3);
  else if (kind.rfind("tx_", 0) == 0) rx = false, kind = kind.substr(3);
  return kind == "drop" || kind == "duplicate" || kind == "reorder" || kind == "corrupt" || kind == "delay_us";
}

bool set_fault(EndpointConfig& c, bool rx, bool tx, const std::string& kind, const std::string& val, std::string& msg) {
  for (engine::FaultConfig* f : {rx ? &c.fault_rx : nullptr, tx ? &c.fault_tx : nullptr}) {
    if (!f) continue;
    if (kind == "delay_us") {
      uint32_t us = 0;
      if (!parse_u32(val, us) || us > param::kFaultDelayMaxUs) {
        msg = "bad delay (0.." + std::to_string(param::kFaultDelayMaxUs) + " microseconds)";
        return false;
      }
      f->delay = us ? 1 : 0;  // every frame of the direction, by the same amount: the order is kept
      f->min_delay_ns = f->max_delay_ns = uint64_t(us) * 1000;
      continue;
    }
    double p = 0;
    if (!parse_probability(val, p)) {
      msg = "a probability from 0 to 1 (0.01: one frame in a hundred)";
      return false;
    }
    if (kind == "drop") f->drop = p;
    else if (kind == "duplicate") f->duplicate = p;
    else if (kind == "reorder") f->reorder = p, f->reorder_window = param::kFaultReorderWindow;
    else f->corrupt = p;
  }
  return true;
}

// bottleneck_*: the congestion point on the link's transmit side (engine/bottleneck.hpp).
bool set_bottleneck(EndpointConfig& c, const std::string& key, const std::string& val, std::string& msg, bool& unknown) {
  engine::BottleneckConfig& b = c.bottleneck;
  uint32_t u = 0;
  if (key == "bottleneck_pmax") {
    if (parse_probability(val, b.mark_pmax)) return true;
    msg = "bottleneck_pmax is a probability from 0 to 1 (RED's at bottleneck_kmax_kb)";
    return false;
  }
  struct Num {
    const char* key;
    uint32_t hi;
  };
  static const Num nums[] = {{"bottleneck_mbps", 1'000'000}, {"bottleneck_pps", 1'000'000'000},
                             {"bottleneck_queue_kb", param::kBottleneckQueueMaxKb},
                             {"bottleneck_k_kb", param::kBottleneckQueueMaxKb}, {"bottleneck_kmax_kb", param::kBottleneckQueueMaxKb}};
  for (const Num& n : nums) {
    if (key != n.key) continue;
    if (!parse_u32(val, u) || u > n.hi) {
      msg = "bad " + key + " (0.." + std::to_string(n.hi) + ")";
      return false;
    }
    if (key == "bottleneck_mbps") b.rate_bps = uint64_t(u) * 1'000'000;
    else if (key == "bottleneck_pps") b.pps = u;
    else if (key == "bottleneck_queue_kb") b.queue_bytes = u * 1024;
    else if (key == "bottleneck_k_kb") b.mark_bytes = u * 1024;
    else b.mark_max_bytes = u * 1024;
    return true;
  }
  return engine::cc::set_key(c.cc, key, val, msg, unknown);  // not a key of ours: answered as every unknown key
}

// The keys that take a number in a range (the transport's knobs), answered "bad KEY (LO..HI)".
struct RangeKey {
  const char* key;
  uint32_t lo, hi;
  uint32_t EndpointConfig::* field;
};
const RangeKey kRangeKeys[] = {
    {"cnp_interval_us", 0, param::kCnpIntervalMaxUs, &EndpointConfig::cnp_interval_us},
    {"cm_timewait_ms", 0, param::kCmTimewaitMaxMs, &EndpointConfig::cm_timewait_ms},
    {"cm_max_conns", 1, param::kCmMaxConnsMax, &EndpointConfig::cm_max_conns},
    {"max_unacked_psns", 1, param::kMaxUnackedPsnsMax, &EndpointConfig::max_unacked_psns},
    {"ack_req_every", 1, param::kAckReqEveryMax, &EndpointConfig::ack_req_every},
    {"ack_every", 0, param::kAckEveryMax, &EndpointConfig::ack_every},
    {"probe_floor_us", 0, param::kProbeFloorMaxUs, &EndpointConfig::probe_floor_us},
};

// Sets one key. False with `msg` when the value is bad; `unknown` when there is no such key.
bool set_key(EndpointConfig& c, const std::string& key, const std::string& val, std::string& msg, bool& unknown) {
  unknown = false;
  bool rx = false, tx = false;
  std::string kind;
  if (fault_key(key, rx, tx, kind)) return set_fault(c, rx, tx, kind, val, msg);
  if (key.rfind("bottleneck_", 0) == 0) return set_bottleneck(c, key, val, msg, unknown);
  uint32_t u = 0;
  auto fail = [&](const std::string& m) {
  msg = m;
  return false;
  };
  for (const RangeKey& r : kRangeKeys) {
    if (key != r.key) continue;
    if (!parse_u32(val, u) || u < r.lo || u > r.hi)
      return fail("bad " + key + " (" + std::to_string(r.lo) + ".." + std::to_string(r.hi) + ")");
    c.*r.field = u;
    return true;
  }
  if (key == "name") {
    c.name = val;
  } else if (key == "netdev") {
    if (val.empty() || val.size() >= 16 || val.find('/') != std::string::npos) return fail("bad interface name");
    c.netdev = val;
  } else if (key == "service") {
    if (val != "auto" && val != "on" && val != "off") return fail("service is auto, on or off");
    c.service = val;
  } else if (key == "service_drive") {
    if (val != "on" && val != "off") return fail("service_drive is on or off");
    c.service_drive = val == "on";
  } else if (key == "service_group") {
    if (val.empty() || val.size() > 64 || val.find_first_of(" /:") != std::string::npos) return fail("bad group name");
    c.service_group = val;
  } else if (key == "service_rt_priority") {
    uint32_t u = 0;
    if (!parse_u32(val, u) || u > param::kServiceRtPriorityMax)
      return fail("service_rt_priority is 0 (the fair scheduler) .. " + std::to_string(param::kServiceRtPriorityMax));
    c.service_rt_priority = u;
  } else if (key == "netdev_link") {
    if (val != "af_xdp" && val != "af_packet") return fail("netdev_link is af_xdp or af_packet");
    c.netdev_link = val;
  } else if (key == "xdp_prog") {
    if (val.empty()) return fail("xdp_prog needs a file name");
    c.xdp_prog = val;
  } else if (key == "eal") {
    std::istringstream ss(val);
    std::string w;
    while (ss >> w) c.eal.push_back(w);
  } else if (key == "port") {
    if (!parse_u32(val, u) || u > 0xFFFF) return fail("bad port id");
    c.port = int(u);
  } else if (key == "ip") {
    std::string addr = val;
    if (auto sl = val.find('/'); sl != std::string::npos) {
      addr = val.substr(0, sl);
      if (!parse_u32(val.substr(sl + 1), u) || u > 32) return fail("bad prefix length");
      c.prefix4 = uint8_t(u);
    }
    if (!parse_ip4(addr, c.ip4)) return fail("bad IPv4 address");
    c.have_ip4 = true;
  } else if (key == "ip6") {
    std::string addr = val.substr(0, val.find('/'));
    proto::Ip6 a;
    if (!parse_ip6(addr, a)) return fail("bad IPv6 address");
    if (!c.have_ip6) c.ip6 = a;
    c.have_ip6 = true;
    c.ip6s.push_back(a);
  } else if (key == "mac") {
    if (val == "port") c.mac_from_port = true;
    else if (parse_mac(val, c.mac)) c.mac_from_port = false;
    else return fail("bad MAC (aa:bb:cc:dd:ee:ff or 'port')");
  } else if (key == "mtu") {
    const auto m = parse_u32(val, u) ? path_mtu_of(u) : std::nullopt;
    if (!m) return fail("path mtu must be 256, 512, 1024, 2048 or 4096");
    c.path_mtu = *m;
  } else if (key == "link_mtu") {
    if (!parse_u32(val, u) || u < 576 || u > 16000) return fail("bad link_mtu");
    c.link_mtu = u;
  } else if (key == "mbufs") {
    if (!parse_u32(val, u) || u < 512) return fail("bad mbufs (>= 512)");
    c.mbufs = u;
  } else if (key == "mbuf_size") {
    if (!parse_u32(val, u) || u < 1024 || u > 65000) return fail("bad mbuf_size");
    c.mbuf_size = u;
  } else if (key == "mbuf_cache") {
    if (!parse_u32(val, u) || u > 512) return fail("bad mbuf_cache (<= 512)");
    c.mbuf_cache = u;
  } else if (key == "rx_desc" || key == "tx_desc") {
    if (!parse_u32(val, u) || u < 64 || u > 32768) return fail("bad descriptor count");
    (key == "rx_desc" ? c.rx_desc : c.tx_desc) = uint16_t(u);
  } else if (key == "gid_index") {
    if (!parse_u32(val, u) || u > 255) return fail("gid_index is 0 (IPv6 link-local), 1 (IPv4-mapped) or 2.. (each ip6)");
    c.gid_index = int(u);
  } else if (key == "dscp") {
    if (!parse_u32(val, u) || u > 63) return fail("bad dscp");
    c.dscp = uint8_t(u);
  } else if (key == "ecn") {
    if (val == "off") c.ecn = 0;
    else if (val == "ect0") c.ecn = 2;
    else if (val == "ect1") c.ecn = 1;
    else return fail("ecn is off, ect0 or ect1");
  } else if (key == "cm_mra_timeout" || key == "cm_response_timeout") {
    if (!parse_u32(val, u) || u > param::kCmMaxTimeoutExp)
      return fail("bad " + key + " (0.." + std::to_string(param::kCmMaxTimeoutExp) + ": 4.096 us * 2^N)");
    (key == "cm_mra_timeout" ? c.cm_mra_timeout : c.cm_response_timeout) = uint8_t(u);
  } else if (key == "cm_max_retries") {
    if (!parse_u32(val, u) || u > 15) return fail("bad cm_max_retries (0..15)");
    c.cm_max_retries = uint8_t(u);
  } else if (key == "selective_repeat") {
    if (!parse_bool(val, c.selective_repeat)) return fail("selective_repeat is on or off");
  } else if (key == "cnp_dscp") {
    if (!parse_u32(val, u) || u > 63) return fail("bad cnp_dscp");
    c.cnp_dscp = uint8_t(u);
  } else if (key == "hop_limit" || key == "ttl") {
    if (!parse_u32(val, u) || u < 1 || u > 255) return fail("bad hop_limit");
    c.hop_limit = uint8_t(u);
  } else if (key == "flow_isolate") {
    if (!parse_bool(val, c.flow_isolate)) return fail("flow_isolate is yes or no");
  } else if (key == "promiscuous") {
    if (!parse_bool(val, c.promiscuous)) return fail("promiscuous is yes or no");
  } else if (key == "progress") {
    if (val != "thread" && val != "inline" && val != "dedicated") return fail("progress is thread, inline or dedicated");
    c.progress = val;
  } else if (key == "capture") {
    if (val.empty()) return fail("capture needs a file name");
    c.capture = val;
  } else if (key == "capture_all") {
    if (!parse_bool(val, c.capture_all)) return fail("capture_all is yes or no");
  } else if (key == "capture_snaplen") {
    if (!parse_u32(val, u) || (u != 0 && u < param::kCaptureSnapMin) || u > 65535)
      return fail("capture_snaplen is 0 (headers + " + std::to_string(param::kCaptureSnapPayload) + " bytes) or " +
                  std::to_string(param::kCaptureSnapMin) + "..65535");
    c.capture_snaplen = u;
  } else if (key == "capture_max_mb") {
    if (!parse_u32(val, u) || u < 1 || u > param::kCaptureMaxMbLimit)
      return fail("capture_max_mb is 1.." + std::to_string(param::kCaptureMaxMbLimit));
    c.capture_max_mb = u;
  } else if (key == "fault_seed") {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(val.c_str(), &end, 0);
    if (val.empty() || *end != 0) return fail("fault_seed is a number");
    c.fault_seed = v;
  } else if (key == "fault_all") {
    if (!parse_bool(val, c.fault_all)) return fail("fault_all is yes or no");
  } else if (key == "arp_timeout_ms") {
    if (!parse_u32(val, u)) return fail("bad arp_timeout_ms");
    c.arp_timeout_ms = u;
  } else {
    // Congestion control's keys (engine/cc.cpp owns their names and ranges).
    return engine::cc::set_key(c.cc, key, val, msg, unknown);
  }
  return true;
}

}  // namespace

std::optional<EndpointConfig> load_config(const std::string& path, std::string& err) {
  std::ifstream in(path);
  if (!in) {
    err = path + ": cannot open: " + std::strerror(errno);
    return std::nullopt;
  }
  EndpointConfig c;
  c.file = path;
  std::string line, key, val;
  int lineno = 0;
  // One line naming the file, the line and the key: "FILE:LINE: key 'mtu' = '1000': message".
  auto fail = [&](const std::string& msg) {
    err = path + ":" + std::to_string(lineno) + ": ";
    if (!key.empty()) err += "key '" + key + "' = '" + val + "': ";
    err += msg;
    return std::nullopt;
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    line = trim(line);
    if (line.empty()) continue;
    auto eq = line.find('=');
    if (eq == std::string::npos) {
      key.clear();
      return fail("expected key = value, got '" + line + "'");
    }
    key = trim(line.substr(0, eq)), val = trim(line.substr(eq + 1));
    std::string msg;
    bool unknown = false;
    if (!set_key(c, key, val, msg, unknown)) {
      if (!unknown) return fail(msg);
      const std::string k = key;
      key.clear();
      return fail("unknown key '" + k + "' (the keys: config/README.md)");
    }
    c.keys.push_back(key);
  }
  key.clear();
  if (!c.netdev.empty()) {
    if (!apply_netdev(c, err)) {  // "FILE: netdev 'x': ..."
      err = path + ": " + err;
      return std::nullopt;
    }
  }
  if (c.eal.empty()) {
    err = path + ": key 'eal' missing (the EAL arguments, with the port; or key 'netdev' names an interface)";
    return std::nullopt;
  }
  if (c.gid_index >= 2 + int(c.ip6s.size())) {
    err = path + ": key 'gid_index' = " + std::to_string(c.gid_index) + " names no GID (0 link-local, 1 IPv4, 2.. each ip6 line)";
    return std::nullopt;
  }
  if (c.gid_index == 1 && !c.have_ip4) {
    err = path + ": key 'gid_index' = 1 (IPv4) needs an 'ip' line";
    return std::nullopt;
  }
  if (engine::mtu_bytes(c.path_mtu) + 100 > c.link_mtu + 14) {
    err = path + ": key 'mtu' = " + std::to_string(engine::mtu_bytes(c.path_mtu)) + " does not fit key 'link_mtu' = " +
          std::to_string(c.link_mtu);
    return std::nullopt;
  }
  return c;
}

const std::vector<std::string>& env_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = {"capture", "capture_all", "capture_snaplen", "capture_max_mb", "fault_seed", "fault_all",
                                  "bottleneck_mbps", "bottleneck_pps", "bottleneck_queue_kb", "bottleneck_k_kb",
                                  "bottleneck_kmax_kb", "bottleneck_pmax", "ecn", "cnp_interval_us"};
    for (const char* kind : {"drop", "duplicate", "reorder", "corrupt", "delay_us"})
      for (const char* dir : {"", "rx_", "tx_"}) k.push_back(std::string("fault_") + dir + kind);
    // Congestion control for an experiment: UROCE_CC=dcqcn, UROCE_RPG_AI_RATE=10, ...
    for (const std::string& cc : engine::cc::keys()) k.push_back(cc);
    return k;
  }();
  return keys;
}

bool apply_env(EndpointConfig& c, char* (*getenv_fn)(const char*), std::string& err) {
  for (const std::string& key : env_keys()) {
    std::string name = "UROCE_";
    for (char ch : key) name += char(std::toupper(static_cast<unsigned char>(ch)));
    const char* v = getenv_fn(name.c_str());
    if (!v) continue;
    std::string msg;
    bool unknown = false;
    if (!set_key(c, key, trim(v), msg, unknown)) {
      err = name + " = '" + v + "': " + msg;
      return false;
    }
  }
  return true;
}

}  // namespace uroce::port
