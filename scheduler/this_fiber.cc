// scheduler/this_fiber.cc: weft::this_fiber: yield (a direct switch to the worker's next fiber
// when it has one, else through the loop), sleep_for and sleep_until (one clock read per sleep),
// id, name, in_fiber, worker_index.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>
#include <system_error>
#include <thread>

#include "internal/runtime_impl.h"
#include "weft/context/context.h"
#include "weft/sync/internal/wait_queue.h"
#include "weft/sync/waiter.h"

namespace weft {
namespace scheduler_internal {
namespace {

// On-top functions: they run right after a fiber switched away, on the context it switched to
// (the worker's own, or the next fiber's in a direct switch), always on the same thread.
// A yielding fiber goes to the back of its worker's yield ring: behind every other runnable
// fiber of the worker. Go sends yields to the shared queue instead, so that yield-heavy work
// spreads; here the ring is spilled to the stealable queue when a thief asks or a worker sleeps,
// which spreads it as well without a shared-queue round trip per yield.
Transfer AfterYield(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  f->state.store(kRunnable, std::memory_order_relaxed);
  if (f->worker->measure_latency) [[unlikely]]
    Runtime::Impl::StampNow(f);
  f->worker->yields.push(f);
  return t;
}

}  // namespace
}  // namespace scheduler_internal

using namespace scheduler_internal;

namespace {
// Out of line: its on-top call record is a local whose address escapes, which would keep the
// compiler from making yield's direct switch a tail call.
// yield has already saved f's errno.
[[gnu::noinline]] void YieldToLoop(Worker& w, Fiber* f) {
  jump_context_ontop(w.home, f, &AfterYield);
}
}  // namespace

namespace this_fiber {

void yield() {
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  if (f == nullptr) {
    std::this_thread::yield();
    return;
  }
  if (IsTask(f)) [[unlikely]]
    TaskBlocked(f, "called this_fiber::yield");
  f->saved_errno = *w->errno_slot;  // before DirectNext puts the next fiber's in place
  if (Fiber* next = f->rt->DirectNext(*w)) {
    // Straight to the next fiber, with no on-top function: the ring is this worker's alone, so
    // nothing can take f from it before the switch below has saved f.
    f->state.store(kRunnable, std::memory_order_relaxed);
    if (w->measure_latency) [[unlikely]]
      Runtime::Impl::StampNow(f);
    w->yields.push(f);
    jump_context_last(next->context(), next);  // a tail call: f resumes in yield's caller
    return;
  }
  YieldToLoop(*w, f);
}

namespace {

// SleepUntil: sleep_until and sleep_for, given `now`, a clock reading the caller just took. A
// sleep reads the clock once: a profile of W5 (10,000 fibers sleeping) spent 8% of its time
// in clock reads, four per sleep before.
Result<void> SleepUntil(Clock::time_point when, Clock::time_point now,
                        const CancellationToken* cancel) {
  Waiter& waiter = current_waiter();
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  // On a worker, `now` becomes its clock floor, and every check compares with the floor: the
  // first one with `now` itself, and so is the wait's deadline check that would follow it, which
  // deadline_checked spares its clock read (a deadline passed in the meantime only costs a park
  // whose timer is due at once). After a wake-up the floor is free to read: a wake-up by the
  // sleep's timer means the time has come whatever it says (Park then ends the sleep as timed
  // out), and one by a stale permit sleeps again, the wait's own check deciding then.
  if (f != nullptr) {
    w->clock_floor = now;  // steady: no earlier than the floor's last reading
    f->deadline_checked = true;
  }
  auto done = [&] { return when <= (f != nullptr ? f->worker->clock_floor : Clock::now()); };
  // Woken early by stale permits, the token, or the shutdown: sleep again until the time comes.
  sync_internal::ParkResult r = sync_internal::Park(
      waiter, done, WaitOptions{.deadline = when, .cancel = cancel}, "sleep", nullptr, /*spins=*/0);
  if (f != nullptr) f->deadline_checked = false;  // unused if the sleep never waited
  if (r == sync_internal::ParkResult::kCancelled) return std::errc::operation_canceled;
  return {};
}

}  // namespace

Result<void> sleep_until(std::chrono::steady_clock::time_point when,
                         const CancellationToken* cancel) {
  return SleepUntil(when, Clock::now(), cancel);
}

Result<void> sleep_for(std::chrono::steady_clock::duration d, const CancellationToken* cancel) {
  Clock::time_point now = Clock::now();
  return SleepUntil(SaturatingAfter(now, d), now, cancel);
}

std::uint64_t id() {
  Fiber* f = CurrentFiber();
  return f != nullptr ? f->id() : 0;
}

std::string_view name() {
  Fiber* f = CurrentFiber();
  return f != nullptr ? f->name() : std::string_view();
}

bool in_fiber() { return CurrentFiber() != nullptr; }

int worker_index() {
  Worker* w = t_worker;
  return w != nullptr && w->current != nullptr ? static_cast<int>(w->index) : -1;
}

}  // namespace this_fiber

}  // namespace weft
