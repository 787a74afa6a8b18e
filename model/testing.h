// model/testing.h: GoogleTest helpers for model tests.
//
// Defines: weft::model::ExpectAllSchedulesPass, weft::model::AssertEachOnce,
// weft::model::CheckedBool.

#ifndef WEFT_MODEL_TESTING_H_
#define WEFT_MODEL_TESTING_H_

#include <cstddef>
#include <cstdio>
#include <vector>

#include "gtest/gtest.h"
#include "weft/model/model.h"

namespace weft::model {

// ExpectAllSchedulesPass: the check explored its whole bounded space and no schedule failed
// (else the report, trace and replay id are printed). Prints "<test>: ok: N schedules ..." for
// the figures in docs/model.md.
inline void ExpectAllSchedulesPass(const Report& r) {
  EXPECT_TRUE(r.ok) << r;
  EXPECT_TRUE(r.exhausted);
  std::printf("%s: %s\n", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
              ::testing::PrintToString(r).c_str());
}

// AssertEachOnce: inside a model body, the values 1..n each appear exactly once in `taken`, and
// nothing else does: a queue or deque handed every item out once, and invented none (a thief
// that read a stale slot takes 0).
template <typename Int>
void AssertEachOnce(const std::vector<Int>& taken, Int n) {
  std::vector<int> seen(static_cast<std::size_t>(n) + 1, 0);
  for (Int v : taken) {
    WEFT_MODEL_ASSERT(v >= 1 && v <= n);
    if (v >= 1 && v <= n) ++seen[static_cast<std::size_t>(v)];
  }
  for (Int i = 1; i <= n; ++i) WEFT_MODEL_ASSERT(seen[static_cast<std::size_t>(i)] == 1);
}

// CheckedBool: a stand-in for a plain bool field of the code under test, whose accesses the
// checker checks for data races (a Cell<bool> with a bool's assignment and conversion).
class CheckedBool {
 public:
  CheckedBool& operator=(bool v) {
    cell_.set(v);
    return *this;
  }
  operator bool() const { return cell_.get(); }  // NOLINT: as the bool it stands for

 private:
  Cell<bool> cell_{false};
};

}  // namespace weft::model

#endif  // WEFT_MODEL_TESTING_H_
