// reactor/internal/faulty_reactor.cc: a Reactor that wraps a backend and injects the faults
// base/fault.h describes (site kIo: read, write, readv, writev, recv, send, recvmsg, sendmsg;
// site kAccept: accept). Reactor::create wraps every backend in one while faults are on
// (WEFT_FAULTS); with them off it does not exist, so it costs nothing.
//
// A fault either shortens the operation before it reaches the backend (a short transfer: a
// shorter length, or fewer buffers of a readv or writev, which the kernel may always do), or
// completes it with an error without reaching the backend. Such a completion is delivered from
// the next poll(), never from inside the submitting call, as every backend does; a poll with
// one waiting does not block. Bad input (a bad fd or buffer) is left to the backend's checks.

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "weft/base/fault.h"
#include "weft/reactor/internal/backends.h"
#include "weft/reactor/reactor.h"

namespace weft::reactor_internal {
namespace {

using fault::Kind;
using fault::Site;

class FaultyReactor final : public Reactor {
 public:
  explicit FaultyReactor(std::unique_ptr<Reactor> inner) : inner_(std::move(inner)) {}

  ReactorBackend backend() const override { return inner_->backend(); }
  std::size_t pending_ops() const override { return inner_->pending_ops() + failed_.size(); }
  void wake() override { inner_->wake(); }

  Result<int> poll(std::optional<ReactorClock::time_point> deadline) override {
    int delivered = Deliver();
    // Something delivered (or waiting, submitted by a callback just now): do not block.
    if (delivered != 0 || !failed_.empty()) deadline = ReactorClock::time_point::min();
    Result<int> r = inner_->poll(deadline);
    if (!r.ok()) return r;
    return delivered + *r + Deliver();
  }

  void read(IoOp& op, int fd, void* buf, std::size_t len, std::int64_t offset) override {
    if (Data(op, fd, buf, len, /*writes=*/false)) inner_->read(op, fd, buf, len, offset);
  }
  void write(IoOp& op, int fd, const void* buf, std::size_t len, std::int64_t offset) override {
    if (Data(op, fd, buf, len, /*writes=*/true)) inner_->write(op, fd, buf, len, offset);
  }
  void recv(IoOp& op, int fd, void* buf, std::size_t len, int flags) override {
    if (Data(op, fd, buf, len, /*writes=*/false)) inner_->recv(op, fd, buf, len, flags);
  }
  void send(IoOp& op, int fd, const void* buf, std::size_t len, int flags) override {
    if (Data(op, fd, buf, len, /*writes=*/true)) inner_->send(op, fd, buf, len, flags);
  }
  void readv(IoOp& op, int fd, const IoVec* iov, int iovcnt) override {
    if (Vector(op, fd, iov, iovcnt, /*writes=*/false)) inner_->readv(op, fd, iov, iovcnt);
  }
  void writev(IoOp& op, int fd, const IoVec* iov, int iovcnt) override {
    if (Vector(op, fd, iov, iovcnt, /*writes=*/true)) inner_->writev(op, fd, iov, iovcnt);
  }
  void send_zerocopy(IoOp& op, int fd, const void* buf, std::size_t len, int flags) override {
    if (Data(op, fd, buf, len, /*writes=*/true)) inner_->send_zerocopy(op, fd, buf, len, flags);
  }
  bool pooled_receives() const override { return inner_->pooled_receives(); }
  void recv_pooled(IoOp& op, int fd, PooledBuffer* out, int flags) override {
    if (out != nullptr) *out = PooledBuffer{};
    char any = 0;  // (a short transfer cannot be imposed on the kernel's buffer: not injected)
    std::size_t len = Reactor::kPooledBufferSize;
    if (out == nullptr || Data(op, fd, &any, len, /*writes=*/false)) {
      inner_->recv_pooled(op, fd, out, flags);
    }
  }
  void recvmsg(IoOp& op, int fd, MsgHdr* msg, int flags) override {
    if (Datagram(op, fd, msg)) inner_->recvmsg(op, fd, msg, flags);
  }
  void sendmsg(IoOp& op, int fd, const MsgHdr* msg, int flags) override {
    if (Datagram(op, fd, msg)) inner_->sendmsg(op, fd, msg, flags);
  }
#ifndef _WIN32
  void openat(IoOp& op, int dirfd, const char* path, int flags, unsigned mode) override {
    inner_->openat(op, dirfd, path, flags, mode);
  }
  void fsync(IoOp& op, int fd, bool datasync) override { inner_->fsync(op, fd, datasync); }
  void statx(IoOp& op, int fd, struct statx* out) override { inner_->statx(op, fd, out); }
#endif
  void accept(IoOp& op, int fd, sockaddr* addr, socklen_t* addrlen) override {
    if (fd >= 0 && fault::Hit(Site::kAccept)) {
      // Soft: EINTR, ECONNABORTED (a connection reset before it was taken: accept again);
      // hard: EMFILE.
      std::uint64_t pick = fault::Random() % (fault::Hard() ? 3 : 2);
      if (pick == 0) return Fail(op, -EINTR, Kind::kEintr);
      if (pick == 1) return Fail(op, -ECONNABORTED, Kind::kConnAborted);
      return Fail(op, -EMFILE, Kind::kEmfile);
    }
    inner_->accept(op, fd, addr, addrlen);
  }
  void accept_multishot(IoOp& op, int fd) override { inner_->accept_multishot(op, fd); }
  void connect(IoOp& op, int fd, const sockaddr* addr, socklen_t addrlen) override {
    inner_->connect(op, fd, addr, addrlen);
  }
  void poll_readiness(IoOp& op, int fd, std::uint32_t events) override {
    inner_->poll_readiness(op, fd, events);
  }
  void timeout(IoOp& op, ReactorClock::time_point when) override { inner_->timeout(op, when); }
  void cancel(IoOp& op) override {
    // An op failed here completes with its error at the next poll: that is its one completion
    // (it "completed first"); the backend never saw it.
    for (const Failed& f : failed_) {
      if (f.op == &op) return;
    }
    inner_->cancel(op);
  }
  void close(IoOp& op, int fd) override { inner_->close(op, fd); }
  void close(int fd) override { inner_->close(fd); }

