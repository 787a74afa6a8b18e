// The runtime's monitor: a fiber that holds its worker past RuntimeOptions::stuck_threshold is
// reported once per run, naming it and its worker; parked, blocking and idle fibers are not; the
// default report is one rate-limited line on stderr; an idle runtime's monitor sleeps; with
// every worker held, a spare worker serves the other fibers.
//
// The stuck fibers here spin until they are reported (bounded by a generous cap that only turns
// a regression into a failure), so no assertion depends on how fast the machine is.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/coordination.h"

#if !defined(_WIN32)
#include <sched.h>
#include <unistd.h>
#endif

namespace weft {
namespace {

using namespace std::chrono_literals;

// Reports: what on_stuck was given, for a test to look at.
struct Reports {
  std::mutex mu;
  std::vector<StuckFiber> got;
  std::function<void(const StuckFiber&)> callback() {
    return [this](const StuckFiber& s) {
      std::lock_guard<std::mutex> lock(mu);
      got.push_back(s);
    };
  }
  std::size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return got.size();
  }
  // SpinUntil: holds the calling fiber's worker (no switch) until `n` reports have come, or the
  // cap; true if they came.
  bool SpinUntil(std::size_t n, std::chrono::seconds cap = 30s) {
    const auto end = std::chrono::steady_clock::now() + cap;
    while (count() < n) {
      if (std::chrono::steady_clock::now() > end) return false;
    }
    return true;
  }
};

TEST(Monitor, AFiberThatHoldsItsWorkerIsReportedOnceWithItsNameAndWorker) {
  Reports reports;
  Runtime rt({.workers = 2, .stuck_threshold = 5ms, .on_stuck = reports.callback()});
  std::uint64_t id = 0;
  int worker = -1;
  const int spawn_line = __LINE__ + 1;
  JoinHandle<bool> h = rt.spawn(
      [&] {
        id = this_fiber::id();
        worker = this_fiber::worker_index();
        bool reported = reports.SpinUntil(1);
        // Still the same run: no second report for it, however long it goes on.
        std::this_thread::sleep_for(30ms);  // blocks the worker, as a blocking call would
        return reported;
      },
      {.name = "spinner"});
  Result<bool> reported = h.join();
  ASSERT_TRUE(reported);
  ASSERT_TRUE(*reported);
  std::lock_guard<std::mutex> lock(reports.mu);
  ASSERT_EQ(reports.got.size(), 1u);
  const StuckFiber& s = reports.got[0];
  EXPECT_EQ(s.fiber_id, id);
  EXPECT_EQ(s.name, "spinner");
  EXPECT_EQ(s.spawned_at, std::string(__FILE__) + ":" + std::to_string(spawn_line));
  EXPECT_EQ(static_cast<int>(s.worker), worker);
  EXPECT_GE(s.running_for, 5ms);
  // The run goes to the histogram of long runs once the monitor has seen it end: one bucket
  // at 4 ms or more; and the histogram of run-queue lengths has samples.
  std::string json = rt.stats_json();
  for (auto end = std::chrono::steady_clock::now() + 30s;
       json.find("\"long_runs_ns\":[]") != std::string::npos &&
       std::chrono::steady_clock::now() < end;
       json = rt.stats_json()) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_NE(json.find("\"stuck\":1"), std::string::npos) << json;
  const std::size_t at = json.find("\"long_runs_ns\":[[");
  ASSERT_NE(at, std::string::npos) << json;
  EXPECT_GE(std::strtoull(json.c_str() + at + 17, nullptr, 10), 4000000u) << json;
  EXPECT_EQ(json.find("\"run_queue_len\":[]"), std::string::npos) << json;
}

// A blocking call made outside call_blocking (the thread sleeps in the kernel, using no CPU)
// holds the worker as much as a computation does, and is reported too.
TEST(Monitor, ABlockingCallOutsideCallBlockingIsReported) {
  Reports reports;
  Runtime rt({.workers = 1, .stuck_threshold = 5ms, .on_stuck = reports.callback()});
  rt.block_on([&] {
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (reports.count() == 0 && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(1ms);
    }
  });
  EXPECT_EQ(reports.count(), 1u);
}

#if defined(__linux__)
// PinToOneCpu: the calling thread runs only on `cpu` from now on.
void PinToOneCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ASSERT_EQ(::sched_setaffinity(0, sizeof set, &set), 0);
}

