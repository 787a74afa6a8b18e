// Tests of //context:stack: size classes, protection classes and the mapping budget, reuse,
// trimming, overflow diagnostics for both protection classes, 100,000 live stacks on a stock
// kernel, and concurrent use. Each test's pool must end with no live stacks (checked at teardown).

#include "weft/context/stack.h"

#if !defined(_WIN32)
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/context/context.h"

namespace weft {
namespace {

using ::weft::testing::kAsan;
using ::weft::testing::kTsan;

// WEFT_STRESS_SCALE multiplies the sizes of the stress tests (default 1).
using ::weft::testing::StressScale;

class StackPoolTest : public ::testing::Test {
 protected:
  void TearDown() override {
    StackPoolStats s = pool_.stats();
    EXPECT_EQ(s.live_guarded + s.live_compact, 0u) << "a test leaked stacks";
  }
  StackPool pool_;
};

TEST_F(StackPoolTest, SizesRoundUpToClasses) {
  for (auto [asked, expected] : std::vector<std::pair<std::size_t, std::size_t>>{
           {1, 16 << 10},
           {16 << 10, 16 << 10},
           {(16 << 10) + 1, 32 << 10},
           {100000, 128 << 10},
           {std::size_t{64} << 20, std::size_t{64} << 20}}) {
    Result<Stack> s = pool_.allocate({.size = asked});
    ASSERT_TRUE(s.ok()) << asked;
    EXPECT_EQ(s->size(), expected) << asked;
    EXPECT_EQ(s->span().size, expected);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s->span().base) % 4096, 0u);
  }
}

TEST_F(StackPoolTest, BadSizesAreErrors) {
  EXPECT_EQ(pool_.allocate({.size = 0}).error(), std::errc::invalid_argument);
  EXPECT_EQ(pool_.allocate({.size = (std::size_t{64} << 20) + 1}).error(),
            std::errc::invalid_argument);
}

TEST_F(StackPoolTest, StackMemoryIsUsable) {
  Result<Stack> s = pool_.allocate({.size = 32 << 10});
  ASSERT_TRUE(s.ok());
  auto* bytes = static_cast<unsigned char*>(s->span().base);
  for (std::size_t i = 0; i < s->span().size; ++i) bytes[i] = static_cast<unsigned char>(i);
  for (std::size_t i = 0; i < s->span().size; i += 997) {
    EXPECT_EQ(bytes[i], static_cast<unsigned char>(i));
  }
}

TEST_F(StackPoolTest, FreedStacksAreReused) {
  void* first;
  {
    Result<Stack> s = pool_.allocate({.size = 16 << 10});
    ASSERT_TRUE(s.ok());
    first = s->span().base;
  }
  EXPECT_EQ(pool_.stats().cached_guarded, 1u);
  Result<Stack> again = pool_.allocate({.size = 16 << 10});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->span().base, first);
  EXPECT_EQ(pool_.stats().cached_guarded, 0u);
}

// Freed stacks come back in the order they were first carved (chunk by chunk, each chunk's slots
// by address), whatever order they were freed in: a LIFO list
// let the order in which fibers end shuffle the stacks more with each burst (see
// context/internal/slot_set.h). Guarded stacks in their own mappings (no guard markers) are
// exempt: they are not in chunks.
class StackOrderTest : public ::testing::TestWithParam<StackProtection> {};

