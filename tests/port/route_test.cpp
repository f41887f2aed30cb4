// route_frame (port/service/route.hpp): which process of a shared device a frame is for, on
// frames built by the wire library: a WRITE to QP n, each CM message to QP 1 (REQ and SIDR_REQ
// by service ID, the others by the receiver's ID), and what belongs to nobody (multicast, a
// MAD of another class, a ClassPortInfo, frames cut short, not RoCE at all).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "port/service/route.hpp"
#include "proto/cm.hpp"
#include "proto/cm_const.hpp"
#include "tests/proto/test_util.hpp"

using namespace uroce;
using namespace uroce::proto;
using namespace uroce::proto::test;
using uroce::port::service::Route;
using uroce::port::service::route_frame;
namespace pcm = uroce::proto::cm;

namespace {

std::vector<uint8_t> to_qp(uint32_t qpn, uint8_t opcode = op::kWriteOnly, int ipv = 4, int vlans = 0) {
  static const std::vector<uint8_t> payload(64, 0x5A);
  Packet p = make_packet(opcode, ipv, vlans, payload);
  p.dest_qp = qpn;
  return build_frame(p);
}

// A CM message as rdma_cm sends it: a UD SEND_ONLY to QP 1 carrying the 256-byte MAD.
std::vector<uint8_t> cm_frame(const pcm::Message& m, int ipv = 4) {
  pcm::Mad mad{{}, m};
  mad.hdr.tid = 0x1122334455667788ull;
  std::array<uint8_t, pcm::kMadSize> bytes{};
  EXPECT_EQ(pcm::emit(mad, bytes), pcm::kMadSize);
  const std::vector<uint8_t> payload(bytes.begin(), bytes.end());
  Packet p = make_packet(op::kUd | op::kSendOnly, ipv, 0, payload);
  p.dest_qp = pcm::kCmQpn;
  p.deth = {pcm::kGsiQkey, 0, pcm::kCmQpn};
  p.payload = payload;
  return build_frame(p);
}

}  // namespace

TEST(Route, FramesToAQpGoByItsNumber) {
  for (int ipv : {4, 6})
    for (int vlans : {0, 1, 2}) {
      const auto f = to_qp(0x5EC0C3, op::kWriteOnly, ipv, vlans);
      ASSERT_FALSE(f.empty());
      const Route r = route_frame(f);
      EXPECT_EQ(r.by, Route::By::Qp);
      EXPECT_EQ(r.id, 0x5EC0C3u);
      EXPECT_EQ(r.id & 63, 3u);  // slot 3's QP (the low six bits)
    }
  EXPECT_EQ(route_frame(to_qp(0x000102, op::kUd | op::kSendOnly)).id, 0x000102u);
}

TEST(Route, RequestsGoByServiceId) {
  pcm::Req req;
  req.local_comm_id = 0xABCD0001;
  req.service_id = pcm::service_id(pcm::ps::kTcp, 7471);
  Route r = route_frame(cm_frame(req));
  EXPECT_EQ(r.by, Route::By::CmService);
  EXPECT_EQ(r.service_id, 0x0000000001061D2Full);
  pcm::SidrReq sreq;
  sreq.request_id = 0x42;
  sreq.service_id = pcm::service_id(pcm::ps::kUdp, 7174);
  r = route_frame(cm_frame(sreq, 6));
  EXPECT_EQ(r.by, Route::By::CmService);
  EXPECT_EQ(r.service_id, 0x0000000001111c06ull);
}

TEST(Route, AnswersGoByTheReceiversId) {
  pcm::Rep rep;
  rep.local_comm_id = 0x11111111;
  rep.remote_comm_id = 0x22222205;  // ours: slot 5
  Route r = route_frame(cm_frame(rep));
  EXPECT_EQ(r.by, Route::By::CmId);
  EXPECT_EQ(r.id, 0x22222205u);
  pcm::Rtu rtu;
  rtu.remote_comm_id = 0x33333307;
  EXPECT_EQ(route_frame(cm_frame(rtu)).id, 0x33333307u);
  pcm::Dreq dreq;
  dreq.local_comm_id = 1;
  dreq.remote_comm_id = 0x44444409;
  EXPECT_EQ(route_frame(cm_frame(dreq, 6)).id, 0x44444409u);
  pcm::Rej rej;
  rej.remote_comm_id = 0x5555550A;
  EXPECT_EQ(route_frame(cm_frame(rej)).id, 0x5555550Au);
  pcm::SidrRep srep;
  srep.request_id = 0x6666660B;
  r = route_frame(cm_frame(srep));
  EXPECT_EQ(r.by, Route::By::CmId);
  EXPECT_EQ(r.id, 0x6666660Bu);
}

// A datagram to QP 0xFFFFFF goes to the members of the group its IP destination names (IPv4
// groups IPv4-mapped, IPv6 as they are, VLAN tags stepped over); to a unicast address it is
// nobody's.
TEST(Route, ToQpFfffffIsTheGroupOfItsIpDestination) {
  for (int ipv : {4, 6})
    for (int vlans : {0, 1}) {
      Packet p = make_packet(op::kUd | op::kSendOnly, ipv, vlans, std::vector<uint8_t>(32, 1));
      p.dest_qp = 0xFFFFFF;
      proto::Ip6 g{};
      if (ipv == 4) {
        g[10] = g[11] = 0xff, g[12] = 239, g[13] = 18, g[14] = 0, g[15] = 9;
        std::memcpy(p.ip_dst.data(), g.data() + 12, 4);
      } else {
        g[0] = 0xff, g[1] = 0x0e, g[15] = 9;
        p.ip_dst = g;
      }
      const Route r = route_frame(build_frame(p));
      EXPECT_EQ(r.by, Route::By::Group) << ipv << " " << vlans;
      EXPECT_EQ(r.group, g);
    }
  EXPECT_EQ(route_frame(to_qp(0xFFFFFF, op::kUd | op::kSendOnly)).by, Route::By::None) << "to a unicast address";
}

TEST(Route, WhatBelongsToNobody) {
  pcm::Req req;
  req.service_id = 1;
  std::vector<uint8_t> f = cm_frame(req);
  const size_t mad = locate(f).bth + 12 + 8;
  std::vector<uint8_t> other = f;
  other[mad + 1] = 0x04;  // management class: not the CM's
  EXPECT_EQ(route_frame(other).by, Route::By::None);
  std::vector<uint8_t> cpi = f;
  cpi[mad + 16] = 0x00, cpi[mad + 17] = 0x01;  // ClassPortInfo
  EXPECT_EQ(route_frame(cpi).by, Route::By::None);
  // Cut anywhere before the fields it reads: nobody's, and nothing read beyond the end.
  for (size_t n = 0; n < mad + 24 + 24; ++n) {
    const std::vector<uint8_t> cut(f.begin(), f.begin() + long(n));
    EXPECT_EQ(route_frame(cut).by, Route::By::None) << n;
  }
  const auto w = to_qp(0x123456);
  for (size_t n = 0; n < locate(w).bth + 12; ++n)
    EXPECT_EQ(route_frame(std::span<const uint8_t>(w.data(), n)).by, Route::By::None) << n;
  std::vector<uint8_t> udp = w;
  udp[locate(w).l4 + 3] = 0x34;  // another UDP destination port (0x1234, not 4791 = 0x12B7)
  EXPECT_EQ(route_frame(udp).by, Route::By::None);
}
