// api/internal/io_common.h: what the io, net and fs calls share (api/io.cc, net.cc, fs.cc):
// running a reactor operation while it fails transiently, a call's direct first try without the
// reactor, and the loop that writes all of a buffer.

#ifndef WEFT_API_INTERNAL_IO_COMMON_H_
#define WEFT_API_INTERNAL_IO_COMMON_H_

#ifndef _WIN32
#include <sys/types.h>
#endif

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <system_error>

#include "weft/api/internal/io_operation.h"  // Fd
#include "weft/api/io.h"
#include "weft/base/fault.h"
#include "weft/base/result.h"
#include "weft/reactor/reactor.h"
#include "weft/scheduler/io.h"
#include "weft/scheduler/task.h"
#include "weft/sync/cancellation.h"

namespace weft::io_internal {

inline std::errc ErrcOf(std::int64_t negative_errno) {
  return static_cast<std::errc>(static_cast<int>(-negative_errno));
}

inline Result<std::size_t> Size(std::int64_t r) {
  if (r < 0) return ErrcOf(r);
  return static_cast<std::size_t>(r);
}

// kTransientRetries: how many transient errors in a row a call absorbs before it reports one
// (a backend that kept failing so would otherwise spin the fiber).
inline constexpr int kTransientRetries = 64;

// RunAbsorbing: RunIo(submit) on fd, run again while it fails with an error its caller should
// never see (as Go's runtime, and SA_RESTART for blocking calls): EINTR (a signal interrupted
// it, or an injected fault), EAGAIN unless the caller asked not to wait (MSG_DONTWAIT), and for
// an accept ECONNABORTED (a connection reset before it was taken: take the next one). Not once
// fd's close has begun (another fiber closed it meanwhile): the number may be a new file's by
// now; the call ends with ECANCELED, as an operation in flight would (RunIo checks the epoch
// for each submission).
enum class Absorb { kEintr, kEagain, kAccept };
// Absorbed: the attempt that ended with r is to be made again: r is an error that `what`
// absorbs, and fewer than kTransientRetries were absorbed so far (*retries counts them).
inline bool Absorbed(Absorb what, std::int64_t r, int* retries) {
  const bool transient = r == -EINTR ||
                         (what != Absorb::kEintr && (r == -EAGAIN || r == -EWOULDBLOCK)) ||
                         (what == Absorb::kAccept && r == -ECONNABORTED);
  return transient && (*retries)++ < kTransientRetries;
}
template <typename Submit>
std::int64_t RunAbsorbing(Absorb what, Fd fd, const Submit& submit, const WaitOptions& options,
                          const char* name) {
  std::int64_t r;
  int retries = 0;
  do {
    r = scheduler_internal::RunIo(submit, options, name, fd.fd, fd.epoch);
  } while (Absorbed(what, r, &retries));
  return r;
}
// A task's form is the same loop around co_await scheduler_internal::IoAwaiter(...), written
// out in each task call (a shared coroutine would add a frame, about 700 bytes, to every
// operation that waits), or an IoOperation (api/internal/io_operation.h), which keeps the loop's
// state in the awaiting frame.

#ifndef _WIN32
// TryDirect: call(), a non-blocking system call (ssize_t and errno), for a call that seldom has
// to wait: its result, or nullopt when it would block, when the caller may not try (a cancelled
// token must fail the call; past the fiber's budget of direct turns it goes through the reactor
// so its worker's other fibers run) or when an injected fault (WEFT_FAULTS) says it would block.
// Then the caller goes through the reactor (RunAbsorbing), which also ends a MSG_DONTWAIT call
// with EAGAIN.
//
// The call is an FdUse of fd (scheduler/io.h): a close that began since fd.epoch ends it with
// ECANCELED first, and one that begins during the call waits for it to end, so it never reaches
// the number's next file.
template <typename Call>
std::optional<Result<std::size_t>> TryDirect(Fd fd, const WaitOptions& options, const Call& call) {
  if ((options.cancel != nullptr && options.cancel->is_cancelled()) ||
      !scheduler_internal::TakeDirectIoTurn() ||
      fault::Inject(fault::Site::kIo, fault::Kind::kEagain)) {
    return std::nullopt;
  }
  scheduler_internal::FdUse use(fd.fd, fd.epoch);
  if (use.refused()) return Result<std::size_t>(std::errc::operation_canceled);
  const ssize_t n = call();
  if (n >= 0) return Result<std::size_t>(static_cast<std::size_t>(n));
  if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    return Result<std::size_t>(static_cast<std::errc>(errno));
  }
  return std::nullopt;
}
#endif