TEST_P(StackOrderTest, FreedStacksComeBackInTheOrderTheyWereCarved) {
  StackPool pool;
  if (GetParam() == StackProtection::kGuarded && !pool.stats().guard_markers) {
    GTEST_SKIP() << "no guard markers here: guarded stacks are not in chunks";
  }
  const StackOptions options{.size = 16 << 10, .protection = GetParam()};
  constexpr int kStacks = 500;  // over two chunks
  std::vector<Stack> stacks;
  std::vector<std::uintptr_t> carved;
  for (int i = 0; i < kStacks; ++i) {
    stacks.push_back(std::move(pool.allocate(options)).value());
    carved.push_back(reinterpret_cast<std::uintptr_t>(stacks.back().span().base));
  }
  std::mt19937 rng(7);
  std::shuffle(stacks.begin(), stacks.end(), rng);
  // Half back one at a time, half in batches, as a cache spills them.
  for (int i = 0; i < kStacks / 2; ++i) stacks[static_cast<std::size_t>(i)].reset();
  pool.release_many(stacks.data() + kStacks / 2, kStacks / 2);
  stacks.clear();

  std::vector<std::uintptr_t> bases;
  for (int i = 0; i < kStacks / 2; ++i) {
    stacks.push_back(std::move(pool.allocate(options)).value());
    bases.push_back(reinterpret_cast<std::uintptr_t>(stacks.back().span().base));
  }
  StackCache cache(pool, 32);
  for (int i = 0; i < kStacks / 2; ++i) {
    stacks.push_back(std::move(cache.allocate(options)).value());
    bases.push_back(reinterpret_cast<std::uintptr_t>(stacks.back().span().base));
  }
  EXPECT_EQ(bases, carved);
  EXPECT_EQ(pool.stats().cached_guarded + pool.stats().cached_compact, 0u);
  stacks.clear();
}

INSTANTIATE_TEST_SUITE_P(Protections, StackOrderTest,
                         ::testing::Values(StackProtection::kGuarded, StackProtection::kCompact),
                         [](const auto& info) {
                           return std::string(info.param == StackProtection::kGuarded ? "Guarded"
                                                                                      : "Compact");
                         });

// kGuarded stacks are carved from chunks with guard markers where the kernel has them (Linux
// 6.13+); the probe must find them there, or every guarded stack silently costs two mappings.
TEST(StackPoolMarkersTest, KernelsWithGuardMarkersUseThem) {
  StackPool pool;
  StackPool without({.guard_markers = false});
  EXPECT_FALSE(without.stats().guard_markers);
#if defined(__linux__)
  utsname u{};
  ASSERT_EQ(uname(&u), 0);
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  if (major < 6 || (major == 6 && minor < 13) || ::weft::testing::Emulated()) {
    GTEST_SKIP() << "kernel " << u.release << " (or an emulator): no guard markers expected";
  }
  EXPECT_TRUE(pool.stats().guard_markers) << "kernel " << u.release;
#else
  EXPECT_FALSE(pool.stats().guard_markers);
#endif
}

// With markers, one mapping (budget 1) holds a whole chunk of guarded stacks; kAuto turns to
// compact stacks when the next chunk would pass the budget.
TEST(StackPoolMarkersTest, AChunkOfGuardedStacksCostsOneMapping) {
  StackPool pool({.guarded_mapping_budget = 1});
  if (!pool.stats().guard_markers) GTEST_SKIP() << "no guard markers here";
  const std::size_t per_chunk = (std::size_t{4} << 20) / ((16 << 10) + 4096);  // 204
  std::vector<Stack> stacks;
  for (std::size_t i = 0; i < per_chunk + 3; ++i) {
    Result<Stack> s = pool.allocate({.size = 16 << 10});
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->protection(),
              i < per_chunk ? StackProtection::kGuarded : StackProtection::kCompact)
        << i;
    stacks.push_back(std::move(s).value());
  }
  StackPoolStats st = pool.stats();
  EXPECT_EQ(st.live_guarded, per_chunk);
  EXPECT_EQ(st.live_compact, 3u);
  EXPECT_EQ(st.mappings, 2u);  // one guarded chunk, one compact chunk
  // An explicit kGuarded request ignores the kAuto budget: a second chunk.
  Result<Stack> g = pool.allocate({.size = 16 << 10, .protection = StackProtection::kGuarded});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->protection(), StackProtection::kGuarded);
  EXPECT_EQ(pool.stats().mappings, 3u);
}

