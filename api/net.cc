// api/net.cc: addresses, resolution and the TCP types.

#include "weft/api/net.h"

#ifdef _WIN32
#include <mutex>
#include <system_error>

#include "weft/base/internal/win_errno.h"
#else
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <unistd.h>
#endif

#include <cerrno>
#include <cstring>
#include <new>
#include <optional>
#include <vector>

#include "internal/io_common.h"
#include "internal/sim_net.h"
#include "weft/api/io.h"
#include "weft/scheduler/io.h"
#include "weft/scheduler/runtime.h"

namespace weft::net {
namespace {

#ifdef _WIN32
constexpr int kShutWrite = SD_SEND;
constexpr int kShutBoth = SD_BOTH;

std::errc LastErrc() {
  return static_cast<std::errc>(base_internal::ErrnoOf(static_cast<DWORD>(WSAGetLastError())));
}

// StartWinsock: WSAStartup once per process, before the first socket or name lookup.
std::errc StartWinsock() {
  static int error = [] {
    WSADATA data;
    int e = ::WSAStartup(MAKEWORD(2, 2), &data);
    return e == 0 ? 0 : base_internal::ErrnoOf(static_cast<DWORD>(e));
  }();
  return static_cast<std::errc>(error);
}

// SIO_UDP_CONNRESET (mstcpip.h): whether an ICMP "port unreachable" fails the next receive.
#ifndef SIO_UDP_CONNRESET
#define SIO_UDP_CONNRESET _WSAIOW(IOC_VENDOR, 12)
#endif

Result<int> NewSocket(int family, int type = SOCK_STREAM) {
  // A simulated runtime touches no real fd: its sockets are the simulated network's.
  if (scheduler_internal::InSimulation()) return sim_internal::Socket(family, type);
  if (std::errc e = StartWinsock(); e != std::errc{}) return e;
  SOCKET s = ::WSASocketW(family, type, type == SOCK_STREAM ? IPPROTO_TCP : IPPROTO_UDP, nullptr, 0,
                          WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT);
  if (s == INVALID_SOCKET) return LastErrc();
  u_long on = 1;
  if (::ioctlsocket(s, FIONBIO, &on) != 0) {
    std::errc e = LastErrc();
    ::closesocket(s);
    return e;
  }
  if (type == SOCK_DGRAM) {
    // Windows fails an unconnected socket's next receive with WSAECONNRESET after an ICMP port
    // unreachable for an earlier send; Linux does not. Off, as Linux.
    BOOL report = FALSE;
    DWORD bytes = 0;
    (void)::WSAIoctl(s, SIO_UDP_CONNRESET, &report, sizeof report, nullptr, 0, &bytes, nullptr,
                     nullptr);
  }
  return static_cast<int>(s);
}
#else
constexpr int kShutWrite = SHUT_WR;
constexpr int kShutBoth = SHUT_RDWR;

std::errc LastErrc() { return static_cast<std::errc>(errno); }

Result<int> NewSocket(int family, int type = SOCK_STREAM) {
  // A simulated runtime touches no real fd: its sockets are the simulated network's.
  if (scheduler_internal::InSimulation()) return sim_internal::Socket(family, type);
  int fd = ::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return LastErrc();
  return fd;
}
#endif

// Address: an fd's own address (getsockname) or its peer's (getpeername), the simulated
// network's for its fds.
Result<SocketAddress> Address(int fd, bool peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  auto* sa = reinterpret_cast<sockaddr*>(&ss);
  if (sim_internal::IsSimFd(fd)) {
    Result<void> r =
        peer ? sim_internal::PeerAddress(fd, sa, &len) : sim_internal::LocalAddress(fd, sa, &len);
    if (!r.ok()) return r.error();
  } else if ((peer ? ::getpeername(NativeSocket(fd), sa, &len)
                   : ::getsockname(NativeSocket(fd), sa, &len)) != 0) {
    return LastErrc();
  }
  return SocketAddress::from_sockaddr(sa, len);
}

// OneBuffer: a MsgHdr for one buffer and, if name is not null, a peer address.
MsgHdr OneBuffer(IoVec* v, void* name, socklen_t namelen) {
  MsgHdr msg{};
  msg.msg_name = name;
  msg.msg_namelen = namelen;
  msg.msg_iov = v;
  msg.msg_iovlen = 1;
  return msg;
}

// FromAddress: the sender recorded in a receive's address buffer (none if it is not one).
SocketAddress FromAddress(const sockaddr_storage& from, socklen_t len) {
  Result<SocketAddress> a =
      SocketAddress::from_sockaddr(reinterpret_cast<const sockaddr*>(&from), len);
  return a.ok() ? *a : SocketAddress();
}

}  // namespace

// ---- SocketAddress --------------------------------------------------------------------------

Result<SocketAddress> SocketAddress::parse(std::string_view text) {
  std::string host;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {  // [v6]:port
    std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return std::errc::invalid_argument;
    }
    host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || text.find(':') != colon) {
      return std::errc::invalid_argument;
    }
    host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  if (port_text.empty() || port_text.size() > 5) return std::errc::invalid_argument;
  unsigned port = 0;
  for (char c : port_text) {
    if (c < '0' || c > '9') return std::errc::invalid_argument;
    port = port * 10 + static_cast<unsigned>(c - '0');
  }
  if (port > 65535) return std::errc::invalid_argument;
  SocketAddress a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage_);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage_);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<std::uint16_t>(port));
    a.len_ = sizeof(sockaddr_in);
    return a;
  }
  if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<std::uint16_t>(port));
    a.len_ = sizeof(sockaddr_in6);
    return a;
  }
  return std::errc::invalid_argument;
}

