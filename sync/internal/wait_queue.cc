// sync/internal/wait_queue.cc: the out-of-line part of the shared wait machinery.

#include "weft/sync/internal/wait_queue.h"

#include <cstdio>
#include <cstdlib>

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

}  // namespace weft::sync_internal
