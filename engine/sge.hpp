// Scatter/gather over a list of SGEs: the one walk that finds which bytes of which SGE hold
// bytes [off, off + len) of a message. The requester gathers payloads from it, the completer
// scatters READ responses and atomic results into it, the responder scatters SENDs into a
// receive WQE (checking each piece against the memory keys).
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/types.hpp"

namespace uroce::engine {

// Calls fn(sge_index, offset_in_sge, n) for each piece of [off, off + len) in SGE order;
// stops early when fn returns false. Returns the bytes covered (len unless the SGEs end first
// or fn stopped).
template <typename Fn>
uint32_t sge_walk(const Sge* sge, uint32_t nsge, uint32_t off, uint32_t len, Fn&& fn) {
  uint32_t base = 0, done = 0;
  for (uint32_t i = 0; i < nsge && done < len; ++i) {
    const uint32_t l = sge[i].length;
    const uint32_t at = off + done;
    if (at < base + l) {
      const uint32_t in = at - base, n = std::min(l - in, len - done);
      if (!fn(i, in, n)) return done;
      done += n;
    }
    base += l;
  }
  return done;
}

struct SendWqe;
struct SendSide;
struct RecvWqe;
class MrTable;
struct Pd;

// Bytes [off, off + len) of a send WQE's local buffers: a direct span when they lie in one
// SGE, otherwise gathered into `scratch`.
std::span<const uint8_t> sge_gather_slow(const SendSide& t, const SendWqe& w, uint32_t off, uint32_t len,
                                         std::vector<uint8_t>& scratch);
inline std::span<const uint8_t> sge_gather(const SendSide& t, const SendWqe& w, uint32_t off, uint32_t len,
                                           std::vector<uint8_t>& scratch);
// Copies `len` bytes to byte offset `off` of a send WQE's local buffers (READ responses,
// atomic original values; the buffers were checked when the WQE started).
void sge_scatter(const SendSide& t, const SendWqe& w, uint32_t off, const uint8_t* data, uint32_t len);
// Copies a SEND's bytes to offset `off` of a receive WQE, each piece checked for local write
// access in `pd`. Returns the bytes written (less than len: too long, or a protection error).
uint32_t sge_scatter_recv(const RecvWqe& r, const MrTable& mrs, const Pd* pd, uint32_t off, const uint8_t* data,
                          uint32_t len);
// The same with the CRC-32 of the bytes written chained onto `crc`, in the same pass (a payload
// whose ICRC is checked as it is placed: Device::place_payload).
uint32_t sge_scatter_recv_crc(const RecvWqe& r, const MrTable& mrs, const Pd* pd, uint32_t off, const uint8_t* data,
                              uint32_t len, uint32_t& crc);

}  // namespace uroce::engine

#include "engine/qp.hpp"

namespace uroce::engine {
// The common case inline: one SGE (or inline data) holding the bytes.
inline std::span<const uint8_t> sge_gather(const SendSide& t, const SendWqe& w, uint32_t off, uint32_t len,
                                           std::vector<uint8_t>& scratch) {
  if (len == 0) return {};
  if (w.num_sge() == 1 && uint64_t(off) + len <= t.sge(w)[0].length) return {t.host(w)[0] + off, len};
  return sge_gather_slow(t, w, off, len, scratch);
}
}  // namespace uroce::engine
