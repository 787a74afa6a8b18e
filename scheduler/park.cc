// scheduler/park.cc: how a fiber waits and is woken: FiberWaiter::wait and notify (the Waiter
// seam //sync parks through), the on-top function that publishes a park (AfterPark: it inserts
// the wait's timer and runs the Dekker half of internal/park.h), Leave (the switch away, direct
// to the worker's next fiber when it has one), and waits inside a BlockingRegion (RegionWait).
//
// Fiber states and who moves them:
//
//   kRunnable --worker runs it--> kRunning --wait(): switch, on-top fn (worker)--> kParked
//   kParked --notify / its timer / the on-top fn finding a permit--> kRunnable (queued)
//   kRunning --BlockingRegion--> kBlocking (on a blocking thread) --leave--> kRunnable
//
// A fiber publishes "parked" only in the on-top function that runs on its worker after the
// switch, so nothing can resume it while it is still on its own stack (the handshake's code is
// scheduler/internal/park.h, which the model checker runs too). The on-top function
// stores kParked and then reads the permit; notify, when it finds the fiber not parked yet,
// stores the permit and then reads the state (Dekker), so one of them sees the other, and the
// one that wins the kParked -> kRunnable CAS queues the fiber. Every park makes that store and
// load, and a notify almost always finds the fiber parked already (its fast path: the CAS
// alone), so on x86-64 Linux the pair is asymmetric (base/asymmetric_fence.h): the park's side
// has a compiler fence only, and the rare notify that must leave a permit runs membarrier(2) as
// the fence for both. A park then costs no locked instruction, a wake one (the CAS). Elsewhere,
// or where membarrier is refused (or WEFT_PARK_FENCE=symmetric), both sides are seq_cst, and a
// park costs one locked instruction (the kParked store).

#include "weft/scheduler/internal/park.h"

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "internal/runtime_impl.h"
#include "weft/base/futex.h"
#include "weft/context/context.h"
#include "weft/sync/waiter.h"

