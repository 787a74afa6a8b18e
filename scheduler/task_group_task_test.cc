// TaskGroup with stackless tasks (scheduler/task.h): task children beside fiber children, joins
// from tasks (async_join_next, async_join_all) beside joins from fibers, the failure policies and
// the group token in task children, deadlines and cancellation of a task's join, no memory, the
// runtime's shutdown, and the abort of a task that destroys a group whose children still run.
// Each concurrent test runs on 1, 2 and 4 workers. WEFT_STRESS_SCALE=N multiplies the counts.

#include "weft/scheduler/task.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <set>
#include <stdexcept>
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
using testing::DeathTestStyle;
using testing::StressScale;

class TaskGroupTaskTest : public ::testing::TestWithParam<unsigned> {};
INSTANTIATE_TEST_SUITE_P(Workers, TaskGroupTaskTest, ::testing::Values(1u, 2u, 4u));

// A task that waits for the token's cancel: ends only by it (operation_canceled) or the
// runtime's shutdown.
Task<Result<void>> WaitForCancel(const CancellationToken& token) {
  Event never;
  co_return co_await never.async_wait({.cancel = &token});
}

Task<int> Two() { co_return 2; }

TEST_P(TaskGroupTaskTest, TaskChildrenGiveTheirValuesInSpawnOrder) {
  Runtime rt({.workers = GetParam()});
  const int n = 200 * StressScale();
  rt.block_on([&] {
    TaskGroup<int> group;
    for (int i = 0; i < n; ++i) {
      Result<std::uint64_t> id = group.spawn_task([i]() -> Task<int> {
        if (i % 3 == 0) co_await this_task::yield();
        if (i % 7 == 0) co_await this_task::sleep_for(100us);
        co_return i;
      });
      ASSERT_TRUE(id);
      EXPECT_EQ(*id, static_cast<std::uint64_t>(i + 1));
    }
    Result<std::vector<int>> values = group.join_all();
    ASSERT_TRUE(values);
    ASSERT_EQ(values->size(), static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) EXPECT_EQ((*values)[i], i);
  });
}

TEST_P(TaskGroupTaskTest, ATaskJoinsFibersAndTasksAsTheyFinish) {
  Runtime rt({.workers = GetParam()});
  const int n = 100 * StressScale();
  auto h = rt.spawn_task([&]() -> Task<std::set<std::uint64_t>> {
    TaskGroup<std::uint64_t> group;
    for (int i = 0; i < n; ++i) {
      Result<std::uint64_t> id = i % 2 == 0 ? group.spawn_task([i]() -> Task<std::uint64_t> {
        co_await this_task::yield();
        co_return static_cast<std::uint64_t>(i + 1);
      })
                                            : group.spawn([i] {
                                                this_fiber::yield();
                                                return static_cast<std::uint64_t>(i + 1);
                                              });
      if (!id) throw std::system_error(std::make_error_code(id.error()));
    }
    std::set<std::uint64_t> seen;
    for (;;) {
      Result<Completed<std::uint64_t>> c = co_await group.async_join_next();
      if (!c) {
        EXPECT_EQ(c.error(), std::errc::no_child_process);
        break;
      }
      EXPECT_FALSE(c->failed());
      const std::uint64_t id = c->id();
      EXPECT_EQ(c->get(), id);  // each child returns its own id
      EXPECT_TRUE(seen.insert(id).second);
    }
    co_return seen;
  });
  Result<std::set<std::uint64_t>> seen = h.join();
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->size(), static_cast<std::size_t>(n));
}

TEST_P(TaskGroupTaskTest, ATaskJoinsAllOfAMixedGroup) {
  Runtime rt({.workers = GetParam()});
  const int n = 100 * StressScale();
  auto h = rt.spawn_task([&]() -> Task<long> {
    TaskGroup<int> group;
    for (int i = 0; i < n; ++i) {
      if (i % 2 == 0) {
        (void)group.spawn_task([i]() -> Task<int> {
          co_await this_task::sleep_for(50us);
          co_return i;
        });
      } else {
        (void)group.spawn([i] { return i; });
      }
    }
    Result<std::vector<int>> values = co_await group.async_join_all();
    if (!values) co_return -1;
    long sum = 0;
    for (std::size_t i = 0; i < values->size(); ++i) {
      EXPECT_EQ((*values)[i], static_cast<int>(i));  // spawn order
      sum += (*values)[i];
    }
    EXPECT_EQ(group.size(), 0u);
    co_return sum;
  });
  EXPECT_EQ(*h.join(), static_cast<long>(n) * (n - 1) / 2);
}

