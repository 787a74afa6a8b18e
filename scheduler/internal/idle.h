// scheduler/internal/idle.h: how a worker with nothing to run goes to sleep, and how the work
// and timers that arrive meanwhile wake it: the runtime's sleep/wake handshake. Written over a
// worker type W and a lock type so that the runtime (scheduler/worker_loop.cc and
// internal/runtime_impl.h) and the model test's stand-ins (scheduler/idle_model_test.cc) run this
// same code.
//
// Defines: weft::scheduler_internal::IdleWorkers, kNoDeadline.
//
// W has: `sleeping` (a bool, guarded by the list's lock), an atomic<std::uint32_t> wake_word,
// weft::atomic<std::int64_t> watch_until and watch_floor (steady_clock ticks), and Wake(), which
// adds 1 to wake_word (release) and then makes a sleep on the old value return (a futex wake, or
// the worker's reactor's wake). Lock: BasicLockable.
//
// The handshake, two Dekker pairs on one fence per side:
// - Work. Whoever publishes work (a run queue push, the inject queue, a mailbox) then calls
//   WakeOne: fence, then reads the sleeper count. A worker going to sleep (BeginSleep) lists
//   itself (the count goes up), fences, and then looks for work. One of the two sees the other:
//   the worker finds the work, or the publisher finds it listed and wakes it. Whoever takes a
//   worker off the list adds to its wake_word, which the worker read before listing itself and
//   sleeps on, so a wake that lands before the worker blocks makes the block return at once.
// - Timers. A worker whose earliest deadline moved earlier publishes it, then calls
//   WatchTimers: fence, then reads each sleeper's watch_until (when its sleep ends). A worker
//   going to sleep stores watch_until = kNoDeadline ("deciding"), fences, reads every worker's
//   earliest deadline, then stores the deadline its sleep will have. WatchTimers wakes a sleeper
//   whose watch_until is later than the deadline it was given (plus the rescue grace): either it
//   read that deadline, or its watch_until (kNoDeadline, or one decided without it) says so.

#ifndef WEFT_SCHEDULER_INTERNAL_IDLE_H_
#define WEFT_SCHEDULER_INTERNAL_IDLE_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

#include "weft/base/atomic.h"

namespace weft::scheduler_internal {

// kNoDeadline: a watch_until (or timer head) that is no deadline at all.
inline constexpr std::int64_t kNoDeadline = std::numeric_limits<std::int64_t>::max();

template <typename W, typename Lock>
class IdleWorkers {
 public:
  // lock: guards the list and every W::sleeping; the runtime also guards its workers' exits
  // with it (a Wake after a worker's exit would touch its freed reactor).
  Lock& lock() { return mu_; }

  // sleepers: how many workers are listed. Relaxed: a hint (a worker with surplus yields spills
  // them for thieves only when somebody sleeps); the handshake reads it after its fence.
  int sleepers() const { return sleepers_.load(std::memory_order_relaxed); }

  // BeginSleep: w, which found no work, reads its wake word, lists itself and enters "deciding"
  // (watch_until = kNoDeadline), then fences; returns the word it read. The caller then looks
  // for work and at the timer heads, stores the deadline it chose in watch_until, and sleeps
  // unless wake_word moved from the returned value; then EndSleep, whatever happened.
  std::uint32_t BeginSleep(W& w) {
#ifndef WEFT_MODEL_PLANTED_IDLE_LATE_WORD
    // The word is read before w is listed: whoever takes w off the list (and so may skip the
    // next WakeOne's wake-up: w no longer counts as a sleeper) adds to it after this read, so
    // w's sleep on this value returns at once. Read after the listing, it could already carry
    // that add, and w slept through the work of the next push (the model test
    // IdleModelTest.BackToBackPushes). Relaxed: the listing's lock orders the add after it.
    const std::uint32_t word = w.wake_word.load(std::memory_order_relaxed);
#endif
    {
      std::lock_guard<Lock> guard(mu_);
      idle_.push_back(&w);
      w.sleeping = true;
      // relaxed: the fence below orders it before this worker's look for work.
      sleepers_.fetch_add(1, std::memory_order_relaxed);
    }
    // relaxed: the fence below orders it before this worker's look at the timer heads.
    w.watch_until.store(kNoDeadline, std::memory_order_relaxed);
    // seq_cst: the Dekker fence of both pairs (with WakeOne's and WatchTimers').
    weft::atomic_fence(std::memory_order_seq_cst);
#ifdef WEFT_MODEL_PLANTED_IDLE_LATE_WORD
    const std::uint32_t word = w.wake_word.load(std::memory_order_acquire);
#endif
    return word;
  }

