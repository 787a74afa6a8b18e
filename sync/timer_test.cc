// sync/timer_test.cc: what the suite (timer_suite.cc) cannot say on a Runner: the missed-tick
// policies on a virtual clock, a million armed timers, saturation, refused select cases, and
// destroying a waited-on timer.

#include "weft/sync/timer.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/channel.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using TP = SyncClock::time_point;

// A virtual clock: time points at whole milliseconds from an arbitrary origin.
TP At(std::int64_t ms) { return TP(std::chrono::milliseconds(1'000'000 + ms)); }

struct TickCase {
  MissedTickPolicy policy;
  std::int64_t scheduled, period, now, next;  // ms on the virtual clock
};

// Every policy, on time, late by less than a period, exactly a period late (missed), and late
// by several periods, on and off the schedule's points.
TEST(NextTickTest, EveryPolicyAgainstVirtualTimes) {
  using P = MissedTickPolicy;
  const TickCase cases[] = {
      // Nothing missed (now < scheduled + period): every policy keeps the schedule.
      {P::kBurst, 100, 100, 100, 200},
      {P::kDelay, 100, 100, 100, 200},
      {P::kSkip, 100, 100, 100, 200},
      {P::kBurst, 100, 100, 199, 200},
      {P::kDelay, 100, 100, 199, 200},
      {P::kSkip, 100, 100, 199, 200},
      {P::kDelay, 100, 100, 50, 200},  // taken early (not by a Ticker): as on time
      // Missed by exactly a period: the following tick is due as it is taken.
      {P::kBurst, 100, 100, 200, 200},  // back to back
      {P::kDelay, 100, 100, 200, 300},  // a period after it was taken
      {P::kSkip, 100, 100, 200, 300},   // the due point 200 is skipped: strictly after now
      // Late by 3.5 periods.
      {P::kBurst, 100, 100, 450, 200},
      {P::kDelay, 100, 100, 450, 550},
      {P::kSkip, 100, 100, 450, 500},
      // Late by 10 periods plus one millisecond, with a period of 7.
      {P::kBurst, 0, 7, 71, 7},
      {P::kDelay, 0, 7, 71, 78},
      {P::kSkip, 0, 7, 71, 77},
  };
  for (const TickCase& c : cases) {
    EXPECT_EQ(next_tick(c.policy, At(c.scheduled), std::chrono::milliseconds(c.period), At(c.now)),
              At(c.next))
        << "policy " << static_cast<int>(c.policy) << " scheduled " << c.scheduled << " period "
        << c.period << " now " << c.now;
  }
}

// A burst policy taken late repeatedly: the ticks come back to back until caught up, then on
// schedule; delay shifts the schedule once; skip stays on it.
TEST(NextTickTest, SequencesOfTicksOnAVirtualClock) {
  const SyncClock::duration p = 10ms;
  auto run = [&](MissedTickPolicy policy, std::int64_t taken_at_ms[], int n) {
    std::string out;
    TP scheduled = At(0);
    for (int i = 0; i < n; ++i) {
      TP now = std::max(At(taken_at_ms[i]), scheduled);  // a tick is taken once due
      out += std::to_string((scheduled - At(0)) / 1ms) + " ";
      scheduled = next_tick(policy, scheduled, p, now);
    }
    return out;
  };
  // Taken: the first at 35 (3.5 periods late), the rest as soon as due.
  std::int64_t taken[] = {35, 0, 0, 0, 0, 0};
  EXPECT_EQ(run(MissedTickPolicy::kBurst, taken, 6), "0 10 20 30 40 50 ");
  EXPECT_EQ(run(MissedTickPolicy::kDelay, taken, 6), "0 45 55 65 75 85 ");
  EXPECT_EQ(run(MissedTickPolicy::kSkip, taken, 6), "0 40 50 60 70 80 ");
}

TEST(NextTickTest, SaturatesAndRefusesANonPositivePeriod) {
  const TP max = TP::max();
  EXPECT_EQ(next_tick(MissedTickPolicy::kBurst, max - 1ns, 10ns, At(0)), max);
  EXPECT_EQ(next_tick(MissedTickPolicy::kDelay, At(0), SyncClock::duration::max(), At(5)), max);
  EXPECT_EQ(next_tick(MissedTickPolicy::kSkip, TP::min(), 1h, max - 1ns), max);
  EXPECT_EQ(next_tick(MissedTickPolicy::kBurst, At(0), 0ns, At(0)), max);
  EXPECT_EQ(next_tick(MissedTickPolicy::kSkip, At(0), -1ms, At(0)), max);
}

