// scheduler/hold_test.cc: the monitor's judgement of a long run from its worker thread's CPU
// clock (internal/hold.h): computing is reported, little CPU is looked at further, and one
// reading is no evidence either way.

#include "internal/hold.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace weft::scheduler_internal {
namespace {

constexpr std::int64_t kUs = 1000;
constexpr std::int64_t kThreshold = 1000 * kUs;

TEST(JudgeCpu, AtLeastHalfTheCpuComputes) {
  EXPECT_EQ(JudgeCpu(500 * kUs, 1000 * kUs, kThreshold), CpuEvidence::kComputes);
  EXPECT_EQ(JudgeCpu(1000 * kUs, 1000 * kUs, kThreshold), CpuEvidence::kComputes);
}

TEST(JudgeCpu, AThresholdsWorthOfCpuComputesHoweverLongItTook) {
  // An oversubscribed machine: a tenth of a core for 20 ms is 2 ms of computing.
  EXPECT_EQ(JudgeCpu(2000 * kUs, 20000 * kUs, kThreshold), CpuEvidence::kComputes);
  EXPECT_EQ(JudgeCpu(kThreshold, 50 * kThreshold, kThreshold), CpuEvidence::kComputes);
}

TEST(JudgeCpu, LittleCpuIsLookedAtFurther) {
  EXPECT_EQ(JudgeCpu(0, 1000 * kUs, kThreshold), CpuEvidence::kLittle);
  EXPECT_EQ(JudgeCpu(400 * kUs, 1000 * kUs, kThreshold), CpuEvidence::kLittle);
}

// The sample that reads the clock first is no evidence: a late sample finds a run past the
// threshold at its first reading (the monitor's thread was descheduled, or the threshold is
// shorter than the sampling period), and the thread may merely be waiting for a core.
TEST(JudgeCpu, OneReadingIsNoEvidence) {
  EXPECT_EQ(JudgeCpu(0, 0, kThreshold), CpuEvidence::kNone);
  EXPECT_EQ(JudgeCpu(0, 0, 100 * kUs), CpuEvidence::kNone);
}

}  // namespace
}  // namespace weft::scheduler_internal
