// The RC QP state machine as IBA 11.2.4.2 and ibv_modify_qp(3) define it: every legal
// transition with exactly its required attributes succeeds; an illegal transition, a missing
// required attribute, an attribute the transition does not take, a bad value or a CUR_STATE
// mismatch gives EINVAL and leaves the QP unchanged. Posting rules per state, flush on ERR,
// RESET dropping queues, stale memory keys, CQ overflow and SRQ consumption.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <set>
#include <vector>

#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

constexpr uint32_t S = kAttrState;
constexpr uint32_t kResetToInit = S | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags;
constexpr uint32_t kInitToRtr =
    S | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic | kAttrMinRnrTimer;
constexpr uint32_t kRtrToRts = S | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic;

// The states a QP can be driven into by modify_qp (SQE is entered only by the engine).
constexpr QpState kReachable[] = {QpState::Reset, QpState::Init, QpState::Rtr,
                                  QpState::Rts,   QpState::Sqd,  QpState::Err};
constexpr QpState kAllStates[] = {QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts,
                                  QpState::Sqd,   QpState::Sqe,  QpState::Err};

// The legal RC transitions (from the spec, independently of engine/qp.cpp) with their
// required attribute masks.
struct Legal {
  QpState from, to;
  uint32_t required;
};
std::vector<Legal> legal_transitions() {
  std::vector<Legal> v = {
      {QpState::Reset, QpState::Init, kResetToInit}, {QpState::Init, QpState::Init, S},
      {QpState::Init, QpState::Rtr, kInitToRtr},     {QpState::Rtr, QpState::Rts, kRtrToRts},
      {QpState::Rts, QpState::Rts, S},               {QpState::Rts, QpState::Sqd, S},
      {QpState::Sqd, QpState::Sqd, S},               {QpState::Sqd, QpState::Rts, S},
  };
  for (QpState f : kReachable) {
    v.push_back({f, QpState::Err, S});
    v.push_back({f, QpState::Reset, S});
  }
  return v;
}
bool is_legal(QpState from, QpState to) {
  for (const Legal& l : legal_transitions())
    if (l.from == from && l.to == to) return true;
  return false;
}

std::string tname(QpState f, QpState t) {
  return std::string(qp_state_name(f)) + "->" + std::string(qp_state_name(t));
}

// Every attribute set to a valid value.
QpAttr good_attr(QpState to) {
  QpAttr a;
  a.qp_state = to;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = kRemoteWrite | kRemoteRead | kRemoteAtomic;
  a.path_mtu = Mtu::M1024;
  a.dest_qp_num = 0x77;
  a.rq_psn = 0x1234;
  a.sq_psn = 0x4321;
  a.max_dest_rd_atomic = 4;
  a.max_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.ah_attr.dgid = v4gid(198, 18, 0, 99);
  a.ah_attr.dmac = {0x02, 0, 0, 0, 0, 0x99};
  a.ah_attr.hop_limit = 64;
  return a;
}

// One device on its own (nothing connected): enough to drive QPs through their states.
struct Solo {
  explicit Solo(Device::Config cfg = config(), uint32_t frame_cap = 9216) : wire(64, frame_cap, 1) {
    dev = std::make_unique<Device>(wire.a(), wire.clock(), cfg);
    pd = dev->alloc_pd();
    cq = dev->create_cq(256);
  }
  static Device::Config config() {
    Device::Config c;
    c.mac = {0x02, 0, 0, 0, 0, 0x0a};
    c.gid = v4gid(198, 18, 0, 10);
    c.seed = 7;
    return c;
  }
  Qp* new_qp(QpCap cap = {}) {
    QpInitAttr ia;
    ia.pd = pd;
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.cap = cap;
    return dev->create_qp(ia);
  }
  // Drives a fresh (RESET) QP into `s` with the required attributes of each step.
  void drive(Qp* qp, QpState s) {
    auto step = [&](QpState to, uint32_t mask) {
      ASSERT_EQ(dev->modify_qp(qp, good_attr(to), mask), 0) << "to " << qp_state_name(to);
      ASSERT_EQ(qp->state(), to);
    };
    switch (s) {
      case QpState::Reset: return;
      case QpState::Err: step(QpState::Err, S); return;
      default: break;
    }
    step(QpState::Init, kResetToInit);
    if (s == QpState::Init) return;
    step(QpState::Rtr, kInitToRtr);
    if (s == QpState::Rtr) return;
    step(QpState::Rts, kRtrToRts);
    if (s == QpState::Rts) return;
    step(QpState::Sqd, S);
  }
  FakeWire wire;
  std::unique_ptr<Device> dev;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
};

// The mask that would be right for entering `to` from its usual predecessor.
uint32_t natural_mask(QpState to) {
  switch (to) {
    case QpState::Init: return kResetToInit;
    case QpState::Rtr: return kInitToRtr;
    case QpState::Rts: return kRtrToRts;
    default: return S;
  }
}

// The attributes a failed modify must not have touched.
void expect_attr_unchanged(const QpAttr& before, const Qp* qp, const std::string& what) {
  const QpAttr& a = qp->attr();
  EXPECT_EQ(a.qp_state, before.qp_state) << what;
  EXPECT_EQ(a.qp_access_flags, before.qp_access_flags) << what;
  EXPECT_EQ(a.port_num, before.port_num) << what;
  EXPECT_EQ(a.path_mtu, before.path_mtu) << what;
  EXPECT_EQ(a.dest_qp_num, before.dest_qp_num) << what;
  EXPECT_EQ(a.rq_psn, before.rq_psn) << what;
  EXPECT_EQ(a.sq_psn, before.sq_psn) << what;
  EXPECT_EQ(a.max_rd_atomic, before.max_rd_atomic) << what;
  EXPECT_EQ(a.max_dest_rd_atomic, before.max_dest_rd_atomic) << what;
  EXPECT_EQ(a.min_rnr_timer, before.min_rnr_timer) << what;
  EXPECT_EQ(a.timeout, before.timeout) << what;
  EXPECT_EQ(a.retry_cnt, before.retry_cnt) << what;
  EXPECT_EQ(a.rnr_retry, before.rnr_retry) << what;
}

// ---- Transitions ------------------------------------------------------------------------------

TEST(QpState, NewQpIsInReset) {
  Solo s;
  Qp* qp = s.new_qp();
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->state(), QpState::Reset);
}

TEST(QpState, EveryLegalTransitionWithExactlyItsRequiredAttributes) {
  for (const Legal& l : legal_transitions()) {
    SCOPED_TRACE(tname(l.from, l.to));
    Solo s;
    Qp* qp = s.new_qp();
    ASSERT_NO_FATAL_FAILURE(s.drive(qp, l.from));
    QpAttr a = good_attr(l.to);
    a.rq_psn = 0xABCDE;
    a.sq_psn = 0x54321;
    EXPECT_EQ(s.dev->modify_qp(qp, a, l.required), 0);
    EXPECT_EQ(qp->state(), l.to);
    EXPECT_EQ(qp->attr().cur_qp_state, l.to);
    if (l.to == QpState::Rtr) {
      EXPECT_EQ(qp->attr().rq_psn, 0xABCDEu);
      EXPECT_EQ(qp->expected_psn(), 0xABCDEu);
      EXPECT_EQ(qp->attr().dest_qp_num, 0x77u);
      EXPECT_EQ(qp->attr().path_mtu, Mtu::M1024);
    }
    if (l.from == QpState::Rtr && l.to == QpState::Rts) {
      EXPECT_EQ(qp->attr().sq_psn, 0x54321u);
      EXPECT_EQ(qp->next_send_psn(), 0x54321u);
    }
  }
}

