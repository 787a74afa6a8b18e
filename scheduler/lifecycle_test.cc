// Tests of the runtime's lifecycle: graceful shutdown with parked fibers and timers (waits after
// it fail, joins are cancelled, late notifies touch no freed memory), 100,000 fibers parked at
// once then released, join handles consumed exactly once, racing their fibers, outliving their
// runtime.

#if !defined(_WIN32)
#include <sys/resource.h>
#endif
#if defined(__linux__)
#include <dirent.h>
#include <sys/types.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/context/stack.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/task.h"
#include "weft/sync/channel.h"
#include "weft/sync/coordination.h"
#include "weft/sync/mutex.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using ::weft::testing::kTsan;

// SetEnv / UnsetEnv: the fault-injection knobs, on POSIX and on Windows (no setenv there).
int SetEnv(const char* name, const char* value) {
#ifdef _WIN32
  return _putenv_s(name, value);
#else
  return ::setenv(name, value, 1);
#endif
}
int UnsetEnv(const char* name) {
#ifdef _WIN32
  return _putenv_s(name, "");
#else
  return ::unsetenv(name);
#endif
}

using ::weft::testing::StressScale;

// ---- Shutdown ---------------------------------------------------------------------------------

TEST(ShutdownTest, ParkedFibersAreCancelledAndUnwind) {
  std::atomic<int> unwound{0};
  std::atomic<int> cancelled{0};
  struct Guard {
    std::atomic<int>* n;
    ~Guard() { n->fetch_add(1); }
  };
  Channel<int> never(1);
  Event never_set;
  Mutex held;
  {
    Runtime rt({.workers = 2});
    ASSERT_TRUE(held.try_lock());  // a plain thread holds it for the whole test
    for (int i = 0; i < 10; ++i) {
      rt.spawn([&] {
          Guard g{&unwound};
          if (!never.recv().ok()) cancelled.fetch_add(1);
        }).detach();
      rt.spawn([&] {
          Guard g{&unwound};
          if (!never_set.wait().ok()) cancelled.fetch_add(1);
        }).detach();
      rt.spawn([&] {
          Guard g{&unwound};
          if (held.lock({}).error() == std::errc::operation_canceled) cancelled.fetch_add(1);
        }).detach();
      rt.spawn([&] {
          Guard g{&unwound};
          if (this_fiber::sleep_for(1h).error() == std::errc::operation_canceled) {
            cancelled.fetch_add(1);
          }
        }).detach();
    }
    // Let them all park (the dump shows what they wait on).
    for (int i = 0; i < 1000 && rt.dump_fibers().find("runnable") != std::string::npos; ++i) {
      std::this_thread::sleep_for(1ms);
    }
    std::string dump = rt.dump_fibers();
    EXPECT_NE(dump.find("on Channel recv"), std::string::npos) << dump;
    EXPECT_NE(dump.find("on Event"), std::string::npos) << dump;
    EXPECT_NE(dump.find("on Mutex"), std::string::npos) << dump;
    EXPECT_NE(dump.find("on sleep"), std::string::npos) << dump;
  }  // ~Runtime cancels them all
  EXPECT_EQ(unwound.load(), 40);
  EXPECT_EQ(cancelled.load(), 40);
  ASSERT_TRUE(held.unlock().ok());
}

// A plain thread's Event::set that grants a parked fiber, then (held here between its unlock
// and its notify) notifies it only after the fiber finished and its Runtime was destroyed: the
// late notify finds a finished Fiber, not freed memory (asan reported a use after free before).
TEST(ShutdownTest, ALateNotifyAfterTheRuntimeIsGoneTouchesNoFreedMemory) {
  auto ev = std::make_unique<Event>();
  std::thread setter;
  ASSERT_EQ(SetEnv("WEFT_TEST_NOTIFY_DELAY_MS", "200"), 0);
  {
    Runtime rt({.workers = 1});
    std::atomic<bool> parked{false};
    auto h = rt.spawn([&] {
      parked = true;
      (void)ev->wait();
    });
    while (!parked.load()) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(20ms);         // it parks on the event
    setter = std::thread([&] { ev->set(); });  // grants it, then waits 200 ms to notify
    std::this_thread::sleep_for(50ms);         // the setter is in that wait
    h.detach();
  }  // ~Runtime: the fiber is interrupted, finds its wait granted, and finishes
  setter.join();
  ASSERT_EQ(UnsetEnv("WEFT_TEST_NOTIFY_DELAY_MS"), 0);
  Runtime next({.workers = 1});  // reuses the finished fibers' memory
  EXPECT_EQ(next.block_on([] { return 5; }), 5);
}

