// uroce-perf's output: perftest's header and result rows, the counters (--stats), and the
// error exit.
#pragma once
#include <cstdint>

#include "bench/perf/loops.hpp"

namespace uroce::perf {

struct Ctx;

// Prints "uroce-perf: <message>" to stderr and exits 1.
[[noreturn]] void die(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

void print_header(const Ctx& c);
void print_bw_row(uint64_t size, uint64_t iters, const BwResult& r);
void print_lat_row(uint64_t size, uint64_t iters, const LatResult& r);
void print_server_lat_row(uint64_t size, uint64_t iters);  // the server has no timings
void print_counters(const Ctx& c);                         // link and engine (--stats)

}  // namespace uroce::perf
