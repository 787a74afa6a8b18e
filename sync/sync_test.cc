// sync/sync_test.cc: the //sync suite (sync_suite.cc) on OS threads: the primitives' thread mode.
// scheduler/sync_on_fibers_test.cc runs the same suite on fibers.

#include <atomic>
#include <limits>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/sync/channel.h"
#include "weft/sync/internal/spin_lock.h"
#include "weft/sync/internal/wait_queue.h"
#include "weft/sync/mutex.h"
#include "weft/sync/sync_suite.h"

namespace weft {
namespace {

class ThreadRunner final : public Runner {
 public:
  ~ThreadRunner() override { JoinAll(); }
  void Spawn(std::function<void()> fn) override { threads_.emplace_back(std::move(fn)); }
  void Relax() override { std::this_thread::yield(); }
  void JoinAll() override {
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  std::vector<std::thread> threads_;
};

INSTANTIATE_TEST_SUITE_P(Threads, SyncTest,
                         ::testing::Values(RunnerFactory{
                             "threads", [] { return std::make_unique<ThreadRunner>(); }}),
                         [](const auto& info) { return info.param.name; });

// drain (wake-all) walks the queue from both ends, and still hands the nodes over front to back,
// unlinked, for every length; size() counts them.
TEST(WaitQueueTest, DrainGrantsEveryNodeInOrder) {
  for (int n = 0; n <= 6; ++n) {
    std::vector<sync_internal::WaitNode> nodes(static_cast<std::size_t>(n));
    sync_internal::WaitQueue q;
    for (auto& node : nodes) q.push_back(&node);
    ASSERT_EQ(q.size(), nodes.size());
    std::vector<sync_internal::WaitNode*> out(q.size());
    q.drain([](sync_internal::WaitNode* node) { return node; }, out.data());
    EXPECT_EQ(q.size(), 0u);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(out[static_cast<std::size_t>(i)], &nodes[static_cast<std::size_t>(i)]) << n;
      EXPECT_FALSE(nodes[static_cast<std::size_t>(i)].queued);
      EXPECT_EQ(nodes[static_cast<std::size_t>(i)].next, nullptr);
      EXPECT_EQ(nodes[static_cast<std::size_t>(i)].prev, nullptr);
    }
    EXPECT_TRUE(q.empty());
  }
}

// try_lock takes a free lock and refuses a held one, from the holder's thread or another.
TEST(SpinLockTest, TryLockTakesOnlyAFreeLock) {
  sync_internal::SpinLock lock;
  ASSERT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.try_lock());
  bool other = true;
  std::thread([&] { other = lock.try_lock(); }).join();
  EXPECT_FALSE(other);
  lock.unlock();
  std::thread([&] {
    other = lock.try_lock();
    if (other) lock.unlock();
  }).join();
  EXPECT_TRUE(other);
  lock.lock();
  lock.unlock();
}

// A new thread's first wait makes its Waiter (channels look it up under their lock, so they
// step out of the lock to make it and start over): nothing sent is lost or doubled.
TEST(SyncThreadTest, AThreadsFirstWaitIsOnAChannel) {
  Channel<int> in(0), out(0);
  std::thread receiver([&] {
    Result<int> v = in.recv();
    ASSERT_TRUE(v.ok());
    ASSERT_TRUE(out.send(*v + 1).ok());
  });
  while (in.waiters() == 0) std::this_thread::yield();
  ASSERT_TRUE(in.send(41).ok());
  std::thread sender([&] { ASSERT_TRUE(out.send(-1).ok()); });  // its first wait is a send
  Result<int> a = out.recv();
  Result<int> b = out.recv();
  receiver.join();
  sender.join();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a + *b, 41);  // 42 and -1, in either order
}

TEST(SyncDeathTest, DestroyingAChannelWithWaitersAborts) {
  GTEST_FLAG_SET(death_test_style, weft::testing::DeathTestStyle());
  EXPECT_DEATH(
      {
        auto* ch = new Channel<int>(0);
        std::thread t([ch] { (void)ch->recv(); });
        t.detach();
        while (ch->waiters() == 0) std::this_thread::yield();
        delete ch;
      },
      "weft: Channel destroyed while fibers or threads wait on it");
}

// A thread that exits holding a Mutex keeps it: the next thread, which gets the exited
// thread's recycled Waiter, is not its owner (unlock is EPERM, and the mutex stays locked).
TEST(MutexTest, AThreadThatExitsHoldingAMutexDoesNotHandItToTheNextThread) {
  for (int round = 0; round < 20; ++round) {
    Mutex m;
    std::thread([&] { ASSERT_TRUE(m.lock({}).ok()); }).join();  // exits holding m
    std::thread([&] {
      EXPECT_EQ(m.unlock().error(), std::errc::operation_not_permitted);
      EXPECT_FALSE(m.try_lock());
    }).join();
  }
}

