// Helpers of the fuzz regression programs (fuzz_parse.cpp, fuzz_locate.cpp): every frame of
// the golden captures, and a file's bytes.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tools/pcap/pcapio.hpp"

namespace uroce::fuzz {

namespace fs = std::filesystem;

inline std::vector<std::vector<uint8_t>> golden_frames(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && (e.path().extension() == ".pcap" || e.path().extension() == ".pcapng"))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::vector<uint8_t>> frames;
  for (const auto& f : files) {
    uroce::pcapio::Capture cap;
    std::string err;
    if (!uroce::pcapio::read_file(f, cap, err)) {
      std::fprintf(stderr, "%s: %s\n", f.c_str(), err.c_str());
      std::exit(2);
    }
    for (auto& fr : cap.frames) frames.push_back(std::move(fr.bytes));
  }
  return frames;
}

inline bool read_file(const char* path, std::vector<uint8_t>& out) {
  FILE* fp = std::fopen(path, "rb");
  if (!fp) return false;
  uint8_t buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, fp)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(fp);
  return true;
}

// Writes each frame to DIR/golden-NNNNN (a libFuzzer seed corpus). False on a write error.
inline bool write_corpus(const std::string& dir, const std::vector<std::vector<uint8_t>>& frames) {
  fs::create_directories(dir);
  size_t k = 0;
  for (const auto& f : frames) {
    char name[64];
    std::snprintf(name, sizeof name, "/golden-%05zu", k++);
    FILE* fp = std::fopen((dir + name).c_str(), "wb");
    const bool ok = fp && std::fwrite(f.data(), 1, f.size(), fp) == f.size();
    if (fp) std::fclose(fp);
    if (!ok) {
      std::fprintf(stderr, "cannot write %s%s\n", dir.c_str(), name);
      return false;
    }
  }
  std::printf("wrote %zu frames to %s\n", k, dir.c_str());
  return true;
}

}  // namespace uroce::fuzz
