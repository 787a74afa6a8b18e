// Tests of the context switch alone: switch order, values both ways, on-top functions, stack
// alignment at entry, FP control state and callee-saved registers per context, deep recursion,
// exceptions, migration between threads, (Windows) the TEB's stack bounds, and misuse that must
// fail loudly. Runs against whichever backend the build selected.

#include "weft/context/context.h"

#ifdef _WIN32
#include <windows.h>
#endif

#include <algorithm>
#include <cfenv>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/context/stack.h"
#include "weft/context/testing/test_fiber.h"

namespace weft {
namespace {

using testing::Finish;
using testing::TestFiber;
using testing::ThrowFrom;

std::vector<int>* g_log;

TEST(ContextTest, SwitchOrder) {
  std::vector<int> log;
  g_log = &log;
  TestFiber fiber([](Transfer t) {
    g_log->push_back(1);
    t = jump_context(t.from);
    g_log->push_back(3);
    Finish(t.from);
  });
  Transfer back = jump_context(fiber.context);
  log.push_back(2);
  back = jump_context(back.from);
  log.push_back(4);
  EXPECT_EQ(back.from, nullptr);  // set by Finish's on-top function
  EXPECT_EQ(log, (std::vector<int>{1, 2, 3, 4}));
}

TEST(ContextTest, ValuesBothWays) {
  // The fiber doubles every integer it is sent until it gets a null.
  TestFiber fiber([](Transfer t) {
    while (t.data != nullptr) {
      auto* value = static_cast<std::int64_t*>(t.data);
      *value *= 2;
      t = jump_context(t.from, value);
    }
    Finish(t.from, reinterpret_cast<void*>(std::uintptr_t{0xdead}));
  });
  Context next = fiber.context;
  for (std::int64_t i = 1; i <= 100; ++i) {
    std::int64_t v = i;
    Transfer t = jump_context(next, &v);
    EXPECT_EQ(t.data, &v);
    EXPECT_EQ(v, 2 * i);
    next = t.from;
  }
  Transfer last = jump_context(next, nullptr);
  EXPECT_EQ(last.data, reinterpret_cast<void*>(std::uintptr_t{0xdead}));
}

struct OnTopSeen {
  Context from = nullptr;
  Context running = nullptr;
  void* data = nullptr;
};
OnTopSeen g_ontop;

TEST(ContextTest, OnTopRunsOnTargetBeforeItResumes) {
  g_ontop = {};
  TestFiber fiber([](Transfer t) {
    // Resumed through jump_context_ontop: by now the on-top function has run, and what it
    // returned is what this jump returns.
    Transfer r = jump_context(t.from, reinterpret_cast<void*>(std::uintptr_t{1}));
    EXPECT_EQ(r.data, reinterpret_cast<void*>(std::uintptr_t{42}));
    EXPECT_EQ(g_ontop.running, current_context());
    Finish(r.from);
  });
  Context main_context = current_context();
  Transfer t = jump_context(fiber.context);
  Context fiber_context = t.from;
  jump_context_ontop(fiber_context, reinterpret_cast<void*>(std::uintptr_t{7}), [](Transfer in) {
    g_ontop.from = in.from;
    g_ontop.data = in.data;
    g_ontop.running = current_context();
    return Transfer{in.from, reinterpret_cast<void*>(std::uintptr_t{42})};
  });
  EXPECT_EQ(g_ontop.from, main_context);
  EXPECT_EQ(g_ontop.data, reinterpret_cast<void*>(std::uintptr_t{7}));
  EXPECT_EQ(g_ontop.running, fiber_context);
}

// Hands control to `to` as the last thing it does; the fiber below resumes in its caller.
[[gnu::noinline]] void PassTo(Context to, std::vector<int>* log, int mark) {
  log->push_back(mark);
  jump_context_last(to, log);
}

TEST(ContextTest, JumpContextLastResumesTheCallerOfItsCaller) {
  std::vector<int> log;
  g_log = &log;
  TestFiber fiber([](Transfer t) {
    for (int i = 0; i < 3; ++i) {
      PassTo(t.from, g_log, 10 + i);  // main resumes; when it comes back, we are here again
      g_log->push_back(20 + i);
    }
    Finish(t.from);
  });
  Transfer t = jump_context(fiber.context);
  EXPECT_EQ(t.data, &log);  // what the last jump carried
  // Back to the fiber twice by jump_context and once by an on-top switch: each resume lands
  // after a PassTo call, whatever kind of switch resumes it.
  t = jump_context(t.from);
  t = jump_context_ontop(t.from, nullptr, [](Transfer in) {
    g_log->push_back(99);  // on the fiber's stack, before it resumes
    return in;
  });
  jump_context(t.from);
  EXPECT_EQ(log, (std::vector<int>{10, 20, 11, 99, 21, 12, 22}));
}

TEST(ContextTest, OnTopIntoFreshContext) {
  // The first switch into a context may carry an on-top function too; the entry then receives
  // that function's result.
  TestFiber fiber([](Transfer t) {
    EXPECT_EQ(t.data, reinterpret_cast<void*>(std::uintptr_t{2}));
    Finish(t.from);
  });
  jump_context_ontop(fiber.context, reinterpret_cast<void*>(std::uintptr_t{1}), [](Transfer in) {
    return Transfer{in.from,
                    reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(in.data) + 1)};
  });
}

// Frame pointer at function entry: rsp % 16 == 8 after the call, so the pushed rbp is 16-aligned.
bool FrameAligned() {
  auto fp = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  return fp % 16 == 0;
}

TEST(ContextTest, StackAlignedAtEntryAndOnTop) {
  static bool entry_aligned = false;
  static bool ontop_aligned = false;
  TestFiber fiber([](Transfer t) {
    entry_aligned = FrameAligned();
    t = jump_context(t.from);
    Finish(t.from);
  });
  Transfer t = jump_context(fiber.context);
  jump_context_ontop(t.from, nullptr, [](Transfer in) {
    ontop_aligned = FrameAligned();
    return in;
  });
  EXPECT_TRUE(entry_aligned);
  EXPECT_TRUE(ontop_aligned);
}

#if defined(__x86_64__)
std::uint32_t Mxcsr() {
  std::uint32_t v;
  asm volatile("stmxcsr %0" : "=m"(v));
  return v;
}
std::uint16_t X87ControlWord() {
  std::uint16_t v;
  asm volatile("fnstcw %0" : "=m"(v));
  return v;
}
#endif

TEST(ContextTest, FloatingPointControlStateIsPerContext) {
  static int fiber_mode_after_switch = -1;
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  TestFiber fiber([](Transfer t) {
    std::fesetround(FE_TOWARDZERO);  // sets both the x87 control word and MXCSR
    t = jump_context(t.from);
    fiber_mode_after_switch = std::fegetround();
    std::fesetround(FE_TONEAREST);
    Finish(t.from);
  });
#if defined(__x86_64__)
  const std::uint32_t mxcsr = Mxcsr();
  const std::uint16_t x87 = X87ControlWord();
#endif
  Transfer t = jump_context(fiber.context);
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);  // the fiber's rounding mode did not leak out
#if defined(__x86_64__)
  EXPECT_EQ(Mxcsr(), mxcsr);
  EXPECT_EQ(X87ControlWord(), x87);
#endif
  jump_context(t.from);
  EXPECT_EQ(fiber_mode_after_switch, FE_TOWARDZERO);  // and ours did not leak in
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);
}

