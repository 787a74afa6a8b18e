// sync/sync_model_test.cc: //sync's protocols under the model checker (--config=model): every
// schedule within the bounds, not just the ones a stress test happens to hit. Each test states
// what must hold in every schedule; the checker also fails a schedule on a deadlock (a lost
// wake-up parks a thread for ever), a livelock, or a data race on a Cell.

#include <chrono>
#include <cstdio>

#include "gtest/gtest.h"
#include "mutex_model_body.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/channel.h"
#include "weft/sync/coordination.h"
#include "weft/sync/internal/wait_queue.h"
#include "weft/sync/mutex.h"
#include "weft/sync/timer.h"

namespace weft {
namespace {

using model::Cell;
using model::check;
using model::ExpectAllSchedulesPass;
using model::Report;

WaitOptions InAnHour() {
  return WaitOptions{SyncClock::now() + std::chrono::hours(1), nullptr};  // the checker decides
}

// Timers read the model's clock (sync_internal::Now: 10 us per step, 1 s per timeout the
// checker chooses), so a deadline half a second away is reached by one timeout.
constexpr auto kHalfASecond = std::chrono::milliseconds(500);

// Two threads each add 1 under the mutex: the count is 2 and no access races.
TEST(SyncModelTest, MutexCountsEveryCriticalSection) {
  ExpectAllSchedulesPass(check([] { CountUnderMutex(2, 1); }, {.preemption_bound = 3}));
}

// Three threads, two critical sections each: nobody is left parked with the mutex free.
TEST(SyncModelTest, MutexWithThreeThreads) {
  ExpectAllSchedulesPass(check([] { CountUnderMutex(3, 2); }, {.preemption_bound = 1}));
}

// A timed lock that may time out (the checker chooses), and try_lock: whatever happens, the
// counts agree and the mutex ends free.
TEST(SyncModelTest, MutexTimedLockAndTryLock) {
  Report r = check([] {
    Mutex m;
    Cell<int> count(0);
    model::thread t([&] {
      Result<void> got = m.lock(InAnHour());
      if (got.ok()) {
        count.set(count.get() + 1);
        WEFT_MODEL_ASSERT(m.unlock().ok());
      } else {
        WEFT_MODEL_ASSERT(got.error() == std::errc::timed_out);
      }
    });
    WEFT_MODEL_ASSERT(m.lock({}).ok());
    count.set(count.get() + 1);
    WEFT_MODEL_ASSERT(m.unlock().ok());
    if (m.try_lock()) {
      count.set(count.get() + 1);
      WEFT_MODEL_ASSERT(m.unlock().ok());
    }
    t.join();
    WEFT_MODEL_ASSERT(m.try_lock());  // free at the end, whoever timed out
    WEFT_MODEL_ASSERT(m.unlock().ok());
    WEFT_MODEL_ASSERT(count.get() >= 1 && count.get() <= 3);
  });
  ExpectAllSchedulesPass(r);
}

// CondVar: the waiter always sees the flag set under the mutex, whether the signal comes before
// or after it waits, and a timed wait that times out still returns with the mutex held.
TEST(SyncModelTest, CondVarWaitSeesTheSignal) {
  Report r = check([] {
    Mutex m;
    CondVar cv;
    Cell<bool> ready(false);
    model::thread producer([&] {
      WEFT_MODEL_ASSERT(m.lock({}).ok());
      ready.set(true);
      WEFT_MODEL_ASSERT(m.unlock().ok());
      cv.signal();
    });
    WEFT_MODEL_ASSERT(m.lock({}).ok());
    while (!ready.get()) {
      Result<void> w = cv.wait(m, InAnHour());
      WEFT_MODEL_ASSERT(w.ok() || w.error() == std::errc::timed_out);
    }
    WEFT_MODEL_ASSERT(m.unlock().ok());
    producer.join();
  });
  ExpectAllSchedulesPass(r);
}

// Channel: an unbuffered hand-off, then a buffered send and a close: the receiver gets both
// values, in order, then EPIPE.
TEST(SyncModelTest, ChannelDeliversEveryValueOnceThenReportsClosed) {
  Report r = check(
      [] {
        Channel<int> unbuffered;
        Channel<int> buffered(1);
        model::thread sender([&] {
          WEFT_MODEL_ASSERT(unbuffered.send(1).ok());
          WEFT_MODEL_ASSERT(buffered.send(2).ok());
          buffered.close();
        });
        Result<int> a = unbuffered.recv();
        WEFT_MODEL_ASSERT(a.ok() && a.value() == 1);
        Result<int> b = buffered.recv();
        WEFT_MODEL_ASSERT(b.ok() && b.value() == 2);
        Result<int> c = buffered.recv();
        WEFT_MODEL_ASSERT(!c.ok() && c.error() == std::errc::broken_pipe);
        sender.join();
      },
      {.preemption_bound = 3});
  ExpectAllSchedulesPass(r);
}

// select racing a cancellation: exactly one outcome. If it reports cancelled, the value is still
// in the channel; if it received, the value is gone from it. Nothing lost, nothing twice.
TEST(SyncModelTest, SelectRacingCancellationHasExactlyOneOutcome) {
  Report r = check(
      [] {
        Channel<int> a(1), b(1);
        CancellationSource source;
        CancellationToken token = source.token();
        model::thread sender([&] { WEFT_MODEL_ASSERT(a.send(7).ok()); });
        model::thread canceller([&] { source.cancel(); });
        int out_a = 0, out_b = 0;
        SelectCase cases[] = {a.recv_case(out_a), b.recv_case(out_b)};
        Result<SelectResult> got = select(cases, WaitOptions{std::nullopt, &token});
        sender.join();
        canceller.join();
        if (got.ok()) {
          WEFT_MODEL_ASSERT(got.value().index == 0 && out_a == 7);
          WEFT_MODEL_ASSERT(!a.try_recv().ok());
        } else {
          WEFT_MODEL_ASSERT(got.error() == std::errc::operation_canceled);
          Result<int> left = a.try_recv();
          WEFT_MODEL_ASSERT(left.ok() && left.value() == 7);
        }
      },
      {.preemption_bound = 1});
  ExpectAllSchedulesPass(r);
}

// A cancellation callback registered while another thread cancels: it runs at most once, and
// never after its CancellationCallback is destroyed (the Cell turns that into a data race).
TEST(SyncModelTest, CancellationCallbackNeverRunsAfterItsDestruction) {
  Report r = check(
      [] {
        CancellationSource source;
        CancellationToken token = source.token();
        Cell<int> runs(0);
        model::thread canceller([&] { source.cancel(); });
        {
          CancellationCallback callback(token, [&] { runs.set(runs.get() + 1); });
        }
        int seen = runs.get();  // after the destructor: fn is not running, nor will it
        canceller.join();
        WEFT_MODEL_ASSERT(seen <= 1 && runs.get() == seen);
      },
      {.preemption_bound = 3});
  ExpectAllSchedulesPass(r);
}

// Semaphore and WaitGroup: a release wakes the acquirer; done() wakes the waiter.
TEST(SyncModelTest, SemaphoreAndWaitGroupWakeTheirWaiters) {
  Report r = check(
      [] {
        Semaphore sem(0);
        WaitGroup wg;
        WEFT_MODEL_ASSERT(wg.add(1).ok());
        Cell<int> work(0);
        model::thread t([&] {
          work.set(1);
          sem.release();
          wg.done();
        });
        WEFT_MODEL_ASSERT(sem.acquire().ok());
        WEFT_MODEL_ASSERT(wg.wait().ok());
        WEFT_MODEL_ASSERT(work.get() == 1);
        t.join();
      },
      {.preemption_bound = 3});
  ExpectAllSchedulesPass(r);
}

// Timer: a reset while a thread waits on a timer that is not armed ends the wait, whether the
// reset comes before the wait queues, as it parks, or after; no schedule leaves it parked.
TEST(SyncModelTest, TimerResetWakesItsWaiter) {
  Report r = check(
      [] {
        Timer t;
        model::thread waiter([&] { WEFT_MODEL_ASSERT(t.wait().ok()); });
        WEFT_MODEL_ASSERT(!t.reset(kHalfASecond));  // it was not armed
        waiter.join();
      },
      {.preemption_bound = 2});
  ExpectAllSchedulesPass(r);
}

// Timer: stop racing a wait and the deadline. A stop that beat the deadline (returns true)
// means no fire: the wait ends by its own deadline, never ok.
TEST(SyncModelTest, TimerStopThatBeatsTheDeadlineMeansNoFire) {
  Report r = check(
      [] {
        Timer t(kHalfASecond);
        Cell<bool> waited_ok(false);
        model::thread waiter([&] {
          Result<void> w = t.wait(InAnHour());
          WEFT_MODEL_ASSERT(w.ok() || w.error() == std::errc::timed_out);
          waited_ok.set(w.ok());
        });
        const bool stopped = t.stop();
        waiter.join();
        WEFT_MODEL_ASSERT(!(stopped && waited_ok.get()));
      },
      {.preemption_bound = 2});
  ExpectAllSchedulesPass(r);
}

// Timer: a reset to a later deadline racing the first one. The wait always ends ok; if the
// reset beat the first deadline, not before the new one (no stale fire).
TEST(SyncModelTest, TimerResetLaterRacingExpiryHasNoStaleFire) {
  Report r = check(
      [] {
        Timer t(kHalfASecond);
        Cell<SyncClock::time_point> returned_at{};
        model::thread waiter([&] {
          WEFT_MODEL_ASSERT(t.wait().ok());
          returned_at.set(sync_internal::Now());
        });
        const bool pending = t.reset(3 * kHalfASecond);
        const SyncClock::time_point later = *t.deadline();
        waiter.join();
        WEFT_MODEL_ASSERT(!pending || returned_at.get() >= later);
      },
      {.preemption_bound = 2});
  ExpectAllSchedulesPass(r);
}

// select over a channel, a timer and a token, with a sender and a canceller racing the timer:
// exactly one case happens; the value is received by the select or left in the channel.
TEST(SyncModelTest, SelectOverAChannelATimerAndATokenHasOneOutcome) {
  Report r = check(
      [] {
        Channel<int> a(1);
        Timer t(kHalfASecond);
        CancellationSource source;
        CancellationToken token = source.token();
        model::thread sender([&] { WEFT_MODEL_ASSERT(a.send(7).ok()); });
        model::thread canceller([&] { source.cancel(); });
        int out = 0;
        SelectCase cases[] = {a.recv_case(out), t.select_case(), cancel_case(token)};
        Result<SelectResult> got = select(cases);
        sender.join();
        canceller.join();
        WEFT_MODEL_ASSERT(got.ok());
        WEFT_MODEL_ASSERT(t.waiters() == 0);
        if (got.value().index == 0) {
          WEFT_MODEL_ASSERT(out == 7 && !a.try_recv().ok());
        } else {
          WEFT_MODEL_ASSERT(got.value().index == 1 || got.value().index == 2);
          Result<int> left = a.try_recv();
          WEFT_MODEL_ASSERT(left.ok() && left.value() == 7);
        }
      },
      {.preemption_bound = 1});
  ExpectAllSchedulesPass(r);
}

// A timer reset while a select waits on it (not armed, so the select parks with no deadline):
// the select notices and ends with the timer's case.
TEST(SyncModelTest, SelectNoticesATimerResetWhileItWaits) {
  Report r = check(
      [] {
        Channel<int> a(1);
        Timer t;
        model::thread resetter([&] { (void)t.reset(kHalfASecond); });
        int out = 0;
        SelectCase cases[] = {a.recv_case(out), t.select_case()};
        Result<SelectResult> got = select(cases);
        resetter.join();
        WEFT_MODEL_ASSERT(got.ok() && got.value().index == 1);
      },
      {.preemption_bound = 2});
  ExpectAllSchedulesPass(r);
}

// Ticker: two threads take one tick each; they get different ticks, on the schedule.
TEST(SyncModelTest, TickerTicksGoToOneTakerEach) {
  Report r = check(
      [] {
        Ticker ticker(kHalfASecond);
        const SyncClock::time_point first = *ticker.next();
        Cell<SyncClock::time_point> other{};
        model::thread taker([&] {
          Result<SyncClock::time_point> t = ticker.tick();
          WEFT_MODEL_ASSERT(t.ok());
          other.set(t.value());
        });
        Result<SyncClock::time_point> mine = ticker.tick();
        taker.join();
        WEFT_MODEL_ASSERT(mine.ok());
        WEFT_MODEL_ASSERT(mine.value() != other.get());
        WEFT_MODEL_ASSERT(mine.value() == first || other.get() == first);
        WEFT_MODEL_ASSERT(mine.value() - first <= kHalfASecond &&
                          other.get() - first <= kHalfASecond);
      },
      {.preemption_bound = 1});
  ExpectAllSchedulesPass(r);
}

}  // namespace
}  // namespace weft
