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
#include "weft/sync/mutex.h"

namespace weft {
namespace {

using model::Cell;
using model::check;
using model::ExpectAllSchedulesPass;
using model::Report;

WaitOptions InAnHour() {
  return WaitOptions{SyncClock::now() + std::chrono::hours(1), nullptr};  // the checker decides
}

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
    WEFT_MODEL_ASSERT(m.lock().ok());
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
      WEFT_MODEL_ASSERT(m.lock().ok());
      ready.set(true);
      WEFT_MODEL_ASSERT(m.unlock().ok());
      cv.signal();
    });
    WEFT_MODEL_ASSERT(m.lock().ok());
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

}  // namespace
}  // namespace weft
