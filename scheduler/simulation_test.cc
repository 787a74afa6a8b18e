// scheduler/simulation_test.cc: a simulated runtime (RuntimeOptions::simulation): the same seed
// makes the same run (order of events, trace hash), whatever the worker count asked for; other
// seeds make other interleavings; the virtual clock jumps over idle time exactly; timers,
// deadlines and sync primitives work on it; blocking work stays on its thread; WEFT_SIM_SEED
// replays; and sim_explore finds a planted ordering bug and replays its seed.

#include "weft/scheduler/simulation.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/channel.h"
#include "weft/sync/coordination.h"
#include "weft/sync/mutex.h"
#include "weft/sync/timer.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// SetEnv: sets (or, with null, removes) an environment variable.
bool SetEnv(const char* name, const char* value) {
#ifdef _WIN32
  return _putenv_s(name, value != nullptr ? value : "") == 0;  // "" removes it
#else
  return (value != nullptr ? ::setenv(name, value, 1) : ::unsetenv(name)) == 0;
#endif
}

RuntimeOptions Sim(std::uint64_t seed, unsigned workers = 0) {
  return {.workers = workers, .simulation = SimulationOptions{.seed = seed}};
}

// Interleaved: four fibers that each append their number to a log five times, yielding, taking
// a Mutex and passing through a Channel between appends. The log is the interleaving.
std::string Interleaved(Runtime& rt) {
  return rt.block_on([&] {
    std::string log;
    Mutex mu;
    Channel<int> ch(2);
    std::vector<JoinHandle<void>> hs;
    for (int k = 0; k < 4; ++k) {
      hs.push_back(rt.spawn([&, k] {
        for (int i = 0; i < 5; ++i) {
          log += static_cast<char>('a' + k);
          this_fiber::yield();
          EXPECT_TRUE(mu.lock({}).ok());
          log += static_cast<char>('A' + k);
          EXPECT_TRUE(mu.unlock().ok());
          if (k % 2 == 0) {
            EXPECT_TRUE(ch.send(k).ok());
          } else {
            EXPECT_TRUE(ch.recv().ok());
          }
        }
      }));
    }
    for (auto& h : hs) EXPECT_TRUE(h.join().ok());
    return log;
  });
}

TEST(Simulation, TheSameSeedGivesTheSameRunWhateverTheWorkerCount) {
  std::string first;
  std::uint64_t hash = 0;
  for (unsigned workers : {1u, 4u, 0u}) {
    Runtime rt(Sim(42, workers));
    EXPECT_EQ(rt.workers(), 1u);
    const std::string log = Interleaved(rt);
    const SimulationReport report = *rt.simulation();
    EXPECT_EQ(report.seed, 42u);
    EXPECT_GE(report.steps, 25u);  // the root and four starts, and each fiber's five yields
    if (first.empty()) {
      first = log;
      hash = report.trace_hash;
    } else {
      EXPECT_EQ(log, first);
      EXPECT_EQ(report.trace_hash, hash);
    }
  }
  EXPECT_EQ(first.size(), 40u);
}

TEST(Simulation, OtherSeedsGiveOtherInterleavings) {
  std::set<std::string> logs;
  std::set<std::uint64_t> hashes;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    Runtime rt(Sim(seed));
    logs.insert(Interleaved(rt));
    hashes.insert(rt.simulation()->trace_hash);
  }
  // Twenty seeds over 40 appends by four fibers: a handful of collisions at most.
  EXPECT_GE(logs.size(), 15u);
  EXPECT_GE(hashes.size(), logs.size());
}

TEST(Simulation, ARuntimeThatIsNotSimulatedHasNoReport) {
  Runtime rt({.workers = 1});
  EXPECT_FALSE(rt.simulation().has_value());
}

TEST(Simulation, TheVirtualClockJumpsOverIdleTimeExactly) {
  Runtime rt(Sim(7, 1));
  // Sleeps of 3, 1 and 2 hours (and a Timer of 90 minutes): each wakes at its own virtual time,
  // in deadline order, after as many hours as it asked for plus the few microseconds of
  // scheduling steps.
  struct Woke {
    int who;
    SyncClock::duration after;
  };
  std::vector<Woke> woke = rt.block_on([&] {
    std::vector<Woke> order;
    const SyncClock::time_point start = SyncClock::now();
    std::vector<JoinHandle<void>> hs;
    for (int hours : {3, 1, 2}) {
      hs.push_back(rt.spawn([&, hours] {
        EXPECT_TRUE(this_fiber::sleep_for(std::chrono::hours(hours)).ok());
        order.push_back({hours * 60, SyncClock::now() - start});
      }));
    }
    hs.push_back(rt.spawn([&] {
      Timer t(90min);
      EXPECT_TRUE(t.wait().ok());
      order.push_back({90, SyncClock::now() - start});
    }));
    for (auto& h : hs) EXPECT_TRUE(h.join().ok());
    return order;
  });
  ASSERT_EQ(woke.size(), 4u);
  const int expect[] = {60, 90, 120, 180};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(woke[i].who, expect[i]);
    EXPECT_GE(woke[i].after, std::chrono::minutes(expect[i]));
    EXPECT_LT(woke[i].after, std::chrono::minutes(expect[i]) + 1ms);
  }
  EXPECT_GE(rt.simulation()->virtual_elapsed, 3h);
}