// Freed past the cache budget, a guarded stack from a chunk gives its pages back and keeps its
// slot (and its guard): reused afterwards, it reads as zeros.
TEST(StackPoolMarkersTest, OverBudgetGuardedStacksGiveBackPagesAndKeepTheirSlot) {
  StackPool pool({.max_cached_bytes = 0});
  if (!pool.stats().guard_markers) GTEST_SKIP() << "no guard markers here";
  Stack a = std::move(pool.allocate({.size = 16 << 10})).value();
  ASSERT_EQ(a.protection(), StackProtection::kGuarded);
  void* base = a.span().base;
  auto* top = static_cast<volatile std::byte*>(a.span().base) + a.span().size - 64;
  *top = std::byte{42};
  a.reset();
  EXPECT_TRUE(pool.trim_pending());
  EXPECT_EQ(pool.flush_trim(), 1u);
  StackPoolStats st = pool.stats();
  EXPECT_EQ(st.cached_guarded, 1u);
  EXPECT_EQ(st.mappings, 1u);
  Stack again = std::move(pool.allocate({.size = 16 << 10})).value();
  EXPECT_EQ(again.span().base, base);
  EXPECT_EQ(static_cast<int>(*top), 0);
  again.reset();
  pool.trim();
  EXPECT_EQ(pool.stats().cached_guarded, 1u);  // trim keeps chunk slots too, pages given back
}

TEST(StackPoolBudgetTest, AutoFallsBackToCompactPastTheMappingBudget) {
  // One mapping per guarded stack (no markers): room for 5 guarded stacks.
  StackPool pool({.guarded_mapping_budget = 10, .guard_markers = false});
  std::vector<Stack> stacks;
  for (int i = 0; i < 12; ++i) {
    Result<Stack> s = pool.allocate({.size = 16 << 10});
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->protection(), i < 5 ? StackProtection::kGuarded : StackProtection::kCompact);
    stacks.push_back(std::move(s).value());
  }
  // An explicit kGuarded request ignores the kAuto budget.
  Result<Stack> g = pool.allocate({.size = 16 << 10, .protection = StackProtection::kGuarded});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->protection(), StackProtection::kGuarded);
  Result<Stack> c = pool.allocate({.size = 16 << 10, .protection = StackProtection::kCompact});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->protection(), StackProtection::kCompact);
  StackPoolStats s = pool.stats();
  EXPECT_EQ(s.live_guarded, 6u);
  EXPECT_EQ(s.live_compact, 8u);
}

TEST(StackPoolCacheTest, ZeroCacheUnmapsAndTrimReleases) {
  StackPool pool({.max_cached_bytes = 0, .guard_markers = false});
  { Result<Stack> s = pool.allocate({.size = 16 << 10}); }
  // Past the budget the unmap is deferred (batched, when idle): pending until flush_trim.
  EXPECT_TRUE(pool.trim_pending());
  EXPECT_EQ(pool.flush_trim(), 1u);
  EXPECT_EQ(pool.stats().cached_guarded, 0u);
  EXPECT_EQ(pool.stats().mappings, 0u);

  StackPool caching({.guard_markers = false});
  {
    Result<Stack> a = caching.allocate({.size = 16 << 10});
    Result<Stack> b = caching.allocate({.size = 16 << 10});
  }
  EXPECT_EQ(caching.stats().cached_guarded, 2u);
  caching.trim();
  EXPECT_EQ(caching.stats().cached_guarded, 0u);
  EXPECT_EQ(caching.stats().mappings, 0u);
}

TEST_F(StackPoolTest, CompactRedZoneCheck) {
  Result<Stack> s = pool_.allocate({.size = 16 << 10, .protection = StackProtection::kCompact});
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(StackPool::check_red_zone(*s));
}