SocketAddress SocketAddress::ipv4_loopback(std::uint16_t port) {
  SocketAddress a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage_);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(port);
  v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.len_ = sizeof(sockaddr_in);
  return a;
}

SocketAddress SocketAddress::ipv4_any(std::uint16_t port) {
  SocketAddress a = ipv4_loopback(port);
  reinterpret_cast<sockaddr_in*>(&a.storage_)->sin_addr.s_addr = htonl(INADDR_ANY);
  return a;
}

Result<SocketAddress> SocketAddress::from_sockaddr(const sockaddr* addr, socklen_t len) {
  if (addr == nullptr) return std::errc::invalid_argument;
  if (!((addr->sa_family == AF_INET && len == sizeof(sockaddr_in)) ||
        (addr->sa_family == AF_INET6 && len == sizeof(sockaddr_in6)))) {
    return std::errc::address_family_not_supported;
  }
  SocketAddress a;
  std::memcpy(&a.storage_, addr, len);
  a.len_ = len;
  return a;
}

std::uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  }
  return 0;
}

std::string SocketAddress::to_string() const {
  char host[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, host,
                sizeof host);
    return std::string(host) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, host,
                sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(port());
  }
  return "(none)";
}

// ---- resolve --------------------------------------------------------------------------------

Result<std::vector<SocketAddress>> resolve(std::string_view host, std::uint16_t port,
                                           const WaitOptions& options) {
  if (options.cancel != nullptr && options.cancel->is_cancelled()) {
    return std::errc::operation_canceled;
  }
  if (host.empty() || host.find('\0') != std::string_view::npos) {
    return std::errc::invalid_argument;
  }
  if (scheduler_internal::InSimulation()) {  // the simulated network's hosts
    Result<std::uint32_t> ip = sim_internal::Resolve(host);
    if (!ip.ok()) return ip.error();
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    in.sin_addr.s_addr = *ip;
    Result<SocketAddress> a =
        SocketAddress::from_sockaddr(reinterpret_cast<const sockaddr*>(&in), sizeof in);
    if (!a.ok()) return a.error();
    return std::vector<SocketAddress>{*a};
  }
#ifdef _WIN32
  if (std::errc e = StartWinsock(); e != std::errc{}) return e;
#endif
  std::string name(host);
  std::string service = std::to_string(port);
  int rc = 0;
  addrinfo* list = nullptr;
  call_blocking([&] {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_ADDRCONFIG | AI_NUMERICSERV;
    rc = ::getaddrinfo(name.c_str(), service.c_str(), &hints, &list);
  });
  if (rc != 0) {
    switch (rc) {
      case EAI_NONAME:
#ifdef EAI_NODATA
      case EAI_NODATA:
#endif
        return std::errc::address_not_available;
      case EAI_AGAIN:
        return std::errc::resource_unavailable_try_again;
      case EAI_MEMORY:
        return std::errc::not_enough_memory;
#ifdef EAI_SYSTEM
      case EAI_SYSTEM:
        return LastErrc();
#endif
      default:
        return std::errc::invalid_argument;
    }
  }
  std::vector<SocketAddress> out;
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    Result<SocketAddress> a = SocketAddress::from_sockaddr(ai->ai_addr, ai->ai_addrlen);
    if (a.ok()) out.push_back(*a);
  }
  ::freeaddrinfo(list);
  if (out.empty()) return std::errc::address_not_available;
  return out;
}

