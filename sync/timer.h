// sync/timer.h: timers that park fibers (or block threads when there is no fiber): Timer, a
// one-shot deadline that can be reset and stopped, and Ticker, a fixed period with a chosen
// policy for missed ticks. Both can be waited on and offered to select (sync/channel.h).
//
// Defines: weft::Timer, weft::Ticker, weft::MissedTickPolicy, weft::next_tick.
//
// Neither owns a thread or a heap entry. A wait parks with the timer's deadline (a fiber's
// worker keeps it in its timer heap until the wait ends; a thread sleeps on its futex with a
// timeout), so an armed timer that nobody waits on costs its object (64 bytes) and nothing
// else, and a million of them cost 64 MB and no thread.
//
// What "fired" means. A Timer armed with deadline D fires at the instant the clock reaches D,
// if it is still armed with D then. reset() and stop() take effect at the instant they read
// the clock, under the timer's lock: if D had passed by then, the timer fired first and they
// return false; else they came first, the fire at D never happens, and they return true. A
// wait (or a select case) returns when the timer fired at some instant during it: it finds the
// timer fired when it looks (armed, deadline passed), or a reset or stop replaced a deadline
// that had passed since the wait began. So a reset or stop that beats the deadline is never
// followed by a stale fire, and a fire that beat them is never lost for the waits that were
// waiting across it; a wait that begins after the reset or stop waits for the new deadline.
//
// A fired Timer stays fired (wait returns at once, a select case is ready) until reset or
// stopped, like an Event. A Ticker's ticks are taken instead: each goes to one tick() or select.
//
// Destroying a Timer or Ticker while anything waits on it aborts with a message.

#ifndef WEFT_SYNC_TIMER_H_
#define WEFT_SYNC_TIMER_H_

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <system_error>

#include "absl/base/thread_annotations.h"
#include "weft/base/result.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/channel.h"
#include "weft/sync/internal/wait_queue.h"
#include "weft/sync/waiter.h"

namespace weft {

// MissedTickPolicy: what a Ticker does when a tick is taken so late that the following one is
// already due (ticks were missed). As Tokio's MissedTickBehavior, but "late" means a whole
// period late, not Tokio's 5 ms: a tick taken late by less than a period keeps the schedule
// under every policy.
enum class MissedTickPolicy : unsigned char {
  kBurst,  // catch up: the missed ticks come back to back, then the original schedule goes on
  kDelay,  // the next tick a period after the late one was taken; the schedule shifts
  kSkip,   // drop the missed ticks: the next tick at the original schedule's next point
};

// next_tick: the tick after the one scheduled at `scheduled`, taken at `now`, with `period` and
// `policy`: scheduled + period when now < scheduled + period (nothing was missed); otherwise
// kBurst: scheduled + period; kDelay: now + period; kSkip: the first scheduled + k * period
// after now. Saturates at SyncClock::time_point::max() (never) instead of overflowing; a period
// that is not positive gives max() too. Pure: Ticker calls it, tests call it with a virtual
// clock. Any thread.
SyncClock::time_point next_tick(MissedTickPolicy policy, SyncClock::time_point scheduled,
                                SyncClock::duration period, SyncClock::time_point now);

namespace sync_internal {

// TimerCore: the state of a Timer or a Ticker (whose period must be positive, else every wait
// and select on it gives invalid_argument), under select_lock_.
//
//   armed_ => the deadline is deadline_; !armed_ => never ready by time
//   Timer: ready(epoch, now) = fires_ != epoch || (armed_ && deadline_ <= now)
//   Ticker: ready(now) = armed_ && deadline_ <= now, and taking it moves deadline_ (next_tick)
//   every queued node's waiter parks no later than parked_until_ (time_point::min when empty)
//
// A wait queues a node and parks until deadline_ (or its own deadline). A reset to a deadline
// earlier than parked_until_ grants every node (the waiters look again and park until the new
// deadline); a later one, or a stop, grants none: the waiters wake at the old deadline and look
// again then, so resetting an idle timeout on every message wakes nobody. A Timer's reset or
// stop that finds the deadline passed counts a fire (fires_) and grants every node.
class TimerCore;

// TimerWait: one wait on a TimerCore, in steps around its parks (Wait's, and TimerAwaiter's for
// a task): Start looks once (true: over, fired or a tick taken); else the caller parks with
// park_options() until Granted(), and calls AfterPark with how the park ended until it returns
// true; error() is then the outcome ({}: fired).
class TimerWait {
 public:
  bool Start(TimerCore* core, Waiter& self, const WaitOptions& options,
             SyncClock::time_point* tick);
  bool Granted() const {
    // acquire: pairs with Grant's release.
    return node_.state.load(std::memory_order_acquire) != kWaiting;
  }
  const WaitOptions& park_options() const { return park_; }
  bool AfterPark(ParkResult r);
  std::errc error() const { return error_; }
  void Refuse() { error_ = std::errc::invalid_argument; }

