// context/stack.cc: StackPool (size classes, guarded and compact stacks, carving, caching, the
// deferred give-back of memory) and Stack. The overflow diagnostic and its registry of guard
// areas are in stack_guard.cc; a worker's StackCache in stack_cache.cc; the size classes and the
// slot layout in internal/stack_layout.h.
//
// Slot layout, for both protection classes (G = kGuard: 4 KiB, 8 KiB on Windows; S = the
// class's usable size):
//
//   lo                lo + G                                       lo + G + S
//   | guard / red zone | usable stack (grows down) ... [record] |
//
// A compact slot is one of N = max(1, 4 MiB / (S + G)) slots in a shared chunk mapping. A guarded
// slot is, where the kernel has guard markers (Linux 6.13+), one of N slots in a guarded chunk,
// whose guard areas are all marked with one call as the chunk is mapped; elsewhere it is its own
// mapping with its guard area protected (2 VMAs on Linux). The OS calls are behind
// context/internal/vm.h.

#include "weft/context/stack.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <system_error>
#include <vector>

#include "internal/stack_guard.h"
#include "internal/stack_layout.h"
#include "weft/context/internal/prefetch.h"
#include "weft/context/internal/record.h"
#include "weft/context/internal/slot_set.h"
#include "weft/context/internal/vm.h"

namespace weft {

using namespace context_internal;

// ---- StackPool --------------------------------------------------------------------------------

namespace {
// SlotList: one list of free slots of a size class and protection. Slots in chunks are handed out
// in the order they were first carved: the oldest chunk first, each chunk's slots by address
// (SlotSet; context/internal/slot_set.h says why). Slots not in chunks (guarded stacks in their
// own mappings, kLooseChunk) go last in, first out.
class SlotList {
 public:
  void Init(const std::vector<std::byte*>* chunk_bases, int c) {
    bases_ = chunk_bases;
    slot_size_ = SlotSize(c);
    set_ = context_internal::SlotSet(SlotsPerChunk(c));
  }
  // add_chunk: called as the class maps a chunk of this protection (its base already appended
  // to chunk_bases).
  void add_chunk() { set_.add_chunk(); }
  std::size_t size() const { return set_.size() + loose_.size(); }
  bool empty() const { return size() == 0; }

  void push(std::byte* lo, std::uint32_t chunk, std::uint16_t slot) {
    if (chunk == kLooseChunk) {
      loose_.push_back(lo);
    } else {
      set_.insert(chunk, slot);
    }
  }
  // pop: the first slot in carving order (with highest, the last), else the newest loose one.
  // False when empty.
  bool pop(std::byte** lo, std::uint32_t* chunk, std::uint16_t* slot, bool highest = false) {
    std::size_t ch, sl;
    if (highest ? set_.take_highest(&ch, &sl) : set_.take_lowest(&ch, &sl)) {
      *lo = (*bases_)[ch] + sl * slot_size_;
      *chunk = static_cast<std::uint32_t>(ch);
      *slot = static_cast<std::uint16_t>(sl);
      return true;
    }
    if (loose_.empty()) return false;
    *lo = loose_.back();
    *chunk = kLooseChunk;
    *slot = 0;
    loose_.pop_back();
    return true;
  }
  // for_each: f(lo) for every slot, which stays in the list.
  template <typename F>
  void for_each(F&& f) const {
    set_.for_each([&](std::size_t ch, std::size_t slot) { f((*bases_)[ch] + slot * slot_size_); });
    for (std::byte* lo : loose_) f(lo);
  }
  void clear() {
    set_.clear();
    loose_.clear();
  }

