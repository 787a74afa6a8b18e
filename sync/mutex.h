// sync/mutex.h: a mutex and a condition variable that park the calling fiber (or block the
// calling thread when there is no fiber).
//
// Defines: weft::Mutex, weft::CondVar, weft::MutexLock, weft::UniqueLock.
//
//   weft::MutexLock hold(mu);                        // a scope, abseil's way
//   std::scoped_lock both(a, b);                     // Mutex is Lockable: std's guards work
//   auto lock = weft::UniqueLock::acquire(mu, {.deadline = soon});
//   if (!lock) return lock.error();                  // timed out, cancelled: a value
//   (void)cv.wait(*lock, [&] { return ready; });
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

#include <chrono>
#include <coroutine>
#include <cstdint>
#include <mutex>  // std::defer_lock_t, std::try_to_lock_t, std::adopt_lock_t
#include <type_traits>
#include <utility>

#include "weft/base/atomic.h"
#include "weft/base/result.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/internal/spin_lock.h"
#include "weft/sync/internal/wait_queue.h"
#include "weft/sync/waiter.h"

namespace weft {

namespace sync_internal {
// A Mutex's waiting lock: since when it waits (for the hand-off to a waiter that waited long).
struct MutexNode : WaitNode {
  SyncClock::time_point since;
};
}  // namespace sync_internal

class Mutex {
 public:
  Mutex() = default;
  ~Mutex();
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // lock(options): blocks until acquired. EDEADLK if the caller holds it; timed_out /
  // operation_canceled per `options`, and operation_canceled when the runtime shuts down. Any
  // fiber or thread. `m.lock({})`: no deadline, no token, the errors as values.
  Result<void> lock(const WaitOptions& options);
  // lock(): the standard's Lockable form, for std::lock_guard, std::scoped_lock,
  // std::unique_lock, MutexLock and UniqueLock. Waits until it has the mutex, as std::mutex's
  // does, also while the runtime shuts down (the holder, interrupted too, lets go: a fiber
  // waiting here delays the shutdown only as long as the mutex is held). Its one error, a lock
  // the caller holds already (a programming error), throws std::system_error
  // (resource_deadlock_would_occur), as std::mutex::lock may. A guard never proceeds unlocked.
  void lock();
  // try_lock: acquires if free, without waiting.
  bool try_lock();
  // try_lock_for / try_lock_until: TimedLockable's forms (std::unique_lock's try_lock_for):
  // false once the time is up; otherwise as lock().
  // A time beyond a century from now is no limit (as lock()); one passed, a try_lock().
  template <typename Rep, typename Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return TryLockForSeconds(std::chrono::duration<double>(d).count());
  }
  template <typename Clock, typename Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    // In double seconds: no overflow for any clock, duration or distance (min() and max()
    // included); the rounding (well below a microsecond here) does not matter to a lock.
    const double left = std::chrono::duration<double>(t.time_since_epoch()).count() -
                        std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
    return TryLockForSeconds(left);
  }
  // unlock: EPERM if the caller does not hold it.
  Result<void> unlock();

  // async_lock: lock(options) for a task (scheduler/task.h), which waits without blocking its
  // worker: `if (Result<void> r = co_await mu.async_lock(); !r) ...`. The same results; the
  // task then holds the mutex (unlock() from it). From a coroutine that is not a task, it
  // blocks the fiber or thread that runs it.
  class LockAwaiter {
   public:
    bool await_ready();
    bool await_suspend(std::coroutine_handle<> h);
    Result<void> await_resume();

   private:
    friend class Mutex;
    LockAwaiter(Mutex& mutex, const WaitOptions& options)
        : mutex_(mutex), park_(&Step, this, options) {}
    // Step: the wait's condition, on the task's side: granted, or woken and now holding it
    // (competing as LockSlow's loop does; a loser queues again at the front).
    static bool Step(void* self);
    Mutex& mutex_;
    sync_internal::MutexNode node_;
    sync_internal::AsyncPark park_;
    Result<void> result_;
    bool queued_ = false;
  };
  LockAwaiter async_lock(const WaitOptions& options = sync_internal::kNoWaitOptions) {
    return LockAwaiter(*this, options);
  }

 private:
  friend class CondVar;
  static constexpr std::uint32_t kLocked = 1;
  static constexpr std::uint32_t kWaiters = 2;  // the queue is not empty (kept under queue_lock_)
  // kWakePending: a waiter was woken to compete and has not tried yet; unlock wakes no other
  // until it has (Go's mutexWoken), so a busy lock does not wake a herd of losers.
  static constexpr std::uint32_t kWakePending = 4;

  bool TryAcquire(Waiter* me);
  bool TimedLock(SyncClock::time_point deadline);
  bool TryLockForSeconds(double seconds);
  // AcquireOrAnnounceWaiter: takes the lock if it is free, else sets kWaiters while it is held.
  // Under queue_lock_ only.
  bool AcquireOrAnnounceWaiter(Waiter* me);
  // LockSlow: lock(options)'s wait; `interruptible` false for CondVar's re-lock, which must
  // end holding the mutex even while the runtime shuts down (parked, not spinning).
  Result<void> LockSlow(Waiter* me, const WaitOptions& options, bool interruptible = true);
  // AcquireOrQueue: one turn of LockSlow's loop before it parks: takes the lock (true), or
  // queues `node` (at the front: a woken waiter that lost) with kWaiters set (false).
  bool AcquireOrQueue(sync_internal::MutexNode& node, bool front);
  // GiveUp: after a wait on `node` that ended with r (not woken): withdraws, unless the lock
  // was handed over meanwhile ({}); a wake-up that came as it gave up passes on.
  Result<void> GiveUp(sync_internal::MutexNode& node, sync_internal::ParkResult r);
  // StepQueued: an awaiter's condition for its queued `node` (on its own side): granted, or
  // woken and now holding it (competing as LockSlow's loop does; a loser queues again at the
  // front).
  bool StepQueued(sync_internal::MutexNode& node);
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

