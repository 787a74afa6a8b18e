// scheduler/task_lifetime_test.cc: what a spawned task owns, and when it goes: its coroutine
// (parameters, captures) ends with the task, and the memory of its outermost frame goes with
// its join state, freed exactly once by whichever of the task's end and its handle's join or
// drop comes second, whatever the spawn's form, out of memory at any step, and handles kept
// past the runtime. And the options of a task's waits: an awaiter keeps what it needs of the
// options it was made with (made from temporaries and awaited later), a CondVar's re-lock is
// not ended by them, and a Barrier arrival given up is withdrawn. Run on 1, 2 and 4 workers,
// under asan (leaks, double frees) and tsan.

#include <atomic>
#include <chrono>
#include <coroutine>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/task.h"
#include "weft/scheduler/task_group.h"
#include "weft/scheduler/testing/eager.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/channel.h"
#include "weft/sync/coordination.h"
#include "weft/sync/mutex.h"
#include "weft/sync/timer.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::Eager;
using testing::StressScale;

std::atomic<long> g_live{0};
std::atomic<long> g_made{0};

// Tracked: counts live instances; its destructor also flags an optional atomic.
struct Tracked {
  std::atomic<int>* ended = nullptr;
  bool owner = true;
  Tracked() {
    g_live.fetch_add(1);
    g_made.fetch_add(1);
  }
  explicit Tracked(std::atomic<int>* e) : ended(e) {
    g_live.fetch_add(1);
    g_made.fetch_add(1);
  }
  Tracked(Tracked&& o) noexcept : ended(std::exchange(o.ended, nullptr)) {
    g_live.fetch_add(1);
    g_made.fetch_add(1);
  }
  Tracked(const Tracked& o) : ended(nullptr) {
    (void)o;
    g_live.fetch_add(1);
    g_made.fetch_add(1);
  }
  ~Tracked() {
    if (ended != nullptr) ended->fetch_add(1);
    g_live.fetch_sub(1);
  }
};

struct TrackedError : std::runtime_error {
  Tracked t;
  explicit TrackedError(const char* m) : std::runtime_error(m) {}
};

Task<int> FreeFn(Tracked t, int v, int mode) {
  (void)t;
  if (mode & 1) co_await this_task::yield();
  if (mode & 2) (void)co_await this_task::sleep_for(std::chrono::microseconds(mode * 7 % 50));
  if (mode & 4) throw TrackedError("boom");
  co_return v;
}

Task<int> BigFrame(Tracked t, int v) {
  (void)t;
  volatile char big[20000];
  for (std::size_t i = 0; i < sizeof big; i += 4096) big[i] = static_cast<char>(v);
  co_await this_task::yield();
  co_return v + big[0] - static_cast<char>(v);
}

Task<int> Child(Tracked t, int v) {
  (void)t;
  co_await this_task::yield();
  if (v % 3 == 0) throw TrackedError("child");
  co_return v;
}

Task<int> Nested(Tracked t, int v) {
  (void)t;
  int sum = 0;
  for (int i = 0; i < 3; ++i) {
    try {
      sum += co_await Child(Tracked(), v + i);
    } catch (const TrackedError&) {
      sum += 100;
    }
  }
  co_return sum;
}

class TaskLifetime : public ::testing::TestWithParam<unsigned> {
 protected:
  void SetUp() override { base_live_ = g_live.load(); }
  void TearDown() override { EXPECT_EQ(g_live.load(), base_live_) << "Tracked objects leaked"; }
  long base_live_ = 0;
};
INSTANTIATE_TEST_SUITE_P(Workers, TaskLifetime, ::testing::Values(1u, 2u, 4u));

