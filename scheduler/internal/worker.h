// scheduler/internal/worker.h: a worker thread's state, and what the calling thread knows of it.
//
// Defines (weft::scheduler_internal): Worker (its run queue, run_next slot, yield ring, pinned
// fibers, mailbox, timer heap and its lock, stack cache, spawn-state shard, reactor, counters,
// and the fields of the sleep handshake in scheduler/internal/idle.h), RunQueue, t_worker (the
// calling thread's worker), t_region_fiber (the fiber a blocking thread runs for a region),
// CurrentFiber, the spare timer entries (NewTimerEntry, FreeTimerEntry, Release) and
// PublishTimerHead.
//
// Each field says which threads may touch it; most are the owner thread's alone.

#ifndef WEFT_SCHEDULER_INTERNAL_WORKER_H_
#define WEFT_SCHEDULER_INTERNAL_WORKER_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "fiber.h"
#include "weft/alloc/slab.h"
#include "weft/base/atomic.h"
#include "weft/base/fault.h"
#include "weft/base/futex.h"
#include "weft/base/histogram.h"
#include "weft/context/context.h"
#include "weft/context/stack.h"
#include "weft/deque/spmc_ring.h"
#include "weft/reactor/reactor.h"
#include "weft/sync/internal/spin_lock.h"
#include "weft/timer/timer_heap.h"

namespace weft {
namespace scheduler_internal {

// A worker's run queue: Go's local run queue (deque/spmc_ring.h). The owner pushes; the owner
// takes the oldest (FIFO, so fibers take turns) and thieves take half, each with one CAS. Full,
// its older half goes to the runtime's overflow list (Impl::Overflow).
constexpr std::size_t kRunQueueCapacity = 256;
using RunQueue = SpmcRing<Fiber*, kRunQueueCapacity>;

// ThreadClock: a thread's CPU time and run state, readable from another thread (Linux: its
// CPU-time clock and /proc/self/task/<tid>/stat; elsewhere: unknown). Set on the thread itself.
struct ThreadClock {
  void SetToCallingThread();
  // cpu_ns: CPU time the thread has used; -1 if unknown.
  std::int64_t cpu_ns() const;
  // runnable: true if it is running or waiting for a CPU ('R'), false if it sleeps or blocks in
  // the kernel; nullopt if unknown.
  std::optional<bool> runnable() const;
#if defined(__linux__)
  clockid_t clock{};
  int tid = -1;
#endif
};

// Relaxed<T>: a field its owner thread writes and reads as if it were plain, which another
// thread (the runtime's monitor) reads as a hint. Relaxed loads and stores: the same moves as a
// plain field on x86-64 and aarch64, and no data race.
template <typename T>
class Relaxed {
 public:
  Relaxed(T v = T()) : v_(v) {}  // NOLINT: implicit, as the plain field it stands for
  Relaxed(const Relaxed& other) : v_(static_cast<T>(other)) {}
  operator T() const { return v_.load(std::memory_order_relaxed); }  // NOLINT
  T operator->() const { return *this; }
  Relaxed& operator=(T v) {
    v_.store(v, std::memory_order_relaxed);
    return *this;
  }

