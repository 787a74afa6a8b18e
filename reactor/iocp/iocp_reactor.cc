// reactor/iocp/iocp_reactor.cc: the Windows backend, on an I/O completion port.
//
// Every operation is an overlapped call whose OVERLAPPED lives in its IoOp: ReadFile/WriteFile
// (read, write), WSARecv/WSASend (recv, send, readv, writev), AcceptEx (accept; multishot accept
// re-arms after each connection), ConnectEx (connect, after binding the socket to a wildcard
// address if needed), and a zero-byte WSARecv for POLLIN readiness on a connected socket. The
// completion port reports each one; poll() waits in GetQueuedCompletionStatusEx for them, for
// the next deadline, or for wake(), which posts a packet with its own key.
//
// A handle can be associated with one completion port only, for its lifetime, while a socket is
// used by whichever worker its fiber runs on, and may outlive the reactor that first used it.
// So every handle is associated with one process-wide hub port, on first use, and a hub thread
// forwards each completion to the port of the reactor that submitted the operation (its
// OVERLAPPED and byte count, with PostQueuedCompletionStatus). Each reactor waits on its own
// port. The price is one thread hop per completion batch; associating a socket that only one
// reactor ever uses directly with that reactor's port would save it (not done yet). Completions
// are not skipped on synchronous success, so every operation completes through the ports, in one
// path.
//
// Cancel, close and deadlines: CancelIoEx on the operation's OVERLAPPED (close: closesocket,
// which aborts them all); the aborted completion is reported as -ECANCELED, or -ETIMEDOUT when a
// deadline caused it. Completions that arise outside poll() (bad arguments, readiness already
// there, cancelled timeouts) go to a ready list that poll() delivers first.
//
// Readiness other than POLLIN on a connected socket (POLLOUT, or POLLIN on a listener) has no
// completion to wait for without the undocumented AFD interface: such operations are checked
// with WSAPoll, at submission and then at least every millisecond while any is waiting.

#include <mswsock.h>
#include <windows.h>
#include <winsock2.h>
#include <ws2tcpip.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>

#include "weft/base/internal/win_errno.h"
#include "weft/reactor/internal/backends.h"
#include "weft/reactor/internal/op_list.h"

