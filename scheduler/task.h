// scheduler/task.h: stackless tasks, C++20 coroutines that run on a Runtime's workers beside its
// fibers: the same run queues, stealing, timers and reactor, and the same primitives.
//
// Defines: weft::Task<T>, weft::Runtime::spawn_task, weft::this_task::yield,
// weft::this_task::sleep_for, weft::this_task::sleep_until, weft::this_task::call_blocking.
//
//   weft::Task<int> answer(weft::Channel<int>& ch) {
//     weft::Result<int> v = co_await ch.async_recv();      // parks the task, not the worker
//     co_await weft::this_task::sleep_for(1ms);
//     co_return v.value_or(0) + co_await helper();          // a Task awaited runs inline
//   }
//   weft::JoinHandle<int> h = rt.spawn_task([&] { return answer(ch); });
//   int v = *h.join();           // from a fiber or thread; a task writes co_await h
//
// A task is a coroutine whose return type is Task<T>. Spawned (Runtime::spawn_task) it runs on
// the workers; awaited from another task (`co_await child()`) it runs inline, as a call, and the
// awaiter gets its value or its exception. A Task is lazy: nothing runs until it is spawned or
// awaited. Tasks wait only through co_await: the async_ forms of the primitives
// (Channel::async_send / async_recv, async_select, Mutex::async_lock, CondVar::async_wait,
// Event::async_wait, Barrier::async_arrive_and_wait, Timer::async_wait, JoinHandle::async_join,
// TaskGroup::async_join_next, this_task::sleep_for, TcpStream::async_read...), each with the same
// deadlines, cancellation and errors as its blocking form, completing exactly once. A fiber and a
// task may share any of them and wake each other. Work that blocks a thread goes through
// this_task::call_blocking. A blocking call from a task (a blocking wait, this_fiber::yield,
// weft::call_blocking, a BlockingRegion) would stall its worker: it aborts the process with a
// message naming the call. Awaiting anything else that suspends (another library's awaitable) is
// not supported and aborts the same way.
//
// Memory: a task has no stack. It holds its coroutine frames (from the spawning worker's slab,
// like a fiber's spawn state: no malloc) and a 192-byte task record (a fiber's is 256).
// docs/api.md, "Fibers and tasks", compares the costs.

#ifndef WEFT_SCHEDULER_TASK_H_
#define WEFT_SCHEDULER_TASK_H_

#include <chrono>
#include <coroutine>
#include <exception>
#include <new>
#include <optional>
#include <source_location>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "weft/base/clock.h"
#include "weft/base/result.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/internal/wait_queue.h"
#include "weft/sync/waiter.h"

namespace weft {

template <typename T = void>
class Task;

namespace scheduler_internal {

// TaskAccess: takes the coroutine out of a Task, for what spawns one (a TaskGroup's child).
struct TaskAccess {
  template <typename T>
  static auto Release(Task<T>& task) {
    return task.release();
  }
};

// TaskFinished: the running task's outermost coroutine has finished (its final awaiter).
void TaskFinished() noexcept;
// YieldTask: the running task yields, to resume at h: true; false if the caller is not a task.
bool YieldTask(std::coroutine_handle<> h) noexcept;
// TransferInTask: the running task goes on at `next` (a child it awaits, or the parent a child
// returns to): the worker's RunTask resumes it, so that a chain of such transfers keeps the
// worker's stack flat whatever the optimisation level (symmetric transfer is a tail call only
// when the compiler makes it one: GCC 12 at -O2, not at -O0 or -O1). True; false if the caller
// is not a task (the caller then transfers to `next` itself).
bool TransferInTask(std::coroutine_handle<> next) noexcept;

// TaskBody: a task's FiberBody: finish() takes the finished coroutine's result into the join
// state, destroys the frame and signals the joiner (on the worker, after the coroutine ends).
struct TaskBody : FiberBody {
  virtual void finish() noexcept = 0;
  void run() override { std::terminate(); }                     // a task never runs as a fiber
  void fail(std::exception_ptr) override { std::terminate(); }  // nor fails to start

