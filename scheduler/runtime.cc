// scheduler/runtime.cc: workers, fibers, the fiber Waiter that lets //sync park fibers, fiber I/O
// on the workers' reactors, blocking work, shutdown, and observability.
//
// Worker loop (one per thread; docs/scheduler.md draws it):
//
//   run_next slot -> pinned fibers / mailbox -> own queue (FIFO) -> due timers -> reactor
//   (non-blocking, if it has operations) -> inject queue -> overflow list (a batch) -> steal
//   half of a random victim -> spin (yield) -> sleep in the reactor (or on a futex) until woken
//   or the next timer
//
// Every 61st pass also looks at the inject queue (or takes one fiber of the overflow list) and
// the reactor first, so fibers that keep a worker's own queue full cannot starve them (Go's
// schedtick check).
//
// Fiber states and who moves them:
//
//   kRunnable --worker runs it--> kRunning --wait(): switch, on-top fn (worker)--> kParked
//   kParked --notify / its timer / the on-top fn finding a permit--> kRunnable (queued)
//   kRunning --BlockingRegion--> kBlocking (on a blocking thread) --leave--> kRunnable
//
// A fiber publishes "parked" only in the on-top function that runs on its worker after the
// switch, so nothing can resume it while it is still on its own stack (the handshake's code is
// scheduler/internal/park.h, which the model checker runs too). The on-top function
// stores kParked and then reads the permit; notify, when it finds the fiber not parked yet,
// stores the permit and then reads the state (Dekker), so one of them sees the other, and the
// one that wins the kParked -> kRunnable CAS queues the fiber. Every park makes that store and
// load, and a notify almost always finds the fiber parked already (its fast path: the CAS
// alone), so on x86-64 Linux the pair is asymmetric (base/asymmetric_fence.h): the park's side
// has a compiler fence only, and the rare notify that must leave a permit runs membarrier(2) as
// the fence for both. A park then costs no locked instruction, a wake one (the CAS). Elsewhere,
// or where membarrier is refused (or WEFT_PARK_FENCE=symmetric), both sides are seq_cst, and a
// park costs one locked instruction (the kParked store).
//
// Fiber objects (and so their Waiters) are recycled, never freed while the runtime lives: a
// notifier may still call notify() on a fiber that already resumed and finished (see the lifetime
// contract in sync/waiter.h). A late notify only leaves a stale permit.

#include "weft/scheduler/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "weft/alloc/slab.h"
#include "weft/base/asymmetric_fence.h"
#include "weft/base/futex.h"
#include "weft/base/internal/fd_table.h"
#include "weft/base/thread_exit.h"
#include "weft/context/context.h"
#include "weft/context/internal/vm.h"
#include "weft/context/stack.h"
#include "weft/deque/mpmc_ring.h"
#include "weft/deque/spmc_ring.h"
#include "internal/blocking_pool.h"
#include "weft/scheduler/internal/idle.h"
#include "weft/scheduler/internal/park.h"
#include "weft/scheduler/io.h"
#include "weft/sync/internal/spin_lock.h"
#include "weft/sync/internal/wait_queue.h"
#include "weft/sync/waiter.h"
#include "weft/timer/timer_heap.h"

namespace weft {
namespace scheduler_internal {
namespace {

using Clock = std::chrono::steady_clock;
// Worker::timer_head when the worker's heap is empty (scheduler/internal/idle.h's kNoDeadline).
static_assert(std::is_same_v<Clock::rep, std::int64_t>);
constexpr Clock::rep kNoTimer = kNoDeadline;
// How overdue a worker's earliest timer must be before an idle worker pops it (RescueTimers).
// A worker that switches fibers pops its own due timers within a fairness pass; one that has
// not is stuck in one fiber (CPU-bound, or a blocking call outside call_blocking), and its
// sleepers would otherwise wait for it. Tokio's timer resolution; Go steals at once, but a
// fiber woken on its own worker finds its stack and object in that worker's cache.
constexpr std::chrono::milliseconds kTimerRescueGrace{1};

const char* StateName(int s) {
  switch (s) {
    case kRunnable:
      return "runnable";
    case kRunning:
      return "running";
    case kParked:
      return "parked";
    case kBlocking:
      return "blocking";
    default:
      return "done";
  }
}

struct Worker;
struct Fiber;
struct IoRequest;

// A fiber's Waiter: never spins (that would hold up the worker's other fibers); interrupted
// once its runtime shuts down (Runtime::Impl::shutting_down).
class FiberWaiter final : public Waiter {
 public:
  explicit FiberWaiter(const std::atomic<bool>* shutting_down)
      : Waiter(/*spins_before_park=*/0, shutting_down) {}
  bool wait(std::optional<SyncClock::time_point> deadline) override;
  void notify() override;
  // Renew: a new fiber in this Fiber object: its id is the Waiter's identity (Mutex ownership).
  void Renew(std::uint64_t fiber_id) { set_identity(fiber_id); }
  // Rebind: the Fiber object now belongs to another runtime (a retired FiberBlock reused).
  void Rebind(const std::atomic<bool>* shutting_down) { set_interrupt(shutting_down); }
  // Its fiber: it is always Fiber::waiter. Computed, not stored: a stored pointer sat on a line
  // of the Fiber that a wait touched for nothing else.
  Fiber* fiber();
};

// A deadline of a parked fiber. Two references: the heap side (dropped when the owner worker pops
// or cancels it) and the fiber side (dropped when the fiber resumes from that wait). The last one
// frees it (FreeTimerEntry: to the releasing worker's spares). Its heap state is only ever touched
// on the owner worker's thread.
struct TimerEntry {
  TimerNode node;  // first member: the heap hands back &node
  Fiber* fiber = nullptr;
  std::uint64_t gen = 0;
  Worker* owner = nullptr;
  std::chrono::steady_clock::time_point deadline;
  weft::atomic<int> refs{2};
  // Set by the owner worker as its deadline wakes the fiber (ClaimTimedOut), before the fiber is
  // published; read by the fiber's wait after it resumes, while it still holds its reference.
  // So the wait tells its own timer's wake-up from a stale entry's (of an earlier wait, which can
  // still win the CAS against this park between its generation check and the CAS): spurious.
  bool fired = false;
  TimerEntry* next_spare = nullptr;  // on its worker's spare list (Worker::spare_timers)
};

void FreeTimerEntry(TimerEntry* e);

void Release(TimerEntry* e) {
  // acq_rel: the other side's last use of the entry happens before it is freed or reused.
  if (e->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) FreeTimerEntry(e);
}

// Counters: written by their worker only (a relaxed load+store, no read-modify-write), read by
// stats_json from any thread.
struct Counters {
  std::atomic<std::uint64_t> spawned{0}, run{0}, stolen{0}, parked{0}, polled{0}, sleeps{0},
      idle_ns{0}, no_stack{0}, rescued{0};
};
inline void Bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// Line-aligned, so that its first 128 bytes are two lines (not three): W2 on 1 worker
// 22.0 -> 16.0 ms with the layout below. Made 64 at a time in a populated FiberBlock
// (NewFiberBlock), 448 bytes apart: the spacing glibc's aligned new gave them one at a time.
// Packed closer, 320 or 384 bytes apart, W2 on 1 worker measured a third slower
// (docs/scheduler.md).
struct alignas(64) Fiber {
  // shutting_down: the runtime's flag, which interrupts the fiber's waits once set.
  Fiber(Runtime::Impl* runtime, const std::atomic<bool>* shutting_down)
      : rt(runtime), waiter(shutting_down) {}
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // The first 128 bytes hold what a spawn writes and a first run reads (W2: a queued fiber has
  // left the caches by the time it runs, so each line here is a miss at both ends); the fields
  // of parks, wake-ups and dumps follow.
  Runtime::Impl* rt;
  // Null until the fiber first runs: its stack comes then, from the cache of the worker that
  // runs it (Impl::Prepare), not at spawn. A queued fiber holds no stack, and the one it gets is
  // typically the one the worker's last finished fiber left, warm in that core's cache.
  // Atomic only so that a worker may read it as a prefetch hint for a fiber it has not taken
  // (TakeOwnQueue); its owner's accesses go through context() and set_context(), relaxed: the
  // fiber itself is handed over through the run queues and switches, which order them.
  std::atomic<Context> ctx{nullptr};
  Context context() const { return ctx.load(std::memory_order_relaxed); }
  void set_context(Context c) { ctx.store(c, std::memory_order_relaxed); }
  Stack stack;
  FiberBody* body = nullptr;  // what it runs: its SpawnState, which frees itself (JoinSignal)
  Worker* worker = nullptr;   // the worker running it (or that last ran it)
  Worker* pinned = nullptr;   // non-null: runs only there
  // Identity: id, name_len and name are written at spawn and read by dumps, both under
  // meta_lock. name_len is the length of name, which is written (and terminated) only when not
  // empty.
  std::uint64_t id = 0;
  LocalSlots locals;
  TimerEntry* pending_timer = nullptr;  // handed to the park on-top function
  weft::atomic<int> state{kDone};        // made free, as a finished one (Spawn sets kRunnable)
  // The fd of the I/O it waits on, for dumps (relaxed: informational); what it waits on is
  // the waiter's note_wait.
  weft::atomic<int> wait_fd{-1};
  // The stack it asks for at its first run: StackOptions, packed (sizes are at most 64 MiB).
  std::uint32_t stack_size = 0;
  StackProtection stack_protection = StackProtection::kAuto;
  weft::atomic<bool> permit{false};
  // Set by a notify that won the kParked -> kRunnable CAS, before it schedules the fiber; read
  // and reset by the fiber (the scheduling hand-off orders the two).
  bool woken_by_notify = false;
  // errno, kept per fiber: saved as the fiber stops running, put back into the thread's errno
  // as it runs again (on whichever thread), so a value set before a switch is read after it.
  int saved_errno = 0;
  // Set by a sleep whose deadline it has just checked against a fresh clock reading: the next
  // wait skips its own check (and clock read) once. Owner only.
  bool deadline_checked = false;
  sync_internal::SpinLock meta_lock;
  std::uint8_t name_len = 0;
  // The generation of its current (or last) wait; a timer entry of another is stale. On the
  // same line as state, which a timer's wake-up reads too (PopDueTimers).
  weft::atomic<std::uint64_t> wait_gen{0};
  // ---- 128 bytes: a wait adds the waiter's first line (a sleep touches no other).
  FiberWaiter waiter;
  char name[32] = {};
  // A blocking region: the blocking thread's own context, and the task that moves it there.
  Context region_home = nullptr;
  struct RegionTask {
    BlockingTask task;  // first member: the pool hands back &task
    Fiber* fiber;
  } region_task{{}, this};
  // The next fiber in a FiberFifo's out-of-memory chain (see FiberFifo).
  Fiber* queue_next = nullptr;
  // The runtime's light_park, copied here so that a notify reads no Runtime memory unless it
  // wakes the fiber (a late notify of a finished fiber may come after its runtime is gone; the
  // Fiber itself outlives it, see RetiredBlocks). relaxed: set before the fiber is handed out.
  weft::atomic<bool> light_park{false};
  // A wait inside a region blocks the blocking thread (the fiber keeps its own Waiter, so a
  // Mutex it holds stays its own across the region): it sleeps on region_word (a futex) with
  // region_waiting set, and a notify that sees region_waiting bumps the word and wakes it.
  std::atomic<std::uint32_t> region_word{0};
  std::atomic<bool> region_waiting{false};
};

// FiberBlock: Fiber objects are made kFibers at a time, kStride bytes apart, in one page-aligned
// block whose pages get their memory with one system call (context_internal::VmPrefaultWrite:
// MADV_POPULATE_WRITE, Linux 5.14+) before the Fibers are constructed in it. Made one at a time by
// malloc, each new page of Fibers faulted in on its first write (15-23 us here, for 9 Fibers), and
// a burst of spawns past the most fibers alive so far (W5's reps that grow) paid that on the
// spawning worker. kStride: in the stride experiment of docs/scheduler.md (W2), 448 bytes apart
// measured as fast as malloc's own spacing (which is 448 too), 320 and 384 a third slower. The
// blocks live as long as the runtime (the free-fiber lists reuse their Fibers).
class FiberBlock {
 public:
  static constexpr std::size_t kFibers = 64;
  static constexpr std::size_t kStride = 448;
  static constexpr std::size_t kBytes = kFibers * kStride;  // 28 KiB, 7 pages
  static constexpr std::size_t kPageAlign = 4096;
  static_assert(sizeof(Fiber) <= kStride && kStride % alignof(Fiber) == 0);
  static_assert(kBytes % kPageAlign == 0);

