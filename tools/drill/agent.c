// uroce-drill-agent: the peer-side half of uroce-drill (docs/drill.md).
//
// The drill controller tests a RoCEv2 implementation by putting hand-crafted frames on the wire
// and watching what the peer does. This agent is the peer's hands: it runs on the host under test,
// listens on TCP, and lets one controller at a time drive one QP of the local RDMA device through
// plain libibverbs. It is C with no dependency beyond libc and libibverbs, so it runs in a minimal
// guest (or on any vendor's RDMA host) where the C++ half of uroce would not.
//
// Protocol: the client sends one request per line ('\n'-terminated, at most 4096 bytes); the agent
// answers each with exactly one line, so the two run in lockstep. A request is words separated by
// blanks: the command, for some commands one bare word (an MR name or a post operation), then
// key=value words. Numbers are decimal or 0x-hex; unknown, duplicate or malformed keys are errors.
// A reply is either `ok` followed by ` key=value` words, or `err <message>`.
//
//   open [dev=NAME] [gid=IDX] [type=rc|uc|ud] [port=1] [cqe=256] [max_send_wr=64] [max_recv_wr=64]
//        [max_sge=4] [max_inline=0] [psn=N] [qkey=0x11111111]
//        -> ok qpn=N psn=N gid=<32 hex> mtu_active=<bytes>     (device, PD, one CQ, QP in INIT)
//   mr NAME len=N [access=lw,rw,rr,ra|none] [fill=BYTE]  -> ok rkey=N lkey=N va=N len=N
//   connect dqpn=N dgid=<32 hex> [mtu=1024] [rq_psn=0] [sq_psn=<open psn>] [timeout=14] [retry=7]
//        [rnr_retry=7] [min_rnr=12] [rd_atomic=1] [dest_rd_atomic=1] [sgid=<open gid>] [hop=64]
//        [tclass=0] [sl=0] [rts=1]                      -> ok   (INIT->RTR->RTS; ud: also the AH)
//   modify state=RESET|INIT|RTR|RTS|SQD|SQE|ERR         -> ok   (IBV_QP_STATE only)
//   recv MR [off=0] len=N [wr=0]                        -> ok   (len=0: no SGE)
//   post send|send_imm|send_inv|write|write_imm|read|cas|fadd [mr=NAME [off=0] len=N] [wr=0]
//        [rva=N] [rkey=N] [imm=N] [compare=N] [swap=N] [add=N] [signaled=1] [solicited=0]
//        [fence=0] [inline=0]                           -> ok
//   poll [timeout_ms=1000] [max=1]  -> ok none | ok wr=N status=S opcode=O len=N qp=N [imm=N]
//                                      [inv_rkey=N] [src_qp=N] [vendor_err=N]
//   state                           -> ok state=S sq_psn=N rq_psn=N
//   read MR [off=0] len=N (<= 1024) -> ok hex=<bytes>
//   fill MR [off=0] len=N byte=N    -> ok
//   reset                           -> ok   (destroys everything; also done on disconnect)
//   quit                            -> ok, then the agent closes the connection
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define PROGRAM "uroce-drill-agent"
#define DEFAULT_ADDR "0.0.0.0"
#define DEFAULT_PORT "18600"

#define MAX_LINE 4096         // request bytes, without the '\n'
#define MAX_PAIRS 64          // key=value words in one request
#define MAX_MRS 16
#define MAX_MR_NAME 31
#define MAX_READ 1024         // bytes of one `read` (the reply carries twice as many hex digits)
#define MAX_MR_LEN (1ull << 30)
#define REPLY_CAP 8192        // room for `ok hex=` of MAX_READ bytes and for echoing a whole request
#define POLL_NAP_NS 50000     // between empty polls: keeps a waiting `poll` from owning a core
#define MAX_POLL_MS 600000

// ---------------------------------------------------------------------------------------------
// Replies

struct reply {
  char text[REPLY_CAP];
  size_t len;
};

static void reply_vadd(struct reply *r, const char *fmt, va_list ap) {
  if (r->len >= sizeof r->text - 1) return;
  int n = vsnprintf(r->text + r->len, sizeof r->text - r->len, fmt, ap);
  if (n < 0) return;
  r->len += (size_t)n;
  if (r->len > sizeof r->text - 1) r->len = sizeof r->text - 1;  // truncated, still one line
}

__attribute__((format(printf, 2, 3))) static void reply_add(struct reply *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  reply_vadd(r, fmt, ap);
  va_end(ap);
}

// Replaces whatever the handler had added with `err <message>`; returns -1 so that handlers can
// `return reply_err(...)`.
__attribute__((format(printf, 2, 3))) static int reply_err(struct reply *r, const char *fmt, ...) {
  r->len = 0;
  reply_add(r, "err ");
  va_list ap;
  va_start(ap, fmt);
  reply_vadd(r, fmt, ap);
  va_end(ap);
  return -1;
}

static int reply_errno(struct reply *r, const char *call, int err) {
  if (err == 0) return reply_err(r, "%s failed (no error code)", call);
  return reply_err(r, "%s: %s (%d)", call, strerror(err), err);
}

// libibverbs is not consistent: most calls return an errno value, some return -1 and set errno,
// a few providers return a negated errno. The caller clears errno before the call.
static int verbs_errno(int ret) {
  if (ret > 0) return ret;
  if (ret < -1) return -ret;
  return errno;
}

// ---------------------------------------------------------------------------------------------
// Requests

struct pair {
  const char *key;
  const char *val;
};

struct request {
  const char *cmd;
  const char *word;  // the bare word after the command (MR name, post operation), or NULL
  struct pair pairs[MAX_PAIRS];
  int n_pairs;
};

static const char *find_value(const struct request *rq, const char *key) {
  for (int i = 0; i < rq->n_pairs; i++)
    if (strcmp(rq->pairs[i].key, key) == 0) return rq->pairs[i].val;
  return NULL;
}

// Decimal or 0x-hex only: strtoull's base 0 would read a leading 0 as octal, and it would accept
// signs and blanks, none of which a controller means to send.
static int parse_number(struct reply *r, const char *key, const char *text, uint64_t *out) {
  const char *digits = text;
  int base = 10;
  if (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    base = 16;
    digits += 2;
  }
  bool first_ok = base == 16 ? isxdigit((unsigned char)digits[0]) : isdigit((unsigned char)digits[0]);
  if (!first_ok) return reply_err(r, "bad number for '%s': '%s'", key, text);
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(digits, &end, base);
  if (errno == ERANGE) return reply_err(r, "number for '%s' too large: '%s'", key, text);
  if (errno != 0 || *end != '\0') return reply_err(r, "bad number for '%s': '%s'", key, text);
  *out = v;
  return 0;
}

