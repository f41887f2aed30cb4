// oracle_gen: random valid RoCEv2 packets made with proto::build(), for the independent oracle
// (oracle.py checks them with scapy and tshark).
//
// usage: oracle_gen SEED COUNT OUT.pcap OUT.txt
//
// Every valid opcode of the table (RC, UC, UD, CNP) appears, cycled in turn, each over IPv4 and
// IPv6, with random header fields, 0 to 4096 bytes of payload on opcodes that carry payload
// (none on the others), sometimes a VLAN tag. OUT.txt has one line per packet with what was
// asked of build(), all decimal: "index opcode dest_qp psn ip_version payload_len vlan exts
// reth_va reth_rkey reth_len aeth_syndrome aeth_msn deth_qkey deth_srcqp atomic_swap_add
// atomic_compare atomic_ack_orig atomic_va atomic_rkey" (exts: the table's Ext mask).
//
// Frames shorter than Ethernet's 60-byte minimum (only a zero-payload SEND/WRITE over IPv4 without
// a tag, 58 bytes) get a 2-byte zero l2_trailer, as a NIC pads them; tshark 4.0 misreads the
// unpadded 58-byte frame as RPC-over-RDMA (see ../../../shared/notes/tools-facts.md). The
// unpadded case is covered by the golden capture rxe/zero_len_send.pcap.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "proto/aeth.hpp"
#include "tools/pcap/pcapio.hpp"
#include "proto/opcode.hpp"
#include "proto/packet.hpp"

using namespace uroce::proto;

namespace {

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  uint64_t u64() { return g_(); }
  uint32_t below(uint32_t n) { return uint32_t(g_() % n); }
  bool coin(uint32_t one_in = 2) { return below(one_in) == 0; }
  uint32_t bits(unsigned n) { return uint32_t(g_() & ((uint64_t(1) << n) - 1)); }

 private:
  std::mt19937_64 g_;
};

uint8_t random_syndrome(Rng& r) {
  switch (r.below(3)) {
    case 0: return Syndrome::ack(uint8_t(r.bits(5))).encode();
    case 1: return Syndrome::rnr(uint8_t(r.bits(5))).encode();
    default: return Syndrome::nak(NakCode(r.below(5))).encode();
  }
}