// A fiber that computes on a machine oversubscribed by other threads is still reported, once
// its thread has had the threshold's worth of CPU during the run. Here its worker's thread
// shares one CPU with three spinning threads, so it gets about a quarter of it over any 50 ms
// (the threshold): judged by its share of the CPU alone, it was never reported.
TEST(Monitor, AFiberThatComputesOnAnOversubscribedMachineIsReported) {
  cpu_set_t allowed;
  ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed)) ++cpu;
  ASSERT_LT(cpu, CPU_SETSIZE);
  Reports reports;
  Runtime rt({.workers = 1, .stuck_threshold = 50ms, .on_stuck = reports.callback()});
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (int i = 0; i < 3; ++i) {
    hogs.emplace_back([&] {
      PinToOneCpu(cpu);
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  Result<bool> reported = rt.spawn([&] {
                              PinToOneCpu(cpu);  // the worker's thread, beside the hogs
                              return reports.SpinUntil(1);
                            }).join();
  stop = true;
  for (auto& t : hogs) t.join();
  ASSERT_TRUE(reported.ok());
  EXPECT_TRUE(*reported) << "a computing fiber was never reported";
}
#endif

TEST(Monitor, EachRunIsReportedAndEveryStuckWorkerToo) {
  Reports reports;
  Runtime rt({.workers = 2, .stuck_threshold = 2ms, .on_stuck = reports.callback()});
  // Two fibers, one per worker, each holding it until both are reported.
  std::atomic<int> started{0};
  std::vector<JoinHandle<bool>> hs;
  for (int i = 0; i < 2; ++i) {
    hs.push_back(rt.spawn(
        [&, i] {
          started.fetch_add(1);
          while (started.load() < 2) {
          }
          bool ok = reports.SpinUntil(2);
          if (i == 0) {
            // A second run of the same fiber, after a switch, is a new spell.
            this_fiber::yield();
            ok = ok && reports.SpinUntil(3);
          }
          return ok;
        },
        {.pinned_worker = i}));
  }
  for (auto& h : hs) {
    Result<bool> ok = h.join();
    ASSERT_TRUE(ok);
    EXPECT_TRUE(*ok);
  }
  std::lock_guard<std::mutex> lock(reports.mu);
  ASSERT_EQ(reports.got.size(), 3u);
  EXPECT_NE(reports.got[0].worker, reports.got[1].worker);
  EXPECT_EQ(reports.got[2].worker, 0u);
  EXPECT_EQ(reports.got[2].fiber_id,
            reports.got[0].worker == 0 ? reports.got[0].fiber_id : reports.got[1].fiber_id);
}

TEST(Monitor, ParkedBlockingAndIdleFibersAreNotReported) {
  Reports reports;
  // Under an emulator a fiber's first run alone (its stack's first touch) can take a
  // millisecond: the threshold and the waits are ten times longer there.
  const std::chrono::milliseconds threshold = testing::Emulated() ? 10ms : 1ms;
  const std::chrono::milliseconds wait = 20 * threshold;
  Runtime rt({.workers = 2, .stuck_threshold = threshold, .on_stuck = reports.callback()});
  rt.block_on([&] {
    // Parked: a sleep, a wait; on a blocking thread: call_blocking. None holds a worker.
    (void)this_fiber::sleep_for(wait);
    Event never;
    EXPECT_EQ(never.wait({.deadline = SyncClock::now() + wait}).error(), std::errc::timed_out);
    Result<int> r = call_blocking([&] {
      std::this_thread::sleep_for(wait);
      return 1;
    });
    EXPECT_TRUE(r.ok());
    // Many short runs: each fiber switches long before the threshold.
    for (int i = 0; i < 200; ++i) this_fiber::yield();
  });
  std::this_thread::sleep_for(wait);  // an idle runtime
  std::lock_guard<std::mutex> lock(reports.mu);
  for (const StuckFiber& s : reports.got) {
    ADD_FAILURE() << "reported: fiber " << s.fiber_id << " \"" << s.name << "\" on worker "
                  << s.worker << " for " << s.running_for.count() << " ns";
  }
}

// A fork-join computation run from a fiber holds its worker as it was asked to (the other
// workers steal its tasks): not reported.
TEST(Monitor, AForkJoinComputationIsNotReported) {
  Reports reports;
  Runtime rt({.workers = 2, .stuck_threshold = 1ms, .on_stuck = reports.callback()});
  rt.block_on([&] {
    (void)rt.fork_join([](ForkJoinWorker&) {
      std::this_thread::sleep_for(20ms);
      return 0;
    });
  });
  EXPECT_EQ(reports.count(), 0u);
}

// The same from a plain thread, whose fork_join runs the root on a new fiber: not reported, so no
// spare worker starts either (one that ran the next root's fiber has no deque in the pool).
TEST(Monitor, AForkJoinComputationFromAThreadIsNotReported) {
  Reports reports;
  Runtime rt({.workers = 1, .stuck_threshold = 1ms, .on_stuck = reports.callback()});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rt.fork_join([](ForkJoinWorker&) {
      std::this_thread::sleep_for(20ms);
      return 7;
    }),
              7);
  }
  EXPECT_EQ(reports.count(), 0u);
}

