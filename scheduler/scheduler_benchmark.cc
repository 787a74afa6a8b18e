// The scheduler on the standard workloads of ../shared/WORKLOADS.md, as Google Benchmark cases
// (JSON output with --benchmark_format=json). All eight workloads, in the WORKLOADS.md line
// format, are in //bench:weft_workloads; these five are here for quick before/after runs.
//   BM_W1_YieldPingPong     2 fibers on ONE worker alternately yield        ns per switch
//   BM_W2_SpawnJoin         a root fiber spawns 100,000 empty fibers, joins  ns per spawn+join
//   BM_W3_ChannelPingPong   two fibers, two capacity-1 channels, all workers ns per round trip
//   BM_W5_SleepFanout       10,000 fibers each sleep 1 ms, root joins all    wall ms
//   BM_W7_MutexContended    1,000 fibers x 1,000 lock/increment/unlock       ns per lock+unlock
// Run with: ./bazelw run -c opt //scheduler:scheduler_benchmark

#include <atomic>
#include <chrono>
#include <vector>

#include "benchmark/benchmark.h"
#include "scheduler/runtime.h"
#include "sync/channel.h"
#include "sync/mutex.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

void Report(benchmark::State& state, const char* name, double ns_per_op, double wall_ms) {
  state.counters[name] = ns_per_op;
  state.counters["wall_ms"] = wall_ms;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void BM_W1_YieldPingPong(benchmark::State& state) {
  Runtime rt({.workers = 1});
  constexpr int kYields = 1000000;
  for (auto _ : state) {
    auto start = Clock::now();
    rt.block_on([&] {
      auto a = rt.spawn([] {
        for (int i = 0; i < kYields; ++i) this_fiber::yield();
      });
      auto b = rt.spawn([] {
        for (int i = 0; i < kYields; ++i) this_fiber::yield();
      });
      (void)a.join();
      (void)b.join();
    });
    auto wall = Clock::now() - start;
    Report(state, "ns_per_switch",
           std::chrono::duration<double, std::nano>(wall).count() / (2.0 * kYields), Ms(wall));
  }
}
BENCHMARK(BM_W1_YieldPingPong)
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly()
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_W2_SpawnJoin(benchmark::State& state) {
  Runtime rt({.workers = 2, .stack_size = 16 << 10});
  constexpr int kFibers = 100000;
  for (auto _ : state) {
    auto start = Clock::now();
    rt.block_on([&] {
      std::vector<JoinHandle<void>> hs;
      hs.reserve(kFibers);
      for (int i = 0; i < kFibers; ++i) hs.push_back(rt.spawn([] {}));
      for (auto& h : hs) (void)h.join();
    });
    auto wall = Clock::now() - start;
    Report(state, "ns_per_spawn_join",
           std::chrono::duration<double, std::nano>(wall).count() / kFibers, Ms(wall));
  }
}
BENCHMARK(BM_W2_SpawnJoin)
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly()
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_W3_ChannelPingPong(benchmark::State& state) {
  Runtime rt({.workers = 2});
  constexpr int kRounds = 1000000;
  for (auto _ : state) {
    auto start = Clock::now();
    rt.block_on([&] {
      Channel<int> ping(1), pong(1);
      auto echo = rt.spawn([&] {
        for (int i = 0; i < kRounds; ++i) (void)pong.send(*ping.recv());
      });
      for (int i = 0; i < kRounds; ++i) {
        (void)ping.send(int(i));
        (void)pong.recv();
      }
      (void)echo.join();
    });
    auto wall = Clock::now() - start;
    Report(state, "ns_per_round_trip",
           std::chrono::duration<double, std::nano>(wall).count() / kRounds, Ms(wall));
  }
}
BENCHMARK(BM_W3_ChannelPingPong)
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly()
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_W5_SleepFanout(benchmark::State& state) {
  Runtime rt({.workers = 2, .stack_size = 16 << 10});
  constexpr int kFibers = 10000;
  for (auto _ : state) {
    auto start = Clock::now();
    rt.block_on([&] {
      std::vector<JoinHandle<void>> hs;
      hs.reserve(kFibers);
      for (int i = 0; i < kFibers; ++i) {
        hs.push_back(rt.spawn([] { (void)this_fiber::sleep_for(std::chrono::milliseconds(1)); }));
      }
      for (auto& h : hs) (void)h.join();
    });
    auto wall = Clock::now() - start;
    Report(state, "ns_per_fiber", std::chrono::duration<double, std::nano>(wall).count() / kFibers,
           Ms(wall));
  }
}
BENCHMARK(BM_W5_SleepFanout)
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly()
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_W7_MutexContended(benchmark::State& state) {
  Runtime rt({.workers = 2, .stack_size = 16 << 10});
  constexpr int kFibers = 1000, kOps = 1000;
  for (auto _ : state) {
    Mutex m;
    long counter = 0;
    auto start = Clock::now();
    rt.block_on([&] {
      std::vector<JoinHandle<void>> hs;
      for (int i = 0; i < kFibers; ++i) {
        hs.push_back(rt.spawn([&] {
          for (int k = 0; k < kOps; ++k) {
            (void)m.lock();
            ++counter;
            (void)m.unlock();
          }
        }));
      }
      for (auto& h : hs) (void)h.join();
    });
    auto wall = Clock::now() - start;
    if (counter != long{kFibers} * kOps) state.SkipWithError("lost increments");
    Report(state, "ns_per_lock_unlock",
           std::chrono::duration<double, std::nano>(wall).count() / (double{kFibers} * kOps),
           Ms(wall));
  }
}
BENCHMARK(BM_W7_MutexContended)
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly()
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace weft
