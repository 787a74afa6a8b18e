// scheduler/runtime.h: the M:N runtime: many fibers over a few worker threads, with work stealing.
// Fibers park on weft's sync primitives through the Waiter seam (sync/waiter.h): a Mutex, Channel
// or Event used inside a fiber parks the fiber, not its worker. Each worker owns a reactor
// (//reactor) that fiber I/O parks on (the calls are in //api:io); an idle worker sleeps in it.
//
// Defines: weft::Runtime (with fork_join), weft::RuntimeOptions, weft::FiberOptions,
// weft::JoinHandle, weft::call_blocking, weft::BlockingRegion, weft::FiberLocal, weft::this_fiber.
//
// Several runtimes may live in one process; none uses global state.

#ifndef WEFT_SCHEDULER_RUNTIME_H_
#define WEFT_SCHEDULER_RUNTIME_H_

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include "weft/base/atomic.h"
#include "weft/base/result.h"
#include "weft/context/stack.h"
#include "weft/deque/fork_join.h"
#include "weft/reactor/reactor.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/coordination.h"
#include "weft/sync/internal/wait_queue.h"
#include "weft/sync/waiter.h"

namespace weft {

// StuckFiber: a fiber that has held its worker past RuntimeOptions::stuck_threshold without a
// switch (a long computation, or a blocking call outside call_blocking), as the runtime's
// monitor saw it.
struct StuckFiber {
  std::uint64_t fiber_id = 0;
  std::string name;  // FiberOptions::name, empty if it had none
  unsigned worker = 0;
  // How long it had run when the monitor looked (at least this long: the monitor samples).
  std::chrono::nanoseconds running_for{0};
  // Fibers waiting in that worker's run queue meanwhile (idle workers steal them; a fiber in the
  // worker's run_next slot or yield ring waits for the stuck one; docs/scheduler.md).
  std::size_t queued = 0;
  // Where it was spawned: "file:line" of the spawn (or block_on, or TaskGroup::spawn) call.
  std::string spawned_at;
};

// SimulationOptions: RuntimeOptions::simulation, a deterministic run (docs/simulation.md).
struct SimulationOptions {
  // seed: decides every scheduling choice. The environment's WEFT_SIM_SEED, when set, overrides
  // it (to replay a failing seed without recompiling).
  std::uint64_t seed = 0;
  // step: how far each scheduling decision moves the virtual clock, so that a fiber that polls
  // the clock in a yield loop sees it move. Zero: only idleness moves it.
  std::chrono::nanoseconds step{1000};
  // trace: keep every decision as a line of text (SimulationReport::trace); the hash is kept
  // either way.
  bool trace = false;
};

// SimulationReport: what a simulated runtime has done so far (Runtime::simulation()).
struct SimulationReport {
  std::uint64_t seed = 0;   // the seed in use (WEFT_SIM_SEED's, if set)
  std::uint64_t steps = 0;  // scheduling decisions taken
  // trace_hash: a hash of every decision (which fiber, among how many runnable, at what virtual
  // time): equal for two runs exactly when they made the same decisions, with overwhelming
  // likelihood.
  std::uint64_t trace_hash = 0;
  std::chrono::nanoseconds virtual_elapsed{0};  // the virtual clock since the runtime started
  // trace: one line per decision, "<step> t=<ns> run=<fiber> of=<runnable>", with
  // SimulationOptions::trace; fibers are numbered in spawn order from 1.
  std::string trace;
};

struct RuntimeOptions {
  unsigned workers = 0;                            // 0: std::thread::hardware_concurrency()
  std::size_t stack_size = std::size_t{64} << 10;  // default fiber stack (rounded to a class)
  ReactorOptions reactor = {};                     // each worker's reactor (backend choice)
  // max_blocking_threads: call_blocking / BlockingRegion threads. 0: none; call_blocking then
  // runs its function on the fiber (a task's on a fiber of its own), a region stays on its worker.
  std::size_t max_blocking_threads = 64;
  std::size_t fork_join_depth = 4096;  // fork-join spawns per worker before inline
  // stuck_threshold: a fiber that runs this long without a switch is reported to on_stuck, once
  // per such run. Zero: no monitor (no thread). The monitor is one thread per runtime that
  // samples each worker twice per threshold (every 0.5 to 10 ms), and parks while the runtime
  // is idle (no fiber has run for 20 ms).
  std::chrono::microseconds stuck_threshold{5000};
  // on_stuck: called on the monitor's thread; it must not block (the next reports wait for it);
  // an exception it throws is reported on stderr and dropped.
  // Null: one line on stderr, at most one a second (the lines skipped are counted in the next).
  std::function<void(const StuckFiber&)> on_stuck;
  // deadlock_hint_after: when, this long, every live fiber has been parked with no timer, no I/O
  // and nothing runnable while a thread waits in block_on, the monitor suspects a deadlock and
  // passes a dump of the fibers (dump_fibers) to on_deadlock_hint, once per such spell. Zero:
  // never. Null on_deadlock_hint: the dump goes to stderr.
  std::chrono::milliseconds deadlock_hint_after{1000};
  std::function<void(std::string_view dump)> on_deadlock_hint;
  // spare_workers: when every worker (and every spare serving) holds a fiber past
  // stuck_threshold, the monitor starts a spare worker thread, up to this many, which runs the
  // runnable fibers, the spawns and the overdue timers the stuck workers cannot; each goes
  // dormant again once fewer workers are stuck (docs/scheduler.md). Unset: as many as workers;
  // 0: none; at most kMaxSpareWorkers (a larger value counts as that: each spare's slot is
  // made with the runtime). Nothing without a monitor (stuck_threshold zero).
  std::optional<unsigned> spare_workers;
  static constexpr unsigned kMaxSpareWorkers = 256;
  // console: serve this runtime's introspection (workers, fibers, stuck-fiber reports) on a
  // Unix socket that tools/weft-console attaches to (docs/console.md). Also on when the
  // environment has WEFT_CONSOLE=1. Read-only; the socket is <dir>/<pid>-<n>.sock, mode 0600, in
  // a directory that must be the user's own with mode 0700 (made so if missing; otherwise the
  // console stays off, with one line on stderr). console_dir: that directory (empty:
  // $WEFT_CONSOLE_DIR, else $XDG_RUNTIME_DIR/weft, else /tmp/weft-<uid>). POSIX only.
  bool console = false;
  std::string console_dir;
  // measure_latency: each fiber's scheduling latency (from runnable to running) goes into a
  // histogram per worker (stats_json's sched_latency_ns) and its longest into the fiber's
  // max_wait_us (the console's fibers). Two clock reads per wake-up; off, one test of a flag.
  bool measure_latency = false;
  // simulation: run deterministically (docs/simulation.md): every fiber on one thread, the next
  // fiber chosen by a PRNG seeded with simulation->seed at every switch, and a virtual clock
  // (SyncClock::now() on that thread) that jumps to the next timer whenever no fiber can run. The
  // same seed gives the same run. workers, the monitor, spares and the console are then off;
  // call_blocking runs inline; sockets are the simulated network's (api/sim.h), and fiber I/O on
  // any real fd fails with ENOTSUP (none is touched).
  std::optional<SimulationOptions> simulation;
};

struct FiberOptions {
  // The stack class: size (0: the runtime's default; rounded up to a class, 16 KiB .. 64 MiB)
  // and protection (guard page, or compact with a red-zone check; see context/stack.h).
  std::size_t stack_size = 0;
  StackProtection protection = StackProtection::kAuto;
  std::string_view name = {};  // shown in diagnostics (stack overflow) and dumps
  // pinned_worker >= 0: the fiber runs only on that worker (index modulo workers()), never
  // stolen; its yields and wake-ups stay there. -1: any worker.
  int pinned_worker = -1;
};

class Runtime;
template <typename T>
class Task;  // scheduler/task.h

namespace scheduler_internal {

template <typename T>
struct IsTaskType : std::false_type {};
template <typename T>
struct IsTaskType<Task<T>> : std::true_type {};

// JoinSignal: the "finished" flag of a fiber's join state, with room for the one caller that
// waits on it (a JoinHandle is move-only, joined by its owner). It also decides who frees the
// state, so that neither side counts references: the fiber's set() (an exchange) and the
// handle's drop() (a CAS) are one atomic step each, and the side that comes second frees. A join
// that finds the fiber finished is one load, and the joiner then frees with no atomic at all.
class JoinSignal {
 public:
  // set: once, by the fiber that finished; wakes the waiting joiner, if any. True if the handle
  // was dropped first: the caller then holds the only reference and frees the state. On false
  // the caller must not touch the state again (its joiner may free it at once).
  [[nodiscard]] bool set() noexcept {
    // acq_rel: release publishes the result (or error) written before, to the joiner and to a
    // handle that drops later; acquire orders our use of the joiner's Waiter after its
    // registration (WaitSlow's CAS, release), and our free after a drop's earlier accesses.
    std::uintptr_t seen = word_.exchange(kSet, std::memory_order_acq_rel);
    if (seen == kDropped) return true;
    if (seen != kOpen) reinterpret_cast<Waiter*>(seen)->notify();
    return false;
  }
  // drop: once, by a handle that will not join (detach, destruction). True if the fiber already
  // finished: the caller then holds the only reference and frees the state.
  [[nodiscard]] bool drop() noexcept {
    std::uintptr_t seen = kOpen;
    // release (success): our accesses to the state happen before the fiber frees it. acquire
    // (failure): the fiber's writes (result, error) happen before we destroy them.
    return !word_.compare_exchange_strong(seen, kDropped, std::memory_order_release,
                                          std::memory_order_acquire);
  }
  bool is_set() const noexcept {
    // acquire: pairs with set()'s release; the result is visible after a true.
    return word_.load(std::memory_order_acquire) == kSet;
  }
  // wait: until set; timed_out or operation_canceled per options (the state stays joinable),
  // EBUSY if another wait on it is in progress (two joins of one handle at once). With
  // `interrupt`: also ends, with interrupted, once it reads true (the waker sets it, then
  // notifies the waiting execution's Waiter).
  Result<void> wait(const WaitOptions& options, const atomic<bool>* interrupt = nullptr) {
    if (is_set()) return {};
    return WaitSlow(options, interrupt);
  }
  // Claim / Withdraw: the two ends of a wait, for wait() and for a task's co_await (Awaiter
  // below). Claim: registers `self` as the joiner: true to park; false with the wait's outcome
  // in *result ({} when set already, EBUSY when another wait is in progress). Withdraw: after a
  // park that ended with r: {} if set() came first after all, else the error to report.
  bool Claim(Waiter& self, Result<void>* result);
  Result<void> Withdraw(Waiter& self, sync_internal::ParkResult r);