class UniqueLock;

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
  // wait(lock): the same with the mutex of `lock`; EPERM if lock does not own one.
  Result<void> wait(UniqueLock& lock, const WaitOptions& options = {});
  // wait(mutex or lock, pred): waits until pred() holds (checked first, and after each wake-up,
  // with the mutex held): success, or the error that ended the wait with pred() still false.
  template <typename Pred>
  Result<void> wait(Mutex& mutex, Pred pred, const WaitOptions& options = {}) {
    while (!pred()) {
      if (Result<void> r = wait(mutex, options); !r.ok()) return pred() ? Result<void>() : r;
    }
    return {};
  }
  template <typename Pred>
  Result<void> wait(UniqueLock& lock, Pred pred, const WaitOptions& options = {}) {
    while (!pred()) {
      if (Result<void> r = wait(lock, options); !r.ok()) return pred() ? Result<void>() : r;
    }
    return {};
  }
  void signal();
  void broadcast();

  // async_wait: wait(mutex, options) for a task (scheduler/task.h), which waits without blocking
  // its worker: `co_await cv.async_wait(mu)` from a task holding mu (taken with async_lock). The
  // same results; it returns holding mu again (the re-lock waits without limit, as wait's).
  // From a coroutine that is not a task, it blocks the fiber or thread that runs it.
  class WaitAwaiter {
   public:
    bool await_ready();
    bool await_suspend(std::coroutine_handle<> h);
    Result<void> await_resume();

   private:
    friend class CondVar;
    WaitAwaiter(CondVar& cv, Mutex& mutex, const WaitOptions& options)
        : cv_(cv), mutex_(mutex), park_(&Done, this, options, &Again) {}
    // Two waits in one park: for the signal, then (Again) for the mutex, uncancellable.
    static bool Done(void* self);
    static bool Again(void* self, sync_internal::ParkResult r,
                      std::optional<SyncClock::time_point>* deadline);
    CondVar& cv_;
    Mutex& mutex_;
    sync_internal::WaitNode node_;        // on the CondVar's queue
    sync_internal::MutexNode lock_node_;  // the re-lock's, on the mutex's queue
    sync_internal::AsyncRepark park_;
    Result<void> result_;
    bool waited_ = false;
    bool relocking_ = false;
  };
  WaitAwaiter async_wait(Mutex& mutex, const WaitOptions& options = sync_internal::kNoWaitOptions);

 private:
  // The two ends of a wait around its park, shared by wait and WaitAwaiter. Enqueue: the caller
  // (me) must hold mutex (else operation_not_permitted); queues node for a signal, then unlocks
  // mutex. Withdraw: after the park ended with r: r's error, with node taken off the queue,
  // unless it was signalled meanwhile ({}: the signal stands).
  Result<void> Enqueue(Mutex& mutex, sync_internal::WaitNode& node, Waiter* me);
  Result<void> Withdraw(sync_internal::WaitNode& node, sync_internal::ParkResult r);

  sync_internal::SpinLock queue_lock_;
  sync_internal::WaitQueue queue_ ABSL_GUARDED_BY(queue_lock_);
};

// MutexLock: holds `mutex` for its scope (abseil's MutexLock). The constructor locks with
// Mutex::lock(): it waits until it has the mutex (through a shutdown too), and throws
// std::system_error (EDEADLK) for a mutex the caller holds already; the scope is never entered
// unlocked. For a deadline or a token, use UniqueLock::acquire.
class [[nodiscard]] MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) : mutex_(mutex) { mutex_.lock(); }
  ~MutexLock() { (void)mutex_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mutex_;
};

