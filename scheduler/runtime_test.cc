// Tests of the runtime core: spawn/join (values, void, exceptions, deadlines), yields, sleeps,
// ids and names, many fibers, work spread across workers, and //sync primitives parking fibers.

#include "weft/scheduler/runtime.h"

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/sync/channel.h"
#include "weft/sync/coordination.h"
#include "weft/sync/mutex.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using ::weft::testing::kTsan;
using ::weft::testing::StressScale;
// Under TSan and ASan a context switch costs far more than the fib(20) the spread test measures
// (fiber annotations, fake stacks), so the count of fibs per worker stops measuring work: the
// worker that runs yield segments does switch work instead (measured 20/80 under ASan, 44/56
// without). The spread is checked in the other configurations.
constexpr bool kSwitchHeavySanitizer = ::weft::testing::kTsan || ::weft::testing::kAsan;

// The calling thread's id, read afresh (pthread_self is declared const: see context_test.cc).
[[gnu::noinline]] std::thread::id ThreadId() {
  asm volatile("" ::: "memory");
  return std::this_thread::get_id();
}

TEST(RuntimeTest, SpawnJoinValuesVoidAndExceptions) {
  Runtime rt({.workers = 2});
  EXPECT_EQ(rt.workers(), 2u);
  JoinHandle<int> h = rt.spawn([] { return 42; });
  Result<int> v = h.join();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 42);
  EXPECT_FALSE(h.joinable());
  EXPECT_EQ(h.join().error(), std::errc::invalid_argument);  // consumed exactly once
  std::atomic<bool> ran{false};
  ASSERT_TRUE(rt.spawn([&] { ran = true; }).join().ok());
  EXPECT_TRUE(ran);
  auto thrower = rt.spawn([]() -> int { throw std::runtime_error("boom"); });
  EXPECT_THROW((void)thrower.join(), std::runtime_error);
  EXPECT_EQ(rt.block_on([] { return 7; }), 7);
}

TEST(RuntimeTest, JoinWithADeadlineKeepsTheHandle) {
  Runtime rt({.workers = 2});
  Event release;
  auto h = rt.spawn([&] {
    (void)release.wait();
    return 5;
  });
  EXPECT_EQ(h.join({.deadline = SyncClock::now() + 10ms}).error(), std::errc::timed_out);
  EXPECT_TRUE(h.joinable());
  release.set();
  EXPECT_EQ(*h.join(), 5);
}

TEST(RuntimeTest, HundredFibersYieldAThousandTimesEach) {
  Runtime rt({.workers = 2});
  std::atomic<long> yields{0};
  std::vector<JoinHandle<void>> hs;
  for (int i = 0; i < 100; ++i) {
    hs.push_back(rt.spawn([&] {
      for (int k = 0; k < 1000; ++k) {
        this_fiber::yield();
        yields.fetch_add(1, std::memory_order_relaxed);
      }
    }));
  }
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_EQ(yields.load(), 100 * 1000);
}

TEST(RuntimeTest, FibersSleepWithoutBlockingTheirWorker) {
  Runtime rt({.workers = 1});  // one worker: sleeping fibers must not block each other
  std::atomic<int> woke{0};
  std::vector<JoinHandle<void>> hs;
  auto start = SyncClock::now();
  for (int i = 0; i < 1000; ++i) {
    hs.push_back(rt.spawn([&] {
      ASSERT_TRUE(this_fiber::sleep_for(5ms).ok());
      woke.fetch_add(1);
    }));
  }
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_EQ(woke.load(), 1000);
  EXPECT_GE(SyncClock::now() - start, 5ms);  // they did sleep
}

// Timed waits that race their releases across two workers: each wait either gets a permit or
// reports timed_out, never before its deadline (a timer left from an earlier wait of the same
// fiber must not pass for this wait's own), and no permit is lost or made up. Timer entries are
// reused between waits and workers, so this also runs that recycling under the sanitizers.
TEST(RuntimeTest, TimedWaitsTimeOutOnlyAtTheirDeadlineAndLoseNoPermit) {
  Runtime rt({.workers = 2});
  const int waits = 400 * StressScale();
  constexpr int kWaiters = 8;
  Semaphore sem(0);
  std::atomic<int> got{0}, early{0}, released{0};
  std::vector<JoinHandle<void>> hs;
  for (int i = 0; i < kWaiters; ++i) {
    hs.push_back(rt.spawn([&] {
      for (int k = 0; k < waits; ++k) {
        auto deadline = SyncClock::now() + std::chrono::microseconds(20 + k % 50);
        Result<void> r = sem.acquire({.deadline = deadline});
        if (r.ok()) {
          got.fetch_add(1);
        } else {
          ASSERT_EQ(r.error(), std::errc::timed_out);
          if (SyncClock::now() < deadline) early.fetch_add(1);
        }
      }
    }));
  }
  auto releaser = rt.spawn([&] {
    for (int k = 0; k < kWaiters * waits / 2; ++k) {
      sem.release(1);
      released.fetch_add(1);
      if (k % 3 == 0) this_fiber::yield();
      if (k % 64 == 0) (void)this_fiber::sleep_for(std::chrono::microseconds(30));
    }
  });
  ASSERT_TRUE(releaser.join().ok());
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_EQ(early.load(), 0);
  EXPECT_EQ(got.load() + sem.available(), released.load());
}

