// scheduler/internal/runtime_impl.h: Runtime::Impl, the state one runtime shares among its
// workers, and the inline paths every part of the runtime takes.
//
// Defines: weft::Runtime::Impl: the workers; the inject queue (from plain threads) and the
// overflow list (from full run queues); the sleeping workers (scheduler/internal/idle.h) and the
// wake-ups (WakeOne, WakeWorker, WatchTimers, Mail); scheduling (Schedule, PushLocal, Overflow,
// TakeOverflow, NextLocal, DirectNext); fiber objects (NewFiber, Recycle, Retire) and live-fiber
// credits; a fiber's first run (Prepare: its stack and context). The worker loop's members are
// defined in worker_loop.cc and timers.cc.
//
// Where runnable fibers go, and why, is drawn in docs/scheduler.md.

#ifndef WEFT_SCHEDULER_INTERNAL_RUNTIME_IMPL_H_
#define WEFT_SCHEDULER_INTERNAL_RUNTIME_IMPL_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <thread>
#include <utility>
#include <vector>

#include "blocking_pool.h"
#include "console.h"
#include "fiber.h"
#include "monitor.h"
#include "simulation.h"
#include "weft/base/atomic.h"
#include "weft/context/context.h"
#include "weft/context/stack.h"
#include "weft/deque/fork_join.h"
#include "weft/deque/mpmc_ring.h"
#include "weft/scheduler/internal/idle.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/internal/spin_lock.h"
#include "worker.h"

namespace weft {
namespace scheduler_internal {
// FiberMain: where every fiber's context starts (made by Impl::Prepare; worker_loop.cc).
[[noreturn]] void FiberMain(Transfer t);
// Tasks (scheduler/task.cc, park.cc). TaskWait: drives the wait a task is suspended in (true:
// resume its coroutine now; false: it was parked or queued). TaskBlocked: a task called
// something that blocks (a blocking wait, a fiber's yield): aborts with a message naming it.
bool TaskWait(Worker& w, Fiber* f, bool parked);
[[noreturn]] void TaskBlocked(Fiber* f, const char* how);
}  // namespace scheduler_internal

struct Runtime::Impl {
  using Clock = scheduler_internal::Clock;
  using Fiber = scheduler_internal::Fiber;
  using RecordBlock = scheduler_internal::RecordBlock;
  using RecordKind = scheduler_internal::RecordKind;
  using FiberFifo = scheduler_internal::FiberFifo;
  using IoRequest = scheduler_internal::IoRequest;
  using RetiredBlocks = scheduler_internal::RetiredBlocks;
  using Worker = scheduler_internal::Worker;
  using BlockingPool = scheduler_internal::BlockingPool;

