// TaskGroup: joins (all, next, in which order), the failure policies, cancellation and its reach
// into nested groups, the destructor's join, concurrent use, children that cannot start, and
// runtime shutdown under a live group.

#include "weft/scheduler/task_group.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
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
#include "weft/sync/cancellation.h"
#include "weft/sync/channel.h"
#include "weft/sync/coordination.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// Waits on an Event that nobody sets, through the token: ends only by cancellation.
Result<void> WaitForCancel(const CancellationToken& token) {
  Event never;
  return never.wait({.cancel = &token});
}

// SpawnCancelWaiter: spawns into `group` a child (on a 64 KiB stack) that waits for the group's
// cancel, and returns once it waits; `cancelled` says, when the child ends, whether the cancel
// ended its wait.
void SpawnCancelWaiter(TaskGroup<>& group, std::atomic<bool>& cancelled) {
  auto parked = std::make_shared<Event>();  // the child's too: it may still be in set()
  ASSERT_TRUE(group.spawn(
      [&cancelled, parked](const CancellationToken& t) {
        parked->set();
        cancelled = WaitForCancel(t).error() == std::errc::operation_canceled;
      },
      {.stack_size = 64 << 10}));
  ASSERT_TRUE(parked->wait());
}

TEST(TaskGroup, JoinAllWaitsForEveryChild) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    std::atomic<int> ran{0};
    TaskGroup<> group;
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(group.spawn([&] {
        this_fiber::yield();
        ran.fetch_add(1);
      }));
    }
    ASSERT_TRUE(group.join_all());
    EXPECT_EQ(ran.load(), 100);
    EXPECT_EQ(group.size(), 0u);
    EXPECT_TRUE(group.join_all());  // nothing left: at once
  });
}

TEST(TaskGroup, JoinAllReturnsValuesInSpawnOrder) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<int> group;
    // Finish in reverse order: each child waits for the one spawned after it.
    std::vector<std::unique_ptr<Event>> done;
    for (int i = 0; i < 8; ++i) done.push_back(std::make_unique<Event>());
    for (int i = 0; i < 8; ++i) {
      ASSERT_TRUE(group.spawn([&, i] {
        if (i + 1 < 8) (void)done[i + 1]->wait();
        done[i]->set();
        return i * 10;
      }));
    }
    Result<std::vector<int>> values = group.join_all();
    ASSERT_TRUE(values);
    EXPECT_EQ(*values, (std::vector<int>{0, 10, 20, 30, 40, 50, 60, 70}));
  });
}

TEST(TaskGroup, JoinNextHandsOutInCompletionOrderThenNoChild) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<int> group;
    Channel<int> go(0);
    std::vector<std::uint64_t> ids;
    for (int i = 0; i < 3; ++i) {
      Result<std::uint64_t> id = group.spawn([&] { return *go.recv(); });
      ASSERT_TRUE(id);
      ids.push_back(*id);
    }
    EXPECT_EQ(ids, (std::vector<std::uint64_t>{1, 2, 3}));
    // Release them one at a time; each join_next sees the one just released.
    for (int v : {7, 8, 9}) {
      ASSERT_TRUE(go.send(v));
      Result<Completed<int>> c = group.join_next();
      ASSERT_TRUE(c);
      EXPECT_FALSE(c->failed());
      EXPECT_EQ(c->get(), v);
    }
    Result<Completed<int>> none = group.join_next();
    ASSERT_FALSE(none);
    EXPECT_EQ(none.error(), std::errc::no_child_process);
  });
}

TEST(TaskGroup, AParkedJoinNextWakesForEachChildThatFinishesWhileOthersRun) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<int> group;
    Event first, second;
    ASSERT_TRUE(group.spawn([&] { return first.wait().ok() ? 1 : -1; }));
    ASSERT_TRUE(group.spawn([&] { return second.wait().ok() ? 2 : -2; }));
    // Release the first only once the joiner is parked on the group (its dump line says so),
    // so that the finish, with a sibling still running, is what must wake it.
    auto releaser = rt.spawn([&] {
      while (rt.dump_fibers().find("TaskGroup") == std::string::npos) this_fiber::yield();
      first.set();
    });
    Result<Completed<int>> c = group.join_next();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->get(), 1);
    (void)releaser.join();
    second.set();
    c = group.join_next();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->get(), 2);
  });
}

