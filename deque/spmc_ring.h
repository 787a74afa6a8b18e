// deque/spmc_ring.h: a bounded single-producer multi-consumer FIFO ring: a worker's run queue.
// The owner pushes at the tail; anyone, the owner included, takes the oldest item at the head,
// one at a time or half of them at once, with one CAS either way. Header-only; its atomics are
// weft::atomic (base/atomic.h), which is std::atomic outside model builds.
//
// Defines: weft::SpmcRing<T, kCapacity>.
//
// Algorithm: the local run queue of Go's scheduler (D. Vyukov, "Scalable Go Scheduler Design
// Doc", 2012; runqput / runqget / runqgrab in Go's runtime/proc.go): a power-of-two ring with a
// head that consumers advance with a CAS and a tail that only the owner writes. A batch is
// claimed by one CAS of the head over all of it: the owner never takes from the tail end (unlike
// a Chase-Lev deque's pop), so a successful CAS proves that nobody else took any item of the
// batch, and the owner cannot overwrite a slot until the head has moved past it. When it is
// full, the owner moves half of it elsewhere (Go's runqputslow); the ring itself never grows.
//
// Compared with ChaseLevDeque (deque/chase_lev.h) used as a FIFO: a take is one CAS instead of a
// fence, a CAS and two read-modify-writes of the thief count (which guard a growable buffer's
// reclamation), and half of the queue moves with one CAS instead of one steal per item.
//
// Counters are 32-bit and wrap; every comparison is on differences, which stay below kCapacity
// for consistent reads (an inconsistent pair of reads is detected and retried).

#ifndef WEFT_DEQUE_SPMC_RING_H_
#define WEFT_DEQUE_SPMC_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "weft/base/atomic.h"

namespace weft {

template <typename T, std::size_t kCapacity = 256>
class SpmcRing {
  static_assert(kCapacity >= 2 && (kCapacity & (kCapacity - 1)) == 0,
                "SpmcRing capacity must be a power of two");
  static_assert(kCapacity <= (std::size_t{1} << 30), "SpmcRing capacity too large");
  static_assert(std::is_trivially_copyable_v<T>, "SpmcRing holds trivially copyable values");
  static_assert(std::atomic<T>::is_always_lock_free, "SpmcRing needs lock-free atomic<T>");

 public:
  SpmcRing() = default;
  SpmcRing(const SpmcRing&) = delete;
  SpmcRing& operator=(const SpmcRing&) = delete;

  static constexpr std::size_t capacity() { return kCapacity; }

  // push: owner only. False when full (the item is not taken): the owner then moves items
  // elsewhere (take_half) and pushes again.
  bool push(T item) {
    // acquire: pairs with the consumers' release CAS of head_: their reads of the slots they
    // took happen before we overwrite those slots one lap later.
    std::uint32_t h = head_.load(std::memory_order_acquire);
    // relaxed: only the owner writes tail_.
    std::uint32_t t = tail_.load(std::memory_order_relaxed);
    if (t - h >= kCapacity) return false;
    // relaxed: published by the release store of tail_ below.
    slots_[t & kMask].store(item, std::memory_order_relaxed);
    // release: a consumer that acquires the new tail_ sees the slot (and what the owner did to
    // the item before queueing it).
    tail_.store(t + 1, std::memory_order_release);
    return true;
  }

  // pop: any thread. The oldest item into *out; false when empty.
  bool pop(T* out) {
    // acquire (both loads, and the CAS's failure order): a fresh head_ comes with the slot reads
    // of the consumer that moved it; tail_ pairs with push's release, making the slot visible.
    std::uint32_t h = head_.load(std::memory_order_acquire);
    for (;;) {
      std::uint32_t t = tail_.load(std::memory_order_acquire);
      if (t == h) return false;
      // relaxed: the slot was published by the tail_ we acquired. If h is stale, the owner may be
      // rewriting this slot; the CAS below then fails and the value is dropped.
      T item = slots_[h & kMask].load(std::memory_order_relaxed);
      // release: our slot read happens before the owner's next write of it (see push).
      if (head_.compare_exchange_weak(h, h + 1, std::memory_order_release,
                                      std::memory_order_acquire)) {
        *out = item;
        return true;
      }
    }
  }

  // take_half: any thread. Claims the oldest half of the items (rounded up; at most `max`) and
  // stores them, oldest first, to out[0..k); returns k (0 when empty). One CAS for the batch.
  std::size_t take_half(T* out, std::size_t max) {
    return Grab(max, [out](std::size_t i, T item) { out[i] = item; });
  }

