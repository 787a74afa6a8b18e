// reactor/reactor.h: weft's I/O engine: asynchronous operations on file descriptors, completed
// through callbacks, with one backend per OS behind one interface. Usable alone as an event loop;
// the scheduler parks fibers on it.
//
// Defines: weft::IoVec, weft::MsgHdr, weft::IoOp, weft::ReactorBackend, weft::ReactorOptions,
// weft::Reactor.
//
// Two faces:
//   - the seam a scheduler needs: poll(deadline) runs completions until the deadline (or until
//     at least one completion), and wake(), callable from any thread, makes a blocked poll return;
//   - the operations API: read, write, readv, writev, recv, send, recvmsg and sendmsg (datagrams
//     with their addresses), accept (also multishot),
//     connect, poll for readiness, a timeout, cancel, and close (which fails the fd's pending
//     operations first).
//
// Every operation completes exactly once (multishot accept: once per connection, the last without
// kMore), with a result >= 0 or -errno, also when cancelled (-ECANCELED), past its deadline
// (-ETIMEDOUT) or when its fd is closed through close() (-ECANCELED). Completions are delivered
// only from poll(), never from inside the call that submits, so a callback may submit freely.
// Bad input (a bad fd, a null buffer) completes with -EBADF / -EINVAL like any other error.
// A write or send may complete with fewer bytes than asked on Linux; IOCP completes an
// overlapped send only once all of it is sent.
//
// Threads: one Reactor per worker thread, created on that thread (the io_uring backend binds its
// ring to the creating thread: IORING_SETUP_SINGLE_ISSUER). Only wake() may be called from
// another thread; all other calls, and all callbacks, happen on the thread that calls poll().
//
// Backends: io_uring (liburing) where the kernel allows it, else epoll; IOCP on Windows; see
// docs/reactor.md for the rules and the WEFT_REACTOR environment override.

#ifndef WEFT_REACTOR_REACTOR_H_
#define WEFT_REACTOR_REACTOR_H_

#ifdef _WIN32
// Windows: Winsock 2 (include it before <windows.h>, or define WIN32_LEAN_AND_MEAN, as weft's
// own Windows builds do). An `fd` below is a SOCKET (or an overlapped HANDLE) cast to int:
// Windows socket handles are small kernel handle values that fit in 32 bits.
#include <winsock2.h>
#include <ws2tcpip.h>
#else
#include <sys/socket.h>
#include <sys/uio.h>
#endif

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "weft/base/result.h"
#include "weft/reactor/buffer_pool.h"
#include "weft/timer/timer_heap.h"

#ifndef _WIN32
struct statx;  // <sys/stat.h> (Linux): Reactor::statx's result
#endif

namespace weft {

using ReactorClock = std::chrono::steady_clock;

// NativeSocket: the system's socket handle for an fd of this interface (on Windows, the SOCKET
// the int stands for; elsewhere the fd itself).
#ifdef _WIN32
inline SOCKET NativeSocket(int fd) { return static_cast<SOCKET>(static_cast<unsigned>(fd)); }
#else
inline int NativeSocket(int fd) { return fd; }
#endif

// IoVec: one buffer of a readv/writev. POSIX's struct iovec; on Windows, which has none, a struct
// with the same two fields.
#ifdef _WIN32
struct IoVec {
  void* iov_base;
  std::size_t iov_len;
};
#else
using IoVec = ::iovec;
#endif

// MsgHdr: the buffers, peer address and flags of one datagram for recvmsg / sendmsg: POSIX's
// struct msghdr; on Windows, which has none, a struct with the fields weft uses (no control
// data there). kMsgTruncated in msg_flags after a recvmsg: the datagram was longer than the
// buffers, and the rest of it is lost.
#ifdef _WIN32
struct MsgHdr {
  void* msg_name;
  socklen_t msg_namelen;
  IoVec* msg_iov;
  std::size_t msg_iovlen;
  void* msg_control;
  std::size_t msg_controllen;
  int msg_flags;
};
inline constexpr int kMsgTruncated = 0x0100;  // ws2def.h's MSG_TRUNC
#else
using MsgHdr = ::msghdr;
inline constexpr int kMsgTruncated = MSG_TRUNC;
#endif

// IoOp: one operation in flight. Owned by the caller (typically on a fiber's stack); must stay
// alive and unmoved from submission until its (final) completion.
struct IoOp {
  // on_complete: called on the poll() thread with the result (>= 0, or -errno) and flags.
  static constexpr unsigned kMore = 1;  // multishot: more completions will follow
  void (*on_complete)(IoOp& op, std::int64_t result, unsigned flags) = nullptr;
  void* user = nullptr;
  // deadline: if set before submission, the operation fails with -ETIMEDOUT once it passes.
  std::optional<ReactorClock::time_point> deadline;

