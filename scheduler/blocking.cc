// scheduler/blocking.cc: blocking work off the workers. call_blocking (RunBlocking): the call runs
// on the runtime's blocking pool while the fiber parks. BlockingRegion: the fiber itself moves to
// a blocking thread for the scope (its context resumed there, keeping its own Waiter), and comes
// back to the workers when the scope ends.

#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <source_location>

#include "internal/runtime_impl.h"
#include "weft/context/context.h"
#include "weft/context/stack.h"
#include "weft/sync/waiter.h"

namespace weft {
namespace scheduler_internal {

namespace {

// t_blocking_call_of: the runtime whose call_blocking function the calling thread runs now;
// null elsewhere (InsideOf).
thread_local constinit const Runtime::Impl* t_blocking_call_of = nullptr;

}  // namespace

// BlockingCall: a call_blocking of a fiber (on its stack) or a task (this_task::call_blocking:
// allocated, freed by the task once done).
struct BlockingCall {
  BlockingTask task;  // first member
  void (*fn)(void*);
  void* arg;
  Waiter* waiter;
  const Runtime::Impl* rt;  // whose call it is (t_blocking_call_of while fn runs)
  std::atomic<bool> done{false};
  // A task's call that no blocking thread could take (or in a simulation) runs on a fiber of its
  // own instead (OnFiber): weft's blocking calls inside fn then park that fiber, as they do in
  // a fiber's call_blocking run inline. error: why that fiber could not start (no stack).
  struct OnFiber final : FiberBody {
    BlockingCall* call = nullptr;
    void run() override {
      call->fn(call->arg);
      call->Done();
    }
    void fail(std::exception_ptr why) override {
      call->error = why;
      call->Done();
    }
  } on_fiber;
  std::exception_ptr error;

