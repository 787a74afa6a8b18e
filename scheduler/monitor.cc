// scheduler/monitor.cc: the runtime's monitor thread (internal/monitor.h): samples each worker,
// reports a fiber that holds its worker past the threshold, and parks while every worker sleeps.

#include "internal/monitor.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

#include "internal/hold.h"
#include "internal/runtime_impl.h"

#if defined(__linux__)
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#endif

namespace weft {
namespace scheduler_internal {

void ThreadClock::SetToCallingThread() {
#if defined(__linux__)
  tid = pthread_getcpuclockid(pthread_self(), &clock) == 0 ? static_cast<int>(::syscall(SYS_gettid))
                                                           : -1;
#endif
}

std::int64_t ThreadClock::cpu_ns() const {
#if defined(__linux__)
  timespec ts;
  if (tid < 0 || ::clock_gettime(clock, &ts) != 0) return -1;  // EINVAL once the thread is gone
  return std::int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
#else
  return -1;
#endif
}

std::optional<bool> ThreadClock::runnable() const {
#if defined(__linux__)
  if (tid < 0) return std::nullopt;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  // "tid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'.
  const char* end = std::strrchr(buf, ')');
  if (end == nullptr || end[1] != ' ' || end[2] == '\0') return std::nullopt;
  return end[2] == 'R';
#else
  return std::nullopt;
#endif
}

namespace {
using MonitorClock = std::chrono::steady_clock;

// Period: two samples per threshold, so a stuck spell is seen at most half a threshold late;
// never more often than every 500 us, nor less often than every 10 ms.
std::chrono::microseconds PeriodFor(std::chrono::microseconds threshold) {
  return std::clamp(threshold / 2, std::chrono::microseconds(500),
                    std::chrono::microseconds(10000));
}

// kParkAfter: how long no sample may have seen a fiber run before the monitor parks (when every
// worker sleeps). Workers that sleep between short bursts (a timer-driven load: W5's sleeps)
// would otherwise wake it, through a futex, at every burst; a worker's safety-net wake-up in an
// idle runtime costs it one sample.
constexpr std::chrono::milliseconds kParkAfter{20};
}  // namespace

Monitor::Monitor(Runtime::Impl* rt)
    : rt_(rt),
      threshold_(rt->options.stuck_threshold),
      period_(PeriodFor(rt->options.stuck_threshold)),
      hint_after_(rt->options.deadlock_hint_after),
      watch_(rt->workers.size()),
      thread_([this] { Loop(); }) {}

Monitor::~Monitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void Monitor::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
  }
  cv_.notify_one();
}

void Monitor::Unpark() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    unparked_ = true;
  }
  cv_.notify_one();
}

void Monitor::Loop() {
  const int workers = static_cast<int>(rt_->nworkers);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stop_ || started_; });
  MonitorClock::time_point last_busy = MonitorClock::now();  // a sample last saw a fiber run
  while (!stop_) {
    lock.unlock();
    const MonitorClock::time_point now = MonitorClock::now();
    const bool running = Sample(now);
    bool park = false;
    if (running) {
      last_busy = now;
      hinted_ = false;  // a new spell may be hinted again
    } else if (now - last_busy >= kParkAfter && active_spares_.empty() &&
               rt_->idle.sleepers() == workers) {
      // Park while every worker sleeps: announce it, then look again (the Dekker pair with
      // WorkerAwake). seq_cst: the store is ordered before the load of the sleeper count.
      parked_.store(true, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      park = rt_->idle.sleepers() == workers;
      if (!park) parked_.store(false, std::memory_order_relaxed);
    }
    // A deadlock suspected: parked for deadlock_hint_after only; if no worker has woken by then
    // and it is still so, the hint (once per spell), then back to the loop, which parks for good.
    const bool suspect = park && hint_after_ > std::chrono::milliseconds::zero() && !hinted_ &&
                         rt_->DeadlockSuspected();
    lock.lock();
    if (!park) {
      cv_.wait_for(lock, period_, [&] { return stop_; });
      continue;
    }
    const auto woken = [&] { return stop_ || unparked_; };
    const bool timed_out =
        suspect ? !cv_.wait_for(lock, hint_after_, woken) : (cv_.wait(lock, woken), false);
    unparked_ = false;
    parked_.store(false, std::memory_order_relaxed);
    if (timed_out) {
      lock.unlock();
      if (rt_->DeadlockSuspected()) {
        hinted_ = true;
        Hint();
      }
      lock.lock();
    }
  }
}

