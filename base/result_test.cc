#include "weft/base/result.h"

#include <memory>
#include <sstream>
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

TEST(ResultTest, ExpectedStyleAccessors) {
  Result<int> good = 7;
  Result<int> bad = std::errc::timed_out;
  EXPECT_TRUE(good.has_value());
  EXPECT_FALSE(bad.has_value());
  EXPECT_EQ(good.value_or(0), 7);
  EXPECT_EQ(bad.value_or(0), 0);
  EXPECT_EQ(Result<std::string>(std::errc::io_error).value_or("none"), "none");
  EXPECT_EQ(good.error_or(std::errc::io_error), std::errc::io_error);
  EXPECT_EQ(bad.error_or(std::errc::io_error), std::errc::timed_out);
  Result<void> done;
  Result<void> failed = std::errc::broken_pipe;
  EXPECT_TRUE(done.has_value());
  EXPECT_EQ(failed.error_or(std::errc{}), std::errc::broken_pipe);
  done.value();  // nothing to return; no abort
}

TEST(ResultTest, ComparesWithAnError) {
  Result<int> bad = std::errc::timed_out;
  EXPECT_TRUE(bad == std::errc::timed_out);
  EXPECT_TRUE(std::errc::timed_out == bad);
  EXPECT_TRUE(bad != std::errc::operation_canceled);
  Result<int> good = 0;
  EXPECT_FALSE(good == std::errc{});  // a value equals no error, not even errc{}
  Result<void> canceled = std::errc::operation_canceled;
  EXPECT_TRUE(canceled == std::errc::operation_canceled);
  EXPECT_FALSE(Result<void>() == std::errc{});
}

Result<int> Half(int v) {
  if (v % 2 != 0) return std::errc::invalid_argument;
  return v / 2;
}

TEST(ResultTest, AndThenChainsAndStopsAtTheFirstError) {
  EXPECT_EQ(*Result<int>(8).and_then(Half).and_then(Half), 2);
  Result<int> odd = Result<int>(6).and_then(Half).and_then(Half);
  EXPECT_EQ(odd.error(), std::errc::invalid_argument);
  int calls = 0;
  Result<int> never = Result<int>(std::errc::timed_out).and_then([&](int v) {
    ++calls;
    return Result<int>(v);
  });
  EXPECT_EQ(never.error(), std::errc::timed_out);
  EXPECT_EQ(calls, 0);
  // Into another type, and from Result<void>.
  Result<std::string> text =
      Result<int>(3).and_then([](int v) -> Result<std::string> { return std::to_string(v); });
  EXPECT_EQ(*text, "3");
  Result<int> after_void = Result<void>().and_then([] { return Result<int>(5); });
  EXPECT_EQ(*after_void, 5);
  Result<int> after_failed =
      Result<void>(std::errc::broken_pipe).and_then([] { return Result<int>(5); });
  EXPECT_EQ(after_failed.error(), std::errc::broken_pipe);
  // A move-only value moves through.
  Result<std::unique_ptr<int>> p = std::make_unique<int>(4);
  Result<int> deref = std::move(p).and_then([](std::unique_ptr<int> q) { return Result<int>(*q); });
  EXPECT_EQ(*deref, 4);
}

TEST(ResultTest, TransformMapsTheValueOnly) {
  Result<std::size_t> len = Result<std::string>("abc").transform(&std::string::size);
  EXPECT_EQ(*len, 3u);
  Result<double> bad = Result<int>(std::errc::io_error).transform([](int v) { return v * 1.5; });
  EXPECT_EQ(bad.error(), std::errc::io_error);
  int seen = 0;
  Result<void> v = Result<int>(9).transform([&](int x) { seen = x; });  // void: Result<void>
  EXPECT_TRUE(v.ok());
  EXPECT_EQ(seen, 9);
  Result<int> from_void = Result<void>().transform([] { return 1; });
  EXPECT_EQ(*from_void, 1);
  Result<std::string> moved =
      Result<std::string>(std::string(100, 'x')).transform([](std::string s) { return s + "!"; });
  EXPECT_EQ(moved->size(), 101u);
}

