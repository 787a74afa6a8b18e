// scheduler/internal/fiber.h: a fiber as the runtime keeps it, and the small types around it.
//
// Defines (weft::scheduler_internal): Fiber (the record of a fiber or a task: its context, the
// park/notify state of scheduler/internal/park.h, identity, fiber-local slots), StackfulFiber (a
// fiber's record: a Fiber and what only a fiber uses), FiberWaiter (the Waiter that lets //sync
// park a fiber), RecordBlock and RetiredBlocks (where records live, and why they are never
// freed), TimerEntry (a parked fiber's deadline), FiberFifo (a queue of runnable fibers that
// cannot fail), Counters, the clock and the timer constants.
//
// Fiber objects (and so their Waiters) are recycled, never freed while the runtime lives: a
// notifier may still call notify() on a fiber that already resumed and finished (the lifetime
// contract in sync/waiter.h). A late notify only leaves a stale permit.
//
// Touches no worker or runtime state: worker.h and runtime_impl.h build on it.

#ifndef WEFT_SCHEDULER_INTERNAL_FIBER_H_
#define WEFT_SCHEDULER_INTERNAL_FIBER_H_

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "blocking_pool.h"
#include "weft/base/atomic.h"
#include "weft/context/context.h"
#include "weft/context/internal/vm.h"
#include "weft/context/stack.h"
#include "weft/reactor/reactor.h"
#include "weft/scheduler/internal/idle.h"
#include "weft/scheduler/internal/park.h"
#include "weft/scheduler/io.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/internal/spin_lock.h"
#include "weft/sync/internal/wait_queue.h"
#include "weft/sync/waiter.h"
#include "weft/timer/timer_heap.h"

