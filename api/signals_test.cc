// Tests of SignalSet and signals::wait (api/signals.h). The waits run twice: in fibers of a
// Runtime and on plain threads (dual mode). On POSIX the signals are real (pthread_kill to this
// thread, a worker, a blocking thread, a thread of the test's; kill to the process); on Windows
// they are console control events given to weft's handler through its test hook (Wine delivers
// no console events).

#include "weft/api/signals.h"

#ifdef _WIN32
#include <windows.h>
#else
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#endif

#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/internal/console_events.h"
#include "weft/api/testing/dual_mode.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/cancellation.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

WaitOptions In(std::chrono::milliseconds d) {
  return WaitOptions{.deadline = SyncClock::now() + d};
}

// kA, kB: two signals the tests own. RaiseHere: delivers one to the calling thread (POSIX: its
// handler has run when the call returns) or, on Windows, runs the console handler for the event
// that stands for it.
#ifdef _WIN32
constexpr int kA = SIGINT;
constexpr int kB = SIGTERM;
void RaiseHere(int signo) {
  (void)api_internal::DeliverConsoleEvent(signo == SIGINT ? CTRL_C_EVENT : CTRL_CLOSE_EVENT);
}
#else
constexpr int kA = SIGUSR1;
constexpr int kB = SIGUSR2;
void RaiseHere(int signo) { ASSERT_EQ(::pthread_kill(::pthread_self(), signo), 0); }
#endif

// Dispositions: the tests' signals are ignored outside the sets (POSIX), so a stray one never
// kills the test; the previous dispositions come back at teardown.
class Dispositions {
 public:
  Dispositions() {
#ifndef _WIN32
    for (int i = 0; i < 3; ++i) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      ::sigaction(kSaved[i], &ignore, &saved_[i]);
    }
#endif
  }
  ~Dispositions() {
#ifndef _WIN32
    for (int i = 0; i < 3; ++i) ::sigaction(kSaved[i], &saved_[i], nullptr);
#endif
  }

 private:
#ifndef _WIN32
  static constexpr int kSaved[3] = {SIGUSR1, SIGUSR2, SIGPIPE};
  struct sigaction saved_[3]{};
#endif
};

using testing::Mode;

class SignalWaitTest : public testing::DualModeTest {
 protected:
  SignalWaitTest() : DualModeTest(/*workers=*/2) {}
  // Pause: lets the other executions run a little (a sleep: parks a fiber, blocks a thread).
  void Pause() {
    if (rt_ != nullptr) {
      (void)this_fiber::sleep_for(1ms);
    } else {
      std::this_thread::sleep_for(1ms);
    }
  }

  Dispositions dispositions_;
};

INSTANTIATE_TEST_SUITE_P(Modes, SignalWaitTest, ::testing::Values(Mode::kFibers, Mode::kThreads),
                         testing::ModeName);

TEST_P(SignalWaitTest, ReceivesASignalRaisedWhileItWaits) {
  Result<SignalSet> set = SignalSet::open({kA});
  ASSERT_TRUE(set.ok());
  Run([&] {
    Other raiser = Concurrently([] { RaiseHere(kA); });
    Result<int> got = set->recv();
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, kA);
  });
}

TEST_P(SignalWaitTest, ASignalRaisedBeforeAnyoneWaitsIsQueuedAndRepeatsCoalesce) {
  Result<SignalSet> set = SignalSet::open({kA});
  ASSERT_TRUE(set.ok());
  Run([&] {
    RaiseHere(kA);
    RaiseHere(kA);
    Result<int> got = set->recv();
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, kA);
    EXPECT_EQ(set->try_recv().error(), std::errc::resource_unavailable_try_again);
    EXPECT_EQ(set->recv(In(10ms)).error(), std::errc::timed_out);
  });
}

