// deque/chase_lev_model_bodies.h: ChaseLevDeque scenarios for the model checker, shared by the
// test of the real deque and the test of one with a memory order weakened. Each asserts that
// every pushed item is taken exactly once, by the owner or a thief, and that no one takes
// anything else.

#ifndef WEFT_DEQUE_CHASE_LEV_MODEL_BODIES_H_
#define WEFT_DEQUE_CHASE_LEV_MODEL_BODIES_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "weft/deque/chase_lev.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"

namespace weft::chase_lev_model {

// PushPopSteal: the owner pushes `n` items (into a deque of `capacity`, so that n > capacity
// grows it while the thief works) and pops them all; one thief steals up to `steals` times.
inline void PushPopSteal(std::int64_t n, std::size_t capacity, int steals) {
  ChaseLevDeque<std::int64_t> deque(capacity);
  std::vector<std::int64_t> stolen;
  model::thread thief([&] {
    for (int i = 0; i < steals; ++i) {
      std::int64_t v = 0;
      if (deque.steal(&v) == StealResult::kSuccess) stolen.push_back(v);
    }
  });
  std::vector<std::int64_t> taken;
  for (std::int64_t i = 1; i <= n; ++i) WEFT_MODEL_ASSERT(deque.push(i));
  while (std::optional<std::int64_t> v = deque.pop()) taken.push_back(*v);
  thief.join();
  taken.insert(taken.end(), stolen.begin(), stolen.end());
  model::AssertEachOnce(taken, n);
}

// StealHalf: a thief moves up to half of the owner's items into its own deque and pops them
// there, while the owner pops.
inline void StealHalf(std::int64_t n) {
  ChaseLevDeque<std::int64_t> deque(4);
  for (std::int64_t i = 1; i <= n; ++i) WEFT_MODEL_ASSERT(deque.push(i));
  std::vector<std::int64_t> stolen;
  model::thread thief([&] {
    ChaseLevDeque<std::int64_t> mine(2);
    deque.steal_half(mine);
    while (std::optional<std::int64_t> v = mine.pop()) stolen.push_back(*v);
  });
  std::vector<std::int64_t> taken;
  while (std::optional<std::int64_t> v = deque.pop()) taken.push_back(*v);
  thief.join();
  taken.insert(taken.end(), stolen.begin(), stolen.end());
  model::AssertEachOnce(taken, n);
}

}  // namespace weft::chase_lev_model

#endif  // WEFT_DEQUE_CHASE_LEV_MODEL_BODIES_H_
