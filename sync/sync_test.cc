// sync/sync_test.cc: the //sync suite (sync_suite.cc) on OS threads: the primitives' thread mode.
// scheduler/sync_on_fibers_test.cc runs the same suite on fibers.

#include <thread>
#include <vector>

#include "base/stress_scale.h"
#include "gtest/gtest.h"
#include "sync/channel.h"
#include "sync/sync_suite.h"

namespace weft {
namespace {

class ThreadRunner final : public Runner {
 public:
  ~ThreadRunner() override { JoinAll(); }
  void Spawn(std::function<void()> fn) override { threads_.emplace_back(std::move(fn)); }
  void JoinAll() override {
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  std::vector<std::thread> threads_;
};

INSTANTIATE_TEST_SUITE_P(Threads, SyncTest,
                         ::testing::Values(RunnerFactory{
                             "threads", [] { return std::make_unique<ThreadRunner>(); }}),
                         [](const auto& info) { return info.param.name; });

TEST(SyncDeathTest, DestroyingAChannelWithWaitersAborts) {
  GTEST_FLAG_SET(death_test_style, weft::testing::DeathTestStyle());
  EXPECT_DEATH(
      {
        auto* ch = new Channel<int>(0);
        std::thread t([ch] { (void)ch->recv(); });
        t.detach();
        while (ch->waiters() == 0) std::this_thread::yield();
        delete ch;
      },
      "weft: Channel destroyed while fibers or threads wait on it");
}

}  // namespace
}  // namespace weft