[[gnu::noinline]] std::uint64_t SumDown(std::uint64_t n) {
  volatile char pad[200];  // make each frame take real stack
  pad[0] = static_cast<char>(n);
  if (n == 0) return pad[0];
  return n + SumDown(n - 1) + static_cast<std::uint64_t>(pad[0] - static_cast<char>(n));
}

TEST(ContextTest, DeepRecursionInsideAStack) {
  static std::uint64_t result = 0;
  TestFiber fiber(
      [](Transfer t) {
        result = SumDown(2000);  // ~2000 frames of 200+ bytes: well over 400 KiB
        Finish(t.from);
      },
      std::size_t{4} << 20);
  jump_context(fiber.context);
  EXPECT_EQ(result, 2000ull * 2001 / 2);
}

// A C++ exception thrown and caught on a context's stack, with a switch away and back between:
// on Windows the unwinder (RtlUnwindEx) rejects frames outside the TEB's stack bounds, so this
// checks that each context carries its own.
TEST(ContextTest, ExceptionsUnwindInsideAContext) {
  static std::string caught;
  TestFiber fiber([](Transfer t) {
    t = jump_context(t.from);  // come back on a possibly different switch path
    try {
      ThrowFrom(50, "from deep inside the context");
    } catch (const std::runtime_error& e) {
      caught = e.what();
    }
    Finish(t.from);
  });
  Transfer t = jump_context(fiber.context);
  try {  // and the main stack's own unwinding is intact while the fiber is suspended
    ThrowFrom(3, "from deep inside the context");
  } catch (const std::runtime_error&) {
    caught = "main";
  }
  EXPECT_EQ(caught, "main");
  jump_context(t.from);
  EXPECT_EQ(caught, "from deep inside the context");
}

