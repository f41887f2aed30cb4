// api_sweep: every entry point the real libibverbs exports, called through liburoce-verbs.so on
// a uroce device the way an application would (with valid uroce objects where it takes them),
// one call per symbol. A crash or a hang (a SIGSEGV/SIGBUS/SIGILL/SIGFPE/SIGABRT handler and a
// watchdog alarm jump back to the sweep) is counted and does not hide the calls after it. Each
// symbol prints one line: `name: returned ... errno ...`; then `N symbols, N ok, N crashed`.
//
// The symbol list is the real library's own (`nm -D --defined-only` of the libibverbs this
// process loaded): a symbol of a public version node (IBVERBS_1.*) without a step here fails
// the test, so a newer libibverbs cannot add an uncovered entry point. The provider ABI
// (IBVERBS_PRIVATE_*: ibv_cmd_*, verbs_*, execute_ioctl, ...) is what provider libraries call on
// their own contexts; it is not declared in any installed header and is listed, not called,
// except the members applications do use (ibv_query_gid_type).
//
// After the sweep it checks the asynchronous events (CQ_ERR, SRQ_LIMIT_REACHED,
// QP_LAST_WQE_REACHED, QP_FATAL from a retry timeout; async_fd pollable, epoll-able,
// non-blocking on request) and the GRH parsing of ibv_init_ah_from_wc (IPv4 and IPv6).
//
// Run inside namespace uroce-a on config/veth-a.conf (the kernel's 198.18.0.2 in uroce-b answers ARP):
//   ip netns exec uroce-a scripts/uroce-run --config config/veth-a.conf -- api_sweep
// Exit status 0 only when nothing crashed or hung, every public symbol is covered and every
// check passed.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <link.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port
#undef ibv_get_device_list

namespace {

// ---- Crash and hang protection -------------------------------------------------------------------
sigjmp_buf g_jmp;
volatile sig_atomic_t g_in_call = 0;
volatile sig_atomic_t g_sig = 0;
pid_t g_main_tid = 0;
constexpr unsigned kWatchdogS = 10;

void on_signal(int sig) {
  if (!g_in_call || pid_t(syscall(SYS_gettid)) != g_main_tid) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_sig = sig;
  siglongjmp(g_jmp, 1);
}

void install_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGALRM}) sigaction(s, &sa, nullptr);
}

// ---- Results -----------------------------------------------------------------------------------
struct Outcome {
  std::string text;        // "returned ..."
  bool clean_error = false;  // an error result (NULL/-1/errno): defined, counted as ok
};

std::string errstr(int e) {
  if (e == 0) return "0";
  const char* n = strerrorname_np(e);
  return n ? n : std::to_string(e);
}
Outcome ptr(const void* p) {
  int e = errno;
  if (p) return {"returned object", false};
  return {"returned NULL errno " + errstr(e), true};
}
Outcome num(long v) {
  int e = errno;
  if (v == 0) return {"returned 0", false};
  if (v < 0) return {"returned " + std::to_string(v) + " errno " + errstr(e), true};
  return {"returned " + std::to_string(v), false};
}
// Functions returning an errno value (0 or EXXX).
Outcome rc(int v) {
  if (v == 0) return {"returned 0", false};
  return {"returned " + errstr(v), true};
}
Outcome str(const char* s) { return {std::string("returned \"") + (s ? s : "(null)") + "\"", false}; }
Outcome none() { return {"returned (void)", false}; }

struct Row {
  std::string name;
  std::string result;
  enum { Ok, CleanError, Crashed, Hung, NotExported } kind;
};
std::vector<Row> g_rows;
std::set<std::string> g_called;
std::vector<std::string> g_check_failures;
std::map<std::string, std::set<std::string>> g_versions;   // the real library's exports: name -> versions

// The address an application would bind `name` to: the default definition (the shim's when it
// exports the symbol), else one of the real library's compat versions (name@VERSION only).
void* lookup(const char* name) {
  if (void* p = dlsym(RTLD_DEFAULT, name)) return p;
  auto it = g_versions.find(name);
  if (it == g_versions.end()) return nullptr;
  for (const std::string& v : it->second)
    if (void* p = dlvsym(RTLD_DEFAULT, name, v.c_str())) return p;
  return nullptr;
}

void check(bool ok, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void check(bool ok, const char* fmt, ...) {
  char b[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  std::printf("  check %s: %s\n", ok ? "ok" : "FAIL", b);
  std::fflush(stdout);
  if (!ok) g_check_failures.push_back(b);
}

// Calls `f` for symbol `name` under the crash and hang protection; records one row.
void call(const std::string& name, const std::function<Outcome()>& f) {
  g_called.insert(name);
  if (!lookup(name.c_str())) {
    g_rows.push_back({name, "not exported by the loaded libraries", Row::NotExported});
    std::printf("%s: not exported\n", name.c_str());
    return;
  }
  Outcome o;
  g_sig = 0;
  if (sigsetjmp(g_jmp, 1) == 0) {
    g_in_call = 1;
    alarm(kWatchdogS);
    errno = 0;
    o = f();
    alarm(0);
    g_in_call = 0;
  } else {
    alarm(0);
    g_in_call = 0;
    const bool hung = g_sig == SIGALRM;
    std::string r = hung ? "HUNG (no return within " + std::to_string(kWatchdogS) + " s)"
                         : std::string("CRASHED (signal ") + sigabbrev_np(g_sig) + ")";
    g_rows.push_back({name, r, hung ? Row::Hung : Row::Crashed});
    std::printf("%s: %s\n", name.c_str(), r.c_str());
    std::fflush(stdout);
    install_handlers();
    return;
  }
  g_rows.push_back({name, o.text, o.clean_error ? Row::CleanError : Row::Ok});
  std::printf("%s: %s\n", name.c_str(), o.text.c_str());
  std::fflush(stdout);
}

// The function an application linking libibverbs would reach by this name (the shim's when
// preloaded and it exports the symbol, else the real library's default version).
template <typename F>
F fn(const char* name) {
  return reinterpret_cast<F>(lookup(name));
}
#define FN(name) fn<decltype(&::name)>(#name)

// ---- The real library's exports ------------------------------------------------------------------
struct Export {
  std::set<std::string> versions;
};

std::string real_library_path() {
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return "";
  link_map* lm = nullptr;
  std::string p;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) p = lm->l_name;
  dlclose(h);
  return p;
}

std::map<std::string, Export> real_exports(const std::string& lib) {
  std::map<std::string, Export> out;
  std::string cmd = "nm -D --defined-only '" + lib + "'";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    char addr[64], type[8], sym[400];
    if (std::sscanf(line, "%63s %7s %399s", addr, type, sym) != 3) continue;
    if (type[0] == 'A') continue;   // version node definitions
    std::string s = sym, name = s, ver;
    size_t at = s.find('@');
    if (at != std::string::npos) {
      name = s.substr(0, at);
      ver = s.substr(s.find_first_not_of('@', at));
    }
    out[name].versions.insert(ver);
  }
  pclose(f);
  return out;
}

