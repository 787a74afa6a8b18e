// Tests of jump_context_inline: every pairing with the out-of-line switches (each resumes the
// other's frame, on-top functions and exits included), values the compiler keeps live across it
// while the other side clobbers every register, a red zone kept, migration between threads,
// exceptions, the FP control words it does not carry, and misuse. Where the inline switch is not
// built (ucontext, aarch64, Windows) it is jump_context, and these tests check that much.

#include <cfenv>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/context/context.h"
#include "weft/context/internal/raw.h"
#include "weft/context/stack.h"
#include "weft/context/testing/test_fiber.h"

namespace weft {
namespace {

using testing::Finish;
using testing::TestFiber;
using testing::ThrowFrom;

// Which switch each side uses: bit 0 for the test's own side, bit 1 for the fiber's.
int g_pairing = 0;

Transfer Switch(bool use_inline, Context to, void* data) {
  return use_inline ? jump_context_inline(to, data) : jump_context(to, data);
}

class Pairing : public ::testing::TestWithParam<int> {};

TEST_P(Pairing, ValuesGoBothWaysAndTheLastSwitchExits) {
  g_pairing = GetParam();
  TestFiber fiber([](Transfer t) {
    const bool fiber_inline = (g_pairing & 2) != 0;
    while (t.data != nullptr) {
      auto* value = static_cast<std::int64_t*>(t.data);
      *value *= 3;
      t = Switch(fiber_inline, t.from, value);
    }
    Finish(t.from, reinterpret_cast<void*>(std::uintptr_t{0xdead}));  // an exit to either frame
  });
  const bool main_inline = (g_pairing & 1) != 0;
  Context next = fiber.context;  // fresh: a full frame, whichever switch enters it
  for (std::int64_t i = 1; i <= 1000; ++i) {
    std::int64_t v = i;
    Transfer t = Switch(main_inline, next, &v);
    ASSERT_EQ(t.data, &v);
    ASSERT_EQ(v, 3 * i);
    next = t.from;
  }
  Transfer last = Switch(main_inline, next, nullptr);
  EXPECT_EQ(last.data, reinterpret_cast<void*>(std::uintptr_t{0xdead}));
  EXPECT_EQ(last.from, nullptr);  // what Finish's on-top function returned
}

// The fiber's side of an on-top switch into the test's context; the test's side of the on-top
// switch's result.
struct OnTopSeen {
  Context from = nullptr;
  Context running = nullptr;
  void* data = nullptr;
  bool aligned_on_fiber = false;  // the test's on-top function, on the fiber's stack
  bool aligned_on_test = false;   // the fiber's, on the test's stack
};
OnTopSeen g_seen;

[[gnu::noinline]] bool FrameAligned() {
  return reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)) % 16 == 0;
}

TEST_P(Pairing, OnTopRunsOnEitherKindOfFrame) {
  g_pairing = GetParam();
  g_seen = {};
  TestFiber fiber([](Transfer t) {
    const bool fiber_inline = (g_pairing & 2) != 0;
    t = Switch(fiber_inline, t.from, nullptr);  // suspended by the fiber's kind of switch
    // The test's context was suspended by its kind of switch; the function runs on its stack.
    t = jump_context_ontop(t.from, reinterpret_cast<void*>(std::uintptr_t{7}), [](Transfer in) {
      g_seen.from = in.from;
      g_seen.data = in.data;
      g_seen.running = current_context();
      g_seen.aligned_on_test = FrameAligned();
      return Transfer{in.from, reinterpret_cast<void*>(std::uintptr_t{42})};
    });
    Finish(t.from);
  });
  const bool main_inline = (g_pairing & 1) != 0;
  Context main_context = current_context();
  Transfer t = Switch(main_inline, fiber.context, nullptr);
  Context fiber_context = t.from;
  // An on-top switch into the fiber's frame, of either kind; the fiber then switches back to
  // this context's frame, of either kind, through an on-top switch of its own.
  t = jump_context_ontop(fiber_context, nullptr, [](Transfer in) {
    g_seen.aligned_on_fiber = FrameAligned();
    return in;
  });
  EXPECT_TRUE(g_seen.aligned_on_fiber);
  EXPECT_EQ(t.data, reinterpret_cast<void*>(std::uintptr_t{42}));
  EXPECT_EQ(g_seen.from, fiber_context);
  EXPECT_EQ(g_seen.data, reinterpret_cast<void*>(std::uintptr_t{7}));
  EXPECT_EQ(g_seen.running, main_context);
  EXPECT_TRUE(g_seen.aligned_on_test);
  t = Switch(main_inline, t.from, nullptr);  // the fiber exits
}

