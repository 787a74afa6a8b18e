// reactor/epoll/epoll_reactor.cc: the readiness backend. Operations wait in per-fd FIFO lists
// (one for reading, one for writing); the fd's level-triggered epoll interest always equals
// "which lists are non-empty". poll() first tries the fds that got new operations, then waits in
// epoll_pwait2 until an fd is ready, the next deadline (ours or an op's) or a wake; each ready fd
// runs its waiting operations with non-blocking system calls until one would block.
//
// Completions that arise outside poll() (cancel, close, bad arguments) go to a ready list that
// poll() delivers first, so callbacks only ever run inside poll().

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "weft/reactor/internal/backends.h"
#include "weft/reactor/internal/close_coordinator.h"
#include "weft/reactor/internal/eventfd_waker.h"
#include "weft/reactor/internal/op_list.h"

namespace weft::reactor_internal {
namespace {

using Kind = IoOp::Kind;

bool IsWriteSide(const IoOp& op) {
  switch (op.kind) {
    case Kind::kWrite:
    case Kind::kWritev:
    case Kind::kSend:
    case Kind::kSendMsg:
    case Kind::kConnect:
      return true;
    case Kind::kPollIn:
      return (op.poll_events & POLLIN) == 0 && (op.poll_events & POLLOUT) != 0;
    default:
      return false;
  }
}

// DontWait: a socket call with MSG_DONTWAIT, which fails with EAGAIN instead of waiting.
bool DontWait(const IoOp& op) {
  switch (op.kind) {
    case Kind::kRecv:
    case Kind::kSend:
    case Kind::kRecvMsg:
    case Kind::kSendMsg:
      return (op.msg_flags & MSG_DONTWAIT) != 0;
    default:
      return false;
  }
}

struct FdState {
  OpList readers;
  OpList writers;
  std::uint32_t registered = 0;  // events in the epoll set (0: not in it)
  bool prepared = false;         // O_NONBLOCK set
  bool unpollable = false;       // a regular file: always ready, never in the epoll set
  bool dirty = false;            // got new operations since the last poll
};

class EpollReactor final : public Reactor {
 public:
  EpollReactor(int epfd, int evfd) : epfd_(epfd), waker_(evfd), closer_(this) {}
  ~EpollReactor() override {
    closer_.Leave();
    ::close(waker_.fd());
    ::close(epfd_);
  }

  ReactorBackend backend() const override { return ReactorBackend::kEpoll; }
  std::size_t pending_ops() const override { return pending_; }

  void wake() override { waker_.wake(); }

