// A fixed-capacity hash map from a nonzero 32-bit id (a memory key, a QP number) to a value:
// open addressing with linear probing and backward-shift deletion, sized at construction
// (no allocation afterwards). Ids are random (security: unguessable keys and QPNs), so a
// multiplicative hash spreads them well. The table is an anonymous mapping of its own (mmap),
// whose zero pages the system maps lazily: a table sized for 262,144 QPs (8 MiB) costs resident
// memory only where entries have been (issue 30). Not calloc: once a large block has been freed,
// glibc raises its mmap threshold and serves the next from the heap, zeroing all of it (8 MiB
// written per table, each time a device is made).
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

namespace uroce::engine {

template <typename V>
class IdMap {
 public:
  // Room for at least `max` ids; the table is kept at most half full.
  explicit IdMap(uint32_t max) {
    uint32_t cap = 2;
    while (cap < 2 * max) cap *= 2;
    const size_t bytes = size_t(cap) * sizeof(Slot);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    slots_ = std::unique_ptr<Slot[], Unmap>(static_cast<Slot*>(p), Unmap{bytes});
    cap_ = cap;
    mask_ = cap - 1;
  }
  // False if the id is 0, present, or the map is full.
  bool insert(uint32_t id, V v) {
    if (id == 0 || size_ * 2 >= cap_) return false;
    for (uint32_t i = home(id);; i = (i + 1) & mask_) {
      if (slots_[i].id == id) return false;
      if (slots_[i].id == 0) {
        slots_[i] = {id, v};
        ++size_;
        return true;
      }
    }
  }
  // The value for `id`, or nullptr.
  const V* find(uint32_t id) const {
    if (id == 0) return nullptr;
    for (uint32_t i = home(id);; i = (i + 1) & mask_) {
      if (slots_[i].id == id) return &slots_[i].v;
      if (slots_[i].id == 0) return nullptr;
    }
  }
  bool erase(uint32_t id) {
    if (id == 0) return false;
    uint32_t i = home(id);
    while (slots_[i].id != id) {
      if (slots_[i].id == 0) return false;
      i = (i + 1) & mask_;
    }
    // Backward shift: move later entries of the probe run into the hole.
    for (uint32_t j = (i + 1) & mask_; slots_[j].id != 0; j = (j + 1) & mask_) {
      const uint32_t h = home(slots_[j].id);
      // Entry j may move to i if its home is not in (i, j] (cyclically).
      if (((j - h) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = {};
    --size_;
    return true;
  }
  uint32_t size() const { return size_; }

 private:
  struct Slot {  // all zero bytes: empty
    uint32_t id;
    V v;
  };
  static_assert(std::is_trivially_copyable_v<Slot>);
  struct Unmap {
    size_t bytes = 0;
    void operator()(Slot* p) const { munmap(p, bytes); }
  };
  uint32_t home(uint32_t id) const { return uint32_t((uint64_t(id) * 0x9E3779B97F4A7C15ull) >> 32) & mask_; }
  std::unique_ptr<Slot[], Unmap> slots_;
  uint32_t cap_ = 0;
  uint32_t mask_ = 0;
  uint32_t size_ = 0;
};

}  // namespace uroce::engine
