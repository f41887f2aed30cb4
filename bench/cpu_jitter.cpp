// The machine's own noise floor for latency tails: a thread that only reads the TSC, in a loop,
// for SECONDS (default 2), counts the gaps in which it did not run (the kernel's ticks and
// interrupts, the hypervisor's exits, other threads). Run one per core at once, as a latency
// test's two processes run: a round trip is late whenever either core has such a gap in it.
//   cpu_jitter [SECONDS]      (docs/performance.md, "Tail latency")
#include <x86intrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const double secs = argc > 1 ? std::atof(argv[1]) : 2.0;
  using clk = std::chrono::steady_clock;
  const auto c0 = clk::now();
  const unsigned long long t0 = __rdtsc();
  while (clk::now() - c0 < std::chrono::milliseconds(200)) {
  }
  const double per_ns = double(__rdtsc() - t0) / double(std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now() - c0).count());
  const unsigned long long end = __rdtsc() + (unsigned long long)(secs * 1e9 * per_ns);
  unsigned long long prev = __rdtsc();
  long n1 = 0, n5 = 0, n20 = 0, n100 = 0;
  double lost = 0, longest = 0;
  for (;;) {
    const unsigned long long t = __rdtsc();
    const double gap = double(t - prev) / per_ns;
    prev = t;
    if (gap > 1000) {
      ++n1;
      lost += gap;
      n5 += gap > 5000;
      n20 += gap > 20000;
      n100 += gap > 100000;
      if (gap > longest) longest = gap;
    }
    if (t > end) break;
  }
  std::printf("%.2f GHz TSC, %.1f s: gaps over 1 us %ld (%.0f/s), over 5 us %ld (%.0f/s), over 20 us %ld, over 100 us %ld, "
              "longest %.1f us, time lost %.2f%%\n",
              per_ns, secs, n1, double(n1) / secs, n5, double(n5) / secs, n20, n100, longest / 1000, 100 * lost / (secs * 1e9));
  return 0;
}
