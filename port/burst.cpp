// The link's data path: alloc (transmit mbufs taken from the pool in bulk), send (the tx ring,
// then the software backlog), recv (the rx burst, then the classifier), and their hooks: the
// capture of frames in and out, the fault stage per direction, and the control plane's
// answers (tx_one).
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>

#include <algorithm>
#include <cstring>

#include "port/dpdk_link_impl.hpp"
#include "proto/ecn.hpp"
#include "proto/locate.hpp"

namespace uroce::port {

using detail::kBurst;
using detail::kMinFrame;
using detail::lend;
using detail::M;

namespace {
// Sets the mbuf's lengths for the engine's frame, padded with zeros to the Ethernet minimum
// (without FCS); returns the length on the wire.
uint32_t finish_frame(engine::PacketBuf& b) {
  uint32_t len = b.len;
  if (len < kMinFrame) {
    std::memset(b.data + len, 0, kMinFrame - len);
    len = kMinFrame;
  }
  M(b.handle)->data_len = uint16_t(len);
  M(b.handle)->pkt_len = len;
  return len;
}
}  // namespace

bool DpdkLink::alloc(engine::PacketBuf& b, uint32_t len) {
  if (tx_backed_up()) [[unlikely]] {
    ++ctr_.tx_full;  // back-pressure (port/param.hpp kTxBacklogHigh)
    return false;
  }
  if (stash_n_ == 0) {
    if (rte_pktmbuf_alloc_bulk(static_cast<rte_mempool*>(pool_), reinterpret_cast<rte_mbuf**>(stash_), param::kTxStash) == 0) {
      stash_n_ = param::kTxStash;
    } else if (rte_mbuf* one = rte_pktmbuf_alloc(static_cast<rte_mempool*>(pool_))) {
      stash_[0] = one;
      stash_n_ = 1;
    } else {
      ++ctr_.alloc_failed;
      return false;
    }
  }
  rte_mbuf* m = M(stash_[--stash_n_]);
  if (lend(m, len, b)) return true;
  rte_pktmbuf_free(m);
  return false;
}

bool DpdkLink::tx_backed_up() {
  return bl_n_ >= param::kTxBacklogHigh && !drain_backlog() && bl_n_ >= param::kTxBacklogHigh;
}

// Sends what the backlog holds; true when it is empty.
bool DpdkLink::drain_backlog() {
  while (bl_n_) {
    const uint32_t k = std::min<uint32_t>(bl_n_, std::min<uint32_t>(kBurst, kBacklog - bl_head_));
    const uint16_t sent =
        rte_eth_tx_burst(port_, 0, reinterpret_cast<rte_mbuf**>(backlog_.data() + bl_head_), uint16_t(k));
    ctr_.tx_frames += sent;
    bl_head_ = (bl_head_ + sent) % kBacklog;
    bl_n_ -= sent;
    if (sent < k) return false;
  }
  return true;
}

size_t DpdkLink::send(engine::PacketBuf* bufs, size_t n) {
  if (tx_fault_.on() || cfg_.bottleneck.on()) return send_with_faults(bufs, n);
  rte_mbuf* ms[kBurst];
  size_t total = 0;
  const bool clear = drain_backlog();
  while (total < n) {
    const size_t k = std::min<size_t>(n - total, kBurst);
    for (size_t i = 0; i < k; ++i) {
      engine::PacketBuf& b = bufs[total + i];
      rte_mbuf* m = M(b.handle);
      const uint32_t len = finish_frame(b);
      ms[i] = m;
      if (cap_.on()) capture(b.data, len, Capture::Dir::Out);
    }
    const uint16_t sent = clear ? rte_eth_tx_burst(port_, 0, ms, uint16_t(k)) : 0;
    ctr_.tx_frames += sent;
    total += sent;
    if (sent < k) {
      // The ring is full: keep the rest in the backlog while it has room.
      size_t i = sent;
      for (; i < k && bl_n_ < kBacklog; ++i) backlog_[(bl_head_ + bl_n_++) % kBacklog] = ms[i];
      total += i - sent;
      if (i < k) {
        ctr_.tx_refused += n - total;
        break;
      }
      if (total < n) {
        // Everything after this goes behind the backlog too.
        for (size_t j = total; j < n && bl_n_ < kBacklog; ++j, ++total) {
          engine::PacketBuf& b = bufs[j];
          rte_mbuf* m = M(b.handle);
          const uint32_t len = finish_frame(b);
          backlog_[(bl_head_ + bl_n_++) % kBacklog] = m;
          if (cap_.on()) capture(b.data, len, Capture::Dir::Out);
        }
        if (total < n) ctr_.tx_refused += n - total;
        break;
      }
    }
  }
  if (cap_.on()) cap_.maybe_flush();
  return total;
}

void DpdkLink::release(engine::PacketBuf& b) {
  if (b.handle) rte_pktmbuf_free(M(b.handle));
  b.handle = nullptr;
}

size_t DpdkLink::recv(engine::PacketBuf* bufs, size_t max) {
  rte_mbuf* ms[kBurst];
  size_t k = 0;
  if (bl_n_) drain_backlog();
  if (tx_fault_.holding()) release_tx_held();
  if (!bn_q_.empty()) release_bottleneck();
  const size_t want = std::min<size_t>(max, kBurst);
  // Frames the receive fault stage held back and that are due now come first (they were
  // captured and decided on when they arrived).
  size_t first = 0;
  if (rx_fault_.holding()) first = rx_fault_.release(clock_.now_ns(), reinterpret_cast<void**>(ms), want);
  const uint16_t fresh = first < want ? rte_eth_rx_burst(port_, 0, ms + first, uint16_t(want - first)) : 0;
  ctr_.rx_frames += fresh;
  if (cap_.on()) {
    for (size_t i = first; i < first + fresh; ++i) capture(rte_pktmbuf_mtod(ms[i], uint8_t*), ms[i]->data_len, Capture::Dir::In);
    cap_.maybe_flush();
  }
  size_t n = first + fresh;
  if (rx_fault_.on() && fresh) n = rx_faults(reinterpret_cast<void**>(ms), fresh, first, want);
  if (n) ctl_.set_time_ms(now_ms());  // the neighbour cache's clock
  for (size_t i = 0; i < n; ++i) {
    if (i + 1 < n) rte_prefetch0(rte_pktmbuf_mtod(ms[i + 1], void*));
    classify(ms[i], bufs, k);
  }
  return k;
}

size_t DpdkLink::take_received(void** ms, size_t n, engine::PacketBuf* out) {
  size_t k = 0;
  if (n) ctl_.set_time_ms(now_ms());
  for (size_t i = 0; i < n; ++i) classify(ms[i], out, k);
  return k;
}

// ---- Capture and fault injection -----------------------------------------------------------------
void DpdkLink::capture(const uint8_t* f, uint32_t len, Capture::Dir dir) {
  if (!cap_all_ && !proto::locate({f, len}).roce_v2()) return;
  cap_.write(f, len, dir, note_);
  note_.clear();
  ctr_.capture_frames = cap_.written();
  ctr_.capture_skipped = cap_.skipped();
}

void DpdkLink::note(std::string_view text) {
  if (note_.size() >= param::kCaptureNoteMax) return;  // the frame's comment is full: cut here
  if (!note_.empty()) note_ += "; ";
  note_.append(text.substr(0, param::kCaptureNoteMax - std::min<size_t>(note_.size(), param::kCaptureNoteMax)));
}

// The receive fault stage on the `fresh` frames at ms[first..]: drops, corrupts, duplicates
// and holds back as the stage decides. The frames that go on now are left at ms[first..] in
// order (at most `cap` in all); returns how many frames ms holds.
size_t DpdkLink::rx_faults(void** ms, size_t fresh, size_t first, size_t cap) {
  void* in[kBurst];
  std::memcpy(in, ms + first, fresh * sizeof(void*));
  size_t out = first;
  const uint64_t now = clock_.now_ns();
  for (size_t i = 0; i < fresh; ++i) {
    rte_mbuf* m = M(in[i]);
    const engine::FaultDecision d = rx_fault_.decide(rte_pktmbuf_mtod(m, uint8_t*), m->data_len);
    if (d.drop) {
      rte_pktmbuf_free(m);
      continue;
    }
    // The copy of a duplicated frame goes on now, if the burst has room for it and everything
    // after it.
    if (d.duplicate && out + (fresh - i) < cap)
      if (rte_mbuf* c = rte_pktmbuf_copy(m, static_cast<rte_mempool*>(pool_), 0, UINT32_MAX)) {
        ms[out++] = c;
        rx_fault_.count_duplicate();
      }
    if ((d.delay || d.reorder) && rx_fault_.hold(m, d, now)) continue;
    ms[out++] = m;
    rx_fault_.passed();
  }
  ctr_.rx_fault = rx_fault_.counts();
  return out;
}

// send() with a transmit fault stage or a congestion point (keys fault_tx_*, bottleneck_*): each
// frame is dropped, corrupted, duplicated, held back or sent as the fault stage decides, then
// goes through the congestion point (egress: queued, marked or dropped there). Everything to
// send goes behind the backlog (so a held frame released later keeps its place); takes as many
// frames as the backlog has room for.
size_t DpdkLink::send_with_faults(engine::PacketBuf* bufs, size_t n) {
  drain_backlog();
  release_tx_held();
  release_bottleneck();
  const uint64_t now = clock_.now_ns();
  size_t taken = 0;
  for (; taken < n && kBacklog - bl_n_ >= 2; ++taken) {  // room for the frame and a copy
    engine::PacketBuf& b = bufs[taken];
    rte_mbuf* m = M(b.handle);
    const uint32_t len = finish_frame(b);
    const engine::FaultDecision d = tx_fault_.decide(b.data, len);
    if (d.drop) {
      rte_pktmbuf_free(m);
      continue;
    }
    if (d.duplicate)
      if (rte_mbuf* c = rte_pktmbuf_copy(m, static_cast<rte_mempool*>(pool_), 0, UINT32_MAX)) {
        egress(c, now);
        tx_fault_.count_duplicate();
      }
    if ((d.delay || d.reorder) && tx_fault_.hold(m, d, now)) continue;
    egress(m, now);
    tx_fault_.passed();
    release_tx_held();  // reordered frames whose turn has come
  }
  drain_backlog();
  ctr_.tx_fault = tx_fault_.counts();
  if (cap_.on()) cap_.maybe_flush();
  return taken;
}

void DpdkLink::to_wire(void* mp) {
  rte_mbuf* m = M(mp);
  if (cap_.on()) capture(rte_pktmbuf_mtod(m, uint8_t*), m->data_len, Capture::Dir::Out);
  backlog_[(bl_head_ + bl_n_++) % kBacklog] = m;
}

// Held transmit frames that are due go behind the backlog (as many as it has room for).
void DpdkLink::release_tx_held() {
  void* out[kBurst];
  const size_t room = std::min<size_t>(kBacklog - bl_n_, kBurst);
  const uint64_t now = clock_.now_ns();
  const size_t n = tx_fault_.release(now, out, room);
  for (size_t i = 0; i < n; ++i) egress(out[i], now);
  if (n) drain_backlog();
}

void DpdkLink::egress(void* mp, uint64_t now) {
  if (!cfg_.bottleneck.on()) return to_wire(mp);
  rte_mbuf* m = M(mp);
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  const uint32_t len = m->data_len;
  const int ecn = proto::ecn_of({f, len});
  // More frames than the pool should lend it: dropped as if the queue were full.
  const engine::BottleneckVerdict v = bn_q_.size() < param::kBottleneckHold
                                          ? bn_.admit(cfg_.bottleneck, now, len, ecn == 1 || ecn == 2)
                                          : engine::BottleneckVerdict{true, false, 0, 0};
  if (v.drop) {
    ++ctr_.bottleneck_dropped;
    if (bn_log_.on && bn_log_.drops.size() < param::kBottleneckLogMax) bn_log_.drops.push_back(now);
    rte_pktmbuf_free(m);
    return;
  }
  if (bn_log_.on && bn_log_.queue.size() < param::kBottleneckLogMax) bn_log_.queue.emplace_back(now, v.queue_bytes);
  if (v.mark && proto::mark_ce({f, len}) == proto::CeMark::Marked) ++ctr_.bottleneck_marked;
  ++ctr_.bottleneck_frames;
  ctr_.bottleneck_max_queue = std::max<uint64_t>(ctr_.bottleneck_max_queue, uint64_t(v.queue_bytes) + len);
  bn_q_.push_back({m, v.depart_ns});
}

// The frames whose departure time has come go to the wire, in order.
void DpdkLink::release_bottleneck() {
  if (bn_q_.empty()) return;
  const uint64_t now = clock_.now_ns();
  size_t n = 0;
  while (!bn_q_.empty() && bn_q_.front().depart_ns <= now && bl_n_ < kBacklog) {
    to_wire(bn_q_.front().m);
    bn_q_.pop_front();
    ++n;
  }
  if (n) drain_backlog();
}


// The neighbour cache's clock (here, next to recv(), which sets it once per burst).
uint64_t DpdkLink::now_ms() const { return rte_get_tsc_cycles() / (rte_get_tsc_hz() / 1000); }

// Sorts one received frame (ControlPlane::sort): RoCEv2 for us goes to out[k++]; ARP, ND and
// echo requests are answered (the mbuf is reused for the reply); everything else is counted
// and freed.
void DpdkLink::classify(void* mp, engine::PacketBuf* out, size_t& k) {
  rte_mbuf* m = M(mp);
  if (m->nb_segs != 1) {
    ++ctr_.drop_multiseg;
    rte_pktmbuf_free(m);
    return;
  }
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  const uint32_t len = m->data_len;
  const Verdict v = ctl_.sort(f, len, uint32_t(m->buf_len - m->data_off));
  if (v.kind == Verdict::Deliver) [[likely]] {
    engine::PacketBuf& b = out[k++];
    b.data = f, b.len = len, b.cap = len, b.handle = m;
    return;
  }
  if (v.kind == Verdict::Reply) {
    m->data_len = uint16_t(v.len);
    m->pkt_len = v.len;
    if (tx_one(m)) {
      ++*v.sent;
      return;
    }
  }
  rte_pktmbuf_free(m);
}

bool DpdkLink::tx_one(void* mp) {
  rte_mbuf* m = M(mp);
  if (m->data_len < kMinFrame) {
    std::memset(rte_pktmbuf_mtod(m, uint8_t*) + m->data_len, 0, kMinFrame - m->data_len);
    m->data_len = uint16_t(kMinFrame);
    m->pkt_len = kMinFrame;
  }
  if (cap_all_) capture(rte_pktmbuf_mtod(m, uint8_t*), m->data_len, Capture::Dir::Out);
  if (rte_eth_tx_burst(port_, 0, &m, 1) == 1) {
    ++ctr_.tx_frames;
    return true;
  }
  ++ctr_.tx_refused;
  return false;  // the caller frees it
}

}  // namespace uroce::port
