// base/asymmetric_fence_test.cc: the store-buffering litmus test (Dekker's core) with
// LightFence on one side and HeavyFence on the other: in no round do both sides miss the
// other's store. Without fences, x86 and aarch64 both allow that outcome, and this harness sees
// it: with the HeavyFence call removed, 49-289 of its 10,000 rounds (five runs) missed both
// ways on the 2-core VM of docs/scheduler.md.

#include "weft/base/asymmetric_fence.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"

namespace weft::base_internal {
namespace {

constexpr int kDelays = 1000;

// WaitFor: spins until `flag` holds `value`, yielding the CPU now and then: on a machine busy
// with other tests, the thread this waits for may not be running.
void WaitFor(const std::atomic<int>& flag, int value) {
  // acquire: the round's hand-over (see the test).
  for (int spins = 0; flag.load(std::memory_order_acquire) != value; ++spins) {
    if (spins % 1024 == 1023) std::this_thread::yield();
  }
}

TEST(AsymmetricFenceTest, NeitherSideMissesTheOther) {
  if (!HeavyFenceAvailable()) GTEST_SKIP() << "no membarrier here: callers fall back";
  const int rounds = 10000 * testing::StressScale();
  std::atomic<int> x{0}, y{0};
  std::atomic<int> start{0}, done{0};
  std::atomic<int> heavy_saw{0};
  // The rare side: its store, HeavyFence, then its load. relaxed on x and y: the fences alone
  // must order them; acquire/release on start and done hand each round over.
  std::thread heavy([&] {
    for (int i = 1; i <= rounds; ++i) {
      WaitFor(start, i);
      y.store(1, std::memory_order_relaxed);
      HeavyFence();
      heavy_saw.store(x.load(std::memory_order_relaxed), std::memory_order_relaxed);
      done.store(i, std::memory_order_release);
    }
  });
  int both_missed = 0;
  for (int i = 1; i <= rounds; ++i) {
    x.store(0, std::memory_order_relaxed);
    y.store(0, std::memory_order_relaxed);
    start.store(i, std::memory_order_release);
    // The frequent side, after a delay that sweeps across the time the other side takes to see
    // `start` (a cache line crossing cores), so that in some rounds the two overlap.
    for (int spin = i % kDelays; spin > 0; --spin) LightFence();
    x.store(1, std::memory_order_relaxed);
    LightFence();
    int light_saw = y.load(std::memory_order_relaxed);
    WaitFor(done, i);
    if (light_saw == 0 && heavy_saw.load(std::memory_order_relaxed) == 0) ++both_missed;
  }
  heavy.join();
  EXPECT_EQ(both_missed, 0) << "of " << rounds << " rounds";
}

TEST(AsymmetricFenceTest, AvailabilityIsStable) {
  bool first = HeavyFenceAvailable();
  EXPECT_EQ(HeavyFenceAvailable(), first);
  if (first) HeavyFence();  // returns
}

}  // namespace
}  // namespace weft::base_internal