  // Awaiter: wait() for a task (JoinHandle::async_join's).
  class Awaiter {
   public:
    Awaiter(JoinSignal* signal, const WaitOptions& options)
        : signal_(signal), park_(&Done, signal, options) {}
    bool await_ready() const noexcept { return signal_->is_set(); }
    bool await_suspend(std::coroutine_handle<> h) {
      self_ = &current_waiter();
      if (!signal_->Claim(*self_, &result_)) return false;
      parked_ = true;
      return park_.Begin(*self_, h, "JoinHandle", signal_);
    }
    Result<void> await_resume() {
      if (!parked_) return result_;
      parked_ = false;
      sync_internal::ParkResult r = park_.End();
      if (r == sync_internal::ParkResult::kWoken && signal_->is_set()) return {};
      return signal_->Withdraw(*self_, r);
    }

   private:
    static bool Done(void* signal) { return static_cast<JoinSignal*>(signal)->is_set(); }
    JoinSignal* signal_;
    sync_internal::AsyncPark park_;
    Waiter* self_ = nullptr;
    Result<void> result_;
    bool parked_ = false;
  };

 private:
  Result<void> WaitSlow(const WaitOptions& options, const atomic<bool>* interrupt);
  static constexpr std::uintptr_t kOpen = 0;
  static constexpr std::uintptr_t kSet = 1;      // never a Waiter's address (aligned)
  static constexpr std::uintptr_t kDropped = 2;  // nor this
  // kOpen, kSet, kDropped, or the address of the Waiter of the joiner parked on it.
  atomic<std::uintptr_t> word_{kOpen};
};

struct JoinBase {
  JoinSignal done;
  std::exception_ptr error;
  // Destroys and frees the whole state (the SpawnState this is part of); called once, by the
  // side that holds the last reference (see JoinSignal).
  void (*destroy)(JoinBase*) noexcept = nullptr;
};
template <typename T>
struct JoinState : JoinBase {
  std::optional<std::conditional_t<std::is_void_v<T>, char, T>> value;
};

// FiberBody: what a fiber runs, once; or, if the fiber cannot start (no stack), fail() instead.
struct FiberBody {
  virtual void run() = 0;
  virtual void fail(std::exception_ptr why) = 0;
  // group_token: a TaskGroup child's group token (scheduler/task_group.h), asked while it runs.
  virtual const CancellationToken* group_token() const noexcept { return nullptr; }

