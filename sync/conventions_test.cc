// sync/conventions_test.cc: weft's sync primitives in the standard's conventions, on plain
// threads: MutexLock and UniqueLock (each error path), Mutex as a Lockable for std::scoped_lock
// and std::unique_lock, CondVar waits with a predicate, cancellation bridged both ways with
// std::stop_token, and a Channel consumed as a range. The same on fibers, and the guards during
// a runtime's shutdown: scheduler/sync_on_fibers_test.cc.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <iterator>
#include <memory>
#include <mutex>
#include <ranges>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/channel.h"
#include "weft/sync/mutex.h"

namespace weft {
namespace {

using std::chrono::milliseconds;

std::errc ErrorOf(const std::system_error& e) { return static_cast<std::errc>(e.code().value()); }

TEST(MutexLockTest, HoldsForItsScope) {
  Mutex m;
  {
    MutexLock hold(m);
    EXPECT_FALSE(m.try_lock());
  }
  EXPECT_TRUE(m.try_lock());
  (void)m.unlock();
}

TEST(MutexLockTest, ALockTheCallerHoldsThrowsAndLeavesTheMutexAsItWas) {
  Mutex m;
  MutexLock outer(m);
  try {
    MutexLock inner(m);
    ADD_FAILURE() << "a second MutexLock on a held mutex entered its scope";
  } catch (const std::system_error& e) {
    EXPECT_EQ(ErrorOf(e), std::errc::resource_deadlock_would_occur);
  }
  // Still held by outer: the failed guard unlocked nothing.
  std::thread other([&] { EXPECT_FALSE(m.try_lock()); });
  other.join();
}

TEST(MutexTest, LockableForTheStandardGuards) {
  Mutex a, b;
  long count = 0;
  // Two orders at once: std::scoped_lock's deadlock avoidance over weft mutexes.
  auto work = [&](bool reversed) {
    for (int i = 0; i < 2000; ++i) {
      if (reversed) {
        std::scoped_lock both(b, a);
        ++count;
      } else {
        std::scoped_lock both(a, b);
        ++count;
      }
    }
  };
  std::thread t1(work, false), t2(work, true);
  t1.join();
  t2.join();
  EXPECT_EQ(count, 4000);
  {
    std::lock_guard<Mutex> g(a);
    EXPECT_FALSE(b.try_lock() && a.try_lock());  // a is held; b was free (taken now)
  }
  (void)b.unlock();
  // std::unique_lock with a timed try: false once the time is up, true when free.
  std::unique_lock<Mutex> held(a);
  std::thread waiter([&] {
    std::unique_lock<Mutex> l(a, std::defer_lock);
    EXPECT_FALSE(l.try_lock_for(milliseconds(2)));
    EXPECT_FALSE(a.try_lock_until(std::chrono::system_clock::now() + milliseconds(1)));
  });
  waiter.join();
  held.unlock();
  std::unique_lock<Mutex> l(a, std::defer_lock);
  EXPECT_TRUE(l.try_lock_for(milliseconds(2)));
}

TEST(UniqueLockTest, DeferTryAdoptMoveRelease) {
  Mutex m;
  UniqueLock deferred(m, std::defer_lock);
  EXPECT_FALSE(deferred.owns_lock());
  deferred.lock();
  EXPECT_TRUE(deferred);
  UniqueLock moved(std::move(deferred));
  EXPECT_FALSE(deferred.owns_lock());
  EXPECT_EQ(deferred.mutex(), nullptr);
  EXPECT_TRUE(moved.owns_lock());
  UniqueLock tried(m, std::try_to_lock);
  EXPECT_FALSE(tried.owns_lock());
  moved.unlock();
  EXPECT_TRUE(tried.try_lock());
  Mutex* raw = tried.release();
  EXPECT_EQ(raw, &m);
  EXPECT_FALSE(m.try_lock());  // still locked: release does not unlock
  UniqueLock adopted(m, std::adopt_lock);
  EXPECT_TRUE(adopted.owns_lock());
  UniqueLock other;
  adopted.swap(other);
  EXPECT_TRUE(other.owns_lock());
  EXPECT_FALSE(adopted.owns_lock());
  other = UniqueLock();  // assigning unlocks what it held
  EXPECT_TRUE(m.try_lock());
  (void)m.unlock();
}

TEST(UniqueLockTest, EachErrorIsReportedNeverIgnored) {
  Mutex m;
  UniqueLock none;
  try {
    none.lock();
    ADD_FAILURE();
  } catch (const std::system_error& e) {
    EXPECT_EQ(ErrorOf(e), std::errc::operation_not_permitted);
  }
  EXPECT_EQ(none.lock(WaitOptions{}).error(), std::errc::operation_not_permitted);
  UniqueLock l(m);
  try {
    l.lock();
    ADD_FAILURE();
  } catch (const std::system_error& e) {
    EXPECT_EQ(ErrorOf(e), std::errc::resource_deadlock_would_occur);
  }
  EXPECT_EQ(l.lock(WaitOptions{}).error(), std::errc::resource_deadlock_would_occur);
  l.unlock();
  try {
    l.unlock();
    ADD_FAILURE();
  } catch (const std::system_error& e) {
    EXPECT_EQ(ErrorOf(e), std::errc::operation_not_permitted);
  }
  // acquire: deadline and token as values.
  MutexLock hold(m);
  std::thread t([&] {
    Result<UniqueLock> timed =
        UniqueLock::acquire(m, {.deadline = SyncClock::now() + milliseconds(2)});
    EXPECT_EQ(timed.error(), std::errc::timed_out);
    CancellationSource source;
    source.cancel();
    CancellationToken token = source.token();
    EXPECT_EQ(UniqueLock::acquire(m, {.cancel = &token}).error(), std::errc::operation_canceled);
    UniqueLock mine(m, std::defer_lock);
    EXPECT_EQ(mine.lock({.cancel = &token}).error(), std::errc::operation_canceled);
    EXPECT_FALSE(mine.owns_lock());
  });
  t.join();
  // A lock moved to another thread cannot be unlocked there: EPERM, thrown.
  Mutex n;
  UniqueLock here(n);
  std::thread away([&, l = std::move(here)]() mutable {
    try {
      l.unlock();
      ADD_FAILURE();
    } catch (const std::system_error& e) {
      EXPECT_EQ(ErrorOf(e), std::errc::operation_not_permitted);
    }
    (void)l.release();
  });
  away.join();
  EXPECT_TRUE(n.unlock().ok());  // this thread still held it
}

TEST(UniqueLockDeathTest, DestroyedByAnotherThreadAbortsRatherThanStayLocked) {
  EXPECT_DEATH(
      {
        Mutex m;
        UniqueLock here(m);
        std::thread away([l = std::move(here)] {});  // ~UniqueLock on the other thread
        away.join();
      },
      "locked for good");
}

TEST(MutexTest, TimedLocksAtTheEndsOfTime) {
  Mutex m;
  ASSERT_TRUE(m.lock({}).ok());
  std::atomic<bool> got{false}, tried{false};
  std::thread waiter([&] {
    // Passed already, for any clock: false at once, no overflow.
    EXPECT_FALSE(m.try_lock_until(std::chrono::system_clock::time_point::min()));
    EXPECT_FALSE(m.try_lock_until(std::chrono::steady_clock::time_point::min()));
    EXPECT_FALSE(m.try_lock_for(std::chrono::nanoseconds::min()));
    tried = true;
    // No limit: waits until the mutex is free (it overflowed into an instant false).
    got = m.try_lock_for(std::chrono::nanoseconds::max());
    EXPECT_TRUE(m.unlock().ok());
    EXPECT_TRUE(m.try_lock_until(
        std::chrono::time_point<std::chrono::steady_clock, std::chrono::hours>::max()));
    EXPECT_TRUE(m.unlock().ok());
  });
  while (!tried.load()) std::this_thread::yield();  // the mutex stays held until then
  std::this_thread::sleep_for(milliseconds(2));
  EXPECT_FALSE(got.load());
  EXPECT_TRUE(m.unlock().ok());
  waiter.join();
  EXPECT_TRUE(got.load());
}

TEST(UniqueLockTest, AcquireThenCondVarWaitWithAPredicate) {
  Mutex m;
  CondVar cv;
  bool ready = false;
  std::thread producer([&] {
    std::this_thread::sleep_for(milliseconds(1));
    MutexLock hold(m);
    ready = true;
    cv.broadcast();
  });
  Result<UniqueLock> lock = UniqueLock::acquire(m);
  ASSERT_TRUE(lock.ok());
  EXPECT_TRUE(cv.wait(*lock, [&] { return ready; }).ok());
  EXPECT_TRUE(lock->owns_lock());
  lock->unlock();
  producer.join();
  // The predicate false when the time is up: timed_out, the lock held again.
  UniqueLock again(m);
  Result<void> r =
      cv.wait(again, [] { return false; }, {.deadline = SyncClock::now() + milliseconds(1)});
  EXPECT_EQ(r.error(), std::errc::timed_out);
  EXPECT_TRUE(again.owns_lock());
  UniqueLock empty;
  EXPECT_EQ(cv.wait(empty).error(), std::errc::operation_not_permitted);
  // On the Mutex itself too.
  again.unlock();
  ASSERT_TRUE(m.lock({}).ok());
  EXPECT_TRUE(cv.wait(m, [&] { return ready; }).ok());
  (void)m.unlock();
}

TEST(StopTokenTest, AStopTokenCancelsAWeftWait) {
  Channel<int> ch(1);
  std::stop_source stop;
  CancellationToken token(stop.get_token());
  EXPECT_TRUE(token.can_be_cancelled());
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(1));
    stop.request_stop();
  });
  EXPECT_EQ(ch.recv({.cancel = &token}).error(), std::errc::operation_canceled);
  EXPECT_TRUE(token.is_cancelled());
  stopper.join();
  // Already stopped: cancelled at once. Cannot stop: a default token.
  CancellationToken at_once(stop.get_token());
  EXPECT_TRUE(at_once.is_cancelled());
  CancellationToken never{std::stop_token()};
  EXPECT_FALSE(never.can_be_cancelled());
  // A std::jthread's token, and the token outliving its std::stop_source.
  CancellationToken from_thread;
  {
    std::jthread t([&](std::stop_token st) { from_thread = CancellationToken(st); });
  }  // joined: requests stop first
  EXPECT_TRUE(from_thread.is_cancelled());
  auto gone = std::make_unique<std::stop_source>();
  CancellationToken orphan(gone->get_token());
  gone.reset();
  EXPECT_FALSE(orphan.is_cancelled());
}

