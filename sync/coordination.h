// sync/coordination.h: counting and signalling primitives that park fibers (or block threads).
//
// Defines: weft::Semaphore, weft::WaitGroup, weft::Event, weft::Barrier.
//
// Every wait takes WaitOptions (deadline, cancellation) and reports timed_out or
// operation_canceled; a wait that is satisfied just as it gives up reports success. Destroying
// any of them while something waits aborts with a message.

#ifndef WEFT_SYNC_COORDINATION_H_
#define WEFT_SYNC_COORDINATION_H_

#include <coroutine>
#include <cstddef>
#include <cstdint>

#include "weft/base/result.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/internal/spin_lock.h"
#include "weft/sync/internal/wait_queue.h"

namespace weft {

// WaitList: the lock and queue the primitives below share, with the common wait.
class WaitList {
 protected:
  // What a primitive's WaitStepFn is asked to do at each step of an Awaiter's wait (below).
  enum class WaitStep { kReady, kAbort };
  using WaitStepFn = bool (*)(WaitList& list, WaitStep step, bool* unlocked);

 public:
  // Awaiter: the common wait for a task (scheduler/task.h), which must not block its worker:
  // what each primitive's async_ form returns (co_await event.async_wait()). The primitive's
  // WaitStepFn, called with lock_ held, does its part of each step. kReady: says whether the wait
  // is over at once (and takes what it needs: a Semaphore's permit); it leaves lock_ held, or
  // releases it through WakeAllAndUnlock (a Barrier's last arrival) and says so in *unlocked.
  // Otherwise the task queues and waits as WaitQueued would. kAbort: WaitQueued's on_abort (its
  // result is unused). From a coroutine that is not a task, it blocks the fiber or thread that
  // runs it. One function rather than two, and the options kept by the park alone: W8's frame,
  // parked in Event::async_wait, 240 -> 208 bytes (the slab's 256-byte class to its 224). The
  // queue node is the awaiter's own, not its Waiter's: a task's record has no room for one.
  class Awaiter {
   public:
    bool await_ready();
    bool await_suspend(std::coroutine_handle<> h);
    Result<void> await_resume();
    // queued: the wait was not over at once (kReady said no).
    bool queued() const { return node_.waiter != nullptr; }

   private:
    friend class WaitList;
    Awaiter(WaitList& list, WaitStepFn step, const WaitOptions& options)
        : list_(list), step_(step), park_(&Done, this, options) {}
    static bool Done(void* self);
    WaitList& list_;
    WaitStepFn step_;
    sync_internal::AsyncPark park_;
    sync_internal::WaitNode node_;  // its waiter is set once queued
  };

 protected:
  explicit WaitList(const char* what) : what_(what) {}
  ~WaitList();
  // WaitQueued: the caller holds lock_ and has decided to wait: queues, unlocks, parks. `on_abort`
  // runs under lock_ if the wait gives up while still queued (to undo bookkeeping).
  template <typename OnAbort>
  Result<void> WaitQueued(const WaitOptions& options, OnAbort on_abort);
  // WaitQueued's two ends around its park, shared with Awaiter. QueueAndUnlock: the caller holds
  // lock_; queues the calling execution's node and unlocks. Withdraw: after the park ended with
  // r: {} if granted (also just as it gave up), else takes the node off the queue, runs
  // on_abort under lock_, and returns the error.
  sync_internal::WaitNode& QueueAndUnlock();
  void QueueAndUnlock(sync_internal::WaitNode& node);  // (the caller's node, not the Waiter's)
  template <typename OnAbort>
  Result<void> Withdraw(sync_internal::WaitNode& node, sync_internal::ParkResult r,
                        OnAbort on_abort);
  // WakeAllAndUnlock: the caller holds lock_; returns after unlocking and notifying.
  void WakeAllAndUnlock();
  // WakeAllInBatchesAndUnlock: the same, a batch at a time (lock, grant a batch, unlock,
  // notify it), so that each batch's waiters are still in the cache when notified. Only for a
  // state in which no new waiter can queue (a set Event): a later waiter would be woken too.
  void WakeAllInBatchesAndUnlock();
  Awaiter AsyncWait(WaitStepFn step, const WaitOptions& options) {
    return Awaiter(*this, step, options);
  }