 protected:
  ~FiberBody() = default;
};

// Where SpawnStates live: on a worker, its slab shard (//alloc:slab), so a spawn costs no malloc
// and the fiber that finishes on another worker frees through the owner's remote-free list;
// elsewhere, or when a slab has no room, operator new. A 16-byte header says which. (glibc's
// malloc was a quarter of W2's profile: an arena lock per spawn once the spawning thread's
// tcache ran dry, and malloc_consolidate.)
void* AllocateSpawnState(std::size_t bytes);
void FreeSpawnState(void* p) noexcept;
// KeepSpawnState: FreeSpawnState(p) leaves p's memory from now on (a task's root frame, whose
// coroutine is destroyed as it ends, while its memory goes with its join state);
// FreeKeptSpawnState frees it.
void KeepSpawnState(void* p) noexcept;
void FreeKeptSpawnState(void* p) noexcept;
// Fault injection for tests: set to n > 0, the n-th AllocateSpawnState from then on throws
// std::bad_alloc (a spawn's state or a task's coroutine frame finding no memory).
extern std::atomic<int> g_fail_spawn_states;
// SpawnStateIsLocal: p came from the calling worker's slab, so freeing it here is a local free,
// not a trip through the owner's remote-free list.
bool SpawnStateIsLocal(const void* p) noexcept;

// SpawnStorage<S>: where a spawn state S lives (a fiber's SpawnState, a task's TaskState): the
// slab while S's alignment allows (AllocateSpawnState's 16 bytes), else operator new with S's
// alignment (an over-aligned callable or result).
template <typename S>
struct SpawnStorage {
  // New: an S made from args; throws what the allocation or S's constructor throws.
  template <typename... A>
  static S* New(A&&... args) {
    void* p;
    if constexpr (alignof(S) <= 16) {
      p = AllocateSpawnState(sizeof(S));
    } else {
      p = ::operator new (sizeof(S), std::align_val_t{alignof(S)});
    }
    try {
      return ::new (p) S(std::forward<A>(args)...);
    } catch (...) {
      Free(p);
      throw;
    }
  }
  static void Delete(S* s) noexcept {
    s->~S();
    Free(s);
  }

