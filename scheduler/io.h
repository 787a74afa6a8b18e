// scheduler/io.h: the seam between fiber I/O (//api:io) and the runtime: run one reactor
// operation for the calling execution and wait for its completion.
//
//   - In a fiber: the operation goes to the reactor of the fiber's worker and the fiber parks
//     until it completes. Cancellation (a token, or the runtime shutting down) is forwarded to
//     the owning worker, which cancels the operation; the call always waits for the operation's
//     one completion, so buffers on the fiber's stack are safe.
//   - On a plain thread (or in a BlockingRegion): the operation goes to a reactor owned by the
//     thread (created on first use) and the thread polls it until completion: the same calls
//     simply block.
//
// Defines: weft::scheduler_internal::RunIo, weft::scheduler_internal::InSimulation, the
// simulated network's hooks (SimNetworkSlot, SimRandom, SimRecordEvent, SimHost, SetSimHost),
// weft::scheduler_internal::FileIoThroughReactor,
// weft::scheduler_internal::TakeDirectIoTurn,
// weft::scheduler_internal::CloseFd, weft::scheduler_internal::CloseEpoch,
// weft::scheduler_internal::FdUse.

#ifndef WEFT_SCHEDULER_IO_H_
#define WEFT_SCHEDULER_IO_H_

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <memory>
#include <utility>

#include "weft/base/atomic.h"
#include "weft/base/clock.h"
#include "weft/reactor/reactor.h"
#include "weft/scheduler/internal/fd_use.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/internal/wait_queue.h"
#include "weft/sync/waiter.h"

namespace weft::scheduler_internal {

struct Worker;
struct Fiber;
struct TaskCloseOp;
// FreeTaskCloses: frees w's task closes still pending as its reactor has gone (its thread, at
// the worker's exit).
void FreeTaskCloses(Worker& w);

// An I/O operation of a fiber or task, in its frame. Worker-thread fields are touched only on
// the owner's thread; the atomics tell the waiter what happened.
struct IoRequest {
  IoOp op;
  Waiter* waiter = nullptr;
  Worker* owner = nullptr;
  std::int64_t result = 0;
  weft::atomic<bool> finished{false};     // the completion ran (release: result is written)
  weft::atomic<bool> cancel_done{false};  // the owner consumed our cancel request
  IoRequest* next_cancel = nullptr;       // the owner's mailbox
};

using IoSubmit = void (*)(Reactor& reactor, IoOp& op, void* arg);

// RunIo: submit(reactor, op, arg) once, then wait. Returns the result (>= 0 or -errno):
// -ETIMEDOUT past options.deadline, -ECANCELED on cancellation or shutdown, the reactor's
// creation error (negated) when no reactor could be started. `what` and `fd` name the wait in
// dumps of parked fibers.
// With an epoch (>= 0; see CloseEpoch), a close of fd that began since makes it return
// -ECANCELED without submitting; the submission itself is an FdUse of fd in any case.
// IoEnd::kRunsToEnd: an operation that shutdown neither refuses nor cancels (a close: skipping
// it would leave other reactors' operations on the fd running into the number's next file).
inline constexpr std::int64_t kNoEpoch = -1;
enum class IoEnd : std::uint8_t { kCancellable, kRunsToEnd };
std::int64_t RunIo(IoSubmit submit, void* arg, const WaitOptions& options, const char* what, int fd,
                   std::int64_t epoch = kNoEpoch, IoEnd end = IoEnd::kCancellable);

template <typename F>
std::int64_t RunIo(const F& submit, const WaitOptions& options, const char* what, int fd,
                   std::int64_t epoch = kNoEpoch, IoEnd end = IoEnd::kCancellable) {
  return RunIo([](Reactor& r, IoOp& op, void* a) { (*static_cast<const F*>(a))(r, op); },
               const_cast<F*>(&submit), options, what, fd, epoch, end);
}

// IoWait: one operation of a fiber or task on its worker's reactor, in three steps around the
// wait (RunIo's, and IoAwaiter's for a task): Start submits it (or ends it at once: false, with
// the result); Step, after each wake-up, says whether it is over, and forwards a cancellation
// (the token's, or the runtime's shutdown) to the owner worker once; Finish gives the result.
// Kept small (a task's I/O call holds one in its frame while the operation is in flight): the
// waiting fiber is its request's waiter's, and the deadline its operation's.
class IoWait {
 public:
  bool Start(Fiber* f, IoSubmit submit, void* arg, const WaitOptions& options, int fd,
             std::int64_t epoch, bool cancellable, std::int64_t* result);
  bool Step();
  std::int64_t Finish();
  Fiber* fiber() const;
  Waiter& waiter() const { return *req_.waiter; }

 private:
  IoRequest req_;
  const CancellationToken* token_ = nullptr;
  sync_internal::CancelRegistration reg_;
  bool registered_ = false;         // reg_ is on token_'s state
  bool deadline_by_token_ = false;  // req_.op.deadline is the token's (EffectiveDeadline)
  bool cancellable_ = true;
  bool cancel_posted_ = false;
};

// RunningTask: the task (scheduler/task.h) the calling worker runs, or null when the caller is
// not a task (a fiber, a plain thread).
Fiber* RunningTask();

// IoAwaiter: RunIo for a task (scheduler/task.h), which waits without blocking its worker:
// `std::int64_t r = co_await IoAwaiter(submit, options, what, fd, epoch, end)`, the same
// results. From a coroutine that is not a task, RunIo itself (blocking the fiber or thread).
// The operation starts as the IoAwaiter is made (submit and options are not kept), so it must
// be awaited at once: `co_await IoAwaiter(...)`, a full expression. `what` may not be null.
class IoAwaiter {
 public:
  template <typename F>
  IoAwaiter(const F& submit, const WaitOptions& options, const char* what, int fd,
            std::int64_t epoch = kNoEpoch, IoEnd end = IoEnd::kCancellable)
      : what_(what), park_(&Done, &wait_) {
    Start([](Reactor& r, IoOp& op, void* a) { (*static_cast<const F*>(a))(r, op); },
          const_cast<F*>(&submit), options, fd, epoch, end);
  }
  IoAwaiter(const IoAwaiter&) = delete;
  IoAwaiter& operator=(const IoAwaiter&) = delete;
  bool await_ready() const noexcept { return what_ == nullptr; }
  bool await_suspend(std::coroutine_handle<> h);
  std::int64_t await_resume();

