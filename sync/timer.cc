// sync/timer.cc: Timer and Ticker over one TimerCore each, and the missed-tick arithmetic.
//
// A TimerCore is a deadline and a queue of waiting nodes under a spin lock; nothing fires it.
// Each wait reads the clock under the lock, and if the timer is not ready queues its node and
// parks until the deadline (or its own deadline or token). Whoever changes the deadline to an
// earlier one grants the queued nodes; every other change is noticed when the waiters wake at
// the deadline they parked for (see the invariants in timer.h).
//
//   wait:  lock, ready? --yes--> take (a Ticker's tick) -> ok
//                 | no
//                 v
//          queue node, unlock, park until min(deadline_, options.deadline)
//                 |  granted (an earlier reset), or deadline_ reached: lock, unqueue, look again
//                 |  options' deadline or token: lock, unqueue, ready? ok : timed_out / canceled

#include "weft/sync/timer.h"

#include <algorithm>
#include <atomic>

namespace weft {
namespace {

using sync_internal::Now;

// AddSaturating: t + d, or the clock's end (max or min) where that overflows.
SyncClock::time_point AddSaturating(SyncClock::time_point t, SyncClock::duration d) {
  SyncClock::rep sum;
  if (__builtin_add_overflow(t.time_since_epoch().count(), d.count(), &sum)) {
    return d > SyncClock::duration::zero() ? SyncClock::time_point::max()
                                           : SyncClock::time_point::min();
  }
  return SyncClock::time_point(SyncClock::duration(sum));
}

}  // namespace

SyncClock::time_point next_tick(MissedTickPolicy policy, SyncClock::time_point scheduled,
                                SyncClock::duration period, SyncClock::time_point now) {
  if (period <= SyncClock::duration::zero()) return SyncClock::time_point::max();
  const SyncClock::time_point following = AddSaturating(scheduled, period);
  if (now < following || policy == MissedTickPolicy::kBurst) return following;
  if (policy == MissedTickPolicy::kDelay) return AddSaturating(now, period);
  // kSkip: now >= scheduled + period, so late >= period; the next point of the schedule is
  // now + (period - late % period).
  SyncClock::rep late;
  if (__builtin_sub_overflow(now.time_since_epoch().count(), scheduled.time_since_epoch().count(),
                             &late)) {
    return AddSaturating(now, period);  // times further apart than the clock's range
  }
  return AddSaturating(now, period - SyncClock::duration(late % period.count()));
}

namespace sync_internal {

TimerCore::TimerCore(bool ticker, std::optional<SyncClock::time_point> deadline,
                     SyncClock::duration period, MissedTickPolicy policy)
    : Selectable(/*refused=*/ticker && period <= SyncClock::duration::zero()),
      policy_(policy),
      armed_(deadline.has_value() && !select_refused()),
      period_(ticker && !select_refused() ? period : SyncClock::duration::zero()),
      deadline_(deadline.value_or(SyncClock::time_point())) {}

TimerCore::~TimerCore() { AbortIfWaitedOn(select_lock_, {&queue_}, what()); }

bool TimerCore::Arm(std::optional<SyncClock::time_point> deadline) {
  if (select_refused()) return false;
  select_lock_.lock();
  const SyncClock::time_point now = Now();
  const bool pending = armed_ && now < deadline_;
  // A Timer whose deadline passed fired then, before this call: the waits that were waiting
  // across it must still end (a Ticker's ticks are taken one at a time instead).
  const bool fired = !ticker() && armed_ && !pending;
  if (fired) ++fires_;
  armed_ = deadline.has_value();
  if (armed_) deadline_ = *deadline;
  // Waiters parked until a later time than the new deadline must look again now.
  const bool earlier = armed_ && deadline_ < parked_until_;
  if (!queue_.empty() && (fired || earlier)) {
    parked_until_ = SyncClock::time_point::min();  // the queue is emptied
    WakeAndUnlock(select_lock_, queue_, kGranted);
  } else {
    select_lock_.unlock();
  }
  return pending;
}

std::optional<SyncClock::time_point> TimerCore::Deadline() const {
  select_lock_.lock();
  std::optional<SyncClock::time_point> d;
  if (armed_) d = deadline_;
  select_lock_.unlock();
  return d;
}

bool TimerCore::Fired() const {
  select_lock_.lock();
  const bool fired = armed_ && deadline_ <= Now();
  select_lock_.unlock();
  return fired;
}

std::size_t TimerCore::Waiters() const {
  select_lock_.lock();
  const std::size_t n = queue_.size();
  select_lock_.unlock();
  return n;
}

std::uint64_t TimerCore::SelectEpoch() const { return fires_; }

bool TimerCore::SelectReady(std::uint64_t epoch, SyncClock::time_point now) const {
  return fires_ != epoch || (armed_ && deadline_ <= now);
}

void TimerCore::SelectTake(void* out, SyncClock::time_point now) {
  if (!ticker()) return;  // a Timer stays fired
  // A Ticker is ready only by time (fires_ never moves): armed_ && deadline_ <= now.
  if (out != nullptr) *static_cast<SyncClock::time_point*>(out) = deadline_;
  deadline_ = next_tick(policy_, deadline_, period_, now);
}

std::optional<SyncClock::time_point> TimerCore::SelectWatch(WaitNode* node) {
  if (!node->queued) {
    // relaxed: nobody else sees the node before push_back (under the lock) publishes it.
    node->state.store(kWaiting, std::memory_order_relaxed);
    queue_.push_back(node);
  }
  parked_until_ = std::max(parked_until_, armed_ ? deadline_ : SyncClock::time_point::max());
  if (!armed_) return std::nullopt;
  return deadline_;
}

void TimerCore::SelectUnwatch(WaitNode* node) {
  queue_.remove(node);  // nothing if it is not queued
  if (queue_.empty()) parked_until_ = SyncClock::time_point::min();
}

bool TimerWait::Look() {
  const SyncClock::time_point now = Now();
  if (core_->SelectReady(epoch_, now)) {
    core_->SelectTake(tick_, now);
    return true;
  }
  const std::optional<SyncClock::time_point> until = core_->SelectWatch(&node_);
  // Park until the timer's deadline when it comes before the wait's own; reaching it only
  // means looking again (a later reset may have moved it on).
  park_ = *options_;
  timer_first_ = until && (!options_->deadline || *until < *options_->deadline);
  if (timer_first_) park_.deadline = until;
  return false;
}

bool TimerWait::Start(TimerCore* core, Waiter& self, const WaitOptions& options,
                      SyncClock::time_point* tick) {
  core_ = core;
  options_ = &options;
  tick_ = tick;
  node_.waiter = &self;
  core->select_lock_.lock();
  epoch_ = core->fires_;  // widened: SelectReady compares it with fires_
  const bool over = Look();
  core->select_lock_.unlock();
  return over;
}

bool TimerWait::AfterPark(ParkResult r) {
  core_->select_lock_.lock();
  core_->SelectUnwatch(&node_);
  bool over = true;
  if (r == ParkResult::kWoken || (r == ParkResult::kTimedOut && timer_first_)) {
    over = Look();
  } else if (const SyncClock::time_point now = Now(); core_->SelectReady(epoch_, now)) {
    core_->SelectTake(tick_, now);  // fired as the wait gave up: the fire stands
  } else {
    error_ = ErrorOf(r);
  }
  core_->select_lock_.unlock();
  return over;
}

std::errc TimerCore::Wait(const WaitOptions& options, SyncClock::time_point* tick) {
  if (select_refused()) return std::errc::invalid_argument;
  Waiter& self = current_waiter();  // before the lock: a thread's first wait may allocate
  TimerWait wait;
  if (wait.Start(this, self, options, tick)) return {};
  for (;;) {
    ParkResult r = Park(
        self, [&] { return wait.Granted(); }, wait.park_options(), what(), this);
    if (wait.AfterPark(r)) return wait.error();
  }
}

bool TimerAwaiter::await_ready() {
  if (core_->select_refused()) {
    wait_.Refuse();
    return true;
  }
  self_ = &current_waiter();
  return wait_.Start(core_, *self_, options_, &tick_);
}

bool TimerAwaiter::await_suspend(std::coroutine_handle<> h) {
  parked_ = true;
  return park_.Begin(*self_, h, wait_.park_options(), core_->what(), core_);
}

bool TimerAwaiter::Again(void* self, ParkResult r, std::optional<SyncClock::time_point>* deadline) {
  TimerWait& wait = static_cast<TimerAwaiter*>(self)->wait_;
  if (wait.AfterPark(r)) return false;
  *deadline = wait.park_options().deadline;
  return true;
}

std::errc TimerAwaiter::Resume() {
  if (parked_) (void)park_.End();
  return wait_.error();
}

std::errc TimerCore::TryTake(SyncClock::time_point* tick) {
  if (select_refused()) return std::errc::invalid_argument;
  select_lock_.lock();
  const SyncClock::time_point now = Now();
  const bool ready = armed_ && deadline_ <= now;
  if (ready) SelectTake(tick, now);
  select_lock_.unlock();
  return ready ? std::errc{} : std::errc::resource_unavailable_try_again;
}

}  // namespace sync_internal

Timer::Timer(SyncClock::duration delay)
    : core_(false, AddSaturating(sync_internal::Now(), delay), {}, MissedTickPolicy::kBurst) {}

bool Timer::reset(SyncClock::duration delay) {
  return core_.Arm(AddSaturating(sync_internal::Now(), delay));
}

Result<void> Timer::wait(const WaitOptions& options) {
  std::errc e = core_.Wait(options, nullptr);
  if (e != std::errc{}) return e;
  return {};
}

Ticker::Ticker(SyncClock::duration period, MissedTickPolicy policy)
    : core_(true, AddSaturating(sync_internal::Now(), period), period, policy) {}

Ticker::Ticker(SyncClock::time_point first, SyncClock::duration period, MissedTickPolicy policy)
    : core_(true, first, period, policy) {}

Result<SyncClock::time_point> Ticker::tick(const WaitOptions& options) {
  SyncClock::time_point t;
  std::errc e = core_.Wait(options, &t);
  if (e != std::errc{}) return e;
  return t;
}

Result<SyncClock::time_point> Ticker::try_tick() {
  SyncClock::time_point t;
  std::errc e = core_.TryTake(&t);
  if (e != std::errc{}) return e;
  return t;
}

void Ticker::reset() {
  if (period() <= SyncClock::duration::zero()) return;
  (void)core_.Arm(AddSaturating(sync_internal::Now(), period()));
}

}  // namespace weft
