#include "engine/sge.hpp"

#include <cstring>

#include "engine/dma.hpp"
#include "engine/qp.hpp"

namespace uroce::engine {

std::span<const uint8_t> sge_gather_slow(const SendSide& t, const SendWqe& w, uint32_t off, uint32_t len,
                                         std::vector<uint8_t>& scratch) {
  if (len == 0) return {};
  const Sge* sge = t.sge(w);
  uint8_t* const* host = t.host(w);
  // The common case: the bytes lie in one SGE (the first piece covers them all).
  const uint8_t* direct = nullptr;
  sge_walk(sge, w.num_sge(), off, len, [&](uint32_t i, uint32_t in, uint32_t n) {
    if (n == len) direct = host[i] + in;
    return false;
  });
  if (direct) return {direct, len};
  uint32_t done = 0;
  sge_walk(sge, w.num_sge(), off, len, [&](uint32_t i, uint32_t in, uint32_t n) {
    dma_copy(scratch.data() + done, host[i] + in, n);
    done += n;
    return true;
  });
  return {scratch.data(), len};
}

void sge_scatter(const SendSide& t, const SendWqe& w, uint32_t off, const uint8_t* data, uint32_t len) {
  uint8_t* const* host = t.host(w);
  sge_walk(t.sge(w), w.wr.num_sge, off, len, [&](uint32_t i, uint32_t in, uint32_t n) {
    dma_copy(host[i] + in, data, n);
    data += n;
    return true;
  });
}

uint32_t sge_scatter_recv_crc(const RecvWqe& r, const MrTable& mrs, const Pd* pd, uint32_t off, const uint8_t* data,
                              uint32_t len, uint32_t& crc) {
  return sge_walk(r.sge, r.num_sge, off, len, [&](uint32_t i, uint32_t in, uint32_t n) {
    AccessCheck c = check_local(mrs, r.sge[i].lkey, pd, r.sge[i].addr + in, n, kLocalWrite);
    if (!c.ok) return false;
    crc = dma_copy_crc(c.host, data, n, crc);
    data += n;
    return true;
  });
}

uint32_t sge_scatter_recv(const RecvWqe& r, const MrTable& mrs, const Pd* pd, uint32_t off, const uint8_t* data,
                          uint32_t len) {
  return sge_walk(r.sge, r.num_sge, off, len, [&](uint32_t i, uint32_t in, uint32_t n) {
    AccessCheck c = check_local(mrs, r.sge[i].lkey, pd, r.sge[i].addr + in, n, kLocalWrite);
    if (!c.ok) return false;
    dma_copy(c.host, data, n);
    data += n;
    return true;
  });
}

}  // namespace uroce::engine
