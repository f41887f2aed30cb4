// uroce-check-config: reads one endpoint config file the way every uroce program does
// (port/config.cpp) and says in one line what is wrong with it, naming the file, the line and
// the key. uroce-run calls it before it starts a program, so that a bad config is one clear
// line instead of a failure deep inside the program (or DPDK's start-up).
//   uroce-check-config [-v] FILE     exit 0 valid, 1 invalid or unreadable, 2 usage
#include <cstdio>
#include <cstring>
#include <string>

#include "port/config.hpp"

namespace {

constexpr const char* kUsage =
    "usage: uroce-check-config [-v] FILE\n"
    "Checks a uroce endpoint config file (keys: share/uroce/examples/README.md).\n"
    "Prints nothing and exits 0 when it is valid (-v: one summary line); otherwise prints one\n"
    "line FILE:LINE: key 'KEY' = 'VALUE': problem, and exits 1. Exit 2: usage.\n";

}  // namespace

int main(int argc, char** argv) {
  bool verbose = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "-v") verbose = true;
    else if (path.empty() && !a.empty() && a[0] != '-') path = a;
    else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string err;
  const auto c = uroce::port::load_config(path, err);
  if (!c) {
    std::fprintf(stderr, "%s\n", err.c_str());
    return 1;
  }
  if (verbose)
    std::printf("%s: ok: device %s, %zu EAL arguments, path mtu %u\n", path.c_str(), c->name.c_str(), c->eal.size(),
                unsigned(uroce::engine::mtu_bytes(c->path_mtu)));
  return 0;
}
