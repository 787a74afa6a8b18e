// The //sync suite (sync/sync_suite.cc) on fibers: every concurrent part of every test runs as a
// fiber of a 2-worker Runtime, so the primitives park fibers through the scheduler's Waiter. The
// test bodies themselves run on the main thread, which exercises the mixed case too (a thread
// and fibers meeting on one primitive).

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/cancellation.h"
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
      ASSERT_TRUE(mu.lock().ok());  // held until the callback is parked on it
      std::atomic<bool> callback_ran{false};
      CancellationCallback parks(tok, [&] {
        ASSERT_TRUE(mu.lock().ok());
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

}  // namespace
}  // namespace weft
