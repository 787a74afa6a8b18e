// tools/sim_explore_demo.cc: a program with a planted ordering bug, for tools/sim_explore's own
// test (tools/sim_explore_test.sh). Two fibers each read a counter, log the value under a
// Mutex (a park point when the other holds it), and write the value plus one back: a lost update
// that only some interleavings show. Exits 1 if the counter ends below 2. Its runtime is
// simulated, so the seed in WEFT_SIM_SEED decides the interleaving.

#include <cstdio>
#include <vector>

#include "weft/api/weft.h"

int main() {
  weft::Runtime rt({.simulation = weft::SimulationOptions{.seed = 1}});
  const int counter = rt.block_on([&] {
    int value = 0;
    weft::Mutex log_mu;
    std::vector<int> log;
    std::vector<weft::JoinHandle<void>> hs;
    for (int k = 0; k < 2; ++k) {
      hs.push_back(rt.spawn([&] {
        const int seen = value;
        (void)log_mu.lock();
        log.push_back(seen);
        weft::this_fiber::yield();
        (void)log_mu.unlock();
        value = seen + 1;  // the bug: no re-read under the lock
      }));
    }
    for (auto& h : hs) (void)h.join();
    return value;
  });
  std::printf("seed %llu: counter %d\n", static_cast<unsigned long long>(rt.simulation()->seed),
              counter);
  return counter == 2 ? 0 : 1;
}