namespace weft::reactor_internal {
namespace {

using base_internal::ErrnoOf;
using Kind = IoOp::Kind;

constexpr ULONG_PTR kIoKey = 0;
constexpr ULONG_PTR kWakeKey = 1;
constexpr int kMaxIov = 1024;  // as IOV_MAX on Linux

IoOp* OpOfOverlapped(OVERLAPPED* ov) {
  return reinterpret_cast<IoOp*>(reinterpret_cast<char*>(ov) - offsetof(IoOp, overlapped));
}

// The Winsock extension functions, loaded once per process.
struct Extensions {
  LPFN_ACCEPTEX accept_ex = nullptr;
  LPFN_CONNECTEX connect_ex = nullptr;
  LPFN_GETACCEPTEXSOCKADDRS get_addrs = nullptr;
  int error = 0;  // an errno when they could not be loaded
};

const Extensions& LoadExtensions() {
  static Extensions ext;
  static std::once_flag once;
  std::call_once(once, [] {
    WSADATA data;
    if (int e = WSAStartup(MAKEWORD(2, 2), &data); e != 0) {
      ext.error = ErrnoOf(static_cast<DWORD>(e));
      return;
    }
    SOCKET s = WSASocketW(AF_INET, SOCK_STREAM, IPPROTO_TCP, nullptr, 0, WSA_FLAG_OVERLAPPED);
    if (s == INVALID_SOCKET) {
      ext.error = ErrnoOf(static_cast<DWORD>(WSAGetLastError()));
      return;
    }
    auto load = [&](GUID guid, void* out, std::size_t size) {
      DWORD bytes = 0;
      return WSAIoctl(s, SIO_GET_EXTENSION_FUNCTION_POINTER, &guid, sizeof guid, out,
                      static_cast<DWORD>(size), &bytes, nullptr, nullptr) == 0;
    };
    if (!load(WSAID_ACCEPTEX, &ext.accept_ex, sizeof ext.accept_ex) ||
        !load(WSAID_CONNECTEX, &ext.connect_ex, sizeof ext.connect_ex) ||
        !load(WSAID_GETACCEPTEXSOCKADDRS, &ext.get_addrs, sizeof ext.get_addrs)) {
      ext.error = ErrnoOf(static_cast<DWORD>(WSAGetLastError()));
    }
    closesocket(s);
  });
  return ext;
}

// The hub: the process-wide port every handle is associated with, and the thread that forwards
// its completions. Never destroyed (handles may outlive every reactor).
struct Hub {
  HANDLE port = nullptr;
  int error = 0;
};

void ForwardCompletions(HANDLE hub) {
  OVERLAPPED_ENTRY entries[64];
  for (;;) {
    ULONG n = 0;
    if (!GetQueuedCompletionStatusEx(hub, entries, 64, &n, INFINITE, FALSE)) continue;
    for (ULONG i = 0; i < n; ++i) {
      OVERLAPPED* ov = entries[i].lpOverlapped;
      if (ov == nullptr) continue;
      // The op stays alive and pending until its owner delivers it: the owner's port is open.
      auto owner = static_cast<HANDLE>(OpOfOverlapped(ov)->backend_owner);
      while (
          !PostQueuedCompletionStatus(owner, entries[i].dwNumberOfBytesTransferred, kIoKey, ov)) {
        Sleep(1);  // out of memory for the packet: retry; dropping it would hang the op
      }
    }
  }
}

const Hub& GetHub() {
  static Hub hub;
  static std::once_flag once;
  std::call_once(once, [] {
    hub.port = CreateIoCompletionPort(INVALID_HANDLE_VALUE, nullptr, 0, 1);
    if (hub.port == nullptr) {
      hub.error = ErrnoOf(GetLastError());
      return;
    }
    try {
      std::thread(ForwardCompletions, hub.port).detach();
    } catch (const std::system_error&) {
      CloseHandle(hub.port);
      hub.port = nullptr;
      hub.error = EAGAIN;
    }
  });
  return hub;
}

// What an accept keeps until it completes: the socket AcceptEx accepts into, and its address
// buffer (local and remote address, 16 bytes of slack each, as AcceptEx requires).
struct AcceptState {
  SOCKET sock = INVALID_SOCKET;
  int family = AF_INET;
  static constexpr DWORD kAddrLen = sizeof(sockaddr_storage) + 16;
  char buf[2 * kAddrLen];
};

// MsgState: what an overlapped WSARecvFrom or WSASendTo reads and writes until it completes:
// its buffers, the address length and the flags.
struct MsgState {
  INT namelen = 0;
  DWORD flags = 0;
  WSABUF* bufs = nullptr;
  MsgState() = default;
  MsgState(const MsgState&) = delete;
  MsgState& operator=(const MsgState&) = delete;
  ~MsgState() { delete[] bufs; }
};

class IocpReactor final : public Reactor {
 public:
  explicit IocpReactor(HANDLE port) : port_(port) {}
  ~IocpReactor() override { CloseHandle(port_); }

  ReactorBackend backend() const override { return ReactorBackend::kIocp; }
  std::size_t pending_ops() const override { return pending_; }

  void wake() override {
    // acq_rel: one packet per wake-up is enough; poll() clears the flag before draining.
    if (!wake_posted_.exchange(true, std::memory_order_acq_rel)) {
      PostQueuedCompletionStatus(port_, 0, kWakeKey, nullptr);
    }
  }

