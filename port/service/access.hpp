// Who may use a device of uroced (docs/service.md "Permissions"): root, the daemon's own user, and
// the members of a group the daemon is given (config key service_group, uroced --group), as
// /dev/infiniband/uverbs* may be opened by root and a group (udev's rdma group on many
// distributions). A process attaches as a DPDK secondary of the daemon, so the group also needs
// the daemon's DPDK files: its runtime directory (config, memory maps, the multi-process
// socket) and its hugepage files, which DPDK makes for their owner only. share_files() gives
// them to the group (directory 0770, files 0660, group-owned) and makes the runtime directory's
// parent traversable (o+x only: nobody may list it); the daemon calls it once its EAL has started
// and again at every attach (memory DPDK mapped later has files of its own).
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace uroce::port::service {

struct Access {
  bool have_group = false;
  gid_t group = 0;
};

// A group name or number (an empty text: no group). False and `err` when there is no such group.
bool resolve_group(const std::string& text, Access& out, std::string& err);

// The peer of the connected unix socket `fd` may use the device: root, our effective user, or a
// process whose group or one of whose supplementary groups is the device's. Else `why`.
bool peer_allowed(int fd, const Access& a, std::string& why);

// The daemon's DPDK files (runtime directory `runtime_dir`, hugepage files named `prefix`...)
// opened to the device's group. Nothing without a group. Failures are said on stderr once.
void share_files(const Access& a, const std::string& runtime_dir, const std::string& prefix);

// Every hugetlbfs mount's directory (DPDK puts its page files in the one of its page size).
std::vector<std::string> hugetlbfs_dirs();

}  // namespace uroce::port::service