bool is_provider_abi(const Export& e) {
  for (const std::string& v : e.versions)
    if (v.rfind("IBVERBS_PRIVATE_", 0) != 0) return false;
  return !e.versions.empty();
}

// ---- Waiting for asynchronous events -------------------------------------------------------------
struct Seen {
  ibv_event_type type;
  void* element;
};

// Polls async_fd (non-blocking) until `want` arrived or `ms` passed; returns every event read
// (each acknowledged). Keeps the engine driven meanwhile with ibv_poll_cq on `cq`.
std::vector<Seen> collect_events(ibv_context* ctx, ibv_cq* cq, ibv_event_type want, void* element, int ms) {
  std::vector<Seen> got;
  timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    pollfd p{ctx->async_fd, POLLIN, 0};
    ibv_wc wc[4];
    if (cq) ibv_poll_cq(cq, 4, wc);
    if (poll(&p, 1, 5) == 1) {
      ibv_async_event ev;
      if (ibv_get_async_event(ctx, &ev) == 0) {
        void* el = ev.event_type == IBV_EVENT_CQ_ERR ? static_cast<void*>(ev.element.cq)
                   : (ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED || ev.event_type == IBV_EVENT_SRQ_ERR)
                       ? static_cast<void*>(ev.element.srq)
                       : static_cast<void*>(ev.element.qp);
        got.push_back({ev.event_type, el});
        std::printf("  event: %s\n", ibv_event_type_str(ev.event_type));
        ibv_ack_async_event(&ev);
        if (ev.event_type == want && el == element) return got;
      }
    }
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms) return got;
  }
}

bool has(const std::vector<Seen>& v, ibv_event_type t, void* el) {
  for (const Seen& s : v)
    if (s.type == t && s.element == el) return true;
  return false;
}

int to_state(ibv_qp* qp, ibv_qp_state s) {
  ibv_qp_attr a{};
  a.qp_state = s;
  int mask = IBV_QP_STATE;
  if (s == IBV_QPS_INIT) {
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  }
  return ibv_modify_qp(qp, &a, mask);
}

// The attributes of the sweep's RC QPs: 8 work requests of one SGE each way.
ibv_qp_init_attr rc_qp_attr(ibv_cq* scq, ibv_cq* rcq, ibv_srq* srq) {
  ibv_qp_init_attr ia{};
  ia.send_cq = scq;
  ia.recv_cq = rcq;
  ia.srq = srq;
  ia.cap.max_send_wr = 8;
  ia.cap.max_recv_wr = 8;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  return ia;
}

ibv_qp* rc_qp(ibv_pd* pd, ibv_cq* scq, ibv_cq* rcq, ibv_srq* srq) {
  ibv_qp_init_attr ia = rc_qp_attr(scq, rcq, srq);
  return ibv_create_qp(pd, &ia);
}

// The sweep cannot go on without `what`: says so, and main() returns this.
int fatal(const char* what) {
  std::printf("FAIL: %s\n", what);
  return 1;
}

}  // namespace

