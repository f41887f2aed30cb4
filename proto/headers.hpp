// Header views: thin, non-owning windows over packet bytes with big-endian accessors.
//
// A view never checks bounds: the caller (parse(), or a builder that sized the buffer)
// guarantees that kSize bytes are there. View<const uint8_t> reads; View<uint8_t> also writes.
// Field layout follows the InfiniBand Architecture Specification vol. 1, ch. 9 (BTH and the
// extended transport headers) and Annex A17 (RoCEv2: IP/UDP encapsulation, port 4791).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "proto/bytes.hpp"

namespace uroce::proto {

inline constexpr uint16_t kRoceV2Port = 4791;
inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeIpv6 = 0x86DD;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;
inline constexpr uint16_t kEtherTypeQinQ = 0x88A8;
inline constexpr uint16_t kEtherTypeRoceV1 = 0x8915;
inline constexpr uint8_t kIpProtoIcmp = 1;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint8_t kIpProtoIcmp6 = 58;

template <typename Byte>
class ViewBase {
  static_assert(std::is_same_v<std::remove_const_t<Byte>, uint8_t>);

 public:
  static constexpr bool kMutable = !std::is_const_v<Byte>;
  constexpr explicit ViewBase(Byte* p) : p_(p) {}
  constexpr Byte* data() const { return p_; }

 protected:
  Byte* p_;
};

// The constructor and members every view takes from ViewBase (also used by arp.hpp, icmp.hpp);
// UROCE_VIEW_CTOR_FROM for a view built on another view (RETH and AtomicETH on VaRkeyView).
#define UROCE_VIEW_CTOR_FROM(Base) \
  using Base<Byte>::Base; \
  using ViewBase<Byte>::kMutable; \
  using ViewBase<Byte>::p_
#define UROCE_VIEW_CTOR(Name) UROCE_VIEW_CTOR_FROM(ViewBase)

// ---- Ethernet II (14 bytes) --------------------------------------------------------------
template <typename Byte>
struct EthView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(EthView);
  static constexpr size_t kSize = 14;
  const uint8_t* dst() const { return p_; }
  const uint8_t* src() const { return p_ + 6; }
  uint16_t ethertype() const { return load_be16(p_ + 12); }
  void set_dst(const uint8_t* mac) requires kMutable { std::memcpy(p_, mac, 6); }
  void set_src(const uint8_t* mac) requires kMutable { std::memcpy(p_ + 6, mac, 6); }
  void set_ethertype(uint16_t v) requires kMutable { store_be16(p_ + 12, v); }
};

// ---- 802.1Q / 802.1ad tag (4 bytes, after the MAC addresses: TCI then the inner type) -----
template <typename Byte>
struct VlanView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(VlanView);
  static constexpr size_t kSize = 4;
  uint16_t tci() const { return load_be16(p_); }
  uint8_t pcp() const { return p_[0] >> 5; }
  uint16_t vid() const { return tci() & 0x0FFF; }
  uint16_t inner_type() const { return load_be16(p_ + 2); }
  void set_tci(uint16_t v) requires kMutable { store_be16(p_, v); }
  void set_inner_type(uint16_t v) requires kMutable { store_be16(p_ + 2, v); }
};

// ---- IPv4 (20 bytes without options) ---------------------------------------------------------
template <typename Byte>
struct Ipv4View : ViewBase<Byte> {
  UROCE_VIEW_CTOR(Ipv4View);
  static constexpr size_t kSize = 20;
  uint8_t version() const { return p_[0] >> 4; }
  uint8_t ihl() const { return p_[0] & 0x0F; }  // in 32-bit words
  size_t header_len() const { return size_t(ihl()) * 4; }
  uint8_t tos() const { return p_[1]; }
  uint8_t dscp() const { return p_[1] >> 2; }
  uint8_t ecn() const { return p_[1] & 3; }
  uint16_t total_len() const { return load_be16(p_ + 2); }
  uint16_t id() const { return load_be16(p_ + 4); }
  uint16_t flags_frag() const { return load_be16(p_ + 6); }
  bool dont_fragment() const { return flags_frag() & 0x4000; }
  bool more_fragments() const { return flags_frag() & 0x2000; }
  uint16_t frag_offset() const { return flags_frag() & 0x1FFF; }
  uint8_t ttl() const { return p_[8]; }
  uint8_t protocol() const { return p_[9]; }
  uint16_t checksum() const { return load_be16(p_ + 10); }
  const uint8_t* src() const { return p_ + 12; }
  const uint8_t* dst() const { return p_ + 16; }

