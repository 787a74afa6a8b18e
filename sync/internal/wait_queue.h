// sync/internal/wait_queue.h: what every primitive's slow path is made of: a WaitNode per waiting
// call (on the waiter's stack), an intrusive FIFO of them guarded by the primitive's SpinLock,
// and Park, the one loop that waits for a node to be granted, a deadline, or a cancellation.
//
// Protocol: the waiter queues its node under the lock and parks; a releaser dequeues the node
// under the lock, sets its state, unlocks, then notifies the waiter (whose Waiter outlives the
// notify, see sync/waiter.h). After a timeout or cancellation the waiter takes the lock and checks
// the node again: if it was granted meanwhile, the grant stands (no lost wake-up).

#ifndef WEFT_SYNC_INTERNAL_WAIT_QUEUE_H_
#define WEFT_SYNC_INTERNAL_WAIT_QUEUE_H_

#include <atomic>
#include <cassert>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <initializer_list>
#include <system_error>
#include <vector>

#include "weft/base/internal/model_hooks.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/internal/spin_lock.h"
#include "weft/sync/internal/wait_node.h"
#include "weft/sync/waiter.h"

namespace weft::sync_internal {

class WaitQueue {
 public:
  bool empty() const { return head_ == nullptr; }
  WaitNode* front() const { return head_; }
  void push_back(WaitNode* n) {
    n->prev = tail_;
    n->next = nullptr;
    if (tail_ != nullptr)
      tail_->next = n;
    else
      head_ = n;
    tail_ = n;
    n->queued = true;
    ++size_;
  }
  void push_front(WaitNode* n) {
    n->next = head_;
    n->prev = nullptr;
    if (head_ != nullptr)
      head_->prev = n;
    else
      tail_ = n;
    head_ = n;
    n->queued = true;
    ++size_;
  }
  void remove(WaitNode* n) {
    if (!n->queued) return;
    if (n->prev != nullptr)
      n->prev->next = n->next;
    else
      head_ = n->next;
    if (n->next != nullptr)
      n->next->prev = n->prev;
    else
      tail_ = n->prev;
    Unlinked(n);
    --size_;
  }
  WaitNode* pop_front() {
    WaitNode* n = head_;
    if (n != nullptr) remove(n);
    return n;
  }
  // drain: empties the queue, calling grant(node) for every node, front to back, and storing
  // what each returns in out[0..size()) (in that order): `out` must have room for size(). It
  // allocates nothing, so it is safe under the lock. For wake-all: the walk goes from both ends
  // at once, so the cache misses of the two chains overlap (the nodes live on the waiters'
  // stacks, a page each; 100,000 waiters are a chain of 100,000 misses).
  template <typename Grant, typename T>
  void drain(Grant grant, T* out) {
    WaitNode* a = head_;
    WaitNode* b = tail_;
    std::size_t front = 0, back = size_;
    head_ = tail_ = nullptr;
    size_ = 0;
    while (a != nullptr) {
      WaitNode* a_next = a->next;
      Unlinked(a);
      out[front++] = grant(a);
      if (a == b) break;
      WaitNode* b_prev = b->prev;
      Unlinked(b);
      out[--back] = grant(b);
      if (a_next == b) break;
      a = a_next;
      b = b_prev;
    }
  }
  std::size_t size() const { return size_; }