TEST_P(Pairing, JumpContextLastResumesEitherKind) {
  g_pairing = GetParam();
  static int step = 0;
  step = 0;
  TestFiber fiber([](Transfer t) {
    const bool fiber_inline = (g_pairing & 2) != 0;
    for (int i = 0; i < 3; ++i) {
      ++step;
      t = Switch(fiber_inline, t.from, nullptr);
    }
    Finish(t.from);
  });
  const bool main_inline = (g_pairing & 1) != 0;
  static Context c;
  c = Switch(main_inline, fiber.context, nullptr).from;
  EXPECT_EQ(step, 1);
  // A tail-called switch into the fiber's frame (of its kind), leaving a full frame here, which
  // the fiber's switch resumes. The handle of a context stays the same across its suspensions.
  [] { jump_context_last(c); }();
  EXPECT_EQ(step, 2);
  Switch(main_inline, c, nullptr);
  EXPECT_EQ(step, 3);
  Switch(main_inline, c, nullptr);  // the fiber exits
}

// An on-top function run onto either kind of frame sees the target's frame pointer, not the
// suspended caller's: a frame-pointer walk from it (a profiler's, a crash handler's) stays off
// the stack of a context that may already run elsewhere or be freed (exit_context).
StackSpan g_fiber_span;
bool g_chain_enters_fiber = false;

[[gnu::noinline]] void WalkFramePointers() {
  auto* lo = static_cast<char*>(g_fiber_span.base);
  char* hi = lo + g_fiber_span.size;
  auto* fp = static_cast<char*>(__builtin_frame_address(0));
  g_chain_enters_fiber = false;
  for (int i = 0; i < 8 && fp != nullptr; ++i) {
    if (fp >= lo && fp < hi) {
      g_chain_enters_fiber = true;
      return;
    }
    fp = *reinterpret_cast<char**>(fp);
  }
}

TEST_P(Pairing, AnOnTopFunctionSeesTheTargetsFramePointer) {
  g_pairing = GetParam();
  TestFiber fiber([](Transfer t) {
    t = jump_context_ontop(t.from, nullptr, [](Transfer in) {
      WalkFramePointers();  // on the test's stack, the fiber suspended
      return in;
    });
    Finish(t.from);
  });
  g_fiber_span = fiber.stack.span();
  Transfer t = Switch((g_pairing & 1) != 0, fiber.context, nullptr);
  EXPECT_FALSE(g_chain_enters_fiber);
  Switch((g_pairing & 1) != 0, t.from, nullptr);  // the fiber exits
}

std::string PairingName(const ::testing::TestParamInfo<int>& param) {
  static const char* kNames[] = {"BothCall", "TestInline", "FiberInline", "BothInline"};
  return kNames[param.param];
}

INSTANTIATE_TEST_SUITE_P(EveryPairing, Pairing, ::testing::Values(0, 1, 2, 3), PairingName);