 private:
  static void Free(void* p) noexcept {
    if constexpr (alignof(S) <= 16) {
      FreeSpawnState(p);
    } else {
      ::operator delete (p, std::align_val_t{alignof(S)});
    }
  }
};

// SpawnState: the callable and the join state in one allocation, referenced by the fiber (as its
// FiberBody) and by the handle (as its JoinState); the second of the two to let go frees it
// (JoinSignal). The callable may be move-only; it is destroyed as soon as it returns (not when
// the handle goes), so what it captured (a socket, a lock) is released with the fiber.
template <typename T, typename F>
struct SpawnState final : JoinState<T>, FiberBody {
  explicit SpawnState(F&& f) : fn(std::move(f)) { this->destroy = &Destroy; }
  // New: a state for f; throws what the allocation or F's move constructor throws.
  static SpawnState* New(F&& f) { return SpawnStorage<SpawnState>::New(std::move(f)); }
  static void Destroy(JoinBase* base) noexcept {
    SpawnStorage<SpawnState>::Delete(static_cast<SpawnState*>(static_cast<JoinState<T>*>(base)));
  }
  void run() override {
    try {
      if constexpr (std::is_void_v<T>) {
        (*fn)();
        this->value.emplace();
      } else {
        this->value.emplace((*fn)());
      }
    } catch (...) {
      this->error = std::current_exception();
    }
    fn.reset();
    if (this->done.set()) Destroy(this);  // the handle was dropped: ours alone
  }
  void fail(std::exception_ptr why) override {
    fn.reset();
    this->error = std::move(why);
    if (this->done.set()) Destroy(this);
  }
  std::optional<F> fn;
};

// Spawn: a fiber that runs body; throws std::system_error (EINVAL) for a stack size no class
// has, std::bad_alloc; on a throw, body is untouched (the caller still owns it). site: where the
// user's spawn call is, kept for diagnostics. With task_frame (a coroutine's address), a task
// (scheduler/task.h) that resumes it, with no stack; body is then a TaskBody.
void Spawn(Runtime& rt, FiberBody* body, const FiberOptions& options, std::source_location site,
           void* task_frame = nullptr);

// RunBlocking: runs fn(arg) on the blocking pool of the calling fiber's runtime while the fiber
// parks; false when the caller is not a fiber (the caller then runs it itself).
bool RunBlocking(void (*fn)(void*), void* arg);
// For a task (this_task::call_blocking): StartBlockingCall hands fn(arg) to the blocking threads
// (in a simulation, or when none could start, to a fiber of its own) and returns the call,
// which the task waits on (BlockingCallDone: fn has returned, or could not run:
// RethrowBlockingCallError then throws why) and then frees (FinishBlockingCall); null once fn
// has already run (the caller is not a task: call_blocking serves it). std::bad_alloc before
// fn runs.
struct BlockingCall;
BlockingCall* StartBlockingCall(void (*fn)(void*), void* arg);
// CallOutcome<F>: a call of *f made elsewhere (Invoke, on a blocking thread) and its value or
// exception, kept for the one that waits for it (Take): both call_blocking forms.
template <typename F>
struct CallOutcome {
  using T = std::invoke_result_t<F&>;
  F* f;
  std::optional<std::conditional_t<std::is_void_v<T>, char, T>> value;
  std::exception_ptr error;

