// Slab allocator benchmarks with glibc in the same binary:
//   BM_SlabLocal/size       SlabAllocator allocate + free on the owner thread
//   BM_Malloc/size          glibc malloc + free of the same size (its tcache fast path)
//   BM_NewDelete/size       operator new + delete of the same size
//   BM_SlabRemoteFree       objects freed by a second thread through free_mt, collected and
//                           reused by the owner: owner-side cost per object
// Run with: ./bazelw run -c opt //alloc:slab_benchmark

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "weft/alloc/slab.h"

namespace weft {
namespace {

void BM_SlabLocal(benchmark::State& state) {
  SlabAllocator a(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    void* p = a.allocate();
    benchmark::DoNotOptimize(p);
    a.free(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SlabLocal)->Arg(64)->Arg(256)->ArgNames({"size"});

void BM_Malloc(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(size);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Malloc)->Arg(64)->Arg(256)->ArgNames({"size"});

void BM_NewDelete(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = ::operator new(size);
    benchmark::DoNotOptimize(p);
    ::operator delete(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_NewDelete)->Arg(64)->Arg(256)->ArgNames({"size"});

// A batch pattern closer to a runtime's: allocate 64 objects, then free them all.
void BM_SlabLocalBatch(benchmark::State& state) {
  SlabAllocator a(64);
  void* objects[64];
  for (auto _ : state) {
    for (void*& p : objects) p = a.allocate();
    benchmark::DoNotOptimize(objects);
    for (void* p : objects) a.free(p);
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_SlabLocalBatch);

void BM_MallocBatch(benchmark::State& state) {
  void* objects[64];
  for (auto _ : state) {
    for (void*& p : objects) p = std::malloc(64);
    benchmark::DoNotOptimize(objects);
    for (void* p : objects) std::free(p);
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_MallocBatch);

void BM_SlabRemoteFree(benchmark::State& state) {
  SlabAllocator a(64);
  constexpr int kBatch = 256;
  std::vector<void*> batch(kBatch);
  std::atomic<void**> handoff{nullptr};
  std::atomic<bool> stop{false};
  std::thread freer([&] {
    // relaxed / acquire: a single-slot mailbox; acquire pairs with the owner's release.
    while (!stop.load(std::memory_order_relaxed)) {
      void** b = handoff.load(std::memory_order_acquire);
      if (b == nullptr) continue;
      for (int i = 0; i < kBatch; ++i) SlabAllocator::free_mt(b[i]);
      handoff.store(nullptr, std::memory_order_release);
    }
  });
  for (auto _ : state) {
    for (void*& p : batch) p = a.allocate();
    handoff.store(batch.data(), std::memory_order_release);
    while (handoff.load(std::memory_order_acquire) != nullptr) {
    }
    a.collect_mt_frees();
  }
  stop.store(true, std::memory_order_relaxed);
  freer.join();
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_SlabRemoteFree)->UseRealTime();

}  // namespace
}  // namespace weft