TEST(TaskGroup, JoinNextTimesOutAndTheChildStaysJoinable) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<> group;
    Event release;
    ASSERT_TRUE(group.spawn([&] { (void)release.wait(); }));
    Result<Completed<void>> early = group.join_next({.deadline = SyncClock::now() + 1ms});
    ASSERT_FALSE(early);
    EXPECT_EQ(early.error(), std::errc::timed_out);
    CancellationSource stop;
    stop.cancel();
    const CancellationToken token = stop.token();
    EXPECT_EQ(group.join_all({.cancel = &token}).error(), std::errc::operation_canceled);
    EXPECT_EQ(group.size(), 1u);
    release.set();
    Result<Completed<void>> c = group.join_next();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->id(), 1u);
  });
}

TEST(TaskGroup, FailFastCancelsSiblingsAndReportsTheFirstError) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<Result<void>> group;
    std::atomic<int> cancelled{0};
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(group.spawn([&](const CancellationToken& token) -> Result<void> {
        Result<void> r = WaitForCancel(token);
        if (r.error() == std::errc::operation_canceled) cancelled.fetch_add(1);
        return r;
      }));
    }
    ASSERT_TRUE(group.spawn([]() -> Result<void> { return std::errc::io_error; }));
    Result<void> r = group.join_all();
    EXPECT_EQ(r.error(), std::errc::io_error);  // the first failure, not the siblings'
    EXPECT_EQ(cancelled.load(), 10);
    EXPECT_TRUE(group.is_cancelled());
    EXPECT_EQ(group.spawn([]() -> Result<void> { return {}; }).error(),
              std::errc::operation_canceled);
  });
}

TEST(TaskGroup, FailFastRethrowsTheFirstException) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<> group;
    std::atomic<int> cancelled{0};
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(group.spawn([&] {
        if (WaitForCancel(this_fiber::group_token()).error() == std::errc::operation_canceled) {
          cancelled.fetch_add(1);
        }
      }));
    }
    ASSERT_TRUE(group.spawn([] { throw std::runtime_error("boom"); }));
    EXPECT_THROW(
        {
          try {
            (void)group.join_all();
          } catch (const std::runtime_error& e) {
            EXPECT_STREQ(e.what(), "boom");
            throw;
          }
        },
        std::runtime_error);
    EXPECT_EQ(cancelled.load(), 4);
  });
}

TEST(TaskGroup, CollectAllRunsEveryChildAndHandsOutEachOutcome) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<Result<int>> group({.policy = GroupPolicy::kCollectAll});
    Event failed;
    ASSERT_TRUE(group.spawn([&]() -> Result<int> {
      failed.set();
      return std::errc::invalid_argument;
    }));
    for (int i = 0; i < 5; ++i) {
      // Each waits until the failure has happened, and is not cancelled by it.
      ASSERT_TRUE(group.spawn([&, i](const CancellationToken& token) -> Result<int> {
        if (Result<void> r = failed.wait({.cancel = &token}); !r) return r.error();
        this_fiber::yield();
        return token.is_cancelled() ? -1 : i;
      }));
    }
    int ok = 0, bad = 0, sum = 0;
    for (;;) {
      Result<Completed<Result<int>>> c = group.join_next();
      if (!c) {
        EXPECT_EQ(c.error(), std::errc::no_child_process);
        break;
      }
      Result<int> v = c->get();
      if (c->failed()) {
        ++bad;
        EXPECT_EQ(v.error(), std::errc::invalid_argument);
      } else {
        ++ok;
        sum += *v;
      }
    }
    EXPECT_EQ(bad, 1);
    EXPECT_EQ(ok, 5);
    EXPECT_EQ(sum, 0 + 1 + 2 + 3 + 4);
    // join_all still reports the group's first failure, though join_next handed it out.
    EXPECT_EQ(group.join_all().error(), std::errc::invalid_argument);
    EXPECT_FALSE(group.is_cancelled());
  });
}

TEST(TaskGroup, DiscardedOutcomesAreFreedAsChildrenFinishButTheFirstFailureIsKept) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<Result<int>> group({.policy = GroupPolicy::kCollectAll, .discard_outcomes = true});
    auto live = std::make_shared<int>(0);  // each child's value holds a reference
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(group.spawn([live, i]() -> Result<int> {
        if (i == 7) return std::errc::io_error;
        return i;
      }));
    }
    Result<Completed<Result<int>>> next = group.join_next();  // waits for them all
    EXPECT_EQ(next.error(), std::errc::no_child_process);
    EXPECT_EQ(group.size(), 0u);
    EXPECT_EQ(live.use_count(), 1);  // every callable and value is gone
    EXPECT_EQ(group.join_all().error(), std::errc::io_error);
  });
}

