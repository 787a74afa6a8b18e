// sync/sync_suite.cc: the //sync tests, parameterised by a Runner (see sync_suite.h).
// WEFT_STRESS_SCALE=N lengthens the stress tests.

#include "weft/sync/sync_suite.h"

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "weft/base/cpu_relax.h"
#include "weft/base/stress_scale.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/channel.h"
#include "weft/sync/coordination.h"
#include "weft/sync/mutex.h"

namespace weft {
namespace {

using ::weft::testing::StressScale;
using namespace std::chrono_literals;

WaitOptions In(SyncClock::duration d) { return WaitOptions{SyncClock::now() + d, nullptr}; }

// ---- Mutex -----------------------------------------------------------------------------------

TEST_P(SyncTest, MutexBasics) {
  Mutex m;
  ASSERT_TRUE(m.lock({}).ok());
  EXPECT_EQ(m.lock({}).error(), std::errc::resource_deadlock_would_occur);  // not recursive
  EXPECT_FALSE(m.try_lock());
  runner().Spawn([&] {
    EXPECT_FALSE(m.try_lock());
    EXPECT_EQ(m.unlock().error(), std::errc::operation_not_permitted);  // not the owner
    EXPECT_EQ(m.lock(In(20ms)).error(), std::errc::timed_out);
  });
  runner().JoinAll();
  ASSERT_TRUE(m.unlock().ok());
  EXPECT_EQ(m.unlock().error(), std::errc::operation_not_permitted);  // not held any more
  EXPECT_TRUE(m.try_lock());
  ASSERT_TRUE(m.unlock().ok());
}

TEST_P(SyncTest, MutexLockIsCancellable) {
  Mutex m;
  ASSERT_TRUE(m.lock({}).ok());
  CancellationSource source;
  CancellationToken token = source.token();
  std::atomic<bool> cancelled{false};
  runner().Spawn([&] {
    Result<void> r = m.lock({.cancel = &token});
    EXPECT_EQ(r.error(), std::errc::operation_canceled);
    cancelled = true;
  });
  source.cancel();
  runner().JoinAll();
  EXPECT_TRUE(cancelled);
  ASSERT_TRUE(m.unlock().ok());
}

TEST_P(SyncTest, MutexGuardsANonAtomicCounter) {
  Mutex m;
  std::int64_t counter = 0;  // deliberately not atomic: TSan checks the mutex orders it
  const int per = 20000 * StressScale();
  constexpr int kTasks = 4;
  for (int t = 0; t < kTasks; ++t) {
    runner().Spawn([&] {
      for (int i = 0; i < per; ++i) {
        ASSERT_TRUE(m.lock({}).ok());
        ++counter;
        ASSERT_TRUE(m.unlock().ok());
      }
    });
  }
  runner().JoinAll();
  EXPECT_EQ(counter, std::int64_t{per} * kTasks);
}

// Strict hand-offs: in each round one side takes the mutex, lets the other start a timed lock,
// holds it for a random short time and unlocks, then waits until the other side got it. The
// unlock races with the waiter's queueing; a waiter that queues just as the holder unlocks
// through the uncontended path must still get the lock. A lost wake-up parks it with the mutex
// free until its deadline (nobody else unlocks to rescue it), and the test fails.
TEST_P(SyncTest, MutexHandoffsLoseNoWakeups) {
  Mutex m;
  const int rounds = 20000 * StressScale();
  std::atomic<int> go{-1};
  std::atomic<int> done{-1};
  std::atomic<int> timeouts{0};
  std::uint32_t seed = 12345;
  runner().Spawn([&] {  // the holder
    for (int r = 0; r < rounds && timeouts.load(std::memory_order_relaxed) == 0; ++r) {
      ASSERT_TRUE(m.lock({}).ok());
      go.store(r, std::memory_order_release);
      seed = seed * 1664525u + 1013904223u;  // LCG: cheap and deterministic
      for (std::uint32_t i = (seed >> 16) % 401; i > 0; --i) CpuRelax();
      ASSERT_TRUE(m.unlock().ok());
      while (done.load(std::memory_order_acquire) != r) runner().Relax();
    }
    go.store(rounds, std::memory_order_release);  // lets the waiter finish after a failure
  });
  runner().Spawn([&] {  // the waiter
    for (int r = 0; r < rounds; ++r) {
      int g;
      while ((g = go.load(std::memory_order_acquire)) < r) runner().Relax();
      if (g >= rounds) break;
      if (!m.lock(In(2s)).ok()) {
        timeouts.fetch_add(1, std::memory_order_relaxed);
        done.store(r, std::memory_order_release);
        break;
      }
      ASSERT_TRUE(m.unlock().ok());
      done.store(r, std::memory_order_release);
    }
  });
  runner().JoinAll();
  EXPECT_EQ(timeouts.load(), 0) << "a timed lock waited out its deadline with the mutex free";
}

// ---- CondVar -----------------------------------------------------------------------------------

TEST_P(SyncTest, CondVarSignalBroadcastAndTimeout) {
  Mutex m;
  CondVar cv;
  int generation = 0;
  std::atomic<int> woken{0};
  for (int t = 0; t < 3; ++t) {
    runner().Spawn([&] {
      ASSERT_TRUE(m.lock({}).ok());
      while (generation == 0) ASSERT_TRUE(cv.wait(m).ok());
      woken.fetch_add(1);
      ASSERT_TRUE(m.unlock().ok());
    });
  }
  ASSERT_TRUE(m.lock({}).ok());
  generation = 1;
  ASSERT_TRUE(m.unlock().ok());
  cv.broadcast();
  runner().JoinAll();
  EXPECT_EQ(woken.load(), 3);

  // Timeout: the mutex is held again on return.
  ASSERT_TRUE(m.lock({}).ok());
  EXPECT_EQ(cv.wait(m, In(10ms)).error(), std::errc::timed_out);
  EXPECT_TRUE(m.unlock().ok());  // proves we held it
  // Waiting without holding the mutex is an error.
  EXPECT_EQ(cv.wait(m).error(), std::errc::operation_not_permitted);
}

TEST_P(SyncTest, CondVarLosesNoWakeupsUnderTimeouts) {
  // A producer hands items one at a time; consumers wait with short timeouts and re-check the
  // predicate. Every item must be consumed exactly once.
  Mutex m;
  CondVar cv;
  int items = 0;
  int consumed = 0;
  const int total = 2000 * StressScale();
  for (int c = 0; c < 2; ++c) {
    runner().Spawn([&] {
      ASSERT_TRUE(m.lock({}).ok());
      while (consumed < total) {
        if (items > 0) {
          --items;
          ++consumed;
          cv.broadcast();
          continue;
        }
        Result<void> r = cv.wait(m, In(1ms));
        ASSERT_TRUE(r.ok() || r.error() == std::errc::timed_out);
      }
      ASSERT_TRUE(m.unlock().ok());
    });
  }
  for (int i = 0; i < total; ++i) {
    ASSERT_TRUE(m.lock({}).ok());
    while (items > 0) (void)cv.wait(m, In(1ms));
    ++items;
    ASSERT_TRUE(m.unlock().ok());
    cv.signal();
  }
  runner().JoinAll();
  EXPECT_EQ(consumed, total);
}

// ---- Channel -----------------------------------------------------------------------------------

TEST_P(SyncTest, BufferedChannelIsFifoAndReportsFullAndEmpty) {
  Channel<int> ch(3);
  EXPECT_EQ(ch.try_recv().error(), std::errc::resource_unavailable_try_again);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ch.try_send(int(i)).ok());
  EXPECT_EQ(ch.try_send(99).error(), std::errc::resource_unavailable_try_again);
  EXPECT_EQ(ch.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*ch.recv(), i);
  EXPECT_EQ(ch.recv(In(5ms)).error(), std::errc::timed_out);
}

TEST_P(SyncTest, UnbufferedChannelIsARendezvous) {
  Channel<int> ch(0);
  EXPECT_EQ(ch.try_send(1).error(), std::errc::resource_unavailable_try_again);  // nobody waits
  runner().Spawn([&] { EXPECT_EQ(*ch.recv(), 7); });
  ASSERT_TRUE(ch.send(7).ok());  // completes only when the receiver takes it
  runner().JoinAll();
  EXPECT_EQ(ch.send(8, In(5ms)).error(), std::errc::timed_out);
}

TEST_P(SyncTest, CloseDrainsThenReportsClosed) {
  Channel<std::unique_ptr<int>> ch(4);
  ASSERT_TRUE(ch.send(std::make_unique<int>(1)).ok());
  ASSERT_TRUE(ch.send(std::make_unique<int>(2)).ok());
  ch.close();
  ch.close();  // idempotent
  EXPECT_TRUE(ch.closed());
  auto keep = std::make_unique<int>(3);
  EXPECT_EQ(ch.send(std::move(keep)).error(), std::errc::broken_pipe);
  ASSERT_NE(keep, nullptr);  // not consumed: still ours
  EXPECT_EQ(**ch.recv(), 1);
  EXPECT_EQ(**ch.recv(), 2);
  EXPECT_EQ(ch.recv().error(), std::errc::broken_pipe);
}

TEST_P(SyncTest, CloseWakesBlockedSendersAndReceivers) {
  Channel<int> in(0), out(0);
  runner().Spawn([&] { EXPECT_EQ(in.recv().error(), std::errc::broken_pipe); });
  runner().Spawn([&] { EXPECT_EQ(out.send(5).error(), std::errc::broken_pipe); });
  while (in.waiters() + out.waiters() < 2) std::this_thread::yield();
  in.close();
  out.close();
  runner().JoinAll();
}

TEST_P(SyncTest, ChannelWaitsAreCancellable) {
  Channel<int> ch(1);
  CancellationSource source;
  CancellationToken token = source.token();
  runner().Spawn(
      [&] { EXPECT_EQ(ch.recv({.cancel = &token}).error(), std::errc::operation_canceled); });
  while (ch.waiters() < 1) std::this_thread::yield();
  source.cancel();
  runner().JoinAll();
  // An already-cancelled token fails a wait at once, but not an operation that is ready.
  ASSERT_TRUE(ch.send(1).ok());
  EXPECT_EQ(ch.send(2, {.cancel = &token}).error(), std::errc::operation_canceled);
  EXPECT_EQ(*ch.recv({.cancel = &token}), 1);
}

TEST_P(SyncTest, ChannelStressExactDelivery) {
  Channel<int> ch(8);
  constexpr int kSenders = 3, kReceivers = 3;
  const int per = 20000 * StressScale();
  std::vector<std::atomic<int>> seen(static_cast<std::size_t>(per) * kSenders);
  for (int s = 0; s < kSenders; ++s) {
    runner().Spawn([&, s] {
      for (int i = 0; i < per; ++i) ASSERT_TRUE(ch.send(s * per + i).ok());
    });
  }
  std::atomic<int> received{0};
  for (int r = 0; r < kReceivers; ++r) {
    runner().Spawn([&] {
      for (;;) {
        Result<int> v = ch.recv();
        if (!v) {
          ASSERT_EQ(v.error(), std::errc::broken_pipe);
          return;
        }
        seen[*v].fetch_add(1, std::memory_order_relaxed);
        if (received.fetch_add(1) + 1 == per * kSenders) ch.close();
      }
    });
  }
  runner().JoinAll();
  int wrong = 0;
  for (auto& s : seen) wrong += s.load() != 1;
  EXPECT_EQ(wrong, 0);
}

// ---- select ------------------------------------------------------------------------------------

TEST_P(SyncTest, SelectPicksTheReadyCaseOrTheDefault) {
  Channel<int> a(1), b(1);
  int got = 0;
  std::array<SelectCase, 2> cases{a.recv_case(got), b.recv_case(got)};
  Result<SelectResult> r = select(cases, {}, /*has_default=*/true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->index, -1);  // nothing ready: the default
  ASSERT_TRUE(b.send(42).ok());
  r = select(cases);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->index, 1);
  EXPECT_TRUE(r->ok);
  EXPECT_EQ(got, 42);
  EXPECT_EQ(select(cases, In(5ms)).error(), std::errc::timed_out);
  int v = 5;
  std::array<SelectCase, 1> send{a.send_case(v)};
  r = select(send);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*a.recv(), 5);
  a.close();
  r = select(cases);  // a closed channel's receive is ready, with ok == false
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->index, 0);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(select(std::span<const SelectCase>{}).error(), std::errc::invalid_argument);
}

