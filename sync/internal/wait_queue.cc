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

bool AsyncPark::Begin(Waiter& waiter, std::coroutine_handle<> h, const WaitOptions& options,
                      const char* what, const void* object, bool interruptible) {
  waiter_ = &waiter;
  options_ = &options;
  interruptible_ = interruptible;
  result_ = ParkResult::kWoken;
  reg_.fn = [](void* w) { static_cast<Waiter*>(w)->notify(); };
  reg_.arg = &waiter;
  cancel_state_ = options.cancel != nullptr ? StateOf(*options.cancel) : nullptr;
  if (cancel_state_ != nullptr && !Register(cancel_state_, &reg_)) {
    cancel_state_ = nullptr;  // not registered: nothing to take back
    result_ = ParkResult::kCancelled;
    return false;
  }
  deadline_ = DeadlineOf(options);
  if (done_(done_arg_)) {
    result_ = ParkResult::kWoken;
    return false;
  }
  if (Cancelled()) {
    result_ = ParkResult::kCancelled;
    return false;
  }
  waiter.note_wait(what, object);
  if (waiter.suspend(*this, h)) return true;
  // Not a task: this thread or fiber blocks, as Park does (the registration made above serves).
  bool finished = false;
  ParkResult r = ParkResult::kWoken;
  do {
    bool woken = waiter.wait(deadline_.at);
    finished = done_(done_arg_);
    if (!woken && !finished) {
      r = deadline_.by_token ? ParkResult::kCancelled : ParkResult::kTimedOut;
      break;
    }
    if (!woken) break;
    if (!finished && Cancelled()) {
      r = ParkResult::kCancelled;
      break;
    }
  } while (!finished);
  result_ = r;
  return false;
}

bool AsyncPark::Continue(bool woken) {
  const bool finished = done_(done_arg_);
  if (!woken) {
    result_ = finished ? ParkResult::kWoken
                       : (deadline_.by_token ? ParkResult::kCancelled : ParkResult::kTimedOut);
    return true;
  }
  if (finished) {
    result_ = ParkResult::kWoken;
    return true;
  }
  if (Cancelled()) {
    result_ = ParkResult::kCancelled;
    return true;
  }
  return false;
}

ParkResult AsyncPark::End() {
  waiter_->note_wait(nullptr, nullptr);
  if (cancel_state_ != nullptr) {
    Deregister(cancel_state_, &reg_);
    cancel_state_ = nullptr;
  }
  return result_;
}

}  // namespace weft::sync_internal
