// deque/fork_join.h: Lace-style fork-join on split deques, with a C++20 API and no macros, and a
// standalone pool of worker threads to run it.
//
//   std::uint64_t Fib(weft::ForkJoinWorker& w, int n) {
//     if (n < 2) return n;
//     auto a = w.spawn(Fib, n - 1);   // may run on another worker
//     std::uint64_t b = Fib(w, n - 2); // a plain call is a call
//     return w.sync(a) + b;            // the result of the spawned call
//   }
//   weft::ForkJoinPool pool({.workers = 2});
//   std::uint64_t f = pool.run(Fib, 30);  // from any thread; blocks until done
//
// A task is a function whose first parameter is ForkJoinWorker&. spawn stores it and its
// arguments in place in the worker's deque (no allocation; they must fit 48 bytes, checked at
// compile time) and returns a handle that must be synced, in LIFO order (checked in debug
// builds). sync runs the task inline if nobody stole it, else helps the thief (leapfrogging)
// until it is done. When the deque is full (the spawn depth exceeds its capacity), spawn runs the
// task at once instead, and the pool counts an overflow.
//
// Tasks must not throw: an exception escaping a task terminates the program (it would leave
// spawned tasks unsynced).
//
// Defines: weft::ForkJoinWorker, weft::Spawned, weft::ForkJoinPool, weft::ForkJoinPoolOptions,
// weft::ForkJoinStats.

#ifndef WEFT_DEQUE_FORK_JOIN_H_
#define WEFT_DEQUE_FORK_JOIN_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/base/atomic.h"
#include "weft/deque/mpmc_ring.h"
#include "weft/deque/split_deque.h"

namespace weft {

class ForkJoinWorker;
class ForkJoinPool;

namespace fork_join_internal {

[[noreturn]] void Die(const char* what) noexcept;

// Task<F, Args...>: how a spawned call lives in a TaskSlot: `Call` (callable and arguments)
// until it runs, then its result, in the same 48 bytes.
template <typename F, typename... Args>
struct Task {
  using Result = std::invoke_result_t<F&, ForkJoinWorker&, Args&...>;
  using Stored = std::conditional_t<std::is_void_v<Result>, char, Result>;
  struct Call {
    F f;
    std::tuple<Args...> args;
  };
  static_assert(sizeof(Call) <= TaskSlot::kStorageSize,
                "spawn: the callable and its arguments exceed 48 bytes; pass a pointer instead");
  static_assert(sizeof(Stored) <= TaskSlot::kStorageSize,
                "spawn: the result exceeds 48 bytes; return it through a pointer argument");
  static_assert(alignof(Call) <= 16 && alignof(Stored) <= 16, "spawn: over-aligned argument");

  static Result Invoke(Call& call, ForkJoinWorker& worker) noexcept {
    return std::apply([&](Args&... args) -> Result { return std::invoke(call.f, worker, args...); },
                      call.args);
  }

  // RunStolen: on a thief: run in place, leave the result in the slot.
  static void RunStolen(TaskSlot& slot, void* worker) noexcept {
    Call* call = std::launder(reinterpret_cast<Call*>(slot.storage));
    if constexpr (std::is_void_v<Result>) {
      Invoke(*call, *static_cast<ForkJoinWorker*>(worker));
      call->~Call();
    } else {
      Result r = Invoke(*call, *static_cast<ForkJoinWorker*>(worker));
      call->~Call();
      new (slot.storage) Stored(std::move(r));
    }
  }
};

// FnConstant<Fn>: a function known at compile time, as an empty callable: the inline run of a
// task spawned with spawn<Fn>(...) is then a direct call the compiler can see.
template <auto Fn>
struct FnConstant {
  template <typename... A>
  decltype(auto) operator()(A&&... a) const {
    return Fn(std::forward<A>(a)...);
  }
};

}  // namespace fork_join_internal

// Spawned: the must-sync handle of a spawned task (pass it to ForkJoinWorker::sync).
template <typename TaskT>
class [[nodiscard]] Spawned {
 public:
  Spawned(Spawned&& other) noexcept
      : index_(other.index_), inline_result_(std::move(other.inline_result_)) {
    other.index_ = kSynced;
  }
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;
  ~Spawned() {
#ifndef NDEBUG
    if (index_ != kSynced) fork_join_internal::Die("a spawned task was never synced");
#endif
  }

 private:
  friend class ForkJoinWorker;
  static constexpr std::size_t kInline = ~std::size_t{0};
  static constexpr std::size_t kSynced = ~std::size_t{0} - 1;
  explicit Spawned(std::size_t index) : index_(index) {}

