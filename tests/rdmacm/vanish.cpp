// A peer that disappears mid-connection (suite rdmacm, scenario vanish): two processes on the
// two veth endpoints, run by rdmacm_test.py.
//   vanish server IP PORT   listens on IP:PORT, accepts one RC connection, prints "established"
//                           and waits to be killed (SIGKILL: no DREQ, nothing said)
//   vanish client IP PORT FILE
//                           connects, prints "established", waits until FILE exists (the
//                           driver creates it once the server is dead), then checks what an
//                           application meets on a real RNIC: a SEND completes with
//                           IBV_WC_RETRY_EXC_ERR (nobody ACKs; retry_count 6), rdma_disconnect's DREQ goes
//                           unanswered and DISCONNECTED follows, then TIMEWAIT_EXIT. Prints one
//                           line per check with how long it took; exit 0 when all pass.
#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

int failures = 0;
void check(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what);
  std::fflush(stdout);
  if (!ok) ++failures;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The next event within `ms`, acknowledged; its type (or -1 when none came).
int next_event(rdma_event_channel* ch, int ms, rdma_cm_id** id = nullptr) {
  pollfd p{ch->fd, POLLIN, 0};
  for (int waited = 0; waited <= ms; waited += 10) {
    rdma_cm_event* e = nullptr;
    if (poll(&p, 1, 10) == 1 && rdma_get_cm_event(ch, &e) == 0) {
      const int t = e->event;
      if (id) *id = e->id;
      rdma_ack_cm_event(e);
      return t;
    }
  }
  return -1;
}

const char* name(int t) { return t < 0 ? "nothing" : rdma_event_str(rdma_cm_event_type(t)); }

ibv_qp_init_attr qp_attr() {
  ibv_qp_init_attr a{};
  a.cap.max_send_wr = a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = 1;
  return a;
}

int server(rdma_event_channel* ch, sockaddr_in& addr) {
  rdma_cm_id* listen = nullptr;
  if (rdma_create_id(ch, &listen, nullptr, RDMA_PS_TCP) || rdma_bind_addr(listen, (sockaddr*)&addr) ||
      rdma_listen(listen, 1)) {
    std::perror("vanish server: listen");
    return 1;
  }
  std::printf("listening\n");
  std::fflush(stdout);
  rdma_cm_id* id = nullptr;
  if (next_event(ch, 30000, &id) != RDMA_CM_EVENT_CONNECT_REQUEST) return 1;
  ibv_qp_init_attr a = qp_attr();
  if (rdma_create_qp(id, nullptr, &a) || rdma_accept(id, nullptr)) return 1;
  const int t = next_event(ch, 10000);
  std::printf("%s\n", t == RDMA_CM_EVENT_ESTABLISHED ? "established" : name(t));
  std::fflush(stdout);
  pause();  // until SIGKILL
  return 0;
}

int client(rdma_event_channel* ch, sockaddr_in& addr, const char* go_file) {
  rdma_cm_id* id = nullptr;
  rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP);
  if (rdma_resolve_addr(id, nullptr, (sockaddr*)&addr, 2000) || next_event(ch, 5000) != RDMA_CM_EVENT_ADDR_RESOLVED ||
      rdma_resolve_route(id, 2000) || next_event(ch, 5000) != RDMA_CM_EVENT_ROUTE_RESOLVED) {
    check(false, "address and route resolved");
    return 1;
  }
  ibv_qp_init_attr a = qp_attr();
  rdma_conn_param cp{};
  cp.retry_count = 6;  // 7 would retry for ever (uroce reads it as rxe does)
  cp.rnr_retry_count = 7;
  if (rdma_create_qp(id, nullptr, &a) || rdma_connect(id, &cp)) {
    check(false, "rdma_create_qp, rdma_connect");
    return 1;
  }
  const int t = next_event(ch, 10000);
  check(t == RDMA_CM_EVENT_ESTABLISHED, "ESTABLISHED");
  if (t != RDMA_CM_EVENT_ESTABLISHED) return 1;
  std::printf("established\n");
  std::fflush(stdout);
  struct stat st;
  for (int i = 0; i < 3000 && stat(go_file, &st) != 0; ++i) usleep(10000);
  check(stat(go_file, &st) == 0, "the driver killed the server");

  // A SEND nobody acknowledges: the requester's retries run out.
  static char buf[64] = "are you there?";
  ibv_mr* mr = rdma_reg_msgs(id, buf, sizeof buf);
  auto t0 = std::chrono::steady_clock::now();
  check(mr && rdma_post_send(id, nullptr, buf, sizeof buf, mr, IBV_SEND_SIGNALED) == 0, "SEND posted");
  ibv_wc wc{};
  int n = 0;
  while (since(t0) < 20 && (n = ibv_poll_cq(id->send_cq, 1, &wc)) == 0) usleep(1000);
  char line[200];
  std::snprintf(line, sizeof line, "the SEND completes with RETRY_EXC_ERR (got %s after %.2f s)",
                n == 1 ? ibv_wc_status_str(wc.status) : "nothing", since(t0));
  check(n == 1 && wc.status == IBV_WC_RETRY_EXC_ERR, line);

  // The DREQ goes unanswered: DISCONNECTED after the CM's resends, then TimeWait.
  t0 = std::chrono::steady_clock::now();
  check(rdma_disconnect(id) == 0, "rdma_disconnect");
  int e = next_event(ch, 20000);
  std::snprintf(line, sizeof line, "DISCONNECTED (got %s after %.2f s)", name(e), since(t0));
  check(e == RDMA_CM_EVENT_DISCONNECTED, line);
  e = next_event(ch, 20000);
  std::snprintf(line, sizeof line, "TIMEWAIT_EXIT (got %s after %.2f s)", name(e), since(t0));
  check(e == RDMA_CM_EVENT_TIMEWAIT_EXIT, line);
  if (mr) rdma_dereg_mr(mr);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  std::printf(failures ? "%d failed\n" : "all passed\n", failures);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool is_server = argc == 4 && std::strcmp(argv[1], "server") == 0;
  const bool is_client = argc == 5 && std::strcmp(argv[1], "client") == 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if ((!is_server && !is_client) || inet_pton(AF_INET, argv[2], &addr.sin_addr) != 1) {
    std::fprintf(stderr, "usage: vanish server IP PORT | vanish client IP PORT FILE\n");
    return 2;
  }
  addr.sin_port = htons(uint16_t(std::atoi(argv[3])));
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) return 1;
  const int rc = is_server ? server(ch, addr) : client(ch, addr, argv[4]);
  rdma_destroy_event_channel(ch);  // with what it still holds (LeakSanitizer looks)
  return rc;
}