// Every form of spawn, every mode, joined/dropped from threads, fibers, tasks, at random times;
// parameters and captures end as the task ends, before any join.
TEST_P(TaskLifetime, FramesOfEveryFormEndWithTheTaskAndAreFreedOnce) {
  Runtime rt({.workers = GetParam()});
  const int n = 300 * StressScale();
  std::mt19937 rng(7);
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> ended{0};
    std::vector<JoinHandle<int>> hs;
    std::vector<int> expect;
    for (int i = 0; i < n; ++i) {
      const int mode = static_cast<int>(rng() % 8);
      const int form = static_cast<int>(rng() % 4);
      JoinHandle<int> h;
      switch (form) {
        case 0:
          h = rt.spawn_task(FreeFn(Tracked(&ended), i, mode));
          break;
        case 1:
          h = rt.spawn_task([&ended, i, mode] { return FreeFn(Tracked(&ended), i, mode); });
          break;
        case 2:
          h = rt.spawn_task([t = Tracked(&ended), i, mode]() -> Task<int> {
            if (mode & 1) co_await this_task::yield();
            if (mode & 4) throw TrackedError("lambda");
            co_return i + (t.ended != nullptr ? 0 : 1000000);
          });
          break;
        case 3:
          h = rt.spawn_task(Nested(Tracked(&ended), i), FiberOptions{.pinned_worker = i % 3});
          break;
      }
      if (rng() % 5 == 0) {
        h.detach();
        expect.push_back(-1);
        hs.push_back(std::move(h));
        continue;
      }
      int e = (mode & 4) && form != 3 ? -2 : i;
      if (form == 3) {
        e = 0;
        for (int k = 0; k < 3; ++k) e += (i + k) % 3 == 0 ? 100 : i + k;
      }
      expect.push_back(e);
      hs.push_back(std::move(h));
    }
    // Every task ends (its parameter / capture destroyed) with no join.
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (ended.load() < n && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(1ms);
    }
    ASSERT_EQ(ended.load(), n) << "a task's parameters outlived its end";
    // Join half from a task on the runtime, the rest from this thread.
    auto joiner = rt.spawn_task([&]() -> Task<int> {
      int bad = 0;
      for (std::size_t i = 0; i < hs.size(); i += 2) {
        if (expect[i] == -1) {
          if (hs[i].joinable()) ++bad;
          continue;
        }
        try {
          Result<int> r = co_await hs[i];
          if (!r.ok() || *r != expect[i]) ++bad;
        } catch (const TrackedError&) {
          if (expect[i] != -2) ++bad;
        }
      }
      co_return bad;
    });
    EXPECT_EQ(*joiner.join(), 0);
    for (std::size_t i = 1; i < hs.size(); i += 2) {
      if (expect[i] == -1) continue;
      if (rng() % 4 == 0) {
        hs[i].detach();
        continue;
      }
      try {
        Result<int> r = hs[i].join();
        EXPECT_TRUE(r.ok());
        if (r.ok()) EXPECT_EQ(*r, expect[i]) << i;
      } catch (const TrackedError&) {
        EXPECT_EQ(expect[i], -2);
      }
    }
    hs.clear();
  }
}

// A handle dropped while the task finishes, from another worker's fiber and from threads: the
// second to let go frees state and frame (asan: no double free, no leak; tsan: no race).
TEST_P(TaskLifetime, DropRacesTheEnd) {
  Runtime rt({.workers = GetParam()});
  const int n = 400 * StressScale();
  Channel<JoinHandle<int>> ch(64);
  std::atomic<int> ended{0};
  auto dropper = rt.spawn([&] {
    for (;;) {
      Result<JoinHandle<int>> h = ch.recv();
      if (!h.ok()) return;
      if (h->joinable() && (reinterpret_cast<std::uintptr_t>(&h) & 16)) (void)h->join();
    }
  });
  std::thread thread_dropper([&] {
    for (int i = 0; i < n; ++i) {
      JoinHandle<int> h = rt.spawn_task(FreeFn(Tracked(&ended), i, i % 2));
      if (i % 3 == 0) std::this_thread::yield();
    }
  });
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(ch.send(rt.spawn_task(FreeFn(Tracked(&ended), i, i % 4))).ok());
  }
  ch.close();
  thread_dropper.join();
  (void)dropper.join();
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (ended.load() < 2 * n && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(ended.load(), 2 * n);
}

