// bench/workload_common.h: what every C++ implementation of the standard workloads
// (../shared/WORKLOADS.md) shares, so that weft and its C++ peers (Boost.Fiber, oneTBB) time,
// repeat and report the same way: command line, malloc settings, RSS, medians and the JSON line.
//
// A JSON line (one per workload):
//   {"runtime":"weft","workload":"spawn_join","n":100000,"workers":2,"ns_per_op":123.4,
//    "wall_ms":12.3,"rss_kb":4567,"samples_ms":[12.1,12.3,...]<,extra fields>}
// wall_ms is the median of samples_ms, the timed runs after one warm-up; bench/compare_runs.py
// uses the samples for its regression test.
#ifndef WEFT_BENCH_WORKLOAD_COMMON_H_
#define WEFT_BENCH_WORKLOAD_COMMON_H_

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "weft/bench/latency.h"

namespace weft::bench {

using Clock = std::chrono::steady_clock;

inline double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

inline long RssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Options {
  int reps = 5;
  unsigned workers = 0;  // 0: the implementation's default (all cores)
  std::string only;      // comma-separated ids ("W1,W4"); empty: all

  bool wants(const char* id) const {
    return only.empty() ||
           ("," + only + ",").find(std::string(",") + id + ",") != std::string::npos;
  }
};

// ParseOptions: --reps N (>= 1), --workers N (0: all cores) and --only W1,W2,... (absl flags,
// defined in workload_common.cc; --help lists them). A bad value exits with a message. `what`:
// the program's one-line description for --help. Returns true (kept for the callers' `if`).
bool ParseOptions(int argc, char** argv, Options* o, const char* what = "");

// Keeps freed memory in the process, the same for every runtime (WORKLOADS.md: a first-touch
// page fault costs ~11 us on these machines and would otherwise dominate spawn-heavy workloads).
inline void KeepFreedMemory() {
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_MMAP_THRESHOLD, INT_MAX);
}

// Runs body() once as a warm-up, then reps times; returns the timed runs' results (ms). With
// WEFT_BENCH_PROGRESS set (bench/run_workloads.sh sets it), each run's time goes to stderr as it
// ends, so a long step shows where it is.
inline std::vector<double> Repeat(const Options& o, const std::function<double()>& body) {
  const bool progress = std::getenv("WEFT_BENCH_PROGRESS") != nullptr;
  std::vector<double> out;
  for (int i = 0; i <= o.reps; ++i) {
    double ms = body();
    if (i > 0) out.push_back(ms);
    if (progress) {
      if (i == 0) {
        std::fprintf(stderr, "    warm-up: %.1f ms\n", ms);
      } else {
        std::fprintf(stderr, "    run %d/%d: %.1f ms\n", i, o.reps, ms);
      }
    }
  }
  return out;
}

// Prints one JSON line; wall_ms is the median of samples. extra is appended verbatim (",\"k\":v").
inline void Emit(const char* runtime, const char* workload, long n, unsigned workers,
                 double ns_per_op, const std::vector<double>& samples,
                 const std::string& extra = "") {
  std::string list;
  for (double s : samples) list += (list.empty() ? "" : ",") + std::to_string(s);
  std::printf(
      "{\"runtime\":\"%s\",\"workload\":\"%s\",\"n\":%ld,\"workers\":%u,\"ns_per_op\":%.2f,"
      "\"wall_ms\":%.3f,\"rss_kb\":%ld,\"samples_ms\":[%s]%s}\n",
      runtime, workload, n, workers, ns_per_op, Median(samples), RssKb(), list.c_str(),
      extra.c_str());
  std::fflush(stdout);
}

// ---- W4 -------------------------------------------------------------------------------------
inline constexpr int kFibN = 30;
inline constexpr std::uint64_t kFibResult = 832040;
inline constexpr double kFibTasks = 1346268;  // calls of fib(30) that spawn (n >= 2): fib(31) - 1

// The plain recursion, W4's baseline. noinline: GCC otherwise turns it half iterative, which no
// spawned version can be.
[[gnu::noinline]] inline std::uint64_t SeqFib(int n) {
  return n < 2 ? static_cast<std::uint64_t>(n) : SeqFib(n - 1) + SeqFib(n - 2);
}

// Emits W4's line from the spawned runs' samples, with the sequential baseline timed here the
// same way ("seq_ms") and the cost per spawned task ("ns_per_task").
inline void EmitFib(const char* runtime, const Options& o, unsigned workers,
                    const std::vector<double>& samples) {
  auto seq = Repeat(o, [] {
    auto start = Clock::now();
    volatile std::uint64_t r = SeqFib(kFibN);
    (void)r;
    return Ms(Clock::now() - start);
  });
  double wall = Median(samples);
  char extra[96];
  std::snprintf(extra, sizeof extra, ",\"seq_ms\":%.3f,\"ns_per_task\":%.2f", Median(seq),
                wall * 1e6 / kFibTasks);
  Emit(runtime, "fib", kFibN, workers, wall * 1e6, samples, extra);
}

