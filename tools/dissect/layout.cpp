// The --bytes layout of a RoCEv2 frame (layout.hpp).
#include "tools/dissect/layout.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "proto/aeth.hpp"
#include "proto/cm.hpp"
#include "proto/headers.hpp"
#include "proto/opcode.hpp"
#include "proto/packet.hpp"
#include "tools/dissect/cm_view.hpp"
#include "tools/dissect/text.hpp"

namespace uroce::dissect {

using namespace uroce::proto;

std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += fmt("%02x", p[i]);
  }
  return s;
}


std::string aeth_text(uint8_t syndrome) {
  Syndrome s = Syndrome::decode(syndrome);
  switch (s.kind) {
    case AckKind::Ack:
      return s.value == kCreditsUnlimited ? fmt("ACK credits=%u (no credit limit)", s.value)
                                          : fmt("ACK credits=%u", s.value);
    case AckKind::RnrNak: return fmt("RNR NAK timer=%u (%" PRIu32 " us)", s.value, rnr_timer_us(s.value));
    case AckKind::Nak: return fmt("NAK %u (%s)", s.value, std::string(nak_name(s.value)).c_str());
    case AckKind::Reserved: return fmt("reserved syndrome 0x%02x", syndrome);
  }
  return "?";
}

// What a FLUSH asks for: "placement=global|persistent selectivity=range".
std::string feth_text(uint8_t placement, uint8_t selectivity) {
  std::string pl;
  if (placement & 1) pl += "global";
  if (placement & 2) pl += pl.empty() ? "persistent" : "|persistent";
  if (placement & ~3u) pl += fmt("%sreserved:0x%x", pl.empty() ? "" : "|", placement & ~3u);
  if (pl.empty()) pl = "none";
  const char* sel = selectivity == 0 ? "range" : selectivity == 1 ? "memory-region" : "reserved";
  return fmt("placement=%s selectivity=%s", pl.c_str(), sel);
}


namespace {

// ---- the byte layout -----------------------------------------------------------------------

class Layout {
 public:
  Layout(std::span<const uint8_t> f, std::vector<FieldRow>& rows) : f_(f), rows_(rows) {}

  // One field: frame offset, header name, offset in the header, byte count and `text()`
  // (called only when the bytes are there; empty for a continuation of a long field). Returns
  // false, after one "frame ends" line, when the frame is too short.
  template <typename Text>
  bool field(const char* header, size_t hstart, size_t hoff, size_t n, Text&& text) {
    const size_t off = hstart + hoff;
    if (off + n > f_.size()) {
      if (!ended_)
        note(off, fmt("%-12s +%-2zu  (frame ends at 0x%04zx, inside %s)", hoff == 0 ? header : "", hoff, f_.size(), header));
      ended_ = true;
      return false;
    }
    rows_.push_back(FieldRow{off, n, header, hoff, text()});
    return true;
  }
  // A line of its own, with no bytes.
  void note(size_t off, std::string text) { rows_.push_back(FieldRow{off, 0, "", 0, std::move(text)}); }

 private:
  std::span<const uint8_t> f_;
  std::vector<FieldRow>& rows_;
  bool ended_ = false;
};


}  // namespace

