// The --bytes layout of a RoCEv2 frame: the BTH and every extension header field by field, then
// payload, pad and ICRC, read straight from the frame bytes (header views and the opcode table,
// not parse()'s Packet), so it also shows the headers of malformed packets as far as the frame
// holds them. The line view prints the rows; the page (--html) shows them as a table.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "proto/locate.hpp"
#include "tools/dissect/page.hpp"

namespace uroce::dissect {

// The rows of a frame's layout (none unless `o` is RoCEv2), and where each header's bytes are.
// `icrc_verdict` ends the ICRC's row (", ok", ", BAD: computed 0x...").
std::vector<FieldRow> layout_rows(std::span<const uint8_t> f, const proto::Located& o,
                                  const std::string& icrc_verdict, std::vector<Span>* spans = nullptr);

// Prints the rows as --bytes does: "  OFFS  HEADER       +HOFF  BYTES                    TEXT".
void print_rows(std::span<const uint8_t> f, const std::vector<FieldRow>& rows);

// "01 02 03": bytes in hex.
std::string hex_bytes(const uint8_t* p, size_t n);

// An AETH syndrome in words: "ACK credits=31 (no credit limit)", "NAK 0 (PSN sequence error)".
std::string aeth_text(uint8_t syndrome);

// What a FLUSH asks for: "placement=global|persistent selectivity=range".
std::string feth_text(uint8_t placement, uint8_t selectivity);

}  // namespace uroce::dissect
