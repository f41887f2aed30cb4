// ICRC: the invariant CRC that ends every RoCEv2 packet.
//
// CRC-32 (the Ethernet/zlib polynomial, reflected, init ~0, final ~) over:
//   8 bytes of 0xFF (the masked LRH of InfiniBand), then the IP header, UDP header, BTH,
//   extension headers, payload and pad, with the fields that routers may change masked to ones:
//   IPv4 TOS, TTL and header checksum; IPv6 traffic class, flow label and hop limit;
//   the UDP checksum; BTH byte 4 (FECN, BECN, reserved).
// It goes on the wire least significant byte first.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

namespace uroce::proto {

// Chainable reflected CRC-32, zlib convention: crc32(0, ...) starts; feed the result back in.
// Uses Intel ISA-L (runtime-dispatched to PCLMUL/VPCLMUL code) when built with it, otherwise
// a portable slice-by-8 table implementation.
uint32_t crc32(uint32_t crc, const uint8_t* data, size_t len);

// The portable implementations, exposed for tests and for the benchmark's baselines.
uint32_t crc32_slice8(uint32_t crc, const uint8_t* data, size_t len);
uint32_t crc32_bytewise(uint32_t crc, const uint8_t* data, size_t len);

// Which implementation crc32() uses: "isa-l" or "slice-by-8".
const char* crc32_backend();

// Copies len bytes from src to dst (which must not overlap) and returns crc32(crc, src, len),
// reading each byte once (proto/crc32_copy.cpp): the payload of a frame placed and checked in
// one pass: VPCLMULQDQ folding in 64-byte (AVX-512) or 32-byte (AVX2) registers, else memcpy,
// then crc32 of the bytes.
// Payloads from kCrcCopyMin bytes on are copied this way; below it a copy and one CRC call over
// the whole packet cost less.
inline constexpr size_t kCrcCopyMin = 256;
uint32_t crc32_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len);
const char* crc32_copy_backend();  // the kernel crc32_copy() uses on this CPU
// One kernel by name, for tests and the benchmark: false (nothing done) where this CPU lacks it
// or len is below its minimum (AVX-512: 256 bytes, AVX2: 128).
enum class CrcCopyKernel { Avx512, Avx2, TwoPass };
bool crc32_copy_with(CrcCopyKernel k, uint32_t& crc, uint8_t* dst, const uint8_t* src, size_t len);

// The ICRC of a RoCEv2 packet. `l3` runs from the first byte of the IP header to the last pad
// byte (the ICRC itself excluded). The IP version is read from the first nibble; `ip_header_len`
// is 40 for IPv6 or IHL*4 for IPv4 (20 to 60). The caller has checked that l3 holds at least
// the IP, UDP and BTH headers.
uint32_t icrc_compute(const uint8_t* l3, size_t len, size_t ip_header_len);
// The same ICRC of a frame being built, computed in place: the variant fields and the 8 bytes
// before `l3` (which must be writable: the Ethernet header) are masked for the CRC and then
// restored, so the frame is unchanged. No copy of the packet.
uint32_t icrc_compute_inplace(uint8_t* l3, size_t len, size_t ip_header_len);

}  // namespace uroce::proto
