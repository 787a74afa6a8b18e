// sync/cancellation.cc: the shared state of a cancellation source: a flag and an intrusive list
// of registrations under a spin lock. cancel() takes the registrations off the list one at a
// time and runs each callback with the lock released, so a callback may park (lock a Mutex, send
// on a Channel) or register on the token without deadlocking. Deregister of a registration whose
// callback is running at that moment waits for it by parking (never by spinning a worker: the
// callback's fiber may need that worker to finish), which keeps the promise that a callback is
// not running once Deregister returns.
//
// A linked source registers on its parent's list a registration that cancels it. Deadlines are
// kept twice: in each state, where every wait and is_cancelled() read them (walking up the
// links), so that waits end on time without a thread; and in the deadline thread's heap, which
// cancels the source at its deadline, so that callbacks (and linked sources) run then too.

#include "weft/sync/cancellation.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <system_error>
#include <thread>

#include "internal/spin_lock.h"  // a private header here (srcs)
#include "weft/base/atomic.h"
#include "weft/base/fault.h"
#include "weft/timer/timer_heap.h"

namespace weft {
namespace sync_internal {

constexpr std::int64_t kNoDeadline = std::numeric_limits<std::int64_t>::max();

struct CancelState;
// StopLink: what a std::stop_callback on a std::stop_token runs to cancel a token made from it
// (CancellationToken(std::stop_token)). Weak: the state may be going while a stop is requested.
struct StopLink {
  std::weak_ptr<CancelState> state;
  void operator()() const noexcept;
};
// StopBridge: the std::stop_source of CancellationToken::stop_token, stopped by a registration
// on the state's list.
struct StopBridge {
  std::stop_source source;
  CancelRegistration reg;
};

struct CancelState : std::enable_shared_from_this<CancelState> {
  CancelState() = default;
  CancelState(const CancelState&) = delete;
  CancelState& operator=(const CancelState&) = delete;
  ~CancelState();

