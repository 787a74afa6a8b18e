// scheduler/task_group_model_test.cc: TaskGroup's shared state (GroupCore) under the model
// checker (--config=model): children are model threads that finish their records as a group's
// fibers would, and the joiner takes them, in both of the group's modes (join_all's walk of the
// spawn-order list; the completion-order queue join_next switches to) and across the switch.
// Every schedule within the bounds must hold; a lost wake-up of a join is a deadlock the checker
// reports.

#include <coroutine>
#include <exception>
#include <system_error>

#include "gtest/gtest.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"
#include "weft/scheduler/task_group.h"
#include "weft/scheduler/testing/eager.h"
#include "weft/sync/coordination.h"

namespace weft {
namespace {

using model::check;
using model::ExpectAllSchedulesPass;
using scheduler_internal::Finished;
using scheduler_internal::GroupChild;
using scheduler_internal::GroupCore;
using scheduler_internal::Taken;

// A child's record as the template makes it, minus the callable; owned by the test.
struct Record : GroupChild {
  Record() {
    has_value = true;  // kept: the joiner reads it
    destroy = [](GroupChild*) noexcept {};
  }
};

// Finish: a child's last steps, as GroupChildState::Finish takes them on its fiber.
void Finish(GroupCore& core, GroupChild* child) {
  core.Report(child, /*on_fiber=*/true);
  if (!child->done.set()) return;  // spawn-order mode
  core.Publish(child, core.Keeps(child, /*local=*/true));
}

// Eager: a coroutine run at once by the thread that calls it, as a task's joins are awaited:
// off a worker, JoinAwaiter blocks the thread, going through the same steps a task takes (each
// wake-up asks Done, which takes, or queues the node again when another join took first).
using testing::Eager;
Eager AwaitNext(GroupCore& core, Result<Finished>* out) {
  GroupCore::JoinAwaiter join(&core, {}, /*all=*/false);
  co_await join;
  *out = join.next();
}
Eager AwaitAll(GroupCore& core, Result<Taken>* out) {
  GroupCore::JoinAwaiter join(&core, {}, /*all=*/true);
  co_await join;
  *out = std::move(join.all());
}

// FirstOfTwoFinished: admits `a` and `b`, and finishes `a` (a child that ended before the joins).
void FirstOfTwoFinished(GroupCore& core, Record& a, Record& b) {
  (void)*core.Admit(&a);
  (void)*core.Admit(&b);
  Finish(core, &a);
}

// FinishWhenSet: a thread that finishes `child` once `go` is set (a child that ends only after
// the joiner has had its first one).
model::thread FinishWhenSet(GroupCore& core, Record& child, Event& go) {
  return model::thread([&core, &child, &go] {
    WEFT_MODEL_ASSERT(go.wait().ok());
    Finish(core, &child);
  });
}

// ParentSpawningASibling: admits `parent`, whose thread admits `sibling`, starts its thread, and
// finishes; both children finish racing the caller's joins.
model::thread ParentSpawningASibling(GroupCore& core, Record& parent, Record& sibling) {
  (void)*core.Admit(&parent);
  return model::thread([&core, &parent, &sibling] {
    (void)*core.Admit(&sibling);
    model::thread sib([&] { Finish(core, &sibling); });
    Finish(core, &parent);
    sib.join();
  });
}

// A joiner parked in join_next while a sibling still runs must be woken by each finish: the
// second child waits for the first to be taken, so a finish that woke nobody leaves both waiting.
// The first join_next switches the group to queue mode as the first child may be finishing.
TEST(TaskGroupModelTest, JoinNextWakesForAFinishWhileASiblingRuns) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {});
    Record a, b;
    (void)*core.Admit(&a);
    (void)*core.Admit(&b);
    Event first_taken;
    model::thread ta([&] { Finish(core, &a); });
    model::thread tb([&] {
      WEFT_MODEL_ASSERT(first_taken.wait().ok());
      Finish(core, &b);
    });
    Result<Finished> first = core.TakeNext({});
    WEFT_MODEL_ASSERT(first.ok() && first->child == &a);
    first_taken.set();
    Result<Finished> second = core.TakeNext({});
    WEFT_MODEL_ASSERT(second.ok() && second->child == &b);
    WEFT_MODEL_ASSERT(core.TakeNext({}).error() == std::errc::no_child_process);
    ta.join();
    tb.join();
  }));
}

