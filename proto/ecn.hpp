// Congestion Experienced: what a switch does to an ECN-capable frame instead of dropping it
// (RFC 3168; RoCEv2, IBA Annex A17.9). The frame's IP header gets ECN 3 (CE); IPv4's header
// checksum is recomputed; the ICRC stays valid, because it covers the ECN bits as ones (they
// are among the fields masked out of it). Used by the congestion points of the FakeLink and the
// port's fault stage. Never reads or writes outside the frame.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

namespace uroce::proto {

enum class CeMark : uint8_t {
  Marked,     // ECT(0) or ECT(1) became CE
  AlreadyCe,  // it was CE: nothing to do
  NotEct,     // ECN 0: the sender cannot take a mark (a congestion point drops such a frame instead)
  NotIp,      // no whole IPv4 or IPv6 header: untouched
};
std::string_view ce_mark_name(CeMark m);

CeMark mark_ce(std::span<uint8_t> frame);

// The frame's ECN field (0..3), or -1 when it has no whole IPv4 or IPv6 header.
int ecn_of(std::span<const uint8_t> frame);

}  // namespace uroce::proto