TEST(Simulation, DeadlinesTimeOutOnTheVirtualClock) {
  Runtime rt(Sim(3));
  rt.block_on([&] {
    Channel<int> ch(1);
    const SyncClock::time_point start = SyncClock::now();
    Result<int> r = ch.recv({.deadline = start + 10min});
    EXPECT_EQ(r.error(), std::errc::timed_out);
    EXPECT_GE(SyncClock::now() - start, 10min);
    EXPECT_LT(SyncClock::now() - start, 10min + 1ms);
    // Another fiber's send before the deadline: received, at the sender's virtual time.
    JoinHandle<void> sender = rt.spawn([&] {
      EXPECT_TRUE(this_fiber::sleep_for(30s).ok());
      EXPECT_TRUE(ch.send(5).ok());
    });
    const SyncClock::time_point asked = SyncClock::now();
    Result<int> got = ch.recv({.deadline = asked + 1min});
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 5);
    EXPECT_GE(SyncClock::now() - asked, 30s);
    EXPECT_LT(SyncClock::now() - asked, 31s);
    EXPECT_TRUE(sender.join().ok());
  });
}

TEST(Simulation, CancellationDeadlinesFireAtTheirVirtualTime) {
  Runtime rt(Sim(11));
  rt.block_on([&] {
    const SyncClock::time_point start = SyncClock::now();
    CancellationSource source;
    Event fired;
    SyncClock::time_point fired_at{};
    CancellationCallback callback(source.token(), [&] {
      fired_at = SyncClock::now();
      fired.set();
    });
    ASSERT_TRUE(source.cancel_after(2h).ok());
    // A later cancel_at of a linked source, replaced by an earlier one: the earlier counts.
    CancellationSource linked(source.token());
    ASSERT_TRUE(linked.cancel_at(start + 3h).ok());
    ASSERT_TRUE(linked.cancel_at(start + 1h).ok());
    Channel<int> never(1);
    const SyncClock::time_point asked = SyncClock::now();
    CancellationToken linked_token = linked.token();
    EXPECT_EQ(never.recv({.cancel = &linked_token}).error(), std::errc::operation_canceled);
    EXPECT_GE(SyncClock::now() - asked, 1h);
    EXPECT_LT(SyncClock::now() - asked, 1h + 1ms);
    EXPECT_FALSE(source.is_cancelled());
    EXPECT_TRUE(fired.wait().ok());
    EXPECT_GE(fired_at - start, 2h);
    EXPECT_LT(fired_at - start, 2h + 1ms);
    EXPECT_TRUE(source.token().is_cancelled());
  });
}

