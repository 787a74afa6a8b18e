// sync/channel.cc: the type-erased channel core and select.
//
// Under the channel's lock: a ring buffer of `capacity` elements, a queue of waiting senders and
// one of waiting receivers. A send first serves a waiting receiver directly, then the buffer, then
// waits; a receive first takes from the buffer (refilling it from a waiting sender), then directly
// from a waiting sender (unbuffered), then waits. Invariant: a waiting receiver implies an empty
// buffer; a waiting sender implies a full one (or capacity 0).
//
// Select (after Go's selectgo): lock every channel involved in address order; try the cases in a
// random order; if none is ready, queue a node on every channel, all pointing to one SelectGroup,
// and park. A counterpart that finds such a node claims the whole select with a CAS on
// group.fired (-1 -> its case); a node whose select already fired is dropped. A timeout or
// cancellation claims it with -2 instead, so exactly one outcome wins.

#include "weft/sync/channel.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "weft/base/atomic.h"
#include "weft/base/internal/model_hooks.h"

namespace weft {
namespace sync_internal {

struct SelectGroup {
  atomic<int> fired{-1};
};

namespace {

constexpr int kAborted = -2;
constexpr std::size_t kMaxSelectCases = 64;

void Deliver(const ElementOps* ops, void* dst, void* src, bool assign) {
  if (assign) {
    ops->move_assign(dst, src);
  } else {
    ops->move_construct(dst, src);
  }
}

// LockedCall: fn() with `lock` held by the caller; if fn throws (an element's move), the lock is
// released before the exception leaves, so the channel stays usable.
template <typename Fn>
std::errc LockedCall(SpinLock& lock, Fn fn) {
  try {
    return fn();
  } catch (...) {
    lock.unlock();
    throw;
  }
}

}  // namespace

ChannelCore::ChannelCore(std::size_t capacity, const ElementOps* ops)
    : ops_(ops), capacity_(capacity) {
  // The buffer is capacity_ elements: a capacity whose byte size does not fit in size_t would
  // wrap to a small allocation that later sends overrun.
  if (capacity_ > std::numeric_limits<std::size_t>::max() / ops_->size) {
    throw std::length_error("weft::Channel: capacity * sizeof(T) overflows std::size_t");
  }
  if (capacity_ > 0) {
    buffer_ = static_cast<unsigned char*>(
        ::operator new (capacity_ * ops_->size, std::align_val_t{ops_->align}));
  }
}

ChannelCore::~ChannelCore() {
  AbortIfWaitedOn(lock_, {&sendq_, &recvq_}, "Channel");
  for (std::size_t i = 0; i < count_; ++i) ops_->destroy(Slot(i));
  if (buffer_ != nullptr) ::operator delete (buffer_, std::align_val_t{ops_->align});
}

ChannelNode* ChannelCore::TakeWaiter(WaitQueue& q) {
  while (auto* n = static_cast<ChannelNode*>(q.pop_front())) {
    if (n->group == nullptr) return n;
    int expected = -1;
    // acq_rel: the winner's claim is ordered before its delivery, and a select that aborted
    // (claimed -2) is seen as such.
    if (n->group->fired.compare_exchange_strong(expected, n->case_index,
                                                std::memory_order_acq_rel)) {
      return n;
    }
    // That select already happened (or gave up): drop its stale node.
  }
  return nullptr;
}

// Requeue: a waiter taken for a delivery whose element move threw goes back to the front of its
// queue, unclaimed, to be served by a later send or receive. (Its select, if any, is open again:
// no other case can have claimed it while we held the claim.)
void ChannelCore::Requeue(WaitQueue& q, ChannelNode* n) {
  // release: the reopened select is seen with the queue's state (others claim under the lock).
  if (n->group != nullptr) n->group->fired.store(-1, std::memory_order_release);
  q.push_front(n);
}

// The element moves below run under lock_ and may throw (a T whose move constructor throws):
// the channel's state is put back as it was, and the exception goes to the caller, who
// releases the lock (LockedCall).
std::errc ChannelCore::TrySendLocked(void* value, Waiter** to_notify) {
  *to_notify = nullptr;
  if (closed_) return std::errc::broken_pipe;
  if (ChannelNode* r = TakeWaiter(recvq_)) {
    try {
      Deliver(ops_, r->value, value, r->assign);
    } catch (...) {
      Requeue(recvq_, r);
      throw;
    }
    *to_notify = Grant(r, kGranted);
    return {};
  }
  if (count_ < capacity_) {
    ops_->move_construct(Slot(count_), value);  // a throw leaves count_ as it was
    ++count_;
    return {};
  }
  return std::errc::resource_unavailable_try_again;
}

std::errc ChannelCore::TryRecvLocked(void* out, bool assign, Waiter** to_notify) {
  *to_notify = nullptr;
  if (count_ > 0) {
    void* front = Slot(0);
    Deliver(ops_, out, front, assign);  // a throw leaves the element where it is
    ops_->destroy(front);
    head_ = (head_ + 1) % capacity_;
    --count_;
    if (ChannelNode* s = TakeWaiter(sendq_)) {  // the buffer has room again
      try {
        ops_->move_construct(Slot(count_), s->value);
      } catch (...) {
        // Our receive stands (the value is out); the sender waits on, for a later receive.
        Requeue(sendq_, s);
        return {};
      }
      ++count_;
      *to_notify = Grant(s, kGranted);
    }
    return {};
  }
  if (ChannelNode* s = TakeWaiter(sendq_)) {  // unbuffered: take it from the sender
    try {
      Deliver(ops_, out, s->value, assign);
    } catch (...) {
      Requeue(sendq_, s);
      throw;
    }
    *to_notify = Grant(s, kGranted);
    return {};
  }
  if (closed_) return std::errc::broken_pipe;
  return std::errc::resource_unavailable_try_again;
}

void ChannelCore::Enqueue(ChannelNode* node, bool is_send) {
  (is_send ? sendq_ : recvq_).push_back(node);
}

void ChannelCore::Dequeue(ChannelNode* node, bool is_send) {
  (is_send ? sendq_ : recvq_).remove(node);
}

// WaitFor: the common tail of send and recv: park on `node`, then sort out the outcome.
static std::errc WaitFor(ChannelCore& ch, ChannelNode& node, bool is_send,
                         const WaitOptions& options) {
  ParkResult r = Park(
      *node.waiter, [&] { return node.state.load(std::memory_order_acquire) != kWaiting; }, options,
      is_send ? "Channel send" : "Channel recv", &ch);
  if (r != ParkResult::kWoken) {
    ch.lock_.lock();
    if (node.state.load(std::memory_order_relaxed) == kWaiting) {
      ch.Dequeue(&node, is_send);
      ch.lock_.unlock();
      return ErrorOf(r);
    }
    ch.lock_.unlock();  // completed as we gave up: the completion stands
  }
  return node.state.load(std::memory_order_acquire) == kGranted ? std::errc{}
                                                                : std::errc::broken_pipe;
}

// WaiterOrUnlock: send and recv look up the calling Waiter only when they have to wait, under
// the lock (the lookup is a thread-local read and a call, and many operations of a busy channel
// never wait). A thread's first wait makes its Waiter, which may allocate: then this unlocks,
// makes it, and returns null, and the operation starts over.
static Waiter* WaiterOrUnlock(SpinLock& lock) {
  Waiter* w = CurrentWaiterIfReady();
  if (w == nullptr) [[unlikely]] {
    lock.unlock();
    (void)current_waiter();
  }
  return w;
}

std::errc ChannelCore::send(void* value, bool wait, const WaitOptions& options) {
  Waiter* notify = nullptr;
  lock_.lock();
  std::errc e = LockedCall(lock_, [&] { return TrySendLocked(value, &notify); });
  if (e != std::errc::resource_unavailable_try_again || !wait) {
    lock_.unlock();
    if (notify != nullptr) notify->notify();
    return e;
  }
  ChannelNode node;
  node.waiter = WaiterOrUnlock(lock_);
  if (node.waiter == nullptr) [[unlikely]]
    return send(value, wait, options);
  node.value = value;
  sendq_.push_back(&node);
  lock_.unlock();
  return WaitFor(*this, node, /*is_send=*/true, options);
}

std::errc ChannelCore::recv(void* out, bool assign, bool wait, const WaitOptions& options) {
  Waiter* notify = nullptr;
  lock_.lock();
  std::errc e = LockedCall(lock_, [&] { return TryRecvLocked(out, assign, &notify); });
  if (e != std::errc::resource_unavailable_try_again || !wait) {
    lock_.unlock();
    if (notify != nullptr) notify->notify();
    return e;
  }
  ChannelNode node;
  node.waiter = WaiterOrUnlock(lock_);
  if (node.waiter == nullptr) [[unlikely]]
    return recv(out, assign, wait, options);
  node.value = out;
  node.assign = assign;
  recvq_.push_back(&node);
  lock_.unlock();
  return WaitFor(*this, node, /*is_send=*/false, options);
}

void ChannelCore::close() {
  std::vector<Waiter*> wake;
  lock_.lock();
  closed_ = true;
  // At most this many are woken (stale select nodes are dropped); without memory for the list,
  // each is notified as it is granted, with the lock held (see WakeAndUnlock).
  const bool listed = ReserveWakeList(wake, recvq_.size() + sendq_.size());
  auto wake_one = [&](ChannelNode* n) {
    Waiter* w = Grant(n, kClosed);
    if (listed) [[likely]] {
      wake.push_back(w);  // within the reservation: no allocation
    } else {
      w->notify();
    }
  };
  while (ChannelNode* n = TakeWaiter(recvq_)) wake_one(n);
  while (ChannelNode* n = TakeWaiter(sendq_)) wake_one(n);
  lock_.unlock();
  for (Waiter* w : wake) w->notify();
}

bool ChannelCore::closed() const {
  lock_.lock();
  bool c = closed_;
  lock_.unlock();
  return c;
}

std::size_t ChannelCore::size() const {
  lock_.lock();
  std::size_t n = count_;
  lock_.unlock();
  return n;
}

std::size_t ChannelCore::waiters() const {
  lock_.lock();
  std::size_t n = sendq_.size() + recvq_.size();
  lock_.unlock();
  return n;
}

}  // namespace sync_internal

namespace {

std::uint64_t NextRandom() {
  thread_local std::uint64_t state =
      0x9E3779B97F4A7C15ull ^ reinterpret_cast<std::uintptr_t>(&state);
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

// RandomBelow: a random index in [0, n); under the model checker, each one in turn.
std::size_t RandomBelow(std::size_t n) {
#ifdef WEFT_MODEL
  if (base_internal::ModelHooks* m = base_internal::ActiveModel()) return m->Choose(n);
#endif
  return NextRandom() % n;
}

}  // namespace

Result<SelectResult> select(std::span<const SelectCase> cases, const WaitOptions& options,
                            bool has_default) {
  using namespace sync_internal;
  const std::size_t n = cases.size();
  Waiter* me = &current_waiter();
  if (n > kMaxSelectCases) return std::errc::invalid_argument;
  // A zero-initialised or partly filled case (no channel, or no value to send from or receive
  // into) is refused before any channel is touched.
  for (const SelectCase& c : cases) {
    if (c.channel == nullptr || c.value == nullptr) return std::errc::invalid_argument;
  }
  if (n == 0) {
    if (has_default) return SelectResult{-1, false};
    if (!options.deadline && options.cancel == nullptr) return std::errc::invalid_argument;
    return ErrorOf(Park(
        *me, [] { return false; }, options, "select (no cases)", nullptr));
  }
  // Lock order: distinct channels by address.
  ChannelCore* locks[kMaxSelectCases];
  std::size_t nlocks = 0;
  for (const SelectCase& c : cases) locks[nlocks++] = c.channel;
  std::sort(locks, locks + nlocks);
  nlocks = static_cast<std::size_t>(std::unique(locks, locks + nlocks) - locks);
  auto lock_all = [&] {
    for (std::size_t i = 0; i < nlocks; ++i) locks[i]->lock_.lock();
  };
  auto unlock_all = [&] {
    for (std::size_t i = nlocks; i-- > 0;) locks[i]->lock_.unlock();
  };
  // Poll order: a random permutation, so ready cases are chosen fairly.
  int order[kMaxSelectCases];
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<int>(i);
  for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[RandomBelow(i)]);

