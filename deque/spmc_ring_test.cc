// Tests of SpmcRing: FIFO order across laps, fullness, batches (take_half, steal_half), and
// exact delivery (every item taken exactly once) with one owner pushing and taking while
// thieves take single items and halves.

#include "weft/deque/spmc_ring.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"

namespace weft {
namespace {

using ::weft::testing::StressScale;

TEST(SpmcRingTest, FifoAcrossManyLaps) {
  SpmcRing<int, 4> ring;
  int next_in = 0, next_out = 0;
  for (int lap = 0; lap < 1000; ++lap) {
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(ring.push(next_in++));
    EXPECT_EQ(ring.size_approx(), 3u);
    for (int i = 0; i < 3; ++i) {
      int v = -1;
      ASSERT_TRUE(ring.pop(&v));
      EXPECT_EQ(v, next_out++);
    }
  }
  int v;
  EXPECT_FALSE(ring.pop(&v));
  EXPECT_EQ(ring.size_approx(), 0u);
}

TEST(SpmcRingTest, FullIsReportedAndNothingIsLost) {
  SpmcRing<int, 8> ring;
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(ring.push(i));
  EXPECT_FALSE(ring.push(8));
  EXPECT_EQ(ring.size_approx(), 8u);
  int out[8];
  // The owner's overflow path: the older half leaves, then the push succeeds.
  ASSERT_EQ(ring.take_half(out, 8), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], i);
  ASSERT_TRUE(ring.push(8));
  for (int want = 4; want <= 8; ++want) {
    int v = -1;
    ASSERT_TRUE(ring.pop(&v));
    EXPECT_EQ(v, want);
  }
}

TEST(SpmcRingTest, HalvesRoundUpAndRespectLimits) {
  SpmcRing<int, 16> ring;
  int out[16];
  EXPECT_EQ(ring.take_half(out, 16), 0u);  // empty
  ASSERT_TRUE(ring.push(7));
  EXPECT_EQ(ring.take_half(out, 16), 1u);  // one item: half rounds up to it
  EXPECT_EQ(out[0], 7);
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(ring.push(i));
  EXPECT_EQ(ring.take_half(out, 2), 2u);  // capped by max
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1], 1);
  EXPECT_EQ(ring.take_half(out, 16), 4u);  // ceil(7 / 2)
  EXPECT_EQ(out[3], 5);
  EXPECT_EQ(ring.size_approx(), 3u);
}

TEST(SpmcRingTest, PeekShowsWhatPopWouldTakeWithoutTakingIt) {
  SpmcRing<int, 4> ring;
  int v = -1;
  EXPECT_FALSE(ring.peek(0, &v));
  for (int lap = 0; lap < 10; ++lap) {  // across laps: indexes wrap
    ASSERT_TRUE(ring.push(10 * lap));
    ASSERT_TRUE(ring.push(10 * lap + 1));
    ASSERT_TRUE(ring.peek(0, &v));
    EXPECT_EQ(v, 10 * lap);
    ASSERT_TRUE(ring.peek(1, &v));
    EXPECT_EQ(v, 10 * lap + 1);
    EXPECT_FALSE(ring.peek(2, &v));
    EXPECT_EQ(ring.size_approx(), 2u);
    ASSERT_TRUE(ring.pop(&v));
    EXPECT_EQ(v, 10 * lap);
    ASSERT_TRUE(ring.pop(&v));
  }
}

TEST(SpmcRingTest, StealHalfMovesInOrderAndOnlyWhatFits) {
  SpmcRing<int, 8> victim, thief;
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(victim.push(i));
  for (int i = 100; i < 106; ++i) ASSERT_TRUE(thief.push(i));  // room for 2 only
  EXPECT_EQ(victim.steal_half(thief), 2u);
  EXPECT_EQ(victim.size_approx(), 6u);
  EXPECT_EQ(thief.size_approx(), 8u);
  std::vector<int> got;
  for (int v; thief.pop(&v);) got.push_back(v);
  EXPECT_EQ(got, (std::vector<int>{100, 101, 102, 103, 104, 105, 0, 1}));
  EXPECT_EQ(victim.steal_half(thief), 3u);  // now empty: ceil(6 / 2)
  for (int want = 2; want <= 4; ++want) {
    int v = -1;
    ASSERT_TRUE(thief.pop(&v));
    EXPECT_EQ(v, want);
  }
}

// One owner pushes items 1..n (taking half of its ring out when full, as a scheduler's overflow
// does, and popping some itself); thieves pop singles and steal halves into rings of their own.
// Every item must be taken exactly once, and each taker must see one owner's items in order.
TEST(SpmcRingStressTest, EveryItemIsTakenExactlyOnce) {
  const std::uint32_t n = 200000u * static_cast<std::uint32_t>(StressScale());
  constexpr int kThieves = 3;
  SpmcRing<std::uint32_t, 64> ring;
  std::vector<std::atomic<std::uint8_t>> seen(n + 1);
  std::atomic<bool> done{false};
  auto take = [&](std::uint32_t v) {
    ASSERT_GE(v, 1u);
    ASSERT_LE(v, n);
    ASSERT_EQ(seen[v].fetch_add(1, std::memory_order_relaxed), 0) << v;
  };
  std::vector<std::thread> thieves;
  for (int k = 0; k < kThieves; ++k) {
    thieves.emplace_back([&, k] {
      SpmcRing<std::uint32_t, 64> mine;
      std::uint32_t last = 0;  // what this thief took from the owner's ring is in push order
      auto in_order = [&](std::uint32_t v) {
        ASSERT_GT(v, last);
        last = v;
      };
      for (;;) {
        bool finished = done.load(std::memory_order_acquire);
        std::uint32_t v;
        if (k == 0 ? ring.pop(&v) : false) {
          in_order(v);
          take(v);
        } else if (k != 0 && ring.steal_half(mine) != 0) {
          while (mine.pop(&v)) {
            in_order(v);
            take(v);
          }
        } else if (finished) {
          break;
        }
      }
    });
  }
  std::vector<std::uint32_t> spill(64);
  for (std::uint32_t v = 1; v <= n; ++v) {
    while (!ring.push(v)) {
      std::size_t k = ring.take_half(spill.data(), spill.size());
      for (std::size_t i = 0; i < k; ++i) take(spill[i]);
    }
    if (v % 7 == 0) {
      std::uint32_t x;
      if (ring.pop(&x)) take(x);
    }
  }
  done.store(true, std::memory_order_release);
  for (auto& t : thieves) t.join();
  for (std::uint32_t x; ring.pop(&x);) take(x);
  for (std::uint32_t v = 1; v <= n; ++v) ASSERT_EQ(seen[v].load(), 1) << v;
}

}  // namespace
}  // namespace weft
