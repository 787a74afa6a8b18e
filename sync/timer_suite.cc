// sync/timer_suite.cc: Timer, Ticker and select's timer and token cases, as part of the //sync
// suite (sync_suite.h): on OS threads in //sync:sync_test, on fibers in
// //scheduler:sync_on_fibers_test. The waits run both in spawned tasks (threads or fibers) and
// on the test body's thread. Nothing here measures time: tests check what a wait returned
// against the clock and the deadlines ("returned at or after D"), never how long it took.
// WEFT_STRESS_SCALE=N lengthens the racing tests.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "weft/base/cpu_relax.h"
#include "weft/base/stress_scale.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/channel.h"
#include "weft/sync/sync_suite.h"
#include "weft/sync/timer.h"

namespace weft {
namespace {

using ::weft::testing::StressScale;
using namespace std::chrono_literals;

WaitOptions In(SyncClock::duration d) { return WaitOptions{SyncClock::now() + d, nullptr}; }

// WaitForWaiters: on the test body's thread, until `n` waits or selects are queued on `t`.
template <typename T>
void WaitForWaiters(const T& t, std::size_t n) {
  while (t.waiters() < n) std::this_thread::yield();
}

// Spin: a short, seeded, varying pause, to move a race's window around.
void Spin(std::uint32_t& seed, std::uint32_t max) {
  seed = seed * 1664525u + 1013904223u;  // LCG: cheap and deterministic
  for (std::uint32_t i = (seed >> 16) % max; i > 0; --i) CpuRelax();
}

// ---- Timer -------------------------------------------------------------------------------------

TEST_P(SyncTest, TimerWaitReturnsOnceItsDeadlinePassed) {
  Timer t(10ms);
  const SyncClock::time_point d = *t.deadline();
  for (int k = 0; k < 2; ++k) {
    runner().Spawn([&] {
      ASSERT_TRUE(t.wait().ok());
      EXPECT_GE(SyncClock::now(), d);
      EXPECT_TRUE(t.fired());
    });
  }
  ASSERT_TRUE(t.wait().ok());
  EXPECT_GE(SyncClock::now(), d);
  runner().JoinAll();
  EXPECT_TRUE(t.wait(In(0s)).ok());  // a fired timer stays fired
  EXPECT_FALSE(t.stop());            // it had fired: nothing to prevent
  EXPECT_FALSE(t.deadline().has_value());
  EXPECT_FALSE(t.fired());
  EXPECT_EQ(t.wait(In(2ms)).error(), std::errc::timed_out);  // stopped: waits for a reset
  EXPECT_FALSE(t.reset(SyncClock::now() - 1s));              // not armed; fired at once
  EXPECT_TRUE(t.fired());
  EXPECT_TRUE(t.wait().ok());
}

TEST_P(SyncTest, TimerResetEarlierWakesItsWaiters) {
  Timer t(1h);
  const SyncClock::time_point d = SyncClock::now() + 5ms;
  for (int k = 0; k < 2; ++k) {
    runner().Spawn([&] {
      ASSERT_TRUE(t.wait().ok());
      EXPECT_GE(SyncClock::now(), d);
    });
  }
  WaitForWaiters(t, 2);
  EXPECT_TRUE(t.reset(d));  // the hour had not passed
  runner().JoinAll();
  EXPECT_EQ(t.waiters(), 0u);
}

// A reset to a later deadline wakes nobody: the waiters wake at the old deadline, find the new
// one, and wait on. Unless the old deadline won the race (reset returns false), they return
// at or after the new one.
TEST_P(SyncTest, TimerResetLaterHoldsItsWaiters) {
  Timer t(SyncClock::now() + 20ms);
  const SyncClock::time_point later = SyncClock::now() + 40ms;
  std::atomic<SyncClock::time_point> returned_at{};
  runner().Spawn([&] {
    ASSERT_TRUE(t.wait().ok());
    returned_at = SyncClock::now();
  });
  WaitForWaiters(t, 1);
  const bool prevented = t.reset(later);
  runner().JoinAll();
  if (prevented) {
    EXPECT_GE(returned_at.load(), later);
  }
  EXPECT_TRUE(t.wait().ok());  // armed with `later` either way
}

// stop() holds the waiters past the old deadline, until a reset fires the timer or their own
// token gives up.
TEST_P(SyncTest, TimerStopHoldsItsWaitersUntilAReset) {
  Timer t(SyncClock::now() + 10ms);
  CancellationSource source;
  CancellationToken token = source.token();
  std::atomic<int> cancelled{0}, fired{0};
  runner().Spawn([&] {
    Result<void> r = t.wait({.cancel = &token});
    (r.ok() ? fired : cancelled).fetch_add(1);
  });
  runner().Spawn([&] {
    if (t.wait().ok()) fired.fetch_add(1);
  });
  WaitForWaiters(t, 2);
  if (!t.stop()) {  // the deadline won the race: both saw the fire
    runner().JoinAll();
    EXPECT_EQ(fired.load(), 2);
    return;
  }
  Timer past_old_deadline(20ms);  // waits past the stopped deadline; the waiters must not return
  ASSERT_TRUE(past_old_deadline.wait().ok());
  EXPECT_EQ(fired.load() + cancelled.load(), 0);
  EXPECT_FALSE(t.fired());
  source.cancel();
  while (cancelled.load() == 0) std::this_thread::yield();
  EXPECT_EQ(fired.load(), 0);
  EXPECT_FALSE(t.reset(SyncClock::now()));  // it was stopped; due at once
  runner().JoinAll();
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(cancelled.load(), 1);
}

// The linearization: a waiter queued before the deadline D; then reset (to an hour on) or stop
// races D. reset/stop returning true (D had not passed) means the waiter does not see a fire
// (it is cancelled later); false means D passed first, and the waiter returns ok. Exactly one,
// every round; a lost or stale fire fails the round, and a lost wake-up its safety deadline.
TEST_P(SyncTest, TimerResetOrStopRacingExpiryHasOneOutcome) {
  const int rounds = 300 * StressScale();
  std::uint32_t seed = 2024;
  int prevented_count = 0;
  for (int round = 0; round < rounds; ++round) {
    Timer t;  // not armed: the waiter waits for the reset below
    CancellationSource source;
    CancellationToken token = source.token();
    std::atomic<int> outcome{0};  // 1: ok, 2: cancelled, 3: the safety deadline
    runner().Spawn([&] {
      Result<void> r = t.wait({.deadline = SyncClock::now() + 10s, .cancel = &token});
      outcome = r.ok() ? 1 : r.error() == std::errc::operation_canceled ? 2 : 3;
    });
    WaitForWaiters(t, 1);
    seed = seed * 1664525u + 1013904223u;
    (void)t.reset(SyncClock::now() + std::chrono::microseconds((seed >> 16) % 100));
    Spin(seed, 4000);
    const bool prevented = round % 2 == 0 ? t.reset(SyncClock::now() + 1h) : t.stop();
    if (prevented) source.cancel();
    runner().JoinAll();
    ASSERT_EQ(outcome.load(), prevented ? 2 : 1) << "round " << round;
    prevented_count += prevented;
  }
  // Both outcomes should have happened (not asserted: a loaded machine may skew them).
  std::printf("reset/stop prevented the fire in %d of %d rounds\n", prevented_count, rounds);
}

// ---- Ticker ------------------------------------------------------------------------------------

// Burst: the due ticks come at once, each reporting its scheduled time, then tick() waits.
TEST_P(SyncTest, TickerBurstCatchesUpThenWaits) {
  auto check = [](SyncClock::duration p) {
    const SyncClock::time_point first = SyncClock::now() - 3 * p - p / 2;
    Ticker ticker(first, p, MissedTickPolicy::kBurst);
    for (int k = 0; k < 4; ++k) {
      Result<SyncClock::time_point> t = ticker.tick();
      ASSERT_TRUE(t.ok());
      EXPECT_EQ(*t, first + k * p);
    }
    Result<SyncClock::time_point> t = ticker.tick();
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(*t, first + 4 * p);
    EXPECT_GE(SyncClock::now(), *t);
    EXPECT_EQ(ticker.next(), first + 5 * p);
  };
  runner().Spawn([&] { check(50ms); });
  check(40ms);
  runner().JoinAll();
}

// Delay and skip on the real clock: the next tick after a missed one is placed relative to
// when the late tick was taken (between the clock readings around tick()).
TEST_P(SyncTest, TickerDelayAndSkipPlaceTheTickAfterAMissedOne) {
  const SyncClock::duration p = 5ms;
  {
    const SyncClock::time_point first = SyncClock::now() - 10 * p;
    Ticker ticker(first, p, MissedTickPolicy::kDelay);
    const SyncClock::time_point before = SyncClock::now();
    EXPECT_EQ(*ticker.tick(), first);
    const SyncClock::time_point after = SyncClock::now();
    ASSERT_TRUE(ticker.next().has_value());
    EXPECT_GE(*ticker.next(), before + p);
    EXPECT_LE(*ticker.next(), after + p);
    const SyncClock::time_point next = *ticker.next();
    EXPECT_EQ(*ticker.tick(), next);
    // Taken within a period of its time (not a missed tick): the schedule goes on.
    if (SyncClock::now() < next + p) {
      EXPECT_EQ(ticker.next(), next + p);
    }
  }
  {
    const SyncClock::time_point first = SyncClock::now() - 10 * p - p / 2;
    Ticker ticker(first, p, MissedTickPolicy::kSkip);
    const SyncClock::time_point before = SyncClock::now();
    EXPECT_EQ(*ticker.tick(), first);
    const SyncClock::time_point after = SyncClock::now();
    const SyncClock::time_point next = *ticker.next();
    EXPECT_EQ((next - first) % p, SyncClock::duration::zero());  // on the original schedule
    EXPECT_GT(next, before);
    EXPECT_LE(next, after + p);
    EXPECT_EQ(*ticker.tick(), next);
  }
}

// Concurrent tick() calls: every tick goes to exactly one of them.
TEST_P(SyncTest, TickerTicksGoToOneTakerEach) {
  const SyncClock::duration p = 500us;
  constexpr int kTakers = 4, kEach = 25;
  const SyncClock::time_point first = SyncClock::now() - 60 * p;  // 61 due, the rest to wait for
  Ticker ticker(first, p, MissedTickPolicy::kBurst);
  std::array<std::vector<SyncClock::time_point>, kTakers> taken;
  for (int k = 0; k < kTakers; ++k) {
    runner().Spawn([&, k] {
      for (int i = 0; i < kEach; ++i) {
        Result<SyncClock::time_point> t = ticker.tick();
        ASSERT_TRUE(t.ok());
        taken[static_cast<std::size_t>(k)].push_back(*t);
      }
    });
  }
  runner().JoinAll();
  std::set<SyncClock::time_point> all;
  for (auto& v : taken) all.insert(v.begin(), v.end());
  ASSERT_EQ(all.size(), std::size_t{kTakers * kEach});  // none twice
  int k = 0;
  for (SyncClock::time_point t : all) EXPECT_EQ(t, first + (k++) * p);  // none skipped
}

TEST_P(SyncTest, TickerStopAndReset) {
  Ticker ticker(SyncClock::now() - 1ms, 1h);
  EXPECT_TRUE(ticker.try_tick().ok());
  EXPECT_EQ(ticker.try_tick().error(), std::errc::resource_unavailable_try_again);
  EXPECT_TRUE(ticker.stop());
  EXPECT_FALSE(ticker.next().has_value());
  EXPECT_EQ(ticker.tick(In(1ms)).error(), std::errc::timed_out);
  const SyncClock::time_point before = SyncClock::now();
  ticker.reset();
  ASSERT_TRUE(ticker.next().has_value());
  EXPECT_GE(*ticker.next(), before + 1h);
  CancellationSource source;
  CancellationToken token = source.token();
  runner().Spawn(
      [&] { EXPECT_EQ(ticker.tick({.cancel = &token}).error(), std::errc::operation_canceled); });
  WaitForWaiters(ticker, 1);
  source.cancel();
  runner().JoinAll();
}

// ---- select with timers and tokens --------------------------------------------------------------

// One select over a channel, a timer and a token; each in turn is the case that happens.
void SelectEachCaseInTurn(Runner& runner, bool select_in_task) {
  Channel<int> ch(1);
  int got = 0;
  Timer t(1h);
  CancellationSource source;
  CancellationToken token = source.token();
  std::array<SelectCase, 3> cases{ch.recv_case(got), t.select_case(), cancel_case(token)};
  // Runs `select_fn` where the select belongs and `trigger` on the other side.
  auto run = [&](std::function<void()> select_fn, std::function<void()> trigger) {
    if (select_in_task) {
      runner.Spawn(select_fn);
      trigger();
    } else {
      runner.Spawn(trigger);
      select_fn();
    }
    runner.JoinAll();
  };
  // wait_queued: in the trigger, until the select watches the timer (its nodes are queued).
  auto wait_queued = [&] {
    while (t.waiters() == 0) {
      if (select_in_task) {
        std::this_thread::yield();
      } else {
        runner.Relax();
      }
    }
  };
  // The channel.
  run(
      [&] {
        Result<SelectResult> r = select(cases);
        ASSERT_TRUE(r.ok());
        EXPECT_EQ(r->index, 0);
        EXPECT_TRUE(r->ok);
        EXPECT_EQ(got, 7);
      },
      [&] {
        wait_queued();
        ASSERT_TRUE(ch.send(7).ok());
      });
  // The timer, reset to an earlier deadline while the select waits: it looks again.
  const SyncClock::time_point d = SyncClock::now() + 3ms;
  run(
      [&] {
        Result<SelectResult> r = select(cases);
        ASSERT_TRUE(r.ok());
        EXPECT_EQ(r->index, 1);
        EXPECT_TRUE(r->ok);
        EXPECT_GE(SyncClock::now(), d);
      },
      [&] {
        wait_queued();
        EXPECT_TRUE(t.reset(d));
      });
  // A fired timer stays fired: its case is ready again at once.
  Result<SelectResult> again = select(cases);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->index, 1);
  EXPECT_FALSE(t.reset(1h));  // it had fired
  // The token.
  run(
      [&] {
        Result<SelectResult> r = select(cases);
        ASSERT_TRUE(r.ok());
        EXPECT_EQ(r->index, 2);
        EXPECT_TRUE(r->ok);
      },
      [&] {
        wait_queued();
        source.cancel();
      });
  EXPECT_EQ(t.waiters(), 0u);
  // The select's own deadline and token still give errors.
  std::array<SelectCase, 2> two{ch.recv_case(got), t.select_case()};
  EXPECT_EQ(select(two, In(2ms)).error(), std::errc::timed_out);
  CancellationSource own;
  CancellationToken own_token = own.token();
  own.cancel();
  EXPECT_EQ(select(two, {.cancel = &own_token}).error(), std::errc::operation_canceled);
  EXPECT_EQ(t.waiters(), 0u);
}

TEST_P(SyncTest, SelectWithAChannelATimerAndATokenEachHappen) {
  SelectEachCaseInTurn(runner(), /*select_in_task=*/false);
  SelectEachCaseInTurn(runner(), /*select_in_task=*/true);
}

// A timer stopped during a select does not fire for it: the select ends by its own deadline.
TEST_P(SyncTest, SelectSeesATimerStoppedWhileItWaits) {
  Timer t(SyncClock::now() + 10ms);
  Channel<int> ch(1);
  int got = 0;
  std::array<SelectCase, 2> cases{ch.recv_case(got), t.select_case()};
  std::atomic<int> index{-3};
  runner().Spawn([&] {
    Result<SelectResult> r = select(cases, In(40ms));
    index = r.ok() ? r->index : (r.error() == std::errc::timed_out ? -2 : -4);
  });
  WaitForWaiters(t, 1);
  const bool stopped = t.stop();
  runner().JoinAll();
  EXPECT_EQ(index.load(), stopped ? -2 : 1);
}

// A Ticker case takes one tick and reports its scheduled time.
TEST_P(SyncTest, SelectTakesATickersTicks) {
  const SyncClock::duration p = 3ms;
  const SyncClock::time_point first = SyncClock::now() - p / 2;
  Ticker ticker(first, p);
  SyncClock::time_point when{};
  Channel<int> ch(1);
  int got = 0;
  std::array<SelectCase, 2> cases{ch.recv_case(got), ticker.select_case(when)};
  runner().Spawn([&] {
    for (int k = 0; k < 3; ++k) {
      Result<SelectResult> r = select(cases);
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r->index, 1);
      EXPECT_EQ(when, first + k * p);
      EXPECT_GE(SyncClock::now(), when);
    }
  });
  runner().JoinAll();
  EXPECT_EQ(ticker.next(), first + 3 * p);
}

