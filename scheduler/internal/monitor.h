// scheduler/internal/monitor.h: the runtime's monitor (Go's sysmon, for detection): one thread
// that samples each worker and reports a fiber that has held its worker past
// RuntimeOptions::stuck_threshold without a switch.
//
// Defines (weft::scheduler_internal): Monitor.
//
// What it reads of a worker, relaxed (hints): counters.run, which the worker bumps as each fiber
// starts, and current, the fiber it runs (null in its own loop). A worker whose run count has
// not moved across samples at least a threshold apart, with a fiber current, is stuck in that
// fiber; the switch path pays nothing for this (both are stores it makes anyway). Once no fiber
// has run for 20 ms and every worker sleeps, the monitor parks too, and the first worker to wake
// wakes it (WorkerAwake), so an idle runtime costs it no periodic wake-ups. When every worker
// is stuck, it makes a spare worker serve (Worker::spare; RuntimeOptions::spare_workers).

#ifndef WEFT_SCHEDULER_INTERNAL_MONITOR_H_
#define WEFT_SCHEDULER_INTERNAL_MONITOR_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "weft/base/histogram.h"
#include "weft/scheduler/runtime.h"

namespace weft {
namespace scheduler_internal {

struct Fiber;
struct Worker;

class Monitor {
 public:
  // Starts the thread, which waits for Start before it looks at the workers; throws
  // std::system_error if it cannot.
  explicit Monitor(Runtime::Impl* rt);
  // Start: every worker has set its fields (Worker::cpu_clock); the monitor may read them.
  void Start();
  ~Monitor();  // stops and joins it
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // samples: how many times it has looked at the workers (stats_json's monitor_samples).
  std::uint64_t samples() const { return samples_.load(std::memory_order_relaxed); }
  // long_runs: runs of a fiber seen to last across at least two samples, by how long they were
  // seen to last (ns; a lower bound). run_queue: each busy worker's run-queue length, per sample.
  const LogHistogram& long_runs() const { return long_runs_; }
  const LogHistogram& run_queue() const { return run_queue_; }

  // recent_stuck: the latest reports (at most kRecentStuck, oldest first), each with the time
  // it was made; for the console. Any thread.
  struct StuckEvent {
    StuckFiber fiber;
    std::chrono::system_clock::time_point at;
  };
  static constexpr std::size_t kRecentStuck = 32;
  std::vector<StuckEvent> recent_stuck() const;
  // longest_runs: the fibers whose runs without a switch lasted longest (seen across two
  // samples or more; a lower bound), longest first, one entry per fiber, at most kLongestRuns.
  struct LongRun {
    std::uint64_t fiber_id = 0;
    std::string name;
    std::chrono::nanoseconds longest{0};
  };
  static constexpr std::size_t kLongestRuns = 16;
  std::vector<LongRun> longest_runs() const;

  // WorkerAwake: a worker left its sleep; wakes the monitor if it is parked. Cheap when it is
  // not: a fence and a load, on the path out of a sleep only.
  void WorkerAwake() {
    // seq_cst: the Dekker pair with Loop's parked_ store and its look at the sleepers; either
    // the monitor sees this worker awake, or this sees the monitor parked.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (parked_.load(std::memory_order_relaxed)) Unpark();
  }

 private:
  struct Watch {  // one worker, as the monitor last saw it
    std::uint64_t run = 0;
    std::chrono::steady_clock::time_point since;  // when run was first seen at this value
    bool reported = false;                        // this run of its fiber was reported
    bool held = false;                            // seen running across two samples or more
    // The thread's CPU time at cpu_at, the second sample of the run (-1: not read yet).
    std::int64_t cpu_ns = -1;
    std::chrono::steady_clock::time_point cpu_at;
    // The fiber of a held run (read once it is seen across two samples).
    bool identified = false;
    std::uint64_t fiber_id = 0;
    std::string name;
  };
  // Identify: f's id and name, read safely; false if w has moved on from `run` meanwhile (the
  // identity may then be another fiber's).
  // spawned_at (if not null): where it was spawned.
  bool Identify(const Worker& w, Fiber* f, std::uint64_t run, std::uint64_t* id, std::string* name,
                std::string* spawned_at = nullptr);
  // NoteLongRun: a held run ended, having lasted this long: into the longest runs.
  void NoteLongRun(const Watch& seen, std::chrono::nanoseconds lasted);
  // Holds: whether the fiber itself holds the worker (it computes: the thread had at least half
  // the CPU since cpu_at, or a threshold's worth of it however long that took; or it blocks in
  // the kernel), rather than the system having descheduled the thread (internal/hold.h). False
  // at the sample that read cpu_at (no evidence yet); true when the platform cannot tell.
  bool Holds(const Worker& w, const Watch& seen, std::chrono::steady_clock::time_point now) const;
  void Loop();
  // Sample: looks at every worker once; true if one runs a fiber.
  bool Sample(std::chrono::steady_clock::time_point now);
  void Report(unsigned index, Fiber* f, std::uint64_t run, std::chrono::nanoseconds running_for);
  void DefaultReport(const StuckFiber& s, std::chrono::steady_clock::time_point now);
  // Spares: with every serving worker (the workers and the active spares) stuck, one more
  // spare serves; with fewer stuck than spares serving, the last one to start goes dormant.
  void Spares(unsigned stuck, std::chrono::steady_clock::time_point now);
  void Hint();  // the deadlock hint (RuntimeOptions::deadlock_hint_after)
  void Unpark();

  Runtime::Impl* const rt_;
  const std::chrono::microseconds threshold_;
  const std::chrono::microseconds period_;
  const std::chrono::milliseconds hint_after_;
  std::vector<Watch> watch_;  // the monitor thread's
  bool hinted_ = false;       // this idle spell's deadlock hint was given (the monitor thread's)
  std::vector<Worker*> active_spares_;  // in the order they became active (the monitor thread's)
  // After a spare could not start (no thread, no reactor): not again before this, and said on
  // stderr once (the monitor thread's).
  std::chrono::steady_clock::time_point spare_retry_at_{};
  bool spare_warned_ = false;
  // The default report's rate limit (the monitor thread's).
  std::chrono::steady_clock::time_point last_line_{};
  std::uint64_t skipped_lines_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;      // guarded by mu_
  bool started_ = false;   // guarded by mu_
  bool unparked_ = false;  // guarded by mu_
  std::atomic<bool> parked_{false};
  mutable std::mutex recent_mu_;
  std::deque<StuckEvent> recent_;          // guarded by recent_mu_
  std::vector<LongRun> longest_;           // guarded by recent_mu_, longest first
  std::atomic<std::uint64_t> samples_{0};  // written by the monitor thread only
  LogHistogram long_runs_, run_queue_;     // written by the monitor thread only
  std::thread thread_;
};

}  // namespace scheduler_internal
}  // namespace weft

#endif  // WEFT_SCHEDULER_INTERNAL_MONITOR_H_
