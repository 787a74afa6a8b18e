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

}  // namespace

std::int64_t RunIo(IoSubmit submit, void* arg, const WaitOptions& options, const char* what, int fd,
                   std::int64_t epoch, IoEnd end) {
  const CancellationToken* token = options.cancel;
  Worker* w = t_worker;
  Fiber* f = w != nullptr ? w->current : nullptr;
  if (token != nullptr && token->is_cancelled()) return -ECANCELED;
  IoRequest req;
  req.op.on_complete = &CompleteIo;
  req.op.user = &req;
  // The operation's deadline, or its token's when earlier (a source's cancel_at): reaching that
  // one is a cancellation.
  const sync_internal::EffectiveDeadline deadline = sync_internal::DeadlineOf(options);
  req.op.deadline = deadline.at;
  auto by_deadline = [&deadline](std::int64_t r) {
    return r == -ETIMEDOUT && deadline.by_token && SyncClock::now() >= *deadline.at ? -ECANCELED
                                                                                    : r;
  };
  // submit, as one FdUse of fd: false, and nothing submitted, once a close began since epoch.
  auto submit_on = [&](Reactor& reactor) {
    FdUse use(fd, epoch);
    if (use.refused()) return false;
    submit(reactor, req.op, arg);
    return true;
  };
  if (f != nullptr) {
    if (w->reactor == nullptr) return -static_cast<int>(w->reactor_error);
    const bool cancellable = end == IoEnd::kCancellable;
    if (cancellable && f->waiter.interrupted()) return -ECANCELED;
    req.waiter = &f->waiter;
    req.owner = w;
    if (!submit_on(*w->reactor)) return -ECANCELED;
    // The token's callback only wakes the fiber; the fiber forwards the cancel to the owner.
    sync_internal::CancelRegistration reg;
    reg.fn = [](void* p) { static_cast<Waiter*>(p)->notify(); };
    reg.arg = &f->waiter;
    sync_internal::CancelState* cs = token != nullptr ? StateOf(*token) : nullptr;
    bool registered = cs != nullptr && sync_internal::Register(cs, &reg);
    f->wait_fd.store(fd, std::memory_order_relaxed);
    f->waiter.note_wait(what, nullptr);
    bool cancel_posted = false;
    // acquire (both loads): the owner's writes to req happen before we read or reuse it.
    while (!req.finished.load(std::memory_order_acquire) ||
           (cancel_posted && !req.cancel_done.load(std::memory_order_acquire))) {
      (void)f->waiter.wait(std::nullopt);
      if (cancellable && !cancel_posted && !req.finished.load(std::memory_order_acquire) &&
          ((token != nullptr && token->is_cancelled()) || f->waiter.interrupted())) {
        // Always through the owner's mailbox (we may run on another worker now; even on the
        // owner, the reactor must not be entered from inside a completion's aftermath).
        f->rt->Mail(*req.owner, nullptr, &req);
        cancel_posted = true;
      }
    }
    f->waiter.note_wait(nullptr, nullptr);
    f->wait_fd.store(-1, std::memory_order_relaxed);
    if (registered) sync_internal::Deregister(cs, &reg);
    return by_deadline(req.result);
  }
  // A plain thread (or a fiber in a BlockingRegion): the thread's own reactor, polled here.
  std::errc error;
  Reactor* r = ThreadReactorOrNull(&error);
  if (r == nullptr) return -static_cast<int>(error);
  req.waiter = nullptr;
  req.op.on_complete = [](IoOp& op, std::int64_t result, unsigned) {
    auto* q = static_cast<IoRequest*>(op.user);
    q->result = result;
    q->finished.store(true, std::memory_order_relaxed);  // same thread
  };
  if (!submit_on(*r)) return -ECANCELED;
  sync_internal::CancelRegistration reg;
  reg.fn = [](void* p) { static_cast<Reactor*>(p)->wake(); };
  reg.arg = r;
  sync_internal::CancelState* cs = token != nullptr ? StateOf(*token) : nullptr;
  bool registered = cs != nullptr && sync_internal::Register(cs, &reg);
  bool cancelled = false;
  while (!req.finished.load(std::memory_order_relaxed)) {
    if (!cancelled && token != nullptr && token->is_cancelled()) {
      r->cancel(req.op);
      cancelled = true;
    }
    (void)r->poll(std::nullopt);
  }
  if (registered) sync_internal::Deregister(cs, &reg);
  return by_deadline(req.result);
}

bool FileIoThroughReactor() {
  Worker* w = t_worker;
  if (w != nullptr && w->current != nullptr) {  // a fiber on its worker: the worker's reactor
    return w->reactor != nullptr && w->reactor->backend() == ReactorBackend::kIoUring;
  }
  Reactor* r = ThreadReactorOrNull(nullptr);  // a plain thread, or a fiber in a region
  return r != nullptr && r->backend() == ReactorBackend::kIoUring;
}

bool TakeDirectIoTurn() {
  Worker* w = t_worker;
  if (w == nullptr || w->current == nullptr) return true;  // a plain thread: it blocks anyway
  if (w->reactor == nullptr) return false;  // RunIo reports why (a simulation: ENOTSUP)
  if (w->direct_io_tick != w->tick) {       // a new run of a fiber: a fresh budget
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
    // RunIo failed first (no reactor for this execution): close directly.
#ifdef _WIN32
  ::closesocket(NativeSocket(fd));  // api fds are sockets
#else
  ::close(fd);
#endif
}

}  // namespace scheduler_internal
}  // namespace weft
