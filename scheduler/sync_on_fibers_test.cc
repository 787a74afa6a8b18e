// The //sync suite (sync/sync_suite.cc) on fibers: every concurrent part of every test runs as a
// fiber of a 2-worker Runtime, so the primitives park fibers through the scheduler's Waiter. The
// test bodies themselves run on the main thread, which exercises the mixed case too (a thread
// and fibers meeting on one primitive).

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/runtime.h"
#include "sync/sync_suite.h"

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

}  // namespace
}  // namespace weft