  FiberBlock(Runtime::Impl* rt, const std::atomic<bool>* shutting_down)
      : mem_(static_cast<std::byte*>(::operator new (kBytes, std::align_val_t{kPageAlign}))) {
    context_internal::VmPrefaultWrite(mem_, kBytes, 1, kBytes);  // a hint: else they fault in
    for (std::size_t i = 0; i < kFibers; ++i) new (mem_ + i * kStride) Fiber(rt, shutting_down);
  }
  ~FiberBlock() {
    for (std::size_t i = 0; i < kFibers; ++i) at(i)->~Fiber();
    ::operator delete (mem_, std::align_val_t{kPageAlign});
  }
  FiberBlock(const FiberBlock&) = delete;
  FiberBlock& operator=(const FiberBlock&) = delete;

  // Bind: the Fibers now belong to `rt` (a new block, or a retired one reused). Every Fiber in it
  // is finished (kDone, no stack, no context).
  void Bind(Runtime::Impl* rt, const std::atomic<bool>* shutting_down, bool light_park) {
    for (std::size_t i = 0; i < kFibers; ++i) {
      Fiber* f = at(i);
      f->rt = rt;
      f->waiter.Rebind(shutting_down);
      f->light_park.store(light_park, std::memory_order_relaxed);
    }
  }

  Fiber* at(std::size_t i) const {
    return std::launder(reinterpret_cast<Fiber*>(mem_ + i * kStride));
  }

 private:
  std::byte* mem_;
};

// RetiredBlocks: the FiberBlocks of runtimes that are gone, for later runtimes to reuse; never
// freed. A release (Event::set from a plain thread, say) takes a fiber's Waiter under its lock and
// notifies it after unlocking; the fiber may finish and its runtime be destroyed in between. The
// late notify then finds a finished Fiber (kDone: it only leaves a stale permit, which every wait
// tolerates) in memory that is still a Fiber, instead of freed memory. The pool holds as many
// Fibers as the most that any runtimes had at once.
struct RetiredBlocks {
  std::mutex mu;
  std::vector<std::unique_ptr<FiberBlock>> blocks;
  static RetiredBlocks& Get() {
    static RetiredBlocks* r = new RetiredBlocks;  // never destroyed: late notifies may come
    return *r;
  }
};

// An I/O operation of a fiber, on its stack. Worker-thread fields are touched only on the owner's
// thread; the atomics tell the fiber what happened.
struct IoRequest {
  IoOp op;
  Waiter* waiter = nullptr;
  Worker* owner = nullptr;
  std::int64_t result = 0;
  weft::atomic<bool> finished{false};    // the completion ran (release: result is written)
  weft::atomic<bool> cancel_done{false};  // the owner consumed our cancel request
  IoRequest* next_cancel = nullptr;      // the owner's mailbox
};

// FiberFifo: a FIFO of runnable fibers that never fails to take one: a power-of-two ring that
// doubles when full (made on first use, so an empty one owns no memory), and, when it cannot
// grow (out of memory), a chain through the fibers themselves (Fiber::queue_next: a runnable
// fiber is in one queue at a time). Fibers chained go after those in the ring, and new ones go
// to the chain while it is not empty, so the order stays first in, first out. A push that threw
// std::bad_alloc would lose the fiber from inside a notify or a yield, and ~Runtime would wait
// for it forever.
std::atomic<bool> g_fail_queue_growth{false};  // fault injection for tests (WEFT_TEST_QUEUE_OOM)

struct FiberFifo {
  std::vector<Fiber*> buf;
  std::size_t head = 0, ring = 0;  // the ring: buf[head..], `ring` of them
  std::size_t count = 0;           // every fiber held: the ring's and the chain's
  Fiber* chain_head = nullptr;
  Fiber* chain_tail = nullptr;
  void push(Fiber* f) {
    if (ring == buf.size() || chain_head != nullptr) [[unlikely]]
      return PushSlow(f);
    buf[(head + ring++) & (buf.size() - 1)] = f;
    ++count;
  }
  Fiber* pop() {
    if (ring == 0) [[unlikely]]
      return PopChain();
    Fiber* f = buf[head];
    head = (head + 1) & (buf.size() - 1);
    --ring;
    --count;
    return f;
  }
  [[gnu::noinline]] void PushSlow(Fiber* f) {
    if (chain_head == nullptr && Grow()) return push(f);  // room in the ring now
    f->queue_next = nullptr;
    if (chain_tail != nullptr) {
      chain_tail->queue_next = f;
    } else {
      chain_head = f;
    }
    chain_tail = f;
    ++count;
  }
  [[gnu::noinline]] Fiber* PopChain() {
    Fiber* f = chain_head;
    if (f == nullptr) return nullptr;
    chain_head = f->queue_next;
    if (chain_head == nullptr) chain_tail = nullptr;
    --count;
    return f;
  }
  // Grow: doubles the ring (64 at first); false without memory.
  bool Grow() {
    // relaxed: a test knob, set before the runtime's threads start.
    if (g_fail_queue_growth.load(std::memory_order_relaxed) && !buf.empty()) return false;
    std::vector<Fiber*> grown;
    try {
      grown.resize(buf.empty() ? 64 : buf.size() * 2);
    } catch (const std::bad_alloc&) {
      return false;
    }
    for (std::size_t i = 0; i < ring; ++i) grown[i] = buf[(head + i) & (buf.size() - 1)];
    buf.swap(grown);
    head = 0;
    return true;
  }
};

// A worker's run queue: Go's local run queue (deque/spmc_ring.h). The owner pushes; the owner
// takes the oldest (FIFO, so fibers take turns) and thieves take half, each with one CAS. Full,
// its older half goes to the runtime's overflow list (Impl::Overflow).
constexpr std::size_t kRunQueueCapacity = 256;
using RunQueue = SpmcRing<Fiber*, kRunQueueCapacity>;

struct Worker {
  Runtime::Impl* rt = nullptr;
  unsigned index = 0;
  int* errno_slot = nullptr;  // this worker thread's errno (its address, taken on the thread)
  std::thread thread;
  RunQueue queue;
  Fiber* run_next = nullptr;
  FiberFifo pinned_local;  // owner only: runnable fibers pinned here
  // Yielded fibers, FIFO, owner only (no atomics: a yield costs a plain store). Thieves cannot
  // see it; they ask with steal_request and the owner spills half to its queue (Lace's split
  // request, applied to yields). It also spills when workers sleep (see Spill).
  FiberFifo yields;
  weft::atomic<bool> steal_request{false};  // a thief found nothing; relaxed (a hint)
  Fiber* current = nullptr;
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
  std::vector<Fiber*> free_fibers;  // owner only; batches move to and from the runtime's pool
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
  Counters counters;

  // Mailbox from other threads: pinned fibers made runnable, and I/O cancel requests.
  std::mutex mail_mu;
  FiberFifo mail_fibers;
  IoRequest* mail_cancels = nullptr;
  weft::atomic<bool> has_mail{false};

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

thread_local Worker* t_worker = nullptr;

// Fiber ids: process-wide (several runtimes never share one), never reused; also each fiber's
// Waiter identity, so below 2^63 (sync/waiter.h).
std::atomic<std::uint64_t> g_next_fiber_id{1};
thread_local Fiber* t_region_fiber = nullptr;  // the fiber a blocking thread runs for a region

constexpr std::size_t kSpareTimers = std::size_t{1} << 16;  // per worker (at most 5 MiB)

// NewTimerEntry: a spare of the calling worker (refs reset; its node is unqueued: both sides
// released it), else a new one.
TimerEntry* NewTimerEntry() {
  Worker* w = t_worker;
  if (w == nullptr || w->spare_timers == nullptr) return new TimerEntry{};
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

void FreeTimerEntry(TimerEntry* e) {
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
Clock::rep PublishTimerHead(Worker& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w.timer_mu) {
  std::optional<Clock::time_point> next = w.timers.next_deadline();
  Clock::rep head = next ? next->time_since_epoch().count() : kNoTimer;
  // relaxed: a hint (see Worker::timer_head); the heap itself is read under the lock.
  w.timer_head.store(head, std::memory_order_relaxed);
  return head;
}

// FiberMain: where every fiber's context starts (made by Impl::Prepare).
[[noreturn]] void FiberMain(Transfer t);

// WorkerOf: the calling thread's worker if it belongs to runtime `rt`, else null (a plain
// thread, a blocking thread, or a worker of another runtime in the same process).
Worker* WorkerOf(const Runtime::Impl* rt);

}  // namespace
}  // namespace scheduler_internal

using namespace scheduler_internal;

struct Runtime::Impl {
  Runtime* self = nullptr;
  RuntimeOptions options;
  std::vector<std::unique_ptr<Worker>> workers;
  MpmcRing<Fiber*> inject{1 << 16};  // spawns and wake-ups from outside the workers (bounded)
  // Overflow list: the older halves of full run queues (Go's global run queue), unbounded;
  // every worker takes batches from it. overflow_size mirrors overflow.count for lock-free
  // looks (relaxed: a hint; the lock orders the contents).
  std::mutex overflow_mu;
  FiberFifo overflow;  // guarded by overflow_mu
  weft::atomic<std::size_t> overflow_size{0};
  // Sleeping workers, and the handshake that wakes them (scheduler/internal/idle.h).
  IdleWorkers<Worker, std::mutex> idle;
  weft::atomic<bool> stop{false};
  std::atomic<bool> shutting_down{false};
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
  // Finished fibers for reuse, moved to and from the workers' free lists in batches. A spin
  // lock: a spawning worker refills while another spills, and a futex wake per contended
  // unlock (a system call) cost more than the few pointer moves it guards.
  sync_internal::SpinLock pool_lock;
  std::vector<Fiber*> pool;  // guarded by pool_lock
  // Every Fiber object this runtime made (they live as long as it does), for dumps and shutdown.
  mutable std::mutex fibers_mu;
  std::vector<std::unique_ptr<FiberBlock>> all_fibers;  // guarded by fibers_mu
  // ForEachFiberLocked: f(Fiber*) for every Fiber made, free ones too (state kDone); with
  // fibers_mu held.
  template <typename F>
  void ForEachFiberLocked(F&& f) const {
    for (const auto& block : all_fibers) {
      for (std::size_t i = 0; i < FiberBlock::kFibers; ++i) f(block->at(i));
    }
  }
  std::unique_ptr<BlockingPool> blocking;
  std::unique_ptr<ForkJoinPool> fork_join;  // hosted: the workers are this runtime's