  lock_all();
  for (std::size_t i = 0; i < n; ++i) {
    const SelectCase& c = cases[order[i]];
    Waiter* notify = nullptr;
    std::errc e;
    try {
      e = c.is_send ? c.channel->TrySendLocked(c.value, &notify)
                    : c.channel->TryRecvLocked(c.value, /*assign=*/true, &notify);
    } catch (...) {
      unlock_all();  // an element's move threw: the channels are as they were
      throw;
    }
    if (e != std::errc::resource_unavailable_try_again) {
      unlock_all();
      if (notify != nullptr) notify->notify();
      return SelectResult{order[i], e == std::errc{}};
    }
  }
  if (has_default) {
    unlock_all();
    return SelectResult{-1, false};
  }
  SelectGroup group;
  ChannelNode nodes[kMaxSelectCases];
  for (std::size_t i = 0; i < n; ++i) {
    nodes[i].waiter = me;
    nodes[i].group = &group;
    nodes[i].case_index = static_cast<int>(i);
    nodes[i].value = cases[i].value;
    nodes[i].assign = !cases[i].is_send;
    cases[i].channel->Enqueue(&nodes[i], cases[i].is_send);
  }
  unlock_all();
  // acquire: pairs with the claimer's acq_rel CAS.
  ParkResult r = Park(
      *me, [&] { return group.fired.load(std::memory_order_acquire) != -1; }, options, "select",
      nullptr);
  if (r != ParkResult::kWoken) {
    int expected = -1;
    // acq_rel: either we claim the select as aborted, or we see the case that won.
    group.fired.compare_exchange_strong(expected, kAborted, std::memory_order_acq_rel);
  }
  // Take our nodes off every queue; this also waits for the winner to finish delivering (it
  // holds its channel's lock until the node's state is set).
  lock_all();
  for (std::size_t i = 0; i < n; ++i) {
    if (nodes[i].queued) cases[i].channel->Dequeue(&nodes[i], cases[i].is_send);
  }
  unlock_all();
  int fired = group.fired.load(std::memory_order_acquire);
  if (fired == kAborted) return ErrorOf(r);
  return SelectResult{fired, nodes[fired].state.load(std::memory_order_acquire) == kGranted};
}

}  // namespace weft
