// sync/waiter.h: the park/unpark seam between weft's synchronisation primitives and whatever runs
// the code that waits. A primitive asks for the current Waiter, queues it, and waits on it; the
// side that releases it calls notify(). On a plain thread the Waiter blocks the thread (futex);
// a fiber scheduler installs a provider on its worker threads whose Waiters park the running
// fiber instead. sync depends on this interface only, never on a scheduler.
//
// Defines: weft::Waiter, weft::SyncClock, weft::current_waiter, weft::WaiterProvider,
// weft::set_waiter_provider.

#ifndef WEFT_SYNC_WAITER_H_
#define WEFT_SYNC_WAITER_H_

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <optional>

#include "weft/base/clock.h"
#include "weft/sync/internal/wait_node.h"

namespace weft {

namespace sync_internal {
class AsyncParkBase;
}  // namespace sync_internal

// SyncClock (weft/base/clock.h): steady_clock, or a simulated runtime's virtual clock.

// Waiter: one execution (a thread or a fiber) that can block. A permit model, like a binary
// semaphore: notify() leaves a permit (at most one), wait() consumes it or blocks for one, so a
// notify that comes before the wait is not lost.
//
// Lifetime contract: a Waiter must stay a live object until every notify() that may target it
// has returned, even after its owner stopped waiting. Thread waiters are never destroyed (an
// exiting thread's waiter is recycled for the next thread; a late notify is a stale permit,
// which waits tolerate). Fiber schedulers must keep the same promise for fiber waiters.
class Waiter {
 public:
  virtual ~Waiter() = default;
  // wait: the owning execution only. Returns true when a permit was consumed, false when the
  // deadline passed first. Callers re-check their condition: a permit may be stale.
  virtual bool wait(std::optional<SyncClock::time_point> deadline) = 0;
  // notify: any thread.
  virtual void notify() = 0;
  // suspend: for a Waiter that stands for a stackless task (a C++20 coroutine that a scheduler
  // runs): the task, suspended at `h` once the caller's await_suspend returns, waits as `park`
  // says: its scheduler calls park.Continue each time the task is woken (a notify, or the
  // deadline park.deadline() passing) and resumes `h` once Continue returns true. Returns true.
  // Owner only. Threads and fibers return false (the default): they cannot suspend a coroutine
  // without blocking, so the awaitable blocks them in wait() instead.
  virtual bool suspend(sync_internal::AsyncParkBase& park, std::coroutine_handle<> h) {
    (void)park;
    (void)h;
    return false;
  }
  // can_block: false for a Waiter whose wait() must not be called (a stackless task's: it would
  // stall its worker). The rare waits that cannot be made awaitable (a Deregister that finds the
  // callback running) spin instead.
  virtual bool can_block() const { return true; }

  // The rest (but own_node, below) is read or written on every wait, so it is plain data, not
  // virtual calls (three indirect calls per park were 4% of a channel round trip between fibers).
  //
  // spins_before_park: how many pause iterations a primitive may spin re-checking its condition
  // before calling wait(). Threads spin (a futex sleep and wake cost tens of microseconds);
  // fibers should not (spinning holds up the other fibers of the worker).
  int spins_before_park() const { return spins_before_park_; }
  // interrupted: the execution is asked to stop (its fiber runtime is shutting down). Primitives
  // check it before and after each wait() and fail the wait with operation_canceled, so a parked
  // fiber unwinds instead of keeping its runtime alive. Threads are never interrupted.
  bool interrupted() const {
    // acquire: pairs with the release that set the flag; what was done before it is visible.
    return interrupt_ != nullptr && interrupt_->load(std::memory_order_acquire);
  }
  // note_wait: what the coming wait() waits on (a static kind such as "Mutex", and the object),
  // for a scheduler's list of parked fibers. (nullptr, nullptr) clears it. Owner only.
  void note_wait(const char* what, const void* object) {
    // relaxed: informational; a reader on another thread may see either value.
    what_.store(what, std::memory_order_relaxed);
    object_.store(object, std::memory_order_relaxed);
  }
  // waiting_on / waiting_on_object: the last note_wait. Any thread (relaxed, informational).
  const char* waiting_on() const { return what_.load(std::memory_order_relaxed); }
  const void* waiting_on_object() const { return object_.load(std::memory_order_relaxed); }

  // identity: which execution this Waiter stands for now, unique in the process and never
  // reused: a thread's waiter gets a new one when the pool hands it to the next thread, a
  // fiber's when its Fiber object is reused for a new fiber. Ownership (a Mutex's owner) is
  // recorded by identity, so it never passes to the next user of a recycled Waiter. Never 0.
  std::uint64_t identity() const { return identity_; }

  // own_node: for //sync's primitives only. Room for the queue node of the one wait this
  // execution is in, used by those whose release may wake many waiters at once (Event,
  // Semaphore, WaitGroup, Barrier): waking them all walks their nodes, which sit in Waiter
  // objects, close together, instead of on as many separate stacks (a page each, so a TLB miss
  // each: waking 100,000 parked fibers walked its queue in 12 ms with nodes on the stacks, 6 ms
  // with nodes here). Virtual, and kept by the implementation, so that a Waiter that never
  // blocks (a stackless task's) need not carry one: only those blocking waits call it.
  virtual sync_internal::WaitNode& own_node() = 0;

 protected:
  // interrupt: a flag that, once true, makes interrupted() true (null: never interrupted). It
  // must outlive the Waiter.
  explicit Waiter(int spins_before_park = 0, const std::atomic<bool>* interrupt = nullptr) noexcept
      : interrupt_(interrupt), spins_before_park_(spins_before_park) {}
  // set_identity: by the owner of the Waiter as it starts standing for a new execution. Ids
  // with the top bit set are thread waiters' (sync's own counter); fiber schedulers use ids
  // below 2^63 that they never reuse (weft's runtime: its process-wide fiber ids).
  void set_identity(std::uint64_t id) { identity_ = id; }
  // set_interrupt: by the owner, while no execution uses the Waiter (a scheduler that hands a
  // Waiter to another runtime).
  void set_interrupt(const std::atomic<bool>* interrupt) { interrupt_ = interrupt; }
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

 private:
  const std::atomic<bool>* interrupt_;
  std::uint64_t identity_ = 0;
  std::atomic<const char*> what_{nullptr};
  std::atomic<const void*> object_{nullptr};
  // Last: what would be padding after it is tail padding, which an implementation's own members
  // may use (a fiber's record is counted in lines).
  int spins_before_park_;
};

// current_waiter: the Waiter of the calling execution: the fiber's, if the thread's provider
// returns one, else the thread's own. Any thread.
Waiter& current_waiter();

// WaiterProvider: returns the running fiber's Waiter, or null when no fiber runs (then the
// thread's own is used).
using WaiterProvider = Waiter* (*)(void* arg);

// set_waiter_provider: installs `provider` for the calling thread (a scheduler's worker does this
// once); null removes it.
void set_waiter_provider(WaiterProvider provider, void* arg);

namespace sync_internal {
// CurrentWaiterIfReady: what current_waiter() returns when that needs no allocation (a fiber's
// Waiter, or a thread's that has been made before), else null. Never throws: for primitives
// that look their waiter up under a spin lock (they unlock, call current_waiter(), and retry).
Waiter* CurrentWaiterIfReady() noexcept;
}  // namespace sync_internal

}  // namespace weft

#endif  // WEFT_SYNC_WAITER_H_
