// The one opcode table. Build, parse, validation and the dissector all read it; no other
// switch over opcodes decides which headers a packet carries.
//
// Opcode byte = transport (bits 7:5) | operation (bits 4:0). IBA vol. 1, table 38.
#pragma once
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace uroce::proto {

// The values are the opcode's bits 7:5 (XRC: 101); CNP's are RoCEv2's 100 (0x81).
enum class Transport : uint8_t { RC = 0, UC = 1, RD = 2, UD = 3, CNP = 4, XRC = 5, Unknown = 7 };

// Extension headers, as bits of a mask. Their order on the wire is always the canonical order
// of kExtOrder below, which is also the order of the bits, lowest first (IBA 9.2: DETH, XRCETH,
// RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH; IBA 1.5 annex A19 puts the FETH of a FLUSH
// between the BTH and the RETH).
enum Ext : uint16_t {
  kDeth = 1 << 0,
  kXrceth = 1 << 1,  // XRC requests: the XRC SRQ the message is for (IBA annex A14)
  kFeth = 1 << 2,
  kReth = 1 << 3,
  kAtomicEth = 1 << 4,
  kAeth = 1 << 5,
  kAtomicAckEth = 1 << 6,
  kImmDt = 1 << 7,
  kIeth = 1 << 8,
  kCnpBody = 1 << 9,
};
inline constexpr std::array<Ext, 10> kExtOrder = {kDeth,  kXrceth,       kFeth,  kReth, kAtomicEth,
                                                  kAeth,  kAtomicAckEth, kImmDt, kIeth, kCnpBody};

// Sizes in the bit order of Ext (a table, not a switch: parse and build call this per header).
inline constexpr std::array<uint8_t, 10> kExtSizes = {8, 4, 4, 16, 28, 4, 8, 4, 4, 16};
constexpr size_t ext_size(Ext e) {
  const unsigned i = unsigned(std::countr_zero(unsigned(e)));
  return e && i < kExtSizes.size() ? kExtSizes[i] : 0;
}
static_assert(ext_size(kDeth) == 8 && ext_size(kXrceth) == 4 && ext_size(kFeth) == 4 && ext_size(kReth) == 16 && ext_size(kAtomicEth) == 28 &&
              ext_size(kAeth) == 4 && ext_size(kAtomicAckEth) == 8 && ext_size(kImmDt) == 4 && ext_size(kIeth) == 4 &&
              ext_size(kCnpBody) == 16);
static_assert([] {
  for (size_t i = 0; i + 1 < kExtOrder.size(); ++i)
    if (kExtOrder[i] >= kExtOrder[i + 1]) return false;  // bit order == wire order
  return true;
}());
constexpr std::string_view ext_name(Ext e) {
  switch (e) {
    case kDeth: return "DETH";
    case kXrceth: return "XRCETH";
    case kFeth: return "FETH";
    case kReth: return "RETH";
    case kAtomicEth: return "AtomicETH";
    case kAeth: return "AETH";
    case kAtomicAckEth: return "AtomicAckETH";
    case kImmDt: return "ImmDt";
    case kIeth: return "IETH";
    case kCnpBody: return "CNP";
  }
  return "?";
}

// Where a packet sits in its message.
enum class Position : uint8_t { Only, First, Middle, Last, None };
// What the packet does.
enum class Operation : uint8_t {
  Send, Write, ReadRequest, ReadResponse, Ack, AtomicAck, CmpSwap, FetchAdd, Cnp,
  Flush,        // RDMA FLUSH (IBA 1.5 A19): make earlier writes visible or persistent; answered
                // by a zero-length RDMA READ response
  AtomicWrite,  // ATOMIC WRITE (IBA 1.5 A19): 8 bytes placed as one; answered the same way
};

struct OpcodeInfo {
  bool valid = false;
  uint8_t code = 0;
  std::string_view name = "UNKNOWN";  // e.g. "RC_SEND_FIRST", as rxe and tshark spell them
  Transport transport = Transport::Unknown;
  Operation op = Operation::Send;
  Position pos = Position::None;
  uint16_t exts = 0;      // mask of Ext
  bool payload = false;   // may carry payload
  bool request = false;   // requester -> responder (false: response / ACK)
  uint8_t hdr_bytes = 0;  // total size of the extension headers (derived from exts)

  constexpr bool has(Ext e) const { return exts & e; }
  constexpr size_t ext_bytes() const { return hdr_bytes; }
  constexpr bool starts_message() const { return pos == Position::First || pos == Position::Only; }
  constexpr bool ends_message() const { return pos == Position::Last || pos == Position::Only; }
};

namespace detail {

struct OpDef {
  uint8_t low;  // operation bits 4:0 (names: kNames below, the one table of them)
  Operation op;
  Position pos;
  uint16_t exts;
  bool payload;
  bool request;
};

// RC operations (IBA table 38). UC and UD use subsets of the same codes.
inline constexpr OpDef kOps[] = {
    {0x00, Operation::Send, Position::First, 0, true, true},
    {0x01, Operation::Send, Position::Middle, 0, true, true},
    {0x02, Operation::Send, Position::Last, 0, true, true},
    {0x03, Operation::Send, Position::Last, kImmDt, true, true},
    {0x04, Operation::Send, Position::Only, 0, true, true},
    {0x05, Operation::Send, Position::Only, kImmDt, true, true},
    {0x06, Operation::Write, Position::First, kReth, true, true},
    {0x07, Operation::Write, Position::Middle, 0, true, true},
    {0x08, Operation::Write, Position::Last, 0, true, true},
    {0x09, Operation::Write, Position::Last, kImmDt, true, true},
    {0x0a, Operation::Write, Position::Only, kReth, true, true},
    {0x0b, Operation::Write, Position::Only, kReth | kImmDt, true, true},
    {0x0c, Operation::ReadRequest, Position::Only, kReth, false, true},
    {0x0d, Operation::ReadResponse, Position::First, kAeth, true, false},
    {0x0e, Operation::ReadResponse, Position::Middle, 0, true, false},
    {0x0f, Operation::ReadResponse, Position::Last, kAeth, true, false},
    {0x10, Operation::ReadResponse, Position::Only, kAeth, true, false},
    {0x11, Operation::Ack, Position::None, kAeth, false, false},
    {0x12, Operation::AtomicAck, Position::None, kAeth | kAtomicAckEth, false, false},
    {0x13, Operation::CmpSwap, Position::Only, kAtomicEth, false, true},
    {0x14, Operation::FetchAdd, Position::Only, kAtomicEth, false, true},
    {0x16, Operation::Send, Position::Last, kIeth, true, true},
    {0x17, Operation::Send, Position::Only, kIeth, true, true},
    // IBA 1.5 annex A19 (memory placement extensions), RC only: rxe has them since Linux 6.2.
    {0x1c, Operation::Flush, Position::Only, kFeth | kReth, false, true},
    {0x1d, Operation::AtomicWrite, Position::Only, kReth, true, true},
};

// Names are stored, not concatenated at compile time: one literal per valid opcode.
struct Named {
  uint8_t code;
  std::string_view name;
};
inline constexpr Named kNames[] = {
    {0x00, "RC_SEND_FIRST"}, {0x01, "RC_SEND_MIDDLE"}, {0x02, "RC_SEND_LAST"},
    {0x03, "RC_SEND_LAST_WITH_IMMEDIATE"}, {0x04, "RC_SEND_ONLY"}, {0x05, "RC_SEND_ONLY_WITH_IMMEDIATE"},
    {0x06, "RC_RDMA_WRITE_FIRST"}, {0x07, "RC_RDMA_WRITE_MIDDLE"}, {0x08, "RC_RDMA_WRITE_LAST"},
    {0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE"}, {0x0a, "RC_RDMA_WRITE_ONLY"},
    {0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"}, {0x0c, "RC_RDMA_READ_REQUEST"},
    {0x0d, "RC_RDMA_READ_RESPONSE_FIRST"}, {0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE"},
    {0x0f, "RC_RDMA_READ_RESPONSE_LAST"}, {0x10, "RC_RDMA_READ_RESPONSE_ONLY"}, {0x11, "RC_ACKNOWLEDGE"},
    {0x12, "RC_ATOMIC_ACKNOWLEDGE"}, {0x13, "RC_COMPARE_SWAP"}, {0x14, "RC_FETCH_ADD"},
    {0x16, "RC_SEND_LAST_WITH_INVALIDATE"}, {0x17, "RC_SEND_ONLY_WITH_INVALIDATE"},
    {0x1c, "RC_FLUSH"}, {0x1d, "RC_ATOMIC_WRITE"},
    {0x20, "UC_SEND_FIRST"}, {0x21, "UC_SEND_MIDDLE"}, {0x22, "UC_SEND_LAST"},
    {0x23, "UC_SEND_LAST_WITH_IMMEDIATE"}, {0x24, "UC_SEND_ONLY"}, {0x25, "UC_SEND_ONLY_WITH_IMMEDIATE"},
    {0x26, "UC_RDMA_WRITE_FIRST"}, {0x27, "UC_RDMA_WRITE_MIDDLE"}, {0x28, "UC_RDMA_WRITE_LAST"},
    {0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE"}, {0x2a, "UC_RDMA_WRITE_ONLY"},
    {0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"},
    {0x64, "UD_SEND_ONLY"}, {0x65, "UD_SEND_ONLY_WITH_IMMEDIATE"},
    {0xa0, "XRC_SEND_FIRST"}, {0xa1, "XRC_SEND_MIDDLE"}, {0xa2, "XRC_SEND_LAST"},
    {0xa3, "XRC_SEND_LAST_WITH_IMMEDIATE"}, {0xa4, "XRC_SEND_ONLY"}, {0xa5, "XRC_SEND_ONLY_WITH_IMMEDIATE"},
    {0xa6, "XRC_RDMA_WRITE_FIRST"}, {0xa7, "XRC_RDMA_WRITE_MIDDLE"}, {0xa8, "XRC_RDMA_WRITE_LAST"},
    {0xa9, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE"}, {0xaa, "XRC_RDMA_WRITE_ONLY"},
    {0xab, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"}, {0xac, "XRC_RDMA_READ_REQUEST"},
    {0xad, "XRC_RDMA_READ_RESPONSE_FIRST"}, {0xae, "XRC_RDMA_READ_RESPONSE_MIDDLE"},
    {0xaf, "XRC_RDMA_READ_RESPONSE_LAST"}, {0xb0, "XRC_RDMA_READ_RESPONSE_ONLY"}, {0xb1, "XRC_ACKNOWLEDGE"},
    {0xb2, "XRC_ATOMIC_ACKNOWLEDGE"}, {0xb3, "XRC_COMPARE_SWAP"}, {0xb4, "XRC_FETCH_ADD"},
    {0xb6, "XRC_SEND_LAST_WITH_INVALIDATE"}, {0xb7, "XRC_SEND_ONLY_WITH_INVALIDATE"},
    {0x81, "CNP"},
};

constexpr std::string_view name_of(uint8_t code) {
  for (const auto& n : kNames)
    if (n.code == code) return n.name;
  return "UNKNOWN";
}

constexpr std::array<OpcodeInfo, 256> make_table() {
  std::array<OpcodeInfo, 256> t{};
  for (int i = 0; i < 256; ++i) {
    t[i].code = uint8_t(i);
    t[i].transport = Transport::Unknown;
  }
  auto put = [&](uint8_t code, Transport tr, const OpDef& d, uint16_t extra_exts) {
    OpcodeInfo& o = t[code];
    o.valid = true;
    o.code = code;
    o.name = name_of(code);
    o.transport = tr;
    o.op = d.op;
    o.pos = d.pos;
    o.exts = uint16_t(d.exts | extra_exts);
    o.payload = d.payload;
    o.request = d.request;
  };
  auto sizes = [](std::array<OpcodeInfo, 256>& tab) {
    for (OpcodeInfo& x : tab) {
      size_t n = 0;
      for (Ext e : kExtOrder)
        if (x.exts & e) n += ext_size(e);
      x.hdr_bytes = uint8_t(n);
    }
  };
  for (const OpDef& d : kOps) {
    put(d.low, Transport::RC, d, 0);
    // UC: SEND and WRITE only (no READ, no atomics, no ACKs, no invalidate).
    if (d.low <= 0x0b) put(uint8_t(0x20 | d.low), Transport::UC, d, 0);
    // UD: SEND ONLY and SEND ONLY with immediate, each with a DETH.
    if (d.low == 0x04 || d.low == 0x05) put(uint8_t(0x60 | d.low), Transport::UD, d, kDeth);
    // XRC: RC's operations up to SEND with Invalidate (not IBA 1.5's FLUSH and ATOMIC WRITE),
    // each request with an XRCETH right after the BTH; responses as RC's.
    if (d.low <= 0x17) put(uint8_t(0xa0 | d.low), Transport::XRC, d, d.request ? kXrceth : 0);
  }
  OpcodeInfo& cnp = t[0x81];
  cnp.valid = true;
  cnp.name = name_of(0x81);
  cnp.transport = Transport::CNP;
  cnp.op = Operation::Cnp;
  cnp.pos = Position::None;
  cnp.exts = kCnpBody;
  cnp.payload = false;
  cnp.request = false;
  sizes(t);
  return t;
}

}  // namespace detail

inline constexpr std::array<OpcodeInfo, 256> kOpcodes = detail::make_table();

constexpr const OpcodeInfo& opcode_info(uint8_t code) { return kOpcodes[code]; }

// The transport the high bits name, whether or not the opcode itself is valid.
constexpr Transport transport_bits(uint8_t code) {
  if (code == 0x81) return Transport::CNP;
  switch (code >> 5) {
    case 0: return Transport::RC;
    case 1: return Transport::UC;
    case 2: return Transport::RD;
    case 3: return Transport::UD;
    case 5: return Transport::XRC;
    default: return Transport::Unknown;
  }
}

constexpr std::string_view transport_name(Transport t) {
  switch (t) {
    case Transport::RC: return "RC";
    case Transport::UC: return "UC";
    case Transport::RD: return "RD";
    case Transport::UD: return "UD";
    case Transport::CNP: return "CNP";
    case Transport::XRC: return "XRC";
    case Transport::Unknown: return "unknown";
  }
  return "unknown";
}

// Opcode constants for code that builds specific packets (the engine).
namespace op {
inline constexpr uint8_t kSendFirst = 0x00, kSendMiddle = 0x01, kSendLast = 0x02, kSendLastImm = 0x03,
                         kSendOnly = 0x04, kSendOnlyImm = 0x05, kWriteFirst = 0x06, kWriteMiddle = 0x07,
                         kWriteLast = 0x08, kWriteLastImm = 0x09, kWriteOnly = 0x0a, kWriteOnlyImm = 0x0b,
                         kReadRequest = 0x0c, kReadRespFirst = 0x0d, kReadRespMiddle = 0x0e,
                         kReadRespLast = 0x0f, kReadRespOnly = 0x10, kAck = 0x11, kAtomicAck = 0x12,
                         kCmpSwap = 0x13, kFetchAdd = 0x14, kSendLastInv = 0x16, kSendOnlyInv = 0x17,
                         kFlush = 0x1c, kAtomicWrite = 0x1d, kCnp = 0x81;
inline constexpr uint8_t kUc = 0x20, kUd = 0x60, kXrc = 0xa0;
}  // namespace op

// Compile-time checks of the table against IBA table 38.
static_assert(kOpcodes[op::kWriteOnlyImm].exts == (kReth | kImmDt));
static_assert(kOpcodes[op::kReadRespMiddle].exts == 0 && kOpcodes[op::kReadRespMiddle].payload);
static_assert(kOpcodes[op::kAtomicAck].ext_bytes() == 12);
static_assert(kOpcodes[op::kCmpSwap].ext_bytes() == 28);
static_assert(kOpcodes[0x64].exts == kDeth && kOpcodes[0x65].exts == (kDeth | kImmDt));
static_assert(!kOpcodes[0x15].valid && !kOpcodes[0x2c].valid && !kOpcodes[0x40].valid);
static_assert(kOpcodes[op::kFlush].ext_bytes() == 20 && !kOpcodes[op::kFlush].payload);
static_assert(kOpcodes[op::kAtomicWrite].exts == kReth && kOpcodes[op::kAtomicWrite].payload);
static_assert(!kOpcodes[op::kUc | op::kFlush].valid && !kOpcodes[op::kUc | op::kAtomicWrite].valid);
static_assert(kOpcodes[op::kXrc | op::kWriteOnlyImm].exts == (kXrceth | kReth | kImmDt) &&
              kOpcodes[op::kXrc | op::kCmpSwap].ext_bytes() == 32 && kOpcodes[op::kXrc | op::kAck].exts == kAeth &&
              kOpcodes[op::kXrc | op::kReadRespFirst].exts == kAeth && !kOpcodes[op::kXrc | 0x15].valid &&
              !kOpcodes[op::kXrc | op::kFlush].valid && kOpcodes[0xb7].exts == (kXrceth | kIeth));
static_assert(kOpcodes[0x81].ext_bytes() == 16);
// Every valid opcode has its name in kNames, and kNames names no other.
static_assert([] {
  size_t valid = 0;
  for (const OpcodeInfo& o : kOpcodes)
    if (o.valid) {
      if (o.name == "UNKNOWN") return false;
      ++valid;
    }
  return valid == std::size(detail::kNames);
}());

}  // namespace uroce::proto