TEST(StopTokenTest, AWeftCancelStopsTheStandardToken) {
  CancellationSource source;
  std::stop_token st = source.token().stop_token();
  EXPECT_TRUE(st.stop_possible());
  EXPECT_FALSE(st.stop_requested());
  std::atomic<bool> called{false};
  std::stop_callback cb(st, [&] { called = true; });
  std::stop_token again = source.token().stop_token();  // the same std::stop_source
  source.cancel();
  EXPECT_TRUE(st.stop_requested());
  EXPECT_TRUE(again.stop_requested());
  EXPECT_TRUE(called);
  // Cancelled before the first call; by a parent; by a deadline.
  CancellationSource early;
  early.cancel();
  EXPECT_TRUE(early.token().stop_token().stop_requested());
  CancellationSource parent;
  CancellationSource child(parent.token());
  std::stop_token child_st = child.token().stop_token();
  parent.cancel();
  EXPECT_TRUE(child_st.stop_requested());
  CancellationSource timed;
  ASSERT_TRUE(timed.cancel_after(milliseconds(1)).ok());
  std::stop_token timed_st = timed.token().stop_token();
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock<std::mutex> l(mu);
  EXPECT_FALSE(cv.wait(l, timed_st, [] { return false; }));  // returns once the stop comes
  EXPECT_TRUE(timed_st.stop_requested());
  // A default token never stops.
  EXPECT_FALSE(CancellationToken().stop_token().stop_possible());
}

