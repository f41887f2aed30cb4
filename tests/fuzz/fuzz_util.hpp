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

// The options of a regression program: --golden DIR, --mutations N, --seed S,
// --write-corpus DIR, and files to run instead (e.g. libFuzzer crash-* files).
struct Args {
#ifdef UROCE_GOLDEN_DIR
  std::string golden = UROCE_GOLDEN_DIR;
#else
  std::string golden = "../shared/golden";
#endif
  size_t mutations = 0;
  unsigned seed = 1;
  std::string corpus_dir;
  std::vector<const char*> inputs;
};

// Parses the options into `a` (its mutations hold the default). False after -h (usage printed).
inline bool parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--golden" && i + 1 < argc) a.golden = argv[++i];
    else if (s == "--mutations" && i + 1 < argc) a.mutations = std::strtoul(argv[++i], nullptr, 10);
    else if (s == "--seed" && i + 1 < argc) a.seed = unsigned(std::strtoul(argv[++i], nullptr, 10));
    else if (s == "--write-corpus" && i + 1 < argc) a.corpus_dir = argv[++i];
    else if (s == "-h" || s == "--help") {
      std::printf("usage: %s [--golden DIR] [--mutations N] [--seed S] [--write-corpus DIR] [FILE...]\n", argv[0]);
      return false;
    } else a.inputs.push_back(argv[i]);
  }
  return true;
}

// Runs every input file through `target`. False (with a message) when one cannot be read.
inline bool run_files(const std::vector<const char*>& inputs, int (*target)(const uint8_t*, size_t)) {
  for (const char* path : inputs) {
    std::vector<uint8_t> b;
    if (!read_file(path, b)) {
      std::fprintf(stderr, "cannot read %s\n", path);
      return false;
    }
    target(b.data(), b.size());
  }
  return true;
}

}  // namespace uroce::fuzz