TEST(RuntimeTest, SleepsEndNoEarlierThanTheirDeadline) {
  // A sleep reads the clock once and then trusts its timer and the worker's clock floor: none
  // may end before its time, whatever its length (0 and past deadlines included) or mix.
  Runtime rt({.workers = 2});
  const int sleeps = 200 * StressScale();
  std::atomic<int> early{0};
  std::vector<JoinHandle<void>> hs;
  for (int i = 0; i < 8; ++i) {
    hs.push_back(rt.spawn([&, i] {
      for (int k = 0; k < sleeps; ++k) {
        auto d = std::chrono::microseconds((i * 7 + k * 13) % 60);
        if (k % 2 == 0) {
          auto start = std::chrono::steady_clock::now();
          ASSERT_TRUE(this_fiber::sleep_for(d).ok());
          if (std::chrono::steady_clock::now() - start < d) early.fetch_add(1);
        } else {
          auto when = std::chrono::steady_clock::now() + d - std::chrono::microseconds(20);
          ASSERT_TRUE(this_fiber::sleep_until(when).ok());
          if (std::chrono::steady_clock::now() < when) early.fetch_add(1);
        }
        if (k % 5 == 0) this_fiber::yield();
      }
    }));
  }
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_EQ(early.load(), 0);
  // A cancelled token wins over a deadline that has already passed.
  CancellationSource src;
  src.cancel();
  CancellationToken tok = src.token();
  auto r = rt.spawn(
      [&] { return this_fiber::sleep_until({}, &tok).error() == std::errc::operation_canceled; });
  EXPECT_TRUE(*r.join());
}

// A fiber that never switches (a CPU-bound loop) keeps its worker from popping its own timers.
// The idle worker pops them once they are overdue (RescueTimers): a sleep, then a timed wait,
// parked on the stuck worker each end while it is still stuck. The spinning fiber is pinned to
// the parked fiber's worker, so it starts only once that fiber has parked; it stops when the
// parked fiber has ended, or after a minute, so a regression fails instead of hanging.
TEST(RuntimeTest, AnIdleWorkerWakesTheTimersOfAWorkerStuckInOneFiber) {
  Runtime rt({.workers = 2});
  Semaphore never(0);
  struct Case {
    std::function<Result<void>()> wait;
    int expected;  // 0: ok, else the std::errc
  };
  const Case cases[] = {
      {[] { return this_fiber::sleep_for(1ms); }, 0},
      {[&] { return never.acquire({.deadline = SyncClock::now() + 1ms}); },
       static_cast<int>(std::errc::timed_out)},
  };
  for (const Case& c : cases) {
    std::atomic<int> where{-1};
    std::atomic<bool> ended{false};
    auto parked = rt.spawn([&] {
      where.store(this_fiber::worker_index());
      Result<void> r = c.wait();
      ended.store(true);
      return r.ok() ? 0 : static_cast<int>(r.error());  // Result<std::errc> would be ambiguous
    });
    while (where.load() < 0) std::this_thread::yield();
    auto spinner = rt.spawn(
        [&] {
          auto give_up = std::chrono::steady_clock::now() + 60s;
          while (!ended.load() && std::chrono::steady_clock::now() < give_up) {
          }
          return ended.load();
        },
        {.pinned_worker = where.load()});
    int e = *parked.join();
    EXPECT_TRUE(*spinner.join());
    EXPECT_EQ(e, c.expected);
  }
  EXPECT_NE(rt.stats_json().find("\"rescued\":"), std::string::npos);
}

TEST(RuntimeTest, IdsAndNames) {
  Runtime rt({.workers = 1});
  EXPECT_FALSE(this_fiber::in_fiber());
  EXPECT_EQ(this_fiber::id(), 0u);
  auto a = rt.spawn([] { return this_fiber::id(); }, {.name = "alpha"});
  auto b = rt.spawn([] { return std::string(this_fiber::name()); }, {.name = "beta"});
  std::uint64_t ida = *a.join();
  EXPECT_NE(ida, 0u);
  EXPECT_EQ(*b.join(), "beta");
}

