// //sync benchmarks on OS threads, baselines in the same binary:
//   BM_ChannelPingPong          two threads bounce a message over two capacity-1 weft channels
//   BM_StdQueuePingPong         the same over two std::mutex + std::condition_variable queues
//   BM_MutexUncontended/...     lock + unlock by one thread: weft::Mutex, std::mutex, absl::Mutex
//   BM_MutexContended/...       two threads increment one counter under the mutex
// Run with: ./bazelw run -c opt //sync:sync_benchmark

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "weft/sync/channel.h"
#include "weft/sync/mutex.h"

namespace weft {
namespace {

void BM_ChannelPingPong(benchmark::State& state) {
  Channel<int> ping(1), pong(1);
  std::thread echo([&] {
    for (;;) {
      Result<int> v = ping.recv();
      if (!v) return;
      (void)pong.send(int(*v));
    }
  });
  for (auto _ : state) {
    (void)ping.send(1);
    benchmark::DoNotOptimize(pong.recv());
  }
  ping.close();
  echo.join();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ChannelPingPong)->UseRealTime();

class StdQueue {
 public:
  void push(int v) {
    {
      std::lock_guard<std::mutex> l(m_);
      q_.push_back(v);
    }
    cv_.notify_one();
  }
  int pop() {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [&] { return !q_.empty(); });
    int v = q_.front();
    q_.pop_front();
    return v;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<int> q_;
};

void BM_StdQueuePingPong(benchmark::State& state) {
  StdQueue ping, pong;
  std::thread echo([&] {
    for (;;) {
      int v = ping.pop();
      if (v < 0) return;
      pong.push(v);
    }
  });
  for (auto _ : state) {
    ping.push(1);
    benchmark::DoNotOptimize(pong.pop());
  }
  ping.push(-1);
  echo.join();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_StdQueuePingPong)->UseRealTime();

template <typename M>
void Lock(M& m) {
  m.lock();
}
template <>
void Lock(Mutex& m) {
  (void)m.lock();
}
template <typename M>
void Unlock(M& m) {
  m.unlock();
}
template <>
void Unlock(Mutex& m) {
  (void)m.unlock();
}
template <>
void Lock(absl::Mutex& m) {
  m.Lock();
}
template <>
void Unlock(absl::Mutex& m) {
  m.Unlock();
}

template <typename M>
void BM_MutexUncontended(benchmark::State& state) {
  M m;
  for (auto _ : state) {
    Lock(m);
    Unlock(m);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_TEMPLATE(BM_MutexUncontended, Mutex);
BENCHMARK_TEMPLATE(BM_MutexUncontended, std::mutex);
BENCHMARK_TEMPLATE(BM_MutexUncontended, absl::Mutex);

template <typename M>
void BM_MutexContended(benchmark::State& state) {
  static M* m;
  static long counter;
  if (state.thread_index() == 0) {
    m = new M;
    counter = 0;
  }
  for (auto _ : state) {
    Lock(*m);
    ++counter;
    Unlock(*m);
  }
  if (state.thread_index() == 0) {
    delete m;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_TEMPLATE(BM_MutexContended, Mutex)->Threads(2)->UseRealTime();
BENCHMARK_TEMPLATE(BM_MutexContended, std::mutex)->Threads(2)->UseRealTime();
BENCHMARK_TEMPLATE(BM_MutexContended, absl::Mutex)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace weft
