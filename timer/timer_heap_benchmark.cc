// TimerHeap against std::priority_queue with lazy deletion (cancel marks the entry; marked entries
// are dropped when they reach the top: Inko's approach), in the same binary. For each size (timers
// already queued), two mixes:
//   insert+cancel  a timer is armed and cancelled before it fires (an I/O timeout that is not
//                  needed): the common case for a runtime, and lazy deletion's weak spot
//   insert+pop     a timer is armed and the earliest one fires
// Run with: ./bazelw run -c opt //timer:timer_heap_benchmark

#include <cstdint>
#include <deque>
#include <memory>
#include <queue>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "weft/timer/timer_heap.h"

namespace weft {
namespace {

const TimerClock::time_point kT0 = TimerClock::time_point{} + std::chrono::hours(1);

std::vector<std::int64_t> RandomOffsets(std::size_t n) {
  std::mt19937_64 rng(1);
  std::vector<std::int64_t> v(n);
  for (auto& x : v) x = static_cast<std::int64_t>(rng() % 1000000000);
  return v;
}

// Prefill: queues nodes[0..n) at the first n offsets.
void Prefill(TimerHeap& heap, TimerNode* nodes, const std::vector<std::int64_t>& offsets,
             std::size_t n) {
  (void)heap.reserve(n + 1);
  for (std::size_t i = 0; i < n; ++i) {
    (void)heap.insert(nodes[i], kT0 + std::chrono::nanoseconds(offsets[i]));
  }
}

void BM_TimerHeap_InsertCancel(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto offsets = RandomOffsets(n + 4096);
  auto nodes = std::make_unique<TimerNode[]>(n + 1);  // n queued, one spare
  TimerHeap heap;
  Prefill(heap, nodes.get(), offsets, n);
  std::size_t k = 0;
  for (auto _ : state) {
    (void)heap.insert(nodes[n], kT0 + std::chrono::nanoseconds(offsets[n + (k++ & 4095)]));
    heap.cancel(nodes[n]);
  }
  state.SetItemsProcessed(state.iterations());
}

// The baseline: entries carry a pointer to a cancellation flag.
struct LazyEntry {
  std::int64_t deadline;
  std::uint64_t seq;
  bool* cancelled;
  bool operator<(const LazyEntry& o) const {  // priority_queue is a max-heap
    return deadline > o.deadline || (deadline == o.deadline && seq > o.seq);
  }
};

void BM_LazyPriorityQueue_InsertCancel(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto offsets = RandomOffsets(n + 4096);
  std::priority_queue<LazyEntry> pq;
  std::uint64_t seq = 0;
  std::vector<std::unique_ptr<bool>> flags;
  for (std::size_t i = 0; i < n; ++i) {
    flags.push_back(std::make_unique<bool>(false));
    pq.push({offsets[i], seq++, flags.back().get()});
  }
  std::size_t k = 0;
  std::deque<bool> cancelled_flags;  // stable addresses for the cancelled entries
  for (auto _ : state) {
    cancelled_flags.push_back(false);
    pq.push({offsets[n + (k++ & 4095)], seq++, &cancelled_flags.back()});
    cancelled_flags.back() = true;  // cancel: mark; the entry stays until it reaches the top
    while (*pq.top().cancelled) pq.pop();
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["queue_len_at_end"] = static_cast<double>(pq.size());
}

void BM_TimerHeap_InsertPop(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto offsets = RandomOffsets(n + 4096);
  auto nodes = std::make_unique<TimerNode[]>(n + 1);  // n queued, one spare
  TimerHeap heap;
  Prefill(heap, nodes.get(), offsets, n);
  TimerNode* spare = &nodes[n];
  std::int64_t now = 0;
  std::size_t k = 0;
  for (auto _ : state) {
    now += 1000;
    (void)heap.insert(*spare, kT0 + std::chrono::nanoseconds(now + offsets[n + (k++ & 4095)]));
    spare = heap.pop_due(TimerClock::time_point::max());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_LazyPriorityQueue_InsertPop(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto offsets = RandomOffsets(n + 4096);
  std::priority_queue<LazyEntry> pq;
  bool never = false;
  std::uint64_t seq = 0;
  for (std::size_t i = 0; i < n; ++i) pq.push({offsets[i], seq++, &never});
  std::int64_t now = 0;
  std::size_t k = 0;
  for (auto _ : state) {
    now += 1000;
    pq.push({now + offsets[n + (k++ & 4095)], seq++, &never});
    while (*pq.top().cancelled) pq.pop();
    pq.pop();
  }
  state.SetItemsProcessed(state.iterations());
}

#define WEFT_TIMER_SIZES ->Arg(1000)->Arg(100000)->Arg(1000000)->ArgNames({"timers"})
BENCHMARK(BM_TimerHeap_InsertCancel) WEFT_TIMER_SIZES;
BENCHMARK(BM_LazyPriorityQueue_InsertCancel) WEFT_TIMER_SIZES;
BENCHMARK(BM_TimerHeap_InsertPop) WEFT_TIMER_SIZES;
BENCHMARK(BM_LazyPriorityQueue_InsertPop) WEFT_TIMER_SIZES;

}  // namespace
}  // namespace weft
