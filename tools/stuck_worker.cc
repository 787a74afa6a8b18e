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
//   ./bazelw run -c opt //tools:stuck_worker -- --held [--workers 1] [--spin_ms 200]
//         [--spare_workers N] [--baseline]
//     500 fibers sleep 1 ms in a loop and 250 echo pairs (500 fibers; --fibers N: N/2 and N/4)
//     send 64 bytes back and forth over socket pairs; then one fiber per worker spins for
//     --spin_ms, holding every worker at once. Prints the p50, p99 and max of the sleeps' lateness
//     and of the echo round trips that overlapped the spin, and how many (a spare worker serves
//     them; with
//     --spare_workers 0, nothing does). --baseline: the same, with the holders sleeping instead.
//   ./bazelw run -c opt //tools:stuck_worker -- --tick_us <us>
//     One fiber sleeps <us> microseconds in a loop for 2 s: prints the process's CPU time and
//     each worker's sleeps and runs (what watching a busy worker's timers costs the idle one).

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "weft/api/weft.h"
#include "weft/base/command_line.h"
#include "weft/base/stress_scale.h"

ABSL_FLAG(int, trials, 0, "trials (default: 12; 6 with --run_next)");
ABSL_FLAG(int, spin_ms, 0, "how long the pinned fiber spins, >= 2 (default: 50; 200 with --held)");
ABSL_FLAG(bool, run_next, false, "measure a wake-up into a spinning worker's run_next slot");
ABSL_FLAG(int, tick_us, 0, "instead: one fiber sleeps this many microseconds in a loop for 2 s");
ABSL_FLAG(bool, held, false, "instead: sleeps and echoes while every worker is held");
ABSL_FLAG(int, workers, 1, "with --held: the runtime's workers (1..64)");
ABSL_FLAG(int, fibers, 1000, "with --held: half sleep, half echo in pairs (4..100000)");
ABSL_FLAG(bool, baseline, false,
          "with --held: the holders sleep instead (the same window, unheld)");
ABSL_FLAG(int, spare_workers, -1, "with --held: RuntimeOptions::spare_workers (-1: unset)");

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

