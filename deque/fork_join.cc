// deque/fork_join.cc: the fork-join pool's worker loop, idling and waking, external submission,
// and the out-of-line slow paths of ForkJoinWorker (leapfrogging, stealing).
//
// Worker loop:   run submitted jobs  ->  steal from a random victim  ->  idle
// Idle stages:   up to 256 failed rounds: sched_yield between them;
//                after that: sleep on wake_word_, with a timeout of 100 us doubling up to 10 ms,
//                until woken or work is seen. Wake-ups are lossless (see WakeOne), so the timeout
//                is only a safety net; Lace caps it at 1 ms because it relies on timeouts more,
//                and that cap costs ~5% of a core per idle pool here (measured).
// Wake-ups:      run() wakes one sleeper; a worker that makes a task stealable, or steals and
//                sees more left, wakes one if any sleep (a cascade proportional to the work);
//                the destructor wakes all.

#include "weft/deque/fork_join.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(__linux__)
#include <pthread.h>
#endif

#include "weft/base/cpu_relax.h"
#include "weft/base/futex.h"

namespace weft {
namespace fork_join_internal {

void Die(const char* what) noexcept {
  std::fprintf(stderr, "weft: fork-join: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

}  // namespace fork_join_internal

namespace {

// The calling thread's worker. Set once per pool thread; read only by ForkJoinPool::run to
// detect a call from inside the pool (threads of a fork-join pool never migrate).
thread_local ForkJoinWorker* t_worker = nullptr;

constexpr int kYieldRounds = 256;
constexpr auto kSleepFirst = std::chrono::microseconds(100);
constexpr auto kSleepMax = std::chrono::microseconds(10000);

}  // namespace

ForkJoinWorker::ForkJoinWorker(ForkJoinPool& pool, unsigned index, std::size_t deque_capacity)
    : deque_(deque_capacity),
      pool_(&pool),
      index_(index),
      rng_(0x9E3779B97F4A7C15ull * (index + 1)) {}

void ForkJoinWorker::OnPublished() { pool_->WakeOne(); }

void ForkJoinWorker::CountOverflow() {
  // relaxed: a statistic.
  overflows_.fetch_add(1, std::memory_order_relaxed);
}

bool ForkJoinWorker::TrySteal() {
  const auto n = static_cast<unsigned>(pool_->workers_.size());
  if (n < 2) return false;
  // xorshift64: a random victim other than ourselves.
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  unsigned victim = static_cast<unsigned>(rng_ % (n - 1));
  if (victim >= index_) ++victim;
  SplitSteal r = pool_->workers_[victim]->deque_.steal(this, index_);
  if (r == SplitSteal::kStolen || r == SplitSteal::kStolenLast) {
    // relaxed: a statistic.
    steals_.fetch_add(1, std::memory_order_relaxed);
    if (r == SplitSteal::kStolen) pool_->WakeOne();  // more is left: let another help
    return true;
  }
  return false;
}

void ForkJoinWorker::WaitStolen(TaskSlot& slot) {
  int idle = 0;
  for (;;) {
    // acquire: pairs with the thief's release of kDone; the result is then visible.
    std::uint32_t thief = slot.thief.load(std::memory_order_acquire);
    if (thief == TaskSlot::kDone) return;
    if (thief >= TaskSlot::kFirstThief) {
      // Leapfrog: the thief's deque holds the stolen task's subtasks; running them helps it.
      ForkJoinWorker& other = *pool_->workers_[thief - TaskSlot::kFirstThief];
      SplitSteal r = other.deque_.steal(this, index_);
      if (r == SplitSteal::kStolen || r == SplitSteal::kStolenLast) {
        // relaxed: statistics.
        steals_.fetch_add(1, std::memory_order_relaxed);
        leapfrogs_.fetch_add(1, std::memory_order_relaxed);
        idle = 0;
        continue;
      }
    }
    if (++idle < 64) {
      CpuRelax();
    } else {
      std::this_thread::yield();
      idle = 0;
    }
  }
}

ForkJoinPool::ForkJoinPool(ForkJoinPoolOptions options)
    : submitted_(options.submit_capacity, [](Job*&&) {
        fork_join_internal::Die("ForkJoinPool destroyed while a run() was being submitted");
      }) {
  unsigned n = options.workers != 0 ? options.workers : std::thread::hardware_concurrency();
  if (n == 0) n = 1;
  workers_.reserve(n);
  for (unsigned i = 0; i < n; ++i) {
    workers_.push_back(std::make_unique<ForkJoinWorker>(*this, i, options.deque_capacity));
  }
  host_wake_ = options.host_wake;
  host_arg_ = options.host_arg;
  if (host_wake_ != nullptr) return;  // hosted: the host's threads are the workers
  threads_.reserve(n);
  for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this, i] { WorkerLoop(i); });
}

void ForkJoinPool::attach_current_thread(unsigned index) {
  if (host_wake_ == nullptr || index >= workers_.size()) {
    fork_join_internal::Die("attach_current_thread: not a hosted pool, or no such worker");
  }
  t_worker = workers_[index].get();
}

void ForkJoinPool::detach_current_thread() {
  if (t_worker != nullptr && t_worker->pool_ == this) t_worker = nullptr;
}

bool ForkJoinPool::try_steal() {
  ForkJoinWorker* self = CurrentWorker();
  return self != nullptr && self->TrySteal();
}

ForkJoinPool::~ForkJoinPool() {
  // release: workers that see stop_ also see everything submitted before it.
  stop_.store(true, std::memory_order_release);
  WakeAll();
  for (std::thread& t : threads_) t.join();
}

ForkJoinWorker* ForkJoinPool::CurrentWorker() const {
  return t_worker != nullptr && t_worker->pool_ == this ? t_worker : nullptr;
}

void ForkJoinPool::Submit(Job& job) {
  if (host_wake_ != nullptr) {
    fork_join_internal::Die("run() on a hosted pool from a thread its host did not attach");
  }
  Job* p = &job;
  while (!submitted_.try_push(p)) std::this_thread::yield();  // full: wait our turn
  WakeOne();
}

void ForkJoinPool::Await(Job& job) {
  for (int i = 0; i < 256; ++i) {
    // acquire: pairs with the worker's release of done; the result is then visible.
    if (job.done.load(std::memory_order_acquire) != 0) return;
    CpuRelax();
  }
  // acquire: as above. Our own futex rather than std::atomic::wait: libstdc++'s wait off Linux
  // (a mutex/condvar pool) can lose a notify and hang; the timeout bounds any lost wake too.
  while (job.done.load(std::memory_order_acquire) == 0) {
    base_internal::FutexWait(job.done, 0, kSleepMax);
  }
}

void ForkJoinPool::WakeOne() {
  if (host_wake_ != nullptr) {  // the host keeps its own sleepers (and its own Dekker fence)
    host_wake_(host_arg_);
    return;
  }
  // seq_cst: orders our publication of work (before this call) with the sleeper's
  // announcement in sleepers_ and its re-check for work (Dekker style): one of the two sides
  // sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // relaxed: ordered by the fence.
  if (sleepers_.load(std::memory_order_relaxed) == 0) return;
  // release: a woken worker that reads the new value sees our work.
  wake_word_.fetch_add(1, std::memory_order_release);
  base_internal::FutexWake(wake_word_, 1);
}

void ForkJoinPool::WakeAll() {
  // release: as in WakeOne.
  wake_word_.fetch_add(1, std::memory_order_release);
  base_internal::FutexWake(wake_word_, 1 << 30);
}

void ForkJoinPool::WorkerLoop(unsigned index) {
  ForkJoinWorker& self = *workers_[index];
  t_worker = &self;
#if defined(__linux__)
  std::string name = "weft-fj-" + std::to_string(index);
  pthread_setname_np(pthread_self(), name.c_str());
#endif
  int idle_rounds = 0;
  auto sleep_for = kSleepFirst;
  for (;;) {
    if (std::optional<Job*> job = submitted_.try_pop()) {
      (*job)->run(**job, self);
      // release: the result happens before the submitter's acquire of done.
      (*job)->done.store(1, std::memory_order_release);
      // The submitter may already have returned and freed the job: a wake names the address
      // only and never touches the memory behind it.
      base_internal::FutexWake((*job)->done, 1);
      idle_rounds = 0;
      sleep_for = kSleepFirst;
      continue;
    }
    if (self.TrySteal()) {
      idle_rounds = 0;
      sleep_for = kSleepFirst;
      continue;
    }
    // acquire: pairs with the destructor's release; nothing is left to run once we get here.
    if (stop_.load(std::memory_order_acquire)) return;
    if (++idle_rounds < kYieldRounds) {
      std::this_thread::yield();
      continue;
    }
    // Sleep. Announce first, then look once more, so that a waker either sees us or we see
    // its work (see WakeOne).
    // relaxed + fence: the fence orders the announcement before the re-checks below.
    sleepers_.fetch_add(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // acquire: a wake after this read changes the word, and the futex then returns at once.
    std::uint32_t word = wake_word_.load(std::memory_order_acquire);
    bool work_seen = submitted_.size_approx() != 0 || stop_.load(std::memory_order_acquire);
    for (const auto& w : workers_) work_seen = work_seen || w->deque_.has_shared_work();
    if (!work_seen) {
      // relaxed: a statistic.
      self.sleeps_.fetch_add(1, std::memory_order_relaxed);
      base_internal::FutexWait(wake_word_, word, sleep_for);
      sleep_for = std::min(sleep_for * 2, kSleepMax);
    }
    // relaxed: only a count of sleepers; wakers tolerate a stale view (timeouts bound it).
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    idle_rounds = kYieldRounds - 1;  // one more look for work, then sleep again
  }
}

ForkJoinStats ForkJoinPool::stats() const {
  ForkJoinStats s;
  for (const auto& w : workers_) {
    // relaxed: statistics.
    s.steals += w->steals_.load(std::memory_order_relaxed);
    s.leapfrogs += w->leapfrogs_.load(std::memory_order_relaxed);
    s.overflows += w->overflows_.load(std::memory_order_relaxed);
    s.sleeps += w->sleeps_.load(std::memory_order_relaxed);
  }
  return s;
}

}  // namespace weft