int main() {
  g_main_tid = pid_t(syscall(SYS_gettid));
  install_handlers();
  setvbuf(stdout, nullptr, _IOLBF, 0);

  const std::string lib = real_library_path();
  auto exports = real_exports(lib);
  for (const auto& [name, e] : exports) g_versions[name] = e.versions;
  std::printf("real library: %s, %zu exported symbols\n", lib.c_str(), exports.size());
  if (exports.empty()) return fatal("cannot list the real library's exports");

  // Objects the calls use (created by the calls themselves, in order).
  ibv_device** list = nullptr;
  ibv_device* dev = nullptr;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_mr *mr = nullptr, *mr2 = nullptr, *mr3 = nullptr;
  ibv_comp_channel* ch = nullptr;
  ibv_cq* cq = nullptr;
  ibv_srq* srq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_ah* ah = nullptr;
  ibv_async_event ev{};
  static uint8_t buf[1 << 16] __attribute__((aligned(4096)));
  static uint8_t buf2[1 << 16] __attribute__((aligned(4096)));
  static uint8_t zeros[4096] __attribute__((aligned(64)));
  const uint8_t kDst4[4] = {198, 18, 0, 11};   // config/veth-a.conf
  const uint8_t kSrc4[4] = {198, 18, 0, 12};

  // ---- Device list and device ----
  call("ibv_get_device_list", [&] {
    int n = 0;
    list = FN(ibv_get_device_list)(&n);
    if (list && n > 0) dev = list[0];   // uroce's device comes first
    return ptr(list);
  });
  if (!dev) return fatal("no device (is UROCE_CONFIG set?)");
  call("ibv_get_device_name", [&] { return str(FN(ibv_get_device_name)(dev)); });
  check(std::strncmp(ibv_get_device_name(dev), "uroce", 5) == 0, "the first device is uroce's (%s)",
        ibv_get_device_name(dev));
  call("ibv_get_device_guid", [&] { return num(long(FN(ibv_get_device_guid)(dev) != 0 ? 1 : 0)); });
  call("ibv_get_device_index", [&] { return num(FN(ibv_get_device_index)(dev)); });
  call("ibv_open_device", [&] {
    ctx = FN(ibv_open_device)(dev);
    return ptr(ctx);
  });
  if (!ctx) return fatal("ibv_open_device");
  call("ibv_query_device", [&] {
    ibv_device_attr a;
    // ibv_query_device_ex (inline in verbs.h, through the context's ops) as rxe fills it.
    ibv_device_attr_ex x;
    std::memset(&x, 0xA5, sizeof x);
    int rx = ibv_query_device_ex(ctx, nullptr, &x);
    // The 32-bit flags again in the 64-bit field, with IBA 1.5's above them (rdma-core 45's
    // IB_UVERBS_DEVICE_FLUSH_GLOBAL, _FLUSH_PERSISTENT, _ATOMIC_WRITE: bits 38, 39, 40), and memory
    // windows of type 1 and 2B.
    const uint64_t iba15 = 7ULL << 38;
    check(rx == 0 && x.phys_port_cnt_ex == 1 && x.orig_attr.phys_port_cnt == 1 &&
              (x.device_cap_flags_ex & 0xFFFFFFFFULL) == x.orig_attr.device_cap_flags &&
              (x.device_cap_flags_ex & ~0xFFFFFFFFULL) == iba15 &&
              (x.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW) &&
              (x.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) && x.orig_attr.max_mw > 0,
          "ibv_query_device_ex: %d, phys_port_cnt_ex %u, device_cap_flags_ex 0x%lx (0x%x), max_mw %d", rx,
          x.phys_port_cnt_ex, (unsigned long)x.device_cap_flags_ex, x.orig_attr.device_cap_flags, x.orig_attr.max_mw);
    // Completion timestamps: a 64-bit 1 GHz device clock, read by ibv_query_rt_values_ex (inline,
    // through the context's ops) as a ConnectX's provider gives it (ticks in tv_nsec), and a
    // CQ made with both timestamp flags.
    check(x.completion_timestamp_mask == UINT64_MAX && x.hca_core_clock == 1000000,
          "completion_timestamp_mask 0x%lx, hca_core_clock %lu kHz", (unsigned long)x.completion_timestamp_mask,
          (unsigned long)x.hca_core_clock);
    ibv_values_ex v1{}, v2{}, bad{};
    v1.comp_mask = v2.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
    bad.comp_mask = 0x80;
    int r1 = ibv_query_rt_values_ex(ctx, &v1), r2 = ibv_query_rt_values_ex(ctx, &v2), rb = ibv_query_rt_values_ex(ctx, &bad);
    check(r1 == 0 && r2 == 0 && v1.comp_mask == IBV_VALUES_MASK_RAW_CLOCK && v1.raw_clock.tv_sec == 0 &&
              v2.raw_clock.tv_nsec > v1.raw_clock.tv_nsec && rb == EINVAL,
          "ibv_query_rt_values_ex: %d %d (%ld then %ld), an unknown mask bit: %d", r1, r2, long(v1.raw_clock.tv_nsec),
          long(v2.raw_clock.tv_nsec), rb);
    // A tick is a nanosecond (hca_core_clock 1,000,000 kHz): 100 ms of CLOCK_MONOTONIC around
    // two reads of the device clock.
    timespec m0, m1;
    clock_gettime(CLOCK_MONOTONIC, &m0);
    ibv_query_rt_values_ex(ctx, &v1);
    const timespec nap{0, 100'000'000};
    nanosleep(&nap, nullptr);
    ibv_query_rt_values_ex(ctx, &v2);
    clock_gettime(CLOCK_MONOTONIC, &m1);
    const double wall = double(m1.tv_sec - m0.tv_sec) * 1e9 + double(m1.tv_nsec - m0.tv_nsec);
    const double ticks = double(v2.raw_clock.tv_nsec - v1.raw_clock.tv_nsec);
    check(ticks / wall > 0.8 && ticks / wall < 1.01, "device clock: %.0f ticks in %.0f ns of CLOCK_MONOTONIC", ticks,
          wall);
    ibv_cq_init_attr_ex cx{};
    cx.cqe = 4;
    cx.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
    ibv_cq_ex* tcq = ibv_create_cq_ex(ctx, &cx);
    ibv_poll_cq_attr pa{};
    check(tcq && tcq->read_completion_ts && tcq->read_completion_wallclock_ns && ibv_start_poll(tcq, &pa) == ENOENT,
          "ibv_create_cq_ex with completion timestamps: %p", static_cast<void*>(tcq));
    if (tcq) ibv_destroy_cq(ibv_cq_ex_to_cq(tcq));
    return rc(FN(ibv_query_device)(ctx, &a));
  });
  call("ibv_query_port", [&] {
    ibv_port_attr a{};
    int r = FN(ibv_query_port)(ctx, 1, reinterpret_cast<_compat_ibv_port_attr*>(&a));
    check(r == 0 && !(a.port_cap_flags & IBV_PORT_CM_SUP), "IBV_PORT_CM_SUP is not advertised");
    return rc(r);
  });
  call("ibv_query_gid", [&] {
    ibv_gid g;
    return num(FN(ibv_query_gid)(ctx, 1, 1, &g));
  });
  call("_ibv_query_gid_ex", [&] {
    ibv_gid_entry e;
    return rc(FN(_ibv_query_gid_ex)(ctx, 1, 1, &e, 0, sizeof e));
  });
  call("_ibv_query_gid_table", [&] {
    ibv_gid_entry e[8];
    return num(long(FN(_ibv_query_gid_table)(ctx, e, 8, 0, sizeof e[0])));
  });
  call("ibv_query_gid_type", [&] {
    int t = -1;
    using F = int (*)(ibv_context*, uint8_t, unsigned, int*);
    return num(fn<F>("ibv_query_gid_type")(ctx, 1, 1, &t));
  });
  call("ibv_query_pkey", [&] {
    __be16 k;
    return num(FN(ibv_query_pkey)(ctx, 1, 0, &k));
  });
  call("ibv_get_pkey_index", [&] { return num(FN(ibv_get_pkey_index)(ctx, 1, htons(0xffff))); });
  call("ibv_read_sysfs_file", [&] {
    char b[64];
    using F = int (*)(const char*, const char*, char*, size_t);
    return num(fn<F>("ibv_read_sysfs_file")(dev->ibdev_path, "fw_ver", b, sizeof b));
  });
  call("ibv_get_sysfs_path", [&] {
    using F = const char* (*)();
    return str(fn<F>("ibv_get_sysfs_path")());
  });
  call("ibv_import_device", [&] { return ptr(FN(ibv_import_device)(-1)); });

  // ---- PD, MR ----
  call("ibv_alloc_pd", [&] {
    pd = FN(ibv_alloc_pd)(ctx);
    return ptr(pd);
  });
  if (!pd) return fatal("ibv_alloc_pd");
  // On-demand paging: the capabilities ibv_rc_pingpong -o / -O ask for, an explicit ODP MR over
  // pages mapped later, the implicit one (NULL, SIZE_MAX), and ibv_advise_mr (inline in verbs.h,
  // through the context's ops) with its errors.
  const auto odp_checks = [&] {
    ibv_device_attr_ex x{};
    const int rq = ibv_query_device_ex(ctx, nullptr, &x);
    const uint32_t rc_all = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                            IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV |
                            (1 << 6) | (1 << 7);  // rdma-core 57's _FLUSH, _ATOMIC_WRITE
    check(rq == 0 && x.odp_caps.general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT) &&
              x.odp_caps.per_transport_caps.rc_odp_caps == rc_all &&
              (x.odp_caps.per_transport_caps.ud_odp_caps & IBV_ODP_SUPPORT_SEND) &&
              (x.odp_caps.per_transport_caps.uc_odp_caps & IBV_ODP_SUPPORT_WRITE),
          "odp_caps: general 0x%lx, rc 0x%x, uc 0x%x, ud 0x%x", (unsigned long)x.odp_caps.general_caps,
          x.odp_caps.per_transport_caps.rc_odp_caps, x.odp_caps.per_transport_caps.uc_odp_caps,
          x.odp_caps.per_transport_caps.ud_odp_caps);
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, 4 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    munmap(static_cast<char*>(m) + 2 * page, 2 * page);  // half of the range not mapped at all
    errno = 0;
    ibv_mr* plain = FN(ibv_reg_mr)(pd, m, 4 * page, IBV_ACCESS_LOCAL_WRITE);
    check(!plain && errno == EFAULT, "ibv_reg_mr of pages not mapped: NULL, EFAULT (%d)", errno);
    if (plain) FN(ibv_dereg_mr)(plain);
    ibv_mr* odp = FN(ibv_reg_mr)(pd, m, 4 * page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
    ibv_mr* all = FN(ibv_reg_mr)(pd, nullptr, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
    check(odp && all && all->addr == nullptr && all->length == SIZE_MAX,
          "ibv_reg_mr with IBV_ACCESS_ON_DEMAND: explicit over pages not mapped, implicit (NULL, SIZE_MAX)");
    if (!odp || !all) return;
    ibv_sge sg{uint64_t(uintptr_t(m)), uint32_t(page), odp->lkey};
    const int r0 = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sg, 1);
    mprotect(m, 2 * page, PROT_READ | PROT_WRITE);
    const int r1 = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sg, 1);
    ibv_sge whole{uint64_t(uintptr_t(buf)), uint32_t(sizeof buf), all->lkey};
    const int r2 = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &whole, 1);
    ibv_sge gone{uint64_t(uintptr_t(m)) + 2 * page, 64, odp->lkey};
    const int r3 = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &gone, 1);
    const int r4 = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &gone, 1);
    ibv_sge not_odp{uint64_t(uintptr_t(buf)), 64, mr ? mr->lkey : 0};
    const int r5 = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &not_odp, 1);
    const int r6 = ibv_advise_mr(pd, ibv_advise_mr_advice(7), 0, &sg, 1);
    const int r7 = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0x10, &sg, 1);
    check(r0 == EFAULT && r1 == 0 && r2 == 0 && r3 == EFAULT && r4 == 0 && r5 == EINVAL && r6 == ENOTSUP &&
              r7 == EINVAL,
          "ibv_advise_mr: PROT_NONE page %d (EFAULT), made writable %d, implicit %d, unmapped %d (EFAULT), "
          "NO_FAULT %d, not ODP %d (EINVAL), advice 7 %d (ENOTSUP), flag 0x10 %d (EINVAL)",
          r0, r1, r2, r3, r4, r5, r6, r7);
    const int d1 = FN(ibv_dereg_mr)(odp), d2 = FN(ibv_dereg_mr)(all);
    check(d1 == 0 && d2 == 0, "ibv_dereg_mr of both ODP MRs: %d %d", d1, d2);
    munmap(m, 2 * page);
  };
  call("ibv_reg_mr", [&] {
    mr = FN(ibv_reg_mr)(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    odp_checks();
    return ptr(mr);
  });
  call("ibv_reg_mr_iova", [&] {
    mr2 = FN(ibv_reg_mr_iova)(pd, buf2, sizeof buf2, 0x10000, IBV_ACCESS_LOCAL_WRITE);
    return ptr(mr2);
  });
  call("ibv_reg_mr_iova2", [&] {
    mr3 = FN(ibv_reg_mr_iova2)(pd, buf2, 4096, uint64_t(uintptr_t(buf2)), IBV_ACCESS_LOCAL_WRITE);
    return ptr(mr3);
  });
  call("ibv_rereg_mr", [&] {
    if (!mr2) return Outcome{"not called: no MR", true};
    const uint32_t lkey = mr2->lkey, rkey = mr2->rkey;
    int r = FN(ibv_rereg_mr)(mr2, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    // The keys stay, as on rxe and a ConnectX: a peer holding the rkey gets the new rights.
    check(r == 0 && mr2->lkey == lkey && mr2->rkey == rkey, "ibv_rereg_mr CHANGE_ACCESS: %d, the same keys", r);
    int r2 = FN(ibv_rereg_mr)(mr2, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, buf2 + 4096, 8192, 0);
    check(r2 == 0 && mr2->addr == buf2 + 4096 && mr2->length == 8192 && mr2->rkey == rkey,
          "ibv_rereg_mr CHANGE_TRANSLATION: %d", r2);
    int r3 = FN(ibv_rereg_mr)(mr2, 1 << 7, nullptr, nullptr, 0, 0);
    check(r3 == IBV_REREG_MR_ERR_INPUT, "ibv_rereg_mr with an unknown flag: IBV_REREG_MR_ERR_INPUT (%d)", r3);
    // Memory windows (inline in verbs.h, through the context's ops): both types allocated with
    // keys of their own, a third type refused, both freed.
    ibv_mw* w1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
    ibv_mw* w2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    check(w1 && w2 && w1->type == IBV_MW_TYPE_1 && w2->type == IBV_MW_TYPE_2 && w1->rkey != w2->rkey &&
              w1->rkey != mr2->rkey && w1->pd == pd,
          "ibv_alloc_mw: type 1 and type 2 windows");
    errno = 0;
    check(!ibv_alloc_mw(pd, ibv_mw_type(3)) && errno == EINVAL, "ibv_alloc_mw of type 3: NULL, EINVAL (%d)", errno);
    check(w1 && w2 && ibv_dealloc_mw(w1) == 0 && ibv_dealloc_mw(w2) == 0, "ibv_dealloc_mw: 0");
    return num(r);
  });
  call("ibv_reg_dmabuf_mr", [&] { return ptr(FN(ibv_reg_dmabuf_mr)(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE)); });
  // Importing (inside the process until the device is the host's, issue 29): a context from a
  // dup of the first one's command fd, the PD and the MR into it by their handles; a handle that
  // names nothing is EINVAL. The imported objects are released by ibv_unimport_*, the context
  // by ibv_close_device (which closes the fd it took).
  ibv_context* ctx2 = nullptr;
  ibv_pd* pd2 = nullptr;
  ibv_mr* mr4 = nullptr;
  call("ibv_import_pd", [&] {
    const int fd = dup(ctx->cmd_fd);
    ctx2 = fd >= 0 ? FN(ibv_import_device)(fd) : nullptr;
    check(ctx->cmd_fd >= 0 && ctx2 && ctx2->device == ctx->device && ctx2->cmd_fd == fd,
          "ibv_import_device of a dup of cmd_fd %d: a context on the same device", ctx->cmd_fd);
    pd2 = FN(ibv_import_pd)(ctx2 ? ctx2 : ctx, pd->handle);
    check(pd2 && pd2 != pd && pd2->handle == pd->handle, "ibv_import_pd: the PD by its handle");
    errno = 0;
    check(!FN(ibv_import_pd)(ctx, pd->handle + 1000) && errno == EINVAL, "ibv_import_pd of no PD: EINVAL");
    return ptr(pd2);
  });
  call("ibv_import_mr", [&] {
    mr4 = pd2 && mr ? FN(ibv_import_mr)(pd2, mr->handle) : nullptr;
    check(mr4 && mr4->lkey == mr->lkey && mr4->rkey == mr->rkey && mr4->addr == mr->addr && mr4->length == mr->length,
          "ibv_import_mr: the MR by its handle, with its keys and range");
    errno = 0;
    check(!FN(ibv_import_mr)(pd, 0) && errno == EINVAL, "ibv_import_mr of no MR: EINVAL");
    return ptr(mr4);
  });
  call("ibv_import_dm", [&] { return ptr(FN(ibv_import_dm)(ctx, 1)); });
  call("ibv_unimport_dm", [&] {
    // No uroce DM can exist; an application passing one with uroce's context gets a no-op.
    static ibv_dm fake{};
    fake.context = ctx;
    FN(ibv_unimport_dm)(&fake);
    return none();
  });

  // ---- Completion channel, CQ, SRQ, QP, AH ----
  call("ibv_create_comp_channel", [&] {
    ch = FN(ibv_create_comp_channel)(ctx);
    return ptr(ch);
  });
  if (ch) fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
  call("ibv_create_cq", [&] {
    cq = FN(ibv_create_cq)(ctx, 16, nullptr, ch, 0);
    return ptr(cq);
  });
  if (!cq) return fatal("ibv_create_cq");
  call("ibv_resize_cq", [&] {
    int r = FN(ibv_resize_cq)(cq, 64);
    check(r == 0 && cq->cqe >= 64, "ibv_resize_cq to 64: %d, cqe %d", r, cq->cqe);
    return rc(r);
  });
  call("ibv_get_cq_event", [&] {
    ibv_cq* c;
    void* cc;
    return num(FN(ibv_get_cq_event)(ch, &c, &cc));   // nothing armed: -1, EAGAIN (non-blocking fd)
  });
  call("ibv_ack_cq_events", [&] {
    FN(ibv_ack_cq_events)(cq, 0);
    return none();
  });
  // XRC (inline in verbs.h, through the context's ops: verbs_shim/xrc.cpp): a domain per file,
  // O_CREAT and O_EXCL as the kernel's, an XRC SRQ with a number (a basic SRQ has none), the
  // domain kept while the SRQ or a target QP is in it, a target QP only with a domain.
  const auto xrc_checks = [&](ibv_srq* basic) {
    char path[] = "/tmp/uroce-sweep-xrcd-XXXXXX";
    const int fd = mkstemp(path);
    ibv_xrcd_init_attr xa{};
    xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    xa.fd = fd;
    xa.oflags = 0;
    errno = 0;
    ibv_xrcd* none = ibv_open_xrcd(ctx, &xa);   // no domain for the file yet, none made
    const int e_none = errno;
    xa.oflags = O_CREAT;
    ibv_xrcd* x1 = ibv_open_xrcd(ctx, &xa);
    ibv_xrcd* x2 = ibv_open_xrcd(ctx, &xa);     // the same file: the same domain
    xa.oflags = O_CREAT | O_EXCL;
    errno = 0;
    ibv_xrcd* x3 = ibv_open_xrcd(ctx, &xa);
    const int e_excl = errno;
    check(!none && e_none == EINVAL && x1 && x2 && !x3 && e_excl == EEXIST,
          "ibv_open_xrcd: without O_CREAT %s (%d), with it twice %s %s, O_EXCL %s (%d)", none ? "a domain" : "NULL",
          e_none, x1 ? "ok" : "NULL", x2 ? "ok" : "NULL", x3 ? "a domain" : "NULL", e_excl);
    if (!x1 || !x2) return;
    ibv_srq_init_attr_ex sa{};
    sa.attr.max_wr = 4;
    sa.attr.max_sge = 1;
    sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
    sa.srq_type = IBV_SRQT_XRC;
    sa.xrcd = x1;
    sa.cq = cq;
    sa.pd = pd;
    ibv_srq* xs = ibv_create_srq_ex(ctx, &sa);
    uint32_t n = 0, nb = 7;
    const int rn = xs ? ibv_get_srq_num(xs, &n) : -1, rb = ibv_get_srq_num(basic, &nb);
    check(xs && rn == 0 && n != 0 && n < (1u << 24) && rb == EINVAL,
          "ibv_create_srq_ex (XRC): %s, ibv_get_srq_num %d (0x%x); of a basic SRQ %d", xs ? "ok" : "NULL", rn, n, rb);
    ibv_qp_init_attr_ex qa{};
    qa.qp_type = IBV_QPT_XRC_RECV;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD;
    qa.pd = pd;
    errno = 0;
    ibv_qp* no_domain = ibv_create_qp_ex(ctx, &qa);
    const int e_nd = errno;
    qa.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    qa.xrcd = x2;
    ibv_qp* tgt = ibv_create_qp_ex(ctx, &qa);
    check(!no_domain && e_nd == EINVAL && tgt && tgt->qp_type == IBV_QPT_XRC_RECV,
          "ibv_create_qp_ex XRC_RECV: with a PD and no domain %s (%d), with the domain %s", no_domain ? "a QP" : "NULL",
          e_nd, tgt ? "ok" : "NULL");
    const int c1 = ibv_close_xrcd(x1);           // the other open keeps the domain
    const int c2 = ibv_close_xrcd(x2);           // the last: its SRQ and target QP are in it
    const int dq = tgt ? FN(ibv_destroy_qp)(tgt) : -1, ds = xs ? FN(ibv_destroy_srq)(xs) : -1;
    const int c3 = c2 == 0 ? 0 : ibv_close_xrcd(x2);
    check(c1 == 0 && c2 == EBUSY && dq == 0 && ds == 0 && c3 == 0,
          "ibv_close_xrcd: one of two opens %d, the last with an SRQ and a QP in it %d, after them %d", c1, c2, c3);
    close(fd);
    unlink(path);
  };
  call("ibv_create_srq", [&] {
    ibv_srq_init_attr ia{};
    ia.attr.max_wr = 16;
    ia.attr.max_sge = 1;
    srq = FN(ibv_create_srq)(pd, &ia);
    if (srq) xrc_checks(srq);
    return ptr(srq);
  });
  call("ibv_modify_srq", [&] {
    ibv_srq_attr a{};
    a.srq_limit = 0;
    return rc(FN(ibv_modify_srq)(srq, &a, IBV_SRQ_LIMIT));
  });
  call("ibv_query_srq", [&] {
    ibv_srq_attr a{};
    return rc(FN(ibv_query_srq)(srq, &a));
  });
  call("ibv_create_qp", [&] {
    ibv_qp_init_attr ia = rc_qp_attr(cq, cq, nullptr);
    qp = FN(ibv_create_qp)(pd, &ia);
    return ptr(qp);
  });
  if (!qp) return fatal("ibv_create_qp");
  call("ibv_qp_to_qp_ex", [&] { return ptr(FN(ibv_qp_to_qp_ex)(qp)); });   // not created with ibv_wr_*: NULL
  call("ibv_modify_qp", [&] {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    return rc(FN(ibv_modify_qp)(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
  });
  call("ibv_query_qp", [&] {
    ibv_qp_attr a;
    ibv_qp_init_attr ia;
    return rc(FN(ibv_query_qp)(qp, &a, IBV_QP_STATE, &ia));
  });
  call("ibv_set_ece", [&] {
    ibv_ece e{};
    return rc(FN(ibv_set_ece)(qp, &e));
  });
  call("ibv_query_ece", [&] {
    ibv_ece e{};
    return rc(FN(ibv_query_ece)(qp, &e));
  });
  call("ibv_query_qp_data_in_order", [&] { return num(FN(ibv_query_qp_data_in_order)(qp, IBV_WR_RDMA_WRITE, 0)); });
  call("ibv_attach_mcast", [&] {
    ibv_gid g{};
    g.raw[0] = 0xff;
    return rc(FN(ibv_attach_mcast)(qp, &g, 0));
  });
  call("ibv_detach_mcast", [&] {
    ibv_gid g{};
    g.raw[0] = 0xff;
    return rc(FN(ibv_detach_mcast)(qp, &g, 0));
  });
  call("ibv_create_ah", [&] {
    ibv_ah_attr a{};
    a.is_global = 1;
    a.port_num = 1;
    a.grh.sgid_index = 1;
    a.grh.hop_limit = 64;
    // To this device's own IPv4 GID (loopback: no resolution, so a real AH comes back; an AH
    // to a peer is made the same way after ARP, as the UD suites show).
    if (FN(ibv_query_gid)(ctx, 1, 1, &a.grh.dgid)) return Outcome{"ibv_query_gid failed", false};
    ah = FN(ibv_create_ah)(pd, &a);
    return ptr(ah);
  });

  // The GRH area of a UD receive: IPv4 (20 bytes of zeros, then the IPv4 header) ...
  uint8_t grh4[40] = {};
  {
    uint8_t* h = grh4 + 20;
    h[0] = 0x45, h[1] = 0x8a /* TOS: DSCP 34, ECN 2 */, h[8] = 61 /* TTL */, h[9] = 17;
    std::memcpy(h + 12, kSrc4, 4);
    std::memcpy(h + 16, kDst4, 4);
  }
  ibv_wc wc{};
  wc.wc_flags = IBV_WC_GRH;
  wc.sl = 0;
  call("ibv_init_ah_from_wc", [&] {
    ibv_ah_attr a;
    int r = FN(ibv_init_ah_from_wc)(ctx, 1, &wc, reinterpret_cast<ibv_grh*>(grh4), &a);
    uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 12};
    check(r == 0 && a.is_global && std::memcmp(a.grh.dgid.raw, want, 16) == 0 && a.grh.sgid_index == 1 &&
              a.grh.traffic_class == 0x8a && a.grh.hop_limit == 61 && a.grh.flow_label == 0 && a.port_num == 1,
          "GRH IPv4: dgid ::ffff:198.18.0.12, sgid_index 1, tclass 0x8a, hop limit 61 (rc %d, sgid_index %u, "
          "tclass 0x%x, hop %u)", r, a.grh.sgid_index, a.grh.traffic_class, a.grh.hop_limit);
    return num(r);
  });
  {
    // ... IPv6 (the GRH is the IPv6 header), towards GID 0 (the link-local GID from our MAC).
    ibv_gid g0;
    ibv_query_gid(ctx, 1, 0, &g0);
    uint8_t grh6[40] = {};
    grh6[0] = 0x6b, grh6[1] = 0x81, grh6[2] = 0x23, grh6[3] = 0x45;   // tclass 0xb8, flow 0x12345
    grh6[6] = 17, grh6[7] = 33;
    uint8_t src6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42};
    std::memcpy(grh6 + 8, src6, 16);
    std::memcpy(grh6 + 24, g0.raw, 16);
    ibv_ah_attr a;
    int r = ibv_init_ah_from_wc(ctx, 1, &wc, reinterpret_cast<ibv_grh*>(grh6), &a);
    check(r == 0 && std::memcmp(a.grh.dgid.raw, src6, 16) == 0 && a.grh.sgid_index == 0 &&
              a.grh.traffic_class == 0xb8 && a.grh.flow_label == 0x12345 && a.grh.hop_limit == 33,
          "GRH IPv6: dgid 2001:db8::42, sgid_index 0, tclass 0xb8, flow 0x12345, hop limit 33 (rc %d, sgid_index "
          "%u, tclass 0x%x, flow 0x%x, hop %u)", r, a.grh.sgid_index, a.grh.traffic_class, a.grh.flow_label,
          a.grh.hop_limit);
    // Not addressed to one of our GIDs, or neither header: an error, not an AH.
    uint8_t other[40];
    std::memcpy(other, grh4, 40);
    other[39] = 99;
    errno = 0;
    r = ibv_init_ah_from_wc(ctx, 1, &wc, reinterpret_cast<ibv_grh*>(other), &a);
    check(r == -1 && errno != 0, "GRH IPv4 to an address that is not ours: -1 (%d, errno %s)", r, errstr(errno).c_str());
    errno = 0;
    r = ibv_init_ah_from_wc(ctx, 1, &wc, reinterpret_cast<ibv_grh*>(zeros), &a);
    check(r == -1 && errno == EINVAL, "GRH area of zeros: -1 EINVAL (%d, errno %s)", r, errstr(errno).c_str());
  }
  call("ibv_create_ah_from_wc", [&] {
    ibv_ah* a = FN(ibv_create_ah_from_wc)(pd, &wc, reinterpret_cast<ibv_grh*>(grh4), 1);
    Outcome o = ptr(a);
    if (a) ibv_destroy_ah(a);
    return o;
  });
  call("ibv_resolve_eth_l2_from_gid", [&] {
    ibv_ah_attr a{};
    a.is_global = 1;
    a.port_num = 1;
    a.grh.sgid_index = 1;
    a.grh.dgid.raw[10] = a.grh.dgid.raw[11] = 0xff;
    std::memcpy(&a.grh.dgid.raw[12], kSrc4, 4);
    uint8_t mac[6];
    uint16_t vid;
    return num(FN(ibv_resolve_eth_l2_from_gid)(ctx, &a, mac, &vid));
  });
  call("ibv_destroy_ah", [&] {
    if (!ah) return Outcome{"not called: ibv_create_ah gave no AH", true};
    int r = FN(ibv_destroy_ah)(ah);
    ah = nullptr;
    return rc(r);
  });

  // ---- Asynchronous events: an empty queue first ----
  fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
  call("ibv_get_async_event", [&] { return num(FN(ibv_get_async_event)(ctx, &ev)); });
  call("ibv_ack_async_event", [&] {
    ibv_async_event pe{};
    pe.event_type = IBV_EVENT_PORT_ACTIVE;
    pe.element.port_num = 1;
    FN(ibv_ack_async_event)(&pe);
    return none();
  });

  // ---- Context-free helpers ----
  call("ibv_event_type_str", [&] { return str(FN(ibv_event_type_str)(IBV_EVENT_QP_FATAL)); });
  call("ibv_node_type_str", [&] { return str(FN(ibv_node_type_str)(IBV_NODE_CA)); });
  call("ibv_port_state_str", [&] { return str(FN(ibv_port_state_str)(IBV_PORT_ACTIVE)); });
  call("ibv_wc_status_str", [&] { return str(FN(ibv_wc_status_str)(IBV_WC_RETRY_EXC_ERR)); });
  call("ibv_rate_to_mbps", [&] { return num(FN(ibv_rate_to_mbps)(IBV_RATE_25_GBPS)); });
  call("ibv_rate_to_mult", [&] { return num(FN(ibv_rate_to_mult)(IBV_RATE_10_GBPS)); });
  call("mbps_to_ibv_rate", [&] { return num(FN(mbps_to_ibv_rate)(25000)); });
  call("mult_to_ibv_rate", [&] { return num(FN(mult_to_ibv_rate)(4)); });
  // Pure copies between the kernel's structures and libibverbs': zeroed kernel structures.
  call("ibv_copy_ah_attr_from_kern", [&] {
    ibv_ah_attr a;
    fn<void (*)(ibv_ah_attr*, const void*)>("ibv_copy_ah_attr_from_kern")(&a, zeros);
    return none();
  });
  call("ibv_copy_qp_attr_from_kern", [&] {
    ibv_qp_attr a;
    fn<void (*)(ibv_qp_attr*, const void*)>("ibv_copy_qp_attr_from_kern")(&a, zeros);
    return none();
  });
  call("ibv_copy_path_rec_from_kern", [&] {
    static uint8_t out[512];
    fn<void (*)(void*, const void*)>("ibv_copy_path_rec_from_kern")(out, zeros);
    return none();
  });
  call("ibv_copy_path_rec_to_kern", [&] {
    static uint8_t out[512];
    fn<void (*)(void*, const void*)>("ibv_copy_path_rec_to_kern")(out, zeros);
    return none();
  });
  call("ibv_register_driver", [&] {
    // A stub kept for old providers' binary compatibility.
    fn<void (*)(const char*, void*)>("ibv_register_driver")("uroce-sweep", nullptr);
    return none();
  });
  call("ibv_is_fork_initialized", [&] { return num(FN(ibv_is_fork_initialized)()); });
  using ForkRange = int (*)(void*, size_t);   // not declared in verbs.h
  call("ibv_dontfork_range", [&] { return num(fn<ForkRange>("ibv_dontfork_range")(buf2 + 16384, 4096)); });
  call("ibv_dofork_range", [&] { return num(fn<ForkRange>("ibv_dofork_range")(buf2 + 16384, 4096)); });
  call("ibv_fork_init", [&] { return num(FN(ibv_fork_init)()); });

  // ---- Asynchronous events, each kind a user can meet on one node ----
  std::printf("asynchronous events:\n");
  {
    pollfd p{ctx->async_fd, POLLIN, 0};
    check(poll(&p, 1, 0) == 0, "async_fd is not readable while no event is queued");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ee{};
    ee.events = EPOLLIN;
    int er = epoll_ctl(ep, EPOLL_CTL_ADD, ctx->async_fd, &ee);
    check(er == 0, "epoll_ctl(ADD) accepts async_fd (%s)", er ? std::strerror(errno) : "ok");
    close(ep);
    errno = 0;
    check(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN, "ibv_get_async_event on an empty non-blocking fd: -1 EAGAIN");
  }
  // CQ overflow: three receives flushed into a CQ of depth 1.
  ibv_cq* small = ibv_create_cq(ctx, 1, nullptr, nullptr, 0);
  ibv_qp* qo = small ? rc_qp(pd, small, small, nullptr) : nullptr;
  check(qo != nullptr, "a QP on a CQ of depth 1");
  if (qo) {
    to_state(qo, IBV_QPS_INIT);
    for (int i = 0; i < 3; ++i) {
      ibv_sge s{uintptr_t(buf), 64, mr->lkey};
      ibv_recv_wr w{}, *bad;
      w.wr_id = uint64_t(i);
      w.sg_list = &s;
      w.num_sge = 1;
      ibv_post_recv(qo, &w, &bad);
    }
    to_state(qo, IBV_QPS_ERR);
    auto got = collect_events(ctx, small, IBV_EVENT_CQ_ERR, small, 3000);
    check(has(got, IBV_EVENT_CQ_ERR, small), "IBV_EVENT_CQ_ERR when the CQ overflowed");
    check(!has(got, IBV_EVENT_QP_FATAL, qo), "no IBV_EVENT_QP_FATAL for a QP the application moved to ERR");
  }
  // SRQ limit: 2 receives outstanding, limit armed at 4.
  {
    for (int i = 0; i < 2; ++i) {
      ibv_sge s{uintptr_t(buf), 64, mr->lkey};
      ibv_recv_wr w{}, *bad;
      w.sg_list = &s;
      w.num_sge = 1;
      ibv_post_srq_recv(srq, &w, &bad);
    }
    ibv_srq_attr a{};
    a.srq_limit = 4;
    check(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT) == 0, "ibv_modify_srq arms srq_limit 4");
    auto got = collect_events(ctx, cq, IBV_EVENT_SRQ_LIMIT_REACHED, srq, 3000);
    check(has(got, IBV_EVENT_SRQ_LIMIT_REACHED, srq), "IBV_EVENT_SRQ_LIMIT_REACHED below the limit");
    ibv_query_srq(srq, &a);
    check(a.srq_limit == 0, "the SRQ is disarmed after the event (srq_limit %u)", a.srq_limit);
  }
  // Last WQE reached: a QP with an SRQ enters ERR.
  ibv_qp* qs = rc_qp(pd, cq, cq, srq);
  if (qs) {
    to_state(qs, IBV_QPS_INIT);
    to_state(qs, IBV_QPS_ERR);
    auto got = collect_events(ctx, cq, IBV_EVENT_QP_LAST_WQE_REACHED, qs, 3000);
    check(has(got, IBV_EVENT_QP_LAST_WQE_REACHED, qs), "IBV_EVENT_QP_LAST_WQE_REACHED for a QP with an SRQ in ERR");
  } else {
    check(false, "a QP with an SRQ");
  }
  // QP fatal: an RC QP towards the kernel's 198.18.0.2 across the veth (it answers ARP, not
  // RoCE), one try.
  ibv_qp* qf = rc_qp(pd, cq, cq, nullptr);
  if (qf) {
    to_state(qf, IBV_QPS_INIT);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = 0x123;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.dgid.raw[10] = a.ah_attr.grh.dgid.raw[11] = 0xff;
    const uint8_t kernel4[4] = {198, 18, 0, 2};
    std::memcpy(&a.ah_attr.grh.dgid.raw[12], kernel4, 4);
    int r = ibv_modify_qp(qf, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    check(r == 0, "RTR towards 198.18.0.2 (%s)", r ? std::strerror(r) : "ok");
    ibv_qp_attr b{};
    b.qp_state = IBV_QPS_RTS;
    b.sq_psn = 0;
    b.timeout = 12;   // 16 ms
    b.retry_cnt = 0;
    b.rnr_retry = 0;
    b.max_rd_atomic = 1;
    r = ibv_modify_qp(qf, &b,
                      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_MAX_QP_RD_ATOMIC);
    check(r == 0, "RTS (%s)", r ? std::strerror(r) : "ok");
    ibv_sge s{uintptr_t(buf), 64, mr->lkey};
    ibv_send_wr w{}, *bad;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.sg_list = &s;
    w.num_sge = 1;
    w.wr.rdma.remote_addr = 0x1000;
    w.wr.rdma.rkey = 0x1234;
    check(ibv_post_send(qf, &w, &bad) == 0, "a WRITE nobody will acknowledge");
    auto got = collect_events(ctx, cq, IBV_EVENT_QP_FATAL, qf, 5000);
    check(has(got, IBV_EVENT_QP_FATAL, qf), "IBV_EVENT_QP_FATAL after the retries ran out");
  } else {
    check(false, "a QP for the retry test");
  }
  {
    pollfd p{ctx->async_fd, POLLIN, 0};
    check(poll(&p, 1, 0) == 0, "async_fd is not readable once every event was read");
  }
  // Destroy calls wait only for events returned and not acknowledged: all were acknowledged.
  if (qo) ibv_destroy_qp(qo);
  if (small) ibv_destroy_cq(small);
  if (qs) ibv_destroy_qp(qs);
  if (qf) ibv_destroy_qp(qf);

  // ---- Destroy ----
  call("ibv_unimport_mr", [&] {
    if (mr4) FN(ibv_unimport_mr)(mr4);  // the imported object only: the MR stays (deregistered below)
    FN(ibv_unimport_mr)(mr3);           // an MR that was not imported: a no-op
    return none();
  });
  call("ibv_unimport_pd", [&] {
    if (pd2) FN(ibv_unimport_pd)(pd2);
    FN(ibv_unimport_pd)(pd);            // a no-op for a PD that was not imported
    if (ctx2) check(ibv_close_device(ctx2) == 0, "ibv_close_device of the imported context");
    return none();
  });
  call("ibv_destroy_qp", [&] { return rc(FN(ibv_destroy_qp)(qp)); });
  call("ibv_destroy_srq", [&] { return rc(FN(ibv_destroy_srq)(srq)); });
  call("ibv_destroy_cq", [&] { return rc(FN(ibv_destroy_cq)(cq)); });
  call("ibv_destroy_comp_channel", [&] { return rc(FN(ibv_destroy_comp_channel)(ch)); });
  call("ibv_dereg_mr", [&] {
    int r = FN(ibv_dereg_mr)(mr);
    if (mr2) ibv_dereg_mr(mr2);
    if (mr3) ibv_dereg_mr(mr3);
    return rc(r);
  });
  call("ibv_dealloc_pd", [&] { return rc(FN(ibv_dealloc_pd)(pd)); });
  call("ibv_close_device", [&] { return rc(FN(ibv_close_device)(ctx)); });
  call("ibv_free_device_list", [&] {
    FN(ibv_free_device_list)(list);
    return none();
  });

  // ---- Coverage and summary ----
  int missing = 0, provider = 0;
  std::vector<std::string> provider_names;
  for (const auto& [name, e] : exports) {
    if (g_called.count(name)) continue;
    if (is_provider_abi(e)) {
      ++provider;
      provider_names.push_back(name);
      continue;
    }
    ++missing;
    std::printf("MISSING: %s (exported by %s) has no step in api_sweep\n", name.c_str(), lib.c_str());
  }
  std::printf("provider ABI (IBVERBS_PRIVATE_*), not called:");
  for (const std::string& n : provider_names) std::printf(" %s", n.c_str());
  std::printf("\n");
  int ok = 0, crashed = 0, hung = 0, errors = 0, n = 0;
  for (const Row& r : g_rows) {
    if (r.kind == Row::NotExported) continue;
    ++n;
    if (r.kind == Row::Ok || r.kind == Row::CleanError) ++ok;
    if (r.kind == Row::CleanError) ++errors;
    if (r.kind == Row::Crashed) ++crashed;
    if (r.kind == Row::Hung) ++hung;
  }
  std::printf("error results (defined):");
  for (const Row& r : g_rows)
    if (r.kind == Row::CleanError) std::printf(" %s", r.name.c_str());
  std::printf("\n");
  std::printf("%d symbols, %d ok, %d crashed (%d hung; %d of the ok returned an error; %d provider-ABI symbols not "
              "called; %d uncovered; %zu check failures)\n",
              n, ok, crashed + hung, hung, errors, provider, missing, g_check_failures.size());
  const bool pass = crashed == 0 && hung == 0 && missing == 0 && g_check_failures.empty();
  std::printf("%s\n", pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  _exit(pass ? 0 : 1);
}
