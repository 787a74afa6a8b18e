// scheduler/task_group_race_test.cc: TaskGroup at its edges: a child that cannot start (its
// fail-fast cancel made by the deadline thread) and a group destroyed right after; outcomes
// discarded with destructors that park, which must still run before the group lets go; joins
// from fibers and plain threads at once while children spawn siblings and the finished ring
// grows. The slow destructors sleep to widen their windows; nothing is timed.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/fault.h"
#include "weft/base/stress_scale.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/task_group.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/coordination.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// A fail-fast child that cannot start has its cancel made by the deadline thread; a group
// destroyed before that thread gets to it takes its entry off the thread's heap (ASan checks
// that nothing is left pointing at the freed state).
TEST(TaskGroupRace, AGroupDestroyedRightAfterAnUnstartableChildLeavesNothingOnTheDeadlineThread) {
  Runtime rt({.workers = 2, .stack_size = std::size_t{3} << 20});
  rt.block_on([&] {
    for (int round = 0; round < 200; ++round) {
      auto group = std::make_unique<TaskGroup<>>();
      fault::Config before = fault::Current();
      fault::Configure({.rate = 1.0, .seed = 3, .hard = true});
      (void)group->spawn([] { ADD_FAILURE() << "ran without a stack"; });
      Result<Completed<void>> c = group->join_next();
      fault::Configure(before);
      ASSERT_TRUE(c);
      ASSERT_TRUE(c->failed());
      group.reset();  // its CancelState goes, perhaps before the deadline thread got to it
    }
    // Give the deadline thread time to pop whatever was left.
    std::this_thread::sleep_for(50ms);
    // A later deadline makes the deadline thread walk its heap again.
    CancellationSource s;
    ASSERT_TRUE(s.cancel_after(1ms));
    std::this_thread::sleep_for(20ms);
  });
}

// A child that cannot start fails a fail-fast group: from the moment join_next hands it out,
// spawns are refused; the cancel itself follows on the deadline thread.
TEST(TaskGroupRace, AnUnstartableChildsFailureRefusesSpawnsAtOnce) {
  Runtime rt({.workers = 2, .stack_size = std::size_t{3} << 20});
  rt.block_on([&] {
    int not_cancelled = 0, spawned_after_failure = 0;
    for (int round = 0; round < 50; ++round) {
      TaskGroup<> group;
      fault::Config before = fault::Current();
      fault::Configure({.rate = 1.0, .seed = 3, .hard = true});
      (void)group.spawn([] {});  // the runtime's 3 MiB class: never mapped, never cached
      Result<Completed<void>> c = group.join_next();
      fault::Configure(before);
      ASSERT_TRUE(c);
      ASSERT_TRUE(c->failed());
      if (!group.is_cancelled()) ++not_cancelled;  // allowed: the deadline thread cancels soon
      // A 64 KiB stack: its recycled stack cannot serve the next round's failing child.
      if (group.spawn([] {}, {.stack_size = 64 << 10}).ok()) ++spawned_after_failure;
      try {
        (void)group.join_all();
      } catch (const std::system_error&) {
      }
      while (!group.is_cancelled()) this_fiber::yield();  // it does cancel
    }
    EXPECT_EQ(spawned_after_failure, 0) << "spawn admitted after a fail-fast failure was seen";
    (void)not_cancelled;
  });
}

// discard_outcomes: a value's destructor (which parks here) runs before the child stops
// counting, so before join_all or ~TaskGroup returns.
struct SlowDtor {
  std::shared_ptr<std::atomic<int>> alive;  // the owner's state, kept alive only to observe
  std::atomic<int>* owner_state = nullptr;  // the owner's state, as a real program holds it
  SlowDtor() = default;
  SlowDtor(SlowDtor&& o) noexcept
      : alive(std::move(o.alive)), owner_state(std::exchange(o.owner_state, nullptr)) {}
  ~SlowDtor() {
    if (owner_state == nullptr) return;
    (void)this_fiber::sleep_for(20ms);  // e.g. closing a connection, flushing a log
    owner_state->fetch_add(1);          // use-after-free once the owner has moved on
  }
};

TEST(TaskGroupRace, DiscardedValuesAreDestroyedBeforeJoinAllReturns) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    auto state = std::make_unique<std::atomic<int>>(0);
    {
      TaskGroup<SlowDtor> group({.discard_outcomes = true});
      for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(group.spawn([p = state.get()] {
          SlowDtor d;
          d.owner_state = p;
          return d;
        }));
      }
      ASSERT_TRUE(group.join_all());
      // The group promises every child is done: every outcome is dropped.
      EXPECT_EQ(state->load(), 4) << "join_all returned while children still ran user code";
    }  // ~TaskGroup too
    EXPECT_EQ(state->load(), 4) << "~TaskGroup returned while children still ran user code";
    state.reset();                       // the owner frees its state
    (void)this_fiber::sleep_for(100ms);  // the children's destructors now write freed memory
  });
}