  void set_version_ihl(uint8_t ihl_words) requires kMutable { p_[0] = uint8_t(0x40 | (ihl_words & 0x0F)); }
  void set_tos(uint8_t dscp, uint8_t ecn) requires kMutable { p_[1] = uint8_t(dscp << 2 | (ecn & 3)); }
  void set_total_len(uint16_t v) requires kMutable { store_be16(p_ + 2, v); }
  void set_id(uint16_t v) requires kMutable { store_be16(p_ + 4, v); }
  void set_flags_frag(uint16_t v) requires kMutable { store_be16(p_ + 6, v); }
  void set_ttl(uint8_t v) requires kMutable { p_[8] = v; }
  void set_protocol(uint8_t v) requires kMutable { p_[9] = v; }
  void set_checksum(uint16_t v) requires kMutable { store_be16(p_ + 10, v); }
  void set_src(const uint8_t* a) requires kMutable { std::memcpy(p_ + 12, a, 4); }
  void set_dst(const uint8_t* a) requires kMutable { std::memcpy(p_ + 16, a, 4); }
};

// The IPv4 header checksum: inet_checksum() in proto/checksum.hpp.

// ---- IPv6 (40 bytes, no extension headers) ---------------------------------------------------
template <typename Byte>
struct Ipv6View : ViewBase<Byte> {
  UROCE_VIEW_CTOR(Ipv6View);
  static constexpr size_t kSize = 40;
  uint8_t version() const { return p_[0] >> 4; }
  uint8_t traffic_class() const { return uint8_t(load_be16(p_) >> 4); }
  uint8_t dscp() const { return traffic_class() >> 2; }
  uint8_t ecn() const { return traffic_class() & 3; }
  uint32_t flow_label() const { return load_be32(p_) & 0xFFFFF; }
  uint16_t payload_len() const { return load_be16(p_ + 4); }
  uint8_t next_header() const { return p_[6]; }
  uint8_t hop_limit() const { return p_[7]; }
  const uint8_t* src() const { return p_ + 8; }
  const uint8_t* dst() const { return p_ + 24; }

  void set_vtf(uint8_t tclass, uint32_t flow) requires kMutable {
    store_be32(p_, 6u << 28 | uint32_t(tclass) << 20 | (flow & 0xFFFFF));
  }
  void set_payload_len(uint16_t v) requires kMutable { store_be16(p_ + 4, v); }
  void set_next_header(uint8_t v) requires kMutable { p_[6] = v; }
  void set_hop_limit(uint8_t v) requires kMutable { p_[7] = v; }
  void set_src(const uint8_t* a) requires kMutable { std::memcpy(p_ + 8, a, 16); }
  void set_dst(const uint8_t* a) requires kMutable { std::memcpy(p_ + 24, a, 16); }
};

// ---- UDP (8 bytes) ---------------------------------------------------------------------------
template <typename Byte>
struct UdpView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(UdpView);
  static constexpr size_t kSize = 8;
  uint16_t src_port() const { return load_be16(p_); }
  uint16_t dst_port() const { return load_be16(p_ + 2); }
  uint16_t length() const { return load_be16(p_ + 4); }
  uint16_t checksum() const { return load_be16(p_ + 6); }
  void set_src_port(uint16_t v) requires kMutable { store_be16(p_, v); }
  void set_dst_port(uint16_t v) requires kMutable { store_be16(p_ + 2, v); }
  void set_length(uint16_t v) requires kMutable { store_be16(p_ + 4, v); }
  void set_checksum(uint16_t v) requires kMutable { store_be16(p_ + 6, v); }
};

