// deque/mpmc_ring.h: a bounded multi-producer multi-consumer FIFO ring. For submitting work from
// outside a pool: a full ring is reported to the producer (backpressure), never grown or blocked
// on, and items left at shutdown go through a cleanup hook instead of being lost. Header-only; its
// atomics are weft::atomic (base/atomic.h), which is std::atomic outside model builds.
//
// Defines: weft::MpmcRing<T>.
//
// Algorithm: D. Vyukov's bounded MPMC queue (1024cores.net, "Bounded MPMC queue", 2010): each
// cell carries a sequence number that says whose turn it is; producers and consumers claim
// positions with a CAS on their own counter and never touch each other's counter. Departure: none
// in the algorithm; T may be any move-constructible type (constructed in place in its cell).

#ifndef WEFT_DEQUE_MPMC_RING_H_
#define WEFT_DEQUE_MPMC_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <utility>

#include "weft/base/atomic.h"

namespace weft {

template <typename T>
class MpmcRing {
 public:
  // MpmcRing: capacity rounds up to a power of two (at least 2). `cleanup`, if given, receives
  // every item still queued when the ring is destroyed (for example, to fail or run it).
  explicit MpmcRing(std::size_t capacity, std::function<void(T&&)> cleanup = {});
  ~MpmcRing();
  MpmcRing(const MpmcRing&) = delete;
  MpmcRing& operator=(const MpmcRing&) = delete;

  // try_push: any thread. Moves `item` in and returns true, or returns false when the ring is
  // full and leaves `item` untouched, so the caller can push back or retry later.
  bool try_push(T& item);
  bool try_push(T&& item) { return try_push(item); }

  // try_pop: any thread. The oldest item, or nullopt when empty.
  std::optional<T> try_pop();

  // drain: any thread. Pops every item and hands it to `fn`; returns how many.
  template <typename Fn>
  std::size_t drain(Fn&& fn);

  std::size_t capacity() const { return static_cast<std::size_t>(mask_ + 1); }
  // size_approx: items at the moment of reading, clamped to [0, capacity].
  std::size_t size_approx() const;

 private:
  // Invariants, for cell i (0 <= i <= mask_) and lap counters:
  //   seq == pos      the cell is free for the producer claiming position pos
  //   seq == pos + 1  the cell holds the item of position pos, for the consumer claiming pos
  //   after a pop of pos, seq = pos + capacity (free for the producer one lap later)
  struct alignas(64) Cell {
    atomic<std::uint64_t> seq;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): storage for one T, which may be a pointer
    alignas(T) unsigned char storage[sizeof(T)];
    T* item() { return std::launder(reinterpret_cast<T*>(storage)); }
  };

  std::uint64_t mask_;
  std::unique_ptr<Cell[]> cells_;
  std::function<void(T&&)> cleanup_;
  alignas(64) atomic<std::uint64_t> enqueue_pos_{0};
  alignas(64) atomic<std::uint64_t> dequeue_pos_{0};
};

// ---- Implementation ---------------------------------------------------------------------------

template <typename T>
MpmcRing<T>::MpmcRing(std::size_t capacity, std::function<void(T&&)> cleanup)
    : cleanup_(std::move(cleanup)) {
  std::uint64_t n = 2;
  while (n < capacity) n *= 2;
  mask_ = n - 1;
  cells_ = std::make_unique<Cell[]>(n);
  // relaxed: the ring is not shared before construction completes.
  for (std::uint64_t i = 0; i < n; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
}

template <typename T>
MpmcRing<T>::~MpmcRing() {
  drain([this](T&& item) {
    if (cleanup_) cleanup_(std::move(item));
  });
}

template <typename T>
bool MpmcRing<T>::try_push(T& item) {
  // relaxed: a position is only a guess until the CAS below claims it.
  std::uint64_t pos = enqueue_pos_.load(std::memory_order_relaxed);
  Cell* cell;
  for (;;) {
    cell = &cells_[pos & mask_];
    // acquire: pairs with the consumer's release of this cell, so its move-out is complete
    // before we construct over it.
    std::uint64_t seq = cell->seq.load(std::memory_order_acquire);
    auto dif = static_cast<std::int64_t>(seq - pos);
    if (dif == 0) {
      // relaxed: the cell's seq (acquire above, release below) carries all the ordering; the
      // counter only arbitrates between producers.
      if (enqueue_pos_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed,
                                             std::memory_order_relaxed)) {
        break;
      }
    } else if (dif < 0) {
      return false;  // the cell one lap back is not consumed yet: full
    } else {
      // relaxed: another producer took pos; reload the counter.
      pos = enqueue_pos_.load(std::memory_order_relaxed);
    }
  }
  new (cell->storage) T(std::move(item));
  // release: publishes the item to the consumer that acquires seq == pos + 1.
  cell->seq.store(pos + 1, std::memory_order_release);
  return true;
}

template <typename T>
std::optional<T> MpmcRing<T>::try_pop() {
  // relaxed: as in try_push.
  std::uint64_t pos = dequeue_pos_.load(std::memory_order_relaxed);
  Cell* cell;
  for (;;) {
    cell = &cells_[pos & mask_];
    // acquire: pairs with the producer's release, making the item visible.
    std::uint64_t seq = cell->seq.load(std::memory_order_acquire);
    auto dif = static_cast<std::int64_t>(seq - (pos + 1));
    if (dif == 0) {
      // relaxed: see try_push.
      if (dequeue_pos_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed,
                                             std::memory_order_relaxed)) {
        break;
      }
    } else if (dif < 0) {
      return std::nullopt;  // not produced yet: empty
    } else {
      // relaxed: another consumer took pos.
      pos = dequeue_pos_.load(std::memory_order_relaxed);
    }
  }
  std::optional<T> result(std::move(*cell->item()));
  cell->item()->~T();
  // release: our move-out happens before the producer one lap later constructs here.
  cell->seq.store(pos + mask_ + 1, std::memory_order_release);
  return result;
}

template <typename T>
template <typename Fn>
std::size_t MpmcRing<T>::drain(Fn&& fn) {
  std::size_t n = 0;
  while (std::optional<T> item = try_pop()) {
    fn(std::move(*item));
    ++n;
  }
  return n;
}

template <typename T>
std::size_t MpmcRing<T>::size_approx() const {
  // relaxed: an estimate by definition.
  std::uint64_t e = enqueue_pos_.load(std::memory_order_relaxed);
  std::uint64_t d = dequeue_pos_.load(std::memory_order_relaxed);
  if (e <= d) return 0;
  return static_cast<std::size_t>(e - d > mask_ + 1 ? mask_ + 1 : e - d);
}

}  // namespace weft

#endif  // WEFT_DEQUE_MPMC_RING_H_