 private:
  void Start(IoSubmit submit, void* arg, const WaitOptions& options, int fd, std::int64_t epoch,
             IoEnd end);
  static bool Done(void* wait) { return static_cast<IoWait*>(wait)->Step(); }
  // Laid out small (an IoAwaiter is most of the frame of a task's I/O call, kept while the
  // operation is in flight).
  const char* what_;     // null once the call is over without a wait (result_ holds its result)
  std::int64_t result_;  // a call over without a wait
  IoWait wait_;
  sync_internal::AsyncPlainPark park_;
};

// InSimulation: the calling thread runs a simulated runtime (RuntimeOptions::simulation), whose
// fibers touch no real fd: their sockets are the simulated network's (api/sim.h), and fiber I/O
// on any other fd fails with ENOTSUP.
inline bool InSimulation() { return base_internal::t_virtual_now != nullptr; }

// The simulated network's hooks into its simulation (api/sim.cc). Each is for the simulation's
// thread; outside a simulation SimNetworkSlot is null, SimRandom 0, SimHost 0, and the others do
// nothing.
//   SimNetworkSlot: where the simulation keeps its network, destroyed with the runtime.
//   SimRandom: the next number of the simulation's seeded PRNG (the one that picks fibers).
//   SimRecordEvent: adds an event to the trace (hashed; a line with SimulationOptions::trace).
//   SimHost / SetSimHost: the calling fiber's simulated host, which the fibers it spawns inherit.
std::shared_ptr<void>* SimNetworkSlot();
std::uint64_t SimRandom();
void SimRecordEvent(const char* what, std::uint64_t a, std::uint64_t b, std::uint64_t c);
std::uint32_t SimHost();
void SetSimHost(std::uint32_t host);

// FileIoThroughReactor: whether the caller's reactor (its worker's, in a fiber; the thread's
// own otherwise) does file operations itself (io_uring). Otherwise file calls (api/fs.h) run on
// a blocking thread (call_blocking): epoll cannot wait for a disk.
bool FileIoThroughReactor();

// TakeDirectIoTurn: true if the caller may first try its operation as a non-blocking system call
// (for an operation that seldom waits, such as a send), and use RunIo only when that would block.
// A fiber gets kDirectIoBudget turns per run: one whose I/O never has to wait then still parks in
// RunIo now and then, so the other fibers of its worker run (Tokio's cooperative budget does the
// same). Plain threads always may.
inline constexpr unsigned kDirectIoBudget = 64;
bool TakeDirectIoTurn();

// AbortIfTask: the blocking I/O forms that may complete without the reactor (a direct try: a
// send, a datagram's send or receive, a file read the page cache holds) call it first. A task
// that calls one aborts with TaskBlocked's message every time, rather than only when its direct
// try is refused (under load, or with WEFT_FAULTS) and the call reaches RunIo. A load and a
// compare on a fiber or thread.
void AbortIfTask(const char* what);

// CloseFd: closes fd through the calling execution's reactor (Reactor::close with an op): the
// fd's operations in every reactor of the process, every worker's and every thread's, end with
// -ECANCELED before fd is closed, and the caller waits for that. A plain ::close when no
// reactor can be started for the execution.
void CloseFd(int fd);

// CloseEpoch: how many times CloseFd has begun closing fd (0 for fds never closed so, and for
// fds of 2^24 and above). A call notes it at its start (an object such as fs::File when it
// opens) and hands it to FdUse and RunIo: a close that began since ends the call with
// -ECANCELED, as it ends an operation in flight, instead of letting it reach the number's next
// file.
std::uint32_t CloseEpoch(int fd);

// FdUse: registers a system call or a reactor submission on fd with CloseFd for the guard's
// lifetime. A close that begins meanwhile waits for the use to end before it ends fd's
// operations and closes fd, so a call that is under way never reaches the number's next file.
// With an epoch (>= 0), refused() says a close began since it was noted: the caller must not
// touch fd, and ends with -ECANCELED. Hold one only across calls that do not wait (a
// non-blocking system call, a submission): a close waits for it.
//
// The protocol is scheduler/internal/fd_use.h's, on one 64-bit word per fd below 2^24; fds of
// 2^24 and above (and the simulated network's) are not tracked.
class FdUse {
 public:
  FdUse(int fd, std::int64_t epoch);
  FdUse(const FdUse&) = delete;
  FdUse& operator=(const FdUse&) = delete;
  ~FdUse() {
    if (slot_ != nullptr) fd_use::Leave(*slot_);
  }
  bool refused() const { return refused_; }

 private:
  std::atomic<std::uint64_t>* slot_ = nullptr;
  bool refused_ = false;
};

}  // namespace weft::scheduler_internal

#endif  // WEFT_SCHEDULER_IO_H_
