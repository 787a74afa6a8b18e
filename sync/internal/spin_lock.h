// sync/internal/spin_lock.h: the lock that guards each primitive's wait queue. Held only for a
// few pointer updates, never across a wait; test-and-test-and-set with pause, then yield.

#ifndef WEFT_SYNC_INTERNAL_SPIN_LOCK_H_
#define WEFT_SYNC_INTERNAL_SPIN_LOCK_H_

#include <thread>

#include "absl/base/thread_annotations.h"
#include "weft/base/atomic.h"
#include "weft/base/cpu_relax.h"

namespace weft::sync_internal {

using ::weft::CpuRelax;

class ABSL_LOCKABLE SpinLock {
 public:
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    for (int spins = 0;;) {
      // acquire: the critical section sees what the previous holder wrote.
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      // relaxed: only waiting for a chance; the exchange above decides.
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 128) {
          CpuRelax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  // try_lock: takes the lock if it is free, without waiting. The relaxed load first spares a
  // held lock's line the exclusive transfer that a failing exchange would cost its holder.
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    // acquire (the exchange): as lock().
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() ABSL_UNLOCK_FUNCTION() {
    // release: publishes the critical section to the next holder.
    locked_.store(false, std::memory_order_release);
  }

 private:
  atomic<bool> locked_{false};
};

}  // namespace weft::sync_internal

#endif  // WEFT_SYNC_INTERNAL_SPIN_LOCK_H_
