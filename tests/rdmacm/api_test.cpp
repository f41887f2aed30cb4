// liburoce-rdmacm's API in one process (run with uroce-run on one endpoint): the channel's fd
// (non-blocking: EAGAIN; poll() wakes when an event is queued), address and port errors, port
// spaces, options, refused calls (ECE), multicast on a UDP id (the JOIN event, a datagram to the
// group back to the attached QP, leaving), rdma_getaddrinfo, and two connections to the
// endpoint's own address through the engine's loopback: one accepted (CONNECT_REQUEST with the
// client's private data, ESTABLISHED on both ids, DISCONNECTED on both), one rejected with
// private data (REJECTED, reason 28, the data delivered), and rping's teardown (readers of a
// destroyed event channel stay blocked). Prints one line per check; exit 0 when all pass.
//   api_test IP   (the endpoint's own IPv4 address, e.g. 198.18.0.11)
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

static int failures = 0;
static void check(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what);
  if (!ok) ++failures;
}

// The next event on `ch` within `ms` (poll() on the fd, then rdma_get_cm_event), or nullptr.
static rdma_cm_event* next_event(rdma_event_channel* ch, int ms) {
  pollfd p{ch->fd, POLLIN, 0};
  rdma_cm_event* e = nullptr;
  for (int waited = 0; waited <= ms; waited += 10) {
    if (poll(&p, 1, 10) == 1 && rdma_get_cm_event(ch, &e) == 0) return e;
  }
  return nullptr;
}

