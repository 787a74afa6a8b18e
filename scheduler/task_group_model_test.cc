// scheduler/task_group_model_test.cc: TaskGroup's shared state (GroupCore) under the model
// checker (--config=model): children are model threads that finish their records as a group's
// fibers would, and the joiner takes them. Every schedule within the bounds must hold; a lost
// wake-up of a join is a deadlock the checker reports.

#include <system_error>

#include "gtest/gtest.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"
#include "weft/scheduler/task_group.h"
#include "weft/sync/coordination.h"

namespace weft {
namespace {

using model::check;
using model::ExpectAllSchedulesPass;
using scheduler_internal::Finished;
using scheduler_internal::FinishedRing;
using scheduler_internal::GroupChild;
using scheduler_internal::GroupCore;

// A child's record as the template makes it, minus the callable; owned by the test.
struct Record : GroupChild {
  Record() {
    has_value = true;  // kept: the joiner reads it
    destroy = [](GroupChild*) noexcept {};
  }
};

// Finish: a child's last steps, as GroupChildState::Finish takes them on its fiber.
void Finish(GroupCore& core, GroupChild* child) {
  core.Publish(child, core.Report(child, /*on_fiber=*/true, /*local=*/true));
}

// A joiner parked in join_next while a sibling still runs must be woken by each finish: the
// second child waits for the first to be taken, so a finish that woke nobody leaves both waiting.
TEST(TaskGroupModelTest, JoinNextWakesForAFinishWhileASiblingRuns) {
  ExpectAllSchedulesPass(check([] {
    GroupCore core(nullptr, {});
    Record a, b;
    a.id = *core.Admit();
    b.id = *core.Admit();
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
    failing.id = *core.Admit();
    sibling.id = *core.Admit();
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
    Result<FinishedRing> all = core.TakeAll({});
    WEFT_MODEL_ASSERT(all.ok() && all->count == 2);
    WEFT_MODEL_ASSERT(core.FirstFailure().error() == std::errc::io_error);
    WEFT_MODEL_ASSERT(core.Admit().error() == std::errc::operation_canceled);
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
    parent.id = *core.Admit();
    model::thread tp([&] {
      sibling.id = *core.Admit();
      model::thread sib([&] { Finish(core, &sibling); });
      Finish(core, &parent);
      sib.join();
    });
    Result<FinishedRing> all = core.TakeAll({});
    WEFT_MODEL_ASSERT(all.ok() && all->count == 2);
    tp.join();
  }));
}

}  // namespace
}  // namespace weft
