// reactor/io_uring/uring_reactor.cc: the io_uring backend (liburing). Each operation is one SQE
// whose user_data is the IoOp; an operation with a deadline is followed by a linked
// IORING_OP_LINK_TIMEOUT (absolute, CLOCK_MONOTONIC = steady_clock). SQEs accumulate until poll()
// submits them all with the wait in one io_uring_enter (batched submission), or until the SQ is
// full. wake() writes an eventfd that a standing read on the ring watches.
//
// Receive buffers: operations carry the caller's buffer, except recv_pooled: a recv with
// IOSQE_BUFFER_SELECT from a provided buffer ring (kernel 5.19+) registered on the first one,
// whose buffers are a BufferPool's (reactor/buffer_pool.h). The kernel picks a buffer when data
// arrives, so a waiting receive holds none. Buffers released by their callers (any thread) go
// back to the ring at the next recv_pooled or poll. Registered (fixed) buffers are not used:
// the callers' buffers are each parked fiber's own.

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "weft/base/fault.h"
#include "weft/reactor/internal/backends.h"
#include "weft/reactor/internal/close_coordinator.h"
#include "weft/reactor/internal/eventfd_waker.h"
#include "weft/reactor/internal/op_list.h"

namespace weft::reactor_internal {
namespace {

using Kind = IoOp::Kind;

// user_data tags for SQEs that are not operations. Link timeouts carry their op's address with
// the low bit set.
char kCancelTag;
char kWakeTag;

__kernel_timespec* StoreTimespec(IoOp& op, ReactorClock::time_point when) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count();
  if (ns < 0) ns = 0;
  auto* ts = reinterpret_cast<__kernel_timespec*>(op.timespec_storage);
  ts->tv_sec = ns / 1000000000;
  ts->tv_nsec = ns % 1000000000;
  return ts;
}

class UringReactor final : public Reactor {
 public:
  UringReactor() : closer_(this) {}
  ~UringReactor() override {
    closer_.Leave();
    // Only what Init set up: a refused ring (the epoll fallback path) was never initialised,
    // and exiting a zeroed ring would close fd 0.
    if (ring_ready_) io_uring_queue_exit(&ring_);  // also unregisters the buffer ring
    if (waker_.fd() >= 0) ::close(waker_.fd());
    if (buf_ring_ != nullptr) ::munmap(buf_ring_, BufRingBytes());
    if (pool_ != nullptr) pool_->Unref();  // freed now, or when the last lent buffer returns
  }

