// scheduler/idle_model_body.h: the model tests' stand-ins for workers around the sleep/wake
// handshake (scheduler/internal/idle.h), shared by idle_model_test.cc and
// idle_planted_bug_model_test.cc.
//
// A model thread plays a worker's loop reduced to the handshake: take work if there is some,
// else BeginSleep, look again, and block (spin) until its wake word moves. The block has no
// timeout here (the runtime's safety-net timeout would hide a lost wake-up), so a lost wake-up
// is a schedule in which no thread can make progress.

#ifndef WEFT_SCHEDULER_IDLE_MODEL_BODY_H_
#define WEFT_SCHEDULER_IDLE_MODEL_BODY_H_

#include <cstdint>
#include <mutex>

#include "weft/base/atomic.h"
#include "weft/base/cpu_relax.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"
#include "weft/scheduler/internal/idle.h"
#include "weft/sync/internal/spin_lock.h"

namespace weft::scheduler_internal {

// ModelWorker: the fields of scheduler/internal/worker.h's Worker that the handshake uses.
struct ModelWorker {
  // A plain bool in the runtime, guarded by the list's lock: the checker reports an access
  // outside it.
  model::CheckedBool sleeping;
  weft::atomic<std::uint32_t> wake_word{0};
  weft::atomic<std::int64_t> watch_until{0};
  weft::atomic<std::int64_t> watch_floor{0};
  // Wake: the runtime's adds to wake_word, then wakes the futex or the reactor; here the
  // blocked worker spins on wake_word.
  void Wake() { wake_word.fetch_add(1, std::memory_order_release); }
};

using ModelIdle = IdleWorkers<ModelWorker, sync_internal::SpinLock>;

// Block: the worker's sleep, without a timeout: until a wake moves its word.
inline void Block(ModelWorker& w, std::uint32_t word) {
  while (w.wake_word.load(std::memory_order_acquire) == word) CpuRelax();
}

// WorkPool: run queues reduced to a count of queued items.
struct WorkPool {
  weft::atomic<int> queued{0};
  weft::atomic<int> taken{0};
  weft::atomic<bool> stop{false};
  // Push: release, as a run queue's push; then the publisher's WakeOne.
  void Push(ModelIdle& idle) {
    queued.fetch_add(1, std::memory_order_release);
    idle.WakeOne();
  }
  bool TryTake() {
    int n = queued.load(std::memory_order_acquire);
    while (n > 0) {
      if (queued.compare_exchange_weak(n, n - 1, std::memory_order_acquire)) {
        taken.fetch_add(1, std::memory_order_release);
        return true;
      }
    }
    return false;
  }
  // Stop: the runtime's shutdown: once all is taken, stop, and wake every worker.
  void Stop(ModelIdle& idle, ModelWorker* const* workers, int n) {
    stop.store(true, std::memory_order_release);
    std::lock_guard<sync_internal::SpinLock> guard(idle.lock());
    for (int i = 0; i < n; ++i) workers[i]->Wake();
  }
};

// WorkerLoop: runs until stopped: takes work, or sleeps (the runtime's Sleep: BeginSleep, a
// relaxed look at the queue, then block unless there is work or the word moved).
inline void WorkerLoop(ModelIdle& idle, ModelWorker& w, WorkPool& pool) {
  for (;;) {
    if (pool.TryTake()) continue;
    if (pool.stop.load(std::memory_order_acquire)) return;
    const std::uint32_t word = idle.BeginSleep(w);
    // relaxed: the runtime's size_approx looks; BeginSleep's fence orders them.
    if (pool.queued.load(std::memory_order_relaxed) == 0 &&
        !pool.stop.load(std::memory_order_acquire)) {
      Block(w, word);
    }
    idle.EndSleep(w);
  }
}

// AwaitTaken: the test body waits until n items were taken.
inline void AwaitTaken(WorkPool& pool, int n) {
  while (pool.taken.load(std::memory_order_acquire) < n) CpuRelax();
}

// PushesToOneWorker: a model body: one worker thread; the body pushes `pushes` items one after
// the other, waits until all are taken, and stops the worker.
inline void PushesToOneWorker(int pushes) {
  ModelIdle idle;
  ModelWorker w;
  WorkPool pool;
  model::thread worker([&] { WorkerLoop(idle, w, pool); });
  for (int i = 0; i < pushes; ++i) pool.Push(idle);
  AwaitTaken(pool, pushes);
  ModelWorker* all[] = {&w};
  pool.Stop(idle, all, 1);
  worker.join();
  WEFT_MODEL_ASSERT(idle.sleepers() == 0);
}

}  // namespace weft::scheduler_internal

#endif  // WEFT_SCHEDULER_IDLE_MODEL_BODY_H_