  // ---- Backend state (do not touch) ----
  enum class Kind : std::uint8_t {
    kNone,
    kRead,
    kWrite,
    kReadv,
    kWritev,
    kRecv,
    kSend,
    kAccept,
    kAcceptMulti,
    kConnect,
    kPollIn,
    kTimeout,
    kRecvMsg,
    kSendMsg,
    kOpenAt,
    kFsync,
    kStatx,
    kSendZc,
    kRecvPooled,
    kClose
  };
  Kind kind = Kind::kNone;
  bool pending = false;
  bool cancel_requested = false;
  bool timed_out = false;
  bool cancel_unsent = false;  // io_uring: a cancel waits for an SQE
  // The 4-byte fields together, then the 8-byte ones: an IoOp sits in the frame of every task's
  // I/O call while the operation is in flight.
  int fd = -1;
  int msg_flags = 0;
  std::uint32_t poll_events = 0;
  int iovcnt = 0;
  socklen_t connect_len = 0;
  void* buf = nullptr;
  std::size_t len = 0;
  const IoVec* iov = nullptr;
  PooledBuffer* pooled = nullptr;  // recv_pooled: where the buffer goes
  std::int64_t offset = -1;
  sockaddr* addr = nullptr;
  socklen_t* addrlen = nullptr;
  std::int64_t result = 0;
  IoOp* next = nullptr;  // backend lists
  IoOp* prev = nullptr;
  TimerNode timer;  // the deadline, in backends that keep their own timers
  std::int64_t timespec_storage[2] = {0, 0};  // io_uring timeouts read it at submission
#ifdef _WIN32
  OVERLAPPED overlapped{};        // IOCP: the operation in flight
  void* backend_extra = nullptr;  // IOCP: what the operation needs until it completes
  void* backend_owner = nullptr;  // IOCP: the completion port of the reactor that submitted it
#endif
};

// kIocp: Windows' I/O completion ports, the only backend there (kIoUring and kEpoll are Linux's).
enum class ReactorBackend : std::uint8_t { kAuto, kIoUring, kEpoll, kIocp };

// ReactorBackendName: "auto", "io_uring", "epoll" or "iocp".
std::string_view ReactorBackendName(ReactorBackend backend);

struct ReactorOptions {
  // backend: kAuto probes io_uring and falls back to epoll (logging why, once per process); on
  // Windows it is IOCP. The environment variable WEFT_REACTOR=io_uring|epoll overrides kAuto.
  ReactorBackend backend = ReactorBackend::kAuto;
  unsigned entries = 256;  // io_uring submission queue size
};

// kMaxIoLength: the most one read, write, recv or send moves: Linux's MAX_RW_COUNT (INT_MAX
// rounded down to a 4 KiB page), to which the kernel clamps every count. io_uring's SQE holds a
// 32-bit length, so a longer count would otherwise wrap (4 GiB reads 0 bytes: end of file).
inline constexpr std::size_t kMaxIoLength = 0x7ffff000;
// kMaxIoRequest: the largest len accepted at all (SSIZE_MAX): the result must fit the signed
// count every read returns.
inline constexpr std::size_t kMaxIoRequest = static_cast<std::size_t>(INT64_MAX);
// BadIoRequest: the argument check every backend makes for a buffer and its length.
inline bool BadIoRequest(const void* buf, std::size_t len) {
  return (buf == nullptr && len > 0) || len > kMaxIoRequest;
}
inline std::size_t ClampIoLength(std::size_t len) {
  return len < kMaxIoLength ? len : kMaxIoLength;
}
// BadAcceptAddress: an address buffer without its length (or a length the kernel would refuse)
// is -EINVAL before a connection is taken; the kernel would take it, then fail to write the
// address and drop it. (A length without a buffer is fine: neither is used.)
inline bool BadAcceptAddress(const sockaddr* addr, const socklen_t* addrlen) {
  return addr != nullptr &&
         (addrlen == nullptr || static_cast<std::uint64_t>(*addrlen) > 0x7fffffffu);
}

// BadMsg: the argument check every backend makes for a recvmsg / sendmsg.
inline bool BadMsg(const MsgHdr* msg) {
  return msg == nullptr || msg->msg_iovlen > 1024 ||
         (msg->msg_iovlen > 0 && msg->msg_iov == nullptr);
}

class Reactor {
 public:
  // create: EINVAL for a backend that is not compiled in; ENOSYS/EPERM/ENOMEM/... from the
  // kernel when an explicitly requested backend cannot start.
  static Result<std::unique_ptr<Reactor>> create(const ReactorOptions& options = {});
  virtual ~Reactor() = default;

