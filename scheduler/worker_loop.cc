// scheduler/worker_loop.cc: a worker's loop: finding work (FindWork), running a fiber (Run), the
// first run of a fiber and its exit (FiberMain, AfterExit), fibers that found no stack
// (FailUnstartable), the mailbox (TakeMail), polling the reactor, and sleeping (Sleep, with the
// handshake of internal/idle.h). Timers are in timers.cc.
//
// Worker loop (one per thread; docs/scheduler.md draws it):
//
//   run_next slot -> pinned fibers / mailbox -> own queue (FIFO) -> due timers -> reactor
//   (non-blocking, if it has operations) -> inject queue -> overflow list (a batch) -> steal
//   half of a random victim -> spin (yield) -> sleep in the reactor (or on a futex) until woken
//   or the next timer
//
// Every 61st pass also looks at the inject queue (or takes one fiber of the overflow list) and
// the reactor first, so fibers that keep a worker's own queue full cannot starve them (Go's
// schedtick check).

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "internal/runtime_impl.h"
#include "weft/alloc/slab.h"
#include "weft/base/clock.h"
#include "weft/base/futex.h"
#include "weft/context/context.h"
#include "weft/context/stack.h"

namespace weft {
namespace scheduler_internal {
namespace {

Waiter* ProvideWaiter(void* arg) {
  auto* w = static_cast<Worker*>(arg);
  return w->current != nullptr ? &w->current->waiter : nullptr;
}

// AfterExit: the on-top function of a fiber's end: its stack back to the worker's cache, its
// object and credit to the worker.
Transfer AfterExit(Transfer t) {
  auto* f = static_cast<Fiber*>(t.data);
  Worker* w = f->worker;
  discard_context(t.from);
  // A recycled fiber object gets a new stack and context at its next start.
  f->set_context(nullptr);
  w->stacks->recycle(std::move(f->stack()));
  f->rt->Retire(*w, f, RecordKind::kFiber);
  return t;
}

}  // namespace

[[noreturn]] void FiberMain(Transfer /*t: its data belongs to an on-top function*/) {
  Fiber* f = t_worker->current;  // set by whoever switched to us (Run or SwitchDirect)
  // run() may free the body as it returns (the handle was dropped, or is joined at once): nothing
  // reads f->body between its last step and the reset below. It stays set while it runs, for
  // CurrentGroupToken (a TaskGroup child's body answers it): a line the fiber has written at
  // spawn and read at start, where a field of its own would sit outside the two lines a spawn
  // touches.
  f->body->run();
  f->body = nullptr;
  f->locals.clear();  // on the fiber, so destructors may still use fiber features
  // f->worker is where we run now; another fiber of the worker, or the worker loop, is next.
  Worker* w = f->worker;
  Fiber* next = f->rt->DirectNext(*w);
  exit_context(next != nullptr ? next->context() : w->home, f, &AfterExit);
}

}  // namespace scheduler_internal

using namespace scheduler_internal;

void Runtime::Impl::TakeMail(Worker& w) {
  FiberFifo fibers;  // empty: owns no memory until it grows
  IoRequest* cancels;
  {
    std::lock_guard<std::mutex> lock(w.mail_mu);
    std::swap(fibers, w.mail_fibers);
    cancels = w.mail_cancels;
    w.mail_cancels = nullptr;
    w.has_mail.store(false, std::memory_order_relaxed);
  }
  while (IoRequest* r = cancels) {
    cancels = r->next_cancel;
    // relaxed: the completion, which sets it, runs on this thread too.
    if (!r->finished.load(std::memory_order_relaxed)) w.reactor->cancel(r->op);
    Waiter* waiter = r->waiter;  // read before the release: r may be gone right after it
    // release: the fiber may leave (and reuse r's memory) once it sees this.
    r->cancel_done.store(true, std::memory_order_release);
    waiter->notify();
  }
  while (Fiber* f = fibers.pop()) w.pinned_local.push(f);
}

int Runtime::Impl::PollReactor(Worker& w, std::optional<Clock::time_point> deadline) {
  if (w.has_mail.load(std::memory_order_relaxed)) TakeMail(w);
  if (w.reactor == nullptr) return 0;
  Result<int> n = w.reactor->poll(deadline);
  if (n.ok() && *n > 0) Bump(w.counters.polled, static_cast<std::uint64_t>(*n));
  return n.ok() ? *n : 0;
}

// FindWork and Run are inline in WorkerLoop, their one caller (as GCC chose when the runtime's
// types had internal linkage).
[[gnu::always_inline]] inline Fiber* Runtime::Impl::FindWork(Worker& w) {
  Fiber* f = nullptr;
  if (w.tick - w.fair_tick >= kFairnessInterval) {
    // Fairness: the shared queue, the reactor and the timers, even when local work never runs
    // out; and work for thieves.
    w.fair_tick = w.tick;
    if (w.steal_request.load(std::memory_order_relaxed) ||
        (w.yields.count > 1 && idle.sleepers() > 0)) {
      Spill(w);
    }
    if (w.has_mail.load(std::memory_order_relaxed)) TakeMail(w);
    if (w.reactor != nullptr && w.reactor->pending_ops() != 0) {
      PollReactor(w, Clock::time_point::min());
    }
    PopDueTimers(w);
    // relaxed: a hint (the monitor's).
    if (held_workers.load(std::memory_order_relaxed) != 0) [[unlikely]]
      HelpHeld(w);
    Fiber* g = nullptr;
    if (std::optional<Fiber*> i = inject.try_pop()) {
      g = *i;
    } else {
      // One fiber, not a batch (as Go's schedule does): a batch would go behind the local
      // work, and a full queue would send it back to the list's tail, again and again.
      g = TakeOverflow(w, /*batch=*/false);
    }
    if (g != nullptr) {
      if (w.run_next != nullptr) PushLocal(w, w.run_next);
      w.run_next = nullptr;
      return g;
    }
  }
  if (w.run_next != nullptr) {
    if (Fiber* g = NextLocal(w)) return g;
  }
  if (w.has_mail.load(std::memory_order_relaxed)) TakeMail(w);
  if (w.pinned_local.count != 0 || w.queue.size_approx() != 0) {
    if (Fiber* g = NextLocal(w)) return g;
  }
  PopDueTimers(w);
  if (w.reactor != nullptr && w.reactor->pending_ops() != 0) {
    PollReactor(w, Clock::time_point::min());
  }
  // A fiber woken by a timer or a completion (run_next or the queue), else the yield ring.
  if (Fiber* g = NextLocal(w)) return g;
  if (std::optional<Fiber*> g = inject.try_pop()) return *g;
  if (Fiber* g = TakeOverflow(w, /*batch=*/true)) return g;
  // The workers and the spares started so far (a prefix: they start in order).
  const unsigned n = slots_started.load(std::memory_order_relaxed);
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
      std::size_t got = v.queue.steal_half(w.queue);
      if (got != 0) {
        Bump(w.counters.stolen, got);
        if (w.queue.pop(&f)) return f;
      }
      // Nothing stealable: ask the victim to spill its yield ring (checked at its next
      // fairness pass). relaxed: a hint; the queue itself carries the fibers.
      if (!v.steal_request.load(std::memory_order_relaxed)) {
        v.steal_request.store(true, std::memory_order_relaxed);
      }
    }
    if (Fiber* g = RescueTimers(w)) return g;
  }
  return nullptr;
}

