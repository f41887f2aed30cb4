// Capture: every RoCE frame a DpdkLink receives for uroce and every frame it sends, written to
// a classic pcap file (Ethernet, microsecond timestamps) while the process runs. Config key
// `capture = FILE`. For links whose traffic no tcpdump can see (a PCI NIC owned by DPDK, the
// mlx5 PMD's flow-isolated queues): the interop runner's uroce-side capture (docs/hardware.md).
// Off by default; when on it costs a write per frame, so it is for tests, not measurements.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace uroce::port {

class Capture {
 public:
  Capture() = default;
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  // Creates (truncates) `path` and writes the pcap header. False and `err` on failure.
  bool open(const std::string& path, uint32_t snaplen, std::string& err);
  bool on() const { return f_ != nullptr; }
  void write(const uint8_t* frame, uint32_t len);
  void flush();

 private:
  std::FILE* f_ = nullptr;
  uint32_t snaplen_ = 0;
};

}  // namespace uroce::port