TEST(RuntimeTest, ManyFibersAtOnce) {
  Runtime rt({.workers = 2, .stack_size = 16 << 10});
  const int n = kTsan ? 10000 : 100000;
  std::atomic<int> ran{0};
  std::vector<JoinHandle<void>> hs;
  hs.reserve(n);
  for (int i = 0; i < n; ++i) hs.push_back(rt.spawn([&] { ran.fetch_add(1); }));
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_EQ(ran.load(), n);
}

int Fib(int n) { return n < 2 ? n : Fib(n - 1) + Fib(n - 2); }

// NURL's acceptance, scaled: fibers each compute fib(20) and then yield 10 times; the work must
// be spread across the workers within 2x of even. Spawned from a root fiber, so that only the
// workers compete for the cores.
TEST(RuntimeTest, WorkSpreadsAcrossWorkers) {
  if (kSwitchHeavySanitizer) GTEST_SKIP() << "switches dominate under this sanitizer";
  // No spare workers: on a loaded machine a Fib(20) may run past the stuck threshold, and a
  // spare would then be a third thread running fibers.
  Runtime rt({.workers = 2, .spare_workers = 0u});
  std::mutex mu;
  std::map<std::thread::id, int> fibs_per_thread;
  // The figure: 100,000 fibers (about 2 s on 2 cores); WEFT_STRESS_SCALE scales it.
  const int n = static_cast<int>(100000 * StressScale());
  rt.block_on([&] {
    std::vector<JoinHandle<void>> hs;
    hs.reserve(n);
    for (int i = 0; i < n; ++i) {
      hs.push_back(rt.spawn([&] {
        volatile int r = Fib(20);
        (void)r;
        {
          std::lock_guard<std::mutex> lock(mu);
          ++fibs_per_thread[ThreadId()];
        }
        for (int k = 0; k < 10; ++k) this_fiber::yield();
      }));
    }
    for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  });
  ASSERT_EQ(fibs_per_thread.size(), 2u) << "only one worker ran fibers";
  int lo = INT32_MAX, hi = 0;
  for (auto& [id, count] : fibs_per_thread) {
    lo = std::min(lo, count);
    hi = std::max(hi, count);
  }
  RecordProperty("fibs_per_worker_low", lo);
  RecordProperty("fibs_per_worker_high", hi);
  EXPECT_LE(hi, 2 * lo) << "work was not spread within 2x of even: " << lo << " vs " << hi;
}

// ---- //sync on fibers ----

TEST(RuntimeSyncTest, MutexGuardsACounterAcrossFibers) {
  Runtime rt({.workers = 2});
  Mutex m;
  long counter = 0;
  std::vector<JoinHandle<void>> hs;
  for (int i = 0; i < 100; ++i) {
    hs.push_back(rt.spawn([&] {
      for (int k = 0; k < 1000; ++k) {
        Result<void> locked = m.lock({});
        ASSERT_TRUE(locked.ok()) << locked.error_code().message();
        ++counter;
        if (k % 100 == 0) this_fiber::yield();  // hold it across a switch now and then
        ASSERT_TRUE(m.unlock().ok());
      }
    }));
  }
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_EQ(counter, 100 * 1000);
}

TEST(RuntimeSyncTest, ChannelPingPongBetweenFibers) {
  Runtime rt({.workers = 2});
  Channel<int> ping(1), pong(1);
  const int rounds = 10000;
  auto echo = rt.spawn([&] {
    for (;;) {
      Result<int> v = ping.recv();
      if (!v) return;
      ASSERT_TRUE(pong.send(*v + 1).ok());
    }
  });
  auto driver = rt.spawn([&] {
    for (int i = 0; i < rounds; ++i) {
      EXPECT_TRUE(ping.send(i).ok());
      EXPECT_EQ(*pong.recv(), i + 1);
    }
    ping.close();
  });
  ASSERT_TRUE(driver.join().ok());
  ASSERT_TRUE(echo.join().ok());
}