 private:
  const std::vector<std::byte*>* bases_ = nullptr;
  std::size_t slot_size_ = 0;
  context_internal::SlotSet set_;
  std::vector<std::byte*> loose_;
};
}  // namespace

struct StackPool::State {
  struct Class {
    // Cached stacks, handed out in carving order (SlotList): within the budget (the _free lists),
    // and past it (pending: pages not yet given back, or without markers, not yet unmapped).
    SlotList guarded_free;
    SlotList compact_free;
    SlotList pending;
    SlotList guarded_pending;
    // The bases of the class's chunks, indexed by Stack::chunk_ (guarded: with markers).
    std::vector<std::byte*> guarded_bases;
    std::vector<std::byte*> compact_bases;
    // Slots not yet carved from the newest chunk (the last of *_bases), compact and guarded.
    std::size_t carve_left = 0;
    std::size_t guarded_carve_left = 0;
    // Of the slots left to carve, how many (the next ones) have their top pages populated
    // already (PopulateAhead). Never more than the slots left, so 0 when a new chunk comes.
    std::size_t carve_populated = 0;
    std::size_t guarded_carve_populated = 0;
  };
  StackPoolOptions options;
  // markers: guarded stacks are carved from guarded chunks (guard markers; see the top of this
  // file), which are never unmapped before the pool dies: freed past the budget, their pages are
  // given back as compact ones are, and the slots stay guarded.
  bool markers = false;
  std::vector<std::pair<std::byte*, std::size_t>> guard_chunks;
  mutable std::mutex mu;
  Class classes[kNumClasses];
  std::vector<std::pair<std::byte*, std::size_t>> chunks;
  std::size_t cached_bytes = 0;
  // guarded_mappings: what guarded stacks cost of the mapping budget: 2 per guarded stack in
  // existence (live or cached), or with markers 1 per guarded chunk.
  std::size_t guarded_mappings = 0;
  StackPoolStats counts;
  // Compact stacks freed past the cache budget wait in their class's `pending` list for their
  // pages to be given back in one batch (sorted, adjacent slots merged into one madvise): each
  // madvise flushes the TLB on every core (an IPI), ~10 us here, which one call per stack made
  // the cost of releasing 100,000 parked fibers (1 s). Until then they are reused first (their
  // pages are still there). Counted as cached.
  std::size_t pending_total = 0;
  std::chrono::steady_clock::time_point pending_changed;  // last push to or pop from pending

