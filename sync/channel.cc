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
//
// Timer and token cases have no counterpart that claims the select. A timer case (a
// Selectable) queues a plain node that its owner grants when it may have become ready sooner
// than the time the select parks until (a reset to an earlier deadline); a token case registers
// a callback that wakes the select. The select parks until a channel claims it, a node is
// granted, a token is cancelled, or the earliest timer or token deadline passes; then it looks at
// its timer and token cases (in a random order) and claims a ready one with the same CAS, under the
// timer's lock, or watches them again and parks again.

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

namespace {

constexpr int kAborted = -2;

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

std::errc ChannelCore::FinishWait(ChannelNode& node, bool is_send, ParkResult r) {
  if (r != ParkResult::kWoken) {
    lock_.lock();
    if (node.state.load(std::memory_order_relaxed) == kWaiting) {
      Dequeue(&node, is_send);
      lock_.unlock();
      return ErrorOf(r);
    }
    lock_.unlock();  // completed as we gave up: the completion stands
  }
  return node.state.load(std::memory_order_acquire) == kGranted ? std::errc{}
                                                                : std::errc::broken_pipe;
}

// WaitFor: the common tail of send and recv: park on `node`, then sort out the outcome.
static std::errc WaitFor(ChannelCore& ch, ChannelNode& node, bool is_send,
                         const WaitOptions& options) {
  ParkResult r = Park(
      *node.waiter, [&] { return node.state.load(std::memory_order_acquire) != kWaiting; }, options,
      is_send ? "Channel send" : "Channel recv", &ch);
  return ch.FinishWait(node, is_send, r);
}

std::errc ChannelCore::StartWait(ChannelNode& node, bool is_send) {
  Waiter* notify = nullptr;
  lock_.lock();
  std::errc e = LockedCall(lock_, [&] {
    return is_send ? TrySendLocked(node.value, &notify)
                   : TryRecvLocked(node.value, node.assign, &notify);
  });
  if (e != std::errc::resource_unavailable_try_again) {
    lock_.unlock();
    if (notify != nullptr) notify->notify();
    return e;
  }
  // relaxed: the node is published to the other side by lock_.
  node.state.store(kWaiting, std::memory_order_relaxed);
  (is_send ? sendq_ : recvq_).push_back(&node);
  lock_.unlock();
  return std::errc::operation_in_progress;
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

namespace {

using CaseKind = sync_internal::SelectCaseKind;

// KindOf: a case's kind, or nullopt for a case select refuses (not exactly one kind, a channel
// case without a value, a send flag or value on a token case, a refused timer).
std::optional<CaseKind> KindOf(const SelectCase& c) {
  const int kinds = int{c.channel != nullptr} + int{c.timer != nullptr} + int{c.token != nullptr};
  if (kinds != 1) return std::nullopt;
  if (c.channel != nullptr) {
    if (c.value == nullptr) return std::nullopt;
    return CaseKind::kChannel;
  }
  if (c.is_send) return std::nullopt;
  if (c.timer != nullptr) {
    if (c.timer->select_refused()) return std::nullopt;
    return CaseKind::kTimer;
  }
  if (c.value != nullptr) return std::nullopt;
  return CaseKind::kToken;
}

std::optional<SyncClock::time_point> Earliest(std::optional<SyncClock::time_point> a,
                                              std::optional<SyncClock::time_point> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// WakeSelect: a token case's cancellation callback, on the cancelling execution: wakes the
// select, whose Done() then sees the token cancelled. It touches only the Waiter, which stays
// valid for a late notify (sync/waiter.h), so the select deregisters without waiting for it.
void WakeSelect(void* waiter) { static_cast<Waiter*>(waiter)->notify(); }

}  // namespace

namespace sync_internal {

std::optional<Result<SelectResult>> SelectRun::Start(std::span<const SelectCase> cases,
                                                     const WaitOptions& options, bool has_default,
                                                     Waiter* me) {
  cases_ = cases;
  options_ = options;
  n_ = cases.size();
  if (n_ > kMaxCases) return Result<SelectResult>(std::errc::invalid_argument);
  // A zero-initialised or partly filled case is refused before any channel is touched.
  bool any_timer = false;
  for (std::size_t i = 0; i < n_; ++i) {
    std::optional<CaseKind> k = KindOf(cases[i]);
    if (!k) return Result<SelectResult>(std::errc::invalid_argument);
    kind_[i] = *k;
    if (*k != CaseKind::kChannel) others_[nothers_++] = static_cast<int>(i);
    any_timer = any_timer || *k == CaseKind::kTimer;
  }
  if (n_ == 0) {
    if (has_default) return Result<SelectResult>(SelectResult{-1, false});
    if (!options.deadline && options.cancel == nullptr) {
      return Result<SelectResult>(std::errc::invalid_argument);
    }
    return std::nullopt;  // a wait for the deadline or the token (Done is never true)
  }
  // Lock order: the distinct locks of the channels and timers, by address.
  for (std::size_t i = 0; i < n_; ++i) {
    if (kind_[i] == CaseKind::kChannel) locks_[nlocks_++] = &cases[i].channel->lock_;
    if (kind_[i] == CaseKind::kTimer) locks_[nlocks_++] = &cases[i].timer->select_lock();
  }
  std::sort(locks_, locks_ + nlocks_);
  nlocks_ = static_cast<std::size_t>(std::unique(locks_, locks_ + nlocks_) - locks_);
  // Poll order: a random permutation, so ready cases are chosen fairly.
  int order[kMaxCases];
  for (std::size_t i = 0; i < n_; ++i) order[i] = static_cast<int>(i);
  for (std::size_t i = n_; i > 1; --i) std::swap(order[i - 1], order[RandomBelow(i)]);

  // epoch_: each timer case's SelectEpoch() as the select begins: a timer made ready and then
  // reset or stopped after this still counts as having happened during the select.
  LockAll();
  const SyncClock::time_point now = any_timer ? Now() : SyncClock::time_point();
  for (std::size_t i = 0; i < n_; ++i) {
    const int index = order[i];
    const SelectCase& c = cases[index];
    if (kind_[index] == CaseKind::kToken) {
      if (c.token->is_cancelled()) {
        UnlockAll();
        return Result<SelectResult>(SelectResult{index, true});
      }
      continue;
    }
    if (kind_[index] == CaseKind::kTimer) {
      epoch_[index] = c.timer->SelectEpoch();
      if (c.timer->SelectReady(epoch_[index], now)) {
        c.timer->SelectTake(c.value, now);
        UnlockAll();
        return Result<SelectResult>(SelectResult{index, true});
      }
      continue;
    }
    Waiter* notify = nullptr;
    std::errc e;
    try {
      e = c.is_send ? c.channel->TrySendLocked(c.value, &notify)
                    : c.channel->TryRecvLocked(c.value, /*assign=*/true, &notify);
    } catch (...) {
      UnlockAll();  // an element's move threw: the channels are as they were
      throw;
    }
    if (e != std::errc::resource_unavailable_try_again) {
      UnlockAll();
      if (notify != nullptr) notify->notify();
      return Result<SelectResult>(SelectResult{index, e == std::errc{}});
    }
  }
  if (has_default) {
    UnlockAll();
    return Result<SelectResult>(SelectResult{-1, false});
  }
  // wake_at_: when a timer or token case may become ready with nobody telling the select (a
  // timer's deadline, a token's cancel_at): the park ends then, and the cases are looked at.
  for (std::size_t i = 0; i < n_; ++i) {
    const SelectCase& c = cases[i];
    nodes_[i].waiter = me;
    if (kind_[i] == CaseKind::kChannel) {
      nodes_[i].group = &group_;
      nodes_[i].case_index = static_cast<int>(i);
      nodes_[i].value = c.value;
      nodes_[i].assign = !c.is_send;
      c.channel->Enqueue(&nodes_[i], c.is_send);
    } else if (kind_[i] == CaseKind::kTimer) {
      wake_at_ = Earliest(wake_at_, c.timer->SelectWatch(&nodes_[i]));
    } else {
      wake_at_ = Earliest(wake_at_, c.token->deadline());
    }
  }
  UnlockAll();
  queued_ = true;
  // Token cases register after the poll: a callback can then only find the select waiting. A
  // token cancelled in between fails its registration, and the select looks again at once.
  for (std::size_t k = 0; k < nothers_; ++k) {
    const int i = others_[k];
    if (kind_[i] != CaseKind::kToken) continue;
    CancelState* state = StateOf(*cases[i].token);
    if (state == nullptr) continue;  // a default token: never cancelled
    regs_[i].fn = &WakeSelect;
    regs_[i].arg = me;
    registered_[i] = Register(state, &regs_[i]);
    // relaxed: read by this execution only, in Done() below.
    if (!registered_[i]) group_.recheck.store(true, std::memory_order_relaxed);
  }
  return std::nullopt;
}

std::optional<SyncClock::time_point> SelectRun::ParkDeadline() {
  // The park ends at the earlier of the select's own deadline and wake_at_; reaching wake_at_
  // only means looking at the cases again.
  cases_first_ = wake_at_ && (!options_.deadline || *wake_at_ < *options_.deadline);
  return cases_first_ ? wake_at_ : options_.deadline;
}

bool SelectRun::Done() {
  if (n_ == 0) return false;
  // A channel case claimed the select, or a timer or token case may have become ready
  // (acquire: pairs with Grant's and WakeSelect's releases, and the claimer's acq_rel CAS).
  if (group_.fired.load(std::memory_order_acquire) != -1) return true;
  if (group_.recheck.load(std::memory_order_acquire)) return true;
  for (std::size_t k = 0; k < nothers_; ++k) {
    const int i = others_[k];
    if (kind_[i] == CaseKind::kTimer && nodes_[i].state.load(std::memory_order_acquire) != kWaiting)
      return true;
    if (kind_[i] == CaseKind::kToken && cases_[i].token->is_cancelled()) return true;
  }
  return false;
}

bool SelectRun::Claim(int i) {
  int expected = -1;
  // acq_rel: as a channel counterpart's claim (ChannelCore::TakeWaiter).
  return group_.fired.compare_exchange_strong(expected, i, std::memory_order_acq_rel);
}

bool SelectRun::LookAgain() {
  // Polls the timer and token cases in a random order; true once the select is decided (by one
  // of them, or by a channel case meanwhile). Else each timer case is watched again and wake_at_
  // recomputed.
  int shuffled[kMaxCases];
  std::copy(others_, others_ + nothers_, shuffled);
  for (std::size_t k = nothers_; k > 1; --k) std::swap(shuffled[k - 1], shuffled[RandomBelow(k)]);
  wake_at_.reset();
  for (std::size_t k = 0; k < nothers_; ++k) {
    const int i = shuffled[k];
    const SelectCase& c = cases_[i];
    // A claim that loses to a channel's claim that is then undone (Decided) leaves the case to
    // the next look, at once.
    if (kind_[i] == CaseKind::kToken) {
      if (c.token->is_cancelled()) {
        if (Claim(i) || Decided()) return true;
        group_.recheck.store(true, std::memory_order_relaxed);
        continue;
      }
      wake_at_ = Earliest(wake_at_, c.token->deadline());
      continue;
    }
    SpinLock& lock = c.timer->select_lock();
    lock.lock();
    const SyncClock::time_point t = Now();
    if (c.timer->SelectReady(epoch_[i], t)) {
      if (Claim(i)) {
        c.timer->SelectTake(c.value, t);  // under the timer's lock: a Ticker's tick goes to
        lock.unlock();                    // one select or tick() only
        return true;
      }
      lock.unlock();
      if (Decided()) return true;
      group_.recheck.store(true, std::memory_order_relaxed);
      continue;
    }
    wake_at_ = Earliest(wake_at_, c.timer->SelectWatch(&nodes_[i]));
    lock.unlock();
  }
  return Decided();
}

bool SelectRun::Decided() {
  if (group_.fired.load(std::memory_order_acquire) == -1) return false;
  // A channel's claim is final only once its delivery is done: a claimer whose element move
  // throws undoes it (Requeue), and it holds that channel's lock meanwhile. Under the locks, the
  // claim has stood or been undone.
  LockAll();
  const bool decided = group_.fired.load(std::memory_order_acquire) != -1;
  UnlockAll();
  return decided;
}

bool SelectRun::AfterPark(ParkResult r) {
  result_ = r;
  if (n_ == 0) return true;
  if (Decided()) return true;
  // Set by the select itself (a token found cancelled as it registered): cleared before looking.
  group_.recheck.store(false, std::memory_order_relaxed);
  if (LookAgain()) return true;  // a case that is ready as the select gives up still wins
  if (r == ParkResult::kCancelled || (r == ParkResult::kTimedOut && !cases_first_)) {
    for (;;) {
      int expected = -1;
      // acq_rel: either we claim the select as aborted, or we see the case that won.
      if (group_.fired.compare_exchange_strong(expected, kAborted, std::memory_order_acq_rel)) {
        return true;
      }
      if (Decided()) return true;  // else a claim undone meanwhile: try again
    }
  }
  return false;
}

Result<SelectResult> SelectRun::Finish() {
  if (!queued_) return ErrorOf(result_);  // no cases: the deadline or the token
  queued_ = false;
  // A WakeSelect still running touches only our Waiter: no need to wait for it.
  for (std::size_t k = 0; k < nothers_; ++k) {
    const int i = others_[k];
    if (registered_[i]) DeregisterNoWait(StateOf(*cases_[i].token), &regs_[i]);
  }
  // Take our nodes off every queue; this also waits for the winner to finish delivering (it
  // holds its channel's lock until the node's state is set).
  LockAll();
  for (std::size_t i = 0; i < n_; ++i) {
    if (kind_[i] == CaseKind::kChannel && nodes_[i].queued) {
      cases_[i].channel->Dequeue(&nodes_[i], cases_[i].is_send);
    } else if (kind_[i] == CaseKind::kTimer) {
      cases_[i].timer->SelectUnwatch(&nodes_[i]);
    }
  }
  UnlockAll();
  int fired = group_.fired.load(std::memory_order_acquire);
  if (fired == kAborted) return ErrorOf(result_);
  if (kind_[fired] != CaseKind::kChannel) return SelectResult{fired, true};
  return SelectResult{fired, nodes_[fired].state.load(std::memory_order_acquire) == kGranted};
}

void SelectRun::LockAll() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (std::size_t i = 0; i < nlocks_; ++i) locks_[i]->lock();
}

void SelectRun::UnlockAll() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (std::size_t i = nlocks_; i-- > 0;) locks_[i]->unlock();
}

bool SelectAwaiter::Again(void* self, ParkResult r,
                          std::optional<SyncClock::time_point>* deadline) {
  auto* a = static_cast<SelectAwaiter*>(self);
  if (a->run_.AfterPark(r)) return false;
  *deadline = a->run_.ParkDeadline();
  return true;
}

bool SelectAwaiter::await_ready() {
  me_ = &current_waiter();
  started_ = run_.Start(cases_, options_, has_default_, me_);
  return started_.has_value();
}

bool SelectAwaiter::await_suspend(std::coroutine_handle<> h) {
  park_options_ = WaitOptions{.deadline = run_.ParkDeadline(), .cancel = options_.cancel};
  return park_.Begin(*me_, h, park_options_, run_.what(), nullptr);
}

Result<SelectResult> SelectAwaiter::await_resume() {
  if (started_) return *started_;
  run_.AfterPark(park_.End());  // (already decided: End's result is the last park's)
  return run_.Finish();
}

}  // namespace sync_internal

Result<SelectResult> select(std::span<const SelectCase> cases, const WaitOptions& options,
                            bool has_default) {
  using namespace sync_internal;
  Waiter* me = &current_waiter();
  SelectRun run;
  if (std::optional<Result<SelectResult>> decided = run.Start(cases, options, has_default, me)) {
    return *decided;
  }
  for (;;) {
    ParkResult r = Park(
        *me, [&] { return run.Done(); },
        WaitOptions{.deadline = run.ParkDeadline(), .cancel = options.cancel}, run.what(), nullptr);
    if (run.AfterPark(r)) break;
  }
  return run.Finish();
}

}  // namespace weft