TEST(TaskGroup, CancelEndsTheChildrensWaitsAndRefusesNewOnes) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<> group({.policy = GroupPolicy::kCollectAll});
    std::atomic<int> ended{0};
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(group.spawn([&](const CancellationToken& t) {
        EXPECT_EQ(WaitForCancel(t).error(), std::errc::operation_canceled);
        ended.fetch_add(1);
      }));
    }
    group.cancel();
    group.cancel();  // idempotent
    EXPECT_EQ(group.spawn([] {}).error(), std::errc::operation_canceled);
    EXPECT_TRUE(group.join_all());  // the children returned normally: no failure
    EXPECT_EQ(ended.load(), 20);
  });
}

TEST(TaskGroup, TheDestructorCancelsAndJoins) {
  Runtime rt({.workers = 2});
  std::atomic<int> finished{0};
  auto scope = [&] {
    TaskGroup<> group(rt);
    for (int i = 0; i < 16; ++i) {
      ASSERT_TRUE(group.spawn([&](const CancellationToken& t) {
        (void)WaitForCancel(t);
        this_fiber::yield();  // still running after the cancel: the destructor must wait
        finished.fetch_add(1);
      }));
    }
  };
  rt.block_on(scope);  // on a fiber
  EXPECT_EQ(finished.load(), 16);
  scope();  // on a plain thread
  EXPECT_EQ(finished.load(), 32);
}

TEST(TaskGroup, CancellingAParentCancelsTheGroupsNestedInItsChildren) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<Result<void>> outer;
    std::atomic<int> inner_cancelled{0};
    Event inner_started;
    ASSERT_TRUE(outer.spawn([&]() -> Result<void> {
      TaskGroup<Result<void>> inner;  // linked to outer's token by itself
      for (int i = 0; i < 3; ++i) {
        if (!inner.spawn([&]() -> Result<void> {
              Result<void> r = WaitForCancel(this_fiber::group_token());
              if (r.error() == std::errc::operation_canceled) inner_cancelled.fetch_add(1);
              return r;
            })) {
          return std::errc::io_error;
        }
      }
      inner_started.set();
      return inner.join_all();  // its failure is this child's
    }));
    ASSERT_TRUE(inner_started.wait());
    outer.cancel();
    EXPECT_EQ(outer.join_all().error(), std::errc::operation_canceled);
    EXPECT_EQ(inner_cancelled.load(), 3);
  });
}

TEST(TaskGroup, ADefaultParentTokenOptsOutOfNesting) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<bool> outer;
    Event outer_cancelled;
    ASSERT_TRUE(outer.spawn([&] {
      TaskGroup<> detached({.parent = CancellationToken()});
      (void)outer_cancelled.wait();
      return !detached.is_cancelled() && this_fiber::group_token().is_cancelled();
    }));
    outer.cancel();
    outer_cancelled.set();
    Result<std::vector<bool>> r = outer.join_all();
    ASSERT_TRUE(r);
    EXPECT_TRUE((*r)[0]);
  });
}

TEST(TaskGroup, AChildGroupsFailureReachesTheParentAndCancelsItsSiblings) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<> outer;
    std::atomic<bool> sibling_cancelled{false};
    ASSERT_TRUE(outer.spawn([&] {
      sibling_cancelled =
          WaitForCancel(this_fiber::group_token()).error() == std::errc::operation_canceled;
    }));
    ASSERT_TRUE(outer.spawn([] {
      TaskGroup<> inner;
      (void)inner.spawn([] { throw std::logic_error("deep"); });
      (void)inner.join_all();  // rethrows: this child fails with it
    }));
    EXPECT_THROW((void)outer.join_all(), std::logic_error);
    EXPECT_TRUE(sibling_cancelled.load());
  });
}

TEST(TaskGroup, AParentDeadlineFlowsIntoTheGroup) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    CancellationSource request;
    TaskGroup<Result<void>> group({.parent = request.token()});
    ASSERT_TRUE(group.spawn([](const CancellationToken& t) { return WaitForCancel(t); }));
    // The deadline after the spawn (a slow machine could reach it first, and a cancelled group
    // refuses spawns).
    ASSERT_TRUE(request.cancel_after(2ms));
    EXPECT_EQ(group.join_all().error(), std::errc::operation_canceled);
    EXPECT_TRUE(group.token().deadline().has_value());
  });
}

