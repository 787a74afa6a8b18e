// scheduler/task_group.h: structured concurrency. A TaskGroup owns the fibers and stackless tasks
// spawned into it (spawn, spawn_task): it waits for them all (join_all), hands them out as they
// finish (join_next), cancels them together through one token (cancel), and never lets one
// outlive it: its destructor cancels and joins whatever is left. Go's errgroup, Tokio's JoinSet,
// Trio's nursery. A task joins with co_await (async_join_all, async_join_next).
//
// Defines: weft::TaskGroup<T>, weft::GroupPolicy, weft::TaskGroupOptions, weft::Completed<T>,
// weft::this_fiber::group_token.
//
// A child fails when it throws (or cannot start: no stack), or, in a group of Result<U>, when
// it returns an error. The policy says what a failure does:
//   kFailFast    the first failure cancels the group's token at once (the siblings' waits that
//                take it end with operation_canceled) and new spawns are refused; join_all
//                reports that failure. errgroup.WithContext. (A child that could not start
//                has the cancel made shortly after, on weft's deadline thread.)
//   kCollectAll  a failure cancels nothing; every child runs to its end; join_next hands each
//                outcome out, and join_all reports the first failure once all have finished.
//
// Cancellation is cooperative, as everywhere in weft: a child sees it through the group's token
// (passed to it when the callable takes a `const CancellationToken&`, and returned by
// token() and this_fiber::group_token()), which it gives to its waits in WaitOptions.
//
// Groups nest: a group made in a child of another group is linked to that group's token
// (unless TaskGroupOptions::parent says otherwise), so cancelling a group, or its deadline,
// reaches every group below it. A child group's failure reaches the parent as the child's own:
// join_all rethrows or returns it, and the child, by returning it, fails in the parent's group.
//
// Threads: spawn, cancel, token and size may be called from any thread or fiber at once,
// children included (a child may spawn siblings). join_next from several fibers at once hands
// each finished child to exactly one of them. Concurrent join_all calls all return once no child
// runs, the values going to whichever took them first, and join_next, made meanwhile, gets the
// finished children that none of them took. A child must not join or destroy its own
// group (join_next / join_all return resource_deadlock_would_occur; the destructor aborts with a
// message; a grandchild joining it is not detected, and waits forever). Destroying a group while
// another fiber, not one of its children, is in one of its calls is a bug, as for every
// primitive in //sync. Runtime shutdown ends the group's waits like any other (operation_canceled),
// except the destructor's, which keeps waiting while the children unwind, and a task's joins,
// which take the children as they unwind (a task cannot wait in the destructor).

#ifndef WEFT_SCHEDULER_TASK_GROUP_H_
#define WEFT_SCHEDULER_TASK_GROUP_H_

#include <algorithm>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <source_location>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/base/result.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/task.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/internal/spin_lock.h"
#include "weft/sync/internal/wait_queue.h"

namespace weft {

enum class GroupPolicy { kFailFast, kCollectAll };

struct TaskGroupOptions {
  GroupPolicy policy = GroupPolicy::kFailFast;
  // parent: the token the group's own is linked to (cancelled with it, ending at its deadline).
  // Unset: the token of the group whose child makes this one, if any (none outside groups). A
  // default CancellationToken: none, even inside a group.
  std::optional<CancellationToken> parent = std::nullopt;
  // discard_outcomes: a child's outcome is dropped as it finishes (its value freed at once), all
  // but the first failure, which join_all still reports; join_next only waits for the children
  // to finish, then reports no_child_process. For groups that live long and spawn without end:
  // a server's connections.
  bool discard_outcomes = false;
};

namespace scheduler_internal {

template <typename T>
struct IsResult : std::false_type {};
template <typename U>
struct IsResult<Result<U>> : std::true_type {};

// GroupChild: a child's record: its outcome, kept until a join takes it (a void child that
// succeeded in a group in queue mode frees it as it finishes, warm).
struct GroupChild {
  // done: set as the child finishes. A group starts in spawn-order mode: join_all waits on each
  // record's `done` in turn, as a JoinHandle is joined, and the child's finish is that one
  // exchange. In queue mode (join_next was called, or discard_outcomes) the record is dropped
  // when listed, and set() then tells the child to queue itself for the joins (GroupCore).
  JoinSignal done;
  std::uint64_t id = 0;
  std::exception_ptr exception;  // it threw, or could not start
  std::errc error{};             // it returned a Result holding this
  bool has_value = false;        // keep it after a success: the value is what join takes
  bool withdrawn = false;        // listed, then its spawn failed: no child, no outcome
  void (*destroy)(GroupChild*) noexcept = nullptr;
  bool failed() const { return exception != nullptr || error != std::errc{}; }
  // carries: a join has something to take from it (a value, a failure).
  bool carries() const { return has_value || failed(); }
};

// Finished: a child as the group lists it: its record, or null once freed (a void child that
// succeeded), and its id (0: withdrawn).
struct Finished {
  GroupChild* child;
  std::uint64_t id;
};

// FinishedRing: the finished children of a group in queue mode, in completion order. Its room
// is reserved as children are admitted (a spawn reports not_enough_memory), so that a finish
// never allocates.
struct FinishedRing {
  std::unique_ptr<Finished[]> slots;
  std::size_t capacity = 0;
  std::size_t head = 0;
  std::size_t count = 0;
  Finished& at(std::size_t i) { return slots[(head + i) % capacity]; }
};

// Taken: what join_all takes: the children listed in spawn order (spawn-order mode) and the
// finished ring (queue mode). Free destroys the records still held.
struct Taken {
  std::vector<Finished> in_order;
  FinishedRing ring;
  // count: the children taken (withdrawn ones are not).
  std::size_t count() const;
  void Free() noexcept;
};

// GroupCore: the group's state, shared with its children (who outlive neither it nor their
// report to it). Out of line in task_group.cc.
class GroupCore {
 public:
  GroupCore(Runtime* rt, const TaskGroupOptions& options);
  ~GroupCore();
  GroupCore(const GroupCore&) = delete;
  GroupCore& operator=(const GroupCore&) = delete;

