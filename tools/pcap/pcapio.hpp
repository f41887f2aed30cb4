// Reading and writing capture files (pcap and pcapng) through libpcap, for uroce-dissect,
// the golden tests and the oracle generator. Not part of the wire library itself.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace uroce::pcapio {

struct Frame {
  double time = 0;  // seconds since the epoch
  std::vector<uint8_t> bytes;
  uint32_t orig_len = 0;  // length on the wire (> bytes.size() when the capture was snapped)
};

struct Capture {
  int linktype = 0;  // DLT_EN10MB = 1
  std::vector<Frame> frames;
};

// Reads every frame. Returns false and sets `error` if the file cannot be read.
bool read_file(const std::string& path, Capture& out, std::string& error);

// Writes Ethernet frames to a pcap file. Returns false and sets `error` on failure.
bool write_file(const std::string& path, const std::vector<std::vector<uint8_t>>& frames, std::string& error);

}  // namespace uroce::pcapio