  void read(IoOp& op, int fd, void* buf, std::size_t len, std::int64_t offset) override {
    op.kind = Kind::kRead;
    op.buf = buf;
    op.len = ClampIoLength(len);
    op.offset = offset;
    Submit(op, fd, BadIoRequest(buf, len) || offset < -1);
  }
  void write(IoOp& op, int fd, const void* buf, std::size_t len, std::int64_t offset) override {
    op.kind = Kind::kWrite;
    op.buf = const_cast<void*>(buf);
    op.len = ClampIoLength(len);
    op.offset = offset;
    Submit(op, fd, BadIoRequest(buf, len) || offset < -1);
  }
  void readv(IoOp& op, int fd, const IoVec* iov, int iovcnt) override {
    op.kind = Kind::kReadv;
    op.iov = iov;
    op.iovcnt = iovcnt;
    Submit(op, fd, iov == nullptr || iovcnt < 0);
  }
  void writev(IoOp& op, int fd, const IoVec* iov, int iovcnt) override {
    op.kind = Kind::kWritev;
    op.iov = iov;
    op.iovcnt = iovcnt;
    Submit(op, fd, iov == nullptr || iovcnt < 0);
  }
  void recv(IoOp& op, int fd, void* buf, std::size_t len, int flags) override {
    op.kind = Kind::kRecv;
    op.buf = buf;
    op.len = ClampIoLength(len);
    op.msg_flags = flags;
    Submit(op, fd, BadIoRequest(buf, len));
  }
  void send(IoOp& op, int fd, const void* buf, std::size_t len, int flags) override {
    op.kind = Kind::kSend;
    op.buf = const_cast<void*>(buf);
    op.len = ClampIoLength(len);
    op.msg_flags = flags | MSG_NOSIGNAL;
    Submit(op, fd, BadIoRequest(buf, len));
  }
  void send_zerocopy(IoOp& op, int fd, const void* buf, std::size_t len, int flags) override {
    send(op, fd, buf, len, flags);  // (MSG_ZEROCOPY's error-queue protocol is not used)
  }
  void recvmsg(IoOp& op, int fd, MsgHdr* msg, int flags) override {
    op.kind = Kind::kRecvMsg;
    op.buf = msg;
    op.msg_flags = flags;
    Submit(op, fd, BadMsg(msg));
  }
  void sendmsg(IoOp& op, int fd, const MsgHdr* msg, int flags) override {
    op.kind = Kind::kSendMsg;
    op.buf = const_cast<MsgHdr*>(msg);
    op.msg_flags = flags | MSG_NOSIGNAL;
    Submit(op, fd, BadMsg(msg));
  }
  // File operations: epoll cannot wait for a regular file (it is always "ready", and a read may
  // still block on the disk), so they are refused; api/fs.h runs them on a blocking thread.
  void openat(IoOp& op, int /*dirfd*/, const char* /*path*/, int /*flags*/,
              unsigned /*mode*/) override {
    op.kind = Kind::kOpenAt;
    Begin(op, -1);
    Finish(op, -ENOSYS);
  }
  void fsync(IoOp& op, int fd, bool /*datasync*/) override {
    op.kind = Kind::kFsync;
    Begin(op, fd);
    Finish(op, -ENOSYS);
  }
  void statx(IoOp& op, int fd, struct statx* /*out*/) override {
    op.kind = Kind::kStatx;
    Begin(op, fd);
    Finish(op, -ENOSYS);
  }
  void accept(IoOp& op, int fd, sockaddr* addr, socklen_t* addrlen) override {
    op.kind = Kind::kAccept;
    op.addr = addr;
    op.addrlen = addrlen;
    Submit(op, fd, BadAcceptAddress(addr, addrlen));
  }
  void accept_multishot(IoOp& op, int fd) override {
    op.kind = Kind::kAcceptMulti;
    op.addr = nullptr;
    op.addrlen = nullptr;
    Submit(op, fd, false);
  }
  void connect(IoOp& op, int fd, const sockaddr* addr, socklen_t addrlen) override {
    op.kind = Kind::kConnect;
    op.addr = const_cast<sockaddr*>(addr);
    op.connect_len = addrlen;
    op.result = 0;  // 0: not started; 1: in progress
    Submit(op, fd, addr == nullptr);
  }
  void poll_readiness(IoOp& op, int fd, std::uint32_t events) override {
    op.kind = Kind::kPollIn;
    op.poll_events = events;
    Submit(op, fd, (events & (POLLIN | POLLOUT | POLLPRI)) == 0);
  }
  void timeout(IoOp& op, ReactorClock::time_point when) override {
    op.kind = Kind::kTimeout;
    Begin(op, -1);
    op.deadline = when;
    if (!timers_.insert(op.timer, when).ok()) Finish(op, -ENOMEM);
  }

  void cancel(IoOp& op) override {
    if (!op.pending || op.cancel_requested || op.kind == Kind::kClose) return;
    op.cancel_requested = true;
    if (op.timer.queued()) timers_.cancel(op.timer);
    if (op.fd >= 0 && static_cast<std::size_t>(op.fd) < fds_.size() && op.kind != Kind::kTimeout) {
      FdState& st = fds_[op.fd];
      Unlink(st, op);
      UpdateInterest(op.fd);
    }
    Finish(op, -ECANCELED);
  }

  void close(IoOp& op, int fd) override {
    op.kind = Kind::kClose;
    op.deadline.reset();  // a close has none
    Begin(op, fd);
    if (fd < 0) return Finish(op, -EBADF);
    ForgetFd(fd);
    if (closer_.StartClose(&op, fd)) FinishClose(op, fd);
    // else: FinishClose runs from DrainMail once every other reactor has acknowledged
  }

