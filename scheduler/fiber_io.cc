// scheduler/fiber_io.cc: the fiber I/O seam of scheduler/io.h. In a fiber, an operation goes to
// its worker's reactor and the fiber parks until the one completion; cancellation goes to the
// owning worker through its mailbox. On a plain thread (or in a BlockingRegion) a thread-local
// reactor is made on first use and polled by the thread. Also the close epochs and CloseFd, which
// ends an fd's operations in every reactor before the fd is closed.

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include "internal/runtime_impl.h"
#include "weft/base/internal/fd_table.h"
#include "weft/base/thread_exit.h"
#include "weft/reactor/reactor.h"
#include "weft/scheduler/io.h"
#include "weft/sync/cancellation.h"

namespace weft {
namespace scheduler_internal {
namespace {

void CompleteIo(IoOp& op, std::int64_t result, unsigned /*flags*/) {
  auto* r = static_cast<IoRequest*>(op.user);
  Waiter* waiter = r->waiter;  // read first: r may be gone once `finished` is seen
  r->result = result;
  // release: the fiber reads result after its acquire load of finished.
  r->finished.store(true, std::memory_order_release);
  waiter->notify();
}

struct ThreadReactor {
  std::unique_ptr<Reactor> reactor;
  std::errc error{};
  bool tried = false;
};
// A plain thread's reactor, made on its first I/O and deleted at thread exit: a ThreadOwned,
// not a thread_local destructor (base/thread_exit.h says why).
using ThreadReactorSlot = base_internal::ThreadOwned<ThreadReactor>;

Reactor* ThreadReactorOrNull(std::errc* error) {
  ThreadReactor* owned = ThreadReactorSlot::get();
  if (owned == nullptr) {
    if (error != nullptr) *error = std::errc::not_enough_memory;
    return nullptr;
  }
  ThreadReactor& t = *owned;
  if (!t.tried) {
    t.tried = true;
    Result<std::unique_ptr<Reactor>> r = Reactor::create();
    if (r.ok()) {
      t.reactor = std::move(r).value();
    } else {
      t.error = r.error();
    }
  }
  if (error != nullptr) *error = t.error;
  return t.reactor.get();
}

// ByDeadline: an operation's result r, with a timeout at its token's deadline (a source's
// cancel_at, earlier than the call's own) reported as the cancellation it is.
std::int64_t ByDeadline(std::int64_t r, bool by_token,
                        const std::optional<SyncClock::time_point>& at) {
  return r == -ETIMEDOUT && by_token && at.has_value() && SyncClock::now() >= *at ? -ECANCELED : r;
}

// CloseNow: closes fd directly, when it cannot go through a reactor.
void CloseNow(int fd) {
#ifdef _WIN32
  // A socket, or another handle (fs::File's), which closesocket refuses: WSAENOTSOCK, or
  // WSANOTINITIALISED when the process never started Winsock.
  if (::closesocket(NativeSocket(fd)) != 0) {
    const int e = ::WSAGetLastError();
    if (e == WSAENOTSOCK || e == WSANOTINITIALISED) {
      ::CloseHandle(reinterpret_cast<HANDLE>(NativeSocket(fd)));
    }
  }
#else
  ::close(fd);
#endif
}

}  // namespace

bool IoWait::Start(Fiber* f, IoSubmit submit, void* arg, const WaitOptions& options, int fd,
                   std::int64_t epoch, bool cancellable, std::int64_t* result) {
  token_ = options.cancel;
  cancellable_ = cancellable;
  Worker* w = f->worker;
  if (token_ != nullptr && token_->is_cancelled()) {
    *result = -ECANCELED;
    return false;
  }
  req_.op.on_complete = &CompleteIo;
  req_.op.user = &req_;
  // The operation's deadline, or its token's when earlier (a source's cancel_at): reaching that
  // one is a cancellation.
  const sync_internal::EffectiveDeadline deadline = sync_internal::DeadlineOf(options);
  req_.op.deadline = deadline.at;
  deadline_by_token_ = deadline.by_token;
  if (w->reactor == nullptr) {
    *result = -static_cast<int>(w->reactor_error);
    return false;
  }
  if (cancellable && f->waiter.interrupted()) {
    *result = -ECANCELED;
    return false;
  }
  req_.waiter = &f->waiter;
  req_.owner = w;
  {
    // The submission is one FdUse of fd: refused, and nothing submitted, once a close began
    // since epoch.
    FdUse use(fd, epoch);
    if (use.refused()) {
      *result = -ECANCELED;
      return false;
    }
    submit(*w->reactor, req_.op, arg);
  }
  // The token's callback only wakes the waiter; the waiter forwards the cancel to the owner.
  reg_.fn = [](void* p) { static_cast<Waiter*>(p)->notify(); };
  reg_.arg = &f->waiter;
  // (A token without a state, such as a default one, is never cancelled: nothing to register.)
  sync_internal::CancelState* cs = token_ != nullptr ? StateOf(*token_) : nullptr;
  registered_ = cs != nullptr && sync_internal::Register(cs, &reg_);
  f->waiter.wait_fd.store(fd, std::memory_order_relaxed);
  return true;
}

Fiber* IoWait::fiber() const { return static_cast<FiberWaiter*>(req_.waiter)->fiber(); }

bool IoWait::Step() {
  // acquire (both loads): the owner's writes to req_ happen before we read or reuse it.
  const bool finished = req_.finished.load(std::memory_order_acquire);
  if (finished && (!cancel_posted_ || req_.cancel_done.load(std::memory_order_acquire))) {
    return true;
  }
  if (cancellable_ && !cancel_posted_ && !finished &&
      ((token_ != nullptr && token_->is_cancelled()) || req_.waiter->interrupted())) {
    // Always through the owner's mailbox (we may run on another worker now; even on the
    // owner, the reactor must not be entered from inside a completion's aftermath).
    fiber()->rt->Mail(*req_.owner, nullptr, &req_);
    cancel_posted_ = true;
  }
  return false;
}

std::int64_t IoWait::Finish() {
  fiber()->waiter.wait_fd.store(-1, std::memory_order_relaxed);
  // The callback only notifies the Waiter (which outlives every notify): no need to wait for
  // a running one, and a task must not block.
  if (registered_) sync_internal::DeregisterNoWait(StateOf(*token_), &reg_);
  return ByDeadline(req_.result, deadline_by_token_, req_.op.deadline);
}

// kRegionInterruptCheck: how often a fiber's I/O inside a BlockingRegion looks whether the
// runtime's shutdown interrupted it (its thread blocks in its own reactor meanwhile).
constexpr std::chrono::milliseconds kRegionInterruptCheck{10};

std::int64_t RunIo(IoSubmit submit, void* arg, const WaitOptions& options, const char* what, int fd,
                   std::int64_t epoch, IoEnd end) {
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  if (f != nullptr) {
    if (IsTask(f)) [[unlikely]]
      TaskBlocked(f, "called blocking I/O");
    IoWait io;
    std::int64_t result = 0;
    if (!io.Start(f, submit, arg, options, fd, epoch, end == IoEnd::kCancellable, &result)) {
      return result;
    }
    f->waiter.note_wait(what, nullptr);
    while (!io.Step()) (void)f->waiter.wait(std::nullopt);
    f->waiter.note_wait(nullptr, nullptr);
    return io.Finish();
  }
  // A plain thread (or a fiber in a BlockingRegion): the thread's own reactor, polled here.
  const CancellationToken* token = options.cancel;
  if (token != nullptr && token->is_cancelled()) return -ECANCELED;
  // A fiber in a region: the runtime's shutdown interrupts its waits, this one too. Nothing
  // wakes this thread's reactor for that, so its polls end every kRegionInterruptCheck to look.
  Fiber* const region = end == IoEnd::kCancellable ? t_region_fiber : nullptr;
  if (region != nullptr && region->waiter.interrupted()) return -ECANCELED;
  const sync_internal::EffectiveDeadline deadline = sync_internal::DeadlineOf(options);
  std::errc error;
  Reactor* r = ThreadReactorOrNull(&error);
  if (r == nullptr) return -static_cast<int>(error);
  IoRequest req;
  req.op.deadline = deadline.at;
  req.op.user = &req;
  req.op.on_complete = [](IoOp& op, std::int64_t result, unsigned) {
    auto* q = static_cast<IoRequest*>(op.user);
    q->result = result;
    q->finished.store(true, std::memory_order_relaxed);  // same thread
  };
  {
    FdUse use(fd, epoch);
    if (use.refused()) return -ECANCELED;
    submit(*r, req.op, arg);
  }
  sync_internal::CancelRegistration reg;
  reg.fn = [](void* p) { static_cast<Reactor*>(p)->wake(); };
  reg.arg = r;
  sync_internal::CancelState* cs = token != nullptr ? StateOf(*token) : nullptr;
  bool registered = cs != nullptr && sync_internal::Register(cs, &reg);
  bool cancelled = false;
  while (!req.finished.load(std::memory_order_relaxed)) {
    if (!cancelled && ((token != nullptr && token->is_cancelled()) ||
                       (region != nullptr && region->waiter.interrupted()))) {
      r->cancel(req.op);
      cancelled = true;
    }
    std::optional<ReactorClock::time_point> until;
    if (region != nullptr && !cancelled) until = ReactorClock::now() + kRegionInterruptCheck;
    (void)r->poll(until);
  }
  if (registered) sync_internal::Deregister(cs, &reg);
  return ByDeadline(req.result, deadline.by_token, deadline.at);
}

Fiber* RunningTask() {
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  return f != nullptr && IsTask(f) ? f : nullptr;
}

void IoAwaiter::Start(IoSubmit submit, void* arg, const WaitOptions& options, int fd,
                      std::int64_t epoch, IoEnd end) {
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  if (f == nullptr || !IsTask(f)) {  // a coroutine on a fiber or thread: RunIo blocks it
    result_ = RunIo(submit, arg, options, what_, fd, epoch, end);
    what_ = nullptr;
    return;
  }
  if (!wait_.Start(f, submit, arg, options, fd, epoch, end == IoEnd::kCancellable, &result_)) {
    what_ = nullptr;
  }
}

bool IoAwaiter::await_suspend(std::coroutine_handle<> h) {
  // A plain park: the reactor times the operation out, and the token's and the shutdown's
  // cancellations go through Step to the owner; the wait ends with the completion.
  return park_.Begin(wait_.waiter(), h, what_, nullptr);
}

std::int64_t IoAwaiter::await_resume() {
  if (what_ == nullptr) return result_;
  (void)park_.End();
  return wait_.Finish();
}

// A task's close on its worker's reactor (CloseFd), listed on the worker until it completes.
struct TaskCloseOp {
  IoOp op;
  Worker* owner = nullptr;
  TaskCloseOp* prev = nullptr;
  TaskCloseOp* next = nullptr;
};

void FreeTaskCloses(Worker& w) {
  while (TaskCloseOp* c = w.task_closes) {
    w.task_closes = c->next;
    delete c;
  }
}

bool FileIoThroughReactor() {
  Worker* w = t_worker;
  if (w != nullptr && w->current != nullptr) {  // a fiber on its worker: the worker's reactor
    return w->reactor != nullptr && w->reactor->backend() == ReactorBackend::kIoUring;
  }
  Reactor* r = ThreadReactorOrNull(nullptr);  // a plain thread, or a fiber in a region
  return r != nullptr && r->backend() == ReactorBackend::kIoUring;
}

void AbortIfTask(const char* what) {
  Fiber* f = CurrentFiber();
  if (f != nullptr && IsTask(f)) [[unlikely]]
    TaskBlocked(f, what);
}

bool TakeDirectIoTurn() {
  Worker* w = t_worker;
  if (w == nullptr || w->current == nullptr) {
    // A plain thread blocks anyway; a fiber in a region too, until the shutdown interrupts it
    // (then RunIo ends the call, as below).
    const Fiber* region = t_region_fiber;
    return region == nullptr || !region->waiter.interrupted();
  }
  if (w->reactor == nullptr) return false;  // RunIo reports why (a simulation: ENOTSUP)
  // Interrupted (the runtime is shutting down): RunIo ends the call with ECANCELED at once, as it
  // ends any cancellable call then. Tried directly, a loop of calls that never wait (accepts of
  // connections that keep arriving) went on, and held the shutdown up for as long.
  if (w->current->waiter.interrupted()) [[unlikely]]
    return false;
  if (w->direct_io_tick != w->tick) {  // a new run of a fiber: a fresh budget
    w->direct_io_tick = w->tick;
    w->direct_io_used = 0;
  }
  return ++w->direct_io_used <= kDirectIoBudget;
}

namespace {
// Per fd, the word of scheduler/internal/fd_use.h: close epoch and uses under way. Chunks of
// 8 Ki words, made on a first use or close in their range.
base_internal::FdTable<std::uint64_t, 13, 1 << 24> g_fd_uses;
}  // namespace

std::uint32_t CloseEpoch(int fd) {
  std::atomic<std::uint64_t>* e = g_fd_uses.at(fd, /*make=*/false);
  return e == nullptr ? 0 : fd_use::Epoch(*e);
}

FdUse::FdUse(int fd, std::int64_t epoch) {
  // make: a use must be counted even before the fd's first close made its chunk (a close that
  // made it later would not see an uncounted use). Out of memory: untracked, as fds >= 2^24.
  std::atomic<std::uint64_t>* e = g_fd_uses.at(fd, /*make=*/true);
  if (e == nullptr) return;
  if (fd_use::Enter(*e, epoch)) {
    slot_ = e;
  } else {
    refused_ = true;
  }
}

void CloseFd(int fd) {
  if (std::atomic<std::uint64_t>* e = g_fd_uses.at(fd, /*make=*/true)) fd_use::BeginClose(*e);
  if (Worker* w = t_worker; w != nullptr && w->current != nullptr && IsTask(w->current)) {
    // A task must not wait (a socket's destructor in a task closes it): the close goes to the
    // worker's reactor with an op of its own, freed as it completes (or, if the reactor goes
    // first, as the worker exits). The number stays the file's until then, and the epoch bumped
    // above already refuses new calls on it.
    auto* c = w->reactor != nullptr ? new (std::nothrow) TaskCloseOp : nullptr;
    if (c == nullptr) {
      // No reactor, or no memory for the op: close directly, as a fiber without a reactor does
      // (other reactors' operations on fd then end with a closed fd's errors).
      CloseNow(fd);
      return;
    }
    c->owner = w;
    c->next = w->task_closes;
    if (c->next != nullptr) c->next->prev = c;
    w->task_closes = c;
    c->op.user = c;
    c->op.on_complete = [](IoOp& op, std::int64_t, unsigned) {
      auto* done = static_cast<TaskCloseOp*>(op.user);  // on its worker's thread (its reactor)
      Worker* owner = done->owner;
      if (done->prev != nullptr) done->prev->next = done->next;
      if (done->next != nullptr) done->next->prev = done->prev;
      if (owner->task_closes == done) owner->task_closes = done->next;
      delete done;
    };
    w->reactor->close(c->op, fd);
    return;
  }
  // Through the calling execution's reactor, as an operation: it ends the fd's operations in
  // every reactor (each worker's and each thread's) before the fd is closed, and the caller
  // waits for that (a fiber parks; a thread polls its reactor).
  bool submitted = false;
  (void)RunIo(
      [fd, &submitted](Reactor& re, IoOp& op) {
        submitted = true;
        re.close(op, fd);
      },
      {}, "io close", fd, kNoEpoch, IoEnd::kRunsToEnd);
  // Once submitted, the fd is closed whatever the result (Linux releases it even on EINTR or
  // EIO): never close it twice, the number may be someone else's by now. It runs to its end
  // even in a fiber that shutdown interrupts (a socket's destructor, unwinding): a plain
  // ::close would skip the other reactors' operations on the fd.
  if (submitted) return;
  CloseNow(fd);  // RunIo failed first (no reactor for this execution)
}

}  // namespace scheduler_internal
}  // namespace weft
