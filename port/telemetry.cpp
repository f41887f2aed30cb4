// Live telemetry, the port's half (telemetry.hpp): engine snapshots as DPDK telemetry data.
#include "port/telemetry.hpp"

#include <rte_ethdev.h>
#include <rte_telemetry.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/engine.hpp"
#include "engine/param.hpp"
#include "port/param.hpp"
#include "port/dpdk_link.hpp"

namespace uroce::port::telemetry {

namespace {

struct Source {
  engine::Device* dev;
  std::string ifname;     // the config's device name (what ibv_devices shows)
  std::string port_name;  // DPDK's name of the port (net_memif0, 0000:03:00.0, ...)
};

// The registered devices. Never destroyed: DPDK's telemetry thread may still run a command
// while the process exits.
struct Hub {
  std::mutex m;
  std::vector<Source> sources;
  std::string comm;
};
Hub& hub() {
  static Hub* h = new Hub();
  return *h;
}

std::string read_comm() {
  std::ifstream f("/proc/self/comm");
  std::string s;
  std::getline(f, s);
  return s;
}

void add_identity(rte_tel_data* d) {
  rte_tel_data_add_dict_u64(d, "pid", uint64_t(getpid()));
  rte_tel_data_add_dict_string(d, "comm", hub().comm.c_str());
}

// A snapshot of every registered device; `busy` counts those that did not answer in time.
// Called with the hub locked.
std::vector<std::pair<const Source*, engine::Snapshot>> take(const engine::SnapshotRequest& req, unsigned& busy) {
  std::vector<std::pair<const Source*, engine::Snapshot>> out;
  busy = 0;
  for (const Source& s : hub().sources) {
    engine::Snapshot snap;
    if (s.dev->telemetry().request(req, snap, param::kTelemetryWaitMs)) out.emplace_back(&s, std::move(snap));
    else ++busy;
  }
  return out;
}

const char* type_name(engine::QpType t) {
  switch (t) {
    case engine::QpType::RC: return "RC";
    case engine::QpType::UC: return "UC";
    case engine::QpType::UD: return "UD";
    case engine::QpType::XrcIni: return "XRC_INI";  // the names iproute2's rdma tool prints
    case engine::QpType::XrcTgt: return "XRC_TGT";
  }
  return "?";
}

int cmd_stats(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> lk(hub().m);
  unsigned busy = 0;
  auto snaps = take(engine::SnapshotRequest{false, 0, 0}, busy);
  rte_tel_data_start_dict(d);
  add_identity(d);
  rte_tel_data_add_dict_string(d, "status", busy ? "busy" : "ok");
  std::string names, ports;
  for (const Source& s : hub().sources) {
    names += (names.empty() ? "" : ",") + s.ifname;
    ports += (ports.empty() ? "" : ",") + s.port_name;
  }
  rte_tel_data_add_dict_string(d, "ifname", names.c_str());
  rte_tel_data_add_dict_string(d, "port", ports.c_str());
  rte_tel_data_add_dict_u64(d, "devices", hub().sources.size());
  rte_tel_data_add_dict_u64(d, "devices_busy", busy);
  // Engine counters summed over the devices that answered, then the link's (by name).
  engine::Counters sum;
  std::vector<std::pair<std::string, uint64_t>> link;
  for (auto& [src, snap] : snaps) {
    sum.add(snap.counters);
    for (auto& [name, v] : snap.extra) {
      auto it = std::find_if(link.begin(), link.end(), [&](auto& e) { return e.first == name; });
      if (it == link.end()) link.emplace_back(name, v);
      else it->second += v;
    }
  }
  for (size_t i = 0; i < engine::kCounterFieldCount; ++i)
    rte_tel_data_add_dict_u64(d, engine::kCounterFields[i].name, sum.*engine::kCounterFields[i].member);
  for (auto& [name, v] : link) rte_tel_data_add_dict_u64(d, name.c_str(), v);
  return 0;
}

// /uroce/qps[,OFFSET]: a page of at most kTelemetryMaxQpRows QPs of each device, from position
// OFFSET of its QP list (uroce-stat reads them page after page: issue 30's 262,144 QPs).
int cmd_qps(const char*, const char* params, rte_tel_data* d) {
  uint32_t offset = 0;
  if (params && *params) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(params, &end, 0);
    if (*end != '\0' || v > UINT32_MAX) return -1;
    offset = uint32_t(v);
  }
  std::lock_guard<std::mutex> lk(hub().m);
  unsigned busy = 0;
  auto snaps = take(engine::SnapshotRequest{false, 0, param::kTelemetryMaxQpRows, offset, false}, busy);
  rte_tel_data_start_dict(d);
  add_identity(d);
  rte_tel_data_add_dict_string(d, "status", busy ? "busy" : "ok");
  // One array per column: DPDK 22.11's containers hold plain arrays only.
  enum { kIfname, kType, kState, kStrCols };
  static const char* const kStrNames[kStrCols] = {"ifname", "type", "state"};
  enum { kLqpn, kRqpn, kSqPsn, kRqPsn, kPathMtu, kNumCols };
  static const char* const kNumNames[kNumCols] = {"lqpn", "rqpn", "sq_psn", "rq_psn", "path_mtu"};
  rte_tel_data* str[kStrCols];
  rte_tel_data* num[kNumCols];
  for (auto& c : str) {
    c = rte_tel_data_alloc();
    rte_tel_data_start_array(c, RTE_TEL_STRING_VAL);
  }
  for (auto& c : num) {
    c = rte_tel_data_alloc();
    rte_tel_data_start_array(c, RTE_TEL_U64_VAL);
  }
  uint64_t total = 0, shown = 0;
  for (auto& [src, snap] : snaps) {
    total += snap.qp_total;
    for (const engine::QpInfo& q : snap.qps) {
      if (shown == param::kTelemetryMaxQpRows) break;
      ++shown;
      rte_tel_data_add_array_string(str[kIfname], src->ifname.c_str());
      rte_tel_data_add_array_string(str[kType], type_name(q.type));
      rte_tel_data_add_array_string(str[kState], std::string(engine::qp_state_name(q.state)).c_str());
      rte_tel_data_add_array_u64(num[kLqpn], q.qpn);
      rte_tel_data_add_array_u64(num[kRqpn], q.dest_qpn);
      rte_tel_data_add_array_u64(num[kSqPsn], q.sq_psn);
      rte_tel_data_add_array_u64(num[kRqPsn], q.rq_psn);
      rte_tel_data_add_array_u64(num[kPathMtu], q.path_mtu);
    }
  }
  rte_tel_data_add_dict_u64(d, "qps_total", total);
  rte_tel_data_add_dict_u64(d, "qps_shown", shown);
  rte_tel_data_add_dict_u64(d, "qps_offset", offset);
  for (int i = 0; i < kStrCols; ++i) rte_tel_data_add_dict_container(d, kStrNames[i], str[i], 0);
  for (int i = 0; i < kNumCols; ++i) rte_tel_data_add_dict_container(d, kNumNames[i], num[i], 0);
  return 0;
}

int cmd_qp(const char*, const char* params, rte_tel_data* d) {
  if (!params || !*params) return -1;
  char* end = nullptr;
  const unsigned long v = std::strtoul(params, &end, 0);
  if (*end != '\0' || v > 0xFFFFFF) return -1;
  std::lock_guard<std::mutex> lk(hub().m);
  unsigned busy = 0;
  auto snaps = take(engine::SnapshotRequest{true, uint32_t(v), 1}, busy);
  rte_tel_data_start_dict(d);
  add_identity(d);
  for (auto& [src, snap] : snaps) {
    if (snap.qps.empty()) continue;
    const engine::QpInfo& q = snap.qps.front();
    rte_tel_data_add_dict_string(d, "status", "ok");
    rte_tel_data_add_dict_string(d, "ifname", src->ifname.c_str());
    rte_tel_data_add_dict_u64(d, "lqpn", q.qpn);
    rte_tel_data_add_dict_u64(d, "rqpn", q.dest_qpn);
    rte_tel_data_add_dict_string(d, "type", type_name(q.type));
    rte_tel_data_add_dict_string(d, "state", std::string(engine::qp_state_name(q.state)).c_str());
    rte_tel_data_add_dict_string(d, "remote_gid", q.remote_gid.c_str());
    const std::pair<const char*, uint64_t> numbers[] = {
        {"path_mtu", q.path_mtu},   {"sq_psn", q.sq_psn},
        {"rq_psn", q.rq_psn},       {"acked_psn", q.acked_psn},
        {"sq_outstanding", q.sq_outstanding}, {"rq_outstanding", q.rq_outstanding},
        {"rd_atomic_inflight", q.rd_atomic_inflight}, {"timeout", q.timeout},
        {"retry_cnt", q.retry_cnt}, {"retries_left", q.retries_left},
        {"rnr_retry", q.rnr_retry}, {"rnr_retries_left", q.rnr_retries_left},
    };
    for (const auto& [name, value] : numbers) rte_tel_data_add_dict_u64(d, name, value);
    rte_tel_data_add_dict_string(d, "requester", std::string(q.req_state).c_str());
    rte_tel_data_add_dict_string(d, "completer", std::string(q.comp_state).c_str());
    rte_tel_data_add_dict_string(d, "responder", std::string(q.resp_state).c_str());
    rte_tel_data_add_dict_string(d, "congestion_control", q.cc.c_str());
    rte_tel_data_add_dict_u64(d, "cc_rate_mbps", q.cc_rate_mbps);
    for (size_t i = 0; i < engine::kCounterFieldCount; ++i)
      rte_tel_data_add_dict_u64(d, engine::kCounterFields[i].name, q.counters.*engine::kCounterFields[i].member);
    return 0;
  }
  // No such QP among the devices that answered.
  rte_tel_data_add_dict_string(d, "status", busy ? "busy" : "no such qp");
  return 0;
}

void register_commands() {
  rte_telemetry_register_cmd("/uroce/stats", cmd_stats,
                             "uroce: device and link counters (rxe hw_counter names where they mean the same). No parameters");
  rte_telemetry_register_cmd("/uroce/qps", cmd_qps,
                             "uroce: the QP table (ifname, lqpn, rqpn, type, state, sq_psn, rq_psn, path_mtu). No parameters");
  rte_telemetry_register_cmd("/uroce/qp", cmd_qp, "uroce: one QP in full. Parameter: QP number (decimal or 0x hex)");
}

}  // namespace