 private:
  // Look: with the core's lock held: true (the tick taken) if it fired since the wait began;
  // else watches and sets the next park's options.
  bool Look();
  TimerCore* core_ = nullptr;
  const WaitOptions* options_ = nullptr;
  SyncClock::time_point* tick_ = nullptr;
  std::uint64_t epoch_ = 0;
  WaitNode node_;
  WaitOptions park_;
  bool timer_first_ = false;
  std::errc error_{};
};

// TimerAwaiter: Timer::async_wait and Ticker::async_tick (one wait of TimerWait's, its parks
// made one AsyncRepark through its AgainFn).
class TimerAwaiter {
 public:
  TimerAwaiter(TimerCore* core, const WaitOptions& options)
      : core_(core), options_(options), park_(&Done, this, &Again) {}
  TimerAwaiter(const TimerAwaiter&) = delete;
  TimerAwaiter& operator=(const TimerAwaiter&) = delete;
  bool await_ready();
  bool await_suspend(std::coroutine_handle<> h);

 protected:
  // Resume: the wait's outcome ({}: fired; a Ticker's tick is then tick_).
  std::errc Resume();
  SyncClock::time_point tick_{};

 private:
  static bool Done(void* self) { return static_cast<TimerAwaiter*>(self)->wait_.Granted(); }
  static bool Again(void* self, ParkResult r, std::optional<SyncClock::time_point>* deadline);
  TimerCore* core_;
  WaitOptions options_;
  Waiter* self_ = nullptr;
  bool parked_ = false;  // await_suspend ran: the park is to be ended
  TimerWait wait_;
  AsyncRepark park_;
};

class TimerCore final : public Selectable {
 public:
  // TimerCore: a Timer (ticker false; period and policy unused) or a Ticker.
  TimerCore(bool ticker, std::optional<SyncClock::time_point> deadline, SyncClock::duration period,
            MissedTickPolicy policy);
  ~TimerCore();

  // Arm: reset (a deadline) or stop (nullopt). Returns whether the timer was armed with a
  // deadline not yet passed.
  bool Arm(std::optional<SyncClock::time_point> deadline);
  std::optional<SyncClock::time_point> Deadline() const;
  bool Fired() const;
  std::size_t Waiters() const;
  // Wait: until ready (a Ticker takes the tick, its time to *tick if tick is not null), or the
  // options give up. TryTake: without waiting (resource_unavailable_try_again).
  std::errc Wait(const WaitOptions& options, SyncClock::time_point* tick);
  std::errc TryTake(SyncClock::time_point* tick);
  SyncClock::duration period() const { return period_; }
  MissedTickPolicy policy() const { return policy_; }

  // Selectable, with select_lock_ held.
  std::uint64_t SelectEpoch() const override;
  bool SelectReady(std::uint64_t epoch, SyncClock::time_point now) const override;
  void SelectTake(void* out, SyncClock::time_point now) override;
  std::optional<SyncClock::time_point> SelectWatch(WaitNode* node) override;
  void SelectUnwatch(WaitNode* node) override;

 private:
  friend class TimerWait;
  friend class TimerAwaiter;
  // ticker: a Ticker (a refused one has no period).
  bool ticker() const { return period_ != SyncClock::duration::zero() || select_refused(); }
  const char* what() const { return ticker() ? "Ticker" : "Timer"; }

  // Laid out to fill 64 bytes with the base's vtable pointer, lock and flag (a million timers
  // are 64 MB): the small fields first.
  const MissedTickPolicy policy_;
  bool armed_ ABSL_GUARDED_BY(select_lock_);
  // fires_: 32 bits; a wait would miss a fire only if 2^32 more came and went during it.
  std::uint32_t fires_ ABSL_GUARDED_BY(select_lock_) = 0;
  const SyncClock::duration period_;  // zero for a Timer
  SyncClock::time_point deadline_ ABSL_GUARDED_BY(select_lock_);
  SyncClock::time_point parked_until_ ABSL_GUARDED_BY(select_lock_) = SyncClock::time_point::min();
  WaitQueue queue_ ABSL_GUARDED_BY(select_lock_);
};

}  // namespace sync_internal

// Timer: one deadline, armed or not. See the file comment for what fired means.
class Timer {
 public:
  // Timer: not armed (waits wait until a reset), armed at `deadline`, or `delay` from now.
  Timer() : core_(false, std::nullopt, {}, MissedTickPolicy::kBurst) {}
  explicit Timer(SyncClock::time_point deadline)
      : core_(false, deadline, {}, MissedTickPolicy::kBurst) {}
  explicit Timer(SyncClock::duration delay);
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // reset: arms the timer at `deadline` (a time already passed: fired at once), or `delay`
  // from now (a delay past the clock's range saturates: never). Returns true if it was armed
  // with a deadline not yet passed (that fire will not happen), false if it was not armed or
  // had fired. Waiters see the new deadline. Any thread.
  bool reset(SyncClock::time_point deadline) { return core_.Arm(deadline); }
  bool reset(SyncClock::duration delay);
  // stop: disarms it; returns as reset does. Waiters go on waiting, for a reset or their own
  // deadline or token. Any thread.
  bool stop() { return core_.Arm(std::nullopt); }
  // deadline: what it is armed with (passed or not); nullopt when not armed.
  std::optional<SyncClock::time_point> deadline() const { return core_.Deadline(); }
  // fired: armed with a deadline that has passed.
  bool fired() const { return core_.Fired(); }