TEST(TaskGroup, AChildCannotJoinItsOwnGroup) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<Result<void>> group;
    ASSERT_TRUE(group.spawn([&]() -> Result<void> {
      EXPECT_EQ(group.join_next().error(), std::errc::resource_deadlock_would_occur);
      return group.join_all();
    }));
    EXPECT_EQ(group.join_all().error(), std::errc::resource_deadlock_would_occur);
  });
}

TEST(TaskGroup, ChildrenSpawnSiblingsAndJoinAllWaitsForThem) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<> group;
    std::atomic<int> ran{0};
    // A binary tree of spawns, depth 8: 511 children, most spawned by other children.
    std::function<void(int)> node = [&](int depth) {
      ran.fetch_add(1);
      if (depth == 0) return;
      for (int k = 0; k < 2; ++k) ASSERT_TRUE(group.spawn([&, depth] { node(depth - 1); }));
    };
    ASSERT_TRUE(group.spawn([&] { node(8); }));
    ASSERT_TRUE(group.join_all());
    EXPECT_EQ(ran.load(), 511);
  });
}

TEST(TaskGroup, ConcurrentJoinNextHandsEachChildToOneCaller) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    constexpr int kChildren = 200;
    TaskGroup<int> group;
    for (int i = 0; i < kChildren; ++i) {
      ASSERT_TRUE(group.spawn([i] {
        this_fiber::yield();
        return i;
      }));
    }
    auto drain = [&] {
      std::vector<int> seen;
      for (;;) {
        Result<Completed<int>> c = group.join_next();
        if (!c) {
          EXPECT_EQ(c.error(), std::errc::no_child_process);
          return seen;
        }
        seen.push_back(c->get());
      }
    };
    auto a = rt.spawn(drain);
    auto b = rt.spawn(drain);
    std::vector<int> all = *a.join();
    std::vector<int> more = *b.join();
    all.insert(all.end(), more.begin(), more.end());
    std::set<int> unique(all.begin(), all.end());
    EXPECT_EQ(all.size(), static_cast<std::size_t>(kChildren));
    EXPECT_EQ(unique.size(), static_cast<std::size_t>(kChildren));
  });
}

// join_all walks the children in spawn order; one that gives up takes nothing, not even the
// children it saw finish (a void one's record it freed keeps its id), and join_next, which
// switches the group to completion order, then hands out every child.
TEST(TaskGroup, AJoinAllThatGivesUpLeavesEveryChildToJoinNext) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<> voids;
    TaskGroup<int> values;
    Event release;
    ASSERT_TRUE(voids.spawn([] {}));
    ASSERT_TRUE(voids.spawn([&] { (void)release.wait(); }));
    ASSERT_TRUE(voids.spawn([] {}));
    ASSERT_TRUE(values.spawn([] { return 1; }));
    ASSERT_TRUE(values.spawn([&] { return release.wait().ok() ? 2 : -1; }));
    ASSERT_TRUE(values.spawn([] { return 3; }));
    this_fiber::sleep_for(2ms);  // the first and third children finish (not needed to pass)
    EXPECT_EQ(voids.join_all({.deadline = SyncClock::now() + 2ms}).error(), std::errc::timed_out);
    EXPECT_EQ(values.join_all({.deadline = SyncClock::now() + 2ms}).error(), std::errc::timed_out);
    EXPECT_EQ(voids.size(), 3u);
    EXPECT_EQ(values.size(), 3u);
    release.set();
    std::set<std::uint64_t> ids;
    std::set<int> got;
    for (int i = 0; i < 3; ++i) {
      Result<Completed<void>> v = voids.join_next();
      ASSERT_TRUE(v);
      ids.insert(v->id());
      Result<Completed<int>> c = values.join_next();
      ASSERT_TRUE(c);
      got.insert(c->get());
    }
    EXPECT_EQ(ids, (std::set<std::uint64_t>{1, 2, 3}));
    EXPECT_EQ(got, (std::set<int>{1, 2, 3}));
    EXPECT_EQ(voids.join_next().error(), std::errc::no_child_process);
    EXPECT_EQ(values.join_next().error(), std::errc::no_child_process);
    EXPECT_TRUE(values.join_all());
  });
}

