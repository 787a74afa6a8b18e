// sync/mutex_planted_bug_model_test.cc: the model checker finds the lost wake-up weft's Mutex once
// had. This binary links the Mutex built with WEFT_MODEL_PLANTED_MUTEX_LOST_WAKEUP (mutex.cc),
// which marks kWaiters with a separate fetch_or after a failed acquire: an unlock in between takes
// the uncontended path, and the waiter parks with the mutex free. The same test body passes on
// the real Mutex (sync_model_test.cc, MutexCountsEveryCriticalSection), from
// sync/mutex_model_body.h.

#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "mutex_model_body.h"
#include "weft/model/model.h"

namespace weft {
namespace {

TEST(MutexPlantedBugModelTest, TheCheckerFindsTheLostWakeUp) {
  model::Report r = model::check([] { CountUnderMutex(2, 1); });
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("deadlock"), std::string::npos) << r;
  EXPECT_NE(r.failure.find("parked in Mutex"), std::string::npos) << r;
  std::printf("found in %.3f s: %s\n", r.seconds, ::testing::PrintToString(r).c_str());
}

}  // namespace
}  // namespace weft