  Result<void> Init(const ReactorOptions& options) {
    // A reactor belongs to the thread that polls it: DEFER_TASKRUN (kernel 6.1+) runs completion
    // work only when that thread enters the kernel to wait, instead of interrupting it, and
    // SINGLE_ISSUER tells the kernel only one thread submits. Older kernels refuse the flags
    // (EINVAL): fall back to a plain ring.
    const unsigned entries = options.entries < 8 ? 8 : options.entries;
    int rc = io_uring_queue_init(entries, &ring_,
                                 IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
    if (rc == -EINVAL) rc = io_uring_queue_init(entries, &ring_, 0);
    if (rc < 0) return static_cast<std::errc>(-rc);
    ring_ready_ = true;
    // Fault injection for tests: every Nth SQE request is refused, as when the kernel refuses a
    // submission (EBUSY, EAGAIN), so the backlog paths run on kernels that never refuse.
    if (const char* env = std::getenv("WEFT_URING_REFUSE_SQES")) {
      refuse_every_ = static_cast<unsigned>(std::strtoul(env, nullptr, 10));
    }
    int evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (evfd < 0) return static_cast<std::errc>(errno);  // the destructor exits the ring
    waker_.set_fd(evfd);
    ArmWake();
    return {};
  }

  ReactorBackend backend() const override { return ReactorBackend::kIoUring; }
  std::size_t pending_ops() const override { return pending_; }

  void wake() override { waker_.wake(); }

  void read(IoOp& op, int fd, void* buf, std::size_t len, std::int64_t offset) override {
    op.buf = buf;
    op.len = ClampIoLength(len);  // the SQE's length is 32 bits: never let it wrap
    op.offset = offset;
    if (Begin(op, Kind::kRead, fd, BadIoRequest(buf, len) || offset < -1)) Enqueue(op);
  }
  void write(IoOp& op, int fd, const void* buf, std::size_t len, std::int64_t offset) override {
    op.buf = const_cast<void*>(buf);
    op.len = ClampIoLength(len);
    op.offset = offset;
    if (Begin(op, Kind::kWrite, fd, BadIoRequest(buf, len) || offset < -1)) Enqueue(op);
  }
  void readv(IoOp& op, int fd, const IoVec* iov, int iovcnt) override {
    op.iov = iov;
    op.iovcnt = iovcnt;
    if (Begin(op, Kind::kReadv, fd, iov == nullptr || iovcnt < 0)) Enqueue(op);
  }
  void writev(IoOp& op, int fd, const IoVec* iov, int iovcnt) override {
    op.iov = iov;
    op.iovcnt = iovcnt;
    if (Begin(op, Kind::kWritev, fd, iov == nullptr || iovcnt < 0)) Enqueue(op);
  }
  void recv(IoOp& op, int fd, void* buf, std::size_t len, int flags) override {
    op.buf = buf;
    op.len = ClampIoLength(len);
    op.msg_flags = flags;
    if (Begin(op, Kind::kRecv, fd, BadIoRequest(buf, len))) Enqueue(op);
  }
  void send(IoOp& op, int fd, const void* buf, std::size_t len, int flags) override {
    op.buf = const_cast<void*>(buf);
    op.len = ClampIoLength(len);
    op.msg_flags = flags | MSG_NOSIGNAL;
    if (Begin(op, Kind::kSend, fd, BadIoRequest(buf, len))) Enqueue(op);
  }
  void send_zerocopy(IoOp& op, int fd, const void* buf, std::size_t len, int flags) override {
    op.buf = const_cast<void*>(buf);
    op.len = ClampIoLength(len);
    op.msg_flags = flags | MSG_NOSIGNAL;
    const Kind kind = zerocopy_ ? Kind::kSendZc : Kind::kSend;
    if (Begin(op, kind, fd, BadIoRequest(buf, len))) Enqueue(op);
  }
  bool pooled_receives() const override { return !pool_tried_ || pool_ != nullptr; }
  void recv_pooled(IoOp& op, int fd, PooledBuffer* out, int flags) override {
    if (out != nullptr) *out = PooledBuffer{};
    op.pooled = out;
    op.buf = nullptr;
    op.len = Reactor::kPooledBufferSize;
    op.msg_flags = flags;
    const bool pool = out != nullptr && EnsurePool();
    if (!Begin(op, Kind::kRecvPooled, fd, out == nullptr)) return;
    if (!pool) return FinishLater(op, -EOPNOTSUPP);
    Refill();
    Enqueue(op);
  }
  void recvmsg(IoOp& op, int fd, MsgHdr* msg, int flags) override {
    op.buf = msg;
    op.msg_flags = flags;
    if (Begin(op, Kind::kRecvMsg, fd, BadMsg(msg))) Enqueue(op);
  }
  void sendmsg(IoOp& op, int fd, const MsgHdr* msg, int flags) override {
    op.buf = const_cast<MsgHdr*>(msg);
    op.msg_flags = flags | MSG_NOSIGNAL;
    if (Begin(op, Kind::kSendMsg, fd, BadMsg(msg))) Enqueue(op);
  }
  void openat(IoOp& op, int dirfd, const char* path, int flags, unsigned mode) override {
    op.buf = const_cast<char*>(path);
    op.msg_flags = flags;
    op.len = mode;
    if (Begin(op, Kind::kOpenAt, dirfd, path == nullptr)) Enqueue(op);
  }
  void fsync(IoOp& op, int fd, bool datasync) override {
    op.msg_flags = datasync ? IORING_FSYNC_DATASYNC : 0;
    if (Begin(op, Kind::kFsync, fd, false)) Enqueue(op);
  }
  void statx(IoOp& op, int fd, struct statx* out) override {
    op.buf = out;
    if (Begin(op, Kind::kStatx, fd, out == nullptr)) Enqueue(op);
  }
  void accept(IoOp& op, int fd, sockaddr* addr, socklen_t* addrlen) override {
    op.addr = addr;
    op.addrlen = addrlen;
    if (Begin(op, Kind::kAccept, fd, BadAcceptAddress(addr, addrlen))) Enqueue(op);
  }
  void accept_multishot(IoOp& op, int fd) override {
    if (Begin(op, Kind::kAcceptMulti, fd, false)) Enqueue(op);
  }
  void connect(IoOp& op, int fd, const sockaddr* addr, socklen_t addrlen) override {
    op.addr = const_cast<sockaddr*>(addr);
    op.connect_len = addrlen;
    if (Begin(op, Kind::kConnect, fd, addr == nullptr)) Enqueue(op);
  }
  void poll_readiness(IoOp& op, int fd, std::uint32_t events) override {
    op.poll_events = events;
    if (Begin(op, Kind::kPollIn, fd, (events & (POLLIN | POLLOUT | POLLPRI)) == 0)) Enqueue(op);
  }
  void timeout(IoOp& op, ReactorClock::time_point when) override {
    op.deadline.reset();
    (void)StoreTimespec(op, when);
    if (Begin(op, Kind::kTimeout, 0, false)) Enqueue(op);
  }

  void cancel(IoOp& op) override {
    if (!op.pending || op.cancel_requested || op.kind == Kind::kClose) return;
    op.cancel_requested = true;
    if (op.result == kImmediate) return;  // completes from the ready list anyway
    CancelInKernel(op);
  }

  void close(IoOp& op, int fd) override {
    op.deadline.reset();  // a close has none
    // fd < 0 fails at once with -EBADF.
    if (!Begin(op, Kind::kClose, fd, false)) return;
    ForgetFd(fd);
    io_uring_submit(&ring_);  // the cancels, while fd still names the file
    if (closer_.StartClose(&op, fd)) FinishClose(op, fd);
    // else: DrainMail finishes it once every other reactor has acknowledged
  }

  void close(int fd) override {
    ForgetFd(fd);
    io_uring_submit(&ring_);  // the cancels, while fd still names the file
    (void)closer_.StartClose(nullptr, fd);
    ::close(fd);
  }

  Result<int> poll(std::optional<ReactorClock::time_point> deadline) override {
    if (closer_.HasMail()) DrainMail();
    if (pool_ != nullptr) Refill();
    int delivered = DeliverImmediate();
    delivered += Reap();
    FlushBacklog();
    if (!backlog_.empty() || unsent_cancels_ != 0 || !wake_armed_) {
      // The kernel refused SQEs: wait briefly, then try them again.
      auto soon = ReactorClock::now() + std::chrono::milliseconds(1);
      if (!deadline || *deadline > soon) deadline = soon;
    }
    unsigned wait_nr = delivered > 0 ? 0 : 1;
    __kernel_timespec ts{};
    __kernel_timespec* tsp = nullptr;
    if (wait_nr == 1 && deadline) {
      std::chrono::nanoseconds left = TimeLeft(*deadline);
      if (left.count() <= 0) {
        wait_nr = 0;
      } else {
        ts.tv_sec = left.count() / 1000000000;
        ts.tv_nsec = left.count() % 1000000000;
        tsp = &ts;
      }
    }
    io_uring_cqe* cqe = nullptr;
    // wait_nr 0 still enters the kernel for events, so deferred completion work runs.
    int rc = wait_nr == 0 ? io_uring_submit_and_get_events(&ring_)
                          : io_uring_submit_and_wait_timeout(&ring_, &cqe, wait_nr, tsp, nullptr);
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      return static_cast<std::errc>(-rc);
    }
    delivered += Reap();
    if (closer_.HasMail()) DrainMail();
    delivered += DeliverImmediate();
    if (closer_.SetBusy(pending_ != 0)) DrainMail();  // idle from here: no close waits for us
    return delivered;
  }