  void read(IoOp& op, int fd, void* buf, std::size_t len, std::int64_t offset) override {
    op.kind = Kind::kRead;
    op.buf = buf;
    op.len = len;
    op.offset = offset;
    if (!Begin(op, fd, BadIoRequest(buf, len) || offset < -1)) return;
    DWORD n = static_cast<DWORD>(ClampIoLength(len));
    if (IsSocket(NativeSocket(fd))) {
      WSABUF b{n, static_cast<char*>(buf)};
      DWORD flags = 0;
      int r = WSARecv(NativeSocket(fd), &b, 1, nullptr, &flags, &op.overlapped, nullptr);
      return Started(op, r == 0 ? 0 : static_cast<DWORD>(WSAGetLastError()));
    }
    SetOffset(op);
    BOOL ok = ReadFile(reinterpret_cast<HANDLE>(NativeSocket(fd)), buf, n, nullptr, &op.overlapped);
    Started(op, ok ? 0 : GetLastError());
  }
  void write(IoOp& op, int fd, const void* buf, std::size_t len, std::int64_t offset) override {
    op.kind = Kind::kWrite;
    op.buf = const_cast<void*>(buf);
    op.len = len;
    op.offset = offset;
    if (!Begin(op, fd, BadIoRequest(buf, len) || offset < -1)) return;
    DWORD n = static_cast<DWORD>(ClampIoLength(len));
    if (IsSocket(NativeSocket(fd))) {
      WSABUF b{n, static_cast<char*>(const_cast<void*>(buf))};
      int r = WSASend(NativeSocket(fd), &b, 1, nullptr, 0, &op.overlapped, nullptr);
      return Started(op, r == 0 ? 0 : static_cast<DWORD>(WSAGetLastError()));
    }
    SetOffset(op);
    BOOL ok =
        WriteFile(reinterpret_cast<HANDLE>(NativeSocket(fd)), buf, n, nullptr, &op.overlapped);
    Started(op, ok ? 0 : GetLastError());
  }
  void readv(IoOp& op, int fd, const IoVec* iov, int iovcnt) override {
    op.kind = Kind::kReadv;
    op.iov = iov;
    op.iovcnt = iovcnt;
    Vectored(op, fd, /*send=*/false);
  }
  void writev(IoOp& op, int fd, const IoVec* iov, int iovcnt) override {
    op.kind = Kind::kWritev;
    op.iov = iov;
    op.iovcnt = iovcnt;
    Vectored(op, fd, /*send=*/true);
  }
  void recv(IoOp& op, int fd, void* buf, std::size_t len, int flags) override {
    op.kind = Kind::kRecv;
    op.buf = buf;
    op.len = len;
    op.msg_flags = flags;
    if (!Begin(op, fd, BadIoRequest(buf, len))) return;
    WSABUF b{static_cast<ULONG>(ClampIoLength(len)), static_cast<char*>(buf)};
    DWORD wsa_flags = static_cast<DWORD>(flags);
    int r = WSARecv(NativeSocket(fd), &b, 1, nullptr, &wsa_flags, &op.overlapped, nullptr);
    Started(op, r == 0 ? 0 : static_cast<DWORD>(WSAGetLastError()));
  }
  void send(IoOp& op, int fd, const void* buf, std::size_t len, int flags) override {
    op.kind = Kind::kSend;
    op.buf = const_cast<void*>(buf);
    op.len = len;
    op.msg_flags = flags;
    if (!Begin(op, fd, BadIoRequest(buf, len))) return;
    WSABUF b{static_cast<ULONG>(ClampIoLength(len)), static_cast<char*>(const_cast<void*>(buf))};
    int r = WSASend(NativeSocket(fd), &b, 1, nullptr, static_cast<DWORD>(flags), &op.overlapped,
                    nullptr);
    Started(op, r == 0 ? 0 : static_cast<DWORD>(WSAGetLastError()));
  }
  void send_zerocopy(IoOp& op, int fd, const void* buf, std::size_t len, int flags) override {
    send(op, fd, buf, len, flags);  // an overlapped send already reads the caller's buffer
  }
  void recvmsg(IoOp& op, int fd, MsgHdr* msg, int flags) override {
    op.kind = Kind::kRecvMsg;
    op.buf = msg;
    op.msg_flags = flags;
    Datagram(op, fd, /*send=*/false);
  }
  void sendmsg(IoOp& op, int fd, const MsgHdr* msg, int flags) override {
    op.kind = Kind::kSendMsg;
    op.buf = const_cast<MsgHdr*>(msg);
    op.msg_flags = flags;
    Datagram(op, fd, /*send=*/true);
  }
  void accept(IoOp& op, int fd, sockaddr* addr, socklen_t* addrlen) override {
    op.kind = Kind::kAccept;
    op.addr = addr;
    op.addrlen = addrlen;
    if (!Begin(op, fd, BadAcceptAddress(addr, addrlen))) return;
    StartAccept(op);
  }
  void accept_multishot(IoOp& op, int fd) override {
    op.kind = Kind::kAcceptMulti;
    op.addr = nullptr;
    op.addrlen = nullptr;
    if (!Begin(op, fd, false)) return;
    StartAccept(op);
  }
  void connect(IoOp& op, int fd, const sockaddr* addr, socklen_t addrlen) override {
    op.kind = Kind::kConnect;
    op.addr = const_cast<sockaddr*>(addr);
    op.connect_len = addrlen;
    if (!Begin(op, fd, addr == nullptr || addrlen <= 0)) return;
    const Extensions& ext = LoadExtensions();
    if (ext.error != 0) return Finish(op, -ext.error);
    SOCKET s = NativeSocket(fd);
    // ConnectEx wants a bound socket: bind to the wildcard address of the family if it is not.
    sockaddr_storage local{};
    int local_len = sizeof local;
    if (getsockname(s, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) {
      int e = WSAGetLastError();
      if (e != WSAEINVAL) return Finish(op, -ErrnoOf(static_cast<DWORD>(e)));
      sockaddr_storage any{};
      any.ss_family = addr->sa_family;
      int any_len = addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
      if (bind(s, reinterpret_cast<sockaddr*>(&any), any_len) != 0) {
        return Finish(op, -ErrnoOf(static_cast<DWORD>(WSAGetLastError())));
      }
    }
    BOOL ok = ext.connect_ex(s, addr, addrlen, nullptr, 0, nullptr, &op.overlapped);
    Started(op, ok ? 0 : static_cast<DWORD>(WSAGetLastError()));
  }
  void poll_readiness(IoOp& op, int fd, std::uint32_t events) override {
    op.kind = Kind::kPollIn;
    op.poll_events = events;
    if (!Begin(op, fd, (events & (POLLIN | POLLOUT | POLLPRI)) == 0)) return;
    if (std::int64_t ready = CheckReadiness(op); ready != 0) return Finish(op, ready);
    if (events == POLLIN && IsConnectedStream(NativeSocket(fd))) {
      // A zero-byte receive completes once data (or the end of the stream) is there.
      WSABUF b{0, nullptr};
      DWORD flags = 0;
      int r = WSARecv(NativeSocket(fd), &b, 1, nullptr, &flags, &op.overlapped, nullptr);
      return Started(op, r == 0 ? 0 : static_cast<DWORD>(WSAGetLastError()));
    }
    polling_.push(&op);
    op.result = 1;  // 1: in polling_ (no OVERLAPPED in flight)
  }
  void timeout(IoOp& op, ReactorClock::time_point when) override {
    op.kind = Kind::kTimeout;
    op.deadline = when;
    Track(op, -1);
    op.result = 0;
    if (!timers_.insert(op.timer, when).ok()) Finish(op, -ENOMEM);
  }

  void cancel(IoOp& op) override {
    if (!op.pending || op.cancel_requested || op.kind == Kind::kClose) return;
    op.cancel_requested = true;
    Abort(op);
  }

  // close (with an op): closesocket aborts every operation on the socket, whichever thread's
  // port it was submitted to, so there is nobody to wait for.
  void close(IoOp& op, int fd) override {
    op.kind = Kind::kClose;
    op.deadline.reset();
    Track(op, fd);
    if (fd < 0) return Finish(op, -EBADF);
    close(fd);
    Finish(op, 0);
  }

  void close(int fd) override {
    // Operations waiting without an OVERLAPPED in flight end now; closing the socket aborts the
    // others, which then complete through the port as -ECANCELED.
    for (IoOp* op = inflight_.head; op != nullptr; op = op->next) {
      if (op->fd == fd) op->cancel_requested = true;
    }
    for (IoOp* op = polling_.head; op != nullptr;) {
      IoOp* next = op->next;
      if (op->fd == fd) {
        polling_.remove(op);
        op->cancel_requested = true;
        Finish(*op, -ECANCELED);
      }
      op = next;
    }
    SOCKET s = NativeSocket(fd);
    // Every overlapped operation on the socket, this reactor's and other reactors' (other
    // workers', other threads'), is cancelled first, so each completes on its own port with
    // ERROR_OPERATION_ABORTED (-ECANCELED) rather than with whatever error the close makes
    // (Wine reports another one).
    CancelIoEx(reinterpret_cast<HANDLE>(s), nullptr);
    if (closesocket(s) != 0 && WSAGetLastError() == WSAENOTSOCK) {
      CloseHandle(reinterpret_cast<HANDLE>(s));
    }
  }

  Result<int> poll(std::optional<ReactorClock::time_point> deadline) override {
    int delivered = 0;
    for (;;) {
      delivered += DeliverReady();
      delivered += ExpireTimers();
      delivered += CheckPolling();
      delivered += DeliverReady();
      DWORD ms = 0;
      if (delivered == 0) {
        std::optional<ReactorClock::time_point> until = deadline;
        if (std::optional<ReactorClock::time_point> t = timers_.next_deadline()) {
          if (!until || *t < *until) until = t;
        }
        if (!polling_.empty()) {
          auto soon = ReactorClock::now() + std::chrono::milliseconds(1);
          if (!until || soon < *until) until = soon;
        }
        ms = INFINITE;
        if (until) {
          auto left = std::chrono::ceil<std::chrono::milliseconds>(TimeLeft(*until)).count();
          ms = static_cast<DWORD>(std::min<long long>(left, 1 << 30));
        }
      }
      OVERLAPPED_ENTRY entries[64];
      ULONG n = 0;
      bool woken = false;
      if (!GetQueuedCompletionStatusEx(port_, entries, 64, &n, ms, FALSE)) {
        DWORD e = GetLastError();
        if (e != WAIT_TIMEOUT) return static_cast<std::errc>(ErrnoOf(e));
        n = 0;
      }
      for (ULONG i = 0; i < n; ++i) {
        if (entries[i].lpCompletionKey == kWakeKey) {
          // release: pairs with wake()'s exchange; a wake after this posts a new packet.
          wake_posted_.store(false, std::memory_order_release);
          woken = true;
          continue;
        }
        if (entries[i].lpOverlapped == nullptr) continue;
        Completed(*OpOfOverlapped(entries[i].lpOverlapped));
      }
      delivered += DeliverReady();
      delivered += ExpireTimers();
      delivered += DeliverReady();
      if (delivered > 0 || woken || ms == 0) return delivered;
      if (deadline && ReactorClock::now() >= *deadline) return delivered;
      // Only internal events (a deadline's abort on its way, a readiness re-check): wait on.
    }
  }

 private:
  // Track: counts the op as pending, with its deadline.
  void Track(IoOp& op, int fd) {
    StartOp(op, fd);
    op.next = op.prev = nullptr;
    op.backend_extra = nullptr;
    op.backend_owner = port_;
    op.overlapped = OVERLAPPED{};
    ++pending_;
  }

  // Begin: starts an fd operation; false (and the op finished) on bad input or when the handle
  // cannot be associated with the port.
  bool Begin(IoOp& op, int fd, bool bad_argument) {
    Track(op, fd);
    if (bad_argument) {
      Finish(op, -EINVAL);
      return false;
    }
    if (fd < 0) {
      Finish(op, -EBADF);
      return false;
    }
    if (op.deadline && !timers_.insert(op.timer, *op.deadline).ok()) {
      Finish(op, -ENOMEM);
      return false;
    }
    HANDLE h = reinterpret_cast<HANDLE>(NativeSocket(fd));
    if (CreateIoCompletionPort(h, GetHub().port, kIoKey, 0) == nullptr) {
      DWORD e = GetLastError();
      // ERROR_INVALID_PARAMETER: already associated (with the hub: weft associates with nothing
      // else; a handle someone else associated with another port cannot be used here).
      if (e != ERROR_INVALID_PARAMETER) {
        Finish(op, -ErrnoOf(e));
        return false;
      }
    }
    return true;
  }

  void SetOffset(IoOp& op) {
    if (op.offset >= 0) {
      op.overlapped.Offset = static_cast<DWORD>(op.offset & 0xffffffff);
      op.overlapped.OffsetHigh = static_cast<DWORD>(static_cast<std::uint64_t>(op.offset) >> 32);
    }
  }

  // Started: after the overlapped call. 0 or ERROR_IO_PENDING: the port will report it. So it
  // will for a receive that failed at once with WSAEMSGSIZE (a datagram longer than the
  // buffers): that is a warning status, whose completion is queued like a success's.
  void Started(IoOp& op, DWORD error) {
    if (error == 0 || error == ERROR_IO_PENDING || (error == WSAEMSGSIZE && IsReceive(op))) {
      inflight_.push(&op);
      return;
    }
    FreeExtra(op);
    Finish(op, ReadEndOfStream(op, error) ? 0 : -ErrnoOf(error));
  }

  static bool IsRead(const IoOp& op) {
    return op.kind == Kind::kRead || op.kind == Kind::kReadv || op.kind == Kind::kRecv;
  }
  static bool IsReceive(const IoOp& op) { return IsRead(op) || op.kind == Kind::kRecvMsg; }
  // ReadEndOfStream: errors that mean "end of file" for a read (pipes report a closed writer as
  // ERROR_BROKEN_PIPE, files their end as ERROR_HANDLE_EOF).
  static bool ReadEndOfStream(const IoOp& op, DWORD error) {
    return IsRead(op) && (error == ERROR_HANDLE_EOF || error == ERROR_BROKEN_PIPE);
  }

  void Vectored(IoOp& op, int fd, bool send) {
    if (!Begin(op, fd, op.iov == nullptr || op.iovcnt < 0 || op.iovcnt > kMaxIov)) return;
    auto* bufs = new (std::nothrow) WSABUF[op.iovcnt > 0 ? op.iovcnt : 1];
    if (bufs == nullptr) return Finish(op, -ENOMEM);
    for (int i = 0; i < op.iovcnt; ++i) {
      if (op.iov[i].iov_len > (1u << 30)) {
        delete[] bufs;
        return Finish(op, -EINVAL);
      }
      bufs[i].len = static_cast<ULONG>(op.iov[i].iov_len);
      bufs[i].buf = static_cast<char*>(op.iov[i].iov_base);
    }
    op.backend_extra = bufs;
    DWORD count = static_cast<DWORD>(op.iovcnt);
    int r;
    if (send) {
      r = WSASend(NativeSocket(fd), bufs, count, nullptr, 0, &op.overlapped, nullptr);
    } else {
      DWORD flags = 0;
      r = WSARecv(NativeSocket(fd), bufs, count, nullptr, &flags, &op.overlapped, nullptr);
    }
    Started(op, r == 0 ? 0 : static_cast<DWORD>(WSAGetLastError()));
  }

  // Datagram: recvmsg and sendmsg as WSARecvFrom and WSASendTo.
  void Datagram(IoOp& op, int fd, bool send) {
    auto* msg = static_cast<MsgHdr*>(op.buf);
    if (!Begin(op, fd, BadMsg(msg))) return;
    auto* st = new (std::nothrow) MsgState;
    if (st == nullptr) return Finish(op, -ENOMEM);
    const std::size_t n = msg->msg_iovlen;
    st->bufs = new (std::nothrow) WSABUF[n > 0 ? n : 1];
    op.backend_extra = st;
    if (st->bufs == nullptr) {
      FreeExtra(op);
      return Finish(op, -ENOMEM);
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (msg->msg_iov[i].iov_len > (1u << 30)) {
        FreeExtra(op);
        return Finish(op, -EINVAL);
      }
      st->bufs[i].len = static_cast<ULONG>(msg->msg_iov[i].iov_len);
      st->bufs[i].buf = static_cast<char*>(msg->msg_iov[i].iov_base);
    }
    st->namelen = static_cast<INT>(msg->msg_namelen);
    const auto count = static_cast<DWORD>(n);
    if (send) {
      // A datagram larger than the protocol allows is refused before the call: an overlapped
      // send's WSAEMSGSIZE may or may not queue a completion (Wine queues one), and a stray one
      // would reach this op after it ended.
      std::size_t total = 0;
      for (std::size_t i = 0; i < n; ++i) total += msg->msg_iov[i].iov_len;
      DWORD max_size = 0;
      int len = sizeof max_size;
      if (getsockopt(NativeSocket(fd), SOL_SOCKET, SO_MAX_MSG_SIZE,
                     reinterpret_cast<char*>(&max_size), &len) == 0 &&
          total > max_size) {
        FreeExtra(op);
        return Finish(op, -EMSGSIZE);
      }
    }
    int r;
    if (send) {
      r = WSASendTo(NativeSocket(fd), st->bufs, count, nullptr, static_cast<DWORD>(op.msg_flags),
                    static_cast<const sockaddr*>(msg->msg_name), st->namelen, &op.overlapped,
                    nullptr);
    } else {
      st->flags = static_cast<DWORD>(op.msg_flags);
      r = WSARecvFrom(NativeSocket(fd), st->bufs, count, nullptr, &st->flags,
                      static_cast<sockaddr*>(msg->msg_name),
                      msg->msg_name != nullptr ? &st->namelen : nullptr, &op.overlapped, nullptr);
    }
    Started(op, r == 0 ? 0 : static_cast<DWORD>(WSAGetLastError()));
  }

  void StartAccept(IoOp& op) {
    const Extensions& ext = LoadExtensions();
    if (ext.error != 0) return Finish(op, -ext.error);
    SOCKET listener = NativeSocket(op.fd);
    auto* st = static_cast<AcceptState*>(op.backend_extra);
    if (st == nullptr) {
      st = new (std::nothrow) AcceptState;
      if (st == nullptr) return Finish(op, -ENOMEM);
      op.backend_extra = st;
      sockaddr_storage local{};
      int len = sizeof local;
      if (getsockname(listener, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
        DWORD e = static_cast<DWORD>(WSAGetLastError());
        FreeExtra(op);
        return Finish(op, -(e == WSAEINVAL ? EINVAL : ErrnoOf(e)));
      }
      st->family = local.ss_family;
    }
    st->sock = WSASocketW(st->family, SOCK_STREAM, IPPROTO_TCP, nullptr, 0,
                          WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT);
    if (st->sock == INVALID_SOCKET) {
      DWORD e = static_cast<DWORD>(WSAGetLastError());
      FreeExtra(op);
      return Finish(op, -ErrnoOf(e));
    }
    op.overlapped = OVERLAPPED{};
    DWORD bytes = 0;
    BOOL ok = ext.accept_ex(listener, st->sock, st->buf, 0, AcceptState::kAddrLen,
                            AcceptState::kAddrLen, &bytes, &op.overlapped);
    Started(op, ok ? 0 : static_cast<DWORD>(WSAGetLastError()));
  }

  static bool IsSocket(SOCKET s) {
    int type = 0;
    int len = sizeof type;
    return getsockopt(s, SOL_SOCKET, SO_TYPE, reinterpret_cast<char*>(&type), &len) == 0;
  }

  static bool IsConnectedStream(SOCKET s) {
    int type = 0;
    int len = sizeof type;
    if (getsockopt(s, SOL_SOCKET, SO_TYPE, reinterpret_cast<char*>(&type), &len) != 0) {
      return false;
    }
    sockaddr_storage peer{};
    int peer_len = sizeof peer;
    return type == SOCK_STREAM &&
           getpeername(s, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0;
  }

  // CheckReadiness: the op's ready events now (as poll(2) reports them), 0 if none, -errno.
  static std::int64_t CheckReadiness(const IoOp& op) {
    WSAPOLLFD p{};
    p.fd = NativeSocket(op.fd);
    p.events = static_cast<SHORT>(op.poll_events & (POLLIN | POLLOUT | POLLPRI));
    int r = WSAPoll(&p, 1, 0);
    if (r < 0) return -ErrnoOf(static_cast<DWORD>(WSAGetLastError()));
    if (r == 0) return 0;
    if ((p.revents & POLLNVAL) != 0) return -EBADF;
    return static_cast<std::uint16_t>(p.revents);
  }

  int CheckPolling() {
    int n = 0;
    for (IoOp* op = polling_.head; op != nullptr;) {
      IoOp* next = op->next;
      if (std::int64_t ready = CheckReadiness(*op); ready != 0) {
        polling_.remove(op);
        Finish(*op, ready);
        ++n;
      }
      op = next;
    }
    return n;
  }

  // Abort: ends a pending op early (cancel or deadline); its result then says why.
  void Abort(IoOp& op) {
    if (op.timer.queued()) timers_.cancel(op.timer);
    if (op.kind == Kind::kTimeout) return Finish(op, -ECANCELED);
    for (IoOp* it = polling_.head; it != nullptr; it = it->next) {
      if (it == &op) {
        polling_.remove(&op);
        return Finish(op, -ECANCELED);
      }
    }
    for (IoOp* it = inflight_.head; it != nullptr; it = it->next) {
      if (it == &op) {
        // The aborted (or, if it raced, successful) completion comes through the port.
        CancelIoEx(reinterpret_cast<HANDLE>(NativeSocket(op.fd)), &op.overlapped);
        return;
      }
    }
    // Otherwise it is already in the ready list: it completes with what it has.
  }

  // Completed: the port reported the op's OVERLAPPED.
  void Completed(IoOp& op) {
    inflight_.remove(&op);
    DWORD bytes = 0;
    DWORD error = 0;
    // The handle may be closed by now: GetOverlappedResult reads only the OVERLAPPED when it
    // does not wait.
    if (!GetOverlappedResult(reinterpret_cast<HANDLE>(NativeSocket(op.fd)), &op.overlapped, &bytes,
                             FALSE)) {
      error = GetLastError();
    }
    if (error == 0 && (op.cancel_requested || op.timed_out) && op.kind == Kind::kPollIn) {
      error = ERROR_OPERATION_ABORTED;  // a zero-byte probe has nothing to report
    }
    if (op.kind == Kind::kAccept || op.kind == Kind::kAcceptMulti) return AcceptDone(op, error);
    // A datagram longer than the buffers: the bytes that fit, as Linux's recv and recvmsg
    // (which flags it truncated), instead of an error.
    const bool truncated = (error == WSAEMSGSIZE || error == ERROR_MORE_DATA) && IsReceive(op) &&
                           !op.cancel_requested && !op.timed_out;
    if (truncated) error = 0;
    if (op.kind == Kind::kRecvMsg && op.backend_extra != nullptr) {
      auto* msg = static_cast<MsgHdr*>(op.buf);
      msg->msg_namelen = static_cast<socklen_t>(static_cast<MsgState*>(op.backend_extra)->namelen);
      msg->msg_flags = truncated ? kMsgTruncated : 0;
    }
    FreeExtra(op);
    if (error != 0) {
      if (ReadEndOfStream(op, error)) return Finish(op, 0);
      return Finish(op, Aborted(op, error));
    }
    switch (op.kind) {
      case Kind::kConnect:
        setsockopt(NativeSocket(op.fd), SOL_SOCKET, SO_UPDATE_CONNECT_CONTEXT, nullptr, 0);
        return Finish(op, 0);
      case Kind::kPollIn:
        return Finish(op, POLLIN);
      default:
        return Finish(op, static_cast<std::int64_t>(bytes));
    }
  }

  // Aborted: the result for an operation that failed with `error`: why we aborted it, if we did.
  static std::int64_t Aborted(const IoOp& op, DWORD error) {
    if (error == ERROR_OPERATION_ABORTED || op.cancel_requested || op.timed_out) {
      return op.timed_out ? -ETIMEDOUT : -ECANCELED;
    }
    return -ErrnoOf(error);
  }

  void AcceptDone(IoOp& op, DWORD error) {
    auto* st = static_cast<AcceptState*>(op.backend_extra);
    const bool multi = op.kind == Kind::kAcceptMulti;
    if (error != 0 || op.cancel_requested || op.timed_out) {
      closesocket(st->sock);
      FreeExtra(op);
      return Finish(op, error != 0 ? Aborted(op, error) : (op.timed_out ? -ETIMEDOUT : -ECANCELED));
    }
    SOCKET listener = NativeSocket(op.fd);
    SOCKET s = st->sock;
    st->sock = INVALID_SOCKET;
    setsockopt(s, SOL_SOCKET, SO_UPDATE_ACCEPT_CONTEXT, reinterpret_cast<const char*>(&listener),
               sizeof listener);
    u_long nonblocking = 1;
    ioctlsocket(s, FIONBIO, &nonblocking);
    if (op.addr != nullptr && op.addrlen != nullptr) {
      sockaddr* local = nullptr;
      sockaddr* remote = nullptr;
      int local_len = 0;
      int remote_len = 0;
      LoadExtensions().get_addrs(st->buf, 0, AcceptState::kAddrLen, AcceptState::kAddrLen, &local,
                                 &local_len, &remote, &remote_len);
      if (remote != nullptr) {
        std::memcpy(op.addr, remote,
                    static_cast<std::size_t>(std::min<int>(remote_len, *op.addrlen)));
        *op.addrlen = remote_len;
      }
    }
    const auto fd = static_cast<std::int64_t>(s);
    if (!multi) {
      FreeExtra(op);
      return Finish(op, fd);
    }
    // Multishot: this connection now, with kMore, then the next AcceptEx, unless the callback
    // cancelled it (cancel() found nothing in flight to abort).
    op.on_complete(op, fd, IoOp::kMore);
    if (op.cancel_requested) {
      FreeExtra(op);
      return Finish(op, op.timed_out ? -ETIMEDOUT : -ECANCELED);
    }
    StartAccept(op);
  }

  void FreeExtra(IoOp& op) {
    if (op.backend_extra == nullptr) return;
    if (op.kind == Kind::kAccept || op.kind == Kind::kAcceptMulti) {
      delete static_cast<AcceptState*>(op.backend_extra);
    } else if (op.kind == Kind::kRecvMsg || op.kind == Kind::kSendMsg) {
      delete static_cast<MsgState*>(op.backend_extra);
    } else {
      delete[] static_cast<WSABUF*>(op.backend_extra);
    }
    op.backend_extra = nullptr;
  }

  // Finish: the op's final result; delivered by the next DeliverReady.
  void Finish(IoOp& op, std::int64_t result) { ready_.finish(op, result, timers_); }
  int DeliverReady() { return ready_.deliver(pending_); }

  int ExpireTimers() {
    return ready_.expire(timers_, [&](IoOp& op) {
      Abort(op);  // completes through the port, or from polling_ at once, as -ETIMEDOUT
      return 0;
    });
  }

  HANDLE port_;
  std::atomic<bool> wake_posted_{false};
  OpList inflight_;  // an OVERLAPPED call outstanding
  OpList polling_;   // readiness re-checked with WSAPoll
  ReadyList ready_;  // finished, not yet delivered
  TimerHeap timers_;
  std::size_t pending_ = 0;
};

}  // namespace

Result<std::unique_ptr<Reactor>> MakeIocpReactor(const ReactorOptions& /*options*/) {
  if (int e = LoadExtensions().error; e != 0) return static_cast<std::errc>(e);
  if (int e = GetHub().error; e != 0) return static_cast<std::errc>(e);
  HANDLE port = CreateIoCompletionPort(INVALID_HANDLE_VALUE, nullptr, 0, 1);
  if (port == nullptr) return static_cast<std::errc>(ErrnoOf(GetLastError()));
  return std::unique_ptr<Reactor>(new IocpReactor(port));
}

}  // namespace weft::reactor_internal