  State() {
    for (int c = 0; c < kNumClasses; ++c) {
      Class& cls = classes[c];
      cls.guarded_free.Init(&cls.guarded_bases, c);
      cls.guarded_pending.Init(&cls.guarded_bases, c);
      cls.compact_free.Init(&cls.compact_bases, c);
      cls.pending.Init(&cls.compact_bases, c);
    }
  }
};

namespace {
// Past the budget, freed stacks wait in their class's pending lists until flush_trim() (a
// scheduler calls it when idle). No flush on the release path: pending stacks are reused before
// any new one is made, so the lists never exceed the peak number of stacks alive at once, and a
// flush there (one IPI per madvise/munmap run) would make the next burst fault every page in
// again (measured: 100,000 spawns on one worker, 3.6 us each).

struct FreedSlot {
  std::byte* lo;
  int c;
  std::uint32_t chunk;
  std::uint16_t slot;
  // std::less: a total order over pointers into different chunks, where `<` is unspecified.
  bool operator<(const FreedSlot& o) const { return std::less<std::byte*>()(lo, o.lo); }
};

// GiveBack: MADV_DONTNEED over the slots (red zone included: it reads back as zeros, as the
// red-zone check wants), one call per run of adjacent slots. No lock held.
void GiveBack(std::vector<FreedSlot>& slots) {
  std::sort(slots.begin(), slots.end());
  for (std::size_t i = 0; i < slots.size();) {
    std::byte* lo = slots[i].lo;
    std::byte* hi = lo + SlotSize(slots[i].c);
    std::size_t j = i + 1;
    while (j < slots.size() && slots[j].lo == hi) hi += SlotSize(slots[j++].c);
    context_internal::VmDiscard(lo, static_cast<std::size_t>(hi - lo));
    i = j;
  }
}
}  // namespace

// A new slot's top page is written at once (make_context puts the context record there, and the
// first frames go below it), and that first write faulted: 15-23 us here, the largest cost of a
// spawn burst that outgrows the stacks made so far (W5: a rep that needed 1,200 more stacks than
// any before took 16 ms instead of 4.5). So as a slot is carved from a chunk, the top pages of
// the next StackPoolOptions::populate_ahead slots get their memory together, with one system
// call (about 1 us a page). Under this machine's hypervisor the first touch of a populated page
// still costs ~8 us (its shadow page tables fill on access), so a new stack measured 0.7x of the
// faulting one (BM_NewGuardedStacks), not less. The slots ahead commit at most
// populate_ahead - 1 pages before use.

struct CarvedSlots {
  std::byte* first = nullptr;  // the slot carved, and the ones after it to populate
  std::size_t populate = 0;    // how many slots from `first` (0: populated already)
  int c = 0;
};

// PopulateAhead: for the slot just carved at `slot` (with `left` more slots after it in its
// chunk; `populated` counts those already populated, as in State::Class), claims the slots to
// populate, under the pool lock; Populate does it after the lock is dropped. Another thread may
// meanwhile carve and write one of those slots: populating a page already there leaves it as it
// is.
CarvedSlots PopulateAhead(std::byte* slot, std::size_t left, std::size_t& populated, int c,
                          std::size_t ahead) {
  if (populated != 0) {
    --populated;  // this slot was one of them
    return {slot, 0, c};
  }
  if (ahead == 0) return {slot, 0, c};
  const std::size_t n = std::min(ahead, left + 1);
  populated = n - 1;  // the ones after this slot
  return {slot, n, c};
}

void Populate(const CarvedSlots& carved) {
  if (carved.populate == 0) return;
  context_internal::VmPrefaultWrite(carved.first + SlotSize(carved.c) - kPage, SlotSize(carved.c),
                                    carved.populate, kPage);
}

struct StackPoolInternals {
  static void FlushTrimLocked(StackPool::State& s, std::unique_lock<std::mutex>& lock,
                              std::size_t limit = SIZE_MAX);
  static bool MapGuardChunkLocked(StackPool::State& s, int c);
};

// MapGuardChunkLocked: maps a guarded chunk for class c, marks every slot's guard area with one
// call per 64 slots, and makes it the class's carving chunk. Called with the lock held (as the
// compact chunks are mapped: once per hundreds of stacks for the small classes). False when the
// kernel refuses; nothing changes then.
bool StackPoolInternals::MapGuardChunkLocked(StackPool::State& s, int c) {
  const std::size_t slots = SlotsPerChunk(c);
  const std::size_t bytes = slots * SlotSize(c);
  void* chunk = context_internal::VmMap(bytes);
  if (chunk == nullptr) return false;
  if (!context_internal::VmInstallGuards(chunk, SlotSize(c), slots)) {
    context_internal::VmUnmap(chunk, bytes);
    return false;
  }
  auto* base = static_cast<std::byte*>(chunk);
  StackPool::State::Class& cls = s.classes[c];
  cls.guarded_bases.push_back(base);
  cls.guarded_free.add_chunk();
  cls.guarded_pending.add_chunk();
  s.guard_chunks.emplace_back(base, bytes);
  ++s.guarded_mappings;
  ++s.counts.mappings;
  RegisterGuardChunk(base, bytes, SlotSize(c));  // lock order: pool mutex, then registry's
  cls.guarded_carve_left = slots;
  return true;
}

// FlushTrimLocked: gives back the pending slots' pages and frees the slots. Called with the
// lock held; drops it around the system calls.
void StackPoolInternals::FlushTrimLocked(StackPool::State& s, std::unique_lock<std::mutex>& lock,
                                         std::size_t limit) {
  if (s.pending_total == 0) return;
  std::vector<FreedSlot> batch, guarded_batch, unmap;
  batch.reserve(std::min(limit, s.pending_total));
  std::size_t taken = 0;
  // The last in carving order first: the first are handed out first, so likelier to be reused.
  constexpr bool kHighest = true;
  FreedSlot f;
  for (int c = 0; c < kNumClasses && taken < limit; ++c) {
    f.c = c;
    StackPool::State::Class& cls = s.classes[c];
    while (taken < limit && cls.pending.pop(&f.lo, &f.chunk, &f.slot, kHighest)) {
      batch.push_back(f);
      ++taken;
    }
    while (taken < limit && cls.guarded_pending.pop(&f.lo, &f.chunk, &f.slot, kHighest)) {
      if (s.markers) {
        guarded_batch.push_back(f);  // in a chunk: pages back, slot kept
      } else {
        unmap.push_back(f);
        --s.counts.cached_guarded;
      }
      ++taken;
    }
  }
  s.guarded_mappings -= 2 * unmap.size();
  s.counts.mappings -= 2 * unmap.size();
  s.pending_total -= taken;
  lock.unlock();
  GiveBack(batch);
  GiveBack(guarded_batch);  // guard markers stay through MADV_DONTNEED
  for (const FreedSlot& u : unmap) {
    UnregisterGuard(u.lo);
    context_internal::VmUnmap(u.lo, SlotSize(u.c));
  }
  lock.lock();
  for (const FreedSlot& b : batch) s.classes[b.c].compact_free.push(b.lo, b.chunk, b.slot);
  for (const FreedSlot& b : guarded_batch) s.classes[b.c].guarded_free.push(b.lo, b.chunk, b.slot);
}

std::size_t StackPool::flush_trim(std::chrono::nanoseconds min_quiet, std::size_t max_stacks) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (min_quiet.count() > 0 && std::chrono::steady_clock::now() - s.pending_changed < min_quiet) {
    return 0;  // still in use: a burst that freed these may come back for them
  }
  std::size_t n = std::min(max_stacks, s.pending_total);
  StackPoolInternals::FlushTrimLocked(s, lock, max_stacks);
  return n;
}

