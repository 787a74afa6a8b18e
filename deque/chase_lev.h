// deque/chase_lev.h: a growable work-stealing deque. The owner thread pushes and pops at the
// bottom (LIFO); any thread steals at the top (FIFO). Header-only; its atomics are weft::atomic
// (base/atomic.h), which is std::atomic outside model builds.
//
// Defines: weft::ChaseLevDeque<T>, weft::StealResult.
//
// Algorithm: D. Chase and Y. Lev, "Dynamic Circular Work-Stealing Deque", SPAA 2005, with the C11
// memory orders of N. M. Lê, A. Pop, A. Cohen and F. Zappa Nardelli, "Correct and Efficient
// Work-Stealing for Weak Memory Models", PPoPP 2013 (Fig. 1), which proves them for weak memory.
// Departures, each marked "Departure" below:
//   1. push publishes with a release store of `bottom` instead of a release fence followed by a
//      relaxed store: equivalent for the algorithm, and ThreadSanitizer (which does not model
//      fences) sees the happens-before edge to the thieves' acquire load of `bottom`.
//   2. Old buffers are reclaimed. The paper leaks them; here a buffer replaced by growth is
//      retired and freed once no thief can still hold it: thieves announce themselves in
//      `thieves_` (a counter) around their use of the buffer, and the owner frees retired buffers
//      when it sees the counter at zero after the new buffer is published (both seq_cst, so the
//      two orders agree; see Reclaim()).
//   3. steal_half takes up to half of the items one CAS each. A single CAS over a batch is unsafe
//      in Chase-Lev: the owner pops all but the last item without a CAS, so a slow thief's batch
//      could overlap items the owner already took. (Go and Tokio batch-steal with one CAS because
//      their owners pop with a CAS too.)
//
// T must be trivially copyable and lock-free as std::atomic<T> (pointers, integers up to 8 bytes):
// slots are read by thieves racing with the owner's writes, so they are atomics (relaxed).

#ifndef WEFT_DEQUE_CHASE_LEV_H_
#define WEFT_DEQUE_CHASE_LEV_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <vector>

#include "weft/base/atomic.h"

namespace weft {

enum class StealResult : std::uint8_t {
  kSuccess,  // an item was taken
  kEmpty,    // nothing to take
  kAbort,    // lost a race with the owner or another thief: worth retrying
};

template <typename T>
class ChaseLevDeque {
  static_assert(std::is_trivially_copyable_v<T>, "ChaseLevDeque holds trivially copyable values");
  static_assert(std::atomic<T>::is_always_lock_free, "ChaseLevDeque needs lock-free atomic<T>");

 public:
  // ChaseLevDeque: an empty deque; capacity rounds up to a power of two (at least 2).
  explicit ChaseLevDeque(std::size_t initial_capacity = 256);
  ~ChaseLevDeque();
  ChaseLevDeque(const ChaseLevDeque&) = delete;
  ChaseLevDeque& operator=(const ChaseLevDeque&) = delete;

  // push: owner only. Grows the buffer when full; false only if that allocation failed (the item
  // is then not in the deque).
  bool push(T item);

  // pop: owner only. The most recently pushed item, or nullopt when empty.
  std::optional<T> pop();

  // steal: any thread. The oldest item into *out; kAbort when racing, kEmpty when empty.
  StealResult steal(T* out);

  // steal_half: called by the owner of `into` (the thief's own deque). Moves up to half of this
  // deque's items (at most `max`) into `into`, oldest first, one CAS each (Departure 3). Makes
  // room in `into` first, so no stolen item is ever stranded. Returns how many moved.
  std::size_t steal_half(ChaseLevDeque& into, std::size_t max = 256);

  // reserve: owner only. Grows the buffer so that `extra` more items fit; false if allocation
  // failed.
  bool reserve(std::size_t extra);

  // size_approx: items at the moment of reading; exact only when no one else is active.
  std::size_t size_approx() const;

  // retired_buffers: buffers replaced by growth and not yet freed (for tests).
  std::size_t retired_buffers() const { return retired_.size(); }

 private:
  struct Buffer {
    std::int64_t capacity;  // a power of two
    std::int64_t mask;
    atomic<T>* slots;  // capacity entries, allocated right after the header

    static Buffer* Create(std::int64_t capacity);
    static void Destroy(Buffer* b);
    T get(std::int64_t i) const { return slots[i & mask].load(std::memory_order_relaxed); }
    void put(std::int64_t i, T v) { slots[i & mask].store(v, std::memory_order_relaxed); }
  };

  Buffer* Grow(Buffer* old, std::int64_t top, std::int64_t bottom);
  void Reclaim();