  virtual ReactorBackend backend() const = 0;
  std::string_view backend_name() const;

  // ---- The scheduler's seam ----
  // poll: submits what is queued, then waits until at least one completion was delivered, the
  // deadline passed (nullopt: no deadline; a past deadline: do not block) or wake() was called.
  // Returns how many completions it delivered.
  virtual Result<int> poll(std::optional<ReactorClock::time_point> deadline) = 0;
  // wake: any thread. A concurrent or the next poll() returns promptly.
  virtual void wake() = 0;

  // ---- Operations (poll()'s thread) ----
  // offset -1: the file's current position. On a pipe or socket an offset is ignored (io_uring's
  // rule, which every backend follows), never ESPIPE; below -1 it is -EINVAL.
  // len: at most kMaxIoLength moves per operation (a longer one returns a short count, as the
  // kernel's own read and write do); above kMaxIoRequest it is -EINVAL. Every backend alike.
  virtual void read(IoOp& op, int fd, void* buf, std::size_t len, std::int64_t offset = -1) = 0;
  virtual void write(IoOp& op, int fd, const void* buf, std::size_t len,
                     std::int64_t offset = -1) = 0;
  virtual void readv(IoOp& op, int fd, const IoVec* iov, int iovcnt) = 0;
  virtual void writev(IoOp& op, int fd, const IoVec* iov, int iovcnt) = 0;
  virtual void recv(IoOp& op, int fd, void* buf, std::size_t len, int flags = 0) = 0;
  virtual void send(IoOp& op, int fd, const void* buf, std::size_t len, int flags = 0) = 0;
  // send_zerocopy: a send that does not copy buf (io_uring's IORING_OP_SEND_ZC): the kernel
  // sends from buf itself, and the op completes (with the bytes sent) only once it no longer
  // needs buf. Where the backend, the kernel or the socket cannot (epoll, IOCP, a Unix socket,
  // Linux before 6.0) it is a plain send. Worth it only for large sends to a real network
  // device: on loopback the kernel copies anyway (docs/reactor.md has the measurement).
  virtual void send_zerocopy(IoOp& op, int fd, const void* buf, std::size_t len, int flags = 0) = 0;
  // recvmsg / sendmsg: one datagram (on a stream socket: some bytes) with its peer address.
  // msg, its buffers and its address must stay valid until the completion; recvmsg sets
  // msg_namelen and msg_flags (kMsgTruncated) as the system call does. The result is the
  // datagram's bytes received (at most the buffers' size) or sent. msg null, or more than 1,024
  // buffers: -EINVAL.
  virtual void recvmsg(IoOp& op, int fd, MsgHdr* msg, int flags = 0) = 0;

