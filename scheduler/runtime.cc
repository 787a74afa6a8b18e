// scheduler/runtime.cc: workers, fibers, and the fiber Waiter that lets //sync park fibers.
//
// Worker loop (one per thread):
//
//   run_next slot -> own queue (FIFO) -> due timers -> inject queue -> steal from a random
//   victim -> spin (yield) -> sleep on the runtime's futex (timeout: the next timer)
//
// Fiber states and who moves them:
//
//   kRunnable --worker runs it--> kRunning --wait()--> kParking --on-top fn (worker)--> kParked
//   kParking --notify--> kNotified --on-top fn sees it--> kRunnable (re-queued at once)
//   kParked --notify / its timer--> kRunnable (queued)
//
// A fiber publishes "parked" only in the on-top function that runs on its worker after the
// switch, so nothing can resume it while it is still on its own stack. The permit (set by
// notify) and the state are both seq_cst: a wait that stores kParking and then finds no permit
// cannot miss a notify that set the permit and then read the state (Dekker).
//
// Fiber objects (and so their Waiters) are recycled, never freed while the runtime lives: a
// notifier may still call notify() on a fiber that already resumed and finished (see the lifetime
// contract in sync/waiter.h). A late notify only leaves a stale permit.

#include "scheduler/runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "base/futex.h"
#include "context/context.h"
#include "context/stack.h"
#include "deque/chase_lev.h"
#include "deque/mpmc_ring.h"
#include "sync/waiter.h"
#include "timer/timer_heap.h"

namespace weft {
namespace scheduler_internal {
namespace {

using Clock = std::chrono::steady_clock;

enum FiberState : int { kRunnable, kRunning, kParking, kNotified, kParked, kDone };

struct Worker;
struct Fiber;

class FiberWaiter final : public Waiter {
 public:
  explicit FiberWaiter(Fiber* f) : fiber_(f) {}
  bool wait(std::optional<SyncClock::time_point> deadline) override;
  void notify() override;

 private:
  Fiber* fiber_;
};

// A deadline of a parked fiber. Two references: the heap side (dropped when the owner worker pops
// or cancels it) and the fiber side (dropped when the fiber resumes from that wait). The last one
// frees it. Its heap state is only ever touched on the owner worker's thread.
struct TimerEntry {
  TimerNode node;  // first member: the heap hands back &node
  Fiber* fiber = nullptr;
  std::uint64_t gen = 0;
  Worker* owner = nullptr;
  std::chrono::steady_clock::time_point deadline;
  std::atomic<int> refs{2};
};

void Release(TimerEntry* e) {
  // acq_rel: the other side's last use of the entry happens before the delete.
  if (e->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete e;
}

struct Fiber {
  Runtime::Impl* rt = nullptr;
  Context ctx = nullptr;
  Stack stack;
  std::function<void()> body;
  Worker* worker = nullptr;  // the worker running it (or that last ran it)
  std::atomic<int> state{kRunnable};
  std::atomic<bool> permit{false};
  std::atomic<std::uint64_t> wait_gen{0};
  TimerEntry* pending_timer = nullptr;  // handed to the park on-top function
  FiberWaiter waiter{this};
  std::uint64_t id = 0;
  char name[32] = {};
};

struct Worker {
  Runtime::Impl* rt = nullptr;
  unsigned index = 0;
  std::thread thread;
  ChaseLevDeque<Fiber*> queue{256};
  Fiber* run_next = nullptr;
  Fiber* current = nullptr;
  Context home = nullptr;  // the worker thread's own context
  TimerHeap timers;
  std::unique_ptr<StackCache> stacks;
  std::uint64_t rng = 0;
};

thread_local Worker* t_worker = nullptr;

}  // namespace
}  // namespace scheduler_internal

using namespace scheduler_internal;

struct Runtime::Impl {
  RuntimeOptions options;
  std::vector<std::unique_ptr<Worker>> workers;
  MpmcRing<Fiber*> inject{1 << 16};
  std::atomic<std::uint32_t> wake_word{0};
  std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> live{0};
  std::atomic<std::uint64_t> next_id{1};
  std::mutex pool_mu;
  std::vector<Fiber*> pool;  // finished fibers for reuse
  std::vector<std::unique_ptr<Fiber>> all_fibers;

