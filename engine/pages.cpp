// The process's pages behind a registration (engine/pages.hpp).
#include "engine/pages.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   // Linux 5.14 (uapi asm-generic/mman-common.h)
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace uroce::engine {

namespace {

uint64_t page_size() {
  static const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  return page;
}

// Does this kernel know MADV_POPULATE_*? (An older one says EINVAL for any range.) Asked once,
// on a page of the stack, which is mapped and writable.
bool have_populate() {
  static const bool have = [] {
    alignas(64) volatile char probe[1] = {0};
    const uintptr_t p = reinterpret_cast<uintptr_t>(&probe[0]) & ~(page_size() - 1);
    return madvise(reinterpret_cast<void*>(p), page_size(), MADV_POPULATE_READ) == 0;
  }();
  return have;
}

}  // namespace

bool pages_mapped(const void* addr, uint64_t len) {
  if (len == 0) return true;
  const uint64_t page = page_size();
  uint64_t start = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  const uint64_t end = reinterpret_cast<uintptr_t>(addr) + len;
  if (end < start) return false;
  static constexpr uint64_t kChunkPages = 1 << 16;
  std::vector<unsigned char> vec(std::min<uint64_t>(kChunkPages, (end - start + page - 1) / page));
  while (start < end) {
    const uint64_t n = std::min<uint64_t>(end - start, vec.size() * page);
    if (mincore(reinterpret_cast<void*>(start), n, vec.data()) != 0) return false;
    start += n;
  }
  return true;
}

bool pages_fault_in(const void* addr, uint64_t len, bool write) {
  if (len == 0) return true;
  const uint64_t page = page_size();
  const uint64_t start = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  const uint64_t end = reinterpret_cast<uintptr_t>(addr) + len;
  if (end < start) return false;  // wraps around the address space
  if (!have_populate()) return pages_mapped(addr, len);
  // ENOMEM: a page not mapped; EFAULT: it would raise SIGBUS; EINVAL: not allowed (a write to a
  // read-only mapping, PROT_NONE, device memory). Each is a failed fault, as on an RNIC.
  int rc;
  do {
    rc = madvise(reinterpret_cast<void*>(start), end - start, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
  } while (rc != 0 && (errno == EINTR || errno == EAGAIN));
  return rc == 0;
}

}  // namespace uroce::engine
