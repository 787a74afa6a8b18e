// scheduler/idle_model_test.cc: the workers' sleep/wake handshake (scheduler/internal/idle.h)
// under the model checker (--config=model).
//
// The workers and the work are idle_model_body.h's stand-ins; a worker's sleep has no timeout,
// so a lost wake-up is a schedule in which every thread waits for a write nobody will make.
// Whatever the interleaving: every item pushed is taken, a new earliest timer deadline reaches a
// sleeper's deadline, and a worker's mail wakes it.

#include <cstdint>
#include <mutex>

#include "gtest/gtest.h"
#include "idle_model_body.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"

namespace weft::scheduler_internal {
namespace {

using model::check;
using model::ExpectAllSchedulesPass;

// One worker that goes to sleep; one push. The push's WakeOne and the worker's look after
// BeginSleep: one sees the other.
TEST(IdleModelTest, APushWakesASleepingWorker) {
  ExpectAllSchedulesPass(check([] { PushesToOneWorker(1); }, {.preemption_bound = 3}));
}

// Two workers, two pushes: each push wakes a sleeper or is found by a worker's look, and nothing
// is left queued with both asleep; a worker woken for an item the other took sleeps again.
TEST(IdleModelTest, TwoWorkers) {
  ExpectAllSchedulesPass(check(
      [] {
        ModelIdle idle;
        ModelWorker a, b;
        WorkPool pool;
        model::thread worker_a([&] { WorkerLoop(idle, a, pool); });
        model::thread worker_b([&] { WorkerLoop(idle, b, pool); });
        pool.Push(idle);
        pool.Push(idle);
        AwaitTaken(pool, 2);
        ModelWorker* all[] = {&a, &b};
        pool.Stop(idle, all, 2);
        worker_a.join();
        worker_b.join();
      },
      {.preemption_bound = 1}));
}

// Pushes one after the other while the worker goes back to sleep between them: a wake-up that
// lands before the worker blocks (its word moved) is not lost, and a stale one is harmless.
TEST(IdleModelTest, BackToBackPushes) {
  ExpectAllSchedulesPass(check([] { PushesToOneWorker(2); }, {.preemption_bound = 2}));
}

// A worker's mailbox (the runtime's Mail): written under the mailbox's lock, then WakeWorker
// for that worker in particular, with no fence: the idle list's lock orders it.
TEST(IdleModelTest, MailWakesItsWorker) {
  ExpectAllSchedulesPass(check(
      [] {
        ModelIdle idle;
        ModelWorker w;
        sync_internal::SpinLock mail_mu;
        model::Cell<int> mail(0);            // guarded by mail_mu
        weft::atomic<bool> has_mail{false};  // a hint, written under mail_mu
        weft::atomic<bool> got{false};
        model::thread worker([&] {
          for (;;) {
            if (has_mail.load(std::memory_order_relaxed)) {
              std::lock_guard<sync_internal::SpinLock> guard(mail_mu);
              WEFT_MODEL_ASSERT(mail.get() == 1);
              got.store(true, std::memory_order_release);
              return;
            }
            const std::uint32_t word = idle.BeginSleep(w);
            if (!has_mail.load(std::memory_order_relaxed)) Block(w, word);
            idle.EndSleep(w);
          }
        });
        {
          std::lock_guard<sync_internal::SpinLock> guard(mail_mu);
          mail.set(1);
          has_mail.store(true, std::memory_order_relaxed);  // the lock publishes the mail
        }
        idle.WakeWorker(w);
        worker.join();
        WEFT_MODEL_ASSERT(got.load());
        WEFT_MODEL_ASSERT(idle.sleepers() == 0);
      },
      {.preemption_bound = 3}));
}

// A new earliest timer deadline on one worker (the owner) and another going to sleep: the
// sleeper's chosen deadline includes it, or WatchTimers wakes it to choose again. The sleeper
// sleeps without end while it knows no deadline, and sleeps until its deadline (here: returns,
// time having passed) once it does.
TEST(IdleModelTest, ANewDeadlineReachesASleeper) {
  ExpectAllSchedulesPass(check(
      [] {
        constexpr std::int64_t kHead = 100, kGrace = 1;
        ModelIdle idle;
        ModelWorker owner, sleeper;
        weft::atomic<std::int64_t> owner_head{kNoDeadline};  // the owner's Worker::timer_head
        model::thread sleeping([&] {
          for (;;) {
            const std::uint32_t word = idle.BeginSleep(sleeper);
            // relaxed: a hint (Worker::timer_head); BeginSleep's fence orders it.
            const std::int64_t head = owner_head.load(std::memory_order_relaxed);
            const std::int64_t deadline = head == kNoDeadline ? kNoDeadline : head + kGrace;
            sleeper.watch_until.store(deadline, std::memory_order_relaxed);
            if (deadline == kNoDeadline) Block(sleeper, word);
            idle.EndSleep(sleeper);
            if (deadline != kNoDeadline) return;  // it would wake by head + grace
          }
        });
        // relaxed: the runtime's store under its timer lock; WatchTimers' fence orders it.
        owner_head.store(kHead, std::memory_order_relaxed);
        ModelWorker* all[] = {&owner, &sleeper};
        idle.WatchTimers(all, owner, kHead + kGrace);
        sleeping.join();
      },
      {.preemption_bound = 3}));
}

}  // namespace
}  // namespace weft::scheduler_internal