bool StackPool::trim_pending() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->pending_total != 0;
}

StackPool::StackPool(StackPoolOptions options) : state_(std::make_unique<State>()) {
  if (options.guarded_mapping_budget == 0) {
    options.guarded_mapping_budget = context_internal::VmMappingLimit() / 2;
  }
  state_->options = options;
  state_->markers = options.guard_markers && context_internal::VmHasGuardMarkers();
  state_->counts.guarded_mapping_budget = options.guarded_mapping_budget;
  state_->counts.guard_markers = state_->markers;
}

StackPool::~StackPool() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.counts.live_guarded + s.counts.live_compact != 0) {
    std::fprintf(stderr, "weft: StackPool destroyed with %zu live stacks; leaking them\n",
                 s.counts.live_guarded + s.counts.live_compact);
    return;
  }
  for (int c = 0; c < kNumClasses && !s.markers; ++c) {
    s.classes[c].guarded_free.for_each([c](std::byte* lo) {
      UnregisterGuard(lo);
      context_internal::VmUnmap(lo, SlotSize(c));
    });
  }
  for (auto& [chunk, bytes] : s.guard_chunks) {
    UnregisterGuardChunk(chunk);
    context_internal::VmUnmap(chunk, bytes);
  }
  for (auto& [chunk, bytes] : s.chunks) context_internal::VmUnmap(chunk, bytes);
}

StackPool& StackPool::default_pool() {
  static StackPool* pool = new StackPool();
  return *pool;
}

