// api/net.h: TCP for fibers: addresses, name resolution that does not block a worker, and RAII
// listener and stream types over api/io.h (so every call parks a fiber, or blocks a plain
// thread, and takes WaitOptions).
//
// Defines: weft::net::SocketAddress, weft::net::resolve, weft::net::TcpListener,
// weft::net::TcpStream, weft::net::UdpSocket.

#ifndef WEFT_API_NET_H_
#define WEFT_API_NET_H_

#ifdef _WIN32
#include <winsock2.h>
#include <ws2tcpip.h>
#else
#include <netinet/in.h>
#include <sys/socket.h>
#endif

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weft/api/internal/io_operation.h"
#include "weft/api/io.h"
#include "weft/base/result.h"
#include "weft/scheduler/task.h"
#include "weft/sync/cancellation.h"

namespace weft::net {

// SocketAddress: an IPv4 or IPv6 address and port.
class SocketAddress {
 public:
  SocketAddress() = default;
  // parse: "1.2.3.4:80", "[::1]:80", or "localhost:80"-style names are NOT accepted here (use
  // resolve). EINVAL for anything else.
  static Result<SocketAddress> parse(std::string_view text);
  static SocketAddress ipv4_loopback(std::uint16_t port);
  static SocketAddress ipv4_any(std::uint16_t port);
  static Result<SocketAddress> from_sockaddr(const sockaddr* addr, socklen_t len);

  int family() const { return storage_.ss_family; }
  std::uint16_t port() const;
  std::string to_string() const;
  const sockaddr* data() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t size() const { return len_; }

 private:
  sockaddr_storage storage_{};
  socklen_t len_ = 0;
};

// resolve: host name (or numeric address) and port to addresses, via getaddrinfo on the
// runtime's blocking threads (call_blocking), so a worker never blocks on DNS. Errors:
// address_not_available (no such name), resource_unavailable_try_again (temporary DNS failure),
// invalid_argument. The cancellation token is checked before the lookup starts; the lookup
// itself runs to completion (glibc's resolver has its own timeouts).
Result<std::vector<SocketAddress>> resolve(std::string_view host, std::uint16_t port,
                                           const WaitOptions& options = {});

// The operations a TcpStream's task forms return where the call keeps its state in the
// awaiting frame (io_internal::IoOperation: co_await one at once, or convert it to a Task):
// RecvBufferOperation (async_recv_buffer) and ReadOperation (async_read).
using RecvBufferOperation = io_internal::IoOperation<io_internal::RecvBufferTries>;
using ReadOperation = io_internal::IoOperation<io_internal::RecvCall>;

class TcpStream {
 public:
  TcpStream() = default;
  explicit TcpStream(int fd);  // adopts a connected, non-blocking socket
  ~TcpStream() { (void)close(); }
  TcpStream(TcpStream&& other) noexcept : fd_(other.release()), epoch_(other.epoch_) {}
  TcpStream& operator=(TcpStream&& other) noexcept;
  TcpStream(const TcpStream&) = delete;
  TcpStream& operator=(const TcpStream&) = delete;

  // connect: to one address; or to a host name, trying each resolved address in turn.
  static Result<TcpStream> connect(const SocketAddress& addr, const WaitOptions& options = {});
  static Result<TcpStream> connect(std::string_view host, std::uint16_t port,
                                   const WaitOptions& options = {});