#if defined(__linux__)  // populating ahead is a Linux call (elsewhere populate_ahead does nothing)
// Resident: whether the page holding p has memory (mincore), without touching it.
bool Resident(const void* p) {
  auto page = reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t{4095};
  unsigned char v = 0;
  return mincore(reinterpret_cast<void*>(page), 4096, &v) == 0 && (v & 1) != 0;
}

// KernelPopulates: whether MADV_POPULATE_WRITE works here (Linux 5.14+, not under emulation).
bool KernelPopulates() {
#ifdef MADV_POPULATE_WRITE
  if (::weft::testing::Emulated()) return false;
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  bool ok = madvise(p, 4096, MADV_POPULATE_WRITE) == 0 && Resident(p);
  munmap(p, 4096);
  return ok;
#else
  return false;
#endif
}

class StackPopulateTest : public ::testing::TestWithParam<StackProtection> {};

TEST_P(StackPopulateTest, NewStacksGetTheirTopPagesAheadOfTheFirstWrite) {
  if (!KernelPopulates()) GTEST_SKIP() << "no MADV_POPULATE_WRITE here";
  for (std::size_t ahead : {std::size_t{0}, std::size_t{16}}) {
    SCOPED_TRACE(ahead);
    StackPool pool({.populate_ahead = ahead});
    std::vector<Stack> stacks;
    for (int i = 0; i < 40; ++i) {  // past two batches of 16 from one chunk
      Result<Stack> s = pool.allocate({.size = 16 << 10, .protection = GetParam()});
      ASSERT_TRUE(s.ok());
      ASSERT_EQ(s->protection(), GetParam());
      StackSpan span = s->span();
      auto* top = static_cast<char*>(span.base) + span.size - 1;
      // Populated ahead: the top page has memory before anything wrote to it; without, the
      // first write below faults it in.
      EXPECT_EQ(Resident(top), ahead != 0) << "stack " << i;
      *top = 1;
      static_cast<char*>(span.base)[0] = 1;  // the rest of the stack works as before
      if (GetParam() == StackProtection::kCompact) {
        EXPECT_TRUE(StackPool::check_red_zone(*s));
      }
      stacks.push_back(std::move(s).value());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Protections, StackPopulateTest,
                         ::testing::Values(StackProtection::kGuarded, StackProtection::kCompact),
                         [](const auto& info) {
                           return info.param == StackProtection::kGuarded ? "Guarded" : "Compact";
                         });
#endif  // __linux__

// Contexts that park on their stack and are later finished, for the many-stacks test.
void ParkThenExit(Transfer t) {
  t = jump_context(t.from);
  exit_context(t.from, nullptr, [](Transfer in) {
    discard_context(in.from);
    return in;
  });
}

class ManyStacksTest : public ::testing::TestWithParam<bool> {};

TEST_P(ManyStacksTest, HundredThousandLiveStacksOnAStockKernel) {
  // 100,000 fibers parked at once, with the default 65,530 mappings. With guard markers all are
  // guarded, a few hundred chunks; without, past vm.max_map_count / 2 guarded stacks kAuto
  // switches to compact ones. Under TSan (whose per-fiber state is large) the stacks are only
  // touched, not given contexts.
  const int n = 100000 * StressScale();
  const bool with_contexts = !kTsan;
  StackPool pool({.guard_markers = GetParam()});
  const bool markers = pool.stats().guard_markers;
  std::vector<Stack> stacks;
  std::vector<Context> parked;
  stacks.reserve(n);
  parked.reserve(n);
  for (int i = 0; i < n; ++i) {
    Result<Stack> s = pool.allocate({.size = 16 << 10});
    ASSERT_TRUE(s.ok()) << "stack " << i << ": " << s.error_code().message();
    if (with_contexts) {
      Result<Context> c = make_context(s->span(), &ParkThenExit);
      ASSERT_TRUE(c.ok());
      parked.push_back(jump_context(*c).from);  // runs until it parks
    } else {
      static_cast<volatile char*>(s->span().base)[s->span().size - 1] = 1;
    }
    stacks.push_back(std::move(s).value());
  }
  StackPoolStats st = pool.stats();
  EXPECT_EQ(st.live_guarded + st.live_compact, static_cast<std::size_t>(n));
  if (markers) {
    EXPECT_EQ(st.live_compact, 0u);
    // A few hundred guarded chunks (204 stacks each) per 100,000 stacks.
    EXPECT_LT(st.mappings, static_cast<std::size_t>(n) / 100);
  } else {
    EXPECT_LE(st.live_guarded * 2, st.guarded_mapping_budget);
    EXPECT_GT(st.live_compact, 0u);
    EXPECT_LT(st.mappings, 40000u);  // the guarded ones plus a few hundred compact chunks
  }
  for (Context c : parked) jump_context(c);  // each finishes
  for (Stack& s : stacks) EXPECT_TRUE(StackPool::check_red_zone(s));
  stacks.clear();
  st = pool.stats();
  EXPECT_EQ(st.live_guarded + st.live_compact, 0u);
}

// MarkersName: the suffix of a test run with (true) or without guard markers.
std::string MarkersName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "Markers" : "NoMarkers";
}

INSTANTIATE_TEST_SUITE_P(GuardMarkers, ManyStacksTest, ::testing::Bool(), MarkersName);

#if !defined(_WIN32)
// Out of address space: allocate reports not_enough_memory and the pool stays consistent (it
// once cached a null "stack" on this path and counted one live stack too few). Runs in a child
// process under a small RLIMIT_AS; sanitizers reserve terabytes of shadow, so not under them.
TEST(StackPoolDeathTest, OutOfAddressSpaceIsReportedAndThePoolKeepsWorking) {
  if (kTsan || kAsan) GTEST_SKIP() << "RLIMIT_AS and sanitizer shadow memory do not mix";
  // qemu-user maps the guest's memory inside its own reservation: the limit does not reach it.
  if (::weft::testing::Emulated()) GTEST_SKIP() << "RLIMIT_AS does not apply under emulation";
  GTEST_FLAG_SET(death_test_style, weft::testing::DeathTestStyle());
  EXPECT_EXIT(
      {
        StackPool pool;
        Result<Stack> small = pool.allocate({.size = 16 << 10});  // maps what it needs first
        if (!small.ok()) std::_Exit(10);
        rlimit limit{};
        if (!::weft::testing::LimitAddressSpace(std::size_t{16} << 20, &limit)) std::_Exit(11);
        for (auto p :
             {StackProtection::kAuto, StackProtection::kGuarded, StackProtection::kCompact}) {
          Result<Stack> big = pool.allocate({.size = std::size_t{64} << 20, .protection = p});
          if (big.ok() || big.error() != std::errc::not_enough_memory) std::_Exit(12);
        }
        setrlimit(RLIMIT_AS, &limit);
        StackPoolStats st = pool.stats();
        if (st.live_guarded + st.live_compact != 1) std::_Exit(13);
        Result<Stack> again = pool.allocate({.size = 16 << 10});
        if (!again.ok() || again->span().base == nullptr) std::_Exit(14);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}
#endif

TEST(StackPoolConcurrencyTest, ThreadsAllocateAndReleaseConcurrently) {
  StackPool pool({.guarded_mapping_budget = 64});  // mix both protection classes
  const int rounds = 2000 * StressScale();
  auto work = [&] {
    std::vector<Stack> held;
    for (int i = 0; i < rounds; ++i) {
      Result<Stack> s = pool.allocate({.size = std::size_t{16} << (i % 3)});
      ASSERT_TRUE(s.ok());
      static_cast<volatile char*>(s->span().base)[s->span().size - 1] = 1;
      held.push_back(std::move(s).value());
      if (held.size() > 8) held.erase(held.begin());
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  StackPoolStats st = pool.stats();
  EXPECT_EQ(st.live_guarded + st.live_compact, 0u);
}

// A scheduler's fibers often start on one worker and end on another: one cache only allocates,
// the other only recycles. Stacks must flow between them through the pool in batches and be
// reused, not mapped anew; the pool's counts must stay exact.
TEST(StackCacheTest, StacksFlowBetweenCachesInBatches) {
  StackPool pool({.guarded_mapping_budget = 0 + 2 * 1000});
  StackCache producer(pool, /*per_class=*/8);
  StackCache consumer(pool, /*per_class=*/8);
  std::size_t steady_mappings = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<Stack> live;
    for (int i = 0; i < 64; ++i)
      live.push_back(std::move(producer.allocate({.size = 16 << 10})).value());
    // Live in the pool's terms: the fibers' 64, plus what the caches hold (refilled in batches).
    EXPECT_EQ(pool.stats().live_guarded + pool.stats().live_compact,
              64u + producer.cached() + consumer.cached());
    for (Stack& st : live) consumer.recycle(std::move(st));
    StackPoolStats st = pool.stats();
    EXPECT_EQ(st.live_guarded + st.live_compact, consumer.cached() + producer.cached());
    EXPECT_LE(consumer.cached(), 8u);
    // Round 0 maps the 64; round 1 also what the consumer's cache keeps; then a steady state.
    if (round == 1) steady_mappings = st.mappings;
    if (round == 2) {
      EXPECT_EQ(st.mappings, steady_mappings);  // reused, none mapped
    }
  }
  // The pool's allocate_cached / release_many directly.
  Stack batch[4];
  EXPECT_EQ(pool.allocate_cached({.size = 16 << 10}, batch, 4), 4u);
  for (Stack& b : batch) EXPECT_TRUE(b);
  pool.release_many(batch, 4);
  for (Stack& b : batch) EXPECT_FALSE(b);
  EXPECT_EQ(pool.allocate_cached({.size = 0}, batch, 4), 0u);
}

// Past the cache budget, freed compact stacks wait for a batched give-back: reused first while
// they wait (their pages are still there), given back (zeroed) by flush_trim.
TEST(StackPoolCacheTest, OverBudgetStacksAreReusedThenGivenBackInABatch) {
  StackPool pool({.max_cached_bytes = 0});
  StackOptions compact{.size = 16 << 10, .protection = StackProtection::kCompact};
  Stack a = std::move(pool.allocate(compact)).value();
  void* base = a.span().base;
  std::byte* top = static_cast<std::byte*>(a.span().base) + a.span().size - 64;
  *top = std::byte{42};
  a.reset();
  EXPECT_TRUE(pool.trim_pending());
  Stack again = std::move(pool.allocate(compact)).value();
  EXPECT_EQ(again.span().base, base);  // reused before its pages went back
  EXPECT_EQ(*top, std::byte{42});
  EXPECT_FALSE(pool.trim_pending());
  again.reset();
  EXPECT_EQ(pool.flush_trim(), 1u);
  EXPECT_FALSE(pool.trim_pending());
  EXPECT_EQ(*top, std::byte{0});  // given back: the page reads as zeros again
  StackPoolStats st = pool.stats();
  EXPECT_EQ(st.live_compact, 0u);
  EXPECT_EQ(st.cached_compact, 1u);
}

TEST(StackCacheTest, RecycledStacksComeBackWithoutThePool) {
  StackPool pool({.guarded_mapping_budget = 4});  // two guarded, then compact
  {
    StackCache cache(pool, /*per_class=*/2);
    Result<Stack> a = cache.allocate({.size = 16 << 10});
    ASSERT_TRUE(a.ok());
    void* base = a->span().base;
    cache.recycle(std::move(a).value());
    EXPECT_EQ(cache.cached(), 1u);
    Result<Stack> again = cache.allocate({.size = 16 << 10});
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->span().base, base);  // the same stack, no trip to the pool
    EXPECT_EQ(cache.cached(), 0u);

    // A compact request is not served a guarded stack, and vice versa.
    cache.recycle(std::move(again).value());
    Result<Stack> compact =
        cache.allocate({.size = 16 << 10, .protection = StackProtection::kCompact});
    ASSERT_TRUE(compact.ok());
    EXPECT_EQ(compact->protection(), StackProtection::kCompact);
    EXPECT_EQ(cache.cached(), 1u);

    // Past per_class (per class and protection), stacks go back to the pool.
    std::vector<Stack> many;
    for (int i = 0; i < 4; ++i) {
      many.push_back(
          std::move(cache.allocate({.size = 32 << 10, .protection = StackProtection::kCompact}))
              .value());
    }
    for (Stack& s : many) cache.recycle(std::move(s));
    EXPECT_EQ(cache.cached(), 1u + 2u);
    EXPECT_EQ(cache.allocate({.size = 0}).error(), std::errc::invalid_argument);
  }
  StackPoolStats st = pool.stats();  // the cache's destruction returned everything
  EXPECT_EQ(st.live_guarded + st.live_compact, 0u);
}

// ---- Overflow diagnostics --------------------------------------------------------------------

[[gnu::noinline]] int Recurse(int depth) {
  volatile char frame[512];
  frame[0] = static_cast<char>(depth);
  if (depth == 0) return frame[0];
  return Recurse(depth - 1) + frame[0];
}

class StackOverflowDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, weft::testing::DeathTestStyle()); }
};