// Threads: the process's thread count, from /proc (Linux).
int Threads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// A million armed timers: their objects and nothing else (no thread, no heap entry: nobody
// waits). Stopping each reports it was armed. Fewer under the sanitizers.
TEST(TimerTest, AMillionArmedTimersCostOnlyTheirObjects) {
  static_assert(sizeof(Timer) <= 64, "a Timer is its object: keep it within a cache line");
  const std::size_t n = testing::kAsan || testing::kTsan ? 100'000 : 1'000'000;
  const int threads_before = Threads();
  std::unique_ptr<Timer[]> timers(new Timer[n]);
  const TP base = SyncClock::now() + 1h;
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_FALSE(timers[i].reset(base + std::chrono::nanoseconds(i)));  // was not armed
  }
  EXPECT_EQ(Threads(), threads_before);  // no thread per timer, nor one for all of them
  EXPECT_EQ(timers[n - 1].deadline(), base + std::chrono::nanoseconds(n - 1));
  EXPECT_FALSE(timers[n / 2].fired());
  // One of them waited on: due at once after a reset to the past.
  EXPECT_TRUE(timers[n / 2].reset(SyncClock::now() - 1ns));
  EXPECT_TRUE(timers[n / 2].wait().ok());
  std::size_t armed = 0;
  for (std::size_t i = 0; i < n; ++i) armed += timers[i].stop();
  EXPECT_EQ(armed, n - 1);  // all but the one that fired
}

TEST(TimerTest, DelaysBeyondTheClockSaturate) {
  Timer t(SyncClock::duration::max());
  EXPECT_EQ(t.deadline(), TP::max());
  EXPECT_FALSE(t.fired());
  EXPECT_EQ(t.wait({.deadline = SyncClock::now() + 1ms}).error(), std::errc::timed_out);
  EXPECT_TRUE(t.reset(SyncClock::duration::min()));  // the far past: fired at once
  EXPECT_LT(*t.deadline(), SyncClock::now());
  EXPECT_TRUE(t.fired());
  EXPECT_TRUE(t.wait().ok());
  Ticker far(SyncClock::duration::max());
  EXPECT_EQ(far.next(), TP::max());
  EXPECT_EQ(far.try_tick().error(), std::errc::resource_unavailable_try_again);
}

TEST(TimerTest, ATickerWithANonPositivePeriodIsRefused) {
  for (SyncClock::duration period : {SyncClock::duration::zero(), SyncClock::duration(-5)}) {
    Ticker bad(period);
    EXPECT_EQ(bad.tick().error(), std::errc::invalid_argument);
    EXPECT_EQ(bad.try_tick().error(), std::errc::invalid_argument);
    EXPECT_FALSE(bad.next().has_value());
    bad.reset();
    EXPECT_FALSE(bad.next().has_value());
    TP when;
    SelectCase c[1] = {bad.select_case(when)};
    EXPECT_EQ(select(c, {}, true).error(), std::errc::invalid_argument);
  }
}

TEST(TimerTest, SelectRefusesMalformedTimerAndTokenCases) {
  Channel<int> ch(1);
  int v = 0;
  Timer t(SyncClock::now() - 1s);  // fired: a well-formed case would be chosen
  CancellationSource source;
  source.cancel();
  CancellationToken token = source.token();
  SelectCase two_kinds[1] = {ch.recv_case(v)};
  two_kinds[0].timer = t.select_case().timer;
  EXPECT_EQ(select(two_kinds, {}, true).error(), std::errc::invalid_argument);
  SelectCase timer_send[1] = {t.select_case()};
  timer_send[0].is_send = true;
  EXPECT_EQ(select(timer_send, {}, true).error(), std::errc::invalid_argument);
  SelectCase token_value[1] = {cancel_case(token)};
  token_value[0].value = &v;
  EXPECT_EQ(select(token_value, {}, true).error(), std::errc::invalid_argument);
  SelectCase token_and_timer[1] = {cancel_case(token)};
  token_and_timer[0].timer = t.select_case().timer;
  EXPECT_EQ(select(token_and_timer, {}, true).error(), std::errc::invalid_argument);
  // Well formed: ready at once.
  SelectCase ok[2] = {t.select_case(), cancel_case(token)};
  Result<SelectResult> r = select(ok);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->index == 0 || r->index == 1);
  // A default token never fires: the default is taken.
  CancellationToken never;
  SelectCase idle[1] = {cancel_case(never)};
  r = select(idle, {}, true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->index, -1);
  EXPECT_EQ(select(idle, {.deadline = SyncClock::now() + 1ms}).error(), std::errc::timed_out);
}

TEST(TimerDeathTest, DestroyingATimerWithWaitersAborts) {
  GTEST_FLAG_SET(death_test_style, weft::testing::DeathTestStyle());
  EXPECT_DEATH(
      {
        auto* t = new Timer();
        std::thread waiter([t] { (void)t->wait(); });
        waiter.detach();
        while (t->waiters() == 0) std::this_thread::yield();
        delete t;
      },
      "weft: Timer destroyed while fibers or threads wait on it");
}

}  // namespace
}  // namespace weft
