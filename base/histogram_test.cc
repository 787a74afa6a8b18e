// LogHistogram: every value lands in the bucket whose bounds hold it, the buckets tile uint64_t,
// and the JSON lists the buckets in use.

#include "weft/base/histogram.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(LogHistogram, EachValueIsWithinItsBucketsBounds) {
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{7}, std::uint64_t{8},
                          std::uint64_t{9}, std::uint64_t{15}, std::uint64_t{16},
                          std::uint64_t{1000}, std::uint64_t{1} << 40, max - 1, max}) {
    const std::size_t i = LogHistogram::index(v);
    ASSERT_LT(i, LogHistogram::kBuckets) << v;
    EXPECT_LE(LogHistogram::lower_bound(i), v) << v;
    if (i + 1 < LogHistogram::kBuckets) EXPECT_LT(v, LogHistogram::lower_bound(i + 1)) << v;
  }
  EXPECT_EQ(LogHistogram::index(max), LogHistogram::kBuckets - 1);
}

TEST(LogHistogram, BucketsTileTheRangeWithAQuarterPrecision) {
  for (std::size_t i = 1; i < LogHistogram::kBuckets; ++i) {
    const std::uint64_t lo = LogHistogram::lower_bound(i);
    EXPECT_GT(lo, LogHistogram::lower_bound(i - 1));
    EXPECT_EQ(LogHistogram::index(lo), i);
    EXPECT_EQ(LogHistogram::index(lo - 1), i - 1);
    if (i >= 8) {
      // Width at most a quarter of the lower bound.
      const std::uint64_t width = LogHistogram::lower_bound(i) - LogHistogram::lower_bound(i - 1);
      EXPECT_LE(4 * width, LogHistogram::lower_bound(i - 1) + 4) << i;
    }
  }
}

TEST(LogHistogram, JsonListsTheBucketsInUse) {
  LogHistogram h;
  std::string empty;
  h.append_json(empty);
  EXPECT_EQ(empty, "[]");
  h.record(3);
  h.record(1500);
  h.record(1400);
  h.record(1 << 20);
  std::string out;
  h.append_json(out);
  EXPECT_EQ(out, "[[3,1],[1280,2],[1048576,1]]");
  EXPECT_EQ(h.total(), 4u);
}

}  // namespace
}  // namespace weft