namespace weft {
namespace scheduler_internal {
namespace {

Transfer AfterPark(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  Worker* w = f->worker;
  Bump(w->counters.parked);
  Runtime::Impl* rt = f->rt;  // f may run elsewhere once it is published as parked
  TimerEntry* e = f->pending_timer;
  Clock::rep head_before = 0, head = 0;
  if (e != nullptr) {
    e->owner = w;
    // Held until kParked is published: an idle worker that pops the entry (RescueTimers) must
    // find the fiber parked, or its claim would fail and the timer's wake-up be lost.
    w->timer_mu.lock();
    head_before = w->timer_head.load(std::memory_order_relaxed);  // written under the lock
    if (!w->timers.insert(e->node, e->deadline).ok()) {
      w->timer_mu.unlock();
      // No memory for the timer: wake the fiber at once; its wait retries.
      FreeTimerEntry(e);
      f->pending_timer = nullptr;
      f->state.store(kRunnable, std::memory_order_relaxed);
      rt->StampRunnable(f);
      rt->PushLocal(*w, f);
      return t;
    }
    head = PublishTimerHead(*w);
  }
  // Store then load: the Dekker pairing with notify (park.h).
  bool claimed = PublishParked(*f, rt->light_park);
  if (e != nullptr) w->timer_mu.unlock();
  if (claimed) {
    rt->StampRunnable(f);
    rt->PushLocal(*w, f);
  }
  if (head < head_before) rt->WatchTimers(*w, head);
  return t;
}

// Leave: the running fiber f stops running (fn, on the next context, says how); the worker's
// next local fiber runs at once if there is one (a direct switch: one context switch instead of
// two through the worker loop), else the worker loop.
void Leave(Worker& w, Fiber* f, OnTopFn fn) {
  f->saved_errno = *w.errno_slot;  // before DirectNext puts the next fiber's in place
  Fiber* next = f->rt->DirectNext(w);
  jump_context_ontop(next != nullptr ? next->context() : w.home, f, fn);
}

// RegionWait: FiberWaiter::wait for a fiber inside a BlockingRegion: it runs on a blocking
// thread, so the wait blocks that thread. The permit is the same as a parked fiber's.
bool RegionWait(Fiber* f, std::optional<SyncClock::time_point> deadline) {
  for (;;) {
    // The word is read before region_waiting is published and the permit checked: a notify
    // that sees region_waiting (seq_cst, the Dekker pair with its permit store) bumps the word
    // after this read, so the futex wait below returns at once.
    std::uint32_t word = f->region_word.load(std::memory_order_acquire);
    f->region_waiting.store(true, std::memory_order_seq_cst);
    if (TakePermit(*f)) break;
    std::chrono::microseconds left = std::chrono::microseconds::max();
    if (deadline) {
      auto now = SyncClock::now();
      if (*deadline <= now) {
        f->region_waiting.store(false, std::memory_order_relaxed);
        return false;
      }
      left = std::chrono::ceil<std::chrono::microseconds>(*deadline - now);
    }
    base_internal::FutexWait(f->region_word, word, left);
  }
  f->region_waiting.store(false, std::memory_order_relaxed);
  return true;
}

// One turn of a wait, in two halves around the time the fiber (or task) is away: BeginStep
// readies the park (a new generation, the deadline's timer entry), EndStep sorts out how it came
// back. FiberWaiter::wait runs them around a switch; a task runs them around a suspension of
// its coroutine (TaskWait).
enum class StepStart { kPark, kTimedOut, kNoMemory };
enum class StepEnd { kWoken, kTimedOut, kSpurious };

[[gnu::always_inline]] inline StepStart BeginStep(Fiber* f,
                                                  std::optional<SyncClock::time_point> deadline,
                                                  bool deadline_checked, TimerEntry** entry_out,
                                                  std::uint64_t* gen_out) {
  if (deadline && !deadline_checked && *deadline <= SyncClock::now()) return StepStart::kTimedOut;
  // wait_gen has one writer, this fiber: a load and a store, no read-modify-write. release:
  // a timer entry that reads the new value sees the wait it belongs to.
  std::uint64_t gen = f->wait_gen.load(std::memory_order_relaxed) + 1;
  f->wait_gen.store(gen, std::memory_order_release);
  f->woken_by_notify = false;  // before AfterPark publishes kParked: only then can it be set
  TimerEntry* entry = nullptr;
  if (deadline) {  // inserted into the worker's heap by AfterPark, on the worker's thread
    entry = NewTimerEntry();
    if (entry == nullptr) [[unlikely]]
      return StepStart::kNoMemory;
    entry->fiber = f;
    entry->gen = gen;
    entry->deadline = *deadline;
  }
  f->pending_timer = entry;
  *entry_out = entry;
  *gen_out = gen;
  return StepStart::kPark;
}

[[gnu::always_inline]] inline StepEnd EndStep(Fiber* f, TimerEntry* entry, std::uint64_t gen) {
  f->state.store(kRunning, std::memory_order_relaxed);
  // Any timer of this wait is now stale (one writer, as above).
  f->wait_gen.store(gen + 1, std::memory_order_release);
  bool timed_out = false;
  if (entry != nullptr && f->pending_timer == entry) {
    f->pending_timer = nullptr;
    timed_out = entry->fired;  // before our reference goes
    // Take it out of its owner's heap now (the heap side's reference with it), unless it was
    // popped already (it fired, or an idle worker rescued it): on any worker, under the
    // owner's timer lock. Left for the owner to pop at its deadline, a woken wait's entry
    // would hold memory for as long as its timeout (waits resumed on another worker with a
    // 1 h timeout: 80 B per wait for an hour).
    // A timer that fired was popped: no lock needed to know it is out of the heap.
    if (Worker* owner = entry->owner; owner != nullptr && !timed_out) {
      owner->timer_mu.lock();
      bool queued = entry->node.queued();
      if (queued) {
        owner->timers.cancel(entry->node);
        PublishTimerHead(*owner);
      }
      owner->timer_mu.unlock();
      if (queued) Release(entry);
    }
    Release(entry);
  }
  if (TakeWakeUp(*f)) return StepEnd::kWoken;
  // A resume can come without a permit: a notifier that stored its permit for an earlier wait
  // (which consumed it) may still win the CAS from this wait's kParked. Such a resume is
  // spurious; only a passed deadline (its own timer, popped as due) makes the wait time out.
  return timed_out ? StepEnd::kTimedOut : StepEnd::kSpurious;
}

}  // namespace

void TaskBlocked(Fiber* f, const char* how) {
  const char* what = f->waiter.waiting_on();  // set by the wait that called, if one did
  std::fprintf(stderr,
               "weft: task %llu %s%s%s%s, which would block its worker; a task waits with "
               "co_await (the async_ forms), a fiber or thread with the blocking calls\n",
               static_cast<unsigned long long>(f->id()), how, what != nullptr ? " (" : "",
               what != nullptr ? what : "", what != nullptr ? ")" : "");
  std::fflush(stderr);
  std::abort();
}

bool FiberWaiter::wait(std::optional<SyncClock::time_point> deadline) {
  Fiber* f = fiber();
  // In a BlockingRegion (set before the fiber moved to its blocking thread, by the hand-off
  // that moved it): block that thread instead of parking.
  if (f->state.load(std::memory_order_relaxed) == kBlocking) [[unlikely]]
    return RegionWait(f, deadline);
  // A task has no stack to switch away from: it waits with co_await (suspend, TaskWait).
  if (IsTask(f)) [[unlikely]]
    TaskBlocked(f, "called a blocking wait");
  // A permit this misses is found by the on-top function (AfterPark), after kParked is
  // published: the Dekker read is there.
  bool deadline_checked = std::exchange(f->deadline_checked, false);
  if (TakePermit(*f)) return true;
  for (;;) {
    TimerEntry* entry = nullptr;
    std::uint64_t gen = 0;
    switch (BeginStep(f, deadline, deadline_checked, &entry, &gen)) {
      case StepStart::kPark:
        break;
      case StepStart::kTimedOut:
        return false;
      case StepStart::kNoMemory:
        // No memory for the deadline's timer: wait by yielding instead, until notified (a
        // notify that finds the fiber not parked leaves its permit) or the deadline passes.
        // A poll, but only while memory is short; an exception here would unwind through a
        // sync primitive with its wait node still queued.
        this_fiber::yield();
        if (TakePermit(*f)) return true;
        deadline_checked = false;
        continue;
    }
    deadline_checked = false;
    Leave(*f->worker, f, &AfterPark);
    // Resumed, perhaps on another worker (f->worker was updated by Run).
    switch (EndStep(f, entry, gen)) {
      case StepEnd::kWoken:
        return true;
      case StepEnd::kTimedOut:
        return false;
      case StepEnd::kSpurious:
        continue;
    }
  }
}

sync_internal::WaitNode& FiberWaiter::own_node() {
  Fiber* f = fiber();
  if (f->kind == RecordKind::kTask) [[unlikely]] {
    // A task's blocking wait, which it must not make: it aborts in wait(), naming the wait.
    // Until then it behaves as any: with its token cancelled, or the runtime shutting down, it
    // ends operation_canceled without waiting, as a Mutex's or Channel's does. Its node is
    // needed only within the call, which runs on this thread to its end (a task suspends only
    // in a co_await): the worker thread's own serves, and a task's record carries none.
    thread_local sync_internal::WaitNode t_task_node;
    return t_task_node;
  }
  return Stackful(f)->own_node;
}

bool FiberWaiter::can_block() const { return !IsTask(const_cast<FiberWaiter*>(this)->fiber()); }

bool FiberWaiter::suspend(sync_internal::AsyncParkBase& park, std::coroutine_handle<> h) {
  Fiber* f = fiber();
  if (!IsTask(f)) return false;  // a coroutine on a fiber: AsyncPark blocks the fiber
  f->task().frame = h.address();
  f->task().park = &park;
  f->task_exit = kTaskParking;
  return true;
}

// TaskWait: the wait a task is suspended in (f->task().park), driven on its worker w: after the
// coroutine suspended into it (parked false), or as the task runs again after a park (parked
// true). Returns true when the wait is over and the coroutine resumes now; false when the task
// was parked (published: it may already run elsewhere, so the caller must not touch it) or
// queued to try again.
bool TaskWait(Worker& w, Fiber* f, bool parked) {
  sync_internal::AsyncParkBase* park = f->task().park;
  bool spurious = false;
  if (parked) {
    // relaxed: the task's own store (BeginStep's), the generation of the wait it parked in.
    // The wait's timer entry is the record's pending_timer, as BeginStep left it (null if the
    // wait had no deadline, or if AfterPark found no memory to insert it and freed it).
    const StepEnd end = EndStep(f, f->pending_timer, f->wait_gen.load(std::memory_order_relaxed));
    if (end != StepEnd::kSpurious) {
      if (park->Continue(end == StepEnd::kWoken)) return true;
    } else {
      spurious = true;  // wait again, without asking the condition (as FiberWaiter::wait)
    }
  }
  f->task_retry = false;
  for (;;) {
    if (!spurious && TakePermit(*f)) {
      if (park->Continue(true)) return true;
      continue;
    }
    spurious = false;
    TimerEntry* entry = nullptr;
    std::uint64_t gen = 0;
    switch (BeginStep(f, park->deadline(), false, &entry, &gen)) {
      case StepStart::kPark:
        break;
      case StepStart::kTimedOut:
        if (park->Continue(false)) return true;
        continue;
      case StepStart::kNoMemory:
        // As FiberWaiter::wait: poll by yielding while memory is short.
        f->task_retry = true;
        f->state.store(kRunnable, std::memory_order_relaxed);
        w.yields.push(f);
        return false;
    }
    // (entry is f->pending_timer now, and gen the record's wait_gen, until EndStep.)
    AfterPark(Transfer{nullptr, f});
    return false;
  }
}

void FiberWaiter::notify() {
  Fiber* f = fiber();
  // The handshake is park.h's; it reads f->light_park, not f->rt's: a finished fiber's runtime
  // may be gone.
  if (NotifyParked(*f)) {
    f->rt->StampRunnable(f);
    f->rt->Schedule(f);
    return;
  }
  if (NotifyWithPermit(*f)) {
    f->rt->StampRunnable(f);
    f->rt->Schedule(f);
  }
  // Or it waits inside a BlockingRegion (RegionWait): seq_cst, the Dekker pair with its
  // region_waiting store.
  if (f->region_waiting.load(std::memory_order_seq_cst)) [[unlikely]] {
    f->region_word.fetch_add(1, std::memory_order_release);
    base_internal::FutexWake(f->region_word, 1);
  }
}

}  // namespace scheduler_internal
}  // namespace weft
