// scheduler/park_model_body.h: the model tests' stand-in for a fiber and its worker around the
// park/notify handshake (scheduler/internal/park.h), shared by park_model_test.cc and
// park_planted_bug_model_test.cc.
//
// A model thread plays the parking fiber together with its worker: it runs the wait's steps,
// then the on-top function's PublishParked, then waits until something queues it (a run queue
// reduced to a counter). Others play notifiers and the fiber's timer.

#ifndef WEFT_SCHEDULER_PARK_MODEL_BODY_H_
#define WEFT_SCHEDULER_PARK_MODEL_BODY_H_

#include <cstdint>

#include "weft/base/atomic.h"
#include "weft/base/cpu_relax.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"
#include "weft/scheduler/internal/park.h"

namespace weft::scheduler_internal {

using model::Cell;
using model::CheckedBool;

// ModelFiber: the fields of scheduler/internal/fiber.h's Fiber that the handshake uses, and a run
// queue reduced to a count of how often the fiber was queued.
struct ModelFiber {
  explicit ModelFiber(bool light) : light_park(light) {}
  weft::atomic<int> state{kRunning};
  weft::atomic<bool> permit{false};
  weft::atomic<bool> light_park;
  CheckedBool woken_by_notify;
  weft::atomic<std::uint64_t> wait_gen{0};
  Cell<bool> timer_fired{false};  // TimerEntry::fired
  // Queue: release, as a run queue's push; the worker that pops it acquires.
  weft::atomic<int> queued{0};
  void Queue() { queued.fetch_add(1, std::memory_order_release); }
  int parks = 0;  // the fiber's own count
};

// Park: the fiber switches away, its on-top function publishes the park, and it runs again once
// queued (by PublishParked's caller, a notify or the timer).
inline void Park(ModelFiber& f) {
  ++f.parks;
  if (PublishParked(f, f.light_park.load(std::memory_order_relaxed))) f.Queue();
  while (f.queued.load(std::memory_order_acquire) < f.parks) CpuRelax();  // not queued yet
  f.state.store(kRunning, std::memory_order_relaxed);
}

// Wait: FiberWaiter::wait's protocol. Timed: a timer for this wait may wake it (TimerSide).
// True if notified, false if its timer fired.
inline bool Wait(ModelFiber& f) {
  if (TakePermit(f)) return true;
  for (;;) {
    std::uint64_t gen = f.wait_gen.load(std::memory_order_relaxed) + 1;
    f.wait_gen.store(gen, std::memory_order_release);
    f.woken_by_notify = false;
    Park(f);
    f.wait_gen.store(gen + 1, std::memory_order_release);  // its timer is stale now
    if (TakeWakeUp(f)) return true;
    if (f.timer_fired.get()) return false;
  }
}

inline void Notify(ModelFiber& f) {
  if (NotifyParked(f)) {
    f.Queue();
    return;
  }
  if (NotifyWithPermit(f)) f.Queue();
}

// TimerSide: the fiber's timer for wait generation `gen` comes due (ClaimTimedOut): it wakes the
// fiber unless that wait is over or a notifier won.
inline void TimerSide(ModelFiber& f, std::uint64_t gen) {
  if (gen != f.wait_gen.load(std::memory_order_acquire)) return;  // stale
  if (!ClaimWakeUp(f)) return;
  f.timer_fired.set(true);
  f.Queue();
}

}  // namespace weft::scheduler_internal

#endif  // WEFT_SCHEDULER_PARK_MODEL_BODY_H_