// The same for tasks, whose records are of their own kind: the late notifies land on task
// records that the next runtime's tasks, parked with a deadline far off, have taken. Each is a
// stale permit there: no wait may end before its event is set.
TEST(ShutdownTest, LateNotifiesOfGoneTasksDoNotEndTheWaitsOfTheirRecordsNextTasks) {
  auto ev = std::make_unique<Event>();
  std::thread setter;
  constexpr int kTasks = 64;
  ASSERT_EQ(SetEnv("WEFT_TEST_NOTIFY_DELAY_MS", "300"), 0);
  {
    Runtime rt({.workers = 1});
    std::atomic<int> parked{0};
    for (int i = 0; i < kTasks; ++i) {
      rt.spawn_task(
            [&]() -> Task<> {
              parked.fetch_add(1);
              (void)co_await ev->async_wait();
            },
            {.name = i % 2 == 0 ? "old" : ""})
          .detach();
    }
    while (parked.load() < kTasks) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(20ms);         // they park on the event
    setter = std::thread([&] { ev->set(); });  // grants them, then waits 300 ms to notify
    std::this_thread::sleep_for(50ms);
  }  // ~Runtime: the tasks find their waits granted and finish; their records are retired
  ASSERT_EQ(UnsetEnv("WEFT_TEST_NOTIFY_DELAY_MS"), 0);
  Runtime next({.workers = 2});  // takes the retired task records
  Event ev2;
  std::atomic<int> early{0};
  std::vector<JoinHandle<void>> hs;
  for (int i = 0; i < kTasks; ++i) {
    hs.push_back(next.spawn_task(
        [&]() -> Task<> {
          Result<void> r = co_await ev2.async_wait({.deadline = SyncClock::now() + 10s});
          if (!ev2.is_set()) early.fetch_add(1);
          EXPECT_TRUE(r.ok());
        },
        {.name = i % 3 == 0 ? "new" : ""}));
  }
  setter.join();  // the late notifies have landed
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(early.load(), 0);
  ev2.set();
  for (auto& h : hs) EXPECT_TRUE(h.join().ok());
  EXPECT_EQ(early.load(), 0);
}