// Fail-fast: a failing child cancels the group's token before it is published, so a sibling
// waiting on the token ends, and join_all sees every child and the first failure.
TEST(TaskGroupModelTest, FailFastCancelsTheSiblingAndJoinAllTakesBoth) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {.policy = GroupPolicy::kFailFast});
    Record failing, sibling;
    (void)*core.Admit(&failing);
    (void)*core.Admit(&sibling);
    model::thread tf([&] {
      failing.error = std::errc::io_error;
      Finish(core, &failing);
    });
    model::thread ts([&] {
      Event never;
      const CancellationToken& token = core.token();
      WEFT_MODEL_ASSERT(never.wait({.cancel = &token}).error() == std::errc::operation_canceled);
      Finish(core, &sibling);
    });
    Result<Taken> all = core.TakeAll({});
    WEFT_MODEL_ASSERT(all.ok() && all->count() == 2);
    WEFT_MODEL_ASSERT(core.FirstFailure().error() == std::errc::io_error);
    Record late;
    WEFT_MODEL_ASSERT(core.Admit(&late).error() == std::errc::operation_canceled);
    tf.join();
    ts.join();
  }));
}

// A child that spawns a sibling before it finishes: join_all, racing both, returns only once
// the sibling has finished too, with both taken.
TEST(TaskGroupModelTest, JoinAllWaitsForASiblingSpawnedByAChild) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {});
    Record parent, sibling;
    model::thread tp = ParentSpawningASibling(core, parent, sibling);
    Result<Taken> all = core.TakeAll({});
    WEFT_MODEL_ASSERT(all.ok() && all->count() == 2);
    tp.join();
  }));
}

// A join_next made while a join_all walks the list, with one child finished and one finishing:
// between them they take each child exactly once.
TEST(TaskGroupModelTest, JoinNextDuringAWalkAndTheWalkTakeEachChildOnce) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {});
    Record a, b;
    FirstOfTwoFinished(core, a, b);
    Result<Taken> all = std::errc::interrupted;  // until the walker returns
    model::thread walker([&] { all = core.TakeAll({}); });
    model::thread tb([&] { Finish(core, &b); });
    Result<Finished> next = core.TakeNext({});
    walker.join();
    tb.join();
    // Either order is allowed: join_next first takes a child (switching the group to queue
    // mode, where join_all then takes the rest), or the walk takes both.
    WEFT_MODEL_ASSERT(all.ok());
    if (next.ok()) {
      WEFT_MODEL_ASSERT(all->count() == 1);
    } else {
      WEFT_MODEL_ASSERT(next.error() == std::errc::no_child_process);
      WEFT_MODEL_ASSERT(all->count() == 2);
    }
  }));
}

// A walk that gives up (its wait cancelled) takes nothing: join_next then hands out both
// children, the one the walk had already seen finish included, whichever finishes when.
TEST(TaskGroupModelTest, AWalkThatGivesUpLeavesEveryChildToJoinNext) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {});
    Record a, b;
    (void)*core.Admit(&a);
    (void)*core.Admit(&b);
    CancellationSource stop;
    const CancellationToken token = stop.token();
    model::thread ta([&] { Finish(core, &a); });
    model::thread canceller([&] { stop.cancel(); });
    Result<Taken> all = core.TakeAll({.cancel = &token});
    canceller.join();
    // b has not finished: the walk cannot end but by giving up.
    WEFT_MODEL_ASSERT(!all.ok() && all.error() == std::errc::operation_canceled);
    model::thread tb([&] { Finish(core, &b); });
    Result<Finished> first = core.TakeNext({});
    Result<Finished> second = core.TakeNext({});
    WEFT_MODEL_ASSERT(first.ok() && second.ok() && first->child != second->child);
    WEFT_MODEL_ASSERT(core.TakeNext({}).error() == std::errc::no_child_process);
    ta.join();
    tb.join();
  }));
}

