// route_frame (port/service/route.hpp).
#include "port/service/route.hpp"

#include <cstring>

#include "proto/cm_const.hpp"
#include "proto/cm_view.hpp"
#include "proto/headers.hpp"
#include "proto/locate.hpp"
#include "proto/multicast.hpp"

namespace uroce::port::service {

namespace pcm = proto::cm;

namespace {
// The CM message fields read here lie in its first 24 bytes (service ID of a REQ: bytes 8-15;
// of a SIDR_REQ: 8-15; IDs: 0-7).
constexpr size_t kCmFieldsRead = 24;
}  // namespace

Route route_frame(std::span<const uint8_t> frame) {
  Route r;
  const proto::Located L = proto::locate(frame);
  const size_t len = frame.size();
  const uint8_t* f = frame.data();
  if (!L.roce_v2() || L.bth + proto::BthView<const uint8_t>::kSize > len) return r;
  const uint32_t dqpn = proto::BthView<const uint8_t>(f + L.bth).dest_qp();
  if (dqpn == proto::kMulticastQpn) {
    // (A BTH found: the whole IP header is in the frame.)
    if (L.ip_version == 6) {
      std::memcpy(r.group.data(), proto::Ipv6View<const uint8_t>(f + L.l3).dst(), 16);
    } else {
      r.group[10] = r.group[11] = 0xff;
      std::memcpy(r.group.data() + 12, proto::Ipv4View<const uint8_t>(f + L.l3).dst(), 4);
    }
    if (proto::is_multicast_gid(r.group)) r.by = Route::By::Group;
    return r;
  }
  if (dqpn != pcm::kCmQpn) {
    r.by = Route::By::Qp;
    r.id = dqpn;
    return r;
  }
  // QP 1: a MAD after the BTH and the DETH.
  const size_t mad = L.bth + proto::BthView<const uint8_t>::kSize + proto::DethView<const uint8_t>::kSize;
  if (mad + pcm::kMadHeaderSize + kCmFieldsRead > len) return r;
  const pcm::MadHeaderView<const uint8_t> h(f + mad);
  if (h.mgmt_class() != pcm::kMgmtClassCm) return r;
  const uint8_t* msg = f + mad + pcm::kMadHeaderSize;
  switch (pcm::Attr(h.attr_id())) {
    case pcm::Attr::Req:
      r.by = Route::By::CmService;
      r.service_id = pcm::ReqView<const uint8_t>(msg).service_id();
      return r;
    case pcm::Attr::SidrReq:
      r.by = Route::By::CmService;
      r.service_id = pcm::SidrReqView<const uint8_t>(msg).service_id();
      return r;
    case pcm::Attr::SidrRep:
      r.by = Route::By::CmId;
      r.id = pcm::SidrRepView<const uint8_t>(msg).request_id();
      return r;
    case pcm::Attr::ClassPortInfo:
      return r;
    default:
      r.by = Route::By::CmId;
      r.id = pcm::CommIdsView<const uint8_t>(msg).remote_comm_id();
      return r;
  }
}

}  // namespace uroce::port::service
