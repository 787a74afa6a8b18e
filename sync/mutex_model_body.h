// sync/mutex_model_body.h: the Mutex scenario that the model tests of the real Mutex
// (sync_model_test.cc) and of the one with the planted lost wake-up
// (mutex_planted_bug_model_test.cc) both run: `threads` threads (the body's included) each add 1
// to a Cell under the mutex `sections` times. Every schedule must count threads * sections with
// no data race and nobody left parked.

#ifndef WEFT_SYNC_MUTEX_MODEL_BODY_H_
#define WEFT_SYNC_MUTEX_MODEL_BODY_H_

#include <memory>
#include <vector>

#include "weft/model/model.h"
#include "weft/sync/mutex.h"

namespace weft {

inline void CountUnderMutex(int threads, int sections) {
  Mutex m;
  model::Cell<int> count(0);
  auto add = [&] {
    for (int i = 0; i < sections; ++i) {
      WEFT_MODEL_ASSERT(m.lock({}).ok());
      count.set(count.get() + 1);
      WEFT_MODEL_ASSERT(m.unlock().ok());
    }
  };
  std::vector<std::unique_ptr<model::thread>> others;
  for (int i = 1; i < threads; ++i) others.push_back(std::make_unique<model::thread>(add));
  add();
  for (auto& t : others) t->join();
  WEFT_MODEL_ASSERT(count.get() == threads * sections);
}

}  // namespace weft

#endif  // WEFT_SYNC_MUTEX_MODEL_BODY_H_