 protected:
  ~TaskBody() = default;
};

// TaskResult: where a coroutine's value or exception waits for its awaiter.
template <typename T>
struct TaskResult {
  std::optional<T> value;
  std::exception_ptr error;
  template <typename U = T>
  requires std::is_convertible_v<U&&, T>
  void return_value(U&& v) { value.emplace(std::forward<U>(v)); }
  T take() {
    if (error) std::rethrow_exception(error);
    return std::move(*value);
  }
};
template <>
struct TaskResult<void> {
  std::exception_ptr error;
  void return_void() noexcept {}
  void take() {
    if (error) std::rethrow_exception(error);
  }
};

}  // namespace scheduler_internal

// Task<T>: see the file comment. Move-only; destroying a Task that never ran destroys its frame.
template <typename T>
class [[nodiscard]] Task {
  // A coroutine frame is allocated with operator new(size) alone (C++20 passes no alignment),
  // so it is only as aligned as new's default: a promise holding a more aligned T would be
  // misaligned.
  static_assert(alignof(std::conditional_t<std::is_void_v<T>, char, T>) <=
                    __STDCPP_DEFAULT_NEW_ALIGNMENT__,
                "weft::Task<T>: T may not be aligned beyond __STDCPP_DEFAULT_NEW_ALIGNMENT__ "
                "(return it in a std::unique_ptr)");

 public:
  using value_type = T;
  struct promise_type;
  using handle_type = std::coroutine_handle<promise_type>;

  struct promise_type : scheduler_internal::TaskResult<T> {
    // The coroutine that awaits this one (resumed when it ends), or null for a spawned task's
    // outermost coroutine.
    std::coroutine_handle<> continuation;

    Task get_return_object() noexcept { return Task(handle_type::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct FinalAwaiter {
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(handle_type h) noexcept {
        if (std::coroutine_handle<> c = h.promise().continuation) {
          if (scheduler_internal::TransferInTask(c)) return std::noop_coroutine();
          return c;
        }
        scheduler_internal::TaskFinished();
        return std::noop_coroutine();
      }
      void await_resume() noexcept {}
    };
    FinalAwaiter final_suspend() noexcept { return {}; }
    void unhandled_exception() noexcept { this->error = std::current_exception(); }
    // Frames come from the calling worker's slab (a plain thread's: the heap), as spawn states.
    static void* operator new(std::size_t bytes) {
      return scheduler_internal::AllocateSpawnState(bytes);
    }
    static void operator delete(void* p) noexcept { scheduler_internal::FreeSpawnState(p); }
  };

  Task(Task&& other) noexcept : h_(std::exchange(other.h_, nullptr)) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (h_) h_.destroy();
      h_ = std::exchange(other.h_, nullptr);
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (h_) h_.destroy();
  }

  // co_await task: runs it now, on the awaiting coroutine's task, and gives its value (or
  // rethrows its exception). An empty Task (moved from) throws std::logic_error.
  auto operator co_await() && noexcept {
    struct Awaiter {
      handle_type h;
      bool await_ready() noexcept { return !h; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> caller) noexcept {
        h.promise().continuation = caller;
        if (scheduler_internal::TransferInTask(h)) return std::noop_coroutine();
        return h;
      }
      T await_resume() {
        if (!h) throw std::logic_error("weft: co_await on an empty Task");
        return h.promise().take();
      }
    };
    return Awaiter{h_};
  }