 private:
  static void Unlinked(WaitNode* n) {
    n->prev = n->next = nullptr;
    n->queued = false;
  }
  WaitNode* head_ = nullptr;
  WaitNode* tail_ = nullptr;
  std::size_t size_ = 0;
};

// QueueNode: queues `node` for `waiter` on `queue`, whose lock the caller holds. A granted node
// is never touched by its releaser again (Grant's store is last), so the node may end as soon
// as its wait does.
inline void QueueNode(WaitQueue& queue, WaitNode& node, Waiter& waiter) {
  assert(!node.queued);
  node.waiter = &waiter;
  // relaxed: nobody else sees the node before push_back (under the lock) publishes it.
  node.state.store(kWaiting, std::memory_order_relaxed);
  queue.push_back(&node);
}

// QueueOwnNode: queues the calling execution's node on `queue`, whose lock the caller holds, and
// returns it. The node lives in the Waiter (Waiter::own_node): an execution waits on one thing
// at a time. For blocking waits: a task's awaiters carry their own (QueueNode).
inline WaitNode& QueueOwnNode(WaitQueue& queue) {
  Waiter& self = current_waiter();
  WaitNode& node = self.own_node();
  QueueNode(queue, node, self);
  return node;
}

// Grant: marks a dequeued node (under the lock) and returns the Waiter to notify once the lock
// is released.
inline Waiter* Grant(WaitNode* n, NodeState state) {
  Waiter* w = n->waiter;
  // release: the waiter's acquire load sees what we did before granting.
  n->state.store(state, std::memory_order_release);
  return w;
}

// ReserveWakeList: room in `wake` for n Waiters; false if there is no memory for it. Called
// with a primitive's lock held by the wake-alls below: their only allocation, made before the
// first grant, so that running out of memory can neither leave the lock held (a std::bad_alloc
// thrown while granting did) nor a granted waiter without its notify.
bool ReserveWakeList(std::vector<Waiter*>& wake, std::size_t n) noexcept;

// WakeAndUnlock: grants up to `max` of q's nodes (front first) with `state`, releases `lock`
// (held on entry), then notifies their waiters. Without memory for the list of waiters, each is
// notified as it is granted, with the lock still held: slower (the woken may spin on the lock),
// but nothing is lost and nothing throws.
void WakeAndUnlock(SpinLock& lock, WaitQueue& q, NodeState state,
                   std::size_t max = static_cast<std::size_t>(-1)) noexcept;

// Now: SyncClock::now(), or under the model checker its deterministic clock (so that a
// schedule that depends on time replays).
inline SyncClock::time_point Now() {
#ifdef WEFT_MODEL
  if (base_internal::ModelHooks* m = base_internal::ActiveModel()) {
    return SyncClock::time_point(std::chrono::nanoseconds(m->NowNanos()));
  }
#endif
  return SyncClock::now();
}

enum class ParkResult : std::uint8_t { kWoken, kTimedOut, kCancelled };

// Park: blocks the calling execution until done() is true, the deadline passes, the token is
// cancelled, or the waiter is interrupted (cancelled too; not when `interruptible` is false: a
// wait that must end with its condition, as a CondVar's re-lock of its mutex). Spins first:
// `spins` pause iterations, or by default as long as the Waiter asks (threads: a futex wake
// costs ~19 us here). `what` and `object` name the wait for a scheduler's dump of parked fibers.
template <typename Done>
ParkResult Park(Waiter& waiter, Done done, const WaitOptions& options, const char* what,
                const void* object, int spins = -1, bool interruptible = true) {
  if (spins < 0) spins = waiter.spins_before_park();
  CancelRegistration reg;
  reg.fn = [](void* w) { static_cast<Waiter*>(w)->notify(); };
  reg.arg = &waiter;
  CancelState* cancel_state = options.cancel != nullptr ? StateOf(*options.cancel) : nullptr;
  if (cancel_state != nullptr && !Register(cancel_state, &reg)) return ParkResult::kCancelled;
  // The wait's deadline, or its token's (a source's cancel_at) when that is earlier: reaching
  // the token's is a cancellation.
  const EffectiveDeadline deadline = DeadlineOf(options);
  ParkResult result = ParkResult::kWoken;
  // done() is evaluated once per step (a sleep's done() reads the clock; each read showed in
  // profiles of timer-heavy work).
  bool finished = done();
  for (; spins > 0 && !finished; --spins) {
    CpuRelax();
    finished = done();
  }
  if (!finished) {
    waiter.note_wait(what, object);
    do {
      if ((cancel_state != nullptr && options.cancel->is_cancelled()) ||
          (interruptible && waiter.interrupted())) {
        result = ParkResult::kCancelled;
        break;
      }
      bool woken = waiter.wait(deadline.at);
      finished = done();
      if (!woken && !finished) {
        result = deadline.by_token ? ParkResult::kCancelled : ParkResult::kTimedOut;
      }
      if (!woken) break;
    } while (!finished);
    waiter.note_wait(nullptr, nullptr);
  }
  if (cancel_state != nullptr) Deregister(cancel_state, &reg);
  return result;
}

// AsyncParkBase: what a stackless task's scheduler drives while the task is suspended in a
// wait (Waiter::suspend): Continue after each wake-up, and the deadline to wake it at. Two kinds:
// AsyncPark, a wait with a deadline, a token and the shutdown's interruption (what most
// awaitables use), and AsyncPlainPark, a wait that ends only when its condition holds (kept
// small: it sits in the frame of every task's I/O call).
class AsyncParkBase {
 public:
  using DoneFn = bool (*)(void* arg);
  AsyncParkBase(const AsyncParkBase&) = delete;
  AsyncParkBase& operator=(const AsyncParkBase&) = delete;