void Runtime::Impl::HelpHeld(Worker& w) {
  for (const auto& v : workers) {
    if (v.get() == &w || !v->held) continue;
    std::size_t got = v->queue.steal_half(w.queue);
    if (got != 0) Bump(w.counters.stolen, got);
    // Its timers as they come due: its owner is stuck, so no grace (RescueTimers keeps one
    // for a worker that is merely busy).
    Bump(w.counters.rescued, PopDueTimers(w, *v, /*try_lock=*/true));
  }
}

[[gnu::always_inline]] inline void Runtime::Impl::Run(Worker& w, Fiber* f) {
  if (IsTask(f)) [[unlikely]] {
    RunTask(w, f);
    return;
  }
  Started(w, f);
  jump_context(f->context(), f);
  // Back on the worker's own context: the last fiber of a chain of direct switches left.
  w.current = nullptr;
}

void Runtime::Impl::WaitIdle(Worker& w, std::uint32_t word, Clock::time_point deadline) {
  Bump(w.counters.sleeps);
  const Clock::time_point from = Clock::now();
  if (w.reactor != nullptr) {
    PollReactor(w, deadline);
  } else {
    auto left = std::chrono::ceil<std::chrono::microseconds>(deadline - from);
    base_internal::FutexWait(w.wake_word, word, std::max(left, std::chrono::microseconds(0)));
  }
  Bump(w.counters.idle_ns,
       static_cast<std::uint64_t>(
           std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - from).count()));
}