TEST_P(SignalWaitTest, DeadlineAndCancellation) {
  Result<SignalSet> set = SignalSet::open({kA});
  ASSERT_TRUE(set.ok());
  Run([&] {
    EXPECT_EQ(set->recv(In(20ms)).error(), std::errc::timed_out);

    CancellationSource cancelled;
    cancelled.cancel();
    CancellationToken token = cancelled.token();
    EXPECT_EQ(set->recv({.cancel = &token}).error(), std::errc::operation_canceled);

    // A queued signal is returned without waiting, whatever the options.
    RaiseHere(kA);
    Result<int> got = set->recv({.cancel = &token});
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, kA);

    // Cancelled while it waits.
    CancellationSource later;
    CancellationToken later_token = later.token();
    Other canceller = Concurrently([&] { later.cancel(); });
    EXPECT_EQ(set->recv({.cancel = &later_token}).error(), std::errc::operation_canceled);
  });
}

TEST_P(SignalWaitTest, TwoSetsEachGetTheirOwn) {
  Result<SignalSet> a = SignalSet::open({kA});
  Result<SignalSet> b = SignalSet::open({kB});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  Run([&] {
    RaiseHere(kB);
    RaiseHere(kA);
    Result<int> got_a = a->recv();
    Result<int> got_b = b->recv();
    ASSERT_TRUE(got_a.ok() && got_b.ok());
    EXPECT_EQ(*got_a, kA);
    EXPECT_EQ(*got_b, kB);
    EXPECT_EQ(a->try_recv().error(), std::errc::resource_unavailable_try_again);
    EXPECT_EQ(b->try_recv().error(), std::errc::resource_unavailable_try_again);
  });
}

TEST_P(SignalWaitTest, OneSetWithTwoSignalsGetsBoth) {
  Result<SignalSet> set = SignalSet::open({kA, kB, kA});
  ASSERT_TRUE(set.ok());
  Run([&] {
    RaiseHere(kA);
    RaiseHere(kB);
    Result<int> first = set->recv();
    Result<int> second = set->recv();
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_EQ(*first + *second, kA + kB);
    EXPECT_NE(*first, *second);
  });
}

// Each arrival wakes exactly one of many waiters: the next signal is raised once the previous
// one has been taken (the set coalesces repeats that are not yet taken).
TEST_P(SignalWaitTest, ManyWaitersEachArrivalWakesExactlyOne) {
  constexpr int kWaiters = 8;
  Result<SignalSet> set = SignalSet::open({kA});
  ASSERT_TRUE(set.ok());
  std::atomic<int> ready{0};
  std::atomic<int> received{0};
  std::atomic<int> failed{0};
  Run([&] {
    std::vector<Other> waiters;
    for (int i = 0; i < kWaiters; ++i) {
      waiters.push_back(Concurrently([&] {
        // First a wait that times out at once: on a thread it makes the thread's reactor, so
        // every waiter has its io_uring ring before the first waiter exits. (Else TSan may report
        // a race on a ring mapped where an exited thread's was: liburing maps and unmaps rings
        // with raw system calls that TSan does not see.)
        EXPECT_EQ(set->recv(In(0ms)).error(), std::errc::timed_out);
        ready.fetch_add(1, std::memory_order_relaxed);
        Result<int> got = set->recv();
        if (got.ok() && *got == kA) {
          received.fetch_add(1, std::memory_order_relaxed);
        } else {
          failed.fetch_add(1, std::memory_order_relaxed);
        }
      }));
    }
    while (ready.load(std::memory_order_relaxed) < kWaiters) Pause();
    for (int i = 1; i <= kWaiters; ++i) {
      RaiseHere(kA);
      while (received.load(std::memory_order_relaxed) < i) Pause();
      EXPECT_EQ(received.load(std::memory_order_relaxed), i);
    }
    for (Other& w : waiters) w.join();
  });
  EXPECT_EQ(received.load(), kWaiters);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(set->try_recv().error(), std::errc::resource_unavailable_try_again);
}