size_t random_payload_len(Rng& r) {
  switch (r.below(4)) {
    case 0: return r.below(9);          // 0..8: pad counts 0..3, zero length
    case 1: return r.below(257);
    case 2: return 4096 - r.below(3);   // near the largest path MTU
    default: return r.below(4097);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: oracle_gen SEED COUNT OUT.pcap OUT.txt\n");
    return 2;
  }
  const uint64_t seed = std::strtoull(argv[1], nullptr, 0);
  const size_t count = std::strtoull(argv[2], nullptr, 0);
  Rng r(seed);

  std::vector<uint8_t> opcodes;
  for (const OpcodeInfo& o : kOpcodes)
    if (o.valid) opcodes.push_back(o.code);

  std::vector<std::vector<uint8_t>> frames;
  FILE* meta = std::fopen(argv[4], "w");
  if (!meta) {
    std::perror(argv[4]);
    return 2;
  }
  std::vector<uint8_t> payload(4096);
  static const uint8_t kZeroTrailer[60] = {};
  for (size_t i = 0; i < count; ++i) {
    Packet p;
    // Each opcode in turn; IPv4 and IPv6 alternate per round so every opcode gets both.
    p.opcode = opcodes[i % opcodes.size()];
    const OpcodeInfo& info = p.info();
    p.ip_version = ((i / opcodes.size()) % 2) ? 6 : 4;
    for (auto& b : p.eth_dst) b = uint8_t(r.bits(8));
    for (auto& b : p.eth_src) b = uint8_t(r.bits(8));
    p.eth_src[0] &= 0xFE;  // unicast
    p.eth_dst[0] &= 0xFE;
    if (r.coin(8)) {
      p.vlan_count = 1;
      p.vlan_tpid[0] = kEtherTypeVlan;
      p.vlan_tci[0] = uint16_t(r.bits(16));
    }
    if (p.ip_version == 4) {
      p.ip_src = {10, uint8_t(r.bits(8)), uint8_t(r.bits(8)), uint8_t(1 + r.below(254))};
      p.ip_dst = {192, 168, uint8_t(r.bits(8)), uint8_t(1 + r.below(254))};
      p.ipv4_id = uint16_t(r.bits(16));
      p.ipv4_flags_frag = r.coin() ? 0x4000 : 0;
    } else {
      p.ip_src = {0xfd, 0x00};
      p.ip_dst = {0xfd, 0x00};
      for (size_t k = 2; k < 16; ++k) {
        p.ip_src[k] = uint8_t(r.bits(8));
        p.ip_dst[k] = uint8_t(r.bits(8));
      }
      p.flow_label = r.bits(20);
    }
    p.dscp = uint8_t(r.bits(6));
    p.ecn = uint8_t(r.bits(2));
    p.ttl = uint8_t(16 + r.below(240));  // tshark warns about TTL below 5, an IP matter
    p.udp_sport = uint16_t(0xC000 | r.bits(14));
    // IPv6 gets a real UDP checksum (RFC 8200; tshark flags a zero one); IPv4 either.
    p.udp_checksum = p.ip_version == 6 || r.coin();

    p.solicited = r.coin();
    p.migreq = r.coin();
    p.pkey = uint16_t(r.bits(16));
    p.fecn = r.coin(4);
    p.becn = r.coin(4);
    p.dest_qp = 2 + r.below(0xFFFFFE);  // not QP0/QP1: tshark decodes those as MADs
    p.ack_req = r.coin();
    p.psn = r.bits(24);
    if (info.transport == Transport::CNP) {
      p.becn = true;  // a CNP always carries BECN
      p.solicited = p.migreq = p.ack_req = false;
    }
    p.reth = {r.u64(), uint32_t(r.u64()), uint32_t(r.u64())};
    p.aeth = {random_syndrome(r), r.bits(24)};
    p.atomic = {r.u64() & ~uint64_t(7), uint32_t(r.u64()), r.u64(), r.u64()};
    p.atomic_ack_orig = r.u64();
    p.imm = uint32_t(r.u64());
    p.ieth_rkey = uint32_t(r.u64());
    p.xrceth = {r.bits(24), 0};
    p.deth = {uint32_t(r.u64()), 0, r.bits(24)};

    size_t plen = info.payload ? random_payload_len(r) : 0;
    for (size_t k = 0; k < plen; ++k) payload[k] = uint8_t(r.bits(8));
    p.payload = std::span<const uint8_t>(payload.data(), plen);

    size_t len = frame_len(p);
    if (len < 60) p.l2_trailer = std::span<const uint8_t>(kZeroTrailer, 60 - len);
    std::vector<uint8_t> f(frame_len(p));
    BuildResult b = build(p, f);
    if (!b.ok() || b.len != f.size()) {
      std::fprintf(stderr, "oracle_gen: build failed for opcode 0x%02x: %s\n", p.opcode,
                   std::string(error_name(b.error)).c_str());
      return 1;
    }
    // Our own parse must accept it too; the oracle is about what others make of it.
    Packet q;
    ParseResult pr = parse(f, q);
    if (!pr.ok()) {
      std::fprintf(stderr, "oracle_gen: packet %zu (opcode 0x%02x) does not parse: %s\n", i, p.opcode,
                   pr.message().c_str());
      return 1;
    }
    std::fprintf(meta,
                 "%zu %u %" PRIu32 " %" PRIu32 " %u %zu %u %u %" PRIu64 " %" PRIu32 " %" PRIu32 " %u %" PRIu32
                 " %" PRIu32 " %" PRIu32 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu32 "\n",
                 i, p.opcode, p.dest_qp, p.psn, p.ip_version, plen, p.vlan_count, info.exts, p.reth.va, p.reth.rkey,
                 p.reth.dma_len, p.aeth.syndrome, p.aeth.msn, p.deth.qkey, p.deth.src_qp, p.atomic.swap_add,
                 p.atomic.compare, p.atomic_ack_orig, p.atomic.va, p.atomic.rkey);
    frames.push_back(std::move(f));
  }
  std::fclose(meta);
  std::string err;
  if (!uroce::pcapio::write_file(argv[3], frames, err)) {
    std::fprintf(stderr, "oracle_gen: %s: %s\n", argv[3], err.c_str());
    return 1;
  }
  std::printf("oracle_gen: %zu packets, %zu opcodes, seed %" PRIu64 "\n", frames.size(), opcodes.size(), seed);
  return 0;
}