// The io calls (api/io.h) on an Fd, for the objects that note their fd's epoch when they open
// it (net::TcpStream, net::UdpSocket, fs::File); io::read(fd, ...) and the others are these
// with Fd::Now(fd). Defined in api/io.cc.
Result<std::size_t> Read(Fd fd, void* buf, std::size_t len, const WaitOptions& options,
                         std::int64_t offset = -1);
Result<std::size_t> Write(Fd fd, const void* buf, std::size_t len, const WaitOptions& options,
                          std::int64_t offset = -1);
Result<std::size_t> Readv(Fd fd, const IoVec* iov, int iovcnt, const WaitOptions& options);
Result<std::size_t> Writev(Fd fd, const IoVec* iov, int iovcnt, const WaitOptions& options);
Result<std::size_t> Recv(Fd fd, void* buf, std::size_t len, int flags, const WaitOptions& options);
Result<std::size_t> Send(Fd fd, const void* buf, std::size_t len, int flags,
                         const WaitOptions& options);
Result<std::size_t> RecvMsg(Fd fd, MsgHdr* msg, int flags, const WaitOptions& options);
Result<std::size_t> SendMsg(Fd fd, const MsgHdr* msg, int flags, const WaitOptions& options);
Result<void> WriteAllOn(Fd fd, const void* buf, std::size_t len, const WaitOptions& options);
Result<void> SendAll(Fd fd, const void* buf, std::size_t len, const WaitOptions& options);
Result<void> ReadExact(Fd fd, void* buf, std::size_t len, const WaitOptions& options);
Result<io::RecvBuffer> RecvBufferOn(Fd fd, const WaitOptions& options);
Result<int> Accept(Fd fd, sockaddr* addr, socklen_t* addrlen, const WaitOptions& options);

// The task forms (scheduler/task.h) of the calls above, through scheduler_internal::IoAwaiter
// (the receives into a buffer: IoOperation); in api/io.cc. On the simulated network's fds, whose
// calls block, the blocking form runs on a fiber of its own while the task waits.
Task<Result<std::size_t>> AsyncSend(Fd fd, const void* buf, std::size_t len, int flags,
                                    WaitOptions options);
Task<Result<void>> AsyncSendAll(Fd fd, const void* buf, std::size_t len, WaitOptions options);
Task<Result<std::size_t>> AsyncRecvMsg(Fd fd, MsgHdr* msg, int flags, WaitOptions options);
// AsyncRead / AsyncWrite: Read / Write for a task, on real fds only (fs::File's).
Task<Result<std::size_t>> AsyncRead(Fd fd, void* buf, std::size_t len, WaitOptions options,
                                    std::int64_t offset);
Task<Result<std::size_t>> AsyncWrite(Fd fd, const void* buf, std::size_t len, WaitOptions options,
                                     std::int64_t offset);
Task<Result<std::size_t>> AsyncSendMsg(Fd fd, const MsgHdr* msg, int flags, WaitOptions options);
Task<Result<void>> AsyncReadExact(Fd fd, void* buf, std::size_t len, WaitOptions options);
Task<Result<int>> AsyncAccept(Fd fd, WaitOptions options);
Task<Result<void>> AsyncConnect(int fd, const sockaddr* addr, socklen_t addrlen,
                                WaitOptions options);

// WriteAll: repeats one writing operation until len bytes went out.
template <typename WriteOp>
Result<void> WriteAll(WriteOp op, const void* buf, std::size_t len) {
  const char* p = static_cast<const char*>(buf);
  while (len != 0) {
    Result<std::size_t> n = op(p, len);
    if (!n.ok()) return n.error();
    if (*n == 0) return std::errc::io_error;  // a write that makes no progress
    p += *n;
    len -= *n;
  }
  return {};
}
}  // namespace weft::io_internal

#endif  // WEFT_API_INTERNAL_IO_COMMON_H_
