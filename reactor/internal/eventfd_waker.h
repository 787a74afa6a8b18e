// reactor/internal/eventfd_waker.h: the cross-thread wake of both backends: an eventfd that the
// poller watches, written at most once per batch of wakes (wake() from many threads costs one
// write until the poller has seen it and re-armed).

#ifndef WEFT_REACTOR_INTERNAL_EVENTFD_WAKER_H_
#define WEFT_REACTOR_INTERNAL_EVENTFD_WAKER_H_

#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "weft/base/atomic.h"

namespace weft::reactor_internal {

class EventfdWaker {
 public:
  EventfdWaker() = default;
  explicit EventfdWaker(int fd) : fd_(fd) {}
  // set_fd: for owners that create the eventfd after construction; before any wake().
  void set_fd(int fd) { fd_ = fd; }
  int fd() const { return fd_; }

  // wake: any thread.
  void wake() {
    // acq_rel: one write per batch of wakes; rearm()'s release store opens the next batch.
    if (pending_.exchange(true, std::memory_order_acq_rel)) return;
    std::uint64_t one = 1;
    ssize_t ignored = ::write(fd_, &one, sizeof one);
    (void)ignored;
  }
  // rearm: the poller, once it has consumed the eventfd's count.
  void rearm() {
    // release: a wake() after this point writes again.
    pending_.store(false, std::memory_order_release);
  }

 private:
  int fd_ = -1;
  weft::atomic<bool> pending_{false};
};

}  // namespace weft::reactor_internal

#endif  // WEFT_REACTOR_INTERNAL_EVENTFD_WAKER_H_