TEST_P(TaskGroupTaskTest, ATaskChildsFailureCancelsItsSiblings) {
  Runtime rt({.workers = GetParam()});
  rt.block_on([&] {
    TaskGroup<> group;
    std::atomic<int> cancelled{0};
    for (int i = 0; i < 4; ++i) {
      // Siblings of both kinds, each waiting for the group's cancel.
      ASSERT_TRUE(group.spawn_task([&](const CancellationToken& t) -> Task<> {
        Result<void> r = co_await WaitForCancel(t);
        if (r.error() == std::errc::operation_canceled) cancelled.fetch_add(1);
      }));
      ASSERT_TRUE(group.spawn([&](const CancellationToken& t) {
        Event never;
        if (never.wait({.cancel = &t}).error() == std::errc::operation_canceled) {
          cancelled.fetch_add(1);
        }
      }));
    }
    ASSERT_TRUE(group.spawn_task([]() -> Task<> {
      co_await this_task::yield();
      throw std::runtime_error("task child failed");
    }));
    EXPECT_THROW((void)group.join_all(), std::runtime_error);
    EXPECT_EQ(cancelled.load(), 8);
    EXPECT_TRUE(group.is_cancelled());
    EXPECT_EQ(group.spawn_task([]() -> Task<> { co_return; }).error(),
              std::errc::operation_canceled);
  });
}

TEST(TaskGroupTaskTest, CollectAllHandsEachOutcomeToATask) {
  Runtime rt({.workers = 2});
  auto h = rt.spawn_task([&]() -> Task<int> {
    TaskGroup<Result<int>> group({.policy = GroupPolicy::kCollectAll});
    for (int i = 0; i < 10; ++i) {
      (void)group.spawn_task([i]() -> Task<Result<int>> {
        co_await this_task::yield();
        if (i % 2 == 1) co_return std::errc::io_error;
        if (i == 4) throw std::runtime_error("four");
        co_return i;
      });
    }
    int values = 0, errors = 0, thrown = 0;
    for (;;) {
      Result<Completed<Result<int>>> c = co_await group.async_join_next();
      if (!c) break;
      if (c->exception() != nullptr) {
        ++thrown;
        EXPECT_THROW((void)c->get(), std::runtime_error);
      } else if (Result<int> r = c->get(); r.ok()) {
        ++values;
        EXPECT_EQ(*r % 2, 0);
      } else {
        ++errors;
        EXPECT_EQ(r.error(), std::errc::io_error);
      }
    }
    EXPECT_EQ(values, 4);
    EXPECT_EQ(errors, 5);
    EXPECT_EQ(thrown, 1);
    EXPECT_FALSE(group.is_cancelled());  // collect-all cancels nothing
    co_return values + errors + thrown;
  });
  EXPECT_EQ(*h.join(), 10);
}

TEST(TaskGroupTaskTest, ATaskChildSeesItsGroupsTokenAndNestsGroups) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<bool> outer;
    std::atomic<bool> inner_parked{false};
    ASSERT_TRUE(outer.spawn_task([&]() -> Task<bool> {
      const bool has_token = this_fiber::group_token().can_be_cancelled();
      // A group made in a task child is linked to the child's group.
      TaskGroup<> inner;
      (void)inner.spawn_task([&](const CancellationToken& t) -> Task<> {
        inner_parked = true;
        (void)co_await WaitForCancel(t);
      });
      Result<void> joined = co_await inner.async_join_all();
      co_return has_token&& joined.ok() && inner.is_cancelled();
    }));
    while (!inner_parked) this_fiber::yield();
    outer.cancel();  // reaches the inner group's child
    Result<std::vector<bool>> r = outer.join_all();
    ASSERT_TRUE(r);
    EXPECT_TRUE((*r)[0]);
  });
}