TEST(QpState, OptionalAttributesAreAccepted) {
  struct Case {
    QpState from, to;
    uint32_t mask;
  };
  const Case cases[] = {
      {QpState::Init, QpState::Init, S | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags},
      {QpState::Init, QpState::Rtr, kInitToRtr | kAttrAccessFlags | kAttrPkeyIndex},
      {QpState::Rtr, QpState::Rts, kRtrToRts | kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer},
      {QpState::Rts, QpState::Rts, S | kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer},
      {QpState::Rts, QpState::Sqd, S | kAttrEnSqdAsyncNotify},
      {QpState::Sqd, QpState::Sqd, S | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic |
                                       kAttrMaxDestRdAtomic | kAttrAccessFlags | kAttrMinRnrTimer | kAttrAv},
      {QpState::Sqd, QpState::Rts, S | kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(tname(c.from, c.to));
    Solo s;
    Qp* qp = s.new_qp();
    ASSERT_NO_FATAL_FAILURE(s.drive(qp, c.from));
    QpAttr a = good_attr(c.to);
    a.cur_qp_state = c.from;
    a.qp_access_flags = kRemoteRead;
    a.min_rnr_timer = 5;
    EXPECT_EQ(s.dev->modify_qp(qp, a, c.mask), 0);
    EXPECT_EQ(qp->state(), c.to);
    if (c.mask & kAttrAccessFlags) {
      EXPECT_EQ(qp->attr().qp_access_flags, uint32_t(kRemoteRead));
    }
    if (c.mask & kAttrMinRnrTimer) {
      EXPECT_EQ(qp->attr().min_rnr_timer, 5);
    }
  }
}

TEST(QpState, EveryIllegalTransitionIsEinvalAndLeavesTheState) {
  int checked = 0;
  for (QpState from : kReachable) {
    for (QpState to : kAllStates) {
      if (is_legal(from, to)) continue;
      SCOPED_TRACE(tname(from, to));
      for (uint32_t mask : {natural_mask(to), S}) {
        Solo s;
        Qp* qp = s.new_qp();
        ASSERT_NO_FATAL_FAILURE(s.drive(qp, from));
        const QpAttr before = qp->attr();
        EXPECT_EQ(s.dev->modify_qp(qp, good_attr(to), mask), EINVAL) << "mask " << std::hex << mask;
        EXPECT_EQ(qp->state(), from);
        expect_attr_unchanged(before, qp, tname(from, to));
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 2 * 20);
}

TEST(QpState, NamedIllegalTransitions) {
  const std::pair<QpState, QpState> named[] = {
      {QpState::Reset, QpState::Rtr}, {QpState::Reset, QpState::Rts}, {QpState::Init, QpState::Rts},
      {QpState::Rtr, QpState::Init},  {QpState::Rts, QpState::Rtr},   {QpState::Err, QpState::Rts},
      {QpState::Err, QpState::Init},  {QpState::Rts, QpState::Init},  {QpState::Rtr, QpState::Sqd},
      {QpState::Init, QpState::Sqd},  {QpState::Rts, QpState::Sqe},   {QpState::Err, QpState::Rtr},
  };
  for (auto [from, to] : named) {
    SCOPED_TRACE(tname(from, to));
    Solo s;
    Qp* qp = s.new_qp();
    ASSERT_NO_FATAL_FAILURE(s.drive(qp, from));
    // Even with every attribute the target could ever take.
    const uint32_t all = kResetToInit | kInitToRtr | kRtrToRts;
    EXPECT_EQ(s.dev->modify_qp(qp, good_attr(to), natural_mask(to)), EINVAL);
    EXPECT_EQ(s.dev->modify_qp(qp, good_attr(to), all), EINVAL);
    EXPECT_EQ(qp->state(), from);
  }
}

TEST(QpState, InvalidTargetStateValue) {
  Solo s;
  Qp* qp = s.new_qp();
  QpAttr a = good_attr(QpState::Init);
  a.qp_state = QpState(7);
  EXPECT_EQ(s.dev->modify_qp(qp, a, kResetToInit), EINVAL);
  a.qp_state = QpState(0xFFFFFFFF);
  EXPECT_EQ(s.dev->modify_qp(qp, a, S), EINVAL);
  EXPECT_EQ(qp->state(), QpState::Reset);
}

TEST(QpState, MissingRequiredAttributeIsEinval) {
  int checked = 0;
  for (const Legal& l : legal_transitions()) {
    for (uint32_t bit = 1; bit; bit <<= 1) {
      // STATE names the transition itself; dropping it makes a different request.
      if (!(l.required & bit) || bit == S) continue;
      SCOPED_TRACE(tname(l.from, l.to) + " without mask bit 0x" + [&] {
        char b[16];
        std::snprintf(b, sizeof b, "%x", bit);
        return std::string(b);
      }());
      Solo s;
      Qp* qp = s.new_qp();
      ASSERT_NO_FATAL_FAILURE(s.drive(qp, l.from));
      const QpAttr before = qp->attr();
      EXPECT_EQ(s.dev->modify_qp(qp, good_attr(l.to), l.required & ~bit), EINVAL);
      EXPECT_EQ(qp->state(), l.from);
      expect_attr_unchanged(before, qp, "");
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 + 6 + 5);  // RESET->INIT, INIT->RTR, RTR->RTS
}

TEST(QpState, AttributeTheTransitionDoesNotTakeIsEinval) {
  struct Case {
    QpState from, to;
    uint32_t extra;
  };
  const Case cases[] = {
      {QpState::Reset, QpState::Init, kAttrSqPsn},       {QpState::Reset, QpState::Init, kAttrPathMtu},
      {QpState::Reset, QpState::Init, kAttrQkey},        {QpState::Reset, QpState::Init, kAttrRqPsn},
      {QpState::Reset, QpState::Init, kAttrDestQpn},     {QpState::Reset, QpState::Init, kAttrCurState},
      {QpState::Reset, QpState::Init, kAttrCap},         {QpState::Init, QpState::Init, kAttrSqPsn},
      {QpState::Init, QpState::Init, kAttrPathMtu},      {QpState::Init, QpState::Rtr, kAttrSqPsn},
      {QpState::Init, QpState::Rtr, kAttrTimeout},       {QpState::Init, QpState::Rtr, kAttrRetryCnt},
      {QpState::Init, QpState::Rtr, kAttrRnrRetry},      {QpState::Init, QpState::Rtr, kAttrMaxQpRdAtomic},
      {QpState::Init, QpState::Rtr, kAttrQkey},          {QpState::Rtr, QpState::Rts, kAttrPathMtu},
      {QpState::Rtr, QpState::Rts, kAttrDestQpn},        {QpState::Rtr, QpState::Rts, kAttrRqPsn},
      {QpState::Rtr, QpState::Rts, kAttrAv},             {QpState::Rtr, QpState::Rts, kAttrMaxDestRdAtomic},
      {QpState::Rtr, QpState::Rts, kAttrPort},           {QpState::Rts, QpState::Rts, kAttrSqPsn},
      {QpState::Rts, QpState::Rts, kAttrPathMtu},        {QpState::Rts, QpState::Rts, kAttrRqPsn},
      {QpState::Rts, QpState::Rts, kAttrDestQpn},        {QpState::Rts, QpState::Rts, kAttrTimeout},
      {QpState::Rts, QpState::Sqd, kAttrAccessFlags},    {QpState::Rts, QpState::Sqd, kAttrSqPsn},
      {QpState::Sqd, QpState::Rts, kAttrSqPsn},          {QpState::Sqd, QpState::Rts, kAttrTimeout},
      {QpState::Rts, QpState::Err, kAttrAccessFlags},    {QpState::Init, QpState::Err, kAttrSqPsn},
      {QpState::Rts, QpState::Reset, kAttrPort},         {QpState::Err, QpState::Reset, kAttrPkeyIndex},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(tname(c.from, c.to) + " with mask bit 0x" + std::to_string(c.extra));
    Solo s;
    Qp* qp = s.new_qp();
    ASSERT_NO_FATAL_FAILURE(s.drive(qp, c.from));
    const QpAttr before = qp->attr();
    QpAttr a = good_attr(c.to);
    a.cur_qp_state = c.from;
    Legal l{};
    for (const Legal& x : legal_transitions())
      if (x.from == c.from && x.to == c.to) l = x;
    ASSERT_NE(l.required, 0u);
    EXPECT_EQ(s.dev->modify_qp(qp, a, l.required | c.extra), EINVAL);
    EXPECT_EQ(qp->state(), c.from);
    expect_attr_unchanged(before, qp, "");
    // And without the extra bit it is fine.
    EXPECT_EQ(s.dev->modify_qp(qp, a, l.required), 0);
    EXPECT_EQ(qp->state(), c.to);
  }
}

TEST(QpState, BadValuesAreEinval) {
  struct Case {
    const char* what;
    QpState from, to;
    uint32_t mask;
    void (*set)(QpAttr&);
  };
  const Case cases[] = {
      {"port 2", QpState::Reset, QpState::Init, kResetToInit, [](QpAttr& a) { a.port_num = 2; }},
      {"port 0", QpState::Reset, QpState::Init, kResetToInit, [](QpAttr& a) { a.port_num = 0; }},
      {"pkey index 1", QpState::Reset, QpState::Init, kResetToInit, [](QpAttr& a) { a.pkey_index = 1; }},
      {"port 2 on INIT->INIT", QpState::Init, QpState::Init, S | kAttrPort, [](QpAttr& a) { a.port_num = 2; }},
      {"path MTU 0", QpState::Init, QpState::Rtr, kInitToRtr, [](QpAttr& a) { a.path_mtu = Mtu(0); }},
      {"path MTU 6", QpState::Init, QpState::Rtr, kInitToRtr, [](QpAttr& a) { a.path_mtu = Mtu(6); }},
      {"max_dest_rd_atomic 129", QpState::Init, QpState::Rtr, kInitToRtr,
       [](QpAttr& a) { a.max_dest_rd_atomic = 129; }},
      {"min_rnr_timer 32", QpState::Init, QpState::Rtr, kInitToRtr, [](QpAttr& a) { a.min_rnr_timer = 32; }},
      {"dest QPN 2^24", QpState::Init, QpState::Rtr, kInitToRtr, [](QpAttr& a) { a.dest_qp_num = 1u << 24; }},
      {"retry_cnt 8", QpState::Rtr, QpState::Rts, kRtrToRts, [](QpAttr& a) { a.retry_cnt = 8; }},
      {"rnr_retry 8", QpState::Rtr, QpState::Rts, kRtrToRts, [](QpAttr& a) { a.rnr_retry = 8; }},
      {"timeout 32", QpState::Rtr, QpState::Rts, kRtrToRts, [](QpAttr& a) { a.timeout = 32; }},
      {"max_rd_atomic 129", QpState::Rtr, QpState::Rts, kRtrToRts, [](QpAttr& a) { a.max_rd_atomic = 129; }},
      {"min_rnr_timer 32 on RTS->RTS", QpState::Rts, QpState::Rts, S | kAttrMinRnrTimer,
       [](QpAttr& a) { a.min_rnr_timer = 32; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Solo s;  // max_rd_atomic limit 128 (the default config, as rxe)
    ASSERT_EQ(s.dev->config().max_rd_atomic, 128u);
    Qp* qp = s.new_qp();
    ASSERT_NO_FATAL_FAILURE(s.drive(qp, c.from));
    const QpAttr before = qp->attr();
    const uint32_t epsn = qp->expected_psn(), spsn = qp->next_send_psn();
    QpAttr a = good_attr(c.to);
    a.qp_access_flags = kRemoteRead;  // would show if the failed call applied anything
    a.rq_psn = 0x777;
    a.sq_psn = 0x888;
    c.set(a);
    EXPECT_EQ(s.dev->modify_qp(qp, a, c.mask), EINVAL);
    EXPECT_EQ(qp->state(), c.from);
    expect_attr_unchanged(before, qp, c.what);
    EXPECT_EQ(qp->expected_psn(), epsn);
    EXPECT_EQ(qp->next_send_psn(), spsn);
  }
}

TEST(QpState, RdAtomicLimitIsTheDevicesLimit) {
  Device::Config cfg = Solo::config();
  cfg.max_rd_atomic = 4;
  Solo s(cfg);
  Qp* qp = s.new_qp();
  ASSERT_NO_FATAL_FAILURE(s.drive(qp, QpState::Init));
  QpAttr a = good_attr(QpState::Rtr);
  a.max_dest_rd_atomic = 5;
  EXPECT_EQ(s.dev->modify_qp(qp, a, kInitToRtr), EINVAL);
  EXPECT_EQ(qp->state(), QpState::Init);
  a.max_dest_rd_atomic = 4;
  ASSERT_EQ(s.dev->modify_qp(qp, a, kInitToRtr), 0);
  a = good_attr(QpState::Rts);
  a.max_rd_atomic = 5;
  EXPECT_EQ(s.dev->modify_qp(qp, a, kRtrToRts), EINVAL);
  EXPECT_EQ(qp->state(), QpState::Rtr);
  a.max_rd_atomic = 4;
  EXPECT_EQ(s.dev->modify_qp(qp, a, kRtrToRts), 0);
  EXPECT_EQ(qp->state(), QpState::Rts);
}

TEST(QpState, PathMtuAboveTheLinkIsEinval) {
  Solo s(Solo::config(), 1514);  // a 1500-byte MTU Ethernet link carries IB MTU 1024 at most
  ASSERT_EQ(s.dev->mtu_limit(), 1024u);
  Qp* qp = s.new_qp();
  ASSERT_NO_FATAL_FAILURE(s.drive(qp, QpState::Init));
  QpAttr a = good_attr(QpState::Rtr);
  a.path_mtu = Mtu::M2048;
  EXPECT_EQ(s.dev->modify_qp(qp, a, kInitToRtr), EINVAL);
  EXPECT_EQ(qp->state(), QpState::Init);
  a.path_mtu = Mtu::M1024;
  EXPECT_EQ(s.dev->modify_qp(qp, a, kInitToRtr), 0);
}

TEST(QpState, CurStateMismatchIsEinval) {
  {
    Solo s;
    Qp* qp = s.new_qp();
    ASSERT_NO_FATAL_FAILURE(s.drive(qp, QpState::Rtr));
    QpAttr a = good_attr(QpState::Rts);
    a.cur_qp_state = QpState::Init;
    EXPECT_EQ(s.dev->modify_qp(qp, a, kRtrToRts | kAttrCurState), EINVAL);
    EXPECT_EQ(qp->state(), QpState::Rtr);
    a.cur_qp_state = QpState::Rtr;
    EXPECT_EQ(s.dev->modify_qp(qp, a, kRtrToRts | kAttrCurState), 0);
    EXPECT_EQ(qp->state(), QpState::Rts);
    // RTS->RTS and SQD->RTS with a wrong current state.
    a.cur_qp_state = QpState::Sqd;
    EXPECT_EQ(s.dev->modify_qp(qp, a, S | kAttrCurState), EINVAL);
    EXPECT_EQ(qp->state(), QpState::Rts);
    a.qp_state = QpState::Sqd;
    ASSERT_EQ(s.dev->modify_qp(qp, a, S), 0);
    a.qp_state = QpState::Rts;
    a.cur_qp_state = QpState::Rts;
    EXPECT_EQ(s.dev->modify_qp(qp, a, S | kAttrCurState), EINVAL);
    EXPECT_EQ(qp->state(), QpState::Sqd);
    a.cur_qp_state = QpState::Sqd;
    EXPECT_EQ(s.dev->modify_qp(qp, a, S | kAttrCurState), 0);
    EXPECT_EQ(qp->state(), QpState::Rts);
  }
  {
    // Even into ERR: a caller that believes the QP is elsewhere is refused.
    Solo s;
    Qp* qp = s.new_qp();
    ASSERT_NO_FATAL_FAILURE(s.drive(qp, QpState::Rts));
    QpAttr a = good_attr(QpState::Err);
    a.cur_qp_state = QpState::Sqd;
    EXPECT_EQ(s.dev->modify_qp(qp, a, S | kAttrCurState), EINVAL);
    EXPECT_EQ(qp->state(), QpState::Rts);
  }
}

TEST(QpState, ResetAndErrFromEveryStateThenUpAgain) {
  for (QpState from : kReachable) {
    SCOPED_TRACE(qp_state_name(from));
    Solo s;
    Qp* qp = s.new_qp();
    ASSERT_NO_FATAL_FAILURE(s.drive(qp, from));
    ASSERT_EQ(s.dev->modify_qp(qp, good_attr(QpState::Err), S), 0);
    EXPECT_EQ(qp->state(), QpState::Err);
    ASSERT_EQ(s.dev->modify_qp(qp, good_attr(QpState::Reset), S), 0);
    EXPECT_EQ(qp->state(), QpState::Reset);
    // A reset QP goes through the whole sequence again.
    ASSERT_NO_FATAL_FAILURE(s.drive(qp, QpState::Rts));
  }
}

// ---- Posting ----------------------------------------------------------------------------------

struct Buf {
  std::vector<uint8_t> mem;
  Mr* mr = nullptr;
  Buf(Device& dev, Pd* pd, size_t n) : mem(n, 0) { mr = dev.reg_mr(pd, mem.data(), n, kLocalWrite); }
  Sge sge(uint32_t off, uint32_t len) const { return {reinterpret_cast<uintptr_t>(mem.data()) + off, len, mr->lkey}; }
};

SendWr write_wr(uint64_t id, const Sge* sg, uint32_t nsge, uint32_t flags = kSendSignaled) {
  SendWr w;
  w.wr_id = id;
  w.opcode = WrOpcode::RdmaWrite;
  w.send_flags = flags;
  w.sg_list = sg;
  w.num_sge = nsge;
  w.remote_addr = 0x10000;
  w.rkey = 0x1234;
  return w;
}

TEST(Posting, SendBeforeRtsIsEinval) {
  for (QpState st : {QpState::Reset, QpState::Init, QpState::Rtr}) {
    SCOPED_TRACE(qp_state_name(st));
    Solo s;
    Buf b(*s.dev, s.pd, 64);
    Qp* qp = s.new_qp();
    ASSERT_NO_FATAL_FAILURE(s.drive(qp, st));
    Sge sg = b.sge(0, 8);
    SendWr w = write_wr(1, &sg, 1);
    EXPECT_EQ(s.dev->post_send(qp, w), EINVAL);
    w.opcode = WrOpcode::Send;
    EXPECT_EQ(s.dev->post_send(qp, w), EINVAL);
    EXPECT_EQ(qp->sq_outstanding(), 0u);
    EXPECT_EQ(qp->state(), st);
  }
  // RTS and SQD take send WRs (SQD queues them).
  for (QpState st : {QpState::Rts, QpState::Sqd}) {
    Solo s;
    Buf b(*s.dev, s.pd, 64);
    Qp* qp = s.new_qp();
    ASSERT_NO_FATAL_FAILURE(s.drive(qp, st));
    Sge sg = b.sge(0, 8);
    EXPECT_EQ(s.dev->post_send(qp, write_wr(1, &sg, 1)), 0) << qp_state_name(st);
    EXPECT_EQ(qp->sq_outstanding(), 1u);
  }
}

TEST(Posting, RecvInResetIsEinvalButWorksFromInit) {
  Solo s;
  Buf b(*s.dev, s.pd, 64);
  Qp* qp = s.new_qp();
  Sge sg = b.sge(0, 64);
  RecvWr r{7, &sg, 1};
  EXPECT_EQ(s.dev->post_recv(qp, r), EINVAL);
  EXPECT_EQ(qp->rq_outstanding(), 0u);
  ASSERT_NO_FATAL_FAILURE(s.drive(qp, QpState::Init));
  EXPECT_EQ(s.dev->post_recv(qp, r), 0);
  EXPECT_EQ(qp->rq_outstanding(), 1u);
  ASSERT_EQ(s.dev->modify_qp(qp, good_attr(QpState::Rtr), kInitToRtr), 0);
  EXPECT_EQ(s.dev->post_recv(qp, r), 0);
  ASSERT_EQ(s.dev->modify_qp(qp, good_attr(QpState::Rts), kRtrToRts), 0);
  EXPECT_EQ(s.dev->post_recv(qp, r), 0);
  EXPECT_EQ(qp->rq_outstanding(), 3u);
}

TEST(Posting, FullQueuesAreEnomem) {
  Solo s;
  Buf b(*s.dev, s.pd, 64);
  QpCap cap;
  cap.max_send_wr = 4;
  cap.max_recv_wr = 3;
  Qp* qp = s.new_qp(cap);
  ASSERT_NO_FATAL_FAILURE(s.drive(qp, QpState::Rts));
  Sge sg = b.sge(0, 8);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(s.dev->post_send(qp, write_wr(i, &sg, 1)), 0);
  EXPECT_EQ(s.dev->post_send(qp, write_wr(4, &sg, 1)), ENOMEM);
  EXPECT_EQ(qp->sq_outstanding(), 4u);
  RecvWr r{1, &sg, 1};
  for (int i = 0; i < 3; ++i) ASSERT_EQ(s.dev->post_recv(qp, r), 0);
  EXPECT_EQ(s.dev->post_recv(qp, r), ENOMEM);
  EXPECT_EQ(qp->rq_outstanding(), 3u);
  EXPECT_EQ(qp->state(), QpState::Rts);
}

TEST(Posting, TooManySgesIsEinval) {
  Solo s;
  Buf b(*s.dev, s.pd, 64);
  QpCap cap;
  cap.max_send_sge = 2;
  cap.max_recv_sge = 2;
  Qp* qp = s.new_qp(cap);
  ASSERT_NO_FATAL_FAILURE(s.drive(qp, QpState::Rts));
  Sge sg[3] = {b.sge(0, 8), b.sge(8, 8), b.sge(16, 8)};
  EXPECT_EQ(s.dev->post_send(qp, write_wr(1, sg, 3)), EINVAL);
  EXPECT_EQ(s.dev->post_send(qp, write_wr(2, sg, 2)), 0);
  RecvWr r{1, sg, 3};
  EXPECT_EQ(s.dev->post_recv(qp, r), EINVAL);
  r.num_sge = 2;
  EXPECT_EQ(s.dev->post_recv(qp, r), 0);
  EXPECT_EQ(qp->sq_outstanding(), 1u);
  EXPECT_EQ(qp->rq_outstanding(), 1u);
}

// Each WQE holds as many SGEs as the QP's max_send_sge (issue 30: memory follows the caps). Only
// inline data may come in more pieces (it is copied whole); a READ or an atomic flagged inline is
// not inline, so its SGEs count against max_send_sge like any other.
TEST(Posting, OnlyInlineDataMayComeInMoreSgesThanMaxSendSge) {
  Solo s;
  Buf b(*s.dev, s.pd, 256);
  QpCap cap;
  cap.max_send_sge = 1;
  cap.max_inline_data = 64;
  Qp* qp = s.new_qp(cap);
  ASSERT_NO_FATAL_FAILURE(s.drive(qp, QpState::Rts));
  Sge sg[3] = {b.sge(0, 8), b.sge(8, 8), b.sge(16, 8)};
  SendWr rd = write_wr(1, sg, 3, kSendSignaled | kSendInline);
  rd.opcode = WrOpcode::RdmaRead;
  EXPECT_EQ(s.dev->post_send(qp, rd), EINVAL);
  SendWr fa = write_wr(2, sg, 2, kSendSignaled | kSendInline);
  fa.opcode = WrOpcode::AtomicFetchAdd;
  EXPECT_EQ(s.dev->post_send(qp, fa), EINVAL);
  EXPECT_EQ(s.dev->post_send(qp, write_wr(3, sg, 2)), EINVAL);
  EXPECT_EQ(s.dev->post_send(qp, write_wr(4, sg, 3, kSendSignaled | kSendInline)), 0);  // 24 bytes, copied
  EXPECT_EQ(qp->sq_outstanding(), 1u);
}

TEST(Posting, InlineOverMaxInlineDataIsEinval) {
  Solo s;
  std::vector<uint8_t> data(128, 0x42);  // inline data need not be registered
  QpCap cap;
  cap.max_inline_data = 64;
  Qp* qp = s.new_qp(cap);
  ASSERT_NO_FATAL_FAILURE(s.drive(qp, QpState::Rts));
  const uint64_t p = reinterpret_cast<uintptr_t>(data.data());
  Sge one{p, 65, 0};
  EXPECT_EQ(s.dev->post_send(qp, write_wr(1, &one, 1, kSendSignaled | kSendInline)), EINVAL);
  Sge two[2] = {{p, 33, 0}, {p + 33, 32, 0}};
  EXPECT_EQ(s.dev->post_send(qp, write_wr(2, two, 2, kSendSignaled | kSendInline)), EINVAL);
  one.length = 64;
  EXPECT_EQ(s.dev->post_send(qp, write_wr(3, &one, 1, kSendSignaled | kSendInline)), 0);
  EXPECT_EQ(qp->sq_outstanding(), 1u);
}

// An opcode the engine does not know, and the local operations (BIND_MW, LOCAL_INV) with a
// buffer, which they never take.
TEST(Posting, UnsupportedOpcodeIsEinval) {
  Solo s;
  Buf b(*s.dev, s.pd, 64);
  Qp* qp = s.new_qp();
  ASSERT_NO_FATAL_FAILURE(s.drive(qp, QpState::Rts));
  Sge sg = b.sge(0, 8);
  SendWr w = write_wr(1, &sg, 1);
  for (WrOpcode o : {WrOpcode::LocalInv, WrOpcode::BindMw, WrOpcode(42)}) {
    w.opcode = o;
    EXPECT_EQ(s.dev->post_send(qp, w), EINVAL);
  }
  EXPECT_EQ(qp->sq_outstanding(), 0u);
}

// ---- Flush on ERR, RESET, SQD with a connected pair --------------------------------------------

std::vector<Wc> drain(Cq* cq) {
  std::vector<Wc> v;
  Wc wc;
  while (cq->poll(&wc, 1) == 1) v.push_back(wc);
  return v;
}

TEST(Flush, ErrFlushesEverySendAndRecvInPostingOrder) {
  Pair pr;
  Endpoint& a = pr.a;
  struct Post {
    WrOpcode op;
    bool signaled;
    WcOpcode wc;
  };
  const Post posts[] = {
      {WrOpcode::Send, true, WcOpcode::Send},          {WrOpcode::RdmaWrite, false, WcOpcode::RdmaWrite},
      {WrOpcode::RdmaRead, true, WcOpcode::RdmaRead},  {WrOpcode::SendWithImm, false, WcOpcode::Send},
      {WrOpcode::AtomicFetchAdd, true, WcOpcode::FetchAdd},
      {WrOpcode::AtomicCmpSwp, false, WcOpcode::CompSwap},
      {WrOpcode::RdmaWriteWithImm, true, WcOpcode::RdmaWrite},
      {WrOpcode::SendWithInv, false, WcOpcode::Send},
  };
  Sge sg{a.addr(), 8, a.mr->lkey};
  uint64_t id = 100;
  for (const Post& p : posts) {
    SendWr w;
    w.wr_id = id++;
    w.opcode = p.op;
    w.send_flags = p.signaled ? uint32_t(kSendSignaled) : 0u;
    w.sg_list = &sg;
    w.num_sge = 1;
    w.remote_addr = pr.b.addr();
    w.rkey = pr.b.mr->rkey;
    ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
  }
  for (uint64_t i = 0; i < 5; ++i) {
    Sge rs{a.addr() + 64 * i, 64, a.mr->lkey};
    ASSERT_EQ(a.dev->post_recv(a.qp, RecvWr{900 + i, &rs, 1}), 0);
  }
  // A RECV with no SGE is flushed too.
  ASSERT_EQ(a.dev->post_recv(a.qp, RecvWr{905, nullptr, 0}), 0);
  ASSERT_EQ(a.qp->sq_outstanding(), 8u);
  ASSERT_EQ(a.qp->rq_outstanding(), 6u);

  ASSERT_EQ(a.dev->modify_qp(a.qp, good_attr(QpState::Err), S), 0);
  EXPECT_EQ(a.qp->state(), QpState::Err);
  EXPECT_EQ(a.qp->sq_outstanding(), 0u);
  EXPECT_EQ(a.qp->rq_outstanding(), 0u);

  std::vector<Wc> s = drain(a.scq);
  ASSERT_EQ(s.size(), std::size(posts)) << "unsignaled WRs must be flushed too";
  for (size_t i = 0; i < s.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(s[i].wr_id, 100 + i);
    EXPECT_EQ(s[i].status, WcStatus::WrFlushErr) << wc_status_name(s[i].status);
    EXPECT_EQ(s[i].opcode, posts[i].wc);
    EXPECT_EQ(s[i].qp_num, a.qp->qpn());
  }
  std::vector<Wc> r = drain(a.rcq);
  ASSERT_EQ(r.size(), 6u);
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].wr_id, 900 + i);
    EXPECT_EQ(r[i].status, WcStatus::WrFlushErr);
    EXPECT_EQ(r[i].opcode, WcOpcode::Recv);
    EXPECT_EQ(r[i].qp_num, a.qp->qpn());
  }

  // Posted while in ERR: completes flushed at once, without progress().
  SendWr w;
  w.wr_id = 777;
  w.opcode = WrOpcode::RdmaWrite;
  w.sg_list = &sg;
  w.num_sge = 1;  // unsignaled
  w.remote_addr = pr.b.addr();
  w.rkey = pr.b.mr->rkey;
  ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
  s = drain(a.scq);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].wr_id, 777u);
  EXPECT_EQ(s[0].status, WcStatus::WrFlushErr);
  EXPECT_EQ(s[0].opcode, WcOpcode::RdmaWrite);
  Sge rs{a.addr(), 64, a.mr->lkey};
  ASSERT_EQ(a.dev->post_recv(a.qp, RecvWr{778, &rs, 1}), 0);
  r = drain(a.rcq);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 778u);
  EXPECT_EQ(r[0].status, WcStatus::WrFlushErr);
  EXPECT_EQ(r[0].opcode, WcOpcode::Recv);

  // Nothing went out and nothing more appears.
  pr.run_until([] { return false; }, 1'000'000);
  EXPECT_TRUE(drain(a.scq).empty());
  EXPECT_TRUE(drain(a.rcq).empty());
  EXPECT_TRUE(drain(pr.b.rcq).empty());
  EXPECT_EQ(a.dev->counters().sent_pkts, 0u);
}