  Runtime* runtime() const { return rt_; }
  const CancellationToken& token() const { return token_; }
  // Admit: lists a child about to be spawned and gives its id; operation_canceled once the
  // group is cancelled, not_enough_memory. Withdraw: an admitted child that could not be
  // spawned after all; true if the caller frees its record (false: a join_all walking the list
  // frees it).
  Result<std::uint64_t> Admit(GroupChild* child);
  bool Withdraw(GroupChild* child) noexcept;
  // A child's last steps, on its fiber (on_fiber) or, for one that could not start, on a
  // worker's own context (see GroupChildState::Finish). Report: records a failure (the first,
  // with fail-fast's cancel). Then the child sets its `done`; in queue mode it goes on: Keeps
  // says whether a join will want the record (a value, a failure, or a record from another
  // worker's slab, which `local` says it is not), and Publish makes the child stop counting and
  // queues its record (kept) or its id, a record not kept being freed first. After Publish,
  // or a `done.set()` that returned false, the record is the group's, and may be gone at once.
  void Report(GroupChild* child, bool on_fiber) noexcept;
  bool Keeps(const GroupChild* child, bool local) const {
    return !discard_ && (child->carries() || !local);
  }
  void Publish(GroupChild* child, bool keep) noexcept;
  // TakeNext: a finished child not yet taken, waiting for one; no_child_process when none is
  // finished and none runs. Puts the group in queue mode.
  Result<Finished> TakeNext(const WaitOptions& options);
  // TakeAll: waits until no child runs, then takes every one not taken.
  Result<Taken> TakeAll(const WaitOptions& options);

  // NextLook: TakeNext's progress across its steps (NextStep, below): the switch request it
  // made (see switch_round_).
  struct NextLook {
    std::uint64_t round = 0;
    bool asked = false;
  };
  // JoinAwaiter: TakeNext (all = false) or TakeAll for a task (scheduler/task.h), which must not
  // block its worker: the same steps (NextStep, AllStep), the task suspended between them. Its
  // TakeAll does not walk: it puts the group in queue mode, as TakeNext, and waits there until
  // no child runs. From a coroutine that is not a task, it blocks the fiber or thread that runs
  // it.
  class JoinAwaiter {
   public:
    JoinAwaiter(GroupCore* core, const WaitOptions& options, bool all)
        : core_(core), all_(all), park_(&Done, this, options) {}
    JoinAwaiter(const JoinAwaiter&) = delete;
    JoinAwaiter& operator=(const JoinAwaiter&) = delete;
    bool await_ready();
    bool await_suspend(std::coroutine_handle<> h);
    // The outcome: next() for TakeNext's, all() for TakeAll's.
    void await_resume();
    Result<Finished>& next() { return next_; }
    Result<Taken>& all() { return all_taken_; }
    GroupCore* core() const { return core_; }

