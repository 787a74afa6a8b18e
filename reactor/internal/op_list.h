// reactor/internal/op_list.h: an intrusive doubly linked FIFO of IoOps (through IoOp::next and
// IoOp::prev), used by the backends for their waiting, ready and in-flight lists; the ready list
// that the epoll and IOCP backends finish every operation through; and StartOp, the bookkeeping
// all three backends do as an operation starts.

#ifndef WEFT_REACTOR_INTERNAL_OP_LIST_H_
#define WEFT_REACTOR_INTERNAL_OP_LIST_H_

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "weft/reactor/reactor.h"

namespace weft::reactor_internal {

// StartOp: the bookkeeping every backend does as it takes an operation: its fd, pending, and the
// flags of the op's previous use cleared.
inline void StartOp(IoOp& op, int fd) {
  op.fd = fd;
  op.pending = true;
  op.cancel_requested = false;
  op.cancel_unsent = false;
  op.timed_out = false;
}

struct OpList {
  IoOp* head = nullptr;
  IoOp* tail = nullptr;
  bool empty() const { return head == nullptr; }
  void push(IoOp* op) {
    op->next = nullptr;
    op->prev = tail;
    if (tail != nullptr) {
      tail->next = op;
    } else {
      head = op;
    }
    tail = op;
  }
  void remove(IoOp* op) {
    if (op->prev != nullptr) {
      op->prev->next = op->next;
    } else {
      head = op->next;
    }
    if (op->next != nullptr) {
      op->next->prev = op->prev;
    } else {
      tail = op->prev;
    }
    op->next = op->prev = nullptr;
  }
};

// OpOfTimer: the IoOp whose `timer` a TimerHeap handed back.
inline IoOp* OpOfTimer(TimerNode* node) {
  return reinterpret_cast<IoOp*>(reinterpret_cast<char*>(node) - offsetof(IoOp, timer));
}

// ReadyList: operations whose final result is known, waiting for poll() to deliver them, so that
// callbacks run only inside poll().
class ReadyList {
 public:
  // finish: records op's final result and queues it; its deadline, if still queued, is cancelled.
  void finish(IoOp& op, std::int64_t result, TimerHeap& timers) {
    if (op.timer.queued()) timers.cancel(op.timer);
    op.cancel_requested = true;  // final: a cancel() before delivery has nothing left to do
    op.result = result;
    ops_.push(&op);
  }

  // expire: pops every deadline due by now. A timeout operation finishes with 0; any other is
  // marked timed out and handed to abort(op), which ends it the backend's way (its -ECANCELED is
  // delivered as -ETIMEDOUT) and returns how many operations that finished at once (0 or 1).
  // Returns the number finished here.
  template <typename Abort>
  int expire(TimerHeap& timers, Abort abort) {
    int n = 0;
    ReactorClock::time_point now = ReactorClock::now();
    while (TimerNode* node = timers.pop_due(now)) {
      IoOp* op = OpOfTimer(node);
      if (op->kind == IoOp::Kind::kTimeout) {
        finish(*op, 0, timers);
        ++n;
      } else {
        op->timed_out = true;
        n += abort(*op);
      }
    }
    return n;
  }

  // deliver: runs the queued operations' callbacks, oldest first, counting each off *pending.
  // An operation whose deadline passed reports -ETIMEDOUT where it was finished as cancelled.
  int deliver(std::size_t& pending) {
    int n = 0;
    while (IoOp* op = ops_.head) {
      ops_.remove(op);
      op->pending = false;
      --pending;
      ++n;
      std::int64_t r = op->result;
      if (r == -ECANCELED && op->timed_out) r = -ETIMEDOUT;
      op->on_complete(*op, r, 0);
    }
    return n;
  }

 private:
  OpList ops_;
};

}  // namespace weft::reactor_internal

#endif  // WEFT_REACTOR_INTERNAL_OP_LIST_H_
