#include "tools/pcap/pcapio.hpp"

#include <pcap/pcap.h>

namespace uroce::pcapio {

bool read_file(const std::string& path, Capture& out, std::string& error) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_open_offline(path.c_str(), errbuf);
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
    f.time = double(h->ts.tv_sec) + double(h->ts.tv_usec) * 1e-6;
    f.bytes.assign(data, data + h->caplen);
    f.orig_len = h->len;
    out.frames.push_back(std::move(f));
  }
  bool ok = rc == PCAP_ERROR_BREAK || rc == -2;
  if (!ok) error = pcap_geterr(p);
  pcap_close(p);
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