 private:
  std::atomic<T> v_;
};

struct Worker {
  Runtime::Impl* rt = nullptr;
  unsigned index = 0;
  // A spare (RuntimeOptions::spare_workers): its thread starts when the monitor first needs it.
  // Active, it is a worker like the others; dormant, it runs no fiber: it forwards what becomes
  // runnable on it (its timers, its reactor's completions) to the inject queue, and sleeps
  // outside the idle list (Impl::Dormant). `active` is the monitor's to set (relaxed: the
  // wake-up that follows orders it).
  bool spare = false;
  weft::atomic<bool> active{false};
  // ready: the thread has set its fields (cpu_clock, reactor); release/acquire. A spare's are
  // read by the monitor, stats_json and Wake only once it is set.
  weft::atomic<bool> ready{false};
  int* errno_slot = nullptr;  // this worker thread's errno (its address, taken on the thread)
  // The worker thread's CPU-time clock and kernel thread id (Linux; for the monitor, which tells
  // a fiber that computes or blocks from a thread the system has descheduled). Written on the
  // thread before the runtime's constructor returns; read by the monitor after.
  ThreadClock cpu_clock;
  std::thread thread;
  RunQueue queue;
  Fiber* run_next = nullptr;
  // Local takes so far, and where NextLocalFair's rotation starts next (owner only).
  std::uint32_t local_takes = 0, local_turn = 0;
  FiberFifo pinned_local;  // owner only: runnable fibers pinned here
  // Yielded fibers, FIFO, owner only (no atomics: a yield costs a plain store). Thieves cannot
  // see it; they ask with steal_request and the owner spills half to its queue (Lace's split
  // request, applied to yields). It also spills when workers sleep (see Spill).
  FiberFifo yields;
  weft::atomic<bool> steal_request{false};  // a thief found nothing; relaxed (a hint)
  // The fiber running on this worker; null while the worker runs its own loop. The owner's; the
  // monitor reads it (with counters.run) to find a fiber that holds the worker too long.
  Relaxed<Fiber*> current = nullptr;
  // The current fiber runs a fork-join computation inline (ForkJoinScope): not stuck.
  Relaxed<bool> in_fork_join = false;
  // held: the monitor has reported this worker's current run (it is stuck); the monitor's to
  // write, a hint for the others' fairness passes (Impl::HelpHeld).
  Relaxed<bool> held = false;
  Context home = nullptr;  // the worker thread's own context
  // The deadlines of fibers that parked here. The owner inserts, cancels and pops; an idle worker
  // may pop the ones overdue by kTimerRescueGrace (RescueTimers: this worker is stuck in one
  // fiber). timer_mu guards the heap; timer_head is its earliest deadline (steady_clock ticks,
  // kNoTimer if empty), written under timer_mu and read by anyone without it (relaxed: a hint
  // that says whether to take the lock, and until when an idle worker may sleep).
  sync_internal::SpinLock timer_mu;
  TimerHeap timers ABSL_GUARDED_BY(timer_mu);
  weft::atomic<Clock::rep> timer_head{kNoTimer};
  // Until when this worker may not look at other workers' timers: 0 while it is awake (it looks
  // each time it finds no work), the deadline of its sleep while it sleeps, kNoTimer while it is
  // deciding that deadline. Read by WatchTimers (relaxed; the Dekker fences order it).
  weft::atomic<Clock::rep> watch_until{0};
  // watch_floor: the earliest time this worker's current sleep would end only to look at other
  // workers' timers (its start plus watch_backoff); WatchTimers wakes it no sooner. Relaxed: a
  // stale floor is an earlier one (the backoff only grows within an idle spell), so it costs a
  // wake-up at most. watch_backoff (owner only) doubles from kTimerRescueGrace to kWatchMax with
  // each sleep that ends to watch, and is cleared when the worker finds work: a worker idle
  // beside one whose timers keep coming due (and are popped by their owner) wakes at most about
  // 100 times a second for them, not once per timer.
  weft::atomic<Clock::rep> watch_floor{0};
  Clock::duration watch_backoff{0};
  std::unique_ptr<StackCache> stacks;
  // SpawnStates allocated on this worker (AllocateSpawnState). Owned by the worker's thread.
  std::unique_ptr<SizeClassShard> spawn_states;
  std::unique_ptr<Reactor> reactor;  // created on the worker's thread; null if it failed
  std::errc reactor_error{};
  std::uint64_t rng = 0;
  // Free records by RecordKind (fibers', tasks'). Owner only; batches move to and from the
  // runtime's pool.
  std::vector<Fiber*> free_records[2];
  // Freed timer entries for this worker's next timed waits (owner only): an intrusive list, so
  // that a free never allocates; up to kSpareTimers, so that a burst of timed waits (W5: 10,000
  // sleeps) costs no malloc and free once the worker has seen one that size.
  TimerEntry* spare_timers = nullptr;
  std::size_t spare_count = 0;  // kSpareTimers from the worker's exit on: later frees delete
  // Fibers that could not get a stack to start on, with the error; failed by the worker loop.
  std::vector<std::pair<Fiber*, std::error_code>> unstartable;
  // Spare live-fiber credits (see Impl::credits). Written by the owner only (relaxed load+store);
  // atomic so that stats_json may read it.
  weft::atomic<std::int64_t> credits{0};
  std::uint64_t next_id = 0, id_end = 0;  // owner only: a block of fiber ids
  // The safety-net timeout of the worker's next sleep (Impl::Sleep); owner only.
  std::chrono::milliseconds idle_net{100};
  // tick: fibers started (by the loop or by a direct switch); fair_tick: tick at the last
  // fairness pass (inject queue, reactor, timers, spills), due every kFairnessInterval.
  std::uint64_t tick = 0;
  std::uint64_t fair_tick = 0;
  // Direct I/O turns taken by the running fiber (TakeDirectIoTurn): valid while direct_io_tick
  // == tick, i.e. for one run of one fiber.
  std::uint64_t direct_io_tick = ~std::uint64_t{0};
  unsigned direct_io_used = 0;
  // RuntimeOptions::measure_latency, copied where the start and yield paths look (owner only;
  // in what was padding, so that no other field moves).
  bool measure_latency = false;
  Counters counters;
  // Scheduling latencies of the fibers it started (RuntimeOptions::measure_latency; null if
  // off). Its one writer is the owner; stats_json reads it.
  std::unique_ptr<LogHistogram> sched_latency;

