#include "proto/ecn.hpp"

#include "proto/bytes.hpp"
#include "proto/checksum.hpp"
#include "proto/locate.hpp"

namespace uroce::proto {

std::string_view ce_mark_name(CeMark m) {
  switch (m) {
    case CeMark::Marked: return "marked";
    case CeMark::AlreadyCe: return "already CE";
    case CeMark::NotEct: return "not ECN-capable";
    default: return "not IP";
  }
}

int ecn_of(std::span<const uint8_t> frame) {
  const Located l = locate(frame);
  if (l.ip_version == 4) return frame[l.l3 + 1] & 3;
  if (l.ip_version == 6) return (frame[l.l3 + 1] >> 4) & 3;
  return -1;
}

CeMark mark_ce(std::span<uint8_t> frame) {
  const Located l = locate(frame);
  if (l.ip_version == 4) {
    uint8_t* ip = frame.data() + l.l3;
    const uint8_t ecn = ip[1] & 3;
    if (ecn == 3) return CeMark::AlreadyCe;
    if (ecn == 0) return CeMark::NotEct;
    ip[1] |= 3;
    ip[10] = ip[11] = 0;
    store_be16(ip + 10, inet_checksum(ip, l.ip_header_len));
    return CeMark::Marked;
  }
  if (l.ip_version == 6) {
    // Traffic class: the low 4 bits of byte 0 and the high 4 of byte 1; ECN is its low 2 bits.
    uint8_t* ip = frame.data() + l.l3;
    const uint8_t ecn = (ip[1] >> 4) & 3;
    if (ecn == 3) return CeMark::AlreadyCe;
    if (ecn == 0) return CeMark::NotEct;
    ip[1] |= 0x30;
    return CeMark::Marked;
  }
  return CeMark::NotIp;
}

}  // namespace uroce::proto
