// uroce-drill: scripted packet-level conformance tests against a RoCE peer (docs/drill.md).
//
//   uroce-drill --list [--scenarios DIR]
//   uroce-drill --check FILE...                  read scenarios, run none (errors name the line)
//   uroce-drill --config FILE --agent HOST:PORT [options] [NAME|CHAPTER/|FILE ...]
//
// Runs each scenario (all of --scenarios DIR, or those named) against the peer whose agent
// (uroce-drill-agent) listens at HOST:PORT, on the uroce link of the endpoint config FILE (memif,
// af_packet, af_xdp, a PCI NIC: any link uroce-perf takes). One line per step, a verdict per
// scenario, and the report (--report, --markdown) at the end. Exit 0 if every scenario run
// conforms or is not applicable, 1 if one differs, 2 on a usage or script error.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "port/dpdk_link.hpp"
#include "port/param.hpp"
#include "tools/drill/agent_client.hpp"
#include "tools/drill/runner.hpp"
#include "tools/drill/script.hpp"

using namespace uroce;
using namespace uroce::drill;

namespace {

const char* kUsage =
    "usage: uroce-drill --list [--scenarios DIR]\n"
    "       uroce-drill --check FILE...\n"
    "       uroce-drill --config FILE --agent HOST:PORT [--agent-gid N] [--agent-dev NAME]\n"
    "                   [--scenarios DIR] [--time-scale X] [--capture-dir DIR] [--ladder DIR]\n"
    "                   [--peer NAME] [--report FILE] [--markdown FILE] [--explain FILE]\n"
    "                   [NAME|CHAPTER/|FILE ...]\n"
    "Runs scripted RoCEv2 scenarios against a peer's QP, driven by uroce-drill-agent on the peer\n"
    "(docs/drill.md). NAME is a scenario as --list prints it (psn/gap), CHAPTER/ every scenario of a\n"
    "chapter, FILE a .drill file; none: every scenario of --scenarios.\n"
    "  --time-scale X   multiply every window and wait (a slow peer: an emulated guest)\n"
    "  --capture-dir D  a pcapng file per scenario (default uroce-drill-runs/DATE-TIME; none: no captures)\n"
    "  --ladder D       its ladder diagram too (SVG, uroce-dissect --ladder)\n"
    "  --report F       the text report; --markdown F the same as a markdown table\n"
    "  --explain F      lines 'NAME: text' explaining the peer's differences (for the report)\n";

// The scenarios beside the program's source, else the installed ones.
std::string default_dir() {
  struct stat s;
  if (stat(UROCE_DRILL_SOURCE_DIR, &s) == 0) return UROCE_DRILL_SOURCE_DIR;
  return UROCE_DRILL_INSTALL_DIR;
}

void find_files(const std::string& dir, std::vector<std::string>& out) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    std::string p = dir + "/" + n;
    struct stat s;
    if (stat(p.c_str(), &s) != 0) continue;
    if (S_ISDIR(s.st_mode)) find_files(p, out);
    else if (n.size() > 6 && n.substr(n.size() - 6) == ".drill") out.push_back(p);
  }
  closedir(d);
}

// Chapter order in listings and reports: the order the spec's chapters come in the issue.
int chapter_rank(const std::string& c) {
  static const char* order[] = {"psn", "ack", "rnr", "send", "read", "atomic", "error", "mtu", "pkey", "ecn", "uc", "ud"};
  for (size_t i = 0; i < sizeof order / sizeof *order; ++i)
    if (c == order[i]) return int(i);
  return 100;
}

// uroce-dissect: beside this program (installed), in the build tree, else on PATH.
std::string dissect_path() {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  struct stat s;
  if (n > 0) {
    self[n] = 0;
    std::string d = self;
    d = d.substr(0, d.find_last_of('/')) + "/uroce-dissect";
    if (stat(d.c_str(), &s) == 0) return d;
  }
  if (stat(UROCE_DISSECT, &s) == 0) return UROCE_DISSECT;
  return "uroce-dissect";
}

bool load_all(const std::vector<std::string>& files, std::vector<Scenario>& out) {
  bool ok = true;
  for (const std::string& f : files) {
    Scenario sc;
    std::string err;
    if (!load_scenario(f, sc, err)) {
      std::fprintf(stderr, "uroce-drill: %s\n", err.c_str());
      ok = false;
      continue;
    }
    out.push_back(sc);
  }
  std::sort(out.begin(), out.end(), [](const Scenario& a, const Scenario& b) {
    int ra = chapter_rank(a.chapter), rb = chapter_rank(b.chapter);
    return ra != rb ? ra < rb : a.name < b.name;
  });
  return ok;
}