// Values the compiler keeps live across the inline switch (in registers or spilled: its choice)
// while the other side clobbers every register it may: each comes back intact. Many values, of
// every kind, so that some are in registers the switch declares clobbered.
TEST(InlineSwitch, LiveValuesSurviveWhileTheOtherSideClobbersEverything) {
  TestFiber fiber([](Transfer t) {
    for (;;) {
#if defined(__x86_64__)
      asm volatile(
          "movq $-1, %%rax\n movq $-1, %%rbx\n movq $-1, %%rcx\n movq $-1, %%rdx\n"
          "movq $-1, %%rsi\n movq $-1, %%rdi\n movq $-1, %%r8\n movq $-1, %%r9\n"
          "movq $-1, %%r10\n movq $-1, %%r11\n movq $-1, %%r12\n movq $-1, %%r13\n"
          "movq $-1, %%r14\n movq $-1, %%r15\n"
          "pcmpeqd %%xmm0, %%xmm0\n pcmpeqd %%xmm1, %%xmm1\n pcmpeqd %%xmm2, %%xmm2\n"
          "pcmpeqd %%xmm3, %%xmm3\n pcmpeqd %%xmm4, %%xmm4\n pcmpeqd %%xmm5, %%xmm5\n"
          "pcmpeqd %%xmm6, %%xmm6\n pcmpeqd %%xmm7, %%xmm7\n pcmpeqd %%xmm8, %%xmm8\n"
          "pcmpeqd %%xmm9, %%xmm9\n pcmpeqd %%xmm10, %%xmm10\n pcmpeqd %%xmm11, %%xmm11\n"
          "pcmpeqd %%xmm12, %%xmm12\n pcmpeqd %%xmm13, %%xmm13\n pcmpeqd %%xmm14, %%xmm14\n"
          "pcmpeqd %%xmm15, %%xmm15\n" ::
              : "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
                "r14", "r15", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory",
                "cc");
#endif
      t = jump_context_inline(t.from);
    }
  });
  Context c = fiber.context;
  const int rounds = 200 * testing::StressScale();
  std::uint64_t a = 1, b = 2, d = 3, e = 5, f = 8, g = 13, h = 21, k = 34, m = 55, n = 89;
  double x = 0.5, y = 1.25, z = -3.0, w = 1e-3;
  long double q = 1.0L / 3;
  for (int i = 0; i < rounds; ++i) {
    // Each value depends on the previous round's, so none can be recomputed after the switch.
    a += b, b += d, d ^= e, e += f, f *= 3, g += h, h ^= k, k += m, m += n, n ^= a;
    x = x * 1.5 + y, y -= z, z = z * 0.5 + w, w += x * 1e-9;
    q = q * 2 + 1;
    const std::uint64_t sum = a + b + d + e + f + g + h + k + m + n;
    const double fsum = x + y + z + w;
    const long double qq = q;
    c = jump_context_inline(c).from;
    std::uint64_t a2 = a, b2 = b, d2 = d, e2 = e, f2 = f, g2 = g, h2 = h, k2 = k, m2 = m, n2 = n;
    ASSERT_EQ(a2 + b2 + d2 + e2 + f2 + g2 + h2 + k2 + m2 + n2, sum) << "round " << i;
    ASSERT_EQ(x + y + z + w, fsum) << "round " << i;
    ASSERT_EQ(q, qq) << "round " << i;
  }
  discard_context(c);
}

// A function with an over-aligned local and a variable-length allocation addresses its locals
// through a base register (clang: rbx) or a realigned frame (GCC): both survive the switch.
struct alignas(64) Aligned {
  volatile std::uint64_t v[8];
};

[[gnu::noinline]] std::uint64_t AlignedAndAlloca(int n, Context* c) {
  Aligned a;
  for (int i = 0; i < 8; ++i) a.v[i] = 100 + i;
  auto* dynamic = static_cast<volatile std::uint64_t*>(__builtin_alloca(n * sizeof(std::uint64_t)));
  for (int i = 0; i < n; ++i) dynamic[i] = 7 * i;
  *c = jump_context_inline(*c).from;
  std::uint64_t sum = 0;
  for (int i = 0; i < 8; ++i) sum += a.v[i];
  for (int i = 0; i < n; ++i) sum += dynamic[i];
  return sum;
}

TEST(InlineSwitch, OverAlignedLocalsAndAllocaSurvive) {
  TestFiber fiber([](Transfer t) {
    for (;;) t = jump_context_inline(t.from);
  });
  Context c = fiber.context;
  for (int n = 1; n < 40; n += 3) {
    std::uint64_t expect = 0;
    for (int i = 0; i < 8; ++i) expect += 100 + i;
    for (int i = 0; i < n; ++i) expect += 7 * i;
    EXPECT_EQ(AlignedAndAlloca(n, &c), expect) << n;
  }
  discard_context(c);
}

#if defined(WEFT_CONTEXT_INLINE_X86_64_SYSV)
// The raw inline switch in a function that calls nothing: GCC may keep its locals in the 128
// bytes below the stack pointer (the SysV red zone) without moving the stack pointer, so the
// switch must leave them alone; and an on-top function run on that context must too.
void* g_raw_main = nullptr;
void* g_raw_fiber = nullptr;
volatile std::uint64_t g_leaf_seen[4];

[[gnu::noinline]] bool LeafSwitch(std::uint64_t seed) {
  volatile std::uint64_t local[4] = {seed, seed + 1, seed + 2, seed + 3};  // in the red zone
  context_internal::InlineJump(g_raw_fiber, &g_raw_main, nullptr, nullptr);
  return local[0] == seed && local[1] == seed + 1 && local[2] == seed + 2 && local[3] == seed + 3;
}

