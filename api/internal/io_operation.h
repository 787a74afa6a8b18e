// api/internal/io_operation.h: a task's I/O call as an awaitable that keeps its state in the
// awaiting coroutine's frame (IoOperation), and the calls made so: a receive into a buffer the
// runtime lends (RecvBufferTries: TcpStream::async_recv_buffer) and one into the caller's buffer
// (RecvCall: TcpStream::async_read). The members are defined in api/io.cc, for these two calls.
//
// Defines: weft::io_internal::Fd, weft::io_internal::RecvBufferTries,
// weft::io_internal::RecvCall, weft::io_internal::IoOperation.

#ifndef WEFT_API_INTERNAL_IO_OPERATION_H_
#define WEFT_API_INTERNAL_IO_OPERATION_H_

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "weft/api/io.h"
#include "weft/base/result.h"
#include "weft/reactor/buffer_pool.h"
#include "weft/reactor/reactor.h"
#include "weft/scheduler/io.h"
#include "weft/scheduler/task.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/internal/wait_queue.h"

namespace weft::io_internal {

// Fd: an fd as a call names it: the number, and its close epoch (scheduler/io.h) when the call
// started, or when the object that holds it (a TcpStream, a File) opened it. A close that began
// since ends the call with -ECANCELED before it touches the number, which may be another file's
// by now.
struct Fd {
  int fd;
  std::uint32_t epoch;
  static Fd Now(int fd) { return {fd, scheduler_internal::CloseEpoch(fd)}; }
};

// A call an IoOperation makes (its Call): at(), the fd; Submit, the next attempt's operation;
// After, the call's result once an attempt ended with r (an EINTR or EAGAIN already absorbed, up
// to kTransientRetries in a row: the rule of a receive that waits; a call with MSG_DONTWAIT, or
// an accept, would need its own), or nullopt to make another; Blocking, the whole call as the
// blocking form makes it; Sim, the call on the simulated network; kName, what a dump of parked
// tasks calls the wait.

// RecvBufferTries: one recv_buffer call's attempts, for its blocking form too. Through the
// worker's ring while it has one and lends buffers; once it says it cannot (ENOBUFS: all lent;
// EOPNOTSUPP: no ring), the readiness way for the rest of the call.
class RecvBufferTries {
 public:
  using Value = Result<io::RecvBuffer>;
  static constexpr const char* kName = "io recv_buffer";
  explicit RecvBufferTries(Fd at) : at_(at) {}
  Fd at() const { return at_; }
  void Submit(Reactor& re, IoOp& op);
  std::optional<Value> After(std::int64_t r);
  Value Blocking(const WaitOptions& options) const;
  Task<Value> Sim(const WaitOptions& options) const;

 private:
  Fd at_;
  PooledBuffer got_;
  bool pooled_ = false;
  bool no_ring_ = false;
  bool no_buffers_ = false;
};

// RecvCall: a stream receive of up to len bytes into buf.
class RecvCall {
 public:
  using Value = Result<std::size_t>;
  static constexpr const char* kName = "io recv";
  RecvCall(Fd at, void* buf, std::size_t len) : at_(at), buf_(buf), len_(len) {}
  Fd at() const { return at_; }
  void Submit(Reactor& re, IoOp& op);
  std::optional<Value> After(std::int64_t r);
  Value Blocking(const WaitOptions& options) const;
  Task<Value> Sim(const WaitOptions& options) const;

 private:
  Fd at_;
  void* buf_;
  std::size_t len_;
};

// IoOperation<Call>: what a task's I/O call returns where its state lives in the awaiting
// coroutine's frame. co_await it once, at once (`co_await stream.async_read(buf, n)`), for its
// Value, with the blocking form's results, deadlines and cancellation. It is not a Task: the
// call needs no frame of its own (a connection's task waits in its receive, so that frame would
// be much of what an idle connection costs, and each call would allocate one). Converted to a
// Task<Value> (`Task<...> t = stream.async_read(buf, n)`) it can be kept, spawned or awaited
// later as any Task, with a frame of its own. From a coroutine that is not a task (run by a fiber
// or a thread), awaiting it blocks that fiber or thread, as the blocking form. Awaiting it a
// second time throws std::logic_error.
template <typename Call>
class [[nodiscard]] IoOperation {
 public:
  using Value = typename Call::Value;
  // Made by the calls that return one (TcpStream's), for the Calls instantiated in api/io.cc.
  IoOperation(Call call, WaitOptions options);
  // Movable until awaited (moving one that was throws std::logic_error); awaiting a moved-from
  // one throws std::logic_error, as a moved-from Task's await.
  IoOperation(IoOperation&& other);
  IoOperation(const IoOperation&) = delete;
  IoOperation& operator=(const IoOperation&) = delete;
  ~IoOperation();

  bool await_ready();
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> h);
  Value await_resume();
  operator Task<Value>() &&;

 private:
  // Run: the Task form, a coroutine that awaits an operation of its own.
  static Task<Value> Run(Call call, WaitOptions options);
  static bool Done(void* self);
  static void Submit(Reactor& re, IoOp& op, void* self);
  // Launch: submits attempts until one waits (true) or the call is over (false, result_ made).
  bool Launch(scheduler_internal::Fiber* task);
  // Over: the call after an attempt that ended with r: true once it is over (result_ made).
  bool Over(std::int64_t r);
  void Destroy();

  // The union's member alive: none; wait_, an attempt in flight; result_, the call's result;
  // sim_, the Task that runs the call on the simulated network.
  // The operation sits in every frame that awaits it, so its fields are packed: the small ones
  // go in the tail padding of call_ (a RecvBufferTries leaves 5 bytes there). W9's echo loop on
  // tasks: 8 bytes less put its frame in the slab's 512-byte class instead of its 640-byte one.
  enum class Stage : std::uint8_t { kNone, kWaiting, kOver, kSim };
  WaitOptions options_;
  [[no_unique_address]] Call call_;
  Stage stage_ = Stage::kNone;
  bool awaited_ = false;
  std::uint8_t retries_ = 0;  // transient failures absorbed in a row (up to kTransientRetries)
  union {
    scheduler_internal::IoWait wait_;
    Value result_;
    Task<Value> sim_;
  };
  sync_internal::AsyncPlainPark park_;
};

extern template class IoOperation<RecvBufferTries>;
extern template class IoOperation<RecvCall>;

}  // namespace weft::io_internal

#endif  // WEFT_API_INTERNAL_IO_OPERATION_H_
