// tools/stuck_worker.cc: diagnostics for timers beside a busy worker (docs/scheduler.md, "A
// worker stuck in one fiber").
//
//   ./bazelw run -c opt //tools:stuck_worker -- [--trials 12] [--spin_ms 50]
//     Each trial: a fiber records its worker and sleeps 1 ms; a fiber pinned to that worker
//     spins for the given time. Prints each trial's lateness (sleep end minus 1 ms) and the
//     median.
//   ./bazelw run -c opt //tools:stuck_worker -- --run_next [--trials 6]
//     A fiber sends to a parked receiver on a channel (the receiver goes to the sender's run_next
//     slot) and then spins for 50 ms: prints how long after the send the receiver ran. The slot
//     is not stealable, so this is the spin's length (docs/scheduler.md).
//   ./bazelw run -c opt //tools:stuck_worker -- --tick_us <us>
//     One fiber sleeps <us> microseconds in a loop for 2 s: prints the process's CPU time and
//     each worker's sleeps and runs (what watching a busy worker's timers costs the idle one).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "weft/api/weft.h"
#include "weft/base/command_line.h"
#include "weft/base/stress_scale.h"

ABSL_FLAG(int, trials, 0, "trials (default: 12; 6 with --run_next)");
ABSL_FLAG(int, spin_ms, 50, "how long the pinned fiber spins (>= 2)");
ABSL_FLAG(bool, run_next, false, "measure a wake-up into a spinning worker's run_next slot");
ABSL_FLAG(int, tick_us, 0, "instead: one fiber sleeps this many microseconds in a loop for 2 s");

namespace {

using namespace std::chrono;

using ::weft::testing::ProcessCpuSeconds;

int Tick(microseconds period) {
  weft::Runtime rt({.workers = 2});
  double cpu = ProcessCpuSeconds();
  auto start = steady_clock::now();
  rt.block_on([&] {
    auto ticker = rt.spawn([&] {
      while (steady_clock::now() - start < seconds(2)) (void)weft::this_fiber::sleep_for(period);
    });
    (void)ticker.join();
  });
  cpu = ProcessCpuSeconds() - cpu;
  std::printf("{\"tool\":\"stuck_worker\",\"tick_us\":%lld,\"cpu_s\":%.3f,\"stats\":%s}\n",
              static_cast<long long>(period.count()), cpu, rt.stats_json().c_str());
  return 0;
}

int RunNext(int trials) {
  weft::Runtime rt({.workers = 2});
  for (int t = 0; t < trials; ++t) {
    double after_ms = rt.block_on([&] {
      weft::Channel<int> ch(1);
      std::atomic<bool> receiving{false};
      steady_clock::time_point sent;
      auto receiver = rt.spawn([&] {
        receiving.store(true);
        (void)ch.recv();
        return duration<double, std::milli>(steady_clock::now() - sent).count();
      });
      while (!receiving.load()) weft::this_fiber::yield();
      (void)weft::this_fiber::sleep_for(milliseconds(2));  // the receiver parks meanwhile
      auto sender = rt.spawn([&] {
        sent = steady_clock::now();
        (void)ch.send(1);
        while (steady_clock::now() - sent < milliseconds(50)) {
        }
      });
      double ms = *receiver.join();
      (void)sender.join();
      return ms;
    });
    std::printf("trial %d: the receiver ran %.3f ms after the send\n", t, after_ms);
  }
  return 0;
}

int Spin(int trials, milliseconds spin) {
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
  std::printf(
      "{\"tool\":\"stuck_worker\",\"trials\":%d,\"spin_ms\":%lld,\"median_late_ms\":%.3f}\n",
      trials, static_cast<long long>(spin.count()), late_ms[late_ms.size() / 2]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using weft::base_internal::UsageError;
  weft::base_internal::ParseCommandLine(
      argc, argv,
      "how late timers end beside a worker held by a spinning fiber (docs/scheduler.md):\n"
      "  stuck_worker [--trials 12] [--spin_ms 50] | --run_next [--trials 6] | --tick_us US");
  const int trials = absl::GetFlag(FLAGS_trials);
  const int spin_ms = absl::GetFlag(FLAGS_spin_ms);
  const int tick_us = absl::GetFlag(FLAGS_tick_us);
  if (trials < 0 || trials > 100000) UsageError("--trials must be 1..100000");
  if (spin_ms < 2 || spin_ms > 600000) UsageError("--spin_ms must be 2..600000");
  if (tick_us < 0) UsageError("--tick_us must be positive");
  if (tick_us > 0) return Tick(microseconds(tick_us));
  if (absl::GetFlag(FLAGS_run_next)) return RunNext(trials > 0 ? trials : 6);
  return Spin(trials > 0 ? trials : 12, milliseconds(spin_ms));
}
