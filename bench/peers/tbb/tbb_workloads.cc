// bench/peers/tbb: the fork-join workloads of ../../../../shared/WORKLOADS.md written for oneTBB
// (Debian's libtbb-dev, 2021.8), printing the same JSON lines as //bench:weft_workloads
// ("runtime":"tbb"). Run through bench/run_workloads.sh, or:
//
//   ./bazelw run -c opt //bench/peers/tbb:tbb_workloads -- --reps 5 --workers 2
//
// oneTBB runs tasks to completion on worker threads; it has no task that can park, sleep, wait on
// a channel or a mutex without holding its thread. So only two workloads fit its model:
//   - W4 fib(30): a tbb::task_group per call, fib(n-1) run as a task and fib(n-2) inline, in a
//     task_arena of --workers threads (WORKLOADS.md names task_group as TBB's primitive).
//   - W2 spawn_join: 100,000 empty tasks run on one task_group, then joined by one wait(): TBB has
//     no handle to join a single task, so the 100,000 joins are one.
// W1, W3, W5, W6, W7 and W8 are omitted (bench/run_workloads.sh prints a note).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "oneapi/tbb/global_control.h"
#include "oneapi/tbb/task_arena.h"
#include "oneapi/tbb/task_group.h"
#include "weft/bench/workload_common.h"

namespace {

using weft::bench::Clock;
using weft::bench::Ms;
using weft::bench::Options;
using weft::bench::Repeat;

void Emit(const char* workload, long n, unsigned workers, double ns_per_op,
          const std::vector<double>& samples, const std::string& extra = "") {
  weft::bench::Emit("tbb", workload, n, workers, ns_per_op, samples, extra);
}

void W2(const Options& o, tbb::task_arena& arena, unsigned workers) {
  constexpr long kN = 100000;
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    arena.execute([] {
      tbb::task_group g;
      for (long i = 0; i < kN; ++i) g.run([] {});
      g.wait();
    });
    return Ms(Clock::now() - start);
  });
  Emit("spawn_join", kN, workers, weft::bench::Median(s) * 1e6 / kN, s);
}

std::uint64_t Fib(int n) {
  if (n < 2) return static_cast<std::uint64_t>(n);
  std::uint64_t a = 0;
  tbb::task_group g;
  g.run([&a, n] { a = Fib(n - 1); });
  std::uint64_t b = Fib(n - 2);
  g.wait();
  return a + b;
}

void W4(const Options& o, tbb::task_arena& arena, unsigned workers) {
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    std::uint64_t r = 0;
    arena.execute([&] { r = Fib(weft::bench::kFibN); });
    if (r != weft::bench::kFibResult) {
      std::fprintf(stderr, "W4: wrong result\n");
      std::exit(1);
    }
    return Ms(Clock::now() - start);
  });
  weft::bench::EmitFib("tbb", o, workers, s);
}

}  // namespace

int main(int argc, char** argv) {
  weft::bench::KeepFreedMemory();
  Options o;
  if (!weft::bench::ParseOptions(argc, argv, &o)) return 2;
  unsigned workers = o.workers ? o.workers : std::max(1u, std::thread::hardware_concurrency());
  // The arena's threads: the caller plus workers - 1 from TBB's pool, which global_control lets
  // grow to the count asked for even where TBB would pick fewer.
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, workers);
  tbb::task_arena arena(static_cast<int>(workers));
  if (o.wants("W2")) W2(o, arena, workers);
  if (o.wants("W4")) W4(o, arena, workers);
  return 0;
}