  void WakeOne() {
    // seq_cst: orders our publication of work before reading sleepers (see WorkerLoop).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_relaxed) == 0) return;
    wake_word.fetch_add(1, std::memory_order_release);
    base_internal::FutexWake(wake_word, 1);
  }
  void WakeAll() {
    wake_word.fetch_add(1, std::memory_order_release);
    base_internal::FutexWake(wake_word, 1 << 30);
  }

  // Schedule: makes f runnable from any thread. On a worker of this runtime it becomes that
  // worker's next fiber (a woken fiber runs right after its waker: message-passing locality).
  void Schedule(Fiber* f) {
    Worker* w = t_worker;
    if (w != nullptr && w->rt == this) {
      if (w->run_next != nullptr) {
        w->queue.push(w->run_next);
        if (w->queue.size_approx() > kLocalQueueSoftLimit) Overflow(*w);
        WakeOne();  // surplus work a sleeping worker could steal
      }
      w->run_next = f;
      return;
    }
    while (!inject.try_push(f)) std::this_thread::yield();
    WakeOne();
  }

  // Overflow: a worker's queue past its soft limit sends its older half to the shared queue, where
  // every worker finds it (Go's runqputslow). Without this, a fiber that spawns thousands of
  // fibers keeps them on its own worker, and thieves that find other work never come for them.
  static constexpr std::size_t kLocalQueueSoftLimit = 256;
  void Overflow(Worker& w) {
    for (std::size_t moved = 0; moved < kLocalQueueSoftLimit / 2; ++moved) {
      Fiber* f = nullptr;
      if (w.queue.steal(&f) != StealResult::kSuccess) break;
      if (!inject.try_push(f)) {
        w.queue.push(f);  // the shared queue is full too: keep it
        break;
      }
    }
  }

