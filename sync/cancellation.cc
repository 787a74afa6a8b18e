// sync/cancellation.cc: the shared state of a cancellation source: a flag and an intrusive list
// of registrations under a spin lock. cancel() takes the registrations off the list one at a
// time and runs each callback with the lock released, so a callback may park (lock a Mutex, send
// on a Channel) or register on the token without deadlocking. Deregister of a registration whose
// callback is running at that moment waits for it by parking (never by spinning a worker: the
// callback's fiber may need that worker to finish), which keeps the promise that a callback is
// not running once Deregister returns.

#include "weft/sync/cancellation.h"

#include <atomic>

#include "internal/spin_lock.h"  // a private header here (srcs)
#include "weft/base/atomic.h"

namespace weft {
namespace sync_internal {

struct CancelState {
  atomic<bool> cancelled{false};
  SpinLock lock;
  CancelRegistration* head ABSL_GUARDED_BY(lock) = nullptr;
  // The callback cancel() runs now (taken off the list), the execution that runs it, and the
  // one Deregister that waits for it to return (a registration has one owner).
  CancelRegistration* running ABSL_GUARDED_BY(lock) = nullptr;
  Waiter* canceller ABSL_GUARDED_BY(lock) = nullptr;
  Waiter* done_waiter ABSL_GUARDED_BY(lock) = nullptr;
};

bool Register(CancelState* state, CancelRegistration* reg) {
  state->lock.lock();
  // relaxed: read under the lock that cancel() sets it under.
  if (state->cancelled.load(std::memory_order_relaxed)) {
    state->lock.unlock();
    return false;
  }
  reg->prev = nullptr;
  reg->next = state->head;
  if (state->head != nullptr) state->head->prev = reg;
  state->head = reg;
  reg->linked = true;
  state->lock.unlock();
  return true;
}

void Deregister(CancelState* state, CancelRegistration* reg) {
  state->lock.lock();
  if (reg->linked) {
    if (reg->prev != nullptr) reg->prev->next = reg->next;
    if (reg->next != nullptr) reg->next->prev = reg->prev;
    if (state->head == reg) state->head = reg->next;
    reg->linked = false;
    state->lock.unlock();
    return;
  }
  if (state->running != reg) {  // ran already, or never will
    state->lock.unlock();
    return;
  }
  // Its callback runs now. From inside that callback (the canceller's own execution): nothing to
  // wait for, and waiting would never end.
  Waiter* self = CurrentWaiterIfReady();
  if (self == nullptr) {
    state->lock.unlock();
    self = &current_waiter();  // may allocate a thread's waiter: not under the spin lock
    state->lock.lock();
  }
  while (state->running == reg && state->canceller != self) {
    state->done_waiter = self;
    state->lock.unlock();
    (void)self->wait(std::nullopt);  // a stale permit only makes us look again
    state->lock.lock();
  }
  state->lock.unlock();
}

}  // namespace sync_internal

sync_internal::CancelState* StateOf(const CancellationToken& t) { return t.state_.get(); }

bool CancellationToken::is_cancelled() const {
  // acquire: pairs with cancel()'s release; what the canceller did before is visible.
  return state_ != nullptr && state_->cancelled.load(std::memory_order_acquire);
}

CancellationSource::CancellationSource() : state_(std::make_shared<sync_internal::CancelState>()) {}

bool CancellationSource::is_cancelled() const {
  // acquire: as in CancellationToken::is_cancelled.
  return state_->cancelled.load(std::memory_order_acquire);
}

void CancellationSource::cancel() {
  // relaxed: a hint; the decision is made under the lock below.
  if (state_->cancelled.load(std::memory_order_relaxed)) return;
  Waiter* self = &current_waiter();  // before the lock: a thread's first call may allocate
  sync_internal::CancelState* s = state_.get();
  s->lock.lock();
  // relaxed: under the lock; the release store below publishes it to lock-free readers.
  if (s->cancelled.load(std::memory_order_relaxed)) {
    s->lock.unlock();
    return;
  }
  // release: pairs with is_cancelled's acquire.
  s->cancelled.store(true, std::memory_order_release);
  s->canceller = self;
  while (sync_internal::CancelRegistration* reg = s->head) {
    s->head = reg->next;
    if (reg->next != nullptr) reg->next->prev = nullptr;
    reg->linked = false;
    s->running = reg;
    s->lock.unlock();
    reg->fn(reg->arg);  // may park; reg may be gone once it returns (its owner deregistered it)
    s->lock.lock();
    s->running = nullptr;
    if (Waiter* w = s->done_waiter) {
      s->done_waiter = nullptr;
      s->lock.unlock();
      w->notify();  // Waiters stay valid for a late notify (sync/waiter.h)
      s->lock.lock();
    }
  }
  s->canceller = nullptr;
  s->lock.unlock();
}

CancellationCallback::CancellationCallback(const CancellationToken& token, std::function<void()> fn)
    : state_(token.state_), fn_(std::move(fn)) {
  // noexcept: a callback that throws ends the process (cancel() cannot hand the exception to
  // anyone without skipping the other callbacks).
  reg_.fn = [](void* self) noexcept { static_cast<CancellationCallback*>(self)->fn_(); };
  reg_.arg = this;
  if (state_ != nullptr && !sync_internal::Register(state_.get(), &reg_)) fn_();
}

CancellationCallback::~CancellationCallback() {
  if (state_ != nullptr) sync_internal::Deregister(state_.get(), &reg_);
}

}  // namespace weft
