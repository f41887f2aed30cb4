// Protection domains, memory regions, completion queues and shared receive queues.
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <cstring>
#include <string>
#include <vector>

#include "engine/id_map.hpp"
#include "engine/link.hpp"
#include "engine/pages.hpp"
#include "engine/types.hpp"

namespace uroce::engine {

// The device's random numbers (keys, QP numbers): xoshiro256** seeded from the Device's
// Config::seed, or from std::random_device when that is 0.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  uint32_t next32() { return uint32_t(next() >> 32); }

 private:
  uint64_t s_[4];
};

struct Pd {
  uint32_t handle = 0;
};

// An address handle (UD): where a datagram goes. The caller resolved the MAC.
struct Ah {
  const Pd* pd = nullptr;
  AddressVector av{};
  proto::Ip6 sgid{};   // the source GID when it was created: sent from if the GID table loses it
};

// A registered memory region: [iova, iova + length) in the keys' address space maps to host
// memory at `host`. For ibv_reg_mr iova == host address.
struct Mr {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint64_t iova = 0;
  uint8_t* host = nullptr;
  uint64_t length = 0;
  uint32_t access = 0;
  const Pd* pd = nullptr;
  bool valid = false;
  uint32_t windows = 0;  // memory windows bound to it: no deregistration while any (IBA 10.6.7.2.6)
};

// A memory window (IBA 10.6.7): part of an MR that a peer reaches with the window's own R_Key
// and rights, bound and invalidated by work requests (type 2, and type 1's ibv_bind_mw). Its
// R_Key has bit 31 set (an MR's never has), a random index in bits 30:8, and in bits 7:0 the key
// the consumer picks at each bind (ibv_inc_rkey). Type 2 windows answer only the QP that bound
// them (type 2B, as rxe's: its peer's requests arrive on that QP).
inline constexpr uint32_t kMwKeyBit = 0x80000000u;
constexpr bool is_mw_key(uint32_t rkey) { return rkey & kMwKeyBit; }
struct Mw {
  uint32_t rkey = 0;
  uint8_t type = 0;          // 1 or 2
  const Pd* pd = nullptr;
  bool bound = false;        // a window of nonzero length on `mr`: remote access goes through it
  Mr* mr = nullptr;
  uint64_t addr = 0, length = 0;
  uint32_t access = 0;       // kRemoteRead | kRemoteWrite | kRemoteAtomic (and kLocalWrite, ignored)
  uint32_t qpn = 0;          // type 2: the QP that bound it
  bool valid = false;        // allocated
  uint32_t slot = 0;         // its place in the table (MrTable::mws_)
};

// The registered MRs and their keys. Keys are random 32-bit values (an off-path injector
// cannot guess them), lkeys and rkeys drawn separately (an lkey never opens remote access),
// never 0, never a live key, and never one of the last kRecentKeys deregistered ones: a stale
// key fails the lookup. Lookups are one hash probe.
class MrTable {
 public:
  MrTable(uint32_t max_mr, Rng& rng, uint32_t max_mw = param::kMaxMw);

  // Returns nullptr when the table is full.
  Mr* reg(const Pd* pd, void* host, uint64_t length, uint64_t iova, uint32_t access);
  bool dereg(uint32_t lkey);
  // Changes a live registration in place (its keys stay): what it maps, its PD, its rights.
  // Host pointers resolved before are checked again (gen()).
  void modify(Mr& mr, const Pd* pd, void* host, uint64_t length, uint64_t iova, uint32_t access);
  // The MR a key names, or nullptr if the key is stale or unknown.
  const Mr* by_lkey(uint32_t key) const {
    const uint32_t* i = lkeys_.find(key);
    return i ? &slots_[*i] : nullptr;
  }
  const Mr* by_rkey(uint32_t key) const {
    const uint32_t* i = rkeys_.find(key);
    return i ? &slots_[*i] : nullptr;
  }
  uint32_t count() const { return lkeys_.size(); }
  bool uses_pd(const Pd* pd) const;  // an MR or a memory window of the PD

