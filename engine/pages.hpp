// The process's pages behind a registration. A registration pins nothing (this is user space:
// the engine copies with the CPU), so what it checks is whether the pages are there:
// - an ordinary MR: every page mapped when it is registered (ibv_reg_mr says EFAULT otherwise,
//   as the kernel does when it cannot pin the range);
// - an on-demand paging MR (IBV_ACCESS_ON_DEMAND, explicit or implicit): nothing at
//   registration; each access faults its pages in first, as an RNIC's ODP page fault does, and
//   an access to pages that are not mapped, or not writable when it writes, fails (a NAK or an
//   error completion) instead of touching them.
#pragma once
#include <cstdint>

namespace uroce::engine {

// Is every page of [addr, addr + len) mapped? (len 0: yes.)
bool pages_mapped(const void* addr, uint64_t len);

// Faults [addr, addr + len) in for reading, or for writing when `write` (the kernel's
// MADV_POPULATE_READ / _WRITE: a page that is not mapped, or a write to one that is not
// writable, fails without a signal). Where the kernel is older than 5.14 it checks that the
// pages are mapped (pages_mapped). len 0: true.
bool pages_fault_in(const void* addr, uint64_t len, bool write);

}  // namespace uroce::engine
