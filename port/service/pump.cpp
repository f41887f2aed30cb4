// Pump (port/service/pump.hpp): the moves of frames and buffers between the port and the
// processes' rings.
#include "port/service/pump.hpp"

#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_ring.h>
#include <rte_ring_peek.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "port/service/route.hpp"

namespace uroce::port::service {

uint64_t monotonic_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1'000'000'000u + uint64_t(t.tv_nsec);
}

void ring_doorbell(int fd) {
  const uint64_t one = 1;
  if (fd >= 0) (void)!::write(fd, &one, sizeof one);
}

SlotRingNames slot_ring_names(uint32_t i) {
  const std::string n = std::to_string(i);
  return {"urx" + n, "utx" + n, "ufl" + n, "ufr" + n};
}

// ---- Marks: whose hands a buffer is in ---------------------------------------------------------

namespace {
int g_mark_offset = -1;  // the field's offset in an mbuf (the same in every process of the device)

uint32_t* mark_field(const void* m) {
  return RTE_MBUF_DYNFIELD(static_cast<const rte_mbuf*>(m), g_mark_offset, uint32_t*);
}
rte_mbuf_dynfield mark_desc() {
  rte_mbuf_dynfield d{};
  std::strncpy(d.name, kLentField, sizeof d.name - 1);
  d.size = sizeof(uint32_t);
  d.align = alignof(uint32_t);
  return d;
}
}  // namespace

bool Pump::register_marks(rte_mempool* pool, std::string& err) {
  const rte_mbuf_dynfield desc = mark_desc();
  g_mark_offset = rte_mbuf_dynfield_register(&desc);
  if (g_mark_offset < 0) {
    err = std::string("rte_mbuf_dynfield_register(") + kLentField + "): " + rte_strerror(rte_errno);
    return false;
  }
  rte_mempool_obj_iter(pool, [](rte_mempool*, void*, void* obj, unsigned) { *mark_field(obj) = 0; }, nullptr);
  return true;
}

bool Pump::find_marks() {
  g_mark_offset = rte_mbuf_dynfield_lookup(kLentField, nullptr);
  return g_mark_offset >= 0;
}

void Pump::mark(void* const* ms, size_t n, uint32_t who) {
  for (size_t i = 0; i < n; ++i) *mark_field(ms[i]) = who;
}

uint32_t Pump::mark_of(const void* m) { return *mark_field(m); }

// Walks every object of the pool (a few ms for param::kMbufs): what the dead slot held is
// marked, whatever it was doing with it.
size_t Pump::reclaim(uint32_t i) {
  struct Walk {
    uint32_t who;
    size_t n = 0, k = 0;
    rte_mbuf* batch[param::kServiceBurst] = {};
    void flush() {
      rte_pktmbuf_free_bulk(batch, unsigned(k));
      k = 0;
    }
  } w;
  w.who = i + 1;
  rte_mempool_obj_iter(
      pool_,
      [](rte_mempool*, void* ctx, void* obj, unsigned) {
        Walk& w = *static_cast<Walk*>(ctx);
        if (*mark_field(obj) != w.who) return;
        *mark_field(obj) = 0;
        w.batch[w.k++] = static_cast<rte_mbuf*>(obj);
        ++w.n;
        if (w.k == param::kServiceBurst) w.flush();
      },
      &w);
  w.flush();
  return w.n;
}

// ---- The port ---------------------------------------------------------------------------------

bool Pump::try_take(uint32_t who) {
  uint32_t free_now = 0;
  if (sh_->holder.load(std::memory_order_relaxed) != 0) return false;
  return sh_->holder.compare_exchange_strong(free_now, who, std::memory_order_acquire, std::memory_order_relaxed);
}

// Only a holder gives back (nobody takes the port from a live one), so a plain store will do.
void Pump::give_back(uint32_t who) {
  if (sh_->holder.load(std::memory_order_relaxed) == who) sh_->holder.store(0, std::memory_order_release);
}

uint64_t PumpShared::members(const uint8_t* gid) const {
  for (const GroupEntry& e : groups) {
    const uint64_t m = e.members.load(std::memory_order_acquire);
    if (m && std::memcmp(e.gid, gid, 16) == 0) return m;
  }
  return 0;
}

uint64_t Pump::group_members(const void* mp, int except) const {
  const rte_mbuf* m = static_cast<const rte_mbuf*>(mp);
  if (m->data_len < 6 || !(rte_pktmbuf_mtod(m, const uint8_t*)[0] & 1)) return 0;  // not to a group MAC
  const Route r = route_frame({rte_pktmbuf_mtod(m, const uint8_t*), m->data_len});
  if (r.by != Route::By::Group) return 0;
  uint64_t members = sh_->members(r.group.data()) & sh_->live.load(std::memory_order_relaxed);
  if (except >= 0) members &= ~(uint64_t(1) << except);
  return members;
}

void* Pump::copy_for(const void* m, uint32_t slot, Counts& c) {
  rte_mbuf* copy = rte_pktmbuf_copy(static_cast<const rte_mbuf*>(m), pool_, 0, UINT32_MAX);
  if (!copy) {
    ++c.ring_full;  // no buffer for it: a datagram lost, as on a wire
    return nullptr;
  }
  void* cp = copy;
  mark(&cp, 1, slot + 1);
  return cp;
}

