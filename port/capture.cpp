#include "port/capture.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "port/param.hpp"
#include "proto/cm.hpp"
#include "proto/locate.hpp"
#include "proto/opcode.hpp"

namespace uroce::port {

namespace {

// pcapng block types and option codes (draft-ietf-opsawg-pcapng).
constexpr uint32_t kShb = 0x0A0D0D0A, kIdb = 1, kEpb = 6;
constexpr uint32_t kByteOrderMagic = 0x1A2B3C4D;
constexpr uint16_t kOptEnd = 0, kShbUserAppl = 4, kIfName = 2, kIfTsresol = 9, kEpbFlags = 2,
                   kOptComment = 1;
constexpr uint16_t kLinktypeEthernet = 1;

constexpr uint32_t pad4(uint32_t n) { return (n + 3) & ~3u; }

// A block assembled in host byte order (the section header's magic tells readers which).
struct Block {
  uint8_t b[256];
  uint32_t n = 0;
  void u16(uint16_t v) { std::memcpy(b + n, &v, 2), n += 2; }
  void u32(uint32_t v) { std::memcpy(b + n, &v, 4), n += 4; }
  void u64(uint64_t v) { std::memcpy(b + n, &v, 8), n += 8; }
  void option(uint16_t code, const void* v, uint16_t len) {
    u16(code), u16(len);
    std::memcpy(b + n, v, len);
    std::memset(b + n + len, 0, pad4(len) - len);
    n += pad4(len);
  }
  void end_options() { u16(kOptEnd), u16(0); }
  // The block total length goes in twice: after the type and at the end.
  void finish() {
    const uint32_t total = n + 4;
    std::memcpy(b + 4, &total, 4);
    u32(total);
  }
};

}  // namespace

uint32_t header_bytes(std::span<const uint8_t> frame) {
  const proto::Located o = proto::locate(frame);
  size_t h = 14 + 4 * size_t(o.vlan_count);
  if (o.roce_v2()) {
    h = o.bth + 12;
    if (o.bth < frame.size()) {
      const proto::OpcodeInfo& info = proto::opcode_info(frame[o.bth]);
      if (info.valid) h += info.ext_bytes();
      // A connection manager MAD (a UD SEND to QP 1) counts as headers, all 256 bytes: CM
      // frames are few, and every field uroce-dissect decodes (path MTU, PSN, rdma_cm's IP
      // header in the private data) lies beyond the first 64 bytes.
      if (info.valid && o.bth + 8 <= frame.size() &&
          proto::cm::is_gsi_send(frame[o.bth], uint32_t(frame[o.bth + 5]) << 16 | frame[o.bth + 6] << 8 | frame[o.bth + 7]))
        h += proto::cm::kMadSize;
    }
  } else if (o.udp_ports) {
    h = o.l4 + 8;
  } else if (o.l4) {
    h = o.l4;
  }
  return uint32_t(std::min(h, frame.size()));
}

bool Capture::open(const std::string& path, const CaptureOptions& opt, std::string& err) {
  close();
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    err = "capture " + path + ": " + std::strerror(errno);
    return false;
  }
  cap_ = param::kCaptureBuffer;
  buf_.reset(new uint8_t[cap_]);
  used_ = 0;
  snaplen_ = opt.snaplen;
  max_bytes_ = opt.max_bytes ? opt.max_bytes : uint64_t(param::kCaptureMaxMb) << 20;
  file_bytes_ = written_ = skipped_ = 0;
  flush_every_ns_ = param::kCaptureFlushNs;
  last_time_ns_ = flushed_at_ns_ = 0;

  Block shb;
  shb.u32(kShb), shb.u32(0), shb.u32(kByteOrderMagic), shb.u16(1), shb.u16(0);
  shb.u64(~uint64_t(0));  // section length: not given
  shb.option(kShbUserAppl, "uroce", 5);
  shb.end_options();
  shb.finish();
  put(shb.b, shb.n);

  Block idb;
  idb.u32(kIdb), idb.u32(0), idb.u16(kLinktypeEthernet), idb.u16(0);
  idb.u32(opt.snaplen ? opt.snaplen : opt.max_frame);
  const std::string name = opt.if_name.substr(0, 64);
  idb.option(kIfName, name.data(), uint16_t(name.size()));
  const uint8_t tsresol = 9;  // 10^-9 s
  idb.option(kIfTsresol, &tsresol, 1);
  idb.end_options();
  idb.finish();
  put(idb.b, idb.n);
  file_bytes_ = shb.n + idb.n;
  flush();
  return true;
}

void Capture::write(const uint8_t* frame, uint32_t len, Dir dir, std::string_view comment) {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  write_at(frame, len, dir, uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec), comment);
}

void Capture::write_at(const uint8_t* frame, uint32_t len, Dir dir, uint64_t time_ns, std::string_view comment) {
  if (fd_ < 0) return;
  last_time_ns_ = time_ns;
  const uint32_t keep = snaplen_ ? snaplen_ : header_bytes({frame, len}) + param::kCaptureSnapPayload;
  const uint32_t incl = std::min(len, keep);
  const uint32_t clen = uint32_t(std::min<size_t>(comment.size(), param::kCaptureNoteMax));
  const uint32_t total = 28 + pad4(incl) + (clen ? 4 + pad4(clen) : 0) + 12 + 4;
  if (file_bytes_ + total > max_bytes_) {
    ++skipped_;
    return;
  }
  if (used_ + total > cap_) flush();  // whole blocks only: a file read while it grows is never cut mid-block
  Block h;  // the fixed part before the bytes
  h.u32(kEpb), h.u32(total), h.u32(0);  // interface 0
  h.u32(uint32_t(time_ns >> 32)), h.u32(uint32_t(time_ns));
  h.u32(incl), h.u32(len);
  Block t;  // the padding, the options and the length after them
  static constexpr uint8_t zeros[4] = {};
  const uint32_t flags = uint32_t(dir);
  t.option(kEpbFlags, &flags, 4);
  t.end_options();
  t.u32(total);
  put(h.b, h.n);
  put(frame, incl);
  put(zeros, pad4(incl) - incl);
  if (clen) {  // opt_comment: UTF-8 text, padded to 32 bits
    const uint16_t o[2] = {kOptComment, uint16_t(clen)};
    put(o, 4);
    put(comment.data(), clen);
    put(zeros, pad4(clen) - clen);
  }
  put(t.b, t.n);
  file_bytes_ += total;
  ++written_;
}

void Capture::put(const void* p, size_t n) {
  if (used_ + n > cap_) flush();  // n is at most one frame (65535) and the buffer holds 1 MiB
  std::memcpy(buf_.get() + used_, p, n);
  used_ += n;
}

void Capture::flush() {
  if (fd_ < 0) return;
  size_t off = 0;
  while (off < used_) {
    const ssize_t w = ::write(fd_, buf_.get() + off, used_ - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;  // a full disk: the rest is lost (the file may end inside a block)
    off += size_t(w);
  }
  used_ = 0;
  flushed_at_ns_ = last_time_ns_;
}

void Capture::close() {
  if (fd_ < 0) return;
  flush();
  ::close(fd_);
  fd_ = -1;
  buf_.reset();
}

}  // namespace uroce::port
