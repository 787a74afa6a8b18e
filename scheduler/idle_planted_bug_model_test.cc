// scheduler/idle_planted_bug_model_test.cc: the model checker finds the lost wake-ups of two
// broken variants of the sleep/wake handshake (scheduler/internal/idle.h). Built twice:
// - WEFT_MODEL_PLANTED_IDLE_WITHOUT_FENCE drops WakeOne's fence: the push's relaxed read of the
//   sleeper count may miss a worker that listed itself while that worker's look misses the
//   push, and nobody wakes it.
// - WEFT_MODEL_PLANTED_IDLE_LATE_WORD reads the wake word after the fence instead of before the
//   listing: a WakeOne for an item the worker already took adds to the word first, the next push
//   finds no sleeper, and the worker sleeps on the new word through it.
// The same bodies pass on the real handshake (idle_model_test.cc: APushWakesASleepingWorker,
// BackToBackPushes).

#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "idle_model_body.h"
#include "weft/model/model.h"

namespace weft::scheduler_internal {
namespace {

#ifdef WEFT_MODEL_PLANTED_IDLE_LATE_WORD
constexpr int kPushes = 2;  // the second push is the one slept through
#else
constexpr int kPushes = 1;
#endif

TEST(IdlePlantedBugModelTest, TheCheckerFindsTheLostWakeUp) {
  model::Report r = model::check([] { PushesToOneWorker(kPushes); });
  ASSERT_FALSE(r.ok);
  // The body spins on the taken count and the worker on its wake word.
  EXPECT_NE(r.failure.find("no thread can make progress"), std::string::npos) << r;
  std::printf("found in %.3f s: %s\n", r.seconds, ::testing::PrintToString(r).c_str());
}

}  // namespace
}  // namespace weft::scheduler_internal