// Handles of finished tasks (slab and heap frames) kept past their runtime, joined from a task of
// another runtime, a fiber of it, and dropped on a plain thread.
TEST_P(TaskLifetime, HandlesPastTheRuntimeJoinedElsewhere) {
  std::vector<JoinHandle<int>> kept;
  std::atomic<int> ended{0};
  {
    Runtime a({.workers = GetParam()});
    a.block_on([&] {
      for (int i = 0; i < 60; ++i) {
        if (i % 2 == 0) {
          kept.push_back(a.spawn_task(BigFrame(Tracked(&ended), i)));
        } else {
          kept.push_back(a.spawn_task(FreeFn(Tracked(&ended), i, i % 8)));
        }
      }
      // Also from a task of a's.
      auto h = a.spawn_task([&]() -> Task<> {
        for (int i = 60; i < 80; ++i) kept.push_back(a.spawn_task(FreeFn(Tracked(&ended), i, 1)));
        co_return;
      });
      (void)h.join();
    });
  }
  EXPECT_EQ(ended.load(), 80);
  Runtime b({.workers = GetParam()});
  auto t = b.spawn_task([&]() -> Task<int> {
    int got = 0;
    for (int i = 0; i < 30; ++i) {
      try {
        Result<int> r = co_await kept[static_cast<std::size_t>(i)];
        if (r.ok() && *r == i) ++got;
      } catch (const TrackedError&) {
        ++got;
      }
    }
    co_return got;
  });
  EXPECT_EQ(*t.join(), 30);
  auto f = b.spawn([&] {
    int got = 0;
    for (int i = 30; i < 60; ++i) {
      try {
        Result<int> r = kept[static_cast<std::size_t>(i)].join();
        if (r.ok() && *r == i) ++got;
      } catch (const TrackedError&) {
        ++got;
      }
    }
    return got;
  });
  EXPECT_EQ(*f.join(), 30);
  kept.clear();  // the rest dropped here
}

// Out of memory at every allocation of a spawn (state, frame, a child's frame), by every form,
// from a thread and from a task: nothing leaks, parameters are destroyed exactly once.
TEST_P(TaskLifetime, NoMemoryAtEachStep) {
  using scheduler_internal::g_fail_spawn_states;
  Runtime rt({.workers = GetParam()});
  for (int fail = 1; fail <= 4; ++fail) {
    for (int form = 0; form < 4; ++form) {
      std::atomic<int> ended{0};
      const long made_before = g_made.load();
      auto attempt = [&]() -> int {
        try {
          JoinHandle<int> h;
          switch (form) {
            case 0:
              h = rt.spawn_task(Nested(Tracked(&ended), 1));
              break;
            case 1:
              h = rt.spawn_task([&] { return Nested(Tracked(&ended), 1); });
              break;
            case 2:
              h = rt.spawn_task([t = Tracked(&ended)]() -> Task<int> {
                co_return co_await Nested(Tracked(), 1);
              });
              break;
            case 3:
              h = rt.spawn_task(FreeFn(Tracked(&ended), 5, 1));
              break;
          }
          Result<int> r = h.join();
          return r.ok() ? *r : -1;
        } catch (const std::bad_alloc&) {
          return -2;
        } catch (const TrackedError&) {
          return -3;
        }
      };
      g_fail_spawn_states = fail;
      const int r = attempt();
      g_fail_spawn_states = 0;
      (void)r;
      (void)made_before;
      // From a task too.
      g_fail_spawn_states = 0;
      auto outer = rt.spawn_task([&]() -> Task<int> {
        g_fail_spawn_states = fail;
        int v;
        try {
          JoinHandle<int> h = form % 2 ? rt.spawn_task(FreeFn(Tracked(&ended), 3, 3))
                                       : rt.spawn_task(Nested(Tracked(&ended), 2));
          g_fail_spawn_states = 0;
          Result<int> got = co_await h;
          v = got.ok() ? *got : -1;
        } catch (const std::bad_alloc&) {
          v = -2;
        }
        g_fail_spawn_states = 0;
        co_return v;
      });
      Result<int> o = -9;
      try {
        o = outer.join();
      } catch (const std::bad_alloc&) {
        o = -5;
      }
      g_fail_spawn_states = 0;
      (void)o;
    }
  }
  g_fail_spawn_states = 0;
  EXPECT_EQ(*rt.spawn_task(FreeFn(Tracked(), 9, 3)).join(), 9);
}