TEST(Flush, InFlightWqesAreFlushedToo) {
  // Some WQEs have gone out (and may even have been acknowledged), others not: ERR flushes the
  // rest, in order, after the ones already completed.
  PairOptions o;
  o.mtu = Mtu::M256;
  Pair pr(o);
  Endpoint& a = pr.a;
  Sge sg{a.addr(), 4096, a.mr->lkey};
  for (uint64_t i = 0; i < 6; ++i) {
    SendWr w = write_wr(i, &sg, 1);
    w.remote_addr = pr.b.addr() + 4096 * i;
    w.rkey = pr.b.mr->rkey;
    ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
  }
  a.dev->progress();  // some request packets out, nothing acknowledged
  ASSERT_GT(a.dev->counters().sent_pkts, 0u);
  ASSERT_EQ(a.dev->modify_qp(a.qp, good_attr(QpState::Err), S), 0);
  std::vector<Wc> s = drain(a.scq);
  ASSERT_EQ(s.size(), 6u);
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i].wr_id, i);
    EXPECT_EQ(s[i].status, WcStatus::WrFlushErr);
  }
  // ACKs for the packets that were out reach a QP in ERR: nothing more completes.
  pr.run_until([] { return false; }, 2'000'000);
  EXPECT_TRUE(drain(a.scq).empty());
  EXPECT_EQ(a.qp->state(), QpState::Err);
}