  atomic<bool> cancelled{false};
  // deadline: steady_clock ticks, kNoDeadline if none. relaxed everywhere: a hint for waits and
  // is_cancelled(); the deadline thread's cancel, ordered by the lock, is what callbacks see.
  std::atomic<std::int64_t> deadline{kNoDeadline};
  // parent: the source this one is linked to (set before the state is shared, never changed),
  // and the registration on its list that cancels this one.
  std::shared_ptr<CancelState> parent;
  CancelRegistration parent_reg;
  // Set by the first Arm (under the deadline thread's mutex), never cleared: the destructor then
  // takes the entry off the heap if it is still there. (Not `deadline`: CancelOnDeadlineThread
  // arms without one.) relaxed: the destructor runs after every owner let go, which the
  // shared_ptr count orders after any Arm.
  std::atomic<bool> armed{false};
  // force_pending: armed by CancelOnDeadlineThread (a cancel requested now, with no deadline of
  // its own) and not fired yet; a later cancel_at neither moves nor removes that entry. Guarded
  // by the deadline thread's mutex.
  bool force_pending = false;
  // On the deadline thread's heap while a deadline is armed (guarded by that thread's mutex).
  struct DeadlineEntry {
    TimerNode node;  // first member: the heap hands back &node
    CancelState* state;
  } deadline_entry{{}, this};
  SpinLock lock;
  CancelRegistration* head ABSL_GUARDED_BY(lock) = nullptr;
  // The callback cancel() runs now (taken off the list), the execution that runs it, and the
  // one Deregister that waits for it to return (a registration has one owner).
  CancelRegistration* running ABSL_GUARDED_BY(lock) = nullptr;
  Waiter* canceller ABSL_GUARDED_BY(lock) = nullptr;
  Waiter* done_waiter ABSL_GUARDED_BY(lock) = nullptr;
  // bridge: made by the first stop_token() call, then never changed.
  std::unique_ptr<StopBridge> bridge ABSL_GUARDED_BY(lock);
  // stop_link: for a token made from a std::stop_token; set before the state is shared.
  std::optional<std::stop_callback<StopLink>> stop_link;
};

bool Register(CancelState* state, CancelRegistration* reg) {
  state->lock.lock();
  // relaxed: read under the lock that cancel() sets it under.
  if (state->cancelled.load(std::memory_order_relaxed)) {
    state->lock.unlock();
    return false;
  }
  reg->prev = nullptr;
  reg->next = state->head;
  if (state->head != nullptr) state->head->prev = reg;
  state->head = reg;
  reg->linked = true;
  state->lock.unlock();
  return true;
}

namespace {
// Unlink: takes a linked registration off the state's list (under state->lock); false if it was
// not linked (its callback ran, runs now, or never will).
bool Unlink(CancelState* state, CancelRegistration* reg)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(state->lock) {
  if (!reg->linked) return false;
  if (reg->prev != nullptr) reg->prev->next = reg->next;
  if (reg->next != nullptr) reg->next->prev = reg->prev;
  if (state->head == reg) state->head = reg->next;
  reg->linked = false;
  return true;
}
}  // namespace

void DeregisterNoWait(CancelState* state, CancelRegistration* reg) {
  state->lock.lock();
  (void)Unlink(state, reg);
  state->lock.unlock();
}

void Deregister(CancelState* state, CancelRegistration* reg) {
  state->lock.lock();
  if (Unlink(state, reg)) {
    state->lock.unlock();
    return;
  }
  if (state->running != reg) {  // ran already, or never will
    state->lock.unlock();
    return;
  }
  // Its callback runs now. From inside that callback (the canceller's own execution): nothing to
  // wait for, and waiting would never end.
  Waiter* self = CurrentWaiterIfReady();
  if (self == nullptr) {
    state->lock.unlock();
    self = &current_waiter();  // may allocate a thread's waiter: not under the spin lock
    state->lock.lock();
  }
  std::optional<std::chrono::steady_clock::time_point> spinning_since;
  while (state->running == reg && state->canceller != self) {
    if (!self->can_block()) {
      // A stackless task cannot park here (it would stall its worker): it spins until the
      // callback, which runs on the cancelling execution, returns. If that execution waits for
      // this worker (a fiber parked in the callback, on this worker only), that never happens:
      // after a second, a message and an abort instead of a silent hang.
      state->lock.unlock();
      const auto now = std::chrono::steady_clock::now();
      if (!spinning_since) spinning_since = now;
      if (now - *spinning_since > std::chrono::seconds(1)) {
        std::fprintf(stderr,
                     "weft: a task has waited 1 s for a cancellation callback to return (it "
                     "deregisters one, destroying a CancellationCallback or a linked source, "
                     "while the callback runs); a task cannot park, so if the callback waits "
                     "for the task's worker this never ends. Deregister from a fiber, or keep "
                     "callbacks from parking.\n");
        std::fflush(stderr);
        std::abort();
      }
      std::this_thread::yield();
      state->lock.lock();
      continue;
    }
    state->done_waiter = self;
    state->lock.unlock();
    (void)self->wait(std::nullopt);  // a stale permit only makes us look again
    state->lock.lock();
  }
  state->lock.unlock();
}

namespace {

// Cancel: the source's cancel(), on any state.
void Cancel(CancelState* s) {
  // relaxed: a hint; the decision is made under the lock below.
  if (s->cancelled.load(std::memory_order_relaxed)) return;
  Waiter* self = &current_waiter();  // before the lock: a thread's first call may allocate
  s->lock.lock();
  // relaxed: under the lock; the release store below publishes it to lock-free readers.
  if (s->cancelled.load(std::memory_order_relaxed)) {
    s->lock.unlock();
    return;
  }
  // release: pairs with is_cancelled's acquire.
  s->cancelled.store(true, std::memory_order_release);
  s->canceller = self;
  while (CancelRegistration* reg = s->head) {
    s->head = reg->next;
    if (reg->next != nullptr) reg->next->prev = nullptr;
    reg->linked = false;
    s->running = reg;
    // Read under the lock: once it is released, a DeregisterNoWait may let reg go.
    void (*const fn)(void*) = reg->fn;
    void* const arg = reg->arg;
    s->lock.unlock();
    fn(arg);  // may park; reg may be gone already (its owner deregistered it without waiting)
    s->lock.lock();
    s->running = nullptr;
    if (Waiter* w = s->done_waiter) {
      s->done_waiter = nullptr;
      s->lock.unlock();
      w->notify();  // Waiters stay valid for a late notify (sync/waiter.h)
      s->lock.lock();
    }
  }
  s->canceller = nullptr;
  s->lock.unlock();
}

// CancelLinked: a parent's registration on behalf of a linked source. The child may be on its
// way out (its last token dropped as the parent cancels): then its destructor is waiting in
// Deregister for this call to return, and there is nothing to cancel.
void CancelLinked(void* arg) {
  std::shared_ptr<CancelState> child = static_cast<CancelState*>(arg)->weak_from_this().lock();
  if (child != nullptr) Cancel(child.get());
}

// IsCancelled: s or a source it is linked to was cancelled, or reached its deadline.
bool IsCancelled(const CancelState* s) {
  std::int64_t earliest = kNoDeadline;
  for (; s != nullptr; s = s->parent.get()) {
    // acquire: pairs with Cancel's release; what the canceller did before is visible.
    if (s->cancelled.load(std::memory_order_acquire)) return true;
    // relaxed: a hint (CancelState::deadline).
    earliest = std::min(earliest, s->deadline.load(std::memory_order_relaxed));
  }
  return earliest != kNoDeadline && SyncClock::now().time_since_epoch().count() >= earliest;
}

// DeadlineThread: cancels sources at their deadlines, so that their callbacks run then. One per
// process, started by the first cancel_at and never stopped (a detached thread waiting on a
// condition variable); its heap holds the armed states, each removed by its destructor.
class DeadlineThread {
 public:
  static DeadlineThread& Get() {
    static DeadlineThread* t = new DeadlineThread;  // never destroyed: the thread outlives main
    return *t;
  }

