// base/thread_exit_test.cc: a ThreadExitKey calls its function once per exiting thread that set
// a non-null value, with that value; ThreadOwned gives each thread its own object and deletes it
// at exit.

#include "weft/base/thread_exit.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace weft::base_internal {
namespace {

std::atomic<int> g_calls{0};
std::atomic<std::intptr_t> g_sum{0};

void Record(void* value) {
  // relaxed: read after the threads are joined.
  g_calls.fetch_add(1, std::memory_order_relaxed);
  g_sum.fetch_add(reinterpret_cast<std::intptr_t>(value), std::memory_order_relaxed);
}

ThreadExitKey& Key() {
  static auto* key = new ThreadExitKey(&Record);
  return *key;
}

TEST(ThreadExitKeyTest, RunsOncePerExitingThreadWithItsValue) {
  g_calls = 0;
  g_sum = 0;
  std::vector<std::thread> threads;
  for (std::intptr_t i = 1; i <= 8; ++i) {
    threads.emplace_back([i] {
      Key().Set(reinterpret_cast<void*>(i * 100));  // replaced below: only i counts
      Key().Set(reinterpret_cast<void*>(i));
    });
  }
  threads.emplace_back([] { Key().Set(nullptr); });  // null: no call
  threads.emplace_back([] {});                       // never set: no call
  for (auto& t : threads) t.join();
  EXPECT_EQ(g_calls.load(), 8);
  EXPECT_EQ(g_sum.load(), 36);
}

TEST(ThreadExitKeyTest, KeysAreIndependent) {
  static std::atomic<int> other{0};
  static auto* second = new ThreadExitKey([](void*) { other.fetch_add(1); });
  g_calls = 0;
  std::thread([] {
    second->Set(reinterpret_cast<void*>(1));
    Key().Set(reinterpret_cast<void*>(2));
  }).join();
  std::thread([] { second->Set(reinterpret_cast<void*>(1)); }).join();
  EXPECT_EQ(g_calls.load(), 1);
  EXPECT_EQ(other.load(), 2);
}

struct Counted {
  static inline std::atomic<int> alive{0};
  Counted() { alive.fetch_add(1); }
  ~Counted() { alive.fetch_sub(1); }
};

TEST(ThreadOwnedTest, OnePerThreadMadeOnFirstUseAndDeletedAtExit) {
  EXPECT_EQ(ThreadOwned<Counted>::existing(), nullptr);
  Counted* mine = ThreadOwned<Counted>::get();
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(ThreadOwned<Counted>::get(), mine);
  EXPECT_EQ(ThreadOwned<Counted>::existing(), mine);
  Counted* theirs = nullptr;
  std::thread([&] {
    EXPECT_EQ(ThreadOwned<Counted>::existing(), nullptr);
    theirs = ThreadOwned<Counted>::get();
    EXPECT_EQ(Counted::alive.load(), 2);
  }).join();
  EXPECT_NE(theirs, mine);
  EXPECT_EQ(Counted::alive.load(), 1);  // the other thread's went with it
  std::thread([] {}).join();            // a thread that never asks makes none
  EXPECT_EQ(Counted::alive.load(), 1);
}

}  // namespace
}  // namespace weft::base_internal
