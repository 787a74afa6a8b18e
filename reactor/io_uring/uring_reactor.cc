// reactor/io_uring/uring_reactor.cc: the io_uring backend (liburing). Each operation is one SQE
// whose user_data is the IoOp; an operation with a deadline is followed by a linked
// IORING_OP_LINK_TIMEOUT (absolute, CLOCK_MONOTONIC = steady_clock). SQEs accumulate until poll()
// submits them all with the wait in one io_uring_enter (batched submission), or until the SQ is
// full. wake() writes an eventfd that a standing read on the ring watches.
//
// Receive buffers: operations carry the caller's buffer (in a fiber runtime, each parked fiber's
// own), so neither provided buffer rings nor registered buffers are used: a provided buffer would
// add a copy into the fiber's buffer, and registering every fiber's buffer is not possible. They
// pay off for many idle connections with no buffer of their own; that is a later, separate API.

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "reactor/internal/backends.h"
#include "reactor/internal/eventfd_waker.h"
#include "reactor/internal/op_list.h"

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
  ~UringReactor() override {
    // Only what Init set up: a refused ring (the epoll fallback path) was never initialised,
    // and exiting a zeroed ring would close fd 0.
    if (ring_ready_) io_uring_queue_exit(&ring_);
    if (waker_.fd() >= 0) ::close(waker_.fd());
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
    if (!Begin(op, Kind::kRead, fd, buf == nullptr && len > 0)) return;
    io_uring_sqe* sqe = Sqe(op);
    io_uring_prep_read(sqe, fd, buf, static_cast<unsigned>(len),
                       static_cast<std::uint64_t>(offset));
    Publish(op, sqe);
  }
  void write(IoOp& op, int fd, const void* buf, std::size_t len, std::int64_t offset) override {
    if (!Begin(op, Kind::kWrite, fd, buf == nullptr && len > 0)) return;
    io_uring_sqe* sqe = Sqe(op);
    io_uring_prep_write(sqe, fd, buf, static_cast<unsigned>(len),
                        static_cast<std::uint64_t>(offset));
    Publish(op, sqe);
  }
  void readv(IoOp& op, int fd, const IoVec* iov, int iovcnt) override {
    if (!Begin(op, Kind::kReadv, fd, iov == nullptr || iovcnt < 0)) return;
    io_uring_sqe* sqe = Sqe(op);
    io_uring_prep_readv(sqe, fd, iov, static_cast<unsigned>(iovcnt), ~std::uint64_t{0});
    Publish(op, sqe);
  }
  void writev(IoOp& op, int fd, const IoVec* iov, int iovcnt) override {
    if (!Begin(op, Kind::kWritev, fd, iov == nullptr || iovcnt < 0)) return;
    io_uring_sqe* sqe = Sqe(op);
    io_uring_prep_writev(sqe, fd, iov, static_cast<unsigned>(iovcnt), ~std::uint64_t{0});
    Publish(op, sqe);
  }
  void recv(IoOp& op, int fd, void* buf, std::size_t len, int flags) override {
    if (!Begin(op, Kind::kRecv, fd, buf == nullptr && len > 0)) return;
    io_uring_sqe* sqe = Sqe(op);
    io_uring_prep_recv(sqe, fd, buf, len, flags);
    Publish(op, sqe);
  }
  void send(IoOp& op, int fd, const void* buf, std::size_t len, int flags) override {
    if (!Begin(op, Kind::kSend, fd, buf == nullptr && len > 0)) return;
    io_uring_sqe* sqe = Sqe(op);
    io_uring_prep_send(sqe, fd, buf, len, flags | MSG_NOSIGNAL);
    Publish(op, sqe);
  }
  void accept(IoOp& op, int fd, sockaddr* addr, socklen_t* addrlen) override {
    if (!Begin(op, Kind::kAccept, fd, false)) return;
    io_uring_sqe* sqe = Sqe(op);
    io_uring_prep_accept(sqe, fd, addr, addrlen, SOCK_CLOEXEC | SOCK_NONBLOCK);
    Publish(op, sqe);
  }
  void accept_multishot(IoOp& op, int fd) override {
    if (!Begin(op, Kind::kAcceptMulti, fd, false)) return;
    io_uring_sqe* sqe = Sqe(op);
    io_uring_prep_multishot_accept(sqe, fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    Publish(op, sqe);
  }
  void connect(IoOp& op, int fd, const sockaddr* addr, socklen_t addrlen) override {
    if (!Begin(op, Kind::kConnect, fd, addr == nullptr)) return;
    io_uring_sqe* sqe = Sqe(op);
    io_uring_prep_connect(sqe, fd, addr, addrlen);
    Publish(op, sqe);
  }
  void poll_readiness(IoOp& op, int fd, std::uint32_t events) override {
    if (!Begin(op, Kind::kPollIn, fd, (events & (POLLIN | POLLOUT | POLLPRI)) == 0)) return;
    io_uring_sqe* sqe = Sqe(op);
    io_uring_prep_poll_add(sqe, fd, events);
    Publish(op, sqe);
  }
  void timeout(IoOp& op, ReactorClock::time_point when) override {
    op.deadline.reset();
    if (!Begin(op, Kind::kTimeout, 0, false)) return;
    io_uring_sqe* sqe = Sqe(op);
    io_uring_prep_timeout(sqe, StoreTimespec(op, when), 0, IORING_TIMEOUT_ABS);
    Publish(op, sqe);
  }

  void cancel(IoOp& op) override {
    if (!op.pending || op.cancel_requested) return;
    op.cancel_requested = true;
    if (op.result == kImmediate) return;  // completes from the ready list anyway
    io_uring_sqe* sqe = RawSqe(1);
    io_uring_prep_cancel(sqe, &op, 0);
    io_uring_sqe_set_data(sqe, &kCancelTag);
  }

  void close(int fd) override {
    bool any = false;
    for (IoOp* op = inflight_.head; op != nullptr; op = op->next) {
      if (op->fd == fd && op->kind != Kind::kTimeout && op->result != kImmediate) {
        op->cancel_requested = true;  // reported as -ECANCELED, not as a timeout
        any = true;
      }
    }
    if (any) {
      io_uring_sqe* sqe = RawSqe(1);
      io_uring_prep_cancel_fd(sqe, fd, IORING_ASYNC_CANCEL_ALL);
      io_uring_sqe_set_data(sqe, &kCancelTag);
      io_uring_submit(&ring_);  // cancel while the fd still names the file
    }
    ::close(fd);
  }

  Result<int> poll(std::optional<ReactorClock::time_point> deadline) override {
    int delivered = DeliverImmediate();
    delivered += Reap();
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
    delivered += DeliverImmediate();
    return delivered;
  }

 private:
  // kImmediate: the op failed before reaching the ring; it waits in ready_.
  static constexpr std::int64_t kImmediate = INT64_MIN;

  // Begin: bookkeeping; false if the op failed at once (delivered by the next poll).
  bool Begin(IoOp& op, Kind kind, int fd, bool bad_argument) {
    op.kind = kind;
    StartOp(op, fd);
    op.result = 0;
    ++pending_;
    if (bad_argument || fd < 0) {
      op.result = kImmediate;
      op.offset = bad_argument ? -EINVAL : -EBADF;  // the error, until delivery
      ready_.push(&op);
      return false;
    }
    inflight_.push(&op);
    return true;
  }

  // RawSqe: an SQE, submitting first if fewer than `need` are free (a linked pair must not be
  // split across two submissions).
  io_uring_sqe* RawSqe(unsigned need) {
    if (io_uring_sq_space_left(&ring_) < need) io_uring_submit(&ring_);
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
        if ((data & 1) != 0) {  // a link timeout: -ETIME means it fired
          auto* op = reinterpret_cast<IoOp*>(data & ~std::uint64_t{1});
          if (res == -ETIME) op->timed_out = true;
          continue;
        }
        unsigned flags = (cqes[i]->flags & IORING_CQE_F_MORE) != 0 ? IoOp::kMore : 0;
        done[k++] = Done{reinterpret_cast<IoOp*>(data), res, flags};
      }
      io_uring_cq_advance(&ring_, got);
      for (unsigned i = 0; i < k; ++i) {
        IoOp* op = done[i].op;
        std::int64_t res = done[i].res;
        if (op->kind == Kind::kTimeout && res == -ETIME) res = 0;
        if (res == -ECANCELED && !op->cancel_requested &&
            (op->timed_out || op->deadline.has_value())) {
          res = -ETIMEDOUT;
        }
        if ((done[i].flags & IoOp::kMore) == 0) {
          inflight_.remove(op);
          op->pending = false;
          --pending_;
        }
        ++n;
        op->on_complete(*op, res, done[i].flags);
      }
    }
  }

  io_uring ring_{};
  bool ring_ready_ = false;
  std::uint64_t wake_value_ = 0;
  EventfdWaker waker_;
  OpList ready_;
  OpList inflight_;
  std::size_t pending_ = 0;
};

}  // namespace

Result<std::unique_ptr<Reactor>> MakeIoUringReactor(const ReactorOptions& options) {
  auto reactor = std::make_unique<UringReactor>();
  if (Result<void> r = reactor->Init(options); !r) return r.error();
  return std::unique_ptr<Reactor>(std::move(reactor));
}

}  // namespace weft::reactor_internal
