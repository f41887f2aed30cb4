// An MPI job of two ranks that checks its data: a ping-pong of growing messages (each byte a
// function of size, iteration and rank, checked on arrival) and allreduces (sum and max of values
// each rank computes, checked against the closed form). Prints one line per check and
// "mpi_check: OK" when every byte and every value was right; exits 1 at the first wrong one.
// Run by tests/ucx/ucx_test.py (scenario mpi) with one rank in each network namespace, over
// Open MPI's UCX PML on uroce.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

uint8_t pattern(size_t i, int size_log2, int iter, int from) {
  return uint8_t(i * 131 + size_t(size_log2) * 17 + size_t(iter) * 7 + size_t(from) * 101);
}

[[noreturn]] void fail(const char* what, long a, long b) {
  std::fprintf(stderr, "mpi_check: FAILED: %s (%ld vs %ld)\n", what, a, b);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks != 2) fail("needs exactly 2 ranks", nranks, 2);
  const int peer = 1 - rank;
  char host[MPI_MAX_PROCESSOR_NAME];
  int hlen = 0;
  MPI_Get_processor_name(host, &hlen);
  std::printf("mpi_check: rank %d of %d on %s\n", rank, nranks, host);

  // Ping-pong: 1 B .. 4 MiB, 20 round trips per size; rank 0 sends first, rank 1 answers with its
  // own pattern. Every received byte is checked.
  constexpr int kIters = 20;
  constexpr int kMaxLog2 = 22;
  std::vector<uint8_t> out(size_t(1) << kMaxLog2), in(size_t(1) << kMaxLog2);
  for (int lg = 0; lg <= kMaxLog2; lg += 2) {
    const size_t n = size_t(1) << lg;
    double t0 = MPI_Wtime();
    for (int it = 0; it < kIters; ++it) {
      for (size_t i = 0; i < n; ++i) out[i] = pattern(i, lg, it, rank);
      if (rank == 0) {
        MPI_Send(out.data(), int(n), MPI_BYTE, peer, it, MPI_COMM_WORLD);
        MPI_Recv(in.data(), int(n), MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(in.data(), int(n), MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(out.data(), int(n), MPI_BYTE, peer, it, MPI_COMM_WORLD);
      }
      for (size_t i = 0; i < n; ++i)
        if (in[i] != pattern(i, lg, it, peer)) fail("ping-pong byte", long(in[i]), long(pattern(i, lg, it, peer)));
    }
    const double us = (MPI_Wtime() - t0) / kIters / 2 * 1e6;
    if (rank == 0) std::printf("mpi_check: ping-pong %8zu B x %d verified, %.1f us one way\n", n, kIters, us);
  }

  // Allreduce: 1000 rounds of 1024 int64 values; rank r contributes (r + 1) * (round + i).
  constexpr int kRounds = 1000, kCount = 1024;
  std::vector<int64_t> mine(kCount), sum(kCount), mx(kCount);
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kCount; ++i) mine[size_t(i)] = int64_t(rank + 1) * (round + i);
    MPI_Allreduce(mine.data(), sum.data(), kCount, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(mine.data(), mx.data(), kCount, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 0; i < kCount; ++i) {
      if (sum[size_t(i)] != 3 * int64_t(round + i)) fail("allreduce sum", long(sum[size_t(i)]), 3L * (round + i));
      if (mx[size_t(i)] != 2 * int64_t(round + i)) fail("allreduce max", long(mx[size_t(i)]), 2L * (round + i));
    }
  }
  if (rank == 0) std::printf("mpi_check: allreduce sum and max of %d x int64, %d rounds, verified\n", kCount, kRounds);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::printf("mpi_check: OK\n");
  MPI_Finalize();
  return 0;
}