  // Submit: hands the call to f's runtime's blocking threads; false if none could take it.
  bool Submit(Fiber* f, void (*call_fn)(void*), void* call_arg) {
    task.run = [](BlockingTask* t) {
      auto* c = reinterpret_cast<BlockingCall*>(t);
      t_blocking_call_of = c->rt;
      c->fn(c->arg);
      t_blocking_call_of = nullptr;
      c->Done();
    };
    fn = call_fn;
    arg = call_arg;
    waiter = &f->waiter;
    rt = f->rt;
    on_fiber.call = this;
    return f->rt->sim == nullptr && f->rt->blocking->submit(&task);
  }
  // Done: fn has returned (or cannot run); the waiting fiber or task is told. The call may be
  // gone as soon as `done` is seen.
  void Done() {
    Waiter* w = waiter;  // read first
    // release: fn's effects happen before the waiting side's acquire load.
    done.store(true, std::memory_order_release);
    w->notify();
  }
};

namespace {

Transfer AfterEnterRegion(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  f->state.store(kBlocking, std::memory_order_relaxed);
  if (f->rt->sim != nullptr || !f->rt->blocking->submit(&Stackful(f)->region_task)) {
    // No blocking thread can start (or a simulation, which stays on its one thread): stay on
    // the worker (the region then blocks it).
    f->state.store(kRunnable, std::memory_order_relaxed);
    f->rt->StampRunnable(f);
    f->rt->PushLocal(*f->worker, f);
  }
  return t;
}

// ProvideRegionWaiter: on a blocking thread running a region, the region's fiber's Waiter (its
// identity for Mutex ownership, and its interruption at shutdown); null otherwise.
Waiter* ProvideRegionWaiter(void*) {
  return t_region_fiber != nullptr ? &t_region_fiber->waiter : nullptr;
}

// RunRegion: on a blocking thread, runs the fiber there until it leaves the region.
void RunRegion(BlockingTask* task) {
  Fiber* f = FromRegionTask(task);
  Stackful(f)->region_home = current_context();
  t_region_fiber = f;
  // The fiber's stack may overflow here as on a worker: the SIGSEGV handler needs this thread's
  // alternate signal stack to print its diagnostic (once per thread; then one flag test).
  install_stack_overflow_handler();
  set_waiter_provider(&ProvideRegionWaiter, nullptr);
  errno = f->saved_errno;
  jump_context(f->context(), f);
  set_waiter_provider(nullptr, nullptr);  // call_blocking work on this thread: its own waiter
  t_region_fiber = nullptr;
}

Transfer AfterLeaveRegion(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  f->state.store(kRunnable, std::memory_order_relaxed);
  f->rt->StampRunnable(f);
  f->rt->Schedule(f);  // from a blocking thread: the inject queue (or the pinned worker)
  return t;
}

}  // namespace

bool RunBlocking(void (*fn)(void*), void* arg) {
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  // Outside a fiber the caller runs fn itself; in a simulation too (on its one thread, where
  // the run stays deterministic).
  if (f == nullptr || f->rt->sim != nullptr) return false;
  if (IsTask(f)) [[unlikely]]
    TaskBlocked(f, "called call_blocking");
  BlockingCall call;
  if (!call.Submit(f, fn, arg)) return false;  // no thread: run it inline
  f->waiter.note_wait("call_blocking", nullptr);
  // Not interruptible: fn must finish before `call` (on this stack) may go.
  while (!call.done.load(std::memory_order_acquire)) (void)f->waiter.wait(std::nullopt);
  f->waiter.note_wait(nullptr, nullptr);
  return true;
}

BlockingCall* StartBlockingCall(void (*fn)(void*), void* arg) {
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  if (f == nullptr || !IsTask(f)) {  // a fiber parks in call_blocking; a thread runs fn itself
    if (!RunBlocking(fn, arg)) fn(arg);
    return nullptr;
  }
  auto call = std::make_unique<BlockingCall>();  // std::bad_alloc: fn has not run
  if (!call->Submit(f, fn, arg)) {
    // A simulation, or no blocking thread: a fiber of its own, which a fiber's call_blocking
    // would be itself (running fn on the task would make weft's blocking calls in fn abort).
    Spawn(*Runtime::current(), &call->on_fiber, FiberOptions{.name = "call_blocking"},
          std::source_location::current());  // std::bad_alloc: fn has not run
  }
  return call.release();
}

bool BlockingCallDone(const BlockingCall* call) {
  // acquire: pairs with the blocking thread's release; fn's effects are visible after.
  return call->done.load(std::memory_order_acquire);
}

void RethrowBlockingCallError(const BlockingCall* call) {
  if (call->error) std::rethrow_exception(call->error);
}

void FinishBlockingCall(BlockingCall* call) { delete call; }

bool InsideOf(const Runtime& rt) {
  // Runtime::current(): rt's fibers, on its workers or in a BlockingRegion.
  return Runtime::current() == &rt || t_blocking_call_of == rt.impl_.get();
}

}  // namespace scheduler_internal

using namespace scheduler_internal;

BlockingRegion::BlockingRegion() : entered_(false) {
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  if (f == nullptr) return;
  if (IsTask(f)) [[unlikely]]
    TaskBlocked(f, "entered a BlockingRegion");
  entered_ = true;
  Stackful(f)->region_task.run = &RunRegion;
  f->saved_errno = *w->errno_slot;  // RunRegion puts it back, on the blocking thread
  jump_context_ontop(w->home, f, &AfterEnterRegion);
  // Now on a blocking thread (or still on a worker, if none could start).
}

BlockingRegion::~BlockingRegion() {
  if (!entered_) return;
  Fiber* f = t_region_fiber;
  if (f == nullptr) return;  // stayed on the worker
  f->saved_errno = errno;    // a worker's Started puts it back
  jump_context_ontop(Stackful(f)->region_home, f, &AfterLeaveRegion);
  f->state.store(kRunning, std::memory_order_relaxed);
}

}  // namespace weft