TEST(TaskGroupTaskTest, ATasksJoinEndsAtItsDeadlineOrCancel) {
  Runtime rt({.workers = 2});
  auto h = rt.spawn_task([&]() -> Task<> {
    TaskGroup<> group;
    CancellationSource stop_child;
    const CancellationToken child_token = stop_child.token();
    (void)group.spawn_task([&]() -> Task<> { (void)co_await WaitForCancel(child_token); });
    Result<Completed<void>> next =
        co_await group.async_join_next({.deadline = SyncClock::now() + 2ms});
    EXPECT_EQ(next.error(), std::errc::timed_out);
    CancellationSource source;
    source.cancel();
    const CancellationToken token = source.token();
    Result<void> all = co_await group.async_join_all({.cancel = &token});
    EXPECT_EQ(all.error(), std::errc::operation_canceled);
    Result<void> timed = co_await group.async_join_all({.deadline = SyncClock::now() + 1ms});
    EXPECT_EQ(timed.error(), std::errc::timed_out);
    EXPECT_EQ(group.size(), 1u);  // nothing was taken
    stop_child.cancel();
    EXPECT_TRUE(co_await group.async_join_all());
  });
  EXPECT_TRUE(h.join());
}

TEST(TaskGroupTaskTest, AChildThatJoinsItsOwnGroupIsRefused) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<std::errc> group;
    ASSERT_TRUE(group.spawn_task([&]() -> Task<std::errc> {
      Result<Completed<std::errc>> next = co_await group.async_join_next();
      co_return next.error();
    }));
    ASSERT_TRUE(group.spawn_task([&]() -> Task<std::errc> {
      Result<std::vector<std::errc>> all = co_await group.async_join_all();
      co_return all.error();
    }));
    Result<std::vector<std::errc>> r = group.join_all();
    ASSERT_TRUE(r);
    EXPECT_EQ((*r)[0], std::errc::resource_deadlock_would_occur);
    EXPECT_EQ((*r)[1], std::errc::resource_deadlock_would_occur);
  });
}

TEST(TaskGroupTaskTest, AMovedFromGroupsTaskJoinsReportInvalidArgument) {
  Runtime rt({.workers = 1});
  auto h = rt.spawn_task([&]() -> Task<> {
    TaskGroup<> group;
    TaskGroup<> taker(std::move(group));
    EXPECT_EQ((co_await group.async_join_next()).error(), std::errc::invalid_argument);
    EXPECT_EQ((co_await group.async_join_all()).error(), std::errc::invalid_argument);
    EXPECT_EQ(group.spawn_task([]() -> Task<> { co_return; }).error(), std::errc::invalid_argument);
    EXPECT_TRUE(co_await taker.async_join_all());
  });
  EXPECT_TRUE(h.join());
}

// Joins of every kind at once: task and fiber join_next calls, and a fiber's join_all walking
// the group in spawn order while the tasks ask for queue mode. Every child is handed to exactly
// one join.
TEST_P(TaskGroupTaskTest, TaskAndFiberJoinsShareTheChildren) {
  Runtime rt({.workers = GetParam()});
  const int rounds = 20 * StressScale();
  const int n = 64;
  for (int round = 0; round < rounds; ++round) {
    TaskGroup<int> group(rt);
    std::atomic<int> taken{0};
    std::atomic<long> sum{0};
    Event go;
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(i % 2 == 0 ? group.spawn_task([&, i]() -> Task<int> {
        (void)co_await go.async_wait();
        co_return i;
      })
                             : group.spawn([&, i] {
                                 (void)go.wait();
                                 return i;
                               }));
    }
    const auto task_joiner = [&]() -> Task<> {
      for (;;) {
        Result<Completed<int>> c = co_await group.async_join_next();
        if (!c) break;
        sum.fetch_add(c->get());
        taken.fetch_add(1);
      }
    };
    JoinHandle<void> t1 = rt.spawn_task(task_joiner);
    JoinHandle<void> t2 = rt.spawn_task(task_joiner);
    JoinHandle<void> walker = rt.spawn([&] {
      Result<std::vector<int>> rest = group.join_all();
      ASSERT_TRUE(rest);
      for (int v : *rest) sum.fetch_add(v);
      taken.fetch_add(static_cast<int>(rest->size()));
    });
    go.set();
    ASSERT_TRUE(t1.join());
    ASSERT_TRUE(t2.join());
    ASSERT_TRUE(walker.join());
    ASSERT_EQ(taken.load(), n) << "round " << round;
    ASSERT_EQ(sum.load(), static_cast<long>(n) * (n - 1) / 2);
  }
}

