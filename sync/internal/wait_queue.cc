// sync/internal/wait_queue.cc: the out-of-line part of the shared wait machinery.

#include "weft/sync/internal/wait_queue.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

namespace weft::sync_internal {

void AbortIfWaitedOn(SpinLock& lock, std::initializer_list<const WaitQueue*> queues,
                     const char* what) {
  lock.lock();
  bool waiting = false;
  for (const WaitQueue* q : queues) waiting = waiting || !q->empty();
  lock.unlock();
  if (!waiting) return;
  std::fprintf(stderr, "weft: %s destroyed while fibers or threads wait on it\n", what);
  std::fflush(stderr);
  std::abort();
}

bool ReserveWakeList(std::vector<Waiter*>& wake, std::size_t n) noexcept {
  try {
    wake.reserve(n);
    return true;
  } catch (const std::bad_alloc&) {  // (and length_error cannot happen: n counts live nodes)
    return false;
  }
}

void WakeAndUnlock(SpinLock& lock, WaitQueue& q, NodeState state, std::size_t max) noexcept {
  const std::size_t n = std::min(max, q.size());
  if (n <= 1) {  // none or one: no list to allocate
    Waiter* w = n == 1 ? Grant(q.pop_front(), state) : nullptr;
    lock.unlock();
    if (w != nullptr) w->notify();
    return;
  }
  std::vector<Waiter*> wake;
  if (!ReserveWakeList(wake, n)) [[unlikely]] {
    for (std::size_t i = 0; i < n; ++i) Grant(q.pop_front(), state)->notify();
    lock.unlock();
    return;
  }
  if (n == q.size()) {
    wake.resize(n);  // within the reservation: no allocation
    q.drain([state](WaitNode* node) { return Grant(node, state); }, wake.data());
  } else {
    for (std::size_t i = 0; i < n; ++i) wake.push_back(Grant(q.pop_front(), state));
  }
  lock.unlock();
  for (Waiter* w : wake) w->notify();
}

}  // namespace weft::sync_internal