// W10's file: 1 GiB at $WEFT_W10_FILE (bench/run_workloads.sh makes it once for every runtime),
// or ${TMPDIR:-/tmp}/weft_w10.dat; made here (zeros) if missing or of another size, then read
// once so that the page cache holds it. Returns the path, or "" if it cannot be made.
inline constexpr std::uint64_t kW10Bytes = std::uint64_t{1} << 30;
std::string W10File();

// W9: 10,000 connections of 100 round trips of 64 bytes, from bench/w9_client in a second
// process. $WEFT_W9_CONNS lowers the count (for a quick run; the JSON line says how many).
inline constexpr int kW9Trips = 100;
inline constexpr int kW9Size = 64;
int W9Conns();

// W9Client: bench/w9_client started with pipes to its stdin and stdout: $WEFT_W9_CLIENT, or
// w9_client beside this program. Raises this process's fd limit for the connections too.
class W9Client {
 public:
  W9Client(int port, int conns);  // exits with a message if it cannot start
  ~W9Client();
  std::string ReadLine();  // "" once the client has exited
  void WriteLine(const std::string& line);

 private:
  int pid_ = -1;
  int to_ = -1;
  std::FILE* from_ = nullptr;
};

// Percentiles: one run's round-trip latency percentiles (W6, W9), in microseconds.
struct Percentiles {
  double p50_us = 0, p99_us = 0, p999_us = 0;
};
Percentiles PercentilesOf(const LatencyHistogram& h);
// LatencyJson: the extra fields ",\"p50_us\":..,\"p99_us\":..,\"p999_us\":.." of a workload's
// line: each the median over the timed runs (`runs` holds the warm-up first, which is dropped).
std::string LatencyJson(const std::vector<Percentiles>& runs);

// EmitTcpEcho: W6's line ("tcp_echo") from its runs' samples and latency percentiles: per
// message, and msgs_per_s.
inline void EmitTcpEcho(const char* runtime, unsigned workers, long messages,
                        const std::vector<double>& samples,
                        const std::vector<Percentiles>& latency) {
  const double wall = Median(samples);
  const double ops = static_cast<double>(messages);
  char extra[64];
  std::snprintf(extra, sizeof extra, ",\"msgs_per_s\":%.0f", ops / (wall / 1000.0));
  Emit(runtime, "tcp_echo", messages, workers, wall * 1e6 / ops, samples,
       extra + LatencyJson(latency));
}

// EmitParkMany: W8's line ("park_many"): the release times as samples, and the RSS per task of
// the first (warm-up) run, whose memory the later runs reuse.
inline void EmitParkMany(const char* runtime, unsigned workers, long tasks,
                         const std::vector<double>& release_ms,
                         const std::vector<double>& rss_kb_per_task) {
  char extra[96];
  std::snprintf(extra, sizeof extra, ",\"release_ms\":%.3f,\"rss_kb_per_task\":%.3f",
                Median(release_ms), rss_kb_per_task.front());
  Emit(runtime, "park_many", tasks, workers, 0, release_ms, extra);
}

// W9WallMs: the wall time of the client's "done WALL_NS MESSAGES BAD P50 P99 P999" line (its
// percentiles into *latency); exits with a message on lost messages.
double W9WallMs(const std::string& done_line, long expected_messages, Percentiles* latency);

// EmitManyConnEcho: W9's line ("many_conn_echo") from its runs' wall times, the RSS per
// connection of the first run (as W8's) and the runs' latency percentiles.
inline void EmitManyConnEcho(const char* runtime, unsigned workers, int conns,
                             const std::vector<double>& samples,
                             const std::vector<double>& rss_kb_per_conn,
                             const std::vector<Percentiles>& latency) {
  const long messages = static_cast<long>(conns) * kW9Trips;
  const double wall = Median(samples);
  char extra[128];
  std::snprintf(extra, sizeof extra, ",\"msgs_per_s\":%.0f,\"rss_kb_per_conn\":%.3f,\"conns\":%d",
                static_cast<double>(messages) / (wall / 1000.0), rss_kb_per_conn.front(), conns);
  Emit(runtime, "many_conn_echo", messages, workers, wall * 1e6 / static_cast<double>(messages),
       samples, extra + LatencyJson(latency));
}

}  // namespace weft::bench

#endif  // WEFT_BENCH_WORKLOAD_COMMON_H_