// A nested fork_join (the root calls fork_join again, which runs inline): the outer computation
// is still not reported once the inner one has returned.
TEST(Monitor, ANestedForkJoinComputationIsNotReported) {
  Reports reports;
  Runtime rt({.workers = 1, .stuck_threshold = 1ms, .on_stuck = reports.callback()});
  EXPECT_EQ(rt.fork_join([&](ForkJoinWorker&) {
    (void)rt.fork_join([](ForkJoinWorker&) { return 1; });
    std::this_thread::sleep_for(20ms);
    return 7;
  }),
            7);
  EXPECT_EQ(reports.count(), 0u);
}

// block_on waits on a fiber that waits on an Event nobody will set, and nothing else can
// happen: the monitor hints at a deadlock, once, with the fibers' dump naming the Event.
TEST(Monitor, EveryFiberParkedWithNothingToWakeItIsHintedAsADeadlock) {
  std::mutex mu;
  std::vector<std::string> hints;
  Runtime rt(
      {.workers = 2, .deadlock_hint_after = 50ms, .on_deadlock_hint = [&](std::string_view dump) {
         std::lock_guard<std::mutex> lock(mu);
         hints.emplace_back(dump);
       }});
  Event never, hinted;
  std::thread releaser([&] {
    // The test's own way out: once hinted (or after the cap), set the Event from outside.
    for (auto end = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < end;
         std::this_thread::sleep_for(1ms)) {
      std::lock_guard<std::mutex> lock(mu);
      if (!hints.empty()) break;
    }
    std::this_thread::sleep_for(200ms);  // no second hint meanwhile
    never.set();
  });
  rt.block_on([&] { (void)never.wait(); });
  releaser.join();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_NE(hints[0].find("a deadlock?"), std::string::npos) << hints[0];
  EXPECT_NE(hints[0].find("parked on Event"), std::string::npos) << hints[0];
}

// Not a deadlock: a timer will wake the fiber (a sleep), or a thread does not wait in block_on.
TEST(Monitor, NoDeadlockHintWhileATimerIsPendingOrNobodyWaits) {
  std::atomic<int> hints{0};
  Runtime rt({.workers = 1, .deadlock_hint_after = 10ms, .on_deadlock_hint = [&](std::string_view) {
                hints.fetch_add(1);
              }});
  rt.block_on([] { (void)this_fiber::sleep_for(150ms); });
  Event never;
  JoinHandle<void> detached = rt.spawn([&] { (void)never.wait(); });
  std::this_thread::sleep_for(150ms);  // parked with nothing to wake it, but nobody waits on it
  EXPECT_EQ(hints.load(), 0);
  EXPECT_EQ(rt.dump_fibers().find("a deadlock?"), std::string::npos);
  never.set();
  (void)detached.join();
}

// A callback that throws does not end the process; the monitor goes on reporting.
TEST(Monitor, ACallbackThatThrowsIsIgnored) {
  std::atomic<int> calls{0};
  Runtime rt({.workers = 1, .stuck_threshold = 2ms, .on_stuck = [&](const StuckFiber&) {
                calls.fetch_add(1);
                throw std::runtime_error("callback");
              }});
  for (int run = 1; run <= 2; ++run) {
    rt.block_on([&] {
      const auto end = std::chrono::steady_clock::now() + 30s;
      while (calls.load() < run && std::chrono::steady_clock::now() < end) {
      }
    });
  }
  EXPECT_EQ(calls.load(), 2);
}

TEST(Monitor, ZeroThresholdMeansNoMonitor) {
  Reports reports;
  Runtime rt({.workers = 1, .stuck_threshold = 0us, .on_stuck = reports.callback()});
  rt.block_on([] { std::this_thread::sleep_for(20ms); });
  EXPECT_EQ(reports.count(), 0u);
  EXPECT_NE(rt.stats_json().find("\"monitor_samples\":0"), std::string::npos);
}