#ifdef _WIN32
// The TEB's StackBase/StackLimit describe the running context's stack, and the thread's own
// come back when it resumes.
TEST(ContextTest, WindowsTebStackBoundsFollowTheContext) {
  static void* fiber_base = nullptr;
  static void* fiber_limit = nullptr;
  const NT_TIB* tib = reinterpret_cast<const NT_TIB*>(NtCurrentTeb());
  void* thread_base = tib->StackBase;
  void* thread_limit = tib->StackLimit;
  TestFiber fiber([](Transfer t) {
    const NT_TIB* in = reinterpret_cast<const NT_TIB*>(NtCurrentTeb());
    fiber_base = in->StackBase;
    fiber_limit = in->StackLimit;
    Finish(t.from);
  });
  jump_context(fiber.context);
  StackSpan span = fiber.stack.span();
  auto* lo = static_cast<char*>(span.base);
  EXPECT_GE(static_cast<char*>(fiber_limit), lo);
  EXPECT_LE(static_cast<char*>(fiber_base), lo + span.size);
  EXPECT_GT(static_cast<char*>(fiber_base), static_cast<char*>(fiber_limit));
  EXPECT_EQ(tib->StackBase, thread_base);
  EXPECT_EQ(tib->StackLimit, thread_limit);
}
#endif

#if defined(__x86_64__)
// Callee-saved registers hold their values across a switch away and back, while the other
// context clobbers them all. The compiler alone cannot show this: it may keep nothing live in
// those registers across the call. So one asm block loads known values, calls the switch
// through a plain function and reads them back: rbx and r12-r15 everywhere; on Windows also rdi,
// rsi and xmm6-xmm15, which Win64 makes callee-saved.
Context g_clobberer = nullptr;
// In globals, so that the asm reaches them RIP-relative: with every register clobbered there is
// none left to address a local (ASan's builds need one for a stack operand).
std::uint64_t g_saved_out[17];
void (*g_switch_fn)() = nullptr;

[[gnu::noinline]] void SwitchToClobbererAndBack() { g_clobberer = jump_context(g_clobberer).from; }

