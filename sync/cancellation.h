// sync/cancellation.h: cooperative cancellation. A CancellationSource cancels; the
// CancellationTokens it hands out observe; every wait in //sync takes a token (in WaitOptions)
// and returns std::errc::operation_canceled when it fires. Callbacks registered on a token run
// once, on the cancelling thread.
//
// Sources form trees: a source made from a parent token is cancelled with its parent (Go's
// context.WithCancel, C#'s linked token sources), and a source may carry a deadline
// (cancel_at / cancel_after), which every wait on its tokens, or on tokens of sources linked
// below it, honours: a request's deadline flows through every call made on its behalf.
//
// Defines: weft::CancellationSource, weft::CancellationToken, weft::CancellationCallback,
// weft::WaitOptions.

#ifndef WEFT_SYNC_CANCELLATION_H_
#define WEFT_SYNC_CANCELLATION_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <utility>

#include "weft/base/result.h"
#include "weft/sync/waiter.h"

namespace weft {

namespace sync_internal {
struct CancelState;
// A registration on a token's list: intrusive, so a wait registers without allocating.
struct CancelRegistration {
  void (*fn)(void* arg);
  void* arg;
  CancelRegistration* prev = nullptr;
  CancelRegistration* next = nullptr;
  bool linked = false;
};
// Register: false (and fn not called) if already cancelled. Deregister: once it returns, fn is
// not running and will not run; if fn is running at that moment (on the cancelling execution),
// Deregister parks the caller until it returns (unless the caller is that execution).
bool Register(CancelState* state, CancelRegistration* reg);
void Deregister(CancelState* state, CancelRegistration* reg);
// DeregisterNoWait: Deregister for a registration whose callback touches nothing but a Waiter
// (which outlives every notify, sync/waiter.h): returns at once, even while the callback runs.
// For waits that must not block (a task's AsyncPark, a task's I/O).
void DeregisterNoWait(CancelState* state, CancelRegistration* reg);
// Deadline: the earliest deadline of `state` and the sources it is linked to, if any. A hint,
// read without locks: a deadline set concurrently reaches a wait through the cancel that the
// deadline thread makes at that time.
std::optional<SyncClock::time_point> Deadline(const CancelState* state);
// CancelOnDeadlineThread: cancels `state` soon, on the deadline thread (as a deadline reached
// now would), for a caller that must not run the callbacks itself: one that cannot park (a
// worker's own context). Errors as cancel_at's.
Result<void> CancelOnDeadlineThread(CancelState* state);
// DeadlineService: where the calling thread's deadlines (cancel_at, CancelOnDeadlineThread) go
// instead of the process's deadline thread: a simulated runtime, whose clock is virtual, fires
// them itself, at their virtual times. Installed by that runtime on its thread.
class DeadlineService {
 public:
  // Arm: call FireDeadline(state, at, force) once `at` has come (force: a cancel requested now,
  // with no deadline of its own).
  virtual Result<void> Arm(std::weak_ptr<CancelState> state, SyncClock::time_point at,
                           bool force) = 0;

 protected:
  ~DeadlineService() = default;
};
inline constinit thread_local DeadlineService* t_deadline_service = nullptr;
// FireDeadline: for a DeadlineService, on an execution that may park (a fiber): cancels state
// if `force`, or if its deadline (the latest cancel_at's) is `at` or earlier.
void FireDeadline(CancelState* state, SyncClock::time_point at, bool force);
}  // namespace sync_internal

// CancellationToken: observes a source. Cheap to copy. A default token is never cancelled.
class CancellationToken {
 public:
  CancellationToken() = default;
  // CancellationToken(stop): a token cancelled when `stop` is (at once if it is already), so
  // code written against C++20's std::stop_token (a std::jthread's) cancels weft's waits. The
  // cancel runs on the thread that calls request_stop(). A token of a std::stop_source that
  // cannot stop (a default std::stop_token) is a default token.
  explicit CancellationToken(std::stop_token stop);
  // stop_token: a std::stop_token whose stop is requested when this token is cancelled (by its
  // source, a parent or a deadline), for standard code that takes one (std::condition_variable_any,
  // a std::jthread's body). Every call on one token returns tokens of the same std::stop_source;
  // a default token gives a std::stop_token that never stops.
  std::stop_token stop_token() const;
  // is_cancelled: its source, or one it is linked to, was cancelled or reached its deadline.
  bool is_cancelled() const;
  bool can_be_cancelled() const { return state_ != nullptr; }
  // deadline: the earliest deadline of its source and the sources that one is linked to.
  std::optional<SyncClock::time_point> deadline() const;

