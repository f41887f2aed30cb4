// The link fault model: what happens to one frame on a lossy link (dropped, corrupted, delayed,
// duplicated, held back behind later frames), decided by a seeded random generator. Pure code,
// no DPDK and no buffers: the test FakeLink (tests/support) and the DPDK port's fault stage
// (port/fault_stage.*, config keys fault_*) both ask FaultDice::decide() for each frame and
// then do what it says with their own buffers; how a link holds delayed or reordered frames
// is its own business. Same seed, same frames: same decisions.
#pragma once
#include <cstdint>
#include <random>

namespace uroce::engine {

// Probabilities are per frame, 0..1.
struct FaultConfig {
  double drop = 0;        // the frame is lost
  double duplicate = 0;   // the frame is delivered twice
  double reorder = 0;     // the frame is held back behind 1..reorder_window later ones
  uint32_t reorder_window = 4;
  double corrupt = 0;     // one random bit of the frame is flipped
  double delay = 0;       // the frame arrives min_delay_ns..max_delay_ns late (uniform)
  uint64_t min_delay_ns = 0;
  uint64_t max_delay_ns = 50'000;

  bool any() const { return drop > 0 || duplicate > 0 || reorder > 0 || corrupt > 0 || delay > 0; }
};

// What to do with one frame. When `drop` is set nothing else is.
struct FaultDecision {
  bool drop = false;
  bool corrupt = false;
  uint64_t corrupt_bit = 0;   // the bit to flip, counted from the start of the span the caller named
  bool delay = false;
  uint64_t delay_ns = 0;
  bool duplicate = false;
  bool reorder = false;
  uint32_t reorder_after = 0; // hold it until this many later frames have gone (1..reorder_window)
};

class FaultDice {
 public:
  explicit FaultDice(uint64_t seed = 1) : rng_(seed) {}
  void seed(uint64_t s) { rng_.seed(s); }

  // One frame. `corrupt_bits`: the size in bits of the part of the frame that may be corrupted
  // (0: none). `may_hold`: the link can hold one more frame back now (reordering needs it).
  // The draws are always made in the same order (drop, corrupt, delay, duplicate, reorder), and
  // a fault whose probability is 0 draws nothing, so adding a fault never changes the
  // decisions of the others that came before it.
  FaultDecision decide(const FaultConfig& f, uint64_t corrupt_bits, bool may_hold) {
    FaultDecision d;
    if (f.drop > 0 && chance() < f.drop) {
      d.drop = true;
      return d;
    }
    if (f.corrupt > 0 && chance() < f.corrupt && corrupt_bits > 0) {
      d.corrupt = true;
      d.corrupt_bit = rng_() % corrupt_bits;
    }
    if (f.delay > 0 && chance() < f.delay) {
      d.delay = true;
      const uint64_t lo = f.min_delay_ns, hi = f.max_delay_ns > lo ? f.max_delay_ns : lo;
      d.delay_ns = lo + rng_() % (hi - lo + 1);
    }
    if (f.duplicate > 0 && chance() < f.duplicate) d.duplicate = true;
    if (f.reorder > 0 && chance() < f.reorder && may_hold) {
      d.reorder = true;
      d.reorder_after = 1 + uint32_t(rng_() % (f.reorder_window ? f.reorder_window : 1));
    }
    return d;
  }

 private:
  double chance() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  std::mt19937_64 rng_;
};

}  // namespace uroce::engine
