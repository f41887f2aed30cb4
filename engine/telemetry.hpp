// Live telemetry, the engine's half: a plain snapshot of a Device (its counters and a row per
// QP) and the hand-off that lets another thread ask for one. No DPDK here: the port turns
// snapshots into DPDK telemetry answers (port/telemetry.cpp, docs/observability.md).
//
// Why a hand-off. The engine is single-threaded and has no locks: its QP table, queues and
// counters are plain data that only the thread polling the Device may touch. DPDK runs
// telemetry commands on its own thread. So that thread never reads the engine; it posts a
// request here and waits. The polling thread finds the request at its next Device::progress()
// (one relaxed load of a flag per progress() call, nothing per packet), fills the snapshot
// itself and wakes the waiter. If nobody polls within param::kTelemetryWaitMs the request is
// withdrawn and the answer is "busy": a command never blocks the engine and never waits long.
//
// The same design serves every owner of a Device: uroce-perf (its loops call progress()) and a
// program run through the verbs shim (progress() runs under the shim's ownership token, so the
// snapshot is taken under it too, without the telemetry thread taking the token).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/resources.hpp"
#include "engine/types.hpp"

namespace uroce::engine {

class Device;
class Qp;

// One QP in full, as `rdma res show qp` and rxe's debug prints would show it.
struct QpInfo {
  uint32_t qpn = 0;
  uint32_t dest_qpn = 0;           // RC/UC: the peer's QP number (0 before RTR and for UD)
  QpType type = QpType::RC;
  QpState state = QpState::Reset;
  uint32_t path_mtu = 0;           // bytes
  uint32_t sq_psn = 0;             // next PSN a new request takes
  uint32_t rq_psn = 0;             // the responder's expected PSN
  uint32_t acked_psn = 0;          // highest PSN the peer acknowledged (valid once something was)
  uint32_t sq_outstanding = 0;     // send WQEs posted and not yet completed
  uint32_t rq_outstanding = 0;     // receive WQEs posted (0 with an SRQ)
  uint32_t rd_atomic_inflight = 0; // READs and atomics outstanding
  uint8_t retry_cnt = 0, retries_left = 0;      // retry_cnt 7: seven (the IBA)
  uint8_t rnr_retry = 0, rnr_retries_left = 0;  // rnr_retry 7: for ever
  uint8_t timeout = 0;             // local ACK timeout exponent (4.096 us * 2^timeout)
  std::string remote_gid;          // the peer's GID as text (a.b.c.d for IPv4-mapped)
  std::string_view req_state, comp_state, resp_state;  // the roles' state names (qp.hpp)
  // Congestion control (engine/cc.hpp): "off", or the algorithm's rate and state in one line;
  // the rate the QP may send at now (Mbit/s; 0: not limited).
  std::string cc = "off";
  uint64_t cc_rate_mbps = 0;
  Counters counters;               // this QP's counters
};
QpInfo qp_info(const Qp& qp);

// A Device at one moment, filled on the polling thread.
struct Snapshot {
  Counters counters;                // the device's (Device::counters())
  uint32_t qp_total = 0;            // QPs that exist
  std::vector<QpInfo> qps;          // all of them, or the one asked for (up to max_qps)
  // Name/value pairs the Device's owner adds (the port: the link's counters), on the polling
  // thread too: see SnapshotMailbox::set_extra.
  std::vector<std::pair<std::string, uint64_t>> extra;
};

// What a telemetry command asks for.
// Paging (issue 30): a device of 262,144 QPs is read a page at a time, each page one short
// visit of the polling thread (the rows from `offset` in the device's list, not a walk of
// every QP); the device's counters, a sum over every QP, only when asked for. The list's order
// changes when QPs are destroyed (the last one takes the freed place), so a QP created or
// destroyed while pages are read may be missed or shown twice.
struct SnapshotRequest {
  bool one_qp = false;              // only the QP `qpn` (qps empty if there is none)
  uint32_t qpn = 0;
  uint32_t max_qps = 0;             // rows at most (all QPs are still counted in qp_total)
  uint32_t offset = 0;              // the first row: the QP at this position of the device's list
  bool with_counters = true;        // the device's counters: every QP's summed, a part per progress()
                                    // step (Device::counters_step), the request served when done
};

class SnapshotMailbox {
 public:
  // Any thread but the polling one: a snapshot taken by the polling thread at its next
  // progress(), waiting at most `wait_ms`. False ("busy") if no progress() ran meanwhile.
  // Requests from several threads are served one after the other.
  bool request(const SnapshotRequest& req, Snapshot& out, uint32_t wait_ms);

  // Polling thread, in Device::progress(): is a request waiting? (One relaxed load.)
  bool wanted() const { return want_.load(std::memory_order_relaxed); }
  // Polling thread: fill the waiting request from `dev` and wake its thread; with the device's
  // counters, once their sum is complete (param::kTelemetrySumQpsPerStep QPs a step).
  void serve(Device& dev);

  // The owner's addition to every snapshot, run on the polling thread (set it before the
  // device is polled, or from the polling thread).
  void set_extra(std::function<void(Snapshot&)> f);

 private:
  std::mutex one_at_a_time_;        // serialises requesters
  std::mutex m_;                    // guards the fields below
  std::condition_variable cv_;
  std::atomic<bool> want_{false};
  const SnapshotRequest* req_ = nullptr;
  Snapshot* out_ = nullptr;         // nullptr: nobody waits (withdrawn or served)
  uint64_t seq_ = 0;                // the request's number: its counter sum (Device::counters_step)
  std::function<void(Snapshot&)> extra_;
};

}  // namespace uroce::engine