WeftRawTransfer Scribble(void* tag, void* data, void*) noexcept {
  volatile char junk[512];
  for (std::size_t i = 0; i < sizeof junk; ++i) junk[i] = static_cast<char>(0xa5);
  return WeftRawTransfer{tag, data};
}

void RawFiber(void*, void*, void*) {
  for (int i = 0;; ++i) {
    // Alternately plain and on top (the function runs on the leaf's stack, below its frame).
    if (i % 2 == 0) {
      weft_context_jump(g_raw_main, &g_raw_fiber, nullptr, nullptr);
    } else {
      weft_context_ontop(g_raw_main, &g_raw_fiber, nullptr, nullptr, &Scribble, nullptr);
    }
  }
}

TEST(InlineSwitch, TheRedZoneOfAFunctionThatCallsNothingIsKept) {
  Result<Stack> s = StackPool::default_pool().allocate({.size = 64 << 10});
  ASSERT_TRUE(s.ok());
  StackSpan span = s->span();
  g_raw_fiber = weft_context_make(span.base, static_cast<char*>(span.base) + span.size - 64,
                                  &RawFiber, nullptr);
  for (std::uint64_t i = 0; i < 100; ++i) EXPECT_TRUE(LeafSwitch(i * 1000)) << i;
}
#endif

TEST(InlineSwitch, MigratesBetweenThreads) {
  testing::ExpectMigratesBetweenThreads<&jump_context_inline>();
}

TEST(InlineSwitch, ExceptionsUnwindOnBothSidesAfterIt) {
  static std::string caught;
  TestFiber fiber([](Transfer t) {
    t = jump_context_inline(t.from);
    try {
      ThrowFrom(40, "deep");
    } catch (const std::runtime_error& e) {
      caught = std::string("fiber ") + e.what();
    }
    Finish(t.from);
  });
  Transfer t = jump_context_inline(fiber.context);
  try {
    ThrowFrom(3, "deep");
  } catch (const std::runtime_error& e) {
    caught = std::string("main ") + e.what();
  }
  EXPECT_EQ(caught, "main deep");
  jump_context_inline(t.from);
  EXPECT_EQ(caught, "fiber deep");
}

#if defined(WEFT_CONTEXT_INLINE_X86_64_SYSV)
// The contract: the inline switch carries no FP control words (the resumed side runs with the
// switching thread's, as after a call); a full frame it resumes brings its own back.
TEST(InlineSwitch, FpControlWordsFollowTheSwitchingSideUnlessTheFrameIsFull) {
  static int seen_by_fiber = -1;
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  TestFiber fiber([](Transfer t) {
    std::fesetround(FE_UPWARD);
    t = jump_context_inline(t.from);  // the test runs on with FE_UPWARD
    seen_by_fiber = std::fegetround();
    std::fesetround(FE_DOWNWARD);
    t = jump_context(t.from);  // a full frame: its FE_DOWNWARD comes back with it
    seen_by_fiber = std::fegetround();
    std::fesetround(FE_TONEAREST);
    Finish(t.from);
  });
  Transfer t = jump_context_inline(fiber.context);
  const int after_inline = std::fegetround();
  std::fesetround(FE_TOWARDZERO);
  t = jump_context_inline(t.from);  // the fiber resumes with FE_TOWARDZERO, sets FE_DOWNWARD
  const int after_full = std::fegetround();
  std::fesetround(FE_TONEAREST);
  EXPECT_EQ(after_inline, FE_UPWARD);
  EXPECT_EQ(seen_by_fiber, FE_TOWARDZERO);
  EXPECT_EQ(after_full, FE_DOWNWARD);
  // The fiber's full frame: resumed by the inline switch, it gets its FE_DOWNWARD back.
  std::fesetround(FE_UPWARD);
  jump_context_inline(t.from);
  std::fesetround(FE_TONEAREST);
  EXPECT_EQ(seen_by_fiber, FE_DOWNWARD);
}
#endif

class InlineSwitchDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, weft::testing::DeathTestStyle()); }
};

TEST_F(InlineSwitchDeathTest, ResumingARunningContextAborts) {
  EXPECT_DEATH(jump_context_inline(current_context()),
               "weft: jump to a context that is not suspended");
  EXPECT_DEATH(
      {
        TestFiber fiber([](Transfer) { jump_context_inline(current_context()); });
        jump_context_inline(fiber.context);
      },
      "weft: jump to a context that is not suspended");
}

}  // namespace
}  // namespace weft
