// deque/split_deque_model_test.cc: Lace's split deque under the model checker (--config=model).
// The owner spawns tasks and syncs them newest first (pop while private, take back while shared,
// else wait for the thief), while a thief steals (which makes the owner share its private tasks
// on request). In every schedule within the bounds each task runs exactly once, its result is
// visible to the owner's sync, and a slot reused after a steal is not written before the thief
// is done with it (the task's data is a Cell: a data race otherwise).

#include <new>

#include "gtest/gtest.h"
#include "weft/deque/split_deque.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"

namespace weft {
namespace {

using model::Cell;

// A task's data, in its slot's storage: its input, and then its result (input * 10 + 1).
Cell<int>& Data(TaskSlot& slot) {
  return *std::launder(reinterpret_cast<Cell<int>*>(slot.storage));
}
void RunTask(TaskSlot& slot, void*) { Data(slot).set(Data(slot).get() * 10 + 1); }

// Spawn: a task with input v, in the next slot. (The Cell is constructed once per slot; its
// checker state is its address, which slots reuse.)
void Spawn(SplitDeque& d, int v) {
  TaskSlot& slot = d.next_slot();
  slot.run = &RunTask;
  new (slot.storage) Cell<int>(0);
  Data(slot).set(v);
  d.push();
}

// Sync: the newest task; returns its result.
int Sync(SplitDeque& d) {
  TaskSlot& slot = d.top_slot();
  if (d.pop_private() || d.take_back()) {
    RunTask(slot, nullptr);  // inline
    return Data(slot).get();
  }
  while (slot.thief.load(std::memory_order_acquire) != TaskSlot::kDone) model::yield();
  int result = Data(slot).get();
  d.finish_stolen();
  return result;
}

void SpawnSyncWithAThief(int tasks, int steals) {
  SplitDeque d(8);
  model::thread thief([&] {
    for (int i = 0; i < steals; ++i) (void)d.steal(nullptr, 0);
  });
  for (int round = 0; round < 2; ++round) {  // the second round reuses the slots
    for (int v = 1; v <= tasks; ++v) Spawn(d, v);
    for (int v = tasks; v >= 1; --v) WEFT_MODEL_ASSERT(Sync(d) == v * 10 + 1);
  }
  thief.join();
  WEFT_MODEL_ASSERT(d.head() == 0);
}

TEST(SplitDequeModelTest, EachTaskRunsOnceAndItsResultIsSeen) {
  model::Report r = model::check([] { SpawnSyncWithAThief(2, 3); }, {.preemption_bound = 2});
  model::ExpectAllSchedulesPass(r);
}

}  // namespace
}  // namespace weft