  // WakeOne: new work exists; wake one sleeping worker, if any. Cheap when none sleeps.
  void WakeOne() { idle.WakeOne(); }
  // WatchTimers: w's earliest deadline became `head`, earlier than before. A sleeping worker
  // that would not wake by head + kTimerRescueGrace could not rescue it if w got stuck
  // (RescueTimers): wake it, so that it sleeps again with head in its deadline (as Go's
  // wakeNetPoller does when a timer is added). Only a new earliest deadline pays this.
  void WatchTimers(Worker& w, Clock::rep head) {
    idle.WatchTimers(workers, w, head + Clock::duration(kTimerRescueGrace).count());
  }
  // WakeWorker: w specifically has work (its mailbox).
  void WakeWorker(Worker& w) { idle.WakeWorker(w); }
  void WakeAll() {
    std::lock_guard<std::mutex> lock(idle.lock());
    for (auto& w : workers) {
      if (!w->exited) w->Wake();
    }
  }

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
    WakeWorker(w);
  }

  // PushLocal: a runnable fiber onto the current worker w (owner thread).
  [[gnu::noinline]] void PushLocal(Worker& w, Fiber* f) {
    if (PushLocalQuiet(w, f)) WakeOne();  // surplus work a sleeping worker could steal
  }
  // PushLocalQuiet: PushLocal without the wake-up, for a caller that pushes several and wakes
  // once (PopDueTimers). True if f went where thieves find it (a pinned fiber does not).
  bool PushLocalQuiet(Worker& w, Fiber* f) {
    if (f->pinned != nullptr) {
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
    Worker* w = WorkerOf(this);
    if (w != nullptr && (f->pinned == nullptr || f->pinned == w)) [[likely]] {
      if (Fiber* displaced = w->run_next) PushLocal(*w, displaced);
      w->run_next = f;
      return;
    }
    ScheduleElsewhere(f);
  }
  // ScheduleElsewhere: f is pinned to another worker, or the caller is not a worker of this
  // runtime. Out of line, so that the common case above saves and restores no registers.
  [[gnu::noinline]] void ScheduleElsewhere(Fiber* f) {
    if (f->pinned != nullptr) {
      Mail(*f->pinned, f, nullptr);
      return;
    }
    while (!inject.try_push(f)) std::this_thread::yield();
    WakeOne();
  }

  // Overflow: w's run queue is full: its older half and f go to the overflow list, where every
  // worker finds them (Go's runqputslow). Without this, a fiber that spawns thousands of fibers
  // keeps them on its own worker, and thieves that find other work never come for them. False
  // if thieves emptied the queue meanwhile (push again).
  [[gnu::noinline]] bool Overflow(Worker& w, Fiber* f) {
    Fiber* batch[kRunQueueCapacity / 2 + 1];
    std::size_t n = w.queue.take_half(batch, kRunQueueCapacity / 2);
    if (n == 0) return false;
    batch[n++] = f;
    std::lock_guard<std::mutex> lock(overflow_mu);
    for (std::size_t i = 0; i < n; ++i) overflow.push(batch[i]);
    overflow_size.store(overflow.count, std::memory_order_relaxed);
    return true;
  }
  // TakeOverflow: from the overflow list (Go's globrunqget), one fiber to run now and, with
  // `batch`, more onto w's queue: a fair share (count / workers + 1), at most half a queue.
  // Null if the list is empty.
  Fiber* TakeOverflow(Worker& w, bool batch) {
    if (overflow_size.load(std::memory_order_relaxed) == 0) return nullptr;
    std::lock_guard<std::mutex> lock(overflow_mu);
    std::size_t n =
        batch ? std::min(overflow.count / workers.size() + 1, kRunQueueCapacity / 2) : 1;
    // Room: others only ever take from w's queue, so its free room only grows meanwhile.
    n = std::min({n, overflow.count, kRunQueueCapacity - w.queue.size_approx() + 1});
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
  Fiber* NewFiber(Worker* w, const FiberOptions& fiber_options, Worker* pinned_to) {
    Fiber* f = nullptr;
    if (w != nullptr && !w->free_fibers.empty()) {
      f = w->free_fibers.back();
      w->free_fibers.pop_back();
      if (w->free_fibers.size() >= kSpawnAhead) {
        PrefetchHotLines(w->free_fibers[w->free_fibers.size() - kSpawnAhead]);
      }
    } else {
      {
        std::lock_guard<sync_internal::SpinLock> lock(pool_lock);
        if (!pool.empty()) {
          f = pool.back();
          pool.pop_back();
          for (std::size_t i = 0; w != nullptr && i < kFiberBatch && !pool.empty(); ++i) {
            w->free_fibers.push_back(pool.back());
            pool.pop_back();
          }
        }
      }
      if (f == nullptr) f = NewFiberBlock(w);
    }
    f->meta_lock.lock();
    // relaxed (both): only uniqueness matters.
    if (w == nullptr) {
      f->id = g_next_fiber_id.fetch_add(1, std::memory_order_relaxed);
    } else {
      if (w->next_id == w->id_end) {
        w->next_id = g_next_fiber_id.fetch_add(kIdBlock, std::memory_order_relaxed);
        w->id_end = w->next_id + kIdBlock;
      }
      f->id = w->next_id++;
    }
    f->waiter.Renew(f->id);
    std::size_t n = std::min(fiber_options.name.size(), sizeof f->name - 1);
    if (n != 0) {  // (a nameless fiber leaves name's line alone)
      std::memcpy(f->name, fiber_options.name.data(), n);
      f->name[n] = '\0';
    }
    f->name_len = static_cast<std::uint8_t>(n);
    f->pinned = pinned_to;
    f->meta_lock.unlock();
    return f;
  }
  // NewFiberBlock: makes a FiberBlock; returns its first Fiber and queues the rest on w's free
  // list (from a plain thread, w null, in the pool), so that they are taken in address order.
  Fiber* NewFiberBlock(Worker* w) {
    std::unique_ptr<FiberBlock> block;
    {
      RetiredBlocks& retired = RetiredBlocks::Get();
      std::lock_guard<std::mutex> lock(retired.mu);
      if (!retired.blocks.empty()) {
        block = std::move(retired.blocks.back());
        retired.blocks.pop_back();
      }
    }
    if (block == nullptr) block = std::make_unique<FiberBlock>(this, &shutting_down);
    block->Bind(this, &shutting_down, light_park);
    const FiberBlock& b = *block;
    {
      std::lock_guard<std::mutex> lock(fibers_mu);
      all_fibers.push_back(std::move(block));
    }
    if (w != nullptr) {
      for (std::size_t i = FiberBlock::kFibers; i-- > 1;) w->free_fibers.push_back(b.at(i));
    } else {
      std::lock_guard<sync_internal::SpinLock> lock(pool_lock);
      for (std::size_t i = FiberBlock::kFibers; i-- > 1;) pool.push_back(b.at(i));
    }
    return b.at(0);
  }
  // Recycle: on the worker where f finished.
  void Recycle(Worker& w, Fiber* f) {
    f->state.store(kDone, std::memory_order_relaxed);
    w.free_fibers.push_back(f);
    if (w.free_fibers.size() >= 2 * kFiberBatch) {
      std::lock_guard<sync_internal::SpinLock> lock(pool_lock);
      for (std::size_t i = 0; i < kFiberBatch; ++i) {
        pool.push_back(w.free_fibers.back());
        w.free_fibers.pop_back();
      }
    }
  }
  static constexpr std::uint64_t kFairnessInterval = 61;  // Go's schedtick check
  static constexpr std::chrono::milliseconds kIdleNetMin{100}, kIdleNetMax{1600};
  static constexpr std::chrono::microseconds kRescueRetry{100};
  static constexpr std::chrono::milliseconds kWatchMax{10};
  // NextLocal: the worker's own runnable fibers: run_next, pinned, queue (FIFO), yield ring.
  Fiber* NextLocal(Worker& w) {
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
    // any of them may be taken by a thief meanwhile.
    Fiber* next = nullptr;
    if (w.queue.peek(0, &next)) {
      if (Context c = next->context()) prefetch_context(c);
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
    if (next == nullptr || !Prepare(w, next)) return nullptr;
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
    f->stack = std::move(stack).value();
    f->set_context(*make_context(f->stack.span(), &FiberMain));
    f->saved_errno = 0;  // a new fiber starts with errno 0 (Started puts it in place)
    // The name was written at spawn, before f was queued; a fresh record's name is empty.
    if (f->name_len != 0) set_context_name(f->context(), {f->name, f->name_len});
    return true;
  }
  // Retire: f finished (or failed before it started) on w: its object and its credit stay here.
  void Retire(Worker& w, Fiber* f) {
    Recycle(w, f);
    // The fiber's credit stays with this worker (returned in batches, and before it sleeps).
    std::int64_t spare = w.credits.load(std::memory_order_relaxed) + 1;
    w.credits.store(spare, std::memory_order_relaxed);
    if (spare >= 2 * kCreditBatch) ReturnCredits(w, kCreditBatch);
  }
  void FailUnstartable(Worker& w);
  void Started(Worker& w, Fiber* f) {
    *w.errno_slot = f->saved_errno;  // the fiber's own errno (see Fiber::saved_errno)
    f->worker = &w;
    f->state.store(kRunning, std::memory_order_relaxed);
    w.current = f;
    ++w.tick;
    Bump(w.counters.run);
  }
  // Spill: half of the yield ring to the stealable queue, for a thief that asked or a sleeping
  // worker; pinned fibers stay.
  void Spill(Worker& w) {
    w.steal_request.store(false, std::memory_order_relaxed);
    std::size_t n = w.yields.count / 2;
    bool moved = false;
    for (std::size_t i = 0; i < n; ++i) {
      Fiber* f = w.yields.pop();
      if (f->pinned != nullptr) {
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
  Fiber* FindWork(Worker& w);
  void TakeMail(Worker& w);
  // PopDueTimers: wakes the fibers whose deadlines in `heap`'s timers have passed, onto w (the
  // calling thread's worker; heap is w, or a stuck worker's in RescueTimers). Returns how many
  // it popped (none if another thread held heap's lock and try_lock is set).
  std::size_t PopDueTimers(Worker& w, Worker& heap, bool try_lock = false);
  void PopDueTimers(Worker& w) { (void)PopDueTimers(w, w); }
  Fiber* RescueTimers(Worker& w);
  int PollReactor(Worker& w, std::optional<Clock::time_point> deadline);
  void Sleep(Worker& w);
  void Run(Worker& w, Fiber* f);
};

namespace scheduler_internal {
namespace {

Worker* WorkerOf(const Runtime::Impl* rt) {
  Worker* w = t_worker;
  return w != nullptr && w->rt == rt ? w : nullptr;
}

Waiter* ProvideWaiter(void* arg) {
  auto* w = static_cast<Worker*>(arg);
  return w->current != nullptr ? &w->current->waiter : nullptr;
}

// On-top functions: they run right after a fiber switched away, on the context it switched to
// (the worker's own, or the next fiber's in a direct switch), always on the same thread.
// A yielding fiber goes to the back of its worker's yield ring: behind every other runnable
// fiber of the worker. Go sends yields to the shared queue instead, so that yield-heavy work
// spreads; here the ring is spilled to the stealable queue when a thief asks or a worker sleeps,
// which spreads it as well without a shared-queue round trip per yield.
Transfer AfterYield(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  f->state.store(kRunnable, std::memory_order_relaxed);
  f->worker->yields.push(f);
  return t;
}

Transfer AfterPark(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  Worker* w = f->worker;
  Bump(w->counters.parked);
  Runtime::Impl* rt = f->rt;  // f may run elsewhere once it is published as parked
  TimerEntry* e = f->pending_timer;
  Clock::rep head_before = 0, head = 0;
  if (e != nullptr) {
    e->owner = w;
    // Held until kParked is published: an idle worker that pops the entry (RescueTimers) must
    // find the fiber parked, or its claim would fail and the timer's wake-up be lost.
    w->timer_mu.lock();
    head_before = w->timer_head.load(std::memory_order_relaxed);  // written under the lock
    if (!w->timers.insert(e->node, e->deadline).ok()) {
      w->timer_mu.unlock();
      // No memory for the timer: wake the fiber at once; its wait retries.
      FreeTimerEntry(e);
      f->pending_timer = nullptr;
      f->state.store(kRunnable, std::memory_order_relaxed);
      rt->PushLocal(*w, f);
      return t;
    }
    head = PublishTimerHead(*w);
  }
  // Store then load: the Dekker pairing with notify (park.h).
  bool claimed = PublishParked(*f, rt->light_park);
  if (e != nullptr) w->timer_mu.unlock();
  if (claimed) rt->PushLocal(*w, f);
  if (head < head_before) rt->WatchTimers(*w, head);
  return t;
}

Transfer AfterExit(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  Worker* w = f->worker;
  discard_context(t.from);
  // A recycled fiber object gets a new stack and context at its next start.
  f->set_context(nullptr);
  w->stacks->recycle(std::move(f->stack));
  f->rt->Retire(*w, f);
  return t;
}

[[noreturn]] void FiberMain(Transfer /*t: its data belongs to an on-top function*/) {
  Fiber* f = t_worker->current;  // set by whoever switched to us (Run or SwitchDirect)
  // run() may free the body as it returns (the handle was dropped, or is joined at once).
  std::exchange(f->body, nullptr)->run();
  f->locals.clear();  // on the fiber, so destructors may still use fiber features
  // f->worker is where we run now; another fiber of the worker, or the worker loop, is next.
  Worker* w = f->worker;
  Fiber* next = f->rt->DirectNext(*w);
  exit_context(next != nullptr ? next->context() : w->home, f, &AfterExit);
}

// Leave: the running fiber f stops running (fn, on the next context, says how); the worker's
// next local fiber runs at once if there is one (a direct switch: one context switch instead of
// two through the worker loop), else the worker loop.
void Leave(Worker& w, Fiber* f, OnTopFn fn) {
  f->saved_errno = *w.errno_slot;  // before DirectNext puts the next fiber's in place
  Fiber* next = f->rt->DirectNext(w);
  jump_context_ontop(next != nullptr ? next->context() : w.home, f, fn);
}

// ClaimTimedOut: the fiber e's deadline wakes, or null if that wait is over (a stale entry) or
// a notifier won the wake-up. The caller queues it.
Fiber* ClaimTimedOut(TimerEntry* e) {
  Fiber* f = e->fiber;
  // acquire: the fiber's wait_gen store (release) happened before it parked.
  if (e->gen != f->wait_gen.load(std::memory_order_acquire)) return nullptr;  // stale
  if (!ClaimWakeUp(*f)) return nullptr;
  e->fired = true;  // before the fiber is published (as woken_by_notify)
  return f;
}

Fiber* CurrentFiber() {
  Worker* w = t_worker;
  if (w != nullptr) return w->current;
  return t_region_fiber;
}

}  // namespace

// offsetof on a Fiber, which is not standard-layout (its waiter has virtual functions): GCC,
// Clang and MSVC all give the member's offset for a class without virtual bases.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
Fiber* FiberWaiter::fiber() {
  return reinterpret_cast<Fiber*>(reinterpret_cast<std::byte*>(this) - offsetof(Fiber, waiter));
}
// The layout the comments at Fiber and PopDueTimers count on.
static_assert(offsetof(Fiber, wait_gen) + sizeof(Fiber::wait_gen) <= 128, "hot fields: 2 lines");
static_assert(offsetof(Fiber, state) / 64 == offsetof(Fiber, wait_gen) / 64,
              "a timer's wake-up reads state and wait_gen from one line");
#pragma GCC diagnostic pop

namespace {
// RegionWait: FiberWaiter::wait for a fiber inside a BlockingRegion: it runs on a blocking
// thread, so the wait blocks that thread. The permit is the same as a parked fiber's.
bool RegionWait(Fiber* f, std::optional<SyncClock::time_point> deadline) {
  for (;;) {
    // The word is read before region_waiting is published and the permit checked: a notify
    // that sees region_waiting (seq_cst, the Dekker pair with its permit store) bumps the word
    // after this read, so the futex wait below returns at once.
    std::uint32_t word = f->region_word.load(std::memory_order_acquire);
    f->region_waiting.store(true, std::memory_order_seq_cst);
    if (TakePermit(*f)) break;
    std::chrono::microseconds left = std::chrono::microseconds::max();
    if (deadline) {
      auto now = SyncClock::now();
      if (*deadline <= now) {
        f->region_waiting.store(false, std::memory_order_relaxed);
        return false;
      }
      left = std::chrono::ceil<std::chrono::microseconds>(*deadline - now);
    }
    base_internal::FutexWait(f->region_word, word, left);
  }
  f->region_waiting.store(false, std::memory_order_relaxed);
  return true;
}
}  // namespace

bool FiberWaiter::wait(std::optional<SyncClock::time_point> deadline) {
  Fiber* f = fiber();
  // In a BlockingRegion (set before the fiber moved to its blocking thread, by the hand-off
  // that moved it): block that thread instead of parking.
  if (f->state.load(std::memory_order_relaxed) == kBlocking) [[unlikely]]
    return RegionWait(f, deadline);
  // A permit this misses is found by the on-top function (AfterPark), after kParked is
  // published: the Dekker read is there.
  bool deadline_checked = std::exchange(f->deadline_checked, false);
  if (TakePermit(*f)) return true;
  // A resume can come without a permit: a notifier that stored its permit for an earlier wait
  // (which consumed it) may still win the CAS from this wait's kParked. Such a resume is
  // spurious; only a passed deadline makes this return false.
  for (;;) {
    if (deadline && !deadline_checked && *deadline <= SyncClock::now()) return false;
    deadline_checked = false;
    // wait_gen has one writer, this fiber: a load and a store, no read-modify-write. release:
    // a timer entry that reads the new value sees the wait it belongs to.
    std::uint64_t gen = f->wait_gen.load(std::memory_order_relaxed) + 1;
    f->wait_gen.store(gen, std::memory_order_release);
    f->woken_by_notify = false;  // before AfterPark publishes kParked: only then can it be set
    TimerEntry* entry = nullptr;
    if (deadline) {  // inserted into the worker's heap by AfterPark, on the worker's thread
      entry = NewTimerEntry();
      entry->fiber = f;
      entry->gen = gen;
      entry->deadline = *deadline;
    }
    f->pending_timer = entry;
    Leave(*f->worker, f, &AfterPark);
    // Resumed, perhaps on another worker (f->worker was updated by Run).
    f->state.store(kRunning, std::memory_order_relaxed);
    // Any timer of this wait is now stale (one writer, as above).
    f->wait_gen.store(gen + 1, std::memory_order_release);
    bool timed_out = false;
    if (entry != nullptr && f->pending_timer == entry) {
      f->pending_timer = nullptr;
      timed_out = entry->fired;  // before our reference goes
      // Take it out of its owner's heap now (the heap side's reference with it), unless it was
      // popped already (it fired, or an idle worker rescued it): on any worker, under the
      // owner's timer lock. Left for the owner to pop at its deadline, a woken wait's entry
      // would hold memory for as long as its timeout (waits resumed on another worker with a
      // 1 h timeout: 80 B per wait for an hour).
      // A timer that fired was popped: no lock needed to know it is out of the heap.
      if (Worker* owner = entry->owner; owner != nullptr && !timed_out) {
        owner->timer_mu.lock();
        bool queued = entry->node.queued();
        if (queued) {
          owner->timers.cancel(entry->node);
          PublishTimerHead(*owner);
        }
        owner->timer_mu.unlock();
        if (queued) Release(entry);
      }
      Release(entry);
    }
    if (TakeWakeUp(*f)) return true;
    if (timed_out) return false;  // its own timer, popped as due
  }
}

void FiberWaiter::notify() {
  Fiber* f = fiber();
  // The handshake is park.h's; it reads f->light_park, not f->rt's: a finished fiber's runtime
  // may be gone.
  if (NotifyParked(*f)) {
    f->rt->Schedule(f);
    return;
  }
  if (NotifyWithPermit(*f)) f->rt->Schedule(f);
  // Or it waits inside a BlockingRegion (RegionWait): seq_cst, the Dekker pair with its
  // region_waiting store.
  if (f->region_waiting.load(std::memory_order_seq_cst)) [[unlikely]] {
    f->region_word.fetch_add(1, std::memory_order_release);
    base_internal::FutexWake(f->region_word, 1);
  }
}

void Spawn(Runtime& rt, FiberBody* body, const FiberOptions& options) {
  Runtime::Impl& impl = *rt.impl_;
  Worker* w = WorkerOf(&impl);
  StackOptions so{.size = options.stack_size != 0 ? options.stack_size : impl.options.stack_size,
                  .protection = options.protection};
  // The stack itself comes when the fiber first runs (Impl::Prepare); a size no stack class has
  // is bad input, reported now.
  if (!valid_stack_size(so.size)) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "weft: a fiber stack size must be 1 byte .. 64 MiB");
  }
  Worker* pinned_to =
      options.pinned_worker >= 0
          ? impl.workers[static_cast<unsigned>(options.pinned_worker) % impl.workers.size()].get()
          : nullptr;
  Fiber* f = impl.NewFiber(w, options, pinned_to);
  f->stack_size = static_cast<std::uint32_t>(so.size);
  f->stack_protection = so.protection;
  f->body = body;
  f->permit.store(false, std::memory_order_relaxed);
  f->pending_timer = nullptr;
  // (The waiter's note_wait is null already: every wait resets it as it ends.)
  f->state.store(kRunnable, std::memory_order_relaxed);
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

// ---- Runtime::Impl: the worker loop ------------------------------------------------------------

void Runtime::Impl::TakeMail(Worker& w) {
  FiberFifo fibers;  // empty: owns no memory until it grows
  IoRequest* cancels;
  {
    std::lock_guard<std::mutex> lock(w.mail_mu);
    std::swap(fibers, w.mail_fibers);
    cancels = w.mail_cancels;
    w.mail_cancels = nullptr;
    w.has_mail.store(false, std::memory_order_relaxed);
  }
  while (IoRequest* r = cancels) {
    cancels = r->next_cancel;
    // relaxed: the completion, which sets it, runs on this thread too.
    if (!r->finished.load(std::memory_order_relaxed)) w.reactor->cancel(r->op);
    Waiter* waiter = r->waiter;  // read before the release: r may be gone right after it
    // release: the fiber may leave (and reuse r's memory) once it sees this.
    r->cancel_done.store(true, std::memory_order_release);
    waiter->notify();
  }
  while (Fiber* f = fibers.pop()) w.pinned_local.push(f);
}

int Runtime::Impl::PollReactor(Worker& w, std::optional<Clock::time_point> deadline) {
  if (w.has_mail.load(std::memory_order_relaxed)) TakeMail(w);
  if (w.reactor == nullptr) return 0;
  Result<int> n = w.reactor->poll(deadline);
  if (n.ok() && *n > 0) Bump(w.counters.polled, static_cast<std::uint64_t>(*n));
  return n.ok() ? *n : 0;
}

Fiber* Runtime::Impl::FindWork(Worker& w) {
  Fiber* f = nullptr;
  if (w.tick - w.fair_tick >= kFairnessInterval) {
    // Fairness: the shared queue, the reactor and the timers, even when local work never runs
    // out; and work for thieves.
    w.fair_tick = w.tick;
    if (w.steal_request.load(std::memory_order_relaxed) ||
        (w.yields.count > 1 && idle.sleepers() > 0)) {
      Spill(w);
    }
    if (w.has_mail.load(std::memory_order_relaxed)) TakeMail(w);
    if (w.reactor != nullptr && w.reactor->pending_ops() != 0) {
      PollReactor(w, Clock::time_point::min());
    }
    PopDueTimers(w);
    Fiber* g = nullptr;
    if (std::optional<Fiber*> i = inject.try_pop()) {
      g = *i;
    } else {
      // One fiber, not a batch (as Go's schedule does): a batch would go behind the local
      // work, and a full queue would send it back to the list's tail, again and again.
      g = TakeOverflow(w, /*batch=*/false);
    }
    if (g != nullptr) {
      if (w.run_next != nullptr) PushLocal(w, w.run_next);
      w.run_next = nullptr;
      return g;
    }
  }
  if (Fiber* g = w.run_next) {
    w.run_next = nullptr;
    return g;
  }
  if (w.has_mail.load(std::memory_order_relaxed)) TakeMail(w);
  if (w.pinned_local.count != 0 || w.queue.size_approx() != 0) {
    if (Fiber* g = NextLocal(w)) return g;
  }
  PopDueTimers(w);
  if (w.reactor != nullptr && w.reactor->pending_ops() != 0) {
    PollReactor(w, Clock::time_point::min());
  }
  // A fiber woken by a timer or a completion (run_next or the queue), else the yield ring.
  if (Fiber* g = NextLocal(w)) return g;
  if (std::optional<Fiber*> g = inject.try_pop()) return *g;
  if (Fiber* g = TakeOverflow(w, /*batch=*/true)) return g;
  const auto n = static_cast<unsigned>(workers.size());
  if (n > 1) {
    w.rng ^= w.rng << 13;
    w.rng ^= w.rng >> 7;
    w.rng ^= w.rng << 17;
    unsigned start = static_cast<unsigned>(w.rng % n);
    for (unsigned k = 0; k < n; ++k) {
      Worker& v = *workers[(start + k) % n];
      if (&v == &w) continue;
      // Half of the victim's queue, as Go and Tokio take: a thief that comes back only once its
      // batch is done must not starve itself with small batches.
      std::size_t got = v.queue.steal_half(w.queue);
      if (got != 0) {
        Bump(w.counters.stolen, got);
        if (w.queue.pop(&f)) return f;
      }
      // Nothing stealable: ask the victim to spill its yield ring (checked at its next
      // fairness pass). relaxed: a hint; the queue itself carries the fibers.
      if (!v.steal_request.load(std::memory_order_relaxed)) {
        v.steal_request.store(true, std::memory_order_relaxed);
      }
    }
    if (Fiber* g = RescueTimers(w)) return g;
  }
  return nullptr;
}

std::size_t Runtime::Impl::PopDueTimers(Worker& w, Worker& heap, bool try_lock) {
  // relaxed: a hint; the heap is read under its lock.
  Clock::rep head = heap.timer_head.load(std::memory_order_relaxed);
  if (head == kNoTimer) return 0;
  Clock::time_point now = Clock::now();
  w.clock_floor = now;
  if (now.time_since_epoch().count() < head) return 0;
  // In batches of up to kTimerBatch, in three passes, because each due timer's fiber has left
  // the caches (W5: the wake-up's generation check and CAS, each a miss, were most of this
  // function): popping writes each entry (its heap index), so the entries are fetched; then the
  // fibers' lines are asked for together; then the fibers are claimed and queued. The lock is
  // held for the pops only.
  constexpr std::size_t kTimerBatch = 32;
  TimerEntry* due[kTimerBatch];
  bool queued = false;  // a fiber went onto the stealable queue: wake a sleeper, once
  std::size_t popped = 0;
  for (;;) {
    if (try_lock) {
      if (!heap.timer_mu.try_lock()) break;
    } else {
      heap.timer_mu.lock();
    }
    std::size_t n = 0;
    while (n < kTimerBatch) {
      TimerNode* node = heap.timers.pop_due(now);
      if (node == nullptr) break;
      due[n++] = reinterpret_cast<TimerEntry*>(node);
    }
    if (n != 0) PublishTimerHead(heap);
    heap.timer_mu.unlock();
    popped += n;
    for (std::size_t i = 0; i < n; ++i) {
      // The line of the state word (the claim) and wait_gen (the generation check): one line
      // (asserted at FiberWaiter::fiber).
      context_internal::PrefetchLinesForWrite(
          reinterpret_cast<std::uintptr_t>(&due[i]->fiber->state), 0, 1);
    }
    for (std::size_t i = 0; i < n; ++i) {
      TimerEntry* e = due[i];
      if (Fiber* f = ClaimTimedOut(e)) {
        Context ctx = f->context();  // read before: once published, f may run and end elsewhere
        if (f->pinned != nullptr && f->pinned != &w) {
          ScheduleElsewhere(f);
        } else if (Fiber* displaced = std::exchange(w.run_next, f)) {
          // As Schedule does (the latest woken runs next), without PushLocal's wake-up per
          // fiber: that one's seq_cst fence after each store missed was 6% of W5.
          queued = PushLocalQuiet(w, displaced) || queued;
        }
        // Timers come due in batches, and a sleeper's stack has gone cold: fetch it while the
        // fibers queued before it run (W5: a resume's first pop off the stack was the top
        // sample).
        prefetch_context(ctx);
      }
      Release(e);  // the heap side's reference
    }
    if (n < kTimerBatch) break;
  }
  if (queued) WakeOne();
  return popped;
}

// RescueTimers: an idle worker pops the timers of workers whose earliest deadline is overdue by
// kTimerRescueGrace (Go's findrunnable runs other Ps' timers the same way), and runs their
// fibers. Without it a fiber that never switches (a CPU-bound loop, a blocking call outside
// call_blocking) held its worker's sleepers and timed waits until it ended, with other workers
// idle. A heap whose owner holds its lock is skipped: the owner is not stuck.
Fiber* Runtime::Impl::RescueTimers(Worker& w) {
  // relaxed: hints (Worker::timer_head); PopDueTimers reads the heap under its lock. The clock
  // is read only when some other worker has a timer.
  Clock::rep earliest = kNoTimer;
  for (const auto& v : workers) {
    if (v.get() != &w) earliest = std::min(earliest, v->timer_head.load(std::memory_order_relaxed));
  }
  if (earliest == kNoTimer) return nullptr;
  Clock::time_point now = Clock::now();
  w.clock_floor = now;
  // Heads at or before this are overdue by the grace (kNoTimer never is).
  const Clock::rep overdue = (now - kTimerRescueGrace).time_since_epoch().count();
  if (earliest > overdue) return nullptr;
  for (const auto& v : workers) {
    if (v.get() != &w && v->timer_head.load(std::memory_order_relaxed) <= overdue) {
      Bump(w.counters.rescued, PopDueTimers(w, *v, /*try_lock=*/true));
    }
  }
  return NextLocal(w);
}

void Runtime::Impl::Run(Worker& w, Fiber* f) {
  Started(w, f);
  jump_context(f->context(), f);
  // Back on the worker's own context: the last fiber of a chain of direct switches left.
  w.current = nullptr;
}

void Runtime::Impl::Sleep(Worker& w) {
  // One clock reading for the watch floor and the deadline, so that a deadline set by the floor
  // equals it (WatchTimers compares them).
  const Clock::time_point start = Clock::now();
  const Clock::time_point watch_from =
      start + std::max<Clock::duration>(kRescueRetry, w.watch_backoff);
  w.watch_floor.store(watch_from.time_since_epoch().count(), std::memory_order_relaxed);
  // Listed, deciding, fenced (scheduler/internal/idle.h): every look below sees what was
  // published before a WakeOne or WatchTimers that did not see this worker listed.
  const std::uint32_t word = idle.BeginSleep(w);
  bool work = inject.size_approx() != 0 || overflow_size.load(std::memory_order_relaxed) != 0 ||
              w.run_next != nullptr || w.yields.count != 0 ||
              w.has_mail.load(std::memory_order_relaxed) || w.pinned_local.count != 0;
  for (const auto& v : workers) work = work || v->queue.size_approx() != 0;
  if (!work && !stop.load(std::memory_order_acquire)) {
    // Idle: a good moment for the stack pool's deferred give-back of memory.
    // Only after a second without stack churn (a burst's stacks stay for the next burst), and
    // 512 stacks at a time (~5 ms of munmap/madvise here), so new work waits little.
    if (StackPool::default_pool().trim_pending()) {
      StackPool::default_pool().flush_trim(std::chrono::seconds(1), 512);
    }
    // A safety net only: every way work arrives wakes a sleeper. It backs off while the
    // runtime stays idle (100 ms doubling to 1.6 s; 100 ms while stacks wait to be given back),
    // so that an idle runtime wakes each worker about once a second, not ten times (at ten, an
    // idle runtime used 0.3% of a core under TSan, and up to 1.8% while other processes shared
    // the cores).
    const auto net = StackPool::default_pool().trim_pending() ? kIdleNetMin : w.idle_net;
    w.idle_net = std::min(w.idle_net * 2, kIdleNetMax);
    Clock::time_point deadline = start + net;
    Clock::time_point watch = Clock::time_point::max();
    for (const auto& v : workers) {
      // relaxed: a hint (Worker::timer_head). Its own timers: until the earliest. A peer's:
      // until its earliest is overdue enough to rescue, and no sooner than watch_from
      // (kRescueRetry at first, so that a rescue that failed to take the lock tries again then
      // instead of spinning; then backing off, see Worker::watch_floor).
      Clock::rep head = v->timer_head.load(std::memory_order_relaxed);
      if (head == kNoTimer) continue;
      Clock::time_point due{Clock::duration(head)};
      if (v.get() == &w) {
        deadline = std::min(deadline, due);
      } else {
        watch = std::min(watch, std::max(due + kTimerRescueGrace, watch_from));
      }
    }
    if (watch < deadline) {
      deadline = watch;
      w.watch_backoff = std::clamp<Clock::duration>(2 * w.watch_backoff, kTimerRescueGrace,
                                                    kWatchMax);
    }
    w.watch_until.store(deadline.time_since_epoch().count(), std::memory_order_relaxed);
    Bump(w.counters.sleeps);
    const Clock::time_point slept_from = Clock::now();  // after the trim: idle_ns is the sleep
    if (w.reactor != nullptr) {
      PollReactor(w, deadline);
    } else {
      auto left = std::chrono::ceil<std::chrono::microseconds>(deadline - slept_from);
      base_internal::FutexWait(w.wake_word, word, std::max(left, std::chrono::microseconds(0)));
    }
    Bump(w.counters.idle_ns,
         static_cast<std::uint64_t>(
             std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - slept_from)
                 .count()));
  }
  idle.EndSleep(w);  // still listed if nobody woke us (a timer, or the safety net)
}

// FailUnstartable: the fibers that found no stack end without running; their joins rethrow a
// std::system_error with the allocation's error (ENOMEM). On the worker's own context, so the
// wake-ups of their joiners are ordinary schedules.
void Runtime::Impl::FailUnstartable(Worker& w) {
  std::vector<std::pair<Fiber*, std::error_code>> failed;
  failed.swap(w.unstartable);
  for (auto& [f, error] : failed) {
    Bump(w.counters.no_stack);
    FiberBody* body = std::exchange(f->body, nullptr);
    f->worker = &w;
    body->fail(std::make_exception_ptr(std::system_error(error, "weft: no stack for a fiber")));
    Retire(w, f);
  }
}

// ReleaseSpawnStates: at a worker's exit, on its thread. Join handles kept past the runtime may
// still hold SpawnStates from this worker's shard: then the shard is kept, unused (their frees
// land on its remote-free list, which nobody collects: a bounded leak per such runtime), instead
// of being destroyed under them.
void ReleaseSpawnStates(Worker& w) {
  w.spawn_states->collect_mt_frees();
  if (w.spawn_states->stats().live_objects == 0) {
    w.spawn_states.reset();
    return;
  }
  static std::mutex mu;
  static auto* kept = new std::vector<std::unique_ptr<SizeClassShard>>();  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(w.spawn_states));
}

void Runtime::Impl::WorkerLoop(Worker& w) {
  t_worker = &w;
  w.errno_slot = &errno;  // this thread's: the worker loop never leaves its thread
  w.home = current_context();
  w.stacks = std::make_unique<StackCache>(StackPool::default_pool());
  // Emptied slabs kept for the next burst (up to 32 MiB): giving them back and mapping them
  // again would cost a page fault per page of each (~11 us here).
  w.spawn_states = std::make_unique<SizeClassShard>(SlabOptions{.max_empty_slabs = 512});
  install_stack_overflow_handler();
  set_waiter_provider(&ProvideWaiter, &w);
  fork_join->attach_current_thread(w.index);
  int idle_passes = 0;
  // Busy again: the next idle spell's back-offs start over.
  auto end_idle_spell = [&] {
    idle_passes = 0;
    w.idle_net = kIdleNetMin;
    w.watch_backoff = Clock::duration::zero();
  };
  for (;;) {
    if (!w.unstartable.empty()) [[unlikely]]
      FailUnstartable(w);
    if (Fiber* f = FindWork(w)) {
      if (idle_passes != 0) [[unlikely]]
        end_idle_spell();
      if (Prepare(w, f)) Run(w, f);
      continue;
    }
    // No fiber to run: help a fork-join computation (the task runs here, on the worker's stack).
    if (fork_join->try_steal()) {
      end_idle_spell();
      continue;
    }
    ReturnCredits(w, w.credits.load(std::memory_order_relaxed));
    // acquire: pairs with the destructor's release.
    if (stop.load(std::memory_order_acquire) && credits.load(std::memory_order_acquire) == 0) {
      break;
    }
    if (++idle_passes < 64) {
      std::this_thread::yield();
      continue;
    }
    Sleep(w);
    idle_passes = 60;
  }
  {
    std::lock_guard<std::mutex> lock(idle.lock());
    w.exited = true;  // no Wake() after this: the reactor goes away below
  }
  // Timers left behind are stale (every fiber finished): free them, and the spares.
  w.timer_mu.lock();
  w.timers.pop_all_due(Clock::time_point::max(),
                       [](TimerNode& node) { Release(reinterpret_cast<TimerEntry*>(&node)); });
  PublishTimerHead(w);
  w.timer_mu.unlock();
  while (TimerEntry* e = w.spare_timers) {
    w.spare_timers = e->next_spare;
    delete e;
  }
  w.spare_count = kSpareTimers;  // as if full: later frees here delete
  TakeMail(w);  // cancel requests that raced with their completions
  w.reactor.reset();
  fork_join->detach_current_thread();
  set_waiter_provider(nullptr, nullptr);
  w.stacks.reset();
  ReleaseSpawnStates(w);
  t_worker = nullptr;
}

namespace {

// LightParkWanted: whether this runtime's parks use the asymmetric Dekker pair (the file
// comment). x86-64 only: there the symmetric pair's seq_cst store is a locked instruction, while
// aarch64's store-release and load-acquire pair is sequentially consistent already, at no
// extra cost. WEFT_PARK_FENCE=symmetric turns it off (the tests' epoll configuration does, so
// both pairs are tested on x86-64).
bool LightParkWanted() {
#if defined(__x86_64__)
  if (const char* env = std::getenv("WEFT_PARK_FENCE")) {
    if (std::strcmp(env, "symmetric") == 0) return false;
    if (std::strcmp(env, "asymmetric") != 0) {
      std::fprintf(stderr, "weft: ignoring WEFT_PARK_FENCE=%s (want asymmetric or symmetric)\n",
                   env);
    }
  }
  return base_internal::HeavyFenceAvailable();
#else
  return false;
#endif
}

}  // namespace

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  unsigned n = options.workers != 0 ? options.workers : std::thread::hardware_concurrency();
  if (n == 0) n = 1;
  impl_->options = options;
  impl_->self = this;
  impl_->light_park = LightParkWanted();
  impl_->blocking = std::make_unique<BlockingPool>(options.max_blocking_threads);
  impl_->fork_join = std::make_unique<ForkJoinPool>(
      ForkJoinPoolOptions{.workers = n,
                          .deque_capacity = std::max<std::size_t>(16, options.fork_join_depth),
                          .host_wake = [](void* impl) { static_cast<Impl*>(impl)->WakeOne(); },
                          .host_arg = impl_.get()});
  for (unsigned i = 0; i < n; ++i) {
    auto w = std::make_unique<Worker>();
    w->rt = impl_.get();
    w->index = i;
    w->rng = 0x9E3779B97F4A7C15ull * (i + 1);
    impl_->workers.push_back(std::move(w));
  }
  // Each worker creates its reactor on its own thread (io_uring's single-issuer rings require
  // it) before it runs any fiber; the constructor waits, so Wake() always finds it settled.
  std::atomic<unsigned> ready{0};
  unsigned started = 0;
  // Fault injection for tests: WEFT_TEST_FAIL_WORKER_THREAD=k makes worker k's thread fail to
  // start, as std::thread does when the system is out of threads or memory.
  // WEFT_TEST_QUEUE_OOM: the scheduler's queues act as if out of memory once past their first
  // 64 fibers (tests of the chain that takes over then; see FiberFifo).
  g_fail_queue_growth.store(std::getenv("WEFT_TEST_QUEUE_OOM") != nullptr,
                            std::memory_order_relaxed);
  const char* fail_env = std::getenv("WEFT_TEST_FAIL_WORKER_THREAD");
  const long fail_at = fail_env != nullptr ? std::strtol(fail_env, nullptr, 10) : -1;
  try {
    for (auto& w : impl_->workers) {
      Worker* raw = w.get();
      Impl* impl = impl_.get();
      if (static_cast<long>(started) == fail_at) {
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                                "weft: a worker thread could not start (injected)");
      }
      raw->thread = std::thread([impl, raw, &ready] {
        Result<std::unique_ptr<Reactor>> r = Reactor::create(impl->options.reactor);
        if (r.ok()) {
          raw->reactor = std::move(r).value();
        } else {
          raw->reactor_error = r.error();
        }
        ready.fetch_add(1, std::memory_order_release);
        base_internal::FutexWake(ready, 1);
        impl->WorkerLoop(*raw);
      });
      ++started;
    }
  } catch (const std::system_error&) {
    // Leave nothing running: the workers that did start settle (their reactors), see stop with
    // no fiber alive, and exit; then the exception goes to the caller. (Without this, the
    // joinable threads' destructors would call std::terminate.)
    for (unsigned k; (k = ready.load(std::memory_order_acquire)) != started;) {
      base_internal::FutexWait(ready, k, std::chrono::milliseconds(10));
    }
    impl_->stop.store(true, std::memory_order_release);
    impl_->WakeAll();
    for (auto& w : impl_->workers) {
      if (w->thread.joinable()) w->thread.join();
    }
    throw;
  }
  for (unsigned k; (k = ready.load(std::memory_order_acquire)) != n;) {
    base_internal::FutexWait(ready, k, std::chrono::milliseconds(10));
  }
}

Runtime::~Runtime() {
  // Interrupt: every wait from now on fails with operation_canceled (FiberWaiter::interrupted),
  // and fibers parked now are woken to see it. Repeated until every fiber has finished: a fiber
  // may park again after an interruption (or be spawned by one that unwinds), and the live count
  // may reach zero and rise again, which a one-shot event cannot express.
  impl_->shutting_down.store(true, std::memory_order_release);
  while (impl_->credits.load(std::memory_order_acquire) != 0) {
    std::vector<Fiber*> parked;
    {
      std::lock_guard<std::mutex> lock(impl_->fibers_mu);
      impl_->ForEachFiberLocked([&](Fiber* f) {
        // relaxed (both): a hint; a wait that starts later checks interrupted() itself.
        if (f->state.load(std::memory_order_relaxed) == kParked ||
            f->region_waiting.load(std::memory_order_relaxed)) {
          parked.push_back(f);
        }
      });
    }
    for (Fiber* f : parked) f->waiter.notify();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->blocking.reset();  // idle by now: no fiber waits on it
  impl_->stop.store(true, std::memory_order_release);
  impl_->WakeAll();
  for (auto& w : impl_->workers) w->thread.join();
  // Every fiber has finished: their blocks go to the process's pool (see RetiredBlocks).
  std::vector<std::unique_ptr<FiberBlock>> blocks;
  {
    std::lock_guard<std::mutex> lock(impl_->fibers_mu);
    blocks.swap(impl_->all_fibers);
  }
  RetiredBlocks& retired = RetiredBlocks::Get();
  std::lock_guard<std::mutex> lock(retired.mu);
  for (auto& b : blocks) {
    try {
      retired.blocks.push_back(std::move(b));
    } catch (const std::bad_alloc&) {
      (void)b.release();  // no memory to list it: it stays allocated all the same
    }
  }
}

unsigned Runtime::workers() const { return static_cast<unsigned>(impl_->workers.size()); }

namespace scheduler_internal {
namespace {
constexpr std::size_t kSpawnHeader = 16;  // keeps the object 16-byte aligned
constexpr std::uint64_t kFromHeap = 0, kFromSlab = 1;
}  // namespace

void* AllocateSpawnState(std::size_t bytes) {
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
  return static_cast<std::byte*>(base) + kSpawnHeader;
}

void FreeSpawnState(void* p) noexcept {
  void* base = static_cast<std::byte*>(p) - kSpawnHeader;
  std::uint64_t tag;
  std::memcpy(&tag, base, sizeof tag);
  if (tag == kFromHeap) {
    ::operator delete(base);
  } else if (Worker* w = t_worker; w != nullptr && w->spawn_states != nullptr) {
    w->spawn_states->free(base);  // ours: locally; another worker's: its remote-free list
  } else {
    SlabAllocator::free_mt(base);  // a plain thread (a handle joined or dropped outside)
  }
}

Result<void> JoinSignal::WaitSlow(const WaitOptions& options) {
  Waiter& self = current_waiter();
  const auto me = reinterpret_cast<std::uintptr_t>(&self);
  std::uintptr_t seen = kOpen;
  // release: our Waiter is ready before set() can see it; acquire (also on failure): a kSet we
  // find comes with the result.
  if (!word_.compare_exchange_strong(seen, me, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
    if (seen == kSet) return {};
    return std::errc::device_or_resource_busy;
  }
  sync_internal::ParkResult r = sync_internal::Park(
      self, [this] { return is_set(); }, options, "JoinHandle", this);
  if (r == sync_internal::ParkResult::kWoken) return {};
  // Gave up: withdraw, unless set() took the word first; then the join succeeded after all, and
  // its notify leaves a stale permit, which every wait tolerates (sync/waiter.h). acquire: as
  // above, for the result.
  seen = me;
  if (word_.compare_exchange_strong(seen, kOpen, std::memory_order_acquire)) {
    return sync_internal::ErrorOf(r);
  }
  return {};
}

ForkJoinPool& ForkJoinPoolOf(Runtime& rt) { return *rt.impl_->fork_join; }
bool InFiberOf(const Runtime& rt) {
  Worker* w = WorkerOf(rt.impl_.get());
  return w != nullptr && w->current != nullptr;
}
}  // namespace scheduler_internal

Runtime* Runtime::current() {
  Fiber* f = CurrentFiber();
  return f != nullptr ? f->rt->self : nullptr;
}

namespace {
// TimersOf: how many deadlines w's heap holds now.
std::size_t TimersOf(Worker& w) {
  w.timer_mu.lock();
  std::size_t n = w.timers.size();
  w.timer_mu.unlock();
  return n;
}
}  // namespace

std::string Runtime::stats_json() const {
  std::string out = "{\"workers\":[";
  char buf[512];
  for (const auto& w : impl_->workers) {
    const Counters& c = w->counters;
    auto get = [](const std::atomic<std::uint64_t>& a) {
      return a.load(std::memory_order_relaxed);
    };
    std::snprintf(buf, sizeof buf,
                  "%s{\"index\":%u,\"reactor\":\"%s\",\"spawned\":%" PRIu64 ",\"run\":%" PRIu64
                  ",\"stolen\":%" PRIu64 ",\"parked\":%" PRIu64 ",\"polled\":%" PRIu64
                  ",\"sleeps\":%" PRIu64 ",\"idle_ns\":%" PRIu64 ",\"no_stack\":%" PRIu64
                  ",\"rescued\":%" PRIu64 ",\"timers\":%zu}",
                  w->index == 0 ? "" : ",", w->index,
                  w->reactor != nullptr ? std::string(w->reactor->backend_name()).c_str() : "none",
                  get(c.spawned), get(c.run), get(c.stolen), get(c.parked), get(c.polled),
                  get(c.sleeps), get(c.idle_ns), get(c.no_stack), get(c.rescued), TimersOf(*w));
    out += buf;
  }
  std::int64_t live = impl_->credits.load(std::memory_order_relaxed);
  for (const auto& w : impl_->workers) live -= w->credits.load(std::memory_order_relaxed);
  std::snprintf(buf, sizeof buf,
                "],\"spawned_outside\":%" PRIu64 ",\"live_fibers\":%" PRId64
                ",\"blocking_threads\":%zu,\"blocking_busy\":%zu}",
                impl_->spawned_outside.load(std::memory_order_relaxed), live,
                impl_->blocking != nullptr ? impl_->blocking->threads() : 0,
                impl_->blocking != nullptr ? impl_->blocking->busy() : 0);
  out += buf;
  return out;
}

std::string Runtime::dump_fibers() const {
  std::string out;
  char buf[256];
  std::lock_guard<std::mutex> lock(impl_->fibers_mu);
  impl_->ForEachFiberLocked([&](Fiber* f) {
    int s = f->state.load(std::memory_order_relaxed);
    if (s == kDone) return;
    const char* what = f->waiter.waiting_on();
    f->meta_lock.lock();
    int n = std::snprintf(buf, sizeof buf, "fiber %" PRIu64 " \"%.*s\" %s", f->id, f->name_len,
                          f->name, StateName(s));
    Worker* pinned = f->pinned;
    f->meta_lock.unlock();
    if (what != nullptr && s == kParked) {
      int fd = f->wait_fd.load(std::memory_order_relaxed);
      if (fd >= 0) {
        n += std::snprintf(buf + n, sizeof buf - n, " on %s fd %d", what, fd);
      } else {
        n += std::snprintf(buf + n, sizeof buf - n, " on %s %p", what,
                           f->waiter.waiting_on_object());
      }
    }
    if (Worker* w = pinned) n += std::snprintf(buf + n, sizeof buf - n, " pinned %u", w->index);
    out.append(buf);
    out += '\n';
  });
  return out;
}

// ---- Fiber I/O (scheduler/io.h)
// ------------------------------------------------------------------

namespace scheduler_internal {
namespace {

void CompleteIo(IoOp& op, std::int64_t result, unsigned /*flags*/) {
  auto* r = static_cast<IoRequest*>(op.user);
  Waiter* waiter = r->waiter;  // read first: r may be gone once `finished` is seen
  r->result = result;
  // release: the fiber reads result after its acquire load of finished.
  r->finished.store(true, std::memory_order_release);
  waiter->notify();
}

struct ThreadReactor {
  std::unique_ptr<Reactor> reactor;
  std::errc error{};
  bool tried = false;
};
// A plain thread's reactor, made on its first I/O and deleted at thread exit: a ThreadOwned,
// not a thread_local destructor (base/thread_exit.h says why).
using ThreadReactorSlot = base_internal::ThreadOwned<ThreadReactor>;

Reactor* ThreadReactorOrNull(std::errc* error) {
  ThreadReactor* owned = ThreadReactorSlot::get();
  if (owned == nullptr) {
    if (error != nullptr) *error = std::errc::not_enough_memory;
    return nullptr;
  }
  ThreadReactor& t = *owned;
  if (!t.tried) {
    t.tried = true;
    Result<std::unique_ptr<Reactor>> r = Reactor::create();
    if (r.ok()) {
      t.reactor = std::move(r).value();
    } else {
      t.error = r.error();
    }
  }
  if (error != nullptr) *error = t.error;
  return t.reactor.get();
}

}  // namespace

std::int64_t RunIo(IoSubmit submit, void* arg, const WaitOptions& options, const char* what,
                   int fd) {
  const CancellationToken* token = options.cancel;
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  if (token != nullptr && token->is_cancelled()) return -ECANCELED;
  IoRequest req;
  req.op.on_complete = &CompleteIo;
  req.op.user = &req;
  req.op.deadline = options.deadline;
  if (f != nullptr) {
    if (w->reactor == nullptr) return -static_cast<int>(w->reactor_error);
    if (f->waiter.interrupted()) return -ECANCELED;
    req.waiter = &f->waiter;
    req.owner = w;
    submit(*w->reactor, req.op, arg);
    // The token's callback only wakes the fiber; the fiber forwards the cancel to the owner.
    sync_internal::CancelRegistration reg;
    reg.fn = [](void* p) { static_cast<Waiter*>(p)->notify(); };
    reg.arg = &f->waiter;
    sync_internal::CancelState* cs = token != nullptr ? StateOf(*token) : nullptr;
    bool registered = cs != nullptr && sync_internal::Register(cs, &reg);
    f->wait_fd.store(fd, std::memory_order_relaxed);
    f->waiter.note_wait(what, nullptr);
    bool cancel_posted = false;
    // acquire (both loads): the owner's writes to req happen before we read or reuse it.
    while (!req.finished.load(std::memory_order_acquire) ||
           (cancel_posted && !req.cancel_done.load(std::memory_order_acquire))) {
      (void)f->waiter.wait(std::nullopt);
      if (!cancel_posted && !req.finished.load(std::memory_order_acquire) &&
          ((token != nullptr && token->is_cancelled()) || f->waiter.interrupted())) {
        // Always through the owner's mailbox (we may run on another worker now; even on the
        // owner, the reactor must not be entered from inside a completion's aftermath).
        f->rt->Mail(*req.owner, nullptr, &req);
        cancel_posted = true;
      }
    }
    f->waiter.note_wait(nullptr, nullptr);
    f->wait_fd.store(-1, std::memory_order_relaxed);
    if (registered) sync_internal::Deregister(cs, &reg);
    return req.result;
  }
  // A plain thread (or a fiber in a BlockingRegion): the thread's own reactor, polled here.
  std::errc error;
  Reactor* r = ThreadReactorOrNull(&error);
  if (r == nullptr) return -static_cast<int>(error);
  req.waiter = nullptr;
  req.op.on_complete = [](IoOp& op, std::int64_t result, unsigned) {
    auto* q = static_cast<IoRequest*>(op.user);
    q->result = result;
    q->finished.store(true, std::memory_order_relaxed);  // same thread
  };
  submit(*r, req.op, arg);
  sync_internal::CancelRegistration reg;
  reg.fn = [](void* p) { static_cast<Reactor*>(p)->wake(); };
  reg.arg = r;
  sync_internal::CancelState* cs = token != nullptr ? StateOf(*token) : nullptr;
  bool registered = cs != nullptr && sync_internal::Register(cs, &reg);
  bool cancelled = false;
  while (!req.finished.load(std::memory_order_relaxed)) {
    if (!cancelled && token != nullptr && token->is_cancelled()) {
      r->cancel(req.op);
      cancelled = true;
    }
    (void)r->poll(std::nullopt);
  }
  if (registered) sync_internal::Deregister(cs, &reg);
  return req.result;
}

bool TakeDirectIoTurn() {
  Worker* w = t_worker;
  if (w == nullptr || w->current == nullptr) return true;  // a plain thread: it blocks anyway
  if (w->direct_io_tick != w->tick) {                      // a new run of a fiber: a fresh budget
    w->direct_io_tick = w->tick;
    w->direct_io_used = 0;
  }
  return ++w->direct_io_used <= kDirectIoBudget;
}

namespace {
// Close epochs: chunks of 64 Ki counters, made on a first close in their range.
base_internal::FdTable<std::uint32_t, 16, 1 << 24> g_close_epochs;
}  // namespace

std::uint32_t CloseEpoch(int fd) {
  std::atomic<std::uint32_t>* e = g_close_epochs.at(fd, /*make=*/false);
  // seq_cst: pairs with the bump in CloseFd, which comes before the close begins.
  return e == nullptr ? 0 : e->load(std::memory_order_seq_cst);
}

void CloseFd(int fd) {
  if (std::atomic<std::uint32_t>* e = g_close_epochs.at(fd, /*make=*/true)) {
    e->fetch_add(1, std::memory_order_seq_cst);  // before the close begins: see CloseEpoch
  }
  // Through the calling execution's reactor, as an operation: it ends the fd's operations in
  // every reactor (each worker's and each thread's) before the fd is closed, and the caller
  // waits for that (a fiber parks; a thread polls its reactor).
  bool submitted = false;
  (void)RunIo(
      [fd, &submitted](Reactor& re, IoOp& op) {
        submitted = true;
        re.close(op, fd);
      },
      {}, "io close", fd);
  // Once submitted, the fd is closed whatever the result (Linux releases it even on EINTR or
  // EIO): never close it twice, the number may be someone else's by now.
  if (submitted) return;
  // RunIo failed first (no reactor for this execution, or a fiber interrupted by shutdown):
  // close directly.
#ifdef _WIN32
  ::closesocket(NativeSocket(fd));  // api fds are sockets
#else
  ::close(fd);
#endif
}

// ---- Blocking work
// -------------------------------------------------------------------------------

namespace {

struct BlockingCall {
  BlockingTask task;  // first member
  void (*fn)(void*);
  void* arg;
  Waiter* waiter;
  std::atomic<bool> done{false};
};

Transfer AfterEnterRegion(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  f->state.store(kBlocking, std::memory_order_relaxed);
  if (!f->rt->blocking->submit(&f->region_task.task)) {
    // No blocking thread can start: stay on the worker (the region then blocks it).
    f->state.store(kRunnable, std::memory_order_relaxed);
    f->rt->PushLocal(*f->worker, f);
  }
  return t;
}

// ProvideRegionWaiter: on a blocking thread running a region, the region's fiber's Waiter (its
// identity for Mutex ownership, and its interruption at shutdown); null otherwise.
Waiter* ProvideRegionWaiter(void*) {
  return t_region_fiber != nullptr ? &t_region_fiber->waiter : nullptr;
}

// RunRegion: on a blocking thread, runs the fiber there until it leaves the region.
void RunRegion(BlockingTask* task) {
  Fiber* f = reinterpret_cast<Fiber::RegionTask*>(task)->fiber;
  f->region_home = current_context();
  t_region_fiber = f;
  // The fiber's stack may overflow here as on a worker: the SIGSEGV handler needs this thread's
  // alternate signal stack to print its diagnostic (once per thread; then one flag test).
  install_stack_overflow_handler();
  set_waiter_provider(&ProvideRegionWaiter, nullptr);
  errno = f->saved_errno;
  jump_context(f->context(), f);
  set_waiter_provider(nullptr, nullptr);  // call_blocking work on this thread: its own waiter
  t_region_fiber = nullptr;
}

Transfer AfterLeaveRegion(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  f->state.store(kRunnable, std::memory_order_relaxed);
  f->rt->Schedule(f);  // from a blocking thread: the inject queue (or the pinned worker)
  return t;
}

}  // namespace

bool RunBlocking(void (*fn)(void*), void* arg) {
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  if (f == nullptr) return false;
  BlockingCall call;
  call.task.run = [](BlockingTask* t) {
    auto* c = reinterpret_cast<BlockingCall*>(t);
    c->fn(c->arg);
    Waiter* waiter = c->waiter;  // read first: c may be gone once `done` is seen
    // release: fn's effects happen before the fiber's acquire load.
    c->done.store(true, std::memory_order_release);
    waiter->notify();
  };
  call.fn = fn;
  call.arg = arg;
  call.waiter = &f->waiter;
  if (!f->rt->blocking->submit(&call.task)) return false;  // no thread: run it inline
  f->waiter.note_wait("call_blocking", nullptr);
  // Not interruptible: fn must finish before `call` (on this stack) may go.
  while (!call.done.load(std::memory_order_acquire)) (void)f->waiter.wait(std::nullopt);
  f->waiter.note_wait(nullptr, nullptr);
  return true;
}

// ---- Fiber-local storage ------------------------------------------------------------------------

namespace {
std::atomic<std::size_t> g_next_local_key{0};
// A plain thread's fiber-local slots: made on first use, destroyed (running the values'
// destructors) at thread exit, through a ThreadOwned (base/thread_exit.h says why).
LocalSlots& ThreadLocals() {
  if (LocalSlots* slots = base_internal::ThreadOwned<LocalSlots>::get()) return *slots;
  throw std::bad_alloc();
}
}  // namespace

LocalSlots::Slot& LocalSlots::at(std::size_t key) {
  if (key >= size) {
    std::size_t n = std::max<std::size_t>(key + 1, size * 2);
    auto* grown = new Slot[n];
    std::copy(slots, slots + size, grown);
    delete[] slots;
    slots = grown;
    size = n;
  }
  return slots[key];
}

void LocalSlots::clear() {
  for (std::size_t i = size; i-- > 0;) {
    Slot s = slots[i];
    slots[i] = Slot{};
    if (s.value != nullptr) s.destroy(s.value);
  }
}

LocalSlots::~LocalSlots() {
  clear();
  delete[] slots;
}

LocalSlots& CurrentLocals() {
  Fiber* f = CurrentFiber();
  return f != nullptr ? f->locals : ThreadLocals();
}

std::size_t NewLocalKey() {
  // Keys are never reused: a slot table only grows to the number of FiberLocals ever made.
  return g_next_local_key.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace scheduler_internal

BlockingRegion::BlockingRegion() : entered_(false) {
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  if (f == nullptr) return;
  entered_ = true;
  f->region_task.task.run = &RunRegion;
  f->saved_errno = *w->errno_slot;  // RunRegion puts it back, on the blocking thread
  jump_context_ontop(w->home, f, &AfterEnterRegion);
  // Now on a blocking thread (or still on a worker, if none could start).
}

BlockingRegion::~BlockingRegion() {
  if (!entered_) return;
  Fiber* f = t_region_fiber;
  if (f == nullptr) return;  // stayed on the worker
  f->saved_errno = errno;  // a worker's Started puts it back
  jump_context_ontop(f->region_home, f, &AfterLeaveRegion);
  f->state.store(kRunning, std::memory_order_relaxed);
}

// ---- this_fiber ---------------------------------------------------------------------------------

namespace {
// Out of line: its on-top call record is a local whose address escapes, which would keep the
// compiler from making yield's direct switch a tail call.
// yield has already saved f's errno.
[[gnu::noinline]] void YieldToLoop(Worker& w, Fiber* f) {
  jump_context_ontop(w.home, f, &AfterYield);
}
}  // namespace

namespace this_fiber {

void yield() {
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  if (f == nullptr) {
    std::this_thread::yield();
    return;
  }
  f->saved_errno = *w->errno_slot;  // before DirectNext puts the next fiber's in place
  if (Fiber* next = f->rt->DirectNext(*w)) {
    // Straight to the next fiber, with no on-top function: the ring is this worker's alone, so
    // nothing can take f from it before the switch below has saved f.
    f->state.store(kRunnable, std::memory_order_relaxed);
    w->yields.push(f);
    jump_context_last(next->context(), next);  // a tail call: f resumes in yield's caller
    return;
  }
  YieldToLoop(*w, f);
}

namespace {

// SleepUntil: sleep_until and sleep_for, given `now`, a clock reading the caller just took. A
// sleep reads the clock once: a profile of W5 (10,000 fibers sleeping) spent 8% of its time
// in clock reads, four per sleep before.
Result<void> SleepUntil(Clock::time_point when, Clock::time_point now,
                        const CancellationToken* cancel) {
  Waiter& waiter = current_waiter();
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  // On a worker, `now` becomes its clock floor, and every check compares with the floor: the
  // first one with `now` itself, and so is the wait's deadline check that would follow it, which
  // deadline_checked spares its clock read (a deadline passed in the meantime only costs a park
  // whose timer is due at once). After a wake-up the floor is free to read: a wake-up by the
  // sleep's timer means the time has come whatever it says (Park then ends the sleep as timed
  // out), and one by a stale permit sleeps again, the wait's own check deciding then.
  if (f != nullptr) {
    w->clock_floor = now;  // steady: no earlier than the floor's last reading
    f->deadline_checked = true;
  }
  auto done = [&] { return when <= (f != nullptr ? f->worker->clock_floor : Clock::now()); };
  // Woken early by stale permits, the token, or the shutdown: sleep again until the time comes.
  sync_internal::ParkResult r = sync_internal::Park(
      waiter, done, WaitOptions{.deadline = when, .cancel = cancel}, "sleep", nullptr, /*spins=*/0);
  if (f != nullptr) f->deadline_checked = false;  // unused if the sleep never waited
  if (r == sync_internal::ParkResult::kCancelled) return std::errc::operation_canceled;
  return {};
}

}  // namespace

Result<void> sleep_until(std::chrono::steady_clock::time_point when,
                         const CancellationToken* cancel) {
  return SleepUntil(when, Clock::now(), cancel);
}

Result<void> sleep_for(std::chrono::steady_clock::duration d, const CancellationToken* cancel) {
  Clock::time_point now = Clock::now();
  return SleepUntil(now + d, now, cancel);
}

std::uint64_t id() {
  Fiber* f = CurrentFiber();
  return f != nullptr ? f->id : 0;
}

std::string_view name() {
  Fiber* f = CurrentFiber();
  return f != nullptr ? std::string_view(f->name, f->name_len) : std::string_view();
}

bool in_fiber() { return CurrentFiber() != nullptr; }

int worker_index() {
  Worker* w = t_worker;
  return w != nullptr && w->current != nullptr ? static_cast<int>(w->index) : -1;
}

}  // namespace this_fiber
}  // namespace weft
