// Tests of the runtime's fiber features: call_blocking and blocking regions, Mutex ownership
// across a region and at a fiber's end, errno per fiber, queues that cannot grow, fiber-local
// storage, pinned fibers, stats and the fiber dump, fork-join on the workers.

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

TEST(BlockingTest, CallBlockingRunsOffTheWorkerAndReturnsTheResult) {
  Runtime rt({.workers = 1});
  rt.block_on([&] {
    std::thread::id worker = std::this_thread::get_id();
    std::atomic<int> ticks{0};
    auto ticker = rt.spawn([&] {
      for (int i = 0; i < 5; ++i) {
        ticks.fetch_add(1);
        ASSERT_TRUE(this_fiber::sleep_for(1ms).ok());
      }
    });
    std::thread::id ran_on;
    int v = call_blocking([&] {
      ran_on = std::this_thread::get_id();
      // Block the thread until the other fiber made progress on the (only) worker.
      while (ticks.load() < 5) std::this_thread::sleep_for(1ms);
      return 42;
    });
    EXPECT_EQ(v, 42);
    EXPECT_NE(ran_on, worker);
    ASSERT_TRUE(ticker.join().ok());
    EXPECT_THROW(call_blocking([]() -> int { throw std::runtime_error("x"); }), std::runtime_error);
  });
  EXPECT_EQ(call_blocking([] { return 5; }), 5);  // outside fibers: inline
}

TEST(BlockingTest, ARegionMovesTheFiberToABlockingThread) {
  Runtime rt({.workers = 1});
  rt.block_on([&] {
    std::atomic<int> ticks{0};
    auto ticker = rt.spawn([&] {
      for (int i = 0; i < 5; ++i) {
        ticks.fetch_add(1);
        ASSERT_TRUE(this_fiber::sleep_for(1ms).ok());
      }
    });
    std::uint64_t id = this_fiber::id();
    EXPECT_EQ(this_fiber::worker_index(), 0);
    {
      BlockingRegion region;
      EXPECT_EQ(this_fiber::worker_index(), -1);
      EXPECT_EQ(this_fiber::id(), id);
      // The thread may block; the worker keeps running the ticker.
      while (ticks.load() < 5) std::this_thread::sleep_for(1ms);
      Mutex m;  // sync primitives work here too (they block the thread)
      ASSERT_TRUE(m.lock({}).ok());
      ASSERT_TRUE(m.unlock().ok());
    }
    EXPECT_EQ(this_fiber::worker_index(), 0);
    EXPECT_EQ(this_fiber::id(), id);
    ASSERT_TRUE(ticker.join().ok());
  });
}

// A fiber keeps its identity inside a region: a Mutex locked before it is unlocked inside and
// the other way round, and locking it again inside is EDEADLK (not a wait on itself).
TEST(BlockingTest, MutexOwnershipBelongsToTheFiberAcrossARegion) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    Mutex m;
    ASSERT_TRUE(m.lock({}).ok());
    {
      BlockingRegion region;
      EXPECT_EQ(m.lock({.deadline = std::chrono::steady_clock::now() + 50ms}).error(),
                std::errc::resource_deadlock_would_occur);
      EXPECT_TRUE(m.unlock().ok());  // locked outside, unlocked inside
      ASSERT_TRUE(m.lock({}).ok());  // locked inside ...
    }
    EXPECT_TRUE(m.unlock().ok());  // ... unlocked outside
    // And another fiber can take it afterwards (it was not left locked).
    auto other = rt.spawn([&] {
      EXPECT_TRUE(m.lock({.deadline = std::chrono::steady_clock::now() + 5s}).ok());
      EXPECT_TRUE(m.unlock().ok());
    });
    ASSERT_TRUE(other.join().ok());
  });
}

// A fiber that finishes holding a Mutex keeps it: the next fiber, which reuses the finished
// one's Fiber object (and Waiter), is not its owner.
TEST(MutexOwnershipTest, AFiberThatEndsHoldingAMutexDoesNotHandItToTheNextFiber) {
  Runtime rt({.workers = 1});
  for (int round = 0; round < 20; ++round) {
    Mutex m;
    ASSERT_TRUE(rt.spawn([&] { ASSERT_TRUE(m.lock({}).ok()); }).join().ok());
    // Many fibers after it, so that one of them gets its Fiber object back from the free list.
    std::atomic<int> took{0};
    std::vector<JoinHandle<void>> next;
    for (int i = 0; i < 100; ++i) {
      next.push_back(rt.spawn([&] {
        if (m.unlock().ok() || m.try_lock()) took.fetch_add(1);
      }));
    }
    for (auto& h : next) ASSERT_TRUE(h.join().ok());
    EXPECT_EQ(took.load(), 0) << "a later fiber became the owner";
  }
}

