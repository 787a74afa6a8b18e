// reactor/internal/op_list.h: an intrusive doubly linked FIFO of IoOps (through IoOp::next and
// IoOp::prev), used by both backends for their waiting, ready and in-flight lists.

#ifndef WEFT_REACTOR_INTERNAL_OP_LIST_H_
#define WEFT_REACTOR_INTERNAL_OP_LIST_H_

#include "reactor/reactor.h"

namespace weft::reactor_internal {

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

}  // namespace weft::reactor_internal

#endif  // WEFT_REACTOR_INTERNAL_OP_LIST_H_
