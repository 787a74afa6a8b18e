// scheduler/fd_use_model_test.cc: the protocol between a call on an fd and a close of that fd
// (scheduler/internal/fd_use.h) under the model checker (--config=model).
//
// The fd's file is a model::Cell: a use reads it (its system call), the closer closes it and a
// new file takes the number (two writes). In every schedule a use whose Enter succeeded with the
// epoch noted before the close must read the first file, and its read must happen before the
// closer's writes (the checker reports a data race otherwise). The same body must fail with a
// naive Enter, which checks the epoch with a load and registers after, and with a relaxed Leave.

#include <cstdint>

#include "gtest/gtest.h"
#include "internal/fd_use.h"
#include "weft/base/atomic.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"

namespace weft::scheduler_internal {
namespace {

using model::check;
using model::ExpectAllSchedulesPass;

// The naive order: check, then register. A close can bump the epoch and find no use between
// the two.
bool CheckThenEnter(weft::atomic<std::uint64_t>& word, std::int64_t epoch) {
  if (fd_use::Epoch(word) != static_cast<std::uint32_t>(epoch)) return false;
  word.fetch_add(1, std::memory_order_seq_cst);
  return true;
}

// A Leave without release: the use's read need not happen before the close.
void LeaveRelaxed(weft::atomic<std::uint64_t>& word) {
  word.fetch_sub(1, std::memory_order_relaxed);
}

template <typename EnterFn, typename LeaveFn>
void Body(EnterFn enter, LeaveFn leave) {
  weft::atomic<std::uint64_t> word{0};
  model::Cell<int> file(1);  // the file the number names: 1, then 0 (closed), then 2 (reused)
  const std::int64_t epoch = fd_use::Epoch(word);  // noted when the object opened the fd
  auto use = [&] {
    if (!enter(word, epoch)) return;  // refused: a close began; the call ends ECANCELED
    WEFT_MODEL_ASSERT(file.get() == 1);
    leave(word);
  };
  model::thread a(use);
  model::thread b(use);
  fd_use::BeginClose(word);
  file.set(0);  // ::close
  file.set(2);  // another open takes the number
  a.join();
  b.join();
}

using Word = weft::atomic<std::uint64_t>;

TEST(FdUseModelTest, AUseNeverReachesTheNumbersNextFile) {
  ExpectAllSchedulesPass(
      check([] { Body(fd_use::Enter<Word>, fd_use::Leave<Word>); }, {.preemption_bound = 3}));
}

TEST(FdUseModelTest, CheckingTheEpochBeforeRegisteringIsWrong) {
  model::Report r =
      check([] { Body(CheckThenEnter, fd_use::Leave<Word>); }, {.preemption_bound = 3});
  EXPECT_FALSE(r.ok) << "the checker should find the use that reads the next file";
}

TEST(FdUseModelTest, ALeaveWithoutReleaseIsWrong) {
  model::Report r = check([] { Body(fd_use::Enter<Word>, LeaveRelaxed); }, {.preemption_bound = 3});
  EXPECT_FALSE(r.ok) << "the checker should find the use's read racing with the close";
}

}  // namespace
}  // namespace weft::scheduler_internal