TEST_P(SyncTest, SelectIsFairWhenSeveralAreReady) {
  Channel<int> a(1), b(1);
  int got = 0;
  std::array<SelectCase, 2> cases{a.recv_case(got), b.recv_case(got)};
  int counts[2] = {0, 0};
  const int rounds = 10000;
  for (int i = 0; i < rounds; ++i) {
    (void)a.try_send(1);
    (void)b.try_send(2);
    Result<SelectResult> r = select(cases);
    ASSERT_TRUE(r.ok());
    ++counts[r->index];
  }
  EXPECT_GT(counts[0], rounds * 4 / 10);
  EXPECT_GT(counts[1], rounds * 4 / 10);
}

TEST_P(SyncTest, SelectRacingCloseAndSendHasOneOutcome) {
  const int rounds = 300 * StressScale();
  for (int i = 0; i < rounds; ++i) {
    Channel<int> a(0), b(0);
    int got = -1;
    std::array<SelectCase, 2> cases{a.recv_case(got), b.recv_case(got)};
    std::atomic<bool> sent{false};
    runner().Spawn([&] { sent = a.send(1).ok(); });
    runner().Spawn([&] { b.close(); });
    Result<SelectResult> r = select(cases);
    ASSERT_TRUE(r.ok());
    if (r->index == 0) {
      EXPECT_TRUE(r->ok);
      EXPECT_EQ(got, 1);
    } else {
      EXPECT_EQ(r->index, 1);
      EXPECT_FALSE(r->ok);
      EXPECT_EQ(*a.recv(), 1);  // the send did not happen through select: it is still pending
    }
    runner().JoinAll();
    EXPECT_TRUE(sent);
  }
}