  static void Invoke(void* self) {
    auto* c = static_cast<CallOutcome*>(self);
    try {
      if constexpr (std::is_void_v<T>) {
        (*c->f)();
        c->value.emplace();
      } else {
        c->value.emplace((*c->f)());
      }
    } catch (...) {
      c->error = std::current_exception();
    }
  }
  T Take() {
    if (error) std::rethrow_exception(error);
    if constexpr (!std::is_void_v<T>) return std::move(*value);
  }
};
bool BlockingCallDone(const BlockingCall* call);
void RethrowBlockingCallError(const BlockingCall* call);
void FinishBlockingCall(BlockingCall* call);

// The runtime's hosted fork-join pool, and whether the caller is a fiber on one of its workers.
ForkJoinPool& ForkJoinPoolOf(Runtime& rt);
// BlockOnScope: a thread waits in block_on (the monitor's deadlock hint counts them).
class BlockOnScope {
 public:
  explicit BlockOnScope(Runtime& rt);
  ~BlockOnScope();
  BlockOnScope(const BlockOnScope&) = delete;
  BlockOnScope& operator=(const BlockOnScope&) = delete;

 private:
  Runtime& rt_;
};
// ForkJoinScope: the calling fiber runs a fork-join computation inline on its worker: the
// runtime's monitor does not report it as stuck meanwhile (it computes, as it was asked to, and
// the other workers steal its tasks).
class ForkJoinScope {
 public:
  explicit ForkJoinScope(Runtime& rt);
  ~ForkJoinScope();
  ForkJoinScope(const ForkJoinScope&) = delete;
  ForkJoinScope& operator=(const ForkJoinScope&) = delete;

 private:
  void* worker_;
};
bool InFiberOf(const Runtime& rt);
// InsideOf: the caller is one that rt's shutdown would wait for: one of its fibers (also in a
// BlockingRegion), or a blocking thread running one of its call_blocking functions. Destroying rt
// (or waiting in its block_on) from there would wait for the caller itself.
bool InsideOf(const Runtime& rt);
// ForkJoinWorkerForSpare: for a fiber on one of rt's spare workers, the worker its fork-join
// root should run on (one the monitor does not see stuck, else 0); -1 elsewhere.
int ForkJoinWorkerForSpare(const Runtime& rt);

// Fiber-local storage: a slot table per fiber (per thread outside fibers). One pointer: the
// table keeps its size (it sits in every fiber's and task's record; most never use it).
class LocalSlots {
 public:
  struct Slot {
    void* value = nullptr;
    void (*destroy)(void*) = nullptr;
  };
  LocalSlots() = default;
  LocalSlots(const LocalSlots&) = delete;
  LocalSlots& operator=(const LocalSlots&) = delete;
  ~LocalSlots();
  Slot& at(std::size_t key);  // grows (std::bad_alloc without memory)
  void clear();               // destroys the values (newest key first)