TEST(TaskGroupTaskTest, NoMemoryForATaskChildIsReportedAndTheGroupGoesOn) {
  using scheduler_internal::g_fail_spawn_states;
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<int> group;
    for (int fail = 1; fail <= 2; ++fail) {  // 1: the child's record; 2: its coroutine frame
      g_fail_spawn_states = fail;
      EXPECT_EQ(group.spawn_task([]() -> Task<int> { co_return 1; }).error(),
                std::errc::not_enough_memory);
      EXPECT_EQ(g_fail_spawn_states.load(), 0);
    }
    EXPECT_EQ(group.size(), 0u);
    // A child whose inner await finds no memory fails with bad_alloc, which join_all rethrows.
    ASSERT_TRUE(group.spawn_task([]() -> Task<int> {
      g_fail_spawn_states = 1;
      co_return co_await Two();
    }));
    EXPECT_THROW((void)group.join_all(), std::bad_alloc);
    g_fail_spawn_states = 0;
    TaskGroup<int> next;
    ASSERT_TRUE(next.spawn_task([]() -> Task<int> { co_return 3; }));
    Result<std::vector<int>> r = next.join_all();
    ASSERT_TRUE(r);
    EXPECT_EQ((*r)[0], 3);
  });
}

// The runtime's shutdown ends the task children's waits, and a task's join is not ended by it:
// it takes the children as they finish, so that the group is empty when it goes.
TEST(TaskGroupTaskTest, ShutdownEndsParkedTaskChildrenAndATasksJoinTakesThem) {
  std::atomic<int> ended{0};
  std::atomic<int> parked{0};
  std::atomic<bool> joined{false};
  {
    Runtime rt({.workers = 2});
    (void)rt.spawn_task([&]() -> Task<> {
      TaskGroup<> group;
      for (int i = 0; i < 16; ++i) {
        (void)group.spawn_task([&]() -> Task<> {
          Event never;
          parked.fetch_add(1);
          if ((co_await never.async_wait()).error() == std::errc::operation_canceled) {
            ended.fetch_add(1);
          }
        });
      }
      joined = (co_await group.async_join_all()).ok();
    });
    while (parked.load() < 16) std::this_thread::yield();
  }  // ~Runtime: shuts down
  EXPECT_EQ(ended.load(), 16);
  EXPECT_TRUE(joined.load());
}

// Groups owned by task children, each joined before it goes, with the runtime shut down while
// every grandchild waits: each inner join takes its children as the shutdown ends them (ended
// with operation_canceled instead, it would leave them running for ~TaskGroup, which aborts in
// a task).
TEST_P(TaskGroupTaskTest, ShutdownUnderNestedGroupsOwnedByTasks) {
  const int rounds = 4 * StressScale();
  for (int round = 0; round < rounds; ++round) {
    std::atomic<int> parked{0};
    std::atomic<int> inner_joined{0};
    {
      Runtime rt({.workers = GetParam()});
      (void)rt.spawn([&] {
        TaskGroup<bool> outer;
        for (int k = 0; k < 4; ++k) {
          (void)outer.spawn_task([&]() -> Task<bool> {
            TaskGroup<> inner;
            for (int i = 0; i < 4; ++i) {
              (void)inner.spawn_task([&](const CancellationToken& t) -> Task<> {
                parked.fetch_add(1);
                (void)co_await WaitForCancel(t);
              });
            }
            const bool ok = (co_await inner.async_join_all()).ok();
            if (ok) inner_joined.fetch_add(1);
            co_return ok;
          });
        }
        (void)outer.join_all();
      });
      while (parked.load() < 16) std::this_thread::yield();
    }
    ASSERT_EQ(inner_joined.load(), 4) << "round " << round;
  }
}

TEST(TaskGroupTaskDeathTest, ATaskThatDestroysAGroupWithRunningChildrenAborts) {
  GTEST_FLAG_SET(death_test_style, DeathTestStyle());
  EXPECT_DEATH(
      {
        Runtime rt({.workers = 1});
        auto h = rt.spawn_task([&]() -> Task<> {
          TaskGroup<> group;
          (void)group.spawn_task(
              [](const CancellationToken& t) -> Task<> { (void)co_await WaitForCancel(t); });
          co_return;  // the group goes with its child running
        });
        (void)h.join();
      },
      "TaskGroup destroyed in a task while children still run");
}