  Runtime* self = nullptr;
  RuntimeOptions options;
  // The workers, then the spares (Worker::spare): nworkers of the first, which workers() and
  // pinned_worker count; a loop over every worker (steals, timer rescues) also sees the spares
  // (a spare whose thread never started has nothing to give).
  std::vector<std::unique_ptr<Worker>> workers;
  unsigned nworkers = 0;
  // The monitor starts spares' threads under spare_mu, unless the destructor has closed it
  // (it joins every thread it then finds started).
  std::mutex spare_mu;
  bool spares_closed = false;  // guarded by spare_mu
  // slots_started: nworkers plus the spares whose threads have started (spares start in index
  // order, so they are the first of workers). Relaxed: a thief that reads a stale count skips
  // the newest spare for a pass.
  weft::atomic<unsigned> slots_started{0};
  // held_workers: how many workers the monitor last saw stuck (Worker::held); relaxed, a hint
  // that the fairness pass reads (one load per kFairnessInterval starts).
  weft::atomic<unsigned> held_workers{0};
  MpmcRing<Fiber*> inject{1 << 16};  // spawns and wake-ups from outside the workers (bounded)
  // Overflow list: the older halves of full run queues (Go's global run queue), unbounded;
  // every worker takes batches from it. overflow_size mirrors overflow.count for lock-free
  // looks (relaxed: a hint; the lock orders the contents).
  std::mutex overflow_mu;
  FiberFifo overflow;  // guarded by overflow_mu
  weft::atomic<std::size_t> overflow_size{0};
  // Sleeping workers, and the handshake that wakes them (scheduler/internal/idle.h).
  scheduler_internal::IdleWorkers<Worker, std::mutex> idle;
  weft::atomic<bool> stop{false};
  std::atomic<bool> shutting_down{false};
  // measure_latency: RuntimeOptions::measure_latency; set before any worker starts.
  bool measure_latency = false;
  // sim: the simulated run (RuntimeOptions::simulation; scheduler/simulation.cc), null if the
  // runtime is not simulated. cold_spawn: a spawn takes its cold path (SpawnCold): with
  // measure_latency, or in a simulation. Both set before any worker starts.
  std::unique_ptr<scheduler_internal::SimState> sim;
  bool cold_spawn = false;
  void SpawnCold(Fiber* f);
  // StampRunnable: f became runnable (a wake-up's winner, a spawn, a yield, a region's end),
  // just before it is queued: the time, when this runtime measures scheduling latency.
  // Off, one test of a flag: the clock read is out of line (and cold), so the paths that stamp
  // (yield's tail call among them) keep their shape.
  void StampRunnable(Fiber* f) {
    if (measure_latency) [[unlikely]]
      StampNow(f);
  }
  [[gnu::cold, gnu::noinline]] static void StampNow(Fiber* f) {
    f->runnable_at = Clock::now().time_since_epoch().count();
  }
  // RecordLatency: f starts on w: how long it waited since StampRunnable.
  [[gnu::cold, gnu::noinline]] void RecordLatency(Worker& w, Fiber* f) {
    if (f->runnable_at == 0) return;
    const Clock::rep waited = Clock::now().time_since_epoch().count() - f->runnable_at;
    f->runnable_at = 0;
    if (waited < 0) return;
    w.sched_latency->record(static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::duration(waited)).count()));
    const auto us = static_cast<std::uint32_t>(std::min<Clock::rep>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::duration(waited)).count(),
        UINT32_MAX));
    // relaxed: a figure for the console; the runs of one fiber are ordered by its hand-offs.
    if (us > f->max_wait_us.load(std::memory_order_relaxed)) {
      f->max_wait_us.store(us, std::memory_order_relaxed);
    }
  }
  // light_park: the park/notify Dekker pair is asymmetric (the file comment); set once, before
  // any worker starts.
  bool light_park = false;
  // credits: one per live fiber, plus the spare ones workers hold (Worker::credits). Spawns on
  // a worker take a local credit (reserving kCreditBatch from here when out); exits give theirs
  // to the worker they end on, which returns surplus batches, and all it holds before it sleeps.
  // Every term is >= 0, so credits == 0 means no fiber is alive: an exact test without a shared
  // counter touched twice per fiber (which cost ~100 ns per spawn+join across two cores).
  static constexpr std::int64_t kCreditBatch = 64;
  weft::atomic<std::int64_t> credits{0};
  static constexpr std::uint64_t kIdBlock = 1024;  // ids handed to a worker at once
  std::atomic<std::uint64_t> spawned_outside{0};
  // Finished records for reuse, by kind, moved to and from the workers' free lists in batches.
  // A spin lock: a spawning worker refills while another spills, and a futex wake per contended
  // unlock (a system call) cost more than the few pointer moves it guards.
  sync_internal::SpinLock pool_lock;
  std::vector<Fiber*> pool[2];  // by RecordKind; guarded by pool_lock
  // Every record this runtime made (they live as long as it does), for dumps and shutdown.
  mutable std::mutex fibers_mu;
  std::vector<std::unique_ptr<RecordBlock>> all_fibers;  // guarded by fibers_mu
  // ForEachFiberLocked: f(Fiber*) for every record made, free ones too (state kDone); with
  // fibers_mu held.
  template <typename F>
  void ForEachFiberLocked(F&& f) const {
    for (const auto& block : all_fibers) {
      for (std::size_t i = 0; i < RecordBlock::kRecords; ++i) f(block->at(i));
    }
  }
  std::unique_ptr<BlockingPool> blocking;
  std::unique_ptr<ForkJoinPool> fork_join;  // hosted: the workers are this runtime's
  // The monitor (RuntimeOptions::stuck_threshold), null if off or if its thread could not
  // start. Made before the worker threads start and destroyed after they are joined: workers
  // tell it when they wake (Sleep).
  std::unique_ptr<scheduler_internal::Monitor> monitor;
  // block_on_waiters: threads in block_on (BlockOnScope): a hint for the monitor and the idle
  // workers, and what ~Runtime waits to reach 0 before freeing this.
  std::atomic<int> block_on_waiters{0};
  std::atomic<int> elsewhere_in_flight{0};  // ScheduleElsewhere calls under way
  // DeadlockSuspected: every live fiber is parked with no timer and no I/O, nothing is runnable,
  // every worker sleeps, and a thread waits in block_on (monitor.cc). A snapshot, read relaxed.
  bool DeadlockSuspected();
  // DeadlockHint: the dump of every fiber, to on_deadlock_hint (or stderr): the monitor's, once
  // it suspects a deadlock; a simulation's, once nothing can run or wake for that long.
  void DeadlockHint();
  // FibersJson: the live fibers for the console: counts by state and by what they wait on, and
  // up to `limit` of them listed (running first, then runnable, blocking, parked), as JSON.
  std::string FibersJson(std::size_t limit);
  // The console server (RuntimeOptions::console), null if off or if it could not start.
  std::unique_ptr<scheduler_internal::Console> console;

  // WakeOne: new work exists; wake one sleeping worker, if any. Cheap when none sleeps.
  void WakeOne() { idle.WakeOne(); }
  // WatchTimers: w's earliest deadline became `head`, earlier than before. A sleeping worker
  // that would not wake by head + kTimerRescueGrace could not rescue it if w got stuck
  // (RescueTimers): wake it, so that it sleeps again with head in its deadline (as Go's
  // wakeNetPoller does when a timer is added). Only a new earliest deadline pays this.
  void WatchTimers(Worker& w, Clock::rep head) {
    // Saturating: a deadline within the grace of the clock's end (time_point::max() - 1ns).
    const Clock::time_point watch = SaturatingAfter(Clock::time_point(Clock::duration(head)),
                                                    scheduler_internal::kTimerRescueGrace);
    idle.WatchTimers(workers, w, watch.time_since_epoch().count());
  }
  // WakeWorker: w specifically has work (its mailbox).
  void WakeWorker(Worker& w) { idle.WakeWorker(w); }
  void WakeAll() {
    std::lock_guard<std::mutex> lock(idle.lock());
    for (auto& w : workers) {
      if (!w->exited) w->Wake();
    }
  }

  // StartWorkerThread: w's thread, which sets its fields and its reactor, counts itself in
  // `ready` (if not null) and runs the loop. Throws std::system_error if it cannot start.
  void StartWorkerThread(Worker& w, std::atomic<unsigned>* ready);
  // SetSpareActive: the monitor's; starts the spare's thread at its first activation (and waits
  // until it is set up). False if it could not: no thread, no reactor (a spare without one
  // does not serve: its fibers' I/O would fail; its thread ends and a later call tries
  // again), or the runtime is shutting down.
  bool SetSpareActive(Worker& w, bool active);
  // Dormant: a pass of a dormant spare's loop (see Worker::spare); true once it must exit.
  bool Dormant(Worker& w);

  void Mail(Worker& w, Fiber* f, IoRequest* cancel) {
    {
      std::lock_guard<std::mutex> lock(w.mail_mu);
      if (f != nullptr) w.mail_fibers.push(f);
      if (cancel != nullptr) {
        cancel->next_cancel = w.mail_cancels;
        w.mail_cancels = cancel;
      }
      w.has_mail.store(true, std::memory_order_relaxed);  // the lock publishes the contents
    }
    if (w.spare) [[unlikely]] {
      // A dormant spare sleeps outside the idle list (an I/O cancel for its reactor comes
      // here). It has not exited: the fiber behind the request is alive.
      std::lock_guard<std::mutex> lock(idle.lock());
      w.Wake();
      return;
    }
    WakeWorker(w);
  }

  // PushLocal: a runnable fiber onto the current worker w (owner thread).
  [[gnu::noinline]] void PushLocal(Worker& w, Fiber* f) {
    if (PushLocalQuiet(w, f)) WakeOne();  // surplus work a sleeping worker could steal
  }
  // PushLocalQuiet: PushLocal without the wake-up, for a caller that pushes several and wakes
  // once (PopDueTimers). True if f went where thieves find it (a pinned fiber does not).
  bool PushLocalQuiet(Worker& w, Fiber* f) {
    if (f->pinned >= 0) {
      w.pinned_local.push(f);
      return false;
    }
    QueueLocal(w, f);
    return true;
  }
  // QueueLocal: f onto w's run queue (owner thread); when that is full, its older half and f go
  // to the overflow list instead.
  void QueueLocal(Worker& w, Fiber* f) {
    while (!w.queue.push(f)) {
      if (Overflow(w, f)) return;
    }
  }

  // Schedule: makes f runnable from any thread. On a worker of this runtime it becomes that
  // worker's next fiber (a woken fiber runs right after its waker: message-passing locality).
  [[gnu::noinline]] void Schedule(Fiber* f) {
    Worker* w = scheduler_internal::WorkerOf(this);
    if (w != nullptr && f->may_run_on(w->index)) [[likely]] {
      if (Fiber* displaced = w->run_next) PushLocal(*w, displaced);
      w->run_next = f;
      return;
    }
    ScheduleElsewhere(f);
  }
  // ScheduleElsewhere: f is pinned to another worker, or the caller is not a worker of this
  // runtime. Out of line, so that the common case above saves and restores no registers.
  // The caller may be a thread outside the runtime (a plain thread unlocking a Mutex a fiber
  // waits on): once f is queued it may run and finish, and the runtime's destructor could free
  // this while the wake below still runs. elsewhere_in_flight counts such calls; ~Runtime waits
  // for it to be 0. relaxed increment: sequenced before the queueing that hands f over, so
  // before f runs and ends, and so before ~Runtime's acquire load; release decrement: after
  // the last touch of this.
  [[gnu::noinline]] void ScheduleElsewhere(Fiber* f) {
    elsewhere_in_flight.fetch_add(1, std::memory_order_relaxed);
    if (f->pinned >= 0) {
      Mail(*workers[static_cast<unsigned>(f->pinned)], f, nullptr);
    } else {
      while (!inject.try_push(f)) std::this_thread::yield();
      WakeOne();
    }
    elsewhere_in_flight.fetch_sub(1, std::memory_order_release);
  }

  // Overflow: w's run queue is full: its older half and f go to the overflow list, where every
  // worker finds them (Go's runqputslow). Without this, a fiber that spawns thousands of fibers
  // keeps them on its own worker, and thieves that find other work never come for them. False
  // if thieves emptied the queue meanwhile (push again).
  [[gnu::noinline]] bool Overflow(Worker& w, Fiber* f) {
    Fiber* batch[scheduler_internal::kRunQueueCapacity / 2 + 1];
    std::size_t n = w.queue.take_half(batch, scheduler_internal::kRunQueueCapacity / 2);
    if (n == 0) return false;
    batch[n++] = f;
    ToOverflow(batch, n);
    return true;
  }
  // ToOverflow: n fibers onto the overflow list, in order.
  void ToOverflow(Fiber* const* fibers, std::size_t n) {
    std::lock_guard<std::mutex> lock(overflow_mu);
    for (std::size_t i = 0; i < n; ++i) overflow.push(fibers[i]);
    overflow_size.store(overflow.count, std::memory_order_relaxed);
  }
  // TakeOverflow: from the overflow list (Go's globrunqget), one fiber to run now and, with
  // `batch`, more onto w's queue: a fair share (count / workers + 1), at most half a queue.
  // Null if the list is empty.
  Fiber* TakeOverflow(Worker& w, bool batch) {
    if (overflow_size.load(std::memory_order_relaxed) == 0) return nullptr;
    std::lock_guard<std::mutex> lock(overflow_mu);
    std::size_t n =
        batch ? std::min(overflow.count / nworkers + 1, scheduler_internal::kRunQueueCapacity / 2)
              : 1;
    // Room: others only ever take from w's queue, so its free room only grows meanwhile.
    n = std::min(
        {n, overflow.count, scheduler_internal::kRunQueueCapacity - w.queue.size_approx() + 1});
    Fiber* first = overflow.pop();
    for (std::size_t i = 1; i < n; ++i) {
      Fiber* g = overflow.pop();
      // Cannot fail (n fits the room above); were it to, g goes back rather than be lost.
      if (!w.queue.push(g)) [[unlikely]] {
        overflow.push(g);
        break;
      }
    }
    overflow_size.store(overflow.count, std::memory_order_relaxed);
    return first;
  }

  // Fiber objects: a free list per worker, refilled from and spilled to the shared pool in
  // batches, so that spawning on one worker and exiting on another takes the pool lock once per
  // kFiberBatch fibers, not twice per fiber.
  static constexpr std::size_t kFiberBatch = 32;
  // A spawn prefetches the Fiber that the kSpawnAhead-th spawn after it will take, and a take
  // from the run queue the one kObjectAhead places behind the next (PrefetchHotLines).
  static constexpr std::size_t kSpawnAhead = 3;
  static constexpr std::size_t kObjectAhead = 2;
  // NewFiber and Retire are forced inline into their callers (Spawn; AfterExit and
  // FailUnstartable), as GCC chose when these types had internal linkage: out of line, W2's
  // spawn and exit paths measured more instructions per fiber (callgrind).
  [[gnu::always_inline]] Fiber* NewFiber(Worker* w, const FiberOptions& fiber_options,
                                         Worker* pinned_to, std::source_location site,
                                         RecordKind kind) {
    const int k = static_cast<int>(kind);
    Fiber* f = nullptr;
    if (w != nullptr && !w->free_records[k].empty()) {
      std::vector<Fiber*>& free = w->free_records[k];
      f = free.back();
      free.pop_back();
      if (free.size() >= kSpawnAhead) PrefetchHotLines(free[free.size() - kSpawnAhead]);
    } else {
      {
        std::lock_guard<sync_internal::SpinLock> lock(pool_lock);
        std::vector<Fiber*>& shared = pool[k];
        if (!shared.empty()) {
          f = shared.back();
          shared.pop_back();
          for (std::size_t i = 0; w != nullptr && i < kFiberBatch && !shared.empty(); ++i) {
            w->free_records[k].push_back(shared.back());
            shared.pop_back();
          }
        }
      }
      if (f == nullptr) f = NewRecordBlock(w, kind);
    }
    f->meta_lock.lock();
    // relaxed (both): only uniqueness matters.
    std::uint64_t id;
    if (w == nullptr) {
      id = scheduler_internal::g_next_fiber_id.fetch_add(1, std::memory_order_relaxed);
    } else {
      if (w->next_id == w->id_end) {
        w->next_id =
            scheduler_internal::g_next_fiber_id.fetch_add(kIdBlock, std::memory_order_relaxed);
        w->id_end = w->next_id + kIdBlock;
      }
      id = w->next_id++;
    }
    f->waiter.Renew(id);
    std::size_t n = std::min(fiber_options.name.size(), kNameMax);
    if (n != 0 && (f->name_chars() != nullptr || AllocateName(f))) {
      // (a nameless fiber leaves its name's bytes alone)
      char* name = f->name_chars();
      std::memcpy(name, fiber_options.name.data(), n);
      name[n] = '\0';
    } else {
      n = 0;
    }
    f->name_len = static_cast<std::uint8_t>(n);
    f->pinned = pinned_to != nullptr ? static_cast<std::int32_t>(pinned_to->index) : -1;
    f->spawn_site = site;
    f->meta_lock.unlock();
    return f;
  }
  // The longest name kept (FiberOptions::name is cut there): a record's name bytes, less the
  // terminator.
  static constexpr std::size_t kNameMax = scheduler_internal::kNameBytes - 1;
  // AllocateName: room for the name of a fiber or task, kept with its record; false without
  // memory (it is then nameless: a name is for dumps only).
  [[gnu::noinline]] static bool AllocateName(Fiber* f) {
    char* name = new (std::nothrow) char[scheduler_internal::kNameBytes];
    if (f->kind == RecordKind::kTask) {
      f->task().name = name;
    } else {
      scheduler_internal::Stackful(f)->name = name;
    }
    return name != nullptr;
  }
  // NewRecordBlock: makes a RecordBlock of `kind`; returns its first record and queues the rest
  // on w's free list (from a plain thread, w null, in the pool), so that they are taken in
  // address order.
  Fiber* NewRecordBlock(Worker* w, RecordKind kind) {
    const int k = static_cast<int>(kind);
    std::unique_ptr<RecordBlock> block;
    {
      RetiredBlocks& retired = RetiredBlocks::Get();
      std::lock_guard<std::mutex> lock(retired.mu);
      if (!retired.blocks[k].empty()) {
        block = std::move(retired.blocks[k].back());
        retired.blocks[k].pop_back();
      }
    }
    if (block == nullptr) block = std::make_unique<RecordBlock>(this, &shutting_down, kind);
    block->Bind(this, &shutting_down, light_park);
    const RecordBlock& b = *block;
    {
      std::lock_guard<std::mutex> lock(fibers_mu);
      try {
        all_fibers.push_back(std::move(block));
      } catch (const std::bad_alloc&) {
        // No memory to list it: it stays allocated all the same (a retired block's records may
        // still be notified late), and the spawn fails with bad_alloc.
        (void)block.release();
        throw;
      }
    }
    if (w != nullptr) {
      for (std::size_t i = RecordBlock::kRecords; i-- > 1;) w->free_records[k].push_back(b.at(i));
    } else {
      std::lock_guard<sync_internal::SpinLock> lock(pool_lock);
      for (std::size_t i = RecordBlock::kRecords; i-- > 1;) pool[k].push_back(b.at(i));
    }
    return b.at(0);
  }
  // Recycle: on the worker where f finished; to the free list of its kind (f->kind, which the
  // caller knows: reading it would touch a line of f that an exit touches for nothing else).
  void Recycle(Worker& w, Fiber* f, RecordKind kind) {
    f->state.store(scheduler_internal::kDone, std::memory_order_relaxed);
    const int k = static_cast<int>(kind);
    std::vector<Fiber*>& free = w.free_records[k];
    free.push_back(f);
    if (free.size() >= 2 * kFiberBatch) {
      std::lock_guard<sync_internal::SpinLock> lock(pool_lock);
      for (std::size_t i = 0; i < kFiberBatch; ++i) {
        pool[k].push_back(free.back());
        free.pop_back();
      }
    }
  }
  static constexpr std::uint64_t kFairnessInterval = 61;  // Go's schedtick check
  static constexpr std::uint32_t kLocalFairness = 16;     // a power of two (FairTurn's mask)
  static constexpr std::chrono::milliseconds kIdleNetMin{100}, kIdleNetMax{1600};
  static constexpr std::chrono::microseconds kRescueRetry{100};
  static constexpr std::chrono::milliseconds kWatchMax{10};
  // NextLocal: the worker's own runnable fibers: run_next, pinned, queue (FIFO), yield ring;
  // every kLocalFairness-th take, NextLocalFair's rotation instead. Only takes that find a fiber
  // count: a look that finds none changes nothing, so that a simulation, whose looks at an empty
  // worker depend on when other threads bring work, replays its choices.
  Fiber* NextLocal(Worker& w) {
    Fiber* g = FairTurn(w) ? NextLocalFair(w) : NextLocalInOrder(w);
    if (g != nullptr) ++w.local_takes;
    return g;
  }
  bool FairTurn(const Worker& w) const {
    return (w.local_takes & (kLocalFairness - 1)) == kLocalFairness - 1;
  }
  Fiber* NextLocalInOrder(Worker& w) {
    if (Fiber* g = w.run_next) {
      w.run_next = nullptr;
      return g;
    }
    if (w.pinned_local.count != 0) return w.pinned_local.pop();
    if (w.queue.size_approx() != 0) {
      if (Fiber* g = TakeOwnQueue(w)) return g;
    }
    return w.yields.pop();
  }
  // NextLocalFair: the four local sources asked from a rotating first one, which moves past the
  // source served. In NextLocal's fixed order, a source ahead that never empties starves those
  // behind it: two fibers that keep waking each other (each wake puts the other in run_next)
  // starved the queue, pinned fibers woken without end starved it too, and a queue that never
  // empties starved the yield ring, each for as long as it went on (the fairness pass looks only
  // at the shared queues, the reactor and the timers). With a turn in every kLocalFairness takes,
  // the head of each source runs within 4 such turns. (Tokio bounds its LIFO slot alike, at 3
  // in a row.)
  [[gnu::noinline]] Fiber* NextLocalFair(Worker& w) {
    for (std::uint32_t i = 0; i < 4; ++i) {
      const std::uint32_t source = (w.local_turn + i) & 3;
      Fiber* g = nullptr;
      if (source == 0) {
        g = w.yields.pop();
      } else if (source == 1) {
        if (w.queue.size_approx() != 0) g = TakeOwnQueue(w);
      } else if (source == 2) {
        if (w.pinned_local.count != 0) g = w.pinned_local.pop();
      } else {
        g = std::exchange(w.run_next, nullptr);
      }
      if (g != nullptr) {
        w.local_turn = source + 1;
        return g;
      }
    }
    return nullptr;
  }
  // PrefetchHotLines: asks, for writing, for the lines of f's first 128 bytes: what a spawn
  // writes, and what starting or resuming f reads and writes. Used a few fibers ahead, where
  // the Fiber has usually left the caches (a recycled one, or one that waited in a queue), so
  // that the misses overlap instead of stalling one after another. (context.h's prefetch loop.)
  [[gnu::always_inline]] static void PrefetchHotLines(const Fiber* f) {
    const auto lo = reinterpret_cast<std::uintptr_t>(f) & ~std::uintptr_t{63};
    const auto hi = reinterpret_cast<std::uintptr_t>(&f->wait_gen + 1);  // the last hot field
    context_internal::PrefetchLinesForWrite(lo, 0, static_cast<int>((hi - lo + 63) / 64));
  }
  // TakeOwnQueue: the oldest fiber of w's own queue (FIFO, so fibers take turns), or null.
  // Out of line: its out-parameter is a local whose address escapes, which would keep callers
  // (yield) from making their final switch a tail call.
  [[gnu::noinline]] static Fiber* TakeOwnQueue(Worker& w) {
    Fiber* g = nullptr;
    if (!w.queue.pop(&g)) return nullptr;
    // Software pipelining of cold resumes: a fiber that waited in a queue finds its object and
    // its stack out of the caches, and its resume waits on those misses one after another. So
    // as each fiber is taken, ask for the stack of the one after it (whose object was asked for
    // two takes earlier) and for the object of the one kObjectAhead after that. Hints only:
    // any of them may be taken by a thief meanwhile. A task has no stack (and its frame is found
    // through its record, a load that may miss: prefetching it was dropped, docs/scheduler.md).
    Fiber* next = nullptr;
    if (w.queue.peek(0, &next)) {
      if (Context c = next->context(); scheduler_internal::HasStack(c)) prefetch_context(c);
      Fiber* ahead = nullptr;
      if (w.queue.peek(kObjectAhead, &ahead)) PrefetchHotLines(ahead);
    }
    return g;
  }
  // DirectNext: the fiber to switch to directly from the running one, made current; null when
  // the worker loop must run (nothing local, a fairness pass is due, or a fiber found no stack).
  Fiber* DirectNext(Worker& w) {
    if (w.tick - w.fair_tick >= kFairnessInterval) return nullptr;
    Fiber* next = NextLocal(w);
    if (next == nullptr) return nullptr;
    if (IsTask(next)) [[unlikely]] {
      // A task runs on the worker's own stack: through the loop, as its next fiber. run_next may
      // hold another when NextLocalFair took the task from elsewhere: that one goes to the
      // queue's back, as a fiber displaced by a wake-up does.
      if (Fiber* displaced = std::exchange(w.run_next, next)) PushLocal(w, displaced);
      return nullptr;
    }
    if (!Prepare(w, next)) return nullptr;
    Started(w, next);
    return next;
  }
  // Prepare: a fiber about to run for the first time gets its stack, from w's cache, and its
  // context. False if no stack could be had: f is then queued on w.unstartable, for the worker
  // loop to fail (its join reports the error), and must not run.
  // Inline, with the first run's work out of line: a fiber that ran before costs one test here
  // (as one function, every switch paid the stack allocation's register saves and restores).
  bool Prepare(Worker& w, Fiber* f) {
    if (f->context() != nullptr) [[likely]]
      return true;
    return PrepareFirstRun(w, f);
  }
  [[gnu::noinline]] bool PrepareFirstRun(Worker& w, Fiber* f) {
    Result<Stack> stack =
        w.stacks->allocate({.size = f->stack_size, .protection = f->stack_protection});
    if (!stack.ok()) [[unlikely]] {
      w.unstartable.emplace_back(f, stack.error_code());
      return false;
    }
    f->stack() = std::move(stack).value();
    f->set_context(*make_context(f->stack().span(), &scheduler_internal::FiberMain));
    f->saved_errno = 0;  // a new fiber starts with errno 0 (Started puts it in place)
    // The name was written at spawn, before f was queued; a fresh record's name is empty.
    if (f->name_len != 0) set_context_name(f->context(), f->name());
    return true;
  }
  // Retire: f finished (or failed before it started) on w: its object and its credit stay here.
  [[gnu::always_inline]] void Retire(Worker& w, Fiber* f, RecordKind kind) {
    Recycle(w, f, kind);
    // The fiber's credit stays with this worker (returned in batches, and before it sleeps).
    std::int64_t spare = w.credits.load(std::memory_order_relaxed) + 1;
    w.credits.store(spare, std::memory_order_relaxed);
    if (spare >= 2 * kCreditBatch) ReturnCredits(w, kCreditBatch);
  }
  void FailUnstartable(Worker& w);
  void Started(Worker& w, Fiber* f) {
    *w.errno_slot = f->saved_errno;  // the fiber's own errno (see Fiber::saved_errno)
    f->worker = &w;
    f->state.store(scheduler_internal::kRunning, std::memory_order_relaxed);
    w.current = f;
    ++w.tick;
    scheduler_internal::Bump(w.counters.run);
    if (w.measure_latency) [[unlikely]]  // the worker's copy: a line Started writes anyway
      RecordLatency(w, f);
  }
  // Spill: half of the yield ring to the stealable queue, for a thief that asked or a sleeping
  // worker; pinned fibers stay.
  void Spill(Worker& w) {
    w.steal_request.store(false, std::memory_order_relaxed);
    std::size_t n = w.yields.count / 2;
    bool moved = false;
    for (std::size_t i = 0; i < n; ++i) {
      Fiber* f = w.yields.pop();
      if (f->pinned >= 0) {
        w.yields.push(f);
      } else {
        QueueLocal(w, f);
        moved = true;
      }
    }
    if (moved) WakeOne();
  }
  // ReturnCredits: n of w's spare credits back to the shared count (owner thread).
  void ReturnCredits(Worker& w, std::int64_t n) {
    if (n == 0) return;
    w.credits.store(w.credits.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
    // release: what the fibers behind these credits did happens before a zero is seen.
    credits.fetch_sub(n, std::memory_order_release);
  }
  void WorkerLoop(Worker& w);
  // WorkVisible: the look a worker makes after listing itself as a sleeper (idle.h): anything
  // runnable in the shared queues, in w's own slots and rings, its mailbox, or any run queue.
  bool WorkVisible(const Worker& w) const;
  // A simulated runtime's loop, and its pick of the next fiber and its wait for other threads
  // (scheduler/simulation.cc).
  void SimLoop(Worker& w);
  Fiber* SimNext(Worker& w);
  void SimWait(Worker& w);
  Fiber* FindWork(Worker& w);
  void TakeMail(Worker& w);
  // PopDueTimers: wakes the fibers whose deadlines in `heap`'s timers have passed, onto w (the
  // calling thread's worker; heap is w, or a stuck worker's in RescueTimers). Returns how many
  // it popped (none if another thread held heap's lock and try_lock is set).
  std::size_t PopDueTimers(Worker& w, Worker& heap, bool try_lock = false);
  void PopDueTimers(Worker& w) { (void)PopDueTimers(w, w); }
  Fiber* RescueTimers(Worker& w);
  // HelpHeld: at w's fairness pass while some worker is stuck: half of each stuck worker's run
  // queue, and its due timers, onto w. A worker with local work of its own (a spare serving a
  // busy runtime) reaches the steals and rescues of FindWork only when it runs out; this gives
  // the stuck workers' fibers their turn among its own.
  void HelpHeld(Worker& w);
  int PollReactor(Worker& w, std::optional<Clock::time_point> deadline);
  void Sleep(Worker& w);
  // WaitIdle: w sleeps until `deadline` in its reactor (or on its wake word, read as `word`
  // before the caller's last look for work), or until woken; counted in sleeps and idle_ns.
  void WaitIdle(Worker& w, std::uint32_t word, Clock::time_point deadline);
  void Run(Worker& w, Fiber* f);
  // RunTask: Run for a task: resumes its coroutine on w's stack until it parks, yields or ends.
  void RunTask(Worker& w, Fiber* f);
  // HandOffAfterPark: a task parked: its worker's next local fiber into run_next, as a fiber's
  // park switches to it directly (unless a fairness pass is due, or run_next holds one).
  void HandOffAfterPark(Worker& w);
  void FinishTask(Worker& w, Fiber* f);
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_INTERNAL_RUNTIME_IMPL_H_
