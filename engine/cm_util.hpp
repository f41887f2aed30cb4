// Helpers the connection manager's files share (engine-internal: engine/cm*.cpp only): private
// data into a MAD field (after rdma_cm's IP header), a DREQ and a DREP, the GIDs of a received frame, the
// CA GUID from a MAC.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "engine/cm.hpp"
#include "proto/cm.hpp"
#include "proto/packet.hpp"

namespace uroce::engine::cm {

// Private data into a message's field at `off` (the caller checked the size; an empty span may
// have no data pointer at all, and memcpy must not see it).
template <size_t N>
inline void copy_pd(std::array<uint8_t, N>& dst, std::span<const uint8_t> src, size_t off = 0) {
  if (!src.empty() && off < N) std::memcpy(dst.data() + off, src.data(), std::min(N - off, src.size()));
}
template <size_t N>
inline std::vector<uint8_t> vec(const std::array<uint8_t, N>& a) {
  return std::vector<uint8_t>(a.begin(), a.end());
}

// The private data of a REQ or SIDR_REQ: rdma_cm's IP header first when the library gives one,
// then the caller's bytes.
template <size_t N>
inline void copy_cma_pd(std::array<uint8_t, N>& dst, const pcm::CmaHeader* cma, std::span<const uint8_t> pd) {
  size_t off = 0;
  if (cma) {
    pcm::emit_cma_header(*cma, dst);
    off = pcm::CmaHeaderView<uint8_t>::kSize;
  }
  copy_pd(dst, pd, off);
}

// A DREQ for connection `c`: its IDs and the peer's QP, a transaction ID, private data.
inline pcm::Mad dreq(const Conn& c, uint64_t tid, std::span<const uint8_t> pd = {}) {
  pcm::Dreq r;
  r.local_comm_id = c.local_id;
  r.remote_comm_id = c.remote_id;
  r.remote_qpn = c.remote_qpn;
  copy_pd(r.private_data, pd);
  pcm::Mad m{{}, r};
  m.hdr.tid = tid;
  return m;
}

// A DREP: our communication ID, the peer's, the DREQ's transaction ID, private data.
inline pcm::Mad drep(uint32_t local_id, uint32_t remote_id, uint64_t tid, std::span<const uint8_t> pd = {}) {
  pcm::Drep r;
  r.local_comm_id = local_id;
  r.remote_comm_id = remote_id;
  copy_pd(r.private_data, pd);
  pcm::Mad m{{}, r};
  m.hdr.tid = tid;
  return m;
}

// The GID of a frame's source or destination address (IPv4 as ::ffff:a.b.c.d).
inline proto::Ip6 gid_of(const proto::Packet& p, bool src) {
  const proto::Ip6& a = src ? p.ip_src : p.ip_dst;
  if (p.ip_version == 6) return a;
  proto::Ip6 g{};
  g[10] = g[11] = 0xFF;
  std::memcpy(g.data() + 12, a.data(), 4);
  return g;
}

// The node GUID a RoCE device derives from its MAC (EUI-64: the U/L bit flipped, ff:fe inserted),
// as the REQ's and REP's local CA GUID.
inline uint64_t ca_guid(const proto::Mac& m) {
  const uint8_t b[8] = {uint8_t(m[0] ^ 2), m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]};
  uint64_t g = 0;
  for (uint8_t x : b) g = g << 8 | x;
  return g;
}

}  // namespace uroce::engine::cm
