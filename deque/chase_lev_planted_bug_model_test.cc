// deque/chase_lev_planted_bug_model_test.cc: the model checker finds a memory-order bug. This
// binary compiles chase_lev.h with WEFT_MODEL_PLANTED_CHASE_LEV_RELAXED_PUSH, which weakens
// push's release store of bottom_ to relaxed: a thief that sees the new bottom may then read the
// slot's old contents. The body is one that passes on the real deque (chase_lev_model_test.cc).

#include <cstdio>
#include <string>

#include "chase_lev_model_bodies.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(ChaseLevPlantedBugModelTest, TheCheckerFindsTheStaleSlot) {
  model::Report r = model::check([] { chase_lev_model::PushPopSteal(2, 2, 2); });
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("v >= 1 && v <= n"), std::string::npos) << r;
  EXPECT_NE(r.trace.find("(stale)"), std::string::npos) << r;
  std::printf("found in %.3f s: %s\n", r.seconds, ::testing::PrintToString(r).c_str());
}

}  // namespace
}  // namespace weft