std::vector<FieldRow> layout_rows(std::span<const uint8_t> f, const Located& o, const std::string& icrc_verdict,
                                  std::vector<Span>* spans) {
  std::vector<FieldRow> rows;
  if (!o.roce_v2()) return rows;
  std::vector<Span> sp;
  auto span = [&](size_t a, size_t n, std::string h) {
    const size_t e = std::min(a + n, f.size());
    if (a < e) sp.push_back(Span{a, e, std::move(h)});
  };
  // Publishes the spans however the walk below ends.
  struct Out {
    std::vector<Span>& s;
    std::vector<Span>* to;
    ~Out() { if (to) *to = std::move(s); }
  } out{sp, spans};
  const bool v6 = o.ip_version == 6;
  const size_t tags = o.vlan_count;
  Layout L(f, rows);
  L.note(0, fmt("Ethernet 14 bytes%s, %04zx %s %zu bytes, %04zx UDP 8 bytes",
                tags == 0 ? "" : tags == 1 ? " + VLAN tag 4" : " + 2 VLAN tags 8", o.l3, v6 ? "IPv6" : "IPv4",
                o.ip_header_len, o.l4));
  span(0, o.l3, tags ? "Ethernet+VLAN" : "Ethernet");
  span(o.l3, o.ip_header_len, v6 ? "IPv6" : "IPv4");
  span(o.l4, 8, "UDP");
  span(o.bth, 12, "BTH");
  const size_t b = o.bth;
  const uint8_t* d = f.data();
  // End of the IP packet by its length field (bytes after it are Ethernet padding), clamped to the frame.
  size_t ip_end = f.size();
  if (!v6 && o.l3 + 4 <= f.size()) ip_end = std::min(ip_end, o.l3 + load_be16(d + o.l3 + 2));
  if (v6 && o.l3 + 6 <= f.size()) ip_end = std::min(ip_end, o.l3 + 40 + load_be16(d + o.l3 + 4));

  const char* B = "BTH";
  if (!L.field(B, b, 0, 1, [&] {
        const OpcodeInfo& info = opcode_info(d[b]);
        return named("OpCode", fmt("0x%02x %s", d[b], info.valid ? std::string(info.name).c_str()
                                                                 : "(not in the opcode table)"));
      }))
    return rows;
  const uint8_t opc = d[b];
  const OpcodeInfo& info = opcode_info(opc);
  if (!L.field(B, b, 1, 1, [&] {
        uint8_t v = d[b + 1];
        return with_bits(fmt("SE=%d M=%d PadCnt=%d TVer=%d", v >> 7, (v >> 6) & 1, (v >> 4) & 3, v & 15),
                         bits(v, {1, 1, 2, 4}));
      }))
    return rows;
  if (!L.field(B, b, 2, 2, [&] { return named("P_Key", fmt("0x%04x", load_be16(d + b + 2))); })) return rows;
  if (!L.field(B, b, 4, 1, [&] {
        uint8_t v = d[b + 4];
        return with_bits(fmt("FECN=%d BECN=%d Resv6a=%d", v >> 7, (v >> 6) & 1, v & 0x3F), bits(v, {1, 1, 6}));
      }))
    return rows;
  if (!L.field(B, b, 5, 3, [&] {
        uint32_t q = load_be24(d + b + 5);
        return named("DestQP", fmt("0x%06" PRIx32 " (%" PRIu32 ")", q, q));
      }))
    return rows;
  if (!L.field(B, b, 8, 1, [&] {
        uint8_t v = d[b + 8];
        return with_bits(fmt("A=%d Resv7=%d", v >> 7, v & 0x7F), bits(v, {1, 7}));
      }))
    return rows;
  if (!L.field(B, b, 9, 3, [&] {
        uint32_t psn = load_be24(d + b + 9);
        return named("PSN", fmt("%" PRIu32 " (0x%06" PRIx32 ")", psn, psn));
      }))
    return rows;
  if (!info.valid) return rows;

  size_t h = b + 12;
  for (Ext e : kExtOrder) {
    if (!info.has(e)) continue;
    const std::string nm(ext_name(e));
    const char* N = nm.c_str();
    bool ok = true;
    auto u64 = [&](size_t at) { return fmt("0x%016" PRIx64, load_be64(d + h + at)); };
    auto u32 = [&](size_t at) { return fmt("0x%08" PRIx32, load_be32(d + h + at)); };
    switch (e) {
      case kDeth:
        ok = L.field(N, h, 0, 4, [&] { return named("Q_Key", u32(0)); }) &&
             L.field(N, h, 4, 1, [&] { return named("Reserved", fmt("0x%02x", d[h + 4])); }) &&
             L.field(N, h, 5, 3, [&] {
               uint32_t q = load_be24(d + h + 5);
               return named("SrcQP", fmt("0x%06" PRIx32 " (%" PRIu32 ")", q, q));
             });
        break;
      case kXrceth:
        ok = L.field(N, h, 0, 1, [&] { return named("Reserved", fmt("0x%02x", d[h])); }) &&
             L.field(N, h, 1, 3, [&] {
               uint32_t q = load_be24(d + h + 1);
               return named("XRCSRQ", fmt("0x%06" PRIx32 " (%" PRIu32 ")", q, q));
             });
        break;
      case kFeth:
        ok = L.field(N, h, 0, 4, [&] {
          const uint32_t v = load_be32(d + h);
          return named("Flush", fmt("0x%08" PRIx32 " %s", v, feth_text(v & 0x0F, (v >> 4) & 3).c_str()));
        });
        break;
      case kReth:
        ok = L.field(N, h, 0, 8, [&] { return named("VA", u64(0)); }) &&
             L.field(N, h, 8, 4, [&] { return named("R_Key", u32(8)); }) &&
             L.field(N, h, 12, 4, [&] { return named("DMALen", fmt("%" PRIu32, load_be32(d + h + 12))); });
        break;
      case kAtomicEth:
        ok = L.field(N, h, 0, 8, [&] { return named("VA", u64(0)); }) &&
             L.field(N, h, 8, 4, [&] { return named("R_Key", u32(8)); }) &&
             L.field(N, h, 12, 8,
                     [&] { return named(info.op == Operation::CmpSwap ? "SwapData" : "AddData", u64(12)); }) &&
             L.field(N, h, 20, 8, [&] { return named("CmpData", u64(20)); });
        break;
      case kAeth:
        ok = L.field(N, h, 0, 1, [&] {
               return named("Syndrome", fmt("0x%02x [%s] %s", d[h], bits(d[h], {3, 5}).c_str(), aeth_text(d[h]).c_str()));
             }) &&
             L.field(N, h, 1, 3, [&] { return named("MSN", fmt("%" PRIu32, load_be24(d + h + 1))); });
        break;
      case kAtomicAckEth: ok = L.field(N, h, 0, 8, [&] { return named("OrigRemDt", u64(0)); }); break;
      case kImmDt: ok = L.field(N, h, 0, 4, [&] { return named("Immediate", u32(0)); }); break;
      case kIeth: ok = L.field(N, h, 0, 4, [&] { return named("R_Key", u32(0)); }); break;
      case kCnpBody:
        ok = L.field(N, h, 0, 8, [&] { return std::string("Reserved"); }) &&
             L.field(N, h, 8, 8, [&] { return std::string("Reserved"); });
        break;
    }
    span(h, ext_size(e), nm);
    if (!ok) return rows;
    h += ext_size(e);
  }
  // Payload, pad, ICRC: the ICRC is the last 4 bytes of the IP packet.
  if (ip_end < h + kIcrcSize) {
    L.note(h, fmt("(no room for the ICRC: the IP packet ends at 0x%04zx)", ip_end));
    return rows;
  }
  const size_t icrc_at = ip_end - kIcrcSize;
  const size_t padded = icrc_at - h;
  const size_t pad = (d[b + 1] >> 4) & 3;
  if (padded > 0) {
    if (pad <= padded && padded - pad > 0)
      L.note(h, fmt("%-12s      %zu bytes", "payload", padded - pad)), span(h, padded - pad, "payload");
    // A UD SEND to QP 1 carrying 256 bytes: a management datagram (the CM's), field by field.
    if (pad <= padded && padded - pad == uroce::proto::cm::kMadSize &&
        uroce::proto::cm::is_gsi_send(opc, load_be24(d + b + 5)))
      for (const auto& c : uroce::dissect::cm_fields(d + h, h)) {
        if (c.n == 0) {
          L.note(c.hstart + c.hoff, fmt("%-12s +%-2zu  %-23s  %s", c.hoff == 0 ? c.header.c_str() : "", c.hoff, "",
                                        c.text.c_str()));
          continue;
        }
        // A GID or an IP address (16 bytes): the first 8 bytes with the text, the rest below.
        const size_t first = std::min<size_t>(c.n, 8);
        L.field(c.header.c_str(), c.hstart, c.hoff, first, [&] { return c.text; });
        for (size_t k = first; k < c.n; k += 8)
          L.field(c.header.c_str(), c.hstart, c.hoff + k, std::min<size_t>(c.n - k, 8), [] { return std::string(); });
      }
    if (pad > 0 && pad <= padded)
      span(icrc_at - pad, pad, "pad"), L.field("pad", icrc_at - pad, 0, pad, [&] { return fmt("%zu pad byte%s", pad, pad == 1 ? "" : "s"); });
    if (pad > padded) L.note(h, fmt("%zu bytes before the ICRC, fewer than PadCnt %zu", padded, pad));
  }
  span(icrc_at, kIcrcSize, "ICRC");
  L.field("ICRC", icrc_at, 0, 4, [&] {
    return named("ICRC", fmt("0x%08" PRIx32 " (least significant byte first)%s", load_le32(d + icrc_at),
                             icrc_verdict.c_str()));
  });
  if (ip_end < f.size())
    L.note(ip_end, fmt("%-12s      %zu bytes after the IP packet", "trailer", f.size() - ip_end)),
        span(ip_end, f.size() - ip_end, "trailer");
  return rows;
}

void print_rows(std::span<const uint8_t> f, const std::vector<FieldRow>& rows) {
  for (const FieldRow& r : rows) {
    if (r.n == 0)
      std::printf("  %04zx  %s\n", r.off, r.text.c_str());
    else if (r.text.empty())  // a continuation of a long field: its bytes only
      std::printf("  %04zx  %-12s +%-2zu  %s\n", r.off, r.hoff == 0 ? r.header.c_str() : "", r.hoff,
                  hex_bytes(f.data() + r.off, r.n).c_str());
    else
      std::printf("  %04zx  %-12s +%-2zu  %-23s  %s\n", r.off, r.hoff == 0 ? r.header.c_str() : "", r.hoff,
                  hex_bytes(f.data() + r.off, r.n).c_str(), r.text.c_str());
  }
}


}  // namespace uroce::dissect