// join_next, the blocking form, queues its Waiter's own node (a task's record has none: its
// worker thread's serves for the call), and aborts as every blocking wait from a task does.
TEST(TaskGroupTaskDeathTest, ABlockingJoinFromATaskAborts) {
  GTEST_FLAG_SET(death_test_style, DeathTestStyle());
  EXPECT_DEATH(
      {
        Runtime rt({.workers = 1});
        auto h = rt.spawn_task([&]() -> Task<> {
          TaskGroup<> group;
          (void)group.spawn_task(
              [](const CancellationToken& t) -> Task<> { (void)co_await WaitForCancel(t); });
          (void)group.join_next();
          co_return;
        });
        (void)h.join();
      },
      "called a blocking wait \\(TaskGroup\\), which would block its worker");
}

// A fail-fast cancel that neither the failing task child (its end runs on the worker's own
// context) nor the deadline thread (refused here) could make stays pending; a task's join,
// which cannot run the token's callbacks either (they may park, as this one does), reports
// resource_unavailable_try_again instead, and its next join, the deadline thread back, has the
// cancel made and rethrows the failure.
TEST(TaskGroupTaskTest, AFailFastCancelNoThreadCanMakeIsReportedToATasksJoin) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<> group;
    Event registered;
    std::atomic<bool> sibling_cancelled{false};
    ASSERT_TRUE(group.spawn([&](const CancellationToken& t) {
      CancellationCallback parks(t, [] {
        Event e;
        (void)e.wait({.deadline = SyncClock::now() + 1ms});
      });
      registered.set();
      Event never;
      sibling_cancelled = never.wait({.cancel = &t}).error() == std::errc::operation_canceled;
    }));
    ASSERT_TRUE(registered.wait());
    const fault::Config before = fault::Current();
    JoinHandle<int> joiner = rt.spawn_task([&]() -> Task<int> {
      int steps = 0;
      Result<void> first = co_await group.async_join_all();
      if (first.error() == std::errc::resource_unavailable_try_again) ++steps;
      fault::Configure(before);  // the deadline thread takes cancels again
      try {
        (void)co_await group.async_join_all();
      } catch (const std::runtime_error&) {
        ++steps;
      }
      co_return steps;
    });
    ASSERT_TRUE(group.spawn_task([&]() -> Task<> {
      co_await this_task::yield();
      fault::Configure({.rate = 1.0, .seed = 3, .hard = true});  // no deadline thread
      throw std::runtime_error("failed with no thread for the cancel");
    }));
    EXPECT_EQ(*joiner.join(), 2);
    EXPECT_TRUE(sibling_cancelled.load());
    fault::Configure(before);
  });
}

TEST(TaskGroupTaskTest, AnEmptyTaskIsRefused) {
  Runtime rt({.workers = 1});
  rt.block_on([&] {
    TaskGroup<> group;
    Task<> made = []() -> Task<> { co_return; }();
    Task<> taken = std::move(made);
    EXPECT_EQ(group.spawn_task([&] { return std::move(made); }).error(),
              std::errc::invalid_argument);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(group.size(), 0u);
    EXPECT_THROW((void)rt.spawn_task(std::move(made)), std::logic_error);
    ASSERT_TRUE(group.spawn_task([&] { return std::move(taken); }));
    EXPECT_TRUE(group.join_all());
  });
}

TEST(TaskGroupTaskTest, ATaskMayDestroyAGroupWhoseChildrenAllEnded) {
  Runtime rt({.workers = 2});
  auto h = rt.spawn_task([&]() -> Task<int> {
    int finished = 0;
    {
      TaskGroup<> group;
      for (int i = 0; i < 8; ++i) (void)group.spawn_task([]() -> Task<> { co_return; });
      // join_next for all but the destructor's take: every child has ended.
      for (int i = 0; i < 8; ++i) {
        if ((co_await group.async_join_next()).ok()) ++finished;
      }
    }
    co_return finished;
  });
  EXPECT_EQ(*h.join(), 8);
}

}  // namespace
}  // namespace weft
