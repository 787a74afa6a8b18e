// Context-switch benchmarks, with their baselines in the same binary:
//   BM_JumpContext      weft::jump_context round trip (two switches), the public API
//   BM_JumpContextInline  the same round trip by jump_context_inline (both sides)
//   BM_JumpContextMixed   one side inline, the other jump_context: each resumes the other's frame
//   BM_RawJump          the backend's weft_context_jump alone (no record bookkeeping)
//   BM_SwapContext      POSIX swapcontext round trip: the baseline to beat
//   BM_MakeAndFinish    make_context + first switch + exit_context on a pooled stack
// Each reports `ns_per_switch` (per one-way switch).
//   BM_NewGuardedStacks/markers:{0,1}/populate:{0,16}  two threads creating 2,000 new guarded
//                       16 KiB stacks each from a fresh pool and touching their top page, as
//                       workers do in a burst of spawns that outgrows the stacks made so far:
//                       without guard markers (an mmap and an mprotect per stack, the baseline)
//                       and with them (Linux 6.13+; the same as 0 where the kernel has none);
//                       each top page faulting in at its first write (populate:0, the baseline)
//                       or populated ahead, 16 with one call (StackPoolOptions::populate_ahead).
//                       Reports `ns_per_stack`.
//   BM_ReleaseAndReuse/stacks:{1000,100000}  N guarded 16 KiB stacks freed to the pool in a
//                       random order, 16 at a time (as worker caches spill), then taken back 16
//                       at a time (as caches refill), writing each one's top line (as a fiber's
//                       first run does). The pool's bookkeeping plus the locality of the order it
//                       hands stacks back in. Reports `ns_per_stack`; its baseline is the same
//                       benchmark built from an earlier commit (docs/context.md).
// Run with:
//   ./bazelw run -c opt //context:context_benchmark -- --benchmark_format=json

#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "weft/context/context.h"
#include "weft/context/internal/raw.h"
#include "weft/context/stack.h"

