// The connection manager on QP 1 (engine/cm.hpp): two engines with the CM on, joined by the
// FakeLink under the virtual clock, connecting, refusing, losing MADs and disconnecting; the
// MADs the engine sends parsed back with proto/cm; the golden capture's REQ (Linux kernel CM)
// fed to a listening engine and its REP checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <string>

#include "engine/cm.hpp"
#include "proto/cm.hpp"
#include "tests/support/golden.hpp"
#include "tests/support/harness.hpp"
#include "tools/pcap/pcapio.hpp"

namespace uroce::test {
namespace {

namespace pcm = proto::cm;
using engine::cm::ConnectParams;
using engine::cm::Event;
using engine::cm::EventType;
using engine::cm::Manager;
using engine::cm::State;

constexpr uint16_t kPort = 18515;
const uint64_t kSid = pcm::service_id(pcm::ps::kTcp, kPort);
constexpr uint64_t kTimewaitNs = 50'000'000;  // 50 ms of virtual time
constexpr uint8_t kTimeout = 12;              // 4.096 us * 2^12 = 16.8 ms per CM wait

// The CM attribute of a frame (0 if it is not a CM MAD to QP 1).
uint16_t cm_attr(const uint8_t* d, uint32_t n) {
  proto::Packet p;
  if (!proto::parse(std::span<const uint8_t>(d, n), p).ok() || !pcm::is_gsi_send(p.opcode, p.dest_qp)) return 0;
  pcm::Mad m;
  if (pcm::parse(p.payload, m) != pcm::Error::Ok) return 0;
  return m.hdr.attr_id;
}
uint16_t attr(pcm::Attr a) { return uint16_t(a); }

class CmPair : public ::testing::Test {
 protected:
  void SetUp() override {
    PairOptions o;
    o.config_a = o.config_b = [](Device::Config& c) {
      c.cm = true;
      c.cm_timewait_ns = kTimewaitNs;
    };
    pr = std::make_unique<Pair>(o);
    for (int s = 0; s < 2; ++s) {
      FakeLink& l = s ? pr->wire.b() : pr->wire.a();
      l.tap = [this, s](const uint8_t* d, uint32_t n) {
        if (uint16_t a = cm_attr(d, n)) sent[s].push_back(a);
      };
      l.filter = [this, s](const uint8_t* d, uint32_t n) {
        const uint16_t a = cm_attr(d, n);
        if (a && drop[s].count(a) && drop[s][a] > 0) {
          --drop[s][a];
          return false;
        }
        return true;
      };
    }
  }
  Manager& cm(int s) { return *(s ? pr->b : pr->a).dev->cm(); }
  // Runs both engines until side `s` has reported `t` (the first such event not yet waited
  // for; every event of both sides is kept in order in events[]).
  bool wait(int s, EventType t, Event* out = nullptr, uint64_t max_ns = 5'000'000'000ull) {
    bool got = false;
    pr->run_until(
        [&] {
          for (int k = 0; k < 2; ++k) {
            Event e;
            while (cm(k).poll_event(e)) {
              events[k].push_back(e.type);
              pending[k].push_back(e);
            }
          }
          for (auto it = pending[s].begin(); it != pending[s].end(); ++it) {
            if (it->type != t) continue;
            if (out) *out = *it;
            pending[s].erase(it);
            return got = true;
          }
          return false;
        },
        max_ns);
    return got;
  }
  size_t count(int s, uint16_t a) const { return size_t(std::count(sent[s].begin(), sent[s].end(), a)); }
  ConnectParams req() {
    ConnectParams p;
    p.service_id = kSid;
    p.peer.dgid = pr->b.dev->config().gid;
    p.peer.dmac = pr->b.dev->config().mac;
    p.qpn = pr->a.qp->qpn();
    p.starting_psn = pr->opt.sq_psn_b;  // B sends from this PSN
    p.responder_resources = 4;
    p.initiator_depth = 2;
    p.path_mtu = Mtu::M1024;
    p.response_timeout = kTimeout;
    p.local_response_timeout = kTimeout;
    p.max_retries = 3;
    cma.ip_version = 4;
    cma.src_port = 40000;
    cma.src_addr = pcm::CmaHeader::ipv4(pr->a.dev->config().gid.data() + 12);
    cma.dst_addr = pcm::CmaHeader::ipv4(pr->b.dev->config().gid.data() + 12);
    p.cma = &cma;
    p.private_data = user_pd;
    return p;
  }
  engine::cm::AcceptParams rep() {
    engine::cm::AcceptParams p;
    p.qpn = pr->b.qp->qpn();
    p.starting_psn = pr->opt.sq_psn_a;
    p.responder_resources = 2;
    p.initiator_depth = 4;
    return p;
  }
  // Listen on B, connect from A with `p` (A's id in ida): B's ReqReceived event in e.
  void offer(const ConnectParams& p, uint32_t& ida, Event& e) {
    uint32_t lid;
    ASSERT_EQ(cm(1).listen(kSid, &lid), 0);
    ASSERT_EQ(cm(0).connect(p, &ida), 0);
    ASSERT_TRUE(wait(1, EventType::ReqReceived, &e));
  }
  // Listen on B, connect from A, accept, establish: the two ids.
  void connect(uint32_t& ida, uint32_t& idb) {
    Event e;
    ASSERT_NO_FATAL_FAILURE(offer(req(), ida, e));
    idb = e.id;
    ASSERT_EQ(cm(1).accept(idb, rep()), 0);
    ASSERT_TRUE(wait(0, EventType::RepReceived, &e));
    ASSERT_EQ(cm(0).establish(ida), 0);
    ASSERT_TRUE(wait(1, EventType::Established, &e));
  }
  State state(int s, uint32_t id) {
    const engine::cm::Conn* c = cm(s).find(id);
    return c ? c->state : State::Idle;
  }

