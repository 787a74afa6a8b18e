// TaskGroup's cost over plain spawn + join, in one binary: W2's shape (a root fiber spawns
// 100,000 empty fibers, then joins them all), each way:
//   BM_SpawnJoin/W         Runtime::spawn, then JoinHandle::join of every handle (W2 itself)
//   BM_GroupJoinAll/W      TaskGroup::spawn, then one join_all
//   BM_GroupJoinNext/W     TaskGroup::spawn, then join_next until none is left
// and the same with stackless tasks, from a root task (scheduler/task.h):
//   BM_TaskSpawnJoin/W     Runtime::spawn_task, then co_await of every handle (W2 on tasks)
//   BM_TaskGroupJoinAll/W  TaskGroup::spawn_task, then one co_await async_join_all
//   BM_TaskGroupJoinNext/W TaskGroup::spawn_task, then co_await async_join_next until none is left
// W: workers. Items are spawn+join pairs. Run with:
//   ./bazelw run -c opt //scheduler:task_group_benchmark -- --benchmark_format=json

#include <cstddef>
#include <vector>

#include "benchmark/benchmark.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/task.h"
#include "weft/scheduler/task_group.h"

namespace weft {
namespace {

constexpr long kChildren = 100000;

Runtime& RuntimeOf(unsigned workers) {
  // One runtime per worker count, kept across benchmarks: a runtime's start and its caches'
  // warm-up are not what is measured.
  static Runtime* runtimes[9] = {};
  if (runtimes[workers] == nullptr) {
    runtimes[workers] = new Runtime({.workers = workers, .stack_size = 16 << 10});
  }
  return *runtimes[workers];
}

void BM_SpawnJoin(benchmark::State& state) {
  Runtime& rt = RuntimeOf(static_cast<unsigned>(state.range(0)));
  for (auto _ : state) {
    rt.block_on([&] {
      std::vector<JoinHandle<void>> handles;
      handles.reserve(kChildren);
      for (long i = 0; i < kChildren; ++i) handles.push_back(rt.spawn([] {}));
      for (auto& h : handles) (void)h.join();
    });
  }
  state.SetItemsProcessed(state.iterations() * kChildren);
}
BENCHMARK(BM_SpawnJoin)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_GroupJoinAll(benchmark::State& state) {
  Runtime& rt = RuntimeOf(static_cast<unsigned>(state.range(0)));
  for (auto _ : state) {
    rt.block_on([&] {
      TaskGroup<> group;
      for (long i = 0; i < kChildren; ++i) (void)group.spawn([] {});
      (void)group.join_all();
    });
  }
  state.SetItemsProcessed(state.iterations() * kChildren);
}
BENCHMARK(BM_GroupJoinAll)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_GroupJoinNext(benchmark::State& state) {
  Runtime& rt = RuntimeOf(static_cast<unsigned>(state.range(0)));
  for (auto _ : state) {
    rt.block_on([&] {
      TaskGroup<> group;
      for (long i = 0; i < kChildren; ++i) (void)group.spawn([] {});
      while (group.join_next()) {
      }
    });
  }
  state.SetItemsProcessed(state.iterations() * kChildren);
}
BENCHMARK(BM_GroupJoinNext)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

Task<> Empty() { co_return; }

void BM_TaskSpawnJoin(benchmark::State& state) {
  Runtime& rt = RuntimeOf(static_cast<unsigned>(state.range(0)));
  for (auto _ : state) {
    (void)
        rt.spawn_task([&]() -> Task<> {
            std::vector<JoinHandle<void>> handles;
            handles.reserve(kChildren);
            for (long i = 0; i < kChildren; ++i) handles.push_back(rt.spawn_task(Empty()));
            for (auto& h : handles) (void)co_await h;
          }).join();
  }
  state.SetItemsProcessed(state.iterations() * kChildren);
}
BENCHMARK(BM_TaskSpawnJoin)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_TaskGroupJoinAll(benchmark::State& state) {
  Runtime& rt = RuntimeOf(static_cast<unsigned>(state.range(0)));
  for (auto _ : state) {
    (void)
        rt.spawn_task([&]() -> Task<> {
            TaskGroup<> group;
            for (long i = 0; i < kChildren; ++i) (void)group.spawn_task(Empty);
            (void)co_await group.async_join_all();
          }).join();
  }
  state.SetItemsProcessed(state.iterations() * kChildren);
}
BENCHMARK(BM_TaskGroupJoinAll)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_TaskGroupJoinNext(benchmark::State& state) {
  Runtime& rt = RuntimeOf(static_cast<unsigned>(state.range(0)));
  for (auto _ : state) {
    (void)
        rt.spawn_task([&]() -> Task<> {
            TaskGroup<> group;
            for (long i = 0; i < kChildren; ++i) (void)group.spawn_task(Empty);
            while (co_await group.async_join_next()) {
            }
          }).join();
  }
  state.SetItemsProcessed(state.iterations() * kChildren);
}
BENCHMARK(BM_TaskGroupJoinNext)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace weft
