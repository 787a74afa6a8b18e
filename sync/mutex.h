// sync/mutex.h: a mutex and a condition variable that park the calling fiber (or block the
// calling thread when there is no fiber).
//
// Defines: weft::Mutex, weft::CondVar.
//
// Mutex: not recursive. Locking it again from its owner gives EDEADLK; unlocking it from anyone
// but the owner gives EPERM: errors, not undefined behaviour. Uncontended lock and unlock are one
// CAS each (no system call, no allocation). Contended: a short spin, then a FIFO of waiters.
// Unlock wakes the first waiter but does not hand it the lock, so a running fiber may take it
// first (barging: throughput, as Go's normal mode); a woken waiter that loses goes back to the
// front. At most one woken waiter is in flight: while it has not tried, unlocks wake no other.
// A waiter queued for over 1 ms is handed the lock directly (Go's starvation mode).
//
// Destroying a Mutex or CondVar while anything waits on it aborts with a message.

#ifndef WEFT_SYNC_MUTEX_H_
#define WEFT_SYNC_MUTEX_H_

#include <cstdint>

#include "weft/base/atomic.h"
#include "weft/base/result.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/internal/spin_lock.h"
#include "weft/sync/internal/wait_queue.h"
#include "weft/sync/waiter.h"

namespace weft {

class Mutex {
 public:
  Mutex() = default;
  ~Mutex();
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // lock: blocks until acquired. EDEADLK if the caller holds it; timed_out / operation_canceled
  // per `options`. Any fiber or thread.
  Result<void> lock(const WaitOptions& options = {});
  // try_lock: acquires if free, without waiting.
  bool try_lock();
  // unlock: EPERM if the caller does not hold it.
  Result<void> unlock();

 private:
  friend class CondVar;
  static constexpr std::uint32_t kLocked = 1;
  static constexpr std::uint32_t kWaiters = 2;  // the queue is not empty (kept under queue_lock_)
  // kWakePending: a waiter was woken to compete and has not tried yet; unlock wakes no other
  // until it has (Go's mutexWoken), so a busy lock does not wake a herd of losers.
  static constexpr std::uint32_t kWakePending = 4;

  bool TryAcquire(Waiter* me);
  // AcquireOrAnnounceWaiter: takes the lock if it is free, else sets kWaiters while it is held.
  // Under queue_lock_ only.
  bool AcquireOrAnnounceWaiter(Waiter* me);
  Result<void> LockSlow(Waiter* me, const WaitOptions& options);
  void UnlockSlow();
  void WakeNext();  // wakes the first waiter to compete, leaving the lock as it is

  atomic<std::uint32_t> state_{0};
  // The holder's Waiter::identity() (0: none): written by the holder, read by anyone (owner
  // checks). An identity, not a Waiter*: a thread or fiber that ends holding the mutex leaves it
  // locked for good, instead of handing it to the next user of its recycled Waiter.
  atomic<std::uint64_t> owner_{0};
  sync_internal::SpinLock queue_lock_;
  sync_internal::WaitQueue queue_ ABSL_GUARDED_BY(queue_lock_);
};

// CondVar: wait always returns with the mutex held again (also on timeout and cancellation),
// except for EPERM (the caller did not hold it). signal and broadcast may be called from any
// thread, holding the mutex or not. A waiter that times out just as it is signalled reports
// success: the signal is not lost.
class CondVar {
 public:
  CondVar() = default;
  ~CondVar();
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  Result<void> wait(Mutex& mutex, const WaitOptions& options = {});
  void signal();
  void broadcast();

 private:
  sync_internal::SpinLock queue_lock_;
  sync_internal::WaitQueue queue_ ABSL_GUARDED_BY(queue_lock_);
};

}  // namespace weft

#endif  // WEFT_SYNC_MUTEX_H_
