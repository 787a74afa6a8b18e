// sync/cancellation.h: cooperative cancellation. A CancellationSource cancels; the
// CancellationTokens it hands out observe; every wait in //sync takes a token (in WaitOptions)
// and returns std::errc::operation_canceled when it fires. Callbacks registered on a token run
// once, on the cancelling thread.
//
// Defines: weft::CancellationSource, weft::CancellationToken, weft::CancellationCallback,
// weft::WaitOptions.

#ifndef WEFT_SYNC_CANCELLATION_H_
#define WEFT_SYNC_CANCELLATION_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

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
}  // namespace sync_internal

// CancellationToken: observes a source. Cheap to copy. A default token is never cancelled.
class CancellationToken {
 public:
  CancellationToken() = default;
  bool is_cancelled() const;
  bool can_be_cancelled() const { return state_ != nullptr; }

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
  CancellationToken token() const { return CancellationToken(state_); }
  // cancel: idempotent. Runs the registered callbacks on the calling execution, one after
  // another, before returning (a concurrent second cancel() returns at once). Callbacks run
  // without any lock held: they may park (lock a Mutex, send on a Channel) and may register or
  // deregister on this token.
  void cancel();
  bool is_cancelled() const;

 private:
  std::shared_ptr<sync_internal::CancelState> state_;
};

// CancellationCallback: runs `fn` when the token is cancelled (at once if it already is). After
// destruction, fn is neither running nor going to run: a destructor that races a running fn
// parks until fn returns. fn must not throw (std::terminate).
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

sync_internal::CancelState* StateOf(const CancellationToken& t);

}  // namespace weft

#endif  // WEFT_SYNC_CANCELLATION_H_