// ---- TcpStream ------------------------------------------------------------------------------

TcpStream::TcpStream(int fd) : fd_(fd), epoch_(scheduler_internal::CloseEpoch(fd)) {}

TcpStream& TcpStream::operator=(TcpStream&& other) noexcept {
  if (this != &other) {
    (void)close();
    epoch_ = other.epoch_;
    fd_ = other.release();
  }
  return *this;
}

Result<TcpStream> TcpStream::connect(const SocketAddress& addr, const WaitOptions& options) {
  Result<int> fd = NewSocket(addr.family());
  if (!fd.ok()) return fd.error();
  TcpStream s(*fd);
  if (Result<void> r = io::connect(s.fd_, addr.data(), addr.size(), options); !r.ok()) {
    return r.error();
  }
  return s;
}

Result<TcpStream> TcpStream::connect(std::string_view host, std::uint16_t port,
                                     const WaitOptions& options) {
  Result<std::vector<SocketAddress>> addrs = resolve(host, port, options);
  if (!addrs.ok()) return addrs.error();
  std::errc last = std::errc::address_not_available;
  for (const SocketAddress& a : *addrs) {
    Result<TcpStream> s = connect(a, options);
    if (s.ok()) return s;
    last = s.error();
    if (last == std::errc::timed_out || last == std::errc::operation_canceled) break;
  }
  return last;
}

Result<std::size_t> TcpStream::read(void* buf, std::size_t len, const WaitOptions& options) {
  return io_internal::Recv({fd_, epoch_}, buf, len, 0, options);
}

Result<std::size_t> TcpStream::write(const void* buf, std::size_t len, const WaitOptions& options) {
  return io_internal::Send({fd_, epoch_}, buf, len, 0, options);
}

Result<void> TcpStream::write_all(const void* buf, std::size_t len, const WaitOptions& options) {
  return io_internal::SendAll({fd_, epoch_}, buf, len, options);
}

Result<io::RecvBuffer> TcpStream::recv_buffer(const WaitOptions& options) {
  return io_internal::RecvBufferOn({fd_, epoch_}, options);
}

RecvBufferOperation TcpStream::async_recv_buffer(WaitOptions options) {
  return RecvBufferOperation(io_internal::RecvBufferTries({fd_, epoch_}), options);
}

Result<void> TcpStream::read_exact(void* buf, std::size_t len, const WaitOptions& options) {
  return io_internal::ReadExact({fd_, epoch_}, buf, len, options);
}

ReadOperation TcpStream::async_read(void* buf, std::size_t len, WaitOptions options) {
  return ReadOperation(io_internal::RecvCall({fd_, epoch_}, buf, len), options);
}

Task<Result<std::size_t>> TcpStream::async_write(const void* buf, std::size_t len,
                                                 WaitOptions options) {
  return io_internal::AsyncSend({fd_, epoch_}, buf, len, 0, options);
}

Task<Result<void>> TcpStream::async_write_all(const void* buf, std::size_t len,
                                              WaitOptions options) {
  return io_internal::AsyncSendAll({fd_, epoch_}, buf, len, options);
}

Task<Result<void>> TcpStream::async_read_exact(void* buf, std::size_t len, WaitOptions options) {
  return io_internal::AsyncReadExact({fd_, epoch_}, buf, len, options);
}