  // read: up to len bytes, 0 at end of stream. write: some bytes. write_all / read_exact: all.
  Result<std::size_t> read(void* buf, std::size_t len, const WaitOptions& options = {});
  Result<std::size_t> write(const void* buf, std::size_t len, const WaitOptions& options = {});
  Result<void> write_all(const void* buf, std::size_t len, const WaitOptions& options = {});
  Result<void> read_exact(void* buf, std::size_t len, const WaitOptions& options = {});
  // The forms for a task (scheduler/task.h), which waits without blocking its worker:
  // `Result<std::size_t> n = co_await stream.async_read(buf, len)`. The same results; the
  // buffer and the stream must outlive the call (awaited at once, they do). async_read and
  // async_recv_buffer return operations (ReadOperation, RecvBufferOperation: awaitables that keep
  // the call's state in the awaiting frame and convert to a Task where one is wanted). On the
  // simulated network's sockets, the blocking form runs on a fiber of its own while the task waits.
  // A TcpStream destroyed or closed in a task closes without waiting (the close completes on the
  // worker's reactor).
  ReadOperation async_read(void* buf, std::size_t len, WaitOptions options);
  ReadOperation async_read(void* buf, std::size_t len) {
    return async_read(buf, len, WaitOptions{});
  }
  Task<Result<std::size_t>> async_write(const void* buf, std::size_t len, WaitOptions options);
  Task<Result<std::size_t>> async_write(const void* buf, std::size_t len) {
    return async_write(buf, len, WaitOptions{});
  }
  Task<Result<void>> async_write_all(const void* buf, std::size_t len, WaitOptions options);
  Task<Result<void>> async_write_all(const void* buf, std::size_t len) {
    return async_write_all(buf, len, WaitOptions{});
  }
  Task<Result<void>> async_read_exact(void* buf, std::size_t len, WaitOptions options);
  Task<Result<void>> async_read_exact(void* buf, std::size_t len) {
    return async_read_exact(buf, len, WaitOptions{});
  }
  static Task<Result<TcpStream>> async_connect(SocketAddress addr, WaitOptions options);
  static Task<Result<TcpStream>> async_connect(SocketAddress addr) {
    return async_connect(addr, WaitOptions{});
  }
  // recv_buffer: up to 4 KiB in a buffer the runtime lends (io::recv_buffer): a connection that
  // waits holds no buffer; empty at end of stream.
  Result<io::RecvBuffer> recv_buffer(const WaitOptions& options = {});
  // async_recv_buffer: recv_buffer for a task: a task parked in it holds no buffer either.
  RecvBufferOperation async_recv_buffer(WaitOptions options);
  RecvBufferOperation async_recv_buffer() { return async_recv_buffer(WaitOptions{}); }

  Result<void> shutdown_write();  // sends FIN; reads continue
  // shutdown: both ways: a FIN, and reads (also those waiting) return 0 from now on.
  Result<void> shutdown();
  Result<void> set_nodelay(bool on);
  Result<SocketAddress> peer_address() const;
  Result<SocketAddress> local_address() const;

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int release() { return fd_.exchange(-1); }  // gives up ownership of the fd
  Result<void> close();  // fails this fd's pending operations, then closes; idempotent

 private:
  // Atomic: a close may race with another fiber's call, which then ends operation_canceled
  // (docs/api.md, "Rules and limits"); epoch_: the fd's close epoch when adopted, which each
  // call hands on so that it never reaches the number's next file.
  std::atomic<int> fd_{-1};
  std::uint32_t epoch_ = 0;
};

class TcpListener {
 public:
  TcpListener() = default;
  ~TcpListener() { (void)close(); }
  TcpListener(TcpListener&& other) noexcept : fd_(other.fd_.exchange(-1)), epoch_(other.epoch_) {}
  TcpListener& operator=(TcpListener&& other) noexcept;
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  // bind: a listening socket (SO_REUSEADDR; port 0 picks a free port, see local_address()).
  static Result<TcpListener> bind(const SocketAddress& addr, int backlog = 4096);
  // accept: the next connection. One already waiting is taken at once, without parking (within
  // the fiber's budget of direct turns, as a send). Out of fds (EMFILE/ENFILE) is returned as an
  // error; the listener stays usable once fds are freed.
  Result<TcpStream> accept(const WaitOptions& options = {});
  // async_accept: accept for a task (co_await listener.async_accept()).
  Task<Result<TcpStream>> async_accept(WaitOptions options);
  Task<Result<TcpStream>> async_accept() { return async_accept(WaitOptions{}); }
  Result<SocketAddress> local_address() const;

  int fd() const { return fd_; }
  Result<void> close();

 private:
  std::atomic<int> fd_{-1};  // as TcpStream's
  std::uint32_t epoch_ = 0;
};

// UdpSocket: datagrams, IPv4 or IPv6. Every call that can wait parks a fiber (or blocks a plain
// thread) and takes WaitOptions, as the TCP types' do. A datagram is sent whole or not at all,
// and received whole: one longer than the buffer is cut (Datagram::truncated) and the rest of it
// is lost, as the system's recvfrom does. In a simulated runtime, the simulated network's
// datagrams (api/sim.h; IPv4).
class UdpSocket {
 public:
  UdpSocket() = default;
  ~UdpSocket() { (void)close(); }
  UdpSocket(UdpSocket&& other) noexcept : fd_(other.release()), epoch_(other.epoch_) {}
  UdpSocket& operator=(UdpSocket&& other) noexcept;
  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;

