#include "tools/pcap/pcapio.hpp"

#include <pcap/pcap.h>

#include <cstring>
#include <fstream>
#include <iterator>

namespace uroce::pcapio {

namespace {

// libpcap reads pcapng but says nothing of an Enhanced Packet Block's interface, flags and
// comments: this
// walks the blocks once more for them, in the order libpcap returns the packets (Enhanced,
// Simple and the old Packet blocks). Empty when the file is not pcapng or does not parse.
struct PacketMeta {
  uint32_t interface_id = 0;
  Frame::Dir dir = Frame::Dir::Unknown;
  std::string comment;
};

std::vector<PacketMeta> pcapng_meta(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> d{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<PacketMeta> out;
  bool swap = false;
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, &d[at], 4);
    return swap ? __builtin_bswap32(v) : v;
  };
  auto u16 = [&](size_t at) {
    uint16_t v;
    std::memcpy(&v, &d[at], 2);
    return swap ? __builtin_bswap16(v) : v;
  };
  for (size_t at = 0; at + 12 <= d.size();) {
    const uint32_t type = u32(at);
    if (type == 0x0A0D0D0A) {  // a section header: its magic gives the byte order of the section
      uint32_t magic;
      std::memcpy(&magic, &d[at + 8], 4);
      if (magic != 0x1A2B3C4D && magic != 0x4D3C2B1A) return {};
      swap = magic == 0x4D3C2B1A;
    } else if (at == 0) {
      return {};  // not pcapng
    }
    const uint32_t len = u32(at + 4);
    if (len < 12 || len % 4 || at + len > d.size()) return {};
    if (type == 6 && len >= 32) {  // Enhanced Packet Block
      PacketMeta m;
      m.interface_id = u32(at + 8);
      size_t opt = at + 28 + ((u32(at + 20) + 3) & ~3u);
      while (opt + 4 <= at + len - 4) {
        const uint16_t code = u16(opt), olen = u16(opt + 2);
        if (code == 0) break;
        if (code == 2 && olen == 4 && opt + 8 <= at + len - 4) {
          const uint32_t dir = u32(opt + 4) & 3;
          m.dir = dir == 1 ? Frame::Dir::In : dir == 2 ? Frame::Dir::Out : Frame::Dir::Unknown;
        }
        if (code == 1 && opt + 4 + olen <= at + len - 4) {  // opt_comment
          std::string c(reinterpret_cast<const char*>(&d[opt + 4]), olen);
          c.resize(std::strlen(c.c_str()));  // a writer may end it with a NUL
          for (char& ch : c)
            if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = ' ';  // one line, no control bytes
          if (!c.empty()) m.comment += (m.comment.empty() ? "" : "; ") + c;
        }
        opt += 4 + ((olen + 3u) & ~3u);
      }
      out.push_back(m);
    } else if (type == 3) {  // Simple Packet Block: interface 0
      out.push_back({});
    } else if (type == 2 && len >= 28) {  // Packet Block (obsolete): a 16-bit interface id
      out.push_back({u16(at + 8), Frame::Dir::Unknown, {}});
    }
    at += len;
  }
  return out;
}

}  // namespace

bool read_file(const std::string& path, Capture& out, std::string& error) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, errbuf);
  if (!p) {
    error = errbuf;
    return false;
  }
  out.linktype = pcap_datalink(p);
  out.frames.clear();
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  int rc;
  while ((rc = pcap_next_ex(p, &h, &data)) == 1) {
    Frame f;
    f.time = double(h->ts.tv_sec) + double(h->ts.tv_usec) * 1e-9;  // tv_usec holds ns (precision NANO)
    f.bytes.assign(data, data + h->caplen);
    f.orig_len = h->len;
    out.frames.push_back(std::move(f));
  }
  bool ok = rc == PCAP_ERROR_BREAK || rc == -2;
  if (!ok) error = pcap_geterr(p);
  pcap_close(p);
  if (ok) {
    const std::vector<PacketMeta> meta = pcapng_meta(path);
    if (meta.size() == out.frames.size())
      for (size_t i = 0; i < meta.size(); ++i) {
        out.frames[i].interface_id = meta[i].interface_id;
        out.frames[i].dir = meta[i].dir;
        out.frames[i].comment = std::move(meta[i].comment);
      }
  }
  return ok;
}

bool write_file(const std::string& path, const std::vector<std::vector<uint8_t>>& frames, std::string& error) {
  pcap_t* p = pcap_open_dead(DLT_EN10MB, 262144);
  if (!p) {
    error = "pcap_open_dead failed";
    return false;
  }
  pcap_dumper_t* d = pcap_dump_open(p, path.c_str());
  if (!d) {
    error = pcap_geterr(p);
    pcap_close(p);
    return false;
  }
  uint32_t usec = 0;
  for (const auto& f : frames) {
    pcap_pkthdr h{};
    h.ts.tv_sec = 1700000000;
    h.ts.tv_usec = usec++;
    h.caplen = h.len = uint32_t(f.size());
    pcap_dump(reinterpret_cast<u_char*>(d), &h, f.data());
  }
  pcap_dump_close(d);
  pcap_close(p);
  return true;
}

}  // namespace uroce::pcapio
