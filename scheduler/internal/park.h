// scheduler/internal/park.h: the park/notify handshake of a fiber: its state word, its permit,
// and the parties that race to make a parked fiber runnable again (a notify, the fiber's timer,
// and the on-top function that publishes the park). Written over a fiber type F so that the
// runtime's Fiber and the model test's stand-in (scheduler/park_model_test.cc) run this same
// code.
//
// Defines: weft::scheduler_internal::FiberState, ClaimWakeUp, TakePermit, PublishParked,
// NotifyParked, NotifyWithPermit, TakeWakeUp.
//
// F has: weft::atomic<int> state (a FiberState), weft::atomic<bool> permit,
// weft::atomic<bool> light_park, and woken_by_notify (assignable from and convertible to bool).
//
// The handshake (scheduler/park.cc's file comment draws the whole state machine): the
// on-top function that runs after the fiber has switched away stores kParked and then reads the
// permit; a notify, when it finds the fiber not parked yet, stores the permit and then reads the
// state (Dekker), so one of them sees the other, and whoever wins the kParked -> kRunnable CAS
// queues the fiber. The park side runs at every park and the notify's slow path rarely, so where
// membarrier(2) works (light_park) the pair is asymmetric (base/asymmetric_fence.h): the park's
// side has a compiler fence only and the notify's slow path a HeavyFence, the fence of both.
// Elsewhere both sides are seq_cst.

#ifndef WEFT_SCHEDULER_INTERNAL_PARK_H_
#define WEFT_SCHEDULER_INTERNAL_PARK_H_

#include <atomic>

#include "weft/base/asymmetric_fence.h"
#include "weft/base/atomic.h"

namespace weft::scheduler_internal {

enum FiberState : int { kRunnable, kRunning, kParked, kBlocking, kDone };

// ClaimWakeUp: the kParked -> kRunnable CAS that notify, a timer and PublishParked race for;
// the one caller it returns true to queues the fiber. seq_cst: the Dekker pairing above.
template <typename F>
bool ClaimWakeUp(F& f) {
  int expected = kParked;
  return f.state.compare_exchange_strong(expected, kRunnable, std::memory_order_seq_cst);
}

// TakePermit: consumes a permit left by notify. The relaxed load spares the common case (no
// permit) a locked instruction; seq_cst exchange: the Dekker pairing above.
template <typename F>
bool TakePermit(F& f) {
  return f.permit.load(std::memory_order_relaxed) &&
         f.permit.exchange(false, std::memory_order_seq_cst);
}

// PublishParked: the park's side, in the on-top function (the fiber is off its stack). Stores
// kParked, then looks for a permit. A permit seen here came from a notify that read the state
// before this store, so it queued nothing: the wake-up is taken back unless a notifier (or a
// stale timer) won the CAS meanwhile. True when the caller must queue the fiber itself.
template <typename F>
bool PublishParked(F& f, bool light) {
  bool permit;
  if (light) {
    // release: a notifier whose CAS reads kParked sees what the fiber did before parking.
    // LightFence, not a fence instruction: notify's slow path runs HeavyFence for both sides.
    // acquire: as TakePermit's exchange, this sees what the notifier did before its permit.
    f.state.store(kParked, std::memory_order_release);
#ifndef WEFT_MODEL_PLANTED_PARK_WITHOUT_FENCE
    base_internal::LightFence();
#endif
    permit = f.permit.load(std::memory_order_acquire);
  } else {
    // seq_cst, both: a symmetric Dekker pair.
    f.state.store(kParked, std::memory_order_seq_cst);
    permit = f.permit.load(std::memory_order_seq_cst);
  }
  return permit && ClaimWakeUp(f);
}

// NotifyParked: notify's fast path, for a fiber that is parked already (the common case).
// Winning the CAS makes this the wake-up; it is told through woken_by_notify (written before the
// caller's schedule publishes the fiber, read after it resumes), so no permit is stored and none
// has to be consumed: two locked instructions fewer per park and wake. True when the caller must
// schedule f; false: go on with NotifyWithPermit.
template <typename F>
bool NotifyParked(F& f) {
  if (f.state.load(std::memory_order_seq_cst) == kParked && ClaimWakeUp(f)) {
    f.woken_by_notify = true;
    return true;
  }
  return false;
}

// NotifyWithPermit: notify's slow path: the fiber was not parked (yet). Leaves a permit, then
// looks again (the Dekker pairing with PublishParked, whose side has only a compiler fence when
// light_park: HeavyFence is the fence of both). True when the caller won the wake-up and must
// schedule f; otherwise the fiber runs, is queued, or is being queued by whoever won, and finds
// the permit.
template <typename F>
bool NotifyWithPermit(F& f) {
  f.permit.store(true, std::memory_order_seq_cst);
  // relaxed: set before the fiber was handed out.
  if (f.light_park.load(std::memory_order_relaxed)) base_internal::HeavyFence();
  return f.state.load(std::memory_order_seq_cst) == kParked && ClaimWakeUp(f);
}

// TakeWakeUp: after a resume, whether a notify woke this wait: the notifier's fast path told it
// so, or it left a permit. (A resume can come without either: a notifier that left its permit
// for an earlier wait, which consumed it, may still win the CAS from this wait's kParked.)
template <typename F>
bool TakeWakeUp(F& f) {
  return f.woken_by_notify || TakePermit(f);
}

}  // namespace weft::scheduler_internal

#endif  // WEFT_SCHEDULER_INTERNAL_PARK_H_
