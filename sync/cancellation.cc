// sync/cancellation.cc: the shared state of a cancellation source: a flag and an intrusive list
// of registrations under a spin lock. cancel() runs the callbacks while holding the lock, which
// is what lets Deregister promise that a callback is not running once it returns.

#include "sync/cancellation.h"

#include <atomic>

#include "sync/internal/spin_lock.h"

namespace weft {
namespace sync_internal {

struct CancelState {
  std::atomic<bool> cancelled{false};
  SpinLock lock;
  CancelRegistration* head ABSL_GUARDED_BY(lock) = nullptr;
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
  state->lock.lock();  // waits for a running cancel() (and its callbacks) to finish
  if (reg->linked) {
    if (reg->prev != nullptr) reg->prev->next = reg->next;
    if (reg->next != nullptr) reg->next->prev = reg->prev;
    if (state->head == reg) state->head = reg->next;
    reg->linked = false;
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
  state_->lock.lock();
  // relaxed: under the lock; the release store below publishes it to lock-free readers.
  if (state_->cancelled.load(std::memory_order_relaxed)) {
    state_->lock.unlock();
    return;
  }
  // release: pairs with is_cancelled's acquire.
  state_->cancelled.store(true, std::memory_order_release);
  while (sync_internal::CancelRegistration* reg = state_->head) {
    state_->head = reg->next;
    if (reg->next != nullptr) reg->next->prev = nullptr;
    reg->linked = false;
    reg->fn(reg->arg);
  }
  state_->lock.unlock();
}

CancellationCallback::CancellationCallback(const CancellationToken& token, std::function<void()> fn)
    : state_(token.state_), fn_(std::move(fn)) {
  reg_.fn = [](void* self) { static_cast<CancellationCallback*>(self)->fn_(); };
  reg_.arg = this;
  if (state_ != nullptr && !sync_internal::Register(state_.get(), &reg_)) fn_();
}

CancellationCallback::~CancellationCallback() {
  if (state_ != nullptr) sync_internal::Deregister(state_.get(), &reg_);
}

}  // namespace weft
