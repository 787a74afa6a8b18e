// scheduler/task_group.cc: a TaskGroup's shared state (GroupCore in task_group.h): admitting
// children, their reports as they finish, the joins' waits, the first failure and the fail-fast
// cancel. Touches the runtime only through Spawn (in the header) and the fiber's group token.
//
// Two modes. In spawn-order mode (a group's first), a child's finish is one exchange on its
// record's JoinSignal, as a plain spawn's is, and join_all walks the list of children in spawn
// order, waiting on each as JoinHandle::join does: no lock is shared between the spawner, the
// children and the joiner but the spawner's own. The first join_next puts the group in queue
// mode for good (discard_outcomes starts there): each listed child's record is dropped, so that
// its finish queues it in completion order under the lock, with the protocol of every //sync
// primitive (sync/internal/wait_queue.h): a joiner queues its node under lock_ and parks; a
// finishing child grants nodes under lock_ and notifies after unlocking. A finish grants one
// join_next waiter; the last running child's finish grants every waiter of both kinds.

#include "weft/scheduler/task_group.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <utility>

#include "weft/sync/waiter.h"

namespace weft {
namespace scheduler_internal {

namespace {
CancellationToken ParentOf(const TaskGroupOptions& options) {
  if (options.parent.has_value()) return *options.parent;
  const CancellationToken* enclosing = CurrentGroupToken();
  return enclosing != nullptr ? *enclosing : CancellationToken();
}
}  // namespace

GroupCore::GroupCore(Runtime* rt, const TaskGroupOptions& options)
    : rt_(rt),
      policy_(options.policy),
      discard_(options.discard_outcomes),
      source_(ParentOf(options)),
      token_(source_.token()),
      queue_mode_(options.discard_outcomes) {}

GroupCore::~GroupCore() {
  sync_internal::AbortIfWaitedOn(lock_, {&next_waiters_, &all_waiters_}, "a TaskGroup");
  // Empty once CancelAndJoin has run.
  Taken left{std::move(in_order_), std::move(finished_)};
  left.Free();
}

std::size_t Taken::count() const {
  return ring.count +
         static_cast<std::size_t>(std::count_if(in_order.begin(), in_order.end(),
                                                [](const Finished& f) { return f.id != 0; }));
}

void Taken::Free() noexcept {
  for (const Finished& f : in_order) {
    if (f.child != nullptr) f.child->destroy(f.child);
  }
  in_order.clear();
  for (std::size_t i = 0; i < ring.count; ++i) {
    if (GroupChild* c = ring.at(i).child) c->destroy(c);
  }
  ring.count = 0;
}

bool GroupCore::IsOwnChild() const { return CurrentGroupToken() == &token_; }

Result<bool> GroupCore::Reserve(std::size_t n) {
  if (finished_.capacity >= running_ + finished_.count + n) return true;
  // Grow the ring outside the lock (finishing children keep going), then move it in, unless
  // another call grew it meanwhile.
  const std::size_t want =
      std::max({std::size_t{64}, 2 * finished_.capacity, running_ + finished_.count + n});
  lock_.unlock();
  std::unique_ptr<Finished[]> slots(new (std::nothrow) Finished[want]);
  lock_.lock();
  if (slots == nullptr) return std::errc::not_enough_memory;
  if (finished_.capacity < want) {
    for (std::size_t i = 0; i < finished_.count; ++i) slots[i] = finished_.at(i);
    finished_.slots.swap(slots);
    finished_.capacity = want;
    finished_.head = 0;
  }
  // The old array is freed outside the lock.
  lock_.unlock();
  slots.reset();
  lock_.lock();
  return false;
}

Result<std::uint64_t> GroupCore::Admit(GroupChild* child) {
  // A cancelled group starts nothing: fail-fast has tripped, or the group (or a parent) was
  // cancelled, or it is being destroyed. A cancel racing this check admits a child that then
  // sees a cancelled token, as a child already running does.
  if (token_.is_cancelled()) return std::errc::operation_canceled;
  lock_.lock();
  for (;;) {
    if (tripped_) {
      (void)MakePendingCancel();
      lock_.unlock();
      return std::errc::operation_canceled;
    }
    if (queue_mode_) {
      if (!discard_) {  // discarded outcomes take no room
        Result<bool> room = Reserve(1);
        if (!room) {
          lock_.unlock();
          return room.error();
        }
        if (!*room) continue;  // it let go of the lock: look again
      }
      (void)child->done.drop();  // never set yet: its finish will queue it (Publish)
      ++running_;
      break;
    }
    if (in_order_.size() < in_order_.capacity()) {
      in_order_.push_back(Finished{child, next_id_});  // within capacity: cannot throw
      break;
    }
    // Grow the list outside the lock, as the ring.
    const std::size_t want = std::max<std::size_t>(64, 2 * in_order_.capacity());
    lock_.unlock();
    std::vector<Finished> bigger;
    try {
      bigger.reserve(want);
    } catch (const std::bad_alloc&) {
      return std::errc::not_enough_memory;
    }
    lock_.lock();
    if (!queue_mode_ && in_order_.capacity() < want) {
      bigger.assign(in_order_.begin(), in_order_.end());  // within capacity: cannot throw
      in_order_.swap(bigger);
    }
    lock_.unlock();
    bigger = {};  // the old (or unused) storage, freed outside the lock
    lock_.lock();
  }
  child->id = next_id_++;
  lock_.unlock();
  return child->id;
}

void GroupCore::WakeAllAndUnlock() {
  // Every waiter of both kinds, through one queue.
  while (!all_waiters_.empty()) next_waiters_.push_back(all_waiters_.pop_front());
  sync_internal::WakeAndUnlock(lock_, next_waiters_, sync_internal::kGranted);
}

void GroupCore::WakeIfIdleAndUnlock() {
  if (running_ == 0) {
    // join_all's return; join_next's take what finished or report no_child_process.
    WakeAllAndUnlock();
  } else {
    lock_.unlock();
  }
}

bool GroupCore::Withdraw(GroupChild* child) noexcept {
  lock_.lock();
  auto listed = std::find_if(in_order_.rbegin(), in_order_.rend(),
                             [&](const Finished& f) { return f.child == child; });
  if (listed == in_order_.rend()) {
    // Admitted in queue mode, or listed and handed to running_ since: it counts there.
    --running_;
    WakeIfIdleAndUnlock();
    return true;
  }
  if (!walking_) {
    in_order_.erase(std::next(listed).base());
    lock_.unlock();
    return true;
  }
  // A join_all walks the list, and may be waiting on this very record: it frees it, seeing it
  // withdrawn as its `done` is set.
  child->withdrawn = true;
  ++withdrawn_;
  lock_.unlock();
  if (!child->done.set()) return false;
  // The walker switched the group to queue mode meanwhile, and counted it as running.
  lock_.lock();
  --running_;
  WakeIfIdleAndUnlock();
  return true;
}

void GroupCore::Report(GroupChild* child, bool on_fiber) noexcept {
  if (!child->failed()) return;
  lock_.lock();
  bool trip = false;
  if (first_exception_ == nullptr && first_error_ == std::errc{}) {  // the first failure
    first_exception_ = child->exception;
    first_error_ = child->error;
    trip = policy_ == GroupPolicy::kFailFast;
    tripped_ = trip;
  }
  lock_.unlock();
  if (!trip) return;
  // Before the child is published, so that a joiner woken by it finds the siblings cancelled.
  // Not under lock_: the token's callbacks run here and may park.
  if (on_fiber) {
    source_.cancel();
  } else if (!sync_internal::CancelOnDeadlineThread(StateOf(token_)).ok()) {
    // A child that could not start reports on a worker's own context, which cannot park (as
    // a callback may): the deadline thread cancels instead, shortly after (spawns are refused
    // from now: tripped_). Without memory or a thread for it, a join makes the cancel: wake
    // the parked ones to do it (Wait), or the next join or spawn will.
    lock_.lock();
    cancel_pending_ = true;
    InterruptWalk();
    WakeAllAndUnlock();
  }
}

GroupCore::Pending GroupCore::MakePendingCancel() {
  if (!cancel_pending_) return Pending::kNone;
  if (!current_waiter().can_block()) [[unlikely]] {
    // A task's join or spawn: the callbacks cannot run here either (a task must not park).
    // The deadline thread is asked again; if it refuses, the cancel stays pending (for a
    // fiber's join or spawn, or the next look) and a task's join reports it.
    lock_.unlock();
    const bool handed = sync_internal::CancelOnDeadlineThread(StateOf(token_)).ok();
    lock_.lock();
    if (!handed) return Pending::kRefused;
    cancel_pending_ = false;
    return Pending::kMade;
  }
  cancel_pending_ = false;
  // Not under lock_: the token's callbacks run here and may park.
  lock_.unlock();
  source_.cancel();
  lock_.lock();
  return Pending::kMade;
}

void GroupCore::InterruptWalk() {
  if (walker_ == nullptr) return;
  // release: what was set under lock_ before (cancel_pending_, switch_wanted_) is visible to a
  // walker that reads true outside it; it looks under lock_ anyway.
  interrupt_walk_.store(true, std::memory_order_release);
  walker_->notify();  // under lock_: the walker cannot return, and its Waiter go, meanwhile
}

void GroupCore::OnInterrupt() {
  // relaxed: under lock_, which every InterruptWalk holds.
  interrupt_walk_.store(false, std::memory_order_relaxed);
  (void)MakePendingCancel();
  if (switch_wanted_ && !queue_mode_) {
    Result<bool> done = false;
    while (done.ok() && !*done) done = ToQueueMode();
    if (!done.ok()) {
      switch_error_ = done.error();
      ++switch_round_;
    }
    switch_wanted_ = false;
    WakeAllAndUnlock();  // the join_next calls: take what finished, or the error
    lock_.lock();
  }
}

void GroupCore::Publish(GroupChild* child, bool keep) noexcept {
  const std::uint64_t id = child->id;
  if (!keep) child->destroy(child);  // no code of the child's is left in it (Finish)
  lock_.lock();
  if (!discard_) {
    // Room was reserved when the child was admitted (Admit): nothing allocates here.
    finished_.count += 1;
    finished_.at(finished_.count - 1) = Finished{keep ? child : nullptr, id};
  }
  --running_;
  if (running_ != 0 && !discard_) {
    // One more to take: one join_next waiter.
    sync_internal::WakeAndUnlock(lock_, next_waiters_, sync_internal::kGranted, 1);
  } else {
    WakeIfIdleAndUnlock();
  }
}

template <typename Ready>
Result<void> GroupCore::Wait(sync_internal::WaitQueue& queue, Ready ready,
                             const WaitOptions& options) {
  std::errc gave_up{};
  for (;;) {
    if (MakePendingCancel() == Pending::kMade) [[unlikely]]
      continue;  // it let go of the lock: look again
    if (ready()) return {};
    if (gave_up != std::errc{}) return gave_up;
    gave_up = ParkOn(queue, options);
  }
}

Result<bool> GroupCore::ToQueueMode() {
  Result<bool> room = Reserve(in_order_.size() - withdrawn_);
  if (!room || !*room) return room;
  // The children that finished already go to the ring in spawn order (their completion order
  // is not known); the others will queue themselves as they finish.
  for (const Finished& f : in_order_) {
    if (f.id == 0) continue;  // withdrawn, and freed by a walk
    if (f.child == nullptr) {
      finished_.at(finished_.count++) = f;  // freed by a walk: a void child that succeeded
    } else if (f.child->done.drop()) {
      // Finished. acquire (drop's failure): its outcome is visible.
      if (f.child->withdrawn) {
        f.child->destroy(f.child);
      } else {
        finished_.at(finished_.count++) = f;
      }
    } else {
      ++running_;
    }
  }
  std::vector<Finished> list;
  list.swap(in_order_);
  withdrawn_ = 0;
  queue_mode_ = true;
  switch_wanted_ = false;
  lock_.unlock();
  list = {};  // freed outside the lock
  lock_.lock();
  return true;
}

std::errc GroupCore::ParkOn(sync_internal::WaitQueue& queue, const WaitOptions& options) {
  sync_internal::WaitNode& node = sync_internal::QueueOwnNode(queue);
  lock_.unlock();
  sync_internal::ParkResult r = sync_internal::Park(
      *node.waiter,
      [&] {
        // acquire: pairs with Grant's release; what the granting side wrote is visible.
        return node.state.load(std::memory_order_acquire) != sync_internal::kWaiting;
      },
      options, "TaskGroup", this);
  lock_.lock();
  if (r == sync_internal::ParkResult::kWoken) return {};
  // relaxed: under lock_, which every grant holds. A grant found as the wait gives up stands:
  // the caller's step looks once more.
  if (node.state.load(std::memory_order_relaxed) == sync_internal::kWaiting) queue.remove(&node);
  return sync_internal::ErrorOf(r);
}

bool GroupCore::NextStep(NextLook& look, std::errc gave_up, Result<Finished>* out) {
  for (;;) {
    if (const Pending p = MakePendingCancel(); p != Pending::kNone) [[unlikely]] {
      if (p == Pending::kMade) continue;                 // it let go of the lock: look again
      *out = std::errc::resource_unavailable_try_again;  // a task's, refused: see Pending
      return true;
    }
    if (!look.asked) {
      if (!queue_mode_ && !walking_) {
        Result<bool> done = ToQueueMode();
        if (!done) {
          *out = done.error();
          return true;
        }
        if (!*done) continue;  // it let go of the lock: look again
      } else if (!queue_mode_ && !switch_wanted_) {
        // A join_all walks the list: the walker makes the switch (it waits on the children).
        switch_wanted_ = true;
        switch_error_ = std::errc{};  // a new request: an older one's failure is not its
        InterruptWalk();
      }
      look.round = switch_round_;
      look.asked = true;
    }
    const bool ready = queue_mode_ ? finished_.count != 0 || running_ == 0
                                   : !walking_ || switch_round_ != look.round;
    if (!ready) {
      if (gave_up == std::errc{}) return false;  // wait for a grant
      *out = gave_up;
      return true;
    }
    if (queue_mode_ && finished_.count != 0) {
      *out = finished_.at(0);
      finished_.head = (finished_.head + 1) % finished_.capacity;
      finished_.count -= 1;
      return true;
    }
    if (queue_mode_) {  // none finished, none runs
      *out = std::errc::no_child_process;
      return true;
    }
    if (walking_ && switch_error_ != std::errc{}) {  // the walker could not switch
      *out = switch_error_;                          // every join_next of the request gets it
      return true;
    }
    look.asked = false;  // the walk ended, or the request was dropped with it: ask again
  }
}

Result<Finished> GroupCore::TakeNext(const WaitOptions& options) {
  if (IsOwnChild()) return std::errc::resource_deadlock_would_occur;
  lock_.lock();
  NextLook look;
  std::errc gave_up{};
  Result<Finished> out = std::errc::invalid_argument;
  while (!NextStep(look, gave_up, &out)) gave_up = ParkOn(next_waiters_, options);
  lock_.unlock();
  return out;
}

bool GroupCore::AllStep(std::errc gave_up, Result<Taken>* out) {
  for (;;) {
    if (const Pending p = MakePendingCancel(); p != Pending::kNone) [[unlikely]] {
      if (p == Pending::kMade) continue;                 // it let go of the lock: look again
      *out = std::errc::resource_unavailable_try_again;  // a task's, refused: see Pending
      return true;
    }
    if (!queue_mode_ && !walking_) {
      Result<bool> done = ToQueueMode();
      if (!done) {
        *out = done.error();
        return true;
      }
      continue;  // switched, or it let go of the lock: look again
    }
    // A walk (a blocking join_all's) takes everything as it ends: wait for it, then take what
    // is left.
    if (walking_ || running_ != 0) {
      if (gave_up == std::errc{}) return false;  // wait for a grant
      *out = gave_up;
      return true;
    }
    *out = Taken{std::move(in_order_), std::move(finished_)};
    in_order_ = {};
    finished_ = FinishedRing{};
    withdrawn_ = 0;
    return true;
  }
}

bool GroupCore::JoinAwaiter::Look(std::errc gave_up) {
  ABSL_ASSERT_EXCLUSIVE_LOCK(core_->lock_);
  return all_ ? core_->AllStep(gave_up, &all_taken_) : core_->NextStep(look_, gave_up, &next_);
}

sync_internal::WaitQueue& GroupCore::JoinAwaiter::Queue() {
  ABSL_ASSERT_EXCLUSIVE_LOCK(core_->lock_);
  return all_ ? core_->all_waiters_ : core_->next_waiters_;
}

bool GroupCore::JoinAwaiter::await_ready() {
  if (core_ == nullptr) return over_ = true;  // a moved-from group: invalid_argument
  if (core_->IsOwnChild()) {
    next_ = std::errc::resource_deadlock_would_occur;
    all_taken_ = std::errc::resource_deadlock_would_occur;
    return over_ = true;
  }
  core_->lock_.lock();
  if (Look({})) {
    core_->lock_.unlock();
    return over_ = true;
  }
  sync_internal::QueueNode(Queue(), node_, current_waiter());
  core_->lock_.unlock();
  return false;
}

bool GroupCore::JoinAwaiter::await_suspend(std::coroutine_handle<> h) {
  // A task's join is not ended by the runtime's shutdown: the shutdown ends the children's waits,
  // and the join takes them as they finish, so that a task that joins its group to the end
  // never leaves children running for ~TaskGroup, which cannot wait in a task. (Off a task, the
  // shutdown ends it as every wait; the destructor waits there.)
  Waiter& waiter = *node_.waiter;
  return park_.Begin(waiter, h, "TaskGroup", core_,
                     /*interruptible=*/waiter.can_block());
}

bool GroupCore::JoinAwaiter::Done(void* self) {
  auto& a = *static_cast<JoinAwaiter*>(self);
  // acquire: pairs with Grant's release.
  if (a.node_.state.load(std::memory_order_acquire) == sync_internal::kWaiting) return false;
  a.core_->lock_.lock();
  if (a.Look({})) {
    a.core_->lock_.unlock();
    a.over_ = true;
    return true;
  }
  // Granted, and another join took what there was: wait for the next grant, as ParkOn's
  // caller does.
  // relaxed: nobody sees the node before push_back (under lock_) publishes it.
  a.node_.state.store(sync_internal::kWaiting, std::memory_order_relaxed);
  a.Queue().push_back(&a.node_);
  a.core_->lock_.unlock();
  return false;
}

void GroupCore::JoinAwaiter::await_resume() {
  if (node_.waiter == nullptr) return;  // over at once: never queued
  const sync_internal::ParkResult r = park_.End();
  if (over_) return;
  // Timed out, cancelled or interrupted, with the node queued again or granted meanwhile.
  core_->lock_.lock();
  // relaxed: under lock_, which every grant holds.
  if (node_.state.load(std::memory_order_relaxed) == sync_internal::kWaiting) {
    Queue().remove(&node_);
  }
  (void)Look(sync_internal::ErrorOf(r));  // with an error given, always over
  core_->lock_.unlock();
}

Result<Taken> GroupCore::TakeAll(const WaitOptions& options) {
  if (IsOwnChild()) return std::errc::resource_deadlock_would_occur;
  lock_.lock();
  // One walk at a time: another join_all's ends with the children taken.
  Result<void> waited = Wait(
      all_waiters_,
      [&] {
        ABSL_ASSERT_EXCLUSIVE_LOCK(lock_);
        return !walking_;
      },
      options);
  if (!waited.ok()) {
    lock_.unlock();
    return waited.error();
  }
  walking_ = true;
  walker_ = &current_waiter();
  interrupt_walk_.store(false, std::memory_order_relaxed);  // relaxed: under lock_, as it is set
  const auto end_walk = [&] {
    walker_ = nullptr;
    walking_ = false;
    if (std::exchange(switch_wanted_, false)) ++switch_round_;
    (void)MakePendingCancel();
    WakeAllAndUnlock();  // the joins that waited for this walk to end
  };
  // Spawn-order mode: wait for each listed child in turn, a chunk of the list at a time (copied
  // out under the lock: spawns may grow it meanwhile, children spawning siblings included), until
  // the end is reached under the lock. A void child that succeeded is freed at once, while it is
  // warm. The walk stops early if it is interrupted into queue mode (OnInterrupt).
  constexpr std::size_t kChunk = 32;
  Finished chunk[kChunk];
  for (std::size_t at = 0; !queue_mode_;) {
    const std::size_t n = std::min(kChunk, in_order_.size() - at);
    if (n == 0) break;
    std::copy_n(in_order_.begin() + static_cast<std::ptrdiff_t>(at), n, chunk);
    lock_.unlock();
    Result<void> joined;
    std::size_t i = 0;
    for (; i < n; ++i) {
      GroupChild* c = chunk[i].child;
      if (c == nullptr) continue;  // freed by an earlier walk that gave up
      joined = c->done.wait(options, &interrupt_walk_);
      if (!joined.ok()) break;
      if (c->withdrawn) {
        c->destroy(c);
        chunk[i] = Finished{nullptr, 0};
      } else if (!c->carries()) {
        c->destroy(c);
        chunk[i].child = nullptr;
      }
    }
    lock_.lock();
    // Positions do not move while walking_ (the list only grows at its end, and only the walker
    // switches it away).
    std::copy_n(chunk, i, in_order_.begin() + static_cast<std::ptrdiff_t>(at));
    at += i;
    if (joined.ok()) continue;
    if (joined.error() == std::errc::interrupted) {
      OnInterrupt();  // then on from the child it was waiting for
      continue;
    }
    // Nothing is taken: the list stays, the children walked so far marked as freed or not.
    end_walk();
    return joined.error();
  }
  // Queue mode: wait until every child has finished.
  waited = Wait(
      all_waiters_,
      [&] {
        ABSL_ASSERT_EXCLUSIVE_LOCK(lock_);
        return running_ == 0;
      },
      options);
  if (!waited.ok()) {
    end_walk();
    return waited.error();
  }
  // No child runs: the ring's room is no longer reserved for anyone; it goes with the caller.
  Taken taken{std::move(in_order_), std::move(finished_)};
  in_order_ = {};
  finished_ = FinishedRing{};
  withdrawn_ = 0;
  end_walk();
  return taken;
}

Result<void> GroupCore::FirstFailure() const {
  lock_.lock();
  std::exception_ptr exception = first_exception_;
  std::errc error = first_error_;
  lock_.unlock();
  if (exception != nullptr) std::rethrow_exception(exception);
  return error;  // std::errc{}: none failed
}

void GroupCore::Cancel() { source_.cancel(); }

std::size_t GroupCore::size() const {
  lock_.lock();
  std::size_t n = in_order_.size() - withdrawn_ + running_ + finished_.count;
  lock_.unlock();
  return n;
}

void GroupCore::CancelAndJoin() noexcept {
  if (IsOwnChild()) {
    std::fprintf(stderr,
                 "weft: a TaskGroup destroyed by one of its own children (it would wait "
                 "for itself)\n");
    std::abort();
  }
  source_.cancel();
  if (!current_waiter().can_block()) {
    // A task, which must not wait here (it would stall its worker): over if no child runs.
    lock_.lock();
    Result<Taken> taken = std::errc::invalid_argument;
    (void)AllStep(std::errc::operation_would_block, &taken);
    lock_.unlock();
    if (taken.ok()) {
      taken->Free();
      return;
    }
    if (taken.error() == std::errc::operation_would_block) {
      std::fprintf(stderr,
                   "weft: a TaskGroup destroyed in a task while children still run (a task "
                   "cannot wait for them: co_await its async_join_all first)\n");
      std::abort();
    }
    // No memory to take the finished children in queue mode: the walk below takes them in
    // spawn order, none of them running, without a wait.
  }
  for (;;) {
    Result<Taken> taken = TakeAll({});
    if (taken.ok()) {
      taken->Free();
      return;
    }
    // Only an interrupted wait fails here (its runtime shuts down, and every wait of its fibers
    // ends at once): the children are unwinding too; let them run.
    this_fiber::yield();
  }
}

}  // namespace scheduler_internal

namespace this_fiber {
CancellationToken group_token() {
  const CancellationToken* token = scheduler_internal::CurrentGroupToken();
  return token != nullptr ? *token : CancellationToken();
}
}  // namespace this_fiber

}  // namespace weft