 private:
  // kImmediate: the op's result is known without the ring (bad input, cancelled while it waited
  // for an SQE, a close); it waits in ready_ (FinishLater).
  static constexpr std::int64_t kImmediate = INT64_MIN;
  // kUnsent: the op waits in backlog_ for an SQE.
  static constexpr std::int64_t kUnsent = INT64_MIN + 1;

  // ForgetFd: cancels this reactor's operations on fd, each by its user_data (never by fd: the
  // number may name another file by the time the kernel looks), as fd is about to be closed.
  // Each completes with -ECANCELED (or its own result, if it finished first). The caller
  // submits, so that the cancels and any operation still only prepared reach the kernel while
  // fd still names the file.
  void ForgetFd(int fd) {
    for (IoOp* op = inflight_.head; op != nullptr; op = op->next) {
      if (op->fd != fd || op->kind == Kind::kTimeout || op->cancel_requested) continue;
      op->cancel_requested = true;  // reported as -ECANCELED, not as a timeout
      CancelInKernel(*op);
    }
    for (IoOp* op = backlog_.head; op != nullptr;) {
      IoOp* next = op->next;
      if (op->fd == fd && op->kind != Kind::kTimeout) FailUnsent(*op, -ECANCELED);
      op = next;
    }
  }

  // CancelInKernel: an ASYNC_CANCEL by user_data for op (in flight or waiting for an SQE). With
  // no SQE to be had (the kernel refused a submission: EBUSY or EAGAIN), the cancel waits, marked
  // on the op, until FlushBacklog finds room.
  void CancelInKernel(IoOp& op) {
    if (op.result == kUnsent) return FailUnsent(op, -ECANCELED);  // never reached the kernel
    io_uring_sqe* sqe = RawSqe(1);
    if (sqe == nullptr) {
      op.cancel_unsent = true;
      ++unsent_cancels_;
      return;
    }
    io_uring_prep_cancel(sqe, &op, 0);
    io_uring_sqe_set_data(sqe, &kCancelTag);
  }

