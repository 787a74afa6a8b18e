// model/model_test.cc: the checker on litmus tests and small protocols whose answers are known:
// what it must find (races, stale reads the C++ memory model allows, lost wake-ups, livelocks)
// and what it must not report (the same protocols written correctly).

#include "weft/model/model.h"

#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/atomic.h"
#include "weft/base/cpu_relax.h"
#include "weft/sync/waiter.h"

namespace weft::model {
namespace {

using std::memory_order_acquire;
using std::memory_order_relaxed;
using std::memory_order_release;
using std::memory_order_seq_cst;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(ModelTest, UnsynchronisedWritesToACellAreADataRace) {
  Report r = check([] {
    Cell<int> counter(0);
    thread t([&] { counter.set(counter.get() + 1); });
    counter.set(counter.get() + 1);
    t.join();
  });
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(Contains(r.failure, "data race")) << r;
}

// A test-and-set spin lock around a Cell: every schedule counts 2, with no race.
TEST(ModelTest, ASpinLockProtectsACell) {
  Report r = check([] {
    atomic<bool> locked{false};
    Cell<int> counter(0);
    auto add = [&] {
      while (locked.exchange(true, memory_order_acquire)) CpuRelax();
      counter.set(counter.get() + 1);
      locked.store(false, memory_order_release);
    };
    thread t(add);
    add();
    t.join();
    WEFT_MODEL_ASSERT(counter.get() == 2);
  });
  EXPECT_TRUE(r.ok) << r;
  EXPECT_TRUE(r.exhausted);
  EXPECT_GT(r.schedules, 1u);
}

// Message passing: data written, then a flag; the reader sees the flag, then reads the data.
void MessagePassing(std::memory_order publish, std::memory_order observe, Report* out) {
  *out = check([=] {
    atomic<int> data{0};
    atomic<int> flag{0};
    thread writer([&] {
      data.store(42, memory_order_relaxed);
      flag.store(1, publish);
    });
    if (flag.load(observe) == 1) WEFT_MODEL_ASSERT(data.load(memory_order_relaxed) == 42);
    writer.join();
  });
}

TEST(ModelTest, ReleaseAcquireMessagePassingHolds) {
  Report r;
  MessagePassing(memory_order_release, memory_order_acquire, &r);
  EXPECT_TRUE(r.ok) << r;
  EXPECT_TRUE(r.exhausted);
}

TEST(ModelTest, RelaxedMessagePassingReadsStaleData) {
  Report r;
  MessagePassing(memory_order_relaxed, memory_order_acquire, &r);
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(Contains(r.failure, "data.load")) << r;
  EXPECT_TRUE(Contains(r.trace, "(stale)")) << r;
}

// Store buffering (Dekker): both threads store, then load the other's variable. With relaxed
// (or release/acquire) operations both may read 0; a seq_cst fence between store and load in
// each thread forbids it.
void StoreBuffering(bool fences, Report* out) {
  *out = check([=] {
    atomic<int> x{0}, y{0};
    Cell<int> r1(-1);
    thread t([&] {
      x.store(1, memory_order_relaxed);
      if (fences) atomic_fence(memory_order_seq_cst);
      r1.set(y.load(memory_order_relaxed));
    });
    y.store(1, memory_order_relaxed);
    if (fences) atomic_fence(memory_order_seq_cst);
    int r2 = x.load(memory_order_relaxed);
    t.join();
    WEFT_MODEL_ASSERT(r1.get() == 1 || r2 == 1);
  });
}

TEST(ModelTest, StoreBufferingWithoutFencesLetsBothReadZero) {
  Report r;
  StoreBuffering(false, &r);
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(Contains(r.failure, "r1.get() == 1 || r2 == 1")) << r;
}

TEST(ModelTest, StoreBufferingWithSeqCstFencesHolds) {
  Report r;
  StoreBuffering(true, &r);
  EXPECT_TRUE(r.ok) << r;
  EXPECT_TRUE(r.exhausted);
}

// A wait/notify handshake on the Waiter seam. The broken one checks the flag, then announces it
// is waiting: a notifier in between sees no waiter and does not notify, and the waiter parks
// for ever. The fixed one announces first, then checks.
Report Handshake(bool announce_first, const Options& options = {}) {
  return check(
      [=] {
        atomic<bool> ready{false};
        atomic<Waiter*> sleeper{nullptr};
        Waiter* me = &current_waiter();
        thread notifier([&] {
          ready.store(true, memory_order_seq_cst);
          if (Waiter* w = sleeper.exchange(nullptr, memory_order_seq_cst)) w->notify();
        });
        if (announce_first) {
          sleeper.store(me, memory_order_seq_cst);
          while (!ready.load(memory_order_seq_cst)) (void)me->wait(std::nullopt);
        } else {
          while (!ready.load(memory_order_seq_cst)) {
            sleeper.store(me, memory_order_seq_cst);
            (void)me->wait(std::nullopt);
          }
        }
        notifier.join();
      },
      options);
}

TEST(ModelTest, ALostWakeUpIsADeadlockWithItsSchedule) {
  Report r = Handshake(false);
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(Contains(r.failure, "deadlock")) << r;
  EXPECT_FALSE(r.schedule.empty());
  // The printed schedule replays the same failure, alone.
  Options replay;
  replay.replay = r.schedule;
  Report again = Handshake(false, replay);
  EXPECT_FALSE(again.ok);
  EXPECT_EQ(again.schedules, 1u);
  EXPECT_EQ(again.failure, r.failure);
  EXPECT_EQ(again.trace, r.trace);
}

TEST(ModelTest, AnnouncingBeforeCheckingLosesNoWakeUp) {
  Report r = Handshake(true);
  EXPECT_TRUE(r.ok) << r;
  EXPECT_TRUE(r.exhausted);
}

TEST(ModelTest, ATimedWaitMayTimeOut) {
  Report r = check([] {
    Waiter* me = &current_waiter();
    thread t([&] { me->notify(); });
    bool woken = me->wait(SyncClock::now() + std::chrono::hours(1));
    t.join();
    WEFT_MODEL_ASSERT(woken);  // fails on the schedule where the wait times out first
  });
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(Contains(r.trace, "timed out")) << r;
}

TEST(ModelTest, SpinningOnAFlagNoOneSetsIsALivelock) {
  Report r = check([] {
    atomic<bool> flag{false};
    while (!flag.load(memory_order_acquire)) CpuRelax();
  });
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(Contains(r.failure, "livelock")) << r;
}

TEST(ModelTest, RandomSchedulesFindStoreBufferingToo) {
  Options o;
  o.exhaustive = false;
  o.random_schedules = 2000;
  o.seed = 7;
  Report r = check(
      [] {
        atomic<int> x{0}, y{0};
        Cell<int> r1(-1);
        thread t([&] {
          x.store(1, memory_order_relaxed);
          r1.set(y.load(memory_order_relaxed));
        });
        y.store(1, memory_order_relaxed);
        int r2 = x.load(memory_order_relaxed);
        t.join();
        WEFT_MODEL_ASSERT(r1.get() == 1 || r2 == 1);
      },
      o);
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(Contains(r.failure, "seed")) << r;
}

// A compare-exchange that fails read the newest value (it would have been a read-modify-write).
TEST(ModelTest, AFailedCompareExchangeReadsTheNewestStore) {
  Report r = check([] {
    atomic<int> x{0};
    thread t([&] { x.store(1, memory_order_relaxed); });
    int expected = 0;
    if (!x.compare_exchange_strong(expected, 5, memory_order_relaxed)) {
      WEFT_MODEL_ASSERT(expected == 1);
    }
    t.join();
  });
  EXPECT_TRUE(r.ok) << r;
  EXPECT_TRUE(r.exhausted);
}

// An atomic used after its destructor ran (a use after free, in the protocols that free shared
// state when the last side leaves) fails the schedule.
TEST(ModelTest, AnAtomicUsedAfterItsDestructionIsReported) {
  Report r = check([] {
    alignas(atomic<int>) unsigned char storage[sizeof(atomic<int>)];  // stays valid memory
    auto* a = new (storage) atomic<int>(0);
    thread t([&] { a->store(1, memory_order_relaxed); });
    a->~atomic();
    t.join();
  });
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(Contains(r.failure, "use after destruction")) << r;
}

// A random schedule's failure replays from its id, though it may have more preemptions than
// the exhaustive search's bound.
TEST(ModelTest, ARandomScheduleReplaysFromItsId) {
  Options o;
  o.exhaustive = false;
  o.random_schedules = 2000;
  o.seed = 11;
  o.preemption_bound = 0;
  Report r = Handshake(false, o);
  ASSERT_FALSE(r.ok);
  Options replay;
  replay.replay = r.schedule;
  replay.preemption_bound = 0;
  Report again = Handshake(false, replay);
  EXPECT_FALSE(again.ok);
  EXPECT_EQ(r.failure.rfind(again.failure + " (random schedule, seed ", 0), 0u) << r.failure;
  EXPECT_EQ(again.trace, r.trace);
}

// What a body may get wrong is reported, not crashed on: an exception out of a model thread,
// more threads than kMaxThreads, a thread never joined.
TEST(ModelTest, BodyMistakesAreReported) {
  Report thrown = check([] {
    thread t([] { throw std::runtime_error("boom"); });
    t.join();
  });
  ASSERT_FALSE(thrown.ok);
  EXPECT_TRUE(Contains(thrown.failure, "exception: boom")) << thrown;

  Report many = check([] {
    std::vector<std::unique_ptr<thread>> ts;
    for (int i = 0; i < kMaxThreads; ++i) ts.push_back(std::make_unique<thread>([] {}));
    for (auto& t : ts) t->join();
  });
  ASSERT_FALSE(many.ok);
  EXPECT_TRUE(Contains(many.failure, "model threads")) << many;

  Report unjoined = check([] { thread t([] {}); });
  ASSERT_FALSE(unjoined.ok);
  EXPECT_TRUE(Contains(unjoined.failure, "without join")) << unjoined;
}

TEST(ModelTest, StateKeptBetweenSchedulesIsReportedAsNondeterminism) {
  int runs = 0;
  Report r = check([&] {
    atomic<int> x{0};
    thread t([&] { x.store(1, memory_order_relaxed); });
    if (++runs % 2 == 0) (void)x.load(memory_order_relaxed);  // not decided by the checker
    t.join();
  });
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(Contains(r.failure, "nondeterminism")) << r;
}

}  // namespace
}  // namespace weft::model