TEST_P(SignalWaitTest, AMovedSetKeepsItsSignals) {
  Result<SignalSet> opened = SignalSet::open({kA});
  ASSERT_TRUE(opened.ok());
  SignalSet set = std::move(*opened);
  EXPECT_FALSE(opened->is_open());
  EXPECT_EQ(opened->recv().error(), std::errc::bad_file_descriptor);
  EXPECT_EQ(opened->try_recv().error(), std::errc::bad_file_descriptor);
  EXPECT_EQ(SignalSet::open({kA}).error(), std::errc::device_or_resource_busy);
  Run([&] {
    RaiseHere(kA);
    Result<int> got = set.recv();
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, kA);
  });
  set = SignalSet();  // closes
  EXPECT_TRUE(SignalSet::open({kA}).ok());
}

// signals::wait sees only arrivals after it opened its set, so the raiser repeats until it
// returns (before that, the tests' dispositions ignore the signal).
TEST_P(SignalWaitTest, OneShotWait) {
  Run([&] {
    std::atomic<bool> done{false};
    Other raiser = Concurrently([&] {
      while (!done.load(std::memory_order_relaxed)) {
        RaiseHere(kB);
        Pause();
      }
    });
    Result<int> got = signals::wait({kA, kB});
    done.store(true, std::memory_order_relaxed);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, kB);
  });
  // Its set is closed again.
  EXPECT_TRUE(SignalSet::open({kA, kB}).ok());
  EXPECT_EQ(signals::wait({kA}, In(5ms)).error(), std::errc::timed_out);
}

TEST(SignalSetTest, OwningATakenSignalIsBusyUntilItsSetCloses) {
  Dispositions dispositions;
  Result<SignalSet> first = SignalSet::open({kA});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(SignalSet::open({kA}).error(), std::errc::device_or_resource_busy);
  // A failed open owns nothing: kB is still free.
  EXPECT_EQ(SignalSet::open({kB, kA}).error(), std::errc::device_or_resource_busy);
  Result<SignalSet> second = SignalSet::open({kB});
  ASSERT_TRUE(second.ok());
  first->close();
  first->close();  // idempotent
  EXPECT_FALSE(first->is_open());
  Result<SignalSet> again = SignalSet::open({kA});
  EXPECT_TRUE(again.ok());
  EXPECT_EQ(SignalSet::open({kA, kB}).error(), std::errc::device_or_resource_busy);
}

TEST(SignalSetTest, ShutdownCancelsAWaitingRecv) {
  Dispositions dispositions;
  Result<SignalSet> set = SignalSet::open({kA});
  ASSERT_TRUE(set.ok());
  Result<int> got = std::errc::io_error;
  {
    Runtime rt(RuntimeOptions{.workers = 1});
    rt.spawn([&] { got = set->recv(); }).detach();
  }  // parked or not yet started, the recv ends with operation_canceled
  EXPECT_EQ(got.error(), std::errc::operation_canceled);
  // The set still works.
  RaiseHere(kA);
  Result<int> again = set->recv();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, kA);
}

#ifndef _WIN32