  void close(int fd) override {
    ForgetFd(fd);
    (void)closer_.StartClose(nullptr, fd);
    ::close(fd);
  }

  Result<int> poll(std::optional<ReactorClock::time_point> deadline) override {
    if (closer_.HasMail()) DrainMail();
    int delivered = DeliverReady();
    // New operations get one try before we sleep (most complete at once on a busy socket).
    std::vector<int> dirty;
    dirty.swap(dirty_);
    for (int fd : dirty) {
      if (static_cast<std::size_t>(fd) < fds_.size() && fds_[fd].dirty) {
        fds_[fd].dirty = false;
        delivered += Drive(fd, 0);
      }
    }
    delivered += ExpireTimers();
    delivered += DeliverReady();

    timespec ts{};
    timespec* tsp = nullptr;
    if (delivered > 0) {
      tsp = &ts;  // something happened: only collect what is ready, do not sleep
    } else {
      std::optional<ReactorClock::time_point> until = deadline;
      if (std::optional<ReactorClock::time_point> t = timers_.next_deadline()) {
        if (!until || *t < *until) until = t;
      }
      if (until) {
        std::chrono::nanoseconds left = TimeLeft(*until);
        if (left.count() > 0) {
          ts.tv_sec = static_cast<time_t>(left.count() / 1000000000);
          ts.tv_nsec = static_cast<long>(left.count() % 1000000000);
        }
        tsp = &ts;
      }
    }
    epoll_event events[256];
    int n = Wait(events, 256, tsp);
    if (n < 0 && errno != EINTR) return static_cast<std::errc>(errno);
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == waker_.fd()) {
        std::uint64_t value;
        ssize_t ignored = ::read(fd, &value, sizeof value);
        (void)ignored;
        waker_.rearm();
        continue;
      }
      delivered += Drive(fd, events[i].events);
    }
    if (closer_.HasMail()) DrainMail();
    delivered += ExpireTimers();
    delivered += DeliverReady();
    if (closer_.SetBusy(pending_ != 0)) DrainMail();  // idle from here: no close waits for us
    return delivered;
  }

  // Wait: epoll_pwait2 (nanosecond timeouts, Linux 5.11+), or epoll_wait with the timeout rounded
  // up to a millisecond where the kernel or an emulator (qemu-user 7.2) lacks it: ENOSYS once,
  // then epoll_wait from there on.
  int Wait(epoll_event* events, int max, const timespec* tsp) {
    if (have_pwait2_) {
      int n = epoll_pwait2(epfd_, events, max, tsp, nullptr);
      if (n >= 0 || errno != ENOSYS) return n;
      have_pwait2_ = false;
    }
    int ms = -1;
    if (tsp != nullptr) {
      long long total =
          static_cast<long long>(tsp->tv_sec) * 1000 + (tsp->tv_nsec + 999999) / 1000000;
      ms = static_cast<int>(std::min<long long>(total, 1 << 30));
    }
    return epoll_wait(epfd_, events, max, ms);
  }

  bool Init() {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = waker_.fd();
    return epoll_ctl(epfd_, EPOLL_CTL_ADD, waker_.fd(), &ev) == 0;
  }

 private:
  void Begin(IoOp& op, int fd) {
    if (closer_.SetBusy(true)) DrainMail();  // forget closed fds before taking a new op
    StartOp(op, fd);
    op.next = op.prev = nullptr;
    ++pending_;
  }

  void Submit(IoOp& op, int fd, bool bad_argument) {
    Begin(op, fd);
    if (bad_argument) return Finish(op, -EINVAL);
    if (fd < 0) return Finish(op, -EBADF);
    if (static_cast<std::size_t>(fd) >= fds_.size()) fds_.resize(static_cast<std::size_t>(fd) + 64);
    closer_.NoteFd(fd);  // a close elsewhere then tells us to forget fd before it closes it
    FdState& st = fds_[fd];
    if (!st.prepared) {
      int flags = fcntl(fd, F_GETFL);
      if (flags < 0) return Finish(op, -errno);
      if ((flags & O_NONBLOCK) == 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        return Finish(op, -errno);
      }
      st.prepared = true;
    }
    (IsWriteSide(op) ? st.writers : st.readers).push(&op);
    if (op.deadline && !timers_.insert(op.timer, *op.deadline).ok()) {
      Unlink(st, op);
      return Finish(op, -ENOMEM);
    }
    if (!st.dirty) {
      st.dirty = true;
      dirty_.push_back(fd);
    }
  }

