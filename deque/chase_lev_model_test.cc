// deque/chase_lev_model_test.cc: ChaseLevDeque under the model checker (--config=model): push,
// pop, steal, growth while a thief holds the old buffer, the last-item race, and steal_half, in
// every schedule within the bounds, with loads reading any store the C++ memory model allows.

#include <cstdio>

#include "chase_lev_model_bodies.h"
#include "gtest/gtest.h"
#include "weft/model/testing.h"

namespace weft {
namespace {

using model::check;
using model::ExpectAllSchedulesPass;
using model::Report;

// One item: the owner's pop and the thief's steal race for it (the CAS on top).
TEST(ChaseLevModelTest, TheLastItemGoesToExactlyOneSide) {
  ExpectAllSchedulesPass(
      check([] { chase_lev_model::PushPopSteal(1, 2, 1); }, {.preemption_bound = 3}));
}

TEST(ChaseLevModelTest, PushPopAndTwoSteals) {
  ExpectAllSchedulesPass(check([] { chase_lev_model::PushPopSteal(2, 2, 2); }));
}

// Three items in a deque of two: push grows the buffer while the thief may hold the old one.
TEST(ChaseLevModelTest, GrowthWhileAThiefHoldsTheOldBuffer) {
  ExpectAllSchedulesPass(check([] { chase_lev_model::PushPopSteal(3, 2, 2); }));
}

TEST(ChaseLevModelTest, StealHalfMovesEachItemOnce) {
  ExpectAllSchedulesPass(check([] { chase_lev_model::StealHalf(3); }, {.preemption_bound = 1}));
}

}  // namespace
}  // namespace weft
