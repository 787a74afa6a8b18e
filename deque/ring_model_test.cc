// deque/ring_model_test.cc: MpmcRing and SpmcRing under the model checker (--config=model):
// every item pushed is taken exactly once, each producer's items in its order, a full ring is
// reported and leaves the item with its producer, in every schedule within the bounds.

#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "weft/deque/mpmc_ring.h"
#include "weft/deque/spmc_ring.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"

namespace weft {
namespace {

using model::check;
using model::ExpectAllSchedulesPass;
using model::Report;

// Items are producer * 10 + k: each taken once, and each producer's in increasing k.
void AssertEachOnceInProducerOrder(const std::vector<int>& taken, int producers, int per) {
  std::vector<int> next(producers, 1);
  for (int v : taken) {
    int p = v / 10, k = v % 10;
    WEFT_MODEL_ASSERT(p >= 0 && p < producers);
    if (p < 0 || p >= producers) return;
    WEFT_MODEL_ASSERT(k == next[p]);  // once each, in order
    ++next[p];
  }
  for (int p = 0; p < producers; ++p) WEFT_MODEL_ASSERT(next[p] == per + 1);
}

// Two producers into a ring of two, the body's thread consuming: a full ring refuses the push
// and the producer retries; the consumer takes everything.
TEST(RingModelTest, MpmcTwoProducersOneConsumer) {
  // Bound 1; at 2: 92,206 schedules, 11 s (WEFT_MODEL_PREEMPTIONS=2).
  ExpectAllSchedulesPass(check(
      [] {
        MpmcRing<int> ring(2);
        auto produce = [&](int p) {
          for (int k = 1; k <= 2; ++k) {
            int item = p * 10 + k;
            while (!ring.try_push(item)) model::yield();
          }
        };
        model::thread a([&] { produce(0); });
        model::thread b([&] { produce(1); });
        std::vector<int> taken;
        while (taken.size() < 4) {
          if (std::optional<int> v = ring.try_pop()) {
            taken.push_back(*v);
          } else {
            model::yield();
          }
        }
        a.join();
        b.join();
        AssertEachOnceInProducerOrder(taken, 2, 2);
        WEFT_MODEL_ASSERT(!ring.try_pop().has_value());
      },
      {.preemption_bound = 1}));
}

// One producer, two consumers racing for the same cells.
TEST(RingModelTest, MpmcOneProducerTwoConsumers) {
  ExpectAllSchedulesPass(check([] {
    MpmcRing<int> ring(2);
    std::vector<int> got_a, got_b;
    model::thread a([&] {
      for (int i = 0; i < 2; ++i) {
        if (std::optional<int> v = ring.try_pop()) got_a.push_back(*v);
      }
    });
    model::thread b([&] {
      if (std::optional<int> v = ring.try_pop()) got_b.push_back(*v);
    });
    for (int k = 1; k <= 2; ++k) WEFT_MODEL_ASSERT(ring.try_push(k));
    a.join();
    b.join();
    std::vector<int> taken = got_a;
    taken.insert(taken.end(), got_b.begin(), got_b.end());
    while (std::optional<int> v = ring.try_pop()) taken.push_back(*v);
    model::AssertEachOnce(taken, 2);
    // Each consumer's own items come in FIFO order.
    WEFT_MODEL_ASSERT(got_a.size() < 2 || got_a[0] < got_a[1]);
  }));
}

// SpmcRing: the owner pushes and pops; a consumer pops; another takes half in one CAS.
TEST(RingModelTest, SpmcPopAndTakeHalfTakeEachItemOnce) {
  ExpectAllSchedulesPass(check(
      [] {
        SpmcRing<std::int64_t, 4> ring;
        std::vector<std::int64_t> got_a, got_b;
        model::thread a([&] {
          std::int64_t v;
          if (ring.pop(&v)) got_a.push_back(v);
        });
        model::thread b([&] {
          std::int64_t out[4];
          std::size_t n = ring.take_half(out, 4);
          got_b.assign(out, out + n);
        });
        for (std::int64_t k = 1; k <= 3; ++k) WEFT_MODEL_ASSERT(ring.push(k));
        std::vector<std::int64_t> taken;
        std::int64_t v;
        while (ring.pop(&v)) taken.push_back(v);
        a.join();
        b.join();
        while (ring.pop(&v)) taken.push_back(v);
        taken.insert(taken.end(), got_a.begin(), got_a.end());
        taken.insert(taken.end(), got_b.begin(), got_b.end());
        model::AssertEachOnce(taken, std::int64_t{3});
        for (std::size_t i = 1; i < got_b.size(); ++i) WEFT_MODEL_ASSERT(got_b[i - 1] < got_b[i]);
      },
      {.preemption_bound = 2}));
}

// steal_half between two rings with different owners, while the victim's owner pops.
TEST(RingModelTest, SpmcStealHalfMovesEachItemOnce) {
  ExpectAllSchedulesPass(check(
      [] {
        SpmcRing<std::int64_t, 4> victim;
        for (std::int64_t k = 1; k <= 3; ++k) WEFT_MODEL_ASSERT(victim.push(k));
        std::vector<std::int64_t> stolen;
        model::thread thief([&] {
          SpmcRing<std::int64_t, 4> mine;
          victim.steal_half(mine);
          std::int64_t v;
          while (mine.pop(&v)) stolen.push_back(v);
        });
        std::vector<std::int64_t> taken;
        std::int64_t v;
        while (victim.pop(&v)) taken.push_back(v);
        thief.join();
        taken.insert(taken.end(), stolen.begin(), stolen.end());
        model::AssertEachOnce(taken, std::int64_t{3});
      },
      {.preemption_bound = 2}));
}

}  // namespace
}  // namespace weft
