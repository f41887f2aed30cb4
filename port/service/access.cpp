// Who may use a device of uroced: access.hpp.
#include "port/service/access.hpp"

#include <dirent.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

namespace uroce::port::service {

bool resolve_group(const std::string& text, Access& out, std::string& err) {
  out = Access{};
  if (text.empty()) return true;
  char* end = nullptr;
  const unsigned long n = std::strtoul(text.c_str(), &end, 10);
  if (end && *end == '\0' && end != text.c_str()) {
    out.group = gid_t(n);
  } else {
    const group* g = ::getgrnam(text.c_str());
    if (!g) {
      err = "no group " + text;
      return false;
    }
    out.group = g->gr_gid;
  }
  out.have_group = true;
  return true;
}

bool peer_allowed(int fd, const Access& a, std::string& why) {
  ucred cred{};
  socklen_t cl = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
    why = "permission denied: the process's credentials are unknown";
    return false;
  }
  if (cred.uid == 0 || cred.uid == ::geteuid()) return true;
  if (a.have_group) {
    if (cred.gid == a.group) return true;
    std::vector<gid_t> groups(64);
    socklen_t gl = socklen_t(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &gl) != 0 && errno == ERANGE) {
      groups.resize(gl / sizeof(gid_t));
      (void)::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &gl);
    }
    for (size_t i = 0; i < gl / sizeof(gid_t) && i < groups.size(); ++i)
      if (groups[i] == a.group) return true;
    why = "permission denied: the device is root's, uroced's user's and group " + std::to_string(a.group) + "'s";
    return false;
  }
  why = "permission denied: the device is root's and uroced's user's (uroced --group G opens it to a group)";
  return false;
}

namespace {

void say_once(const std::string& what) {
  static bool said = false;
  if (said) return;
  said = true;
  std::fprintf(stderr, "uroced: sharing with the group: %s: %s\n", what.c_str(), std::strerror(errno));
}

// Owner kept, group `g`, mode `mode`: a no-op when it has them already.
void give(const std::string& path, gid_t g, mode_t mode) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISLNK(st.st_mode)) return;
  if (st.st_gid != g && ::chown(path.c_str(), uid_t(-1), g) != 0) say_once("chown " + path);
  if ((st.st_mode & 07777) != mode && ::chmod(path.c_str(), mode) != 0) say_once("chmod " + path);
}

template <typename F>
void each_entry(const std::string& dir, F f) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
    f(std::string(e->d_name));
  }
  ::closedir(d);
}

}  // namespace

std::vector<std::string> hugetlbfs_dirs() {
  std::vector<std::string> out;
  std::ifstream m("/proc/mounts");
  std::string dev, dir, type, rest;
  while (m >> dev >> dir >> type) {
    std::getline(m, rest);
    if (type == "hugetlbfs") out.push_back(dir);
  }
  return out;
}

void share_files(const Access& a, const std::string& runtime_dir, const std::string& prefix) {
  if (!a.have_group || runtime_dir.empty()) return;
  // The parent (/var/run/dpdk for root), searchable by others so the group reaches its own
  // directory; not readable, so nobody lists the other DPDK programs' directories.
  const std::string parent = runtime_dir.substr(0, runtime_dir.find_last_of('/'));
  struct stat st {};
  if (!parent.empty() && ::stat(parent.c_str(), &st) == 0 && (st.st_mode & 0011) != 0011 &&
      ::chmod(parent.c_str(), (st.st_mode & 07777) | 0011) != 0)
    say_once("chmod " + parent);
  give(runtime_dir, a.group, 02770);
  each_entry(runtime_dir, [&](const std::string& n) { give(runtime_dir + "/" + n, a.group, 0660); });
  for (const std::string& dir : hugetlbfs_dirs())
    each_entry(dir, [&](const std::string& n) {
      // DPDK's page files: PREFIXmap_N (not another daemon's whose prefix starts with ours).
      const std::string mine = prefix + "map_";
      if (n.compare(0, mine.size(), mine) == 0) give(dir + "/" + n, a.group, 0660);
    });
}

}  // namespace uroce::port::service