Task<Result<TcpStream>> TcpStream::async_connect(SocketAddress addr, WaitOptions options) {
  Result<int> fd = NewSocket(addr.family());
  if (!fd.ok()) co_return fd.error();
  TcpStream s(*fd);
  if (Result<void> r = co_await io_internal::AsyncConnect(s.fd_, addr.data(), addr.size(), options);
      !r.ok()) {
    co_return r.error();
  }
  co_return std::move(s);
}

namespace {
// OnFd: f(fd), a system call that does not wait, as one FdUse of the socket's fd
// (scheduler/io.h): once a close of the socket has begun it fails with operation_canceled
// instead of reaching the socket that takes the number next.
template <typename R, typename F>
R OnFd(int fd, std::uint32_t epoch, F f) {
  scheduler_internal::FdUse use(fd, epoch);
  if (use.refused()) return std::errc::operation_canceled;
  return f(fd);
}
}  // namespace

Result<void> TcpStream::shutdown_write() {
  return OnFd<Result<void>>(fd_, epoch_, [](int fd) -> Result<void> {
    if (sim_internal::IsSimFd(fd)) return sim_internal::Shutdown(fd, kShutWrite);
    if (::shutdown(NativeSocket(fd), kShutWrite) != 0) return LastErrc();
    return {};
  });
}

Result<void> TcpStream::shutdown() {
  return OnFd<Result<void>>(fd_, epoch_, [](int fd) -> Result<void> {
    if (sim_internal::IsSimFd(fd)) return sim_internal::Shutdown(fd, kShutBoth);
    if (::shutdown(NativeSocket(fd), kShutBoth) != 0) return LastErrc();
    return {};
  });
}

Result<void> TcpStream::set_nodelay(bool on) {
  return OnFd<Result<void>>(fd_, epoch_, [on](int fd) -> Result<void> {
    if (sim_internal::IsSimFd(fd)) return sim_internal::Check(fd);  // nothing to delay
    int v = on ? 1 : 0;
    if (::setsockopt(NativeSocket(fd), IPPROTO_TCP, TCP_NODELAY, reinterpret_cast<const char*>(&v),
                     sizeof v) != 0) {
      return LastErrc();
    }
    return {};
  });
}

Result<SocketAddress> TcpStream::peer_address() const {
  return OnFd<Result<SocketAddress>>(fd_, epoch_, [](int fd) { return Address(fd, true); });
}

Result<SocketAddress> TcpStream::local_address() const {
  return OnFd<Result<SocketAddress>>(fd_, epoch_, [](int fd) { return Address(fd, false); });
}

Result<void> TcpStream::close() {
  if (fd_ < 0) return {};
  return io::close(release());
}

// ---- TcpListener ----------------------------------------------------------------------------

TcpListener& TcpListener::operator=(TcpListener&& other) noexcept {
  if (this != &other) {
    (void)close();
    epoch_ = other.epoch_;
    fd_ = other.fd_.exchange(-1);
  }
  return *this;
}

