// scheduler/join_signal_model_test.cc: JoinSignal, the handshake between a finishing fiber and
// its JoinHandle, under the model checker (--config=model). Whatever the interleaving of finish,
// join (plain or timed) and detach: the joiner sees the result, exactly one side frees the state,
// and nobody touches it after it is freed (the checker reports an access to a destroyed atomic).

#include <cstdio>

#include "gtest/gtest.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"
#include "weft/scheduler/runtime.h"

namespace weft::scheduler_internal {
namespace {

using model::Cell;
using model::check;
using model::ExpectAllSchedulesPass;
using model::Report;

// The state a fiber and its handle share: the signal and the result.
struct State {
  JoinSignal done;
  Cell<int> result{0};
};

// Finish: the fiber's side. Writes the result, then sets; frees if the handle went first.
void Finish(State* s, Cell<int>& frees) {
  s->result.set(42);
  if (s->done.set()) {
    frees.set(frees.get() + 1);
    delete s;
  }
}

// A join (untimed, or timed that the checker may time out) racing the finish. After a successful
// join the joiner owns the state; after a timeout it drops the handle.
void JoinRacingFinish(bool timed) {
  Cell<int> frees(0);
  auto* s = new State;
  model::thread fiber([&] { Finish(s, frees); });
  WaitOptions options;
  if (timed) options.deadline = SyncClock::now() + std::chrono::hours(1);
  Result<void> joined = s->done.wait(options);
  if (joined.ok()) {
    WEFT_MODEL_ASSERT(s->result.get() == 42);
    frees.set(frees.get() + 1);
    delete s;
  } else {
    WEFT_MODEL_ASSERT(joined.error() == std::errc::timed_out);
    if (s->done.drop()) {
      frees.set(frees.get() + 1);
      delete s;
    }
  }
  fiber.join();
  WEFT_MODEL_ASSERT(frees.get() == 1);
}

TEST(JoinSignalModelTest, JoinRacingFinish) {
  ExpectAllSchedulesPass(check([] { JoinRacingFinish(false); }, {.preemption_bound = 3}));
}

TEST(JoinSignalModelTest, TimedJoinRacingFinish) {
  ExpectAllSchedulesPass(check([] { JoinRacingFinish(true); }, {.preemption_bound = 3}));
}

// Detach (drop) racing the finish: exactly one side frees, the other never touches it again.
TEST(JoinSignalModelTest, DetachRacingFinish) {
  ExpectAllSchedulesPass(check(
      [] {
        Cell<int> frees(0);
        auto* s = new State;
        model::thread fiber([&] { Finish(s, frees); });
        if (s->done.drop()) {
          WEFT_MODEL_ASSERT(s->result.get() == 42);  // finished first: its result is visible
          frees.set(frees.get() + 1);
          delete s;
        }
        fiber.join();
        WEFT_MODEL_ASSERT(frees.get() == 1);
      },
      {.preemption_bound = 3}));
}

}  // namespace
}  // namespace weft::scheduler_internal