  std::size_t index_;  // slot index; kInline: ran at spawn (deque full); kSynced: consumed
  std::optional<typename TaskT::Stored> inline_result_;
};

// ForkJoinWorker: a worker's side of fork-join; tasks receive it as their first argument. Only
// the thread running the task may use it.
class ForkJoinWorker {
 public:
  ForkJoinWorker(ForkJoinPool& pool, unsigned index, std::size_t deque_capacity);
  ForkJoinWorker(const ForkJoinWorker&) = delete;
  ForkJoinWorker& operator=(const ForkJoinWorker&) = delete;

  // spawn: f(worker, args...) becomes a task other workers may steal. Sync the handle.
  template <typename F, typename... Args>
  [[gnu::always_inline]] auto spawn(F f, Args... args)
      -> Spawned<fork_join_internal::Task<F, Args...>>;

  // spawn<Fn>: the same for a function named at compile time (w.spawn<Fib>(n - 1)): when the task
  // is not stolen, sync calls Fn directly instead of through a stored pointer. The fast form.
  template <auto Fn, typename... Args>
  [[gnu::always_inline]] auto spawn(Args... args) {
    return spawn(fork_join_internal::FnConstant<Fn>{}, std::move(args)...);
  }

  // sync: the result of the most recent unsynced spawn (LIFO, checked in debug builds).
  template <typename TaskT>
  [[gnu::always_inline]] typename TaskT::Result sync(Spawned<TaskT>& handle);

  unsigned index() const { return index_; }
  ForkJoinPool& pool() { return *pool_; }

 private:
  friend class ForkJoinPool;
  void OnPublished();               // a task became stealable: wake an idle worker
  void WaitStolen(TaskSlot& slot);  // leapfrog until a stolen task is done
  bool TrySteal();                  // one steal attempt from a random victim
  void CountOverflow();

  SplitDeque deque_;
  ForkJoinPool* pool_;
  unsigned index_;
  std::uint64_t rng_;
  // Counters, written by this worker only (relaxed), read by stats().
  std::atomic<std::uint64_t> steals_{0}, leapfrogs_{0}, overflows_{0}, sleeps_{0};
};

struct ForkJoinPoolOptions {
  unsigned workers = 0;                               // 0: std::thread::hardware_concurrency()
  std::size_t deque_capacity = std::size_t{1} << 16;  // spawn depth per worker before overflow
  std::size_t submit_capacity = 1024;                 // external run() calls queued at once
  // host_wake: set by a scheduler that runs the workers on its own threads (a hosted pool). The
  // pool then starts no threads: each host thread attaches to a worker index, runs root tasks
  // inline with run(), and polls try_steal() when idle; the pool calls host_wake when a task
  // became stealable, to wake an idle host thread. It must be cheap when none sleeps.
  void (*host_wake)(void* arg) = nullptr;
  void* host_arg = nullptr;
};

struct ForkJoinStats {
  std::uint64_t steals = 0;     // tasks run by a thief (leapfrogs included)
  std::uint64_t leapfrogs = 0;  // of those, run while waiting for a stolen task
  std::uint64_t overflows = 0;  // spawns run inline because the deque was full
  std::uint64_t sleeps = 0;     // times a worker went to sleep for lack of work
};

// ForkJoinPool: worker threads, one split deque each. run() from any thread submits a root task
// and blocks until its result is ready. Idle workers yield, then sleep on a futex with a ramping
// timeout (100 us doubling to 10 ms), and are woken when work appears; an idle pool, even of 1
// worker, uses well under 5% of a core (tested). Destroying the pool waits for
// the workers to finish what was submitted.
class ForkJoinPool {
 public:
  explicit ForkJoinPool(ForkJoinPoolOptions options = {});
  ~ForkJoinPool();
  ForkJoinPool(const ForkJoinPool&) = delete;
  ForkJoinPool& operator=(const ForkJoinPool&) = delete;

  // run: f(worker, args...) on the pool; blocks until done and returns its result. Called from
  // one of this pool's workers, runs inline on that worker. Any thread.
  template <typename F, typename... Args>
  auto run(F f, Args... args) -> std::invoke_result_t<F&, ForkJoinWorker&, Args&...>;

  unsigned size() const { return static_cast<unsigned>(workers_.size()); }
  ForkJoinStats stats() const;

  // Hosted pools only (see ForkJoinPoolOptions::host_wake). attach: the calling thread becomes
  // worker `index` (run() then runs inline on it); detach undoes it. try_steal: one steal attempt
  // for the calling (attached) thread's worker, running the task if it got one.
  void attach_current_thread(unsigned index);
  void detach_current_thread();
  bool try_steal();

 private:
  friend class ForkJoinWorker;
  struct Job {
    void (*run)(Job& job, ForkJoinWorker& worker);
    std::atomic<std::uint32_t> done{0};
  };

  ForkJoinWorker* CurrentWorker() const;  // the calling thread's worker, if it is one of ours
  void Submit(Job& job);
  static void Await(Job& job);
  void WorkerLoop(unsigned index);
  void WakeOne();
  void WakeAll();