  // FailUnsent: op waited in the backlog; it completes with `error` from the ready list.
  void FailUnsent(IoOp& op, std::int64_t error) {
    backlog_.remove(&op);
    FinishLater(op, error);
  }

  // FinishLater: op's final result, delivered from the ready list by the next poll.
  void FinishLater(IoOp& op, std::int64_t result) {
    op.result = kImmediate;
    op.offset = result;  // the result, until delivery
    ready_.push(&op);
  }

  // Enqueue: op's SQE (and its linked timeout), or, with no SQE to be had, the backlog (FIFO:
  // once one op waits there, later ones queue behind it, so two writes keep their order).
  void Enqueue(IoOp& op) {
    io_uring_sqe* sqe = backlog_.empty() ? Sqe(op) : nullptr;
    if (sqe == nullptr) {
      op.result = kUnsent;
      backlog_.push(&op);
      return;
    }
    Prepare(op, sqe);
  }

  // Prepare: the SQE for op, from what the submitting call stored in it.
  void Prepare(IoOp& op, io_uring_sqe* sqe) {
    switch (op.kind) {
      case Kind::kRead:
        io_uring_prep_read(sqe, op.fd, op.buf, static_cast<unsigned>(op.len),
                           static_cast<std::uint64_t>(op.offset));
        break;
      case Kind::kWrite:
        io_uring_prep_write(sqe, op.fd, op.buf, static_cast<unsigned>(op.len),
                            static_cast<std::uint64_t>(op.offset));
        break;
      case Kind::kReadv:
        io_uring_prep_readv(sqe, op.fd, op.iov, static_cast<unsigned>(op.iovcnt),
                            ~std::uint64_t{0});
        break;
      case Kind::kWritev:
        io_uring_prep_writev(sqe, op.fd, op.iov, static_cast<unsigned>(op.iovcnt),
                             ~std::uint64_t{0});
        break;
      case Kind::kRecv:
        io_uring_prep_recv(sqe, op.fd, op.buf, op.len, op.msg_flags);
        break;
      case Kind::kRecvPooled:
        io_uring_prep_recv(sqe, op.fd, nullptr, op.len, op.msg_flags);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = kBufGroup;
        break;
      case Kind::kSend:
        io_uring_prep_send(sqe, op.fd, op.buf, op.len, op.msg_flags);
        break;
      case Kind::kSendZc:
        op.offset = 0;  // the result, once the first CQE gives it
        io_uring_prep_send_zc(sqe, op.fd, op.buf, op.len, op.msg_flags, 0);
        break;
      case Kind::kRecvMsg:
        io_uring_prep_recvmsg(sqe, op.fd, static_cast<msghdr*>(op.buf),
                              static_cast<unsigned>(op.msg_flags));
        break;
      case Kind::kSendMsg:
        io_uring_prep_sendmsg(sqe, op.fd, static_cast<const msghdr*>(op.buf),
                              static_cast<unsigned>(op.msg_flags));
        break;
      case Kind::kOpenAt:
        io_uring_prep_openat(sqe, op.fd, static_cast<const char*>(op.buf), op.msg_flags,
                             static_cast<mode_t>(op.len));
        break;
      case Kind::kFsync:
        io_uring_prep_fsync(sqe, op.fd, static_cast<unsigned>(op.msg_flags));
        break;
      case Kind::kStatx:
        // The fd itself (AT_EMPTY_PATH with an empty path).
        io_uring_prep_statx(sqe, op.fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS,
                            static_cast<struct statx*>(op.buf));
        break;
      case Kind::kAccept:
        io_uring_prep_accept(sqe, op.fd, op.addr, op.addrlen, SOCK_CLOEXEC | SOCK_NONBLOCK);
        break;
      case Kind::kAcceptMulti:
        io_uring_prep_multishot_accept(sqe, op.fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        break;
      case Kind::kConnect:
        io_uring_prep_connect(sqe, op.fd, op.addr, op.connect_len);
        break;
      case Kind::kPollIn:
        io_uring_prep_poll_add(sqe, op.fd, op.poll_events);
        break;
      case Kind::kTimeout:
        io_uring_prep_timeout(sqe, reinterpret_cast<__kernel_timespec*>(op.timespec_storage), 0,
                              IORING_TIMEOUT_ABS);
        break;
      case Kind::kNone:
      case Kind::kClose:
        break;  // never prepared
    }
    op.result = 0;
    inflight_.push(&op);
    Publish(op, sqe);
  }

  // FlushBacklog: what waited for SQEs (ops, then cancels, then the wake-up read), while there is
  // room. poll() calls it before it submits.
  void FlushBacklog() {
    while (IoOp* op = backlog_.head) {
      io_uring_sqe* sqe = Sqe(*op);
      if (sqe == nullptr) return;
      backlog_.remove(op);
      Prepare(*op, sqe);
    }
    if (unsent_cancels_ != 0) {
      for (IoOp* op = inflight_.head; op != nullptr && unsent_cancels_ != 0; op = op->next) {
        if (!op->cancel_unsent) continue;
        io_uring_sqe* sqe = RawSqe(1);
        if (sqe == nullptr) return;
        op->cancel_unsent = false;
        --unsent_cancels_;
        io_uring_prep_cancel(sqe, op, 0);
        io_uring_sqe_set_data(sqe, &kCancelTag);
      }
    }
    if (!wake_armed_) ArmWake();
  }

  // FinishClose: closes fd; the close op's result comes from the ready list by the next poll.
  void FinishClose(IoOp& op, int fd) { FinishLater(op, ::close(fd) == 0 ? 0 : -errno); }

  // DrainMail: fds other reactors are closing (cancel ours on them, then submit, before
  // acknowledging), and our closes that may proceed.
  void DrainMail() {
    closer_.DrainMail([this](int fd) { ForgetFd(fd); }, [this] { io_uring_submit(&ring_); },
                      [this](IoOp& op, int fd) { FinishClose(op, fd); });
  }

  // Begin: bookkeeping; false if the op failed at once (delivered by the next poll).
  bool Begin(IoOp& op, Kind kind, int fd, bool bad_argument) {
    if (closer_.SetBusy(true)) DrainMail();  // forget closed fds before taking a new op
    op.kind = kind;
    StartOp(op, fd);
    op.result = 0;
    ++pending_;
    // (An open's fd is its directory's: AT_FDCWD is negative, and no close concerns it.)
    if (bad_argument || (fd < 0 && kind != Kind::kOpenAt)) {
      FinishLater(op, bad_argument ? -EINVAL : -EBADF);
      return false;
    }
    // A timeout has no fd; a close takes fd away from every reactor, ours included.
    if (kind != Kind::kTimeout && kind != Kind::kClose && kind != Kind::kOpenAt) {
      closer_.NoteFd(fd);
    }
    return true;
  }

  // RawSqe: `need` free SQEs (a linked pair is never split across two submissions), submitting
  // first if there are fewer; null if there are still fewer (the kernel refused the submission:
  // EBUSY while its completion queue overflows, EAGAIN without memory). Returns the first.
  io_uring_sqe* RawSqe(unsigned need) {
    if (io_uring_sq_space_left(&ring_) < need) io_uring_submit(&ring_);
    if (io_uring_sq_space_left(&ring_) < need) return nullptr;
    if (refuse_every_ != 0 && ++refuse_count_ % refuse_every_ == 0) return nullptr;  // testing
    if (fault::Inject(fault::Site::kUringSubmit, fault::Kind::kSubmitBusy)) [[unlikely]] {
      return nullptr;  // WEFT_FAULTS (base/fault.h)
    }
    return io_uring_get_sqe(&ring_);
  }

  // Sqe: room for the op (and its linked timeout, if it has a deadline).
  io_uring_sqe* Sqe(IoOp& op) { return RawSqe(op.deadline ? 2 : 1); }

  // Publish: after the prep call (which resets the SQE): tag it with the op and add the deadline
  // as a linked timeout right after it.
  void Publish(IoOp& op, io_uring_sqe* sqe) {
    io_uring_sqe_set_data(sqe, &op);
    if (!op.deadline) return;
    sqe->flags |= IOSQE_IO_LINK;
    io_uring_sqe* lt = io_uring_get_sqe(&ring_);
    io_uring_prep_link_timeout(lt, StoreTimespec(op, *op.deadline), IORING_TIMEOUT_ABS);
    io_uring_sqe_set_data64(lt, reinterpret_cast<std::uintptr_t>(&op) | 1);
  }

  void ArmWake() {
    io_uring_sqe* sqe = RawSqe(1);
    wake_armed_ = sqe != nullptr;  // else FlushBacklog arms it
    if (sqe == nullptr) return;
    io_uring_prep_read(sqe, waker_.fd(), &wake_value_, sizeof wake_value_, 0);
    io_uring_sqe_set_data(sqe, &kWakeTag);
  }

  int DeliverImmediate() {
    int n = 0;
    while (IoOp* op = ready_.head) {
      ready_.remove(op);
      op->pending = false;
      --pending_;
      std::int64_t err = op->offset;
      op->result = err;
      ++n;
      op->on_complete(*op, err, 0);
    }
    return n;
  }

  int Reap() {
    int n = 0;
    io_uring_cqe* cqes[64];
    for (;;) {
      unsigned got = io_uring_peek_batch_cqe(&ring_, cqes, 64);
      if (got == 0) return n;
      struct Done {
        IoOp* op;
        std::int64_t res;
        unsigned flags;
      } done[64];
      unsigned k = 0;
      for (unsigned i = 0; i < got; ++i) {
        std::uint64_t data = io_uring_cqe_get_data64(cqes[i]);
        std::int32_t res = cqes[i]->res;
        if (data == reinterpret_cast<std::uintptr_t>(&kCancelTag)) continue;
        if (data == reinterpret_cast<std::uintptr_t>(&kWakeTag)) {
          waker_.rearm();
          ArmWake();
          continue;
        }
        // A link timeout. Its CQE may come after its op's, once the op is delivered and its
        // memory reused (a fiber's stack), so it is never dereferenced: a timed-out op is known
        // by its own -ECANCELED with a deadline and no cancel asked for.
        if ((data & 1) != 0) continue;
        unsigned flags = (cqes[i]->flags & IORING_CQE_F_MORE) != 0 ? IoOp::kMore : 0;
        auto* op = reinterpret_cast<IoOp*>(data);
        if ((cqes[i]->flags & IORING_CQE_F_BUFFER) != 0 && pool_ != nullptr) {
          // A pooled receive took a buffer: lent with the data, or straight back to the ring.
          const auto id = static_cast<std::uint32_t>(cqes[i]->flags >> IORING_CQE_BUFFER_SHIFT);
          if (res > 0 && op->kind == Kind::kRecvPooled && op->pooled != nullptr &&
              id < pool_->count()) {
            pool_->Lend();
            *op->pooled = PooledBuffer{pool_, id, pool_->data(id)};
          } else if (id < pool_->count()) {
            AddToRing(id, 0);
            io_uring_buf_ring_advance(buf_ring_, 1);
          }
        }
        if (op->kind == Kind::kSendZc) {
          // A zero-copy send: its result comes first (with F_MORE when a notification follows),
          // then the notification (F_NOTIF) once the kernel is done with the buffer. The op
          // completes, with the result, at the notification, or at a result without F_MORE.
          if ((cqes[i]->flags & IORING_CQE_F_NOTIF) != 0) {
            res = static_cast<std::int32_t>(op->offset);
            flags = 0;
          } else if (flags != 0) {
            op->offset = res;
            continue;
          }
        }
        done[k++] = Done{op, res, flags};
      }
      io_uring_cq_advance(&ring_, got);
      for (unsigned i = 0; i < k; ++i) {
        IoOp* op = done[i].op;
        std::int64_t res = done[i].res;
        if (op->kind == Kind::kTimeout && res == -ETIME) res = 0;
        if (res == -ECANCELED && !op->cancel_requested && op->deadline.has_value()) {
          res = -ETIMEDOUT;
        }
        if ((done[i].flags & IoOp::kMore) == 0) {
          inflight_.remove(op);
          if (op->cancel_unsent) {  // its cancel never went out: nothing left to cancel
            op->cancel_unsent = false;
            --unsent_cancels_;
          }
          // A pipe ignores an offset in io_uring but a socket says ESPIPE: ignored on every
          // fd and every backend, so the read or write goes again at the current position.
          if (res == -ESPIPE && (op->kind == Kind::kRead || op->kind == Kind::kWrite) &&
              op->offset >= 0 && !op->cancel_requested) {
            op->offset = -1;
            Enqueue(*op);
            continue;
          }
          // A zero-copy send the kernel (EINVAL: before 6.0) or the socket (EOPNOTSUPP: a Unix
          // socket) cannot do: sent again as a plain send; after EINVAL, every one is.
          if (op->kind == Kind::kSendZc && (res == -EINVAL || res == -EOPNOTSUPP) &&
              !op->cancel_requested) {
            if (res == -EINVAL) zerocopy_ = false;
            op->kind = Kind::kSend;
            Enqueue(*op);
            continue;
          }
          op->pending = false;
          --pending_;
        }
        ++n;
        op->on_complete(*op, res, done[i].flags);
      }
    }
  }

  // The pool and its provided buffer ring (group kBufGroup), made by the first recv_pooled.
  static constexpr int kBufGroup = 0;
  static std::size_t BufRingBytes() {
    return std::size_t{Reactor::kPooledBuffers} * sizeof(io_uring_buf);
  }
  bool EnsurePool() {
    if (pool_tried_) return pool_ != nullptr;
    pool_tried_ = true;
    BufferPool* pool = BufferPool::Create(Reactor::kPooledBuffers, Reactor::kPooledBufferSize);
    if (pool == nullptr) return false;
    // The ring's memory: page-aligned, shared with the kernel.
    void* mem =
        ::mmap(nullptr, BufRingBytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      pool->Unref();
      return false;
    }
    auto* br = static_cast<io_uring_buf_ring*>(mem);
    io_uring_buf_ring_init(br);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<std::uintptr_t>(br);
    reg.ring_entries = Reactor::kPooledBuffers;
    reg.bgid = kBufGroup;
    if (io_uring_register_buf_ring(&ring_, &reg, 0) < 0) {  // before 5.19: no buffer rings
      ::munmap(mem, BufRingBytes());
      pool->Unref();
      return false;
    }
    pool_ = pool;
    buf_ring_ = br;
    for (std::uint32_t id = 0; id < pool_->count(); ++id) AddToRing(id, static_cast<int>(id));
    io_uring_buf_ring_advance(buf_ring_, static_cast<int>(pool_->count()));
    return true;
  }
  // AddToRing: buffer id at the ring's tail + offset (published by io_uring_buf_ring_advance).
  void AddToRing(std::uint32_t id, int offset) {
    io_uring_buf_ring_add(buf_ring_, pool_->data(id), pool_->buffer_size(),
                          static_cast<unsigned short>(id),
                          io_uring_buf_ring_mask(Reactor::kPooledBuffers), offset);
  }
  // Refill: the buffers callers released since the last call, back into the ring.
  void Refill() {
    int added = 0;
    pool_->TakeReturned([&](std::uint32_t id) { AddToRing(id, added++); });
    if (added != 0) io_uring_buf_ring_advance(buf_ring_, added);
  }
  BufferPool* pool_ = nullptr;
  io_uring_buf_ring* buf_ring_ = nullptr;
  bool pool_tried_ = false;

  bool zerocopy_ = true;  // IORING_OP_SEND_ZC works here (until a send says EINVAL)
  io_uring ring_{};
  bool ring_ready_ = false;
  std::uint64_t wake_value_ = 0;
  EventfdWaker waker_;
  OpList ready_;
  OpList inflight_;
  OpList backlog_;                  // ops that found no SQE, in submission order
  std::size_t unsent_cancels_ = 0;  // ops in inflight_ marked cancel_unsent
  bool wake_armed_ = false;
  unsigned refuse_every_ = 0;  // WEFT_URING_REFUSE_SQES (tests)
  unsigned refuse_count_ = 0;
  std::size_t pending_ = 0;
  CloseCoordinator closer_;
};

}  // namespace

Result<std::unique_ptr<Reactor>> MakeIoUringReactor(const ReactorOptions& options) {
  auto reactor = std::make_unique<UringReactor>();
  if (Result<void> r = reactor->Init(options); !r) return r.error();
  return std::unique_ptr<Reactor>(std::move(reactor));
}

}  // namespace weft::reactor_internal
