// sync/internal/wait_queue.cc: the out-of-line part of the shared wait machinery.

#include "weft/sync/internal/wait_queue.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

namespace weft::sync_internal {

void AbortIfWaitedOn(SpinLock& lock, std::initializer_list<const WaitQueue*> queues,
                     const char* what) {
  lock.lock();
  bool waiting = false;
  for (const WaitQueue* q : queues) waiting = waiting || !q->empty();
  lock.unlock();
  if (!waiting) return;
  std::fprintf(stderr, "weft: %s destroyed while fibers or threads wait on it\n", what);
  std::fflush(stderr);
  std::abort();
}

bool ReserveWakeList(std::vector<Waiter*>& wake, std::size_t n) noexcept {
  try {
    wake.reserve(n);
    return true;
  } catch (const std::bad_alloc&) {  // (and length_error cannot happen: n counts live nodes)
    return false;
  }
}

void WakeAndUnlock(SpinLock& lock, WaitQueue& q, NodeState state, std::size_t max) noexcept {
  const std::size_t n = std::min(max, q.size());
  if (n <= 1) {  // none or one: no list to allocate
    Waiter* w = n == 1 ? Grant(q.pop_front(), state) : nullptr;
    lock.unlock();
    if (w != nullptr) w->notify();
    return;
  }
  std::vector<Waiter*> wake;
  if (!ReserveWakeList(wake, n)) [[unlikely]] {
    for (std::size_t i = 0; i < n; ++i) Grant(q.pop_front(), state)->notify();
    lock.unlock();
    return;
  }
  if (n == q.size()) {
    wake.resize(n);  // within the reservation: no allocation
    q.drain([state](WaitNode* node) { return Grant(node, state); }, wake.data());
  } else {
    for (std::size_t i = 0; i < n; ++i) wake.push_back(Grant(q.pop_front(), state));
  }
  lock.unlock();
  for (Waiter* w : wake) w->notify();
}

bool AsyncParkBase::Continue(bool woken) {
  if (!plain_) return static_cast<AsyncPark*>(this)->ContinueWithOptions(woken);
  // A plain park has no deadline: every wake-up is a notify (or a spurious one), and the wait
  // ends only with its condition.
  return done_(done_arg_);
}

bool AsyncParkBase::Suspend(std::coroutine_handle<> h, const char* what, const void* object) {
  waiter_->note_wait(what, object);
  if (waiter_->suspend(*this, h)) return true;
  // Not a task: this thread or fiber blocks, as Park does (the registration made by Begin
  // serves).
  for (;;) {
    bool woken = waiter_->wait(deadline());
    if (Continue(woken)) return false;
  }
}

bool AsyncPark::Over() {
  if (!again_) return true;
  std::optional<SyncClock::time_point> next;
  if (!static_cast<AsyncRepark*>(this)->again_fn_(done_arg_, result_, &next)) return true;
  SetDeadline(WaitOptions{.deadline = next, .cancel = cancel_});
  result_ = ParkResult::kWoken;
  return false;
}

bool AsyncPark::Begin(Waiter& waiter, std::coroutine_handle<> h, const char* what,
                      const void* object, bool interruptible) {
  waiter_ = &waiter;
  interruptible_ = interruptible;
  result_ = ParkResult::kWoken;
  // The wait's own deadline (kept in deadline_ until now), or its token's when that is
  // earlier; before any Over(), which may set the next park's.
  deadline_by_token_ = false;
  registered_ = false;
  if (cancel_ != nullptr) {
    SetDeadline(WaitOptions{.deadline = deadline(), .cancel = cancel_});
    if (CancelState* cancel_state = StateOf(*cancel_); cancel_state != nullptr) {
      reg_.fn = [](void* w) { static_cast<Waiter*>(w)->notify(); };
      reg_.arg = &waiter;
      registered_ = Register(cancel_state, &reg_);
      if (!registered_) {  // cancelled already: nothing to take back
        result_ = ParkResult::kCancelled;
        if (Over()) return false;
      }
    }
  }
  if (ContinueWithOptions(/*woken=*/true)) return false;  // over before it parks
  return Suspend(h, what, object);
}

bool AsyncPark::ContinueWithOptions(bool woken) {
  for (;;) {
    const bool finished = done_(done_arg_);
    if (!woken) {
      result_ = finished ? ParkResult::kWoken
                         : (deadline_by_token_ ? ParkResult::kCancelled : ParkResult::kTimedOut);
    } else if (finished) {
      result_ = ParkResult::kWoken;
    } else if (Cancelled()) {
      result_ = ParkResult::kCancelled;
    } else {
      return false;
    }
    if (Over()) return true;
    woken = true;  // parking again (a wait of several parks): look once more first
  }
}

bool AsyncPlainPark::Begin(Waiter& waiter, std::coroutine_handle<> h, const char* what,
                           const void* object) {
  waiter_ = &waiter;
  result_ = ParkResult::kWoken;
  if (done_(done_arg_)) return false;  // over before it parks
  return Suspend(h, what, object);
}

void AsyncPark::Uncancellable() {
  if (registered_) {
    DeregisterNoWait(StateOf(*cancel_), &reg_);  // its callback only notifies the Waiter
    registered_ = false;
  }
  cancel_ = nullptr;
  interruptible_ = false;
}

ParkResult AsyncPark::End() {
  waiter_->note_wait(nullptr, nullptr);
  if (registered_) {
    // The callback only notifies the Waiter, which outlives every notify: no need to wait for
    // a running one (and a task must not block its worker).
    DeregisterNoWait(StateOf(*cancel_), &reg_);
    registered_ = false;
  }
  return result_;
}

}  // namespace weft::sync_internal