  // Memory windows. alloc_mw: nullptr when max_mw are allocated. The window's R_Key is new and
  // random (bit 31 set); type 1 windows are valid unbound (length 0), type 2 free.
  Mw* alloc_mw(const Pd* pd, uint8_t type);
  void dealloc_mw(Mw& mw);  // unbinds it first
  // The window whose current R_Key is `rkey` (an older key of a window that was bound again
  // since, or a key of a freed window, names none).
  const Mw* mw_by_rkey(uint32_t rkey) const;
  Mw* mw_by_rkey(uint32_t rkey);
  Mw* mw_by_index(uint32_t rkey);  // the window whose R_Key has rkey's index (bits 31:8), whatever its key
  Mr* mr_by_lkey(uint32_t lkey);
  // Binds `mw` (checked by the caller: engine/local_ops.cpp) to [addr, addr + length) of `mr`
  // (length 0: unbound) with R_Key `rkey`; unbind_mw: the window has no range (invalidated).
  void bind_mw(Mw& mw, Mr* mr, uint64_t addr, uint64_t length, uint32_t access, uint32_t rkey, uint32_t qpn);
  void unbind_mw(Mw& mw);
  uint32_t mw_count() const { return mw_index_.size(); }
  // Changes with every deregistration and re-registration: a host pointer resolved under the
  // same generation is still good; otherwise its key must be checked again.
  uint64_t gen() const { return gen_; }

 private:
  uint32_t new_key();
  Rng& rng_;
  // Slots are made as registrations need them (a deque: an Mr never moves), up to max_mr_.
  std::deque<Mr> slots_;
  uint32_t max_mr_;
  std::vector<uint32_t> free_;       // slot indices given back
  IdMap<uint32_t> lkeys_, rkeys_;    // key -> slot
  std::vector<uint32_t> recent_;     // the last deregistered keys (a ring)
  uint32_t recent_next_ = 0;
  uint64_t gen_ = 0;
  std::deque<Mw> mws_;               // made as allocations need them, up to max_mw_
  uint32_t max_mw_;
  std::vector<uint32_t> mw_free_;
  IdMap<uint32_t> mw_index_;         // R_Key >> 8 (never 0: bit 31 is set) -> window slot
};

// Is [addr, addr + len) inside the MR? (len 0 is always inside.)
inline bool mr_contains(const Mr& mr, uint64_t addr, uint64_t len) {
  if (len == 0) return true;
  return addr >= mr.iova && len <= mr.length && addr - mr.iova <= mr.length - len;
}

// The implicit on-demand paging MR (ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | ...),
// a ConnectX's IBV_ODP_SUPPORT_IMPLICIT): every address of the process, each access faulting its
// pages in.
inline bool is_implicit_odp(const void* addr, uint64_t length, uint32_t access) {
  return addr == nullptr && length == UINT64_MAX && (access & kOnDemand);
}

// The result of checking a remote or local access: where the bytes are, or why not.
struct AccessCheck {
  uint8_t* host = nullptr;
  bool ok = false;
};

// Does an access with right `need` store into the memory? (It must then be writable.)
constexpr bool stores(uint32_t need) { return need & (kLocalWrite | kRemoteWrite | kRemoteAtomic); }

// Where [addr, addr + len) of `mr` is, the range already checked against it. An on-demand paging
// MR's pages are faulted in first (for writing when `write`); pages that cannot be (not mapped,
// or not writable) fail the access as an RNIC's failed page fault does.
inline AccessCheck mr_bytes(const Mr& mr, uint64_t addr, uint64_t len, bool write) {
  // In integers: the implicit ODP MR's host base is address 0.
  auto* host = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(mr.host) + (addr - mr.iova));
  if ((mr.access & kOnDemand) && !pages_fault_in(host, len, write)) [[unlikely]]
    return {};
  return {host, true};
}

inline AccessCheck check_mr(const Mr* mr, const Pd* pd, uint64_t addr, uint64_t len, uint32_t need) {
  if (!mr || mr->pd != pd || (need && !(mr->access & need)) || !mr_contains(*mr, addr, len)) return {};
  return mr_bytes(*mr, addr, len, stores(need));
}

