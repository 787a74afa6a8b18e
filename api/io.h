// api/io.h: fiber I/O on file descriptors. In a fiber, each call parks the fiber on its worker's
// reactor (io_uring or epoll) until the operation completes; on a plain thread the same call
// blocks the thread (dual mode). Every call takes WaitOptions: a deadline (std::errc::timed_out)
// and a cancellation token (std::errc::operation_canceled); a runtime shutting down cancels too.
// Errors are the errno values of the underlying operation, as std::errc.
//
// Defines: weft::io::read, write, readv, writev, recv, send, recvmsg, sendmsg, write_all,
// send_all, read_exact, RecvBuffer, recv_buffer, recv_buffer_stats, accept, connect, poll,
// close, make_nonblocking.
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
#include <string_view>
#include <utility>

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

// RecvBuffer: bytes a recv_buffer received into a buffer the runtime lent. The buffer goes back
// when the RecvBuffer is destroyed or reset() (on any thread); until then data() stays valid.
// Move-only. Keep one only as long as you use the bytes: a worker lends 1,024 buffers; past
// that, receives copy into buffers of their own (recv_buffer_stats().fallback_no_buffers).
class RecvBuffer {
 public:
  RecvBuffer() = default;
  RecvBuffer(RecvBuffer&& other) noexcept { *this = std::move(other); }
  RecvBuffer& operator=(RecvBuffer&& other) noexcept;
  RecvBuffer(const RecvBuffer&) = delete;
  RecvBuffer& operator=(const RecvBuffer&) = delete;
  ~RecvBuffer() { reset(); }

  const char* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {data_, size_}; }
  void reset();  // gives the buffer back now; the RecvBuffer is then empty

 private:
  friend struct RecvBufferAccess;
  char* data_ = nullptr;
  std::size_t size_ = 0;
  BufferPool* pool_ = nullptr;  // a pool's buffer (io_uring), else data_ is malloc'd
  std::uint32_t id_ = 0;
};

// recv_buffer: receives up to 4 KiB from a stream socket (a datagram longer than 4 KiB would be
// cut; use UdpSocket for datagrams) into a buffer the runtime picks when
// the data arrives, and lends it (empty at end of stream). On io_uring the kernel picks it from
// the worker's provided buffer ring, so a connection that waits holds no buffer at all (against
// a buffer per connection for recv): what many mostly idle connections want. Elsewhere (epoll,
// IOCP, a simulated network, a kernel without buffer rings, or every buffer lent) the call waits
// for readiness, then receives into a buffer of its own, which also holds none while it waits.
// Errors as recv's.
Result<RecvBuffer> recv_buffer(int fd, const WaitOptions& options = {});

// recv_buffer_stats: process-wide counts of recv_buffer's results by where the bytes went: a
// buffer the kernel picked from a ring (pooled), or one of the call's own because the ring was
// empty (fallback_no_buffers) or there is none here (fallback).
struct RecvBufferStats {
  std::uint64_t pooled = 0;
  std::uint64_t fallback_no_buffers = 0;
  std::uint64_t fallback = 0;
};
RecvBufferStats recv_buffer_stats();

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