  const char* what_;                      // the kind named in dumps of parked fibers
  mutable sync_internal::SpinLock lock_;  // mutable: const accessors take it too
  sync_internal::WaitQueue queue_ ABSL_GUARDED_BY(lock_);
};

// Semaphore: a count of permits. acquire waits for one; release adds (handing them to waiters
// first, in FIFO order).
class Semaphore : private WaitList {
 public:
  explicit Semaphore(std::int64_t initial) : WaitList("Semaphore"), count_(initial) {}
  Result<void> acquire(const WaitOptions& options = {});
  Awaiter async_acquire(
      const WaitOptions& options = sync_internal::kNoWaitOptions);  // acquire for a task: co_await
  bool try_acquire();
  void release(std::int64_t n = 1);
  std::int64_t available() const;

 private:
  std::int64_t count_ ABSL_GUARDED_BY(lock_);
};

// WaitGroup: wait() returns once the count reaches zero. add(n) with n < 0 below zero is EINVAL.
class WaitGroup : private WaitList {
 public:
  WaitGroup() : WaitList("WaitGroup") {}
  Result<void> add(std::int64_t n);
  void done() { (void)add(-1); }
  Result<void> wait(const WaitOptions& options = {});
  Awaiter async_wait(
      const WaitOptions& options = sync_internal::kNoWaitOptions);  // wait for a task: co_await
  std::int64_t count() const;

 private:
  std::int64_t count_ ABSL_GUARDED_BY(lock_) = 0;
};

// Event: one-shot. wait() returns once set() has been called (ever).
class Event : private WaitList {
 public:
  Event() : WaitList("Event") {}
  void set();
  bool is_set() const;
  Result<void> wait(const WaitOptions& options = {});
  Awaiter async_wait(
      const WaitOptions& options = sync_internal::kNoWaitOptions);  // wait for a task: co_await

 private:
  bool set_ ABSL_GUARDED_BY(lock_) = false;
};

// Barrier: `parties` executions meet; each arrive_and_wait returns once all have arrived, and the
// barrier resets for the next round. A generation count plays the role of the sense flag of a
// sense-reversing barrier (Lace's): a waiter is released when the generation moves past the one
// it arrived in. One arrival per round reports is_leader (the last to arrive). A participant that
// times out or is cancelled before the round completes withdraws its arrival.
class Barrier : private WaitList {
 public:
  explicit Barrier(std::size_t parties)
      : WaitList("Barrier"), parties_(parties == 0 ? 1 : parties) {}
  // arrive_and_wait: true for the round's last arrival (the leader).
  Result<bool> arrive_and_wait(const WaitOptions& options = {});
  // async_arrive_and_wait: arrive_and_wait for a task: `Result<bool> leader = co_await
  // barrier.async_arrive_and_wait()`. The same results; a task that gives up withdraws its
  // arrival, as a fiber does.
  class ArriveAwaiter {
   public:
    bool await_ready() { return inner_.await_ready(); }
    bool await_suspend(std::coroutine_handle<> h) { return inner_.await_suspend(h); }
    Result<bool> await_resume() {
      const bool leader = !inner_.queued();  // only the last arrival passes at once
      Result<void> r = inner_.await_resume();
      if (!r.ok()) return r.error();
      return leader;
    }

   private:
    friend class Barrier;
    ArriveAwaiter(Barrier& barrier, const WaitOptions& options);
    Awaiter inner_;
  };
  ArriveAwaiter async_arrive_and_wait(const WaitOptions& options = sync_internal::kNoWaitOptions);

 private:
  // Arrive: one arrival, with lock_ held: true for the round's last, which has then woken the
  // round's waiters and unlocked.
  bool Arrive() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);

  std::size_t parties_;
  std::size_t arrived_ ABSL_GUARDED_BY(lock_) = 0;
  std::uint64_t generation_ ABSL_GUARDED_BY(lock_) = 0;
};

}  // namespace weft

#endif  // WEFT_SYNC_COORDINATION_H_