bool Runtime::Impl::WorkVisible(const Worker& w) const {
  bool work = inject.size_approx() != 0 || overflow_size.load(std::memory_order_relaxed) != 0 ||
              w.run_next != nullptr || w.yields.count != 0 ||
              w.has_mail.load(std::memory_order_relaxed) || w.pinned_local.count != 0;
  for (const auto& v : workers) work = work || v->queue.size_approx() != 0;
  return work;
}

void Runtime::Impl::Sleep(Worker& w) {
  // One clock reading for the watch floor and the deadline, so that a deadline set by the floor
  // equals it (WatchTimers compares them).
  const Clock::time_point start = Clock::now();
  const Clock::time_point watch_from =
      start + std::max<Clock::duration>(kRescueRetry, w.watch_backoff);
  w.watch_floor.store(watch_from.time_since_epoch().count(), std::memory_order_relaxed);
  // Listed, deciding, fenced (scheduler/internal/idle.h): every look below sees what was
  // published before a WakeOne or WatchTimers that did not see this worker listed.
  const std::uint32_t word = idle.BeginSleep(w);
  if (!WorkVisible(w) && !stop.load(std::memory_order_acquire)) {
    // Idle: a good moment for the stack pool's deferred give-back of memory.
    // Only after a second without stack churn (a burst's stacks stay for the next burst), and
    // 512 stacks at a time (~5 ms of munmap/madvise here), so new work waits little.
    if (StackPool::default_pool().trim_pending()) {
      StackPool::default_pool().flush_trim(std::chrono::seconds(1), 512);
    }
    // A safety net only: every way work arrives wakes a sleeper. It backs off while the
    // runtime stays idle (100 ms doubling to 1.6 s; 100 ms while stacks wait to be given back),
    // so that an idle runtime wakes each worker about once a second, not ten times (at ten, an
    // idle runtime used 0.3% of a core under TSan, and up to 1.8% while other processes shared
    // the cores).
    const auto net = StackPool::default_pool().trim_pending() ? kIdleNetMin : w.idle_net;
    w.idle_net = std::min(w.idle_net * 2, kIdleNetMax);
    Clock::time_point deadline = start + net;
    Clock::time_point watch = Clock::time_point::max();
    for (const auto& v : workers) {
      // relaxed: a hint (Worker::timer_head). Its own timers: until the earliest. A peer's:
      // until its earliest is overdue enough to rescue, and no sooner than watch_from
      // (kRescueRetry at first, so that a rescue that failed to take the lock tries again then
      // instead of spinning; then backing off, see Worker::watch_floor).
      Clock::rep head = v->timer_head.load(std::memory_order_relaxed);
      if (head == kNoTimer) continue;
      Clock::time_point due{Clock::duration(head)};
      if (v.get() == &w) {
        deadline = std::min(deadline, due);
      } else {
        watch = std::min(watch, std::max(SaturatingAfter(due, kTimerRescueGrace), watch_from));
      }
    }
    if (watch < deadline) {
      deadline = watch;
      w.watch_backoff =
          std::clamp<Clock::duration>(2 * w.watch_backoff, kTimerRescueGrace, kWatchMax);
    }
    w.watch_until.store(deadline.time_since_epoch().count(), std::memory_order_relaxed);
    WaitIdle(w, word, deadline);  // after the trim: idle_ns is the sleep
  }
  idle.EndSleep(w);  // still listed if nobody woke us (a timer, or the safety net)
  if (monitor != nullptr) monitor->WorkerAwake();
}

