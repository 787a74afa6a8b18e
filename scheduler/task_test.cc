// Stackless tasks (scheduler/task.h): spawning and joining, inline awaits, exceptions, yields
// and sleeps, every awaitable primitive from tasks and shared with fibers, deadlines and
// cancellation, shutdown with parked tasks, and the abort of a blocking call from a task. Each
// concurrent test runs on 1, 2 and 4 workers. WEFT_STRESS_SCALE=N multiplies the loop counts.

#include "weft/scheduler/task.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/fault.h"
#include "weft/base/stress_scale.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/testing/eager.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/channel.h"
#include "weft/sync/coordination.h"
#include "weft/sync/mutex.h"
#include "weft/sync/timer.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::DeathTestStyle;
using testing::kTsan;
using testing::StressScale;

Task<int> Add(int a, int b) { co_return a + b; }

Task<int> SumByAwaits(int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) sum += co_await Add(i, 1);
  co_return sum;
}

Task<int> Throws() {
  co_await this_task::yield();
  throw std::runtime_error("from a task");
}

Task<std::string> CatchesFromAChild() {
  try {
    (void)co_await Throws();
  } catch (const std::runtime_error& e) {
    co_return std::string("caught ") + e.what();
  }
  co_return "not thrown";
}

// Eager: a coroutine that is not a task (a fiber runs it, in the tests below): weft's
// awaitables block the fiber that runs it.
using testing::Eager;

TEST(TaskTest, SpawnedTaskIsJoinedFromAThread) {
  Runtime rt({.workers = 2});
  JoinHandle<int> h = rt.spawn_task(SumByAwaits(100));
  Result<int> r = h.join();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 100 * 99 / 2 + 100);
}

TEST(TaskTest, ExceptionsReachTheAwaiterAndTheJoiner) {
  Runtime rt({.workers = 1});
  EXPECT_EQ(*rt.spawn_task(CatchesFromAChild()).join(), "caught from a task");
  JoinHandle<int> h = rt.spawn_task(Throws());
  EXPECT_THROW((void)h.join(), std::runtime_error);
}

TEST(TaskTest, TheCallableOutlivesItsCoroutine) {
  Runtime rt({.workers = 2});
  auto big = std::make_unique<std::vector<int>>(1000, 7);
  // A lambda coroutine reads its captures through the lambda: spawn_task keeps it alive.
  JoinHandle<int> h = rt.spawn_task([v = std::move(big)]() -> Task<int> {
    co_await this_task::yield();
    co_await this_task::sleep_for(1ms);
    int sum = 0;
    for (int x : *v) sum += x;
    co_return sum;
  });
  EXPECT_EQ(*h.join(), 7000);
}

// Two tasks that keep waking each other (pinned to the worker if `pinned`) and a third, queued
// behind them, that yields once: returns the pair's rounds before the third ran and while it
// waited in the yield ring (the fibers' form is in runtime_test.cc).
std::pair<int, int> TaskPairAndAThird(bool pinned) {
  Runtime rt({.workers = 1});
  const FiberOptions where{.pinned_worker = pinned ? 0 : -1};
  constexpr int kRounds = 200000;
  Channel<int> ping(1), pong(1);
  std::atomic<bool> third_ran{false};
  std::atomic<int> rounds_before_third{-1};
  std::atomic<int> rounds_in_yield{-1};
  std::atomic<int> round{0};
  JoinHandle<void> root = rt.spawn_task([&]() -> Task<> {
    JoinHandle<void> c;
    // b, spawned last, runs first and waits; a makes the third task the next one until the wake
    // of b puts b there (as in the fibers' form).
    JoinHandle<void> a = rt.spawn_task(
        [&]() -> Task<> {
          c = rt.spawn_task([&]() -> Task<> {
            rounds_before_third.store(round.load());
            const int at_yield = round.load();
            co_await this_task::yield();  // into the yield ring: not starved there either
            rounds_in_yield.store(round.load() - at_yield);
            third_ran.store(true);
          });
          for (int i = 0; i < kRounds && !third_ran.load(); ++i) {
            round.store(i);
            if (!(co_await ping.async_send(int{i})).ok() || !(co_await pong.async_recv()).ok()) {
              co_return;
            }
          }
          ping.close();
        },
        where);
    JoinHandle<void> b = rt.spawn_task(
        [&]() -> Task<> {
          for (;;) {
            Result<int> v = co_await ping.async_recv();
            if (!v || !(co_await pong.async_send(int{*v})).ok()) co_return;
          }
        },
        where);
    (void)co_await a;
    (void)co_await b;
    (void)co_await c;
  });
  EXPECT_TRUE(root.join().ok());
  return {rounds_before_third.load(), rounds_in_yield.load()};
}

TEST(TaskTest, APairThatKeepsWakingEachOtherDoesNotStarveTheQueue) {
  for (bool pinned : {false, true}) {
    auto [before, in_yield] = TaskPairAndAThird(pinned);
    EXPECT_GE(before, 0) << pinned;
    EXPECT_LT(before, 100) << pinned;
    EXPECT_GE(in_yield, 0) << pinned;
    EXPECT_LT(in_yield, 100) << pinned;
  }
}

TEST(TaskTest, ADetachedTaskRunsToItsEnd) {
  std::atomic<int> done{0};
  {
    Runtime rt({.workers = 2});
    for (int i = 0; i < 100; ++i) {
      rt.spawn_task([&done]() -> Task<> {
          co_await this_task::yield();
          done.fetch_add(1);
        }).detach();
    }
  }  // ~Runtime waits for every task
  EXPECT_EQ(done.load(), 100);
}

TEST(TaskTest, TaskIdsAndTheRunningRuntime) {
  Runtime rt({.workers = 1});
  auto h = rt.spawn_task([&rt]() -> Task<bool> {
    co_return Runtime::current() == &rt&& this_fiber::in_fiber() && this_fiber::id() != 0 &&
        this_fiber::worker_index() == 0;
  });
  EXPECT_TRUE(*h.join());
}

class TaskWorkersTest : public ::testing::TestWithParam<unsigned> {};
INSTANTIATE_TEST_SUITE_P(Workers, TaskWorkersTest, ::testing::Values(1u, 2u, 4u));

// What a task's coroutine owns ends with it, not at its join: its parameters are destroyed as
// it ends (its frame's memory is freed later, with its join state, by whoever joins or drops
// the handle), joined from a thread, from a task, and from neither (dropped).
struct SetsOnDestruction {
  Event* ended;
  explicit SetsOnDestruction(Event* e) : ended(e) {}
  SetsOnDestruction(SetsOnDestruction&& other) noexcept
      : ended(std::exchange(other.ended, nullptr)) {}
  ~SetsOnDestruction() {
    if (ended != nullptr) ended->set();
  }
};
Task<int> OwnsAParameter(SetsOnDestruction owned, int value) {
  co_await this_task::yield();
  co_return value;
}