  // Layout: `bottom_` and `buffer_` are written by the owner only; `top_` and `thieves_` are
  // written by thieves (and the owner's last-item CAS). Separate cache lines keep the owner's
  // push/pop from bouncing the thieves' line.
  alignas(64) atomic<std::int64_t> bottom_{0};
  atomic<Buffer*> buffer_;
  std::vector<Buffer*> retired_;  // owner only
  alignas(64) atomic<std::int64_t> top_{0};
  atomic<std::int64_t> thieves_{0};  // thieves between loading buffer_ and leaving steal
};

// ---- Implementation ---------------------------------------------------------------------------

template <typename T>
typename ChaseLevDeque<T>::Buffer* ChaseLevDeque<T>::Buffer::Create(std::int64_t capacity) {
  void* memory = ::operator new (sizeof(Buffer) + sizeof(atomic<T>) * capacity,
                                 std::align_val_t{64}, std::nothrow);
  if (memory == nullptr) return nullptr;
  auto* b = new (memory) Buffer{capacity, capacity - 1, nullptr};
  b->slots = reinterpret_cast<atomic<T>*>(reinterpret_cast<std::byte*>(b) + sizeof(Buffer));
  for (std::int64_t i = 0; i < capacity; ++i) new (&b->slots[i]) atomic<T>();
  return b;
}

template <typename T>
void ChaseLevDeque<T>::Buffer::Destroy(Buffer* b) {
  b->~Buffer();
  ::operator delete (b, std::align_val_t{64});
}

template <typename T>
ChaseLevDeque<T>::ChaseLevDeque(std::size_t initial_capacity) {
  std::int64_t capacity = 2;
  while (static_cast<std::size_t>(capacity) < initial_capacity) capacity *= 2;
  Buffer* b = Buffer::Create(capacity);
  if (b == nullptr) throw std::bad_alloc();
  // relaxed: no other thread can see the deque before its construction is published.
  buffer_.store(b, std::memory_order_relaxed);
}

template <typename T>
ChaseLevDeque<T>::~ChaseLevDeque() {
  // relaxed: destruction requires that no thread uses the deque any more.
  Buffer::Destroy(buffer_.load(std::memory_order_relaxed));
  for (Buffer* b : retired_) Buffer::Destroy(b);
}

template <typename T>
bool ChaseLevDeque<T>::push(T item) {
  // relaxed: only the owner writes bottom_.
  std::int64_t b = bottom_.load(std::memory_order_relaxed);
  // acquire: pairs with thieves' CAS on top_, so a slot we overwrite below has been read.
  std::int64_t t = top_.load(std::memory_order_acquire);
  // relaxed: only the owner writes buffer_.
  Buffer* a = buffer_.load(std::memory_order_relaxed);
  if (b - t > a->capacity - 1) [[unlikely]] {
    a = Grow(a, t, b);
    if (a == nullptr) return false;
  }
  a->put(b, item);
  // Departure 1: release store instead of release fence + relaxed store. Publishes the slot
  // (and whatever the item points to) to thieves that acquire-load bottom_.
#ifndef WEFT_MODEL_PLANTED_CHASE_LEV_RELAXED_PUSH
  bottom_.store(b + 1, std::memory_order_release);
#else
  // Weakened to relaxed for the model checker's test that finds the stale slot a thief then
  // reads (//deque:chase_lev_planted_bug_model_test; never defined in a build of weft).
  bottom_.store(b + 1, std::memory_order_relaxed);
#endif
  if (!retired_.empty()) [[unlikely]]
    Reclaim();
  return true;
}

template <typename T>
std::optional<T> ChaseLevDeque<T>::pop() {
  // relaxed: only the owner writes bottom_ and buffer_.
  std::int64_t b = bottom_.load(std::memory_order_relaxed) - 1;
  Buffer* a = buffer_.load(std::memory_order_relaxed);
  // release (Departure 1's price): a thief's acquire load of bottom_ may read this store
  // instead of push's, and since C++20 a release sequence no longer runs on through later
  // plain stores of the same thread, so reading this one would not give the thief the slots
  // push wrote (the paper's release fence in push covers every later store; a release store
  // covers only itself). Found by the model checker (docs/model.md); free on x86-64, and next
  // to the fence below on arm64. The seq_cst fence below: the reservation of slot b must be
  // ordered before we read top_ (StoreLoad), which only a seq_cst fence (or RMW) gives.
  bottom_.store(b, std::memory_order_release);
  atomic_fence(std::memory_order_seq_cst);
  // relaxed: ordered by the fence above; a thief's update we miss is caught by the CAS below.
  std::int64_t t = top_.load(std::memory_order_relaxed);
  std::optional<T> result;
  if (t <= b) {
    result = a->get(b);
    if (t == b) {
      // The last item: race the thieves for it. seq_cst so that this CAS is ordered with the
      // thieves' CAS and fences; relaxed on failure (we only learn we lost).
      if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst,
                                        std::memory_order_relaxed)) {
        result.reset();
      }
      // release: restores the empty state; release as the reservation above.
      bottom_.store(b + 1, std::memory_order_release);
    }
  } else {
    // release: empty; undo the reservation (release as the reservation above).
    bottom_.store(b + 1, std::memory_order_release);
  }
  return result;
}