Result<Stack> StackPool::allocate(const StackOptions& options) {
  if (!valid_stack_size(options.size)) {
    return std::errc::invalid_argument;
  }
  install_stack_overflow_handler();
  const int c = ClassIndex(options.size);
  State& s = *state_;
  Stack stack;  // owned by the pool (pool_ set) only once it has memory
  stack.class_index_ = static_cast<std::uint8_t>(c);

  std::unique_lock<std::mutex> lock(s.mu);
  State::Class& cls = s.classes[c];
  CarvedSlots populate;  // a carved slot's top page, and those after it, populated unlocked
  // carve: takes the next slot of the newest chunk in `bases` (`left` of its slots not carved
  // yet, at least one) for `stack`, and claims the slots to populate ahead of it.
  auto carve = [&](const std::vector<std::byte*>& bases, std::size_t& left,
                   std::size_t& populated) {
    const std::size_t slot = SlotsPerChunk(c) - left--;
    stack.chunk_ = static_cast<std::uint32_t>(bases.size() - 1);
    stack.slot_ = static_cast<std::uint16_t>(slot);
    stack.lo_ = bases.back() + slot * SlotSize(c);
    populate = PopulateAhead(stack.lo_, left, populated, c, s.options.populate_ahead);
  };
  const std::size_t guarded_cost = s.markers ? 1 : 2;  // of the mapping budget, per new mapping
  const bool want_guarded =
      options.protection == StackProtection::kGuarded ||
      (options.protection == StackProtection::kAuto &&
       (!cls.guarded_free.empty() || !cls.guarded_pending.empty() || cls.guarded_carve_left != 0 ||
        s.guarded_mappings + guarded_cost <= s.options.guarded_mapping_budget));

  if (want_guarded) {
    if (cls.guarded_free.pop(&stack.lo_, &stack.chunk_, &stack.slot_)) {
      // min: with markers, slots whose pages were given back are not counted in cached_bytes.
      s.cached_bytes -= std::min(s.cached_bytes, ClassSize(c));
      --s.counts.cached_guarded;
    } else if (cls.guarded_pending.pop(&stack.lo_, &stack.chunk_, &stack.slot_)) {
      // (past the budget, not unmapped or given back yet: reused before anything new is made)
      --s.pending_total;
      s.pending_changed = std::chrono::steady_clock::now();
      --s.counts.cached_guarded;
    } else if (s.markers) {
      // Carve from the guarded chunk: no system call but once per chunk.
      if (cls.guarded_carve_left != 0 || StackPoolInternals::MapGuardChunkLocked(s, c)) {
        carve(cls.guarded_bases, cls.guarded_carve_left, cls.guarded_carve_populated);
      } else if (options.protection == StackProtection::kGuarded) {
        return std::errc::not_enough_memory;
      }
    } else {
      s.guarded_mappings += 2;  // reserve before dropping the lock for the system calls
      lock.unlock();
      void* lo = context_internal::VmMap(SlotSize(c));
      bool ok = lo != nullptr;
      if (ok && !context_internal::VmMakeGuard(lo)) {
        context_internal::VmUnmap(lo, SlotSize(c));
        ok = false;
      }
      if (ok && s.options.populate_ahead != 0) Populate({static_cast<std::byte*>(lo), 1, c});
      lock.lock();
      if (!ok) {
        s.guarded_mappings -= 2;
        if (options.protection == StackProtection::kGuarded) return std::errc::not_enough_memory;
      } else {
        stack.lo_ = static_cast<std::byte*>(lo);
        stack.chunk_ = kLooseChunk;
        s.counts.mappings += 2;                  // the stack and its guard page are two VMAs
        RegisterGuard(stack.lo_, ClassSize(c));  // lock order: pool mutex, then registry's
      }
    }
    if (stack.lo_ != nullptr) {
      stack.pool_ = this;
      stack.protection_ = StackProtection::kGuarded;
      ++s.counts.live_guarded;
      lock.unlock();
      Populate(populate);
      return stack;
    }
  }

  // Compact: a cached slot, else carve one, else map a new chunk.
  bool carved = false;
  if (cls.compact_free.pop(&stack.lo_, &stack.chunk_, &stack.slot_)) {
    s.cached_bytes -= std::min(s.cached_bytes, ClassSize(c));
    --s.counts.cached_compact;
  } else if (cls.pending.pop(&stack.lo_, &stack.chunk_, &stack.slot_)) {
    // (past the budget, pages not given back yet: reused before anything new is made)
    --s.pending_total;
    s.pending_changed = std::chrono::steady_clock::now();
    --s.counts.cached_compact;
  } else {
    if (cls.carve_left == 0) {
      std::size_t slots = SlotsPerChunk(c);
      std::size_t bytes = slots * SlotSize(c);
      void* chunk = context_internal::VmMap(bytes);
      if (chunk == nullptr) return std::errc::not_enough_memory;
      s.chunks.emplace_back(static_cast<std::byte*>(chunk), bytes);
      cls.compact_bases.push_back(static_cast<std::byte*>(chunk));
      cls.compact_free.add_chunk();
      cls.pending.add_chunk();
      ++s.counts.mappings;
      cls.carve_left = slots;
    }
    carve(cls.compact_bases, cls.carve_left, cls.carve_populated);
    carved = true;
  }
  stack.pool_ = this;
  stack.protection_ = StackProtection::kCompact;
  ++s.counts.live_compact;
  if (carved) {
    lock.unlock();
    // Map the zero page under the red zones of the slots populated ahead now, with one call:
    // the red-zone check at release reads them, and a read fault there (~1.1 us here) was the
    // largest single cost of releasing 100,000 fibers. No memory is spent.
    // (Nothing populated ahead: this slot's red zone alone.)
    const CarvedSlots zones =
        s.options.populate_ahead == 0 ? CarvedSlots{stack.lo_, 1, c} : populate;
    context_internal::VmPrefaultRead(zones.first, SlotSize(c), zones.populate, kGuard);
    Populate(populate);
  }
  return stack;
}

