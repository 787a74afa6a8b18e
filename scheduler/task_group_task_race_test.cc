// TaskGroup with tasks under random races: every kind of join at once (a task's and a fiber's
// join_next and join_all, a walk among them), each giving up at random deadlines and tokens,
// while task and fiber children spawn siblings; on 1, 2, 4 and 8 workers, and on a simulated
// runtime across seeds. WEFT_STRESS_SCALE=N multiplies the rounds and seeds.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <system_error>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/simulation.h"
#include "weft/scheduler/task.h"
#include "weft/scheduler/task_group.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/coordination.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::StressScale;

class TaskGroupTaskRace : public ::testing::TestWithParam<unsigned> {};
INSTANTIATE_TEST_SUITE_P(Workers, TaskGroupTaskRace, ::testing::Values(1u, 2u, 4u, 8u));

// Random wait options: none, a deadline soon (or past), or a token cancelled soon (or already).
struct RandomWait {
  std::unique_ptr<CancellationSource> source;
  CancellationToken token;
  WaitOptions options;
  explicit RandomWait(std::uint64_t r) {
    switch (r % 5) {
      case 0:
        break;
      case 1:
        options.deadline = SyncClock::now() + std::chrono::microseconds(r % 300);
        break;
      case 2:
        options.deadline = SyncClock::now() - 1us;
        break;
      case 3:
        source = std::make_unique<CancellationSource>();
        (void)source->cancel_after(std::chrono::microseconds(r % 300));
        token = source->token();
        options.cancel = &token;
        break;
      case 4:
        source = std::make_unique<CancellationSource>();
        source->cancel();
        token = source->token();
        options.cancel = &token;
        break;
    }
  }
};

constexpr int kMaxValues = 4096;

struct Book {
  std::atomic<int> next{0};
  std::atomic<int> spawned{0};
  std::atomic<int> taken{0};
  std::atomic<int> times[kMaxValues] = {};
  std::atomic<int> budget{0};
  void Take(int v) {
    ASSERT_GE(v, 0);
    ASSERT_LT(v, kMaxValues);
    EXPECT_EQ(times[v].fetch_add(1), 0) << "value " << v << " taken twice";
    taken.fetch_add(1);
  }
};

void SpawnOne(TaskGroup<int>& group, Book& book, bool task, int depth);

Task<int> TaskChild(TaskGroup<int>& group, Book& book, int v, int depth) {
  for (int i = 0; i < v % 3; ++i) co_await this_task::yield();
  if (depth < 3 && book.budget.fetch_sub(1) > 0) SpawnOne(group, book, v % 2 == 0, depth + 1);
  if (v % 5 == 0) (void)co_await this_task::sleep_for(std::chrono::microseconds(v % 50));
  co_return v;
}

void SpawnOne(TaskGroup<int>& group, Book& book, bool task, int depth) {
  const int v = book.next.fetch_add(1);
  Result<std::uint64_t> id = task ? group.spawn_task([&group, &book, v, depth]() {
    return TaskChild(group, book, v, depth);
  })
                                  : group.spawn([&group, &book, v, depth] {
                                      for (int i = 0; i < v % 3; ++i) this_fiber::yield();
                                      if (depth < 3 && book.budget.fetch_sub(1) > 0) {
                                        SpawnOne(group, book, v % 2 == 1, depth + 1);
                                      }
                                      return v;
                                    });
  if (id)
    book.spawned.fetch_add(1);
  else
    ADD_FAILURE() << "spawn: " << std::make_error_code(id.error()).message();
}