 private:
  struct Failed {
    IoOp* op;
    std::int64_t result;
  };

  // Data: a fault for a read or write of len bytes at buf: true to submit (len perhaps
  // shortened), false if the op was failed.
  template <typename Buf>
  bool Data(IoOp& op, int fd, Buf* buf, std::size_t& len, bool writes) {
    if (fd < 0 || BadIoRequest(buf, len) || len == 0 || !fault::Hit(Site::kIo)) return true;
    // Soft: EINTR, EAGAIN, a short transfer (not of one byte); hard: ECONNRESET, and for a
    // write EPIPE.
    std::uint64_t pick = fault::Random() % (fault::Hard() ? 5 : 3);
    switch (pick) {
      case 0:
        Fail(op, -EINTR, Kind::kEintr);
        return false;
      case 1:
        Fail(op, -EAGAIN, Kind::kEagain);
        return false;
      case 2:
        if (len > 1) {
          len = 1 + fault::Random() % (len - 1);
          fault::Injected(Kind::kShort);
        }
        return true;
      case 3:
        Fail(op, -ECONNRESET, Kind::kConnReset);
        return false;
      default:
        if (writes) {
          Fail(op, -EPIPE, Kind::kPipe);
        } else {
          Fail(op, -ECONNRESET, Kind::kConnReset);
        }
        return false;
    }
  }

  // Vector: Data for a readv or writev; a short transfer takes fewer buffers.
  bool Vector(IoOp& op, int fd, const IoVec* iov, int& iovcnt, bool writes) {
    if (iov == nullptr || iovcnt <= 0) return true;  // the backend's -EINVAL
    std::size_t buffers = static_cast<std::size_t>(iovcnt);
    if (!Data(op, fd, iov, buffers, writes)) return false;
    iovcnt = static_cast<int>(buffers);
    return true;
  }

  // Datagram: a fault for a recvmsg or sendmsg: EINTR or EAGAIN (a datagram is never cut
  // short, and a datagram socket has no connection to reset).
  bool Datagram(IoOp& op, int fd, const MsgHdr* msg) {
    if (fd < 0 || BadMsg(msg) || !fault::Hit(Site::kIo)) return true;
    if (fault::Random() % 2 == 0) {
      Fail(op, -EINTR, Kind::kEintr);
    } else {
      Fail(op, -EAGAIN, Kind::kEagain);
    }
    return false;
  }

  void Fail(IoOp& op, std::int64_t result, Kind kind) {
    fault::Injected(kind);
    failed_.push_back({&op, result});
  }

  // Deliver: completes the ops failed before this call (a callback may fail more: next time).
  int Deliver() {
    if (failed_.empty()) return 0;
    std::vector<Failed> now;
    now.swap(failed_);
    for (const Failed& f : now) f.op->on_complete(*f.op, f.result, 0);
    return static_cast<int>(now.size());
  }

  std::unique_ptr<Reactor> inner_;
  std::vector<Failed> failed_;
};

}  // namespace

std::unique_ptr<Reactor> MakeFaultyReactor(std::unique_ptr<Reactor> inner) {
  return std::make_unique<FaultyReactor>(std::move(inner));
}

}  // namespace weft::reactor_internal