// A QP's last key lookup, reused while the MR table's generation is the same (no MR was
// deregistered since, so the key still names the same MR): the common case of a QP using one
// buffer skips the hash probe. The checks on the MR (PD, access, bounds) run every time.
struct KeyCache {
  uint32_t key = 0;
  uint64_t gen = ~0ull;
  const Mr* mr = nullptr;
};
inline const Mr* cached_key(const MrTable& t, KeyCache& c, uint32_t key, bool remote) {
  if (c.mr && c.key == key && c.gen == t.gen()) [[likely]]
    return c.mr;
  const Mr* m = remote ? t.by_rkey(key) : t.by_lkey(key);
  c = {key, t.gen(), m};
  return m;
}

// A remote access through a memory window: bound, of the QP's PD (and, type 2, bound by this
// QP `qpn`), with the right, inside the window (which lies inside its MR, checked at the bind).
inline AccessCheck check_window(const Mw* w, const Pd* pd, uint32_t qpn, uint64_t addr, uint64_t len, uint32_t need) {
  if (!w || !w->bound || w->pd != pd || (w->type == 2 && w->qpn != qpn) || (need && !(w->access & need))) return {};
  if (len != 0 && !(addr >= w->addr && len <= w->length && addr - w->addr <= w->length - len)) return {};
  const Mr* mr = w->mr;
  if (!mr || mr->pd != pd || !mr_contains(*mr, addr, len)) return {};
  return mr_bytes(*mr, addr, len, stores(need));
}

// Checks an lkey (local SGEs), its PD, bounds and access right (`need`: an Access bit, 0 = any).
inline AccessCheck check_local(const MrTable& t, uint32_t lkey, const Pd* pd, uint64_t addr, uint64_t len,
                               uint32_t need) {
  return check_mr(t.by_lkey(lkey), pd, addr, len, need);
}

inline AccessCheck check_local(const MrTable& t, KeyCache& c, uint32_t lkey, const Pd* pd, uint64_t addr,
                               uint64_t len, uint32_t need) {
  return check_mr(cached_key(t, c, lkey, false), pd, addr, len, need);
}
// Checks an rkey of a remote request (an MR's, or a memory window's), its PD, bounds and access
// right; `qpn`: the QP the request came on (a type 2 window answers only the QP that bound it).
inline AccessCheck check_remote(const MrTable& t, KeyCache& c, uint32_t rkey, const Pd* pd, uint32_t qpn,
                                uint64_t addr, uint64_t len, uint32_t need) {
  if (is_mw_key(rkey)) [[unlikely]]
    return check_window(t.mw_by_rkey(rkey), pd, qpn, addr, len, need);
  return check_mr(cached_key(t, c, rkey, true), pd, addr, len, need);
}

// The same without a key cache.
inline AccessCheck check_remote(const MrTable& t, uint32_t rkey, const Pd* pd, uint32_t qpn, uint64_t addr,
                                uint64_t len, uint32_t need) {
  if (is_mw_key(rkey)) [[unlikely]]
    return check_window(t.mw_by_rkey(rkey), pd, qpn, addr, len, need);
  return check_mr(t.by_rkey(rkey), pd, addr, len, need);
}

// A completion as a CQ holds it: 32 bytes, a Wc packed (a ConnectX's CQE is 64). The immediate
// and the invalidated R_Key share a field, as in ibv_wc (the flags say which); times, when the CQ
// keeps them, in an array of their own.
struct Cqe {
  uint64_t wr_id = 0;
  uint32_t byte_len = 0;
  uint32_t imm_or_rkey = 0;
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  uint8_t status = 0;
  uint8_t opcode = 0;
  uint8_t wc_flags = 0;
  uint8_t ip_version = 0;
  uint16_t pkey_index = 0;
  uint16_t vendor_err = 0;

