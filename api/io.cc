// api/io.cc: the fiber I/O calls, each one reactor operation run through scheduler/io.h.

#include "weft/api/io.h"

#ifdef _WIN32
#include "weft/base/internal/win_errno.h"
#else
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "internal/io_common.h"
#include "internal/sim_net.h"
#include "weft/api/net.h"
#include "weft/base/fault.h"
#include "weft/scheduler/io.h"

namespace weft {
namespace io {
// RecvBufferAccess: how recv_buffer fills a RecvBuffer.
struct RecvBufferAccess {
  static RecvBuffer Make(char* data, std::size_t size, BufferPool* pool, std::uint32_t id) {
    RecvBuffer b;
    b.data_ = data;
    b.size_ = size;
    b.pool_ = pool;
    b.id_ = id;
    return b;
  }
};

}  // namespace io

namespace io_internal {
namespace {

using scheduler_internal::RunIo;

// kNoSignal: MSG_NOSIGNAL where a closed peer would otherwise raise SIGPIPE (Windows has none).
#ifdef MSG_NOSIGNAL
constexpr int kNoSignal = MSG_NOSIGNAL;
#else
constexpr int kNoSignal = 0;
#endif

// The simulated network's fds (api/sim.h): one buffer as a list of one. serial: see
// sim_internal::Recv.
Result<std::size_t> SimRecv(int fd, void* buf, std::size_t len, int flags,
                            const WaitOptions& options, std::uint64_t serial = 0) {
  const IoVec one{buf, len};
  return sim_internal::Recv(fd, &one, 1, flags, options, serial);
}
Result<std::size_t> SimSend(int fd, const void* buf, std::size_t len, int flags,
                            const WaitOptions& options, std::uint64_t serial = 0) {
  const IoVec one{const_cast<void*>(buf), len};
  return sim_internal::Send(fd, &one, 1, flags, options, serial);
}

// OnSimFiber: a task's call on a simulated socket. The simulated network's calls wait on its lock
// and condition variables, which block, so the call (its blocking form, f) runs on a fiber of
// its own while the task waits, as this_task::call_blocking runs work in a simulation; the
// call's WaitOptions and the runtime's shutdown end it as they end a fiber's. A fiber that
// cannot start (no stack) is the call's error.
template <typename R, typename F>
Task<R> OnSimFiber(F f) {
  try {
    co_return co_await this_task::call_blocking(std::move(f));
  } catch (const std::system_error& e) {
    co_return static_cast<std::errc>(e.code().value());
  } catch (const std::bad_alloc&) {
    co_return std::errc::not_enough_memory;
  }
}

template <typename R>
Task<R> Ready(R r) {
  co_return r;
}

// OnSimSocket: OnSimFiber for a call on the simulated socket fd names now: call(serial) runs
// on the fiber with that socket's serial, so that a close of it meanwhile (the number then
// perhaps another socket's) ends the call with operation_canceled, as it ends a call under way.
template <typename R, typename F>
Task<R> OnSimSocket(int fd, F call) {
  const std::uint64_t serial = sim_internal::Serial(fd);
  if (serial == 0) return Ready<R>(std::errc::bad_file_descriptor);
  return OnSimFiber<R>([=] { return call(serial); });
}

Absorb ForFlags(int flags) {
#ifdef MSG_DONTWAIT
  if ((flags & MSG_DONTWAIT) != 0) return Absorb::kEintr;
#endif
  return Absorb::kEagain;
}

}  // namespace

Result<std::size_t> Read(Fd at, void* buf, std::size_t len, const WaitOptions& options,
                         std::int64_t offset) {
  const int fd = at.fd;
  if (sim_internal::IsSimFd(fd)) return SimRecv(fd, buf, len, 0, options);
  return Size(RunAbsorbing(
      Absorb::kEagain, at, [&](Reactor& r, IoOp& op) { r.read(op, fd, buf, len, offset); }, options,
      "io read"));
}

Result<std::size_t> Write(Fd at, const void* buf, std::size_t len, const WaitOptions& options,
                          std::int64_t offset) {
  const int fd = at.fd;
  if (sim_internal::IsSimFd(fd)) return SimSend(fd, buf, len, 0, options);
  return Size(RunAbsorbing(
      Absorb::kEagain, at, [&](Reactor& r, IoOp& op) { r.write(op, fd, buf, len, offset); },
      options, "io write"));
}

Result<std::size_t> Readv(Fd at, const IoVec* iov, int iovcnt, const WaitOptions& options) {
  const int fd = at.fd;
  if (sim_internal::IsSimFd(fd)) return sim_internal::Recv(fd, iov, iovcnt, 0, options);
  return Size(RunAbsorbing(
      Absorb::kEagain, at, [&](Reactor& r, IoOp& op) { r.readv(op, fd, iov, iovcnt); }, options,
      "io readv"));
}

Result<std::size_t> Writev(Fd at, const IoVec* iov, int iovcnt, const WaitOptions& options) {
  const int fd = at.fd;
  if (sim_internal::IsSimFd(fd)) return sim_internal::Send(fd, iov, iovcnt, 0, options);
  return Size(RunAbsorbing(
      Absorb::kEagain, at, [&](Reactor& r, IoOp& op) { r.writev(op, fd, iov, iovcnt); }, options,
      "io writev"));
}

Result<std::size_t> Recv(Fd at, void* buf, std::size_t len, int flags, const WaitOptions& options) {
  const int fd = at.fd;
  if (sim_internal::IsSimFd(fd)) return SimRecv(fd, buf, len, flags, options);
  return Size(RunAbsorbing(
      ForFlags(flags), at, [&](Reactor& r, IoOp& op) { r.recv(op, fd, buf, len, flags); }, options,
      "io recv"));
}

namespace {
// SendDirect: a send's first try, without the reactor: its result, or nullopt to go through the
// reactor. A send seldom waits: the socket's buffer usually has room. So it is tried as a
// non-blocking call first; that spares the fiber a park, a reactor round and a wake-up (W6 in
// docs/bench.md). Not when a cancelled token must fail the call, nor past the fiber's budget of
// direct turns. (A deadline matters only to a send that waits, here as in the reactor.)
std::optional<Result<std::size_t>> SendDirect(Fd at, const void* buf, std::size_t len, int flags,
                                              const WaitOptions& options) {
#ifndef _WIN32
  if (BadIoRequest(buf, len)) return Result<std::size_t>(std::errc::invalid_argument);
  return TryDirect(at, options, [&] {
    return ::send(at.fd, buf, ClampIoLength(len), flags | kNoSignal | MSG_DONTWAIT);
  });
#else
  (void)at, (void)buf, (void)len, (void)flags, (void)options;
  return std::nullopt;
#endif
}
}  // namespace

Result<std::size_t> Send(Fd at, const void* buf, std::size_t len, int flags,
                         const WaitOptions& options) {
  scheduler_internal::AbortIfTask("called blocking I/O (io send)");
  const int fd = at.fd;
  if (sim_internal::IsSimFd(fd)) return SimSend(fd, buf, len, flags, options);
#ifdef MSG_ZEROCOPY
  if ((flags & MSG_ZEROCOPY) != 0) {
    // Zero-copy (io_uring's SEND_ZC): the call returns once the kernel no longer needs buf.
    // Never tried directly: a direct send copies.
    const int rest = (flags & ~MSG_ZEROCOPY) | kNoSignal;
    return Size(RunAbsorbing(
        ForFlags(flags), at, [&](Reactor& r, IoOp& op) { r.send_zerocopy(op, fd, buf, len, rest); },
        options, "io send zerocopy"));
  }
#endif
  if (std::optional<Result<std::size_t>> r = SendDirect(at, buf, len, flags, options)) return *r;
  // MSG_NOSIGNAL: a closed peer is an EPIPE error, not a process-killing SIGPIPE.
  return Size(RunAbsorbing(
      ForFlags(flags), at,
      [&](Reactor& r, IoOp& op) { r.send(op, fd, buf, len, flags | kNoSignal); }, options,
      "io send"));
}

namespace {
// RecvMsgAtOnce / SendMsgAtOnce: what RecvMsg / SendMsg (and their task forms) do before the
// reactor: a result when the call ends without it, else nullopt.
std::optional<Result<std::size_t>> RecvMsgAtOnce(Fd at, MsgHdr* msg, int flags,
                                                 const WaitOptions& options) {
  // The simulated network's datagrams: the whole call (the task form runs it on a fiber).
  if (sim_internal::IsSimFd(at.fd)) return sim_internal::RecvMsg(at.fd, msg, flags, options);
#ifndef _WIN32
  // A datagram already queued is taken without the reactor (a busy server's receives seldom
  // wait); only when none is does the call park. Within the fiber's budget, as a send.
  if (BadMsg(msg)) return Result<std::size_t>(std::errc::invalid_argument);
  return TryDirect(at, options, [&] { return ::recvmsg(at.fd, msg, flags | MSG_DONTWAIT); });
#else
  (void)msg;
  (void)flags;
  (void)options;
  return std::nullopt;
#endif
}

std::optional<Result<std::size_t>> SendMsgAtOnce(Fd at, const MsgHdr* msg, int flags,
                                                 const WaitOptions& options) {
  if (sim_internal::IsSimFd(at.fd)) return sim_internal::SendMsg(at.fd, msg, flags, options);
#ifndef _WIN32
  // As send: a datagram's send seldom waits, so it is first tried without the reactor.
  if (BadMsg(msg)) return Result<std::size_t>(std::errc::invalid_argument);
  return TryDirect(at, options,
                   [&] { return ::sendmsg(at.fd, msg, flags | kNoSignal | MSG_DONTWAIT); });
#else
  (void)msg;
  (void)flags;
  (void)options;
  return std::nullopt;
#endif
}
}  // namespace

Result<std::size_t> RecvMsg(Fd at, MsgHdr* msg, int flags, const WaitOptions& options) {
  scheduler_internal::AbortIfTask("called blocking I/O (io recvmsg)");
  if (std::optional<Result<std::size_t>> r = RecvMsgAtOnce(at, msg, flags, options)) return *r;
  return Size(RunAbsorbing(
      ForFlags(flags), at, [&](Reactor& r, IoOp& op) { r.recvmsg(op, at.fd, msg, flags); }, options,
      "io recvmsg"));
}

Result<std::size_t> SendMsg(Fd at, const MsgHdr* msg, int flags, const WaitOptions& options) {
  scheduler_internal::AbortIfTask("called blocking I/O (io sendmsg)");
  if (std::optional<Result<std::size_t>> r = SendMsgAtOnce(at, msg, flags, options)) return *r;
  return Size(RunAbsorbing(
      ForFlags(flags), at,
      [&](Reactor& r, IoOp& op) { r.sendmsg(op, at.fd, msg, flags | kNoSignal); }, options,
      "io sendmsg"));
}

Result<void> WriteAllOn(Fd at, const void* buf, std::size_t len, const WaitOptions& options) {
  return WriteAll([&](const char* p, std::size_t n) { return Write(at, p, n, options); }, buf, len);
}

Result<void> SendAll(Fd at, const void* buf, std::size_t len, const WaitOptions& options) {
  return WriteAll([&](const char* p, std::size_t n) { return Send(at, p, n, 0, options); }, buf,
                  len);
}

namespace {
// The task forms below, on the reactor (the simulated network's fds go through OnSimFiber: the
// public forms choose, without a frame of their own).
Task<Result<std::size_t>> AsyncSendOnReactor(Fd at, const void* buf, std::size_t len, int flags,
                                             WaitOptions options) {
  const int fd = at.fd;
  if (std::optional<Result<std::size_t>> r = SendDirect(at, buf, len, flags, options)) co_return *r;
  std::int64_t r;
  int retries = 0;
  do {
    r = co_await scheduler_internal::IoAwaiter(
        [=](Reactor& re, IoOp& op) { re.send(op, fd, buf, len, flags | kNoSignal); }, options,
        "io send", fd, at.epoch);
  } while (Absorbed(ForFlags(flags), r, &retries));
  co_return Size(r);
}
}  // namespace

Task<Result<std::size_t>> AsyncSend(Fd at, const void* buf, std::size_t len, int flags,
                                    WaitOptions options) {
  if (sim_internal::IsSimFd(at.fd)) {
    return OnSimSocket<Result<std::size_t>>(at.fd, [=](std::uint64_t serial) {
      return SimSend(at.fd, buf, len, flags, options, serial);
    });
  }
  return AsyncSendOnReactor(at, buf, len, flags, options);
}

Task<Result<std::size_t>> AsyncRead(Fd at, void* buf, std::size_t len, WaitOptions options,
                                    std::int64_t offset) {
  std::int64_t r;
  int retries = 0;
  do {
    r = co_await scheduler_internal::IoAwaiter(
        [=](Reactor& re, IoOp& op) { re.read(op, at.fd, buf, len, offset); }, options, "io read",
        at.fd, at.epoch);
  } while (Absorbed(Absorb::kEagain, r, &retries));
  co_return Size(r);
}

Task<Result<std::size_t>> AsyncWrite(Fd at, const void* buf, std::size_t len, WaitOptions options,
                                     std::int64_t offset) {
  std::int64_t r;
  int retries = 0;
  do {
    r = co_await scheduler_internal::IoAwaiter(
        [=](Reactor& re, IoOp& op) { re.write(op, at.fd, buf, len, offset); }, options, "io write",
        at.fd, at.epoch);
  } while (Absorbed(Absorb::kEagain, r, &retries));
  co_return Size(r);
}

namespace {
Task<Result<std::size_t>> AsyncRecvMsgOnReactor(Fd at, MsgHdr* msg, int flags,
                                                WaitOptions options) {
  if (std::optional<Result<std::size_t>> r = RecvMsgAtOnce(at, msg, flags, options)) co_return *r;
  std::int64_t r;
  int retries = 0;
  do {
    r = co_await scheduler_internal::IoAwaiter(
        [=](Reactor& re, IoOp& op) { re.recvmsg(op, at.fd, msg, flags); }, options, "io recvmsg",
        at.fd, at.epoch);
  } while (Absorbed(ForFlags(flags), r, &retries));
  co_return Size(r);
}

Task<Result<std::size_t>> AsyncSendMsgOnReactor(Fd at, const MsgHdr* msg, int flags,
                                                WaitOptions options) {
  if (std::optional<Result<std::size_t>> r = SendMsgAtOnce(at, msg, flags, options)) co_return *r;
  std::int64_t r;
  int retries = 0;
  do {
    r = co_await scheduler_internal::IoAwaiter(
        [=](Reactor& re, IoOp& op) { re.sendmsg(op, at.fd, msg, flags | kNoSignal); }, options,
        "io sendmsg", at.fd, at.epoch);
  } while (Absorbed(ForFlags(flags), r, &retries));
  co_return Size(r);
}
}  // namespace

Task<Result<std::size_t>> AsyncRecvMsg(Fd at, MsgHdr* msg, int flags, WaitOptions options) {
  if (sim_internal::IsSimFd(at.fd)) {
    return OnSimSocket<Result<std::size_t>>(at.fd, [=](std::uint64_t serial) {
      return sim_internal::RecvMsg(at.fd, msg, flags, options, serial);
    });
  }
  return AsyncRecvMsgOnReactor(at, msg, flags, options);
}

Task<Result<std::size_t>> AsyncSendMsg(Fd at, const MsgHdr* msg, int flags, WaitOptions options) {
  if (sim_internal::IsSimFd(at.fd)) {
    return OnSimSocket<Result<std::size_t>>(at.fd, [=](std::uint64_t serial) {
      return sim_internal::SendMsg(at.fd, msg, flags, options, serial);
    });
  }
  return AsyncSendMsgOnReactor(at, msg, flags, options);
}

Task<Result<void>> AsyncSendAll(Fd at, const void* buf, std::size_t len, WaitOptions options) {
  const char* p = static_cast<const char*>(buf);
  while (len != 0) {
    Result<std::size_t> n = co_await AsyncSend(at, p, len, 0, options);
    if (!n.ok()) co_return n.error();
    if (*n == 0) co_return std::errc::io_error;  // a write that makes no progress
    p += *n;
    len -= *n;
  }
  co_return Result<void>();
}

Task<Result<void>> AsyncReadExact(Fd at, void* buf, std::size_t len, WaitOptions options) {
  char* p = static_cast<char*>(buf);
  while (len != 0) {
    Result<std::size_t> n = co_await IoOperation<RecvCall>(RecvCall(at, p, len), options);
    if (!n.ok()) co_return n.error();
    if (*n == 0) co_return std::errc::connection_aborted;  // the end came first, as ReadExact
    p += *n;
    len -= *n;
  }
  co_return Result<void>();
}

namespace {
Task<Result<int>> AsyncAcceptOnReactor(Fd at, WaitOptions options) {
  const int fd = at.fd;
  std::int64_t r;
  int retries = 0;
  do {
    r = co_await scheduler_internal::IoAwaiter(
        [fd](Reactor& re, IoOp& op) { re.accept(op, fd, nullptr, nullptr); }, options, "io accept",
        fd, at.epoch);
  } while (Absorbed(Absorb::kAccept, r, &retries));
  if (r < 0) co_return ErrcOf(r);
  co_return static_cast<int>(r);
}

Task<Result<void>> AsyncConnectOnReactor(int fd, const sockaddr* addr, socklen_t addrlen,
                                         WaitOptions options) {
  std::int64_t r = co_await scheduler_internal::IoAwaiter(
      [&](Reactor& re, IoOp& op) { re.connect(op, fd, addr, addrlen); }, options, "io connect", fd);
  if (r < 0) co_return ErrcOf(r);
  co_return Result<void>();
}
}  // namespace

Task<Result<int>> AsyncAccept(Fd at, WaitOptions options) {
  if (sim_internal::IsSimFd(at.fd)) {
    return OnSimSocket<Result<int>>(at.fd, [=](std::uint64_t serial) {
      return sim_internal::Accept(at.fd, nullptr, nullptr, options, serial);
    });
  }
  return AsyncAcceptOnReactor(at, options);
}

Task<Result<void>> AsyncConnect(int fd, const sockaddr* addr, socklen_t addrlen,
                                WaitOptions options) {
  if (sim_internal::IsSimFd(fd)) {
    // The address is copied: the caller's may go before the fiber runs.
    sockaddr_storage to{};
    if (addr == nullptr || addrlen <= 0 || static_cast<std::size_t>(addrlen) > sizeof to) {
      return Ready<Result<void>>(std::errc::invalid_argument);
    }
    std::memcpy(&to, addr, addrlen);
    return OnSimSocket<Result<void>>(fd, [=](std::uint64_t serial) {
      return sim_internal::Connect(fd, reinterpret_cast<const sockaddr*>(&to), addrlen, options,
                                   serial);
    });
  }
  return AsyncConnectOnReactor(fd, addr, addrlen, options);
}

// recv_buffer's counts (relaxed: statistics).
std::atomic<std::uint64_t> g_recv_pooled{0};
std::atomic<std::uint64_t> g_recv_no_buffers{0};
std::atomic<std::uint64_t> g_recv_fallback{0};

namespace {
// OwnBuffer: a buffer of recv_buffer's own, as large as a pool's.
constexpr std::size_t kOwnBufferSize = Reactor::kPooledBufferSize;

// IntoOwn: receive(own) (the bytes received, 0 at end of stream, or -errno) into a new buffer
// of the call's own, which the result lends; empty at end of stream.
template <typename Receive>
Result<io::RecvBuffer> IntoOwn(const Receive& receive) {
  char* own = static_cast<char*>(std::malloc(kOwnBufferSize));
  if (own == nullptr) return std::errc::not_enough_memory;
  const std::int64_t n = receive(own);
  if (n > 0) return io::RecvBufferAccess::Make(own, static_cast<std::size_t>(n), nullptr, 0);
  std::free(own);
  if (n == 0) return io::RecvBuffer();  // end of stream
  return ErrcOf(n);
}

// RecvOwn: one receive that does not wait, into a buffer of its own; nullopt when nothing is
// there after all (a readiness that another reader took first).
std::optional<Result<io::RecvBuffer>> RecvOwn(Fd at) {
  Result<io::RecvBuffer> b = IntoOwn([&](char* own) -> std::int64_t {
    scheduler_internal::FdUse use(at.fd, at.epoch);  // never the number's next file
    if (use.refused()) return -ECANCELED;
#ifdef _WIN32
    const int n = ::recv(NativeSocket(at.fd), own, static_cast<int>(kOwnBufferSize), 0);
    return n >= 0 ? n : -base_internal::ErrnoOf(static_cast<DWORD>(WSAGetLastError()));
#else
    const ssize_t n = ::recv(at.fd, own, kOwnBufferSize, MSG_DONTWAIT);
    return n >= 0 ? n : -errno;
#endif
  });
  if (!b.ok() &&
      (b.error() == std::errc::resource_unavailable_try_again ||
       b.error() == std::errc::operation_would_block || b.error() == std::errc::interrupted)) {
    return std::nullopt;
  }
  return b;
}

}  // namespace

void RecvBufferTries::Submit(Reactor& re, IoOp& op) {
  pooled_ = !no_ring_ && re.pooled_receives();
  if (pooled_) {
    re.recv_pooled(op, at_.fd, &got_, 0);
  } else {
    re.poll_readiness(op, at_.fd, POLLIN);
  }
}

std::optional<Result<io::RecvBuffer>> RecvBufferTries::After(std::int64_t r) {
  if (pooled_) {
    if (r == -ENOBUFS || r == -EOPNOTSUPP) {
      no_ring_ = true;
      no_buffers_ = r == -ENOBUFS;
      return std::nullopt;
    }
    if (r < 0) return ErrcOf(r);
    if (r == 0) return io::RecvBuffer();                   // end of stream
    if (got_.pool == nullptr) return std::errc::io_error;  // (a backend that lent nothing)
    g_recv_pooled.fetch_add(1, std::memory_order_relaxed);
    return io::RecvBufferAccess::Make(got_.data, static_cast<std::size_t>(r), got_.pool, got_.id);
  }
  if (r < 0) return ErrcOf(r);
  std::optional<Result<io::RecvBuffer>> b = RecvOwn(at_);
  if (b && b->ok() && !(*b)->empty()) {
    (no_buffers_ ? g_recv_no_buffers : g_recv_fallback).fetch_add(1, std::memory_order_relaxed);
  }
  return b;
}

namespace {
// SimRecvBuffer: recv_buffer on the simulated network: a buffer of the call's own.
Result<io::RecvBuffer> SimRecvBuffer(int fd, const WaitOptions& options, std::uint64_t serial) {
  Result<io::RecvBuffer> b = IntoOwn([&](char* own) -> std::int64_t {
    Result<std::size_t> n = SimRecv(fd, own, kOwnBufferSize, 0, options, serial);
    return n.ok() ? static_cast<std::int64_t>(*n) : -static_cast<std::int64_t>(n.error());
  });
  if (b.ok() && !b->empty()) g_recv_fallback.fetch_add(1, std::memory_order_relaxed);
  return b;
}
}  // namespace

Result<io::RecvBuffer> RecvBufferOn(Fd at, const WaitOptions& options) {
  const int fd = at.fd;
  if (sim_internal::IsSimFd(fd)) return SimRecvBuffer(fd, options, 0);
  RecvBufferTries tries(at);
  for (;;) {
    const std::int64_t r = RunAbsorbing(
        Absorb::kEagain, at, [&](Reactor& re, IoOp& op) { tries.Submit(re, op); }, options,
        RecvBufferTries::kName);
    if (std::optional<Result<io::RecvBuffer>> b = tries.After(r)) return std::move(*b);
  }
}

Result<int> Accept(Fd at, sockaddr* addr, socklen_t* addrlen, const WaitOptions& options) {
  const int fd = at.fd;
  if (sim_internal::IsSimFd(fd)) return sim_internal::Accept(fd, addr, addrlen, options);
  std::int64_t r = RunAbsorbing(
      Absorb::kAccept, at, [&](Reactor& re, IoOp& op) { re.accept(op, fd, addr, addrlen); },
      options, "io accept");
  if (r < 0) return ErrcOf(r);
  return static_cast<int>(r);
}

Result<void> ReadExact(Fd at, void* buf, std::size_t len, const WaitOptions& options) {
  char* p = static_cast<char*>(buf);
  while (len != 0) {
    Result<std::size_t> n = Read(at, p, len, options);
    if (!n.ok()) return n.error();
    if (*n == 0) return std::errc::connection_aborted;
    p += *n;
    len -= *n;
  }
  return {};
}

RecvBufferTries::Value RecvBufferTries::Blocking(const WaitOptions& options) const {
  return RecvBufferOn(at_, options);
}

Task<RecvBufferTries::Value> RecvBufferTries::Sim(const WaitOptions& options) const {
  const Fd at = at_;
  return OnSimSocket<Value>(
      at.fd, [at, options](std::uint64_t serial) { return SimRecvBuffer(at.fd, options, serial); });
}

void RecvCall::Submit(Reactor& re, IoOp& op) { re.recv(op, at_.fd, buf_, len_, 0); }

std::optional<RecvCall::Value> RecvCall::After(std::int64_t r) { return Size(r); }

RecvCall::Value RecvCall::Blocking(const WaitOptions& options) const {
  return Recv(at_, buf_, len_, 0, options);
}

Task<RecvCall::Value> RecvCall::Sim(const WaitOptions& options) const {
  const Fd at = at_;
  void* const buf = buf_;
  const std::size_t len = len_;
  return OnSimSocket<Value>(at.fd, [at, buf, len, options](std::uint64_t serial) {
    return SimRecv(at.fd, buf, len, 0, options, serial);
  });
}

template <typename Call>
IoOperation<Call>::IoOperation(Call call, WaitOptions options)
    : options_(options), call_(call), park_(&Done, this) {
  if (sim_internal::IsSimFd(call_.at().fd)) {
    // The simulated socket the fd names now (OnSimSocket's serial), as the blocking form's.
    new (&sim_) Task<Value>(call_.Sim(options_));
    stage_ = Stage::kSim;
  }
}

template <typename Call>
IoOperation<Call>::IoOperation(IoOperation&& other)
    : options_(other.options_), call_(other.call_), park_(&Done, this) {
  if (other.awaited_) throw std::logic_error("weft: an I/O operation moved once awaited");
  if (other.stage_ == Stage::kSim) {
    new (&sim_) Task<Value>(std::move(other.sim_));
    stage_ = Stage::kSim;
  }
  other.awaited_ = true;  // moved from: awaiting it throws, as a moved-from Task's await
}

template <typename Call>
IoOperation<Call>::~IoOperation() {
  Destroy();
}

template <typename Call>
void IoOperation<Call>::Destroy() {
  switch (stage_) {
    case Stage::kWaiting:
      // Its coroutine's frame was destroyed while the call waits (a suspended coroutine's handle
      // destroyed by hand): the reactor would write into freed memory.
      std::fprintf(stderr, "weft: an I/O operation (%s) destroyed while it waits\n", Call::kName);
      std::abort();
    case Stage::kOver:
      result_.~Result();
      break;
    case Stage::kSim:
      sim_.~Task();
      break;
    case Stage::kNone:
      break;
  }
  stage_ = Stage::kNone;
}

template <typename Call>
bool IoOperation<Call>::await_ready() {
  if (awaited_) throw std::logic_error("weft: co_await on an I/O operation already awaited");
  awaited_ = true;
  if (stage_ == Stage::kSim) return false;
  scheduler_internal::Fiber* task = scheduler_internal::RunningTask();
  if (task == nullptr) {  // a coroutine on a fiber or thread: the blocking form blocks it
    new (&result_) Value(call_.Blocking(options_));
    stage_ = Stage::kOver;
    return true;
  }
  return !Launch(task);
}

template <typename Call>
std::coroutine_handle<> IoOperation<Call>::await_suspend(std::coroutine_handle<> h) {
  if (stage_ == Stage::kSim) return std::move(sim_).operator co_await().await_suspend(h);
  // A plain park: each attempt's IoWait forwards the token's and the shutdown's cancellations
  // to its operation and waits for the completion; Done submits the next attempt.
  if (park_.Begin(wait_.waiter(), h, Call::kName, nullptr)) {
    return std::noop_coroutine();
  }
  // Over at once: the task goes on at h through its worker (a resume nested here would grow
  // the worker's stack where the compiler does not make the transfer a tail call).
  if (scheduler_internal::TransferInTask(h)) return std::noop_coroutine();
  return h;
}

template <typename Call>
typename IoOperation<Call>::Value IoOperation<Call>::await_resume() {
  if (stage_ == Stage::kSim) return std::move(sim_).operator co_await().await_resume();
  (void)park_.End();
  Value r = std::move(result_);
  Destroy();
  return r;
}

template <typename Call>
IoOperation<Call>::operator Task<Value>() && {
  if (awaited_) throw std::logic_error("weft: an I/O operation already awaited made a Task");
  awaited_ = true;
  if (stage_ == Stage::kSim) {
    Task<Value> sim = std::move(sim_);
    Destroy();
    return sim;
  }
  return Run(call_, options_);
}

template <typename Call>
Task<typename IoOperation<Call>::Value> IoOperation<Call>::Run(Call call, WaitOptions options) {
  co_return co_await IoOperation(call, options);
}

template <typename Call>
void IoOperation<Call>::Submit(Reactor& re, IoOp& op, void* self) {
  static_cast<IoOperation*>(self)->call_.Submit(re, op);
}

template <typename Call>
bool IoOperation<Call>::Launch(scheduler_internal::Fiber* task) {
  for (;;) {
    new (&wait_) scheduler_internal::IoWait();
    stage_ = Stage::kWaiting;
    std::int64_t r = 0;
    const Fd at = call_.at();
    if (wait_.Start(task, &Submit, this, options_, at.fd, at.epoch, /*cancellable=*/true, &r)) {
      return true;
    }
    wait_.~IoWait();  // nothing was submitted
    stage_ = Stage::kNone;
    if (Over(r)) return false;
  }
}

template <typename Call>
bool IoOperation<Call>::Over(std::int64_t r) {
  static_assert(kTransientRetries <= 255, "retries_ is a byte");
  int retries = retries_;
  const bool absorbed = Absorbed(Absorb::kEagain, r, &retries);
  retries_ = static_cast<std::uint8_t>(retries);  // at most kTransientRetries
  if (absorbed) return false;
  std::optional<Value> b = call_.After(r);
  if (!b) {
    retries_ = 0;  // the next way of receiving: its own transient failures
    return false;
  }
  new (&result_) Value(std::move(*b));
  stage_ = Stage::kOver;
  return true;
}

template <typename Call>
bool IoOperation<Call>::Done(void* self) {
  auto* o = static_cast<IoOperation*>(self);
  if (o->stage_ != Stage::kWaiting) return true;
  // Step after every launch too, as a wait's first look: a token cancelled after the new
  // attempt's Start looked at it but before its registration would otherwise go unseen (no
  // callback runs for it, and nothing else wakes the task to look).
  while (o->wait_.Step()) {
    // The attempt is over (its operation completed, and a cancel sent to its worker was
    // taken): the IoWait is free. Another attempt, if the call needs one, goes out from here,
    // on the task's worker, as the task's next co_await would.
    scheduler_internal::Fiber* task = o->wait_.fiber();
    const std::int64_t r = o->wait_.Finish();
    o->wait_.~IoWait();
    o->stage_ = Stage::kNone;
    if (o->Over(r) || !o->Launch(task)) return true;
  }
  return false;
}

template class IoOperation<RecvBufferTries>;
template class IoOperation<RecvCall>;

}  // namespace io_internal

namespace io {

RecvBuffer& RecvBuffer::operator=(RecvBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    pool_ = std::exchange(other.pool_, nullptr);
    id_ = other.id_;
  }
  return *this;
}

void RecvBuffer::reset() {
  if (pool_ != nullptr) {
    pool_->release(id_);  // back to its worker's ring at that worker's next poll
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  size_ = 0;
  pool_ = nullptr;
}

RecvBufferStats recv_buffer_stats() {
  return {io_internal::g_recv_pooled.load(std::memory_order_relaxed),
          io_internal::g_recv_no_buffers.load(std::memory_order_relaxed),
          io_internal::g_recv_fallback.load(std::memory_order_relaxed)};
}

using io_internal::Absorb;
using io_internal::ErrcOf;
using io_internal::Fd;
using io_internal::RunAbsorbing;
using scheduler_internal::RunIo;

// The calls on a bare number: the close epoch is the number's when the call starts.
Result<std::size_t> read(int fd, void* buf, std::size_t len, const WaitOptions& options,
                         std::int64_t offset) {
  return io_internal::Read(Fd::Now(fd), buf, len, options, offset);
}
Result<std::size_t> write(int fd, const void* buf, std::size_t len, const WaitOptions& options,
                          std::int64_t offset) {
  return io_internal::Write(Fd::Now(fd), buf, len, options, offset);
}
Result<std::size_t> readv(int fd, const IoVec* iov, int iovcnt, const WaitOptions& options) {
  return io_internal::Readv(Fd::Now(fd), iov, iovcnt, options);
}
Result<std::size_t> writev(int fd, const IoVec* iov, int iovcnt, const WaitOptions& options) {
  return io_internal::Writev(Fd::Now(fd), iov, iovcnt, options);
}
Result<std::size_t> recv(int fd, void* buf, std::size_t len, int flags,
                         const WaitOptions& options) {
  return io_internal::Recv(Fd::Now(fd), buf, len, flags, options);
}
Result<std::size_t> send(int fd, const void* buf, std::size_t len, int flags,
                         const WaitOptions& options) {
  return io_internal::Send(Fd::Now(fd), buf, len, flags, options);
}
Result<std::size_t> recvmsg(int fd, MsgHdr* msg, int flags, const WaitOptions& options) {
  return io_internal::RecvMsg(Fd::Now(fd), msg, flags, options);
}
Result<std::size_t> sendmsg(int fd, const MsgHdr* msg, int flags, const WaitOptions& options) {
  return io_internal::SendMsg(Fd::Now(fd), msg, flags, options);
}
Result<void> write_all(int fd, const void* buf, std::size_t len, const WaitOptions& options) {
  return io_internal::WriteAllOn(Fd::Now(fd), buf, len, options);
}
Result<void> send_all(int fd, const void* buf, std::size_t len, const WaitOptions& options) {
  return io_internal::SendAll(Fd::Now(fd), buf, len, options);
}
Result<void> read_exact(int fd, void* buf, std::size_t len, const WaitOptions& options) {
  return io_internal::ReadExact(Fd::Now(fd), buf, len, options);
}
Result<RecvBuffer> recv_buffer(int fd, const WaitOptions& options) {
  return io_internal::RecvBufferOn(Fd::Now(fd), options);
}

Result<int> accept(int fd, sockaddr* addr, socklen_t* addrlen, const WaitOptions& options) {
  return io_internal::Accept(Fd::Now(fd), addr, addrlen, options);
}

Result<void> connect(int fd, const sockaddr* addr, socklen_t addrlen, const WaitOptions& options) {
  if (sim_internal::IsSimFd(fd)) return sim_internal::Connect(fd, addr, addrlen, options);
  std::int64_t r = RunIo([&](Reactor& re, IoOp& op) { re.connect(op, fd, addr, addrlen); }, options,
                         "io connect", fd);
  if (r < 0) return ErrcOf(r);
  return {};
}

Result<std::uint32_t> poll(int fd, std::uint32_t events, const WaitOptions& options) {
  if (sim_internal::IsSimFd(fd)) return sim_internal::Poll(fd, events, options);
  std::int64_t r = RunIo([&](Reactor& re, IoOp& op) { re.poll_readiness(op, fd, events); }, options,
                         "io poll", fd);
  if (r < 0) return ErrcOf(r);
  return static_cast<std::uint32_t>(r);
}

#ifdef _WIN32
Result<void> close(int fd) {
  if (fd < 0) return std::errc::bad_file_descriptor;
  if (sim_internal::IsSimFd(fd)) return sim_internal::Close(fd);
  // A simulated runtime touches no real fd (docs/simulation.md).
  if (scheduler_internal::InSimulation()) return std::errc::not_supported;
  int type = 0;
  int len = sizeof type;
  if (::getsockopt(NativeSocket(fd), SOL_SOCKET, SO_TYPE, reinterpret_cast<char*>(&type), &len) !=
      0) {
    return std::errc::bad_file_descriptor;
  }
  scheduler_internal::CloseFd(fd);
  return {};
}

Result<void> make_nonblocking(int fd) {
  if (sim_internal::IsSimFd(fd)) return sim_internal::Check(fd);  // they never block a thread
  if (scheduler_internal::InSimulation()) return std::errc::not_supported;
  u_long on = 1;
  if (::ioctlsocket(NativeSocket(fd), FIONBIO, &on) != 0) {
    return static_cast<std::errc>(base_internal::ErrnoOf(static_cast<DWORD>(WSAGetLastError())));
  }
  return {};
}
#else
Result<void> close(int fd) {
  if (fd < 0) return std::errc::bad_file_descriptor;
  if (sim_internal::IsSimFd(fd)) return sim_internal::Close(fd);
  // A simulated runtime touches no real fd (docs/simulation.md).
  if (scheduler_internal::InSimulation()) return std::errc::not_supported;
  if (::fcntl(fd, F_GETFD) < 0) return static_cast<std::errc>(errno);
  scheduler_internal::CloseFd(fd);
  return {};
}

Result<void> make_nonblocking(int fd) {
  if (sim_internal::IsSimFd(fd)) return sim_internal::Check(fd);  // they never block a thread
  if (scheduler_internal::InSimulation()) return std::errc::not_supported;
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return static_cast<std::errc>(errno);
  }
  return {};
}
#endif

}  // namespace io
}  // namespace weft