bool Runtime::Impl::Dormant(Worker& w) {
  // What became runnable here (its timers, its reactor's completions, what it held when it went
  // dormant) goes to the inject queue, for the workers; its fibers' next waits start there.
  if (w.has_mail.load(std::memory_order_relaxed)) TakeMail(w);
  PopDueTimers(w);
  if (w.reactor != nullptr && w.reactor->pending_ops() != 0) {
    PollReactor(w, Clock::time_point::min());
  }
  bool forwarded = false;
  while (Fiber* f = NextLocal(w)) {
    if (!inject.try_push(f)) ToOverflow(&f, 1);  // full: every worker takes from that too
    forwarded = true;
  }
  if (forwarded) WakeOne();
  ReturnCredits(w, w.credits.load(std::memory_order_relaxed));
  // acquire (both): pairs with the destructor's release, as in WorkerLoop.
  if (stop.load(std::memory_order_acquire) && credits.load(std::memory_order_acquire) == 0) {
    return true;
  }
  // Sleep until activated (SetSpareActive), mail, a completion or a timer of its own, or the
  // safety net. The word is read before the looks: a wake-up after them changes it (and the
  // reactor's wake() is held until its next poll).
  const std::uint32_t word = w.wake_word.load(std::memory_order_acquire);
  if (w.active.load(std::memory_order_relaxed) || stop.load(std::memory_order_acquire) ||
      w.has_mail.load(std::memory_order_relaxed)) {
    return false;
  }
  const bool pending = w.reactor != nullptr && w.reactor->pending_ops() != 0;
  // relaxed: its own heap's head (written under its lock by itself or a rescuer: a hint).
  const Clock::rep head = w.timer_head.load(std::memory_order_relaxed);
  const Clock::time_point now = Clock::now();
  Clock::time_point deadline = now + (pending || head != kNoTimer ? kIdleNetMin : kIdleNetMax);
  if (head != kNoTimer) deadline = std::min(deadline, Clock::time_point(Clock::duration(head)));
  WaitIdle(w, word, deadline);
  return false;
}

// SimLoop: a simulated runtime's loop (scheduler/simulation.cc has its pick and its wait).
void Runtime::Impl::SimLoop(Worker& w) {
  SimState& s = *sim;
  base_internal::t_virtual_now = &s.now_ns;
  sync_internal::t_deadline_service = &s;
  // A spell with nothing runnable and nothing to jump to, in real time: only another thread can
  // end it; with a thread in block_on, it is a deadlock, hinted once per spell.
  std::optional<std::chrono::steady_clock::time_point> stalled_since;
  for (;;) {
    if (!w.unstartable.empty()) [[unlikely]]
      FailUnstartable(w);
    if (Fiber* f = SimNext(w)) {
      stalled_since.reset();
      if (Prepare(w, f)) Run(w, f);
      continue;
    }
    // No fiber to run: a fork-join task of this worker's own deque, if one is left.
    if (fork_join->try_steal()) continue;
    ReturnCredits(w, w.credits.load(std::memory_order_relaxed));
    // acquire: pairs with the destructor's release, as in WorkerLoop.
    if (stop.load(std::memory_order_acquire) && credits.load(std::memory_order_acquire) == 0) {
      break;
    }
    // Every fiber waits: the virtual clock jumps to the earliest deadline, a timer's or a
    // cancellation's. relaxed: this thread's own heap (there is no other worker to rescue it).
    Clock::rep head = w.timer_head.load(std::memory_order_relaxed);
    if (!s.deadlines.empty()) head = std::min(head, s.deadlines.begin()->first);
    if (head != kNoTimer) {
      if (head > s.now_ns.load(std::memory_order_relaxed)) {
        s.now_ns.store(head, std::memory_order_relaxed);
      }
      continue;
    }
    SimWait(w);
    // relaxed: a hint, as in DeadlockSuspected.
    if (options.deadlock_hint_after > std::chrono::milliseconds::zero() &&
        block_on_waiters.load(std::memory_order_relaxed) != 0 &&
        stalled_since != std::chrono::steady_clock::time_point::max()) {
      const auto real_now = std::chrono::steady_clock::now();
      if (!stalled_since) {
        stalled_since = real_now;
      } else if (real_now - *stalled_since >= options.deadlock_hint_after) {
        stalled_since = std::chrono::steady_clock::time_point::max();  // hinted: once a spell
        DeadlockHint();
      }
    }
  }
  sync_internal::t_deadline_service = nullptr;
  base_internal::t_virtual_now = nullptr;
}

// FailUnstartable: the fibers that found no stack end without running; their joins rethrow a
// std::system_error with the allocation's error (ENOMEM). On the worker's own context, so the
// wake-ups of their joiners are ordinary schedules.
void Runtime::Impl::FailUnstartable(Worker& w) {
  std::vector<std::pair<Fiber*, std::error_code>> failed;
  failed.swap(w.unstartable);
  for (auto& [f, error] : failed) {
    Bump(w.counters.no_stack);
    FiberBody* body = std::exchange(f->body, nullptr);
    f->worker = &w;
    body->fail(std::make_exception_ptr(std::system_error(error, "weft: no stack for a fiber")));
    Retire(w, f, RecordKind::kFiber);  // (a task has no stack to fail to get)
  }
}