TEST(ChannelRangeTest, RangeForReceivesUntilClosed) {
  Channel<std::string> ch(4);
  std::thread producer([&] {
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(ch.send(std::to_string(i)).ok());
    ch.close();  // mid-iteration for the consumer below
  });
  std::vector<std::string> got;
  for (std::string v : ch) got.push_back(v);
  producer.join();
  ASSERT_EQ(got.size(), 100u);
  EXPECT_EQ(got.front(), "0");
  EXPECT_EQ(got.back(), "99");
  for (std::string v : ch) ADD_FAILURE() << "a closed, drained channel gave " << v;
}

TEST(ChannelRangeTest, AnInputRangeForStandardAlgorithms) {
  static_assert(std::ranges::input_range<Channel<int>>);
  static_assert(std::input_iterator<Channel<int>::iterator>);
  Channel<int> ch(16);
  for (int i = 1; i <= 10; ++i) ASSERT_TRUE(ch.send(int{i}).ok());
  std::vector<int> first;
  for (int v : ch | std::views::take(3)) first.push_back(v);
  EXPECT_EQ(first, (std::vector<int>{1, 2, 3}));
  ch.close();
  std::vector<int> rest;
  std::ranges::copy(ch, std::back_inserter(rest));
  // take(3) received exactly three: the fourth is still there.
  EXPECT_EQ(rest, (std::vector<int>{4, 5, 6, 7, 8, 9, 10}));
  // Move-only values: the loop's element is the iterator's.
  Channel<std::unique_ptr<int>> boxes(2);
  ASSERT_TRUE(boxes.send(std::make_unique<int>(5)).ok());
  boxes.close();
  for (std::unique_ptr<int>& box : boxes) EXPECT_EQ(*std::move(box), 5);
}