template <typename T>
StealResult ChaseLevDeque<T>::steal(T* out) {
  // acquire: pairs with other thieves' and the owner's CAS on top_.
  std::int64_t t = top_.load(std::memory_order_acquire);
  // seq_cst fence: orders the top_ load before the bottom_ load against the owner's pop
  // (bottom_ store; fence; top_ load), so the two cannot both miss each other.
  atomic_fence(std::memory_order_seq_cst);
  // acquire: pairs with push's release store, making the slot's contents visible.
  std::int64_t b = bottom_.load(std::memory_order_acquire);
  if (t >= b) return StealResult::kEmpty;
  // Departure 2: announce before loading buffer_ (seq_cst: see Reclaim()).
  thieves_.fetch_add(1, std::memory_order_seq_cst);
  // seq_cst (stronger than the paper's consume): a buffer published before our announcement in
  // the single total order is the one we load, so the owner never frees it under us.
  Buffer* a = buffer_.load(std::memory_order_seq_cst);
  T item = a->get(t);
  // seq_cst on success, as in the paper: the claim must be ordered with the owner's pop fence.
  // relaxed on failure: we discard `item` and report the race.
  bool won =
      top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed);
  // release: our reads of the buffer happen before the owner's free, which acquires this count.
  thieves_.fetch_sub(1, std::memory_order_release);
  if (!won) return StealResult::kAbort;
  *out = item;
  return StealResult::kSuccess;
}

template <typename T>
std::size_t ChaseLevDeque<T>::steal_half(ChaseLevDeque& into, std::size_t max) {
  std::size_t want = (size_approx() + 1) / 2;
  if (want > max) want = max;
  // Room first, so that no stolen item is ever left without a place to go.
  while (want > 0 && !into.reserve(want)) want /= 2;
  std::size_t moved = 0;
  while (moved < want) {
    T item;
    StealResult r = steal(&item);
    if (r == StealResult::kEmpty) break;
    if (r == StealResult::kAbort) continue;
    into.push(item);  // cannot fail: reserved above, and only we (its owner) push to it
    ++moved;
  }
  return moved;
}

template <typename T>
bool ChaseLevDeque<T>::reserve(std::size_t extra) {
  // relaxed: only the owner writes bottom_ and buffer_; top_ only grows, so the free room we
  // compute can only be an underestimate.
  std::int64_t b = bottom_.load(std::memory_order_relaxed);
  std::int64_t t = top_.load(std::memory_order_acquire);
  Buffer* a = buffer_.load(std::memory_order_relaxed);
  while (b - t + static_cast<std::int64_t>(extra) > a->capacity) {
    a = Grow(a, t, b);
    if (a == nullptr) return false;
  }
  return true;
}

template <typename T>
std::size_t ChaseLevDeque<T>::size_approx() const {
  // relaxed: an estimate by definition.
  std::int64_t b = bottom_.load(std::memory_order_relaxed);
  std::int64_t t = top_.load(std::memory_order_relaxed);
  return b > t ? static_cast<std::size_t>(b - t) : 0;
}

template <typename T>
typename ChaseLevDeque<T>::Buffer* ChaseLevDeque<T>::Grow(Buffer* old, std::int64_t top,
                                                          std::int64_t bottom) {
  Buffer* bigger = Buffer::Create(old->capacity * 2);
  if (bigger == nullptr) return nullptr;
  for (std::int64_t i = top; i < bottom; ++i) bigger->put(i, old->get(i));
  // seq_cst: publishes the copied slots (release) and takes part in the total order that
  // Reclaim() relies on.
  buffer_.store(bigger, std::memory_order_seq_cst);
  retired_.push_back(old);
  Reclaim();
  return bigger;
}

template <typename T>
void ChaseLevDeque<T>::Reclaim() {
  // seq_cst: if this load sees no thief, every thief that announces itself later (its seq_cst
  // fetch_add comes after this load in the total order) loads the buffer we published before
  // (seq_cst store, earlier in the same order), so none of the retired ones can be reached.
  // A thief that finished earlier released its reads with its fetch_sub, which this load
  // synchronises with through the counter's release sequence.
  if (thieves_.load(std::memory_order_seq_cst) != 0) return;  // try again on a later push
  for (Buffer* b : retired_) Buffer::Destroy(b);
  retired_.clear();
}

}  // namespace weft

#endif  // WEFT_DEQUE_CHASE_LEV_H_