  // EndSleep: w is awake (woken, a deadline, or work found before sleeping): it looks at timers
  // at every pass again, and leaves the list if nobody took it off.
  void EndSleep(W& w) {
    // relaxed: WatchTimers wakes nobody for a watch_until of 0; a stale larger value costs a
    // spurious wake-up at most.
    w.watch_until.store(0, std::memory_order_relaxed);
    std::lock_guard<Lock> guard(mu_);
    (void)LeaveLocked(w);
  }

  // WakeOne: work was published; wake one sleeping worker, if any. Cheap when none sleeps.
  void WakeOne() {
#ifndef WEFT_MODEL_PLANTED_IDLE_WITHOUT_FENCE
    // seq_cst: orders the publication of the work before the read of the sleeper count (the
    // Dekker pairing with BeginSleep).
    weft::atomic_fence(std::memory_order_seq_cst);
#endif
    if (sleepers_.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard<Lock> guard(mu_);
    if (idle_.empty()) return;
    W* w = idle_.back();
    idle_.pop_back();
    w->sleeping = false;
    sleepers_.fetch_sub(1, std::memory_order_relaxed);  // relaxed: under the lock, a hint
    w->Wake();
  }

  // WakeWorker: w in particular has work (its mailbox), published before this call; wakes w if
  // it sleeps. No fence: the list's lock orders it. If w lists itself after this call releases
  // the lock, its look for work (after BeginSleep) sees the work; otherwise this call finds it
  // listed.
  void WakeWorker(W& w) {
    std::lock_guard<Lock> guard(mu_);
    if (LeaveLocked(w)) w.Wake();
  }

  // LeaveLocked: takes a sleeping w off the list (lock held); false if it was not on it.
  bool LeaveLocked(W& w) {
    if (!w.sleeping) return false;
    idle_.erase(std::find(idle_.begin(), idle_.end(), &w));
    w.sleeping = false;
    sleepers_.fetch_sub(1, std::memory_order_relaxed);  // relaxed: as in WakeOne
    return true;
  }

  // WatchTimers: `self` published a new earliest deadline, which some worker must wake by `by`
  // (the deadline plus the rescue grace) to rescue it if `self` gets stuck. Wakes each other
  // worker of `all` (a range of pointers to W) whose sleep would end later than that, and not
  // before its watch_floor (the back-off of a worker that keeps waking for others' timers).
  template <typename Range>
  void WatchTimers(const Range& all, const W& self, std::int64_t by) {
    // seq_cst: the Dekker pairing with BeginSleep: the deadline was published before it.
    weft::atomic_fence(std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_relaxed) == 0) return;
    for (const auto& v : all) {
      if (&*v == &self) continue;
      // relaxed: ordered by the fences; a stale watch_floor is an earlier one (it only grows
      // within an idle spell), which costs a wake-up at most.
      const std::int64_t until = v->watch_until.load(std::memory_order_relaxed);
      if (until > std::max(by, v->watch_floor.load(std::memory_order_relaxed))) WakeWorker(*v);
    }
  }

 private:
  Lock mu_;
  std::vector<W*> idle_;  // guarded by mu_
  weft::atomic<int> sleepers_{0};
};

}  // namespace weft::scheduler_internal

#endif  // WEFT_SCHEDULER_INTERNAL_IDLE_H_