TEST_P(TaskWorkersTest, ATasksParametersEndWithItNotAtItsJoin) {
  Runtime rt({.workers = GetParam()});
  const WaitOptions cap{.deadline = SyncClock::now() + 30s};  // a regression fails, not hangs
  for (int i = 0; i < 50; ++i) {
    Event ended;
    JoinHandle<int> h = rt.spawn_task(OwnsAParameter(SetsOnDestruction(&ended), i));
    ASSERT_TRUE(ended.wait(cap).ok());  // before any join
    EXPECT_EQ(*h.join(), i);
  }
  EXPECT_EQ(*rt.spawn_task([&]() -> Task<int> {
                 int sum = 0;
                 for (int i = 0; i < 50; ++i) {
                   Event ended;
                   JoinHandle<int> h = rt.spawn_task(OwnsAParameter(SetsOnDestruction(&ended), i));
                   if (!(co_await ended.async_wait(cap)).ok()) co_return -1;
                   sum += *co_await h;
                 }
                 co_return sum;
               }).join(),
            50 * 49 / 2);
  for (int i = 0; i < 50; ++i) {
    Event ended;
    (void)rt.spawn_task(OwnsAParameter(SetsOnDestruction(&ended), i));  // dropped at once
    ASSERT_TRUE(ended.wait(cap).ok());
  }
  // Handles of finished tasks kept past the runtime still join and free (their frames with
  // their states) from a plain thread; asan sees no leak.
  std::vector<JoinHandle<int>> kept;
  {
    Runtime other({.workers = GetParam()});
    other.block_on([&] {
      for (int i = 0; i < 20; ++i) {
        Event ended;
        kept.push_back(other.spawn_task(OwnsAParameter(SetsOnDestruction(&ended), i)));
        ASSERT_TRUE(ended.wait(cap).ok());
      }
    });
  }
  for (int i = 0; i < 20; ++i) EXPECT_EQ(*kept[static_cast<std::size_t>(i)].join(), i);
}

TEST_P(TaskWorkersTest, ManyTasksSpawnAndJoinTasks) {
  Runtime rt({.workers = GetParam()});
  const int n = 50 * StressScale();
  auto h = rt.spawn_task([&rt, n]() -> Task<long> {
    std::vector<JoinHandle<long>> children;
    for (int i = 0; i < n; ++i) {
      children.push_back(rt.spawn_task([i, n, &rt]() -> Task<long> {
        std::vector<JoinHandle<int>> leaves;
        for (int j = 0; j < n; ++j) leaves.push_back(rt.spawn_task(Add(i, j)));
        long sum = 0;
        for (auto& leaf : leaves) sum += *co_await leaf;
        co_return sum;
      }));
    }
    long total = 0;
    for (auto& c : children) total += *co_await c;
    co_return total;
  });
  long expected = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) expected += i + j;
  EXPECT_EQ(*h.join(), expected);
}

TEST_P(TaskWorkersTest, ChannelPingPongBetweenTwoTasks) {
  Runtime rt({.workers = GetParam()});
  const int rounds = 5000 * StressScale();
  Channel<int> ping, pong;  // unbuffered: every send waits for its receiver
  auto server = rt.spawn_task([&]() -> Task<int> {
    int served = 0;
    for (;;) {
      Result<int> v = co_await ping.async_recv();
      if (!v) co_return served;
      if (!(co_await pong.async_send(*v + 1))) co_return -1;
      ++served;
    }
  });
  auto client = rt.spawn_task([&]() -> Task<bool> {
    for (int i = 0; i < rounds; ++i) {
      if (!(co_await ping.async_send(int{i}))) co_return false;
      Result<int> r = co_await pong.async_recv();
      if (!r || *r != i + 1) co_return false;
    }
    ping.close();
    co_return true;
  });
  EXPECT_TRUE(*client.join());
  EXPECT_EQ(*server.join(), rounds);
}

// Fibers and tasks on both ends of one channel: every value is received exactly once.
TEST_P(TaskWorkersTest, FibersAndTasksShareAChannel) {
  Runtime rt({.workers = GetParam()});
  const int per_producer = 2000 * StressScale();
  constexpr int kProducers = 4;  // two fibers, two tasks
  Channel<int> ch(8);
  std::vector<std::atomic<int>> seen(kProducers * per_producer);
  std::vector<JoinHandle<void>> producers, consumers;
  for (int p = 0; p < kProducers; ++p) {
    if (p % 2 == 0) {
      producers.push_back(rt.spawn([&, p] {
        for (int i = 0; i < per_producer; ++i) ASSERT_TRUE(ch.send(p * per_producer + i).ok());
      }));
    } else {
      producers.push_back(rt.spawn_task([&, p]() -> Task<> {
        for (int i = 0; i < per_producer; ++i) {
          EXPECT_TRUE(co_await ch.async_send(p * per_producer + i));
        }
      }));
    }
  }
  for (int c = 0; c < 4; ++c) {
    if (c % 2 == 0) {
      consumers.push_back(rt.spawn([&] {
        for (int v : ch) seen[v].fetch_add(1);
      }));
    } else {
      consumers.push_back(rt.spawn_task([&]() -> Task<> {
        for (;;) {
          Result<int> v = co_await ch.async_recv();
          if (!v) {
            EXPECT_EQ(v.error(), std::errc::broken_pipe);
            co_return;
          }
          seen[*v].fetch_add(1);
        }
      }));
    }
  }
  for (auto& h : producers) ASSERT_TRUE(h.join().ok());
  ch.close();
  for (auto& h : consumers) ASSERT_TRUE(h.join().ok());
  for (auto& s : seen) ASSERT_EQ(s.load(), 1);
}

// A Mutex contended by fibers, tasks and a plain thread: no increment is lost, and each holder
// unlocks what it locked.
TEST_P(TaskWorkersTest, FibersTasksAndAThreadShareAMutex) {
  Runtime rt({.workers = GetParam()});
  const int per = 2000 * StressScale();
  Mutex mu;
  long counter = 0;
  std::vector<JoinHandle<void>> hs;
  for (int k = 0; k < 3; ++k) {
    hs.push_back(rt.spawn([&] {
      for (int i = 0; i < per; ++i) {
        MutexLock hold(mu);
        ++counter;
      }
    }));
    hs.push_back(rt.spawn_task([&]() -> Task<> {
      for (int i = 0; i < per; ++i) {
        Result<void> r = co_await mu.async_lock();
        EXPECT_TRUE(r.ok());
        ++counter;
        if (i % 7 == 0) co_await this_task::yield();  // held across a suspension
        EXPECT_TRUE(mu.unlock().ok());
      }
    }));
  }
  std::thread outside([&] {
    for (int i = 0; i < per; ++i) {
      MutexLock hold(mu);
      ++counter;
    }
  });
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  outside.join();
  EXPECT_EQ(counter, 7L * per);
}

TEST_P(TaskWorkersTest, AnEventWakesParkedTasksAndFibers) {
  Runtime rt({.workers = GetParam()});
  Event go;
  WaitGroup ready;
  std::atomic<int> woken{0};
  std::vector<JoinHandle<void>> hs;
  constexpr int kEach = 200;
  ASSERT_TRUE(ready.add(2 * kEach).ok());
  for (int i = 0; i < kEach; ++i) {
    hs.push_back(rt.spawn_task([&]() -> Task<> {
      ready.done();
      EXPECT_TRUE(co_await go.async_wait());
      woken.fetch_add(1);
    }));
    hs.push_back(rt.spawn([&] {
      ready.done();
      EXPECT_TRUE(go.wait().ok());
      woken.fetch_add(1);
    }));
  }
  // A task waits for the WaitGroup, then sets the event.
  auto setter = rt.spawn_task([&]() -> Task<> {
    EXPECT_TRUE(co_await ready.async_wait());
    go.set();
  });
  ASSERT_TRUE(setter.join().ok());
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_EQ(woken.load(), 2 * kEach);
}

