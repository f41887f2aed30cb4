// Live telemetry, the port's half: the /uroce/* commands of DPDK's telemetry socket
// (docs/observability.md). Every Endpoint adds its Device here when it opens and removes it
// when it closes; the commands are registered with DPDK once per process.
//
//   /uroce/stats        pid, comm, the devices' names, their engine counters summed (rxe's
//                       hw_counter names where the meaning is the same) and the link counters
//   /uroce/qps          the QP table, one array per column (ifname, lqpn, rqpn, type, state,
//                       sq_psn, rq_psn, path_mtu), at most param::kTelemetryMaxQpRows rows
//   /uroce/qp,<qpn>     one QP in full (decimal or 0x hex): state, type, PSNs, outstanding work,
//                       retry and RNR counts, remote address, the roles' state names, counters
//
// The handlers run on DPDK's telemetry thread and never read the engine: each asks the
// Device's SnapshotMailbox (engine/telemetry.hpp), which the polling thread answers at its
// next progress(). A device whose owner does not poll within param::kTelemetryWaitMs is
// reported as busy ("status": "busy").
#pragma once
#include <string>

namespace uroce::engine {
class Device;
}

namespace uroce::port {

class DpdkLink;

namespace telemetry {
// Registers the commands (first call only) and lists `dev` under `ifname`. The link's counters
// join every snapshot of `dev` (read on the polling thread).
void add(engine::Device& dev, DpdkLink* link, const std::string& ifname);
// Removes `dev` (waits for a command in progress, at most param::kTelemetryWaitMs per device).
void remove(engine::Device& dev);
}  // namespace telemetry

}  // namespace uroce::port
