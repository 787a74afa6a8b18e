// Tests of TimerHeap: ordering, FIFO ties, cancel of the root, a leaf and a fired timer,
// reschedule earlier and later, a randomized run against a std::multimap model, and 1M timers.

#include "weft/timer/timer_heap.h"

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"

namespace weft {
namespace {

using std::chrono::milliseconds;
const TimerClock::time_point kT0 = TimerClock::time_point{} + std::chrono::hours(1);

struct Timer {
  TimerNode node;
  int id = 0;
};
Timer* Owner(TimerNode* n) { return reinterpret_cast<Timer*>(n); }  // node is the first member

std::vector<int> PopAll(TimerHeap& heap, TimerClock::time_point now) {
  std::vector<int> ids;
  heap.pop_all_due(now, [&](TimerNode& n) { ids.push_back(Owner(&n)->id); });
  return ids;
}

TEST(TimerHeapTest, FiresInDeadlineOrder) {
  TimerHeap heap;
  std::vector<Timer> timers(10);
  const int order[] = {5, 3, 9, 1, 7, 0, 8, 2, 6, 4};
  for (int i = 0; i < 10; ++i) {
    timers[i].id = order[i];
    ASSERT_TRUE(heap.insert(timers[i].node, kT0 + milliseconds(order[i])).ok());
  }
  EXPECT_EQ(heap.size(), 10u);
  EXPECT_EQ(heap.next_deadline(), kT0);
  EXPECT_EQ(PopAll(heap, kT0 + milliseconds(4)), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(heap.next_deadline(), kT0 + milliseconds(5));
  EXPECT_EQ(heap.pop_due(kT0 + milliseconds(4)), nullptr);  // nothing else due yet
  EXPECT_EQ(PopAll(heap, kT0 + milliseconds(100)), (std::vector<int>{5, 6, 7, 8, 9}));
  EXPECT_TRUE(heap.empty());
  EXPECT_EQ(heap.next_deadline(), std::nullopt);
  for (Timer& t : timers) EXPECT_FALSE(t.node.queued());
}

TEST(TimerHeapTest, EqualDeadlinesFireInInsertionOrder) {
  TimerHeap heap;
  std::vector<Timer> timers(100);
  for (int i = 0; i < 100; ++i) {
    timers[i].id = i;
    ASSERT_TRUE(heap.insert(timers[i].node, kT0 + milliseconds(i % 2 == 0 ? 1 : 2)).ok());
  }
  std::vector<int> ids = PopAll(heap, kT0 + milliseconds(2));
  ASSERT_EQ(ids.size(), 100u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(ids[i], 2 * i);           // all deadline-1 ones, in order
  for (int i = 0; i < 50; ++i) EXPECT_EQ(ids[50 + i], 2 * i + 1);  // then deadline-2 ones
}

TEST(TimerHeapTest, CancelRootLeafAndFired) {
  TimerHeap heap;
  std::vector<Timer> timers(20);
  for (int i = 0; i < 20; ++i) {
    timers[i].id = i;
    ASSERT_TRUE(heap.insert(timers[i].node, kT0 + milliseconds(i)).ok());
  }
  EXPECT_TRUE(heap.cancel(timers[0].node));   // the root
  EXPECT_TRUE(heap.cancel(timers[19].node));  // a leaf (latest deadline)
  EXPECT_TRUE(heap.cancel(timers[7].node));   // somewhere inside
  EXPECT_FALSE(heap.cancel(timers[7].node));  // twice: not queued any more
  EXPECT_EQ(heap.size(), 17u);
  EXPECT_EQ(PopAll(heap, kT0 + milliseconds(3)), (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(heap.cancel(timers[2].node));  // already fired
  std::vector<int> rest = PopAll(heap, kT0 + milliseconds(100));
  EXPECT_EQ(rest, (std::vector<int>{4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}));
}

TEST(TimerHeapTest, RescheduleEarlierAndLater) {
  TimerHeap heap;
  std::vector<Timer> timers(8);
  for (int i = 0; i < 8; ++i) {
    timers[i].id = i;
    ASSERT_TRUE(heap.insert(timers[i].node, kT0 + milliseconds(10 * (i + 1))).ok());
  }
  ASSERT_TRUE(heap.reschedule(timers[6].node, kT0 + milliseconds(1)).ok());    // earlier
  ASSERT_TRUE(heap.reschedule(timers[0].node, kT0 + milliseconds(200)).ok());  // later
  ASSERT_TRUE(heap.reschedule(timers[3].node, kT0 + milliseconds(20)).ok());   // ties with 1,
  EXPECT_EQ(timers[6].node.deadline(), kT0 + milliseconds(1));                 // after it
  EXPECT_EQ(PopAll(heap, kT0 + milliseconds(1000)), (std::vector<int>{6, 1, 3, 2, 4, 5, 7, 0}));
  Timer fresh;
  fresh.id = 42;
  ASSERT_TRUE(heap.reschedule(fresh.node, kT0).ok());  // not queued: inserted
  EXPECT_TRUE(fresh.node.queued());
  EXPECT_TRUE(heap.cancel(fresh.node));
}

TEST(TimerHeapTest, InsertingAQueuedNodeIsAnError) {
  TimerHeap heap;
  Timer t;
  ASSERT_TRUE(heap.insert(t.node, kT0).ok());
  EXPECT_EQ(heap.insert(t.node, kT0).error(), std::errc::invalid_argument);
  EXPECT_EQ(heap.size(), 1u);
  EXPECT_TRUE(heap.cancel(t.node));
}

// A randomized mix of insert, cancel, reschedule and pop, checked step by step against a
// std::multimap keyed by (deadline, sequence).
TEST(TimerHeapTest, RandomizedAgainstAReferenceModel) {
  std::mt19937_64 rng(12345);
  const int steps = 200000 * testing::StressScale();
  constexpr int kTimers = 2000;
  auto timers = std::make_unique<Timer[]>(kTimers);
  std::map<std::pair<std::int64_t, std::uint64_t>, int> model;  // (deadline, seq) -> id
  std::vector<std::map<std::pair<std::int64_t, std::uint64_t>, int>::iterator> where(kTimers);
  std::vector<bool> in(kTimers, false);
  std::uint64_t seq = 0;
  std::int64_t now = 0;
  TimerHeap heap;
  for (int i = 0; i < kTimers; ++i) timers[i].id = i;
  for (int step = 0; step < steps; ++step) {
    int id = static_cast<int>(rng() % kTimers);
    std::int64_t deadline = now + static_cast<std::int64_t>(rng() % 1000);
    switch (rng() % 4) {
      case 0:  // insert or reschedule
      case 1:
        ASSERT_TRUE(heap.reschedule(timers[id].node, kT0 + milliseconds(deadline)).ok());
        if (in[id]) model.erase(where[id]);
        where[id] = model.emplace(std::make_pair(deadline, seq++), id).first;
        in[id] = true;
        break;
      case 2:  // cancel
        ASSERT_EQ(heap.cancel(timers[id].node), static_cast<bool>(in[id]));
        if (in[id]) model.erase(where[id]);
        in[id] = false;
        break;
      case 3: {  // advance time and pop what is due
        now += static_cast<std::int64_t>(rng() % 50);
        heap.pop_all_due(kT0 + milliseconds(now), [&](TimerNode& n) {
          ASSERT_FALSE(model.empty());
          auto first = model.begin();
          ASSERT_LE(first->first.first, now);
          ASSERT_EQ(Owner(&n)->id, first->second);
          in[first->second] = false;
          model.erase(first);
        });
        ASSERT_TRUE(model.empty() || model.begin()->first.first > now);
        break;
      }
    }
    ASSERT_EQ(heap.size(), model.size());
    if (!model.empty()) {
      ASSERT_EQ(heap.next_deadline(), kT0 + milliseconds(model.begin()->first.first));
    }
  }
}

TEST(TimerHeapTest, AMillionTimers) {
  const int n = 1000000;
  auto timers = std::make_unique<Timer[]>(n);
  TimerHeap heap;
  ASSERT_TRUE(heap.reserve(n).ok());
  std::mt19937 rng(7);
  for (int i = 0; i < n; ++i) {
    timers[i].id = i;
    ASSERT_TRUE(
        heap.insert(timers[i].node, kT0 + std::chrono::microseconds(rng() % 10000000)).ok());
  }
  for (int i = 0; i < n; i += 2) ASSERT_TRUE(heap.cancel(timers[i].node));
  std::int64_t last = -1;
  std::size_t fired = heap.pop_all_due(kT0 + std::chrono::hours(1), [&](TimerNode& node) {
    std::int64_t t = node.deadline().time_since_epoch().count();
    ASSERT_GE(t, last);
    ASSERT_EQ(Owner(&node)->id % 2, 1);  // only the uncancelled half fires
    last = t;
  });
  EXPECT_EQ(fired, static_cast<std::size_t>(n / 2));
}

}  // namespace
}  // namespace weft