// The same for the exceptions of discarded failures, in a void group such as the servers'.
struct SlowException : std::runtime_error {
  std::atomic<int>* owner_state;
  explicit SlowException(std::atomic<int>* p) : std::runtime_error("slow"), owner_state(p) {}
  SlowException(const SlowException& o) noexcept
      : std::runtime_error(o), owner_state(o.owner_state) {}
  ~SlowException() override {
    (void)this_fiber::sleep_for(20ms);
    owner_state->fetch_add(1);
  }
};

TEST(TaskGroupRace, DiscardedExceptionsAreDestroyedBeforeTheGroupIsGone) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    auto state = std::make_unique<std::atomic<int>>(0);
    {
      TaskGroup<> group({.policy = GroupPolicy::kCollectAll, .discard_outcomes = true});
      for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(group.spawn([p = state.get()] { throw SlowException(p); }));
      }
      EXPECT_THROW((void)group.join_all(), SlowException);
    }  // ~TaskGroup: the first failure's exception goes here (+1)
    EXPECT_EQ(state->load(), 4) << "exception destructors of discarded children still pending";
    state.reset();
    (void)this_fiber::sleep_for(100ms);
  });
}

// Joins from several fibers and plain threads at once (join_next and join_all mixed), while
// children spawn siblings; every child's value must be handed out exactly once and nothing hangs.
class TaskGroupRaceStress : public ::testing::TestWithParam<unsigned> {};

TEST_P(TaskGroupRaceStress, MixedJoinersFromFibersAndThreadsWhileChildrenSpawn) {
  Runtime rt({.workers = GetParam()});
  for (int round = 0; round < 40; ++round) {
    TaskGroup<int> group(rt, {.policy = GroupPolicy::kCollectAll});
    std::atomic<int> spawned{0};
    std::function<int(int)> child = [&](int depth) -> int {
      int me = spawned.fetch_add(1);
      if (depth > 0) {
        for (int k = 0; k < 2; ++k) {
          if (group.spawn([&, depth] { return child(depth - 1); })) {
          }
        }
      }
      this_fiber::yield();
      return me;
    };
    for (int i = 0; i < 16; ++i) ASSERT_TRUE(group.spawn([&] { return child(4); }));
    std::mutex mu;
    std::multiset<int> got;
    auto drain_next = [&] {
      for (;;) {
        Result<Completed<int>> c = group.join_next();
        if (!c) {
          EXPECT_EQ(c.error(), std::errc::no_child_process);
          return;
        }
        int v = c->get();
        std::lock_guard<std::mutex> l(mu);
        got.insert(v);
      }
    };
    auto drain_all = [&] {
      Result<std::vector<int>> all = group.join_all();
      ASSERT_TRUE(all);
      std::lock_guard<std::mutex> l(mu);
      got.insert(all->begin(), all->end());
    };
    auto f1 = rt.spawn(drain_next);
    auto f2 = rt.spawn(drain_next);
    auto f3 = rt.spawn(drain_all);
    std::thread t1(drain_next);
    std::thread t2(drain_all);
    (void)f1.join();
    (void)f2.join();
    (void)f3.join();
    t1.join();
    t2.join();
    ASSERT_EQ(got.size(), static_cast<std::size_t>(spawned.load())) << "round " << round;
    ASSERT_EQ(std::set<int>(got.begin(), got.end()).size(), got.size());
    ASSERT_EQ(group.size(), 0u);
  }
}