// The next event, which must be `want`; acknowledged unless `keep`.
static rdma_cm_event* expect(rdma_event_channel* ch, rdma_cm_event_type want, const char* what, bool keep = false) {
  rdma_cm_event* e = next_event(ch, 10000);
  char line[160];
  std::snprintf(line, sizeof line, "%s (got %s, status %d)", what, e ? rdma_event_str(e->event) : "nothing",
                e ? e->status : 0);
  check(e && e->event == want, line);
  if (e && !keep) {
    rdma_ack_cm_event(e);
    return nullptr;
  }
  return e;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: api_test IP\n");
    return 2;
  }
  sockaddr_in self{};
  self.sin_family = AF_INET;
  if (inet_pton(AF_INET, argv[1], &self.sin_addr) != 1) return 2;

  rdma_event_channel* ch = rdma_create_event_channel();
  check(ch != nullptr, "rdma_create_event_channel");
  if (!ch) return 1;
  fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
  rdma_cm_event* e = nullptr;
  check(rdma_get_cm_event(ch, &e) == -1 && errno == EAGAIN, "non-blocking channel, nothing queued: -1, EAGAIN");
  check(std::strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED") == 0, "rdma_event_str");

  rdma_cm_id* bad = nullptr;
  check(rdma_create_id(ch, &bad, nullptr, rdma_port_space(0x9999)) == -1 && errno == EINVAL,
        "rdma_create_id with an unknown port space: EINVAL");

  // Addresses and ports.
  rdma_cm_id* listen = nullptr;
  check(rdma_create_id(ch, &listen, nullptr, RDMA_PS_TCP) == 0, "rdma_create_id (TCP)");
  sockaddr_in other = self;
  inet_pton(AF_INET, "192.0.2.1", &other.sin_addr);
  check(rdma_bind_addr(listen, reinterpret_cast<sockaddr*>(&other)) == -1 && errno == EADDRNOTAVAIL,
        "rdma_bind_addr to an address that is not the endpoint's: EADDRNOTAVAIL");
  sockaddr_in any{};
  any.sin_family = AF_INET;
  check(rdma_bind_addr(listen, reinterpret_cast<sockaddr*>(&any)) == 0 && rdma_get_src_port(listen) != 0,
        "rdma_bind_addr to the wildcard, port 0: an ephemeral port");
  check(listen->verbs != nullptr, "a bound id has the device (id->verbs)");
  const uint16_t port = ntohs(rdma_get_src_port(listen));
  check(rdma_listen(listen, 4) == 0, "rdma_listen");
  rdma_cm_id* dup = nullptr;
  rdma_create_id(ch, &dup, nullptr, RDMA_PS_TCP);
  sockaddr_in same = self;
  same.sin_port = htons(port);
  check(rdma_bind_addr(dup, reinterpret_cast<sockaddr*>(&same)) == -1 && errno == EADDRINUSE,
        "a second id on the listener's port: EADDRINUSE");
  sockaddr_in group = self;
  inet_pton(AF_INET, "239.18.0.7", &group.sin_addr);
  check(rdma_join_multicast(dup, reinterpret_cast<sockaddr*>(&group), nullptr) == -1 && errno == EINVAL,
        "rdma_join_multicast on a TCP id: EINVAL (UD only)");
  uint8_t tos = 32;
  check(rdma_set_option(dup, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos) == 0, "RDMA_OPTION_ID_TOS");
  rdma_destroy_id(dup);

  // Multicast: a UDP id bound to our address joins group 239.18.0.7. The JOIN event carries what
  // a sender needs (QP 0xFFFFFF, RDMA_UDP_QKEY, the group as the destination GID, the join's
  // context); the id's QP is attached, so a datagram it sends to the group comes back to it.
  {
    rdma_cm_id* ud = nullptr;
    check(rdma_create_id(ch, &ud, nullptr, RDMA_PS_UDP) == 0, "rdma_create_id (UDP)");
    check(rdma_join_multicast(ud, reinterpret_cast<sockaddr*>(&group), nullptr) == -1 && errno == EINVAL,
          "rdma_join_multicast on an id without an address: EINVAL");
    sockaddr_in me = self;
    check(rdma_bind_addr(ud, reinterpret_cast<sockaddr*>(&me)) == 0, "rdma_bind_addr (UDP)");
    check(rdma_join_multicast(ud, reinterpret_cast<sockaddr*>(&self), nullptr) == -1 && errno == EINVAL,
          "rdma_join_multicast to a unicast address: EINVAL");
    check(rdma_leave_multicast(ud, reinterpret_cast<sockaddr*>(&group)) == -1 && errno == EADDRNOTAVAIL,
          "rdma_leave_multicast of a group not joined: EADDRNOTAVAIL");
    ibv_qp_init_attr u{};
    u.cap.max_send_wr = u.cap.max_recv_wr = 4;
    u.cap.max_send_sge = u.cap.max_recv_sge = 1;
    u.qp_type = IBV_QPT_UD;
    check(rdma_create_qp(ud, nullptr, &u) == 0, "rdma_create_qp (UD)");
    static char buf[2][256];
    ibv_mr* mr = rdma_reg_msgs(ud, buf, sizeof buf);
    check(mr != nullptr, "rdma_reg_msgs");
    check(rdma_post_recv(ud, nullptr, buf[1], sizeof buf[1], mr) == 0, "rdma_post_recv");
    int token = 0;
    check(rdma_join_multicast(ud, reinterpret_cast<sockaddr*>(&group), &token) == 0, "rdma_join_multicast 239.18.0.7");
    e = expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN, "MULTICAST_JOIN", true);
    ibv_ah* ah = nullptr;
    if (e) {
      const rdma_ud_param& p = e->param.ud;
      const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 18, 0, 7};
      check(p.qp_num == 0xFFFFFF && p.qkey == RDMA_UDP_QKEY && p.private_data == &token &&
                p.ah_attr.is_global && std::memcmp(p.ah_attr.grh.dgid.raw, want, 16) == 0,
            "JOIN: QP 0xFFFFFF, RDMA_UDP_QKEY, the group's GID, the join's context");
      ah = ibv_create_ah(ud->pd, const_cast<ibv_ah_attr*>(&p.ah_attr));
      check(ah != nullptr, "ibv_create_ah from the JOIN's ah_attr");
      rdma_ack_cm_event(e);
    }
    std::strcpy(buf[0], "to the group");
    if (ah) check(rdma_post_ud_send(ud, nullptr, buf[0], 64, mr, 0, ah, 0xFFFFFF) == 0, "rdma_post_ud_send to the group");
    ibv_wc wc{};
    int got = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got == 0 && std::chrono::steady_clock::now() < until) got = ibv_poll_cq(ud->recv_cq, 1, &wc);
    check(got == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + 64 && wc.src_qp == ud->qp->qp_num &&
              std::strcmp(buf[1] + 40, "to the group") == 0,
          "the attached QP receives its own group datagram (after the 40-byte GRH)");
    check(rdma_leave_multicast(ud, reinterpret_cast<sockaddr*>(&group)) == 0, "rdma_leave_multicast");
    check(rdma_leave_multicast(ud, reinterpret_cast<sockaddr*>(&group)) == -1 && errno == EADDRNOTAVAIL,
          "rdma_leave_multicast twice: EADDRNOTAVAIL");
    // A leave before the JOIN is taken takes the event with it.
    check(rdma_join_multicast(ud, reinterpret_cast<sockaddr*>(&group), nullptr) == 0 &&
              rdma_leave_multicast(ud, reinterpret_cast<sockaddr*>(&group)) == 0,
          "join, then leave at once");
    check(next_event(ch, 200) == nullptr, "... no JOIN event is left behind");
    if (ah) ibv_destroy_ah(ah);
    rdma_dereg_mr(mr);
    rdma_destroy_qp(ud);
    rdma_destroy_id(ud);
  }

  rdma_addrinfo hints{}, *res = nullptr;
  hints.ai_port_space = RDMA_PS_TCP;
  char service[16];
  std::snprintf(service, sizeof service, "%u", port);
  check(rdma_getaddrinfo(argv[1], service, &hints, &res) == 0 && res->ai_dst_addr &&
            ntohs(reinterpret_cast<sockaddr_in*>(res->ai_dst_addr)->sin_port) == port &&
            res->ai_port_space == RDMA_PS_TCP && res->ai_qp_type == IBV_QPT_RC,
        "rdma_getaddrinfo: destination address and port, TCP port space, RC");

  // An id used after rdma_destroy_id (perftest 4.5's client does it when it retries a REJ): the
  // library reads nothing behind it, each call fails with EINVAL (under AddressSanitizer a read
  // would be a heap-use-after-free report, and the test fails).
  {
    rdma_cm_id* gone = nullptr;
    check(rdma_create_id(ch, &gone, nullptr, RDMA_PS_TCP) == 0 && rdma_destroy_id(gone) == 0, "an id made and destroyed");
    errno = 0;
    check(rdma_resolve_addr(gone, nullptr, res->ai_dst_addr, 2000) == -1 && errno == EINVAL,
          "rdma_resolve_addr on the destroyed id: EINVAL");
    errno = 0;
    check(rdma_connect(gone, nullptr) == -1 && errno == EINVAL, "rdma_connect on it: EINVAL");
    errno = 0;
    check(rdma_destroy_id(gone) == -1 && errno == EINVAL, "rdma_destroy_id again: EINVAL");
  }

  // Two connections to our own address (the engine's loopback): accepted, then rejected.
  ibv_qp_init_attr qa{};
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_RC;
  for (int round = 0; round < 2; ++round) {
    const bool accept = round == 0;
    rdma_cm_id* client = nullptr;
    rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP);
    if (round == 0) {
      // As librdmacm: an id on a device has the device's PD (rsockets register in it).
      static char reg[256];
      ibv_mr* m = client->pd ? ibv_reg_mr(client->pd, reg, sizeof reg, IBV_ACCESS_LOCAL_WRITE) : nullptr;
      check(client->pd && client->pd->context == client->verbs && m, "the new id's pd: the device's, usable");
      if (m) ibv_dereg_mr(m);
    }
    if (round == 0) {
      check(rdma_resolve_addr(client, nullptr, res->ai_dst_addr, 2000) == 0, "rdma_resolve_addr (own address)");
    } else {
      // As librdmacm's rsockets call it: the destination already in the id's own route, passed
      // by its address (the same memory the call fills in).
      std::memcpy(&client->route.addr.dst_addr, res->ai_dst_addr, res->ai_dst_len);
      check(rdma_resolve_addr(client, nullptr, &client->route.addr.dst_addr, 2000) == 0,
            "rdma_resolve_addr with the id's own route.addr.dst_addr as the destination");
    }
    expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "ADDR_RESOLVED");
    check(std::memcmp(&client->route.addr.dst_sin, res->ai_dst_addr, sizeof(sockaddr_in)) == 0,
          "the destination resolved is the one given");
    check(rdma_resolve_route(client, 2000) == 0, "rdma_resolve_route");
    expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "ROUTE_RESOLVED");
    ibv_qp_init_attr a = qa;
    check(rdma_create_qp(client, nullptr, &a) == 0 && client->qp && client->send_cq && client->recv_cq_channel,
          "rdma_create_qp (default PD, CQs and channels made)");
    const char hello[] = "hello";
    rdma_conn_param cp{};
    cp.private_data = hello;
    cp.private_data_len = sizeof hello;
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    check(rdma_connect(client, &cp) == 0, "rdma_connect");
    e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, "CONNECT_REQUEST", true);
    if (!e) break;
    check(e->listen_id == listen && e->param.conn.private_data_len >= sizeof hello &&
              std::memcmp(e->param.conn.private_data, hello, sizeof hello) == 0,
          "CONNECT_REQUEST: the listener, the client's private data after rdma_cm's header");
    rdma_cm_id* server = e->id;
    check(server->verbs == listen->verbs && rdma_get_dst_port(server) == rdma_get_src_port(client),
          "the new id: the device, the client's port as its destination port");
    rdma_ack_cm_event(e);
    if (accept) {
      a = qa;
      check(rdma_create_qp(server, nullptr, &a) == 0, "rdma_create_qp on the new id");
      check(rdma_accept(server, nullptr) == 0, "rdma_accept");
      // Both ids report ESTABLISHED (the client's after the REP and RTU, the server's on the RTU).
      int est = 0;
      for (int i = 0; i < 2; ++i) {
        rdma_cm_event* x = next_event(ch, 10000);
        if (x && x->event == RDMA_CM_EVENT_ESTABLISHED && (x->id == client || x->id == server)) ++est;
        if (x) rdma_ack_cm_event(x);
      }
      check(est == 2, "ESTABLISHED on both ids");
      // A receive waits on the server's QP. The client's DREQ moves that QP to the error state
      // when it arrives, before the application reads its DISCONNECTED: a program blocked on its
      // CQ (ucmatose waiting for the receives of a peer that died) gets the receive flushed.
      static char rbuf[64];
      ibv_mr* rmr = ibv_reg_mr(server->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
      ibv_sge sge{reinterpret_cast<uintptr_t>(rbuf), sizeof rbuf, rmr ? rmr->lkey : 0};
      ibv_recv_wr rwr{}, *bad = nullptr;
      rwr.wr_id = 77;
      rwr.sg_list = &sge;
      rwr.num_sge = 1;
      check(rmr && ibv_post_recv(server->qp, &rwr, &bad) == 0, "a receive posted on the server's QP");
      check(rdma_disconnect(client) == 0, "rdma_disconnect");
      ibv_wc wc{};
      int got = 0;
      for (auto t0 = std::chrono::steady_clock::now();
           got == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5);)
        got = ibv_poll_cq(server->recv_cq, 1, &wc);
      check(got == 1 && wc.wr_id == 77 && wc.status == IBV_WC_WR_FLUSH_ERR,
            "the peer's DREQ flushes the server's receive before its DISCONNECTED is read");
      int disc = 0;
      for (int i = 0; i < 2; ++i) {
        rdma_cm_event* x = next_event(ch, 10000);
        if (x && x->event == RDMA_CM_EVENT_DISCONNECTED) ++disc;
        if (x) rdma_ack_cm_event(x);
      }
      check(disc == 2, "DISCONNECTED on both ids");
      rdma_destroy_qp(server);
      if (rmr) ibv_dereg_mr(rmr);
    } else {
      const char no[] = "go away";
      check(rdma_reject(server, no, sizeof no) == 0, "rdma_reject with private data");
      rdma_cm_event* x = expect(ch, RDMA_CM_EVENT_REJECTED, "REJECTED", true);
      if (x) {
        check(x->status == 28 && x->param.conn.private_data_len >= sizeof no &&
                  std::memcmp(x->param.conn.private_data, no, sizeof no) == 0,
              "REJECTED: reason 28 (consumer defined), the listener's private data");
        rdma_ack_cm_event(x);
      }
    }
    rdma_destroy_id(server);
    rdma_destroy_qp(client);
    check(rdma_destroy_id(client) == 0, "rdma_destroy_id");
  }
  rdma_freeaddrinfo(res);
  rdma_destroy_id(listen);
  rdma_destroy_event_channel(ch);

  // rping's teardown: its CM thread waits in rdma_get_cm_event, or is between two events (it
  // has just acknowledged DISCONNECTED and calls again), while its main thread destroys the
  // channel and returns. With the kernel's CM both block on the rdma_cm fd until the process
  // ends. Here the channel was freed at once: the late caller read freed memory and a closed
  // fd (rping's server died of SIGSEGV, or exited 255 on EBADF). Both must stay blocked.
  {
    rdma_event_channel* held = rdma_create_event_channel();  // a reader inside at the destroy
    rdma_event_channel* idle = rdma_create_event_channel();  // nobody inside; a reader after it
    check(held && idle, "two more event channels (blocking)");
    if (held && idle) {
      static std::atomic<int> returned{0}, started{0};  // outlive this block: the readers stay
      auto reader = [](rdma_event_channel* c) {
        rdma_cm_event* x = nullptr;
        started.fetch_add(1);
        rdma_get_cm_event(c, &x);  // blocks for ever if all is well
        returned.fetch_add(1);
      };
      std::thread inside(reader, held);
      while (started.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // inside its read
      rdma_destroy_event_channel(held);
      rdma_destroy_event_channel(idle);
      std::thread late(reader, idle);  // as rping's CM thread after acknowledging DISCONNECTED
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      check(started.load() == 2 && returned.load() == 0,
            "rdma_get_cm_event on destroyed channels, by a thread inside at the destroy and by one "
            "arriving after it: both stay blocked (no read of freed memory, no EBADF)");
      inside.detach();
      late.detach();
    }
  }
  std::printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