TEST(Flush, ResetDropsQueuesWithoutCompletionsAndTheQpComesBack) {
  Pair pr;
  Endpoint& a = pr.a;
  Endpoint& b = pr.b;
  // Some traffic first, so the PSNs have moved.
  Sge rs{b.addr(), 256, b.mr->lkey};
  ASSERT_EQ(b.dev->post_recv(b.qp, RecvWr{1, &rs, 1}), 0);
  Sge sg{a.addr(), 100, a.mr->lkey};
  SendWr send = signaled_wr(10, &sg);
  ASSERT_EQ(a.dev->post_send(a.qp, send), 0);
  Wc wc;
  ASSERT_TRUE(pr.next_wc(a.scq, wc));
  ASSERT_EQ(wc.status, WcStatus::Success);
  ASSERT_TRUE(pr.next_wc(b.rcq, wc));
  ASSERT_EQ(wc.status, WcStatus::Success);

  // Queue work on A without running the engines, then reset it.
  for (uint64_t i = 0; i < 4; ++i) {
    SendWr w = write_wr(20 + i, &sg, 1, i % 2 ? 0u : uint32_t(kSendSignaled));
    w.remote_addr = b.addr();
    w.rkey = b.mr->rkey;
    ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
    Sge r{a.addr(), 64, a.mr->lkey};
    ASSERT_EQ(a.dev->post_recv(a.qp, RecvWr{30 + i, &r, 1}), 0);
  }
  ASSERT_EQ(a.dev->modify_qp(a.qp, good_attr(QpState::Reset), S), 0);
  EXPECT_EQ(a.qp->state(), QpState::Reset);
  EXPECT_EQ(a.qp->sq_outstanding(), 0u);
  EXPECT_EQ(a.qp->rq_outstanding(), 0u);
  EXPECT_TRUE(drain(a.scq).empty()) << "RESET must not generate completions";
  EXPECT_TRUE(drain(a.rcq).empty());
  // In RESET, nothing can be posted.
  EXPECT_EQ(a.dev->post_send(a.qp, send), EINVAL);
  EXPECT_EQ(a.dev->post_recv(a.qp, RecvWr{1, &rs, 1}), EINVAL);
  pr.run_until([] { return false; }, 1'000'000);
  EXPECT_TRUE(drain(b.rcq).empty());

  // Up again, joined to B where B's PSNs stand now.
  pr.connect(a, b, b.qp->expected_psn(), b.qp->next_send_psn());
  ASSERT_EQ(a.qp->state(), QpState::Rts);
  fill_pattern(a.buf(), 4096, 5);
  ASSERT_EQ(b.dev->post_recv(b.qp, RecvWr{2, &rs, 1}), 0);
  send.wr_id = 11;
  sg.length = 200;
  ASSERT_EQ(a.dev->post_send(a.qp, send), 0);
  SendWr w = write_wr(12, &sg, 1);
  sg.length = 200;
  w.sg_list = &sg;
  w.remote_addr = b.addr() + 1024;
  w.rkey = b.mr->rkey;
  ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(a.scq, wc, 11u, WcStatus::Success));
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(a.scq, wc, 12u, WcStatus::Success));
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(b.rcq, wc, 2u, WcStatus::Success));
  EXPECT_EQ(wc.byte_len, 200u);
  EXPECT_EQ(std::memcmp(b.buf(), a.buf(), 200), 0);
  EXPECT_EQ(std::memcmp(b.buf() + 1024, a.buf(), 200), 0);
  // And B can still reach A.
  Sge ar{a.addr() + 8192, 64, a.mr->lkey};
  ASSERT_EQ(a.dev->post_recv(a.qp, RecvWr{3, &ar, 1}), 0);
  Sge bs{b.addr(), 50, b.mr->lkey};
  send.wr_id = 13;
  send.sg_list = &bs;
  ASSERT_EQ(b.dev->post_send(b.qp, send), 0);
  ASSERT_TRUE(pr.next_wc(a.rcq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(wc.byte_len, 50u);
  EXPECT_EQ(a.qp->state(), QpState::Rts);
  EXPECT_EQ(b.qp->state(), QpState::Rts);
}

TEST(Flush, ErrThenResetThenUpCarriesTraffic) {
  Pair pr;
  Endpoint& a = pr.a;
  Endpoint& b = pr.b;
  ASSERT_EQ(a.dev->modify_qp(a.qp, good_attr(QpState::Err), S), 0);
  ASSERT_EQ(a.dev->modify_qp(a.qp, good_attr(QpState::Reset), S), 0);
  pr.connect(a, b, b.qp->expected_psn(), b.qp->next_send_psn());
  fill_pattern(a.buf(), 3000, 9);
  Sge sg{a.addr(), 3000, a.mr->lkey};
  SendWr w = write_wr(1, &sg, 1);
  w.remote_addr = b.addr();
  w.rkey = b.mr->rkey;
  ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
  Wc wc;
  ASSERT_TRUE(pr.next_wc(a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(std::memcmp(b.buf(), a.buf(), 3000), 0);
}

TEST(Sqd, SendsPostedInSqdWaitForRts) {
  Pair pr;
  Endpoint& a = pr.a;
  ASSERT_EQ(a.dev->modify_qp(a.qp, good_attr(QpState::Sqd), S), 0);
  fill_pattern(a.buf(), 64, 3);
  std::memset(pr.b.buf(), 0, 64);
  Sge sg{a.addr(), 64, a.mr->lkey};
  SendWr w = write_wr(5, &sg, 1);
  w.remote_addr = pr.b.addr();
  w.rkey = pr.b.mr->rkey;
  ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
  pr.run_until([] { return false; }, 1'000'000);
  EXPECT_EQ(a.dev->counters().sent_pkts, 0u) << "SQD must not start new WQEs";
  EXPECT_EQ(a.scq->size(), 0u);
  QpAttr at = good_attr(QpState::Rts);
  at.cur_qp_state = QpState::Sqd;
  ASSERT_EQ(a.dev->modify_qp(a.qp, at, S | kAttrCurState), 0);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(a.scq, wc, 5u, WcStatus::Success));
  EXPECT_EQ(std::memcmp(pr.b.buf(), a.buf(), 64), 0);
}

// ---- Stale keys ---------------------------------------------------------------------------------

TEST(Keys, ReRegistrationNeverRepeatsARecentKey) {
  Device::Config cfg = Solo::config();
  cfg.max_mr = 2;
  Solo s(cfg);
  std::vector<uint8_t> m(256);
  Mr* mr = s.dev->reg_mr(s.pd, m.data(), m.size(), kLocalWrite | kRemoteWrite);
  ASSERT_NE(mr, nullptr);
  std::set<uint32_t> seen{mr->lkey, mr->rkey};
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(s.dev->dereg_mr(mr), 0);
    mr = s.dev->reg_mr(s.pd, m.data(), m.size(), kLocalWrite | kRemoteWrite);
    ASSERT_NE(mr, nullptr);
    EXPECT_NE(mr->rkey, 0u);
    EXPECT_NE(mr->lkey, mr->rkey) << "an lkey never opens remote access";
    EXPECT_TRUE(seen.insert(mr->rkey).second) << "rkey 0x" << std::hex << mr->rkey << " came back";
    EXPECT_TRUE(seen.insert(mr->lkey).second) << "lkey 0x" << std::hex << mr->lkey << " came back";
  }
  // Deregistering twice, or with the stale key, fails.
  Mr copy = *mr;
  ASSERT_EQ(s.dev->dereg_mr(mr), 0);
  EXPECT_EQ(s.dev->dereg_mr(&copy), EINVAL);
}

// Keys are unpredictable in every bit but the one that tells an MR's (bit 31 clear) from a
// memory window's (set): over many registrations every other bit position takes both values.
TEST(Keys, EveryBitOfAKeyVaries) {
  Device::Config cfg = Solo::config();
  Solo s(cfg);
  std::vector<uint8_t> m(256);
  uint32_t ones = 0, zeros = 0;
  for (int i = 0; i < 64; ++i) {
    Mr* mr = s.dev->reg_mr(s.pd, m.data(), m.size(), kLocalWrite | kRemoteWrite);
    ASSERT_NE(mr, nullptr);
    ones |= mr->rkey;
    zeros |= ~mr->rkey;
  }
  EXPECT_EQ(ones, 0x7FFFFFFFu);
  EXPECT_EQ(zeros, 0xFFFFFFFFu);
  ones = zeros = 0;
  for (int i = 0; i < 64; ++i) {
    Mw* mw = s.dev->alloc_mw(s.pd, 2);
    ASSERT_NE(mw, nullptr);
    ones |= mw->rkey;
    zeros |= ~mw->rkey;
  }
  EXPECT_EQ(ones, 0xFFFFFFFFu);
  EXPECT_EQ(zeros, 0x7FFFFFFFu);
}

TEST(Keys, WriteWithAStaleRkeyIsARemoteAccessError) {
  PairOptions o;
  o.mem = 1 << 16;
  Pair pr(o);
  Endpoint& a = pr.a;
  Endpoint& b = pr.b;
  const uint32_t old_rkey = b.mr->rkey;
  ASSERT_EQ(b.dev->dereg_mr(b.mr), 0);
  // Register the same buffer again: a new key.
  Mr* again = b.dev->reg_mr(b.pd, b.buf(), b.buf_len(), o.access);
  ASSERT_NE(again, nullptr);
  b.mr = again;
  EXPECT_NE(again->rkey, old_rkey);

  fill_pattern(a.buf(), 256, 1);
  std::memset(b.buf(), 0x5A, b.buf_len());
  Sge sg{a.addr(), 128, a.mr->lkey};
  // The new key works.
  SendWr w = write_wr(1, &sg, 1);
  w.remote_addr = b.addr();
  w.rkey = again->rkey;
  ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
  Wc wc;
  ASSERT_TRUE(pr.next_wc(a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(std::memcmp(b.buf(), a.buf(), 128), 0);
  // The old one does not, and writes nothing.
  fill_pattern(a.buf(), 256, 2);
  w.wr_id = 2;
  w.remote_addr = b.addr() + 1024;
  w.rkey = old_rkey;
  ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(a.scq, wc, 2u, WcStatus::RemAccessErr));
  EXPECT_EQ(a.qp->state(), QpState::Err);
  pr.run_until([&] { return b.qp->state() == QpState::Err; }, 1'000'000);
  EXPECT_EQ(b.qp->state(), QpState::Err);
  for (size_t i = 1024; i < 1024 + 128; ++i) ASSERT_EQ(b.buf()[i], 0x5A) << i;
  EXPECT_TRUE(canaries_intact(b));
}

// ---- CQ overflow ------------------------------------------------------------------------------

TEST(Cq, OverflowIsMarkedAndCorruptsNothing) {
  PairOptions o;
  o.cq_depth = 4;
  o.mem = 1 << 16;
  Pair pr(o);
  Endpoint& a = pr.a;
  ASSERT_EQ(a.scq->depth(), 4u);
  fill_pattern(a.buf(), 1000, 4);
  Sge sg{a.addr(), 100, a.mr->lkey};
  for (uint64_t i = 0; i < 10; ++i) {
    SendWr w = write_wr(i, &sg, 1);
    w.remote_addr = pr.b.addr() + 100 * i;
    w.rkey = pr.b.mr->rkey;
    ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
  }
  ASSERT_TRUE(pr.run_until([&] { return a.qp->sq_outstanding() == 0; }));
  pr.run_until([] { return false; }, 1'000'000);
  EXPECT_TRUE(a.scq->overflowed());
  EXPECT_EQ(a.scq->size(), 4u);
  EXPECT_EQ(a.scq->completions_pushed(), 4u);
  Wc wc[16];
  ASSERT_EQ(a.dev->poll_cq(a.scq, 16, wc), 4);
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(wc[i].wr_id, i);
    EXPECT_EQ(wc[i].status, WcStatus::Success);
    EXPECT_EQ(wc[i].opcode, WcOpcode::RdmaWrite);
    EXPECT_EQ(wc[i].qp_num, a.qp->qpn());
  }
  EXPECT_EQ(a.dev->poll_cq(a.scq, 16, wc), 0);
  // The other CQs are untouched, and every WRITE landed.
  EXPECT_FALSE(a.rcq->overflowed());
  EXPECT_EQ(a.rcq->size(), 0u);
  EXPECT_FALSE(pr.b.scq->overflowed());
  EXPECT_FALSE(pr.b.rcq->overflowed());
  EXPECT_EQ(pr.b.scq->size(), 0u);
  EXPECT_EQ(pr.b.rcq->size(), 0u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(std::memcmp(pr.b.buf() + 100 * i, a.buf(), 100), 0) << i;
  EXPECT_TRUE(canaries_intact(pr.a) && canaries_intact(pr.b));
  // Once polled, the CQ has room again (the overflow mark stays).
  SendWr w = write_wr(50, &sg, 1);
  w.remote_addr = pr.b.addr();
  w.rkey = pr.b.mr->rkey;
  ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
  Wc one;
  ASSERT_TRUE(pr.next_wc(a.scq, one));
  EXPECT_EQ(one.wr_id, 50u);
  EXPECT_EQ(one.status, WcStatus::Success);
  EXPECT_TRUE(a.scq->overflowed());
}

// ---- SRQ --------------------------------------------------------------------------------------

TEST(Srq, QpWithSrqConsumesItsReceives) {
  Pair pr;
  Endpoint& a = pr.a;
  Endpoint& b = pr.b;
  Srq* srq = b.dev->create_srq(b.pd, 8, 2);
  ASSERT_NE(srq, nullptr);
  QpInitAttr ia;
  ia.pd = b.pd;
  ia.send_cq = b.scq;
  ia.recv_cq = b.rcq;
  ia.srq = srq;
  ia.cap.max_recv_wr = 0;
  Qp* bq = b.dev->create_qp(ia);
  ASSERT_NE(bq, nullptr);
  QpInitAttr ib;
  ib.pd = a.pd;
  ib.send_cq = a.scq;
  ib.recv_cq = a.rcq;
  Qp* aq = a.dev->create_qp(ib);
  ASSERT_NE(aq, nullptr);
  a.qp = aq;
  b.qp = bq;
  pr.connect(a, b, 0x500, 0x600);
  pr.connect(b, a, 0x600, 0x500);
  ASSERT_EQ(bq->state(), QpState::Rts);

  // A QP on an SRQ takes no receives of its own.
  Sge rs0{b.addr(), 64, b.mr->lkey};
  EXPECT_EQ(b.dev->post_recv(bq, RecvWr{1, &rs0, 1}), EINVAL);
  // Each receive in two pieces.
  for (uint64_t i = 0; i < 4; ++i) {
    Sge rs[2] = {{b.addr() + 1024 * i, 100, b.mr->lkey}, {b.addr() + 1024 * i + 512, 400, b.mr->lkey}};
    ASSERT_EQ(b.dev->post_srq_recv(srq, RecvWr{0x5000 + i, rs, 2}), 0);
  }
  Sge too_many[3] = {rs0, rs0, rs0};
  EXPECT_EQ(b.dev->post_srq_recv(srq, RecvWr{9, too_many, 3}), EINVAL);
  ASSERT_EQ(srq->rq().size(), 4u);

  std::memset(b.buf(), 0, 8192);
  fill_pattern(a.buf(), 4096, 8);
  for (uint64_t i = 0; i < 3; ++i) {
    Sge sg{a.addr() + 500 * i, uint32_t(150 + i), a.mr->lkey};
    SendWr w;
    w.wr_id = 70 + i;
    w.opcode = i == 1 ? WrOpcode::SendWithImm : WrOpcode::Send;
    w.imm_data = 0xABCD;
    w.send_flags = kSendSignaled;
    w.sg_list = &sg;
    w.num_sge = 1;
    ASSERT_EQ(a.dev->post_send(aq, w), 0);
  }
  for (uint64_t i = 0; i < 3; ++i) {
    Wc wc;
    ASSERT_NO_FATAL_FAILURE(pr.expect_wc(b.rcq, wc, 0x5000 + i, WcStatus::Success));
    EXPECT_EQ(wc.opcode, WcOpcode::Recv);
    EXPECT_EQ(wc.byte_len, 150 + i);
    EXPECT_EQ(wc.qp_num, bq->qpn());
    EXPECT_EQ(wc.src_qp, aq->qpn());
    EXPECT_EQ(bool(wc.wc_flags & kWcWithImm), i == 1);
    const uint8_t* want = a.buf() + 500 * i;
    EXPECT_EQ(std::memcmp(b.buf() + 1024 * i, want, 100), 0);
    EXPECT_EQ(std::memcmp(b.buf() + 1024 * i + 512, want + 100, 50 + i), 0);
    EXPECT_EQ(b.buf()[1024 * i + 100], 0) << "the gap between the SGEs";
    ASSERT_NO_FATAL_FAILURE(pr.expect_wc(a.scq, wc, 70 + i, WcStatus::Success));
  }
  EXPECT_EQ(srq->rq().size(), 1u);
  EXPECT_EQ(bq->rq_outstanding(), 0u);
  // The QP's own RQ was never used; the original pair QPs saw nothing.
  EXPECT_EQ(b.rcq->size(), 0u);
  // An SRQ's receives are not flushed when one of its QPs goes to ERR.
  ASSERT_EQ(b.dev->modify_qp(bq, good_attr(QpState::Err), S), 0);
  EXPECT_EQ(b.rcq->size(), 0u);
  EXPECT_EQ(srq->rq().size(), 1u);
}


// ibv_modify_qp without IBV_QP_STATE modifies attributes within the current state (Linux
// accepts it for INIT, RTS and SQD); in RTR it takes nothing.
TEST(StateNoStateBit, ModifiesWithinTheCurrentState) {
  Pair pr;
  QpAttr at;
  at.min_rnr_timer = 20;
  ASSERT_EQ(pr.a.dev->modify_qp(pr.a.qp, at, kAttrMinRnrTimer), 0);
  EXPECT_EQ(pr.a.qp->state(), QpState::Rts);
  EXPECT_EQ(pr.a.qp->attr().min_rnr_timer, 20);
  EXPECT_EQ(pr.a.dev->modify_qp(pr.a.qp, at, kAttrSqPsn), EINVAL) << "RTS->RTS does not take SQ_PSN";
  EXPECT_EQ(pr.a.dev->modify_qp(pr.a.qp, at, 0), 0) << "an empty modify is a no-op";
  QpAttr r;
  r.qp_state = QpState::Reset;
  ASSERT_EQ(pr.a.dev->modify_qp(pr.a.qp, r, kAttrState), 0);
  r.qp_state = QpState::Init;
  r.port_num = 1;
  ASSERT_EQ(pr.a.dev->modify_qp(pr.a.qp, r, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags), 0);
  at.qp_access_flags = kRemoteRead;
  ASSERT_EQ(pr.a.dev->modify_qp(pr.a.qp, at, kAttrAccessFlags), 0);
  EXPECT_EQ(pr.a.qp->attr().qp_access_flags, uint32_t(kRemoteRead));
  EXPECT_EQ(pr.a.qp->state(), QpState::Init);
}

}  // namespace
}  // namespace uroce::test