// errno through an opaque call: glibc declares __errno_location const, so the compiler may keep
// its result (the thread's errno address) across a switch; code that reads errno after a switch
// must compute the address after it, as this does.
[[gnu::noipa]] int ReadErrno() { return errno; }
[[gnu::noipa]] void WriteErrno(int e) { errno = e; }

// errno is the fiber's own across yields, parks, sleeps and blocking regions, with fibers moving
// between workers: each reads back the value it set (1,060 of 1,600 reads saw another fiber's
// value before it was kept per fiber).
TEST(ErrnoTest, EachFiberKeepsItsOwnErrnoAcrossSwitches) {
  for (unsigned workers : {1u, 2u, 4u, 8u}) {
    Runtime rt({.workers = workers});
    std::atomic<int> wrong{0};
    Mutex mu;
    std::vector<JoinHandle<void>> fibers;
    for (int id = 0; id < 16; ++id) {
      fibers.push_back(rt.spawn([&, id] {
        for (int i = 0; i < 100; ++i) {
          const int mine = 1000 + id * 1000 + i;
          WriteErrno(mine);
          switch (i % 4) {
            case 0:
              this_fiber::yield();
              break;
            case 1:
              (void)this_fiber::sleep_for(std::chrono::microseconds(50));
              break;
            case 2:
              (void)mu.lock();
              this_fiber::yield();
              (void)mu.unlock();
              break;
            default: {
              BlockingRegion region;
              if (ReadErrno() != mine) wrong.fetch_add(1);
              WriteErrno(mine + 1);
            }
              WriteErrno(ReadErrno() - 1 == mine ? mine : -1);
              break;
          }
          if (ReadErrno() != mine) wrong.fetch_add(1);
        }
      }));
    }
    for (auto& f : fibers) ASSERT_TRUE(f.join().ok());
    EXPECT_EQ(wrong.load(), 0) << workers << " workers";
  }
}

// The scheduler's queues out of memory (WEFT_TEST_QUEUE_OOM: none grows past 64 fibers): a
// yield ring of 300 fibers, 300 pinned fibers woken at once from a plain thread (the mailbox
// and the pinned queue), and a burst of 2,000 spawns (the overflow list) lose no fiber, and the
// runtime shuts down.
TEST(OutOfMemoryTest, QueuesThatCannotGrowLoseNoFiber) {
  ASSERT_EQ(SetEnv("WEFT_TEST_QUEUE_OOM", "1"), 0);
  std::atomic<int> done{0};
  {
    Runtime rt({.workers = 2});
    ASSERT_EQ(UnsetEnv("WEFT_TEST_QUEUE_OOM"), 0);  // read by the constructor
    Event go;
    std::vector<JoinHandle<void>> hs;
    for (int i = 0; i < 300; ++i) {
      hs.push_back(rt.spawn(
          [&] {
            for (int k = 0; k < 20; ++k) this_fiber::yield();
            done.fetch_add(1);
          },
          {.pinned_worker = 0}));
      hs.push_back(rt.spawn(
          [&] {
            if (go.wait().ok()) done.fetch_add(1);
          },
          {.pinned_worker = 1}));
    }
    std::this_thread::sleep_for(20ms);  // the pinned waiters park
    go.set();                           // from this thread: through worker 1's mailbox
    rt.block_on([&] {
      std::vector<JoinHandle<void>> burst;
      for (int i = 0; i < 2000; ++i) burst.push_back(rt.spawn([&] { done.fetch_add(1); }));
      for (auto& h : burst) ASSERT_TRUE(h.join().ok());
    });
    for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  }
  EXPECT_EQ(done.load(), 2600);
  Runtime fresh({.workers = 2});  // (and the knob is off again for later tests)
  EXPECT_EQ(fresh.block_on([] { return 1; }), 1);
}

// Shutdown reaches a fiber that waits inside a region: its wait fails with operation_canceled
// and the destructor returns (it used to wait forever, the wait being the thread's own).
TEST(BlockingTest, ShutdownCancelsAWaitInsideARegion) {
  std::atomic<int> cancelled{0};
  Event never;
  {
    Runtime rt({.workers = 2});
    for (int i = 0; i < 3; ++i) {
      rt.spawn([&] {
          BlockingRegion region;
          if (never.wait().error() == std::errc::operation_canceled) cancelled.fetch_add(1);
        }).detach();
    }
    std::this_thread::sleep_for(20ms);
  }  // ~Runtime
  EXPECT_EQ(cancelled.load(), 3);
}

// ---- Fiber-local storage ----------------------------------------------------------------------

