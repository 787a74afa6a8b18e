// sync/coordination.cc: Semaphore, WaitGroup, Event and Barrier over one WaitList each.

#include "weft/sync/coordination.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <system_error>
#include <thread>
#include <vector>

namespace weft {

using sync_internal::Grant;
using sync_internal::kGranted;
using sync_internal::kWaiting;
using sync_internal::Park;
using sync_internal::ParkResult;
using sync_internal::WaitNode;

WaitList::~WaitList() {
  sync_internal::AbortIfWaitedOn(lock_, {&queue_}, "a Semaphore, WaitGroup, Event or Barrier");
}

WaitNode& WaitList::QueueAndUnlock() {
  WaitNode& node = QueueOwnNode(queue_);
  lock_.unlock();
  return node;
}

void WaitList::QueueAndUnlock(WaitNode& node) {
  sync_internal::QueueNode(queue_, node, current_waiter());
  lock_.unlock();
}

template <typename OnAbort>
Result<void> WaitList::Withdraw(WaitNode& node, ParkResult r, OnAbort on_abort) {
  if (r == ParkResult::kWoken) return {};
  lock_.lock();
  if (node.state.load(std::memory_order_relaxed) == kWaiting) {
    queue_.remove(&node);
    on_abort();
    lock_.unlock();
    return sync_internal::ErrorOf(r);
  }
  lock_.unlock();
  return {};  // granted as we gave up: it stands
}

template <typename OnAbort>
Result<void> WaitList::WaitQueued(const WaitOptions& options, OnAbort on_abort) {
  WaitNode& node = QueueAndUnlock();
  ParkResult r = Park(
      *node.waiter, [&] { return node.state.load(std::memory_order_acquire) != kWaiting; }, options,
      what_, this);
  return Withdraw(node, r, on_abort);
}

bool WaitList::Awaiter::await_ready() {
  list_.lock_.lock();
  bool unlocked = false;
  if (step_(list_, WaitStep::kReady, &unlocked)) {
    if (!unlocked) list_.lock_.unlock();
    return true;
  }
  list_.QueueAndUnlock(node_);
  return false;
}

bool WaitList::Awaiter::Done(void* self) {
  // acquire: pairs with Grant's release.
  return static_cast<Awaiter*>(self)->node_.state.load(std::memory_order_acquire) != kWaiting;
}

bool WaitList::Awaiter::await_suspend(std::coroutine_handle<> h) {
  return park_.Begin(*node_.waiter, h, list_.what_, &list_);
}

Result<void> WaitList::Awaiter::await_resume() {
  if (!queued()) return {};
  return list_.Withdraw(node_, park_.End(), [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    (void)step_(list_, WaitStep::kAbort, nullptr);
  });
}

namespace {
// Fault injection for tests: WEFT_TEST_NOTIFY_DELAY_MS holds a release between unlocking and
// notifying the waiters it granted, the window in which a woken fiber's runtime may go away.
void TestDelayBeforeNotify() {
  if (const char* ms = std::getenv("WEFT_TEST_NOTIFY_DELAY_MS")) [[unlikely]] {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
  }
}
}  // namespace

void WaitList::WakeAllInBatchesAndUnlock() {
  // A fixed batch on the stack: nothing here allocates, so nothing throws with lock_ held.
  constexpr std::size_t kBatch = 64;
  Waiter* wake[kBatch];
  for (;;) {
    std::size_t n = 0;
    while (n < kBatch && !queue_.empty()) wake[n++] = Grant(queue_.pop_front(), kGranted);
    bool more = !queue_.empty();
    lock_.unlock();
    TestDelayBeforeNotify();
    for (std::size_t i = 0; i < n; ++i) wake[i]->notify();
    if (!more) return;
    lock_.lock();
  }
}

void WaitList::WakeAllAndUnlock() { WakeAndUnlock(lock_, queue_, kGranted); }

// ---- Semaphore ----

Result<void> Semaphore::acquire(const WaitOptions& options) {
  lock_.lock();
  if (count_ > 0) {
    --count_;
    lock_.unlock();
    return {};
  }
  // A permit released to us is handed over directly (release skips count_), so aborting has
  // nothing to undo.
  return WaitQueued(options, [] {});
}

WaitList::Awaiter Semaphore::async_acquire(const WaitOptions& options) {
  return AsyncWait(
      [](WaitList& list, WaitStep step, bool*) {
        auto& self = static_cast<Semaphore&>(list);
        if (step != WaitStep::kReady || self.count_ <= 0) return false;
        --self.count_;
        return true;
      },
      options);
}

bool Semaphore::try_acquire() {
  lock_.lock();
  bool ok = count_ > 0;
  if (ok) --count_;
  lock_.unlock();
  return ok;
}

void Semaphore::release(std::int64_t n) {
  lock_.lock();
  // Permits go to waiters first (handed over: they skip count_), the rest to count_.
  const std::size_t handed =
      n > 0 ? std::min(queue_.size(), static_cast<std::size_t>(n)) : std::size_t{0};
  count_ += n - static_cast<std::int64_t>(handed);
  WakeAndUnlock(lock_, queue_, kGranted, handed);
}

std::int64_t Semaphore::available() const {
  lock_.lock();
  std::int64_t c = count_;
  lock_.unlock();
  return c;
}

// ---- WaitGroup ----

Result<void> WaitGroup::add(std::int64_t n) {
  lock_.lock();
  if (count_ + n < 0) {
    lock_.unlock();
    return std::errc::invalid_argument;
  }
  count_ += n;
  if (count_ == 0) {
    WakeAllAndUnlock();
  } else {
    lock_.unlock();
  }
  return {};
}

Result<void> WaitGroup::wait(const WaitOptions& options) {
  lock_.lock();
  if (count_ == 0) {
    lock_.unlock();
    return {};
  }
  return WaitQueued(options, [] {});
}

WaitList::Awaiter WaitGroup::async_wait(const WaitOptions& options) {
  return AsyncWait(
      [](WaitList& list, WaitStep step, bool*) {
        return step == WaitStep::kReady && static_cast<WaitGroup&>(list).count_ == 0;
      },
      options);
}

std::int64_t WaitGroup::count() const {
  lock_.lock();
  std::int64_t c = count_;
  lock_.unlock();
  return c;
}

// ---- Event ----

void Event::set() {
  lock_.lock();
  set_ = true;
  WakeAllInBatchesAndUnlock();  // no waiter queues once set_ is true
}

bool Event::is_set() const {
  lock_.lock();
  bool s = set_;
  lock_.unlock();
  return s;
}

Result<void> Event::wait(const WaitOptions& options) {
  lock_.lock();
  if (set_) {
    lock_.unlock();
    return {};
  }
  return WaitQueued(options, [] {});
}

WaitList::Awaiter Event::async_wait(const WaitOptions& options) {
  return AsyncWait([](WaitList& list, WaitStep step,
                      bool*) { return step == WaitStep::kReady && static_cast<Event&>(list).set_; },
                   options);
}

// ---- Barrier ----

bool Barrier::Arrive() {
  if (++arrived_ != parties_) return false;
  arrived_ = 0;
  ++generation_;
  WakeAllAndUnlock();
  return true;
}

Result<bool> Barrier::arrive_and_wait(const WaitOptions& options) {
  lock_.lock();
  if (Arrive()) return true;
  Result<void> r = WaitQueued(options, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { --arrived_; });
  if (!r) return r.error();
  return false;
}

Barrier::ArriveAwaiter::ArriveAwaiter(Barrier& barrier, const WaitOptions& options)
    : inner_(barrier.AsyncWait(
          [](WaitList& list, WaitStep step, bool* unlocked) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            auto& self = static_cast<Barrier&>(list);
            if (step == WaitStep::kAbort) {
              --self.arrived_;  // it gives up: its arrival is withdrawn
              return false;
            }
            return *unlocked = self.Arrive();
          },
          options)) {}

Barrier::ArriveAwaiter Barrier::async_arrive_and_wait(const WaitOptions& options) {
  return ArriveAwaiter(*this, options);
}

}  // namespace weft