// ReleaseSpawnStates: at a worker's exit, on its thread. Join handles kept past the runtime may
// still hold SpawnStates from this worker's shard: then the shard is kept, unused (their frees
// land on its remote-free list, which nobody collects: a bounded leak per such runtime), instead
// of being destroyed under them.
static void ReleaseSpawnStates(Worker& w) {
  w.spawn_states->collect_mt_frees();
  if (w.spawn_states->stats().live_objects == 0) {
    w.spawn_states.reset();
    return;
  }
  static std::mutex mu;
  static auto* kept = new std::vector<std::unique_ptr<SizeClassShard>>();  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(w.spawn_states));
}

void Runtime::Impl::WorkerLoop(Worker& w) {
  t_worker = &w;
  w.errno_slot = &errno;  // this thread's: the worker loop never leaves its thread
  w.home = current_context();
  w.stacks = std::make_unique<StackCache>(StackPool::default_pool());
  // Emptied slabs kept for the next burst (up to 32 MiB): giving them back and mapping them
  // again would cost a page fault per page of each (~11 us here).
  w.spawn_states = std::make_unique<SizeClassShard>(SlabOptions{.max_empty_slabs = 512});
  install_stack_overflow_handler();
  set_waiter_provider(&ProvideWaiter, &w);
  // A spare has no split deque of its own in the fork-join pool (it holds one per worker);
  // Runtime::fork_join from a fiber on a spare runs its root on a worker's fiber.
  if (!w.spare) fork_join->attach_current_thread(w.index);
  int idle_passes = 0;
  bool was_active = false;  // a spare's: it served in its last pass
  // Busy again: the next idle spell's back-offs start over.
  auto end_idle_spell = [&] {
    idle_passes = 0;
    w.idle_net = kIdleNetMin;
    w.watch_backoff = Clock::duration::zero();
  };
  if (sim != nullptr) [[unlikely]] {
    SimLoop(w);
  } else {
    for (;;) {
      if (!w.unstartable.empty()) [[unlikely]]
        FailUnstartable(w);
      if (w.spare) [[unlikely]] {
        if (!w.active.load(std::memory_order_relaxed)) {
          if (was_active) {
            // A wake-up meant for any sleeping worker may have taken this one off the idle
            // list just before it went dormant: pass it on.
            was_active = false;
            WakeOne();
          }
          if (Dormant(w)) break;
          idle_passes = 0;
          continue;
        }
        was_active = true;
      }
      if (Fiber* f = FindWork(w)) {
        if (idle_passes != 0) [[unlikely]]
          end_idle_spell();
        if (Prepare(w, f)) Run(w, f);
        continue;
      }
      // No fiber to run: help a fork-join computation (the task runs here, on the worker's stack).
      if (!w.spare && fork_join->try_steal()) {
        end_idle_spell();
        continue;
      }
      ReturnCredits(w, w.credits.load(std::memory_order_relaxed));
      // acquire: pairs with the destructor's release.
      if (stop.load(std::memory_order_acquire) && credits.load(std::memory_order_acquire) == 0) {
        break;
      }
      if (++idle_passes < 64) {
        std::this_thread::yield();
        continue;
      }
      Sleep(w);
      idle_passes = 60;
    }
  }
  {
    std::lock_guard<std::mutex> lock(idle.lock());
    w.exited = true;  // no Wake() after this: the reactor goes away below
  }
  // Timers left behind are stale (every fiber finished): free them, and the spares.
  w.timer_mu.lock();
  w.timers.pop_all_due(Clock::time_point::max(),
                       [](TimerNode& node) { Release(reinterpret_cast<TimerEntry*>(&node)); });
  PublishTimerHead(w);
  w.timer_mu.unlock();
  while (TimerEntry* e = w.spare_timers) {
    w.spare_timers = e->next_spare;
    delete e;
  }
  w.spare_count = kSpareTimers;  // as if full: later frees here delete
  TakeMail(w);                   // cancel requests that raced with their completions
  w.reactor.reset();
  FreeTaskCloses(w);  // closes that the reactor's end left uncompleted (the fds are closed)
  if (!w.spare) fork_join->detach_current_thread();
  set_waiter_provider(nullptr, nullptr);
  w.stacks.reset();
  ReleaseSpawnStates(w);
  t_worker = nullptr;
}

}  // namespace weft