namespace uroce::test {

// The requester's state says what it waits for, and describe() prints it by name.
TEST(RoleStates, RequesterWaitsForRdAtomicLimitAndPrintsIt) {
  PairOptions o;
  o.max_rd_atomic = 1;
  Pair pr(o);
  Sge sge{pr.a.addr(), 8, pr.a.mr->lkey};
  for (int i = 0; i < 2; ++i) {
    SendWr wr = wr_to(pr.b, uint64_t(i), WrOpcode::RdmaRead, &sge);
    ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr), 0);
  }
  pr.a.dev->progress();  // the first READ goes out; the second waits for its response
  EXPECT_EQ(pr.a.qp->req_state(), ReqState::WaitRdAtomic);
  EXPECT_NE(pr.a.qp->describe().find("req=WAIT_RD_ATOMIC"), std::string::npos) << pr.a.qp->describe();
  ASSERT_TRUE(pr.run_until([&] { return pr.a.scq->size() == 2; }));
  EXPECT_EQ(pr.a.qp->req_state(), ReqState::Idle);
  EXPECT_EQ(pr.b.qp->resp_state(), RespState::Idle);
  EXPECT_NE(pr.b.qp->describe().find("resp=IDLE in_msg=none"), std::string::npos) << pr.b.qp->describe();
}

}  // namespace uroce::test