  // wait: returns once the timer has fired during the wait (at once if it is fired now). A
  // timer that is not armed, or is stopped, makes it wait for a reset. Errors: timed_out
  // (options.deadline), operation_canceled (options.cancel, or the runtime shutting down); a
  // fire that comes as the wait gives up wins. From a fiber or a plain thread.
  Result<void> wait(const WaitOptions& options = {});
  // async_wait: wait for a task: `Result<void> r = co_await timer.async_wait()`. The same
  // results.
  class WaitAwaiter : public sync_internal::TimerAwaiter {
   public:
    using TimerAwaiter::TimerAwaiter;
    Result<void> await_resume() {
      if (const std::errc e = Resume(); e != std::errc{}) return e;
      return {};
    }
  };
  WaitAwaiter async_wait(const WaitOptions& options = sync_internal::kNoWaitOptions) {
    return WaitAwaiter(&core_, options);
  }
  // select_case: a select case (sync/channel.h) that happens when the timer fires, as wait.
  SelectCase select_case() {
    SelectCase c;
    c.timer = &core_;
    return c;
  }
  // waiters: waits and selects queued on it now (for tests and dumps).
  std::size_t waiters() const { return core_.Waiters(); }

 private:
  sync_internal::TimerCore core_;
};

// Ticker: ticks at first, first + period, first + 2 * period..., each taken by one tick() or
// select, which reports the tick's scheduled time; missed ticks are handled by its policy
// (next_tick). Ticks not taken are not queued beyond what the policy implies: a Ticker is a
// schedule, not a channel.
class Ticker {
 public:
  // Ticker: the first tick a period from now, or at `first`. A period that is not positive
  // makes every tick() and select on it fail with invalid_argument.
  explicit Ticker(SyncClock::duration period, MissedTickPolicy policy = MissedTickPolicy::kBurst);
  Ticker(SyncClock::time_point first, SyncClock::duration period,
         MissedTickPolicy policy = MissedTickPolicy::kBurst);
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

  // tick: waits for the next tick and takes it; returns its scheduled time (not when it was
  // taken). Errors as Timer::wait, and invalid_argument (the period). A stopped Ticker waits
  // for a reset. From a fiber or a plain thread; concurrent calls each take a different tick.
  Result<SyncClock::time_point> tick(const WaitOptions& options = {});
  // async_tick: tick for a task: `co_await ticker.async_tick()`. The same results.
  class TickAwaiter : public sync_internal::TimerAwaiter {
   public:
    using TimerAwaiter::TimerAwaiter;
    Result<SyncClock::time_point> await_resume() {
      if (const std::errc e = Resume(); e != std::errc{}) return e;
      return tick_;
    }
  };
  TickAwaiter async_tick(const WaitOptions& options = sync_internal::kNoWaitOptions) {
    return TickAwaiter(&core_, options);
  }
  // try_tick: takes the tick if one is due, else resource_unavailable_try_again.
  Result<SyncClock::time_point> try_tick();
  // reset: the next tick a period from now, the schedule counted from there. No effect on a
  // Ticker whose period is not positive.
  void reset();
  // stop: no ticks until reset (a due tick not yet taken is dropped). Returns true if the next
  // tick was not yet due, as Timer::stop.
  bool stop() { return core_.Arm(std::nullopt); }
  // next: the scheduled time of the next tick (passed if one is due); nullopt when stopped.
  std::optional<SyncClock::time_point> next() const { return core_.Deadline(); }
  // period: as constructed (zero for one whose period was not positive).
  SyncClock::duration period() const { return core_.period(); }
  MissedTickPolicy policy() const { return core_.policy(); }
  // select_case: a select case that takes a tick, writing its scheduled time to `tick`.
  SelectCase select_case(SyncClock::time_point& tick) {
    SelectCase c;
    c.timer = &core_;
    c.value = &tick;
    return c;
  }
  std::size_t waiters() const { return core_.Waiters(); }

 private:
  sync_internal::TimerCore core_;
};

}  // namespace weft

#endif  // WEFT_SYNC_TIMER_H_