// Awaiters made with temporary options, awaited later (after the temporaries are gone and the
// stack reused), from a task; the deadline, the token, and a token's cancel_at each hold.
TEST_P(TaskLifetime, AwaitersKeepTheirOptionsMadeFromTemporaries) {
  Runtime rt({.workers = GetParam()});
  auto h = rt.spawn_task([&]() -> Task<int> {
    int bad = 0;
    auto soon = [] { return WaitOptions{.deadline = SyncClock::now() + 3ms}; };
    Event ev;
    Semaphore sem(0);
    WaitGroup wg;
    (void)wg.add(1);
    Barrier bar(2);
    Mutex mu;
    CondVar cv;
    Channel<int> ch;
    Timer tm(1h);
    auto g_holder = std::make_unique<TaskGroup<int>>(rt);
    TaskGroup<int>& g = *g_holder;
    Event never_set;
    (void)g.spawn_task([&]() -> Task<int> {
      (void)co_await never_set.async_wait();
      co_return 1;
    });
    auto self_h = rt.spawn_task([&]() -> Task<int> {
      (void)co_await never_set.async_wait();
      co_return 1;
    });
    {
      auto a1 = ev.async_wait(soon());
      auto a2 = sem.async_acquire(soon());
      auto a3 = wg.async_wait(soon());
      auto a4 = bar.async_arrive_and_wait(soon());
      auto a5 = ch.async_recv(soon());
      auto a6 = tm.async_wait(soon());
      auto a7 = g.async_join_next(soon());
      auto a8 = self_h.async_join(soon());
      auto a9 = this_task::sleep_for(1ms);
      // clobber the stack between the temporaries and the awaits
      volatile char junk[512];
      for (auto& c : junk) c = static_cast<char>(0xAB);
      const auto t0 = SyncClock::now();
      if ((co_await a1) != std::errc::timed_out) ++bad;
      if ((co_await a2) != std::errc::timed_out) ++bad;
      if ((co_await a3) != std::errc::timed_out) ++bad;
      if ((co_await a4) != std::errc::timed_out) ++bad;
      if ((co_await a5) != std::errc::timed_out) ++bad;
      if ((co_await a6) != std::errc::timed_out) ++bad;
      if ((co_await a7) != std::errc::timed_out) ++bad;
      if ((co_await a8) != std::errc::timed_out) ++bad;
      if (!(co_await a9).ok()) ++bad;
      if (SyncClock::now() - t0 > 5s) ++bad;
    }
    // Semaphore: no permit leaked by the timeout; Barrier: the arrival was withdrawn.
    if (sem.available() != 0) bad += 100;
    sem.release(1);
    if (!(co_await sem.async_acquire(soon())).ok()) bad += 1000;
    if (sem.available() != 0) bad += 100;
    // With a token's cancel_at earlier than the deadline: canceled, not timed out.
    {
      CancellationSource src;
      (void)src.cancel_after(2ms);
      CancellationToken tok = src.token();
      auto b1 = ev.async_wait(WaitOptions{.deadline = SyncClock::now() + 1h, .cancel = &tok});
      auto b2 = sem.async_acquire(WaitOptions{.deadline = SyncClock::now() + 1h, .cancel = &tok});
      auto b3 = mu.async_lock(WaitOptions{.cancel = &tok});
      auto b4 = this_task::sleep_for(1h, &tok);
      auto b5 = ch.async_recv(WaitOptions{.cancel = &tok});
      auto b6 = tm.async_wait(WaitOptions{.cancel = &tok});
      auto b7 = g.async_join_next(WaitOptions{.cancel = &tok});
      auto b8 = self_h.async_join(WaitOptions{.cancel = &tok});
      auto b9 = bar.async_arrive_and_wait(WaitOptions{.cancel = &tok});
      if ((co_await b1) != std::errc::operation_canceled) bad += 10000;
      if ((co_await b2) != std::errc::operation_canceled) bad += 10000;
      if ((co_await b3).ok() && !mu.unlock().ok()) bad += 1;  // not held: it takes it
      if ((co_await b4) != std::errc::operation_canceled) bad += 10000;
      if ((co_await b5) != std::errc::operation_canceled) bad += 10000;
      if ((co_await b6) != std::errc::operation_canceled) bad += 10000;
      if ((co_await b7) != std::errc::operation_canceled) bad += 10000;
      if ((co_await b8) != std::errc::operation_canceled) bad += 10000;
      if ((co_await b9) != std::errc::operation_canceled) bad += 10000;
    }
    if (sem.available() != 0) bad += 100;
    // Barrier still works for 2 parties after two withdrawn arrivals.
    auto partner = rt.spawn(
        [&] { return bar.arrive_and_wait(WaitOptions{.deadline = SyncClock::now() + 10s}); });
    Result<bool> mine =
        co_await bar.async_arrive_and_wait(WaitOptions{.deadline = SyncClock::now() + 10s});
    Result<Result<bool>> theirs = co_await partner;
    if (!mine.ok() || !theirs.ok() || !theirs->ok() || *mine == **theirs) bad += 100000;
    // CondVar with a token cancelled while the mutex is held by someone else: canceled, and
    // it returns holding the mutex (re-lock uncancellable).
    {
      CancellationSource src;
      CancellationToken tok = src.token();
      if (!(co_await mu.async_lock()).ok()) bad += 1;
      Event holder_has_it;
      Event release_it;
      auto holder = rt.spawn([&] {
        MutexLock l(mu);
        holder_has_it.set();
        (void)release_it.wait(WaitOptions{.deadline = SyncClock::now() + 10s});
      });
      auto canceller = rt.spawn([&] {
        (void)holder_has_it.wait(WaitOptions{.deadline = SyncClock::now() + 10s});
        src.cancel();
        this_fiber::sleep_for(5ms);
        release_it.set();
      });
      auto w = cv.async_wait(mu, WaitOptions{.deadline = SyncClock::now() + 1h, .cancel = &tok});
      Result<void> r = co_await w;
      if (r != std::errc::operation_canceled) bad += 1000000;
      if (!mu.unlock().ok()) bad += 2000000;  // held again
      (void)co_await holder;
      (void)co_await canceller;
    }
    // CondVar with a token whose cancel_at passes while another holds the mutex.
    {
      CancellationSource src;
      (void)src.cancel_after(3ms);
      CancellationToken tok = src.token();
      if (!(co_await mu.async_lock()).ok()) bad += 1;
      Event release_it;
      Event holder_has_it;
      auto holder = rt.spawn([&] {
        (void)holder_has_it.wait(WaitOptions{.deadline = SyncClock::now() + 10s});
        MutexLock l(mu);
        this_fiber::sleep_for(20ms);
      });
      auto w = cv.async_wait(mu, WaitOptions{.cancel = &tok});
      holder_has_it.set();
      Result<void> r = co_await w;
      if (r != std::errc::operation_canceled) bad += 10000000;
      if (!mu.unlock().ok()) bad += 20000000;
      (void)co_await holder;
    }
    never_set.set();
    (void)co_await self_h;
    (void)co_await g.async_join_all();
    co_return bad;
  });
  EXPECT_EQ(*h.join(), 0);
}