void Pump::give(uint32_t slot, void* cp, Counts& c) {
  if (rte_ring_sp_enqueue(slots_[slot].rx, cp) != 0) {
    mark(&cp, 1, 0);
    rte_pktmbuf_free(static_cast<rte_mbuf*>(cp));
    ++c.ring_full;
    return;
  }
  ++c.delivered;
  ++in_[slot];
}

int Pump::to_members(void* m, Counts& c) {
  uint64_t members = group_members(m, kNobody);
  if (!members) return kNobody;
  const int last = 63 - __builtin_clzll(members);  // the original is for this one
  members &= ~(uint64_t(1) << last);
  for (; members; members &= members - 1) {
    const uint32_t s = uint32_t(__builtin_ctzll(members));
    if (void* cp = copy_for(m, s, c)) give(s, cp, c);
  }
  return last;
}

void Pump::deliver(void** ms, size_t n, const OwnerFn& owner_of, Counts& c, Mine self) {
  int owner[param::kLinkBurst];
  while (n > param::kLinkBurst) {  // in bursts of the link's size
    deliver(ms, param::kLinkBurst, owner_of, c, self);
    ms += param::kLinkBurst;
    n -= param::kLinkBurst;
  }
  for (size_t i = 0; i < n; ++i) {
    const rte_mbuf* m = static_cast<const rte_mbuf*>(ms[i]);
    owner[i] = owner_of(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len);
    if (owner[i] == kGroup) owner[i] = to_members(ms[i], c);  // a copy each, the original to the last member
    *mark_field(m) = owner[i] >= 0 ? uint32_t(owner[i]) + 1 : 0;  // before the ring: the owner may take it at once
  }
  for (size_t i = 0, j; i < n; i = j) {
    for (j = i + 1; j < n && owner[j] == owner[i];) ++j;  // the run of frames for one owner
    unsigned run = unsigned(j - i);
    unsigned put = 0;
    if (owner[i] == self.slot && self.mine && *self.got < self.cap) {
      const unsigned k = unsigned(std::min<size_t>(run, self.cap - *self.got));
      std::memcpy(self.mine + *self.got, ms + i, k * sizeof(void*));
      *self.got += k;
      c.delivered += k;
      in_[uint32_t(self.slot)] += k;
      if (k == run) continue;
      i += k;  // the rest of the run behind them, in the ring
      run -= k;
    }
    if (owner[i] == kNobody) {
      c.no_owner += run;
    } else {
      rte_ring* r = owner[i] == kDaemon ? to_daemon_ : slots_[uint32_t(owner[i])].rx;
      unsigned room = run;
      if (owner[i] >= 0) {  // a process holds at most its share in its rx ring (PumpShared::rx_cap)
        const unsigned cap = sh_->rx_cap(), held = rte_ring_count(r);
        room = std::min(run, cap > held ? cap - held : 0u);
      }
      put = rte_ring_sp_enqueue_burst(r, ms + i, room, nullptr);
      (owner[i] == kDaemon ? c.to_daemon : c.delivered) += put;
      if (owner[i] >= 0) in_[uint32_t(owner[i])] += put;
      if (owner[i] == kDaemon && put) rang_ = true;
      c.ring_full += run - put;
    }
    if (put < run) {
      mark(ms + i + put, run - put, 0);
      rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(ms + i + put), run - put);
    }
  }
}

size_t Pump::move_tx(uint32_t i, const uint8_t* dev_mac, const WireFn& wire, const OwnerFn& owner, Counts& c,
                     uint64_t* looped) {
  size_t moved = 0;
  for (uint32_t k = 0; k < param::kServiceTxBursts; ++k) {
    const size_t n = move_tx_burst(i, dev_mac, wire, owner, c, looped);
    moved += n;
    if (n < param::kServiceBurst) break;
  }
  return moved;
}

size_t Pump::move_tx_burst(uint32_t i, const uint8_t* dev_mac, const WireFn& wire, const OwnerFn& owner, Counts& c,
                           uint64_t* looped) {
  void* ms[param::kServiceBurst];
  rte_ring* r = slots_[i].tx;
  const unsigned n = rte_ring_dequeue_burst_start(r, ms, param::kServiceBurst, nullptr);
  if (!n) return 0;
  const size_t done = out(int(i), ms, n, dev_mac, wire, owner, c, looped);
  rte_ring_dequeue_finish(r, unsigned(done));
  return done;
}

