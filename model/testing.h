// model/testing.h: GoogleTest helpers for model tests.
//
// Defines: weft::model::ExpectAllSchedulesPass.

#ifndef WEFT_MODEL_TESTING_H_
#define WEFT_MODEL_TESTING_H_

#include <cstdio>

#include "gtest/gtest.h"
#include "model/model.h"

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

}  // namespace weft::model

#endif  // WEFT_MODEL_TESTING_H_