bool Monitor::Sample(MonitorClock::time_point now) {
  // relaxed: a count for stats_json, one writer.
  samples_.store(samples_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  bool running = false;
  unsigned stuck = 0;  // serving workers (not dormant spares) holding a reported fiber
  unsigned held = 0;   // every worker holding one
  for (std::size_t i = 0; i < watch_.size(); ++i) {
    Worker& w = *rt_->workers[i];
    // acquire: its thread's fields (cpu_clock) were set before (a spare's thread starts late).
    if (w.spare && !w.ready.load(std::memory_order_acquire)) continue;
    Watch& seen = watch_[i];
    const bool serving = !w.spare || w.active.load(std::memory_order_relaxed);
    // relaxed (both): hints. A run count that moved means a fiber started since the last look;
    // a fiber seen current with the same count has run at least since `since`.
    const std::uint64_t run = w.counters.run.load(std::memory_order_relaxed);
    Fiber* f = w.current;
    if (f != nullptr) run_queue_.record(w.queue.size_approx());
    if (run != seen.run || f == nullptr) {
      if (seen.reported) w.held = false;
      // The run seen last time ended (or none was on); a long one goes to the histogram, and
      // to its fiber's longest.
      if (seen.held) {
        const auto lasted = std::chrono::duration_cast<std::chrono::nanoseconds>(now - seen.since);
        long_runs_.record(static_cast<std::uint64_t>(lasted.count()));
        NoteLongRun(seen, lasted);
      }
      seen = Watch{run, now};
      running = running || f != nullptr;
      continue;
    }
    running = true;
    if (w.in_fork_join) {  // computing as asked (Runtime::fork_join); its tasks are stolen
      if (seen.reported) w.held = false;
      seen = Watch{run, now};
      continue;
    }
    if (!seen.held) {
      seen.held = true;
      // Its identity, once per long run (for the longest runs; the console's "runs").
      seen.identified = Identify(w, f, run, &seen.fiber_id, &seen.name);
    }
    if (!seen.reported) {
      if (seen.cpu_ns < 0) {
        seen.cpu_ns = w.cpu_clock.cpu_ns();
        seen.cpu_at = now;
      }
      if (now - seen.since < threshold_ || !Holds(w, seen, now)) continue;
      seen.reported = true;  // once per run of a fiber
      w.held = true;
      Report(static_cast<unsigned>(i), f, run, now - seen.since);
    }
    ++held;
    if (serving) ++stuck;
  }
  // relaxed: a hint for the workers' fairness passes (Worker::held).
  rt_->held_workers.store(held, std::memory_order_relaxed);
  Spares(stuck, now);
  return running;
}

void Monitor::Spares(unsigned stuck, MonitorClock::time_point now) {
  const std::size_t serving = rt_->nworkers + active_spares_.size();
  if (stuck == serving && now >= spare_retry_at_) {
    for (std::size_t i = rt_->nworkers; i < rt_->workers.size(); ++i) {
      Worker& w = *rt_->workers[i];
      if (w.active.load(std::memory_order_relaxed)) continue;
      if (!rt_->SetSpareActive(w, true)) {
        // Out of threads or fds (or shutting down): the stuck workers' fibers wait, as without
        // spares, until a later try succeeds.
        spare_retry_at_ = now + std::chrono::seconds(1);
        if (!spare_warned_ && !rt_->shutting_down.load(std::memory_order_relaxed)) {
          spare_warned_ = true;
          std::fputs(
              "weft: a spare worker could not start (no thread or no reactor); fibers "
              "queued behind stuck workers wait for them (tried again each second)\n",
              stderr);
        }
        return;
      }
      active_spares_.push_back(&w);
      return;
    }
  } else if (active_spares_.size() > stuck) {
    rt_->SetSpareActive(*active_spares_.back(), false);
    active_spares_.pop_back();
  }
}

bool Monitor::Holds(const Worker& w, const Watch& seen, MonitorClock::time_point now) const {
  if (seen.cpu_ns < 0) return true;  // the platform cannot tell
  const std::int64_t cpu = w.cpu_clock.cpu_ns();
  if (cpu < 0) return true;
  const std::int64_t wall = std::chrono::nanoseconds(now - seen.cpu_at).count();
  switch (JudgeCpu(cpu - seen.cpu_ns, wall, std::chrono::nanoseconds(threshold_).count())) {
    case CpuEvidence::kNone:
      return false;  // read first at this sample: look again at the next
    case CpuEvidence::kComputes:
      return true;
    case CpuEvidence::kLittle:
      break;
  }
  // Blocked in the kernel (a blocking call: the fiber's doing), or runnable and waiting for a
  // CPU the system gave to other threads (not the fiber's doing: look again later).
  return w.cpu_clock.runnable() != std::optional<bool>(true);
}

void Monitor::Hint() { rt_->DeadlockHint(); }

bool Monitor::Identify(const Worker& w, Fiber* f, std::uint64_t run, std::uint64_t* id,
                       std::string* name, std::string* spawned_at) {
  // The Fiber object outlives the runtime (blocks are retired, never freed): reading it is safe
  // even if it has finished since. fibers_mu, under which its block was listed after it was
  // made, orders the making before this read (current, read relaxed, does not); its identity is
  // read under the lock spawn writes it under, as dump_fibers does.
  {
    std::lock_guard<std::mutex> listed(rt_->fibers_mu);
    f->meta_lock.lock();
    *id = f->id();
    name->assign(f->name());
    const std::source_location site = f->spawn_site;
    f->meta_lock.unlock();
    if (spawned_at != nullptr) *spawned_at = SpawnSite(site);
  }
  // relaxed: as in Sample. If the worker moved on meanwhile, the identity may be another
  // fiber's.
  return w.counters.run.load(std::memory_order_relaxed) == run;
}

void Monitor::NoteLongRun(const Watch& seen, std::chrono::nanoseconds lasted) {
  if (!seen.identified) return;
  std::lock_guard<std::mutex> lock(recent_mu_);
  auto it = std::find_if(longest_.begin(), longest_.end(),
                         [&](const LongRun& r) { return r.fiber_id == seen.fiber_id; });
  if (it != longest_.end()) {
    if (lasted <= it->longest) return;
    it->longest = lasted;
  } else if (longest_.size() < kLongestRuns) {
    longest_.push_back({seen.fiber_id, seen.name, lasted});
  } else if (lasted > longest_.back().longest) {
    longest_.back() = {seen.fiber_id, seen.name, lasted};
  } else {
    return;
  }
  std::sort(longest_.begin(), longest_.end(),
            [](const LongRun& a, const LongRun& b) { return a.longest > b.longest; });
}

std::vector<Monitor::LongRun> Monitor::longest_runs() const {
  std::lock_guard<std::mutex> lock(recent_mu_);
  return longest_;
}

void Monitor::Report(unsigned index, Fiber* f, std::uint64_t run,
                     std::chrono::nanoseconds running_for) {
  Worker& w = *rt_->workers[index];
  StuckFiber s;
  // The spell ended meanwhile: no report.
  if (!Identify(w, f, run, &s.fiber_id, &s.name, &s.spawned_at)) return;
  s.worker = index;
  s.running_for = running_for;
  s.queued = w.queue.size_approx();
  Bump(w.counters.stuck);  // the monitor is its only writer
  {
    std::lock_guard<std::mutex> lock(recent_mu_);
    if (recent_.size() == kRecentStuck) recent_.pop_front();
    recent_.push_back({s, std::chrono::system_clock::now()});
  }
  if (rt_->options.on_stuck) {
    try {
      rt_->options.on_stuck(s);
    } catch (...) {  // as in Hint
      std::fputs("weft: on_stuck threw; ignored\n", stderr);
    }
  } else {
    DefaultReport(s, MonitorClock::now());
  }
}

std::vector<Monitor::StuckEvent> Monitor::recent_stuck() const {
  std::lock_guard<std::mutex> lock(recent_mu_);
  return {recent_.begin(), recent_.end()};
}

void Monitor::DefaultReport(const StuckFiber& s, MonitorClock::time_point now) {
  if (last_line_ != MonitorClock::time_point{} && now - last_line_ < std::chrono::seconds(1)) {
    ++skipped_lines_;
    return;
  }
  last_line_ = now;
  const double ms = std::chrono::duration<double, std::milli>(s.running_for).count();
  char skipped[64] = "";
  if (skipped_lines_ != 0) {
    std::snprintf(skipped, sizeof skipped, " (%" PRIu64 " more skipped)", skipped_lines_);
    skipped_lines_ = 0;
  }
  std::fprintf(stderr,
               "weft: fiber %" PRIu64
               " \"%s\" (spawned at %s) has run for %.1f ms on worker %u without a switch"
               " (%zu fibers queued there); a long computation, or a blocking call outside "
               "call_blocking?%s\n",
               s.fiber_id, s.name.c_str(), s.spawned_at.c_str(), ms, s.worker, s.queued, skipped);
}

}  // namespace scheduler_internal