  static Cqe pack(const Wc& w) {
    Cqe c;
    c.wr_id = w.wr_id;
    c.byte_len = w.byte_len;
    c.imm_or_rkey = (w.wc_flags & kWcWithInv) ? w.invalidated_rkey : w.imm_data;
    c.qp_num = w.qp_num;
    c.src_qp = w.src_qp;
    c.status = uint8_t(w.status);
    c.opcode = uint8_t(w.opcode);
    c.wc_flags = uint8_t(w.wc_flags);
    c.ip_version = w.ip_version;
    c.pkey_index = w.pkey_index;
    c.vendor_err = uint16_t(w.vendor_err);
    return c;
  }
  Wc unpack(uint64_t completion_ns) const {
    Wc w;
    w.wr_id = wr_id;
    w.status = WcStatus(status);
    w.opcode = WcOpcode(opcode);
    w.vendor_err = vendor_err;
    w.byte_len = byte_len;
    if (wc_flags & kWcWithInv) w.invalidated_rkey = imm_or_rkey;
    else if (wc_flags & kWcWithImm) w.imm_data = imm_or_rkey;
    w.qp_num = qp_num;
    w.src_qp = src_qp;
    w.wc_flags = wc_flags;
    w.pkey_index = pkey_index;
    w.ip_version = ip_version;
    w.completion_ns = completion_ns;
    return w;
  }
};
static_assert(sizeof(Cqe) == 32);

// A completion queue of fixed depth. When full, the completion is not written: the CQ is
// marked overflowed (an asynchronous error event, IBV_EVENT_CQ_ERR) and nothing is corrupted.
class Cq {
 public:
  // `times`: the device clock, read into each CQE as it is written (completion timestamps); null
  // for a CQ that does not keep them.
  // Storage for param::kQueueFirstSlots CQEs to start with, doubled as completions wait beyond it.
  explicit Cq(uint32_t depth, const Clock* times = nullptr)
      : depth_(depth ? depth : 1), ring_(std::min(depth_, param::kQueueFirstSlots)), stamps_(times ? ring_.size() : 0),
        times_(times) {}
  bool push(const Wc& wc) {
    if (count_ == ring_.size()) [[unlikely]] {
      if (count_ == depth_) {
        overflowed_ = true;
        return false;
      }
      grow();
    }
    uint32_t tail = head_ + count_;
    if (tail >= ring_.size()) tail -= uint32_t(ring_.size());
    ring_[tail] = Cqe::pack(wc);
    if (times_) stamps_[tail] = times_->now_ns();
    ++count_;
    ++events_;
    return true;
  }
  // Takes up to `max` completions, oldest first, handing each to `f` as a Wc (the verbs shim
  // converts them straight into the application's ibv_wc array).
  template <typename F>
  uint32_t poll_each(uint32_t max, F&& f) {
    uint32_t n = 0;
    for (; n < max && count_; ++n) {
      f(ring_[head_].unpack(times_ ? stamps_[head_] : 0));
      if (++head_ == ring_.size()) head_ = 0;
      --count_;
    }
    return n;
  }
  uint32_t poll(Wc* out, uint32_t max) {
    return poll_each(max, [&out](const Wc& w) { *out++ = w; });
  }
  uint32_t depth() const { return depth_; }
  uint32_t allocated() const { return uint32_t(ring_.size()); }   // CQEs it has storage for now
  uint32_t size() const { return count_; }
  bool overflowed() const { return overflowed_; }
  uint64_t completions_pushed() const { return events_; }
  // The device's bookkeeping: where it holds this CQ, and how many QPs use it (destroy_cq
  // refuses while any does). Neither walks the device's QPs or CQs.
  uint32_t slot = 0;
  uint32_t qp_refs = 0;