// A bounded queue under one Mutex and two CondVars, with producers and consumers that are
// tasks and fibers: every value is consumed once, and the queue never overflows.
TEST_P(TaskWorkersTest, CondVarsShareAQueueBetweenTasksAndFibers) {
  Runtime rt({.workers = GetParam()});
  Mutex mu;
  CondVar not_empty, not_full;
  std::deque<int> q;
  constexpr std::size_t kCap = 4;
  bool done = false;
  const int per = 500 * StressScale();
  std::atomic<long> sum{0};
  std::atomic<bool> overflow{false};
  std::vector<JoinHandle<void>> producers, consumers;
  for (int p = 0; p < 3; ++p) {
    if (p < 2) {
      producers.push_back(rt.spawn_task([&, p]() -> Task<> {
        for (int i = 0; i < per; ++i) {
          EXPECT_TRUE(co_await mu.async_lock());
          while (q.size() >= kCap) EXPECT_TRUE(co_await not_full.async_wait(mu));
          q.push_back(p * per + i);
          not_empty.signal();
          EXPECT_TRUE(mu.unlock().ok());
        }
      }));
    } else {
      producers.push_back(rt.spawn([&, p] {
        for (int i = 0; i < per; ++i) {
          MutexLock hold(mu);
          ASSERT_TRUE(not_full.wait(mu, [&] { return q.size() < kCap; }).ok());
          q.push_back(p * per + i);
          not_empty.signal();
        }
      }));
    }
  }
  auto take = [&](int v) {
    sum.fetch_add(v);
    if (q.size() > kCap) overflow.store(true);
  };
  for (int c = 0; c < 3; ++c) {
    if (c < 2) {
      consumers.push_back(rt.spawn_task([&]() -> Task<> {
        for (;;) {
          EXPECT_TRUE(co_await mu.async_lock());
          while (q.empty() && !done) EXPECT_TRUE(co_await not_empty.async_wait(mu));
          if (q.empty()) {
            EXPECT_TRUE(mu.unlock().ok());
            co_return;
          }
          int v = q.front();
          q.pop_front();
          take(v);
          not_full.signal();
          EXPECT_TRUE(mu.unlock().ok());
        }
      }));
    } else {
      consumers.push_back(rt.spawn([&] {
        for (;;) {
          MutexLock hold(mu);
          ASSERT_TRUE(not_empty.wait(mu, [&] { return !q.empty() || done; }).ok());
          if (q.empty()) return;
          int v = q.front();
          q.pop_front();
          take(v);
          not_full.signal();
        }
      }));
    }
  }
  for (auto& h : producers) ASSERT_TRUE(h.join().ok());
  {
    MutexLock hold(mu);  // a plain thread
    done = true;
    not_empty.broadcast();
  }
  for (auto& h : consumers) ASSERT_TRUE(h.join().ok());
  const long n = 3L * per;
  EXPECT_EQ(sum.load(), n * (n - 1) / 2);
  EXPECT_FALSE(overflow.load());
}

// A CondVar wait from a task always returns holding the mutex: after a signal, a deadline, a
// token, and the shutdown (while a fiber holds the mutex, so the re-lock waits); EPERM without it.
TEST(TaskTest, ACondVarWaitReturnsHoldingTheMutex) {
  Mutex mu;
  CondVar cv;
  std::atomic<int> outcomes{0};
  {
    Runtime rt({.workers = 2});
    auto h = rt.spawn_task([&]() -> Task<> {
      EXPECT_EQ(co_await cv.async_wait(mu), std::errc::operation_not_permitted);
      EXPECT_TRUE(co_await mu.async_lock());
      EXPECT_EQ(co_await cv.async_wait(mu, {.deadline = SyncClock::now() + 5ms}),
                std::errc::timed_out);
      EXPECT_EQ(co_await mu.async_lock(), std::errc::resource_deadlock_would_occur);  // held
      CancellationSource source;
      CancellationToken token = source.token();
      source.cancel();
      EXPECT_EQ(co_await cv.async_wait(mu, {.cancel = &token}), std::errc::operation_canceled);
      EXPECT_TRUE(mu.unlock().ok());  // held: the unlock is ours
    });
    ASSERT_TRUE(h.join().ok());
    // Shutdown: a task parked in the wait, a fiber holding the mutex (until it is interrupted).
    Event waiting, holding;
    rt.spawn_task([&]() -> Task<> {
        EXPECT_TRUE(co_await mu.async_lock());
        waiting.set();
        Result<void> r = co_await cv.async_wait(mu);  // the shutdown ends it
        if (r == std::errc::operation_canceled && mu.unlock().ok()) outcomes.fetch_add(1);
      }).detach();
    ASSERT_TRUE(waiting.wait().ok());
    rt.spawn([&] {
        mu.lock();  // once the task's wait released it
        holding.set();
        (void)this_fiber::sleep_for(1h);  // until the shutdown interrupts it
        (void)mu.unlock();
        outcomes.fetch_add(1);
      }).detach();
    ASSERT_TRUE(holding.wait().ok());
  }
  EXPECT_EQ(outcomes.load(), 2);
}

TEST_P(TaskWorkersTest, SemaphorePermitsPassBetweenTasksAndFibers) {
  Runtime rt({.workers = GetParam()});
  Semaphore sem(2);
  std::atomic<int> inside{0}, most{0};
  const int per = 300 * StressScale();
  auto enter = [&] {
    int now = inside.fetch_add(1) + 1;
    int m = most.load();
    while (now > m && !most.compare_exchange_weak(m, now)) {
    }
  };
  std::vector<JoinHandle<void>> hs;
  for (int k = 0; k < 3; ++k) {
    hs.push_back(rt.spawn_task([&]() -> Task<> {
      for (int i = 0; i < per; ++i) {
        EXPECT_TRUE(co_await sem.async_acquire());
        enter();
        co_await this_task::yield();
        inside.fetch_sub(1);
        sem.release();
      }
    }));
    hs.push_back(rt.spawn([&] {
      for (int i = 0; i < per; ++i) {
        ASSERT_TRUE(sem.acquire().ok());
        enter();
        this_fiber::yield();
        inside.fetch_sub(1);
        sem.release();
      }
    }));
  }
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_LE(most.load(), 2);
  EXPECT_EQ(sem.available(), 2);
}

TEST_P(TaskWorkersTest, TasksAndFibersJoinEachOther) {
  Runtime rt({.workers = GetParam()});
  auto h = rt.spawn_task([&rt]() -> Task<int> {
    JoinHandle<int> fiber = rt.spawn([] {
      this_fiber::sleep_for(1ms);
      return 20;
    });
    int from_fiber = *co_await fiber;
    // A fiber that joins a task.
    JoinHandle<int> inner = rt.spawn_task(Add(1, 1));
    JoinHandle<int> joiner = rt.spawn([h = std::move(inner)]() mutable { return *h.join(); });
    co_return from_fiber + *co_await joiner.async_join({.deadline = SyncClock::now() + 1h});
  });
  EXPECT_EQ(*h.join(), 22);
}

