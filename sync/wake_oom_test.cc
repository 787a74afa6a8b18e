// sync/wake_oom_test.cc: the wake-alls (CondVar::broadcast, WaitGroup reaching zero, Barrier,
// Semaphore::release, Channel::close) when the heap refuses memory: every waiter is still woken,
// nothing throws, and the primitive's lock is released (the next use does not hang).
//
// The binary replaces the global operator new (and delete) with one that fails, with
// std::bad_alloc, on a thread that asked for it (FailAllocationsHere); the other threads
// allocate normally.

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/sync/channel.h"
#include "weft/sync/coordination.h"
#include "weft/sync/mutex.h"
#include "weft/sync/waiter.h"

namespace {
thread_local bool t_fail_new = false;
}  // namespace

void* operator new(std::size_t n) {
  if (t_fail_new) throw std::bad_alloc();
  if (void* p = std::malloc(n != 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace weft {
namespace {

constexpr int kWaiters = 16;

// FailAllocationsHere: for its scope, operator new fails on this thread.
struct FailAllocationsHere {
  FailAllocationsHere() { t_fail_new = true; }
  ~FailAllocationsHere() { t_fail_new = false; }
};

// WakeWithoutMemory: runs wake() with this thread's allocations failing. A throw means the
// primitive may still hold its lock and its waiters may never wake: the test cannot go on.
template <typename F>
void WakeWithoutMemory(F wake) {
  bool threw = false;
  {
    FailAllocationsHere no_memory;
    try {
      wake();
    } catch (const std::bad_alloc&) {
      threw = true;
    }
  }
  if (threw) {
    std::fprintf(stderr, "the wake-all threw std::bad_alloc; its waiters would wait forever\n");
    std::abort();
  }
}

TEST(WakeWithoutMemoryTest, TheAllocationFailsAsTheTestIntends) {
  FailAllocationsHere no_memory;
  EXPECT_THROW((void)std::vector<int>(100), std::bad_alloc);
}

TEST(WakeWithoutMemoryTest, CondVarBroadcastWakesEveryWaiter) {
  Mutex mu;
  CondVar cv;
  bool go = false;
  int waiting = 0;
  std::atomic<int> woken{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&] {
      (void)mu.lock();
      ++waiting;
      while (!go) (void)cv.wait(mu);
      (void)mu.unlock();
      woken.fetch_add(1);
    });
  }
  // Every waiter is queued once it has counted itself and released the mutex in wait().
  for (;;) {
    (void)mu.lock();
    if (waiting == kWaiters) break;
    (void)mu.unlock();
    std::this_thread::yield();
  }
  go = true;
  (void)mu.unlock();
  WakeWithoutMemory([&] { cv.broadcast(); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(woken.load(), kWaiters);
  cv.signal();  // the queue's lock was released
  cv.broadcast();
}

TEST(WakeWithoutMemoryTest, BarrierReleasesEveryParty) {
  Barrier barrier(kWaiters + 1);
  std::atomic<int> leaders{0};
  std::vector<std::thread> threads;
  auto arrive = [&] {
    (void)current_waiter();  // made before allocations fail
    Result<bool> r = false;
    WakeWithoutMemory([&] { r = barrier.arrive_and_wait(); });  // the last one wakes the rest
    ASSERT_TRUE(r.ok());
    if (*r) leaders.fetch_add(1);
  };
  for (int i = 0; i < kWaiters; ++i) threads.emplace_back(arrive);
  arrive();
  for (auto& t : threads) t.join();
  EXPECT_EQ(leaders.load(), 1);
}

TEST(WakeWithoutMemoryTest, WaitGroupReachingZeroWakesEveryWaiter) {
  WaitGroup wg;
  ASSERT_TRUE(wg.add(1).ok());
  std::atomic<int> woken{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&] {
      EXPECT_TRUE(wg.wait().ok());
      woken.fetch_add(1);
    });
  }
  WakeWithoutMemory([&] { wg.done(); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(woken.load(), kWaiters);
  EXPECT_TRUE(wg.add(1).ok());  // its lock was released
}

TEST(WakeWithoutMemoryTest, SemaphoreReleaseHandsEveryPermit) {
  Semaphore sem(0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&] { EXPECT_TRUE(sem.acquire().ok()); });
  }
  WakeWithoutMemory([&] { sem.release(kWaiters + 3); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(sem.available(), 3);
}

TEST(WakeWithoutMemoryTest, ChannelCloseWakesEveryReceiver) {
  Channel<int> ch(1);
  std::atomic<int> closed_seen{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&] {
      if (!ch.recv().ok()) closed_seen.fetch_add(1);
    });
  }
  while (ch.waiters() != static_cast<std::size_t>(kWaiters)) std::this_thread::yield();
  WakeWithoutMemory([&] { ch.close(); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(closed_seen.load(), kWaiters);
  EXPECT_TRUE(ch.closed());
}

}  // namespace
}  // namespace weft