  // Continue: by the task's scheduler, on the task's behalf, after a wake-up: woken by a notify
  // (true), or the deadline passed (false). True: the wait is over, resume the task; false:
  // wait again, until deadline().
  bool Continue(bool woken);
  std::optional<SyncClock::time_point> deadline() const;
  ParkResult result() const { return result_; }

 protected:
  AsyncParkBase(DoneFn done, void* arg, bool plain, bool again = false)
      : done_(done), done_arg_(arg), plain_(plain), again_(again) {}
  ~AsyncParkBase() = default;
  // Suspend: the common end of Begin once the wait's condition was false: suspends the task at
  // h, or (not a task) blocks the thread or fiber until Continue says the wait is over. True:
  // suspended.
  bool Suspend(std::coroutine_handle<> h, const char* what, const void* object);

  DoneFn done_;
  void* done_arg_;
  Waiter* waiter_ = nullptr;
  ParkResult result_ = ParkResult::kWoken;
  bool interruptible_ = false;
  // AsyncPark's: the deadline is the token's (reaching it cancels), and the token has its
  // registration (reg_).
  bool deadline_by_token_ = false;
  bool registered_ = false;
  const bool plain_;  // an AsyncPlainPark
  const bool again_;  // an AsyncRepark
};

// AsyncPark: Park for a stackless task (a C++20 coroutine), the same loop turned inside out:
// the awaitable's await_suspend calls Begin, which suspends the task through its Waiter
// (Waiter::suspend) instead of blocking; the task's scheduler calls Continue each time the task
// is woken, which does what one turn of Park's loop does after wait() returns and says whether
// the task resumes now or waits again; the awaitable's await_resume calls End. Where the Waiter
// cannot suspend (a coroutine resumed by a plain thread or a fiber), Begin runs Park itself and
// returns with the wait over, so an awaitable works from any coroutine, blocking the thread or
// fiber that runs it.
//
// done: the wait's condition, as Park's; called on the task's side only (Begin, Continue), so
// it may act for the task (a Mutex's competes for the lock when woken).
class AsyncPark : public AsyncParkBase {
 public:
  AsyncPark(DoneFn done, void* arg) : AsyncPark(done, arg, nullptr, /*again=*/false) {}
  // With the wait's options, for the Begin without them: the park keeps what it needs of them
  // (the deadline and the token's address), so an awaitable need not keep a copy beside it
  // (24 bytes of every frame that waits in it).
  AsyncPark(DoneFn done, void* arg, const WaitOptions& options)
      : AsyncPark(done, arg, &options, /*again=*/false) {}

  // Begin: true: the task stays suspended at `h` until Continue says otherwise; false: the
  // wait is over (result() tells how) and the coroutine goes on at once. The token in
  // `options` must outlive the wait. Without `options`: those the park was made with.
  bool Begin(Waiter& waiter, std::coroutine_handle<> h, const WaitOptions& options,
             const char* what, const void* object, bool interruptible = true) {
    cancel_ = options.cancel;
    deadline_ = options.deadline.value_or(kNoDeadline);
    return Begin(waiter, h, what, object, interruptible);
  }
  bool Begin(Waiter& waiter, std::coroutine_handle<> h, const char* what, const void* object,
             bool interruptible = true);
  std::optional<SyncClock::time_point> deadline() const {
    if (deadline_ == kNoDeadline) return std::nullopt;
    return deadline_;
  }
  // Uncancellable: for an AgainFn whose next park must end only with its condition (a CondVar's
  // re-lock): the token and the shutdown no longer end the wait.
  void Uncancellable();
  // End: from await_resume, on the task: ends the wait (its cancellation registration) and
  // returns how it ended.
  ParkResult End();