 private:
  void grow() {
    const uint32_t cap = uint32_t(std::min<uint64_t>(uint64_t(ring_.size()) * 2, depth_));
    std::vector<Cqe> ring(cap);
    std::vector<uint64_t> stamps(times_ ? cap : 0);
    for (uint32_t i = 0, at = head_; i < count_; ++i, at = at + 1 == ring_.size() ? 0 : at + 1) {
      ring[i] = ring_[at];
      if (times_) stamps[i] = stamps_[at];
    }
    ring_ = std::move(ring);
    stamps_ = std::move(stamps);
    head_ = 0;
  }
  uint32_t depth_;
  std::vector<Cqe> ring_;
  std::vector<uint64_t> stamps_;   // completion times, by ring position (a CQ that keeps them)
  const Clock* times_ = nullptr;
  uint32_t head_ = 0, count_ = 0;
  bool overflowed_ = false;
  uint64_t events_ = 0;
};

// The receive WQE being filled (RecvSide::cur_recv): a copy of the posted one, its SGEs beside it.
struct RecvWqe {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  Sge* sge = nullptr;
};

// A FIFO ring of a fixed capacity, which its owner may change (resize: the entries move, in
// order; the queues grow as they are used, docs/engine.md).
template <typename T>
class Ring {
 public:
  explicit Ring(uint32_t cap = 0) : v_(cap ? cap : 1) {}
  bool full() const { return count_ == v_.size(); }
  bool empty() const { return count_ == 0; }
  uint32_t size() const { return count_; }
  uint32_t capacity() const { return uint32_t(v_.size()); }
  T& push_slot() { return v_[(head_ + count_++) % v_.size()]; }  // caller checked !full()
  T& front() { return v_[head_]; }
  const T& front() const { return v_[head_]; }
  T& at(uint32_t i) { return v_[(head_ + i) % v_.size()]; }  // i-th oldest
  const T& at(uint32_t i) const { return v_[(head_ + i) % v_.size()]; }
  uint32_t pos(uint32_t i) const { return uint32_t((head_ + i) % v_.size()); }  // where the i-th oldest lies
  void pop() {
    head_ = (head_ + 1) % v_.size();
    --count_;
  }
  void clear() { head_ = count_ = 0; }
  T& slot(uint32_t i) { return v_[i]; }  // by position, for setting up each slot's storage
  // Storage for `cap` entries (at least size()), the entries kept in order from position 0
  // (the i-th oldest at position i): `moved(entry, from, to)` for each.
  template <typename F>
  void resize(uint32_t cap, F&& moved) {
    std::vector<T> v(cap ? cap : 1);
    for (uint32_t i = 0; i < count_; ++i) {
      const uint32_t from = pos(i);
      v[i] = std::move(v_[from]);
      moved(v[i], from, i);
    }
    v_ = std::move(v);
    head_ = 0;
  }

 private:
  std::vector<T> v_;
  uint32_t head_ = 0, count_ = 0;
};

// A receive queue (a QP's own or an SRQ's): posted receives, 16 bytes each, and their SGEs,
// max_sge per slot by the slot's position, copied at post time.
class RecvRing {
 public:
  struct Posted {
    uint64_t wr_id = 0;
    uint32_t num_sge = 0;
  };
  // `cap` entries at most; storage for param::kQueueFirstSlots of them to start with.
  explicit RecvRing(uint32_t cap = 0, uint32_t max_sge = 0)
      : ring_(std::min(std::max(cap, 1u), param::kQueueFirstSlots)), limit_(std::max(cap, 1u)), max_sge_(max_sge),
        sge_(size_t(ring_.capacity()) * max_sge) {}
  bool full() const { return ring_.size() == limit_; }
  bool empty() const { return ring_.empty(); }
  uint32_t size() const { return ring_.size(); }
  uint32_t capacity() const { return limit_; }               // the depth asked for
  uint32_t allocated() const { return ring_.capacity(); }    // entries it has storage for now
  // Empty, and back to its first storage (a QP reset gives the rest back).
  void clear() {
    if (ring_.capacity() > param::kQueueFirstSlots) *this = RecvRing(limit_, max_sge_);
    ring_.clear();
  }
  void pop() { ring_.pop(); }
  // Caller checked !full() and num_sge <= max_sge.
  void push(const RecvWr& wr) {
    if (ring_.full()) [[unlikely]]
      grow();
    const uint32_t at = ring_.pos(ring_.size());
    Posted& r = ring_.push_slot();
    r.wr_id = wr.wr_id;
    r.num_sge = wr.num_sge;
    std::copy_n(wr.sg_list, wr.num_sge, sge_.data() + size_t(at) * max_sge_);
  }
  const Posted& front() const { return ring_.front(); }
  const Sge* front_sge() const { return sge_.data() + size_t(ring_.pos(0)) * max_sge_; }