static int number_in(struct reply *r, const char *key, const char *text, uint64_t min, uint64_t max,
                     uint64_t *out) {
  if (parse_number(r, key, text, out) < 0) return -1;
  if (*out < min || *out > max)
    return reply_err(r, "value for '%s' out of range: '%s' (allowed %" PRIu64 "..%" PRIu64 ")", key,
                     text, min, max);
  return 0;
}

static int opt_num(const struct request *rq, struct reply *r, const char *key, uint64_t dflt,
                   uint64_t min, uint64_t max, uint64_t *out) {
  const char *text = find_value(rq, key);
  if (!text) {
    *out = dflt;
    return 0;
  }
  return number_in(r, key, text, min, max, out);
}

static int req_num(const struct request *rq, struct reply *r, const char *key, uint64_t min,
                   uint64_t max, uint64_t *out) {
  const char *text = find_value(rq, key);
  if (!text) return reply_err(r, "missing key '%s'", key);
  return number_in(r, key, text, min, max, out);
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 32 hex digits; colons are skipped so that the IPv6 spelling of a GID (fe80:0000:...) works too.
static int parse_gid(struct reply *r, const char *key, const char *text, union ibv_gid *gid) {
  int n = 0;
  for (const char *p = text; *p; p++) {
    if (*p == ':') continue;
    int d = hex_digit(*p);
    if (d < 0 || n == 32) return reply_err(r, "bad gid for '%s': '%s' (expected 32 hex digits)", key, text);
    if (n % 2 == 0)
      gid->raw[n / 2] = (uint8_t)(d << 4);
    else
      gid->raw[n / 2] |= (uint8_t)d;
    n++;
  }
  if (n != 32) return reply_err(r, "bad gid for '%s': '%s' (expected 32 hex digits)", key, text);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Session: what one client has created. Everything is torn down when the client goes.

struct mr_slot {
  char name[MAX_MR_NAME + 1];  // "" = free slot
  void *buf;
  size_t len;
  struct ibv_mr *mr;
};

struct session {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_ah *ah;  // ud only, made by `connect`
  enum ibv_qp_type qp_type;
  uint8_t port;
  uint8_t gid_index;
  uint32_t psn;  // initial send PSN chosen at `open`, the default of `connect sq_psn=`
  uint32_t qkey;
  uint32_t remote_qpn;  // ud only
  struct mr_slot mrs[MAX_MRS];
  bool quit;
};

struct first_failure {
  const char *call;
  int err;
};

static void note_failure(struct first_failure *f, const char *call, int err) {
  fprintf(stderr, PROGRAM ": reset: %s: %s (%d)\n", call, strerror(err), err);
  if (!f->call) {
    f->call = call;
    f->err = err;
  }
}

// Destroys in dependency order. A failure does not stop the teardown: the pointers are dropped
// anyway, and ibv_close_device releases whatever the kernel still holds. The one thing not done
// after a failure is freeing an MR's buffer whose deregistration failed, since the device may
// still write into it; that buffer is leaked instead.
static int session_reset(struct session *s, struct reply *r) {
  struct first_failure f = {NULL, 0};
  int ret;
  if (s->qp) {
    errno = 0;
    if ((ret = ibv_destroy_qp(s->qp)) != 0) note_failure(&f, "ibv_destroy_qp", verbs_errno(ret));
  }
  if (s->ah) {
    errno = 0;
    if ((ret = ibv_destroy_ah(s->ah)) != 0) note_failure(&f, "ibv_destroy_ah", verbs_errno(ret));
  }
  for (int i = 0; i < MAX_MRS; i++) {
    struct mr_slot *m = &s->mrs[i];
    if (!m->name[0]) continue;
    bool can_free = true;
    if (m->mr) {
      errno = 0;
      if ((ret = ibv_dereg_mr(m->mr)) != 0) {
        note_failure(&f, "ibv_dereg_mr", verbs_errno(ret));
        can_free = false;
      }
    }
    if (can_free) free(m->buf);
    memset(m, 0, sizeof *m);
  }
  if (s->cq) {
    errno = 0;
    if ((ret = ibv_destroy_cq(s->cq)) != 0) note_failure(&f, "ibv_destroy_cq", verbs_errno(ret));
  }
  if (s->pd) {
    errno = 0;
    if ((ret = ibv_dealloc_pd(s->pd)) != 0) note_failure(&f, "ibv_dealloc_pd", verbs_errno(ret));
  }
  if (s->ctx) {
    errno = 0;
    if ((ret = ibv_close_device(s->ctx)) != 0) note_failure(&f, "ibv_close_device", verbs_errno(ret));
  }
  bool quit = s->quit;
  memset(s, 0, sizeof *s);
  s->quit = quit;
  if (f.call && r)
    return reply_err(r, "reset: %s: %s (%d) (all state dropped)", f.call, strerror(f.err), f.err);
  return f.call ? -1 : 0;
}

static int need_open(const struct session *s, struct reply *r) {
  if (!s->qp) return reply_err(r, "not open (open first)");
  return 0;
}

static struct mr_slot *find_mr(struct session *s, const char *name) {
  for (int i = 0; i < MAX_MRS; i++)
    if (s->mrs[i].name[0] && strcmp(s->mrs[i].name, name) == 0) return &s->mrs[i];
  return NULL;
}

static int lookup_mr(struct session *s, struct reply *r, const char *name, struct mr_slot **out) {
  if (!name || !name[0]) return reply_err(r, "missing mr name");
  *out = find_mr(s, name);
  if (!*out) return reply_err(r, "unknown mr '%s'", name);
  return 0;
}

// off (default 0) and len (required) of a range inside the MR, checked without overflow.
static int mr_range(const struct request *rq, struct reply *r, const struct mr_slot *m,
                    uint64_t max_len, uint64_t *off, uint64_t *len) {
  if (opt_num(rq, r, "off", 0, 0, UINT64_MAX, off) < 0) return -1;
  if (req_num(rq, r, "len", 0, max_len, len) < 0) return -1;
  if (*off > m->len || *len > m->len - *off)
    return reply_err(r, "range off=%" PRIu64 " len=%" PRIu64 " outside mr '%s' (len %zu)", *off, *len,
                     m->name, m->len);
  return 0;
}

static uint32_t random_psn(void) { return (uint32_t)random() & 0xffffff; }

static int mtu_bytes(enum ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
  }
  return 0;
}

static const char *const qp_state_names[] = {
    [IBV_QPS_RESET] = "RESET", [IBV_QPS_INIT] = "INIT", [IBV_QPS_RTR] = "RTR", [IBV_QPS_RTS] = "RTS",
    [IBV_QPS_SQD] = "SQD",     [IBV_QPS_SQE] = "SQE",   [IBV_QPS_ERR] = "ERR",
};

static const char *qp_state_name(enum ibv_qp_state st) {
  if ((unsigned)st < sizeof qp_state_names / sizeof qp_state_names[0] && qp_state_names[st])
    return qp_state_names[st];
  return "UNKNOWN";
}

// ---------------------------------------------------------------------------------------------
// Commands

static int cmd_open(struct session *s, const struct request *rq, struct reply *r) {
  if (s->ctx) return reply_err(r, "already open (reset first)");

  enum ibv_qp_type type = IBV_QPT_RC;
  const char *type_name = find_value(rq, "type");
  if (type_name) {
    if (strcmp(type_name, "rc") == 0)
      type = IBV_QPT_RC;
    else if (strcmp(type_name, "uc") == 0)
      type = IBV_QPT_UC;
    else if (strcmp(type_name, "ud") == 0)
      type = IBV_QPT_UD;
    else
      return reply_err(r, "bad type '%s' (expected rc, uc or ud)", type_name);
  }
  uint64_t gid_index, port, cqe, max_send_wr, max_recv_wr, max_sge, max_inline, psn, qkey;
  if (opt_num(rq, r, "gid", 0, 0, 255, &gid_index) < 0 || opt_num(rq, r, "port", 1, 1, 255, &port) < 0 ||
      opt_num(rq, r, "cqe", 256, 1, INT32_MAX, &cqe) < 0 ||
      opt_num(rq, r, "max_send_wr", 64, 0, UINT32_MAX, &max_send_wr) < 0 ||
      opt_num(rq, r, "max_recv_wr", 64, 0, UINT32_MAX, &max_recv_wr) < 0 ||
      opt_num(rq, r, "max_sge", 4, 0, UINT32_MAX, &max_sge) < 0 ||
      opt_num(rq, r, "max_inline", 0, 0, UINT32_MAX, &max_inline) < 0 ||
      opt_num(rq, r, "psn", random_psn(), 0, 0xffffff, &psn) < 0 ||
      opt_num(rq, r, "qkey", 0x11111111, 0, UINT32_MAX, &qkey) < 0)
    return -1;

  int n_devices = 0;
  errno = 0;
  struct ibv_device **devices = ibv_get_device_list(&n_devices);
  if (!devices) {
    // rdma-core says ENOSYS when the kernel has no RDMA stack at all (no /sys/class/infiniband).
    int err = errno;
    if (err == ENOSYS)
      return reply_err(r, "no RDMA device found (ibv_get_device_list: %s (%d))", strerror(err), err);
    return reply_errno(r, "ibv_get_device_list", err);
  }
  const char *dev_name = find_value(rq, "dev");
  struct ibv_device *device = NULL;
  for (int i = 0; i < n_devices && !device; i++)
    if (!dev_name || strcmp(ibv_get_device_name(devices[i]), dev_name) == 0) device = devices[i];
  if (!device) {
    ibv_free_device_list(devices);
    if (dev_name) return reply_err(r, "no RDMA device named '%s'", dev_name);
    return reply_err(r, "no RDMA device found");
  }
  errno = 0;
  s->ctx = ibv_open_device(device);
  int open_err = errno;
  ibv_free_device_list(devices);  // an opened device outlives the list
  if (!s->ctx) return reply_errno(r, "ibv_open_device", open_err);
  s->qp_type = type;
  s->port = (uint8_t)port;
  s->gid_index = (uint8_t)gid_index;
  s->psn = (uint32_t)psn;
  s->qkey = (uint32_t)qkey;

  int ret;
  struct ibv_port_attr port_attr;
  memset(&port_attr, 0, sizeof port_attr);
  errno = 0;
  if ((ret = ibv_query_port(s->ctx, s->port, &port_attr)) != 0) {
    reply_errno(r, "ibv_query_port", verbs_errno(ret));
    goto fail;
  }
  union ibv_gid gid;
  errno = 0;
  if ((ret = ibv_query_gid(s->ctx, s->port, s->gid_index, &gid)) != 0) {
    reply_errno(r, "ibv_query_gid", verbs_errno(ret));
    goto fail;
  }
  errno = 0;
  if (!(s->pd = ibv_alloc_pd(s->ctx))) {
    reply_errno(r, "ibv_alloc_pd", errno);
    goto fail;
  }
  errno = 0;
  if (!(s->cq = ibv_create_cq(s->ctx, (int)cqe, NULL, NULL, 0))) {
    reply_errno(r, "ibv_create_cq", errno);
    goto fail;
  }
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof init);
  init.send_cq = s->cq;
  init.recv_cq = s->cq;
  init.qp_type = type;
  init.sq_sig_all = 0;  // each `post` says whether it wants a completion
  init.cap.max_send_wr = (uint32_t)max_send_wr;
  init.cap.max_recv_wr = (uint32_t)max_recv_wr;
  init.cap.max_send_sge = (uint32_t)max_sge;
  init.cap.max_recv_sge = (uint32_t)max_sge;
  init.cap.max_inline_data = (uint32_t)max_inline;
  errno = 0;
  if (!(s->qp = ibv_create_qp(s->pd, &init))) {
    reply_errno(r, "ibv_create_qp", errno);
    goto fail;
  }
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = s->port;
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (type == IBV_QPT_UD) {
    attr.qkey = s->qkey;
    mask |= IBV_QP_QKEY;
  } else {
    // Everything allowed: the scenarios probe the remote side's checks, not ours.
    attr.qp_access_flags =
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  errno = 0;
  if ((ret = ibv_modify_qp(s->qp, &attr, mask)) != 0) {
    reply_errno(r, "ibv_modify_qp(INIT)", verbs_errno(ret));
    goto fail;
  }

  reply_add(r, " qpn=%" PRIu32 " psn=%" PRIu32 " gid=", s->qp->qp_num, s->psn);
  for (int i = 0; i < 16; i++) reply_add(r, "%02x", gid.raw[i]);
  reply_add(r, " mtu_active=%d", mtu_bytes(port_attr.active_mtu));
  return 0;

fail:
  session_reset(s, NULL);  // keeps the reply's error, which names the call that failed
  return -1;
}

static int parse_access(struct reply *r, const char *text, int *out) {
  *out = 0;
  if (strcmp(text, "none") == 0) return 0;
  const char *p = text;
  for (;;) {
    size_t n = strcspn(p, ",");
    if (n == 2 && strncmp(p, "lw", 2) == 0)
      *out |= IBV_ACCESS_LOCAL_WRITE;
    else if (n == 2 && strncmp(p, "rw", 2) == 0)
      *out |= IBV_ACCESS_REMOTE_WRITE;
    else if (n == 2 && strncmp(p, "rr", 2) == 0)
      *out |= IBV_ACCESS_REMOTE_READ;
    else if (n == 2 && strncmp(p, "ra", 2) == 0)
      *out |= IBV_ACCESS_REMOTE_ATOMIC;
    else
      return reply_err(r, "bad access '%s' (expected a comma list of lw, rw, rr, ra, or none)", text);
    if (p[n] == '\0') return 0;
    p += n + 1;
  }
}

static int cmd_mr(struct session *s, const struct request *rq, struct reply *r) {
  const char *name = rq->word;
  if (!name) return reply_err(r, "missing mr name");
  if (strlen(name) > MAX_MR_NAME) return reply_err(r, "mr name '%s' too long (max %d)", name, MAX_MR_NAME);
  uint64_t len, fill;
  if (req_num(rq, r, "len", 0, MAX_MR_LEN, &len) < 0 || opt_num(rq, r, "fill", 0, 0, 255, &fill) < 0)
    return -1;
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
               IBV_ACCESS_REMOTE_ATOMIC;
  const char *access_text = find_value(rq, "access");
  if (access_text && parse_access(r, access_text, &access) < 0) return -1;
  if (need_open(s, r) < 0) return -1;
  if (find_mr(s, name)) return reply_err(r, "mr '%s' exists", name);
  struct mr_slot *m = NULL;
  for (int i = 0; i < MAX_MRS && !m; i++)
    if (!s->mrs[i].name[0]) m = &s->mrs[i];
  if (!m) return reply_err(r, "too many mrs (max %d)", MAX_MRS);

  // Whole pages, so that no other allocation shares a page with memory the device may touch.
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = 4096;
  size_t alloc = ((size_t)len + (size_t)page - 1) / (size_t)page * (size_t)page;
  if (alloc == 0) alloc = (size_t)page;
  void *buf = NULL;
  int err = posix_memalign(&buf, (size_t)page, alloc);
  if (err != 0) return reply_errno(r, "posix_memalign", err);
  memset(buf, (int)fill, alloc);
  errno = 0;
  struct ibv_mr *mr = ibv_reg_mr(s->pd, buf, (size_t)len, access);
  if (!mr) {
    int reg_err = errno;
    free(buf);
    return reply_errno(r, "ibv_reg_mr", reg_err);
  }
  snprintf(m->name, sizeof m->name, "%s", name);
  m->buf = buf;
  m->len = (size_t)len;
  m->mr = mr;
  reply_add(r, " rkey=%" PRIu32 " lkey=%" PRIu32 " va=%" PRIuPTR " len=%zu", mr->rkey, mr->lkey,
            (uintptr_t)buf, m->len);
  return 0;
}

static int parse_mtu(struct reply *r, uint64_t bytes, enum ibv_mtu *out) {
  switch (bytes) {
    case 256: *out = IBV_MTU_256; return 0;
    case 512: *out = IBV_MTU_512; return 0;
    case 1024: *out = IBV_MTU_1024; return 0;
    case 2048: *out = IBV_MTU_2048; return 0;
    case 4096: *out = IBV_MTU_4096; return 0;
  }
  return reply_err(r, "bad mtu %" PRIu64 " (expected 256, 512, 1024, 2048 or 4096)", bytes);
}

static int cmd_connect(struct session *s, const struct request *rq, struct reply *r) {
  uint64_t dqpn, mtu_value, rq_psn, sq_psn, timeout, retry, rnr_retry, min_rnr, rd_atomic,
      dest_rd_atomic, sgid, hop, tclass, sl, rts;
  if (req_num(rq, r, "dqpn", 0, 0xffffff, &dqpn) < 0) return -1;
  const char *dgid_text = find_value(rq, "dgid");
  if (!dgid_text) return reply_err(r, "missing key 'dgid'");
  union ibv_gid dgid;
  if (parse_gid(r, "dgid", dgid_text, &dgid) < 0) return -1;
  if (opt_num(rq, r, "mtu", 1024, 0, UINT64_MAX, &mtu_value) < 0 ||
      opt_num(rq, r, "rq_psn", 0, 0, 0xffffff, &rq_psn) < 0 ||
      opt_num(rq, r, "sq_psn", s->psn, 0, 0xffffff, &sq_psn) < 0 ||
      opt_num(rq, r, "timeout", 14, 0, 31, &timeout) < 0 || opt_num(rq, r, "retry", 7, 0, 7, &retry) < 0 ||
      opt_num(rq, r, "rnr_retry", 7, 0, 7, &rnr_retry) < 0 ||
      opt_num(rq, r, "min_rnr", 12, 0, 31, &min_rnr) < 0 ||
      opt_num(rq, r, "rd_atomic", 1, 0, 255, &rd_atomic) < 0 ||
      opt_num(rq, r, "dest_rd_atomic", 1, 0, 255, &dest_rd_atomic) < 0 ||
      opt_num(rq, r, "sgid", s->gid_index, 0, 255, &sgid) < 0 ||
      opt_num(rq, r, "hop", 64, 0, 255, &hop) < 0 ||
      opt_num(rq, r, "tclass", 0, 0, 255, &tclass) < 0 || opt_num(rq, r, "sl", 0, 0, 15, &sl) < 0 ||
      opt_num(rq, r, "rts", 1, 0, 1, &rts) < 0)
    return -1;
  enum ibv_mtu mtu = IBV_MTU_1024;
  if (parse_mtu(r, mtu_value, &mtu) < 0) return -1;
  if (need_open(s, r) < 0) return -1;

  // RoCE has no LIDs: the GRH (is_global) carries the whole address.
  struct ibv_ah_attr ah_attr;
  memset(&ah_attr, 0, sizeof ah_attr);
  ah_attr.is_global = 1;
  ah_attr.grh.dgid = dgid;
  ah_attr.grh.sgid_index = (uint8_t)sgid;
  ah_attr.grh.hop_limit = (uint8_t)hop;
  ah_attr.grh.traffic_class = (uint8_t)tclass;
  ah_attr.sl = (uint8_t)sl;
  ah_attr.port_num = s->port;

  struct ibv_ah *new_ah = NULL;
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.qp_state = IBV_QPS_RTR;
  int mask = IBV_QP_STATE;
  if (s->qp_type == IBV_QPT_UD) {
    errno = 0;
    if (!(new_ah = ibv_create_ah(s->pd, &ah_attr))) return reply_errno(r, "ibv_create_ah", errno);
  } else {
    attr.path_mtu = mtu;
    attr.dest_qp_num = (uint32_t)dqpn;
    attr.rq_psn = (uint32_t)rq_psn;
    attr.ah_attr = ah_attr;
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (s->qp_type == IBV_QPT_RC) {
      attr.max_dest_rd_atomic = (uint8_t)dest_rd_atomic;
      attr.min_rnr_timer = (uint8_t)min_rnr;
      mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
  }
  int ret;
  errno = 0;
  if ((ret = ibv_modify_qp(s->qp, &attr, mask)) != 0) {
    reply_errno(r, "ibv_modify_qp(RTR)", verbs_errno(ret));
    goto fail;
  }
  if (rts) {
    memset(&attr, 0, sizeof attr);
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = (uint32_t)sq_psn;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (s->qp_type == IBV_QPT_RC) {
      attr.timeout = (uint8_t)timeout;
      attr.retry_cnt = (uint8_t)retry;
      attr.rnr_retry = (uint8_t)rnr_retry;
      attr.max_rd_atomic = (uint8_t)rd_atomic;
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    errno = 0;
    if ((ret = ibv_modify_qp(s->qp, &attr, mask)) != 0) {
      reply_errno(r, "ibv_modify_qp(RTS)", verbs_errno(ret));
      goto fail;
    }
  }
  if (new_ah) {
    if (s->ah) ibv_destroy_ah(s->ah);
    s->ah = new_ah;
    s->remote_qpn = (uint32_t)dqpn;
  }
  return 0;

fail:
  if (new_ah) ibv_destroy_ah(new_ah);
  return -1;
}

static int parse_state(const char *text, enum ibv_qp_state *out) {
  for (unsigned i = 0; i < sizeof qp_state_names / sizeof qp_state_names[0]; i++)
    if (qp_state_names[i] && strcasecmp(text, qp_state_names[i]) == 0) {
      *out = (enum ibv_qp_state)i;
      return 0;
    }
  return -1;
}

static int cmd_modify(struct session *s, const struct request *rq, struct reply *r) {
  const char *text = find_value(rq, "state");
  if (!text) return reply_err(r, "missing key 'state'");
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof attr);
  if (parse_state(text, &attr.qp_state) < 0)
    return reply_err(r, "bad state '%s' (expected RESET, INIT, RTR, RTS, SQD, SQE or ERR)", text);
  if (need_open(s, r) < 0) return -1;
  errno = 0;
  int ret = ibv_modify_qp(s->qp, &attr, IBV_QP_STATE);
  if (ret != 0) return reply_errno(r, "ibv_modify_qp", verbs_errno(ret));
  return 0;
}

static int cmd_recv(struct session *s, const struct request *rq, struct reply *r) {
  if (need_open(s, r) < 0) return -1;
  struct mr_slot *m;
  uint64_t off, len, wr_id;
  if (lookup_mr(s, r, rq->word, &m) < 0 || mr_range(rq, r, m, UINT32_MAX, &off, &len) < 0 ||
      opt_num(rq, r, "wr", 0, 0, UINT64_MAX, &wr_id) < 0)
    return -1;
  struct ibv_sge sge = {.addr = (uintptr_t)m->buf + off, .length = (uint32_t)len, .lkey = m->mr->lkey};
  struct ibv_recv_wr wr;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id;
  wr.sg_list = len ? &sge : NULL;
  wr.num_sge = len ? 1 : 0;
  struct ibv_recv_wr *bad = NULL;
  errno = 0;
  int ret = ibv_post_recv(s->qp, &wr, &bad);
  if (ret != 0) return reply_errno(r, "ibv_post_recv", verbs_errno(ret));
  return 0;
}

// Which of post's operand keys an operation takes.
enum {
  OPND_REMOTE = 1 << 0,  // rva and rkey, both required
  OPND_IMM = 1 << 1,     // imm
  OPND_INV = 1 << 2,     // rkey (required) as the rkey to invalidate
  OPND_CAS = 1 << 3,     // compare and swap
  OPND_ADD = 1 << 4,     // add
};

struct post_op {
  const char *name;
  enum ibv_wr_opcode opcode;
  unsigned operands;
};

static const struct post_op post_ops[] = {
    {"send", IBV_WR_SEND, 0},
    {"send_imm", IBV_WR_SEND_WITH_IMM, OPND_IMM},
    {"send_inv", IBV_WR_SEND_WITH_INV, OPND_INV},
    {"write", IBV_WR_RDMA_WRITE, OPND_REMOTE},
    {"write_imm", IBV_WR_RDMA_WRITE_WITH_IMM, OPND_REMOTE | OPND_IMM},
    {"read", IBV_WR_RDMA_READ, OPND_REMOTE},
    {"cas", IBV_WR_ATOMIC_CMP_AND_SWP, OPND_REMOTE | OPND_CAS},
    {"fadd", IBV_WR_ATOMIC_FETCH_AND_ADD, OPND_REMOTE | OPND_ADD},
};

static const struct {
  const char *key;
  unsigned operands;  // the operations that take the key
} post_operand_keys[] = {
    {"rva", OPND_REMOTE},   {"rkey", OPND_REMOTE | OPND_INV}, {"imm", OPND_IMM},
    {"compare", OPND_CAS},  {"swap", OPND_CAS},               {"add", OPND_ADD},
};

static int cmd_post(struct session *s, const struct request *rq, struct reply *r) {
  if (!rq->word)
    return reply_err(r, "missing operation (send, send_imm, send_inv, write, write_imm, read, cas or fadd)");
  const struct post_op *op = NULL;
  for (size_t i = 0; i < sizeof post_ops / sizeof post_ops[0] && !op; i++)
    if (strcmp(post_ops[i].name, rq->word) == 0) op = &post_ops[i];
  if (!op) return reply_err(r, "unknown operation '%s'", rq->word);
  // A key the operation ignores is most likely a controller bug: say so rather than drop it.
  for (size_t i = 0; i < sizeof post_operand_keys / sizeof post_operand_keys[0]; i++)
    if (!(post_operand_keys[i].operands & op->operands) && find_value(rq, post_operand_keys[i].key))
      return reply_err(r, "key '%s' does not apply to '%s'", post_operand_keys[i].key, op->name);

  uint64_t wr_id, rva = 0, rkey = 0, imm, compare, swap, add, signaled, solicited, fence, inl;
  if (opt_num(rq, r, "wr", 0, 0, UINT64_MAX, &wr_id) < 0 ||
      opt_num(rq, r, "imm", 0, 0, UINT32_MAX, &imm) < 0 ||
      opt_num(rq, r, "compare", 0, 0, UINT64_MAX, &compare) < 0 ||
      opt_num(rq, r, "swap", 0, 0, UINT64_MAX, &swap) < 0 ||
      opt_num(rq, r, "add", 0, 0, UINT64_MAX, &add) < 0 ||
      opt_num(rq, r, "signaled", 1, 0, 1, &signaled) < 0 ||
      opt_num(rq, r, "solicited", 0, 0, 1, &solicited) < 0 || opt_num(rq, r, "fence", 0, 0, 1, &fence) < 0 ||
      opt_num(rq, r, "inline", 0, 0, 1, &inl) < 0)
    return -1;
  if (op->operands & OPND_REMOTE) {
    if (req_num(rq, r, "rva", 0, UINT64_MAX, &rva) < 0) return -1;
  }
  if (op->operands & (OPND_REMOTE | OPND_INV)) {
    if (req_num(rq, r, "rkey", 0, UINT32_MAX, &rkey) < 0) return -1;
  }
  const char *mr_name = find_value(rq, "mr");
  uint64_t off = 0, len = 0;
  if (!mr_name) {
    if (find_value(rq, "off")) return reply_err(r, "key 'off' needs 'mr'");
    if (opt_num(rq, r, "len", 0, 0, UINT64_MAX, &len) < 0) return -1;
    if (len != 0) return reply_err(r, "key 'len' needs 'mr' (only len=0 without one)");
  }
  if (need_open(s, r) < 0) return -1;

  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof wr);
  struct ibv_sge sge;
  memset(&sge, 0, sizeof sge);
  if (mr_name) {
    struct mr_slot *m;
    if (lookup_mr(s, r, mr_name, &m) < 0 || mr_range(rq, r, m, UINT32_MAX, &off, &len) < 0) return -1;
    sge.addr = (uintptr_t)m->buf + off;
    sge.length = (uint32_t)len;
    sge.lkey = m->mr->lkey;
  }
  wr.sg_list = len ? &sge : NULL;
  wr.num_sge = len ? 1 : 0;
  wr.opcode = op->opcode;
  wr.wr_id = wr_id;
  wr.send_flags = (signaled ? IBV_SEND_SIGNALED : 0) | (solicited ? IBV_SEND_SOLICITED : 0) |
                  (fence ? IBV_SEND_FENCE : 0) | (inl ? IBV_SEND_INLINE : 0);
  // The number given is the number on the wire, so it goes big-endian like every header field.
  if (op->operands & OPND_IMM) wr.imm_data = htonl((uint32_t)imm);
  if (op->operands & OPND_INV) wr.invalidate_rkey = (uint32_t)rkey;
  if (op->operands & (OPND_CAS | OPND_ADD)) {
    wr.wr.atomic.remote_addr = rva;
    wr.wr.atomic.rkey = (uint32_t)rkey;
    wr.wr.atomic.compare_add = (op->operands & OPND_CAS) ? compare : add;
    wr.wr.atomic.swap = swap;
  } else if (op->operands & OPND_REMOTE) {
    wr.wr.rdma.remote_addr = rva;
    wr.wr.rdma.rkey = (uint32_t)rkey;
  }
  if (s->qp_type == IBV_QPT_UD) {
    if (!s->ah) return reply_err(r, "not connected (a ud post needs the address handle of connect)");
    wr.wr.ud.ah = s->ah;
    wr.wr.ud.remote_qpn = s->remote_qpn;
    wr.wr.ud.remote_qkey = s->qkey;
  }
  struct ibv_send_wr *bad = NULL;
  errno = 0;
  int ret = ibv_post_send(s->qp, &wr, &bad);
  if (ret != 0) return reply_errno(r, "ibv_post_send", verbs_errno(ret));
  return 0;
}

static const char *const wc_status_names[] = {
    [IBV_WC_SUCCESS] = "SUCCESS",
    [IBV_WC_LOC_LEN_ERR] = "LOC_LEN_ERR",
    [IBV_WC_LOC_QP_OP_ERR] = "LOC_QP_OP_ERR",
    [IBV_WC_LOC_EEC_OP_ERR] = "LOC_EEC_OP_ERR",
    [IBV_WC_LOC_PROT_ERR] = "LOC_PROT_ERR",
    [IBV_WC_WR_FLUSH_ERR] = "WR_FLUSH_ERR",
    [IBV_WC_MW_BIND_ERR] = "MW_BIND_ERR",
    [IBV_WC_BAD_RESP_ERR] = "BAD_RESP_ERR",
    [IBV_WC_LOC_ACCESS_ERR] = "LOC_ACCESS_ERR",
    [IBV_WC_REM_INV_REQ_ERR] = "REM_INV_REQ_ERR",
    [IBV_WC_REM_ACCESS_ERR] = "REM_ACCESS_ERR",
    [IBV_WC_REM_OP_ERR] = "REM_OP_ERR",
    [IBV_WC_RETRY_EXC_ERR] = "RETRY_EXC_ERR",
    [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR_RETRY_EXC_ERR",
    [IBV_WC_LOC_RDD_VIOL_ERR] = "LOC_RDD_VIOL_ERR",
    [IBV_WC_REM_INV_RD_REQ_ERR] = "REM_INV_RD_REQ_ERR",
    [IBV_WC_REM_ABORT_ERR] = "REM_ABORT_ERR",
    [IBV_WC_INV_EECN_ERR] = "INV_EECN_ERR",
    [IBV_WC_INV_EEC_STATE_ERR] = "INV_EEC_STATE_ERR",
    [IBV_WC_FATAL_ERR] = "FATAL_ERR",
    [IBV_WC_RESP_TIMEOUT_ERR] = "RESP_TIMEOUT_ERR",
    [IBV_WC_GENERAL_ERR] = "GENERAL_ERR",
};

static void add_wc_status(struct reply *r, unsigned status) {
  if (status < sizeof wc_status_names / sizeof wc_status_names[0] && wc_status_names[status])
    reply_add(r, " status=%s", wc_status_names[status]);
  else
    reply_add(r, " status=UNKNOWN_%u", status);
}

static void add_wc_opcode(struct reply *r, unsigned opcode) {
  const char *name = NULL;
  switch (opcode) {
    case IBV_WC_SEND: name = "SEND"; break;
    case IBV_WC_RDMA_WRITE: name = "RDMA_WRITE"; break;
    case IBV_WC_RDMA_READ: name = "RDMA_READ"; break;
    case IBV_WC_COMP_SWAP: name = "COMP_SWAP"; break;
    case IBV_WC_FETCH_ADD: name = "FETCH_ADD"; break;
    case IBV_WC_BIND_MW: name = "BIND_MW"; break;
    case IBV_WC_LOCAL_INV: name = "LOCAL_INV"; break;
    case IBV_WC_RECV: name = "RECV"; break;
    case IBV_WC_RECV_RDMA_WITH_IMM: name = "RECV_RDMA_WITH_IMM"; break;
  }
  if (name)
    reply_add(r, " opcode=%s", name);
  else
    reply_add(r, " opcode=UNKNOWN_%u", opcode);
}

static uint64_t elapsed_ms(const struct timespec *since) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  int64_t ms = (int64_t)(now.tv_sec - since->tv_sec) * 1000 + (now.tv_nsec - since->tv_nsec) / 1000000;
  return ms < 0 ? 0 : (uint64_t)ms;
}

static int cmd_poll(struct session *s, const struct request *rq, struct reply *r) {
  uint64_t timeout_ms, max;
  if (opt_num(rq, r, "timeout_ms", 1000, 0, MAX_POLL_MS, &timeout_ms) < 0 ||
      opt_num(rq, r, "max", 1, 0, UINT64_MAX, &max) < 0)
    return -1;
  if (max != 1) return reply_err(r, "only max=1 is supported");
  if (need_open(s, r) < 0) return -1;
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  struct ibv_wc wc;
  for (;;) {
    memset(&wc, 0, sizeof wc);
    errno = 0;
    int n = ibv_poll_cq(s->cq, 1, &wc);
    if (n < 0) return reply_errno(r, "ibv_poll_cq", n < -1 ? -n : (errno ? errno : EIO));
    if (n > 0) break;
    if (elapsed_ms(&start) >= timeout_ms) {
      reply_add(r, " none");
      return 0;
    }
    struct timespec nap = {0, POLL_NAP_NS};
    nanosleep(&nap, NULL);
  }
  reply_add(r, " wr=%" PRIu64, (uint64_t)wc.wr_id);
  add_wc_status(r, (unsigned)wc.status);
  add_wc_opcode(r, (unsigned)wc.opcode);
  reply_add(r, " len=%" PRIu32 " qp=%" PRIu32, wc.byte_len, wc.qp_num);
  if (wc.wc_flags & IBV_WC_WITH_IMM) reply_add(r, " imm=%" PRIu32, ntohl(wc.imm_data));
  if (wc.wc_flags & IBV_WC_WITH_INV) reply_add(r, " inv_rkey=%" PRIu32, wc.invalidated_rkey);
  if (s->qp_type == IBV_QPT_UD) reply_add(r, " src_qp=%" PRIu32, wc.src_qp);
  if (wc.status != IBV_WC_SUCCESS) reply_add(r, " vendor_err=%" PRIu32, wc.vendor_err);
  return 0;
}

static int cmd_state(struct session *s, const struct request *rq, struct reply *r) {
  (void)rq;
  if (need_open(s, r) < 0) return -1;
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  memset(&attr, 0, sizeof attr);
  memset(&init, 0, sizeof init);
  errno = 0;
  int ret = ibv_query_qp(s->qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &init);
  if (ret != 0) return reply_errno(r, "ibv_query_qp", verbs_errno(ret));
  reply_add(r, " state=%s sq_psn=%" PRIu32 " rq_psn=%" PRIu32, qp_state_name(attr.qp_state), attr.sq_psn,
            attr.rq_psn);
  return 0;
}

static int cmd_read(struct session *s, const struct request *rq, struct reply *r) {
  if (need_open(s, r) < 0) return -1;
  struct mr_slot *m;
  uint64_t off, len;
  if (lookup_mr(s, r, rq->word, &m) < 0 || mr_range(rq, r, m, MAX_READ, &off, &len) < 0) return -1;
  static const char digits[] = "0123456789abcdef";
  const uint8_t *p = (const uint8_t *)m->buf + off;
  reply_add(r, " hex=");
  for (uint64_t i = 0; i < len; i++) reply_add(r, "%c%c", digits[p[i] >> 4], digits[p[i] & 15]);
  return 0;
}

static int cmd_fill(struct session *s, const struct request *rq, struct reply *r) {
  if (need_open(s, r) < 0) return -1;
  struct mr_slot *m;
  uint64_t off, len, byte;
  if (lookup_mr(s, r, rq->word, &m) < 0 || mr_range(rq, r, m, UINT64_MAX, &off, &len) < 0 ||
      req_num(rq, r, "byte", 0, 255, &byte) < 0)
    return -1;
  memset((uint8_t *)m->buf + off, (int)byte, (size_t)len);
  return 0;
}

static int cmd_reset(struct session *s, const struct request *rq, struct reply *r) {
  (void)rq;
  return session_reset(s, r);
}

static int cmd_quit(struct session *s, const struct request *rq, struct reply *r) {
  (void)rq;
  (void)r;
  s->quit = true;  // the connection loop closes after sending `ok`, then resets
  return 0;
}

static const char *const open_keys[] = {"dev", "gid", "type", "port", "cqe", "max_send_wr", "max_recv_wr",
                                        "max_sge", "max_inline", "psn", "qkey", NULL};
static const char *const mr_keys[] = {"len", "access", "fill", NULL};
static const char *const connect_keys[] = {"dqpn", "dgid", "mtu", "rq_psn", "sq_psn", "timeout",
                                           "retry", "rnr_retry", "min_rnr", "rd_atomic", "dest_rd_atomic",
                                           "sgid", "hop", "tclass", "sl", "rts", NULL};
static const char *const modify_keys[] = {"state", NULL};
static const char *const recv_keys[] = {"off", "len", "wr", NULL};
static const char *const post_keys[] = {"mr", "off", "len", "wr", "rva", "rkey", "imm", "compare", "swap",
                                        "add", "signaled", "solicited", "fence", "inline", NULL};
static const char *const poll_keys[] = {"timeout_ms", "max", NULL};
static const char *const read_keys[] = {"off", "len", NULL};
static const char *const fill_keys[] = {"off", "len", "byte", NULL};
static const char *const no_keys[] = {NULL};

struct command {
  const char *name;
  int (*run)(struct session *, const struct request *, struct reply *);
  bool takes_word;  // a bare word (MR name, post operation) right after the command
  const char *const *keys;
};

static const struct command commands[] = {
    {"open", cmd_open, false, open_keys},       {"mr", cmd_mr, true, mr_keys},
    {"connect", cmd_connect, false, connect_keys}, {"modify", cmd_modify, false, modify_keys},
    {"recv", cmd_recv, true, recv_keys},        {"post", cmd_post, true, post_keys},
    {"poll", cmd_poll, false, poll_keys},       {"state", cmd_state, false, no_keys},
    {"read", cmd_read, true, read_keys},        {"fill", cmd_fill, true, fill_keys},
    {"reset", cmd_reset, false, no_keys},       {"quit", cmd_quit, false, no_keys},
};

static bool key_allowed(const char *const *keys, const char *key) {
  for (; *keys; keys++)
    if (strcmp(*keys, key) == 0) return true;
  return false;
}

// Handles one request line (without its '\n', NUL-terminated, modified in place) and leaves
// exactly one reply line (without '\n') in r.
static void handle_line(struct session *s, char *line, struct reply *r) {
  r->len = 0;
  reply_add(r, "ok");

  char *words[MAX_PAIRS + 2];
  int n_words = 0;
  for (char *save = NULL, *w = strtok_r(line, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
    if (n_words == MAX_PAIRS + 2) {
      reply_err(r, "too many words (max %d key=value words)", MAX_PAIRS);
      return;
    }
    words[n_words++] = w;
  }
  if (n_words == 0) {
    reply_err(r, "empty request");
    return;
  }
  const struct command *cmd = NULL;
  for (size_t i = 0; i < sizeof commands / sizeof commands[0] && !cmd; i++)
    if (strcmp(commands[i].name, words[0]) == 0) cmd = &commands[i];
  if (!cmd) {
    reply_err(r, "unknown command '%s'", words[0]);
    return;
  }

  struct request rq;
  memset(&rq, 0, sizeof rq);
  rq.cmd = words[0];
  int next = 1;
  if (cmd->takes_word && next < n_words && !strchr(words[next], '=')) rq.word = words[next++];
  for (; next < n_words; next++) {
    char *eq = strchr(words[next], '=');
    if (!eq) {
      reply_err(r, "unexpected word '%s' (expected key=value)", words[next]);
      return;
    }
    if (eq == words[next]) {
      reply_err(r, "bad word '%s' (empty key)", words[next]);
      return;
    }
    *eq = '\0';
    const char *key = words[next], *val = eq + 1;
    if (!key_allowed(cmd->keys, key)) {
      reply_err(r, "unknown key '%s'", key);
      return;
    }
    if (find_value(&rq, key)) {
      reply_err(r, "duplicate key '%s'", key);
      return;
    }
    if (rq.n_pairs == MAX_PAIRS) {  // cannot happen given the word limit, kept for safety
      reply_err(r, "too many words (max %d key=value words)", MAX_PAIRS);
      return;
    }
    rq.pairs[rq.n_pairs].key = key;
    rq.pairs[rq.n_pairs].val = val;
    rq.n_pairs++;
  }
  cmd->run(s, &rq, r);
}

// ---------------------------------------------------------------------------------------------
// Connections

static int send_all(int fd, const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    data += n;
    len -= (size_t)n;
  }
  return 0;
}

static int send_reply(int fd, struct reply *r) {
  r->text[r->len] = '\n';  // reply_vadd always leaves room for it
  return send_all(fd, r->text, r->len + 1);
}

// Serves one client until it disconnects or quits.
static void serve_client(int fd, struct session *s) {
  static char buf[MAX_LINE + 1];  // one full line plus its '\n'
  static struct reply r;
  size_t have = 0;
  bool overlong = false;  // dropping the rest of a line that did not fit
  s->quit = false;
  for (;;) {
    ssize_t n = recv(fd, buf + have, sizeof buf - have, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fprintf(stderr, PROGRAM ": recv: %s\n", strerror(errno));
    if (n <= 0) return;
    have += (size_t)n;

    size_t start = 0;
    for (;;) {
      char *nl = memchr(buf + start, '\n', have - start);
      if (!nl) break;
      size_t line_len = (size_t)(nl - (buf + start));
      char *line = buf + start;
      start += line_len + 1;
      if (overlong) {
        overlong = false;
        reply_err(&r, "line too long (max %d bytes)", MAX_LINE);
      } else {
        if (line_len > 0 && line[line_len - 1] == '\r') line_len--;  // tolerate CRLF clients
        line[line_len] = '\0';
        if (memchr(line, '\0', line_len))
          reply_err(&r, "request contains a NUL byte");
        else
          handle_line(s, line, &r);
      }
      if (send_reply(fd, &r) < 0) return;
      if (s->quit) return;
    }
    memmove(buf, buf + start, have - start);
    have -= start;
    if (have == sizeof buf) {  // a full buffer without '\n': the line is too long
      overlong = true;
      have = 0;
    }
  }
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: " PROGRAM " [-l ADDR] [-p PORT] [--once]\n"
          "  Peer-side agent of uroce-drill: serves one TCP controller at a time, which drives a QP\n"
          "  of the local RDMA device with line commands (see docs/drill.md).\n"
          "  -l ADDR   address to listen on (default " DEFAULT_ADDR ")\n"
          "  -p PORT   TCP port (default " DEFAULT_PORT ")\n"
          "  --once    exit after the first client disconnects\n"
          "  -h        this help\n");
}

static int listen_on(const char *addr, const char *port, unsigned *bound_port) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  int gai = getaddrinfo(addr, port, &hints, &res);
  if (gai != 0) {
    fprintf(stderr, PROGRAM ": bad address %s port %s: %s\n", addr, port, gai_strerror(gai));
    return -1;
  }
  int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0) {
    fprintf(stderr, PROGRAM ": socket: %s\n", strerror(errno));
    freeaddrinfo(res);
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // restart right after a run
  if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 4) < 0) {
    fprintf(stderr, PROGRAM ": listen on %s:%s: %s\n", addr, port, strerror(errno));
    freeaddrinfo(res);
    close(fd);
    return -1;
  }
  freeaddrinfo(res);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  *bound_port = 0;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {  // reports the real port of -p 0
    if (ss.ss_family == AF_INET) *bound_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6) *bound_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  return fd;
}