void Runtime::Impl::DeadlockHint() {
  std::string dump =
      "weft: every fiber of the runtime is parked, with no timer, no I/O and nothing runnable, "
      "while a thread waits in block_on: a deadlock? Its fibers:\n";
  dump += self->dump_fibers();
  if (options.on_deadlock_hint) {
    try {
      options.on_deadlock_hint(dump);
    } catch (...) {  // the caller goes on; the runtime is not the callback's to end
      std::fputs("weft: on_deadlock_hint threw; ignored\n", stderr);
    }
  } else {
    std::fputs(dump.c_str(), stderr);
  }
}

bool Runtime::Impl::DeadlockSuspected() {
  // relaxed throughout: hints; a deadlock holds still, and the monitor looks twice.
  if (block_on_waiters.load(std::memory_order_relaxed) == 0) return false;
  if (idle.sleepers() < static_cast<int>(nworkers)) return false;
  if (inject.size_approx() != 0 || overflow_size.load(std::memory_order_relaxed) != 0) return false;
  std::int64_t live = credits.load(std::memory_order_relaxed);
  for (const auto& w : workers) {
    if (w->timer_head.load(std::memory_order_relaxed) != scheduler_internal::kNoTimer ||
        !w->queue.empty_approx() || w->has_mail.load(std::memory_order_relaxed)) {
      return false;
    }
    live -= w->credits.load(std::memory_order_relaxed);
  }
  if (live <= 0) return false;
  // Every live fiber parked, none on I/O (its fd's readiness may come) nor in a blocking region.
  bool parked_only = true, any = false;
  std::lock_guard<std::mutex> lock(fibers_mu);
  ForEachFiberLocked([&](Fiber* f) {
    const int state = f->state.load(std::memory_order_relaxed);
    if (state == scheduler_internal::kDone) return;
    any = true;
    if (state != scheduler_internal::kParked ||
        f->waiter.wait_fd.load(std::memory_order_relaxed) >= 0 ||
        f->region_waiting.load(std::memory_order_relaxed)) {
      parked_only = false;
    }
  });
  return any && parked_only;
}

}  // namespace weft