  // Mailbox from other threads: pinned fibers made runnable, and I/O cancel requests.
  std::mutex mail_mu;
  FiberFifo mail_fibers;
  IoRequest* mail_cancels = nullptr;
  weft::atomic<bool> has_mail{false};
  // The closes tasks started on this worker's reactor and did not wait for (CloseFd), not
  // completed yet: freed as they complete, the rest after the reactor is gone (FreeTaskCloses).
  // Owner only.
  TaskCloseOp* task_closes = nullptr;

  // Sleeping (guarded by the runtime's idle.lock(); scheduler/internal/idle.h).
  bool sleeping = false;
  bool exited = false;
  std::atomic<std::uint32_t> wake_word{0};  // futex (std::atomic: FutexWait takes one)

  // clock_floor: the latest steady_clock reading taken on this worker's thread (by PopDueTimers
  // and sleeps): a time that has passed, known without reading the clock (a sleep's checks).
  // Owner only. Last, so that it moves no other field.
  Clock::time_point clock_floor{};

  // Wake: makes this worker's sleep (or its next one) return. Caller holds idle.lock() or knows
  // the worker has not exited.
  void Wake() {
    wake_word.fetch_add(1, std::memory_order_release);
    if (reactor != nullptr) {
      reactor->wake();
    } else {
      base_internal::FutexWake(wake_word, 1);
    }
  }
};

// The calling thread's worker (null on other threads). constinit: no dynamic initialisation, so
// other files reach it without a TLS wrapper call.
extern thread_local constinit Worker* t_worker;
// The fiber a blocking thread runs for a BlockingRegion (null on other threads).
extern thread_local constinit Fiber* t_region_fiber;

// Fiber ids: process-wide (several runtimes never share one), never reused; also each fiber's
// Waiter identity, so below 2^63 (sync/waiter.h).
extern std::atomic<std::uint64_t> g_next_fiber_id;

constexpr std::size_t kSpareTimers = std::size_t{1} << 16;  // per worker (at most 5 MiB)

// NewTimerEntry: a spare of the calling worker (refs reset; its node is unqueued: both sides
// released it), else a new one; null without memory (or an injected fault: WEFT_FAULTS'
// kTimerEntry site).
inline TimerEntry* NewTimerEntry() {
  Worker* w = t_worker;
  if (w == nullptr || w->spare_timers == nullptr) {
    if (fault::Inject(fault::Site::kTimerEntry, fault::Kind::kNoMemory)) [[unlikely]]
      return nullptr;
    return new (std::nothrow) TimerEntry{};
  }
  TimerEntry* e = w->spare_timers;
  w->spare_timers = e->next_spare;
  --w->spare_count;
  // The next spare, for the next sleep: the list's spares went cold since they were freed (W5:
  // a new sleep's read of its entry was a fifth of its wait).
  if (w->spare_timers != nullptr) {
    context_internal::PrefetchLinesForWrite(reinterpret_cast<std::uintptr_t>(w->spare_timers), 0,
                                            1);
  }
  // relaxed: nobody else holds a reference yet; publishing the entry orders it.
  e->refs.store(2, std::memory_order_relaxed);
  e->fired = false;
  return e;
}

inline void FreeTimerEntry(TimerEntry* e) {
  Worker* w = t_worker;
  if (w != nullptr && w->spare_count < kSpareTimers) {
    e->next_spare = w->spare_timers;
    w->spare_timers = e;
    ++w->spare_count;
    return;
  }
  delete e;
}

// PublishTimerHead: after a change to w's heap, its earliest deadline for idle workers; returns it.
inline Clock::rep PublishTimerHead(Worker& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w.timer_mu) {
  std::optional<Clock::time_point> next = w.timers.next_deadline();
  Clock::rep head = next ? next->time_since_epoch().count() : kNoTimer;
  // relaxed: a hint (see Worker::timer_head); the heap itself is read under the lock.
  w.timer_head.store(head, std::memory_order_relaxed);
  return head;
}

inline void Release(TimerEntry* e) {
  // acq_rel: the other side's last use of the entry happens before it is freed or reused.
  if (e->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) FreeTimerEntry(e);
}

// WorkerOf: the calling thread's worker if it belongs to runtime `rt`, else null (a plain
// thread, a blocking thread, or a worker of another runtime in the same process).
inline Worker* WorkerOf(const Runtime::Impl* rt) {
  Worker* w = t_worker;
  return w != nullptr && w->rt == rt ? w : nullptr;
}

// CurrentFiber: the fiber running on the calling thread (on a worker, or in a region on a
// blocking thread), else null.
inline Fiber* CurrentFiber() {
  Worker* w = t_worker;
  if (w != nullptr) return w->current;
  return t_region_fiber;
}

}  // namespace scheduler_internal
}  // namespace weft

#endif  // WEFT_SCHEDULER_INTERNAL_WORKER_H_