  // Arm: s is cancelled at `at` (replacing an earlier deadline; not a pending forced cancel,
  // which `force` arms). Errors: no memory for the heap, or no thread.
  Result<void> Arm(CancelState* s, SyncClock::time_point at, bool force = false) {
    std::lock_guard<std::mutex> lock(mu_);
    if (s->force_pending && s->deadline_entry.node.queued()) return {};  // fires soon anyway
    if (!started_) {
      try {
        std::thread([this] { Loop(); }).detach();
      } catch (const std::system_error&) {
        return std::errc::resource_unavailable_try_again;
      }
      started_ = true;
    }
    TimerNode& node = s->deadline_entry.node;
    Result<void> r = node.queued() ? heap_.reschedule(node, at) : heap_.insert(node, at);
    if (!r.ok()) return r;
    s->armed.store(true, std::memory_order_relaxed);
    s->force_pending = force;
    if (heap_.next_deadline() == at) cv_.notify_one();  // a new earliest deadline
    return {};
  }

  void Remove(CancelState* s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (s->deadline_entry.node.queued()) heap_.cancel(s->deadline_entry.node);
  }

  // Disarm: s's deadline is gone (cancel_at of the end of time): its entry leaves the heap,
  // unless it is a pending forced cancel.
  void Disarm(CancelState* s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!s->force_pending && s->deadline_entry.node.queued()) heap_.cancel(s->deadline_entry.node);
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      std::optional<TimerClock::time_point> next = heap_.next_deadline();
      if (!next) {
        cv_.wait(lock);
        continue;
      }
      if (TimerClock::now() < *next) {
        cv_.wait_until(lock, *next);
        continue;  // woken early, by an earlier deadline, or spuriously: look again
      }
      TimerNode* node = heap_.pop_due(TimerClock::now());
      if (node == nullptr) continue;
      // The state is alive: its destructor removes it from the heap under mu_, which we hold.
      // It may be on its way out (no owner left): then lock() fails and nothing is cancelled.
      std::shared_ptr<CancelState> s =
          reinterpret_cast<CancelState::DeadlineEntry*>(node)->state->weak_from_this().lock();
      if (s == nullptr) continue;
      s->force_pending = false;
      lock.unlock();
      Cancel(s.get());
      s.reset();  // may destroy the state, whose destructor takes mu_
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  TimerHeap heap_;
  bool started_ = false;
};

}  // namespace

void StopLink::operator()() const noexcept {
  if (std::shared_ptr<CancelState> s = state.lock()) Cancel(s.get());
}

CancelState::~CancelState() {
  if (armed.load(std::memory_order_relaxed)) DeadlineThread::Get().Remove(this);
  if (parent != nullptr) Deregister(parent.get(), &parent_reg);
}

std::optional<SyncClock::time_point> Deadline(const CancelState* s) {
  std::int64_t earliest = kNoDeadline;
  for (; s != nullptr; s = s->parent.get()) {
    earliest = std::min(earliest, s->deadline.load(std::memory_order_relaxed));  // a hint
  }
  if (earliest == kNoDeadline) return std::nullopt;
  return SyncClock::time_point(SyncClock::duration(earliest));
}

EffectiveDeadline DeadlineOf(const WaitOptions& options) {
  EffectiveDeadline d{options.deadline, false};
  if (options.cancel == nullptr) return d;
  std::optional<SyncClock::time_point> token = Deadline(StateOf(*options.cancel));
  if (token && (!d.at || *token < *d.at)) d = {token, true};
  return d;
}

}  // namespace sync_internal

sync_internal::CancelState* StateOf(const CancellationToken& t) { return t.state_.get(); }

CancellationToken::CancellationToken(std::stop_token stop) {
  if (!stop.stop_possible()) return;
  state_ = std::make_shared<sync_internal::CancelState>();
  // Runs StopLink at once if a stop was requested already.
  state_->stop_link.emplace(std::move(stop), sync_internal::StopLink{state_});
}

std::stop_token CancellationToken::stop_token() const {
  if (state_ == nullptr) return {};
  sync_internal::CancelState* s = state_.get();
  s->lock.lock();
  if (s->bridge != nullptr) {
    std::stop_token t = s->bridge->source.get_token();
    s->lock.unlock();
    return t;
  }
  s->lock.unlock();
  // Made outside the spin lock (it allocates); a caller that loses the race to install its
  // bridge returns the winner's tokens.
  auto bridge = std::make_unique<sync_internal::StopBridge>();
  bridge->reg.fn = [](void* arg) {
    static_cast<sync_internal::StopBridge*>(arg)->source.request_stop();
  };
  bridge->reg.arg = bridge.get();
  s->lock.lock();
  if (s->bridge != nullptr) {
    std::stop_token t = s->bridge->source.get_token();
    s->lock.unlock();
    return t;
  }
  sync_internal::StopBridge* b = bridge.get();
  s->bridge = std::move(bridge);
  s->lock.unlock();
  // Registered after the lock (Register takes it): a cancel in between finds the registration
  // refused, and the stop is requested here instead. Also for a token whose parent, or whose
  // deadline, cancelled it.
  if (!sync_internal::Register(s, &b->reg) || sync_internal::IsCancelled(s))
    b->source.request_stop();
  return b->source.get_token();
}

bool CancellationToken::is_cancelled() const {
  return state_ != nullptr && sync_internal::IsCancelled(state_.get());
}

std::optional<SyncClock::time_point> CancellationToken::deadline() const {
  return sync_internal::Deadline(state_.get());
}

CancellationSource::CancellationSource() : state_(std::make_shared<sync_internal::CancelState>()) {}

CancellationSource::CancellationSource(const CancellationToken& parent) : CancellationSource() {
  if (parent.state_ == nullptr) return;
  state_->parent = parent.state_;
  state_->parent_reg.fn = &sync_internal::CancelLinked;
  state_->parent_reg.arg = state_.get();
  if (!sync_internal::Register(state_->parent.get(), &state_->parent_reg)) {
    sync_internal::Cancel(state_.get());  // the parent is cancelled already
  }
}

bool CancellationSource::is_cancelled() const { return sync_internal::IsCancelled(state_.get()); }

std::optional<SyncClock::time_point> CancellationSource::deadline() const {
  return sync_internal::Deadline(state_.get());
}

namespace sync_internal {
Result<void> CancelOnDeadlineThread(CancelState* state) {
  // As if the deadline thread could not start (its callers' fallback is what is tested).
  if (fault::Inject(fault::Site::kThread, fault::Kind::kNoThread)) [[unlikely]] {
    return std::errc::resource_unavailable_try_again;
  }
  if (DeadlineService* service = t_deadline_service) {
    return service->Arm(state->weak_from_this(), SyncClock::now(), /*force=*/true);
  }
  return DeadlineThread::Get().Arm(state, SyncClock::now(), /*force=*/true);
}

void FireDeadline(CancelState* state, SyncClock::time_point at, bool force) {
  // relaxed: the deadline is written by cancel_at on this same (simulated) thread.
  if (force || state->deadline.load(std::memory_order_relaxed) <= at.time_since_epoch().count()) {
    Cancel(state);
  }
}
}  // namespace sync_internal

Result<void> CancellationSource::cancel_at(SyncClock::time_point deadline) {
  if (deadline <= SyncClock::now()) {
    cancel();
    return {};
  }
  // relaxed: a hint (CancelState::deadline); the deadline thread's cancel is what orders.
  state_->deadline.store(deadline.time_since_epoch().count(), std::memory_order_relaxed);
  // The end of time is no deadline (kNoDeadline): one armed before is taken off the deadline
  // thread's heap (a simulated runtime's service, FireDeadline, checks the stored deadline).
  if (deadline == SyncClock::time_point::max()) {
    if (sync_internal::t_deadline_service == nullptr &&
        state_->armed.load(std::memory_order_relaxed)) {
      sync_internal::DeadlineThread::Get().Disarm(state_.get());
    }
    return {};
  }
  if (sync_internal::DeadlineService* service = sync_internal::t_deadline_service) {
    return service->Arm(state_, deadline, /*force=*/false);
  }
  return sync_internal::DeadlineThread::Get().Arm(state_.get(), deadline);
}

void CancellationSource::cancel() {
  // A reference for the length of the cancel: a callback may drop the last other one (a linked
  // child going away releases its parent), and the state must outlive the loop that runs them.
  std::shared_ptr<sync_internal::CancelState> keep = state_;
  sync_internal::Cancel(keep.get());
}

CancellationCallback::CancellationCallback(const CancellationToken& token, std::function<void()> fn)
    : state_(token.state_), fn_(std::move(fn)) {
  // noexcept: a callback that throws ends the process (cancel() cannot hand the exception to
  // anyone without skipping the other callbacks).
  reg_.fn = [](void* self) noexcept { static_cast<CancellationCallback*>(self)->fn_(); };
  reg_.arg = this;
  if (state_ != nullptr && !sync_internal::Register(state_.get(), &reg_)) fn_();
}

CancellationCallback::~CancellationCallback() {
  if (state_ != nullptr) sync_internal::Deregister(state_.get(), &reg_);
}

}  // namespace weft
