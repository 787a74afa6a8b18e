// sync/waiter.cc: the thread Waiter (a futex word with three states) and the per-thread provider.
//
//   kEmpty --wait--> kParked --notify--> kNotified --wait returns--> kEmpty
//   kEmpty --notify--> kNotified --wait (consumes)--> kEmpty
// notify wakes the futex only if it found kParked: an uncontended notify is one exchange.

#include "weft/sync/waiter.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "weft/base/futex.h"
#include "weft/base/thread_exit.h"

namespace weft {
namespace {

class ThreadWaiter final : public Waiter {
 public:
  // Spins ~20 us of pause on this machine before a futex sleep; never interrupted.
  ThreadWaiter() : Waiter(/*spins_before_park=*/2000) {}
  void Renew(std::uint64_t identity) { set_identity(identity); }
  bool wait(std::optional<SyncClock::time_point> deadline) override {
    // acquire (here and below): pairs with notify's release; what the notifier did before is
    // visible once we consume its permit.
    if (state_.exchange(kEmpty, std::memory_order_acquire) == kNotified) return true;
    for (;;) {
      std::uint32_t expected = kEmpty;
      if (!state_.compare_exchange_strong(expected, kParked, std::memory_order_acquire)) {
        return Consume();  // only notify moves kEmpty elsewhere: it is kNotified
      }
      auto timeout = std::chrono::microseconds(1000000);
      if (deadline) {
        // Compared before subtracting: a deadline far in the past (time_point::min()) would
        // overflow the difference into a wait of centuries.
        const SyncClock::time_point now = SyncClock::now();
        if (*deadline <= now) return Withdraw();
        timeout = std::min(timeout, std::chrono::ceil<std::chrono::microseconds>(*deadline - now));
      }
      base_internal::FutexWait(state_, kParked, timeout);
      // Every way out of kParked that is ours is a CAS from kParked, so a notify racing us is
      // never overwritten.
      expected = kParked;
      if (!state_.compare_exchange_strong(expected, kEmpty, std::memory_order_acquire)) {
        return Consume();
      }
      // Timeout or spurious wake, back to kEmpty: park again (the deadline is checked above).
    }
  }

  sync_internal::WaitNode& own_node() override { return node_; }

  void notify() override {
    // release: publishes what we did before notifying. The futex is woken only if the waiter
    // is (or is about to be) asleep on it.
    if (state_.exchange(kNotified, std::memory_order_release) == kParked) {
      base_internal::FutexWake(state_, 1);
    }
  }

 private:
  // Consume: the state is kNotified (only notify sets it); take the permit.
  bool Consume() {
    // relaxed: the acquire that observed kNotified already ordered us after the notifier.
    state_.store(kEmpty, std::memory_order_relaxed);
    return true;
  }
  // Withdraw: the deadline passed while kParked. A notify that got in first still counts.
  bool Withdraw() {
    std::uint32_t expected = kParked;
    // acquire: pairs with notify's release when we lose to it.
    if (state_.compare_exchange_strong(expected, kEmpty, std::memory_order_acquire)) return false;
    return Consume();
  }

  static constexpr std::uint32_t kEmpty = 0;
  static constexpr std::uint32_t kNotified = 1;
  static constexpr std::uint32_t kParked = 2;
  std::atomic<std::uint32_t> state_{kEmpty};
  sync_internal::WaitNode node_;
};

// Thread waiters are never destroyed: a notifier may still be calling notify() on a waiter whose
// thread has just exited (it took the Waiter* under a primitive's lock and notifies after
// unlocking). An exiting thread hands its waiter to a free list for the next thread; a late
// notify then leaves a stale permit there, which every wait tolerates (waits re-check their
// condition). The pool is as large as the most threads ever alive at once.
class WaiterPool {
 public:
  ThreadWaiter* Take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return new ThreadWaiter();  // never deleted, see above
    ThreadWaiter* w = free_.back();
    free_.pop_back();
    return w;
  }
  void Give(ThreadWaiter* w) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(w);
  }

 private:
  std::mutex mu_;
  std::vector<ThreadWaiter*> free_;
};

WaiterPool& Pool() {
  static WaiterPool* pool = new WaiterPool();  // outlives every thread
  return *pool;
}

// The fast path reads a plain pointer (constant-initialised: no TLS init guard per access). The
// waiter goes back to the pool at thread exit through a ThreadExitKey, not a thread_local
// destructor (base/thread_exit.h says why).
constinit thread_local ThreadWaiter* t_waiter = nullptr;
constinit thread_local WaiterProvider t_provider = nullptr;
constinit thread_local void* t_provider_arg = nullptr;

void GiveBack(void* w) {
#if !defined(_WIN32)
  // Native TLS outlives the key destructors: a later one that waits takes a fresh waiter (and
  // sets the key again, which POSIX answers with another destructor round). Under MinGW's
  // emulated TLS the storage may be gone already, so it is left alone there.
  t_waiter = nullptr;
#endif
  Pool().Give(static_cast<ThreadWaiter*>(w));
}

base_internal::ThreadExitKey& ExitKey() {
  static auto* key = new base_internal::ThreadExitKey(&GiveBack);  // never destroyed
  return *key;
}

// Thread identities: the top bit set, then a counter (fibers' are below 2^63).
std::atomic<std::uint64_t> g_next_thread_identity{1};

[[gnu::noinline]] Waiter& InitThreadWaiter() {
  ThreadWaiter* w = Pool().Take();
  // relaxed: only uniqueness matters. A new identity for each thread, also for a recycled
  // waiter: a Mutex its previous thread died holding stays that thread's.
  w->Renew((std::uint64_t{1} << 63) |
           g_next_thread_identity.fetch_add(1, std::memory_order_relaxed));
  ExitKey().Set(w);
  t_waiter = w;
  return *w;
}

}  // namespace

Waiter* sync_internal::CurrentWaiterIfReady() noexcept {
  if (t_provider != nullptr) [[unlikely]] {
    if (Waiter* w = t_provider(t_provider_arg)) return w;
  }
  return t_waiter;
}

Waiter& current_waiter() {
  if (Waiter* w = sync_internal::CurrentWaiterIfReady()) [[likely]]
    return *w;
  return InitThreadWaiter();
}

void set_waiter_provider(WaiterProvider provider, void* arg) {
  t_provider = provider;
  t_provider_arg = arg;
}

}  // namespace weft