  // steal_half: the owner of `into` (it writes `into`'s tail), taking from this ring, which
  // another thread owns. Moves the oldest half of this ring's items (rounded up; no more than
  // `into` has room for) to `into`'s tail, in order; returns how many moved.
  std::size_t steal_half(SpmcRing& into) {
    // acquire / relaxed: as in push (we are `into`'s owner).
    std::uint32_t ih = into.head_.load(std::memory_order_acquire);
    std::uint32_t it = into.tail_.load(std::memory_order_relaxed);
    std::size_t room = kCapacity - (it - ih);
    std::size_t n = Grab(room, [&into, it](std::size_t i, T item) {
      // relaxed: beyond `into`'s tail, invisible until the release store below. A stale
      // consumer of `into` may read such a slot; its CAS then fails.
      into.slots_[(it + static_cast<std::uint32_t>(i)) & kMask].store(item,
                                                                      std::memory_order_relaxed);
    });
    // release: publishes the moved slots, as push does.
    if (n != 0) into.tail_.store(it + static_cast<std::uint32_t>(n), std::memory_order_release);
    return n;
  }

  // peek: any thread. The i-th oldest item (0: the one pop would take) into *out, without taking
  // it; false if there are not that many. A hint only (for prefetching): another thread may take
  // the item, and the owner then reuse its slot, at any moment.
  bool peek(std::size_t i, T* out) const {
    // relaxed (head_): a stale head only makes the hint older. acquire (tail_): pairs with push's
    // release, so the slot holds the pushed value, not an older one, for the owner's items.
    std::uint32_t h = head_.load(std::memory_order_relaxed);
    std::uint32_t t = tail_.load(std::memory_order_acquire);
    if (static_cast<std::uint32_t>(t - h) <= i || t - h > kCapacity) return false;
    // relaxed: a hint (see above).
    *out = slots_[(h + static_cast<std::uint32_t>(i)) & kMask].load(std::memory_order_relaxed);
    return true;
  }

  // size_approx: items at the moment of reading, clamped to [0, capacity].
  std::size_t size_approx() const {
    // relaxed: an estimate by definition (head first: a later tail only makes it larger).
    std::uint32_t h = head_.load(std::memory_order_relaxed);
    std::uint32_t t = tail_.load(std::memory_order_relaxed);
    auto d = static_cast<std::int32_t>(t - h);
    if (d <= 0) return 0;
    return static_cast<std::size_t>(d) > kCapacity ? kCapacity : static_cast<std::size_t>(d);
  }
  bool empty_approx() const { return size_approx() == 0; }

 private:
  static constexpr std::uint32_t kMask = static_cast<std::uint32_t>(kCapacity - 1);

  // Grab: claims the oldest ceil(n/2) items, at most `max`, handing each to store(i, item)
  // before the claiming CAS (which may fail: then the same positions are stored again with the
  // values of the next attempt). Returns how many were claimed.
  template <typename Store>
  std::size_t Grab(std::size_t max, Store store) {
    // acquire: as in pop.
    std::uint32_t h = head_.load(std::memory_order_acquire);
    for (;;) {
      std::uint32_t t = tail_.load(std::memory_order_acquire);
      std::uint32_t n = t - h;
      n -= n / 2;
      if (n > max) n = static_cast<std::uint32_t>(max);
      if (n == 0) return 0;
      if (n > kCapacity / 2) {
        // h and t were read at different moments (h stale by more than a lap): read again.
        h = head_.load(std::memory_order_acquire);
        continue;
      }
      for (std::uint32_t i = 0; i < n; ++i) {
        // relaxed: published by the acquired tail_; validated by the CAS below (see pop).
        store(i, slots_[(h + i) & kMask].load(std::memory_order_relaxed));
      }
      // release: our slot reads happen before the owner rewrites them (see push).
      if (head_.compare_exchange_weak(h, h + n, std::memory_order_release,
                                      std::memory_order_acquire)) {
        return n;
      }
    }
  }

  // head_: next position to take (consumers, CAS). tail_: next position to fill (owner only).
  // Each on its own cache line: consumers hammer one, the owner the other.
  alignas(64) atomic<std::uint32_t> head_{0};
  alignas(64) atomic<std::uint32_t> tail_{0};
  alignas(64) atomic<T> slots_[kCapacity] = {};
};

}  // namespace weft

#endif  // WEFT_DEQUE_SPMC_RING_H_
