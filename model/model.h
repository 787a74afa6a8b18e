// model/model.h: weft's model checker. It runs a test body's threads as fibers on one OS thread
// and chooses, at every atomic operation, which one runs next and which store a load reads, so
// that a protocol race (a window between two atomic steps) shows up as a failing schedule with a
// readable trace, every time, instead of once in a million stress runs.
//
// Defines: weft::model::check, Options, Report, thread, Cell, yield, fail, WEFT_MODEL_ASSERT.
//
//   #include "weft/model/model.h"
//   TEST(MyLock, NoLostWakeup) {
//     weft::model::Report r = weft::model::check([] {
//       MyLock lock;
//       weft::model::Cell<int> counter(0);  // plain data: races on it are reported
//       weft::model::thread t([&] { lock.lock(); counter.set(counter.get() + 1); lock.unlock(); });
//       lock.lock(); counter.set(counter.get() + 1); lock.unlock();
//       t.join();
//       WEFT_MODEL_ASSERT(counter.get() == 2);
//     });
//     EXPECT_TRUE(r.ok) << r;
//   }
//
// What is explored: the code's atomics must be weft::atomic<T> / weft::atomic_fence
// (base/atomic.h) and the build must define WEFT_MODEL (`--config=model`); blocking goes through
// weft's Waiter seam (sync/waiter.h: every weft::Mutex, CondVar, Channel... wait), spinning
// through weft::CpuRelax. std::atomic, std::mutex and system calls are invisible to the checker:
// they run, but are not scheduling points. Each body must be deterministic apart from what the
// checker decides (no real time, no randomness of its own); the checker reports it when not.
// The memory model, and what is not modelled, are in docs/model.md.
//
// Not thread-safe: one check() at a time per OS thread; the body and its threads run on the
// calling thread.

#ifndef WEFT_MODEL_MODEL_H_
#define WEFT_MODEL_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <source_location>
#include <string>

namespace weft::model {

// kMaxThreads: model threads per schedule, the body's included.
inline constexpr int kMaxThreads = 8;

// Options: what check() explores. Every field can be raised from the environment for deeper
// runs (Options::FromEnvironment): WEFT_MODEL_PREEMPTIONS, WEFT_MODEL_STALE_READS,
// WEFT_MODEL_RANDOM_SCHEDULES, WEFT_MODEL_SEED, WEFT_MODEL_MAX_SCHEDULES, WEFT_MODEL_REPLAY.
struct Options {
  // preemption_bound: the exhaustive search covers every schedule in which a thread that could
  // have gone on is switched away from at most this many times (switches at a block, a spin or
  // a thread's end are free). Most protocol races need 1 or 2 (Musuvathi and Qadeer, "Iterative
  // Context Bounding for Systematic Testing of Multithreaded Programs", PLDI 2007).
  int preemption_bound = 2;
  // stale_reads: how many loads per schedule may read a store older than the newest one the
  // memory model allows them to read (each such load is a choice explored like a switch).
  int stale_reads = 1;
  // exhaustive: run the bounded exhaustive search (depth-first over the choices).
  bool exhaustive = true;
  // max_schedules: stop the exhaustive search after this many schedules (0: no limit); the
  // report then says the space was not exhausted.
  std::uint64_t max_schedules = 0;
  // random_schedules: then run this many seeded random schedules, with no preemption bound
  // (for bodies too large to exhaust). Schedule i uses seed + i.
  std::uint64_t random_schedules = 0;
  std::uint64_t seed = 1;
  // max_steps: scheduling points per schedule; more is reported as a livelock.
  std::uint64_t max_steps = 100000;
  // replay: a schedule id from a failing report: run that one schedule only.
  std::string replay;
  // stack_size: each model thread's stack.
  std::size_t stack_size = std::size_t{256} << 10;

  // FromEnvironment: these options with the WEFT_MODEL_* variables above applied (bounds and
  // counts are raised, never lowered, so a test's own settings stay the minimum).
  Options FromEnvironment() const;
};

// Report: what check() found.
struct Report {
  bool ok = true;
  std::uint64_t schedules = 0;  // schedules run
  bool exhausted = false;       // the exhaustive search covered its whole bounded space
  double seconds = 0;
  // On failure: what went wrong ("deadlock: ...", "assertion failed: ...", "data race: ...",
  // "livelock: ..."), the failing schedule's id (Options::replay runs it again), and its trace:
  // one line per scheduling point, "thread  operation  value  order  function file:line".
  std::string failure;
  std::string schedule;
  std::string trace;
};
std::ostream& operator<<(std::ostream& os, const Report& report);

// check: explores `body` (model thread 0) and the threads it starts. Returns at the first
// failing schedule, or when the exploration is done. Options::FromEnvironment() is applied.
Report check(const std::function<void()>& body, const Options& options = {});

// thread: a model thread; only inside check()'s body (or a model thread). Must be joined.
class thread {
 public:
  explicit thread(std::function<void()> fn);
  ~thread();
  thread(const thread&) = delete;
  thread& operator=(const thread&) = delete;
  // join: waits for the thread to finish; what it did happens before join returns.
  void join();

 private:
  int id_;
  bool joined_ = false;
};

// yield: in a retry loop (a full queue, a flag not yet set), lets the other model threads run
// until one of them writes something: the checker's weft::CpuRelax. Outside check(), returns.
void yield();

// fail: fails the running schedule with `message` (the report carries it and the trace).
// Returns only when no check() runs on this thread (it then aborts with the message).
void fail(const std::string& message,
          const std::source_location& site = std::source_location::current());

// WEFT_MODEL_ASSERT: fails the schedule when `cond` is false.
#define WEFT_MODEL_ASSERT(cond)                                   \
  do {                                                            \
    if (!(cond)) ::weft::model::fail("assertion failed: " #cond); \
  } while (0)

namespace model_internal {
// CellRead / CellWrite: a plain access to the Cell at `addr`; a data race (an access not ordered
// by happens-before with a conflicting one) fails the schedule.
void CellRead(const void* addr, const std::source_location& site);
void CellWrite(const void* addr, const std::source_location& site);
void CellDestroy(const void* addr);
}  // namespace model_internal

// Cell: plain (non-atomic) data shared between model threads, checked for data races: every
// write must happen-before (through the protocol's atomics and waits) every later access from
// another thread, as loom's UnsafeCell. Outside check() it is a plain T.
template <typename T>
class Cell {
 public:
  explicit Cell(T value = T()) : value_(std::move(value)) {}
  ~Cell() { model_internal::CellDestroy(this); }
  Cell(const Cell&) = delete;
  Cell& operator=(const Cell&) = delete;

  T get(const std::source_location& site = std::source_location::current()) const {
    model_internal::CellRead(this, site);
    return value_;
  }
  void set(T value, const std::source_location& site = std::source_location::current()) {
    model_internal::CellWrite(this, site);
    value_ = std::move(value);
  }
  // with / with_mut: f(const T&) or f(T&), checked as one read or one write.
  template <typename F>
  auto with(F f, const std::source_location& site = std::source_location::current()) const {
    model_internal::CellRead(this, site);
    return f(static_cast<const T&>(value_));
  }
  template <typename F>
  auto with_mut(F f, const std::source_location& site = std::source_location::current()) {
    model_internal::CellWrite(this, site);
    return f(value_);
  }

 private:
  T value_;
};

}  // namespace weft::model

#endif  // WEFT_MODEL_MODEL_H_