std::string md_cell(std::string s) {
  for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string cfg_path, agent_addr, dir = default_dir(), capture_dir, ladder_dir, report, markdown, explain,
                                    peer = "peer";
  RunOptions opt;
  bool list = false, check = false;
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto arg = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "uroce-drill: %s needs a value\n%s", a.c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--list") list = true;
    else if (a == "--check") check = true;
    else if (a == "--config") cfg_path = arg();
    else if (a == "--agent") agent_addr = arg();
    else if (a == "--agent-gid") opt.agent_gid = uint32_t(std::stoul(arg()));
    else if (a == "--agent-dev") opt.agent_dev = arg();
    else if (a == "--scenarios") dir = arg();
    else if (a == "--time-scale") opt.time_scale = std::stod(arg());
    else if (a == "--capture-dir") capture_dir = arg();
    else if (a == "--ladder") ladder_dir = arg();
    else if (a == "--report") report = arg();
    else if (a == "--markdown") markdown = arg();
    else if (a == "--explain") explain = arg();
    else if (a == "--peer") peer = arg();
    else if (a == "-h" || a == "--help") {
      std::printf("%s", kUsage);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "uroce-drill: unknown option %s\n%s", a.c_str(), kUsage);
      return 2;
    } else {
      names.push_back(a);
    }
  }
  // Which files: those named (a file, a NAME, a CHAPTER/), else all of the directory.
  std::vector<std::string> all_files, files;
  find_files(dir, all_files);
  std::vector<Scenario> all;
  if (check) {
    std::vector<Scenario> scs;
    bool ok = load_all(names, scs);
    for (const Scenario& s : scs) std::printf("%s: %zu steps, ok\n", s.name.c_str(), s.steps.size());
    return ok ? 0 : 2;
  }
  if (!load_all(all_files, all)) return 2;
  std::vector<Scenario> chosen;
  if (names.empty()) chosen = all;
  for (const std::string& n : names) {
    size_t before = chosen.size();
    if (n.size() > 6 && n.substr(n.size() - 6) == ".drill") {
      Scenario sc;
      std::string err;
      if (!load_scenario(n, sc, err)) {
        std::fprintf(stderr, "uroce-drill: %s\n", err.c_str());
        return 2;
      }
      chosen.push_back(sc);
    }
    for (const Scenario& s : all)
      if (s.name == n || (n.back() == '/' && s.name.rfind(n, 0) == 0)) chosen.push_back(s);
    if (chosen.size() == before) {
      std::fprintf(stderr, "uroce-drill: no scenario '%s' (uroce-drill --list)\n", n.c_str());
      return 2;
    }
  }
  if (list) {
    std::string chapter;
    for (const Scenario& s : chosen) {
      if (s.chapter != chapter) std::printf("%s%s\n", chapter.empty() ? "" : "\n", (chapter = s.chapter).c_str());
      std::printf("  %-28s %s\n  %-28s   %s\n", s.name.c_str(), s.title.c_str(), "", s.rule.c_str());
    }
    std::printf("\n%zu scenarios\n", chosen.size());
    return 0;
  }
  if (cfg_path.empty() || agent_addr.empty()) {
    std::fprintf(stderr, "uroce-drill: --config and --agent are needed to run scenarios\n%s", kUsage);
    return 2;
  }
  std::map<std::string, std::string> explained;
  if (!explain.empty()) {
    std::ifstream f(explain);
    for (std::string line; std::getline(f, line);) {
      size_t c = line.find(": ");
      if (!line.empty() && line[0] != '#' && c != std::string::npos) explained[line.substr(0, c)] = line.substr(c + 2);
    }
  }
  std::string err;
  auto cfg = port::load_config(cfg_path, err);
  if (!cfg) {
    std::fprintf(stderr, "uroce-drill: %s\n", err.c_str());
    return 2;
  }
  auto link = port::DpdkLink::open(*cfg, err);
  if (!link) {
    std::fprintf(stderr, "uroce-drill: %s\n", err.c_str());
    return 1;
  }
  // A memif server's link comes up only when the peer connects: through the verbs shim that is
  // when the agent opens its device (the first scenario's set-up), so only a short wait here.
  if (!link->wait_link_up(1000)) std::printf("uroce-drill: the link is not up yet (a memif server waits for its peer)\n");
  AgentClient agent;
  if (!agent.connect(agent_addr, 20000, err)) {
    std::fprintf(stderr, "uroce-drill: %s\n", err.c_str());
    return 1;
  }
  // Every run keeps its captures: in --capture-dir, else in uroce-drill-runs/YYYYmmdd-HHMMSS of the
  // current directory (--capture-dir none: no captures).
  if (capture_dir.empty()) {
    char stamp[32];
    time_t now = time(nullptr);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
    mkdir("uroce-drill-runs", 0755);
    capture_dir = std::string("uroce-drill-runs/") + stamp;
  }
  if (capture_dir != "none") {
    opt.capture_dir = capture_dir;
    mkdir(opt.capture_dir.c_str(), 0755);
    std::printf("uroce-drill: captures in %s/\n", capture_dir.c_str());
  }
  if (!ladder_dir.empty()) mkdir(ladder_dir.c_str(), 0755);
  Runner runner(*link, agent, opt);
  struct Row {
    const Scenario* sc;
    ScenarioResult r;
  };
  std::vector<Row> rows;
  int counts[3] = {};
  for (const Scenario& s : chosen) {
    rows.push_back({&s, runner.run(s)});
    ++counts[int(rows.back().r.verdict)];
    if (!ladder_dir.empty() && !rows.back().r.capture.empty()) {
      std::string svg = ladder_dir + "/" + s.chapter + "-" + s.name.substr(s.name.find('/') + 1) + ".svg";
      std::string cmd = "'" + dissect_path() + "' --ladder '" + svg + "' '" + rows.back().r.capture +
                        "' > /dev/null";
      if (std::system(cmd.c_str()) == 0) std::printf("  ladder: %s\n", svg.c_str());
    }
    if (!agent.connected()) {
      std::fprintf(stderr, "uroce-drill: the agent's channel closed; stopping\n");
      break;
    }
  }
  link->await_peer_close(0);
  std::printf("\n%zu scenarios: %d conform, %d differ, %d not applicable (stale frames ignored: %llu)\n",
              rows.size(), counts[0], counts[1], counts[2], static_cast<unsigned long long>(runner.stale_frames()));
  // The reports: one row per scenario (rule, what the peer did, verdict), differences explained.
  auto write_report = [&](const std::string& path, bool md) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "uroce-drill: cannot write %s\n", path.c_str());
      return;
    }
    if (md) {
      char day[16];
      time_t now = time(nullptr);
      strftime(day, sizeof day, "%Y-%m-%d", gmtime(&now));
      std::fprintf(f, "# Conformance: %s\n\n", peer.c_str());
      std::fprintf(f,
                   "What uroce-drill saw on %s: %zu scenarios, %d conform, %d differ, %d not applicable. The "
                   "scenarios are tools/drill/scenarios; docs/drill.md says how this report is made and how to "
                   "read it.%s\n\n",
                   day, rows.size(), counts[0], counts[1], counts[2],
                   counts[1] + counts[2] ? " Each difference is explained below the table." : "");
      std::fprintf(f, "| scenario | spec rule | what %s did | verdict |\n|---|---|---|---|\n", md_cell(peer).c_str());
      for (const Row& r : rows)
        std::fprintf(f, "| `%s` | %s | %s | **%s** |\n", r.sc->name.c_str(), md_cell(r.sc->rule).c_str(),
                     md_cell(r.r.verdict == Verdict::Conforms ? r.r.observed : r.r.why).c_str(),
                     verdict_name(r.r.verdict));
      bool any = false;
      for (const Row& r : rows)
        if (r.r.verdict != Verdict::Conforms) {
          if (!any) std::fprintf(f, "\n## Differences explained\n\n");
          any = true;
          auto e = explained.find(r.sc->name);
          std::string text = e != explained.end() ? e->second
                             : r.r.verdict == Verdict::NotApplicable ? r.r.why
                                                                      : "(not explained yet)";
          std::fprintf(f, "- **`%s`** (%s): %s\n", r.sc->name.c_str(), verdict_name(r.r.verdict), text.c_str());
        }
    } else {
      for (const Row& r : rows) {
        std::fprintf(f, "%-16s %-30s %s\n", verdict_name(r.r.verdict), r.sc->name.c_str(), r.sc->rule.c_str());
        std::fprintf(f, "%-16s %-30s %s\n", "", "", r.r.verdict == Verdict::Conforms ? r.r.observed.c_str() : r.r.why.c_str());
      }
      std::fprintf(f, "%zu scenarios: %d conform, %d differ, %d not applicable\n", rows.size(), counts[0], counts[1],
                   counts[2]);
    }
    std::fclose(f);
  };
  if (!report.empty()) write_report(report, false);
  if (!markdown.empty()) write_report(markdown, true);
  return counts[1] ? 1 : 0;
}