Result<TcpListener> TcpListener::bind(const SocketAddress& addr, int backlog) {
  if (addr.size() == 0) return std::errc::invalid_argument;
  Result<int> fd = NewSocket(addr.family());
  if (!fd.ok()) return fd.error();
  TcpListener l;
  l.fd_ = *fd;
  l.epoch_ = scheduler_internal::CloseEpoch(*fd);
  if (sim_internal::IsSimFd(l.fd_)) {
    if (Result<void> r = sim_internal::Bind(l.fd_, addr.data(), addr.size()); !r.ok()) {
      return r.error();
    }
    if (Result<void> r = sim_internal::Listen(l.fd_, backlog); !r.ok()) return r.error();
    return l;
  }
  int one = 1;
#ifndef _WIN32
  // (On Windows SO_REUSEADDR lets another socket take over a port in use: left off there.)
  (void)::setsockopt(l.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
#else
  (void)one;
#endif
  if (::bind(NativeSocket(l.fd_), addr.data(), addr.size()) != 0) return LastErrc();
  if (::listen(NativeSocket(l.fd_), backlog) != 0) return LastErrc();
  return l;
}

namespace {
// AcceptDirect: a listener's accept, tried first without the reactor, as a send is
// (io_internal::TryDirect): the connection, its error, or nullopt to go through the reactor.
// Under load connections arrive while the accepting fiber waits its turn behind the others
// that its worker runs, so the backlog usually holds one; through the reactor, each of them
// cost the accepting fiber a park and another wait for its turn, and a burst of connections
// was accepted one queue's length apart (W6's first round trips waited up to 20 ms for their
// server fiber). Only a listener's own fd, which is non-blocking; a connection aborted before
// it was accepted goes to the reactor, which skips it.
std::optional<Result<int>> AcceptDirect(int fd, std::uint32_t epoch, const WaitOptions& options) {
#ifndef _WIN32
  if (fd < 0 || sim_internal::IsSimFd(fd)) return std::nullopt;  // (a closed one: as before)
  std::optional<Result<std::size_t>> r = io_internal::TryDirect({fd, epoch}, options, [fd] {
    return static_cast<ssize_t>(::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  });
  if (!r.has_value() || (!r->ok() && r->error() == std::errc::connection_aborted)) {
    return std::nullopt;
  }
  if (!r->ok()) return r->error();
  return static_cast<int>(**r);
#else
  (void)fd, (void)epoch, (void)options;
  return std::nullopt;
#endif
}
}  // namespace

Result<TcpStream> TcpListener::accept(const WaitOptions& options) {
  if (std::optional<Result<int>> direct = AcceptDirect(fd_, epoch_, options)) {
    if (!direct->ok()) return direct->error();
    return TcpStream(**direct);
  }
  Result<int> fd = io_internal::Accept({fd_, epoch_}, nullptr, nullptr, options);
  if (!fd.ok()) return fd.error();
  return TcpStream(*fd);
}

Task<Result<TcpStream>> TcpListener::async_accept(WaitOptions options) {
  if (std::optional<Result<int>> direct = AcceptDirect(fd_, epoch_, options)) {
    if (!direct->ok()) co_return direct->error();
    co_return TcpStream(**direct);
  }
  Result<int> fd = co_await io_internal::AsyncAccept({fd_, epoch_}, options);
  if (!fd.ok()) co_return fd.error();
  co_return TcpStream(*fd);
}

Result<SocketAddress> TcpListener::local_address() const {
  return OnFd<Result<SocketAddress>>(fd_, epoch_, [](int fd) { return Address(fd, false); });
}

Result<void> TcpListener::close() {
  const int fd = fd_.exchange(-1);
  if (fd < 0) return {};
  return io::close(fd);
}

// ---- UdpSocket ------------------------------------------------------------------------------

UdpSocket::UdpSocket(int fd) : fd_(fd), epoch_(scheduler_internal::CloseEpoch(fd)) {}

UdpSocket& UdpSocket::operator=(UdpSocket&& other) noexcept {
  if (this != &other) {
    (void)close();
    epoch_ = other.epoch_;
    fd_ = other.release();
  }
  return *this;
}

Result<UdpSocket> UdpSocket::open(int family) {
  if (family != AF_INET && family != AF_INET6) return std::errc::address_family_not_supported;
  Result<int> fd = NewSocket(family, SOCK_DGRAM);
  if (!fd.ok()) return fd.error();
  return UdpSocket(*fd);
}

Result<UdpSocket> UdpSocket::bind(const SocketAddress& addr) {
  if (addr.size() == 0) return std::errc::invalid_argument;
  Result<UdpSocket> s = open(addr.family());
  if (!s.ok()) return s.error();
  if (sim_internal::IsSimFd(s->fd_)) {
    if (Result<void> r = sim_internal::Bind(s->fd_, addr.data(), addr.size()); !r.ok()) {
      return r.error();
    }
    return s;
  }
  if (::bind(NativeSocket(s->fd_), addr.data(), addr.size()) != 0) return LastErrc();
  return s;
}

Result<std::size_t> UdpSocket::send_to(const void* buf, std::size_t len, const SocketAddress& to,
                                       const WaitOptions& options) {
  if (to.size() == 0) return std::errc::invalid_argument;
  if (BadIoRequest(buf, len)) return std::errc::invalid_argument;
  IoVec v{const_cast<void*>(buf), len};
  const MsgHdr msg = OneBuffer(&v, const_cast<sockaddr*>(to.data()), to.size());
  return io_internal::SendMsg({fd_, epoch_}, &msg, 0, options);
}

Result<UdpSocket::Datagram> UdpSocket::recv_from(void* buf, std::size_t len,
                                                 const WaitOptions& options) {
  if (BadIoRequest(buf, len)) return std::errc::invalid_argument;
  sockaddr_storage from{};
  IoVec v{buf, len};
  MsgHdr msg = OneBuffer(&v, &from, sizeof from);
  Result<std::size_t> n = io_internal::RecvMsg({fd_, epoch_}, &msg, 0, options);
  if (!n.ok()) return n.error();
  return Datagram{*n, FromAddress(from, msg.msg_namelen), (msg.msg_flags & kMsgTruncated) != 0};
}

Task<Result<std::size_t>> UdpSocket::async_send_to(const void* buf, std::size_t len,
                                                   SocketAddress to, WaitOptions options) {
  if (to.size() == 0) co_return std::errc::invalid_argument;
  if (BadIoRequest(buf, len)) co_return std::errc::invalid_argument;
  IoVec v{const_cast<void*>(buf), len};
  const MsgHdr msg = OneBuffer(&v, const_cast<sockaddr*>(to.data()), to.size());
  co_return co_await io_internal::AsyncSendMsg({fd_, epoch_}, &msg, 0, options);
}

Task<Result<UdpSocket::Datagram>> UdpSocket::async_recv_from(void* buf, std::size_t len,
                                                             WaitOptions options) {
  if (BadIoRequest(buf, len)) co_return std::errc::invalid_argument;
  sockaddr_storage from{};
  IoVec v{buf, len};
  MsgHdr msg = OneBuffer(&v, &from, sizeof from);
  Result<std::size_t> n = co_await io_internal::AsyncRecvMsg({fd_, epoch_}, &msg, 0, options);
  if (!n.ok()) co_return n.error();
  co_return Datagram{*n, FromAddress(from, msg.msg_namelen), (msg.msg_flags & kMsgTruncated) != 0};
}

namespace {
// kMaxBatch: datagrams per batch call (Linux's UIO_MAXIOV bounds recvmmsg and sendmmsg too).
constexpr std::size_t kMaxBatch = 1024;
}  // namespace

Result<std::size_t> UdpSocket::recv_batch(Buffer* buffers, std::size_t count,
                                          const WaitOptions& options) {
  if (count == 0 || buffers == nullptr || count > kMaxBatch) return std::errc::invalid_argument;
  for (std::size_t i = 0; i < count; ++i) {
    if (BadIoRequest(buffers[i].data, buffers[i].capacity)) return std::errc::invalid_argument;
  }
  // The first: waits (parks a fiber) as recv_from does.
  Result<Datagram> first = recv_from(buffers[0].data, buffers[0].capacity, options);
  if (!first.ok()) return first.error();
  buffers[0].got = *first;
  std::size_t got = 1;
  if (sim_internal::IsSimFd(fd_)) {  // the rest: what has arrived already
    for (; got < count; ++got) {
      sockaddr_storage from{};
      IoVec v{buffers[got].data, buffers[got].capacity};
      MsgHdr msg = OneBuffer(&v, &from, sizeof from);
      Result<std::size_t> n = sim_internal::RecvMsg(fd_, &msg, sim_internal::kSimDontWait, {});
      if (!n.ok()) break;
      buffers[got].got =
          Datagram{*n, FromAddress(from, msg.msg_namelen), (msg.msg_flags & kMsgTruncated) != 0};
    }
    return got;
  }
#ifdef _WIN32
  // The rest: what is queued already (the socket is non-blocking: WSAEWOULDBLOCK when none).
  for (; got < count; ++got) {
    sockaddr_storage from{};
    int from_len = sizeof from;
    WSABUF b{static_cast<ULONG>(ClampIoLength(buffers[got].capacity)),
             static_cast<char*>(buffers[got].data)};
    DWORD bytes = 0, flags = 0;
    if (::WSARecvFrom(NativeSocket(fd_), &b, 1, &bytes, &flags, reinterpret_cast<sockaddr*>(&from),
                      &from_len, nullptr, nullptr) != 0) {
      if (::WSAGetLastError() != WSAEMSGSIZE) break;
      buffers[got].got = Datagram{b.len, FromAddress(from, from_len), true};
      continue;
    }
    buffers[got].got = Datagram{bytes, FromAddress(from, from_len), false};
  }
#else
  // The rest: one recvmmsg that takes what is queued and does not wait. (Without memory for
  // its vectors, the one datagram received is the batch.)
  const std::size_t rest = count - 1;
  std::vector<mmsghdr> msgs;
  std::vector<iovec> iov;
  std::vector<sockaddr_storage> from;
  try {
    msgs.resize(rest);
    iov.resize(rest);
    from.resize(rest);
  } catch (const std::bad_alloc&) {
    return got;
  }
  for (std::size_t i = 0; i < rest; ++i) {
    iov[i] = {buffers[i + 1].data, buffers[i + 1].capacity};
    msgs[i].msg_hdr.msg_name = &from[i];
    msgs[i].msg_hdr.msg_namelen = sizeof from[i];
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  // An FdUse (scheduler/io.h): not on a number whose close began since the socket opened.
  const int fd = fd_;
  scheduler_internal::FdUse use(fd, epoch_);
  if (rest > 0 && !use.refused()) {
    int n;
    do {
      n = ::recvmmsg(fd, msgs.data(), static_cast<unsigned>(rest), MSG_DONTWAIT, nullptr);
    } while (n < 0 && errno == EINTR);
    for (int i = 0; i < n; ++i) {
      const mmsghdr& m = msgs[static_cast<std::size_t>(i)];
      buffers[got++].got =
          Datagram{m.msg_len, FromAddress(from[static_cast<std::size_t>(i)], m.msg_hdr.msg_namelen),
                   (m.msg_hdr.msg_flags & MSG_TRUNC) != 0};
    }
  }
#endif
  return got;
}

Result<std::size_t> UdpSocket::send_batch(const Outgoing* datagrams, std::size_t count,
                                          const WaitOptions& options) {
  scheduler_internal::AbortIfTask("called blocking I/O (UdpSocket send_batch)");
  if (count == 0 || datagrams == nullptr || count > kMaxBatch) return std::errc::invalid_argument;
  for (std::size_t i = 0; i < count; ++i) {
    if (BadIoRequest(datagrams[i].data, datagrams[i].size) || datagrams[i].to.size() == 0) {
      return std::errc::invalid_argument;
    }
  }
  std::size_t sent = 0;
  const int fd = fd_;
  if (sim_internal::IsSimFd(fd)) {  // a simulated datagram's send never waits
    for (; sent < count; ++sent) {
      const Outgoing& d = datagrams[sent];
      Result<std::size_t> r = send_to(d.data, d.size, d.to, options);
      if (!r.ok()) {
        if (sent == 0) return r.error();
        break;
      }
    }
    return sent;
  }
#ifndef _WIN32
  // All of them in one sendmmsg, without waiting.
  std::vector<mmsghdr> msgs;
  std::vector<iovec> iov;
  try {
    msgs.resize(count);
    iov.resize(count);
  } catch (const std::bad_alloc&) {
    return std::errc::not_enough_memory;
  }
  for (std::size_t i = 0; i < count; ++i) {
    iov[i] = {const_cast<void*>(datagrams[i].data), datagrams[i].size};
    msgs[i].msg_hdr.msg_name = const_cast<sockaddr*>(datagrams[i].to.data());
    msgs[i].msg_hdr.msg_namelen = datagrams[i].to.size();
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  // Tried directly, as a send is (io_internal::TryDirect); when it would block, or may not be
  // tried, the first datagram goes through the reactor below, and so parks.
  if (std::optional<Result<std::size_t>> r = io_internal::TryDirect({fd, epoch_}, options, [&] {
        return static_cast<ssize_t>(
            ::sendmmsg(fd, msgs.data(), static_cast<unsigned>(count), MSG_DONTWAIT | MSG_NOSIGNAL));
      })) {
    return *r;
  }
#endif
  // The first waits for room (parks a fiber); the rest go while they need not wait.
  Result<std::size_t> first =
      send_to(datagrams[0].data, datagrams[0].size, datagrams[0].to, options);
  if (!first.ok()) return first.error();
  sent = 1;
  scheduler_internal::FdUse use(fd, epoch_);  // as in recv_batch
  for (; sent < count && !use.refused(); ++sent) {
    const Outgoing& d = datagrams[sent];
#ifdef _WIN32
    WSABUF b{static_cast<ULONG>(d.size), static_cast<char*>(const_cast<void*>(d.data))};
    DWORD bytes = 0;
    if (::WSASendTo(NativeSocket(fd), &b, 1, &bytes, 0, d.to.data(), d.to.size(), nullptr,
                    nullptr) != 0) {
      break;
    }
#else
    if (::sendto(fd, d.data, d.size, MSG_DONTWAIT | MSG_NOSIGNAL, d.to.data(), d.to.size()) < 0) {
      break;
    }
#endif
  }
  return sent;
}

Result<void> UdpSocket::connect(const SocketAddress& peer) {
  if (peer.size() == 0) return std::errc::invalid_argument;
  // A datagram socket's connect only records the peer: it never waits.
  return OnFd<Result<void>>(fd_, epoch_, [&peer](int fd) -> Result<void> {
    if (sim_internal::IsSimFd(fd)) return sim_internal::Connect(fd, peer.data(), peer.size(), {});
    if (::connect(NativeSocket(fd), peer.data(), peer.size()) != 0) return LastErrc();
    return {};
  });
}

// send and recv go through sendmsg and recvmsg without an address: the datagram calls of every
// backend (on Windows, those check a datagram's size before the overlapped call).
Result<std::size_t> UdpSocket::send(const void* buf, std::size_t len, const WaitOptions& options) {
  if (BadIoRequest(buf, len)) return std::errc::invalid_argument;
  IoVec v{const_cast<void*>(buf), len};
  const MsgHdr msg = OneBuffer(&v, nullptr, 0);
  return io_internal::SendMsg({fd_, epoch_}, &msg, 0, options);
}

Result<std::size_t> UdpSocket::recv(void* buf, std::size_t len, const WaitOptions& options) {
  if (BadIoRequest(buf, len)) return std::errc::invalid_argument;
  IoVec v{buf, len};
  MsgHdr msg = OneBuffer(&v, nullptr, 0);
  return io_internal::RecvMsg({fd_, epoch_}, &msg, 0, options);
}

Task<Result<std::size_t>> UdpSocket::async_send(const void* buf, std::size_t len,
                                                WaitOptions options) {
  if (BadIoRequest(buf, len)) co_return std::errc::invalid_argument;
  IoVec v{const_cast<void*>(buf), len};
  const MsgHdr msg = OneBuffer(&v, nullptr, 0);
  co_return co_await io_internal::AsyncSendMsg({fd_, epoch_}, &msg, 0, options);
}

Task<Result<std::size_t>> UdpSocket::async_recv(void* buf, std::size_t len, WaitOptions options) {
  if (BadIoRequest(buf, len)) co_return std::errc::invalid_argument;
  IoVec v{buf, len};
  MsgHdr msg = OneBuffer(&v, nullptr, 0);
  co_return co_await io_internal::AsyncRecvMsg({fd_, epoch_}, &msg, 0, options);
}

Result<SocketAddress> UdpSocket::local_address() const {
  return OnFd<Result<SocketAddress>>(fd_, epoch_, [](int fd) { return Address(fd, false); });
}

Result<void> UdpSocket::set_broadcast(bool on) {
  return OnFd<Result<void>>(fd_, epoch_, [on](int fd) -> Result<void> {
    if (sim_internal::IsSimFd(fd)) return sim_internal::Check(fd);  // (no broadcast address)
    int v = on ? 1 : 0;
    if (::setsockopt(NativeSocket(fd), SOL_SOCKET, SO_BROADCAST, reinterpret_cast<const char*>(&v),
                     sizeof v) != 0) {
      return LastErrc();
    }
    return {};
  });
}

Result<void> UdpSocket::close() {
  const int fd = release();
  if (fd < 0) return {};
  return io::close(fd);
}

}  // namespace weft::net
