// The QP state machine as ibv_modify_qp(3) and IBA 11.2.4.2 define it for RC, UC, UD and XRC:
// which transitions are legal, which attributes each one requires and allows, and their values.
#include <algorithm>
#include <array>
#include <cerrno>
#include <span>

#include "engine/roles.hpp"
#include "proto/psn.hpp"

namespace uroce::engine {

namespace {

struct Transition {
  QpState from, to;
  uint32_t required, optional;
};

constexpr uint32_t kS = kAttrState;
constexpr Transition kRcTransitions[] = {
    {QpState::Reset, QpState::Init, kS | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, 0},
    {QpState::Init, QpState::Init, kS, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags},
    {QpState::Init, QpState::Rtr,
     kS | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic | kAttrMinRnrTimer,
     kAttrAltPath | kAttrAccessFlags | kAttrPkeyIndex},
    {QpState::Rtr, QpState::Rts, kS | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic,
     kAttrCurState | kAttrAltPath | kAttrAccessFlags | kAttrMinRnrTimer | kAttrPathMigState},
    {QpState::Rts, QpState::Rts, kS,
     kAttrCurState | kAttrAccessFlags | kAttrAltPath | kAttrPathMigState | kAttrMinRnrTimer},
    {QpState::Rts, QpState::Sqd, kS, kAttrEnSqdAsyncNotify},
    {QpState::Sqd, QpState::Rts, kS,
     kAttrCurState | kAttrAccessFlags | kAttrAltPath | kAttrMinRnrTimer | kAttrPathMigState},
    {QpState::Sqd, QpState::Sqd, kS,
     kAttrPkeyIndex | kAttrPort | kAttrAv | kAttrPathMtu | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry |
         kAttrMaxQpRdAtomic | kAttrMaxDestRdAtomic | kAttrAltPath | kAttrAccessFlags | kAttrMinRnrTimer |
         kAttrPathMigState | kAttrCurState},
    {QpState::Sqe, QpState::Rts, kS, kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer},
};

// XRC (IBA annex A14, the kernel's ib_modify_qp_is_ok table): an initiator has no receive side,
// so RTR asks no responder resources or RNR timer; a target sends nothing, so RTS asks no
// retry counts or READ/atomic limit. Otherwise as RC.
// (RC's table with those attributes taken out of the transitions' required ones.)
constexpr std::array<Transition, std::size(kRcTransitions)> xrc_transitions(bool target) {
  std::array<Transition, std::size(kRcTransitions)> t{};
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = kRcTransitions[i];
    if (!target && t[i].from == QpState::Init && t[i].to == QpState::Rtr)
      t[i].required &= ~uint32_t(kAttrMaxDestRdAtomic | kAttrMinRnrTimer);
    if (target && t[i].from == QpState::Rtr && t[i].to == QpState::Rts)
      t[i].required &= ~uint32_t(kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic);
  }
  return t;
}
constexpr auto kXrcIniTransitions = xrc_transitions(false);
constexpr auto kXrcTgtTransitions = xrc_transitions(true);

// UC: no READ/atomic limits, no timers, no RNR.
constexpr Transition kUcTransitions[] = {
    {QpState::Reset, QpState::Init, kS | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, 0},
    {QpState::Init, QpState::Init, kS, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags},
    {QpState::Init, QpState::Rtr, kS | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn,
     kAttrAltPath | kAttrAccessFlags | kAttrPkeyIndex},
    {QpState::Rtr, QpState::Rts, kS | kAttrSqPsn,
     kAttrCurState | kAttrAltPath | kAttrAccessFlags | kAttrPathMigState},
    {QpState::Rts, QpState::Rts, kS, kAttrCurState | kAttrAccessFlags | kAttrAltPath | kAttrPathMigState},
    {QpState::Rts, QpState::Sqd, kS, kAttrEnSqdAsyncNotify},
    {QpState::Sqd, QpState::Rts, kS, kAttrCurState | kAttrAccessFlags | kAttrAltPath | kAttrPathMigState},
    {QpState::Sqd, QpState::Sqd, kS,
     kAttrPkeyIndex | kAttrAv | kAttrAltPath | kAttrAccessFlags | kAttrPathMigState | kAttrCurState},
    {QpState::Sqe, QpState::Rts, kS, kAttrCurState | kAttrAccessFlags},
};

// UD: a Q_Key instead of a peer; addresses come with each send.
constexpr Transition kUdTransitions[] = {
    {QpState::Reset, QpState::Init, kS | kAttrPkeyIndex | kAttrPort | kAttrQkey, 0},
    {QpState::Init, QpState::Init, kS, kAttrPkeyIndex | kAttrPort | kAttrQkey},
    {QpState::Init, QpState::Rtr, kS, kAttrPkeyIndex | kAttrQkey},
    {QpState::Rtr, QpState::Rts, kS | kAttrSqPsn, kAttrCurState | kAttrQkey},
    {QpState::Rts, QpState::Rts, kS, kAttrCurState | kAttrQkey},
    {QpState::Rts, QpState::Sqd, kS, kAttrEnSqdAsyncNotify},
    {QpState::Sqd, QpState::Rts, kS, kAttrCurState | kAttrQkey},
    {QpState::Sqd, QpState::Sqd, kS, kAttrPkeyIndex | kAttrQkey | kAttrCurState},
    {QpState::Sqe, QpState::Rts, kS, kAttrCurState | kAttrQkey},
};

std::span<const Transition> transitions(QpType t) {
  switch (t) {
    case QpType::UC: return kUcTransitions;
    case QpType::UD: return kUdTransitions;
    case QpType::XrcIni: return kXrcIniTransitions;
    case QpType::XrcTgt: return kXrcTgtTransitions;
    default: return kRcTransitions;
  }
}

}  // namespace