 private:
  void grow() {
    const uint32_t cap = uint32_t(std::min<uint64_t>(uint64_t(ring_.capacity()) * 2, limit_));
    std::vector<Sge> sge(size_t(cap) * max_sge_);
    ring_.resize(cap, [&](Posted&, uint32_t from, uint32_t to) {
      std::copy_n(sge_.data() + size_t(from) * max_sge_, max_sge_, sge.data() + size_t(to) * max_sge_);
    });
    sge_ = std::move(sge);
  }
  Ring<Posted> ring_;
  uint32_t limit_;
  uint32_t max_sge_;
  std::vector<Sge> sge_;
};

// An XRC domain (ibv_open_xrcd): its XRC SRQs take the requests of its XRC target QPs only.
struct Xrcd {
  uint32_t users = 0;   // XRC SRQs and target QPs in it (Device::dealloc_xrcd: EBUSY while any)
};

// A shared receive queue. An XRC SRQ (IBA annex A14) also has a domain, a CQ of its own (its
// receive completions go there, whichever target QP the request came through) and a 24-bit
// number, which an initiator puts in the XRCETH of each request.
class Srq {
 public:
  Srq(const Pd* pd, uint32_t max_wr, uint32_t max_sge, Xrcd* xrcd = nullptr, Cq* cq = nullptr, uint32_t srqn = 0)
      : pd_(pd), rq_(max_wr, max_sge), max_sge_(max_sge), xrcd_(xrcd), cq_(cq), srqn_(srqn) {}
  const Pd* pd() const { return pd_; }
  RecvRing& rq() { return rq_; }
  uint32_t max_sge() const { return max_sge_; }
  Xrcd* xrcd() const { return xrcd_; }   // nullptr: a basic SRQ
  Cq* cq() const { return cq_; }         // XRC: where its receive completions go
  uint32_t srqn() const { return srqn_; }  // XRC: its number (0 for a basic SRQ)
  uint32_t srq_limit = 0;

 private:
  const Pd* pd_;
  RecvRing rq_;
  uint32_t max_sge_;
  Xrcd* xrcd_;
  Cq* cq_;
  uint32_t srqn_;
};