// Rounds of a Barrier met by tasks and fibers alike: each round has exactly one leader, and no
// party starts a round before every party finished the one before.
TEST_P(TaskWorkersTest, TasksAndFibersMeetAtABarrier) {
  Runtime rt({.workers = GetParam()});
  constexpr int kEach = 8;
  const int rounds = 50 * StressScale();
  Barrier barrier(2 * kEach);
  std::atomic<int> leaders{0};
  std::vector<std::atomic<int>> arrived(static_cast<std::size_t>(rounds));
  std::atomic<bool> early{false};
  auto check = [&](int round) {
    if (round > 0 && arrived[static_cast<std::size_t>(round - 1)].load() != 2 * kEach) {
      early = true;
    }
    arrived[static_cast<std::size_t>(round)].fetch_add(1);
  };
  std::vector<JoinHandle<void>> hs;
  for (int i = 0; i < kEach; ++i) {
    hs.push_back(rt.spawn_task([&]() -> Task<> {
      for (int round = 0; round < rounds; ++round) {
        check(round);
        Result<bool> leader = co_await barrier.async_arrive_and_wait();
        EXPECT_TRUE(leader.ok());
        if (leader.ok() && *leader) leaders.fetch_add(1);
      }
    }));
    hs.push_back(rt.spawn([&] {
      for (int round = 0; round < rounds; ++round) {
        check(round);
        Result<bool> leader = barrier.arrive_and_wait();
        ASSERT_TRUE(leader.ok());
        if (*leader) leaders.fetch_add(1);
      }
    }));
  }
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_EQ(leaders.load(), rounds);
  EXPECT_FALSE(early.load());
}

// A task that gives up at a Barrier withdraws its arrival: the round then needs a full set again.
TEST(TaskTest, ATaskThatGivesUpAtABarrierWithdrawsItsArrival) {
  Runtime rt({.workers = 2});
  Barrier barrier(2);
  auto h = rt.spawn_task([&]() -> Task<> {
    EXPECT_EQ(co_await barrier.async_arrive_and_wait({.deadline = SyncClock::now() + 5ms}),
              std::errc::timed_out);
    CancellationSource source;
    CancellationToken token = source.token();
    source.cancel_after(2ms);
    EXPECT_EQ(co_await barrier.async_arrive_and_wait({.cancel = &token}),
              std::errc::operation_canceled);
    // Both earlier arrivals were taken back: with one more party, this one waits, then leads
    // or follows.
    auto other = Runtime::current()->spawn([&] {
      Result<bool> r = barrier.arrive_and_wait();
      ASSERT_TRUE(r.ok());
    });
    Result<bool> mine = co_await barrier.async_arrive_and_wait();
    EXPECT_TRUE(mine.ok());
    EXPECT_TRUE(co_await other);
  });
  ASSERT_TRUE(h.join().ok());
}

// Timer and Ticker from tasks: a wait returns once the timer fires (at once when it has), a
// reset to an earlier deadline wakes it, a stop keeps it waiting (its own deadline ends it), a
// token ends it; ticks come in their schedule's order, each taken once by tasks and fibers.
TEST_P(TaskWorkersTest, TimersAndTickersFromTasks) {
  Runtime rt({.workers = GetParam()});
  auto h = rt.spawn_task([&]() -> Task<> {
    Timer soon(2ms);
    EXPECT_TRUE(co_await soon.async_wait());
    EXPECT_TRUE(soon.fired());
    EXPECT_TRUE(co_await soon.async_wait());  // a fired Timer stays fired
    Timer later(1h);
    auto resetter = Runtime::current()->spawn([&] {
      this_fiber::sleep_for(2ms);
      (void)later.reset(SyncClock::now());  // earlier: wakes the waiting task
    });
    EXPECT_TRUE(co_await later.async_wait());
    EXPECT_TRUE(co_await resetter);
    Timer stopped(1ms);
    (void)stopped.stop();
    EXPECT_EQ(co_await stopped.async_wait({.deadline = SyncClock::now() + 5ms}),
              std::errc::timed_out);
    CancellationSource source;
    CancellationToken token = source.token();
    source.cancel_after(2ms);
    EXPECT_TRUE(co_await later.async_wait({.cancel = &token}));  // fired: at once
    Timer armed(1h);
    EXPECT_EQ(co_await armed.async_wait({.cancel = &token}), std::errc::operation_canceled);
  });
  ASSERT_TRUE(h.join().ok());

  // Ticks taken by two tasks and a fiber: each scheduled tick is taken once (the takers still
  // waiting when the count is reached take one more each).
  Ticker ticker(500us);
  constexpr int kTicks = 30;
  std::atomic<int> taken{0};
  std::mutex mu;  // never held across a wait (a task may not block on a weft Mutex)
  std::vector<SyncClock::time_point> ticks;
  auto take = [&](Result<SyncClock::time_point> t) {
    EXPECT_TRUE(t.ok());
    if (!t.ok()) return false;
    std::lock_guard<std::mutex> lock(mu);
    ticks.push_back(*t);
    return taken.fetch_add(1) + 1 < kTicks;
  };
  std::vector<JoinHandle<void>> takers;
  for (int i = 0; i < 2; ++i) {
    takers.push_back(rt.spawn_task([&]() -> Task<> {
      while (taken.load() < kTicks && take(co_await ticker.async_tick())) {
      }
    }));
  }
  takers.push_back(rt.spawn([&] {
    while (taken.load() < kTicks && take(ticker.tick())) {
    }
  }));
  for (auto& t : takers) ASSERT_TRUE(t.join().ok());
  EXPECT_GE(ticks.size(), static_cast<std::size_t>(kTicks));
  std::sort(ticks.begin(), ticks.end());
  EXPECT_TRUE(std::adjacent_find(ticks.begin(), ticks.end()) == ticks.end()) << "a tick twice";
  Ticker refused(0s);
  auto r = rt.spawn_task(
      [&]() -> Task<> { EXPECT_EQ(co_await refused.async_tick(), std::errc::invalid_argument); });
  ASSERT_TRUE(r.join().ok());
}

// this_task::call_blocking runs its function off the worker: on one worker, a task's blocking
// call waits for a value that another task sends only once it runs, which it could not if the
// call held the worker. Results and exceptions come back; a fiber and a coroutine that is not a
// task get call_blocking's behaviour.
TEST(TaskTest, CallBlockingFromATaskLeavesTheWorkerFree) {
  Runtime rt({.workers = 1});
  std::promise<int> promise;
  std::future<int> future = promise.get_future();
  auto waiter = rt.spawn_task([&]() -> Task<int> {
    co_return co_await this_task::call_blocking([&] { return future.get(); });
  });
  auto sender = rt.spawn_task([&]() -> Task<> {
    co_await this_task::yield();
    promise.set_value(42);
    co_return;
  });
  EXPECT_EQ(*waiter.join(), 42);
  ASSERT_TRUE(sender.join().ok());
  auto thrower = rt.spawn_task([&]() -> Task<std::string> {
    try {
      co_await this_task::call_blocking([] { throw std::runtime_error("from a blocking thread"); });
    } catch (const std::runtime_error& e) {
      co_return e.what();
    }
    co_return "not thrown";
  });
  EXPECT_EQ(*thrower.join(), "from a blocking thread");
  // Many at once, on 2 workers: every call's own result.
  Runtime two({.workers = 2});
  std::vector<JoinHandle<int>> hs;
  for (int i = 0; i < 64; ++i) {
    hs.push_back(two.spawn_task([i]() -> Task<int> {
      std::thread::id caller = std::this_thread::get_id();
      int v = co_await this_task::call_blocking([i, caller] {
        EXPECT_NE(std::this_thread::get_id(), caller);  // not on the task's worker
        std::this_thread::sleep_for(1ms);
        return i * i;
      });
      co_return v;
    }));
  }
  for (int i = 0; i < 64; ++i) EXPECT_EQ(*hs[static_cast<std::size_t>(i)].join(), i * i);
  // From a fiber (call_blocking) and from a plain thread (inline).
  auto fiber = two.spawn([] {
    int v = 0;
    [&]() -> Eager { v = co_await this_task::call_blocking([] { return 7; }); }();
    EXPECT_EQ(v, 7);
  });
  ASSERT_TRUE(fiber.join().ok());
}