// A child spawns a sibling that cannot be spawned (a stack size no class has) while join_all
// walks the list the sibling was already entered in: the spawn reports the error, and join_all
// returns without waiting for it or counting it.
TEST(TaskGroup, ASpawnThatFailsDuringJoinAllIsNotWaitedFor) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<int> group;
    std::errc sibling{};
    ASSERT_TRUE(group.spawn([&] {
      this_fiber::sleep_for(5ms);  // the root is in join_all by now (not needed to pass)
      Result<std::uint64_t> id =
          group.spawn([] { return 2; }, {.stack_size = std::size_t{1} << 40});
      sibling = id.ok() ? std::errc{} : id.error();
      return 1;
    }));
    Result<std::vector<int>> all = group.join_all();
    ASSERT_TRUE(all);
    EXPECT_EQ(*all, std::vector<int>{1});
    EXPECT_EQ(sibling, std::errc::invalid_argument);
    EXPECT_EQ(group.size(), 0u);
  });
}

// A join_next made while a join_all waits for the children in spawn order gets a finished child
// that nobody took: the walk hands the group over to completion order. Here the second child
// waits for the first to be handed out, so a join_next that waited for the walk to end would
// wait forever, and the walk with it.
TEST(TaskGroup, JoinNextDuringAJoinAllGetsAFinishedChild) {
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    TaskGroup<int> group;
    Event handed_out;
    ASSERT_TRUE(group.spawn([] { return 1; }));
    ASSERT_TRUE(group.spawn([&] {
      (void)handed_out.wait();
      return 2;
    }));
    JoinHandle<Result<std::vector<int>>> walker = rt.spawn([&] { return group.join_all(); });
    (void)this_fiber::sleep_for(5ms);  // the walk waits on the second child (not needed to pass)
    Result<Completed<int>> c = group.join_next();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->get(), 1);
    handed_out.set();
    Result<Result<std::vector<int>>> all = walker.join();
    ASSERT_TRUE(all && *all);
    EXPECT_EQ(**all, std::vector<int>{2});  // what join_next did not take
    EXPECT_EQ(group.size(), 0u);
  });
}

// A child that cannot start fails a fail-fast group while join_all waits on a sibling that
// waits for the group's cancel, and the deadline thread refuses to make the cancel (an injected
// fault): the walk is woken to make it.
TEST(TaskGroup, AnUnstartableChildDuringAJoinAllCancelsTheSiblingsWithoutTheDeadlineThread) {
  // A stack class no other test uses, so that no cached stack hides the refused mapping.
  Runtime rt({.workers = 2, .stack_size = std::size_t{5} << 20});
  rt.block_on([&] {
    TaskGroup<> group;
    std::atomic<bool> sibling_cancelled{false};
    SpawnCancelWaiter(group, sibling_cancelled);
    const CancellationToken token = group.token();
    JoinHandle<void> failer = rt.spawn([&] {
      (void)this_fiber::sleep_for(5ms);  // the root walks by now (not needed to pass)
      fault::Config before = fault::Current();
      fault::Configure({.rate = 1.0, .seed = 3, .hard = true});
      EXPECT_TRUE(group.spawn([] { ADD_FAILURE() << "ran without a stack"; }));
      // Faults stay on until the child has failed and the walk has made the cancel.
      EXPECT_EQ(WaitForCancel(token).error(), std::errc::operation_canceled);
      fault::Configure(before);
    });
    try {
      // The deadline only turns a regression's hang into a failure.
      Result<void> r = group.join_all({.deadline = SyncClock::now() + 20s});
      ADD_FAILURE() << "join_all did not report the child that could not start: "
                    << (r.ok() ? "ok" : std::make_error_code(r.error()).message());
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), std::errc::not_enough_memory);
    }
    EXPECT_TRUE(sibling_cancelled.load());
    group.cancel();  // for the failer, if the walk failed
    (void)failer.join();
  });
}

TEST(TaskGroup, OutsideARuntimeSpawnIsInvalidAndBadStacksAreRefused) {
  TaskGroup<> nowhere;
  EXPECT_EQ(nowhere.spawn([] {}).error(), std::errc::invalid_argument);
  EXPECT_TRUE(nowhere.join_all());
  Runtime rt({.workers = 1});
  TaskGroup<> group(rt);
  EXPECT_EQ(group.spawn([] {}, {.stack_size = std::size_t{1} << 40}).error(),
            std::errc::invalid_argument);
  EXPECT_EQ(group.size(), 0u);
  ASSERT_TRUE(group.spawn([] {}));
  EXPECT_TRUE(group.join_all());  // from a plain thread
  // A moved-from group refuses everything; the one it moved to has the children.
  ASSERT_TRUE(group.spawn([] {}));
  TaskGroup<> moved(std::move(group));
  EXPECT_EQ(group.spawn([] {}).error(),
            std::errc::invalid_argument);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(group.join_all().error(), std::errc::invalid_argument);
  EXPECT_EQ(group.join_next().error(), std::errc::invalid_argument);
  EXPECT_EQ(group.size(), 0u);
  group.cancel();
  EXPECT_FALSE(moved.is_cancelled());
  EXPECT_TRUE(moved.join_all());
}