 private:
  template <typename>
  friend class Task;
  friend class Runtime;
  friend struct scheduler_internal::TaskAccess;
  explicit Task(handle_type h) : h_(h) {}
  handle_type release() { return std::exchange(h_, nullptr); }
  handle_type h_;
};

namespace scheduler_internal {

// TaskState: a spawned task's join state and body in one allocation (as SpawnState), with the
// callable that made its coroutine, kept until the task ends (the coroutine may refer to the
// callable's captures: a lambda coroutine's `this` is the lambda).
//
// The callable is kept in a union rather than a std::optional, with its flag declared first: a
// bool that GCC and Clang place in the join state's tail padding, where the optional's own flag
// took 8 more bytes (W8's state, 88 -> 80 bytes with the slab header: the 96-byte class to the
// 80-byte one).
template <typename T, typename F>
struct TaskState final : JoinState<T>, TaskBody {
  explicit TaskState(F&& f) {
    new (&fn) F(std::move(f));
    fn_alive = true;
    this->destroy = &Destroy;
  }
  ~TaskState() {
    if (fn_alive) fn.~F();
  }
  TaskState(const TaskState&) = delete;
  TaskState& operator=(const TaskState&) = delete;
  static TaskState* New(F&& f) { return SpawnStorage<TaskState>::New(std::move(f)); }
  static void Destroy(JoinBase* base) noexcept {
    auto* state = static_cast<TaskState*>(static_cast<JoinState<T>*>(base));
    void* frame = state->frame_kept ? state->root.address() : nullptr;
    SpawnStorage<TaskState>::Delete(state);
    if (frame != nullptr) FreeKeptSpawnState(frame);
  }
  void finish() noexcept override {
    auto& promise = root.promise();
    if (promise.error) {
      this->error = promise.error;
    } else if constexpr (std::is_void_v<T>) {
      this->value.emplace();
    } else {
      try {
        this->value.emplace(std::move(*promise.value));
      } catch (...) {
        this->error = std::current_exception();
      }
    }
    // The coroutine ends here (its parameters' destructors run), but its frame's memory goes
    // with this state, usually freed by the joiner on the spawning worker, the slab it came
    // from: freed here, on the worker that ran the task, it was a remote free, and the
    // spawner's next frames reused lines last written by the other core. W2 on tasks took
    // 0.75x the time on 2 workers and 0.84x on 1 (a task's frame and state, freed together,
    // are reused together), medians of 8 paired runs.
    KeepSpawnState(root.address());
    root.destroy();
    frame_kept = true;
    fn.~F();
    fn_alive = false;
    if (this->done.set()) Destroy(this);  // the handle was dropped: ours alone
  }
  bool fn_alive = false;    // fn is alive: from construction to finish()
  bool frame_kept = false;  // root's frame is destroyed, its memory kept (finish)
  union {
    F fn;
  };
  typename Task<T>::handle_type root;
};

}  // namespace scheduler_internal

template <typename F>
requires scheduler_internal::IsTaskType<std::invoke_result_t<F&>>::value auto Runtime::spawn_task(
    F f, const FiberOptions& options, std::source_location site)
    -> JoinHandle<typename std::invoke_result_t<F&>::value_type> {
  using T = typename std::invoke_result_t<F&>::value_type;
  using State = scheduler_internal::TaskState<T, F>;
  State* state = State::New(std::move(f));
  try {
    state->root = state->fn().release();
    if (!state->root) throw std::logic_error("weft: spawn_task of an empty Task");
    scheduler_internal::Spawn(*this, state, options, site, state->root.address());
  } catch (...) {
    if (state->root) state->root.destroy();
    State::Destroy(state);
    throw;
  }
  return JoinHandle<T>(state);
}

template <typename T>
JoinHandle<T> Runtime::spawn_task(Task<T> task, const FiberOptions& options,
                                  std::source_location site) {
  return spawn_task([t = std::move(task)]() mutable { return std::move(t); }, options, site);
}

namespace this_task {

// yield: the task goes behind the worker's other runnable fibers and tasks. In a coroutine that
// is not a task (run by a fiber or thread), this_fiber::yield.
inline auto yield() noexcept {
  struct Awaiter {
    bool await_ready() noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h) noexcept {
      if (scheduler_internal::YieldTask(h)) return true;
      this_fiber::yield();
      return false;
    }
    void await_resume() noexcept {}
  };
  return Awaiter{};
}

// BlockingAwaiter: what call_blocking returns.
template <typename F>
class [[nodiscard]] BlockingAwaiter {
 public:
  explicit BlockingAwaiter(F f) : f_(std::move(f)), outcome_{&f_, {}, {}}, park_(&Done, this) {}
  BlockingAwaiter(const BlockingAwaiter&) = delete;
  BlockingAwaiter& operator=(const BlockingAwaiter&) = delete;
  ~BlockingAwaiter() {
    if (call_ != nullptr) scheduler_internal::FinishBlockingCall(call_);
  }
  bool await_ready() {
    call_ = scheduler_internal::StartBlockingCall(&Outcome::Invoke, &outcome_);
    return call_ == nullptr;
  }
  bool await_suspend(std::coroutine_handle<> h) {
    // Not cancellable, not even by the shutdown: f uses this frame until it returns.
    return park_.Begin(current_waiter(), h, "call_blocking", nullptr);
  }
  std::invoke_result_t<F&> await_resume() {
    if (call_ != nullptr) {
      (void)park_.End();
      scheduler_internal::RethrowBlockingCallError(call_);  // f could not run at all
    }
    return outcome_.Take();
  }