// With no blocking thread (max_blocking_threads 0), and in a simulated runtime, a task's
// call_blocking runs its function on a fiber of its own: weft's blocking calls inside it (a
// nested call_blocking, a sleep, a channel) park that fiber, as they would in a fiber's
// call_blocking run inline. A fiber's call_blocking with no thread runs inline (it once hung).
TEST(TaskTest, CallBlockingWithoutBlockingThreadsRunsOnAFiber) {
  auto body = [](Channel<int>& ch) {
    return [&ch] {
      (void)this_fiber::sleep_for(1ms);
      int v = call_blocking([] { return 3; });  // nested: inline on that fiber
      Result<int> got = ch.recv();
      return v + (got.ok() ? *got : -1);
    };
  };
  {
    Runtime rt({.workers = 1, .max_blocking_threads = 0});
    Channel<int> ch(1);
    auto h = rt.spawn_task(
        [&]() -> Task<int> { co_return co_await this_task::call_blocking(body(ch)); });
    auto sender = rt.spawn_task([&]() -> Task<> { (void)co_await ch.async_send(4); });
    EXPECT_EQ(*h.join(), 7);
    ASSERT_TRUE(sender.join().ok());
    EXPECT_EQ(*rt.spawn([] { return call_blocking([] { return 5; }); }).join(), 5);
  }
  {
    Runtime rt({.workers = 1, .simulation = SimulationOptions{.seed = 7}});
    Channel<int> ch(1);
    int v = rt.block_on([&] {
      auto h = rt.spawn_task(
          [&]() -> Task<int> { co_return co_await this_task::call_blocking(body(ch)); });
      EXPECT_TRUE(ch.send(4).ok());
      return *h.join();
    });
    EXPECT_EQ(v, 7);
  }
}

// No blocking thread, and the fiber that would run the call cannot start either (its stack is
// refused): the await throws why, and the function never ran.
TEST(TaskTest, CallBlockingThatCanRunNowhereThrows) {
  // A stack class no other test uses, so that no cached stack hides the refused mapping.
  Runtime rt({.workers = 1, .stack_size = std::size_t{5} << 20, .max_blocking_threads = 0});
  bool ran = false;
  auto h = rt.spawn_task([&]() -> Task<std::string> {
    const fault::Config before = fault::Current();
    fault::Configure({.rate = 1.0, .seed = 3, .hard = true});
    std::string why = "no exception";
    try {
      co_await this_task::call_blocking([&] { ran = true; });
    } catch (const std::system_error& e) {
      why = e.code().message();
    }
    fault::Configure(before);
    co_return why;
  });
  EXPECT_EQ(*h.join(), std::make_error_code(std::errc::not_enough_memory).message());
  EXPECT_FALSE(ran);
}

// A runtime destroyed while a task waits in call_blocking: the call is not cancelled, the
// destructor waits for it, and the task gets its result.
TEST(TaskTest, ShutdownWaitsForATasksBlockingCall) {
  std::atomic<int> got{0};
  std::atomic<bool> release{false};
  std::atomic<bool> started{false};
  std::thread releaser;
  {
    Runtime rt({.workers = 1});
    rt.spawn_task([&]() -> Task<> {
        got = co_await this_task::call_blocking([&] {
          started = true;
          while (!release.load()) std::this_thread::sleep_for(1ms);
          return 5;
        });
      }).detach();
    while (!started.load()) std::this_thread::sleep_for(1ms);
    releaser = std::thread([&] {
      std::this_thread::sleep_for(5ms);
      release = true;
    });
  }
  releaser.join();
  EXPECT_EQ(got.load(), 5);
}

// No memory for a task's state or its coroutine frame: spawn_task throws std::bad_alloc and
// leaves nothing behind (ASan); a child's frame that cannot be made throws in its parent, whose
// joiner gets the exception. The runtime keeps serving after each.
TEST(TaskTest, NoMemoryForATaskIsAnExceptionAndTheRuntimeKeepsServing) {
  using scheduler_internal::g_fail_spawn_states;
  Runtime rt({.workers = 2});
  for (int fail = 1; fail <= 2; ++fail) {  // 1: the task's state; 2: its coroutine frame
    g_fail_spawn_states = fail;
    EXPECT_THROW((void)rt.spawn_task([]() -> Task<int> { co_return 1; }), std::bad_alloc);
    EXPECT_EQ(g_fail_spawn_states.load(), 0);
  }
  bool caught = false;
  auto probe = rt.spawn_task([&]() -> Task<int> {
    g_fail_spawn_states = 1;
    try {
      (void)co_await Add(1, 2);  // its frame: no memory
    } catch (const std::bad_alloc&) {
      caught = true;
    }
    co_return co_await Add(20, 22);  // and then there is
  });
  EXPECT_EQ(*probe.join(), 42);
  EXPECT_TRUE(caught);
  auto uncaught = rt.spawn_task([&]() -> Task<int> {
    g_fail_spawn_states = 1;
    co_return co_await Add(1, 2);
  });
  EXPECT_THROW((void)uncaught.join(), std::bad_alloc);
  g_fail_spawn_states = 0;
  EXPECT_EQ(*rt.spawn_task([]() -> Task<int> { co_return co_await Add(2, 3); }).join(), 5);
}

TEST(TaskTest, DeadlinesAndCancellationEndWaits) {
  Runtime rt({.workers = 2});
  Channel<int> never;
  Mutex held;
  CancellationSource source;
  auto holder = rt.spawn([&] {
    MutexLock hold(held);
    CancellationToken token = source.token();
    (void)this_fiber::sleep_for(1h, &token);  // until cancelled below
  });
  auto h = rt.spawn_task([&]() -> Task<> {
    auto soon = [] { return WaitOptions{.deadline = SyncClock::now() + 5ms}; };
    Result<int> r = co_await never.async_recv(soon());
    EXPECT_EQ(r, std::errc::timed_out);
    EXPECT_EQ(co_await never.async_send(1, soon()), std::errc::timed_out);
    while (held.try_lock() && held.unlock().ok()) co_await this_task::yield();  // until held
    EXPECT_EQ(co_await held.async_lock(soon()), std::errc::timed_out);
    Event e;
    EXPECT_EQ(co_await e.async_wait(soon()), std::errc::timed_out);
    // An awaiter made with options that are gone by the time it is awaited keeps them (its park
    // holds the deadline and the token's address).
    {
      auto later = e.async_wait(soon());
      auto lock_later = held.async_lock(soon());
      auto recv_later = never.async_recv(soon());
      EXPECT_EQ(co_await later, std::errc::timed_out);
      EXPECT_EQ(co_await lock_later, std::errc::timed_out);
      EXPECT_EQ(co_await recv_later, std::errc::timed_out);
    }
    // A token cancelled while the task waits (from the other worker's fiber).
    CancellationSource mine;
    CancellationToken token = mine.token();
    auto canceller = Runtime::current()->spawn([&mine] {
      this_fiber::sleep_for(2ms);
      mine.cancel();
    });
    EXPECT_EQ(co_await never.async_recv({.cancel = &token}), std::errc::operation_canceled);
    EXPECT_EQ(co_await this_task::sleep_for(1h, &token), std::errc::operation_canceled);
    EXPECT_TRUE(co_await canceller);
    // Past deadlines and zero sleeps do not suspend at all.
    EXPECT_TRUE(co_await this_task::sleep_for(0s));
    EXPECT_EQ(co_await never.async_recv({.deadline = SyncClock::now() - 1s}), std::errc::timed_out);
    source.cancel();  // the holder lets go
    EXPECT_TRUE(co_await held.async_lock());
    EXPECT_EQ(co_await held.async_lock(), std::errc::resource_deadlock_would_occur);
    EXPECT_TRUE(held.unlock().ok());
  });
  ASSERT_TRUE(h.join().ok());
  ASSERT_TRUE(holder.join().ok());
}

