// Tests of SlabAllocator and SizeClassShard: alloc/free patterns against a reference (every live
// object keeps its contents), size classes, slabs returned to the OS past the empty-slab limit,
// cross-thread frees (each object freed exactly once and reused later), and no live objects at
// teardown. Under --config=asan freed objects are poisoned, so a use after free would be caught.

#include "weft/alloc/slab.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/deque/mpmc_ring.h"

namespace weft {
namespace {

using ::weft::testing::StressScale;

TEST(SlabAllocatorTest, ObjectsAreDistinctAlignedAndKeepTheirContents) {
  SlabAllocator a(40);  // rounds up to 48
  EXPECT_EQ(a.object_size(), 48u);
  std::mt19937 rng(3);
  std::unordered_map<void*, std::uint8_t> live;  // the reference: object -> fill byte
  for (int step = 0; step < 200000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      void* p = a.allocate();
      ASSERT_NE(p, nullptr);
      ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % 16, 0u);
      ASSERT_EQ(live.count(p), 0u) << "handed out twice";
      auto fill = static_cast<std::uint8_t>(rng());
      std::memset(p, fill, a.object_size());
      live[p] = fill;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % std::min<std::size_t>(live.size(), 16));
      auto* bytes = static_cast<std::uint8_t*>(it->first);
      for (std::size_t i = 0; i < a.object_size(); ++i) ASSERT_EQ(bytes[i], it->second);
      a.free(it->first);
      live.erase(it);
    }
  }
  EXPECT_EQ(a.stats().live_objects, live.size());
  for (auto& [p, fill] : live) a.free(p);
  EXPECT_EQ(a.stats().live_objects, 0u);
}

TEST(SlabAllocatorTest, AnObjectSizeOverTheLargestIsAnErrorNotASmallerObject) {
  EXPECT_THROW(SlabAllocator(SlabAllocator::kMaxObjectSize + 1), std::system_error);
  SlabAllocator largest(SlabAllocator::kMaxObjectSize);
  EXPECT_EQ(largest.object_size(), SlabAllocator::kMaxObjectSize);
  SlabAllocator smallest(1);
  EXPECT_EQ(smallest.object_size(), 16u);
}

TEST(SlabAllocatorTest, FreedObjectsAreReusedFirst) {
  SlabAllocator a(64);
  void* p = a.allocate();
  void* q = a.allocate();
  a.free(p);
  EXPECT_EQ(a.allocate(), p);  // LIFO reuse: the hottest object
  a.free(p);
  a.free(q);
}

TEST(SlabAllocatorTest, EmptySlabsBeyondTheLimitGoBackToTheOs) {
  SlabAllocator a(1024, {.max_empty_slabs = 1});
  std::vector<void*> objects;
  for (int i = 0; i < 63 * 5; ++i) objects.push_back(a.allocate());  // ~5 slabs of 63
  EXPECT_GE(a.stats().slabs, 5u);
  for (void* p : objects) a.free(p);
  SlabStats st = a.stats();
  EXPECT_EQ(st.live_objects, 0u);
  EXPECT_LE(st.empty_slabs, 1u);
  EXPECT_GE(st.slabs_released, 3u);
  EXPECT_LE(st.slabs, 2u);  // the current slab and one kept empty
}

TEST(SizeClassShardTest, ClassesCoverEverySize) {
  for (std::size_t size = 1; size <= SlabAllocator::kMaxObjectSize; ++size) {
    int c = SizeClassShard::class_of(size);
    ASSERT_GE(c, 0);
    ASSERT_LT(c, SizeClassShard::kClasses);
    ASSERT_GE(SizeClassShard::class_size(c), size) << size;
    if (c > 0) ASSERT_LT(SizeClassShard::class_size(c - 1), size) << size;
  }
  EXPECT_EQ(SizeClassShard::class_size(SizeClassShard::kClasses - 1), 8192u);
}

TEST(SizeClassShardTest, AllocatesBySizeAndRejectsBadSizes) {
  SizeClassShard shard;
  EXPECT_EQ(shard.allocate(0), nullptr);
  EXPECT_EQ(shard.allocate(8193), nullptr);
  std::vector<void*> objects;
  for (std::size_t size : {1, 17, 100, 129, 1000, 4097, 8192}) {
    void* p = shard.allocate(size);
    ASSERT_NE(p, nullptr);
    EXPECT_GE(SlabAllocator::owner_of(p)->object_size(), size);
    std::memset(p, 0xab, size);
    objects.push_back(p);
  }
  EXPECT_EQ(shard.stats().live_objects, objects.size());
  for (void* p : objects) shard.free(p);
  EXPECT_EQ(shard.stats().live_objects, 0u);
}

// One thread allocates and hands objects to others through a queue; they free them remotely.
// Every object must come back exactly once, and the owner must reuse the returned memory.
TEST(SlabRemoteFreeTest, CrossThreadFreesComeBackExactlyOnce) {
  const int total = 200000 * StressScale();
  constexpr int kFreers = 2;
  SlabAllocator a(64);
  MpmcRing<std::uint64_t*> handoff(1024);
  std::atomic<int> freed{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> freers;
  for (int t = 0; t < kFreers; ++t) {
    freers.emplace_back([&] {
      // acquire: after `done`, the last objects are in the queue.
      while (!done.load(std::memory_order_acquire) || handoff.size_approx() != 0) {
        if (std::optional<std::uint64_t*> p = handoff.try_pop()) {
          EXPECT_EQ(**p, reinterpret_cast<std::uint64_t>(*p));  // contents intact
          SlabAllocator::free_mt(*p);
          freed.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  std::set<void*> distinct;
  int reused = 0;
  for (int i = 0; i < total; ++i) {
    auto* p = static_cast<std::uint64_t*>(a.allocate());
    ASSERT_NE(p, nullptr);
    if (!distinct.insert(p).second) ++reused;
    *p = reinterpret_cast<std::uint64_t>(p);
    while (!handoff.try_push(p)) std::this_thread::yield();
    if (i % 1000 == 0) a.collect_mt_frees();  // a quiescent point of the owner
  }
  // release: pairs with the freers' acquire.
  done.store(true, std::memory_order_release);
  for (std::thread& t : freers) t.join();
  EXPECT_EQ(freed.load(), total);
  a.collect_mt_frees();
  EXPECT_EQ(a.stats().live_objects, 0u);  // each object came back exactly once
  EXPECT_GT(reused, 0);                   // and remotely freed memory was handed out again
}

TEST(SlabRemoteFreeTest, ShardRoutesOtherShardsObjectsThroughTheirOwner) {
  SizeClassShard mine, theirs;
  void* p = theirs.allocate(64);
  std::thread t([&] { mine.free(p); });  // a thread that owns `mine` frees `theirs`' object
  t.join();
  EXPECT_EQ(theirs.stats().live_objects, 1u);  // not back until theirs collects
  EXPECT_EQ(theirs.collect_mt_frees(), 1u);
  EXPECT_EQ(theirs.stats().live_objects, 0u);
}

#if defined(__SANITIZE_ADDRESS__)
TEST(SlabAsanDeathTest, UseAfterFreeIsReported) {
  GTEST_FLAG_SET(death_test_style, weft::testing::DeathTestStyle());
  EXPECT_DEATH(
      {
        SlabAllocator a(64);
        auto* p = static_cast<volatile char*>(a.allocate());
        a.free(const_cast<char*>(p));
        p[32] = 1;  // the object is back in the slab, poisoned
      },
      "use-after-poison");
}
#endif

}  // namespace
}  // namespace weft