int main(int argc, char **argv) {
  const char *addr = DEFAULT_ADDR, *port = DEFAULT_PORT;
  bool once = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--once") == 0) {
      once = true;
    } else if (strcmp(argv[i], "-l") == 0 || strcmp(argv[i], "-p") == 0) {
      if (i + 1 == argc) {
        fprintf(stderr, PROGRAM ": option %s needs a value\n", argv[i]);
        usage(stderr);
        return 2;
      }
      if (argv[i][1] == 'l')
        addr = argv[++i];
      else
        port = argv[++i];
    } else {
      fprintf(stderr, PROGRAM ": bad argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }

  signal(SIGPIPE, SIG_IGN);  // a controller that vanishes mid-reply must not kill the agent
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  srandom((unsigned)now.tv_sec ^ (unsigned)now.tv_nsec ^ ((unsigned)getpid() << 16));

  unsigned bound_port = 0;
  int listen_fd = listen_on(addr, port, &bound_port);
  if (listen_fd < 0) return 1;
  bool ipv6 = strchr(addr, ':') != NULL;  // [::1]:18600, so that the port stays separable
  printf(PROGRAM ": listening on %s%s%s:%u\n", ipv6 ? "[" : "", addr, ipv6 ? "]" : "", bound_port);
  fflush(stdout);

  static struct session session;
  for (;;) {
    struct sockaddr_storage peer;
    socklen_t peer_len = sizeof peer;
    int fd = accept(listen_fd, (struct sockaddr *)&peer, &peer_len);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      fprintf(stderr, PROGRAM ": accept: %s\n", strerror(errno));
      return 1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // lockstep: every reply is due now
    char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
    getnameinfo((struct sockaddr *)&peer, peer_len, host, sizeof host, serv, sizeof serv,
                NI_NUMERICHOST | NI_NUMERICSERV);
    fprintf(stderr, PROGRAM ": client %s:%s connected\n", host, serv);
    serve_client(fd, &session);
    close(fd);
    session_reset(&session, NULL);
    fprintf(stderr, PROGRAM ": client %s:%s gone, state reset\n", host, serv);
    if (once) return 0;
  }
}