TEST_P(TaskWorkersTest, SelectFromTasksOverChannelsTimersAndTokens) {
  Runtime rt({.workers = GetParam()});
  Channel<int> a, b(1);
  CancellationSource source;
  const int n = 500 * StressScale();
  // A fiber feeds a and b in turn; a task selects over both until it has n values.
  auto feeder = rt.spawn([&] {
    for (int i = 0; i < n; ++i) ASSERT_TRUE((i % 2 == 0 ? a : b).send(int{i}).ok());
  });
  auto h = rt.spawn_task([&]() -> Task<long> {
    long sum = 0;
    for (int got = 0; got < n;) {
      int va = 0, vb = 0;
      SelectCase cases[] = {a.recv_case(va), b.recv_case(vb)};
      Result<SelectResult> r = co_await async_select(cases);
      if (!r || !r->ok) co_return -1;
      sum += r->index == 0 ? va : vb;
      ++got;
    }
    // Nothing ready: the default; then a deadline; then a token case cancelled by a fiber.
    int v = 0;
    SelectCase one[] = {a.recv_case(v)};
    Result<SelectResult> none = co_await async_select(one, {}, /*has_default=*/true);
    if (!none || none->index != -1) co_return -2;
    none = co_await async_select(one, {.deadline = SyncClock::now() + 5ms});
    if (none != std::errc::timed_out) co_return -3;
    CancellationToken token = source.token();
    SelectCase with_token[] = {a.recv_case(v), cancel_case(token)};
    auto canceller = Runtime::current()->spawn([&] {
      this_fiber::sleep_for(2ms);
      source.cancel();
    });
    Result<SelectResult> by_token = co_await async_select(with_token);
    if (!by_token || by_token->index != 1) co_return -4;
    (void)co_await canceller;
    // A timer case.
    Timer timer(SyncClock::now() + 3ms);
    SelectCase with_timer[] = {a.recv_case(v), timer.select_case()};
    Result<SelectResult> by_timer = co_await async_select(with_timer);
    if (!by_timer || by_timer->index != 1) co_return -5;
    // No cases: waits for its deadline.
    Result<SelectResult> empty = co_await async_select({}, {.deadline = SyncClock::now() + 1ms});
    if (empty != std::errc::timed_out) co_return -6;
    co_return sum;
  });
  ASSERT_TRUE(feeder.join().ok());
  EXPECT_EQ(*h.join(), long{n} * (n - 1) / 2);
}

// A timer that comes due while a task yields in a loop (and nothing else is runnable) wakes its
// sleeper at the yielder's next turn or so: a task's yield goes back through the worker loop,
// which pops due timers before it serves the yield ring. (Served first, the timer waited for
// the fairness pass, about 60 turns.)
TEST(TaskTest, ATimerDueWhileATaskYieldsWakesItsSleeperAtOnce) {
  Runtime rt({.workers = 1});
  std::atomic<bool> woken{false};
  std::atomic<std::int64_t> due_ns{0};
  auto sleeper = rt.spawn_task([&]() -> Task<> {
    const SyncClock::time_point due = SyncClock::now() + 2ms;
    due_ns = due.time_since_epoch().count();
    EXPECT_TRUE(co_await this_task::sleep_until(due));
    woken = true;
  });
  auto yielder = rt.spawn_task([&]() -> Task<int> {
    int turns_late = 0;  // turns of this task after the sleeper's deadline, before it woke
    while (!woken.load()) {
      const std::int64_t due = due_ns.load();
      if (due != 0 && SyncClock::now().time_since_epoch().count() > due) ++turns_late;
      co_await this_task::yield();
    }
    co_return turns_late;
  });
  ASSERT_TRUE(sleeper.join().ok());
  Result<int> late = yielder.join();
  ASSERT_TRUE(late.ok());
  EXPECT_LE(*late, 3);
}