TEST(ShutdownTest, WaitsAfterShutdownStartedFailToo) {
  std::atomic<int> second_wait_failed{0};
  Event never;  // outlives the runtime, whose fibers wait on it
  {
    Runtime rt({.workers = 1});
    rt.spawn([&] {
        (void)never.wait();  // cancelled by the shutdown
        // A fiber that tries to wait again while unwinding is refused at once.
        if (this_fiber::sleep_for(1h).error() == std::errc::operation_canceled) {
          second_wait_failed.fetch_add(1);
        }
      }).detach();
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(second_wait_failed.load(), 1);
}

TEST(ShutdownTest, JoinFromAFiberIsCancelledByShutdown) {
  std::atomic<bool> join_cancelled{false};
  Event never;
  {
    Runtime rt({.workers = 2});
    // The joined fiber outlives the joiner's cancellation: after its own wait is cancelled it
    // spends 200 ms in call_blocking, which shutdown does not interrupt.
    auto sleeper = std::make_shared<JoinHandle<void>>(rt.spawn([&] {
      (void)never.wait();
      call_blocking([] { std::this_thread::sleep_for(200ms); });
    }));
    rt.spawn([&, sleeper] {
        auto r = sleeper->join();
        join_cancelled = !r.ok() && r.error() == std::errc::operation_canceled;
      }).detach();
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(join_cancelled.load());
}

// ---- Many parked fibers (W8's shape) ----------------------------------------------------------

TEST(ParkTest, HundredThousandFibersParkedAtOnceThenReleased) {
  Runtime rt({.workers = 2, .stack_size = 16 << 10});
  const int n = kTsan ? 5000 : 100000;
  Event go;
  WaitGroup parked;
  ASSERT_TRUE(parked.add(n).ok());
  std::atomic<int> released{0};
  std::vector<JoinHandle<void>> hs;
  hs.reserve(n);
  for (int i = 0; i < n; ++i) {
    hs.push_back(rt.spawn([&] {
      parked.done();
      ASSERT_TRUE(go.wait().ok());
      released.fetch_add(1, std::memory_order_relaxed);
    }));
  }
  ASSERT_TRUE(parked.wait().ok());
  EXPECT_EQ(released.load(), 0);
  go.set();
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_EQ(released.load(), n);
}

// ---- Join handles -----------------------------------------------------------------------------

TEST(JoinTest, AHandleIsConsumedExactlyOnce) {
  Runtime rt({.workers = 2});
  auto h = rt.spawn([] { return 7; });
  auto first = h.join();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 7);
  EXPECT_FALSE(h.joinable());
  EXPECT_EQ(h.join().error(), std::errc::invalid_argument);
  auto d = rt.spawn([] { return 1; });
  d.detach();
  EXPECT_EQ(d.join().error(), std::errc::invalid_argument);
}

TEST(JoinTest, JoinRacesWithTheFiberFinishing) {
  Runtime rt({.workers = 2});
  const int n = 2000 * StressScale();
  std::atomic<int> joined{0};
  for (int i = 0; i < n; ++i) {
    auto h = rt.spawn([i] { return i; });
    if (i % 2 == 0) std::this_thread::yield();  // vary which side gets there first
    auto r = h.join();
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(*r, i);
    joined.fetch_add(1);
  }
  EXPECT_EQ(joined.load(), n);
}

TEST(JoinTest, HandlesAreMoveOnlyAndAssigningOverOneDetachesIt) {
  static_assert(!std::is_copy_constructible_v<JoinHandle<int>>);
  static_assert(!std::is_copy_assignable_v<JoinHandle<int>>);
  static_assert(std::is_nothrow_move_constructible_v<JoinHandle<int>>);
  Runtime rt({.workers = 2});
  Event release;
  std::atomic<bool> first_ran{false};
  auto h = rt.spawn([&] {
    (void)release.wait();
    first_ran = true;
    return 1;
  });
  h = rt.spawn([] { return 2; });  // the first fiber is detached, and still runs
  release.set();
  EXPECT_EQ(*h.join(), 2);
  JoinHandle<int> moved = rt.spawn([] { return 3; });
  JoinHandle<int> to(std::move(moved));
  EXPECT_FALSE(moved.joinable());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(*to.join(), 3);
  for (int i = 0; i < 1000 && !first_ran; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(first_ran.load());
}

// Spawns made on a worker take their state from that worker's slab. A handle kept past its
// runtime still joins and frees cleanly (the worker's slab is kept for it), from a plain thread.
TEST(JoinTest, HandlesOutliveTheirRuntime) {
  std::vector<JoinHandle<int>> kept;
  {
    Runtime rt({.workers = 2});
    rt.block_on([&] {
      for (int i = 0; i < 100; ++i) kept.push_back(rt.spawn([i] { return i * 3; }));
      for (int i = 0; i < 100; i += 2) EXPECT_EQ(*kept[static_cast<std::size_t>(i)].join(), i * 3);
    });
  }
  for (int i = 1; i < 100; i += 2) EXPECT_EQ(*kept[static_cast<std::size_t>(i)].join(), i * 3);
  kept.clear();  // the joined ones are empty; everything is freed by now
}

// A join whose deadline passes just as the fiber finishes either times out, leaving the handle
// joinable, or succeeds; either way the value arrives exactly once. From a thread and a fiber.
TEST(JoinTest, DeadlinesRacingTheFiberFinishingNeverLoseTheResult) {
  Runtime rt({.workers = 2});
  const int n = (kTsan ? 300 : 2000) * StressScale();
  auto run = [&](int base) {
    for (int i = 0; i < n; ++i) {
      auto h = rt.spawn([i] {
        for (int k = 0; k < i % 4; ++k) this_fiber::yield();
        return i;
      });
      auto r = h.join({.deadline = SyncClock::now() + std::chrono::microseconds(i % 8)});
      if (!r.ok()) {
        EXPECT_EQ(r.error(), std::errc::timed_out);
        EXPECT_TRUE(h.joinable());
        r = h.join();
      }
      EXPECT_FALSE(h.joinable());
      EXPECT_EQ(*r, i) << base;
    }
  };
  run(0);                                    // the joiner is this thread
  rt.spawn([&] { run(1); }).join().value();  // the joiner is a fiber
}

// Whichever of the fiber and the handle lets go second frees the spawn state (JoinSignal): a
// handle dropped before, while or after its fiber finishes frees the callable, the result and
// the state exactly once (asan reports a double free or a leak), from a thread and from a fiber.
struct LiveCount {
  static inline std::atomic<int> live{0};
  LiveCount() { live.fetch_add(1); }
  LiveCount(const LiveCount&) { live.fetch_add(1); }
  LiveCount(LiveCount&&) noexcept { live.fetch_add(1); }
  ~LiveCount() { live.fetch_sub(1); }
};

TEST(JoinTest, DroppingHandlesRacesWithTheFibersFinishing) {
  const int n = (kTsan ? 500 : 4000) * StressScale();
  {
    Runtime rt({.workers = 2});
    auto run = [&] {
      std::vector<JoinHandle<LiveCount>> hs;
      for (int i = 0; i < n; ++i) {
        hs.push_back(rt.spawn([c = LiveCount(), i] {
          for (int k = 0; k < i % 3; ++k) this_fiber::yield();
          return c;
        }));
        // Drop some at once (likely before the fiber ran), others a little later.
        if (i % 4 == 0) hs.back().detach();
        if (i % 7 == 0 && hs.size() > 2) hs[hs.size() - 2] = JoinHandle<LiveCount>();
        if (i % 2 == 0) std::this_thread::yield();
      }
      int joined = 0;
      for (std::size_t i = 0; i < hs.size(); ++i) {
        if (i % 3 == 0 && hs[i].joinable()) {
          ASSERT_TRUE(hs[i].join().ok());
          ++joined;
        }
      }
      EXPECT_GT(joined, 0);
      hs.clear();  // the rest drop here, finished or not
    };
    run();                                    // handles on this thread
    rt.spawn([&] { run(); }).join().value();  // handles on a fiber
  }                                           // every fiber has finished once the runtime is gone
  EXPECT_EQ(LiveCount::live.load(), 0);
}

// A callable aligned past 16 bytes is not in a worker's slab (operator new with its alignment);
// joined or detached, it is freed the same way.
TEST(JoinTest, OverAlignedCallables) {
  struct alignas(64) Wide {
    char pad[64] = {};
    int operator()() const { return reinterpret_cast<std::uintptr_t>(this) % 64 == 0 ? 7 : -1; }
  };
  Runtime rt({.workers = 2});
  EXPECT_EQ(*rt.spawn(Wide{}).join(), 7);
  rt.spawn(Wide{}).detach();
  rt.block_on([&] {
    EXPECT_EQ(*rt.spawn(Wide{}).join(), 7);
    rt.spawn(Wide{}).detach();
  });
}

// A spawn that throws (a bad stack size) frees the state it made, callable included.
TEST(JoinTest, ASpawnThatThrowsFreesItsState) {
  Runtime rt({.workers = 1});
  auto spawn = [&] {
    (void)rt.spawn([c = LiveCount()] { (void)c; }, {.stack_size = std::size_t{1} << 40});
  };
  EXPECT_THROW(spawn(), std::system_error);
  rt.block_on([&] { EXPECT_THROW(spawn(), std::system_error); });
  EXPECT_EQ(LiveCount::live.load(), 0);
}

// ---- Blocking work ----------------------------------------------------------------------------

}  // namespace
}  // namespace weft