TEST_P(SyncTest, SelectRacingCancelHasOneOutcome) {
  const int rounds = 300 * StressScale();
  for (int i = 0; i < rounds; ++i) {
    Channel<int> a(1);
    int got = -1;
    std::array<SelectCase, 1> cases{a.recv_case(got)};
    CancellationSource source;
    CancellationToken token = source.token();
    runner().Spawn([&] { (void)a.send(1); });
    runner().Spawn([&] { source.cancel(); });
    Result<SelectResult> r = select(cases, {.cancel = &token});
    runner().JoinAll();
    if (r.ok()) {
      EXPECT_EQ(got, 1);
      EXPECT_EQ(a.try_recv().error(), std::errc::resource_unavailable_try_again);
    } else {
      EXPECT_EQ(r.error(), std::errc::operation_canceled);
      EXPECT_EQ(*a.recv(), 1);  // not consumed by the cancelled select
    }
  }
}

// ---- Cancellation, semaphore, wait group, event, barrier ----------------------------------------

TEST_P(SyncTest, CancellationCallbacksRunOnce) {
  CancellationSource source;
  CancellationToken token = source.token();
  int before = 0, removed = 0;
  CancellationCallback a(token, [&] { ++before; });
  {
    CancellationCallback gone(token, [&] { ++removed; });
  }
  EXPECT_FALSE(token.is_cancelled());
  source.cancel();
  source.cancel();
  EXPECT_TRUE(token.is_cancelled());
  EXPECT_EQ(before, 1);
  EXPECT_EQ(removed, 0);
  int after = 0;
  CancellationCallback late(token, [&] { ++after; });  // already cancelled: runs at once
  EXPECT_EQ(after, 1);
  EXPECT_FALSE(CancellationToken().is_cancelled());
}