int Device::check_modify_qp(const Qp* qp, const QpAttr& a, uint32_t mask) const {
  if (!qp) return EINVAL;
  const QpState cur = qp->attrs.qp_state;
  if ((mask & kAttrCurState) && a.cur_qp_state != cur) return EINVAL;
  const QpState to = (mask & kAttrState) ? a.qp_state : cur;
  if (uint32_t(to) > uint32_t(QpState::Err)) return EINVAL;

  uint32_t required = 0, optional = 0;
  bool legal = false;
  if (!(mask & kAttrState)) {
    // No STATE: a modify within the current state (INIT->INIT, RTS->RTS, SQD->SQD), as Linux
    // treats it; RESET, RTR, SQE and ERR take no attributes this way.
    for (const Transition& t : transitions(qp->init.qp_type))
      if (t.from == cur && t.to == cur) {
        legal = true;
        required = t.required & ~kS;
        optional = t.optional;
      }
  } else if (to == QpState::Reset || to == QpState::Err) {
    legal = true;  // from any state, STATE only (CUR_STATE allowed)
    required = kS;
    optional = kAttrCurState;
  } else {
    for (const Transition& t : transitions(qp->init.qp_type))
      if (t.from == cur && t.to == to) {
        legal = true;
        required = t.required;
        optional = t.optional;
      }
  }
  if (!legal) return EINVAL;
  if ((mask & required) != required || (mask & ~(required | optional))) return EINVAL;

  // Values.
  if ((mask & kAttrPathMtu) && (uint32_t(a.path_mtu) < 1 || uint32_t(a.path_mtu) > 5 ||
                                mtu_bytes(a.path_mtu) > mtu_limit()))
    return EINVAL;
  if ((mask & kAttrPort) && a.port_num != 1) return EINVAL;
  if ((mask & kAttrPkeyIndex) && a.pkey_index != 0) return EINVAL;
  if ((mask & kAttrMaxQpRdAtomic) && a.max_rd_atomic > cfg_.max_rd_atomic) return EINVAL;
  if ((mask & kAttrMaxDestRdAtomic) && a.max_dest_rd_atomic > cfg_.max_rd_atomic) return EINVAL;
  if ((mask & kAttrDestQpn) && a.dest_qp_num > 0xFFFFFF) return EINVAL;
  if ((mask & kAttrRetryCnt) && a.retry_cnt > 7) return EINVAL;
  if ((mask & kAttrRnrRetry) && a.rnr_retry > 7) return EINVAL;
  if ((mask & kAttrMinRnrTimer) && a.min_rnr_timer > 31) return EINVAL;
  if ((mask & kAttrTimeout) && a.timeout > 31) return EINVAL;
  if (mask & kAttrAv) {
    // The source GID must be in the table, of the destination's family (IPv4 or IPv6).
    const proto::Ip6* src = sgid(a.ah_attr.sgid_index);
    if (!src || gid_is_v4mapped(*src) != gid_is_v4mapped(a.ah_attr.dgid)) return EINVAL;
  }
  return 0;
}