  void Unlink(FdState& st, IoOp& op) {
    for (OpList* list : {&st.readers, &st.writers}) {
      for (IoOp* it = list->head; it != nullptr; it = it->next) {
        if (it == &op) {
          list->remove(&op);
          return;
        }
      }
    }
  }

  // ForgetFd: fails this reactor's operations on fd with -ECANCELED and drops everything it
  // knows of fd (its epoll registration, O_NONBLOCK set), as fd is about to be closed: the next
  // file with that number starts afresh.
  void ForgetFd(int fd) {
    if (fd < 0 || static_cast<std::size_t>(fd) >= fds_.size()) return;
    FdState& st = fds_[fd];
    for (OpList* list : {&st.readers, &st.writers}) {
      while (IoOp* op = list->head) {
        list->remove(op);
        if (op->timer.queued()) timers_.cancel(op->timer);
        Finish(*op, -ECANCELED);
      }
    }
    if (st.registered != 0) epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
    st = FdState{};  // (a stale entry in dirty_ finds empty lists)
  }

  void FinishClose(IoOp& op, int fd) { Finish(op, ::close(fd) == 0 ? 0 : -errno); }

  // DrainMail: fds other reactors are closing (forget them), and our closes that may proceed.
  void DrainMail() {
    closer_.DrainMail([this](int fd) { ForgetFd(fd); }, [] {},
                      [this](IoOp& op, int fd) { FinishClose(op, fd); });
  }

  // Finish: the op's final result; delivered by the next DeliverReady.
  void Finish(IoOp& op, std::int64_t result) { ready_.finish(op, result, timers_); }
  int DeliverReady() { return ready_.deliver(pending_); }

  int ExpireTimers() {
    return ready_.expire(timers_, [&](IoOp& op) {
      Unlink(fds_[op.fd], op);
      UpdateInterest(op.fd);
      Finish(op, -ECANCELED);  // reported as -ETIMEDOUT
      return 1;
    });
  }

