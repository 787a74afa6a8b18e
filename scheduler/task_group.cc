// scheduler/task_group.cc: a TaskGroup's shared state (GroupCore in task_group.h): admitting
// children, their reports as they finish, the joins' waits, the first failure and the fail-fast
// cancel. Touches the runtime only through Spawn (in the header) and the fiber's group token.
//
// The protocol is the one of every //sync primitive (sync/internal/wait_queue.h): a joiner
// queues its node under lock_ and parks; a finishing child grants nodes under lock_ and
// notifies after unlocking. A finish grants one join_next waiter; the last running child's
// finish grants every waiter of both kinds (join_next then reports no_child_process, or takes
// what finished). A waiter granted as it gives up still looks once more: the grant stands.

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
      token_(source_.token()) {}

GroupCore::~GroupCore() {
  sync_internal::AbortIfWaitedOn(lock_, {&next_waiters_, &all_waiters_}, "a TaskGroup");
  finished_.Free();  // empty once CancelAndJoin has run
}

bool GroupCore::IsOwnChild() const { return CurrentGroupToken() == &token_; }

Result<std::uint64_t> GroupCore::Admit() {
  // A cancelled group starts nothing: fail-fast has tripped, or the group (or a parent) was
  // cancelled, or it is being destroyed. A cancel racing this check admits a child that then
  // sees a cancelled token, as a child already running does.
  if (token_.is_cancelled()) return std::errc::operation_canceled;
  lock_.lock();
  if (tripped_) {
    const bool pending = std::exchange(cancel_pending_, false);  // see Report
    lock_.unlock();
    if (pending) source_.cancel();
    return std::errc::operation_canceled;
  }
  // Discarded outcomes take no room.
  while (!discard_ && finished_.capacity < running_ + finished_.count + 1) {
    // Grow the ring outside the lock (finishing children keep going), then move it in, unless
    // another spawn grew it meanwhile.
    std::size_t want = std::max<std::size_t>(64, 2 * finished_.capacity);
    lock_.unlock();
    std::unique_ptr<Finished[]> slots(new (std::nothrow) Finished[want]);
    if (slots == nullptr) return std::errc::not_enough_memory;
    lock_.lock();
    if (finished_.capacity >= want) continue;
    for (std::size_t i = 0; i < finished_.count; ++i) slots[i] = finished_.at(i);
    finished_.slots.swap(slots);  // the old array is freed as `slots` goes, after unlocking
    finished_.capacity = want;
    finished_.head = 0;
    lock_.unlock();
    slots.reset();
    lock_.lock();
  }
  ++running_;
  std::uint64_t id = next_id_++;
  lock_.unlock();
  return id;
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

void GroupCore::Withdraw() {
  lock_.lock();
  --running_;
  WakeIfIdleAndUnlock();
}

bool GroupCore::Report(GroupChild* child, bool on_fiber, bool local) noexcept {
  const bool failed = child->failed();
  if (!failed) return !discard_ && (child->has_value || !local);
  lock_.lock();
  bool trip = false;
  if (first_exception_ == nullptr && first_error_ == std::errc{}) {  // the first failure
    first_exception_ = child->exception;
    first_error_ = child->error;
    trip = policy_ == GroupPolicy::kFailFast;
    tripped_ = trip;
  }
  lock_.unlock();
  if (trip) {
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
      WakeAllAndUnlock();
    }
  }
  return !discard_;
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

Result<void> GroupCore::Wait(bool all, const WaitOptions& options) {
  std::errc gave_up{};
  for (;;) {
    if (cancel_pending_) [[unlikely]] {  // see Report
      cancel_pending_ = false;
      lock_.unlock();
      source_.cancel();
      lock_.lock();
      continue;
    }
    if (all ? running_ == 0 : finished_.count != 0 || running_ == 0) return {};
    if (gave_up != std::errc{}) return gave_up;
    // The node lives in the Waiter (Waiter::own_node): an execution waits on one thing at a time.
    Waiter& self = current_waiter();
    sync_internal::WaitNode& node = self.own_node();
    node.waiter = &self;
    // relaxed: nobody sees the node before push_back (under lock_) publishes it.
    node.state.store(sync_internal::kWaiting, std::memory_order_relaxed);
    sync_internal::WaitQueue& queue = all ? all_waiters_ : next_waiters_;
    queue.push_back(&node);
    lock_.unlock();
    sync_internal::ParkResult r = sync_internal::Park(
        self,
        [&] {
          // acquire: pairs with Grant's release; what the finishing child wrote is visible.
          return node.state.load(std::memory_order_acquire) != sync_internal::kWaiting;
        },
        options, "TaskGroup", this);
    lock_.lock();
    if (r != sync_internal::ParkResult::kWoken) {
      // relaxed: under lock_, which every grant holds.
      if (node.state.load(std::memory_order_relaxed) == sync_internal::kWaiting) {
        queue.remove(&node);
        return sync_internal::ErrorOf(r);
      }
      gave_up = sync_internal::ErrorOf(r);  // granted as it gave up: take what is there
    }
  }
}

Result<Finished> GroupCore::TakeNext(const WaitOptions& options) {
  if (IsOwnChild()) return std::errc::resource_deadlock_would_occur;
  lock_.lock();
  Result<void> waited = Wait(/*all=*/false, options);
  if (!waited.ok() && finished_.count == 0) {
    lock_.unlock();
    return waited.error();
  }
  if (finished_.count == 0) {
    lock_.unlock();
    return std::errc::no_child_process;
  }
  Finished f = finished_.at(0);
  finished_.head = (finished_.head + 1) % finished_.capacity;
  finished_.count -= 1;
  lock_.unlock();
  return f;
}

Result<FinishedRing> GroupCore::TakeAll(const WaitOptions& options) {
  if (IsOwnChild()) return std::errc::resource_deadlock_would_occur;
  lock_.lock();
  Result<void> waited = Wait(/*all=*/true, options);
  if (!waited.ok() && running_ != 0) {
    lock_.unlock();
    return waited.error();
  }
  // No child runs: the ring's room is no longer reserved for anyone; it goes with the caller.
  FinishedRing taken = std::move(finished_);
  finished_ = FinishedRing{};
  lock_.unlock();
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
  std::size_t n = running_ + finished_.count;
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
  for (;;) {
    Result<FinishedRing> taken = TakeAll({});
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