// A spawn that fails after its child was listed, while a join_all waits on that very child:
// the walk ends, and the child is not among those taken.
TEST(TaskGroupModelTest, AChildWithdrawnDuringAWalkIsNotTaken) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {});
    Record a, never_ran;
    (void)*core.Admit(&a);
    (void)*core.Admit(&never_ran);
    bool caller_frees = false;
    model::thread ta([&] { Finish(core, &a); });
    model::thread spawner([&] { caller_frees = core.Withdraw(&never_ran); });
    Result<Taken> all = core.TakeAll({});
    spawner.join();
    ta.join();
    WEFT_MODEL_ASSERT(all.ok() && all->count() == 1);
    WEFT_MODEL_ASSERT(core.size() == 0);
    (void)caller_frees;  // either side frees it; Record's destroy does nothing
  }));
}

// A join_next made while a join_all waits on a child that finishes only after the join_next
// has a child: the walk is interrupted to switch the group to queue mode, and the join_next gets
// the finished one; the walk then takes the other.
TEST(TaskGroupModelTest, JoinNextDuringAWalkGetsTheFinishedChild) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {});
    Record a, b;
    FirstOfTwoFinished(core, a, b);
    Event handed_out;
    Result<Taken> all = std::errc::interrupted;  // until the walker returns
    model::thread walker([&] { all = core.TakeAll({}); });
    model::thread tb = FinishWhenSet(core, b, handed_out);
    Result<Finished> next = core.TakeNext({});
    WEFT_MODEL_ASSERT(next.ok() && next->child == &a);
    handed_out.set();
    walker.join();
    tb.join();
    WEFT_MODEL_ASSERT(all.ok() && all->count() == 1);
    WEFT_MODEL_ASSERT(core.size() == 0);
  }));
}

// A record whose destroys are counted.
struct Counted : GroupChild {
  Counted() {
    has_value = true;
    destroy = [](GroupChild* c) noexcept { ++static_cast<Counted*>(c)->destroyed; };
  }
  int destroyed = 0;
};

// A spawn withdrawn while a walk runs, the walk giving up meanwhile and a join_next switching
// the group to queue mode before the withdrawal sets the record's `done`: the record is freed
// once (by the spawner or the join) and counts no more.
TEST(TaskGroupModelTest, AWithdrawalRacingAWalkThatGivesUpAndTheSwitch) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {});
    Counted a, withdrawn;
    (void)*core.Admit(&a);
    (void)*core.Admit(&withdrawn);
    CancellationSource stop;
    const CancellationToken token = stop.token();
    bool caller_frees = false;
    model::thread walker([&] { (void)core.TakeAll({.cancel = &token}); });
    model::thread spawner([&] { caller_frees = core.Withdraw(&withdrawn); });
    model::thread canceller([&] { stop.cancel(); });
    walker.join();  // `a` has not finished: the walk gave up
    canceller.join();
    model::thread ta([&] { Finish(core, &a); });
    Result<Finished> first = core.TakeNext({});
    WEFT_MODEL_ASSERT(first.ok() && first->child == &a);
    spawner.join();
    ta.join();
    WEFT_MODEL_ASSERT(core.size() == 0);
    WEFT_MODEL_ASSERT(withdrawn.destroyed + (caller_frees ? 1 : 0) == 1);
    WEFT_MODEL_ASSERT(core.TakeNext({}).error() == std::errc::no_child_process);
  }));
}

