// Tests of MpmcRing: FIFO order, fullness reported without losing the item, move-only values,
// draining through the cleanup hook, and exact delivery with several producers and consumers.

#include "weft/deque/mpmc_ring.h"

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

TEST(MpmcRingTest, FifoAcrossManyLaps) {
  MpmcRing<int> ring(4);
  EXPECT_EQ(ring.capacity(), 4u);
  int next_in = 0, next_out = 0;
  for (int lap = 0; lap < 1000; ++lap) {
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(ring.try_push(next_in++));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(ring.try_pop(), next_out++);
  }
  EXPECT_EQ(ring.try_pop(), std::nullopt);
}

TEST(MpmcRingTest, FullIsReportedAndTheItemKept) {
  MpmcRing<std::unique_ptr<int>> ring(3);  // rounds up to 4
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(ring.try_push(std::make_unique<int>(i)));
  EXPECT_EQ(ring.size_approx(), 4u);
  auto extra = std::make_unique<int>(99);
  EXPECT_FALSE(ring.try_push(extra));
  ASSERT_NE(extra, nullptr);  // not moved from: the caller can retry or push back
  EXPECT_EQ(*extra, 99);
  EXPECT_EQ(**ring.try_pop(), 0);
  EXPECT_TRUE(ring.try_push(extra));
  EXPECT_EQ(extra, nullptr);
}

TEST(MpmcRingTest, LeftoversGoThroughTheCleanupHook) {
  int cleaned = 0;
  {
    MpmcRing<std::unique_ptr<int>> ring(8, [&](std::unique_ptr<int>&& p) {
      EXPECT_NE(p, nullptr);
      ++cleaned;
    });
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(ring.try_push(std::make_unique<int>(i)));
    EXPECT_TRUE(ring.try_pop().has_value());
  }
  EXPECT_EQ(cleaned, 4);
}

TEST(MpmcRingTest, DrainHandsOverEverything) {
  MpmcRing<int> ring(16);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ring.try_push(i));
  std::vector<int> got;
  EXPECT_EQ(ring.drain([&](int&& v) { got.push_back(v); }), 10u);
  EXPECT_EQ(got.size(), 10u);
  EXPECT_EQ(ring.size_approx(), 0u);
}

TEST(MpmcRingStressTest, ExactDeliveryWithManyProducersAndConsumers) {
  constexpr int kProducers = 3, kConsumers = 3;
  const std::uint64_t per_producer = 200000ull * StressScale();
  const std::uint64_t total = per_producer * kProducers;
  MpmcRing<std::uint64_t> ring(64);  // small: producers meet "full" often
  auto seen = std::make_unique<std::atomic<std::uint8_t>[]>(total);
  std::atomic<std::uint64_t> consumed{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      for (std::uint64_t i = 0; i < per_producer; ++i) {
        std::uint64_t v = p * per_producer + i;
        while (!ring.try_push(v)) std::this_thread::yield();
      }
    });
  }
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&] {
      // relaxed: a progress counter; the exact check happens after join.
      while (consumed.load(std::memory_order_relaxed) < total) {
        if (std::optional<std::uint64_t> v = ring.try_pop()) {
          seen[*v].fetch_add(1, std::memory_order_relaxed);
          consumed.fetch_add(1, std::memory_order_relaxed);
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::uint64_t wrong = 0;
  for (std::uint64_t i = 0; i < total; ++i) wrong += seen[i].load() != 1;
  EXPECT_EQ(wrong, 0u);
}

}  // namespace
}  // namespace weft