// Held: see the file comment. Latencies in microseconds, recorded by each fiber into its own
// vector (only those that ended inside the spin's window are kept).
int Held(unsigned workers, milliseconds spin, int spare_workers, bool baseline, int count) {
  weft::RuntimeOptions options{.workers = workers, .on_stuck = [](const weft::StuckFiber&) {}};
  if (spare_workers >= 0) options.spare_workers = static_cast<unsigned>(spare_workers);
  weft::Runtime rt(options);
  const int kSleepers = count / 2, kPairs = count / 4;
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> window_from{0}, window_to{0};  // steady_clock ticks
  // A sample counts if it overlaps the spin: it ended after the spin began and began before the
  // spin ended (a wait held up by the spin ends after it, and counts).
  auto in_window = [&](steady_clock::time_point start, steady_clock::time_point end) {
    const std::int64_t from = window_from.load(), to = window_to.load();
    return from != 0 && end.time_since_epoch().count() >= from &&
           (to == 0 || start.time_since_epoch().count() <= to);
  };
  std::vector<std::vector<double>> sleep_late(kSleepers), echo_rtt(kPairs);
  std::vector<weft::JoinHandle<void>> fibers;
  for (int i = 0; i < kSleepers; ++i) {
    fibers.push_back(rt.spawn([&, i] {
      while (!stop.load()) {
        auto start = steady_clock::now();
        (void)weft::this_fiber::sleep_for(milliseconds(1));
        auto end = steady_clock::now();
        if (in_window(start, end)) {
          sleep_late[i].push_back(duration<double, std::micro>(end - start).count() - 1000.0);
        }
      }
    }));
  }
  std::vector<int> fds;
  for (int p = 0; p < kPairs; ++p) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
      std::perror("socketpair");
      return 1;
    }
    fds.insert(fds.end(), {sv[0], sv[1]});
    fibers.push_back(rt.spawn([&, p, fd = sv[0]] {
      char buf[64] = {};
      while (!stop.load()) {
        auto start = steady_clock::now();
        if (!weft::io::write_all(fd, buf, sizeof buf).ok() ||
            !weft::io::read_exact(fd, buf, sizeof buf).ok()) {
          return;
        }
        auto end = steady_clock::now();
        if (in_window(start, end))
          echo_rtt[p].push_back(duration<double, std::micro>(end - start).count());
      }
      ::shutdown(fd, SHUT_WR);  // the server's read ends
    }));
    fibers.push_back(rt.spawn([fd = sv[1]] {
      char buf[64];
      while (weft::io::read_exact(fd, buf, sizeof buf).ok() &&
             weft::io::write_all(fd, buf, sizeof buf).ok()) {
      }
    }));
  }
  std::this_thread::sleep_for(milliseconds(200));  // warm: every fiber has run a while
  std::vector<weft::JoinHandle<void>> holders;
  std::atomic<unsigned> holding{0};
  for (unsigned k = 0; k < workers; ++k) {
    holders.push_back(rt.spawn(
        [&] {
          holding.fetch_add(1);
          while (holding.load() < workers) {
          }
          auto start = steady_clock::now();
          std::int64_t expected = 0;
          window_from.compare_exchange_strong(expected, start.time_since_epoch().count());
          if (baseline) {
            (void)weft::this_fiber::sleep_for(spin);
          } else {
            while (steady_clock::now() - start < spin) {
            }
          }
        },
        {.pinned_worker = static_cast<int>(k)}));
  }
  for (auto& h : holders) (void)h.join();
  window_to.store(steady_clock::now().time_since_epoch().count());
  std::this_thread::sleep_for(milliseconds(100));  // waits the spin held up end meanwhile
  stop.store(true);
  for (auto& h : fibers) (void)h.join();
  for (int fd : fds) ::close(fd);
  auto summary = [](const char* what, const std::vector<std::vector<double>>& per_fiber) {
    std::vector<double> all;
    for (const auto& v : per_fiber) all.insert(all.end(), v.begin(), v.end());
    std::sort(all.begin(), all.end());
    char buf[256];
    if (all.empty()) {
      std::snprintf(buf, sizeof buf, "\"%s\":{\"n\":0}", what);
    } else {
      std::snprintf(buf, sizeof buf,
                    "\"%s\":{\"n\":%zu,\"p50_us\":%.0f,\"p99_us\":%.0f,\"max_us\":%.0f}", what,
                    all.size(), all[all.size() / 2], all[all.size() * 99 / 100], all.back());
    }
    return std::string(buf);
  };
  std::printf(
      "{\"tool\":\"stuck_worker\",\"held\":%s,\"workers\":%u,\"spare_workers\":%d,"
      "\"fibers\":%d,\"spin_ms\":%lld,%s,%s}\n",
      baseline ? "false" : "true", workers, spare_workers, count,
      static_cast<long long>(spin.count()), summary("sleep_late", sleep_late).c_str(),
      summary("echo_rtt", echo_rtt).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using weft::base_internal::UsageError;
  weft::base_internal::ParseCommandLine(
      argc, argv,
      "how late timers end beside a worker held by a spinning fiber (docs/scheduler.md):\n"
      "  stuck_worker [--trials 12] [--spin_ms 50] | --run_next [--trials 6] | --tick_us US |\n"
      "  --held [--workers 1] [--spin_ms 200] [--spare_workers N] [--baseline]\n"
      "  [--fibers 1000]");
  const int trials = absl::GetFlag(FLAGS_trials);
  const int spin_ms = absl::GetFlag(FLAGS_spin_ms);
  const int tick_us = absl::GetFlag(FLAGS_tick_us);
  if (trials < 0 || trials > 100000) UsageError("--trials must be 1..100000");
  if (spin_ms != 0 && (spin_ms < 2 || spin_ms > 600000)) UsageError("--spin_ms must be 2..600000");
  if (tick_us < 0) UsageError("--tick_us must be positive");
  if (tick_us > 0) return Tick(microseconds(tick_us));
  if (absl::GetFlag(FLAGS_held)) {
    const int workers = absl::GetFlag(FLAGS_workers);
    const int spares = absl::GetFlag(FLAGS_spare_workers);
    const int fibers = absl::GetFlag(FLAGS_fibers);
    if (workers < 1 || workers > 64) UsageError("--workers must be 1..64");
    if (fibers < 4 || fibers > 100000) UsageError("--fibers must be 4..100000");
    if (spares < -1 || spares > 64) UsageError("--spare_workers must be -1..64");
    return Held(static_cast<unsigned>(workers), milliseconds(spin_ms != 0 ? spin_ms : 200), spares,
                absl::GetFlag(FLAGS_baseline), fibers);
  }
  if (absl::GetFlag(FLAGS_run_next)) return RunNext(trials > 0 ? trials : 6);
  return Spin(trials > 0 ? trials : 12, milliseconds(spin_ms != 0 ? spin_ms : 50));
}