TEST(Monitor, AnIdleRuntimesMonitorSleeps) {
  Runtime rt({.workers = 2, .stuck_threshold = 1ms});
  rt.block_on([] {});
  auto samples = [&] {
    std::string json = rt.stats_json();
    std::size_t at = json.find("\"monitor_samples\":");
    return std::strtoull(json.c_str() + at + 18, nullptr, 10);
  };
  // Every worker goes to sleep soon after (at most their spin before sleeping); from then on the
  // monitor samples no more until one wakes (20 ms after the last fiber ran). At its 500 us
  // period, 100 ms would be 200 samples.
  std::this_thread::sleep_for(50ms);
  const auto before = samples();
  std::this_thread::sleep_for(100ms);
  EXPECT_LE(samples() - before, 20u);
  // And it wakes with the workers.
  rt.block_on([] { (void)this_fiber::sleep_for(5ms); });
  EXPECT_GT(samples(), before);
}

// Sleepers: fibers that sleep 1 ms in a loop until told to stop, counting their wake-ups.
struct Sleepers {
  std::atomic<std::uint64_t> woke{0};
  std::atomic<bool> stop{false};
  std::vector<JoinHandle<void>> hs;
  Sleepers(Runtime& rt, int n) {
    for (int i = 0; i < n; ++i) {
      hs.push_back(rt.spawn([this] {
        while (!stop.load()) {
          (void)this_fiber::sleep_for(1ms);
          woke.fetch_add(1);
        }
      }));
    }
  }
  // AllParked: every sleeper has run (each has parked once at least).
  void WaitUntilRunning(std::uint64_t n) {
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (woke.load() < n && std::chrono::steady_clock::now() < end) std::this_thread::yield();
  }
  void Stop() {
    stop.store(true);
    for (auto& h : hs) EXPECT_TRUE(h.join().ok());
  }
};

using testing::HoldUntil;

// Every worker held by a fiber that never switches: a spare worker serves the others (its
// sleepers' timers, rescued from the stuck workers, then its own), so they make progress while
// the workers are held; without spares they would make none until the holders let go. Once the
// holders let go, the spare goes dormant.
void EveryWorkerStuck(unsigned workers) {
  Reports reports;
  Runtime rt({.workers = workers, .stuck_threshold = 2ms, .on_stuck = reports.callback()});
  Sleepers sleepers(rt, 100);
  sleepers.WaitUntilRunning(200);
  std::atomic<unsigned> holding{0};
  std::atomic<bool> release{false};
  std::vector<JoinHandle<bool>> holders;
  for (unsigned i = 0; i < workers; ++i) {
    holders.push_back(rt.spawn(
        [&] {
          holding.fetch_add(1);
          // Each holder waits for all, so that every worker is held at once; then for the
          // sleepers to make progress meanwhile.
          if (!HoldUntil([&] { return holding.load() == workers; })) return false;
          const std::uint64_t from = sleepers.woke.load();
          const bool progress = HoldUntil([&] { return sleepers.woke.load() >= from + 1000; });
          release.store(true);
          return progress;
        },
        {.pinned_worker = static_cast<int>(i)}));
  }
  for (auto& h : holders) {
    Result<bool> progress = h.join();
    ASSERT_TRUE(progress);
    EXPECT_TRUE(*progress) << rt.stats_json();
  }
  EXPECT_GE(reports.count(), workers);
  // The holders ended: the spare goes dormant, and the sleepers go on (on the workers).
  std::string json;
  EXPECT_TRUE(HoldUntil([&] {
    json = rt.stats_json();
    return json.find("\"spare\":\"dormant\"") != std::string::npos &&
           json.find("\"spare\":\"active\"") == std::string::npos;
  })) << json;
  const std::uint64_t from = sleepers.woke.load();
  sleepers.WaitUntilRunning(from + 200);
  EXPECT_GE(sleepers.woke.load(), from + 200);
  sleepers.Stop();
}

TEST(Spares, OneWorkerHeldASpareServesTheOthers) { EveryWorkerStuck(1); }
TEST(Spares, EveryWorkerHeldASpareServesTheOthers) { EveryWorkerStuck(2); }

