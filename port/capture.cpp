#include "port/capture.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace uroce::port {

namespace {
void put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }  // host order, as the magic says
void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
}  // namespace

Capture::~Capture() {
  if (f_) std::fclose(f_);
}

bool Capture::open(const std::string& path, uint32_t snaplen, std::string& err) {
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) {
    err = "capture " + path + ": " + std::strerror(errno);
    return false;
  }
  snaplen_ = snaplen;
  uint8_t h[24];
  put32(h, 0xa1b2c3d4);  // pcap, microseconds
  put16(h + 4, 2);
  put16(h + 6, 4);
  put32(h + 8, 0);       // thiszone
  put32(h + 12, 0);      // sigfigs
  put32(h + 16, snaplen);
  put32(h + 20, 1);      // LINKTYPE_ETHERNET
  if (std::fwrite(h, 1, sizeof h, f_) != sizeof h) {
    err = "capture " + path + ": write failed";
    std::fclose(f_);
    f_ = nullptr;
    return false;
  }
  std::fflush(f_);
  return true;
}

void Capture::write(const uint8_t* frame, uint32_t len) {
  if (!f_) return;
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  const uint32_t incl = std::min(len, snaplen_);
  uint8_t r[16];
  put32(r, uint32_t(ts.tv_sec));
  put32(r + 4, uint32_t(ts.tv_nsec / 1000));
  put32(r + 8, incl);
  put32(r + 12, len);
  std::fwrite(r, 1, sizeof r, f_);
  std::fwrite(frame, 1, incl, f_);
}

void Capture::flush() {
  if (f_) std::fflush(f_);
}

}  // namespace uroce::port
