// api/io.h: fiber I/O on file descriptors. In a fiber, each call parks the fiber on its worker's
// reactor (io_uring or epoll) until the operation completes; on a plain thread the same call
// blocks the thread (dual mode). Every call takes WaitOptions: a deadline (std::errc::timed_out)
// and a cancellation token (std::errc::operation_canceled); a runtime shutting down cancels too.
// Errors are the errno values of the underlying operation, as std::errc.
//
// Defines: weft::io::read, write, readv, writev, recv, send, recvmsg, sendmsg, write_all,
// send_all, read_exact, accept, connect, poll, close, make_nonblocking.
//
// On Windows an fd is a SOCKET cast to int (see reactor/reactor.h), and the calls are for sockets.
//
// Rules: buffers must stay valid until the call returns (the call always waits for the
// operation's completion, even when cancelled). Close an fd with io::close (not ::close) while
// other fibers or threads may have operations on it: it fails them with operation_canceled, on
// every worker and thread, before the fd is closed (docs/api.md). Use non-blocking fds (the
// net.h types create them so) for sockets and pipes.

#ifndef WEFT_API_IO_H_
#define WEFT_API_IO_H_

#ifdef _WIN32
#include <winsock2.h>
#include <ws2tcpip.h>
#else
#include <sys/socket.h>
#include <sys/uio.h>
#endif

#include <cstddef>
#include <cstdint>

#include "weft/base/result.h"
#include "weft/reactor/reactor.h"  // IoVec
#include "weft/sync/cancellation.h"

namespace weft::io {

// read / write: one operation; 0 from read means end of file. offset -1: the current position.
Result<std::size_t> read(int fd, void* buf, std::size_t len, const WaitOptions& options = {},
                         std::int64_t offset = -1);
Result<std::size_t> write(int fd, const void* buf, std::size_t len, const WaitOptions& options = {},
                          std::int64_t offset = -1);
Result<std::size_t> readv(int fd, const IoVec* iov, int iovcnt, const WaitOptions& options = {});
Result<std::size_t> writev(int fd, const IoVec* iov, int iovcnt, const WaitOptions& options = {});
Result<std::size_t> recv(int fd, void* buf, std::size_t len, int flags = 0,
                         const WaitOptions& options = {});
Result<std::size_t> send(int fd, const void* buf, std::size_t len, int flags = 0,
                         const WaitOptions& options = {});

// recvmsg / sendmsg: one datagram with its peer address (msg's buffers and name; recvmsg sets
// msg_namelen, and kMsgTruncated in msg_flags when the datagram was longer than the buffers).
// EMSGSIZE from sendmsg for a datagram larger than the protocol allows.
Result<std::size_t> recvmsg(int fd, MsgHdr* msg, int flags = 0, const WaitOptions& options = {});
Result<std::size_t> sendmsg(int fd, const MsgHdr* msg, int flags = 0,
                            const WaitOptions& options = {});

// write_all: writes all len bytes (several operations if need be). On an error after a partial
// write the error is returned; the bytes written so far are lost to the caller, as with a stream
// that broke.
Result<void> write_all(int fd, const void* buf, std::size_t len, const WaitOptions& options = {});
// send with MSG_ZEROCOPY in flags (Linux): the kernel sends from buf without copying it
// (io_uring's SEND_ZC), and the call returns once it no longer needs buf; elsewhere, or where the
// kernel or socket cannot, a plain send. It pays only for large sends to a network device: on
// loopback it is slower (docs/reactor.md).
//
// send_all: write_all for sockets, through send (MSG_NOSIGNAL: a closed peer is EPIPE, not a
// SIGPIPE).
Result<void> send_all(int fd, const void* buf, std::size_t len, const WaitOptions& options = {});
// read_exact: reads exactly len bytes; std::errc::connection_aborted if the stream ends first.
Result<void> read_exact(int fd, void* buf, std::size_t len, const WaitOptions& options = {});

// accept: a new connected fd, non-blocking and close-on-exec.
Result<int> accept(int fd, sockaddr* addr = nullptr, socklen_t* addrlen = nullptr,
                   const WaitOptions& options = {});
Result<void> connect(int fd, const sockaddr* addr, socklen_t addrlen,
                     const WaitOptions& options = {});
// poll: waits until fd is ready for `events` (POLLIN, POLLOUT...); returns the ready events.
Result<std::uint32_t> poll(int fd, std::uint32_t events, const WaitOptions& options = {});

// close: fails the fd's pending operations with operation_canceled, in every worker's and
// thread's reactor, waits until they have ended, then closes it. Not cancellable. EBADF for
// anything not open (on Windows: not a socket).
Result<void> close(int fd);

// make_nonblocking: sets O_NONBLOCK (Windows: FIONBIO) for fds not created by weft.
Result<void> make_nonblocking(int fd);

}  // namespace weft::io

#endif  // WEFT_API_IO_H_