// Linked sources: a child is cancelled with its parent (and its callbacks run), never the other
// way; a child of a cancelled parent starts cancelled; grandchildren too.
TEST_P(SyncTest, LinkedSourcesAreCancelledWithTheirParent) {
  CancellationSource parent;
  CancellationSource child(parent.token());
  CancellationSource grandchild(child.token());
  CancellationSource sibling(parent.token());
  int child_callbacks = 0;
  CancellationCallback on_child(child.token(), [&] { ++child_callbacks; });
  sibling.cancel();  // only itself
  EXPECT_TRUE(sibling.is_cancelled());
  EXPECT_FALSE(parent.is_cancelled());
  EXPECT_FALSE(child.is_cancelled());
  Channel<int> ch(1);
  CancellationToken grandchild_token = grandchild.token();
  runner().Spawn([&] {
    EXPECT_EQ(ch.recv({.cancel = &grandchild_token}).error(), std::errc::operation_canceled);
  });
  while (ch.waiters() == 0) runner().Relax();
  parent.cancel();
  runner().JoinAll();
  EXPECT_TRUE(child.is_cancelled());
  EXPECT_TRUE(grandchild.token().is_cancelled());
  EXPECT_EQ(child_callbacks, 1);
  CancellationSource late(parent.token());  // the parent is cancelled already
  EXPECT_TRUE(late.is_cancelled());
  CancellationSource unlinked{CancellationToken()};  // a token of no source links to nothing
  EXPECT_FALSE(unlinked.is_cancelled());
}

