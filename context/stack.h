// context/stack.h: fiber stacks. mmap'd, in power-of-two size classes (16 KiB .. 64 MiB), pooled
// for reuse (a first touch of a page costs 10-20 us on the reference machines, so stacks are kept,
// not returned to the kernel after every fiber), in two protection classes:
//
//   kGuarded  a guard page below it: overflow faults at once, and the SIGSEGV handler (on an
//             alternate signal stack) prints which fiber stack it was. Where the kernel has guard
//             markers (Linux 6.13+, MADV_GUARD_INSTALL), guarded stacks are carved from shared
//             4 MiB chunks like compact ones (one mapping for hundreds of stacks; the markers of
//             a whole chunk are installed with one call per 64 stacks). Elsewhere (older kernels,
//             qemu-user, Windows) each is its own mapping with a PROT_NONE guard page, costing 2
//             of the process's vm.max_map_count (65,530 by default) memory mappings.
//   kCompact  carved from a shared 4 MiB chunk (one mapping for hundreds of stacks), with a
//             4 KiB red-zone page below each stack that is never written on purpose. Overflow is
//             detected after the fact: when the stack is released (and by check_red_zone), the
//             red zone's top 256 bytes must still be zero, else the process aborts naming the
//             stack. A frame larger than 4 KiB can jump the red zone unseen.
//   kAuto     (default) kGuarded while the pool's guarded stacks use less than its mapping budget
//             (half of vm.max_map_count), kCompact after. So 100,000 live stacks work on a stock
//             kernel: all of them have hard guard pages with guard markers, the first ~16,000
//             without.
//
// Defines: weft::StackProtection, weft::StackOptions, weft::Stack, weft::StackPoolOptions,
// weft::StackPoolStats, weft::StackPool, weft::StackCache, weft::install_stack_overflow_handler,
// weft::kMaxStackSize, weft::valid_stack_size.

#ifndef WEFT_CONTEXT_STACK_H_
#define WEFT_CONTEXT_STACK_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "weft/base/result.h"
#include "weft/context/context.h"

namespace weft {

enum class StackProtection : std::uint8_t { kAuto, kGuarded, kCompact };

// kMaxStackSize: the largest size class. valid_stack_size: whether a StackOptions::size is one a
// class can hold (1 byte .. kMaxStackSize); allocate() fails any other with EINVAL.
inline constexpr std::size_t kMaxStackSize = std::size_t{64} << 20;
constexpr bool valid_stack_size(std::size_t size) { return size != 0 && size <= kMaxStackSize; }

struct StackOptions {
  // size: usable bytes, rounded up to the next size class (16 KiB .. 64 MiB).
  std::size_t size = std::size_t{64} << 10;
  StackProtection protection = StackProtection::kAuto;
};

class StackPool;

// Stack: a pooled stack, owned (move-only); going out of scope returns it to its pool. The
// memory must not be in use by a running context by then.
class Stack {
 public:
  Stack() = default;
  Stack(Stack&& other) noexcept { *this = std::move(other); }
  Stack& operator=(Stack&& other) noexcept;
  ~Stack() { reset(); }

  explicit operator bool() const { return pool_ != nullptr; }
  // span: the usable memory, for make_context.
  StackSpan span() const;
  std::size_t size() const;
  // protection: kGuarded or kCompact, never kAuto.
  StackProtection protection() const { return protection_; }
  // reset: returns the stack to its pool now.
  void reset() noexcept;

 private:
  friend class StackPool;
  friend class StackCache;
  StackPool* pool_ = nullptr;
  std::byte* lo_ = nullptr;  // start of the slot: guard or red-zone page, then the usable span
  std::uint32_t chunk_ = 0;  // which of its class's chunks holds it, and which slot there
  std::uint16_t slot_ = 0;   // (the pool's free lists file it by these)
  std::uint8_t class_index_ = 0;
  StackProtection protection_ = StackProtection::kAuto;
};

struct StackPoolOptions {
  // max_cached_bytes: usable bytes of free stacks kept ready for reuse. Stacks freed past it
  // wait in a pending list (reused first) until flush_trim gives their pages back: compact ones
  // and guarded ones in chunks with MADV_DONTNEED (their slots and guards stay), guarded ones in
  // their own mappings (no guard markers) by unmapping them.
  std::size_t max_cached_bytes = std::size_t{256} << 20;
  // guarded_mapping_budget: memory mappings kAuto may spend on guarded stacks (2 per stack, or
  // with guard markers 1 per chunk of them); 0 = half of /proc/sys/vm/max_map_count.
  std::size_t guarded_mapping_budget = 0;
  // guard_markers: use the kernel's guard markers for guarded stacks where it has them (see
  // kGuarded). false keeps one mapping per guarded stack (for tests of that path).
  bool guard_markers = true;
  // populate_ahead: as a new stack is carved from a chunk, the top pages of this many new stacks
  // (it and the next ones in the chunk) get their memory at once, with one system call (Linux
  // 5.14+), instead of each faulting in at its first write; at most populate_ahead - 1 pages are
  // committed before their stacks are used. 0: off, every top page faults in when first touched.
  std::size_t populate_ahead = 16;
};

struct StackPoolStats {
  std::size_t live_guarded = 0;
  std::size_t live_compact = 0;
  std::size_t cached_guarded = 0;
  std::size_t cached_compact = 0;
  // mappings: kernel memory mappings (VMAs) the pool holds, at most: 2 per guarded stack, or
  // with guard markers 1 per guarded chunk, and 1 per compact chunk.
  std::size_t mappings = 0;
  std::size_t guarded_mapping_budget = 0;
  bool guard_markers = false;  // whether this pool's guarded stacks use guard markers
};

// StackPool: allocates and caches stacks. Thread-safe (one mutex; per-worker caches in front of
// it belong to the scheduler). Cached stacks are handed out again in the order they were first
// carved (chunk by chunk, each chunk's slots by address), whatever order they were freed in, so
// neighbouring fibers keep neighbouring stacks (docs/context.md). Destroying a pool with live
// stacks prints a warning and leaks them.
class StackPool {
 public:
  explicit StackPool(StackPoolOptions options = {});
  ~StackPool();
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;