   private:
    // Done: the park's condition, on the task's side: its node was granted, and a look finds
    // the join over (else the node is queued again).
    static bool Done(void* self);
    // Look: one step (NextStep or AllStep), under the core's lock.
    bool Look(std::errc gave_up);
    sync_internal::WaitQueue& Queue();
    GroupCore* const core_;
    const bool all_;
    bool over_ = false;  // a look found the join over
    // Its queue node (a task's Waiter has none of its own); its waiter is set once queued.
    sync_internal::WaitNode node_;
    NextLook look_;
    Result<Finished> next_ = std::errc::invalid_argument;
    Result<Taken> all_taken_ = std::errc::invalid_argument;
    sync_internal::AsyncPark park_;
  };
  // FirstFailure: ok, or the first failure's error; rethrows it if it was an exception.
  Result<void> FirstFailure() const;
  void Cancel();
  std::size_t size() const;
  // CancelAndJoin: the destructor's: cancels, waits for every child (through interruptions),
  // frees the finished ones.
  void CancelAndJoin() noexcept;

 private:
  bool IsOwnChild() const;
  // The joins' steps, shared by the blocking joins (which park between them) and JoinAwaiter.
  // Each looks under lock_ and returns true with *out set once the join is over, or false: the
  // caller waits for a grant on next_waiters_ (NextStep) or all_waiters_ (AllStep), then looks
  // again. gave_up: the caller's wait ended with this error (not {}): the step then ends the
  // join, with what it can take or with that error.
  bool NextStep(NextLook& look, std::errc gave_up, Result<Finished>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  bool AllStep(std::errc gave_up, Result<Taken>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  // ParkOn: queues the calling execution's node on `queue`, unlocks, parks, locks again; {} if
  // it was granted, else why the wait ended (its node withdrawn).
  std::errc ParkOn(sync_internal::WaitQueue& queue, const WaitOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  // Wait: until ready() (under lock_) holds, parked on `queue` (ParkOn); under lock_ on return.
  // A wait that gives up looks at ready() once more (a grant found as it gave up stands).
  template <typename Ready>
  Result<void> Wait(sync_internal::WaitQueue& queue, Ready ready, const WaitOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  // ToQueueMode: hands the listed children to the ring (the finished ones, in spawn order) or
  // to running_; false if it had to let go of lock_ to grow the ring (look again). Made when no
  // walk is on, or by the walker itself.
  Result<bool> ToQueueMode() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  // MakePendingCancel: makes the fail-fast cancel that Report could not (cancel_pending_), if
  // there is one (kNone: none), letting go of lock_ meanwhile: kMade. Joins and spawns call it.
  // A task, which must not park, cannot run the callbacks: it hands the cancel to the deadline
  // thread, or, when that refuses (no memory), leaves it pending: kRefused, which ends a task's
  // join with resource_unavailable_try_again.
  enum class Pending { kNone, kMade, kRefused };
  Pending MakePendingCancel() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  // InterruptWalk: ends the walker's wait on a child (see walker_), so that it looks at
  // cancel_pending_ and switch_wanted_. OnInterrupt: the walker's side.
  void InterruptWalk() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  void OnInterrupt() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  // Reserve: room in the ring for `n` more, growing it outside lock_; false if it let go of
  // lock_ (look again).
  Result<bool> Reserve(std::size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  void WakeAllAndUnlock() ABSL_UNLOCK_FUNCTION(lock_);
  void WakeIfIdleAndUnlock() ABSL_UNLOCK_FUNCTION(lock_);

  Runtime* const rt_;
  const GroupPolicy policy_;
  const bool discard_;
  CancellationSource source_;
  const CancellationToken token_;
  mutable sync_internal::SpinLock lock_;  // mutable: size() takes it
  // Spawn-order mode: the children admitted and not taken, in spawn order. A finish does not
  // touch the group; join_all walks this list, waiting on each child's `done`.
  std::vector<Finished> in_order_ ABSL_GUARDED_BY(lock_);
  std::size_t withdrawn_ ABSL_GUARDED_BY(lock_) = 0;  // of in_order_
  bool walking_ ABSL_GUARDED_BY(lock_) = false;       // a join_all walks in_order_
  // The walker's Waiter, while it walks: InterruptWalk sets interrupt_walk_ and notifies it
  // under lock_ (the walker clears walker_ under lock_ before it returns). Its waits on the
  // children take interrupt_walk_, which it clears under lock_ before it looks at why.
  Waiter* walker_ ABSL_GUARDED_BY(lock_) = nullptr;
  atomic<bool> interrupt_walk_{false};
  // A join_next wants the group in queue mode while a walk is on: the walker switches it (the
  // children it waits on are its own), or leaves switch_error_ for the join_next.
  bool switch_wanted_ ABSL_GUARDED_BY(lock_) = false;
  std::errc switch_error_ ABSL_GUARDED_BY(lock_){};
  // switch_round_: counts the requests answered without a switch (the walker failed it, or the
  // walk ended): a join_next waiting on a request looks again when it changes.
  std::uint64_t switch_round_ ABSL_GUARDED_BY(lock_) = 0;
  // Queue mode, for good once a join_next has run (or with discard_outcomes): each finish
  // counts down running_ and queues the child in finished_, under lock_.
  bool queue_mode_ ABSL_GUARDED_BY(lock_);
  std::size_t running_ ABSL_GUARDED_BY(lock_) = 0;  // admitted in queue mode, not finished
  FinishedRing finished_ ABSL_GUARDED_BY(lock_);    // capacity >= running_ + finished_.count
  std::uint64_t next_id_ ABSL_GUARDED_BY(lock_) = 1;
  // The first failure (completion order), one of the two set; written once, under lock_. (A
  // failure always has one: GroupChild::failed.)
  std::exception_ptr first_exception_ ABSL_GUARDED_BY(lock_);
  std::errc first_error_ ABSL_GUARDED_BY(lock_){};
  // Fail-fast has tripped: spawns are refused from then on, even before the token is cancelled
  // (a child that could not start has the deadline thread cancel it, see Report).
  bool tripped_ ABSL_GUARDED_BY(lock_) = false;
  // A fail-fast cancel that neither its child nor the deadline thread could make (see Report):
  // a join makes it (Wait, or the walker: a parked one is woken for it), or a spawn (Admit).
  bool cancel_pending_ ABSL_GUARDED_BY(lock_) = false;
  sync_internal::WaitQueue next_waiters_ ABSL_GUARDED_BY(lock_);  // join_next
  sync_internal::WaitQueue all_waiters_ ABSL_GUARDED_BY(lock_);   // join_all, the destructor
};

// GroupChildOf<T>: a child's record with its value, which Completed<T> reads without knowing
// the callable's type.
template <typename T>
struct GroupChildOf : GroupChild {
  std::optional<std::conditional_t<std::is_void_v<T>, char, T>> value;
};

// FinishChild: a child's end, once its outcome is in its record: in spawn-order mode, setting
// `done` is all (the join frees the record). In queue mode, an outcome no join will take (a void
// success; any, with discard_outcomes) is destroyed here, while the child still counts as
// running, so that no code of the child's (a value's destructor) runs after join_all or
// ~TaskGroup returned. allocation: the record's allocation (SpawnStateIsLocal's).
template <typename T>
void FinishChild(GroupCore* core, GroupChildOf<T>* child, const void* allocation, bool on_fiber) {
  core->Report(child, on_fiber);
  if (!child->done.set()) return;  // the last touch of *child, in spawn-order mode
  const bool keep = core->Keeps(child, SpawnStateIsLocal(allocation));
  if (!keep) {
    child->value.reset();
    child->exception = nullptr;
  }
  core->Publish(child, keep);  // the last touch of *child
}

// GroupChildState: a child's record, callable and fiber body in one allocation (as SpawnState).
template <typename T, typename F>
struct GroupChildState final : GroupChildOf<T>, FiberBody {
  // Made and freed through SpawnStorage, in the slab (SpawnStateIsLocal reads its header).
  GroupChildState(GroupCore* c, F&& f) : core(c), fn(std::move(f)) {
    static_assert(alignof(GroupChildState) <= 16, "a child's record lives in the slab");
    this->destroy = &Destroy;
    this->has_value = !std::is_void_v<T> && !std::is_same_v<T, Result<void>>;
  }
  static void Destroy(GroupChild* base) noexcept {
    SpawnStorage<GroupChildState>::Delete(static_cast<GroupChildState*>(base));
  }
  decltype(auto) Invoke() {
    if constexpr (std::is_invocable_v<F&, const CancellationToken&>) {
      return (*fn)(core->token());
    } else {
      return (*fn)();
    }
  }
  const CancellationToken* group_token() const noexcept override { return &core->token(); }
  void run() override {
    try {
      if constexpr (std::is_void_v<T>) {
        Invoke();
      } else {
        this->value.emplace(Invoke());
        if constexpr (IsResult<T>::value) {
          if (!this->value->ok()) this->error = this->value->error();
        }
      }
    } catch (...) {
      this->exception = std::current_exception();
    }
    fn.reset();
    Finish(/*on_fiber=*/true);
  }
  void fail(std::exception_ptr why) override {
    fn.reset();
    this->exception = std::move(why);
    Finish(/*on_fiber=*/false);
  }
  // (`this`, the allocation's start: FiberBody, polymorphic, is laid out first, so the
  // GroupChild base is not.)
  void Finish(bool on_fiber) { FinishChild<T>(core, this, this, on_fiber); }

  GroupCore* const core;
  std::optional<F> fn;
};

// GroupTask<F>: the Task type of a task child's callable, called with the group's token if it
// takes one.
template <typename F>
struct GroupTask {
  static constexpr bool kTakesToken = std::is_invocable_v<F&, const CancellationToken&>;
  using type = std::conditional_t<kTakesToken, std::invoke_result<F&, const CancellationToken&>,
                                  std::invoke_result<F&>>::type;
};

// GroupTaskState: a task child's record, callable and task body in one allocation (as
// TaskState): its coroutine runs as a task of the group's runtime, and its end (finish, on the
// worker once the coroutine is over) takes the outcome into the record.
template <typename T, typename F>
struct GroupTaskState final : GroupChildOf<T>, TaskBody {
  using TaskType = typename GroupTask<F>::type;
  // Made and freed through SpawnStorage, in the slab (SpawnStateIsLocal reads its header).
  GroupTaskState(GroupCore* c, F&& f) : core(c), fn(std::move(f)) {
    static_assert(alignof(GroupTaskState) <= 16, "a child's record lives in the slab");
    this->destroy = &Destroy;
    this->has_value = !std::is_void_v<T> && !std::is_same_v<T, Result<void>>;
  }
  ~GroupTaskState() {
    if (root) root.destroy();  // made, and never run (its spawn failed)
  }
  static void Destroy(GroupChild* base) noexcept {
    SpawnStorage<GroupTaskState>::Delete(static_cast<GroupTaskState*>(base));
  }
  // MakeRoot: the child's coroutine, not started.
  void MakeRoot() {
    if constexpr (GroupTask<F>::kTakesToken) {
      TaskType task = (*fn)(core->token());
      root = TaskAccess::Release(task);
    } else {
      TaskType task = (*fn)();
      root = TaskAccess::Release(task);
    }
  }
  const CancellationToken* group_token() const noexcept override { return &core->token(); }
  void finish() noexcept override {
    auto& promise = root.promise();
    if (promise.error) {
      this->exception = promise.error;
    } else if constexpr (!std::is_void_v<T>) {
      try {
        this->value.emplace(std::move(*promise.value));
        if constexpr (IsResult<T>::value) {
          if (!this->value->ok()) this->error = this->value->error();
        }
      } catch (...) {
        this->exception = std::current_exception();
      }
    }
    root.destroy();
    root = nullptr;
    fn.reset();
    // On the worker's own context, which cannot run the token's callbacks (they may park): a
    // fail-fast cancel is made on the deadline thread (GroupCore::Report).
    FinishChild<T>(core, this, this, /*on_fiber=*/false);
  }

  GroupCore* const core;
  std::optional<F> fn;
  typename TaskType::handle_type root;
};

template <typename T>
struct JoinAllOf {
  using values = std::vector<T>;
  using type = Result<values>;
};
template <>
struct JoinAllOf<void> {
  using type = Result<void>;
};
template <>
struct JoinAllOf<Result<void>> {
  using type = Result<void>;
};
template <typename U>
struct JoinAllOf<Result<U>> {
  using values = std::vector<U>;
  using type = Result<values>;
};

}  // namespace scheduler_internal

// Completed<T>: one finished child, as join_next hands it out. Move-only; owns the outcome.
template <typename T>
class [[nodiscard]] Completed {
 public:
  Completed(Completed&& other) noexcept
      : child_(std::exchange(other.child_, nullptr)), id_(other.id_) {}
  Completed& operator=(Completed&& other) noexcept {
    if (this != &other) {
      reset();
      child_ = std::exchange(other.child_, nullptr);
      id_ = other.id_;
    }
    return *this;
  }
  Completed(const Completed&) = delete;
  Completed& operator=(const Completed&) = delete;
  ~Completed() { reset(); }

  // id: what spawn returned for this child.
  std::uint64_t id() const { return id_; }
  // failed: it threw, could not start, or (a group of Result<U>) returned an error.
  bool failed() const { return child_ != nullptr && child_->failed(); }
  std::exception_ptr exception() const { return child_ != nullptr ? child_->exception : nullptr; }
  // get: its value (nothing for void), moved out; rethrows its exception. Once.
  T get() {
    if (child_ != nullptr && child_->exception) std::rethrow_exception(child_->exception);
    if constexpr (std::is_same_v<T, Result<void>>) {
      return child_ != nullptr ? T(child_->error) : T();
    } else if constexpr (!std::is_void_v<T>) {
      return std::move(*State()->value);
    }
  }

 private:
  template <typename>
  friend class TaskGroup;
  explicit Completed(scheduler_internal::Finished f) : child_(f.child), id_(f.id) {}
  scheduler_internal::GroupChildOf<T>* State() const {
    return static_cast<scheduler_internal::GroupChildOf<T>*>(child_);
  }
  void reset() {
    using scheduler_internal::GroupChild;
    if (GroupChild* done = std::exchange(child_, nullptr)) done->destroy(done);
  }
  scheduler_internal::GroupChild* child_;  // null: a void child that succeeded (freed)
  std::uint64_t id_;
};

template <typename T = void>
class TaskGroup {
 public:
  // TaskGroup: children run on `rt`; without it, on the runtime of the calling fiber (spawn
  // reports invalid_argument outside one). Throws std::bad_alloc.
  explicit TaskGroup(TaskGroupOptions options = {})
      : core_(std::make_unique<scheduler_internal::GroupCore>(Runtime::current(), options)) {}
  explicit TaskGroup(Runtime& rt, TaskGroupOptions options = {})
      : core_(std::make_unique<scheduler_internal::GroupCore>(&rt, options)) {}
  // ~TaskGroup: cancels the group, then waits for every child to finish (never detaches); the
  // outcomes nobody took are dropped (a failure too: call join_all to see it).
  ~TaskGroup() {
    if (core_ != nullptr) core_->CancelAndJoin();
  }
  // Movable (not while in use); a moved-from group's joins report invalid_argument.
  TaskGroup(TaskGroup&&) noexcept = default;
  TaskGroup(const TaskGroup&) = delete;
  TaskGroup& operator=(const TaskGroup&) = delete;
  TaskGroup& operator=(TaskGroup&&) = delete;

  // spawn: runs f() (or f(token), if it takes a const CancellationToken&) on a new fiber of the
  // group; returns the child's id (1, 2, ... in spawn order). Its result must convert to T (be
  // void, for TaskGroup<void>). Errors: operation_canceled (the group is cancelled: nothing
  // runs), invalid_argument (no runtime; a stack size no class has), not_enough_memory. site:
  // as Runtime::spawn's (leave it to its default).
  template <typename F>
  Result<std::uint64_t> spawn(F f, const FiberOptions& options = {},
                              std::source_location site = std::source_location::current()) {
    using R = decltype(std::declval<scheduler_internal::GroupChildState<T, F>&>().Invoke());
    static_assert(std::is_void_v<T> ? std::is_void_v<R> : std::is_convertible_v<R, T>,
                  "a TaskGroup<T> child returns T (void for TaskGroup<void>)");
    using State = scheduler_internal::GroupChildState<T, F>;
    return Start<State>(std::move(f), options, site,
                        [](State*) -> Result<void*> { return nullptr; });
  }

  // spawn_task: as spawn, with a stackless task (scheduler/task.h) for the child: f() (or
  // f(token)) returns a weft::Task<U>, spawned as Runtime::spawn_task spawns one; U converts to
  // T (is void, for TaskGroup<void>). The same ids, errors and outcomes as spawn's, and
  // this_fiber::group_token() answers in the task too. One difference: a task child that fails
  // in a kFailFast group has the cancel made shortly after, on weft's deadline thread, as a
  // child that could not start has (a task ends on its worker's own context, where the token's
  // callbacks, which may park, cannot run); new spawns are refused at once all the same.
  template <typename F>
  Result<std::uint64_t> spawn_task(F f, const FiberOptions& options = {},
                                   std::source_location site = std::source_location::current()) {
    using State = scheduler_internal::GroupTaskState<T, F>;
    using TaskType = typename State::TaskType;
    static_assert(scheduler_internal::IsTaskType<TaskType>::value,
                  "TaskGroup::spawn_task: f() returns a weft::Task<U>");
    using R = typename TaskType::value_type;
    static_assert(std::is_void_v<T> ? std::is_void_v<R> : std::is_convertible_v<R, T>,
                  "a TaskGroup<T> child's Task gives T (void for TaskGroup<void>)");
    // f is called once the child is admitted (a refused spawn runs nothing of it): its
    // coroutine, whose frame may find no memory; an empty Task (moved from) is invalid_argument.
    return Start<State>(std::move(f), options, site, [](State* s) -> Result<void*> {
      s->MakeRoot();
      if (!s->root) return std::errc::invalid_argument;
      return s->root.address();
    });
  }

  // join_next: the next child to finish that nobody has taken yet (completion order; those
  // that finished before the group's first join_next come first, in spawn order), waiting for
  // one if none has. Errors: not_enough_memory (the first join_next of a group, for the queue),
  // no_child_process (none finished and none running), timed_out / operation_canceled per options,
  // resource_deadlock_would_occur (from a child).
  Result<Completed<T>> join_next(const WaitOptions& options = {}) {
    if (core_ == nullptr) return std::errc::invalid_argument;  // moved from
    Result<scheduler_internal::Finished> c = core_->TakeNext(options);
    if (!c) return c.error();
    return Completed<T>(*c);
  }

  // join_all: waits until no child runs, then takes every outcome join_next has not. Returns the
  // group's first failure (completion order, including one join_next handed out): rethrows it
  // if it threw, else returns its error. Otherwise, for a TaskGroup<void> or <Result<void>>,
  // success; for <Result<U>>, the U values, and for other T the values, of the children it took,
  // in spawn order. Errors: timed_out / operation_canceled per options (nothing is taken),
  // resource_deadlock_would_occur (from a child).
  typename scheduler_internal::JoinAllOf<T>::type join_all(const WaitOptions& options = {}) {
    if (core_ == nullptr) return std::errc::invalid_argument;  // moved from
    return Collect(core_.get(), core_->TakeAll(options));
  }

  // async_join_next / async_join_all: join_next and join_all for a task (scheduler/task.h),
  // which waits without blocking its worker: `Result<Completed<T>> c = co_await
  // group.async_join_next();`. The same results, except that:
  //   - the runtime's shutdown does not end them: it ends the children's waits, and the joins
  //     take the children as they finish (as the destructor keeps waiting in a fiber);
  //   - async_join_all may report not_enough_memory (it takes the finished children as
  //     join_next does, through a queue whose room it makes);
  //   - both report resource_unavailable_try_again when a fail-fast cancel is pending that
  //     neither the failing child nor the deadline thread could make (no memory for it): a task
  //     cannot run the token's callbacks, which may park. Join again later: the deadline thread
  //     is asked again (a fiber's join or spawn makes the cancel itself).
  // A task must join a group it owns before the group is destroyed (co_await async_join_all(),
  // after cancel() to stop the children early): the destructor, which blocks until every child
  // is done, aborts the process if it must wait in a task. From a coroutine that is not a task,
  // they block the fiber or thread that runs it, and the shutdown ends them.
  class [[nodiscard]] JoinNextAwaiter {
   public:
    bool await_ready() { return join_.await_ready(); }
    bool await_suspend(std::coroutine_handle<> h) { return join_.await_suspend(h); }
    Result<Completed<T>> await_resume() {
      join_.await_resume();
      Result<scheduler_internal::Finished>& f = join_.next();
      if (!f) return f.error();
      return Completed<T>(*f);
    }

   private:
    friend class TaskGroup;
    JoinNextAwaiter(scheduler_internal::GroupCore* core, const WaitOptions& options)
        : join_(core, options, /*all=*/false) {}
    scheduler_internal::GroupCore::JoinAwaiter join_;
  };
  class [[nodiscard]] JoinAllAwaiter {
   public:
    bool await_ready() { return join_.await_ready(); }
    bool await_suspend(std::coroutine_handle<> h) { return join_.await_suspend(h); }
    typename scheduler_internal::JoinAllOf<T>::type await_resume() {
      join_.await_resume();
      return Collect(join_.core(), std::move(join_.all()));
    }

   private:
    friend class TaskGroup;
    JoinAllAwaiter(scheduler_internal::GroupCore* core, const WaitOptions& options)
        : join_(core, options, /*all=*/true) {}
    scheduler_internal::GroupCore::JoinAwaiter join_;
  };
  JoinNextAwaiter async_join_next(const WaitOptions& options = sync_internal::kNoWaitOptions) {
    return JoinNextAwaiter(core_.get(), options);
  }
  JoinAllAwaiter async_join_all(const WaitOptions& options = sync_internal::kNoWaitOptions) {
    return JoinAllAwaiter(core_.get(), options);
  }

  // cancel: cancels the group's token (the children's waits that take it end with
  // operation_canceled, and groups nested in them are cancelled too); later spawns are refused.
  // Idempotent.
  void cancel() {
    if (core_ != nullptr) core_->Cancel();
  }
  bool is_cancelled() const { return core_ != nullptr && core_->token().is_cancelled(); }
  // token: a moved-from group's is a default token.
  const CancellationToken& token() const {
    static const CancellationToken kNone;
    return core_ != nullptr ? core_->token() : kNone;
  }
  // size: children spawned and not yet taken (running, or finished and waiting for a join).
  std::size_t size() const { return core_ != nullptr ? core_->size() : 0; }

 private:
  // Start: makes a new child's record of f, admits it, makes it ready (prepare: a task child's
  // coroutine, nullptr for a fiber's; or why not) and spawns it; withdraws and frees it if any
  // step fails (an exception other than these reaches the caller, the record freed; so does
  // F's move constructor's).
  template <typename State, typename F, typename Prepare>
  Result<std::uint64_t> Start(F&& f, const FiberOptions& options, std::source_location site,
                              Prepare prepare) {
    if (core_ == nullptr || core_->runtime() == nullptr) return std::errc::invalid_argument;
    if (core_->token().is_cancelled()) return std::errc::operation_canceled;
    State* state;
    try {
      state = scheduler_internal::SpawnStorage<State>::New(core_.get(), std::forward<F>(f));
    } catch (const std::bad_alloc&) {
      return std::errc::not_enough_memory;
    }
    Result<std::uint64_t> id = core_->Admit(state);
    if (!id) {
      State::Destroy(state);
      return id;
    }
    std::errc error;
    try {
      Result<void*> task_frame = prepare(state);
      if (task_frame.ok()) {
        scheduler_internal::Spawn(*core_->runtime(), state, options, site, *task_frame);
        return id;
      }
      error = task_frame.error();
    } catch (const std::system_error& e) {
      error = static_cast<std::errc>(e.code().value());
    } catch (const std::bad_alloc&) {
      error = std::errc::not_enough_memory;
    } catch (...) {
      if (core_->Withdraw(state)) State::Destroy(state);
      throw;
    }
    if (core_->Withdraw(state)) State::Destroy(state);
    return error;
  }
  // Collect: join_all's outcome from what it took (or why it took nothing).
  static typename scheduler_internal::JoinAllOf<T>::type Collect(
      scheduler_internal::GroupCore* core, Result<scheduler_internal::Taken> taken);

  std::unique_ptr<scheduler_internal::GroupCore> core_;
};

template <typename T>
typename scheduler_internal::JoinAllOf<T>::type TaskGroup<T>::Collect(
    scheduler_internal::GroupCore* core, Result<scheduler_internal::Taken> taken) {
  using scheduler_internal::GroupChild;
  using scheduler_internal::Taken;
  if (!taken) return taken.error();
  // What was taken is freed however this returns (a rethrow, a std::bad_alloc included).
  struct Owned {
    Taken& taken;
    ~Owned() { taken.Free(); }
  } owned{*taken};
  if (Result<void> failure = core->FirstFailure(); !failure) return failure.error();
  if constexpr (std::is_same_v<typename scheduler_internal::JoinAllOf<T>::type, Result<void>>) {
    return {};
  } else {
    // Spawn order: the list's already; the ring's (children that finished in queue mode) by id.
    std::vector<GroupChild*> order;
    order.reserve(taken->count());
    for (const scheduler_internal::Finished& f : taken->in_order) {
      if (f.child != nullptr) order.push_back(f.child);
    }
    if (scheduler_internal::FinishedRing& ring = taken->ring; ring.count != 0) {
      for (std::size_t i = 0; i < ring.count; ++i) order.push_back(ring.at(i).child);
      std::sort(order.begin(), order.end(),
                [](const GroupChild* a, const GroupChild* b) { return a->id < b->id; });
    }
    typename scheduler_internal::JoinAllOf<T>::values values;
    values.reserve(order.size());
    for (GroupChild* c : order) {
      auto& value = *static_cast<scheduler_internal::GroupChildOf<T>*>(c)->value;
      if constexpr (scheduler_internal::IsResult<T>::value) {
        values.push_back(std::move(*value));
      } else {
        values.push_back(std::move(value));
      }
    }
    return values;
  }
}

namespace this_fiber {
// group_token: the token of the TaskGroup whose child the calling fiber is; a default token
// (never cancelled) elsewhere.
CancellationToken group_token();
}  // namespace this_fiber

}  // namespace weft

#endif  // WEFT_SCHEDULER_TASK_GROUP_H_