TEST(ContextTest, CalleeSavedRegistersSurviveASwitch) {
  TestFiber fiber([](Transfer t) {
    for (;;) {
      asm volatile(
          "movq $-1, %%rbx\n movq $-1, %%r12\n movq $-1, %%r13\n movq $-1, %%r14\n"
          "movq $-1, %%r15\n movq $-1, %%rdi\n movq $-1, %%rsi\n"
          "pcmpeqd %%xmm6, %%xmm6\n pcmpeqd %%xmm7, %%xmm7\n pcmpeqd %%xmm8, %%xmm8\n"
          "pcmpeqd %%xmm9, %%xmm9\n pcmpeqd %%xmm10, %%xmm10\n pcmpeqd %%xmm11, %%xmm11\n"
          "pcmpeqd %%xmm12, %%xmm12\n pcmpeqd %%xmm13, %%xmm13\n pcmpeqd %%xmm14, %%xmm14\n"
          "pcmpeqd %%xmm15, %%xmm15\n" ::
              : "rbx", "r12", "r13", "r14", "r15", "rdi", "rsi", "xmm6", "xmm7", "xmm8", "xmm9",
                "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
      t = jump_context(t.from);
    }
  });
  g_clobberer = fiber.context;
  std::uint64_t* out = g_saved_out;
  std::fill(out, out + 17, 0);
  g_switch_fn = &SwitchToClobbererAndBack;
  asm volatile(
      "leaq %[out], %%r11\n"
      "movq %[fn], %%r10\n"
#ifndef _WIN32
      "subq $128, %%rsp\n"  // step over the SysV red zone
#endif
      "movq %%rsp, %%rax\n"
      "andq $-16, %%rsp\n"
      "pushq %%rax\n"      // the rsp to return to
      "pushq %%r11\n"      // out
      "pushq %%r10\n"      // fn
      "subq $40, %%rsp\n"  // home space (Win64) and alignment: rsp % 16 == 0 at the call
      "movq $0x1001, %%rbx\n movq $0x1012, %%r12\n movq $0x1013, %%r13\n"
      "movq $0x1014, %%r14\n movq $0x1015, %%r15\n"
#ifdef _WIN32
      "movq $0x10d1, %%rdi\n movq $0x10e1, %%rsi\n"
      "movq $0x2006, %%rax\n movq %%rax, %%xmm6\n movq $0x2007, %%rax\n movq %%rax, %%xmm7\n"
      "movq $0x2008, %%rax\n movq %%rax, %%xmm8\n movq $0x2009, %%rax\n movq %%rax, %%xmm9\n"
      "movq $0x2010, %%rax\n movq %%rax, %%xmm10\n movq $0x2011, %%rax\n movq %%rax, %%xmm11\n"
      "movq $0x2012, %%rax\n movq %%rax, %%xmm12\n movq $0x2013, %%rax\n movq %%rax, %%xmm13\n"
      "movq $0x2014, %%rax\n movq %%rax, %%xmm14\n movq $0x2015, %%rax\n movq %%rax, %%xmm15\n"
#endif
      "callq *40(%%rsp)\n"
      "addq $48, %%rsp\n"  // home space and fn
      "popq %%rax\n"       // out
      "movq %%rbx, 0(%%rax)\n movq %%r12, 8(%%rax)\n movq %%r13, 16(%%rax)\n"
      "movq %%r14, 24(%%rax)\n movq %%r15, 32(%%rax)\n"
#ifdef _WIN32
      "movq %%rdi, 40(%%rax)\n movq %%rsi, 48(%%rax)\n"
      "movq %%xmm6, 56(%%rax)\n movq %%xmm7, 64(%%rax)\n movq %%xmm8, 72(%%rax)\n"
      "movq %%xmm9, 80(%%rax)\n movq %%xmm10, 88(%%rax)\n movq %%xmm11, 96(%%rax)\n"
      "movq %%xmm12, 104(%%rax)\n movq %%xmm13, 112(%%rax)\n movq %%xmm14, 120(%%rax)\n"
      "movq %%xmm15, 128(%%rax)\n"
#endif
      "popq %%rsp\n"
#ifndef _WIN32
      "addq $128, %%rsp\n"
#endif
      :
      : [out] "m"(g_saved_out), [fn] "m"(g_switch_fn)
      : "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
        "r15", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
  EXPECT_EQ(out[0], 0x1001u);  // rbx
  EXPECT_EQ(out[1], 0x1012u);  // r12
  EXPECT_EQ(out[2], 0x1013u);
  EXPECT_EQ(out[3], 0x1014u);
  EXPECT_EQ(out[4], 0x1015u);  // r15
#ifdef _WIN32
  EXPECT_EQ(out[5], 0x10d1u);  // rdi
  EXPECT_EQ(out[6], 0x10e1u);  // rsi
  const std::uint64_t xmm[10] = {0x2006, 0x2007, 0x2008, 0x2009, 0x2010,
                                 0x2011, 0x2012, 0x2013, 0x2014, 0x2015};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[7 + i], xmm[i]) << "xmm" << 6 + i;
#endif
  jump_context(g_clobberer);  // one more round, then leave the fiber parked (its stack is pooled)
}
#endif  // __x86_64__

TEST(ContextTest, ChainOfContexts) {
  // Each fiber adds one and passes the counter to the next; the last returns to main.
  constexpr int kFibers = 64;
  static std::vector<Context> chain;
  static Context main_context;
  std::vector<std::unique_ptr<TestFiber>> fibers;
  chain.clear();
  for (int i = 0; i < kFibers; ++i) {
    fibers.push_back(std::make_unique<TestFiber>([](Transfer t) {
      auto* counter = static_cast<int*>(t.data);
      int index = (*counter)++;
      Context next = index + 1 < kFibers ? chain[index + 1] : main_context;
      Finish(next, counter);
    }));
    chain.push_back(fibers.back()->context);
  }
  main_context = current_context();
  int counter = 0;
  Transfer t = jump_context(chain[0], &counter);
  EXPECT_EQ(counter, kFibers);
  EXPECT_EQ(t.data, &counter);
}

TEST(ContextTest, MigratesBetweenThreads) {
  testing::ExpectMigratesBetweenThreads<&jump_context>();
}

TEST(ContextTest, NamesAreKeptAndTruncated) {
  TestFiber fiber([](Transfer t) { Finish(t.from); });
  set_context_name(fiber.context, "acceptor");
  EXPECT_EQ(context_name(fiber.context), "acceptor");
  set_context_name(fiber.context, std::string(100, 'x'));
  EXPECT_EQ(context_name(fiber.context).size(), 31u);
  jump_context(fiber.context);
}

TEST(ContextTest, PrefetchIsOnlyAHint) {
  // prefetch_context changes nothing and never faults: on a fresh context, a null handle, and
  // one whose stack went back to a pool that keeps nothing (its memory unmapped or discarded).
  StackPool pool({.max_cached_bytes = 0});
  Result<Stack> stack = pool.allocate({.size = 16 << 10});
  ASSERT_TRUE(stack.ok());
  bool ran = false;
  static bool* ran_flag = nullptr;
  ran_flag = &ran;
  Result<Context> c = make_context(stack->span(), [](Transfer t) {
    *ran_flag = true;
    Finish(t.from);
  });
  ASSERT_TRUE(c.ok());
  prefetch_context(*c);
  prefetch_context(nullptr);
  jump_context(*c);
  EXPECT_TRUE(ran);
  stack->reset();
  prefetch_context(*c);  // dead, its memory gone
}

TEST(ContextTest, MakeContextRejectsBadInput) {
  alignas(64) static char small[1024];
  Result<Context> r = make_context(StackSpan{small, sizeof small}, [](Transfer) {});
  EXPECT_EQ(r.error(), std::errc::invalid_argument);
  r = make_context(StackSpan{nullptr, 1 << 16}, [](Transfer) {});
  EXPECT_EQ(r.error(), std::errc::invalid_argument);
  alignas(64) static char big[16384];
  r = make_context(StackSpan{big, sizeof big}, nullptr);
  EXPECT_EQ(r.error(), std::errc::invalid_argument);
  r = make_context(StackSpan{big, sizeof big}, [](Transfer) {});
  ASSERT_TRUE(r.ok());
  discard_context(*r);  // made but never run
}

class ContextDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, weft::testing::DeathTestStyle()); }
};

TEST_F(ContextDeathTest, ResumingARunningContextAborts) {
  EXPECT_DEATH(jump_context(current_context()), "weft: jump to a context that is not suspended");
  EXPECT_DEATH(
      {
        TestFiber fiber([](Transfer) { jump_context(current_context()); });
        jump_context(fiber.context);
      },
      "weft: jump to a context that is not suspended");
  // A context that left by jump_context_last is running again once something resumed it.
  EXPECT_DEATH(
      {
        static Context fiber_context;
        TestFiber fiber([](Transfer t) {
          jump_context_last(t.from);  // suspended here; main runs
        });
        fiber_context = jump_context(fiber.context).from;
        jump_context_ontop(fiber_context, nullptr, [](Transfer in) {
          jump_context(fiber_context);  // it is being resumed, so no longer suspended
          return in;
        });
      },
      "weft: jump to a context that is not suspended");
}

TEST_F(ContextDeathTest, EntryReturningAborts) {
  EXPECT_DEATH(
      {
        TestFiber fiber([](Transfer) {});
        jump_context(fiber.context);
      },
      "weft: a context's entry function returned");
}

}  // namespace
}  // namespace weft