// ---- BTH, Base Transport Header (12 bytes) ---------------------------------------------------
//  byte 0     opcode
//  byte 1     SE(7) M(6) PadCnt(5:4) TVer(3:0)
//  bytes 2-3  P_Key
//  byte 4     FECN(7) BECN(6) reserved(5:0)        <- masked to ones for the ICRC
//  bytes 5-7  destination QP
//  byte 8     AckReq(7) reserved(6:0)
//  bytes 9-11 PSN
template <typename Byte>
struct BthView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(BthView);
  static constexpr size_t kSize = 12;
  uint8_t opcode() const { return p_[0]; }
  bool solicited() const { return p_[1] & 0x80; }
  bool migreq() const { return p_[1] & 0x40; }
  uint8_t pad_count() const { return (p_[1] >> 4) & 3; }
  uint8_t tver() const { return p_[1] & 0x0F; }
  uint16_t pkey() const { return load_be16(p_ + 2); }
  bool fecn() const { return p_[4] & 0x80; }
  bool becn() const { return p_[4] & 0x40; }
  uint8_t resv6a() const { return p_[4] & 0x3F; }
  uint32_t dest_qp() const { return load_be24(p_ + 5); }
  bool ack_req() const { return p_[8] & 0x80; }
  uint8_t resv7() const { return p_[8] & 0x7F; }
  uint32_t psn() const { return load_be24(p_ + 9); }

  void set_opcode(uint8_t v) requires kMutable { p_[0] = v; }
  void set_flags(bool se, bool m, uint8_t pad, uint8_t tver) requires kMutable {
    p_[1] = uint8_t((se ? 0x80 : 0) | (m ? 0x40 : 0) | (pad & 3) << 4 | (tver & 0x0F));
  }
  void set_pkey(uint16_t v) requires kMutable { store_be16(p_ + 2, v); }
  void set_byte4(bool fecn, bool becn, uint8_t resv6a) requires kMutable {
    p_[4] = uint8_t((fecn ? 0x80 : 0) | (becn ? 0x40 : 0) | (resv6a & 0x3F));
  }
  void set_dest_qp(uint32_t v) requires kMutable { store_be24(p_ + 5, v); }
  void set_ack_req(bool a, uint8_t resv7 = 0) requires kMutable { p_[8] = uint8_t((a ? 0x80 : 0) | (resv7 & 0x7F)); }
  void set_psn(uint32_t v) requires kMutable { store_be24(p_ + 9, v); }
};

// ---- VA and R_Key: the first 12 bytes of both RETH and AtomicETH (IBA 9.3.3, 9.3.4) ----------
template <typename Byte>
struct VaRkeyView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(VaRkeyView);
  uint64_t va() const { return load_be64(p_); }
  uint32_t rkey() const { return load_be32(p_ + 8); }
  void set_va(uint64_t v) requires kMutable { store_be64(p_, v); }
  void set_rkey(uint32_t v) requires kMutable { store_be32(p_ + 8, v); }
};

// ---- RETH, RDMA Extended Transport Header (16 bytes): VA, R_Key, DMA length -------------------
template <typename Byte>
struct RethView : VaRkeyView<Byte> {
  UROCE_VIEW_CTOR_FROM(VaRkeyView);
  static constexpr size_t kSize = 16;
  uint32_t dma_len() const { return load_be32(p_ + 12); }
  void set_dma_len(uint32_t v) requires kMutable { store_be32(p_ + 12, v); }
};

// ---- AETH, ACK Extended Transport Header (4 bytes): syndrome, MSN ---------------------------
template <typename Byte>
struct AethView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(AethView);
  static constexpr size_t kSize = 4;
  uint8_t syndrome() const { return p_[0]; }
  uint32_t msn() const { return load_be24(p_ + 1); }
  void set_syndrome(uint8_t v) requires kMutable { p_[0] = v; }
  void set_msn(uint32_t v) requires kMutable { store_be24(p_ + 1, v); }
};

// ---- AtomicETH (28 bytes): VA, R_Key, swap (or add) data, compare data -----------------------
template <typename Byte>
struct AtomicEthView : VaRkeyView<Byte> {
  UROCE_VIEW_CTOR_FROM(VaRkeyView);
  static constexpr size_t kSize = 28;
  uint64_t swap_add() const { return load_be64(p_ + 12); }
  uint64_t compare() const { return load_be64(p_ + 20); }
  void set_swap_add(uint64_t v) requires kMutable { store_be64(p_ + 12, v); }
  void set_compare(uint64_t v) requires kMutable { store_be64(p_ + 20, v); }
};

