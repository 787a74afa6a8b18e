// Tests of context/internal/slot_set.h: slots come out lowest (or highest) first across chunks
// and words, the cursor follows inserts below it, and a random mix of inserts and takes matches a
// std::set model.

#include "weft/context/internal/slot_set.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace weft::context_internal {
namespace {

using Slot = std::pair<std::size_t, std::size_t>;  // (chunk, slot)

std::vector<Slot> DrainLowest(SlotSet& set) {
  std::vector<Slot> out;
  Slot s;
  while (set.take_lowest(&s.first, &s.second)) out.push_back(s);
  return out;
}

TEST(SlotSetTest, EmptyGivesNothing) {
  SlotSet set(204);
  Slot s;
  EXPECT_TRUE(set.empty());
  EXPECT_FALSE(set.take_lowest(&s.first, &s.second));
  set.add_chunk();
  EXPECT_FALSE(set.take_lowest(&s.first, &s.second));
  EXPECT_FALSE(set.take_highest(&s.first, &s.second));
}

TEST(SlotSetTest, TakesLowestChunkThenSlotFirst) {
  SlotSet set(204);                               // 4 words a chunk
  for (int i = 0; i < 130; ++i) set.add_chunk();  // summary spans 3 words
  const std::vector<Slot> in = {{129, 0}, {3, 203}, {3, 64}, {0, 63}, {64, 1}, {3, 0}, {0, 64}};
  for (const Slot& s : in) set.insert(s.first, s.second);
  EXPECT_EQ(set.size(), in.size());
  std::vector<Slot> sorted(in.begin(), in.end());
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(DrainLowest(set), sorted);
  EXPECT_TRUE(set.empty());
}

TEST(SlotSetTest, InsertingASlotTwiceCountsItOnce) {
  SlotSet set(64);
  set.add_chunk();
  EXPECT_TRUE(set.insert(0, 5));
  EXPECT_FALSE(set.insert(0, 5));
  EXPECT_EQ(set.size(), 1u);
  Slot s;
  EXPECT_TRUE(set.take_lowest(&s.first, &s.second));
  EXPECT_FALSE(set.take_lowest(&s.first, &s.second));
}

TEST(SlotSetTest, TakesHighestFirstWhenAsked) {
  SlotSet set(3);
  for (int i = 0; i < 70; ++i) set.add_chunk();
  set.insert(5, 2);
  set.insert(69, 0);
  set.insert(69, 1);
  set.insert(0, 0);
  Slot s;
  ASSERT_TRUE(set.take_highest(&s.first, &s.second));
  EXPECT_EQ(s, Slot(69, 1));
  ASSERT_TRUE(set.take_highest(&s.first, &s.second));
  EXPECT_EQ(s, Slot(69, 0));
  ASSERT_TRUE(set.take_highest(&s.first, &s.second));
  EXPECT_EQ(s, Slot(5, 2));
  ASSERT_TRUE(set.take_lowest(&s.first, &s.second));
  EXPECT_EQ(s, Slot(0, 0));
  EXPECT_TRUE(set.empty());
}

TEST(SlotSetTest, InsertBelowTheCursorIsTakenNext) {
  SlotSet set(1);  // one slot a chunk (the largest classes)
  for (int i = 0; i < 300; ++i) set.add_chunk();
  set.insert(250, 0);
  set.insert(299, 0);
  Slot s;
  ASSERT_TRUE(set.take_lowest(&s.first, &s.second));  // the cursor moves up to chunk 250's word
  EXPECT_EQ(s.first, 250u);
  set.insert(1, 0);
  ASSERT_TRUE(set.take_lowest(&s.first, &s.second));
  EXPECT_EQ(s.first, 1u);
  ASSERT_TRUE(set.take_lowest(&s.first, &s.second));
  EXPECT_EQ(s.first, 299u);
}

TEST(SlotSetTest, ForEachVisitsInOrderAndClearEmpties) {
  SlotSet set(100);
  for (int i = 0; i < 4; ++i) set.add_chunk();
  const std::vector<Slot> in = {{3, 99}, {0, 5}, {2, 64}, {2, 63}};
  for (const Slot& s : in) set.insert(s.first, s.second);
  std::vector<Slot> seen;
  set.for_each([&](std::size_t c, std::size_t slot) { seen.emplace_back(c, slot); });
  std::vector<Slot> sorted(in.begin(), in.end());
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(seen, sorted);
  EXPECT_EQ(set.size(), 4u);  // for_each leaves them in
  set.clear();
  EXPECT_TRUE(set.empty());
  Slot s;
  EXPECT_FALSE(set.take_lowest(&s.first, &s.second));
  set.insert(1, 1);
  EXPECT_TRUE(set.take_lowest(&s.first, &s.second));
  EXPECT_EQ(s, Slot(1, 1));
}

TEST(SlotSetTest, RandomOperationsMatchAnOrderedSet) {
  for (std::size_t per_chunk : {1u, 7u, 64u, 65u, 204u}) {
    SlotSet set(per_chunk);
    std::set<Slot> model;
    std::mt19937 rng(static_cast<unsigned>(per_chunk));
    for (int step = 0; step < 20000; ++step) {
      if (set.chunks() < 200 && rng() % 64 == 0) set.add_chunk();
      if (set.chunks() == 0) continue;
      const unsigned op = rng() % 3;
      if (op == 0 || model.empty()) {
        Slot s(rng() % set.chunks(), rng() % per_chunk);
        ASSERT_EQ(set.insert(s.first, s.second), model.insert(s).second);
      } else {
        Slot got;
        const bool highest = op == 2;
        ASSERT_TRUE(highest ? set.take_highest(&got.first, &got.second)
                            : set.take_lowest(&got.first, &got.second));
        auto want = highest ? std::prev(model.end()) : model.begin();
        ASSERT_EQ(got, *want) << "per_chunk " << per_chunk << " step " << step;
        model.erase(want);
      }
      ASSERT_EQ(set.size(), model.size());
    }
  }
}

}  // namespace
}  // namespace weft::context_internal
