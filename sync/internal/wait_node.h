// sync/internal/wait_node.h: WaitNode, one waiting call's entry in a primitive's wait queue
// (sync/internal/wait_queue.h). Its own header because every Waiter that can block keeps one
// (Waiter::own_node, sync/waiter.h).

#ifndef WEFT_SYNC_INTERNAL_WAIT_NODE_H_
#define WEFT_SYNC_INTERNAL_WAIT_NODE_H_

#include "weft/base/atomic.h"

namespace weft {
class Waiter;
namespace sync_internal {

enum NodeState : int { kWaiting = 0, kGranted = 1, kClosed = 2 };

struct WaitNode {
  Waiter* waiter = nullptr;
  WaitNode* prev = nullptr;
  WaitNode* next = nullptr;
  bool queued = false;
  // Written under the primitive's lock by the releaser (release); read by the parked waiter
  // without the lock (acquire).
  atomic<int> state{kWaiting};
};

}  // namespace sync_internal
}  // namespace weft

#endif  // WEFT_SYNC_INTERNAL_WAIT_NODE_H_
