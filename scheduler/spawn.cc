// scheduler/spawn.cc: spawning a fiber (Spawn: its Fiber object, a live-fiber credit, and its
// first schedule; the stack comes at its first run), the spawn states that carry its callable and
// result (from the worker's slab, freed by whichever of the fiber and the handle lets go second),
// and the slow path of a join (JoinSignal::WaitSlow).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <system_error>
#include <vector>

#include "internal/runtime_impl.h"
#include "weft/alloc/slab.h"
#include "weft/context/stack.h"
#include "weft/sync/internal/wait_queue.h"

namespace weft {
namespace scheduler_internal {

void Spawn(Runtime& rt, FiberBody* body, const FiberOptions& options, std::source_location site,
           void* task_frame) {
  Runtime::Impl& impl = *rt.impl_;
  Worker* w = WorkerOf(&impl);
  StackOptions so{.size = options.stack_size != 0 ? options.stack_size : impl.options.stack_size,
                  .protection = options.protection};
  // The stack itself comes when the fiber first runs (Impl::Prepare); a size no stack class has
  // is bad input, reported now. A task has no stack: its options' size does not matter.
  if (task_frame != nullptr) so.size = impl.options.stack_size;
  if (!valid_stack_size(so.size)) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "weft: a fiber stack size must be 1 byte .. 64 MiB");
  }
  Worker* pinned_to =
      options.pinned_worker >= 0
          ? impl.workers[static_cast<unsigned>(options.pinned_worker) % impl.nworkers].get()
          : nullptr;
  Fiber* f;
  if (task_frame == nullptr) {
    f = impl.NewFiber(w, options, pinned_to, site, RecordKind::kFiber);
    f->stack_size = static_cast<std::uint32_t>(so.size);
    f->stack_protection = so.protection;
  } else {
    // A task, in a task's record: no stack, ever (Prepare sees a context); its worker resumes
    // the frame.
    f = impl.NewFiber(w, options, pinned_to, site, RecordKind::kTask);
    f->set_context(TaskContext());
    f->task().frame = task_frame;
    f->task().park = nullptr;
    f->task_retry = false;
    f->saved_errno = 0;
  }
  f->body = body;
  f->permit.store(false, std::memory_order_relaxed);
  f->pending_timer = nullptr;
  // (The waiter's note_wait is null already: every wait resets it as it ends.)
  f->state.store(kRunnable, std::memory_order_relaxed);
  if (impl.cold_spawn) [[unlikely]]
    impl.SpawnCold(f);
  if (w != nullptr) {
    std::int64_t spare = w->credits.load(std::memory_order_relaxed);
    if (spare == 0) {
      impl.credits.fetch_add(Runtime::Impl::kCreditBatch, std::memory_order_relaxed);
      spare = Runtime::Impl::kCreditBatch;
    }
    w->credits.store(spare - 1, std::memory_order_relaxed);
  } else {
    impl.credits.fetch_add(1, std::memory_order_relaxed);
  }
  if (w != nullptr) {
    Bump(w->counters.spawned);
  } else {
    impl.spawned_outside.fetch_add(1, std::memory_order_relaxed);
  }
  impl.Schedule(f);
}

}  // namespace scheduler_internal

void Runtime::Impl::SpawnCold(Fiber* f) {
  if (measure_latency) {
    f->max_wait_us.store(0, std::memory_order_relaxed);  // a new fiber in a reused object
    StampRunnable(f);
  }
  if (sim != nullptr) {
    // Its number in the trace (runnable_at is free: a simulation measures no latency).
    // relaxed: only distinctness matters; within the simulation's thread, the order.
    f->runnable_at =
        static_cast<Clock::rep>(sim->spawned.fetch_add(1, std::memory_order_relaxed) + 1);
    // It runs on its spawner's simulated host (a spawn from outside the runtime: the default).
    Fiber* spawner = scheduler_internal::CurrentFiber();
    f->sim_host = spawner != nullptr && spawner->rt == this ? spawner->sim_host : 0;
  }
}

