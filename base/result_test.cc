#include "weft/base/result.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace weft {
namespace {

Result<int> Parse(bool good) {
  if (!good) return std::errc::invalid_argument;
  return 42;
}

TEST(ResultTest, ValueAndError) {
  Result<int> good = Parse(true);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  EXPECT_EQ(good.error(), std::errc{});

  Result<int> bad = Parse(false);
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.error(), std::errc::invalid_argument);
  EXPECT_EQ(bad.error_code().value(), EINVAL);
}

TEST(ResultTest, MoveOnlyValue) {
  Result<std::unique_ptr<std::string>> r = std::make_unique<std::string>("x");
  std::unique_ptr<std::string> p = std::move(r).value();
  EXPECT_EQ(*p, "x");
}

TEST(ResultTest, Void) {
  Result<void> ok;
  EXPECT_TRUE(ok.ok());
  Result<void> full = std::errc::resource_unavailable_try_again;
  EXPECT_FALSE(full);
  EXPECT_EQ(full.error_code().value(), EAGAIN);
}

TEST(ResultDeathTest, ValueOfErrorAborts) {
  Result<int> bad = std::errc::not_enough_memory;
  EXPECT_DEATH((void)bad.value(), "Result::value\\(\\) called on an error");
}

}  // namespace
}  // namespace weft