TEST(Simulation, AFiberPollingTheClockInAYieldLoopSeesItMove) {
  // Something is always runnable, so idleness never moves the clock: the per-decision step does.
  Runtime rt({.simulation = SimulationOptions{.seed = 1, .step = std::chrono::microseconds(10)}});
  const std::uint64_t spins = rt.block_on([] {
    const SyncClock::time_point until = SyncClock::now() + 1s;
    std::uint64_t n = 0;
    while (SyncClock::now() < until) {
      this_fiber::yield();
      ++n;
    }
    return n;
  });
  EXPECT_GE(spins, 99'000u);
  EXPECT_LE(spins, 100'001u);
}

TEST(Simulation, CallBlockingAndBlockingRegionsRunOnTheSimulationsThread) {
  Runtime rt(Sim(5));
  rt.block_on([] {
    const std::thread::id here = std::this_thread::get_id();
    EXPECT_EQ(call_blocking([] { return std::this_thread::get_id(); }), here);
    {
      BlockingRegion region;
      EXPECT_EQ(std::this_thread::get_id(), here);
    }
    EXPECT_EQ(std::this_thread::get_id(), here);
  });
}

TEST(Simulation, WeftSimSeedOverridesTheSeed) {
  std::string with_env;
  ASSERT_TRUE(SetEnv("WEFT_SIM_SEED", "12345"));
  {
    Runtime rt(Sim(1));
    with_env = Interleaved(rt);
    EXPECT_EQ(rt.simulation()->seed, 12345u);
  }
  ASSERT_TRUE(SetEnv("WEFT_SIM_SEED", nullptr));
  Runtime rt(Sim(12345));
  EXPECT_EQ(Interleaved(rt), with_env);
}

TEST(Simulation, ADeadlockIsHintedWithTheFibersDump) {
  // Every fiber parked with nothing to wake it but another thread: the hint comes (here its
  // callback, on the simulation's thread, breaks the deadlock so that the test ends).
  Event never;
  std::string dump;
  Runtime rt({.deadlock_hint_after = 20ms,
              .on_deadlock_hint =
                  [&](std::string_view d) {
                    dump = d;
                    never.set();
                  },
              .simulation = SimulationOptions{.seed = 2}});
  rt.block_on([&] {
    JoinHandle<void> waiter = rt.spawn([&] { EXPECT_TRUE(never.wait().ok()); }, {.name = "stuck"});
    EXPECT_TRUE(waiter.join().ok());
  });
  EXPECT_NE(dump.find("a deadlock?"), std::string::npos) << dump;
  EXPECT_NE(dump.find("\"stuck\" parked on Event"), std::string::npos) << dump;
}

TEST(Simulation, ShutdownEndsParkedAndSleepingFibers) {
  Event never;
  {
    Runtime rt(Sim(4));
    rt.block_on([&] {
      rt.spawn([&] { (void)never.wait(); }).detach();
      rt.spawn([] { (void)this_fiber::sleep_for(24h); }).detach();
      CancellationSource later;
      ASSERT_TRUE(later.cancel_after(48h).ok());
    });
  }  // ~Runtime interrupts both and returns
  SUCCEED();
}

TEST(Simulation, TraceNamesEachDecision) {
  Runtime rt({.simulation = SimulationOptions{.seed = 9, .trace = true}});
  rt.block_on([&] {
    JoinHandle<void> child = rt.spawn([] { this_fiber::yield(); });
    EXPECT_TRUE(child.join().ok());
  });
  const SimulationReport report = *rt.simulation();
  // The root is fiber 1, its child fiber 2; the first decision runs the root, alone.
  EXPECT_EQ(report.trace.rfind("0 t=0 run=1 of=1\n", 0), 0u) << report.trace;
  EXPECT_NE(report.trace.find(" run=2 of="), std::string::npos) << report.trace;
  std::size_t lines = 0;
  for (char c : report.trace) lines += c == '\n';
  EXPECT_EQ(lines, report.steps);
}

// ---- Finding a planted bug ----------------------------------------------------------------------

// Account: a balance that withdrawals must never overdraw. Withdraw checks the balance, then
// writes an audit record (a Mutex-guarded log: a park point whenever the log is contended),
// then debits. `recheck` is the fix: check again once the audit record is written. Without it,
// two withdrawals whose checks both come before either debit overdraw, which needs a fiber to
// lose the log's Mutex in the window: rare on a real runtime, and found by seed exploration.
struct Account {
  std::int64_t balance = 100;
  Mutex log_mu;
  std::vector<std::int64_t> log;
  bool Withdraw(std::int64_t amount, bool recheck) {
    if (balance < amount) return false;
    EXPECT_TRUE(log_mu.lock({}).ok());
    log.push_back(amount);
    this_fiber::yield();  // the log's write, which lets other fibers run
    EXPECT_TRUE(log_mu.unlock().ok());
    if (recheck && balance < amount) return false;
    balance -= amount;
    return true;
  }
};

bool NeverOverdrawn(Runtime& rt, bool recheck) {
  Account account;
  std::vector<JoinHandle<bool>> hs;
  for (std::int64_t amount : {60, 30, 50}) {
    hs.push_back(rt.spawn([&, amount] { return account.Withdraw(amount, recheck); }));
  }
  for (auto& h : hs) EXPECT_TRUE(h.join().ok());
  return account.balance >= 0;
}

TEST(SimExplore, FindsAPlantedOrderingBugAndItsSeedReplays) {
  const std::size_t seeds = 100 * static_cast<std::size_t>(testing::StressScale());
  SimExploreResult found =
      sim_explore(1, seeds, [](Runtime& rt) { return NeverOverdrawn(rt, /*recheck=*/false); });
  EXPECT_EQ(found.runs, seeds);
  ASSERT_FALSE(found.failing.empty()) << "no seed of " << seeds << " overdrew the account";
  // The failing seed fails again, every time, with the same decisions.
  const std::uint64_t seed = found.failing.front();
  std::set<std::uint64_t> hashes;
  for (int replay = 0; replay < 3; ++replay) {
    SimExploreResult again =
        sim_explore(seed, 1, [](Runtime& rt) { return NeverOverdrawn(rt, /*recheck=*/false); });
    EXPECT_EQ(again.failing, std::vector<std::uint64_t>{seed});
    hashes.insert(again.trace_hashes.at(0));
  }
  EXPECT_EQ(hashes.size(), 1u);
  EXPECT_EQ(*hashes.begin(), found.trace_hashes.at(seed - 1));
  // And the fixed withdrawal never overdraws, on any of those seeds.
  SimExploreResult fixed =
      sim_explore(1, seeds, [](Runtime& rt) { return NeverOverdrawn(rt, /*recheck=*/true); });
  EXPECT_TRUE(fixed.failing.empty());
}

}  // namespace
}  // namespace weft
