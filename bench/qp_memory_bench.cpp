// Memory per QP (issue 30): N RC QPs, each with its own CQ of the same depth, created on one
// device and connected in pairs to each other (loopback), as perftest's and MPI's QPs are:
// max_send_sge and max_recv_sge 1, max_dest_rd_atomic 16. For each queue depth (and with the
// inline data a latency test asks for) the heap the engine holds per QP+CQ (mallinfo2: what the
// QP's and CQ's allocations take) and the resident memory it adds (/proc/self/statm), measured
// around the creation of N of them. The engine alone: no DPDK, no shim (the shim adds its own
// wrapper objects: docs/performance.md). scripts/bench-scale.sh runs it.
//
//   qp_memory_bench [--qps N]
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "tests/support/pair.hpp"

using namespace uroce::engine;

namespace {

size_t heap_in_use() {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

size_t resident_bytes() {
  long pages = 0, res = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f) {
    if (std::fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    std::fclose(f);
  }
  return size_t(res) * size_t(sysconf(_SC_PAGESIZE));
}

struct Row {
  uint32_t depth;
  uint32_t inline_bytes;
  const char* what;
};

}  // namespace

int main(int argc, char** argv) {
  uint32_t n = 1000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--qps") && i + 1 < argc) n = uint32_t(std::atoi(argv[++i])) & ~1u;
    else {
      std::fprintf(stderr, "usage: qp_memory_bench [--qps N]\n");
      return 2;
    }
  }
  const Row rows[] = {{1, 0, "depth 1"},
                      {16, 0, "depth 16"},
                      {128, 0, "depth 128 (perftest's bw tests)"},
                      {128, 220, "depth 128, 220 B inline (perftest's lat tests)"},
                      {1024, 0, "depth 1024"}};
  std::printf("RC QP + its CQ, %u of them per row, connected in pairs (loopback); max_send_sge = max_recv_sge = 1,\n"
              "max_dest_rd_atomic 16. Bytes per QP+CQ: the engine's heap (mallinfo2) and resident memory.\n\n",
              n);
  std::printf("| %-46s | %10s | %10s |\n", "queues", "heap / QP", "resident / QP");
  std::printf("|%s|%s|%s|\n", std::string(48, '-').c_str(), std::string(12, '-').c_str(), std::string(15, '-').c_str());
  std::fflush(stdout);
  for (const Row& r : rows) {
    // Each row in a process of its own: memory an earlier row gave back is not reused here.
    const pid_t child = fork();
    if (child < 0) return 1;
    if (child > 0) {
      int st = 0;
      if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
      continue;
    }
    uroce::engine::FakeWire wire(64, 9216, 1);
    Device::Config cfg;
    cfg.mac = {0x02, 0, 0, 0, 0, 0x0a};
    cfg.gid = uroce::test::v4gid(198, 18, 0, 10);
    cfg.seed = 7;
    cfg.max_qp = n;
    auto dev = std::make_unique<Device>(wire.a(), wire.clock(), cfg);
    Pd* pd = dev->alloc_pd();
    std::vector<Qp*> qps(n);
    const size_t heap0 = heap_in_use(), res0 = resident_bytes();
    for (uint32_t i = 0; i < n; ++i) {
      Cq* cq = dev->create_cq(r.depth);
      QpInitAttr ia;
      ia.pd = pd;
      ia.send_cq = ia.recv_cq = cq;
      ia.cap.max_send_wr = ia.cap.max_recv_wr = r.depth;
      ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
      ia.cap.max_inline_data = r.inline_bytes;
      qps[i] = cq ? dev->create_qp(ia) : nullptr;
      if (!qps[i]) {
        std::fprintf(stderr, "qp_memory_bench: QP %u of %u not created\n", i, n);
        return 1;
      }
    }
    uroce::test::Path p;
    for (uint32_t i = 0; i < n; i += 2) {
      if (uroce::test::connect_qp(*dev, qps[i], *dev, *qps[i + 1], p) ||
          uroce::test::connect_qp(*dev, qps[i + 1], *dev, *qps[i], p)) {
        std::fprintf(stderr, "qp_memory_bench: pair %u not connected\n", i / 2);
        return 1;
      }
    }
    const size_t heap1 = heap_in_use(), res1 = resident_bytes();
    std::printf("| %-46s | %10zu | %13zu |\n", r.what, (heap1 - heap0) / n, res1 > res0 ? (res1 - res0) / n : 0);
    std::fflush(stdout);
    _exit(0);
  }
  return 0;
}
