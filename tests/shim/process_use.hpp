// What the shim's long-running test programs (stress.cpp, soak.cpp) watch of their own process:
// resident memory and open file descriptors, compared early and late in a run.
#pragma once
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace shim_test {

// Resident memory, KiB (/proc/self/statm).
inline uint64_t resident_kib() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return uint64_t(resident) * uint64_t(sysconf(_SC_PAGESIZE)) / 1024;
}

// Open file descriptors now.
inline uint32_t open_fds() {
  uint32_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n - 3;  // ".", ".." and the directory's own
}

// The fewest open descriptors over 10 looks 20 ms apart: one that a library holds for a moment
// (a file under /proc being read, a connection attempt) is not counted, one that stays is.
inline uint32_t settled_fds() {
  uint32_t n = open_fds();
  for (int i = 0; i < 9; ++i) {
    usleep(20000);
    n = std::min(n, open_fds());
  }
  return n;
}

}  // namespace shim_test
