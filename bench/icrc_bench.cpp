// ICRC throughput: the whole ICRC of a RoCEv2 frame (icrc_compute, masking included) for 64 B,
// 256 B, 1 KiB and 4 KiB payloads, and crc32 alone over 1 MiB, next to the portable
// slice-by-8 and bytewise table CRCs over the same bytes, in the same run.
// scripts/bench-icrc.sh runs it and prints the table.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "proto/icrc.hpp"
#include "proto/packet.hpp"

using namespace uroce::proto;

namespace {

constexpr size_t kRaw = size_t(1) << 20;  // the 1 MiB case: plain data, no packet

// The bytes the ICRC covers for a given size: for a packet size, IP header .. last pad byte of
// an IPv4 RC SEND ONLY with that payload; for kRaw, 1 MiB of random data.
struct Input {
  std::vector<uint8_t> frame;
  std::vector<uint8_t> payload;
  const uint8_t* l3 = nullptr;
  size_t len = 0;
};

Input make_input(size_t size) {
  Input in;
  std::mt19937 rng{static_cast<uint32_t>(size)};
  if (size == kRaw) {
    in.frame.resize(size);
    for (auto& b : in.frame) b = uint8_t(rng());
    in.l3 = in.frame.data();
    in.len = size;
    return in;
  }
  in.payload.resize(size);
  for (auto& b : in.payload) b = uint8_t(rng());
  Packet p;
  p.ip_src = {10, 0, 0, 1};
  p.ip_dst = {10, 0, 0, 2};
  p.opcode = op::kSendOnly;
  p.dest_qp = 0x11;
  p.payload = in.payload;
  in.frame.resize(frame_len(p));
  build(p, in.frame);
  in.l3 = in.frame.data() + 14;
  in.len = in.frame.size() - 14 - kIcrcSize;
  return in;
}

void BM_Icrc(benchmark::State& st) {
  const size_t size = size_t(st.range(0));
  Input in = make_input(size);
  for (auto _ : st) {
    uint32_t c = size == kRaw ? crc32(0, in.l3, in.len) : icrc_compute(in.l3, in.len, 20);
    benchmark::DoNotOptimize(c);
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(in.len));
  st.SetLabel(std::string(crc32_backend()) + (size == kRaw ? ", crc32 only" : ", whole ICRC of the frame"));
}

template <uint32_t (*F)(uint32_t, const uint8_t*, size_t)>
void BM_Plain(benchmark::State& st) {
  Input in = make_input(size_t(st.range(0)));
  for (auto _ : st) {
    uint32_t c = F(0, in.l3, in.len);
    benchmark::DoNotOptimize(c);
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(in.len));
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t s : {int64_t(64), int64_t(256), int64_t(1024), int64_t(4096), int64_t(kRaw)}) b->Arg(s);
}

// A payload copied with its CRC (crc32_copy, one pass), against the two passes it replaces
// (memcpy, then crc32 of the copy) and against memcpy alone; 4 KiB (a packet) and 1 MiB.
enum class Copy { Memcpy, MemcpyThenCrc, Fused, Avx2 };
template <Copy K>
void BM_Copy(benchmark::State& st) {
  const size_t n = size_t(st.range(0));
  std::vector<uint8_t> src(n), dst(n);
  std::mt19937 rng{static_cast<uint32_t>(n)};
  for (auto& b : src) b = uint8_t(rng());
  for (auto _ : st) {
    uint32_t c = 0;
    if constexpr (K == Copy::Memcpy) std::memcpy(dst.data(), src.data(), n);
    if constexpr (K == Copy::MemcpyThenCrc) {
      std::memcpy(dst.data(), src.data(), n);
      c = crc32(0, dst.data(), n);
    }
    if constexpr (K == Copy::Fused) c = crc32_copy(0, dst.data(), src.data(), n);
    if constexpr (K == Copy::Avx2) {
      if (!crc32_copy_with(CrcCopyKernel::Avx2, c, dst.data(), src.data(), n)) {
        st.SkipWithError("no AVX2 and VPCLMULQDQ on this CPU");
        break;
      }
    }
    benchmark::DoNotOptimize(c);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(n));
  if (K == Copy::Fused) st.SetLabel(crc32_copy_backend());
}

void copy_sizes(benchmark::internal::Benchmark* b) {
  for (int64_t s : {int64_t(4096), int64_t(kRaw)}) b->Arg(s);
}

}  // namespace

BENCHMARK(BM_Copy<Copy::Memcpy>)->Name("BM_CopyMemcpy")->Apply(copy_sizes);
BENCHMARK(BM_Copy<Copy::Avx2>)->Name("BM_CopyAvx2")->Apply(copy_sizes);
BENCHMARK(BM_Copy<Copy::MemcpyThenCrc>)->Name("BM_CopyThenCrc")->Apply(copy_sizes);
BENCHMARK(BM_Copy<Copy::Fused>)->Name("BM_CopyFused")->Apply(copy_sizes);
BENCHMARK(BM_Icrc)->Apply(sizes);
BENCHMARK(BM_Plain<crc32_slice8>)->Name("BM_Slice8")->Apply(sizes);
BENCHMARK(BM_Plain<crc32_bytewise>)->Name("BM_Bytewise")->Apply(sizes);

BENCHMARK_MAIN();