// Throwy: counts live objects; its move constructor throws on the moves_left-th move from now.
struct Throwy {
  static inline int live = 0;
  static inline int moves_left = -1;  // -1: never
  int v;
  explicit Throwy(int x) : v(x) { ++live; }
  Throwy(Throwy&& o) : v(o.v) {
    if (moves_left > 0 && --moves_left == 0) throw std::runtime_error("move");
    ++live;
  }
  Throwy& operator=(Throwy&&) = default;
  ~Throwy() { --live; }
};

TEST(ChannelRangeTest, AReceiveWhoseMoveThrowsDestroysWhatItTook) {
  {
    Channel<Throwy> ch(2);
    ASSERT_TRUE(ch.send(Throwy(1)).ok());
    ASSERT_TRUE(ch.send(Throwy(2)).ok());
    const int in_channel = Throwy::live;
    // Each move in turn throws: out of the buffer (the value stays), then into the Result (the
    // value, out of the channel, is destroyed: nothing leaks).
    for (int nth = 1; nth <= 2; ++nth) {
      Throwy::moves_left = nth;
      try {
        Result<Throwy> r = ch.recv();
        Throwy::moves_left = -1;
        ADD_FAILURE() << "no throw at move " << nth;
      } catch (const std::runtime_error&) {
      }
      Throwy::moves_left = -1;
      EXPECT_LE(Throwy::live, in_channel) << "move " << nth << " leaked";
    }
  }
  EXPECT_EQ(Throwy::live, 0);
}

TEST(ChannelRangeTest, IteratorsAreMoveOnlyAndADefaultOneIsTheEnd) {
  static_assert(!std::is_copy_constructible_v<Channel<int>::iterator>);
  Channel<int>::iterator none;
  EXPECT_TRUE(none == std::default_sentinel);
  Channel<int> ch(2);
  ASSERT_TRUE(ch.send(1).ok());
  ASSERT_TRUE(ch.send(2).ok());
  ch.close();
  auto it = ch.begin();
  EXPECT_EQ(*it, 1);
  auto moved = std::move(it);
  EXPECT_EQ(*moved, 1);  // the same step: nothing received twice
  ++moved;
  EXPECT_EQ(*moved, 2);
}

TEST(ChannelRangeTest, ErrorsOtherThanClosedAreSurfaced) {
  Channel<int> ch(1);
  CancellationSource source;
  source.cancel();
  CancellationToken token = source.token();
  // range(options): the loop ends, error() says why.
  auto r = ch.range({.cancel = &token});
  for (int v : r) ADD_FAILURE() << v;
  EXPECT_EQ(r.error(), std::errc::operation_canceled);
  auto timed = ch.range({.deadline = SyncClock::now() + milliseconds(1)});
  for (int v : timed) ADD_FAILURE() << v;
  EXPECT_EQ(timed.error(), std::errc::timed_out);
  ASSERT_TRUE(ch.send(7).ok());
  ch.close();
  auto closed = ch.range({.cancel = &token});  // a value ready: no wait, so no cancel
  std::vector<int> got;
  for (int v : closed) got.push_back(v);
  EXPECT_EQ(got, std::vector<int>{7});
  EXPECT_EQ(closed.error(), std::errc{});
  // A new loop over a range starts without the last one's error.
  Channel<int> open(1);
  auto again = open.range({.deadline = SyncClock::now() + milliseconds(1)});
  for (int v : again) ADD_FAILURE() << v;
  EXPECT_EQ(again.error(), std::errc::timed_out);
  ASSERT_TRUE(open.send(3).ok());
  for (int v : again) {
    EXPECT_EQ(v, 3);
    break;  // stopped by the loop itself
  }
  EXPECT_EQ(again.error(), std::errc{});
}

TEST(StopTokenTest, ADeadlineReplacedByNoneDoesNotFire) {
  CancellationSource source;
  std::stop_token st = source.token().stop_token();
  // (100 ms: far enough that the replacement comes first even on a loaded machine.)
  ASSERT_TRUE(source.cancel_after(milliseconds(100)).ok());
  ASSERT_TRUE(source.cancel_after(std::chrono::nanoseconds::max()).ok());  // no deadline now
  std::this_thread::sleep_for(milliseconds(150));
  EXPECT_FALSE(source.is_cancelled());
  EXPECT_FALSE(st.stop_requested());
  ASSERT_TRUE(source.cancel_at(SyncClock::time_point::max()).ok());
  EXPECT_FALSE(source.is_cancelled());
}

}  // namespace
}  // namespace weft
