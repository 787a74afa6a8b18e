// tools/stuck_worker.cc: how late a 1 ms sleep ends when a fiber on its worker spins without
// switching while another worker is idle (docs/scheduler.md, "A worker stuck in one fiber").
//
//   ./bazelw run -c opt //tools:stuck_worker -- [trials (12)] [spin ms (50)]
//
// Each trial: a fiber records its worker and sleeps 1 ms; a fiber pinned to that worker spins
// for the given time. Prints each trial's lateness (sleep end minus 1 ms) and the median.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "api/weft.h"

int main(int argc, char** argv) {
  using namespace std::chrono;
  const int trials = argc > 1 ? std::max(1, std::atoi(argv[1])) : 12;
  const milliseconds spin(argc > 2 ? std::max(2, std::atoi(argv[2])) : 50);
  weft::Runtime rt({.workers = 2});
  std::vector<double> late_ms;
  for (int t = 0; t < trials; ++t) {
    late_ms.push_back(rt.block_on([&] {
      std::atomic<int> where{-1};
      auto sleeper = rt.spawn([&] {
        where.store(weft::this_fiber::worker_index());
        auto start = steady_clock::now();
        (void)weft::this_fiber::sleep_for(milliseconds(1));
        return duration<double, std::milli>(steady_clock::now() - start).count() - 1.0;
      });
      while (where.load() < 0) weft::this_fiber::yield();
      auto spinner = rt.spawn(
          [&] {
            auto start = steady_clock::now();
            while (steady_clock::now() - start < spin) {
            }
          },
          {.pinned_worker = where.load()});
      double late = *sleeper.join();
      (void)spinner.join();
      return late;
    }));
    std::printf("trial %d: the sleep ended %.3f ms late (spin %lld ms)\n", t, late_ms.back(),
                static_cast<long long>(spin.count()));
  }
  std::sort(late_ms.begin(), late_ms.end());
  std::printf("{\"tool\":\"stuck_worker\",\"trials\":%d,\"spin_ms\":%lld,\"median_late_ms\":%.3f}\n",
              trials, static_cast<long long>(spin.count()), late_ms[late_ms.size() / 2]);
  return 0;
}