 private:
  friend class CancellationSource;
  friend class CancellationCallback;
  friend sync_internal::CancelState* StateOf(const CancellationToken& t);
  explicit CancellationToken(std::shared_ptr<sync_internal::CancelState> s)
      : state_(std::move(s)) {}
  std::shared_ptr<sync_internal::CancelState> state_;
};

class CancellationSource {
 public:
  CancellationSource();
  // CancellationSource(parent): a source linked to `parent`'s source: cancelled when that one
  // is (at once if it already is), and it ends its waits at that one's deadline too; its own
  // cancel() and deadline do not reach the parent. A default token (no source) links to nothing.
  // The link costs the parent one registration, removed when this source's last token goes.
  explicit CancellationSource(const CancellationToken& parent);
  CancellationToken token() const { return CancellationToken(state_); }
  // cancel: idempotent. Runs the registered callbacks on the calling execution, one after
  // another, before returning (a concurrent second cancel() returns at once). Callbacks run
  // without any lock held: they may park (lock a Mutex, send on a Channel) and may register or
  // deregister on this token.
  void cancel();
  bool is_cancelled() const;
  // cancel_at / cancel_after: the source cancels itself at `deadline` (after `delay`) unless
  // cancelled first; a later call replaces the deadline, earlier or later. A deadline already
  // past cancels now, on the caller. From the deadline on, is_cancelled() is true and every wait
  // on a token of this source (or of one linked below it) ends with operation_canceled; a wait
  // whose own WaitOptions::deadline comes first ends with timed_out. The registered callbacks
  // run on weft's deadline thread (one per process, started on first use), one source after
  // another, shortly after the deadline: a callback that blocks delays other sources' callbacks.
  // Errors: not_enough_memory, or resource_unavailable_try_again (no thread for the deadline
  // thread): the deadline then still ends waits and sets is_cancelled(), but callbacks run only
  // if someone calls cancel().
  Result<void> cancel_at(SyncClock::time_point deadline);
  // A deadline of time_point::max() (a delay too long to add to now) is no deadline.
  Result<void> cancel_after(SyncClock::duration delay) {
    return cancel_at(SaturatingAfter(SyncClock::now(), delay));
  }
  std::optional<SyncClock::time_point> deadline() const;

 private:
  std::shared_ptr<sync_internal::CancelState> state_;
};

// CancellationCallback: runs `fn` when the token is cancelled (at once if it already is). After
// destruction, fn is neither running nor going to run: a destructor that races a running fn
// parks until fn returns (in a stackless task, which cannot park, it spins; a fn that waits for
// that task's worker would never return, so after a second the process aborts with a message).
// fn must not throw (std::terminate).
class CancellationCallback {
 public:
  CancellationCallback(const CancellationToken& token, std::function<void()> fn);
  ~CancellationCallback();
  CancellationCallback(const CancellationCallback&) = delete;
  CancellationCallback& operator=(const CancellationCallback&) = delete;

 private:
  std::shared_ptr<sync_internal::CancelState> state_;
  std::function<void()> fn_;
  sync_internal::CancelRegistration reg_;
};

// WaitOptions: how long any blocking call in //sync may wait. Expiry gives
// std::errc::timed_out; cancellation std::errc::operation_canceled.
struct WaitOptions {
  std::optional<SyncClock::time_point> deadline = std::nullopt;
  const CancellationToken* cancel = nullptr;
};

namespace sync_internal {
// kNoWaitOptions: no deadline, no token: the default of every awaitable's options (an
// `async_` call's `options = kNoWaitOptions`), and of waits that take the address of their
// options. A default of `{}` would be a temporary of the caller's full-expression, and a
// coroutine keeps every temporary of a co_await's full-expression in its frame: `co_await
// event.async_wait()` grew the frame by 40 bytes (GCC 12).
inline constexpr WaitOptions kNoWaitOptions{};

// EffectiveDeadline: when a wait with `options` must end: its own deadline, or its token's
// (Deadline above) when that is earlier; by_token says which, so that the wait reports
// operation_canceled rather than timed_out for the token's.
struct EffectiveDeadline {
  std::optional<SyncClock::time_point> at;
  bool by_token = false;
};
EffectiveDeadline DeadlineOf(const WaitOptions& options);
}  // namespace sync_internal

sync_internal::CancelState* StateOf(const CancellationToken& t);

}  // namespace weft

#endif  // WEFT_SYNC_CANCELLATION_H_