 protected:
  // options: null for none; again: an AsyncRepark.
  AsyncPark(DoneFn done, void* arg, const WaitOptions* options, bool again)
      : AsyncParkBase(done, arg, /*plain=*/false, again),
        cancel_(options != nullptr ? options->cancel : nullptr),
        deadline_(options != nullptr ? options->deadline.value_or(kNoDeadline) : kNoDeadline) {}

 private:
  friend class AsyncParkBase;
  // No deadline: a sentinel rather than an optional, 8 bytes of every frame that waits. A
  // deadline at the clock's end is never reached either.
  static constexpr SyncClock::time_point kNoDeadline = SyncClock::time_point::max();
  bool ContinueWithOptions(bool woken);
  bool Cancelled() const {
    return (registered_ && cancel_->is_cancelled()) || (interruptible_ && waiter_->interrupted());
  }
  // Over: the park ends with result_: true; false if it is to park again (AsyncRepark).
  bool Over();
  // SetDeadline: the park's deadline from options: its own, or its token's when that is earlier.
  void SetDeadline(const WaitOptions& options) {
    const EffectiveDeadline d = DeadlineOf(options);
    deadline_ = d.at.value_or(kNoDeadline);
    deadline_by_token_ = d.by_token;
  }

  // The wait's token (null: none); registered_ says whether reg_ is on its state. (Its state is
  // looked up, not kept: 8 bytes of every frame that waits.)
  const CancellationToken* cancel_ = nullptr;
  CancelRegistration reg_;
  SyncClock::time_point deadline_ = kNoDeadline;
};

// AsyncRepark: an AsyncPark for a wait made of several parks (select: its timer and token cases
// are looked at each time a park ends; a CondVar's re-lock after its notify; a Timer's). Its
// AgainFn is called with the arg as the park would end with r; true to park again, until
// *deadline (the token's cancel_at still applies). A class of its own, so that the parks that
// never park again carry no AgainFn.
class AsyncRepark final : public AsyncPark {
 public:
  using AgainFn = bool (*)(void* arg, ParkResult r, std::optional<SyncClock::time_point>* deadline);
  AsyncRepark(DoneFn done, void* arg, AgainFn again)
      : AsyncPark(done, arg, nullptr, /*again=*/true), again_fn_(again) {}
  AsyncRepark(DoneFn done, void* arg, const WaitOptions& options, AgainFn again)
      : AsyncPark(done, arg, &options, /*again=*/true), again_fn_(again) {}

 private:
  friend class AsyncPark;
  AgainFn again_fn_;
};

class AsyncPlainPark final : public AsyncParkBase {
 public:
  AsyncPlainPark(DoneFn done, void* arg) : AsyncParkBase(done, arg, /*plain=*/true) {}
  // Begin, End: as AsyncPark's.
  bool Begin(Waiter& waiter, std::coroutine_handle<> h, const char* what, const void* object);
  ParkResult End() {
    if (waiter_ != nullptr) waiter_->note_wait(nullptr, nullptr);  // (null: never began)
    return result_;
  }
};

inline std::optional<SyncClock::time_point> AsyncParkBase::deadline() const {
  if (plain_) return std::nullopt;
  return static_cast<const AsyncPark*>(this)->deadline();
}

// AbortIfWaitedOn: the destructor check of every primitive: destroying one while something waits
// on it aborts with a message rather than leaving waiters on freed memory.
void AbortIfWaitedOn(SpinLock& lock, std::initializer_list<const WaitQueue*> queues,
                     const char* what);

inline std::errc ErrorOf(ParkResult r) {
  return r == ParkResult::kTimedOut ? std::errc::timed_out : std::errc::operation_canceled;
}

}  // namespace weft::sync_internal

#endif  // WEFT_SYNC_INTERNAL_WAIT_QUEUE_H_