namespace scheduler_internal {
namespace {
constexpr std::size_t kSpawnHeader = 16;  // keeps the object 16-byte aligned
constexpr std::uint64_t kFromHeap = 0, kFromSlab = 1;
// A bit beside either: FreeSpawnState leaves the memory (KeepSpawnState).
constexpr std::uint64_t kKept = 2;
}  // namespace

std::atomic<int> g_fail_spawn_states{0};

void* AllocateSpawnState(std::size_t bytes) {
  // relaxed: a test's switch, set while nothing else spawns.
  if (g_fail_spawn_states.load(std::memory_order_relaxed) > 0) [[unlikely]] {
    if (g_fail_spawn_states.fetch_sub(1, std::memory_order_relaxed) == 1) throw std::bad_alloc();
  }
  const std::size_t total = bytes + kSpawnHeader;
  Worker* w = t_worker;
  void* base = nullptr;
  std::uint64_t tag = kFromHeap;
  if (w != nullptr && w->spawn_states != nullptr) {
    base = w->spawn_states->allocate(total);  // null past 8 KiB or without memory
    if (base != nullptr) tag = kFromSlab;
  }
  if (base == nullptr) base = ::operator new(total);  // std::bad_alloc, as make_shared would
  std::memcpy(base, &tag, sizeof tag);
  // The header's second word: the worker whose slab it came from (SpawnStateIsLocal).
  Worker* home = tag == kFromSlab ? w : nullptr;
  std::memcpy(static_cast<std::byte*>(base) + sizeof tag, &home, sizeof home);
  return static_cast<std::byte*>(base) + kSpawnHeader;
}

bool SpawnStateIsLocal(const void* p) noexcept {
  Worker* home;
  std::memcpy(&home, static_cast<const std::byte*>(p) - kSpawnHeader + sizeof(std::uint64_t),
              sizeof home);
  return home != nullptr && home == t_worker;
}

namespace {
// The header's first word (AllocateSpawnState), read and written where the state p lives.
std::byte* HeaderOf(void* p) { return static_cast<std::byte*>(p) - kSpawnHeader; }
std::uint64_t TagOf(const std::byte* base) {
  std::uint64_t tag;
  std::memcpy(&tag, base, sizeof tag);
  return tag;
}
// FreeTagged: frees the state whose header starts at base, by where it came from.
void FreeTagged(std::byte* base, std::uint64_t tag) noexcept {
  if (tag == kFromHeap) {
    ::operator delete(base);
  } else if (Worker* w = t_worker; w != nullptr && w->spawn_states != nullptr) {
    w->spawn_states->free(base);  // ours: locally; another worker's: its remote-free list
  } else {
    SlabAllocator::free_mt(base);  // a plain thread (a handle joined or dropped outside)
  }
}
}  // namespace

void KeepSpawnState(void* p) noexcept {
  std::byte* base = HeaderOf(p);
  const std::uint64_t tag = TagOf(base) | kKept;
  std::memcpy(base, &tag, sizeof tag);
}

void FreeKeptSpawnState(void* p) noexcept {
  std::byte* base = HeaderOf(p);
  FreeTagged(base, TagOf(base) & ~kKept);
}

void FreeSpawnState(void* p) noexcept {
  std::byte* base = HeaderOf(p);
  const std::uint64_t tag = TagOf(base);
  if (tag & kKept) return;  // its owner frees it later (FreeKeptSpawnState)
  FreeTagged(base, tag);
}

bool JoinSignal::Claim(Waiter& self, Result<void>* result) {
  const auto me = reinterpret_cast<std::uintptr_t>(&self);
  std::uintptr_t seen = kOpen;
  // release: our Waiter is ready before set() can see it; acquire (also on failure): a kSet we
  // find comes with the result.
  if (word_.compare_exchange_strong(seen, me, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
    return true;
  }
  *result = seen == kSet ? Result<void>() : Result<void>(std::errc::device_or_resource_busy);
  return false;
}

Result<void> JoinSignal::Withdraw(Waiter& self, sync_internal::ParkResult r) {
  // Gave up or interrupted: withdraw, unless set() took the word first; then the join succeeded
  // after all, and its notify leaves a stale permit, which every wait tolerates
  // (sync/waiter.h). acquire: as in Claim, for the result.
  std::uintptr_t seen = reinterpret_cast<std::uintptr_t>(&self);
  if (word_.compare_exchange_strong(seen, kOpen, std::memory_order_acquire)) {
    return r == sync_internal::ParkResult::kWoken ? std::errc::interrupted
                                                  : sync_internal::ErrorOf(r);
  }
  return {};
}

Result<void> JoinSignal::WaitSlow(const WaitOptions& options, const atomic<bool>* interrupt) {
  Waiter& self = current_waiter();
  Result<void> claimed;
  if (!Claim(self, &claimed)) return claimed;
  sync_internal::ParkResult r = sync_internal::Park(
      self,
      [&] {
        // acquire (interrupt): what the interrupter wrote before setting it is visible.
        return is_set() || (interrupt != nullptr && interrupt->load(std::memory_order_acquire));
      },
      options, "JoinHandle", this);
  if (r == sync_internal::ParkResult::kWoken && is_set()) return {};
  return Withdraw(self, r);
}

}  // namespace scheduler_internal
}  // namespace weft