  // Attempt: runs op's system call once. Returns the result, or -EAGAIN to keep waiting.
  std::int64_t Attempt(IoOp& op, std::uint32_t revents) {
    ssize_t r = -1;
    switch (op.kind) {
      case Kind::kRead:
        r = op.offset >= 0 ? ::pread(op.fd, op.buf, op.len, op.offset) : -1;
        // A pipe or socket has no offset: ignored there (ESPIPE), as io_uring does.
        if (op.offset < 0 || (r < 0 && errno == ESPIPE)) r = ::read(op.fd, op.buf, op.len);
        break;
      case Kind::kWrite:
        r = op.offset >= 0 ? ::pwrite(op.fd, op.buf, op.len, op.offset) : -1;
        if (op.offset < 0 || (r < 0 && errno == ESPIPE)) r = ::write(op.fd, op.buf, op.len);
        break;
      case Kind::kReadv:
        r = ::readv(op.fd, op.iov, op.iovcnt);
        break;
      case Kind::kWritev:
        r = ::writev(op.fd, op.iov, op.iovcnt);
        break;
      case Kind::kRecv:
        r = ::recv(op.fd, op.buf, op.len, op.msg_flags);
        break;
      case Kind::kSend:
        r = ::send(op.fd, op.buf, op.len, op.msg_flags);
        break;
      case Kind::kRecvMsg:
        r = ::recvmsg(op.fd, static_cast<msghdr*>(op.buf), op.msg_flags);
        break;
      case Kind::kSendMsg:
        r = ::sendmsg(op.fd, static_cast<const msghdr*>(op.buf), op.msg_flags);
        break;
      case Kind::kAccept:
      case Kind::kAcceptMulti:
        r = ::accept4(op.fd, op.addr, op.addrlen, SOCK_CLOEXEC | SOCK_NONBLOCK);
        break;
      case Kind::kConnect:
        if (op.result == 0) {
          op.result = 1;
          r = ::connect(op.fd, op.addr, op.connect_len);
          if (r < 0 && errno == EINPROGRESS) return -EAGAIN;
        } else {
          int err = 0;
          socklen_t len = sizeof err;
          if (getsockopt(op.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) return -errno;
          if (err == 0 && (revents & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return -EAGAIN;
          return -err;
        }
        break;
      case Kind::kPollIn: {
        pollfd p{op.fd, static_cast<short>(op.poll_events), 0};
        int k = ::poll(&p, 1, 0);
        if (k < 0) return -errno;
        if (k == 0) return -EAGAIN;
        return p.revents;
      }
      default:
        return -EINVAL;
    }
    if (r < 0) return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    return r;
  }

  // Drive: runs the waiting operations of fd, in order, until one would block. Callbacks may add
  // operations or close fds, so FdState is re-read by index after each one.
  int Drive(int fd, std::uint32_t revents) {
    int n = 0;
    for (bool write_side : {false, true}) {
      for (;;) {
        if (static_cast<std::size_t>(fd) >= fds_.size()) return n;
        OpList& list = write_side ? fds_[fd].writers : fds_[fd].readers;
        IoOp* op = list.head;
        if (op == nullptr) break;
        std::int64_t r = Attempt(*op, revents);
        // A receive or send asked not to wait (MSG_DONTWAIT) says EAGAIN, as io_uring's does.
        if (r == -EAGAIN && !DontWait(*op)) break;
        if (op->kind == Kind::kAcceptMulti && r >= 0) {
          op->on_complete(*op, r, IoOp::kMore);  // stays queued: accept the next one
          ++n;
          continue;
        }
        list.remove(op);
        Finish(*op, r);
        n += DeliverReady();
      }
    }
    UpdateInterest(fd);
    return n;
  }

  void UpdateInterest(int fd) {
    if (static_cast<std::size_t>(fd) >= fds_.size()) return;
    FdState& st = fds_[fd];
    if (st.unpollable) return;
    std::uint32_t want = 0;
    for (IoOp* op = st.readers.head; op != nullptr; op = op->next) {
      want |= op->kind == Kind::kPollIn ? (op->poll_events & (POLLIN | POLLPRI)) : EPOLLIN;
    }
    for (IoOp* op = st.writers.head; op != nullptr; op = op->next) want |= EPOLLOUT;
    if (want == st.registered) return;
    epoll_event ev{};
    ev.events = want;
    ev.data.fd = fd;
    int rc;
    if (st.registered == 0) {
      rc = epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
    } else if (want == 0) {
      rc = epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
    } else {
      rc = epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
    }
    if (rc == 0) {
      st.registered = want;
      return;
    }
    if (errno == EPERM) {  // a regular file: always ready; keep driving it eagerly
      st.unpollable = true;
      if (!st.dirty) {
        st.dirty = true;
        dirty_.push_back(fd);
      }
      return;
    }
    // The fd is not usable (closed behind our back, or never valid): fail what waits on it.
    int err = errno;
    for (OpList* list : {&st.readers, &st.writers}) {
      while (IoOp* op = list->head) {
        list->remove(op);
        Finish(*op, -err);
      }
    }
    st.registered = 0;
  }

  int epfd_;
  EventfdWaker waker_;
  std::vector<FdState> fds_;
  std::vector<int> dirty_;
  ReadyList ready_;
  TimerHeap timers_;
  std::size_t pending_ = 0;
  bool have_pwait2_ = true;  // cleared on the first ENOSYS (see Wait)
  CloseCoordinator closer_;  // last: registered once the rest can take a wake()
};

}  // namespace

Result<std::unique_ptr<Reactor>> MakeEpollReactor(const ReactorOptions&) {
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) return static_cast<std::errc>(errno);
  int evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (evfd < 0) {
    int err = errno;
    ::close(epfd);
    return static_cast<std::errc>(err);
  }
  auto reactor = std::make_unique<EpollReactor>(epfd, evfd);
  if (!reactor->Init()) return static_cast<std::errc>(errno);
  return std::unique_ptr<Reactor>(std::move(reactor));
}

}  // namespace weft::reactor_internal