TEST(SignalSetTest, SignalsThatCannotBeOwned) {
  Dispositions dispositions;
  EXPECT_EQ(SignalSet::open({}).error(), std::errc::invalid_argument);
  for (int signo : {0, -1, NSIG, NSIG + 1, SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    EXPECT_EQ(SignalSet::open({signo}).error(), std::errc::invalid_argument) << signo;
  }
  if (32 < SIGRTMIN) {
    EXPECT_EQ(SignalSet::open({32}).error(), std::errc::invalid_argument);
  }
  // One bad signal fails the whole open, which then owns none of them.
  EXPECT_EQ(SignalSet::open({kA, SIGKILL}).error(), std::errc::invalid_argument);
  EXPECT_TRUE(SignalSet::open({kA}).ok());
  // Real-time signals may be owned.
  EXPECT_TRUE(SignalSet::open({SIGRTMIN, SIGRTMAX}).ok());
}

#if defined(__SANITIZE_THREAD__)
constexpr bool kUnderTsan = true;
#else
constexpr bool kUnderTsan = false;
#endif

// Whichever thread the kernel gives the signal to, the set gets it: a worker, a blocking
// thread, a thread the program made, the process as a whole.
TEST(SignalSetTest, SignalsToEveryKindOfThreadReachTheSet) {
  Dispositions dispositions;
  Result<SignalSet> set = SignalSet::open({kA});
  ASSERT_TRUE(set.ok());
  Runtime rt(RuntimeOptions{.workers = 2});
  // SendAndReceive: pthread_kill(thread), then recv on this plain thread. Under TSan the kill
  // is repeated until the set has it: TSan's runtime intercepts every signal and now and then
  // never passes one sent to a sleeping plain thread on to the program's handler (in some
  // runs: the kernel has delivered it, but the handler never runs). Repeats coalesce, so
  // this still checks that the thread's signal reaches the set.
  auto send_and_receive = [&](pthread_t thread) {
    Result<int> got = std::errc::timed_out;
    do {
      ASSERT_EQ(::pthread_kill(thread, kA), 0);
      got = set->recv(kUnderTsan ? In(100ms) : WaitOptions{});
    } while (kUnderTsan && got.error() == std::errc::timed_out);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, kA);
  };

  // A worker, while it runs a fiber.
  std::atomic<bool> release{false};
  std::atomic<bool> recorded{false};
  pthread_t target{};
  JoinHandle<void> on_worker = rt.spawn([&] {
    target = ::pthread_self();
    recorded.store(true, std::memory_order_release);
    while (!release.load(std::memory_order_acquire)) (void)this_fiber::sleep_for(1ms);
  });
  while (!recorded.load(std::memory_order_acquire)) std::this_thread::sleep_for(1ms);
  send_and_receive(target);
  release.store(true, std::memory_order_release);
  (void)on_worker.join();

  // A blocking thread, inside call_blocking.
  release.store(false);
  recorded.store(false);
  JoinHandle<void> blocking = rt.spawn([&] {
    call_blocking([&] {
      target = ::pthread_self();
      recorded.store(true, std::memory_order_release);
      while (!release.load(std::memory_order_acquire)) std::this_thread::sleep_for(1ms);
    });
  });
  while (!recorded.load(std::memory_order_acquire)) std::this_thread::sleep_for(1ms);
  send_and_receive(target);
  release.store(true, std::memory_order_release);
  (void)blocking.join();

  // A thread weft knows nothing of, once it runs.
  release.store(false);
  recorded.store(false);
  std::thread plain([&] {
    recorded.store(true, std::memory_order_release);
    while (!release.load(std::memory_order_acquire)) std::this_thread::sleep_for(1ms);
  });
  while (!recorded.load(std::memory_order_acquire)) std::this_thread::sleep_for(1ms);
  send_and_receive(plain.native_handle());
  release.store(true, std::memory_order_release);
  plain.join();

  // The process (the kernel picks the thread), received by a fiber this time.
  ASSERT_EQ(::kill(::getpid(), kA), 0);
  Result<int> got = rt.block_on([&] { return set->recv(); });
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, kA);
}

int g_previous_handler_calls = 0;  // only this thread raises the signal it counts
void CountingHandler(int) { ++g_previous_handler_calls; }