struct Counted {
  static inline std::atomic<int> live{0};
  int value = 0;
  Counted() { live.fetch_add(1); }
  ~Counted() { live.fetch_sub(1); }
};
FiberLocal<Counted> g_local;

TEST(FiberLocalTest, EachFiberHasItsOwnValueDestroyedAtItsEnd) {
  {
    Runtime rt({.workers = 2});
    std::vector<JoinHandle<int>> hs;
    for (int i = 0; i < 100; ++i) {
      hs.push_back(rt.spawn([i] {
        g_local->value = i;
        for (int k = 0; k < 10; ++k) this_fiber::yield();  // may move between workers
        return g_local->value;
      }));
    }
    for (int i = 0; i < 100; ++i) {
      auto r = hs[i].join();
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(*r, i);
    }
  }
  EXPECT_EQ(Counted::live.load(), 0);
  g_local->value = 3;  // a plain thread has its own
  EXPECT_EQ(g_local->value, 3);
}

// A value whose destructor uses another FiberLocal, one made after the fiber's table was sized:
// the table grows while the fiber's values are being destroyed, and the value made then is
// destroyed too, at the same fiber's end; the next fiber of the record starts with none.
struct UsesALaterLocal {
  static inline std::atomic<int> live{0};
  UsesALaterLocal() { live.fetch_add(1); }
  ~UsesALaterLocal();
};
FiberLocal<UsesALaterLocal> g_first;
std::unique_ptr<FiberLocal<Counted>> g_later;
UsesALaterLocal::~UsesALaterLocal() {
  (*g_later)->value = 7;  // a key past the table's end, made during the fiber's end
  live.fetch_sub(1);
}

TEST(FiberLocalTest, ADestructorThatUsesALaterLocalGrowsTheTableAndItsValueEndsToo) {
  Runtime rt({.workers = 1});
  for (int round = 0; round < 3; ++round) {
    g_later = std::make_unique<FiberLocal<Counted>>();  // a new key each round: past the tables
    const int counted_before = Counted::live.load();
    ASSERT_TRUE(rt.spawn([] { (void)g_first.get(); }).join().ok());
    // The next fiber (one worker: it runs once the last one has ended, in the same record)
    // finds no value of the last one.
    auto seen = rt.spawn([] { return (*g_later)->value; }).join();
    ASSERT_TRUE(seen.ok());
    EXPECT_EQ(*seen, 0);
    ASSERT_TRUE(rt.spawn([] {}).join().ok());  // and the reader has ended
    EXPECT_EQ(UsesALaterLocal::live.load(), 0);
    EXPECT_EQ(Counted::live.load(), counted_before) << "round " << round;
  }
  g_later.reset();
}

// A value whose constructor uses a FiberLocal made later: the table grows inside get(), which
// then stores the new value in the grown table (not through a reference into the old one).
struct MakesALaterLocal {
  MakesALaterLocal();
  int v = 1;
};
std::unique_ptr<FiberLocal<int>> g_later_int;
MakesALaterLocal::MakesALaterLocal() { **g_later_int = 5; }
FiberLocal<MakesALaterLocal> g_makes_later;

TEST(FiberLocalTest, AConstructorThatUsesALaterLocalGrowsTheTable) {
  Runtime rt({.workers = 1});
  for (int round = 0; round < 3; ++round) {
    g_later_int = std::make_unique<FiberLocal<int>>();  // a new key each round: past the tables
    EXPECT_EQ(*rt.spawn([] { return g_makes_later->v + **g_later_int; }).join(), 6);
    EXPECT_EQ(
        *rt.spawn_task([]() -> Task<int> { co_return g_makes_later->v + **g_later_int; }).join(),
        6);
  }
  g_later_int.reset();
}

// ---- Pinned fibers ----------------------------------------------------------------------------

TEST(PinnedTest, APinnedFiberStaysOnItsWorker) {
  Runtime rt({.workers = 2});
  Channel<int> ch(0);
  std::atomic<int> moved{0};
  std::vector<JoinHandle<void>> hs;
  for (int p = 0; p < 2; ++p) {
    hs.push_back(rt.spawn(
        [&, p] {
          for (int i = 0; i < 200; ++i) {
            if (this_fiber::worker_index() != p) moved.fetch_add(1);
            if (i % 3 == 0) {
              this_fiber::yield();
            } else if (i % 3 == 1) {
              ASSERT_TRUE(this_fiber::sleep_for(10us).ok());
            } else {
              if (p == 0) {
                ASSERT_TRUE(ch.send(i).ok());
              } else {
                ASSERT_TRUE(ch.recv().ok());
              }
            }
          }
        },
        {.name = "pinned", .pinned_worker = p}));
  }
  // Unpinned load that thieves would happily take from.
  for (int i = 0; i < 200; ++i) {
    hs.push_back(rt.spawn([] {
      for (int k = 0; k < 20; ++k) this_fiber::yield();
    }));
  }
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_EQ(moved.load(), 0);
}