void add(engine::Device& dev, DpdkLink* link, const std::string& ifname) {
  static std::once_flag once;
  std::call_once(once, [] {
    hub().comm = read_comm();
    register_commands();
  });
  // The link's counters join the snapshot on the polling thread, where they are written.
  // send_err is rxe's name for frames the link could not send (our tx_refused).
  // Attached to the uroce service (no link of our own: nullptr), the link's are the daemon's.
  char name[RTE_ETH_NAME_MAX_LEN] = "uroced";
  std::lock_guard<std::mutex> lk(hub().m);
  hub().sources.push_back(Source{&dev, ifname, name});
  if (!link) return;
  if (rte_eth_dev_get_name_by_port(link->port_id(), name) != 0) name[0] = '\0';
  hub().sources.back().port_name = name;
  dev.telemetry().set_extra([link](engine::Snapshot& s) {
    const LinkCounters& c = link->counters();
    s.extra.emplace_back("send_err", c.tx_refused);
    for (size_t i = 0; i < kLinkCounterFieldCount; ++i)
      s.extra.emplace_back(kLinkCounterFields[i].name, c.*kLinkCounterFields[i].member);
  });
}

void remove(engine::Device& dev) {
  std::lock_guard<std::mutex> lk(hub().m);
  auto& v = hub().sources;
  v.erase(std::remove_if(v.begin(), v.end(), [&](const Source& s) { return s.dev == &dev; }), v.end());
}

}  // namespace uroce::port::telemetry
