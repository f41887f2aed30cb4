// uroce-dissect's view of IB CM MADs (proto/cm.hpp): the UD SEND_ONLY payloads to QP 1 with
// which rdma_cm connects, refuses and disconnects QPs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace uroce::dissect {

// The line view's text for a MAD: "  CM REQ local_id 0x64c0c56d sid 0x0000000001064853 (TCP 18515)
// qpn 0x00003d psn 8176132 RC mtu 1024  ip 10.1.16.62:52471 > 10.1.16.61:18515", or what keeps
// it from being decoded ("  MAD: management class is not CM (0x07)").
std::string cm_line(std::span<const uint8_t> mad);

// One line of the --bytes layout: a field of `n` bytes at `hoff` into the header that starts at
// frame offset `hstart`, with its decoded text.
struct CmField {
  std::string header;  // "MAD", "CM REQ", "rdma_cm", ... (printed on the header's first field)
  size_t hstart = 0, hoff = 0, n = 0;
  std::string text;
};

// The fields of the 256-byte MAD at frame offset `at` (`mad` points at it): the common MAD
// header, the CM message field by field as IBA vol. 1 chapter 12 lays it out, and the rdma_cm IP
// header at the front of a REQ's or SIDR_REQ's private data. Every field lies inside the 256
// bytes. A MAD that is not a CM message gets its header only.
std::vector<CmField> cm_fields(const uint8_t* mad, size_t at);

}  // namespace uroce::dissect