// The finished ring grows (Admit, outside the lock) while children finish and join_next
// takes them, with spawns from plain threads and fibers, some withdrawn (a bad stack size).
TEST_P(TaskGroupRaceStress, RingGrowthWithdrawAndJoinNextRace) {
  Runtime rt({.workers = GetParam()});
  TaskGroup<int> group(rt, {.policy = GroupPolicy::kCollectAll});
  std::atomic<int> admitted{0};
  std::atomic<bool> spawning{true};
  auto spawner = [&](int base) {
    for (int i = 0; i < 1500; ++i) {
      FiberOptions o;
      if (i % 7 == 0) o.stack_size = std::size_t{1} << 40;  // refused after Admit: Withdraw
      Result<std::uint64_t> id = group.spawn([v = base + i] { return v; }, o);
      if (id) admitted.fetch_add(1);
    }
  };
  std::mutex mu;
  std::multiset<int> got;
  auto taker = [&] {
    for (;;) {
      Result<Completed<int>> c = group.join_next({.deadline = SyncClock::now() + 5ms});
      if (!c) {
        if (!spawning.load() && c.error() == std::errc::no_child_process) return;
        // None to wait for yet: let the spawners run (on one worker, a fiber that loops here
        // without parking would keep the spawning fiber from ever running).
        this_fiber::yield();
        continue;
      }
      int v = c->get();
      std::lock_guard<std::mutex> l(mu);
      got.insert(v);
    }
  };
  auto k1 = rt.spawn(taker);
  std::thread k2(taker);
  std::thread s1(spawner, 0);
  std::thread s2(spawner, 100000);
  auto s3 = rt.spawn([&] { spawner(200000); });
  s1.join();
  s2.join();
  (void)s3.join();
  spawning = false;
  (void)k1.join();
  k2.join();
  EXPECT_EQ(got.size(), static_cast<std::size_t>(admitted.load()));
  EXPECT_EQ(std::set<int>(got.begin(), got.end()).size(), got.size());
  EXPECT_EQ(group.size(), 0u);
}

// join_all walks that give up (short deadlines) race join_next from a fiber or a plain thread,
// while children spawn siblings, some of which are withdrawn (a bad stack size); every value is
// handed out exactly once and size() ends at 0. Some rounds end in the destructor instead.
TEST_P(TaskGroupRaceStress, WalksThatGiveUpRaceJoinNextSpawnsAndWithdraws) {
  Runtime rt({.workers = GetParam()});
  for (int round = 0; round < 60 * testing::StressScale(); ++round) {
    auto owner =
        std::make_unique<TaskGroup<int>>(rt, TaskGroupOptions{.policy = GroupPolicy::kCollectAll});
    TaskGroup<int>* group = owner.get();  // the children use it while the destructor runs too
    std::atomic<int> admitted{0};
    std::function<int(int, int)> child = [&](int depth, int v) -> int {
      if (depth > 0) {
        for (int k = 0; k < 3; ++k) {
          FiberOptions o;
          if (k == 2) o.stack_size = std::size_t{1} << 40;  // refused after Admit: Withdraw
          const int w = v * 4 + k + 1;
          if (group->spawn([&, depth, w] { return child(depth - 1, w); }, o)) admitted.fetch_add(1);
        }
      }
      if (v % 3 == 0) this_fiber::yield();
      if (v % 5 == 0) (void)this_fiber::sleep_for(50us);
      return v;
    };
    for (int i = 0; i < 8; ++i) {
      if (group->spawn([&, i] { return child(3, 1000000 * (i + 1)); })) admitted.fetch_add(1);
    }
    if (round % 5 == 4) {
      (void)group->join_all({.deadline = SyncClock::now() + 100us});
      owner.reset();  // ~TaskGroup walks what the join left
      continue;
    }
    std::mutex mu;
    std::multiset<int> got;
    auto drain_next = [&] {
      for (;;) {
        Result<Completed<int>> c = group->join_next({.deadline = SyncClock::now() + 300us});
        if (!c) {
          if (c.error() == std::errc::no_child_process) return;
          this_fiber::yield();
          continue;
        }
        int v = c->get();
        std::lock_guard<std::mutex> l(mu);
        got.insert(v);
      }
    };
    auto drain_all = [&] {
      for (;;) {
        Result<std::vector<int>> all = group->join_all({.deadline = SyncClock::now() + 200us});
        if (!all) {
          EXPECT_EQ(all.error(), std::errc::timed_out);
          this_fiber::yield();
          continue;
        }
        std::lock_guard<std::mutex> l(mu);
        got.insert(all->begin(), all->end());
        return;
      }
    };
    auto walker = rt.spawn(drain_all);
    std::thread next_taker;
    JoinHandle<void> next_fiber;
    if (round % 2 == 0) {
      next_taker = std::thread(drain_next);
    } else {
      next_fiber = rt.spawn(drain_next);
    }
    (void)walker.join();
    if (next_taker.joinable()) next_taker.join();
    if (next_fiber.joinable()) (void)next_fiber.join();
    ASSERT_EQ(group->size(), 0u) << "round " << round;
    ASSERT_EQ(got.size(), static_cast<std::size_t>(admitted.load())) << "round " << round;
    ASSERT_EQ(std::set<int>(got.begin(), got.end()).size(), got.size()) << "round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, TaskGroupRaceStress, ::testing::Values(1u, 2u, 4u, 8u));

}  // namespace
}  // namespace weft