// spare_workers = 0: no spare; the stuck worker's timers wait for it (no progress while held),
// and a spare, when allowed, starts only when every worker is held.
TEST(Spares, NoneWhenSpareWorkersIsZeroOrSomeWorkerIsFree) {
  {
    Reports reports;
    Runtime rt(
        {.workers = 1, .stuck_threshold = 2ms, .on_stuck = reports.callback(), .spare_workers = 0});
    rt.block_on([&] { EXPECT_TRUE(reports.SpinUntil(1)); });
    EXPECT_EQ(rt.stats_json().find("\"spare\""), std::string::npos);
  }
  {
    Reports reports;
    Runtime rt({.workers = 2, .stuck_threshold = 2ms, .on_stuck = reports.callback()});
    rt.block_on([&] { EXPECT_TRUE(reports.SpinUntil(1)); });  // one of two workers held
    EXPECT_EQ(rt.stats_json().find("\"spare\""), std::string::npos);
  }
}

// An absurd spare_workers counts as kMaxSpareWorkers: the runtime starts and serves (each spare's
// slot is made with the runtime, so the value must not reach an allocation).
TEST(Spares, AnAbsurdCountIsBounded) {
  Runtime rt({.workers = 1, .spare_workers = 4000000000u});
  EXPECT_EQ(rt.block_on([] { return 7; }), 7);
}

// A spare that is itself held while every worker is too: the next spare serves (bounded by
// spare_workers).
TEST(Spares, ASpareHeldTooTheNextOneServes) {
  Reports reports;
  Runtime rt(
      {.workers = 1, .stuck_threshold = 2ms, .on_stuck = reports.callback(), .spare_workers = 2});
  Sleepers sleepers(rt, 50);
  sleepers.WaitUntilRunning(100);
  std::atomic<bool> release{false};
  JoinHandle<void> first =
      rt.spawn([&] { (void)HoldUntil([&] { return release.load(); }); }, {.pinned_worker = 0});
  // The second holder starts on whichever worker runs it: the spare, once worker 0 is held.
  EXPECT_TRUE(HoldUntil([&] { return reports.count() >= 1; }));
  JoinHandle<bool> second = rt.spawn([&] {
    const std::uint64_t from = sleepers.woke.load();
    return HoldUntil([&] { return sleepers.woke.load() >= from + 500; });
  });
  Result<bool> progress = second.join();
  release.store(true);
  ASSERT_TRUE(progress);
  EXPECT_TRUE(*progress) << rt.stats_json();
  EXPECT_TRUE(first.join().ok());
  sleepers.Stop();
}

#if !defined(_WIN32)
// The default report: one line on stderr naming the fiber; a second spell within the second is
// not printed, and is counted in the next line.
TEST(Monitor, TheDefaultReportIsOneLineOnStderrAtMostOneASecond) {
  std::fflush(stderr);
  char path[] = "/tmp/weft_monitor_test_XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  int saved = ::dup(2);
  ASSERT_GE(::dup2(fd, 2), 0);
  {
    Runtime rt({.workers = 1, .stuck_threshold = 2ms});
    auto stuck_count = [&] {  // every worker's, spares' too (a fiber may run on one)
      std::string json = rt.stats_json();
      unsigned long long n = 0;
      for (std::size_t at = 0; (at = json.find("\"stuck\":", at)) != std::string::npos; ++at) {
        n += std::strtoull(json.c_str() + at + 8, nullptr, 10);
      }
      return n;
    };
    for (std::uint64_t spell = 1; spell <= 2; ++spell) {
      (void)rt
          .spawn(
              [&] {
                const auto end = std::chrono::steady_clock::now() + 30s;
                while (stuck_count() < spell && std::chrono::steady_clock::now() < end) {
                }
              },
              {.name = "busy"})
          .join();
    }
    std::this_thread::sleep_for(1100ms);
    rt.block_on([&] {
      const auto end = std::chrono::steady_clock::now() + 30s;
      while (stuck_count() < 3 && std::chrono::steady_clock::now() < end) {
      }
    });
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::string out;
  char buf[4096];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  ::unlink(path);
  std::vector<std::string> lines;
  for (std::size_t at = 0, nl; (nl = out.find('\n', at)) != std::string::npos; at = nl + 1) {
    if (out.compare(at, 11, "weft: fiber") == 0) lines.push_back(out.substr(at, nl - at));
  }
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_NE(lines[0].find("\"busy\""), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(" without a switch"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("(1 more skipped)"), std::string::npos) << lines[1];
}
#endif

}  // namespace
}  // namespace weft