// A child spawns a sibling while a join_next switches the group: each is handed out once.
TEST(TaskGroupModelTest, ASiblingAdmittedDuringTheSwitchIsHandedOutOnce) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {});
    Record parent, sibling;
    model::thread tp = ParentSpawningASibling(core, parent, sibling);
    Result<Finished> x = core.TakeNext({});
    Result<Finished> y = core.TakeNext({});
    WEFT_MODEL_ASSERT(x.ok() && y.ok() && x->child != y->child);
    WEFT_MODEL_ASSERT(core.TakeNext({}).error() == std::errc::no_child_process);
    tp.join();
    WEFT_MODEL_ASSERT(core.size() == 0);
  }));
}

// A join_next's request that the walker switch the group must survive the walk giving up and
// a new walk starting before the join_next looks again (here the same joiner retries, as a
// join_all with a deadline in a loop would): the join_next asks the new walk too, and gets the
// finished child; the second child waits for that, so a lost request is a deadlock.
TEST(TaskGroupModelTest, AJoinNextsRequestOutlivesAWalkThatGivesUpAndIsRetried) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {});
    Record a, b;
    FirstOfTwoFinished(core, a, b);
    CancellationSource stop;
    const CancellationToken token = stop.token();
    Event handed_out;
    model::thread walker([&] {
      Result<Taken> all = core.TakeAll({.cancel = &token});
      if (!all.ok()) all = core.TakeAll({});  // gave up: again, without a token
      WEFT_MODEL_ASSERT(all.ok());
    });
    model::thread tb = FinishWhenSet(core, b, handed_out);
    model::thread canceller([&] { stop.cancel(); });
    Result<Finished> next = core.TakeNext({});
    WEFT_MODEL_ASSERT(next.ok() && next->child == &a);
    handed_out.set();
    canceller.join();
    walker.join();
    tb.join();
  }));
}

// A task's join_next (the awaiter) and a fiber's compete for two children: each child goes to
// exactly one of them, and the one that loses a grant to the other waits again (Done queues its
// node again) instead of ending or being forgotten: with the second child waiting for the first
// to be taken, a lost wake-up is a deadlock.
TEST(TaskGroupModelTest, AnAwaitedJoinNextAndABlockingOneShareTheChildren) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {});
    Record a, b;
    (void)*core.Admit(&a);
    (void)*core.Admit(&b);
    Event first_taken;
    Result<Finished> awaited = std::errc::interrupted;
    model::thread task([&] {
      AwaitNext(core, &awaited);
      first_taken.set();
    });
    model::thread ta([&] { Finish(core, &a); });
    model::thread tb([&] {
      WEFT_MODEL_ASSERT(first_taken.wait().ok());
      Finish(core, &b);
    });
    Result<Finished> blocking = core.TakeNext({});
    first_taken.set();  // whichever join takes first lets the second child finish
    task.join();
    WEFT_MODEL_ASSERT(awaited.ok() && blocking.ok());
    WEFT_MODEL_ASSERT(awaited->child != blocking->child);
    ta.join();
    tb.join();
  }));
}

// A task's join_all while a fiber's join_all walks the list and a child finishes: both end, and
// between them they take each child once (the task's waits for the walk to end, then takes
// what is left).
TEST(TaskGroupModelTest, AnAwaitedJoinAllBesideAWalk) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {});
    Record a, b;
    FirstOfTwoFinished(core, a, b);
    Result<Taken> walked = std::errc::interrupted;
    model::thread walker([&] { walked = core.TakeAll({}); });
    model::thread tb([&] { Finish(core, &b); });
    Result<Taken> awaited = std::errc::interrupted;
    AwaitAll(core, &awaited);
    walker.join();
    tb.join();
    WEFT_MODEL_ASSERT(walked.ok() && awaited.ok());
    WEFT_MODEL_ASSERT(walked->count() + awaited->count() == 2);
    WEFT_MODEL_ASSERT(core.size() == 0);
  }));
}

}  // namespace
}  // namespace weft