namespace weft {
namespace scheduler_internal {

using Clock = SyncClock;  // weft/base/clock.h: virtual in a simulated runtime
// Worker::timer_head when the worker's heap is empty (scheduler/internal/idle.h's kNoDeadline).
static_assert(std::is_same_v<Clock::rep, std::int64_t>);
constexpr Clock::rep kNoTimer = kNoDeadline;
// How overdue a worker's earliest timer must be before an idle worker pops it (RescueTimers).
// A worker that switches fibers pops its own due timers within a fairness pass; one that has
// not is stuck in one fiber (CPU-bound, or a blocking call outside call_blocking), and its
// sleepers would otherwise wait for it. Tokio's timer resolution; Go steals at once, but a
// fiber woken on its own worker finds its stack and object in that worker's cache.
constexpr std::chrono::milliseconds kTimerRescueGrace{1};

inline const char* StateName(int s) {
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

// SpawnSite: "file:line" of a fiber's spawn call, for reports and dumps. A header that Bazel
// serves from a virtual include directory (bazel-out/.../_virtual_includes/<target>/<path>) is
// named by <path>, the name it is included by.
inline std::string SpawnSite(const std::source_location& site) {
  if (site.line() == 0) return "unknown";
  std::string_view file = site.file_name();
  constexpr std::string_view kVirtual = "/_virtual_includes/";
  if (const std::size_t at = file.find(kVirtual); at != std::string_view::npos) {
    const std::size_t target_end = file.find('/', at + kVirtual.size());
    if (target_end != std::string_view::npos) file.remove_prefix(target_end + 1);
  }
  return std::string(file) + ':' + std::to_string(site.line());
}

struct Worker;
struct Fiber;

// A fiber's Waiter: never spins (that would hold up the worker's other fibers); interrupted
// once its runtime shuts down (Runtime::Impl::shutting_down). It also keeps the fd of the I/O
// its fiber waits on, for dumps, in what would be the Waiter's tail padding.
class FiberWaiter final : public Waiter {
 public:
  explicit FiberWaiter(const std::atomic<bool>* shutting_down)
      : Waiter(/*spins_before_park=*/0, shutting_down) {}
  bool wait(std::optional<SyncClock::time_point> deadline) override;
  void notify() override;
  bool suspend(sync_internal::AsyncParkBase& park, std::coroutine_handle<> h) override;
  bool can_block() const override;
  // A fiber's own node is in its StackfulFiber; a task's record has none (a task cannot block;
  // see park.cc).
  sync_internal::WaitNode& own_node() override;
  // Renew: a new fiber in this Fiber object: its id is the Waiter's identity (Mutex ownership).
  void Renew(std::uint64_t fiber_id) { set_identity(fiber_id); }
  // Rebind: the Fiber object now belongs to another runtime (a retired RecordBlock reused).
  void Rebind(const std::atomic<bool>* shutting_down) { set_interrupt(shutting_down); }
  // Its fiber: it is always Fiber::waiter. Computed, not stored: a stored pointer sat on a line
  // of the Fiber that a wait touched for nothing else.
  Fiber* fiber();
  // The fd of the I/O it waits on, for dumps (relaxed: informational); -1: none. What it waits
  // on is the Waiter's note_wait.
  weft::atomic<int> wait_fd{-1};
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

// Counters: written by their worker only (a relaxed load+store, no read-modify-write), read by
// stats_json from any thread; stuck is written by the runtime's monitor only.
struct Counters {
  std::atomic<std::uint64_t> spawned{0}, run{0}, stolen{0}, parked{0}, polled{0}, sleeps{0},
      idle_ns{0}, no_stack{0}, rescued{0}, stuck{0};
};
inline void Bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// What only one kind of record uses, in the same bytes (Fiber::part): a fiber's stack, or the
// state a task keeps across its suspensions (it has no stack to keep it on). A record is one kind
// for life (RecordKind), so the member that is alive is always its kind's.
// frame: where it resumes (the innermost coroutine of its chain, as it suspended); park: the wait
// it is suspended in (null: it resumes as soon as it runs); name: its name's 32 bytes, allocated
// the first time a named task takes the record (kept with it), null before. (The timer entry of
// a task's wait is the record's pending_timer, as a fiber's: see TaskWait.)
// The bytes of a fiber's or task's name (with its terminator), allocated the first time a named
// one takes its record.
constexpr std::size_t kNameBytes = 32;
struct TaskPart {
  void* frame = nullptr;
  sync_internal::AsyncParkBase* park = nullptr;
  char* name = nullptr;
};
enum class RecordKind : std::uint8_t { kFiber, kTask };

// Fiber: the record of a fiber or of a stackless task (scheduler/task.h), what run queues,
// waits, timers and dumps hold. A fiber's record is a StackfulFiber (below), which adds what only
// a fiber uses; a task's is this alone, 192 bytes (RecordBlock).
//
// Line-aligned, so that its first 128 bytes are two lines (not three): W2 on 1 worker
// 22.0 -> 16.0 ms with the layout below.
struct alignas(64) Fiber {
  // shutting_down: the runtime's flag, which interrupts the fiber's waits once set.
  Fiber(Runtime::Impl* runtime, const std::atomic<bool>* shutting_down, RecordKind record_kind)
      : rt(runtime), kind(record_kind), waiter(shutting_down) {
    if (kind == RecordKind::kTask) {
      new (&part.task) TaskPart();
    } else {
      new (&part.stack) Stack();
    }
  }
  ~Fiber() {
    if (kind == RecordKind::kTask) {
      delete[] part.task.name;  // (a fiber's: ~StackfulFiber)
      part.task.~TaskPart();
    } else {
      part.stack.~Stack();
    }
  }
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // The first 128 bytes hold what a spawn writes and a first run reads (W2: a queued fiber has
  // left the caches by the time it runs, so each line here is a miss at both ends), and the
  // small fields of parks, wake-ups and dumps; the waiter and the cold pointers follow.
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
  union Part {
    Part() {}       // Fiber's constructor makes its kind's member
    ~Part() {}      // and its destructor ends it
    Stack stack;    // RecordKind::kFiber
    TaskPart task;  // RecordKind::kTask
  } part;
  static_assert(sizeof(TaskPart) <= sizeof(Stack), "a task's part takes no more than a stack");
  Stack& stack() { return part.stack; }
  TaskPart& task() { return part.task; }
  // What it runs: its SpawnState, which frees itself (JoinSignal). Set while it runs (a TaskGroup
  // child's body answers CurrentGroupToken), null before spawn and once run() has returned.
  FiberBody* body = nullptr;
  Worker* worker = nullptr;  // the worker running it (or that last ran it)
  // The timer entry of its wait's deadline, from the wait's start (BeginStep) to its end
  // (EndStep); the park's on-top function (AfterPark) inserts it into the worker's heap.
  TimerEntry* pending_timer = nullptr;
  LocalSlots locals;
  // Scheduling latency (RuntimeOptions::measure_latency; untouched otherwise): when it last
  // became runnable (steady_clock ticks, written by whoever made it so, before queueing it; 0
  // once it ran), and the longest it has waited to run since its spawn (written by the workers
  // that run it, read by the console: relaxed). In a simulated runtime, which measures no
  // latency, runnable_at is instead the fiber's spawn number, its name in the trace.
  Clock::rep runnable_at = 0;
  weft::atomic<std::uint32_t> max_wait_us{0};
  weft::atomic<int> state{kDone};  // made free, as a finished one (Spawn sets kRunnable)
  // errno, kept per fiber: saved as the fiber stops running, put back into the thread's errno
  // as it runs again (on whichever thread), so a value set before a switch is read after it.
  int saved_errno = 0;
  // The stack it asks for at its first run: StackOptions, packed (sizes are at most 64 MiB).
  // A fiber's only.
  std::uint32_t stack_size = 0;
  // The index of the worker it runs on alone; -1: any. Written at spawn under meta_lock.
  std::int32_t pinned = -1;
  bool may_run_on(unsigned worker_index) const {
    return pinned < 0 || static_cast<unsigned>(pinned) == worker_index;
  }
  // In a simulation, the simulated host it runs on (0: the default host), set at spawn from its
  // spawner's and changed by sim::Network::enter (api/sim.h). The simulation's thread only.
  std::uint32_t sim_host = 0;
  // A wait inside a region blocks the blocking thread (the fiber keeps its own Waiter, so a
  // Mutex it holds stays its own across the region): it sleeps on region_word (a futex) with
  // region_waiting set, and a notify that sees region_waiting bumps the word and wakes it.
  // (Never set in a task's record: a task cannot enter a region.)
  std::atomic<std::uint32_t> region_word{0};
  std::atomic<bool> region_waiting{false};
  StackProtection stack_protection = StackProtection::kAuto;
  weft::atomic<bool> permit{false};
  // Set by a notify that won the kParked -> kRunnable CAS, before it schedules the fiber; read
  // and reset by the fiber (the scheduling hand-off orders the two).
  bool woken_by_notify = false;
  // A task's: why its coroutine last returned to the worker (TaskExit); and whether its wait
  // found no memory for its timer and is to be tried again when it next runs. Its worker's
  // thread only.
  std::uint8_t task_exit = 0;
  bool task_retry = false;
  // Set by a sleep whose deadline it has just checked against a fresh clock reading: the next
  // wait skips its own check (and clock read) once. Owner only.
  bool deadline_checked = false;
  // The runtime's light_park, copied here so that a notify reads no Runtime memory unless it
  // wakes the fiber (a late notify of a finished fiber may come after its runtime is gone; the
  // Fiber itself outlives it, see RetiredBlocks). relaxed: set before the fiber is handed out.
  weft::atomic<bool> light_park{false};
  const RecordKind kind;  // for life: which member of part is alive, and who owns the name
  // Identity: the id (the waiter's identity), name_len, the name, pinned and spawn_site are
  // written at spawn and read by dumps, all under meta_lock. name_len is the length of the name
  // (name()), which is written (and terminated) only when not empty.
  sync_internal::SpinLock meta_lock;
  std::uint8_t name_len = 0;
  // The generation of its current (or last) wait; a timer entry of another is stale. On the
  // same line as state, which a timer's wake-up reads too (PopDueTimers).
  weft::atomic<std::uint64_t> wait_gen{0};
  // ---- 128 bytes: a wait adds the waiter's line (a sleep touches no other).
  FiberWaiter waiter;
  std::source_location spawn_site;  // the user's spawn call
  // The next fiber in a FiberFifo's out-of-memory chain (see FiberFifo).
  Fiber* queue_next = nullptr;

  // id: unique in the process, never reused; its waiter's identity (FiberWaiter::Renew).
  std::uint64_t id() const { return waiter.identity(); }
  // Where its name is kept: 32 bytes allocated the first time a named fiber or task takes the
  // record (StackfulFiber::name, TaskPart::name), null before.
  char* name_chars();
  std::string_view name() { return {name_chars(), name_len}; }
};

// StackfulFiber: a fiber's record: the Fiber, and what only a fiber uses; 256 bytes, the fourth
// line all its own.
struct StackfulFiber final : Fiber {
  StackfulFiber(Runtime::Impl* runtime, const std::atomic<bool>* shutting_down)
      : Fiber(runtime, shutting_down, RecordKind::kFiber) {}
  ~StackfulFiber() { delete[] name; }
  // The node of its waiter's blocking waits (FiberWaiter::own_node).
  sync_internal::WaitNode own_node;
  // A blocking region: the blocking thread's own context, and the task that moves it there
  // (the pool hands back &region_task; FromRegionTask finds the record).
  Context region_home = nullptr;
  BlockingTask region_task;
  // Its name's 32 bytes, allocated the first time a named fiber takes the record (kept with
  // it), null before, as a task's (TaskPart::name).
  char* name = nullptr;
};
// Stackful: f's StackfulFiber; f must be a fiber's record.
inline StackfulFiber* Stackful(Fiber* f) { return static_cast<StackfulFiber*>(f); }
// FromRegionTask: the fiber whose region_task `task` is.
inline StackfulFiber* FromRegionTask(BlockingTask* task);
inline char* Fiber::name_chars() {
  return kind == RecordKind::kTask ? part.task.name : Stackful(this)->name;
}

// TaskContext: the context of a Fiber object that holds a task: not null (Prepare then gives it
// no stack) and never a real context record (nothing switches to it: Run and DirectNext look).
inline Context TaskContext() { return reinterpret_cast<Context>(std::uintptr_t{64}); }
inline bool IsTask(const Fiber* f) { return f->context() == TaskContext(); }
// HasStack: a context to prefetch: a fiber's that has run (a fiber's before its first run is
// null; a task's is TaskContext, 64: prefetch_context on it asked for 16 lines of addresses no
// program owns, on every task taken from a run queue).
inline bool HasStack(Context c) { return c != nullptr && c != TaskContext(); }
// Why a task's coroutine returned to its worker (Fiber::task_exit).
enum TaskExit : std::uint8_t {
  kTaskRunning,
  kTaskParking,
  kTaskYielding,
  kTaskTransferring,
  kTaskFinished
};

// RecordBlock: records are made kRecords at a time, of one kind, kStride bytes apart, in one
// line-aligned block whose whole pages get their memory with one system call
// (context_internal::VmPrefaultWrite: MADV_POPULATE_WRITE, Linux 5.14+) before the records are
// constructed in it. Made one at a time by malloc, each new page of Fibers faulted in on its
// first write (15-23 us here, for 9 Fibers), and a burst of spawns past the most fibers alive so
// far (W5's reps that grow) paid that on the spawning worker. Page-aligned blocks cost a page
// each: glibc's memalign leaves the gap it skips to reach the alignment as a free chunk whose
// header it writes, a touched page per block, 64 bytes a record (W8, per parked task: 0.65 KiB with
// them, 0.59 without; per parked fiber 4.46 and 4.40). kStride: packed, a fiber's record 256 bytes
// (4 lines: the two hot ones, the waiter's, and what only a fiber uses), a task's 192.
// (Packed, fibers measured W2 at 0.97x and 0.94x the time of fibers 448 bytes apart, on 1 and 2
// workers: docs/scheduler.md.) The blocks live as long as the runtime (the free lists reuse their
// records), then go to RetiredBlocks.
class RecordBlock {
 public:
  static constexpr std::size_t kRecords = 64;
  static constexpr std::size_t kAlign = alignof(Fiber);
  static constexpr std::size_t kStride[2] = {256, 192};  // by RecordKind
  static_assert(sizeof(StackfulFiber) == kStride[0] && sizeof(Fiber) == kStride[1]);

  RecordBlock(Runtime::Impl* rt, const std::atomic<bool>* shutting_down, RecordKind kind)
      : kind_(kind),
        mem_(static_cast<std::byte*>(
            ::operator new (kRecords* stride(), std::align_val_t{kAlign}))) {
    // The block's whole pages (the advice takes page-aligned ranges only); a hint: else they
    // fault in as the records are made. The partial pages at its ends are touched anyway.
    constexpr std::uintptr_t kPage = 4096;
    const auto lo = (reinterpret_cast<std::uintptr_t>(mem_) + kPage - 1) & ~(kPage - 1);
    const auto hi = (reinterpret_cast<std::uintptr_t>(mem_) + kRecords * stride()) & ~(kPage - 1);
    if (hi > lo)
      context_internal::VmPrefaultWrite(reinterpret_cast<void*>(lo), hi - lo, 1, hi - lo);
    for (std::size_t i = 0; i < kRecords; ++i) {
      if (kind == RecordKind::kTask) {
        new (mem_ + i * stride()) Fiber(rt, shutting_down, kind);
      } else {
        new (mem_ + i * stride()) StackfulFiber(rt, shutting_down);
      }
    }
  }
  ~RecordBlock() {
    for (std::size_t i = 0; i < kRecords; ++i) {
      if (kind_ == RecordKind::kTask) {
        at(i)->~Fiber();
      } else {
        Stackful(at(i))->~StackfulFiber();
      }
    }
    ::operator delete (mem_, std::align_val_t{kAlign});
  }
  RecordBlock(const RecordBlock&) = delete;
  RecordBlock& operator=(const RecordBlock&) = delete;

  RecordKind kind() const { return kind_; }

  // Bind: the records now belong to `rt` (a new block, or a retired one reused). Every record in
  // it is finished (kDone, no stack, no context).
  void Bind(Runtime::Impl* rt, const std::atomic<bool>* shutting_down, bool light_park) {
    for (std::size_t i = 0; i < kRecords; ++i) {
      Fiber* f = at(i);
      f->rt = rt;
      f->waiter.Rebind(shutting_down);
      f->light_park.store(light_park, std::memory_order_relaxed);
    }
  }

  Fiber* at(std::size_t i) const {
    std::byte* p = mem_ + i * stride();
    if (kind_ == RecordKind::kTask) return std::launder(reinterpret_cast<Fiber*>(p));
    return std::launder(reinterpret_cast<StackfulFiber*>(p));
  }

 private:
  std::size_t stride() const { return kStride[static_cast<int>(kind_)]; }

  RecordKind kind_;
  std::byte* mem_;
};

// RetiredBlocks: the RecordBlocks of runtimes that are gone, for later runtimes to reuse; never
// freed. A release (Event::set from a plain thread, say) takes a fiber's Waiter under its lock and
// notifies it after unlocking; the fiber may finish and its runtime be destroyed in between. The
// late notify then finds a finished Fiber (kDone: it only leaves a stale permit, which every wait
// tolerates) in memory that is still a Fiber, instead of freed memory. The pool holds as many
// records of each kind as the most that any runtimes had at once.
struct RetiredBlocks {
  std::mutex mu;
  std::vector<std::unique_ptr<RecordBlock>> blocks[2];  // by RecordKind
  static RetiredBlocks& Get() {
    static RetiredBlocks* r = new RetiredBlocks;  // never destroyed: late notifies may come
    return *r;
  }
};

// offsetof on a Fiber, which is not standard-layout (its waiter has virtual functions): GCC,
// Clang and MSVC all give the member's offset for a class without virtual bases.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
inline Fiber* FiberWaiter::fiber() {
  return reinterpret_cast<Fiber*>(reinterpret_cast<std::byte*>(this) - offsetof(Fiber, waiter));
}
inline StackfulFiber* FromRegionTask(BlockingTask* task) {
  return reinterpret_cast<StackfulFiber*>(reinterpret_cast<std::byte*>(task) -
                                          offsetof(StackfulFiber, region_task));
}
// The layout the comments at Fiber and PopDueTimers count on.
static_assert(offsetof(Fiber, wait_gen) + sizeof(Fiber::wait_gen) <= 128, "hot fields: 2 lines");
static_assert(offsetof(Fiber, state) / 64 == offsetof(Fiber, wait_gen) / 64,
              "a timer's wake-up reads state and wait_gen from one line");
static_assert(offsetof(Fiber, waiter) == 128 && sizeof(FiberWaiter) == 48,
              "the waiter: one line with the spawn site and the queue link");
static_assert(sizeof(Fiber) == 192, "a task's record: three lines");
#pragma GCC diagnostic pop

// FiberFifo: a FIFO of runnable fibers that never fails to take one: a power-of-two ring that
// doubles when full (made on first use, so an empty one owns no memory), and, when it cannot
// grow (out of memory), a chain through the fibers themselves (Fiber::queue_next: a runnable
// fiber is in one queue at a time). Fibers chained go after those in the ring, and new ones go
// to the chain while it is not empty, so the order stays first in, first out. A push that threw
// std::bad_alloc would lose the fiber from inside a notify or a yield, and ~Runtime would wait
// for it forever.
// Fault injection for tests (WEFT_TEST_QUEUE_OOM, read by the Runtime's constructor).
extern std::atomic<bool> g_fail_queue_growth;

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

}  // namespace scheduler_internal
}  // namespace weft

#endif  // WEFT_SCHEDULER_INTERNAL_FIBER_H_