// UniqueLock: a movable lock of a weft::Mutex, std::unique_lock's interface (deferred, try,
// adopted, timed, released) with weft's waits beside it: acquire(mutex, options) for a
// deadline or a token with the errors as values, and CondVar::wait(lock). The calls that report
// errors by exception (the locking constructor, lock(), unlock(), the timed ones) throw
// std::system_error as std::unique_lock does: operation_not_permitted without a mutex,
// resource_deadlock_would_occur when it owns one already, and Mutex::lock()'s errors.
class [[nodiscard]] UniqueLock {
 public:
  UniqueLock() noexcept = default;
  explicit UniqueLock(Mutex& mutex) : mutex_(&mutex) {
    mutex_->lock();
    owns_ = true;
  }
  UniqueLock(Mutex& mutex, std::defer_lock_t) noexcept : mutex_(&mutex) {}
  UniqueLock(Mutex& mutex, std::try_to_lock_t) : mutex_(&mutex), owns_(mutex.try_lock()) {}
  UniqueLock(Mutex& mutex, std::adopt_lock_t) noexcept : mutex_(&mutex), owns_(true) {}
  template <typename Rep, typename Period>
  UniqueLock(Mutex& mutex, const std::chrono::duration<Rep, Period>& d)
      : mutex_(&mutex), owns_(mutex.try_lock_for(d)) {}
  template <typename Clock, typename Duration>
  UniqueLock(Mutex& mutex, const std::chrono::time_point<Clock, Duration>& t)
      : mutex_(&mutex), owns_(mutex.try_lock_until(t)) {}
  UniqueLock(UniqueLock&& other) noexcept
      : mutex_(std::exchange(other.mutex_, nullptr)), owns_(std::exchange(other.owns_, false)) {}
  UniqueLock& operator=(UniqueLock&& other) noexcept {
    if (this != &other) {
      if (owns_) UnlockOrAbort();
      mutex_ = std::exchange(other.mutex_, nullptr);
      owns_ = std::exchange(other.owns_, false);
    }
    return *this;
  }
  // ~UniqueLock: unlocks what it owns. Ownership is the locking fiber's or thread's, not the
  // object's: destroyed elsewhere (moved to another fiber), it cannot unlock, and aborts with a
  // message rather than leave the mutex locked for good.
  ~UniqueLock() {
    if (owns_) UnlockOrAbort();
  }
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;

  // acquire: a UniqueLock owning `mutex`, or the error of mutex.lock(options) (EDEADLK,
  // timed_out, operation_canceled).
  static Result<UniqueLock> acquire(Mutex& mutex, const WaitOptions& options = {}) {
    if (Result<void> r = mutex.lock(options); !r.ok()) return r.error();
    return UniqueLock(mutex, std::adopt_lock);
  }

  void lock() {
    Check();
    mutex_->lock();
    owns_ = true;
  }
  // lock(options): the errors as values; EPERM without a mutex, EDEADLK when it owns it.
  Result<void> lock(const WaitOptions& options) {
    if (mutex_ == nullptr) return std::errc::operation_not_permitted;
    if (owns_) return std::errc::resource_deadlock_would_occur;
    Result<void> r = mutex_->lock(options);
    owns_ = r.ok();
    return r;
  }
  bool try_lock() {
    Check();
    return owns_ = mutex_->try_lock();
  }
  template <typename Rep, typename Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    Check();
    return owns_ = mutex_->try_lock_for(d);
  }
  template <typename Clock, typename Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    Check();
    return owns_ = mutex_->try_lock_until(t);
  }
  // unlock: throws operation_not_permitted if it does not own the mutex, or if the mutex is
  // held by another fiber or thread than the caller (the lock was moved to it).
  void unlock();
  // release: gives up the mutex without unlocking it; returns it.
  Mutex* release() noexcept {
    owns_ = false;
    return std::exchange(mutex_, nullptr);
  }
  void swap(UniqueLock& other) noexcept {
    std::swap(mutex_, other.mutex_);
    std::swap(owns_, other.owns_);
  }
  Mutex* mutex() const noexcept { return mutex_; }
  bool owns_lock() const noexcept { return owns_; }
  explicit operator bool() const noexcept { return owns_; }

 private:
  friend class CondVar;
  // Check: the precondition of a locking call, std::unique_lock's way.
  void Check() const;
  void UnlockOrAbort() noexcept;

  Mutex* mutex_ = nullptr;
  bool owns_ = false;
};

}  // namespace weft

#endif  // WEFT_SYNC_MUTEX_H_