bool StackPool::check_red_zone(const Stack& stack) {
  if (stack.protection_ != StackProtection::kCompact || stack.lo_ == nullptr) return true;
  // Reading a never-written anonymous page maps the shared zero page: no memory is spent.
  const std::byte* probe = stack.lo_ + kGuard - kRedZoneCheckBytes;
  // Word-wise, with no early exit, so the compiler can vectorise it: a byte loop was 6% of
  // releasing 100,000 parked fibers (every stack passes here on its way back to the pool).
  std::uint64_t any = 0;
  for (std::size_t i = 0; i < kRedZoneCheckBytes; i += sizeof any) {
    std::uint64_t word;
    std::memcpy(&word, probe + i, sizeof word);
    any |= word;
  }
  return any == 0;
}

std::size_t StackPool::allocate_cached(const StackOptions& options, Stack* out, std::size_t n) {
  if (!valid_stack_size(options.size) || n == 0) return 0;
  const int c = ClassIndex(options.size);
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  State::Class& cls = s.classes[c];
  std::size_t got = 0;
  auto take = [&](SlotList& free_list, StackProtection p) {
    for (; got < n; ++got) {
      Stack& st = out[got];
      st.reset();
      if (!free_list.pop(&st.lo_, &st.chunk_, &st.slot_)) break;
      st.pool_ = this;
      st.class_index_ = static_cast<std::uint8_t>(c);
      st.protection_ = p;
      s.cached_bytes -= std::min(s.cached_bytes, ClassSize(c));
      if (p == StackProtection::kGuarded) {
        --s.counts.cached_guarded;
        ++s.counts.live_guarded;
      } else {
        --s.counts.cached_compact;
        ++s.counts.live_compact;
      }
    }
  };
  if (options.protection != StackProtection::kCompact) {
    take(cls.guarded_free, StackProtection::kGuarded);
    std::size_t before = got;
    take(cls.guarded_pending, StackProtection::kGuarded);
    s.pending_total -= got - before;
    if (got != before) s.pending_changed = std::chrono::steady_clock::now();
  }
  if (options.protection != StackProtection::kGuarded) {
    take(cls.compact_free, StackProtection::kCompact);
    std::size_t before = got;
    take(cls.pending, StackProtection::kCompact);
    s.pending_total -= got - before;
    if (got != before) s.pending_changed = std::chrono::steady_clock::now();
  }
  return got;
}