namespace weft {
namespace {

void SetSwitchCounter(benchmark::State& state, std::int64_t switches_per_iteration) {
  state.counters["ns_per_switch"] =
      benchmark::Counter(static_cast<double>(state.iterations() * switches_per_iteration),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

Stack BenchStack() {
  return std::move(StackPool::default_pool().allocate({.size = 64 << 10})).value();
}

void BM_JumpContext(benchmark::State& state) {
  Stack stack = BenchStack();
  Context fiber = *make_context(stack.span(), [](Transfer t) {
    for (;;) t = jump_context(t.from);  // bounce straight back, forever
  });
  for (auto _ : state) {
    fiber = jump_context(fiber).from;
  }
  SetSwitchCounter(state, 2);
  discard_context(fiber);
}
BENCHMARK(BM_JumpContext);

void BM_JumpContextInline(benchmark::State& state) {
  Stack stack = BenchStack();
  Context fiber = *make_context(stack.span(), [](Transfer t) {
    for (;;) t = jump_context_inline(t.from);
  });
  for (auto _ : state) {
    fiber = jump_context_inline(fiber).from;
  }
  SetSwitchCounter(state, 2);
  discard_context(fiber);
}
BENCHMARK(BM_JumpContextInline);

void BM_JumpContextMixed(benchmark::State& state) {
  Stack stack = BenchStack();
  Context fiber = *make_context(stack.span(), [](Transfer t) {
    for (;;) t = jump_context(t.from);
  });
  for (auto _ : state) {
    fiber = jump_context_inline(fiber).from;
  }
  SetSwitchCounter(state, 2);
  discard_context(fiber);
}
BENCHMARK(BM_JumpContextMixed);

// The raw fiber bounces back forever, storing its fresh handle in g_raw_fiber each time.
void* g_raw_main;
void* g_raw_fiber;
void RawBounce(void*, void*, void*) {
  for (;;) weft_context_jump(g_raw_main, &g_raw_fiber, nullptr, nullptr);
}

void BM_RawJump(benchmark::State& state) {
  Stack stack = BenchStack();
  StackSpan span = stack.span();
  g_raw_fiber = weft_context_make(span.base, static_cast<char*>(span.base) + span.size - 64,
                                  &RawBounce, nullptr);
  for (auto _ : state) {
    weft_context_jump(g_raw_fiber, &g_raw_main, nullptr, nullptr);
  }
  SetSwitchCounter(state, 2);
}
BENCHMARK(BM_RawJump);

ucontext_t g_uc_main, g_uc_fiber;
void UcBounce() {
  for (;;) swapcontext(&g_uc_fiber, &g_uc_main);
}

void BM_SwapContext(benchmark::State& state) {
  Stack stack = BenchStack();
  getcontext(&g_uc_fiber);
  g_uc_fiber.uc_stack.ss_sp = stack.span().base;
  g_uc_fiber.uc_stack.ss_size = stack.span().size;
  g_uc_fiber.uc_link = nullptr;
  makecontext(&g_uc_fiber, &UcBounce, 0);
  for (auto _ : state) {
    swapcontext(&g_uc_main, &g_uc_fiber);
  }
  SetSwitchCounter(state, 2);
}
BENCHMARK(BM_SwapContext);

void BM_MakeAndFinish(benchmark::State& state) {
  Stack stack = BenchStack();
  for (auto _ : state) {
    Context c = *make_context(stack.span(), [](Transfer t) {
      exit_context(t.from, nullptr, [](Transfer in) {
        discard_context(in.from);
        return in;
      });
    });
    jump_context(c);
  }
  SetSwitchCounter(state, 2);
}
BENCHMARK(BM_MakeAndFinish);

void BM_NewGuardedStacks(benchmark::State& state) {
  constexpr int kPerThread = 2000;
  const bool markers = state.range(0) != 0;
  const auto populate = static_cast<std::size_t>(state.range(1));
  for (auto _ : state) {
    StackPool pool({.guard_markers = markers, .populate_ahead = populate});
    auto work = [&pool] {
      std::vector<Stack> held;
      held.reserve(kPerThread);
      for (int i = 0; i < kPerThread; ++i) {
        Stack s =
            std::move(pool.allocate({.size = 16 << 10, .protection = StackProtection::kGuarded}))
                .value();
        static_cast<volatile char*>(s.span().base)[s.span().size - 1] = 1;
        held.push_back(std::move(s));
      }
      for (Stack& s : held) s.reset();
    };
    std::thread a(work), b(work);
    a.join();
    b.join();
    state.PauseTiming();
    pool.trim();  // unmaps: the pool's destructor would otherwise be timed
    state.ResumeTiming();
  }
  state.counters["ns_per_stack"] =
      benchmark::Counter(static_cast<double>(state.iterations() * 2 * kPerThread),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_NewGuardedStacks)
    ->ArgNames({"markers", "populate"})
    ->ArgsProduct({{0, 1}, {0, 16}})
    ->UseRealTime();

void BM_ReleaseAndReuse(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t kBatch = 16;
  const StackOptions options{.size = 16 << 10, .protection = StackProtection::kGuarded};
  StackPool pool({.max_cached_bytes = std::size_t{4} << 30});  // all cached: no page given back
  std::vector<Stack> stacks(n);
  for (Stack& s : stacks) {
    s = std::move(pool.allocate(options)).value();
    static_cast<volatile char*>(s.span().base)[s.span().size - 64] = 1;
  }
  std::mt19937 rng(1);
  for (auto _ : state) {
    state.PauseTiming();
    std::shuffle(stacks.begin(), stacks.end(), rng);
    state.ResumeTiming();
    for (std::size_t i = 0; i < n; i += kBatch) {
      pool.release_many(stacks.data() + i, std::min(kBatch, n - i));
    }
    for (std::size_t i = 0; i < n; i += kBatch) {
      const std::size_t got =
          pool.allocate_cached(options, stacks.data() + i, std::min(kBatch, n - i));
      for (std::size_t j = i; j < i + got; ++j) {
        StackSpan span = stacks[j].span();
        static_cast<volatile char*>(span.base)[span.size - 64] = 1;
      }
    }
  }
  state.counters["ns_per_stack"] =
      benchmark::Counter(static_cast<double>(state.iterations() * n),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_ReleaseAndReuse)->ArgName("stacks")->Arg(1000)->Arg(100000)->UseRealTime();

}  // namespace
}  // namespace weft
