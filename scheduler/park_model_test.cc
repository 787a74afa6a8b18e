// scheduler/park_model_test.cc: a fiber's park/notify handshake (scheduler/internal/park.h)
// under the model checker (--config=model), with both fence pairings: seq_cst on both sides,
// and the asymmetric one (a compiler fence at the park, membarrier at the notify's slow path).
//
// The fiber, its worker, notifiers and timer are park_model_body.h's. Whatever the interleaving:
// every wait that should end ends (a lost wake-up is a deadlock with every thread parked or
// spinning), a park is queued exactly once (twice would run one fiber on two workers), and a
// wait reports a notify only when there was one.

#include <string>

#include "gtest/gtest.h"
#include "park_model_body.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"

namespace weft::scheduler_internal {
namespace {

using model::check;
using model::ExpectAllSchedulesPass;

class ParkModelTest : public ::testing::TestWithParam<bool> {};

// One wait, one notify: the wait ends, notified; one queueing per park; no permit left over.
TEST_P(ParkModelTest, WaitAndNotify) {
  const bool light = GetParam();
  ExpectAllSchedulesPass(check(
      [light] {
        ModelFiber f(light);
        model::thread notifier([&] { Notify(f); });
        WEFT_MODEL_ASSERT(Wait(f));
        notifier.join();
        WEFT_MODEL_ASSERT(f.queued.load() == f.parks);
        WEFT_MODEL_ASSERT(!f.permit.load());
      },
      {.preemption_bound = 3}));
}

// Two notifiers race for one parked fiber: it is queued once.
TEST_P(ParkModelTest, TwoNotifiersQueueOnce) {
  const bool light = GetParam();
  ExpectAllSchedulesPass(check(
      [light] {
        ModelFiber f(light);
        model::thread a([&] { Notify(f); });
        model::thread b([&] { Notify(f); });
        WEFT_MODEL_ASSERT(Wait(f));
        a.join();
        b.join();
        WEFT_MODEL_ASSERT(f.queued.load() == f.parks);
      },
      {.preemption_bound = 2}));
}

// Two conditions waited for in turn, each set and notified by its own thread (as //sync uses a
// Waiter): the first notify's permit may outlive its wait and resume the second one
// spuriously; both waits still end and nothing is queued twice.
TEST_P(ParkModelTest, StalePermitAcrossWaits) {
  const bool light = GetParam();
  ExpectAllSchedulesPass(check(
      [light] {
        ModelFiber f(light);
        weft::atomic<bool> first{false}, second{false};
        model::thread a([&] {
          first.store(true, std::memory_order_release);
          Notify(f);
        });
        model::thread b([&] {
          second.store(true, std::memory_order_release);
          Notify(f);
        });
        while (!first.load(std::memory_order_acquire)) Wait(f);
        while (!second.load(std::memory_order_acquire)) Wait(f);
        a.join();
        b.join();
        WEFT_MODEL_ASSERT(f.queued.load() == f.parks);
      },
      {.preemption_bound = 2}));
}

// A timed wait: its timer and a notify race. The wait ends either way, queued once; if it
// reports a timeout, the notify had not yet claimed it (its permit, if any, is stale).
TEST_P(ParkModelTest, TimerRacingNotify) {
  const bool light = GetParam();
  ExpectAllSchedulesPass(check(
      [light] {
        ModelFiber f(light);
        model::thread notifier([&] { Notify(f); });
        model::thread timer([&] { TimerSide(f, 1); });
        bool notified = Wait(f);
        notifier.join();
        timer.join();
        WEFT_MODEL_ASSERT(f.queued.load() == f.parks);
        WEFT_MODEL_ASSERT(notified || f.timer_fired.get());
      },
      {.preemption_bound = 2}));
}

INSTANTIATE_TEST_SUITE_P(Fences, ParkModelTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("Asymmetric") : std::string("SeqCst");
                         });

}  // namespace
}  // namespace weft::scheduler_internal