  // default_pool: the process-wide pool (never destroyed).
  static StackPool& default_pool();

  // allocate: a stack of at least options.size usable bytes. Also installs the overflow handler
  // for the calling thread (install_stack_overflow_handler). Errors: EINVAL for size 0 or over
  // 64 MiB; ENOMEM when the kernel refuses memory or mappings (kAuto falls back to kCompact
  // first). Any thread.
  Result<Stack> allocate(const StackOptions& options = {});

  // allocate_cached: up to n cached stacks of the class options.size falls in (protection as in
  // allocate), taken under one lock and without system calls; returns how many went to out.
  // For caches in front of the pool, which refill in batches. Any thread.
  std::size_t allocate_cached(const StackOptions& options, Stack* out, std::size_t n);
  // release_many: returns n stacks (emptying them) under one lock. Any thread.
  void release_many(Stack* stacks, std::size_t n) noexcept;

  // check_red_zone: false if a compact stack's red zone was written (it overflowed); always true
  // for guarded stacks. Any thread.
  static bool check_red_zone(const Stack& stack);

  // trim: gives back the memory of every cached stack: guarded stacks in their own mappings are
  // unmapped; stacks in chunks (compact, and guarded ones with guard markers) keep their slots
  // and lose their pages (MADV_DONTNEED).
  void trim();
  // flush_trim: gives back the pages of stacks freed past max_cached_bytes (see there). Their
  // madvise calls are deferred and batched (each flushes the TLB of every core), so releasing
  // many stacks at once stays cheap, and until then they are reused first. A scheduler calls
  // this when a worker goes idle, with min_quiet: nothing is given back until the pending list
  // has not changed for that long (a burst that freed them may come back for them; Go's
  // scavenger waits too), and at most max_stacks per call (a scheduler bounds the time an idle
  // worker spends here). Returns how many stacks it gave back. trim_pending: whether any wait.
  std::size_t flush_trim(std::chrono::nanoseconds min_quiet = std::chrono::nanoseconds(0),
                         std::size_t max_stacks = SIZE_MAX);
  bool trim_pending() const;

  StackPoolStats stats() const;

 private:
  friend class Stack;
  friend struct StackPoolInternals;  // stack.cc's helpers
  struct State;
  void release(Stack& stack) noexcept;
  // CacheLocked: takes a live stack back (lock held): its class's free list while the cache
  // budget lasts, else its pending list. release and release_many both use it.
  void CacheLocked(Stack& stack) noexcept;
  std::unique_ptr<State> state_;
};

// StackCache: one thread's (a worker's) cache of stacks in front of a StackPool, per size class
// and protection: taking and recycling stacks takes no lock until the cache is empty or full,
// and then refills or spills half a class at once (one lock for many stacks: a scheduler whose
// fibers start on one worker and end on another moves stacks between caches in batches).
// Owner thread only. Destroying it returns the cached stacks to the pool.
class StackCache {
 public:
  explicit StackCache(StackPool& pool = StackPool::default_pool(), std::size_t per_class = 32);
  ~StackCache();
  StackCache(const StackCache&) = delete;
  StackCache& operator=(const StackCache&) = delete;

  // allocate: a cached stack of the right class (and protection, unless kAuto), else one from
  // the pool. Errors as StackPool::allocate.
  Result<Stack> allocate(const StackOptions& options = {});
  // recycle: keeps `stack` for reuse, or returns it to its pool when this class is full (or the
  // stack belongs to another pool).
  void recycle(Stack&& stack);
  std::size_t cached() const;

 private:
  static constexpr int kClasses = 13;  // 16 KiB .. 64 MiB
  StackPool* pool_;
  std::size_t per_class_;
  std::vector<Stack> guarded_[kClasses];
  std::vector<Stack> compact_[kClasses];
};

// install_stack_overflow_handler: installs weft's SIGSEGV handler (once per process; faults that
// are not in a weft guard page go to the previously installed handler) and an alternate signal
// stack for the calling thread if it has none. A thread that runs fibers should call it once;
// StackPool::allocate does for its caller. Returns false if the kernel refused.
bool install_stack_overflow_handler();

}  // namespace weft

#endif  // WEFT_CONTEXT_STACK_H_