size_t Pump::out(int from, void** ms, size_t n, const uint8_t* dev_mac, const WireFn& wire, const OwnerFn& owner,
                 Counts& c, uint64_t* looped) {
  auto to_self = [&](size_t k) {
    const rte_mbuf* m = static_cast<const rte_mbuf*>(ms[k]);
    return m->data_len >= 6 && std::memcmp(rte_pktmbuf_mtod(m, const uint8_t*), dev_mac, 6) == 0;
  };
  // Runs of frames to the wire and to this device, in order; a run the wire takes only part of
  // ends the pass, and what it left is still the ring's.
  size_t done = 0;
  while (done < n) {
    const bool self = to_self(done);
    size_t end = done + 1;
    while (end < n && to_self(end) == self) ++end;
    if (self) {
      deliver(ms + done, end - done, owner, c);
      if (looped) *looped += end - done;
      done = end;
      continue;
    }
    // A multicast datagram also goes to the group's other member processes on this device (the
    // sender's own members had their copy inside the sender): copied before the port has it (it
    // may free it within `wire`), handed over once the port took it (one it refuses comes again).
    const size_t run = end - done;
    struct Copy {
      size_t k;
      uint32_t slot;
      void* m;
    };
    Copy copies[param::kServiceBurst];
    size_t nc = 0;
    for (size_t k = done; k < end; ++k)
      for (uint64_t mm = group_members(ms[k], from); mm; mm &= mm - 1) {
        const uint32_t s = uint32_t(__builtin_ctzll(mm));
        void* cp = nc < param::kServiceBurst ? copy_for(ms[k], s, c) : nullptr;
        if (cp) copies[nc++] = {k, s, cp};
        else if (nc >= param::kServiceBurst) ++c.ring_full;
      }
    // The port's from here (it may free them within `wire`); what it does not take is given back
    // its mark.
    const uint32_t was = mark_of(ms[done]);
    mark(ms + done, run, 0);
    const size_t took = wire(ms + done, run);
    if (took < run) mark(ms + done + took, run - took, was);
    for (size_t j = 0; j < nc; ++j) {
      if (copies[j].k < done + took) {
        give(copies[j].slot, copies[j].m, c);
      } else {
        mark(&copies[j].m, 1, 0);
        rte_pktmbuf_free(static_cast<rte_mbuf*>(copies[j].m));
      }
    }
    done += took;
    if (took < run) break;
  }
  return done;
}

void Pump::refill(uint32_t i) {
  SlotRings& s = slots_[i];
  void* ms[param::kServiceBurst];
  const uint32_t target = sh_->fill_target();
  if (rte_ring_count(s.free) < param::kServiceBurst && rte_ring_count(s.fill) > target / 2) return;
  for (unsigned k = 0; k < param::kServiceFill / param::kServiceBurst; ++k) {
    const unsigned done = rte_ring_sc_dequeue_burst(s.free, ms, param::kServiceBurst, nullptr);
    if (!done) break;
    mark(ms, done, 0);
    rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(ms), done);
  }
  while (rte_ring_count(s.fill) + param::kServiceBurst <= target) {
    if (rte_pktmbuf_alloc_bulk(pool_, reinterpret_cast<rte_mbuf**>(ms), param::kServiceBurst) != 0) {
      sh_->fill_short.fetch_add(1, std::memory_order_relaxed);  // the pool is empty
      return;
    }
    mark(ms, param::kServiceBurst, i + 1);
    const unsigned put = rte_ring_sp_enqueue_burst(s.fill, ms, param::kServiceBurst, nullptr);
    if (put < param::kServiceBurst) {
      mark(ms + put, param::kServiceBurst - put, 0);
      rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(ms) + put, param::kServiceBurst - put);
      return;
    }
  }
}

void Pump::drain(uint32_t i) {
  SlotRings& s = slots_[i];
  in_[i] = 0;
  void* ms[param::kServiceBurst];
  for (rte_ring* r : {s.rx, s.tx, s.fill, s.free}) {
    unsigned n;
    while ((n = rte_ring_sc_dequeue_burst(r, ms, param::kServiceBurst, nullptr)) != 0) {
      mark(ms, n, 0);
      rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(ms), n);
    }
    rte_ring_reset(r);  // a process killed inside an enqueue leaves its ring half-moved
  }
}

namespace {
// A ring a dead process was moving (as producer or consumer) when it died: the move it began is
// undone (what it had reserved stays where it was; buffers it was putting in are lost). Only
// while nobody else can touch the ring: everything that moves buffers holds the port.
void repair_ring(rte_ring* r) {
  if (!r) return;
  if (r->prod.sync_type == RTE_RING_SYNC_ST || r->prod.sync_type == RTE_RING_SYNC_MT) r->prod.head = r->prod.tail;
  if (r->cons.sync_type == RTE_RING_SYNC_ST || r->cons.sync_type == RTE_RING_SYNC_MT) r->cons.head = r->cons.tail;
}
}  // namespace

void Pump::repair() {
  for (SlotRings& s : slots_)
    for (rte_ring* r : {s.rx, s.tx, s.fill, s.free}) repair_ring(r);
  repair_ring(to_daemon_);
  if (std::strncmp(rte_mempool_get_ops(pool_->ops_index)->name, "ring_", 5) == 0)
    repair_ring(static_cast<rte_ring*>(pool_->pool_data));
}

void Pump::flush_cache(uint32_t lcore) {
  if (lcore >= RTE_MAX_LCORE) return;
  if (rte_mempool_cache* c = rte_mempool_default_cache(pool_, lcore)) rte_mempool_cache_flush(c, pool_);
}

}  // namespace uroce::port::service
