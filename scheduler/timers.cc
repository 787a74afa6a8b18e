// scheduler/timers.cc: the per-worker timer heaps' due timers (PopDueTimers: pop in batches,
// claim each fiber from its timer, queue it) and the rescue of a stuck worker's timers by an idle
// one (RescueTimers). The heap's lock and head are Worker's (internal/worker.h); the insert is in
// the park's on-top function (park.cc); watching another worker's deadlines while asleep is in
// Sleep (worker_loop.cc) and Impl::WatchTimers.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "internal/runtime_impl.h"
#include "weft/context/context.h"
#include "weft/scheduler/internal/park.h"

namespace weft {
namespace scheduler_internal {
namespace {

// ClaimTimedOut: the fiber e's deadline wakes, or null if that wait is over (a stale entry) or
// a notifier won the wake-up. The caller queues it.
Fiber* ClaimTimedOut(TimerEntry* e) {
  Fiber* f = e->fiber;
  // acquire: the fiber's wait_gen store (release) happened before it parked.
  if (e->gen != f->wait_gen.load(std::memory_order_acquire)) return nullptr;  // stale
  if (!ClaimWakeUp(*f)) return nullptr;
  e->fired = true;  // before the fiber is published (as woken_by_notify)
  return f;
}

}  // namespace
}  // namespace scheduler_internal

using namespace scheduler_internal;

std::size_t Runtime::Impl::PopDueTimers(Worker& w, Worker& heap, bool try_lock) {
  // relaxed: a hint; the heap is read under its lock.
  Clock::rep head = heap.timer_head.load(std::memory_order_relaxed);
  if (head == kNoTimer) return 0;
  Clock::time_point now = Clock::now();
  w.clock_floor = now;
  if (now.time_since_epoch().count() < head) return 0;
  // In batches of up to kTimerBatch, in three passes, because each due timer's fiber has left
  // the caches (W5: the wake-up's generation check and CAS, each a miss, were most of this
  // function): popping writes each entry (its heap index), so the entries are fetched; then the
  // fibers' lines are asked for together; then the fibers are claimed and queued. The lock is
  // held for the pops only.
  constexpr std::size_t kTimerBatch = 32;
  TimerEntry* due[kTimerBatch];
  bool queued = false;  // a fiber went onto the stealable queue: wake a sleeper, once
  std::size_t popped = 0;
  for (;;) {
    if (try_lock) {
      if (!heap.timer_mu.try_lock()) break;
    } else {
      heap.timer_mu.lock();
    }
    std::size_t n = 0;
    while (n < kTimerBatch) {
      TimerNode* node = heap.timers.pop_due(now);
      if (node == nullptr) break;
      due[n++] = reinterpret_cast<TimerEntry*>(node);
    }
    if (n != 0) PublishTimerHead(heap);
    heap.timer_mu.unlock();
    popped += n;
    for (std::size_t i = 0; i < n; ++i) {
      // The line of the state word (the claim) and wait_gen (the generation check): one line
      // (asserted at FiberWaiter::fiber).
      context_internal::PrefetchLinesForWrite(
          reinterpret_cast<std::uintptr_t>(&due[i]->fiber->state), 0, 1);
    }
    for (std::size_t i = 0; i < n; ++i) {
      TimerEntry* e = due[i];
      if (Fiber* f = ClaimTimedOut(e)) {
        StampRunnable(f);
        Context ctx = f->context();  // read before: once published, f may run and end elsewhere
        if (!f->may_run_on(w.index)) {
          ScheduleElsewhere(f);
        } else if (Fiber* displaced = std::exchange(w.run_next, f)) {
          // As Schedule does (the latest woken runs next), without PushLocal's wake-up per
          // fiber: that one's seq_cst fence after each store missed was 6% of W5.
          queued = PushLocalQuiet(w, displaced) || queued;
        }
        // Timers come due in batches, and a sleeper's stack has gone cold: fetch it while the
        // fibers queued before it run (W5: a resume's first pop off the stack was the top
        // sample). (A task has none.)
        if (HasStack(ctx)) prefetch_context(ctx);
      }
      Release(e);  // the heap side's reference
    }
    if (n < kTimerBatch) break;
  }
  if (queued) WakeOne();
  return popped;
}

// RescueTimers: an idle worker pops the timers of workers whose earliest deadline is overdue by
// kTimerRescueGrace (Go's findrunnable runs other Ps' timers the same way), and runs their
// fibers. Without it a fiber that never switches (a CPU-bound loop, a blocking call outside
// call_blocking) held its worker's sleepers and timed waits until it ended, with other workers
// idle. A heap whose owner holds its lock is skipped: the owner is not stuck.
Fiber* Runtime::Impl::RescueTimers(Worker& w) {
  // relaxed: hints (Worker::timer_head); PopDueTimers reads the heap under its lock. The clock
  // is read only when some other worker has a timer.
  Clock::rep earliest = kNoTimer;
  for (const auto& v : workers) {
    if (v.get() != &w) earliest = std::min(earliest, v->timer_head.load(std::memory_order_relaxed));
  }
  if (earliest == kNoTimer) return nullptr;
  Clock::time_point now = Clock::now();
  w.clock_floor = now;
  // Heads at or before this are overdue by the grace (kNoTimer never is).
  const Clock::rep overdue = (now - kTimerRescueGrace).time_since_epoch().count();
  if (earliest > overdue) return nullptr;
  for (const auto& v : workers) {
    if (v.get() != &w && v->timer_head.load(std::memory_order_relaxed) <= overdue) {
      Bump(w.counters.rescued, PopDueTimers(w, *v, /*try_lock=*/true));
    }
  }
  return NextLocal(w);
}

}  // namespace weft
