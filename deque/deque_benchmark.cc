// deque benchmarks, baselines in the same binary:
//   BM_ChaseLevPushPop        owner push + pop of one item
//   BM_ChaseLevSteal          steals per second by one thief while the owner keeps the deque fed
//   BM_FifoOwnerPushTake/q    a FIFO run queue's owner pushes one item and takes the oldest
//                             back: q = 0 Chase-Lev (push + steal, the scheduler's old queue),
//                             q = 1 SpmcRing (push + pop)
//   BM_FifoMoveHalf/q         the owner fills 128 items, then moves the older half out (an
//                             overflow): per item moved; q as above
//   BM_FibSequential/30       plain recursive fib(30): the baseline for everything below
//   BM_FibForkJoin/30/w       fib(30), a task per call (no cutoff), on a ForkJoinPool of w workers
//   BM_FibTbb/30/w            the same on oneTBB: a tbb::task_group per call, in a task_arena of w
// Fib benchmarks report ns_per_task (per spawned call). Run with:
//   ./bazelw run -c opt //deque:deque_benchmark -- --benchmark_repetitions=5 \
//       --benchmark_report_aggregates_only=true

#include <atomic>
#include <cstdint>
#include <thread>

#include "benchmark/benchmark.h"
#include "oneapi/tbb/task_arena.h"
#include "oneapi/tbb/task_group.h"
#include "weft/deque/chase_lev.h"
#include "weft/deque/fork_join.h"
#include "weft/deque/spmc_ring.h"

namespace weft {
namespace {

void BM_ChaseLevPushPop(benchmark::State& state) {
  ChaseLevDeque<std::uint64_t> d;
  std::uint64_t i = 0;
  for (auto _ : state) {
    d.push(++i);
    benchmark::DoNotOptimize(d.pop());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ChaseLevPushPop);

void BM_ChaseLevSteal(benchmark::State& state) {
  ChaseLevDeque<std::uint64_t> d;
  std::atomic<bool> stop{false};
  std::thread owner([&] {
    std::uint64_t i = 0;
    // relaxed: a stop flag.
    while (!stop.load(std::memory_order_relaxed)) {
      if (d.size_approx() < 1024) {
        d.push(++i);
      } else {
        std::this_thread::yield();
      }
    }
  });
  std::uint64_t stolen = 0;
  for (auto _ : state) {
    std::uint64_t v;
    while (d.steal(&v) != StealResult::kSuccess) {
    }
    benchmark::DoNotOptimize(v);
    ++stolen;
  }
  stop.store(true, std::memory_order_relaxed);
  owner.join();
  state.SetItemsProcessed(static_cast<std::int64_t>(stolen));
}
BENCHMARK(BM_ChaseLevSteal)->UseRealTime();

void BM_FifoOwnerPushTake(benchmark::State& state) {
  ChaseLevDeque<std::uint64_t> deque;
  SpmcRing<std::uint64_t> ring;
  const bool spmc = state.range(0) == 1;
  std::uint64_t i = 0, v = 0;
  for (auto _ : state) {
    if (spmc) {
      ring.push(++i);
      ring.pop(&v);
    } else {
      deque.push(++i);
      (void)deque.steal(&v);
    }
    benchmark::DoNotOptimize(v);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FifoOwnerPushTake)->Arg(0)->Arg(1)->ArgNames({"q"});

void BM_FifoMoveHalf(benchmark::State& state) {
  ChaseLevDeque<std::uint64_t> deque;
  SpmcRing<std::uint64_t> ring;
  const bool spmc = state.range(0) == 1;
  std::uint64_t out[128];
  std::uint64_t moved = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (std::uint64_t i = 0; i < 128; ++i) spmc ? (void)ring.push(i) : (void)deque.push(i);
    state.ResumeTiming();
    if (spmc) {
      moved += ring.take_half(out, 64);
    } else {
      for (int k = 0; k < 64; ++k) moved += deque.steal(&out[k]) == StealResult::kSuccess;
    }
    benchmark::DoNotOptimize(out);
    state.PauseTiming();
    for (std::uint64_t x; spmc ? ring.pop(&x) : deque.steal(&x) == StealResult::kSuccess;) {
    }
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(moved));
}
BENCHMARK(BM_FifoMoveHalf)->Arg(0)->Arg(1)->ArgNames({"q"});

// Spawned calls in fib(n): every call with n >= 2 spawns one.
std::uint64_t SpawnsInFib(int n) {
  std::uint64_t a = 0, b = 0;  // spawns(0), spawns(1)
  for (int i = 2; i <= n; ++i) {
    std::uint64_t c = a + b + 1;
    a = b;
    b = c;
  }
  return n < 2 ? 0 : b;
}

void SetTaskCounter(benchmark::State& state, int n) {
  state.counters["ns_per_task"] =
      benchmark::Counter(static_cast<double>(state.iterations() * SpawnsInFib(n)),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

[[gnu::noinline]] std::uint64_t SeqFib(int n) { return n < 2 ? n : SeqFib(n - 1) + SeqFib(n - 2); }

void BM_FibSequential(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(SeqFib(n));
  SetTaskCounter(state, n);
}
BENCHMARK(BM_FibSequential)->Arg(30)->ArgNames({"n"})->Unit(benchmark::kMillisecond)->UseRealTime();

std::uint64_t Fib(ForkJoinWorker& w, int n) {
  if (n < 2) return n;
  auto a = w.spawn<Fib>(n - 1);
  std::uint64_t b = Fib(w, n - 2);
  return w.sync(a) + b;
}

void BM_FibForkJoin(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  ForkJoinPool pool({.workers = static_cast<unsigned>(state.range(1))});
  for (auto _ : state) benchmark::DoNotOptimize(pool.run(Fib, n));
  SetTaskCounter(state, n);
  state.counters["steals"] = static_cast<double>(pool.stats().steals);
}
BENCHMARK(BM_FibForkJoin)
    ->Args({30, 1})
    ->Args({30, 2})
    ->ArgNames({"n", "workers"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

std::uint64_t TbbFib(int n) {
  if (n < 2) return n;
  std::uint64_t a = 0;
  tbb::task_group g;
  g.run([&] { a = TbbFib(n - 1); });
  std::uint64_t b = TbbFib(n - 2);
  g.wait();
  return a + b;
}

void BM_FibTbb(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  tbb::task_arena arena(static_cast<int>(state.range(1)));
  for (auto _ : state) {
    std::uint64_t r = 0;
    arena.execute([&] { r = TbbFib(n); });
    benchmark::DoNotOptimize(r);
  }
  SetTaskCounter(state, n);
}
BENCHMARK(BM_FibTbb)
    ->Args({30, 1})
    ->Args({30, 2})
    ->ArgNames({"n", "workers"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace weft