TEST(TaskTest, SleepsWakeInDeadlineOrder) {
  Runtime rt({.workers = 1});
  std::vector<int> order;
  Mutex mu;
  std::vector<JoinHandle<void>> hs;
  for (int i : {3, 1, 2}) {
    hs.push_back(rt.spawn_task([&, i]() -> Task<> {
      EXPECT_TRUE(co_await this_task::sleep_for(i * 20ms));
      EXPECT_TRUE(co_await mu.async_lock());
      order.push_back(i);
      EXPECT_TRUE(mu.unlock().ok());
    }));
  }
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

// Shutdown with tasks parked on everything: each wait ends with operation_canceled, the tasks
// return, and the runtime goes (ASan checks that nothing leaks).
TEST(TaskTest, ShutdownEndsTheWaitsOfParkedTasks) {
  std::atomic<int> cancelled{0};
  Channel<int> ch;
  Event never;
  Semaphore none(0);
  Mutex held;
  Barrier crowd(1000);
  Timer unarmed;
  {
    Runtime rt({.workers = 2});
    Event locked;
    rt.spawn([&] {
        held.lock();
        locked.set();
      }).detach();  // ends holding it, so lockers wait for good
    ASSERT_TRUE(locked.wait().ok());
    for (int i = 0; i < 50; ++i) {
      rt.spawn_task([&]() -> Task<> {
          if ((co_await ch.async_recv()) == std::errc::operation_canceled) cancelled.fetch_add(1);
        }).detach();
      rt.spawn_task([&]() -> Task<> {
          if ((co_await never.async_wait()) == std::errc::operation_canceled)
            cancelled.fetch_add(1);
        }).detach();
      rt.spawn_task([&]() -> Task<> {
          if ((co_await none.async_acquire()) == std::errc::operation_canceled) {
            cancelled.fetch_add(1);
          }
        }).detach();
      rt.spawn_task([&]() -> Task<> {
          if ((co_await this_task::sleep_for(1h)) == std::errc::operation_canceled) {
            cancelled.fetch_add(1);
          }
        }).detach();
      rt.spawn_task([&]() -> Task<> {
          if ((co_await held.async_lock()) == std::errc::operation_canceled) cancelled.fetch_add(1);
        }).detach();
      rt.spawn_task([&]() -> Task<> {
          if ((co_await crowd.async_arrive_and_wait()) == std::errc::operation_canceled) {
            cancelled.fetch_add(1);
          }
        }).detach();
      rt.spawn_task([&]() -> Task<> {
          if ((co_await unarmed.async_wait()) == std::errc::operation_canceled) {
            cancelled.fetch_add(1);
          }
        }).detach();
    }
    // Every task parked: the channel's and the lists' queues hold them (the sleeps and locks
    // are left to the runtime's count).
    while (ch.waiters() < 50) std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(cancelled.load(), 350);
}

// A token cancelled on another thread while the task's wait ends (its callback may still run
// as the task deregisters): the task must not wait for the callback (it cannot block), and
// nothing is lost. Each round races a cancel against a send.
TEST(TaskTest, ACancelCallbackStillRunningAsTheWaitEnds) {
  Runtime rt({.workers = 2});
  Channel<int> ch(1);
  const int rounds = (kTsan ? 2000 : 20000) * StressScale();
  std::atomic<int> parked_round{-1}, done_round{-1};
  std::vector<std::unique_ptr<CancellationSource>> sources;
  for (int i = 0; i < rounds; ++i) sources.push_back(std::make_unique<CancellationSource>());
  auto h = rt.spawn_task([&]() -> Task<int> {
    int received = 0;
    for (int i = 0; i < rounds; ++i) {
      CancellationToken token = sources[i]->token();
      parked_round.store(i);
      if (co_await ch.async_recv({.cancel = &token})) ++received;
      done_round.store(i);
    }
    co_return received;
  });
  std::atomic<int> sent{0};
  std::thread canceller([&] {
    for (int i = 0; i < rounds; ++i) {
      while (parked_round.load() < i) std::this_thread::yield();
      sources[i]->cancel();  // races the send below
      while (done_round.load() < i) std::this_thread::yield();
    }
  });
  for (int i = 0; i < rounds; ++i) {
    while (parked_round.load() < i) std::this_thread::yield();
    if (ch.try_send(int{i}).ok()) sent.fetch_add(1);
    while (done_round.load() < i) std::this_thread::yield();
  }
  canceller.join();
  const int received = *h.join();
  // Every value sent was received, now or by a later round (a value may wait in the channel).
  EXPECT_EQ(received + static_cast<int>(ch.size()), sent.load());
}

// A callable aligned beyond the slab's 16 bytes: the task's state, which keeps it, is allocated
// aligned for it (UBSan checks).
struct alignas(64) Aligned {
  int v = 0;
};

TEST(TaskTest, AnOverAlignedCallableIsKeptAligned) {
  Runtime rt({.workers = 2});
  std::vector<JoinHandle<int>> hs;
  for (int i = 0; i < 64; ++i) {
    hs.push_back(rt.spawn_task([a = Aligned{i}]() -> Task<int> {
      co_await this_task::yield();
      co_return a.v;
    }));
  }
  for (int i = 0; i < 64; ++i) EXPECT_EQ(*hs[static_cast<std::size_t>(i)].join(), i);
}

TEST(TaskTest, AStackSizeDoesNotApplyToATask) {
  Runtime rt({.workers = 1});
  FiberOptions options{.stack_size = std::size_t{1} << 30, .name = "no stack"};
  JoinHandle<int> h = rt.spawn_task(Add(1, 2), options);
  EXPECT_EQ(*h.join(), 3);
}

// A task's record is smaller than a fiber's and keeps its name out of line, made the first time a
// named task takes the record: names show in dumps and this_fiber::name, cut at 31 bytes, and
// a nameless task that reuses a named one's record is nameless. Fibers and tasks spawned in
// turns (records of two kinds, from two free lists) keep theirs apart.
TEST(TaskTest, NamesOfTasksAndFibersInTurns) {
  Runtime rt({.workers = 1});
  const std::string long_name(40, 'x');
  std::vector<JoinHandle<std::string>> tasks;
  std::vector<JoinHandle<std::string>> fibers;
  for (int round = 0; round < 3; ++round) {
    Event go;
    for (int i = 0; i < 100; ++i) {
      // Named in round 0 (a long name for some), nameless in round 1, named again in round 2.
      std::string name =
          round == 1 ? std::string() : (i % 10 == 0 ? long_name : "t" + std::to_string(i));
      tasks.push_back(rt.spawn_task(
          [&go]() -> Task<std::string> {
            (void)co_await go.async_wait();
            co_return std::string(this_fiber::name());
          },
          {.name = name}));
      fibers.push_back(rt.spawn(
          [&go] {
            (void)go.wait();
            return std::string(this_fiber::name());
          },
          {.name = round == 1 ? std::string_view() : std::string_view("f")}));
    }
    if (round == 0) {
      // Parked: the dump lists each by its name.
      std::string dump;
      for (int i = 0; i < 1000; ++i) {
        dump = rt.dump_fibers();
        if (dump.find("\"t99\" parked") != std::string::npos) break;
        std::this_thread::sleep_for(1ms);
      }
      EXPECT_NE(dump.find("\"t99\" parked on Event"), std::string::npos) << dump;
      EXPECT_NE(dump.find("\"" + std::string(31, 'x') + "\" parked"), std::string::npos) << dump;
      EXPECT_NE(dump.find("\"f\" parked on Event"), std::string::npos) << dump;
    }
    go.set();
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      std::string want =
          round == 1 ? "" : (i % 10 == 0 ? std::string(31, 'x') : "t" + std::to_string(i));
      EXPECT_EQ(*tasks[i].join(), want) << "round " << round << ", task " << i;
      EXPECT_EQ(*fibers[i].join(), round == 1 ? "" : "f") << "round " << round << ", fiber " << i;
    }
    tasks.clear();
    fibers.clear();
  }
}

// Children awaited inline that finish without suspending: the worker's stack stays flat at any
// optimisation level (the transfers go through the worker, not nested resumes).
TEST(TaskTest, ManyChildrenAwaitedInlineDoNotGrowTheStack) {
  Runtime rt({.workers = 1});
  const int n = 200000;
  auto h = rt.spawn_task([n]() -> Task<long> {
    long sum = 0;
    for (int i = 0; i < n; ++i) sum += co_await Add(i, 1) - i;
    co_return sum;
  });
  EXPECT_EQ(*h.join(), n);
}

TEST(TaskTest, AwaitingAnEmptyTaskThrows) {
  Runtime rt({.workers = 1});
  auto h = rt.spawn_task([]() -> Task<bool> {
    Task<int> t = Add(1, 1);
    Task<int> moved = std::move(t);
    bool threw = false;
    try {
      (void)co_await std::move(t);
    } catch (const std::logic_error&) {
      threw = true;
    }
    co_return threw && (co_await std::move(moved)) == 2;
  });
  EXPECT_TRUE(*h.join());
}

// A value whose move assignment (a select case's delivery) is slow and throws: the sender's
// claim of the select is undone after the select may have looked at it.
struct SlowThrowing {
  int v = 0;
  SlowThrowing() = default;
  explicit SlowThrowing(int x) : v(x) {}
  SlowThrowing(SlowThrowing&& o) noexcept(false) : v(o.v) {}
  SlowThrowing& operator=(SlowThrowing&&) {
    std::this_thread::sleep_for(30ms);  // the select's deadline passes meanwhile
    throw std::runtime_error("move");
  }
};

// A sender claims a waiting select's case, then its move throws and the select is open again:
// a select that gives up meanwhile must not take the undone claim as its outcome (it once
// returned index -1). Both forms.
TEST(TaskTest, ASelectClaimUndoneByAThrowingMoveIsNotTheOutcome) {
  Runtime rt({.workers = 2});
  for (int form = 0; form < 2; ++form) {  // 0: async_select in a task; 1: select in a fiber
    Channel<SlowThrowing> ch;
    std::thread sender([&] {
      while (ch.waiters() == 0) std::this_thread::yield();
      try {
        (void)ch.send(SlowThrowing(7));
      } catch (const std::runtime_error&) {
      }
    });
    Result<SelectResult> r = std::errc::io_error;
    if (form == 0) {
      r = *rt.spawn_task([&]() -> Task<Result<SelectResult>> {
               SlowThrowing out;
               SelectCase c[] = {ch.recv_case(out)};
               co_return co_await async_select(c, {.deadline = SyncClock::now() + 10ms});
             }).join();
    } else {
      r = *rt.spawn([&] {
               SlowThrowing out;
               SelectCase c[] = {ch.recv_case(out)};
               return select(c, {.deadline = SyncClock::now() + 10ms});
             }).join();
    }
    sender.join();
    EXPECT_EQ(r, std::errc::timed_out) << (form == 0 ? "async_select" : "select");
  }
}

// A task that destroys a CancellationCallback while its callback runs parked on the task's own
// worker would wait for good (a task cannot park): it aborts with a message instead.
TEST(TaskDeathTest, DeregisteringWhileTheCallbackWaitsForTheWorkerAborts) {
  GTEST_FLAG_SET(death_test_style, DeathTestStyle());
  EXPECT_DEATH(
      {
        Runtime rt({.workers = 1, .stuck_threshold = std::chrono::milliseconds(0)});
        CancellationSource source;
        Event in_callback;
        auto cb = std::make_unique<CancellationCallback>(source.token(), [&] {
          in_callback.set();
          (void)this_fiber::sleep_for(50ms);  // parks the cancelling fiber on the only worker
        });
        auto canceller = rt.spawn([&] { source.cancel(); });
        auto task = rt.spawn_task([&]() -> Task<> {
          EXPECT_TRUE(co_await in_callback.async_wait());
          cb.reset();  // the callback runs, parked: Deregister must wait for it
        });
        (void)task.join();
      },
      "a task has waited 1 s for a cancellation callback");
}

Eager ReceiveTwice(Channel<int>& ch, int& sum) {
  sum += *co_await ch.async_recv();
  sum += *co_await ch.async_recv({.deadline = SyncClock::now() + 1h});
}

TEST(TaskTest, AwaitablesBlockAFiberThatIsNotATask) {
  Runtime rt({.workers = 2});
  Channel<int> ch;
  int sum = 0;
  auto consumer = rt.spawn([&] { ReceiveTwice(ch, sum); });
  auto producer = rt.spawn([&] {
    ASSERT_TRUE(ch.send(20).ok());
    ASSERT_TRUE(ch.send(22).ok());
  });
  ASSERT_TRUE(producer.join().ok());
  ASSERT_TRUE(consumer.join().ok());
  EXPECT_EQ(sum, 42);
}

// A blocking wait from a task that ends before it would wait: its token cancelled already, or
// the runtime shutting down. It returns operation_canceled, as from a fiber, whichever
// primitive (those whose blocking waits queue their Waiter's own node too, which a task's
// record does not have: its worker thread's serves for the call).
TEST(TaskTest, ABlockingWaitThatEndsBeforeItWaitsReturnsCanceled) {
  Runtime rt({.workers = 1});
  CancellationSource src;
  src.cancel();
  CancellationToken tok = src.token();
  Mutex held;
  std::thread([&] { held.lock(); }).join();  // held by a gone thread
  Channel<int> ch;
  Event ev;
  Semaphore sem(0);
  WaitGroup wg;
  ASSERT_TRUE(wg.add(1).ok());
  Barrier barrier(2);
  auto h = rt.spawn_task([&]() -> Task<int> {
    const WaitOptions o{.cancel = &tok};
    int canceled = 0;
    for (std::errc e :
         {held.lock(o).error(), ch.recv(o).error(), ev.wait(o).error(), sem.acquire(o).error(),
          wg.wait(o).error(), barrier.arrive_and_wait(o).error()}) {
      canceled += e == std::errc::operation_canceled ? 1 : 0;
    }
    co_return canceled;
  });
  EXPECT_EQ(*h.join(), 6);
  Event never;
  std::atomic<int> canceled{0};
  {
    Runtime dying({.workers = 1});
    Event parked;
    dying
        .spawn_task([&]() -> Task<> {
          parked.set();
          (void)co_await this_task::sleep_for(1h);  // ended by the shutdown
          if (never.wait() == std::errc::operation_canceled) canceled.fetch_add(1);
          if (sem.acquire() == std::errc::operation_canceled) canceled.fetch_add(1);
        })
        .detach();
    ASSERT_TRUE(parked.wait().ok());
  }  // ~Runtime
  EXPECT_EQ(canceled.load(), 2);
}

// Deadlines at and next to the clock's ends (the worker's timer watch adds a grace to a new
// earliest deadline: saturating, or ubsan reports the overflow), from a task and a fiber.
TEST(TaskTest, DeadlinesAtTheClocksEndsWaitAsLongAsTheyMust) {
  Runtime rt({.workers = 2});
  for (SyncClock::time_point at :
       {SyncClock::time_point::max(), SyncClock::time_point::max() - std::chrono::nanoseconds(1),
        SyncClock::time_point::max() - std::chrono::microseconds(999)}) {
    Event go;
    auto task = rt.spawn_task(
        [&]() -> Task<bool> { co_return (co_await go.async_wait({.deadline = at})).ok(); });
    auto fiber = rt.spawn([&] { return go.wait({.deadline = at}).ok(); });
    std::this_thread::sleep_for(2ms);  // (either may already be parked: both must wait)
    go.set();
    EXPECT_TRUE(*task.join());
    EXPECT_TRUE(*fiber.join());
  }
  Event never;
  auto past = rt.spawn_task([&]() -> Task<bool> {
    co_return (co_await never.async_wait({.deadline = SyncClock::time_point::min()})) ==
        std::errc::timed_out;
  });
  EXPECT_TRUE(*past.join());
}

TEST(TaskDeathTest, ABlockingCallFromATaskAbortsWithAMessage) {
  GTEST_FLAG_SET(death_test_style, DeathTestStyle());
  EXPECT_DEATH(
      {
        Runtime rt({.workers = 1});
        Channel<int> ch;
        auto h = rt.spawn_task([&]() -> Task<> {
          (void)ch.recv();  // the blocking form
          co_return;
        });
        (void)h.join();
      },
      "called a blocking wait \\(Channel recv\\), which would block its worker");
  // The blocking forms of the primitives that queue their Waiter's own node (a task's record
  // has none: its worker thread's serves for the call) abort the same way.
  EXPECT_DEATH(
      {
        Runtime rt({.workers = 1});
        Event go;
        auto h = rt.spawn_task([&]() -> Task<> {
          (void)go.wait();
          co_return;
        });
        (void)h.join();
      },
      "called a blocking wait \\(Event\\), which would block its worker");
  EXPECT_DEATH(
      {
        Runtime rt({.workers = 1});
        auto h = rt.spawn_task([]() -> Task<> {
          this_fiber::yield();
          co_return;
        });
        (void)h.join();
      },
      "called this_fiber::yield");
}

}  // namespace
}  // namespace weft
