// The //sync suite (sync/sync_suite.cc) on fibers: every concurrent part of every test runs as a
// fiber of a 2-worker Runtime, so the primitives park fibers through the scheduler's Waiter. The
// test bodies themselves run on the main thread, which exercises the mixed case too (a thread
// and fibers meeting on one primitive).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/channel.h"
#include "weft/sync/coordination.h"
#include "weft/sync/mutex.h"
#include "weft/sync/sync_suite.h"

namespace weft {
namespace {

class FiberRunner final : public Runner {
 public:
  FiberRunner() : runtime_(std::make_unique<Runtime>(RuntimeOptions{.workers = 2})) {}
  ~FiberRunner() override { JoinAll(); }
  void Spawn(std::function<void()> fn) override {
    handles_.push_back(runtime_->spawn(std::move(fn)));
  }
  void Relax() override { this_fiber::yield(); }
  void JoinAll() override {
    for (JoinHandle<void>& h : handles_) ASSERT_TRUE(h.join().ok());
    handles_.clear();
  }

 private:
  std::unique_ptr<Runtime> runtime_;
  std::vector<JoinHandle<void>> handles_;
};

INSTANTIATE_TEST_SUITE_P(Fibers, SyncTest,
                         ::testing::Values(RunnerFactory{
                             "fibers", [] { return std::make_unique<FiberRunner>(); }}),
                         [](const auto& info) { return info.param.name; });

// A cancellation callback that parks (here on a Mutex another fiber holds) while the waiters
// it cancels deregister, at 1, 2, 4 and 8 workers with more waiters than workers: the waiters'
// deregistration must not spin the workers the callback's fiber needs to resume.
class CancelCallbackParksTest : public ::testing::TestWithParam<unsigned> {};

TEST_P(CancelCallbackParksTest, ACallbackThatParksDoesNotStallTheWaitersItCancels) {
  const unsigned workers = GetParam();
  Runtime rt({.workers = workers});
  rt.block_on([&] {
    for (int round = 0; round < 20; ++round) {
      CancellationSource src;
      CancellationToken tok = src.token();
      Mutex mu;
      ASSERT_TRUE(mu.lock({}).ok());  // held until the callback is parked on it
      std::atomic<bool> callback_ran{false};
      CancellationCallback parks(tok, [&] {
        ASSERT_TRUE(mu.lock({}).ok());
        callback_ran = true;
        mu.unlock();
      });
      Event never;
      std::vector<JoinHandle<bool>> waiters;
      for (unsigned i = 0; i < 2 * workers + 2; ++i) {
        waiters.push_back(rt.spawn(
            [&] { return never.wait({.cancel = &tok}).error() == std::errc::operation_canceled; }));
      }
      ASSERT_TRUE(this_fiber::sleep_for(std::chrono::milliseconds(2)).ok());  // all parked
      auto canceller = rt.spawn([&] { src.cancel(); });
      ASSERT_TRUE(this_fiber::sleep_for(std::chrono::milliseconds(2)).ok());
      mu.unlock();  // the callback (parked on mu) may go on
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      for (auto& w : waiters) {
        auto r = w.join({.deadline = limit});
        ASSERT_TRUE(r.ok()) << "a cancelled waiter did not finish";
        EXPECT_TRUE(*r);
      }
      ASSERT_TRUE(canceller.join({.deadline = limit}).ok());
      EXPECT_TRUE(callback_ran.load());
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Workers, CancelCallbackParksTest, ::testing::Values(1u, 2u, 4u, 8u));

// WaitUntilParked: until the dump shows a fiber named `name` parked on `what` (10 s at most).
bool WaitUntilParked(const Runtime& rt, std::string_view name, std::string_view what) {
  for (int i = 0; i < 10000; ++i) {
    std::string dump = rt.dump_fibers();
    for (std::size_t at = 0; at < dump.size();) {
      std::size_t end = std::min(dump.find('\n', at), dump.size());
      std::string_view line(dump.data() + at, end - at);
      if (line.find(name) != line.npos && line.find(what) != line.npos) return true;
      at = end + 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// A MutexLock (and a std::lock_guard) waiting when the runtime shuts down waits on for the
// mutex, as a std::mutex would, and enters its scope holding it: never unlocked, and no
// exception for a lock that is merely slow.
TEST(GuardsOnFibersTest, AGuardWaitingThroughShutdownEntersHoldingTheMutex) {
  Mutex m;
  ASSERT_TRUE(m.lock({}).ok());  // held by this thread until the shutdown has begun
  std::atomic<int> entered{0}, held{0}, threw{0};
  auto rt = std::make_unique<Runtime>(RuntimeOptions{.workers = 2});
  for (int i = 0; i < 2; ++i) {
    rt->spawn(
          [&, i] {
            try {
              if (i == 0) {
                MutexLock hold(m);
                entered.fetch_add(1);
                if (!m.try_lock()) held.fetch_add(1);  // ours: not free
              } else {
                std::lock_guard<Mutex> hold(m);
                entered.fetch_add(1);
                if (!m.try_lock()) held.fetch_add(1);
              }
            } catch (const std::system_error&) {
              threw.fetch_add(1);
            }
          },
          {.name = i == 0 ? "mutex-lock" : "lock-guard"})
        .detach();
  }
  ASSERT_TRUE(WaitUntilParked(*rt, "mutex-lock", "Mutex"));
  ASSERT_TRUE(WaitUntilParked(*rt, "lock-guard", "Mutex"));
  std::thread shutdown([&] { rt.reset(); });  // interrupts both waits
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(entered.load(), 0);  // still waiting: the interruption did not let them in
  EXPECT_TRUE(m.unlock().ok());
  shutdown.join();  // returns once both have had the mutex and ended
  EXPECT_EQ(entered.load(), 2);
  EXPECT_EQ(held.load(), 2);
  EXPECT_EQ(threw.load(), 0);
}

// A CondVar wait ended by the shutdown takes its mutex back by parking, not by retrying a lock
// that the shutdown fails at once: on one worker, with no monitor (no spare worker to rescue a
// spinning fiber), the fiber holding the mutex still gets to run and release it.
TEST(CondVarOnFibersTest, AWaitEndedByTheShutdownParksForItsMutex) {
  Mutex m;
  CondVar cv;
  std::atomic<int> result{-1};
  {
    Runtime rt({.workers = 1, .stuck_threshold = std::chrono::microseconds(0)});
    rt.spawn(
          [&] {
            if (!m.lock({}).ok()) return;
            Result<void> r = cv.wait(m);
            result = r.ok() ? 0 : static_cast<int>(r.error());
            (void)m.unlock();
          },
          {.name = "cv-waiter"})
        .detach();
    ASSERT_TRUE(WaitUntilParked(rt, "cv-waiter", "CondVar"));
    rt.spawn(
          [&] {
            MutexLock hold(m);  // held across a sleep that the shutdown cuts short
            (void)this_fiber::sleep_for(std::chrono::seconds(60));
          },
          {.name = "holder"})
        .detach();
    ASSERT_TRUE(WaitUntilParked(rt, "holder", "sleep"));
  }
  EXPECT_EQ(result.load(), static_cast<int>(std::errc::operation_canceled));
}

TEST(GuardsOnFibersTest, ScopedLockOverTwoWeftMutexesFromFibers) {
  Mutex a, b;
  long count = 0;
  Runtime rt({.workers = 2});
  std::vector<JoinHandle<void>> hs;
  for (int f = 0; f < 8; ++f) {
    hs.push_back(rt.spawn([&, f] {
      for (int i = 0; i < 500; ++i) {
        if (f % 2 == 0) {
          std::scoped_lock both(a, b);
          ++count;
        } else {
          std::scoped_lock both(b, a);
          ++count;
          this_fiber::yield();  // parks others on the held pair
        }
      }
    }));
  }
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  EXPECT_EQ(count, 8 * 500);
}

// A std::stop_token made into a weft token cancels a fiber's parked recv.
TEST(StopTokenOnFibersTest, AStopTokenCancelsAParkedRecv) {
  Runtime rt({.workers = 2});
  Channel<int> ch;
  std::stop_source stop;
  auto receiver = rt.spawn(
      [&] {
        CancellationToken token(stop.get_token());
        return ch.recv({.cancel = &token}) == std::errc::operation_canceled;
      },
      {.name = "stop-token-recv"});
  ASSERT_TRUE(WaitUntilParked(rt, "stop-token-recv", "Channel"));
  stop.request_stop();  // from this plain thread
  auto r = receiver.join();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
}

// for (T v : channel) in a fiber, closed by the producer mid-iteration: every value, then the
// loop ends. Left waiting through a shutdown, the loop throws operation_canceled instead of
// ending as if the channel were closed.
TEST(ChannelRangeOnFibersTest, RangeForEndsAtCloseAndThrowsAtShutdown) {
  std::atomic<long> sum{0};
  std::atomic<int> canceled{0};
  {
    Runtime rt({.workers = 2});
    Channel<int> ch(2);
    auto consumer = rt.spawn([&] {
      long s = 0;
      for (int v : ch) s += v;
      return s;
    });
    auto producer = rt.spawn([&] {
      for (int i = 1; i <= 1000; ++i) ASSERT_TRUE(ch.send(int{i}).ok());
      ch.close();
    });
    ASSERT_TRUE(producer.join().ok());
    auto total = consumer.join();
    ASSERT_TRUE(total.ok());
    EXPECT_EQ(*total, 1000L * 1001 / 2);

    static Channel<int> open_channel(1);  // outlives the runtime: its waiter is cancelled first
    rt.spawn(
          [&] {
            try {
              for (int v : open_channel) sum.fetch_add(v);
            } catch (const std::system_error& e) {
              if (e.code() == std::errc::operation_canceled) canceled.fetch_add(1);
            }
          },
          {.name = "range-for"})
        .detach();
    ASSERT_TRUE(WaitUntilParked(rt, "range-for", "Channel"));
  }
  EXPECT_EQ(canceled.load(), 1);
  EXPECT_EQ(sum.load(), 0);
}

}  // namespace
}  // namespace weft