  // recv_pooled: a recv into a buffer of the reactor's own pool (reactor/buffer_pool.h), chosen
  // when data arrives: on io_uring a provided buffer ring (kernel 5.19+), so a receive that waits
  // holds no buffer. A result > 0 comes with *out filled: the caller owns that buffer until
  // out->pool->release(out->id), on any thread. Otherwise out->pool stays null. -ENOBUFS: every
  // buffer was lent when the data came (nothing was received: recv it the usual way).
  // pooled_receives(): whether this reactor may have a pool (io_uring). Where it has none,
  // recv_pooled fails: -EINVAL on epoll and IOCP, -EOPNOTSUPP on a kernel that refuses buffer
  // rings. kPooledBuffers buffers of kPooledBufferSize bytes per reactor, made on the first
  // recv_pooled (malloc'd: a buffer costs memory once first lent).
  static constexpr std::uint32_t kPooledBufferSize = 4096;
  static constexpr std::uint32_t kPooledBuffers = 1024;
  virtual bool pooled_receives() const { return false; }
  virtual void recv_pooled(IoOp& op, int fd, PooledBuffer* out, int flags = 0) {
    (void)out;
    recv(op, fd, nullptr, 1, flags);  // a bad buffer: -EINVAL from every backend
  }
  virtual void sendmsg(IoOp& op, int fd, const MsgHdr* msg, int flags = 0) = 0;
#ifndef _WIN32
  // File operations, done by the kernel asynchronously where the backend can (io_uring);
  // -ENOSYS elsewhere (epoll: a regular file is never "ready", so callers run these on a
  // blocking thread instead, as api/fs.h does).
  //   openat: result is the new fd (dirfd AT_FDCWD: path is relative to the working directory);
  //     path must stay valid until the completion. Null path: -EINVAL.
  //   fsync: datasync true: the data only (fdatasync).
  //   statx: the basic stats of fd into *out (struct statx, <sys/stat.h>).
  virtual void openat(IoOp& op, int dirfd, const char* path, int flags, unsigned mode) = 0;
  virtual void fsync(IoOp& op, int fd, bool datasync) = 0;
  virtual void statx(IoOp& op, int fd, struct statx* out) = 0;
#endif
  // accept: result is the new fd (close-on-exec, non-blocking). addr with a null addrlen:
  // -EINVAL, and no connection is taken.
  virtual void accept(IoOp& op, int fd, sockaddr* addr = nullptr, socklen_t* addrlen = nullptr) = 0;
  // accept_multishot: one completion per accepted connection, flags & kMore while it continues.
  virtual void accept_multishot(IoOp& op, int fd) = 0;
  virtual void connect(IoOp& op, int fd, const sockaddr* addr, socklen_t addrlen) = 0;
  // poll_readiness: result is the ready events (POLLIN, POLLOUT, POLLERR, POLLHUP...).
  virtual void poll_readiness(IoOp& op, int fd, std::uint32_t events) = 0;
  // timeout: completes with 0 at `when`.
  virtual void timeout(IoOp& op, ReactorClock::time_point when) = 0;
  // cancel: `op` completes with -ECANCELED unless it already completed (or completes first).
  virtual void cancel(IoOp& op) = 0;
  // close (with an op): ends every operation on fd, in this reactor and in every other reactor
  // of the process (other workers' and threads'), then closes fd and completes with 0 (or
  // -errno from ::close). Operations in this reactor fail with -ECANCELED at once; another
  // reactor ends its own at its next poll() (epoll: -ECANCELED; io_uring: cancelled in the
  // kernel, completing with -ECANCELED) and acknowledges, and fd is closed only after every
  // such reactor has, so no operation taken before the close can reach the next file that gets
  // the same fd number. While it waits, this reactor goes on polling. A close is not
  // cancellable and has no deadline. Bad fd: -EBADF.
  virtual void close(IoOp& op, int fd) = 0;
  // close (without an op): ends this reactor's operations on fd with -ECANCELED and closes fd at
  // once. Other reactors are told and end theirs at their next poll(), but nothing waits for
  // them: until they have, the fd number may be reused under them. Use the close above when
  // other reactors may have operations on fd. Use either, not ::close, for fds with operations
  // in flight (a plain ::close leaves them pending).
  virtual void close(int fd) = 0;

  // pending_ops: operations submitted and not yet completed (for tests and dumps).
  virtual std::size_t pending_ops() const = 0;
};

}  // namespace weft

#endif  // WEFT_REACTOR_REACTOR_H_