// Barrier(3) with only two participants, arriving with random short deadlines and tokens from
// tasks and fibers: no round may ever complete (a withdrawn arrival not withdrawn would let one
// through); afterwards a round of three completes (one withdrawn twice would block it).
TEST_P(TaskLifetime, BarrierWithdrawalsAddUp) {
  Runtime rt({.workers = GetParam()});
  Barrier bar(3);
  std::atomic<int> passed{0}, bad{0};
  const int n = 300 * StressScale();
  auto task = rt.spawn_task([&]() -> Task<> {
    for (int i = 0; i < n; ++i) {
      CancellationSource src;
      if (i % 3 == 0) (void)src.cancel_after(std::chrono::microseconds(i % 200));
      CancellationToken tok = src.token();
      auto a = bar.async_arrive_and_wait(
          WaitOptions{.deadline = SyncClock::now() + std::chrono::microseconds(50 + i % 300),
                      .cancel = i % 3 == 0 ? &tok : nullptr});
      if (i % 2) co_await this_task::yield();
      Result<bool> r = co_await a;
      if (r.ok())
        passed.fetch_add(1);
      else if (r != std::errc::timed_out && r != std::errc::operation_canceled)
        bad.fetch_add(1);
    }
  });
  auto fiber = rt.spawn([&] {
    for (int i = 0; i < n; ++i) {
      Result<bool> r = bar.arrive_and_wait(
          WaitOptions{.deadline = SyncClock::now() + std::chrono::microseconds(50 + i * 7 % 300)});
      if (r.ok()) passed.fetch_add(1);
    }
  });
  (void)task.join();
  (void)fiber.join();
  EXPECT_EQ(passed.load(), 0);
  EXPECT_EQ(bad.load(), 0);
  // A clean round of three (two tasks and this thread) completes.
  auto t1 = rt.spawn_task([&]() -> Task<bool> {
    co_return (co_await bar.async_arrive_and_wait(WaitOptions{.deadline = SyncClock::now() + 10s}))
        .ok();
  });
  auto t2 = rt.spawn_task([&]() -> Task<bool> {
    co_return (co_await bar.async_arrive_and_wait(WaitOptions{.deadline = SyncClock::now() + 10s}))
        .ok();
  });
  EXPECT_TRUE(bar.arrive_and_wait(WaitOptions{.deadline = SyncClock::now() + 10s}).ok());
  EXPECT_TRUE(*t1.join());
  EXPECT_TRUE(*t2.join());
}

