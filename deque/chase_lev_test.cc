// Tests of ChaseLevDeque: single-thread semantics, growth and buffer reclamation, steal_half, and
// an owner against thieves with every item taken exactly once. WEFT_STRESS_SCALE=N runs the
// stress N times longer.

#include "weft/deque/chase_lev.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"

namespace weft {
namespace {

using ::weft::testing::StressScale;

TEST(ChaseLevTest, OwnerPopsLifo) {
  ChaseLevDeque<std::uint64_t> d;
  for (std::uint64_t i = 1; i <= 1000; ++i) ASSERT_TRUE(d.push(i));
  EXPECT_EQ(d.size_approx(), 1000u);
  for (std::uint64_t i = 1000; i >= 1; --i) EXPECT_EQ(d.pop(), i);
  EXPECT_EQ(d.pop(), std::nullopt);
  EXPECT_EQ(d.size_approx(), 0u);
}

TEST(ChaseLevTest, ThievesStealFifo) {
  ChaseLevDeque<std::uint64_t> d;
  for (std::uint64_t i = 1; i <= 1000; ++i) ASSERT_TRUE(d.push(i));
  for (std::uint64_t i = 1; i <= 1000; ++i) {
    std::uint64_t v = 0;
    ASSERT_EQ(d.steal(&v), StealResult::kSuccess);
    EXPECT_EQ(v, i);
  }
  std::uint64_t v;
  EXPECT_EQ(d.steal(&v), StealResult::kEmpty);
}

TEST(ChaseLevTest, PopAndStealMeetInTheMiddle) {
  ChaseLevDeque<int*> d(2);
  std::vector<int> values(10);
  for (int& v : values) ASSERT_TRUE(d.push(&v));
  int* out = nullptr;
  ASSERT_EQ(d.steal(&out), StealResult::kSuccess);
  EXPECT_EQ(out, &values[0]);
  EXPECT_EQ(d.pop(), &values[9]);
  for (int i = 1; i < 9; ++i) {
    if (i % 2 == 0) {
      ASSERT_EQ(d.steal(&out), StealResult::kSuccess);
    } else {
      ASSERT_TRUE(d.pop().has_value());
    }
  }
  EXPECT_EQ(d.pop(), std::nullopt);
  EXPECT_EQ(d.steal(&out), StealResult::kEmpty);
}

TEST(ChaseLevTest, GrowsAndFreesOldBuffers) {
  ChaseLevDeque<std::uint64_t> d(2);
  for (std::uint64_t i = 0; i < 100000; ++i) ASSERT_TRUE(d.push(i));
  EXPECT_EQ(d.retired_buffers(), 0u);  // no thief was active: freed at once
  for (std::uint64_t i = 100000; i-- > 0;) ASSERT_EQ(d.pop(), i);
}

TEST(ChaseLevTest, StealHalfMovesHalfOldestFirst) {
  ChaseLevDeque<std::uint64_t> victim, mine(2);
  for (std::uint64_t i = 0; i < 100; ++i) ASSERT_TRUE(victim.push(i));
  EXPECT_EQ(victim.steal_half(mine), 50u);
  EXPECT_EQ(victim.size_approx(), 50u);
  EXPECT_EQ(mine.size_approx(), 50u);
  for (std::uint64_t i = 50; i-- > 0;) EXPECT_EQ(mine.pop(), i);  // oldest were pushed first
  EXPECT_EQ(victim.steal_half(mine, 10), 10u);                    // capped by max
  ChaseLevDeque<std::uint64_t> empty;
  EXPECT_EQ(empty.steal_half(mine), 0u);
}

// The owner pushes 1..n (popping some itself) while thieves steal, singly and in halves into
// their own deques (which they then pop). Every item must be taken exactly once.
TEST(ChaseLevStressTest, EveryItemTakenExactlyOnce) {
  const std::uint64_t n = 1000000ull * StressScale();
  constexpr int kThieves = 3;
  ChaseLevDeque<std::uint64_t> d(4);  // small: growth happens while thieves are active
  auto taken = std::make_unique<std::atomic<std::uint8_t>[]>(n + 1);
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> total{0};
  auto take = [&](std::uint64_t v) {
    ASSERT_GE(v, 1u);
    ASSERT_LE(v, n);
    // relaxed: a counter checked after all threads joined.
    taken[v].fetch_add(1, std::memory_order_relaxed);
    total.fetch_add(1, std::memory_order_relaxed);
  };
  std::vector<std::thread> thieves;
  for (int t = 0; t < kThieves; ++t) {
    thieves.emplace_back([&, t] {
      ChaseLevDeque<std::uint64_t> own;
      // acquire: seeing done means the owner has pushed everything it will push.
      while (!done.load(std::memory_order_acquire) || d.size_approx() != 0) {
        if (t == 0) {
          while (d.steal_half(own, 64) != 0) {
            while (std::optional<std::uint64_t> v = own.pop()) take(*v);
          }
        } else {
          std::uint64_t v;
          if (d.steal(&v) == StealResult::kSuccess) take(v);
        }
      }
    });
  }
  for (std::uint64_t i = 1; i <= n; ++i) {
    ASSERT_TRUE(d.push(i));
    if (i % 3 == 0) {
      if (std::optional<std::uint64_t> v = d.pop()) take(*v);
    }
  }
  while (std::optional<std::uint64_t> v = d.pop()) take(*v);
  // release: pairs with the thieves' acquire.
  done.store(true, std::memory_order_release);
  for (std::thread& t : thieves) t.join();
  EXPECT_EQ(total.load(), n);
  std::uint64_t wrong = 0;
  for (std::uint64_t i = 1; i <= n; ++i) wrong += taken[i].load() != 1;
  EXPECT_EQ(wrong, 0u) << "items lost or taken twice";
  // With the thieves gone, the next push frees whatever growth retired meanwhile.
  ASSERT_TRUE(d.push(1));
  EXPECT_EQ(d.retired_buffers(), 0u);
  EXPECT_EQ(d.pop(), 1u);
}

}  // namespace
}  // namespace weft
