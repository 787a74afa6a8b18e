// deque/split_deque.h: Lace's split deque of fork-join tasks stored in place. The owner spawns and
// syncs at the head without atomics while its tasks are private; thieves steal at the tail from a
// shared region whose boundary (the split) the owner moves lazily, when a thief asks. Its atomics
// are weft::atomic (base/atomic.h), which is std::atomic outside model builds. The typed
// spawn/sync API over it is deque/fork_join.h.
//
// Defines: weft::TaskSlot, weft::SplitDeque, weft::SplitSteal.
//
// Algorithm: T. van Dijk and J. van de Pol, "Lace: non-blocking split deque for work-stealing",
// Euro-Par 2014 Workshops (LNCS 8806), with the memory orders of Lace's design notes. Departures:
//   1. The tail and split live in one 64-bit atomic word (TailSplit) and every change to it is a
//      whole-word atomic operation. Lace stores the split half with a plain 32-bit write and then
//      fences (a mixed-size access to one word, undefined in C++); here the owner moves the split
//      with a CAS, which also makes shrinking the shared region a single step: if the CAS
//      succeeds, no thief took anything between the owner's read and its write.
//   2. Overflow (the deque full) is not an error: the fork-join layer runs such a task inline.
//
// Slot states (TaskSlot::thief): kNotStolen (0) while the owner may run it; a thief writes
// 2 + its worker index after claiming it (so the owner knows whom to leapfrog to), then kDone (1)
// with release once the result is in the slot.
//
// Regions (owner's view): [0, tail) stolen or done, [tail, split) shared, [split, head) private.
// Invariants: tail <= split <= head when !allstolen; the owner's o_split == TailSplit.split.

#ifndef WEFT_DEQUE_SPLIT_DEQUE_H_
#define WEFT_DEQUE_SPLIT_DEQUE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "weft/base/atomic.h"

namespace weft {

// TaskSlot: one task, stored in place: a cache line.
struct alignas(64) TaskSlot {
  static constexpr std::uint32_t kNotStolen = 0;
  static constexpr std::uint32_t kDone = 1;
  static constexpr std::uint32_t kFirstThief = 2;
  static constexpr std::size_t kStorageSize = 48;

  atomic<std::uint32_t> thief;
  // run: executes the task on a thief's worker; leaves the result in `storage`.
  void (*run)(TaskSlot& slot, void* worker);
  alignas(16) unsigned char storage[kStorageSize];
};
static_assert(sizeof(TaskSlot) == 64);

enum class SplitSteal : std::uint8_t {
  kStolen,      // ran a task, and the victim has more shared tasks
  kStolenLast,  // ran the victim's last shared task
  kBusy,        // lost a race; retry
  kNoWork,      // nothing shared; the victim was asked to share more
};

class SplitDeque {
 public:
  // SplitDeque: room for `capacity` outstanding tasks (the spawn depth), reserved as virtual
  // memory: slots cost memory only once a recursion that deep touches them.
  explicit SplitDeque(std::size_t capacity);
  ~SplitDeque();
  SplitDeque(const SplitDeque&) = delete;
  SplitDeque& operator=(const SplitDeque&) = delete;

  // ---- Owner (one thread) ----

  // full: no room for another spawn (run the task inline instead). next_slot: where the next
  // spawn goes; only when not full.
  bool full() const { return head_ >= capacity_; }
  TaskSlot& next_slot() { return slots_[head_]; }

  // push: makes the task written into next_slot() part of the deque. Returns true if the task
  // was published to thieves right away (a caller may then wake an idle worker).
  bool push() {
    ++head_;
    // relaxed: a hint; the split itself is published with release.
    if (o_allstolen_ || movesplit_.load(std::memory_order_relaxed)) [[unlikely]] {
      return PublishSlow();
    }
    return false;
  }

  // pop_private: true if the top task (head - 1) is private and has been popped, to be run by
  // the owner inline; false if it is shared or stolen: call take_back.
  bool pop_private() { return pop_private(head_ - 1); }
  // pop_private(top): the same, given the top task's index (head - 1), which a caller that
  // remembers its spawn's index has in a register: the head need not be loaded again.
  bool pop_private(std::size_t top) {
    if (!o_allstolen_ && top >= o_split_) [[likely]] {
      head_ = top;
      // relaxed: a hint, as in push.
      if (movesplit_.load(std::memory_order_relaxed)) [[unlikely]]
        PublishSlow();
      return true;
    }
    return false;
  }

  // take_back: the top task is shared or stolen. Tries to move it back into the private region;
  // true if it was (the owner pops it and runs it inline), false if it was stolen.
  bool take_back();

  // top_slot: the slot of the task on top (head - 1). slot: the slot at an index below head.
  TaskSlot& top_slot() { return slots_[head_ - 1]; }
  TaskSlot& slot(std::size_t index) { return slots_[index]; }

  // finish_stolen: the stolen top task is done (its thief wrote kDone): free its slot. Every
  // task below it was stolen too (that is how take_back found it stolen); tasks the owner
  // spawned and synced while leapfrogging may have reset that state, so it is restored here.
  void finish_stolen() {
    --head_;
    // relaxed: the slot is the owner's again; published with the next split move, if any.
    slots_[head_].thief.store(TaskSlot::kNotStolen, std::memory_order_relaxed);
    o_allstolen_ = true;
    // relaxed: a hint for thieves.
    allstolen_.store(true, std::memory_order_relaxed);
  }

  std::size_t head() const { return head_; }
  std::size_t capacity() const { return capacity_; }

  // ---- Thieves (any thread) ----

  // steal: claims the oldest shared task and runs it with `worker` as its context, or asks the
  // owner to share more. `thief_index` is recorded in the slot for leapfrogging.
  SplitSteal steal(void* worker, std::uint32_t thief_index);

  // has_shared_work: a hint for idle workers.
  bool has_shared_work() const;

 private:
  bool PublishSlow();

  static std::uint64_t Pack(std::uint32_t tail, std::uint32_t split) {
    return (std::uint64_t{split} << 32) | tail;
  }
  static std::uint32_t Tail(std::uint64_t ts) { return static_cast<std::uint32_t>(ts); }
  static std::uint32_t Split(std::uint64_t ts) { return static_cast<std::uint32_t>(ts >> 32); }

  // Owner-only line: the fast paths touch nothing else of the deque. (Keeping head and split as
  // slot pointers, with a sentinel split for "all stolen", measured 10% slower on fib.)
  TaskSlot* slots_;
  std::size_t capacity_;
  std::size_t head_ = 0;
  std::uint32_t o_split_ = 0;
  bool o_allstolen_ = true;  // so the first spawn is shared at once: thieves get work early

  // Shared line: thieves CAS tail_split_ and set movesplit_; the owner moves the split.
  alignas(64) atomic<std::uint64_t> tail_split_{0};
  atomic<bool> allstolen_{true};
  atomic<bool> movesplit_{false};
};

}  // namespace weft

#endif  // WEFT_DEQUE_SPLIT_DEQUE_H_
