// Capture: the frames a DpdkLink receives and sends, written to a pcapng file while the process
// runs (config key `capture = FILE`, or UROCE_CAPTURE=FILE for a program run through the shim).
// For links whose traffic no tcpdump can see (a PCI NIC owned by DPDK, memif, the mlx5 PMD's
// flow-isolated queues). docs/observability.md says how to read the files.
//
// The file (pcapng, whatever the name ends with; tshark, Wireshark, libpcap >= 1.1 and
// uroce-dissect read it):
//   Section Header Block   byte-order magic, version 1.0, shb_userappl "uroce"
//   Interface Description  LINKTYPE_ETHERNET, the snap length, if_name (the device name),
//                          if_tsresol 9 (timestamps in nanoseconds)
//   Enhanced Packet Block  per frame: interface 0, the time (CLOCK_REALTIME, ns), the bytes kept
//                          and the frame's length, epb_flags inbound (1) or outbound (2), and
//                          opt_comment when the engine left a note (engine::Link::note: the rate a
//                          CNP left a QP at) since the frame before
//
// What is kept of each frame: `snaplen` bytes, or by default (snaplen 0) its headers and
// param::kCaptureSnapPayload bytes after them. The headers are found by the one header walker
// (proto::locate, header_bytes() below); a CM MAD (UD SEND to QP 1) counts as headers, whole.
//
// Bounded: blocks are gathered in one buffer of param::kCaptureBuffer bytes allocated at open
// and written with one write(2) when it fills, when param::kCaptureFlushNs has passed since the
// last write (checked as frames come), and at close. Nothing is allocated per frame. The file
// stops growing at `max_bytes`: frames after that are counted (skipped()), not written.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace uroce::port {

struct CaptureOptions {
  std::string if_name = "uroce0";  // the IDB's if_name: the device name
  uint32_t snaplen = 0;            // 0: headers + param::kCaptureSnapPayload
  uint32_t max_frame = 65535;      // the IDB's snap length when snaplen is 0
  uint64_t max_bytes = 0;          // the file's size limit; 0: param::kCaptureMaxMb MiB
};

// How many bytes of `frame` are headers: Ethernet and its tags, then
//   RoCEv2 (UDP port 4791): up to the end of the BTH and the extension headers its opcode has
//                           (proto::opcode_info; the BTH alone for an opcode not in the table);
//   other UDP:              up to the end of the UDP header;
//   other IPv4 / IPv6:      up to the end of the IP header (ICMP and the rest count as payload);
//   ARP and anything else:  up to the end of the Ethernet header (and tags).
// Never more than the frame.
uint32_t header_bytes(std::span<const uint8_t> frame);

class Capture {
 public:
  enum class Dir : uint32_t { In = 1, Out = 2 };  // the epb_flags direction bits

  Capture() = default;
  ~Capture() { close(); }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // Creates (truncates) `path` and writes the section header and the interface description.
  // False and `err` on failure.
  bool open(const std::string& path, const CaptureOptions& opt, std::string& err);
  bool on() const { return fd_ >= 0; }
  // One frame, timestamped now (or at `time_ns`, nanoseconds since the epoch), with `comment`
  // as its opt_comment if not empty (at most param::kCaptureNoteMax bytes of it).
  void write(const uint8_t* frame, uint32_t len, Dir dir, std::string_view comment = {});
  void write_at(const uint8_t* frame, uint32_t len, Dir dir, uint64_t time_ns, std::string_view comment = {});
  // Writes the buffer when param::kCaptureFlushNs has passed since the last write.
  void maybe_flush() {
    if (used_ && last_time_ns_ - flushed_at_ns_ >= flush_every_ns_) flush();
  }
  void flush();   // writes what the buffer holds
  void close();   // flush and close the file

  uint64_t written() const { return written_; }   // frames in the file
  uint64_t skipped() const { return skipped_; }   // frames not written: the size limit was reached

 private:
  void put(const void* p, size_t n);
  int fd_ = -1;
  std::unique_ptr<uint8_t[]> buf_;
  size_t cap_ = 0, used_ = 0;
  uint32_t snaplen_ = 0;
  uint64_t max_bytes_ = 0, file_bytes_ = 0;  // file_bytes_: written and buffered
  uint64_t written_ = 0, skipped_ = 0;
  uint64_t last_time_ns_ = 0, flushed_at_ns_ = 0, flush_every_ns_ = 0;
};

}  // namespace uroce::port