// Counters, per QP and summed per device: what `rdma statistic` shows on a real RNIC.
//
// The first group carries the names of the kernel's rxe hw_counters (rxe_hw_counters.c) and
// counts the same events, so that uroce and rxe compare side by side (docs/observability.md):
//   sent_pkts / rcvd_pkts        every RoCE frame built / received and parsed (ACKs included)
//   duplicate_request            responder: a request PSN already executed
//   out_of_seq_request           responder: a PSN gap, answered by one sequence NAK (rxe counts
//                                once per gap too; every packet ahead is in out_of_sequence)
//   send_rnr_err / rcvd_rnr_err  RNR NAKs sent (no receive WQE) / received
//   rcvd_seq_err                 sequence-error NAKs received
//   completer_retry_err          retries started (an ACK timeout or a sequence NAK)
//   retry_exceeded_err           retry_cnt exhausted: the WQE completes with RETRY_EXC_ERR
//   retry_rnr_exceeded_err       rnr_retry exhausted: RNR_RETRY_EXC_ERR
//   rdma_sends / rdma_recvs      successful SEND completions on the send / receive side
//                                (rdma_recvs: every successful receive completion, as rxe)
// rxe's ack_deferred (its completer task rescheduled) has no meaning here; send_err belongs to
// the link (port/telemetry.cpp reports the link's tx_refused under that name); link_downed is
// not counted yet.
struct Counters {
  uint64_t sent_pkts = 0, rcvd_pkts = 0, duplicate_request = 0, out_of_seq_request = 0;
  uint64_t rcvd_rnr_err = 0, send_rnr_err = 0, rcvd_seq_err = 0;
  uint64_t retry_exceeded_err = 0, retry_rnr_exceeded_err = 0, completer_retry_err = 0;
  uint64_t rdma_sends = 0, rdma_recvs = 0;
  // uroce's own.
  uint64_t tx_bytes = 0, rx_bytes = 0;
  uint64_t retransmitted = 0, timeouts = 0;
  uint64_t other_naks_sent = 0, other_naks_rcvd = 0;
  uint64_t out_of_sequence = 0;
  uint64_t icrc_errors = 0, malformed = 0, dropped_not_for_us = 0, dropped_unknown_qp = 0;
  uint64_t dropped_bad_state = 0, dropped_pkey = 0;
  uint64_t acks_sent = 0, acks_rcvd = 0, implied_naks = 0;
  uint64_t stale_duplicates = 0;   // duplicate READ/atomic requests older than the saved state
  uint64_t bad_responses = 0;      // ACKs with a reserved AETH syndrome
  uint64_t reserved_opcode = 0;    // RC requests with a reserved opcode at the expected PSN (NAKed: invalid request)
  uint64_t ghost_responses = 0;    // responses that answer nothing outstanding (stale or forged)
  uint64_t dropped_source = 0;     // requests/responses from an address that is not the QP's peer
  uint64_t replayed_responses = 0; // READ response packets sent again for duplicate requests
  uint64_t dropped_qkey = 0;       // UD datagrams with the wrong Q_Key
  uint64_t dropped_no_recv = 0;    // UD datagrams / UC messages with no receive WQE posted
  uint64_t dropped_messages = 0;   // UC messages discarded (a gap, a bad key, a bad sequence)
  uint64_t loopback = 0;           // frames delivered to this device's own address internally
  uint64_t cnp_rcvd = 0;           // CNPs accepted (and given to the reaction point, if any)
  uint64_t cnp_sent = 0;           // CNPs sent for CE-marked frames
  uint64_t ecn_ce_rcvd = 0;        // frames received marked CE (ECN 3)
  // Loss recovery (requester; docs/reliability.md).
  uint64_t gap_restarts = 0;       // go-back-N restarts made for a sequence NAK or an implied NAK
  uint64_t naks_ignored = 0;       // sequence/implied NAKs for a gap whose resend could not have been answered yet, or stale (the responder has moved past their PSN)
  uint64_t probes = 0;             // tail-loss probes: one packet resent with AckReq before the QP timer
  uint64_t rtt_samples = 0;        // round-trip times measured
  // Selective repeat (docs/reliability.md).
  uint64_t sr_resends = 0;         // requester: packets resent selectively (one gap, not what follows it)
  uint64_t sr_held = 0;            // responder: WRITE (placed) and SEND (stored) packets kept ahead of the expected PSN
  // IBA 1.5 annex A19 (responder).
  uint64_t atomic_writes = 0;      // ATOMIC WRITEs placed (a repeated one is answered, not placed again)
  uint64_t flushes = 0;            // FLUSHes executed
  // Multicast (UD).
  uint64_t mcast_sent = 0;         // datagrams sent to a multicast group
  uint64_t mcast_rcvd = 0;         // group datagrams handed to an attached QP (each member counts its copy)
  uint64_t dropped_mcast = 0;      // group datagrams for a group no QP of this device is attached to
  // XRC (target QPs).
  uint64_t xrc_bad_srqn = 0;       // requests naming no XRC SRQ of the QP's domain (NAKed at the expected PSN: invalid request)

  void add(const Counters& o);
  void sub(const Counters& o);
  // "name=value" for every counter that is not zero, in declaration order ("(all zero)" if none).
  std::string text() const;
};

// Every counter's name and member, in declaration order (printing, telemetry).
struct CounterField {
  const char* name;
  uint64_t Counters::* member;
};
extern const CounterField kCounterFields[];
extern const size_t kCounterFieldCount;

}  // namespace uroce::engine