// Children made and dropped while their parent is cancelled from another execution: each is
// cancelled or gone, none is touched after it is gone (ASan and TSan check the last part).
TEST_P(SyncTest, LinkedSourcesComeAndGoWhileTheParentIsCancelled) {
  for (int round = 0; round < 20 * StressScale(); ++round) {
    CancellationSource parent;
    std::atomic<bool> go{false};
    runner().Spawn([&] {
      while (!go.load()) runner().Relax();
      parent.cancel();
    });
    go.store(true);
    for (int i = 0; i < 50; ++i) {
      CancellationSource child(parent.token());
      int runs = 0;
      CancellationCallback cb(child.token(), [&] { ++runs; });
      (void)child.is_cancelled();
    }
    runner().JoinAll();
    CancellationSource after(parent.token());
    EXPECT_TRUE(after.is_cancelled());
  }
}

// A source's deadline ends every wait on its tokens, and on its linked sources' tokens, with
// operation_canceled (a wait's own earlier deadline gives timed_out), and runs its callbacks.
TEST_P(SyncTest, ADeadlineCancelsWaitsAndRunsCallbacks) {
  CancellationSource request;
  ASSERT_TRUE(request.cancel_after(30ms).ok());
  ASSERT_TRUE(request.deadline().has_value());
  CancellationSource call(request.token());
  EXPECT_EQ(call.token().deadline(), request.deadline());  // inherited
  Event fired;
  CancellationCallback on_deadline(call.token(), [&] { fired.set(); });
  CancellationToken token = call.token();
  Mutex mu;
  ASSERT_TRUE(mu.lock({}).ok());
  Channel<int> ch(1);
  runner().Spawn([&] {
    // Its own deadline first: timed out, not cancelled.
    EXPECT_EQ(ch.recv({.deadline = SyncClock::now() + 1ms, .cancel = &token}).error(),
              std::errc::timed_out);
    EXPECT_EQ(ch.recv({.cancel = &token}).error(), std::errc::operation_canceled);
  });
  runner().Spawn(
      [&] { EXPECT_EQ(mu.lock({.cancel = &token}).error(), std::errc::operation_canceled); });
  runner().JoinAll();
  EXPECT_TRUE(token.is_cancelled());
  EXPECT_TRUE(request.is_cancelled());
  EXPECT_TRUE(fired.wait().ok());  // the deadline thread cancelled the sources
  ASSERT_TRUE(mu.unlock().ok());
}

TEST_P(SyncTest, DeadlinesInThePastAndReplaced) {
  CancellationSource past;
  ASSERT_TRUE(past.cancel_at(SyncClock::now() - 1s).ok());
  EXPECT_TRUE(past.is_cancelled());  // at once, on the caller
  CancellationSource moved;
  ASSERT_TRUE(moved.cancel_after(1h).ok());
  EXPECT_FALSE(moved.is_cancelled());
  ASSERT_TRUE(moved.cancel_after(10ms).ok());  // replaces the hour
  CancellationToken token = moved.token();
  Event never;
  EXPECT_EQ(never.wait({.cancel = &token}).error(), std::errc::operation_canceled);
  {
    CancellationSource dropped;  // armed, then gone before its deadline: nothing fires
    ASSERT_TRUE(dropped.cancel_after(5ms).ok());
  }
  CancellationSource later;
  ASSERT_TRUE(later.cancel_after(20ms).ok());
  CancellationToken later_token = later.token();
  EXPECT_EQ(never.wait({.cancel = &later_token}).error(), std::errc::operation_canceled);
}