// A CondVar wait whose signal (or timeout) comes while another holds the mutex: the re-lock is
// not ended by the wait's deadline, its token, the token's cancel_at, nor the shutdown; the
// result is the first wait's.
TEST_P(TaskLifetime, CondVarRelockIgnoresDeadlineAndToken) {
  Runtime rt({.workers = GetParam()});
  Mutex mu;
  CondVar cv;
  for (int variant = 0; variant < 4; ++variant) {
    CancellationSource src;
    CancellationToken tok = src.token();
    Event queued, go;
    auto holder = rt.spawn([&] {
      (void)queued.wait(WaitOptions{.deadline = SyncClock::now() + 10s});
      MutexLock l(mu);
      if (variant == 0) cv.signal();
      go.set();
      this_fiber::sleep_for(15ms);  // the waiter re-locks meanwhile
      if (variant == 1) src.cancel();
    });
    auto t = rt.spawn_task([&]() -> Task<int> {
      if (!(co_await mu.async_lock()).ok()) co_return -1;
      WaitOptions o;
      if (variant == 0) o = WaitOptions{.deadline = SyncClock::now() + 5ms, .cancel = &tok};
      if (variant == 1) o = WaitOptions{.deadline = SyncClock::now() + 2ms};
      if (variant == 2) {
        (void)src.cancel_after(2ms);
        o = WaitOptions{.cancel = &tok};
      }
      if (variant == 3) o = WaitOptions{.deadline = SyncClock::now() + 2ms, .cancel = &tok};
      auto w = cv.async_wait(mu, o);
      queued.set();
      Result<void> r = co_await w;
      int code = r.ok()                               ? 0
                 : r == std::errc::timed_out          ? 1
                 : r == std::errc::operation_canceled ? 2
                                                      : 3;
      if (!mu.unlock().ok()) code += 10;
      co_return code;
    });
    Result<int> got = t.join();
    (void)holder.join();
    const int want[] = {0, 1, 2, 1};
    EXPECT_EQ(*got, want[variant]) << "variant " << variant;
  }
}

}  // namespace
}  // namespace weft
