// sync/sync_suite.h: the //sync test suite, shared by every execution mode. Each test runs its
// concurrent parts through a Runner; a test binary instantiates the suite with its Runner:
// sync_test.cc with OS threads, scheduler/sync_on_fibers_test.cc with fibers. Keeping the suite
// here (testonly) lets //scheduler rerun it without //sync depending on the scheduler.

#ifndef WEFT_SYNC_SYNC_SUITE_H_
#define WEFT_SYNC_SYNC_SUITE_H_

#include <functional>
#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace weft {

// Runner: starts concurrent tasks and joins them all.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual void Spawn(std::function<void()> fn) = 0;
  virtual void JoinAll() = 0;
  // Relax: a pause in a busy-wait loop of a spawned task (a fiber yields, so that a busy-wait
  // does not hold a worker that the awaited task needs).
  virtual void Relax() = 0;
};

struct RunnerFactory {
  std::string name;
  std::function<std::unique_ptr<Runner>()> make;
};

class SyncTest : public ::testing::TestWithParam<RunnerFactory> {
 protected:
  void SetUp() override { runner_ = GetParam().make(); }
  void TearDown() override { runner_->JoinAll(); }
  Runner& runner() { return *runner_; }
  std::unique_ptr<Runner> runner_;
};

}  // namespace weft

#endif  // WEFT_SYNC_SYNC_SUITE_H_