// ---- AtomicAckETH (8 bytes): the original value at the target address -------------------
template <typename Byte>
struct AtomicAckEthView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(AtomicAckEthView);
  static constexpr size_t kSize = 8;
  uint64_t orig() const { return load_be64(p_); }
  void set_orig(uint64_t v) requires kMutable { store_be64(p_, v); }
};

// ---- ImmDt (4 bytes): immediate data, carried opaque (network order on the wire) -----------
template <typename Byte>
struct ImmDtView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(ImmDtView);
  static constexpr size_t kSize = 4;
  uint32_t imm() const { return load_be32(p_); }
  void set_imm(uint32_t v) requires kMutable { store_be32(p_, v); }
};

// ---- IETH (4 bytes): the R_Key to invalidate -------------------------------------------------
template <typename Byte>
struct IethView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(IethView);
  static constexpr size_t kSize = 4;
  uint32_t rkey() const { return load_be32(p_); }
  void set_rkey(uint32_t v) requires kMutable { store_be32(p_, v); }
};

// ---- XRCETH (4 bytes): the XRC SRQ a request is for (IBA annex A14) -------------------------
// Bits 31:24 reserved, bits 23:0 the XRC SRQ number: the target's receive queue, which also
// decides the memory protection of the request (the SRQ's XRC domain and PD).
template <typename Byte>
struct XrcethView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(XrcethView);
  static constexpr size_t kSize = 4;
  uint8_t resv() const { return p_[0]; }
  uint32_t srqn() const { return load_be32(p_) & 0xFFFFFF; }
  void set(uint32_t srqn, uint8_t resv = 0) requires kMutable { store_be32(p_, uint32_t(resv) << 24 | (srqn & 0xFFFFFF)); }
};

// ---- FETH (4 bytes): what a FLUSH asks for (IBA 1.5 annex A19) --------------------------------
// Bits 3:0 the placement type (bit 0 global visibility, bit 1 persistence: IBV_FLUSH_GLOBAL and
// IBV_FLUSH_PERSISTENT), bits 5:4 the selectivity level (0 the RETH's range, 1 the whole memory
// region the R_Key names), bits 31:6 reserved. The kernel's rxe (rxe_hdr.h, FETH_PLT_MASK and
// FETH_SEL_MASK) and rdma-core's ibv_placement_type / ibv_selectivity_level agree.
template <typename Byte>
struct FethView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(FethView);
  static constexpr size_t kSize = 4;
  uint8_t placement() const { return p_[3] & 0x0F; }
  uint8_t selectivity() const { return (p_[3] >> 4) & 0x03; }
  uint32_t resv() const { return load_be32(p_) >> 6; }
  void set(uint8_t placement, uint8_t selectivity, uint32_t resv = 0) requires kMutable {
    store_be32(p_, (resv << 6) | uint32_t(selectivity & 0x03) << 4 | (placement & 0x0F));
  }
};

// ---- DETH (8 bytes): Q_Key, reserved byte, source QP (UD only) -------------------------------
template <typename Byte>
struct DethView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(DethView);
  static constexpr size_t kSize = 8;
  uint32_t qkey() const { return load_be32(p_); }
  uint8_t resv() const { return p_[4]; }
  uint32_t src_qp() const { return load_be24(p_ + 5); }
  void set_qkey(uint32_t v) requires kMutable { store_be32(p_, v); }
  void set_src_qp(uint32_t v, uint8_t resv = 0) requires kMutable {
    p_[4] = resv;
    store_be24(p_ + 5, v);
  }
};

// ---- CNP body (16 reserved bytes after the BTH of opcode 0x81, RoCEv2 Annex A17.9.3) --------
template <typename Byte>
struct CnpView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(CnpView);
  static constexpr size_t kSize = 16;
  const uint8_t* reserved() const { return p_; }
  void set_reserved(const uint8_t* r) requires kMutable { std::memcpy(p_, r, 16); }
};

inline constexpr size_t kIcrcSize = 4;

}  // namespace uroce::proto
