// uroce-perf's bring-up: the endpoint (config, DPDK link, engine Device), the PD, CQs, the
// memory region and the QPs; then the TCP exchange with the peer, the peer's address on the
// link (ARP/ND) and the QPs through INIT, RTR, RTS.
#pragma once

namespace uroce::perf {

struct Ctx;

void setup(Ctx& c);        // exits on any failure
void connect_qps(Ctx& c);  // exits on any failure; both sides are in RTS on return

}  // namespace uroce::perf