int Device::modify_qp(Qp* qp, const QpAttr& a, uint32_t mask) {
  if (int rc = check_modify_qp(qp, a, mask)) return rc;
  const QpState cur = qp->attrs.qp_state;
  const QpState to = (mask & kAttrState) ? a.qp_state : cur;

  QpAttr& q = qp->attrs;
  if (mask & kAttrAccessFlags) q.qp_access_flags = a.qp_access_flags;
  if (mask & kAttrPkeyIndex) q.pkey_index = a.pkey_index;
  if (mask & kAttrPort) q.port_num = a.port_num;
  if (mask & kAttrAv) q.ah_attr = a.ah_attr;
  if (mask & kAttrPathMtu) {
    q.path_mtu = a.path_mtu;
    qp->mtu = mtu_bytes(a.path_mtu);
  }
  if (mask & kAttrDestQpn) q.dest_qp_num = a.dest_qp_num;
  if (mask & kAttrRqPsn) {
    q.rq_psn = a.rq_psn & proto::kPsnMask;
    qp->rx.epsn = q.rq_psn;
  }
  if (mask & kAttrMaxDestRdAtomic) {
    // As many slots as the peer may have outstanding, all free (none is in use before RTR),
    // allocated when the first request needs one (RecvSide::next_res).
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    RecvSide& r = qp->rx;
    r.res_n = std::max<uint32_t>(1, a.max_dest_rd_atomic);
    std::vector<RdAtomicRes>().swap(r.res);
    r.res_next = r.res_pending = 0;
  }
  if (mask & kAttrMinRnrTimer) q.min_rnr_timer = a.min_rnr_timer;
  if (mask & kAttrQkey) q.qkey = a.qkey;
  if (mask & kAttrSqPsn) {
    q.sq_psn = a.sq_psn & proto::kPsnMask;
    qp->tx.sq_psn = q.sq_psn;
  }
  if (mask & kAttrTimeout) q.timeout = a.timeout;
  if (mask & kAttrRetryCnt) {
    q.retry_cnt = a.retry_cnt;
    qp->tx.retries_left = a.retry_cnt;
  }
  if (mask & kAttrRnrRetry) {
    q.rnr_retry = a.rnr_retry;
    qp->tx.rnr_retries_left = a.rnr_retry;
  }
  if (mask & kAttrMaxQpRdAtomic) q.max_rd_atomic = a.max_rd_atomic;
  if (mask & kAttrEnSqdAsyncNotify) q.en_sqd_async_notify = a.en_sqd_async_notify;

  q.qp_state = to;
  q.cur_qp_state = to;
  if (to == QpState::Reset) qp_ops::reset(*qp);
  if (to == QpState::Rtr) qp_ops::build_template(*qp, *this);
  if (to == QpState::Rts && cur != QpState::Rts) qp->tx.last_progress_ns = step_ns();
  if (to == QpState::Err && cur != QpState::Err) qp_ops::set_error(*qp);
  kick(qp);
  return 0;
}

}  // namespace uroce::engine
