// scheduler/runtime.h: the M:N runtime: many fibers over a few worker threads, with work stealing.
// Fibers park on weft's sync primitives through the Waiter seam (sync/waiter.h): a Mutex, Channel
// or Event used inside a fiber parks the fiber, not its worker.
//
// Defines: weft::Runtime, weft::RuntimeOptions, weft::FiberOptions, weft::JoinHandle,
// weft::this_fiber.
//
// Status (issue 7, in progress): workers with run queues, a "run next" slot, an inject queue,
// stealing, per-worker timers, idle sleeping; spawn / join (with deadline) / detach, yield,
// sleep, fiber ids and names; parking for every //sync primitive. Not yet: fiber I/O on the
// reactor, fork-join on the workers' split deques, call_blocking, cancellation of parked fibers
// at shutdown (the destructor waits for every fiber to finish), observability dumps.

#ifndef WEFT_SCHEDULER_RUNTIME_H_
#define WEFT_SCHEDULER_RUNTIME_H_

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "base/result.h"
#include "sync/cancellation.h"
#include "sync/coordination.h"

namespace weft {

struct RuntimeOptions {
  unsigned workers = 0;                            // 0: std::thread::hardware_concurrency()
  std::size_t stack_size = std::size_t{64} << 10;  // default fiber stack (rounded to a class)
};

struct FiberOptions {
  std::size_t stack_size = 0;  // 0: the runtime's default
  std::string_view name;       // shown in diagnostics (stack overflow) and dumps
};

class Runtime;

namespace scheduler_internal {

struct JoinBase {
  Event done;
  std::exception_ptr error;
};
template <typename T>
struct JoinState : JoinBase {
  std::optional<std::conditional_t<std::is_void_v<T>, char, T>> value;
};

void Spawn(Runtime& rt, std::function<void()> body, const FiberOptions& options);

}  // namespace scheduler_internal

// JoinHandle<T>: the result of a spawned fiber, consumed exactly once by join(). join() waits
// (parking the calling fiber, or blocking the calling thread); with a deadline it may time out,
// and the handle stays joinable. If the fiber threw, join() rethrows its exception. Dropping the
// handle detaches the fiber.
template <typename T>
class [[nodiscard]] JoinHandle {
 public:
  JoinHandle() = default;
  explicit JoinHandle(std::shared_ptr<scheduler_internal::JoinState<T>> s) : state_(std::move(s)) {}

  bool joinable() const { return state_ != nullptr; }

  // join: EINVAL if already joined or detached; timed_out / operation_canceled per options.
  Result<std::conditional_t<std::is_void_v<T>, std::monostate, T>> join(
      const WaitOptions& options = {}) {
    if (state_ == nullptr) return std::errc::invalid_argument;
    if (Result<void> r = state_->done.wait(options); !r) return r.error();
    auto state = std::move(state_);
    if (state->error) std::rethrow_exception(state->error);
    if constexpr (std::is_void_v<T>) {
      return std::monostate{};
    } else {
      return std::move(*state->value);
    }
  }
  void detach() { state_.reset(); }

 private:
  std::shared_ptr<scheduler_internal::JoinState<T>> state_;
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  // ~Runtime: waits until every fiber has finished, then stops the workers.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // spawn: runs f() on a new fiber. Any thread, fiber or not.
  template <typename F>
  auto spawn(F f, const FiberOptions& options = {}) -> JoinHandle<std::invoke_result_t<F&>> {
    using T = std::invoke_result_t<F&>;
    auto state = std::make_shared<scheduler_internal::JoinState<T>>();
    scheduler_internal::Spawn(
        *this,
        [state, f = std::move(f)]() mutable {
          try {
            if constexpr (std::is_void_v<T>) {
              f();
              state->value.emplace();
            } else {
              state->value.emplace(f());
            }
          } catch (...) {
            state->error = std::current_exception();
          }
          state->done.set();
        },
        options);
    return JoinHandle<T>(std::move(state));
  }

  // block_on: runs f() on a fiber and returns its result; call it from outside the runtime (a
  // plain thread such as main).
  template <typename F>
  auto block_on(F f) -> std::invoke_result_t<F&> {
    auto r = spawn(std::move(f)).join();
    if constexpr (!std::is_void_v<std::invoke_result_t<F&>>) return std::move(*r);
  }

  unsigned workers() const;

  struct Impl;

 private:
  friend void scheduler_internal::Spawn(Runtime&, std::function<void()>, const FiberOptions&);
  std::unique_ptr<Impl> impl_;
};

// this_fiber: calls about the running fiber. Outside a fiber they act on the thread.
namespace this_fiber {
void yield();
void sleep_until(std::chrono::steady_clock::time_point when);
inline void sleep_for(std::chrono::steady_clock::duration d) {
  sleep_until(std::chrono::steady_clock::now() + d);
}
// id: a process-unique id of the running fiber; 0 outside fibers.
std::uint64_t id();
std::string_view name();
bool in_fiber();
}  // namespace this_fiber

}  // namespace weft

#endif  // WEFT_SCHEDULER_RUNTIME_H_