  // bind: a socket bound to addr (port 0: a free one, see local_address()). open: an unbound
  // one of the family (AF_INET, AF_INET6), which its first send_to binds to a free port.
  static Result<UdpSocket> bind(const SocketAddress& addr);
  static Result<UdpSocket> open(int family = AF_INET);

  struct Datagram {
    std::size_t size = 0;    // bytes received into the buffer
    SocketAddress from;      // the sender
    bool truncated = false;  // the datagram was longer than the buffer; the rest is lost
  };
  // send_to: one datagram of len bytes to `to`; EMSGSIZE above what the protocol allows (65,507
  // bytes over IPv4). recv_from: the next datagram, into buf.
  Result<std::size_t> send_to(const void* buf, std::size_t len, const SocketAddress& to,
                              const WaitOptions& options = {});
  Result<Datagram> recv_from(void* buf, std::size_t len, const WaitOptions& options = {});
  // The forms for a task (scheduler/task.h): `co_await socket.async_recv_from(buf, len)`, the
  // same results; as TcpStream's async_ calls, the buffer and the socket must outlive the call.
  Task<Result<std::size_t>> async_send_to(const void* buf, std::size_t len, SocketAddress to,
                                          WaitOptions options);
  Task<Result<std::size_t>> async_send_to(const void* buf, std::size_t len, SocketAddress to) {
    return async_send_to(buf, len, to, WaitOptions{});
  }
  Task<Result<Datagram>> async_recv_from(void* buf, std::size_t len, WaitOptions options);
  Task<Result<Datagram>> async_recv_from(void* buf, std::size_t len) {
    return async_recv_from(buf, len, WaitOptions{});
  }

  // Batches: many datagrams for one wake-up and one system call where the system has one
  // (Linux's recvmmsg and sendmmsg; a loop of non-blocking calls on Windows).
  //   recv_batch: waits for one datagram as recv_from does, then takes the ones already queued,
  //     without waiting, into the next buffers; returns how many buffers were filled (>= 1).
  //   send_batch: sends the datagrams in order; waits only while the first cannot go; returns
  //     how many went (fewer than asked when the socket's buffer filled: send the rest again).
  //     An error on a later datagram ends the batch there, reported by the count.
  struct Buffer {
    void* data = nullptr;
    std::size_t capacity = 0;
    Datagram got;  // what recv_batch received into it
  };
  struct Outgoing {
    const void* data = nullptr;
    std::size_t size = 0;
    SocketAddress to;
  };
  Result<std::size_t> recv_batch(Buffer* buffers, std::size_t count,
                                 const WaitOptions& options = {});
  Result<std::size_t> send_batch(const Outgoing* datagrams, std::size_t count,
                                 const WaitOptions& options = {});

  // connect: a default peer: send and recv then exchange datagrams with it alone (others are
  // dropped by the system), and an ICMP "port unreachable" from it may fail a later call with
  // connection_refused.
  Result<void> connect(const SocketAddress& peer);
  Result<std::size_t> send(const void* buf, std::size_t len, const WaitOptions& options = {});
  Result<std::size_t> recv(void* buf, std::size_t len, const WaitOptions& options = {});
  Task<Result<std::size_t>> async_send(const void* buf, std::size_t len, WaitOptions options);
  Task<Result<std::size_t>> async_send(const void* buf, std::size_t len) {
    return async_send(buf, len, WaitOptions{});
  }
  Task<Result<std::size_t>> async_recv(void* buf, std::size_t len, WaitOptions options);
  Task<Result<std::size_t>> async_recv(void* buf, std::size_t len) {
    return async_recv(buf, len, WaitOptions{});
  }

  Result<SocketAddress> local_address() const;
  Result<void> set_broadcast(bool on);

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int release() { return fd_.exchange(-1); }
  Result<void> close();  // fails this fd's pending operations, then closes; idempotent

 private:
  explicit UdpSocket(int fd);
  // As TcpStream's.
  std::atomic<int> fd_{-1};
  std::uint32_t epoch_ = 0;
};

}  // namespace weft::net

#endif  // WEFT_API_NET_H_