// MixedJoins: a collect-all group of task and fiber children (which spawn siblings of both kinds,
// three deep) taken by two task join_next loops, a task join_all, a fiber join_next loop and a
// fiber join_all (walking, in some rounds, before the others start), every join with a random
// deadline or token (none, soon, past, cancelled soon, cancelled). Every child is taken exactly
// once, and the group ends empty.
void MixedJoins(Runtime& rt, int rounds, int base) {
  for (int round = base; round < base + rounds; ++round) {
    Book book;
    book.budget = 40;
    TaskGroup<int> group(rt, {.policy = GroupPolicy::kCollectAll});
    Event go;
    for (int i = 0; i < 40; ++i) {
      const int v = book.next.fetch_add(1);
      Result<std::uint64_t> id = i % 2 == 0 ? group.spawn_task([&, v]() -> Task<int> {
        (void)co_await go.async_wait();
        co_return co_await TaskChild(group, book, v, 0);
      })
                                            : group.spawn([&, v] {
                                                (void)go.wait();
                                                return v;
                                              });
      ASSERT_TRUE(id);
      book.spawned.fetch_add(1);
    }
    std::atomic<int> seed{round * 1000};
    const auto task_next = [&]() -> Task<> {
      std::mt19937_64 r(seed.fetch_add(1));
      for (;;) {
        RandomWait w(r());
        Result<Completed<int>> c = co_await group.async_join_next(w.options);
        if (c) {
          book.Take(c->get());
          continue;
        }
        if (c.error() == std::errc::no_child_process) break;
        EXPECT_TRUE(c.error() == std::errc::timed_out || c.error() == std::errc::operation_canceled)
            << std::make_error_code(c.error()).message();
        if (r() % 4 == 0) co_await this_task::yield();
      }
    };
    const auto task_all = [&]() -> Task<> {
      std::mt19937_64 r(seed.fetch_add(1));
      for (;;) {
        RandomWait w(r());
        Result<std::vector<int>> all = co_await group.async_join_all(w.options);
        if (all) {
          for (int v : *all) book.Take(v);
          break;
        }
        EXPECT_TRUE(all.error() == std::errc::timed_out ||
                    all.error() == std::errc::operation_canceled)
            << std::make_error_code(all.error()).message();
        co_await this_task::yield();
      }
    };
    const auto fiber_next = [&] {
      std::mt19937_64 r(seed.fetch_add(1));
      for (;;) {
        RandomWait w(r());
        Result<Completed<int>> c = group.join_next(w.options);
        if (c) {
          book.Take(c->get());
          continue;
        }
        if (c.error() == std::errc::no_child_process) break;
        EXPECT_TRUE(c.error() == std::errc::timed_out || c.error() == std::errc::operation_canceled)
            << std::make_error_code(c.error()).message();
      }
    };
    const auto fiber_all = [&] {
      std::mt19937_64 r(seed.fetch_add(1));
      for (;;) {
        RandomWait w(r());
        Result<std::vector<int>> all = group.join_all(w.options);
        if (all) {
          for (int v : *all) book.Take(v);
          break;
        }
        EXPECT_TRUE(all.error() == std::errc::timed_out ||
                    all.error() == std::errc::operation_canceled)
            << std::make_error_code(all.error()).message();
        this_fiber::yield();
      }
    };
    std::vector<JoinHandle<void>> hs;
    // Order varies: a walk first in some rounds.
    if (round % 2 == 0) hs.push_back(rt.spawn(fiber_all));
    hs.push_back(rt.spawn_task(task_next));
    hs.push_back(rt.spawn_task(task_next));
    hs.push_back(rt.spawn_task(task_all));
    hs.push_back(rt.spawn(fiber_next));
    if (round % 2 == 1) hs.push_back(rt.spawn(fiber_all));
    go.set();
    for (auto& h : hs) ASSERT_TRUE(h.join());
    ASSERT_EQ(book.taken.load(), book.spawned.load()) << "round " << round;
    ASSERT_EQ(group.size(), 0u);
  }
}

TEST_P(TaskGroupTaskRace, EveryJoinKindRacesWithRandomGiveUps) {
  Runtime rt({.workers = GetParam()});
  MixedJoins(rt, 30 * StressScale(), 0);
}

TEST(TaskGroupTaskRaceSimulated, EveryJoinKindRacesWithRandomGiveUps) {
  for (std::uint64_t seed = 1; seed <= 40u * StressScale(); ++seed) {
    Runtime rt({.workers = 1, .simulation = SimulationOptions{.seed = seed}});
    rt.block_on([&] { MixedJoins(rt, 2, static_cast<int>(seed) * 7); });
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "seed " << seed;
      break;
    }
  }
}

}  // namespace
}  // namespace weft