TEST(SignalSetTest, CloseRestoresThePreviousDisposition) {
  Dispositions dispositions;  // kA and kB ignored
  struct sigaction counting {};
  counting.sa_handler = &CountingHandler;
  sigemptyset(&counting.sa_mask);
  ASSERT_EQ(::sigaction(kB, &counting, nullptr), 0);

  Result<SignalSet> set = SignalSet::open({kA, kB});
  ASSERT_TRUE(set.ok());
  RaiseHere(kB);
  EXPECT_EQ(g_previous_handler_calls, 0);
  Result<int> got = set->recv();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, kB);
  set->close();

  struct sigaction now {};
  ASSERT_EQ(::sigaction(kA, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  RaiseHere(kA);  // ignored again: the test goes on
  ASSERT_EQ(::sigaction(kB, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, &CountingHandler);
  RaiseHere(kB);
  EXPECT_EQ(g_previous_handler_calls, 1);
}

// weft does not ignore SIGPIPE; a set may own it, and then a write to a broken pipe queues it.
TEST(SignalSetTest, SigpipeCanBeOwned) {
  Dispositions dispositions;
  ::signal(SIGPIPE, SIG_DFL);  // as a program starts: SIGPIPE would end it
  Result<SignalSet> set = SignalSet::open({SIGPIPE});
  ASSERT_TRUE(set.ok());
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  char byte = 0;
  EXPECT_EQ(::write(fds[1], &byte, 1), -1);
  EXPECT_EQ(errno, EPIPE);
  ::close(fds[1]);
  Result<int> got = set->recv();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, SIGPIPE);
}

using testing::OpenFds;

TEST(SignalSetTest, OpenAndCloseLeaveNothingOpen) {
  Dispositions dispositions;
  {
    // What is made once per thread (its reactor, by the first wait), made before counting.
    Result<SignalSet> warm_up = SignalSet::open({kA});
    ASSERT_TRUE(warm_up.ok());
    EXPECT_EQ(warm_up->recv(In(0ms)).error(), std::errc::timed_out);
  }
  const int before = OpenFds();
  for (int i = 0; i < 50; ++i) {
    Result<SignalSet> set = SignalSet::open({kA, kB});
    ASSERT_TRUE(set.ok());
    RaiseHere(kA);
    EXPECT_TRUE(set->recv().ok());  // queued: no wait
    if (i % 2 == 0) {  // half of the sets wait too: their pipe is closed through the reactor
      EXPECT_EQ(set->recv(In(0ms)).error(), std::errc::timed_out);
    }
  }
  {
    Result<SignalSet> holder = SignalSet::open({kA});
    ASSERT_TRUE(holder.ok());
    for (int i = 0; i < 10; ++i) {  // a busy open keeps nothing either
      EXPECT_EQ(SignalSet::open({kB, kA}).error(), std::errc::device_or_resource_busy);
    }
  }
  EXPECT_EQ(OpenFds(), before);
}

#else  // _WIN32

TEST(SignalSetTest, ConsoleEventsStandForSignals) {
  EXPECT_EQ(SignalSet::open({}).error(), std::errc::invalid_argument);
  for (int signo : {0, -1, SIGABRT, SIGSEGV, SIGFPE, SIGILL}) {
    EXPECT_EQ(SignalSet::open({signo}).error(), std::errc::invalid_argument) << signo;
  }
  EXPECT_FALSE(api_internal::DeliverConsoleEvent(CTRL_C_EVENT));  // no set: the next handler
  Result<SignalSet> interrupt = SignalSet::open({SIGINT});
  ASSERT_TRUE(interrupt.ok());
  EXPECT_TRUE(api_internal::DeliverConsoleEvent(CTRL_BREAK_EVENT));
  EXPECT_FALSE(api_internal::DeliverConsoleEvent(CTRL_CLOSE_EVENT));  // nobody owns SIGTERM
  EXPECT_FALSE(api_internal::DeliverConsoleEvent(12345));
  Result<int> got = interrupt->recv();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, SIGINT);

  Result<SignalSet> terminate = SignalSet::open({SIGTERM});
  ASSERT_TRUE(terminate.ok());
  for (unsigned long event : {CTRL_CLOSE_EVENT, CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT}) {
    EXPECT_TRUE(api_internal::DeliverConsoleEvent(event));
    got = terminate->recv();
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, SIGTERM);
  }
  interrupt->close();
  EXPECT_FALSE(api_internal::DeliverConsoleEvent(CTRL_C_EVENT));
}

#endif  // _WIN32

}  // namespace
}  // namespace weft
