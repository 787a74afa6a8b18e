// scheduler/task.cc: how a worker runs a stackless task (scheduler/task.h). A task lives in a
// Fiber object whose context is TaskContext(): the queues, stealing, wake-ups and timers treat
// it as any fiber, and Run hands it to RunTask, which resumes its coroutine on the worker's own
// stack. The coroutine comes back to RunTask when it suspends through weft: into a wait
// (FiberWaiter::suspend: RunTask then drives the wait, TaskWait in park.cc), a yield, or its
// end. A park is published as a fiber's is (AfterPark), so a notify wakes a task and a fiber
// alike.

#include "weft/scheduler/task.h"

#include <atomic>
#include <coroutine>
#include <cstdio>
#include <cstdlib>

#include "internal/runtime_impl.h"

namespace weft {
namespace scheduler_internal {

namespace {
// BackToWorker: the running task's coroutine returns to RunTask for `why`, to go on at `at` (if
// given); false if the caller is not a task.
bool BackToWorker(TaskExit why, std::coroutine_handle<> at) noexcept {
  Fiber* f = CurrentFiber();
  if (f == nullptr || !IsTask(f)) return false;
  if (at) f->task().frame = at.address();
  f->task_exit = why;
  return true;
}
}  // namespace

void TaskFinished() noexcept { (void)BackToWorker(kTaskFinished, nullptr); }

bool TransferInTask(std::coroutine_handle<> next) noexcept {
  return BackToWorker(kTaskTransferring, next);
}

bool YieldTask(std::coroutine_handle<> h) noexcept { return BackToWorker(kTaskYielding, h); }

}  // namespace scheduler_internal

using namespace scheduler_internal;

void Runtime::Impl::RunTask(Worker& w, Fiber* f) {
  for (;;) {
    Started(w, f);
    // Woken in a wait (or back to retry one that found no memory): the rest of it first.
    bool resume = f->task().park == nullptr || TaskWait(w, f, /*parked=*/!f->task_retry);
    while (resume) {
      f->task().park = nullptr;
      f->task_exit = kTaskRunning;
      std::coroutine_handle<>::from_address(f->task().frame).resume();
      switch (f->task_exit) {
        case kTaskParking:
          // Saved before TaskWait may publish the park (the task may then run elsewhere).
          f->saved_errno = *w.errno_slot;
          resume = TaskWait(w, f, /*parked=*/false);
          if (!resume) HandOffAfterPark(w);
          break;
        case kTaskYielding:
          f->saved_errno = *w.errno_slot;
          f->state.store(kRunnable, std::memory_order_relaxed);
          if (w.measure_latency) [[unlikely]]
            StampNow(f);
          w.yields.push(f);  // behind the worker's other runnable ones, as a fiber's yield
          resume = false;
          break;
        case kTaskTransferring:
          break;  // on at task().frame: a child it awaits, or the parent a child returned to
        case kTaskFinished:
          FinishTask(w, f);
          resume = false;
          break;
        default:
          // The coroutine suspended in an awaitable that is not weft's: nothing would resume
          // it on a worker (and whatever does would race the worker).
          TaskBlocked(f, "suspended in an awaitable that is not weft's");
      }
    }
    w.current = nullptr;
    // A task made runnable here next (run_next: the one it woke) runs at once, as a fiber's
    // direct switch, unless a fairness pass is due (DirectNext's rule).
    // It counts as one of the worker's local takes; when that take is NextLocal's fair turn, the
    // loop takes it (NextLocalFair) instead. (A task DirectNext found and left in run_next for
    // the loop is counted twice: the turns then come a take early.)
    Fiber* next = w.run_next;
    if (next == nullptr || !IsTask(next) || w.tick - w.fair_tick >= kFairnessInterval) return;
    if (FairTurn(w)) return;
    ++w.local_takes;
    w.run_next = nullptr;
    f = next;
  }
}

void Runtime::Impl::HandOffAfterPark(Worker& w) {
  // As a fiber's park does (Leave: DirectNext): the worker's next local fiber, the yield ring's
  // included, runs before the loop looks at timers and the reactor, unless a fairness pass is
  // due. Through the loop, which polled first, a task whose I/O completed at once (an accept
  // loop past its budget of direct turns) was back in run_next ahead of the yielders, which
  // then ran once per fairness pass.
  if (w.run_next != nullptr || w.tick - w.fair_tick >= kFairnessInterval) return;
  w.run_next = NextLocal(w);
}

void Runtime::Impl::FinishTask(Worker& w, Fiber* f) {
  auto* body = static_cast<TaskBody*>(f->body);
  body->finish();  // may free the body (a detached task)
  f->body = nullptr;
  f->locals.clear();  // still current, so destructors may use fiber features
  f->task().frame = nullptr;
  f->set_context(nullptr);  // a plain Fiber object again, for the next spawn
  Retire(w, f, RecordKind::kTask);
}

}  // namespace weft