// An element whose move throws on demand (before changing anything).
struct Fragile {
  static inline std::atomic<int> skip{0};    // moves that pass first
  static inline std::atomic<int> throws{0};  // then how many of the next moves throw
  int v = 0;
  explicit Fragile(int x) : v(x) {}
  Fragile(Fragile&& o) : v(o.v) { MaybeThrow(); }
  Fragile& operator=(Fragile&& o) {
    MaybeThrow();
    v = o.v;
    return *this;
  }
  static void MaybeThrow() {
    if (skip.load() > 0) {
      skip.fetch_sub(1);
      return;
    }
    if (throws.load() > 0) {
      throws.fetch_sub(1);
      throw std::runtime_error("move");
    }
  }
};

// A move that throws inside the channel: the call throws, the channel's lock is released and
// nothing is lost (the channel used to keep its spin lock held: every later call hung).
TEST(ChannelTest, AnElementMoveThatThrowsLeavesTheChannelUsable) {
  {  // into the buffer
    Channel<Fragile> ch(2);
    Fragile::throws = 1;
    EXPECT_THROW((void)ch.send(Fragile(1)), std::runtime_error);
    ASSERT_TRUE(ch.send(Fragile(2)).ok());
    auto r = ch.try_recv();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->v, 2);
  }
  {  // out of the buffer: the element stays for the next receive
    Channel<Fragile> ch(2);
    ASSERT_TRUE(ch.send(Fragile(3)).ok());
    Fragile::throws = 1;
    EXPECT_THROW((void)ch.try_recv(), std::runtime_error);
    auto r = ch.try_recv();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->v, 3);
  }
  {  // to a waiting receiver: it keeps waiting and gets the next value
    Channel<Fragile> ch(0);
    std::atomic<int> got{-1};
    std::thread receiver([&] {
      auto r = ch.recv();
      if (r.ok()) got = r->v;
    });
    while (ch.waiters() == 0) std::this_thread::yield();
    Fragile::throws = 1;
    EXPECT_THROW((void)ch.try_send(Fragile(4)), std::runtime_error);
    ASSERT_TRUE(ch.send(Fragile(5)).ok());
    receiver.join();
    EXPECT_EQ(got.load(), 5);
  }
  {  // from a waiting sender into the buffer a receive freed: the receive stands, the sender
     // stays queued, and the next receive gets its value
    Channel<Fragile> ch(1);
    ASSERT_TRUE(ch.send(Fragile(6)).ok());
    std::thread sender([&] { ASSERT_TRUE(ch.send(Fragile(7)).ok()); });
    while (ch.waiters() == 0) std::this_thread::yield();
    // The receive's move out of the buffer passes; the refill from the sender throws.
    Fragile::skip = 1;
    Fragile::throws = 1;
    auto first = ch.recv();
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(first->v, 6);
    auto second = ch.recv();
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(second->v, 7);
    sender.join();
  }
  Fragile::skip = 0;
  Fragile::throws = 0;
}

TEST(ChannelTest, AnAbsurdCapacityIsAnErrorNotASmallBuffer) {
  // SIZE_MAX / 8 + 2 elements of 8 bytes wrap to 8 bytes: the buffer must not be made.
  EXPECT_THROW(Channel<std::uint64_t>(std::numeric_limits<std::size_t>::max() / 8 + 2),
               std::length_error);
  EXPECT_THROW(Channel<std::uint64_t>(std::numeric_limits<std::size_t>::max()), std::length_error);
  // Fits in size_t but not in memory: the allocator's own error (the sanitizers' allocators
  // report such a request and abort instead).
  if (!testing::kAsan && !testing::kTsan) {
    EXPECT_THROW(Channel<std::uint64_t>(std::numeric_limits<std::size_t>::max() / 16),
                 std::bad_alloc);
  }
  Channel<std::uint64_t> ok(4);  // and ordinary capacities still work
  ASSERT_TRUE(ok.try_send(7).ok());
  EXPECT_EQ(*ok.try_recv(), 7u);
}

TEST(ChannelTest, SelectRefusesZeroedOrPartlyFilledCases) {
  Channel<int> c(1);
  int v = 1;
  SelectCase zeroed[2] = {};
  EXPECT_EQ(select(zeroed, {}, true).error(), std::errc::invalid_argument);
  SelectCase no_value[1] = {c.recv_case(v)};
  no_value[0].value = nullptr;
  EXPECT_EQ(select(no_value, {}, true).error(), std::errc::invalid_argument);
  SelectCase partly[2] = {c.send_case(v)};  // the second left zeroed
  EXPECT_EQ(select(partly, {}, true).error(), std::errc::invalid_argument);
  EXPECT_EQ(c.size(), 0u);  // nothing was sent by the refused select
}

}  // namespace
}  // namespace weft
