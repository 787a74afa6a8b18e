// deque/split_deque.cc: the split deque's slow paths (publishing, taking back, stealing) and its
// memory. See split_deque.h for the algorithm and its departures from Lace.

#include "weft/deque/split_deque.h"

#include <cstdio>
#include <cstdlib>
#include <new>

#if defined(_WIN32)
#include <windows.h>
#else
#include <sys/mman.h>
#endif

namespace weft {
namespace {

// Slots are reserved, not committed: zero pages until a recursion that deep touches them, and
// zero is kNotStolen, so no initialisation pass is needed.
void* ReserveZeroed(std::size_t bytes) {
#if defined(_WIN32)
  return VirtualAlloc(nullptr, bytes, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
#else
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
#endif
}

void Release(void* p, std::size_t bytes) {
#if defined(_WIN32)
  (void)bytes;
  VirtualFree(p, 0, MEM_RELEASE);
#else
  munmap(p, bytes);
#endif
}

}  // namespace

SplitDeque::SplitDeque(std::size_t capacity) : capacity_(capacity < 2 ? 2 : capacity) {
  if (capacity_ > 0xffffffffu) capacity_ = 0xffffffffu;  // indices are 32-bit in TailSplit
  slots_ = static_cast<TaskSlot*>(ReserveZeroed(capacity_ * sizeof(TaskSlot)));
  if (slots_ == nullptr) throw std::bad_alloc();
}

SplitDeque::~SplitDeque() { Release(slots_, capacity_ * sizeof(TaskSlot)); }

bool SplitDeque::PublishSlow() {
  if (o_allstolen_) {
    // Everything below head was stolen: make the newest task (head - 1) the whole shared
    // region. A plain store is enough: with tail == split no thief's CAS can succeed, so nobody
    // else writes the word now. release: publishes the task's slot to thieves' acquire CAS.
    if (head_ == 0) return false;
    auto top = static_cast<std::uint32_t>(head_ - 1);
    tail_split_.store(Pack(top, top + 1), std::memory_order_release);
    o_split_ = top + 1;
    o_allstolen_ = false;
    // relaxed: hints only; thieves find the work through tail_split_.
    allstolen_.store(false, std::memory_order_relaxed);
    movesplit_.store(false, std::memory_order_relaxed);
    return true;
  }
  // A thief asked for work: share the older half of the private region.
  // relaxed: a hint; cleared before the move so a request arriving during it is not lost.
  movesplit_.store(false, std::memory_order_relaxed);
  auto head = static_cast<std::uint32_t>(head_);
  if (head <= o_split_) return false;  // nothing private to share
  std::uint32_t new_split = o_split_ + (head - o_split_ + 1) / 2;
  // relaxed: only to seed the CAS, which carries the ordering.
  std::uint64_t ts = tail_split_.load(std::memory_order_relaxed);
  // release: the slots now shared were written before; thieves acquire with their CAS.
  // relaxed on failure: a thief moved the tail; retry with what we read.
  while (!tail_split_.compare_exchange_weak(ts, Pack(Tail(ts), new_split),
                                            std::memory_order_release, std::memory_order_relaxed)) {
  }
  o_split_ = new_split;
  return true;
}

bool SplitDeque::take_back() {
  if (o_allstolen_) return false;  // every task below head was stolen
  // acquire: see the latest tail a thief wrote (the CAS below re-checks it anyway).
  std::uint64_t ts = tail_split_.load(std::memory_order_acquire);
  for (;;) {
    std::uint32_t tail = Tail(ts);
    std::uint32_t split = Split(ts);
    if (tail >= split) {
      // The shared region is empty: the top task was stolen, and so was everything shared.
      o_allstolen_ = true;
      // relaxed: a hint for thieves, who would otherwise find tail == split and ask again.
      allstolen_.store(true, std::memory_order_relaxed);
      return false;
    }
    // Take back the newer half, which includes the top task (split - 1 >= new_split).
    std::uint32_t new_split = tail + (split - tail) / 2;
    // acq_rel: success means no thief claimed past `tail` before our write (Departure 1); the
    // ordering keeps our later private accesses to those slots after the claim.
    // acquire on failure: reload the thieves' tail.
    if (tail_split_.compare_exchange_weak(ts, Pack(tail, new_split), std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      o_split_ = new_split;
      --head_;
      return true;
    }
  }
}

SplitSteal SplitDeque::steal(void* worker, std::uint32_t thief_index) {
  // relaxed: a hint; the CAS below decides.
  if (allstolen_.load(std::memory_order_relaxed)) return SplitSteal::kNoWork;
  // relaxed: only seeds the CAS.
  std::uint64_t ts = tail_split_.load(std::memory_order_relaxed);
  std::uint32_t tail = Tail(ts);
  std::uint32_t split = Split(ts);
  if (tail >= split) {
    // relaxed: a request; the owner answers with a release move of the split.
    if (!movesplit_.load(std::memory_order_relaxed)) {
      movesplit_.store(true, std::memory_order_relaxed);
    }
    return SplitSteal::kNoWork;
  }
  // acquire: pairs with the owner's release publication of the slot (through the release
  // sequence of RMWs on this word). relaxed on failure: we only retry.
  if (!tail_split_.compare_exchange_strong(ts, Pack(tail + 1, split), std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
    return SplitSteal::kBusy;
  }
  TaskSlot& slot = slots_[tail];
  // relaxed: informational, for the owner's leapfrogging; no data depends on it.
  slot.thief.store(TaskSlot::kFirstThief + thief_index, std::memory_order_relaxed);
  slot.run(slot, worker);
  // release: the result in the slot happens before the owner's acquire of kDone.
  slot.thief.store(TaskSlot::kDone, std::memory_order_release);
  return tail + 1 < split ? SplitSteal::kStolen : SplitSteal::kStolenLast;
}

bool SplitDeque::has_shared_work() const {
  // relaxed: hints.
  if (allstolen_.load(std::memory_order_relaxed)) return false;
  std::uint64_t ts = tail_split_.load(std::memory_order_relaxed);
  return Tail(ts) < Split(ts);
}

}  // namespace weft
