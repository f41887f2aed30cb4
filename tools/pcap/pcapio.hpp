// Reading and writing capture files (pcap and pcapng) through libpcap, for uroce-dissect,
// the golden tests and the oracle generator. Not part of the wire library itself.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace uroce::pcapio {

struct Frame {
  double time = 0;  // seconds since the epoch (read at ns precision; a double today keeps ~0.24 us)
  std::vector<uint8_t> bytes;
  uint32_t orig_len = 0;  // length on the wire (> bytes.size() when the capture was snapped)
  // pcapng only (0 in a classic pcap): the interface the frame was captured on and its
  // direction from epb_flags (uroce's own captures set it for every frame).
  uint32_t interface_id = 0;
  enum class Dir : uint8_t { Unknown = 0, In = 1, Out = 2 } dir = Dir::Unknown;
  // pcapng only: the frame's opt_comment (uroce's captures: the engine's note of what a CNP did
  // to its QP's rate; Wireshark: a comment a user added). Several comments joined with "; ".
  std::string comment;
};

struct Capture {
  int linktype = 0;  // DLT_EN10MB = 1
  std::vector<Frame> frames;
};

// Reads every frame of a pcap or pcapng file. Returns false and sets `error` if the file
// cannot be read.
bool read_file(const std::string& path, Capture& out, std::string& error);

// Writes Ethernet frames to a pcap file. Returns false and sets `error` on failure.
bool write_file(const std::string& path, const std::vector<std::vector<uint8_t>>& frames, std::string& error);

}  // namespace uroce::pcapio