TEST(ResultTest, OrElseRecoversOrReplacesTheError) {
  Result<int> recovered = Result<int>(std::errc::timed_out).or_else([](std::errc e) {
    return e == std::errc::timed_out ? Result<int>(0) : Result<int>(e);
  });
  EXPECT_EQ(*recovered, 0);
  Result<int> kept = Result<int>(3).or_else([](std::errc) { return Result<int>(0); });
  EXPECT_EQ(*kept, 3);
  Result<int> other = Result<int>(std::errc::io_error).or_else([](std::errc e) {
    return e == std::errc::timed_out ? Result<int>(0) : Result<int>(e);
  });
  EXPECT_EQ(other.error(), std::errc::io_error);
  Result<void> ignored_pipe = Result<void>(std::errc::broken_pipe).or_else([](std::errc e) {
    return e == std::errc::broken_pipe ? Result<void>() : Result<void>(e);
  });
  EXPECT_TRUE(ignored_pipe.ok());
  Result<int> renamed = Result<int>(std::errc::timed_out).transform_error([](std::errc) {
    return std::errc::operation_canceled;
  });
  EXPECT_EQ(renamed.error(), std::errc::operation_canceled);
  EXPECT_EQ(*Result<int>(1).transform_error([](std::errc e) { return e; }), 1);
}

Result<int> SumOfHalves(int a, int b) {
  WEFT_ASSIGN_OR_RETURN(int x, Half(a));
  WEFT_ASSIGN_OR_RETURN(auto y, Half(b));
  return x + y;
}

Result<void> CheckEven(int a) {
  WEFT_RETURN_IF_ERROR(Half(a));
  WEFT_RETURN_IF_ERROR(Result<void>());
  return {};
}

TEST(ResultTest, EarlyReturnMacros) {
  EXPECT_EQ(*SumOfHalves(4, 6), 5);
  EXPECT_EQ(SumOfHalves(3, 6).error(), std::errc::invalid_argument);
  EXPECT_EQ(SumOfHalves(4, 7).error(), std::errc::invalid_argument);
  EXPECT_TRUE(CheckEven(2).ok());
  EXPECT_EQ(CheckEven(1).error(), std::errc::invalid_argument);
}

TEST(ResultTest, StreamsTheValueOrTheError) {
  std::ostringstream os;
  os << Result<int>(42) << " " << Result<void>() << " " << Result<int>(std::errc::timed_out);
  EXPECT_EQ(os.str(), "42 ok weft: " + to_string(std::errc::timed_out));
  struct Opaque {};
  std::ostringstream opaque;
  opaque << Result<Opaque>(Opaque{}) << "|" << Result<void>(std::errc::operation_canceled);
  EXPECT_EQ(opaque.str(), "ok|weft: Operation canceled");
  // The same texts on every platform (Windows' CRT has none for these codes).
  EXPECT_EQ(to_string(std::errc::timed_out), "Connection timed out");
  EXPECT_EQ(to_string(std::errc::connection_reset), "Connection reset by peer");
}

TEST(ResultTest, AnErrorNeverBecomesSuccess) {
  // A Result<void>'s transform_error may clear the error on purpose (std::errc{} is success).
  Result<void> cleared =
      Result<void>(std::errc::timed_out).transform_error([](std::errc) { return std::errc{}; });
  EXPECT_TRUE(cleared.ok());
  // A Result<T> cannot hold the error std::errc{} (below: debug builds abort; NDEBUG builds
  // report io_error), so passing its error on never reads as success.
}

#ifndef NDEBUG
TEST(ResultDeathTest, AnErrorWithoutACodeAborts) {
  EXPECT_DEATH({ Result<int> r = std::errc{}; }, "made from std::errc\\{\\}");
}
#endif

TEST(ResultDeathTest, ValueOfErrorAborts) {
  Result<int> bad = std::errc::not_enough_memory;
  EXPECT_DEATH((void)bad.value(), "Result::value\\(\\) called on an error");
  Result<void> failed = std::errc::not_enough_memory;
  EXPECT_DEATH(failed.value(), "Result::value\\(\\) called on an error");
}

}  // namespace
}  // namespace weft