// A fired timer and a ready channel: select picks either, at random.
TEST_P(SyncTest, SelectIsFairBetweenAFiredTimerAndAReadyChannel) {
  Timer t(SyncClock::now() - 1s);
  Channel<int> ch(1);
  int got = 0;
  std::array<SelectCase, 2> cases{ch.recv_case(got), t.select_case()};
  int counts[2] = {0, 0};
  constexpr int kRounds = 4000;
  for (int i = 0; i < kRounds; ++i) {
    (void)ch.try_send(1);
    Result<SelectResult> r = select(cases);
    ASSERT_TRUE(r.ok());
    ++counts[r->index];
  }
  EXPECT_GT(counts[0], kRounds * 4 / 10);
  EXPECT_GT(counts[1], kRounds * 4 / 10);
}

// A timer due, or a token cancelled, just as the select parks still ends it (the safety
// deadline catches a lost wake-up).
TEST_P(SyncTest, SelectRacingATimerAndACancelLosesNoWakeup) {
  const int rounds = 300 * StressScale();
  std::uint32_t seed = 77;
  for (int round = 0; round < rounds; ++round) {
    Timer t(SyncClock::now() + std::chrono::microseconds(round % 50));
    Channel<int> ch(1);
    int got = 0;
    CancellationSource source;
    CancellationToken token = source.token();
    std::array<SelectCase, 3> cases{ch.recv_case(got), t.select_case(), cancel_case(token)};
    const bool cancel = round % 2 == 1;
    if (cancel) {
      Spin(seed, 2000);  // before the spawn: the task must not busy-wait
      runner().Spawn([&] { source.cancel(); });
    }
    Result<SelectResult> r = select(cases, In(10s));
    runner().JoinAll();
    ASSERT_TRUE(r.ok()) << "round " << round << ": " << static_cast<int>(r.error());
    if (cancel) {
      EXPECT_TRUE(r->index == 1 || r->index == 2);
    } else {
      EXPECT_EQ(r->index, 1);
    }
    EXPECT_EQ(t.waiters(), 0u);
  }
}

}  // namespace
}  // namespace weft