  Fiber* NewFiber() {
    {
      std::lock_guard<std::mutex> lock(pool_mu);
      if (!pool.empty()) {
        Fiber* f = pool.back();
        pool.pop_back();
        return f;
      }
    }
    auto f = std::make_unique<Fiber>();
    f->rt = this;
    Fiber* raw = f.get();
    std::lock_guard<std::mutex> lock(pool_mu);
    all_fibers.push_back(std::move(f));
    return raw;
  }
  void Recycle(Fiber* f) {
    std::lock_guard<std::mutex> lock(pool_mu);
    pool.push_back(f);
  }
  void WorkerLoop(Worker& w);
  Fiber* FindWork(Worker& w);
  void Run(Worker& w, Fiber* f);
};

namespace scheduler_internal {
namespace {

Waiter* ProvideWaiter(void* arg) {
  auto* w = static_cast<Worker*>(arg);
  return w->current != nullptr ? &w->current->waiter : nullptr;
}

// On-top functions: they run on the worker's own context right after a fiber switched away.
// A yielding fiber goes to the shared inject queue, as Go's Gosched does: behind everything
// runnable, and available to every worker, so yield-heavy work spreads instead of staying with
// the worker that happened to start it (measured: 70/30 between two workers with a local queue).
Transfer AfterYield(Transfer t);

Transfer AfterPark(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  Worker* w = f->worker;
  if (TimerEntry* e = f->pending_timer) {
    e->owner = w;
    if (!w->timers.insert(e->node, e->deadline).ok()) {
      // No memory for the timer: wake the fiber at once; its wait reports a timeout.
      delete e;
      f->pending_timer = nullptr;
      f->state.store(kRunnable, std::memory_order_relaxed);
      w->queue.push(f);
      return t;
    }
  }
  int expected = kParking;
  // seq_cst: pairs with notify (see the file comment). On failure the state is kNotified.
  if (!f->state.compare_exchange_strong(expected, kParked, std::memory_order_seq_cst)) {
    f->state.store(kRunnable, std::memory_order_relaxed);
    w->queue.push(f);
  }
  return t;
}

Transfer AfterExit(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  Worker* w = f->worker;
  discard_context(t.from);
  w->stacks->recycle(std::move(f->stack));
  f->body = nullptr;
  f->state.store(kDone, std::memory_order_relaxed);
  Runtime::Impl* rt = f->rt;
  rt->Recycle(f);
  // release: the fiber's effects happen before the destructor's acquire of live == 0.
  rt->live.fetch_sub(1, std::memory_order_release);
  return t;
}

[[noreturn]] void FiberMain(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  f->body();
  // f->worker is where we run now (set by Run before the switch).
  exit_context(f->worker->home, f, &AfterExit);
}

void ResumeTimedOut(TimerEntry* e) {
  Fiber* f = e->fiber;
  // acquire: the fiber's wait_gen store (release) happened before it parked.
  if (e->gen != f->wait_gen.load(std::memory_order_acquire)) return;  // stale
  int expected = kParked;
  if (f->state.compare_exchange_strong(expected, kRunnable, std::memory_order_seq_cst)) {
    f->rt->Schedule(f);
  }
}

}  // namespace

bool FiberWaiter::wait(std::optional<SyncClock::time_point> deadline) {
  Fiber* f = fiber_;
  // seq_cst (all permit and state accesses): the Dekker pairing with notify.
  if (f->permit.exchange(false, std::memory_order_seq_cst)) return true;
  // A resume can come without a permit: a notifier that stored its permit for an earlier wait
  // (which consumed it) may flip this wait's kParking to kNotified afterwards. Such a resume is
  // spurious; only a passed deadline makes this return false.
  for (;;) {
    if (deadline && *deadline <= SyncClock::now()) return false;
    std::uint64_t gen = f->wait_gen.fetch_add(1, std::memory_order_release) + 1;
    f->state.store(kParking, std::memory_order_seq_cst);
    if (f->permit.exchange(false, std::memory_order_seq_cst)) {
      f->state.store(kRunning, std::memory_order_relaxed);
      return true;
    }
    TimerEntry* entry = nullptr;
    if (deadline) {  // inserted into the worker's heap by AfterPark, on the worker's thread
      entry = new TimerEntry{};
      entry->fiber = f;
      entry->gen = gen;
      entry->deadline = *deadline;
    }
    f->pending_timer = entry;
    jump_context_ontop(f->worker->home, f, &AfterPark);
    // Resumed, perhaps on another worker (f->worker was updated by Run).
    f->state.store(kRunning, std::memory_order_relaxed);
    f->wait_gen.fetch_add(1, std::memory_order_release);  // any timer of this wait is now stale
    if (entry != nullptr && f->pending_timer == entry) {
      f->pending_timer = nullptr;
      // On the owner's thread we may take it out of the heap ourselves (the heap side's
      // reference with it); elsewhere the owner pops it at its deadline, finds it stale, and
      // drops that side.
      if (entry->owner == f->worker && entry->node.queued()) {
        f->worker->timers.cancel(entry->node);
        Release(entry);
      }
      Release(entry);
    }
    if (f->permit.exchange(false, std::memory_order_seq_cst)) return true;
  }
}

void FiberWaiter::notify() {
  Fiber* f = fiber_;
  f->permit.store(true, std::memory_order_seq_cst);
  for (;;) {
    int s = f->state.load(std::memory_order_seq_cst);
    if (s == kParked) {
      if (f->state.compare_exchange_weak(s, kRunnable, std::memory_order_seq_cst)) {
        f->rt->Schedule(f);
        return;
      }
    } else if (s == kParking) {
      if (f->state.compare_exchange_weak(s, kNotified, std::memory_order_seq_cst)) return;
    } else {
      return;  // running or runnable: it will find the permit
    }
  }
}

void Spawn(Runtime& rt, std::function<void()> body, const FiberOptions& options) {
  Runtime::Impl& impl = *rt.impl_;
  Fiber* f = impl.NewFiber();
  Worker* w = t_worker != nullptr && t_worker->rt == &impl ? t_worker : nullptr;
  StackOptions so{.size = options.stack_size != 0 ? options.stack_size : impl.options.stack_size};
  Result<Stack> stack =
      w != nullptr ? w->stacks->allocate(so) : StackPool::default_pool().allocate(so);
  if (!stack.ok()) {
    impl.Recycle(f);
    throw std::system_error(stack.error_code(), "weft: no stack for a new fiber");
  }
  f->stack = std::move(stack).value();
  f->body = std::move(body);
  f->permit.store(false, std::memory_order_relaxed);
  f->pending_timer = nullptr;
  f->id = impl.next_id.fetch_add(1, std::memory_order_relaxed);
  std::size_t n = std::min(options.name.size(), sizeof f->name - 1);
  if (n != 0) std::memcpy(f->name, options.name.data(), n);
  f->name[n] = '\0';
  f->ctx = *make_context(f->stack.span(), &FiberMain);
  set_context_name(f->ctx, f->name);
  f->state.store(kRunnable, std::memory_order_relaxed);
  impl.live.fetch_add(1, std::memory_order_relaxed);
  impl.Schedule(f);
}

}  // namespace scheduler_internal

// ---- Runtime::Impl: the worker loop ------------------------------------------------------------

Fiber* Runtime::Impl::FindWork(Worker& w) {
  if (Fiber* f = w.run_next) {
    w.run_next = nullptr;
    return f;
  }
  Fiber* f = nullptr;
  // The owner takes its own queue from the top: FIFO, so yielding fibers take turns.
  while (w.queue.size_approx() != 0) {
    if (w.queue.steal(&f) == StealResult::kSuccess) return f;
  }
  if (!w.timers.empty()) {
    w.timers.pop_all_due(Clock::now(), [&](TimerNode& node) {
      auto* e = reinterpret_cast<TimerEntry*>(&node);
      ResumeTimedOut(e);
      Release(e);  // the heap side's reference
    });
    if (Fiber* g = w.run_next) {
      w.run_next = nullptr;
      return g;
    }
    if (w.queue.steal(&f) == StealResult::kSuccess) return f;
  }
  if (std::optional<Fiber*> g = inject.try_pop()) return *g;
  const auto n = static_cast<unsigned>(workers.size());
  if (n > 1) {
    w.rng ^= w.rng << 13;
    w.rng ^= w.rng >> 7;
    w.rng ^= w.rng << 17;
    unsigned start = static_cast<unsigned>(w.rng % n);
    for (unsigned k = 0; k < n; ++k) {
      Worker& v = *workers[(start + k) % n];
      if (&v == &w) continue;
      // Half of the victim's queue, as Go and Tokio take: a thief that comes back only once its
      // batch is done must not starve itself with small batches.
      if (v.queue.steal_half(w.queue, 4096) != 0 && w.queue.steal(&f) == StealResult::kSuccess) {
        return f;
      }
    }
  }
  return nullptr;
}

namespace scheduler_internal {
namespace {
Transfer AfterYield(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  f->state.store(kRunnable, std::memory_order_relaxed);
  if (f->rt->inject.try_push(f)) {
    f->rt->WakeOne();
  } else {
    f->worker->queue.push(f);  // the shared queue is full: keep it local
  }
  return t;
}
}  // namespace
}  // namespace scheduler_internal

void Runtime::Impl::Run(Worker& w, Fiber* f) {
  f->worker = &w;
  f->state.store(kRunning, std::memory_order_relaxed);
  w.current = f;
  jump_context(f->ctx, f);
  w.current = nullptr;
}

void Runtime::Impl::WorkerLoop(Worker& w) {
  t_worker = &w;
  w.home = current_context();
  w.stacks = std::make_unique<StackCache>(StackPool::default_pool());
  install_stack_overflow_handler();
  set_waiter_provider(&ProvideWaiter, &w);
  int idle = 0;
  for (;;) {
    if (Fiber* f = FindWork(w)) {
      idle = 0;
      Run(w, f);
      continue;
    }
    // acquire: pairs with the destructor's release.
    if (stop.load(std::memory_order_acquire) && live.load(std::memory_order_acquire) == 0) break;
    if (++idle < 64) {
      std::this_thread::yield();
      continue;
    }
    sleepers.fetch_add(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // Dekker with WakeOne
    std::uint32_t word = wake_word.load(std::memory_order_acquire);
    bool work = inject.size_approx() != 0 || w.run_next != nullptr;
    for (const auto& v : workers) work = work || v->queue.size_approx() != 0;
    if (!work && !stop.load(std::memory_order_acquire)) {
      auto timeout = std::chrono::microseconds(10000);
      if (std::optional<Clock::time_point> next = w.timers.next_deadline()) {
        auto left = std::chrono::ceil<std::chrono::microseconds>(*next - Clock::now());
        timeout = std::clamp(left, std::chrono::microseconds(0), timeout);
      }
      base_internal::FutexWait(wake_word, word, timeout);
    }
    sleepers.fetch_sub(1, std::memory_order_relaxed);
    idle = 60;
  }
  // Timers left behind are stale (every fiber finished): free them.
  w.timers.pop_all_due(Clock::time_point::max(),
                       [](TimerNode& node) { Release(reinterpret_cast<TimerEntry*>(&node)); });
  set_waiter_provider(nullptr, nullptr);
  w.stacks.reset();
  t_worker = nullptr;
}

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  unsigned n = options.workers != 0 ? options.workers : std::thread::hardware_concurrency();
  if (n == 0) n = 1;
  impl_->options = options;
  for (unsigned i = 0; i < n; ++i) {
    auto w = std::make_unique<Worker>();
    w->rt = impl_.get();
    w->index = i;
    w->rng = 0x9E3779B97F4A7C15ull * (i + 1);
    impl_->workers.push_back(std::move(w));
  }
  for (auto& w : impl_->workers) {
    Worker* raw = w.get();
    Impl* impl = impl_.get();
    raw->thread = std::thread([impl, raw] { impl->WorkerLoop(*raw); });
  }
}

Runtime::~Runtime() {
  // Wait for every fiber to finish. Polling, 1 ms apart: shutdown is rare, and the count may
  // reach zero and rise again (fibers spawning fibers), which a one-shot event cannot express.
  while (impl_->live.load(std::memory_order_acquire) != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->stop.store(true, std::memory_order_release);
  impl_->WakeAll();
  for (auto& w : impl_->workers) w->thread.join();
}

unsigned Runtime::workers() const { return static_cast<unsigned>(impl_->workers.size()); }

// ---- this_fiber
// ------------------------------------------------------------------------------------

namespace this_fiber {

namespace {
Fiber* Current() {
  Worker* w = t_worker;
  return w != nullptr ? w->current : nullptr;
}
}  // namespace

void yield() {
  Fiber* f = Current();
  if (f == nullptr) {
    std::this_thread::yield();
    return;
  }
  jump_context_ontop(f->worker->home, f, &AfterYield);
  f->state.store(kRunning, std::memory_order_relaxed);
}

void sleep_until(std::chrono::steady_clock::time_point when) {
  Fiber* f = Current();
  if (f == nullptr) {
    std::this_thread::sleep_until(when);
    return;
  }
  // Permits from earlier notifies may wake it early: sleep again until the time has come.
  while (std::chrono::steady_clock::now() < when) (void)f->waiter.wait(when);
}

std::uint64_t id() {
  Fiber* f = Current();
  return f != nullptr ? f->id : 0;
}

std::string_view name() {
  Fiber* f = Current();
  return f != nullptr ? std::string_view(f->name) : std::string_view();
}

bool in_fiber() { return Current() != nullptr; }

}  // namespace this_fiber
}  // namespace weft