TEST_P(SyncTest, SemaphoreWaitGroupEventBarrier) {
  Semaphore sem(0);
  WaitGroup wg;
  Event event;
  Barrier barrier(3);
  std::atomic<int> leaders{0};
  ASSERT_TRUE(wg.add(2).ok());
  EXPECT_EQ(wg.add(-5).error(), std::errc::invalid_argument);
  for (int t = 0; t < 2; ++t) {
    runner().Spawn([&] {
      ASSERT_TRUE(sem.acquire().ok());
      ASSERT_TRUE(event.wait().ok());
      for (int round = 0; round < 50; ++round) {
        Result<bool> lead = barrier.arrive_and_wait();
        ASSERT_TRUE(lead.ok());
        if (*lead) leaders.fetch_add(1);
      }
      wg.done();
    });
  }
  EXPECT_FALSE(sem.try_acquire());
  sem.release(2);
  EXPECT_EQ(wg.wait(In(5ms)).error(), std::errc::timed_out);  // they wait for the event
  event.set();
  EXPECT_TRUE(event.is_set());
  for (int round = 0; round < 50; ++round) {
    Result<bool> lead = barrier.arrive_and_wait();
    ASSERT_TRUE(lead.ok());
    if (*lead) leaders.fetch_add(1);
  }
  ASSERT_TRUE(wg.wait().ok());
  runner().JoinAll();
  EXPECT_EQ(leaders.load(), 50);  // one leader per round
  EXPECT_EQ(wg.count(), 0);
  EXPECT_EQ(sem.available(), 0);
  EXPECT_EQ(sem.acquire(In(2ms)).error(), std::errc::timed_out);
}

// Semaphore, WaitGroup, Event and Barrier queue the node that every Waiter carries
// (Waiter::own_node), so each wait reuses the node of the last one, often straight after a
// timeout that raced with a grant. Waiters hop between three semaphores with short deadlines
// while a releaser hands out permits: every permit is either taken or still available.
TEST_P(SyncTest, WaitsReuseTheWaitersNodeAcrossPrimitivesAndTimeouts) {
  const int kReleases = 3000 * StressScale();
  constexpr int kWaiters = 4;
  std::array<Semaphore, 3> sems{Semaphore(0), Semaphore(0), Semaphore(0)};
  std::atomic<int> taken{0};
  // A lost permit would leave the waiters looking for it until this bound, and the count short.
  const SyncClock::time_point give_up = SyncClock::now() + 20s;
  for (int k = 0; k < kWaiters; ++k) {
    runner().Spawn([&, k] {
      for (int i = k; taken.load() < kReleases && SyncClock::now() < give_up; ++i) {
        auto d = std::chrono::microseconds(i % 7 == 0 ? 0 : 20 * (i % 5));
        if (sems[static_cast<std::size_t>(i % 3)].acquire(In(d)).ok()) taken.fetch_add(1);
      }
    });
  }
  runner().Spawn([&] {
    for (int i = 0; i < kReleases; ++i) sems[static_cast<std::size_t>(i % 3)].release();
  });
  runner().JoinAll();
  EXPECT_EQ(taken.load(), kReleases);
  for (auto& sem : sems) EXPECT_EQ(sem.available(), 0);
}

// Event::set wakes its waiters a batch at a time, unlocking in between: waiters that time out
// meanwhile withdraw cleanly, and every waiter ends, woken or timed out.
TEST_P(SyncTest, EventSetRacingTimeoutsWakesEveryWaiter) {
  for (int round = 0; round < 3 * StressScale(); ++round) {
    Event event;
    constexpr int kWaiters = 200;  // several of the set's batches
    std::atomic<int> woken{0}, timed_out{0};
    for (int k = 0; k < kWaiters; ++k) {
      runner().Spawn([&, k] {
        Result<void> r = k % 2 == 0 ? event.wait() : event.wait(In(std::chrono::microseconds(k)));
        if (r.ok()) {
          woken.fetch_add(1);
        } else {
          EXPECT_EQ(r.error(), std::errc::timed_out);
          timed_out.fetch_add(1);
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100 * round));
    event.set();
    runner().JoinAll();
    EXPECT_EQ(woken.load() + timed_out.load(), kWaiters);
    EXPECT_GE(woken.load(), kWaiters / 2);  // those without a deadline
    EXPECT_TRUE(event.wait(In(0s)).ok());   // set stays set
  }
}

TEST_P(SyncTest, BarrierWithdrawsATimedOutArrival) {
  Barrier barrier(2);
  EXPECT_EQ(barrier.arrive_and_wait(In(5ms)).error(), std::errc::timed_out);
  // The withdrawn arrival does not count: two fresh arrivals complete the round.
  runner().Spawn([&] { ASSERT_TRUE(barrier.arrive_and_wait().ok()); });
  ASSERT_TRUE(barrier.arrive_and_wait().ok());
  runner().JoinAll();
}

}  // namespace
}  // namespace weft
