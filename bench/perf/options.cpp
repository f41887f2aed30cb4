#include "bench/perf/options.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace uroce::perf {

namespace {

// --help: the text on stdout, exit 0; a usage error: on stderr, exit 2.
void usage(bool help = false) {
  std::fprintf(help ? stdout : stderr,
               "usage: uroce-perf --config FILE [options] [peer-address]\n"
               "  --test write|send|read|atomic   operation (default write)\n"
               "  --mode bw|lat                   bandwidth or latency (default bw)\n"
               "  -s, --size BYTES                message size (default 65536 bw, 2 lat)\n"
               "  -n, --iters N                   messages per QP and size (default 5000 bw, 1000 lat)\n"
               "  -a, --all                       all sizes 2 .. 2^23 (bounded by --max-size)\n"
               "  --bytes-per-size BYTES          each size runs max(N, BYTES / size) messages (at most 2000000)\n"
               "  --max-size BYTES                largest size for -a (default 8388608)\n"
               "  -q, --qps N                     QPs (default 1, at most 4096)\n"
               "  -t, --tx-depth N                outstanding sends per QP (default 128)\n"
               "  --cq-mod N                      signal every Nth send (default 64)\n"
               "  -m, --mtu BYTES                 path MTU (default: the config's)\n"
               "  -A, --atomic cas|fadd           atomic type (default fadd)\n"
               "  -p, --port N                    TCP port for the connection exchange (default 18515)\n"
               "  -w, --window N                  engine send window in packets (default: the engine's)\n"
               "  --stats                         print link and engine counters at the end\n"
               "  --timeout S                     give up after S seconds (default 120)\n"
               "  --eal ARG                       extra EAL argument (repeatable)\n"
               "  --stagger-ms MS                 bw client: QP i starts MS x i after the first\n"
               "  --flow-log FILE                 bw client: each QP's rate per window and the link's bottleneck\n"
               "                                  queue into FILE, and their summary (a \"flows:\" line)\n"
               "  --flow-ms MS                    --flow-log's window (default 10)\n"
               "  --flow-svg FILE                 with --flow-log: each QP's rate and the queue over time\n"
               "without a peer address this side is the server.\n"
               "Config files: key = value lines (share/uroce/examples/README.md, config/README.md).\n");
  std::exit(help ? 0 : 2);
}

}  // namespace

uint64_t iters_for(const Opts& o, uint64_t size) {
  if (o.bytes_per_size == 0 || size == 0) return o.iters;
  return std::max(o.iters, std::min(o.bytes_per_size / size, kMaxScaledIters));
}

Opts parse_args(int argc, char** argv) {
  Opts o;
  bool have_iters = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--test") {
      std::string v = val();
      if (v == "write") o.test = Test::Write;
      else if (v == "send") o.test = Test::Send;
      else if (v == "read") o.test = Test::Read;
      else if (v == "atomic") o.test = Test::Atomic;
      else usage();
    } else if (a == "--mode") {
      std::string v = val();
      if (v == "bw") o.mode = Mode::Bw;
      else if (v == "lat") o.mode = Mode::Lat;
      else usage();
    } else if (a == "-s" || a == "--size") o.size = std::stoull(val());
    else if (a == "-n" || a == "--iters") o.iters = std::stoull(val()), have_iters = true;
    else if (a == "--bytes-per-size") o.bytes_per_size = std::stoull(val());
    else if (a == "-a" || a == "--all") o.all = true;
    else if (a == "--max-size") o.max_size = std::stoull(val());
    else if (a == "-q" || a == "--qps") o.qps = uint32_t(std::stoul(val()));
    else if (a == "-t" || a == "--tx-depth") o.tx_depth = uint32_t(std::stoul(val()));
    else if (a == "--cq-mod") o.cq_mod = uint32_t(std::stoul(val()));
    else if (a == "-m" || a == "--mtu") o.mtu = std::stoi(val());
    else if (a == "-A" || a == "--atomic") {
      std::string v = val();
      o.cas = v == "cas" || v == "CMP_AND_SWAP";
    } else if (a == "-p" || a == "--port") o.tcp_port = uint16_t(std::stoul(val()));
    else if (a == "--config") o.config = val();
    else if (a == "--stats") o.stats = true;
    else if (a == "--timeout") o.timeout_s = uint32_t(std::stoul(val()));
    else if (a == "-w" || a == "--window") o.window = uint32_t(std::stoul(val()));
    else if (a == "--eal") o.eal_extra.push_back(val());
    else if (a == "--stagger-ms") o.stagger_ms = std::stod(val());
    else if (a == "--flow-log") o.flow_log = val();
    else if (a == "--flow-ms") o.flow_ms = uint32_t(std::stoul(val()));
    else if (a == "--flow-svg") o.flow_svg = val();
    else if (a == "-h" || a == "--help") usage(true);
    else if (!a.empty() && a[0] != '-' && o.peer.empty()) o.peer = a;
    else usage();
  }
  if (o.config.empty() || o.qps == 0 || o.qps > 4096 || o.tx_depth == 0 || o.cq_mod == 0) usage();
  if (!have_iters) o.iters = o.mode == Mode::Bw ? 5000 : 1000;
  if (o.iters == 0) usage();
  if (o.size == 0) o.size = o.mode == Mode::Bw ? 65536 : 2;
  if (o.test == Test::Atomic) o.size = 8, o.all = false;
  if (o.max_size > (1ull << 23)) o.max_size = 1ull << 23;
  o.cq_mod = std::min(o.cq_mod, o.tx_depth);
  return o;
}

const char* test_name(const Opts& o) {
  switch (o.test) {
    case Test::Write: return "RDMA_Write";
    case Test::Send: return "Send";
    case Test::Read: return "RDMA_Read";
    case Test::Atomic: return o.cas ? "Atomic CMP_AND_SWAP" : "Atomic FETCH_AND_ADD";
  }
  return "?";
}


}  // namespace uroce::perf
