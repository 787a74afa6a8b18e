// scheduler/park_planted_bug_model_test.cc: the model checker finds the lost wake-up of a park
// without its fence. This binary compiles park.h with WEFT_MODEL_PLANTED_PARK_WITHOUT_FENCE,
// which drops the LightFence between PublishParked's kParked store and its permit load: the
// notify's HeavyFence then has no partner, the park may read no permit while the notify reads
// the old state, and neither queues the fiber. The same body passes with the fence
// (park_model_test.cc, WaitAndNotify/Asymmetric).

#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "park_model_body.h"
#include "weft/model/model.h"

namespace weft::scheduler_internal {
namespace {

TEST(ParkPlantedBugModelTest, TheCheckerFindsTheLostWakeUp) {
  model::Report r = model::check([] {
    ModelFiber f(/*light=*/true);
    model::thread notifier([&] { Notify(f); });
    WEFT_MODEL_ASSERT(Wait(f));
    notifier.join();
  });
  ASSERT_FALSE(r.ok);
  // The fiber spins on its run-queue counter (park_model_body.h), so a lost wake-up shows as
  // every thread finished but it, waiting for a write nobody will make.
  EXPECT_NE(r.failure.find("no thread can make progress"), std::string::npos) << r;
  EXPECT_NE(r.failure.find("park_model_body.h"), std::string::npos) << r;
  std::printf("found in %.3f s: %s\n", r.seconds, ::testing::PrintToString(r).c_str());
}

}  // namespace
}  // namespace weft::scheduler_internal