// ---- Observability ----------------------------------------------------------------------------

TEST(StatsTest, CountersAndDump) {
  Runtime rt({.workers = 2});
  Channel<int> ch(0);
  const std::string site = std::string(__FILE__) + ":" + std::to_string(__LINE__ + 1);
  auto parked = rt.spawn([&] { return ch.recv(); }, {.name = "receiver"});
  for (int i = 0; i < 1000 && rt.dump_fibers().find("receiver\" parked") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(1ms);
  }
  std::string dump = rt.dump_fibers();
  EXPECT_NE(dump.find("\"receiver\" parked on Channel recv"), std::string::npos) << dump;
  EXPECT_NE(dump.find(" spawned at " + site + "\n"), std::string::npos) << dump;
  ASSERT_TRUE(ch.send(1).ok());
  ASSERT_TRUE(parked.join().ok());
  // The dump lists live fibers only: a finished one, and the free Fiber objects made alongside
  // (a block of them at a time), are not in it.
  for (int i = 0; i < 1000 && !rt.dump_fibers().empty(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(rt.dump_fibers(), "");
  std::string json = rt.stats_json();
  for (const char* key :
       {"\"workers\":[", "\"spawned\":", "\"run\":", "\"stolen\":", "\"parked\":", "\"polled\":",
        "\"idle_ns\":", "\"live_fibers\":", "\"spawned_outside\":1"}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  }
}

// RuntimeOptions::measure_latency: a fiber made runnable while its worker computes for 20 ms
// waits at least that long to run, and the worker's histogram of scheduling latencies has it
// (a bucket at 16 ms or more); without the option there is no histogram.
TEST(StatsTest, SchedulingLatencyWhenAskedFor) {
  // No monitor: a spare worker would run the waiting fiber sooner.
  Runtime rt(
      {.workers = 1, .stuck_threshold = std::chrono::microseconds(0), .measure_latency = true});
  rt.block_on([&] {
    JoinHandle<void> waiting = rt.spawn([] {});
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while (std::chrono::steady_clock::now() < end) {
    }
    EXPECT_TRUE(waiting.join().ok());
  });
  const std::string json = rt.stats_json();
  const std::size_t at = json.find("\"sched_latency_ns\":[");
  ASSERT_NE(at, std::string::npos) << json;
  std::uint64_t longest = 0;  // the highest bucket's lower bound
  for (std::size_t i = json.find("[[", at); i != std::string::npos && i < json.find("]]", at);
       i = json.find(",[", i + 1)) {
    longest = std::max<std::uint64_t>(longest, std::strtoull(json.c_str() + i + 2, nullptr, 10));
  }
  EXPECT_GE(longest, 16000000u) << json;
  Runtime plain({.workers = 1});
  plain.block_on([] {});
  EXPECT_EQ(plain.stats_json().find("sched_latency_ns"), std::string::npos);
}

// ---- Fork-join on the workers -----------------------------------------------------------------

std::uint64_t SeqFib(int n) { return n < 2 ? n : SeqFib(n - 1) + SeqFib(n - 2); }

std::uint64_t Fib(ForkJoinWorker& w, int n) {
  if (n < 2) return static_cast<std::uint64_t>(n);
  auto a = w.spawn<Fib>(n - 1);
  std::uint64_t b = Fib(w, n - 2);
  return w.sync(a) + b;
}

TEST(ForkJoinTest, FromMainAndFromFibersWhileOtherFibersRun) {
  Runtime rt({.workers = 2});
  const int n = kTsan ? 14 : 22;
  EXPECT_EQ(rt.fork_join(Fib, n), SeqFib(n));  // from a plain thread: on a new fiber
  std::atomic<bool> stop{false};
  std::atomic<long> ticks{0};
  auto ticker = rt.spawn([&] {
    while (!stop.load()) {
      ticks.fetch_add(1);
      this_fiber::yield();
    }
  });
  std::vector<JoinHandle<std::uint64_t>> hs;
  for (int i = 0; i < 4; ++i) hs.push_back(rt.spawn([&] { return rt.fork_join(Fib, n); }));
  for (auto& h : hs) {
    auto r = h.join();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, SeqFib(n));
  }
  stop = true;
  ASSERT_TRUE(ticker.join().ok());
  EXPECT_GT(ticks.load(), 0);
}

}  // namespace
}  // namespace weft