// Both kinds of guarded stack: from a chunk with guard markers (where the kernel has them), and
// one mapping per stack. For the first, after a trip through the pool's page give-back too.
class GuardOverflowDeathTest : public StackOverflowDeathTest,
                               public ::testing::WithParamInterface<bool> {};

TEST_P(GuardOverflowDeathTest, GuardPageOverflowNamesTheFiberStack) {
  EXPECT_EXIT(
      {
        // Leaked on purpose: the child dies with the stack live.
        auto* pool = new StackPool({.max_cached_bytes = 0, .guard_markers = GetParam()});
        {
          Result<Stack> first = pool->allocate({.size = 16 << 10});
          static_cast<volatile char*>(first->span().base)[100] = 1;
        }
        pool->flush_trim();
        Result<Stack> s =
            pool->allocate({.size = 16 << 10, .protection = StackProtection::kGuarded});
        Result<Context> c = make_context(s->span(), [](Transfer) { Recurse(1 << 20); });
        set_context_name(*c, "runaway-parser");
        jump_context(*c);
      },
      ::weft::testing::DiedOfStackOverflow,
      // \\w, not [0-9a-f]: GoogleTest's simple regex on Windows has no bracket expressions.
      "weft: fiber stack overflow: fault at 0x\\w+ in the guard page of fiber stack "
      "\\[0x\\w+, 0x\\w+\\) \\(16384 bytes usable\\), context \"runaway-parser\"");
}

INSTANTIATE_TEST_SUITE_P(GuardMarkers, GuardOverflowDeathTest, ::testing::Bool(), MarkersName);

TEST_F(StackOverflowDeathTest, CompactRedZoneWriteIsReportedOnRelease) {
  EXPECT_DEATH(
      {
        Result<Stack> s = StackPool::default_pool().allocate(
            {.size = 16 << 10, .protection = StackProtection::kCompact});
        // What an overflow does: write just below the usable span.
        static_cast<volatile char*>(s->span().base)[-8] = 1;
        s->reset();
      },
      "weft: fiber stack overflow detected: the red zone below compact fiber stack");
}

TEST_F(StackOverflowDeathTest, UnrelatedSegfaultsAreNotBlamedOnFibers) {
  // Whoever handled SIGSEGV before (the default action, or a sanitizer) still gets these.
  EXPECT_DEATH(
      {
        install_stack_overflow_handler();
        *static_cast<volatile int*>(nullptr) = 1;
      },
      ::testing::Not(::testing::HasSubstr("fiber stack overflow")));
}

}  // namespace
}  // namespace weft