 private:
  using Outcome = scheduler_internal::CallOutcome<F>;
  static bool Done(void* self) {
    return scheduler_internal::BlockingCallDone(static_cast<BlockingAwaiter*>(self)->call_);
  }
  F f_;
  Outcome outcome_;  // runs f_ wherever the call goes, and keeps what it gave
  scheduler_internal::BlockingCall* call_ = nullptr;
  sync_internal::AsyncPlainPark park_;
};

// call_blocking: weft::call_blocking for a task: `auto v = co_await this_task::call_blocking(f)`
// runs f() on the runtime's blocking threads while the task is suspended (its worker runs
// others), and gives f's result or rethrows its exception. As call_blocking, the wait is not
// cancellable: f runs to its end (the runtime's shutdown waits for it). When no blocking thread
// can start, and in a simulated runtime, f runs on a fiber of its own instead (where a fiber's
// call_blocking runs f on the fiber itself): weft's blocking calls in f park that fiber. If that
// fiber cannot start either (no stack), the await throws why. From a fiber, it is
// call_blocking; on a plain thread, f runs there.
template <typename F>
BlockingAwaiter<F> call_blocking(F f) {
  return BlockingAwaiter<F>(std::move(f));
}

// SleepAwaiter: what sleep_until and sleep_for return.
class [[nodiscard]] SleepAwaiter {
 public:
  SleepAwaiter(SyncClock::time_point when, const CancellationToken* cancel)
      : when_(when), park_(&Done, this, WaitOptions{.deadline = when, .cancel = cancel}) {}
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) {
    return park_.Begin(current_waiter(), h, "sleep", nullptr);
  }
  // {} once the time has come; operation_canceled if the token is cancelled or the runtime
  // shuts down first.
  Result<void> await_resume() {
    if (park_.End() == sync_internal::ParkResult::kCancelled) return std::errc::operation_canceled;
    return {};
  }

 private:
  static bool Done(void* self) {
    return static_cast<SleepAwaiter*>(self)->when_ <= SyncClock::now();
  }
  SyncClock::time_point when_;
  sync_internal::AsyncPark park_;
};

// sleep_until / sleep_for: this_fiber's sleeps for a task: co_await this_task::sleep_for(d).
inline SleepAwaiter sleep_until(SyncClock::time_point when,
                                const CancellationToken* cancel = nullptr) {
  return SleepAwaiter(when, cancel);
}
inline SleepAwaiter sleep_for(SyncClock::duration d, const CancellationToken* cancel = nullptr) {
  return SleepAwaiter(SaturatingAfter(SyncClock::now(), d), cancel);
}

}  // namespace this_task

}  // namespace weft

#endif  // WEFT_SCHEDULER_TASK_H_