// PairsAndAThird: on one worker, `pairs` pairs of fibers that keep waking each other (each wake
// makes the other the worker's next fiber), pinned there if `pinned`, and a third fiber, queued
// behind them, that yields once. Returns the first pair's rounds before the third first ran and
// while it waited in the yield ring. The pairs stop once the third is done, or after kRounds: a
// count near kRounds means the third ran only because they gave up.
struct Waited {
  int before = -1, in_yield = -1;
};
Waited PairsAndAThird(int pairs, bool pinned) {
  constexpr int kRounds = 200000;
  Runtime rt({.workers = 1});
  const FiberOptions where{.pinned_worker = pinned ? 0 : -1};
  std::atomic<bool> third_done{false};
  std::atomic<int> round{0};
  Waited waited;
  std::vector<std::unique_ptr<Channel<int>>> channels;
  rt.block_on([&] {
    JoinHandle<void> third;
    std::vector<JoinHandle<void>> fibers;
    // The last pair spawns the third fiber: it becomes the worker's next one, and the wake of
    // that pair's other fiber just after puts that one there instead, so the third is queued.
    for (int k = pairs - 1; k >= 0; --k) {
      channels.push_back(std::make_unique<Channel<int>>(1));
      channels.push_back(std::make_unique<Channel<int>>(1));
      Channel<int>& ping = *channels[channels.size() - 2];
      Channel<int>& pong = *channels.back();
      // Spawned first, a runs after b, which waits for its ping.
      fibers.push_back(rt.spawn(
          [&, k] {
            if (k == 0) {
              third = rt.spawn([&] {
                waited.before = round.load();
                const int at = round.load();
                this_fiber::yield();
                waited.in_yield = round.load() - at;
                third_done.store(true);
              });
            }
            for (int i = 0; i < kRounds && !third_done.load(); ++i) {
              if (k == 0) round.store(i);
              if (!ping.send(i).ok() || !pong.recv().ok()) return;
            }
            ping.close();
          },
          where));
      fibers.push_back(rt.spawn(
          [&] {
            for (;;) {
              Result<int> v = ping.recv();
              if (!v || !pong.send(*v).ok()) return;
            }
          },
          where));
    }
    for (auto& f : fibers) ASSERT_TRUE(f.join().ok());
    ASSERT_TRUE(third.join().ok());
  });
  return waited;
}

// The worker's queue, its yield ring and its pinned fibers each get turns however busy the
// sources ahead of them stay: a few of a pair's rounds, not all of them.
TEST(RuntimeSyncTest, APairThatKeepsWakingEachOtherDoesNotStarveTheQueue) {
  const Waited w = PairsAndAThird(/*pairs=*/1, /*pinned=*/false);
  EXPECT_GE(w.before, 0);
  EXPECT_LT(w.before, 100);
  EXPECT_GE(w.in_yield, 0);
  EXPECT_LT(w.in_yield, 100);
}

TEST(RuntimeSyncTest, APinnedPairDoesNotStarveTheQueue) {
  // Its wakes land among the pinned fibers, which come before the queue.
  const Waited w = PairsAndAThird(/*pairs=*/1, /*pinned=*/true);
  EXPECT_GE(w.before, 0);
  EXPECT_LT(w.before, 100);
  EXPECT_GE(w.in_yield, 0);
  EXPECT_LT(w.in_yield, 100);
}

TEST(RuntimeSyncTest, TwoPairsDoNotStarveTheYieldRing) {
  // The queue never empties (one of each pair waits there), and the ring comes after it.
  const Waited w = PairsAndAThird(/*pairs=*/2, /*pinned=*/false);
  EXPECT_GE(w.before, 0);
  EXPECT_LT(w.before, 100);
  EXPECT_GE(w.in_yield, 0);
  EXPECT_LT(w.in_yield, 100);
}

TEST(RuntimeSyncTest, SelectCondVarAndWaitGroupOnFibers) {
  Runtime rt({.workers = 2});
  Channel<int> a(0), b(0);
  WaitGroup wg;
  ASSERT_TRUE(wg.add(2).ok());
  auto sa = rt.spawn([&] {
    (void)a.send(1);
    wg.done();
  });
  auto sb = rt.spawn([&] {
    (void)b.send(2);
    wg.done();
  });
  auto selector = rt.spawn([&] {
    int got = 0, sum = 0;
    std::array<SelectCase, 2> cases{a.recv_case(got), b.recv_case(got)};
    for (int i = 0; i < 2; ++i) {
      Result<SelectResult> r = select(cases);
      EXPECT_TRUE(r.ok());
      sum += got;
    }
    return sum;
  });
  EXPECT_EQ(*selector.join(), 3);
  ASSERT_TRUE(wg.wait().ok());  // a thread waiting on fibers
  ASSERT_TRUE(sa.join().ok());
  ASSERT_TRUE(sb.join().ok());

  Mutex m;
  CondVar cv;
  bool ready = false;
  auto waiter = rt.spawn([&] {
    EXPECT_TRUE(m.lock({}).ok());
    while (!ready) EXPECT_TRUE(cv.wait(m).ok());
    EXPECT_TRUE(m.unlock().ok());
    // A timed wait on a fiber times out and holds the mutex again.
    EXPECT_TRUE(m.lock({}).ok());
    EXPECT_EQ(cv.wait(m, {.deadline = SyncClock::now() + 5ms}).error(), std::errc::timed_out);
    EXPECT_TRUE(m.unlock().ok());
  });
  auto signaller = rt.spawn([&] {
    EXPECT_TRUE(m.lock({}).ok());
    ready = true;
    EXPECT_TRUE(m.unlock().ok());
    cv.signal();
  });
  ASSERT_TRUE(signaller.join().ok());
  ASSERT_TRUE(waiter.join().ok());
}

}  // namespace
}  // namespace weft