TEST(TaskGroup, ACallableWhoseMoveThrowsIsNotCounted) {
  Runtime rt({.workers = 1});
  struct Throws {
    Throws() = default;
    Throws(Throws&&) { throw std::runtime_error("no move"); }
    void operator()() const {}
  };
  TaskGroup<> group(rt);
  EXPECT_THROW((void)group.spawn(Throws()), std::runtime_error);
  EXPECT_EQ(group.size(), 0u);
  EXPECT_TRUE(group.join_all());
}

TEST(TaskGroup, AChildWithoutAStackFailsTheGroupAndCancelsItsSiblings) {
  // A stack class no other test uses, so that no cached stack hides the refused mapping.
  Runtime rt({.workers = 2, .stack_size = std::size_t{3} << 20});
  rt.block_on([&] {
    TaskGroup<> group;
    std::atomic<bool> sibling_cancelled{false};
    SpawnCancelWaiter(group, sibling_cancelled);
    fault::Config before = fault::Current();
    fault::Configure({.rate = 1.0, .seed = 3, .hard = true});
    Result<std::uint64_t> id = group.spawn([] { ADD_FAILURE() << "ran without a stack"; });
    // Faults stay on until the child has failed: its stack is mapped when it first runs.
    Result<Completed<void>> c = group.join_next();
    fault::Configure(before);
    ASSERT_TRUE(id);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->id(), *id);
    EXPECT_TRUE(c->failed());
    // Its report came from a worker's own context; the siblings are cancelled all the same.
    try {
      (void)group.join_all();
      ADD_FAILURE() << "join_all did not report the child that could not start";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), std::errc::not_enough_memory);
    }
    EXPECT_TRUE(sibling_cancelled.load());
  });
}

TEST(TaskGroup, RuntimeShutdownUnwindsALiveGroup) {
  std::atomic<int> finished{0};
  {
    Runtime rt({.workers = 2});
    Event started;
    auto owner = rt.spawn([&] {
      TaskGroup<> group;
      for (int i = 0; i < 8; ++i) {
        (void)group.spawn([&] {
          Event never;
          (void)never.wait();  // no token: only shutdown ends it
          finished.fetch_add(1);
        });
      }
      started.set();
      (void)group.join_all();  // ends with operation_canceled at shutdown; then the destructor
    });
    owner.detach();
    ASSERT_TRUE(started.wait());
  }  // ~Runtime: returns only once the group and its children are done
  EXPECT_EQ(finished.load(), 8);
}

// Fail-fast trips racing spawns, joins and cancels, over 1, 2, 4 and 8 workers.
class TaskGroupStress : public ::testing::TestWithParam<unsigned> {};

TEST_P(TaskGroupStress, FailuresCancelsAndJoinsRace) {
  Runtime rt({.workers = GetParam()});
  const int rounds = 300 * testing::StressScale();
  rt.block_on([&] {
    for (int round = 0; round < rounds; ++round) {
      TaskGroup<Result<int>> group(
          {.policy = round % 2 == 0 ? GroupPolicy::kFailFast : GroupPolicy::kCollectAll});
      int spawned = 0;
      for (int i = 0; i < 32; ++i) {
        Result<std::uint64_t> id =
            group.spawn([i, round](const CancellationToken& t) -> Result<int> {
              if (i == round % 32) return std::errc::io_error;
              for (int k = 0; k < 4; ++k) {
                if (t.is_cancelled()) return std::errc::operation_canceled;
                this_fiber::yield();
              }
              return i;
            });
        if (id) ++spawned;
      }
      if (round % 3 == 0) {
        // Take a few, then let the destructor have the rest.
        for (int k = 0; k < 4; ++k) (void)group.join_next();
        if (round % 6 == 0) group.cancel();
        continue;
      }
      Result<std::vector<int>> all = group.join_all();
      ASSERT_FALSE(all);
      EXPECT_EQ(all.error(), std::errc::io_error);
      EXPECT_EQ(group.size(), 0u);
      EXPECT_GT(spawned, 0);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Workers, TaskGroupStress, ::testing::Values(1u, 2u, 4u, 8u));

}  // namespace
}  // namespace weft