  std::vector<std::unique_ptr<ForkJoinWorker>> workers_;
  std::vector<std::thread> threads_;
  MpmcRing<Job*> submitted_;
  alignas(64) std::atomic<std::uint32_t> wake_word_{0};
  weft::atomic<std::uint32_t> sleepers_{0};
  weft::atomic<bool> stop_{false};
  void (*host_wake_)(void*) = nullptr;
  void* host_arg_ = nullptr;
};

// ---- Implementation ---------------------------------------------------------------------------

// `inline` as well as always_inline: GCC warns that an always_inline function not declared
// inline "might not be inlinable", in every file that includes this header.
template <typename F, typename... Args>
inline auto ForkJoinWorker::spawn(F f, Args... args)
    -> Spawned<fork_join_internal::Task<F, Args...>> {
  using T = fork_join_internal::Task<F, Args...>;
  if (deque_.full()) [[unlikely]] {
    CountOverflow();
    Spawned<T> handle(Spawned<T>::kInline);
    typename T::Call call{std::move(f), {std::move(args)...}};
    if constexpr (std::is_void_v<typename T::Result>) {
      T::Invoke(call, *this);
      handle.inline_result_.emplace();
    } else {
      handle.inline_result_.emplace(T::Invoke(call, *this));
    }
    return handle;
  }
  TaskSlot& slot = deque_.next_slot();
  slot.run = &T::RunStolen;
  new (slot.storage) typename T::Call{std::move(f), {std::move(args)...}};
  Spawned<T> handle(deque_.head());
  if (deque_.push()) [[unlikely]]
    OnPublished();
  return handle;
}

template <typename TaskT>
inline typename TaskT::Result ForkJoinWorker::sync(Spawned<TaskT>& handle) {
  using Result = typename TaskT::Result;
  if (handle.index_ >= Spawned<TaskT>::kSynced) [[unlikely]] {
    if (handle.index_ == Spawned<TaskT>::kSynced)
      fork_join_internal::Die("sync of a consumed handle");
    handle.index_ = Spawned<TaskT>::kSynced;
    if constexpr (!std::is_void_v<Result>)
      return std::move(*handle.inline_result_);
    else
      return;
  }
#ifndef NDEBUG
  if (handle.index_ + 1 != deque_.head()) {
    fork_join_internal::Die("sync out of LIFO order: sync the most recent spawn first");
  }
#endif
  // The handle's index is the top task's (LIFO): the slot and the pop use it, not a reload of
  // the head after the calls since the spawn (fib(30) on 1 worker: see docs/deque.md).
  const std::size_t top = handle.index_;
  handle.index_ = Spawned<TaskT>::kSynced;
  TaskSlot& slot = deque_.slot(top);
  if (deque_.pop_private(top) || deque_.take_back()) [[likely]] {
    // Ours to run. Move the call out first: the task's own spawns reuse this slot.
    auto* stored = std::launder(reinterpret_cast<typename TaskT::Call*>(slot.storage));
    typename TaskT::Call call(std::move(*stored));
    std::destroy_at(stored);
    return TaskT::Invoke(call, *this);
  }
  WaitStolen(slot);
  if constexpr (std::is_void_v<Result>) {
    deque_.finish_stolen();
  } else {
    auto* stored = std::launder(reinterpret_cast<typename TaskT::Stored*>(slot.storage));
    Result result(std::move(*stored));
    std::destroy_at(stored);
    deque_.finish_stolen();
    return result;
  }
}

template <typename F, typename... Args>
auto ForkJoinPool::run(F f, Args... args) -> std::invoke_result_t<F&, ForkJoinWorker&, Args&...> {
  using Result = std::invoke_result_t<F&, ForkJoinWorker&, Args&...>;
  if (ForkJoinWorker* worker = CurrentWorker()) return std::invoke(f, *worker, args...);
  struct TypedJob : Job {
    TypedJob(F fn, Args... a) : f(std::move(fn)), args(std::move(a)...) {}
    F f;
    std::tuple<Args...> args;
    std::optional<std::conditional_t<std::is_void_v<Result>, char, Result>> result;
  };
  TypedJob job(std::move(f), std::move(args)...);
  job.run = [](Job& j, ForkJoinWorker& worker) {
    auto& t = static_cast<TypedJob&>(j);
    auto call = [&](Args&... a) -> Result { return std::invoke(t.f, worker, a...); };
    if constexpr (std::is_void_v<Result>) {
      std::apply(call, t.args);
      t.result.emplace();
    } else {
      t.result.emplace(std::apply(call, t.args));
    }
  };
  Submit(job);
  Await(job);
  if constexpr (!std::is_void_v<Result>) return std::move(*job.result);
}

}  // namespace weft

#endif  // WEFT_DEQUE_FORK_JOIN_H_