void StackPool::release_many(Stack* stacks, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    if (!check_red_zone(stacks[i]))
      DieRedZone(stacks[i].lo_ + kGuard, ClassSize(stacks[i].class_index_));
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  for (std::size_t i = 0; i < n; ++i) {
    Stack& st = stacks[i];
    if (st.pool_ != this) continue;
    CacheLocked(st);
    st.pool_ = nullptr;
    st.lo_ = nullptr;
  }
}

void StackPool::release(Stack& stack) noexcept {
  if (!check_red_zone(stack)) DieRedZone(stack.lo_ + kGuard, ClassSize(stack.class_index_));
  std::lock_guard<std::mutex> lock(state_->mu);
  CacheLocked(stack);
}

void StackPool::CacheLocked(Stack& stack) noexcept {
  State& s = *state_;
  const int c = stack.class_index_;
  State::Class& cls = s.classes[c];
  const bool guarded = stack.protection_ == StackProtection::kGuarded;
  if (guarded) {
    --s.counts.live_guarded;
    ++s.counts.cached_guarded;
  } else {
    --s.counts.live_compact;
    ++s.counts.cached_compact;
  }
  if (s.cached_bytes + ClassSize(c) <= s.options.max_cached_bytes) {
    s.cached_bytes += ClassSize(c);
    (guarded ? cls.guarded_free : cls.compact_free).push(stack.lo_, stack.chunk_, stack.slot_);
  } else {
    // Past the budget: pending, reused first, given back (compact) or unmapped (guarded) in a
    // batch when idle; each madvise or munmap flushes every core's TLB (see State).
    (guarded ? cls.guarded_pending : cls.pending).push(stack.lo_, stack.chunk_, stack.slot_);
    ++s.pending_total;
    s.pending_changed = std::chrono::steady_clock::now();
  }
}

void StackPool::trim() {
  State& s = *state_;
  std::vector<std::pair<std::byte*, int>> unmap;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    StackPoolInternals::FlushTrimLocked(s, lock);
    for (int c = 0; c < kNumClasses; ++c) {
      State::Class& cls = s.classes[c];
      if (s.markers) {
        // Guarded chunks stay mapped: give the pages back, keep the slots (still guarded).
        cls.guarded_free.for_each(
            [c](std::byte* lo) { context_internal::VmDiscard(lo + kGuard, ClassSize(c)); });
      } else {
        cls.guarded_free.for_each([&unmap, c](std::byte* lo) { unmap.emplace_back(lo, c); });
        s.guarded_mappings -= 2 * cls.guarded_free.size();
        s.counts.mappings -= 2 * cls.guarded_free.size();
        s.counts.cached_guarded -= cls.guarded_free.size();
        cls.guarded_free.clear();
      }
      cls.compact_free.for_each(
          [c](std::byte* lo) { context_internal::VmDiscard(lo + kGuard, ClassSize(c)); });
    }
    s.cached_bytes = 0;
  }
  for (auto& [lo, c] : unmap) {
    UnregisterGuard(lo);
    context_internal::VmUnmap(lo, SlotSize(c));
  }
}

StackPoolStats StackPool::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->counts;
}

// ---- Stack ------------------------------------------------------------------------------------

Stack& Stack::operator=(Stack&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = other.pool_;
    lo_ = other.lo_;
    chunk_ = other.chunk_;
    slot_ = other.slot_;
    class_index_ = other.class_index_;
    protection_ = other.protection_;
    other.pool_ = nullptr;
    other.lo_ = nullptr;
  }
  return *this;
}

StackSpan Stack::span() const {
  if (pool_ == nullptr) return {};
  return StackSpan{lo_ + kGuard, ClassSize(class_index_)};
}

std::size_t Stack::size() const { return pool_ == nullptr ? 0 : ClassSize(class_index_); }

void Stack::reset() noexcept {
  if (pool_ == nullptr) return;
  pool_->release(*this);
  pool_ = nullptr;
  lo_ = nullptr;
}

}  // namespace weft
