#include "engine/sge.hpp"

#include <cstring>

#include "engine/dma.hpp"
#include "engine/qp.hpp"

namespace uroce::engine {

std::span<const uint8_t> sge_gather_slow(const SendWqe& w, uint32_t off, uint32_t len, std::vector<uint8_t>& scratch) {
  if (len == 0) return {};
  // The common case: the bytes lie in one SGE (the first piece covers them all).
  const uint8_t* direct = nullptr;
  sge_walk(w.sge, w.num_sge(), off, len, [&](uint32_t i, uint32_t in, uint32_t n) {
    if (n == len) direct = w.host[i] + in;
    return false;
  });
  if (direct) return {direct, len};
  uint32_t done = 0;
  sge_walk(w.sge, w.num_sge(), off, len, [&](uint32_t i, uint32_t in, uint32_t n) {
    dma_copy(scratch.data() + done, w.host[i] + in, n);
    done += n;
    return true;
  });
  return {scratch.data(), len};
}

void sge_scatter(SendWqe& w, uint32_t off, const uint8_t* data, uint32_t len) {
  sge_walk(w.sge, w.wr.num_sge, off, len, [&](uint32_t i, uint32_t in, uint32_t n) {
    dma_copy(w.host[i] + in, data, n);
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