 private:
  struct Table;
  Table* table_ = nullptr;
};
LocalSlots& CurrentLocals();
std::size_t NewLocalKey();

// The token of the TaskGroup whose child the calling fiber is (its body's group_token), else
// null (outside fibers too).
const CancellationToken* CurrentGroupToken();

}  // namespace scheduler_internal

// JoinHandle<T>: the result of a spawned fiber, consumed exactly once by join(). join() waits
// (parking the calling fiber, or blocking the calling thread); with a deadline it may time out,
// and the handle stays joinable. If the fiber threw, join() rethrows its exception. Dropping the
// handle detaches the fiber.
template <typename T>
class [[nodiscard]] JoinHandle {
 public:
  JoinHandle() = default;
  // Move-only: one owner, so one join. Assigning over a joinable handle detaches its fiber.
  JoinHandle(JoinHandle&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  JoinHandle& operator=(JoinHandle&& other) noexcept {
    if (this != &other) {
      detach();
      state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
  }
  JoinHandle(const JoinHandle&) = delete;
  JoinHandle& operator=(const JoinHandle&) = delete;
  ~JoinHandle() { detach(); }

  bool joinable() const { return state_ != nullptr; }

  using Value = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

  // join: EINVAL if already joined or detached; timed_out / operation_canceled per options.
  Result<Value> join(const WaitOptions& options = {}) {
    if (state_ == nullptr) return std::errc::invalid_argument;
    if (Result<void> r = state_->done.wait(options); !r) return r.error();
    return Take();
  }

  // async_join: join() for a task (scheduler/task.h), which must not block its worker:
  // `co_await handle.async_join(options)`, or `co_await handle` without options. The same
  // results; the handle stays joinable after a timeout. Joins a fiber or a task alike.
  class JoinAwaiter {
   public:
    bool await_ready() const noexcept { return handle_->state_ == nullptr || wait_.await_ready(); }
    bool await_suspend(std::coroutine_handle<> h) { return wait_.await_suspend(h); }
    Result<Value> await_resume() {
      if (handle_->state_ == nullptr) return std::errc::invalid_argument;
      if (Result<void> r = wait_.await_resume(); !r) return r.error();
      return handle_->Take();
    }

   private:
    friend class JoinHandle;
    JoinAwaiter(JoinHandle* handle, const WaitOptions& options)
        : handle_(handle),
          wait_(handle->state_ != nullptr ? &handle->state_->done : nullptr, options) {}
    JoinHandle* handle_;
    scheduler_internal::JoinSignal::Awaiter wait_;
  };
  JoinAwaiter async_join(const WaitOptions& options = sync_internal::kNoWaitOptions) {
    return JoinAwaiter(this, options);
  }
  JoinAwaiter operator co_await() { return async_join(); }

 private:
  // Take: the result of a finished fiber or task (set, acquire): the state is ours alone, freed
  // as we return.
  Result<Value> Take() {
    struct Release {
      scheduler_internal::JoinBase* state;
      ~Release() { state->destroy(state); }
    } release{std::exchange(state_, nullptr)};
    auto* state = static_cast<scheduler_internal::JoinState<T>*>(release.state);
    if (state->error) std::rethrow_exception(state->error);
    if constexpr (std::is_void_v<T>) {
      return std::monostate{};
    } else {
      return std::move(*state->value);
    }
  }

 public:
  void detach() {
    scheduler_internal::JoinState<T>* state = std::exchange(state_, nullptr);
    if (state != nullptr && state->done.drop()) state->destroy(state);
  }

 private:
  friend class Runtime;
  explicit JoinHandle(scheduler_internal::JoinState<T>* state) : state_(state) {}
  scheduler_internal::JoinState<T>* state_ = nullptr;
};

class Runtime {
 public:
  // Runtime: starts the workers (each creates its reactor on its own thread). Throws
  // std::system_error if a worker thread cannot start.
  explicit Runtime(RuntimeOptions options = {});
  // ~Runtime: graceful shutdown. Every wait of every fiber, parked now or later (sync
  // primitives, join, sleep, fiber I/O), fails with operation_canceled, so fibers unwind and
  // return; then the workers stop. A fiber that ignores the error and keeps working, or sits in
  // call_blocking, delays the destructor until it returns; so does one waiting in Mutex::lock()
  // or re-taking a CondVar's mutex, until the holder lets go. Call it from outside the runtime
  // (not from its fibers or call_blocking functions). Threads outside still returning from its
  // block_on, or from waking one of its fibers (unlocking a Mutex one waits on), are waited for.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // spawn: runs f() on a new fiber. Any thread, fiber or not. `site` is where the call is, for
  // diagnostics (stuck-fiber reports, dump_fibers, the console): leave it to its default.
  template <typename F>
  auto spawn(F f, const FiberOptions& options = {},
             std::source_location site = std::source_location::current())
      -> JoinHandle<std::invoke_result_t<F&>> {
    using T = std::invoke_result_t<F&>;
    using State = scheduler_internal::SpawnState<T, F>;
    State* state = State::New(std::move(f));
    try {
      scheduler_internal::Spawn(*this, state, options, site);
    } catch (...) {
      State::Destroy(state);
      throw;
    }
    return JoinHandle<T>(state);
  }

  // spawn_task: runs a stackless task (scheduler/task.h, which defines these two; include it):
  // the coroutine f() returns, with f kept alive until it ends (so a lambda coroutine may use
  // its captures), or `task` itself. Any thread, fiber or task. options: name and
  // pinned_worker apply (a task has no stack). Throws what the allocation throws, and
  // std::logic_error for an empty Task (moved from).
  template <typename F>
  requires scheduler_internal::IsTaskType<std::invoke_result_t<F&>>::value auto spawn_task(
      F f, const FiberOptions& options = {},
      std::source_location site = std::source_location::current())
      -> JoinHandle<typename std::invoke_result_t<F&>::value_type>;
  template <typename T>
  JoinHandle<T> spawn_task(Task<T> task, const FiberOptions& options = {},
                           std::source_location site = std::source_location::current());

  // block_on: runs f() on a fiber and returns its result; call it from outside the runtime (a
  // plain thread such as main).
  template <typename F>
  auto block_on(F f, std::source_location site = std::source_location::current())
      -> std::invoke_result_t<F&> {
    // First, so that it ends last: the monitor's deadlock hint counts this thread, and ~Runtime
    // waits until it has left (the handle included).
    scheduler_internal::BlockOnScope waiting(*this);
    auto handle = spawn(std::move(f), {}, site);
    auto r = handle.join();
    if constexpr (!std::is_void_v<std::invoke_result_t<F&>>) return std::move(*r);
  }

  unsigned workers() const;

  // fork_join: runs f(worker, args...) as the root of a Lace-style fork-join computation
  // (deque/fork_join.h: worker.spawn / worker.sync) on this runtime's workers: each worker has a
  // split deque, idle workers steal tasks, and an unstolen spawn+sync costs about a function
  // call. From a fiber of this runtime it runs inline on the fiber (which does not park until
  // it returns; on a spare worker, it runs on a fiber pinned to a worker, which this one
  // waits for); from anywhere else it runs on a new fiber and blocks until done. Tasks are for
  // computation: they must not park, yield or do fiber I/O (they may run on a worker's own
  // stack, outside any fiber), and must not throw.
  template <typename F, typename... Args>
  auto fork_join(F f, Args... args) -> std::invoke_result_t<F&, ForkJoinWorker&, Args&...> {
    if (scheduler_internal::InFiberOf(*this)) {
      if (const int k = scheduler_internal::ForkJoinWorkerForSpare(*this); k >= 0) {
        // A fiber on a spare worker, which has no deque in the pool: the root runs on a fiber
        // pinned to worker k (inline there), and this fiber waits for it.
        auto r =
            spawn([&] { return fork_join(std::move(f), std::move(args)...); }, {.pinned_worker = k})
                .join();
        if constexpr (!std::is_void_v<std::invoke_result_t<F&, ForkJoinWorker&, Args&...>>) {
          return std::move(*r);
        } else {
          return;
        }
      }
      scheduler_internal::ForkJoinScope scope(*this);  // the monitor: computing, as asked
      return scheduler_internal::ForkJoinPoolOf(*this).run(std::move(f), std::move(args)...);
    }
    // On a new fiber, through the fiber's path above: the monitor is told, and a fiber that a
    // spare worker (which has no deque in the pool) runs hands the root to a worker.
    return block_on([&] { return fork_join(std::move(f), std::move(args)...); });
  }

  // current: the runtime whose fiber (or blocking region) calls; null elsewhere.
  static Runtime* current();

  // stats_json: a snapshot of each worker (index, reactor backend, and the counters spawned,
  // run, stolen, parked, polled, sleeps, idle_ns, no_stack, rescued, plus timers: deadlines in
  // its heap now; see docs/scheduler.md) and of the runtime (spawned_outside, live_fibers,
  // blocking_threads, blocking_busy), as one JSON object. Any thread.
  std::string stats_json() const;
  // dump_fibers: one line per live fiber: id, name, state, what it is parked on ("Mutex 0x...",
  // "Channel recv 0x...", "io recv fd 7", "sleep"...), and "pinned N" for a fiber pinned to
  // worker N. Any thread.
  std::string dump_fibers() const;
  // console_path: the console's socket (RuntimeOptions::console); empty if it is off.
  std::string console_path() const;
  // simulation: the simulated run's report; nullopt if the runtime is not simulated. Any thread
  // (a snapshot; exact once the fibers whose decisions it counts have been joined).
  std::optional<SimulationReport> simulation() const;

  struct Impl;

 private:
  friend ForkJoinPool& scheduler_internal::ForkJoinPoolOf(Runtime& rt);
  friend class scheduler_internal::ForkJoinScope;
  friend class scheduler_internal::BlockOnScope;
  friend bool scheduler_internal::InFiberOf(const Runtime& rt);
  friend bool scheduler_internal::InsideOf(const Runtime& rt);
  friend int scheduler_internal::ForkJoinWorkerForSpare(const Runtime& rt);
  friend void scheduler_internal::Spawn(Runtime&, scheduler_internal::FiberBody*,
                                        const FiberOptions&, std::source_location, void*);
  std::unique_ptr<Impl> impl_;
};

// call_blocking: runs f() on the runtime's blocking threads while the calling fiber parks, and
// returns its result (or rethrows its exception): for calls that block the thread (getaddrinfo,
// file I/O without the reactor, legacy libraries). The wait is not cancellable: f runs to its
// end. Outside a fiber, f simply runs on the calling thread.
template <typename F>
auto call_blocking(F f) -> std::invoke_result_t<F&> {
  scheduler_internal::CallOutcome<F> call{&f, {}, {}};
  if (!scheduler_internal::RunBlocking(&scheduler_internal::CallOutcome<F>::Invoke, &call)) {
    return f();
  }
  return call.Take();
}

// BlockingRegion: while it lives, the calling fiber runs on one of the runtime's blocking
// threads instead of its worker, so it may block that thread (a long computation, a blocking
// syscall) while the worker keeps running the other fibers. Inside, sync primitives and fiber
// I/O block the thread (dual mode); this_fiber::id() and name() still answer. On destruction the
// fiber returns to the workers. Outside a fiber it does nothing. Not movable.
class BlockingRegion {
 public:
  BlockingRegion();
  ~BlockingRegion();
  BlockingRegion(const BlockingRegion&) = delete;
  BlockingRegion& operator=(const BlockingRegion&) = delete;

 private:
  bool entered_;
};

// FiberLocal<T>: one T per fiber (per thread outside fibers), default-constructed on first
// get() in that fiber and destroyed when the fiber finishes (or the thread exits). A FiberLocal
// object should outlive the fibers that use it (typically a static or global).
template <typename T>
class FiberLocal {
 public:
  FiberLocal() : key_(scheduler_internal::NewLocalKey()) {}
  FiberLocal(const FiberLocal&) = delete;
  FiberLocal& operator=(const FiberLocal&) = delete;

  T& get() {
    scheduler_internal::LocalSlots& locals = scheduler_internal::CurrentLocals();
    if (void* v = locals.at(key_).value) return *static_cast<T*>(v);
    T* made = new T();  // may use other FiberLocals, and so move the table: look the slot up again
    scheduler_internal::LocalSlots::Slot& slot = locals.at(key_);
    slot.value = made;
    slot.destroy = [](void* p) { delete static_cast<T*>(p); };
    return *made;
  }
  T* operator->() { return &get(); }
  T& operator*() { return get(); }

 private:
  std::size_t key_;
};

// this_fiber: calls about the running fiber. Outside a fiber they act on the thread.
namespace this_fiber {
void yield();
// sleep_until / sleep_for: operation_canceled if the token is cancelled or the runtime shuts
// down first.
Result<void> sleep_until(std::chrono::steady_clock::time_point when,
                         const CancellationToken* cancel = nullptr);
Result<void> sleep_for(std::chrono::steady_clock::duration d,
                       const CancellationToken* cancel = nullptr);
// id: a process-unique id of the running fiber; 0 outside fibers.
std::uint64_t id();
std::string_view name();
bool in_fiber();
// worker_index: the index of the worker running the calling fiber; -1 outside fibers (and in a
// BlockingRegion). On a spare worker (RuntimeOptions::spare_workers), workers() or above: an
// array with one slot per worker needs workers() + spare slots.
int worker_index();
}  // namespace this_fiber

}  // namespace weft

#endif  // WEFT_SCHEDULER_RUNTIME_H_
