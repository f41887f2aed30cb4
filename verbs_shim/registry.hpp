// The registry: the verbs objects the shim watches on the application's behalf, under the
// ownership token. The open contexts (each has its asynchronous event queue), the QPs, CQs and
// SRQs whose state async.cpp compares at each scan (and when it scans next), the link state last
// reported, and the CQs with a requested completion notification (cq.cpp).
#pragma once
#include <cstdint>
#include <vector>

namespace uroce::shim {

struct UCq;
struct UContext;
struct UQp;
struct USrq;

struct Registry {
  std::vector<UCq*> armed;   // CQs with a requested notification (ibv_req_notify_cq)
  // Asynchronous events (async.cpp).
  std::vector<UContext*> contexts;
  std::vector<UQp*> qps;
  std::vector<UCq*> cqs;
  std::vector<USrq*> srqs;
  uint64_t next_scan_ns = 0, next_link_ns = 0;   // engine clock
  bool link_up = false;      // as last reported (IBV_EVENT_PORT_ACTIVE / IBV_EVENT_PORT_ERR)
  // The device is gone for good (the uroce service stopped): IBV_EVENT_DEVICE_FATAL was sent,
  // every QP was moved to the error state, and posting fails with EIO.
  bool device_lost = false;
};

}  // namespace uroce::shim
