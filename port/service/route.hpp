// What decides which process of a shared device (the uroce service, docs/service.md) a received
// frame belongs to, by its bytes alone: the destination QP, and for QP 1's CM MADs the IDs and
// service ID inside the MAD. No DPDK and no daemon state: the daemon (port/service/daemon.cpp)
// looks the answer up in its slots. Never reads outside the frame.
#pragma once
#include <cstdint>
#include <span>

#include "proto/packet.hpp"

namespace uroce::port::service {

struct Route {
  enum class By : uint8_t {
    None,        // not a RoCEv2 frame with a whole BTH, a MAD of no CM
    Group,       // a datagram to QP 0xFFFFFF: the members of multicast group `group` (its IP destination)
    Qp,          // a frame to QP `id` (not 1): the owner of that QP number
    CmId,        // a CM MAD naming the receiver's communication ID `id` (remote comm ID; SIDR_REP: request ID)
    CmService,   // a REQ or SIDR_REQ for `service_id`: the process listening on it
  };
  By by = By::None;
  uint32_t id = 0;
  uint64_t service_id = 0;
  proto::Ip6 group{};  // Group: IPv4-mapped or IPv6
};

Route route_frame(std::span<const uint8_t> frame);

}  // namespace uroce::port::service