  // Connects, drops the first MAD `a` that side `s` sends, and disconnects (A first): both ends
  // see the disconnection, side s having sent `a` twice.
  void disconnect_losing(int s, pcm::Attr a) {
    uint32_t ida, idb;
    connect(ida, idb);
    drop[s][attr(a)] = 1;
    ASSERT_EQ(cm(0).disconnect(ida), 0);
    Event e;
    ASSERT_TRUE(wait(1, EventType::DreqReceived, &e));
    ASSERT_EQ(cm(1).disconnect(idb), 0);
    ASSERT_TRUE(wait(0, EventType::Disconnected, &e));
    EXPECT_EQ(count(s, attr(a)), 2u);
  }
  // What the uroce service keeps of each side (port/endpoint.cpp): every change of its debt in
  // owed[], and in will[] the DREQ frame it would send for the side if it died now.
  void watch_goodbyes() {
    for (int s = 0; s < 2; ++s)
      cm(s).on_goodbye_owed = [this, s](uint32_t id, bool on) {
        owed[s].emplace_back(id, on);
        will[s] = on ? cm(s).goodbye_frame(id) : std::vector<uint8_t>{};
      };
  }
  std::vector<std::pair<uint32_t, bool>> owed[2];
  std::vector<uint8_t> will[2];
  std::unique_ptr<Pair> pr;
  std::vector<uint16_t> sent[2];
  std::map<uint16_t, int> drop[2];  // attribute -> frames of it still to drop, per side
  std::vector<EventType> events[2];
  std::deque<Event> pending[2];  // events not yet waited for
  pcm::CmaHeader cma{};
  std::vector<uint8_t> user_pd = {'h', 'e', 'l', 'l', 'o'};
};

TEST(CmNames, StatesAndEventsPrintTheirNames) {
  EXPECT_EQ(engine::cm::state_name(State::ReqSent), "REQ_SENT");
  EXPECT_EQ(engine::cm::state_name(State::MraRepRcvd), "MRA_REP_RCVD");
  EXPECT_EQ(engine::cm::state_name(State::TimeWait), "TIMEWAIT");
  EXPECT_EQ(engine::cm::state_name(State::SidrReqRcvd), "SIDR_REQ_RCVD");
  EXPECT_EQ(engine::cm::event_name(EventType::TimewaitExit), "TIMEWAIT_EXIT");
  EXPECT_EQ(engine::cm::event_name(EventType::Timeout), "TIMEOUT");
}

TEST_F(CmPair, ConnectAcceptEstablishDisconnect) {
  uint32_t lid, ida, idb;
  ASSERT_EQ(cm(1).listen(kSid, &lid), 0);
  EXPECT_EQ(cm(1).listen(kSid, &lid), EADDRINUSE);
  ASSERT_EQ(cm(0).connect(req(), &ida), 0);
  EXPECT_EQ(state(0, ida), State::ReqSent);
  Event e;
  ASSERT_TRUE(wait(1, EventType::ReqReceived, &e));
  idb = e.id;
  EXPECT_EQ(e.listen_id, lid);
  EXPECT_EQ(e.service_id, kSid);
  EXPECT_EQ(e.remote_qpn, pr->a.qp->qpn());
  EXPECT_EQ(e.starting_psn, pr->opt.sq_psn_b);
  ASSERT_TRUE(e.has_cma);
  EXPECT_EQ(e.cma, cma);
  ASSERT_EQ(e.private_data.size(), 92u);
  EXPECT_TRUE(std::equal(user_pd.begin(), user_pd.end(), e.private_data.begin() + 36));
  EXPECT_EQ(state(1, idb), State::ReqRcvd);
  EXPECT_EQ(cm(1).find(idb)->remote_id, ida);

  const uint8_t rep_pd[] = {1, 2, 3};
  auto ap = rep();
  ap.private_data = rep_pd;
  ASSERT_EQ(cm(1).accept(idb, ap), 0);
  EXPECT_EQ(state(1, idb), State::RepSent);
  ASSERT_TRUE(wait(0, EventType::RepReceived, &e));
  EXPECT_EQ(e.id, ida);
  EXPECT_EQ(e.remote_qpn, pr->b.qp->qpn());
  EXPECT_EQ(e.starting_psn, pr->opt.sq_psn_a);  // the PSN A sends from
  EXPECT_EQ(e.private_data[0], 1);
  EXPECT_EQ(e.private_data[2], 3);
  EXPECT_EQ(state(0, ida), State::RepRcvd);
  ASSERT_EQ(cm(0).establish(ida), 0);
  EXPECT_EQ(state(0, ida), State::Established);
  ASSERT_TRUE(wait(1, EventType::Established, &e));
  EXPECT_EQ(state(1, idb), State::Established);
  EXPECT_EQ(cm(1).find(idb)->local_psn, pr->opt.sq_psn_b);
  EXPECT_EQ(cm(0).find(ida)->local_psn, pr->opt.sq_psn_a);

  ASSERT_EQ(cm(0).disconnect(ida), 0);
  EXPECT_EQ(state(0, ida), State::DreqSent);
  ASSERT_TRUE(wait(1, EventType::DreqReceived, &e));
  EXPECT_EQ(state(1, idb), State::DreqRcvd);
  ASSERT_EQ(cm(1).disconnect(idb), 0);
  EXPECT_EQ(state(1, idb), State::TimeWait);
  ASSERT_TRUE(wait(0, EventType::Disconnected, &e));
  EXPECT_EQ(state(0, ida), State::TimeWait);
  // TimeWait: the QP number is not connected again yet.
  uint32_t again;
  EXPECT_EQ(cm(0).connect(req(), &again), EBUSY);
  const uint64_t t0 = pr->wire.clock().now_ns();
  ASSERT_TRUE(wait(0, EventType::TimewaitExit, &e));
  ASSERT_TRUE(wait(1, EventType::TimewaitExit, &e));
  EXPECT_GE(pr->wire.clock().now_ns() - t0, kTimewaitNs - 1'000'000);
  EXPECT_EQ(cm(0).conns(), 0u);
  EXPECT_EQ(cm(1).conns(), 1u);  // the listener
  // One of each MAD, nothing resent.
  EXPECT_EQ(sent[0], (std::vector<uint16_t>{attr(pcm::Attr::Req), attr(pcm::Attr::Rtu), attr(pcm::Attr::Dreq)}));
  EXPECT_EQ(sent[1], (std::vector<uint16_t>{attr(pcm::Attr::Rep), attr(pcm::Attr::Drep)}));
  EXPECT_EQ(cm(0).counters().resent, 0u) << cm(0).counters().text();
  EXPECT_EQ(cm(1).counters().resent, 0u) << cm(1).counters().text();
  // Now the QP number is free again.
  EXPECT_EQ(cm(0).connect(req(), &again), 0);
}

// What the uroce service sends for a process that dies (port/endpoint.cpp): from the REP (the
// peer is established once it arrives) or the RTU until the connection's own DREQ, a connection
// owes its peer a goodbye, and goodbye_frame() is that DREQ. Here B "dies" right after its REP:
// A, established, gets the DREQ B left and sees the connection end.
TEST_F(CmPair, GoodbyeOwedFromTheRepAndSentForADeadPeer) {
  watch_goodbyes();
  uint32_t ida, idb;
  Event e;
  ASSERT_NO_FATAL_FAILURE(offer(req(), ida, e));
  idb = e.id;
  EXPECT_TRUE(owed[0].empty() && owed[1].empty()) << "nothing is owed before the REP";
  EXPECT_TRUE(cm(1).goodbye_frame(idb).empty()) << "REQ_RCVD: the peer is not connected yet";
  ASSERT_EQ(cm(1).accept(idb, rep()), 0);
  ASSERT_EQ(owed[1], (std::vector<std::pair<uint32_t, bool>>{{idb, true}}));
  // The frame is a DREQ from B's comm ID to A's, for A's QP, to QP 1.
  {
    proto::Packet p;
    ASSERT_TRUE(proto::parse(will[1], p).ok());
    EXPECT_TRUE(pcm::is_gsi_send(p.opcode, p.dest_qp));
    pcm::Mad m;
    ASSERT_EQ(pcm::parse(p.payload, m), pcm::Error::Ok);
    ASSERT_EQ(m.hdr.attr_id, attr(pcm::Attr::Dreq));
    const auto& d = std::get<pcm::Dreq>(m.msg);
    EXPECT_EQ(d.local_comm_id, idb);
    EXPECT_EQ(d.remote_comm_id, ida);
    EXPECT_EQ(d.remote_qpn, pr->a.qp->qpn());
  }
  ASSERT_TRUE(wait(0, EventType::RepReceived, &e));
  ASSERT_EQ(cm(0).establish(ida), 0);
  ASSERT_EQ(owed[0], (std::vector<std::pair<uint32_t, bool>>{{ida, true}}));
  EXPECT_FALSE(will[0].empty());
  // B dies: its RTU never reaches it (its frames go nowhere), and what it left is sent for it.
  const std::vector<uint8_t> left = will[1];
  drop[0][attr(pcm::Attr::Rtu)] = 1;
  pr->wire.a().inject(left.data(), uint32_t(left.size()));
  ASSERT_TRUE(wait(0, EventType::DreqReceived, &e));
  EXPECT_EQ(e.id, ida);
  EXPECT_EQ(state(0, ida), State::DreqRcvd);
  EXPECT_EQ(owed[0].back(), (std::pair<uint32_t, bool>{ida, false})) << "answering a DREQ ends the debt";
  EXPECT_TRUE(cm(0).goodbye_frame(ida).empty());
}

// A process that called rdma_disconnect and died before its DREQ left (the frame still in its
// ring, which the service empties) still owes the goodbye: the DREQ it left ends the peer's side.
// Once the peer's DREP is in, nothing is owed.
TEST_F(CmPair, GoodbyeStillOwedWhileTheDreqIsUnanswered) {
  watch_goodbyes();
  uint32_t ida, idb;
  ASSERT_NO_FATAL_FAILURE(connect(ida, idb));
  ASSERT_EQ(owed[0], (std::vector<std::pair<uint32_t, bool>>{{ida, true}}));
  drop[0][attr(pcm::Attr::Dreq)] = 1;  // A's own DREQ never leaves: A dies right after the call
  ASSERT_EQ(cm(0).disconnect(ida), 0);
  EXPECT_EQ(state(0, ida), State::DreqSent);
  EXPECT_EQ(owed[0].size(), 1u) << "DREQ_SENT still owes the goodbye";
  EXPECT_FALSE(cm(0).goodbye_frame(ida).empty());
  const std::vector<uint8_t> left = will[0];
  pr->wire.b().inject(left.data(), uint32_t(left.size()));
  Event e;
  ASSERT_TRUE(wait(1, EventType::DreqReceived, &e));
  EXPECT_EQ(e.id, idb);
  // A lives after all: B's answer (its DREP to the DREQ A left) ends A's debt.
  ASSERT_EQ(cm(1).disconnect(idb), 0);
  ASSERT_TRUE(wait(0, EventType::Disconnected, &e));
  EXPECT_EQ(state(0, ida), State::TimeWait);
  EXPECT_EQ(owed[0].back(), (std::pair<uint32_t, bool>{ida, false}));
  EXPECT_TRUE(cm(0).goodbye_frame(ida).empty());
}

TEST_F(CmPair, NobodyListensRejectReason8) {
  uint32_t ida;
  ASSERT_EQ(cm(0).connect(req(), &ida), 0);
  Event e;
  const uint64_t t0 = pr->wire.clock().now_ns();
  ASSERT_TRUE(wait(0, EventType::RejReceived, &e, 1'000'000));  // within 1 ms: no retry needed
  EXPECT_LT(pr->wire.clock().now_ns() - t0, 1'000'000u);
  EXPECT_EQ(e.id, ida);
  EXPECT_EQ(e.reason, pcm::rej::kInvalidServiceId);
  EXPECT_EQ(cm(1).counters().rej_no_listener, 1u);
  EXPECT_EQ(cm(0).find(ida), nullptr);  // refused before it was connected: freed
  EXPECT_EQ(cm(1).conns(), 0u);         // the passive side kept nothing
}

TEST_F(CmPair, ReqAboveThePortMtuRejectReason26) {
  // B's port is at 1024 (the default); A asks for 4096: B refuses at once, keeps nothing.
  uint32_t lid, ida;
  ASSERT_EQ(cm(1).listen(kSid, &lid), 0);
  ConnectParams p = req();
  p.path_mtu = Mtu::M4096;
  ASSERT_EQ(cm(0).connect(p, &ida), 0);
  Event e;
  ASSERT_TRUE(wait(0, EventType::RejReceived, &e, 1'000'000));
  EXPECT_EQ(e.id, ida);
  EXPECT_EQ(e.reason, pcm::rej::kInvalidMtu);
  EXPECT_EQ(cm(1).counters().rej_mtu, 1u);
  EXPECT_EQ(cm(0).find(ida), nullptr);
  EXPECT_EQ(cm(1).conns(), 1u);  // the listener only
  for (const Event& x : pending[1]) EXPECT_NE(x.type, EventType::ReqReceived);  // the library never saw it
  // At the port's MTU or below, the same listener takes it.
  p.path_mtu = Mtu::M512;
  ASSERT_EQ(cm(0).connect(p, &ida), 0);
  ASSERT_TRUE(wait(1, EventType::ReqReceived, &e));
}

TEST_F(CmPair, RejectWithPrivateData) {
  uint32_t ida;
  Event e;
  ASSERT_NO_FATAL_FAILURE(offer(req(), ida, e));
  const uint8_t why[] = {'n', 'o'};
  ASSERT_EQ(cm(1).reject(e.id, pcm::rej::kConsumerDefined, why), 0);
  ASSERT_TRUE(wait(0, EventType::RejReceived, &e));
  EXPECT_EQ(e.reason, pcm::rej::kConsumerDefined);
  EXPECT_EQ(e.private_data[0], 'n');
  EXPECT_EQ(e.private_data[1], 'o');
}

TEST_F(CmPair, LostReqIsResent) {
  drop[0][attr(pcm::Attr::Req)] = 1;
  uint32_t ida, idb;
  connect(ida, idb);
  EXPECT_EQ(count(0, attr(pcm::Attr::Req)), 2u);
  EXPECT_EQ(cm(0).counters().resent, 1u);
  EXPECT_EQ(state(0, ida), State::Established);
}

TEST_F(CmPair, LostRtuRecoveredByRepResend) {
  drop[0][attr(pcm::Attr::Rtu)] = 1;
  uint32_t ida, idb;
  connect(ida, idb);
  // B's REP timer resent the REP; A, already established, answered with the RTU again.
  EXPECT_EQ(count(1, attr(pcm::Attr::Rep)), 2u);
  EXPECT_EQ(count(0, attr(pcm::Attr::Rtu)), 2u);
  EXPECT_EQ(state(1, idb), State::Established);
}

TEST_F(CmPair, DuplicateReqAfterAcceptGetsTheRepAgain) {
  drop[1][attr(pcm::Attr::Rep)] = 1;  // B's first REP is lost: A's timer resends the REQ
  uint32_t ida;
  auto p = req();
  p.local_response_timeout = 20;  // B waits 4.3 s for our RTU: its own REP timer stays out of it
  Event e;
  ASSERT_NO_FATAL_FAILURE(offer(p, ida, e));
  ASSERT_EQ(cm(1).accept(e.id, rep()), 0);
  ASSERT_TRUE(wait(0, EventType::RepReceived, &e));
  EXPECT_EQ(count(0, attr(pcm::Attr::Req)), 2u);
  EXPECT_EQ(count(1, attr(pcm::Attr::Rep)), 2u);  // the duplicate REQ got the REP again
  EXPECT_EQ(std::count(events[1].begin(), events[1].end(), EventType::ReqReceived), 1);  // reported once
}

TEST_F(CmPair, DuplicateReqBeforeAcceptGetsAnMra) {
  uint32_t ida;
  Event e;
  ASSERT_NO_FATAL_FAILURE(offer(req(), ida, e));
  const uint32_t idb = e.id;
  // The application takes its time: A resends the REQ, B answers with an MRA, A waits longer.
  ASSERT_TRUE(wait(0, EventType::MraReceived, &e));
  EXPECT_EQ(state(1, idb), State::MraReqSent);
  EXPECT_EQ(state(0, ida), State::MraReqRcvd);
  EXPECT_EQ(count(1, attr(pcm::Attr::Mra)), 1u);
  // Well past A's own retries (3 x 16.8 ms) nothing times out: the MRA asked for 4.096 us * 2^24.
  pr->run_until([] { return false; }, 200'000'000);
  EXPECT_EQ(state(0, ida), State::MraReqRcvd);
  EXPECT_EQ(count(0, attr(pcm::Attr::Req)), 2u);
  ASSERT_EQ(cm(1).accept(idb, rep()), 0);
  ASSERT_TRUE(wait(0, EventType::RepReceived, &e));
}

TEST_F(CmPair, LostDreqIsResent) { disconnect_losing(0, pcm::Attr::Dreq); }

// The resent DREQ finds B in TimeWait, which answers it.
TEST_F(CmPair, LostDrepIsAnsweredFromTimeWait) { disconnect_losing(1, pcm::Attr::Drep); }

// Both sides disconnect at once (as in the golden capture, frames 91-94): each answers the
// other's DREQ with a DREP and both end in TimeWait.
TEST_F(CmPair, CrossingDreqs) {
  uint32_t ida, idb;
  connect(ida, idb);
  ASSERT_EQ(cm(0).disconnect(ida), 0);
  ASSERT_EQ(cm(1).disconnect(idb), 0);
  Event e;
  ASSERT_TRUE(wait(0, EventType::Disconnected, &e));
  ASSERT_TRUE(wait(1, EventType::Disconnected, &e));
  EXPECT_EQ(state(0, ida), State::TimeWait);
  EXPECT_EQ(state(1, idb), State::TimeWait);
  EXPECT_EQ(count(0, attr(pcm::Attr::Drep)), 1u);
  EXPECT_EQ(count(1, attr(pcm::Attr::Drep)), 1u);
  ASSERT_TRUE(wait(0, EventType::TimewaitExit, &e));
  ASSERT_TRUE(wait(1, EventType::TimewaitExit, &e));
}

TEST_F(CmPair, PeerThatVanishesTimesOut) {
  uint32_t lid, ida;
  ASSERT_EQ(cm(1).listen(kSid, &lid), 0);
  pr->wire.b().filter = [](const uint8_t*, uint32_t) { return false; };  // B says nothing, ever
  ASSERT_EQ(cm(0).connect(req(), &ida), 0);
  Event e;
  const uint64_t t0 = pr->wire.clock().now_ns();
  ASSERT_TRUE(wait(0, EventType::Timeout, &e));
  EXPECT_EQ(e.timed_out, pcm::Attr::Req);
  EXPECT_EQ(count(0, attr(pcm::Attr::Req)), 4u);  // the REQ and its 3 retries
  EXPECT_EQ(count(0, attr(pcm::Attr::Rej)), 1u);  // then a REJ "timeout"
  // 4 waits of 4.096 us * 2^12, and not much more.
  const uint64_t waited = pr->wire.clock().now_ns() - t0;
  EXPECT_GE(waited, 4 * (4096ull << kTimeout));
  EXPECT_LT(waited, 5 * (4096ull << kTimeout));
  EXPECT_EQ(cm(0).counters().timeouts, 1u);
}

TEST_F(CmPair, EstablishedPeerVanishesDisconnectTimesOut) {
  uint32_t ida, idb;
  connect(ida, idb);
  pr->wire.b().filter = [](const uint8_t*, uint32_t) { return false; };
  ASSERT_EQ(cm(0).disconnect(ida), 0);
  Event e;
  ASSERT_TRUE(wait(0, EventType::Timeout, &e));
  EXPECT_EQ(e.timed_out, pcm::Attr::Dreq);
  ASSERT_TRUE(wait(0, EventType::Disconnected, &e));
  EXPECT_EQ(state(0, ida), State::TimeWait);
  ASSERT_TRUE(wait(0, EventType::TimewaitExit, &e));
}

// The process of side A leaves with its connection open (the shim's exit): shutdown() sends
// the DREQ the kernel would send for it; B answers and disconnects; a request B has not seen
// answered yet gets a REJ.
TEST_F(CmPair, ShutdownDisconnectsWhatIsOpen) {
  uint32_t ida, idb;
  connect(ida, idb);
  EXPECT_EQ(cm(0).shutdown(), 1u);  // one DREQ out, waiting for its DREP
  EXPECT_EQ(cm(0).disconnecting(), 1u);
  Event e;
  ASSERT_TRUE(wait(1, EventType::DreqReceived, &e));
  EXPECT_EQ(e.id, idb);
  ASSERT_EQ(cm(1).disconnect(idb), 0);
  ASSERT_TRUE(wait(0, EventType::Disconnected, &e));
  EXPECT_EQ(cm(0).disconnecting(), 0u);
  EXPECT_EQ(count(0, attr(pcm::Attr::Dreq)), 1u);
  // B's passive request pending when B leaves: A is told at once (REJ), not after its timeouts.
  uint32_t ida2;
  ConnectParams p2 = req();
  p2.qpn ^= 0x10;  // A's QP number is in TimeWait
  ASSERT_EQ(cm(0).connect(p2, &ida2), 0);
  ASSERT_TRUE(wait(1, EventType::ReqReceived, &e));
  EXPECT_EQ(cm(1).shutdown(), 0u);
  ASSERT_TRUE(wait(0, EventType::RejReceived, &e, 1'000'000));
  EXPECT_EQ(e.id, ida2);
  EXPECT_EQ(e.reason, pcm::rej::kConsumerDefined);
}

TEST_F(CmPair, FirstDataPacketIsAnImplicitRtu) {
  drop[0][attr(pcm::Attr::Rtu)] = 100;  // A's RTUs never arrive
  uint32_t ida;
  auto p = req();
  p.local_response_timeout = 20;  // B's REP timer: 4.3 s, far beyond this test
  Event e;
  ASSERT_NO_FATAL_FAILURE(offer(p, ida, e));
  const uint32_t idb = e.id;
  ASSERT_EQ(cm(1).accept(idb, rep()), 0);
  ASSERT_TRUE(wait(0, EventType::RepReceived, &e));
  ASSERT_EQ(cm(0).establish(ida), 0);
  pr->run_until([] { return false; }, 1'000'000);
  EXPECT_EQ(state(1, idb), State::RepSent);
  // A's first SEND on the connected QP: B's CM takes it as the RTU.
  Sge rs{pr->b.addr(), 64, pr->b.mr->lkey};
  RecvWr rw{1, &rs, 1};
  ASSERT_EQ(pr->b.dev->post_recv(pr->b.qp, rw), 0);
  Sge ss{pr->a.addr(), 64, pr->a.mr->lkey};
  SendWr sw = wr_to(pr->b, 2, WrOpcode::Send, &ss);
  ASSERT_EQ(pr->a.dev->post_send(pr->a.qp, sw), 0);
  const uint64_t t0 = pr->wire.clock().now_ns();
  ASSERT_TRUE(wait(1, EventType::Established, &e));
  EXPECT_LT(pr->wire.clock().now_ns() - t0, 1'000'000u);
  EXPECT_EQ(state(1, idb), State::Established);
  EXPECT_EQ(count(1, attr(pcm::Attr::Rep)), 1u);
}

// Issue 30: 10,000 connections at once between two CMs (more than the 4,096 cm_max_conns
// allowed before), every one made, established and torn down through TimeWait, nothing resent
// or dropped; a QP number in TimeWait refused (EBUSY) among them, free again after. The CM's
// lookups are indexes and its timers a heap (engine/cm.hpp): no step walks all connections.
TEST_F(CmPair, TenThousandConnectionsAtOnce) {
  constexpr uint32_t kN = 10000;
  uint32_t lid;
  ASSERT_EQ(cm(1).listen(kSid, &lid), 0);
  std::vector<uint32_t> ida(kN);
  for (uint32_t i = 0; i < kN; ++i) {
    ConnectParams p = req();
    p.qpn = 0x10000 + i;
    ASSERT_EQ(cm(0).connect(p, &ida[i]), 0) << i;
  }
  uint32_t established[2] = {0, 0}, dreq = 0, disconnected = 0, exited[2] = {0, 0}, other = 0;
  bool torn_down = false;
  int busy = -1;  // connect()'s answer for a QP number in TimeWait
  auto drive = [&] {
    Event e;
    while (cm(1).poll_event(e)) {
      if (e.type == EventType::ReqReceived) {
        engine::cm::AcceptParams a = rep();
        a.qpn = 0x20000 + e.remote_qpn - 0x10000;
        EXPECT_EQ(cm(1).accept(e.id, a), 0);
      } else if (e.type == EventType::Established) ++established[1];
      else if (e.type == EventType::DreqReceived) {
        ++dreq;
        EXPECT_EQ(cm(1).disconnect(e.id), 0);
      } else if (e.type == EventType::TimewaitExit) ++exited[1];
      else ++other;
    }
    while (cm(0).poll_event(e)) {
      if (e.type == EventType::RepReceived) {
        EXPECT_EQ(cm(0).establish(e.id), 0);
        ++established[0];
      } else if (e.type == EventType::Disconnected) ++disconnected;
      else if (e.type == EventType::TimewaitExit) ++exited[0];
      else ++other;
    }
    if (!torn_down && established[0] == kN && established[1] == kN) {
      torn_down = true;
      EXPECT_EQ(cm(0).conns(), size_t(kN));
      for (uint32_t id : ida) EXPECT_EQ(cm(0).disconnect(id), 0);
    }
    if (busy < 0 && disconnected == kN && exited[0] == 0) {  // all of A's ids in TimeWait
      ConnectParams p = req();
      p.qpn = 0x10000 + 4321;
      uint32_t x;
      busy = cm(0).connect(p, &x);
    }
    return exited[0] == kN && exited[1] == kN;
  };
  ASSERT_TRUE(pr->run_until(drive, 60'000'000'000ull)) << established[0] << " " << established[1] << " " << dreq
                                                       << " " << disconnected << " " << exited[0] << " " << exited[1];
  EXPECT_EQ(dreq, kN);
  EXPECT_EQ(disconnected, kN);
  EXPECT_EQ(other, 0u);
  EXPECT_EQ(busy, EBUSY) << "a QP number in TimeWait";
  EXPECT_EQ(cm(0).conns(), 0u);
  EXPECT_EQ(cm(1).conns(), 1u);  // the listener
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(cm(s).counters().resent, 0u) << cm(s).counters().text();
    EXPECT_EQ(cm(s).counters().dropped_events, 0u) << cm(s).counters().text();
    EXPECT_EQ(cm(s).counters().rej_no_resources, 0u) << cm(s).counters().text();
  }
  ConnectParams p = req();
  p.qpn = 0x10000 + 4321;
  uint32_t x;
  EXPECT_EQ(cm(0).connect(p, &x), 0) << "free again after TimeWait";
}

TEST_F(CmPair, StaleReqForAConnectedQpIsRejected) {
  uint32_t ida, idb;
  connect(ida, idb);
  // Another REQ from A's QP (a new communication ID) while B still has it connected.
  auto p = req();
  p.qpn = pr->a.qp->qpn() ^ 1;  // A itself would refuse the same QP number: forge it below
  uint32_t id2;
  ASSERT_EQ(cm(0).connect(p, &id2), 0);
  Event e;
  ASSERT_TRUE(wait(1, EventType::ReqReceived, &e));  // a different QP: a new connection
  // Now the same QP number as the connected one, from a new ID: stale.
  pcm::Req r;
  r.local_comm_id = 0x12345678;
  r.service_id = kSid;
  r.local_qpn = pr->a.qp->qpn();
  pcm::Mad m{{}, r};
  std::array<uint8_t, 256> mad{};
  ASSERT_EQ(pcm::emit(m, mad), 256u);
  proto::Packet f = forge(pr->a, pr->b, proto::op::kUd | proto::op::kSendOnly, 0);
  f.dest_qp = 1;
  f.pkey = 0xFFFF;
  f.deth = {pcm::kGsiQkey, 1};
  f.payload = {mad.data(), mad.size()};
  inject(pr->wire.b(), f);
  pr->run_until([] { return false; }, 100'000);
  EXPECT_EQ(cm(1).counters().rej_stale, 1u);
}

TEST_F(CmPair, BadMadsAreCountedAndDropped) {
  std::array<uint8_t, 256> mad{};
  proto::Packet f = forge(pr->a, pr->b, proto::op::kUd | proto::op::kSendOnly, 0);
  f.dest_qp = 1;
  f.pkey = 0xFFFF;
  f.deth = {pcm::kGsiQkey, 1};
  f.payload = {mad.data(), mad.size()};
  inject(pr->wire.b(), f);  // all zero: base version 0
  f.deth.qkey = 0x1234;
  inject(pr->wire.b(), f);  // wrong Q_Key
  pcm::Rtu rtu;
  rtu.remote_comm_id = 0xdeadbeef;
  ASSERT_EQ(pcm::emit(pcm::Mad{{}, rtu}, mad), 256u);
  f.deth.qkey = pcm::kGsiQkey;
  inject(pr->wire.b(), f);  // an RTU for no one
  pr->run_until([] { return false; }, 100'000);
  const auto& c = cm(1).counters();
  EXPECT_EQ(c.dropped_bad_mad, 1u) << c.text();
  EXPECT_EQ(c.dropped_bad_keys, 1u) << c.text();
  EXPECT_EQ(c.dropped_unknown_id, 1u) << c.text();
}

TEST_F(CmPair, SidrResolvesAUdService) {
  const uint64_t sid = pcm::service_id(pcm::ps::kUdp, 7174);
  uint32_t lid, ida;
  ASSERT_EQ(cm(1).listen(sid, &lid), 0);
  engine::cm::SidrParams p;
  p.service_id = sid;
  p.peer.dgid = pr->b.dev->config().gid;
  p.peer.dmac = pr->b.dev->config().mac;
  p.response_timeout = kTimeout;
  p.max_retries = 2;
  cma.ip_version = 4;
  cma.src_port = 5555;
  p.cma = &cma;
  ASSERT_EQ(cm(0).sidr_request(p, &ida), 0);
  Event e;
  ASSERT_TRUE(wait(1, EventType::SidrReqReceived, &e));
  EXPECT_TRUE(e.has_cma);
  EXPECT_EQ(e.cma.src_port, 5555);
  ASSERT_EQ(cm(1).sidr_reply(e.id, pcm::sidr::kSuccess, 0x123456, 0x11111111), 0);
  ASSERT_TRUE(wait(0, EventType::SidrRepReceived, &e));
  EXPECT_EQ(e.id, ida);
  EXPECT_EQ(e.status, pcm::sidr::kSuccess);
  EXPECT_EQ(e.remote_qpn, 0x123456u);
  EXPECT_EQ(e.qkey, 0x11111111u);
  EXPECT_EQ(cm(0).conns(), 0u);
  // Nobody listens on another port: status 1, service ID not supported.
  p.service_id = pcm::service_id(pcm::ps::kUdp, 7175);
  ASSERT_EQ(cm(0).sidr_request(p, &ida), 0);
  ASSERT_TRUE(wait(0, EventType::SidrRepReceived, &e));
  EXPECT_EQ(e.status, pcm::sidr::kUnsupported);
}

// The REQ the engine sends, parsed back: UD SEND_ONLY to QP 1 with the GSI's keys, every field
// of the REQ from the connect() parameters, rdma_cm's IP header first in the private data.
TEST_F(CmPair, ReqOnTheWireParsesWithProtoCm) {
  std::vector<std::vector<uint8_t>> frames;
  pr->wire.a().tap = [&](const uint8_t* d, uint32_t n) { frames.emplace_back(d, d + n); };
  uint32_t ida;
  auto params = req();
  ASSERT_EQ(cm(0).connect(params, &ida), 0);
  pr->a.dev->progress();
  ASSERT_EQ(frames.size(), 1u);
  proto::Packet p;
  ASSERT_TRUE(proto::parse(frames[0], p).ok());
  EXPECT_EQ(p.opcode, proto::op::kUd | proto::op::kSendOnly);
  EXPECT_EQ(p.dest_qp, 1u);
  EXPECT_EQ(p.pkey, 0xFFFF);
  EXPECT_EQ(p.deth.qkey, 0x80010000u);
  EXPECT_EQ(p.deth.src_qp, 1u);
  EXPECT_EQ(p.payload.size(), 256u);
  EXPECT_EQ(std::memcmp(p.eth_dst.data(), pr->b.dev->config().mac.data(), 6), 0);
  pcm::Mad m;
  ASSERT_EQ(pcm::parse(p.payload, m), pcm::Error::Ok);
  EXPECT_EQ(m.hdr.attr_id, attr(pcm::Attr::Req));
  EXPECT_EQ(m.hdr.method, pcm::kMethodSend);
  EXPECT_EQ(uint32_t(m.hdr.tid), ida);
  const auto& r = std::get<pcm::Req>(m.msg);
  EXPECT_EQ(r.local_comm_id, ida);
  EXPECT_EQ(r.service_id, 0x0000000001064853ull);
  EXPECT_EQ(r.local_qpn, pr->a.qp->qpn());
  EXPECT_EQ(r.starting_psn, pr->opt.sq_psn_b);
  EXPECT_EQ(r.responder_resources, 4);
  EXPECT_EQ(r.initiator_depth, 2);
  EXPECT_EQ(r.remote_cm_response_timeout, kTimeout);
  EXPECT_EQ(r.local_cm_response_timeout, kTimeout);
  EXPECT_EQ(r.transport_service_type, 0);
  EXPECT_EQ(r.retry_count, 7);
  EXPECT_EQ(r.rnr_retry_count, 7);
  EXPECT_EQ(r.path_mtu, 3);
  EXPECT_EQ(r.max_cm_retries, 3);
  EXPECT_EQ(r.pkey, 0xFFFF);
  EXPECT_EQ(r.primary.local_lid, 0xFFFF);
  EXPECT_EQ(r.primary.local_gid, pr->a.dev->config().gid);
  EXPECT_EQ(r.primary.remote_gid, pr->b.dev->config().gid);
  EXPECT_EQ(r.local_ca_guid, 0x000000fffe00000aull);  // EUI-64 of 02:00:00:00:00:0a
  pcm::CmaHeader h;
  ASSERT_EQ(pcm::parse_cma_header(r.private_data, h), pcm::CmaError::Ok);
  EXPECT_EQ(h, cma);
  EXPECT_EQ(r.private_data[0], 0x00);   // version 0
  EXPECT_EQ(r.private_data[1], 0x40);   // IPv4
  EXPECT_EQ(r.private_data[2], 0x9c);   // 40000
  EXPECT_EQ(r.private_data[3], 0x40);
  EXPECT_EQ(r.private_data[4 + 12], 198);  // 12 zero bytes, then the address
  EXPECT_EQ(r.private_data[4 + 15], 10);
  EXPECT_EQ(r.private_data[20 + 15], 11);
  EXPECT_TRUE(std::equal(user_pd.begin(), user_pd.end(), r.private_data.begin() + 36));
  // Private data beyond 56 bytes after the IP header does not fit.
  std::vector<uint8_t> big(57);
  params.private_data = big;
  EXPECT_EQ(cm(0).connect(params, &ida), EINVAL);
  params.private_data = {};
  params.peer.dgid = proto::Ip6{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};  // IPv6 from an IPv4 GID
  EXPECT_EQ(cm(0).connect(params, &ida), EINVAL);
}

// The golden capture's REQ (a Linux kernel CM, rdma_cm.pcap frame 1) into a listening engine at
// the capture's passive address: the REQ is reported with its IP header, and the REP sent back
// answers it (IDs, transaction ID, addresses); the capture's RTU (frame 3) establishes it.
TEST(CmGolden, KernelReqGetsOurRep) {
  pcapio::Capture cap;
  std::string err;
  const std::string path = golden_path("tutorial/rdma_cm.pcap");
  ASSERT_TRUE(pcapio::read_file(path, cap, err)) << path << ": " << err;
  ASSERT_GE(cap.frames.size(), 3u);
  const auto& req = cap.frames[0].bytes;
  const auto& rtu = cap.frames[2].bytes;
  proto::Packet rp;
  ASSERT_TRUE(proto::parse(req, rp).ok());
  FakeWire wire(64, 9216, 1);
  Device::Config cfg;
  cfg.mac = rp.eth_dst;
  cfg.gid = v4gid(rp.ip_dst[0], rp.ip_dst[1], rp.ip_dst[2], rp.ip_dst[3]);  // 10.1.16.61
  cfg.cm = true;
  cfg.seed = 7;
  Device dev(wire.a(), wire.clock(), cfg);
  std::vector<std::vector<uint8_t>> out;
  wire.a().tap = [&](const uint8_t* d, uint32_t n) { out.emplace_back(d, d + n); };
  uint32_t lid;
  ASSERT_EQ(dev.cm()->listen(pcm::service_id(pcm::ps::kTcp, 18515), &lid), 0);
  wire.a().inject(req.data(), uint32_t(req.size()));
  dev.progress();
  Event e;
  ASSERT_TRUE(dev.cm()->poll_event(e));
  ASSERT_EQ(e.type, EventType::ReqReceived);
  EXPECT_EQ(e.remote_qpn, 0x3du);
  EXPECT_EQ(e.starting_psn, 8176132u);
  ASSERT_TRUE(e.has_cma);
  EXPECT_EQ(e.cma.src_port, 52471);
  const uint8_t src[] = {10, 1, 16, 62}, dst[] = {10, 1, 16, 61};
  EXPECT_EQ(std::memcmp(e.cma.src_ipv4(), src, 4), 0);
  EXPECT_EQ(std::memcmp(e.cma.dst_ipv4(), dst, 4), 0);
  EXPECT_EQ(dev.cm()->find(e.id)->remote_id, 0x64c0c56du);

  engine::cm::AcceptParams ap;
  ap.qpn = 0x3b;
  ap.starting_psn = 7503213;
  ASSERT_EQ(dev.cm()->accept(e.id, ap), 0);
  dev.progress();
  ASSERT_EQ(out.size(), 1u);
  proto::Packet p;
  ASSERT_TRUE(proto::parse(out[0], p).ok());
  EXPECT_EQ(p.eth_dst, rp.eth_src);
  EXPECT_EQ(p.eth_src, rp.eth_dst);
  EXPECT_EQ(std::memcmp(p.ip_dst.data(), src, 4), 0);
  EXPECT_EQ(std::memcmp(p.ip_src.data(), dst, 4), 0);
  EXPECT_EQ(p.dest_qp, 1u);
  EXPECT_EQ(p.deth.qkey, pcm::kGsiQkey);
  EXPECT_EQ(p.deth.src_qp, 1u);
  pcm::Mad m;
  ASSERT_EQ(pcm::parse(p.payload, m), pcm::Error::Ok);
  EXPECT_EQ(m.hdr.tid, 0x000000026dc5c064ull);  // the REQ's, echoed
  const auto& rep = std::get<pcm::Rep>(m.msg);
  EXPECT_EQ(rep.local_comm_id, e.id);
  EXPECT_EQ(rep.remote_comm_id, 0x64c0c56du);
  EXPECT_EQ(rep.local_qpn, 0x3bu);
  EXPECT_EQ(rep.starting_psn, 7503213u);
  EXPECT_EQ(rep.rnr_retry_count, 7);

  // The kernel's RTU names its own comm ID (0x8988f456 from its REP): ours is different, so the
  // RTU does not match; rewrite its remote ID to ours, as the kernel would have sent it to us.
  std::vector<uint8_t> r2 = rtu;
  proto::Packet tp;
  ASSERT_TRUE(proto::parse(r2, tp).ok());
  pcm::Mad rm;
  ASSERT_EQ(pcm::parse(tp.payload, rm), pcm::Error::Ok);
  std::get<pcm::Rtu>(rm.msg).remote_comm_id = e.id;
  std::array<uint8_t, 256> mad{};
  ASSERT_EQ(pcm::emit(rm, mad), 256u);
  tp.payload = {mad.data(), mad.size()};
  std::vector<uint8_t> f(proto::frame_len(tp));
  ASSERT_TRUE(proto::build(tp, f).ok());
  wire.a().inject(f.data(), uint32_t(f.size()));
  dev.progress();
  ASSERT_TRUE(dev.cm()->poll_event(e));
  EXPECT_EQ(e.type, EventType::Established);
}

TEST(CmOff, FramesToQp1AreDroppedAsUnknownQp) {
  PairOptions o;
  Pair pr(o);
  EXPECT_EQ(pr.b.dev->cm(), nullptr);
  std::array<uint8_t, 256> mad{};
  proto::Packet f = forge(pr.a, pr.b, proto::op::kUd | proto::op::kSendOnly, 0);
  f.dest_qp = 1;
  f.deth = {pcm::kGsiQkey, 1};
  f.payload = {mad.data(), mad.size()};
  inject(pr.wire.b(), f);
  pr.b.dev->progress();
  EXPECT_EQ(pr.b.dev->counters().dropped_unknown_qp, 1u);
}

}  // namespace
}  // namespace uroce::test
