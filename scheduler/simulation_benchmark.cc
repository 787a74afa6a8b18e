// What a simulated runtime (RuntimeOptions::simulation) costs, in one binary, beside the same
// program on a real runtime of one worker:
//   BM_Seeds/sim          one seed of the account test of simulation_test.cc (a runtime made,
//                         three fibers withdrawing through a Mutex-guarded log, the runtime
//                         destroyed): items are seeds
//   BM_Seeds/real         the same body on a real one-worker runtime
//   BM_VirtualTime        1,000 fibers that each sleep 1 s of virtual time 60 times (a
//                         minute of timers): the counter virtual_s_per_s is simulated seconds
//                         per wall-clock second
//   BM_YieldSwitches/sim  two fibers yielding to each other: items are switches
//   BM_YieldSwitches/real the same on a real one-worker runtime
// Rates are per wall-clock second (UseRealTime: the timed thread only waits in block_on). Run with:
//   ./bazelw run -c opt //scheduler:simulation_benchmark -- --benchmark_format=json

#include <chrono>
#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/mutex.h"

namespace weft {
namespace {

RuntimeOptions Options(bool sim, std::uint64_t seed) {
  RuntimeOptions o{.workers = 1};
  if (sim) o.simulation = SimulationOptions{.seed = seed};
  return o;
}

void BM_Seeds(benchmark::State& state) {
  const bool sim = state.range(0) != 0;
  std::uint64_t seed = 0;
  for (auto _ : state) {
    Runtime rt(Options(sim, ++seed));
    const std::int64_t balance = rt.block_on([&] {
      std::int64_t balance = 100;
      Mutex log_mu;
      std::vector<std::int64_t> log;
      std::vector<JoinHandle<void>> hs;
      for (std::int64_t amount : {60, 30, 50}) {
        hs.push_back(rt.spawn([&, amount] {
          if (balance < amount) return;
          (void)log_mu.lock();
          log.push_back(amount);
          this_fiber::yield();
          (void)log_mu.unlock();
          if (balance >= amount) balance -= amount;
        }));
      }
      for (auto& h : hs) (void)h.join();
      return balance;
    });
    benchmark::DoNotOptimize(balance);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(sim ? "sim" : "real");
}
BENCHMARK(BM_Seeds)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_VirtualTime(benchmark::State& state) {
  double virtual_s = 0;
  std::uint64_t seed = 0;
  for (auto _ : state) {
    Runtime rt(Options(true, ++seed));
    rt.block_on([&] {
      std::vector<JoinHandle<void>> hs;
      for (int i = 0; i < 1000; ++i) {
        hs.push_back(rt.spawn([] {
          for (int k = 0; k < 60; ++k) (void)this_fiber::sleep_for(std::chrono::seconds(1));
        }));
      }
      for (auto& h : hs) (void)h.join();
    });
    virtual_s += std::chrono::duration<double>(rt.simulation()->virtual_elapsed).count();
  }
  state.counters["virtual_s_per_s"] = benchmark::Counter(virtual_s, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_VirtualTime)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_YieldSwitches(benchmark::State& state) {
  const bool sim = state.range(0) != 0;
  Runtime rt(Options(sim, 1));
  constexpr int kYields = 100000;
  for (auto _ : state) {
    rt.block_on([&] {
      JoinHandle<void> other = rt.spawn([] {
        for (int i = 0; i < kYields; ++i) this_fiber::yield();
      });
      for (int i = 0; i < kYields; ++i) this_fiber::yield();
      (void)other.join();
    });
  }
  state.SetItemsProcessed(state.iterations() * 2 * kYields);
  state.SetLabel(sim ? "sim" : "real");
}
BENCHMARK(BM_YieldSwitches)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace weft

BENCHMARK_MAIN();
