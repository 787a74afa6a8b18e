// api/recv_buffer_test.cc: io::recv_buffer and TcpStream::recv_buffer, on fibers and on plain
// threads: bytes arrive whole and in order, end of stream, deadlines, cancellation and a close
// from elsewhere; on io_uring, receives that wait hold no buffer (more waiters than the ring has
// buffers, none falls back), a ring whose buffers are all lent falls back to the call's own
// buffers without losing a byte, buffers handed back on other threads return to the ring, and a
// buffer outlives its runtime; the same from stackless tasks (TcpStream::async_recv_buffer).
// Under WEFT_REACTOR=epoll the same calls take the readiness way.

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <coroutine>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/io.h"
#include "weft/api/net.h"
#include "weft/api/testing/dual_mode.h"
#include "weft/base/clock.h"
#include "weft/base/stress_scale.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/task.h"
#include "weft/scheduler/testing/eager.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/coordination.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::Mode;

bool Uring() {
  const char* e = std::getenv("WEFT_REACTOR");
  return e == nullptr || std::string(e) != "epoll";
}

using Pair = testing::SocketPair;

// SendFromTask: a few bytes into a socket whose buffer has room, from a task. A task must not
// call weft's blocking I/O (io::send_all): were its first try refused (an EAGAIN, which the
// faults configuration injects), it would park the task's worker, and weft aborts instead.
bool SendFromTask(int fd, std::string_view bytes) {
  for (;;) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    return n == static_cast<ssize_t>(bytes.size());
  }
}

// KeepBuffers: for each pair from `from` on, sends prefix + its index and receives it with
// recv_buffer into *kept, which keeps the buffer: past the ring's 1,024 buffers, receives fall
// back.
void KeepBuffers(std::vector<Pair>& pairs, std::size_t from, const char* prefix,
                 std::vector<io::RecvBuffer>* kept) {
  for (std::size_t i = from; i < pairs.size(); ++i) {
    const std::string m = prefix + std::to_string(i);
    ASSERT_TRUE(io::send_all(pairs[i].b, m.data(), m.size()).ok());
    Result<io::RecvBuffer> b = io::recv_buffer(pairs[i].a);
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(b->view(), m);
    kept->push_back(std::move(*b));
  }
}

class RecvBufferTest : public testing::DualModeTest {
 protected:
  RecvBufferTest() : DualModeTest(2) {}
};

// 256 KiB in uneven writes arrive whole and in order, in buffers of at most 4 KiB.
TEST_P(RecvBufferTest, BytesArriveWholeAndInOrder) {
  Run([&] {
    Pair p;
    ASSERT_GE(p.a, 0);
    const std::size_t total = 256 << 10;
    std::string sent(total, '\0');
    for (std::size_t i = 0; i < total; ++i) sent[i] = static_cast<char>(i * 131 + i / 7);
    Other writer = Concurrently([&] {
      std::size_t at = 0;
      for (std::size_t step = 1; at < total; step = step * 3 % 9973 + 1) {
        const std::size_t n = std::min(step, total - at);
        ASSERT_TRUE(io::send_all(p.b, sent.data() + at, n).ok());
        at += n;
      }
      ASSERT_TRUE(io::close(p.b).ok());
      p.b = -1;
    });
    std::string got;
    for (;;) {
      Result<io::RecvBuffer> r = io::recv_buffer(p.a);
      ASSERT_TRUE(r.ok()) << std::make_error_code(r.error()).message();
      if (r->empty()) break;  // end of stream
      ASSERT_LE(r->size(), 4096u);
      got.append(r->view());
    }
    writer.join();
    EXPECT_EQ(got.size(), sent.size());
    EXPECT_TRUE(got == sent);
  });
}

TEST_P(RecvBufferTest, TcpStreamRecvBufferEchoes) {
  Run([&] {
    Result<net::TcpListener> l = net::TcpListener::bind(*net::SocketAddress::parse("127.0.0.1:0"));
    ASSERT_TRUE(l.ok());
    const net::SocketAddress at = *l->local_address();
    Other server = Concurrently([&] {
      Result<net::TcpStream> s = l->accept();
      ASSERT_TRUE(s.ok());
      for (;;) {
        Result<io::RecvBuffer> b = s->recv_buffer();
        ASSERT_TRUE(b.ok());
        if (b->empty()) return;
        ASSERT_TRUE(s->write_all(b->data(), b->size()).ok());
      }
    });
    Result<net::TcpStream> c = net::TcpStream::connect(at);
    ASSERT_TRUE(c.ok());
    for (int i = 0; i < 100; ++i) {
      const std::string msg = "message " + std::to_string(i);
      ASSERT_TRUE(c->write_all(msg.data(), msg.size()).ok());
      std::string back(msg.size(), '\0');
      ASSERT_TRUE(c->read_exact(back.data(), back.size()).ok());
      EXPECT_EQ(back, msg);
    }
    ASSERT_TRUE(c->shutdown_write().ok());
    server.join();
  });
}

TEST_P(RecvBufferTest, DeadlineCancelAndCloseEndAWaitingReceive) {
  Run([&] {
    Pair p;
    Result<io::RecvBuffer> r = io::recv_buffer(p.a, {.deadline = SyncClock::now() + 20ms});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), std::errc::timed_out);

    CancellationSource source;
    Other canceller = Concurrently([&] {
      std::this_thread::sleep_for(10ms);
      source.cancel();
    });
    CancellationToken token = source.token();
    r = io::recv_buffer(p.a, {.cancel = &token});
    canceller.join();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), std::errc::operation_canceled);

    const int fd = p.a;
    Other closer = Concurrently([&] {
      std::this_thread::sleep_for(10ms);
      ASSERT_TRUE(io::close(fd).ok());
    });
    r = io::recv_buffer(fd);
    closer.join();
    p.a = -1;
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.error() == std::errc::operation_canceled ||
                r.error() == std::errc::bad_file_descriptor);
  });
}

TEST_P(RecvBufferTest, BadFdIsAnError) {
  Run([&] {
    Result<io::RecvBuffer> r = io::recv_buffer(-1);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), std::errc::bad_file_descriptor);
  });
}

INSTANTIATE_TEST_SUITE_P(FibersAndThreads, RecvBufferTest,
                         ::testing::Values(Mode::kFibers, Mode::kThreads), testing::ModeName);

// More receives wait than the ring has buffers: none holds one while it waits, so when data
// comes a batch at a time and each buffer is handed back at once, none falls back. Then with
// every buffer kept, later receives fall back to buffers of their own and lose no byte.
TEST(RecvBufferRingTest, WaitersHoldNoBufferAndAnEmptyRingFallsBack) {
  const int n = 1100;  // > Reactor::kPooledBuffers (1,024)
  if (testing::RaiseFdLimit() < 2 * n + 256) GTEST_SKIP() << "needs " << 2 * n + 256 << " fds";
  Runtime rt({.workers = 1});
  rt.block_on([&] {
    std::vector<Pair> pairs(n);
    for (const Pair& p : pairs) ASSERT_GE(p.a, 0);
    const io::RecvBufferStats before = io::recv_buffer_stats();
    // Round 1: every receive waits first; data comes 100 connections at a time.
    std::atomic<int> done{0};
    std::vector<JoinHandle<void>> fibers;
    for (int i = 0; i < n; ++i) {
      fibers.push_back(rt.spawn([&, i] {
        Result<io::RecvBuffer> b = io::recv_buffer(pairs[i].a);
        ASSERT_TRUE(b.ok());
        ASSERT_EQ(b->view(), std::to_string(i));
        done.fetch_add(1);
      }));
    }
    for (int k = 0; k < 50; ++k) this_fiber::yield();  // let them all park
    for (int i = 0; i < n; ++i) {
      const std::string m = std::to_string(i);
      ASSERT_TRUE(io::send_all(pairs[i].b, m.data(), m.size()).ok());
      if (i % 100 == 99) {
        while (done.load() <= i) this_fiber::yield();
      }
    }
    for (auto& f : fibers) ASSERT_TRUE(f.join().ok());
    const io::RecvBufferStats mid = io::recv_buffer_stats();
    if (Uring()) {
      EXPECT_EQ(mid.pooled - before.pooled, static_cast<std::uint64_t>(n));
      EXPECT_EQ(mid.fallback_no_buffers, before.fallback_no_buffers);
    } else {
      EXPECT_EQ(mid.fallback - before.fallback, static_cast<std::uint64_t>(n));
    }
    // Round 2: every buffer kept: past 1,024 the ring is empty and receives fall back.
    std::vector<io::RecvBuffer> kept;
    KeepBuffers(pairs, 0, "x", &kept);
    if (::testing::Test::HasFatalFailure()) return;
    const io::RecvBufferStats after = io::recv_buffer_stats();
    if (Uring()) EXPECT_GE(after.fallback_no_buffers - mid.fallback_no_buffers, 1u);
    kept.clear();
  });
}

// Buffers handed back on other threads go back to the ring: many more receives than buffers,
// each buffer released on a plain thread, and none falls back.
TEST(RecvBufferRingTest, BuffersReleasedOnOtherThreadsReturnToTheRing) {
  const int rounds = 3000 * testing::StressScale();
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    Pair p;
    const io::RecvBufferStats before = io::recv_buffer_stats();
    std::vector<io::RecvBuffer> batch;
    for (int i = 0; i < rounds; ++i) {
      ASSERT_TRUE(io::send_all(p.b, "z", 1).ok());
      Result<io::RecvBuffer> b = io::recv_buffer(p.a);
      ASSERT_TRUE(b.ok());
      ASSERT_EQ(b->view(), "z");
      batch.push_back(std::move(*b));
      if (batch.size() == 100) {
        std::thread([v = std::move(batch)]() mutable { v.clear(); }).join();
        batch.clear();
      }
    }
    const io::RecvBufferStats after = io::recv_buffer_stats();
    EXPECT_EQ(after.fallback_no_buffers, before.fallback_no_buffers);
  });
}

// A buffer may outlive the runtime (and the reactor) that lent it.
TEST(RecvBufferRingTest, ABufferOutlivesItsRuntime) {
  io::RecvBuffer kept;
  {
    Runtime rt({.workers = 1});
    rt.block_on([&] {
      Pair p;
      ASSERT_TRUE(io::send_all(p.b, "kept", 4).ok());
      Result<io::RecvBuffer> b = io::recv_buffer(p.a);
      ASSERT_TRUE(b.ok());
      kept = std::move(*b);
    });
  }
  EXPECT_EQ(kept.view(), "kept");
  kept.reset();
  EXPECT_TRUE(kept.empty());
}

// ---- From stackless tasks: TcpStream::async_recv_buffer ----

class TaskRecvBufferTest : public ::testing::TestWithParam<unsigned> {};
using testing::Eager;  // a coroutine that is not a task (a fiber runs it, below)
INSTANTIATE_TEST_SUITE_P(Workers, TaskRecvBufferTest, ::testing::Values(1u, 2u, 4u));

// Task servers echo through async_recv_buffer to fiber clients, every byte checked; the end of
// a stream is an empty buffer.
TEST_P(TaskRecvBufferTest, TasksEchoThroughLentBuffers) {
  Runtime rt({.workers = GetParam()});
  Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_loopback(0));
  ASSERT_TRUE(l.ok());
  const net::SocketAddress at = *l->local_address();
  constexpr int kConns = 8;
  const int trips = 100 * testing::StressScale();
  std::atomic<int> ended{0};
  auto server = rt.spawn_task([&]() -> Task<> {
    std::vector<JoinHandle<void>> echoers;
    for (int c = 0; c < kConns; ++c) {
      Result<net::TcpStream> s = co_await l->async_accept();
      EXPECT_TRUE(s.ok());
      if (!s.ok()) co_return;
      (void)s->set_nodelay(true);
      echoers.push_back(rt.spawn_task([&, st = std::move(*s)]() mutable -> Task<> {
        for (;;) {
          Result<io::RecvBuffer> b = co_await st.async_recv_buffer();
          EXPECT_TRUE(b.ok());
          if (!b.ok()) co_return;
          if (b->empty()) break;
          EXPECT_LE(b->size(), 4096u);
          if (!(co_await st.async_write_all(b->data(), b->size())).ok()) co_return;
        }
        ended.fetch_add(1);
      }));
    }
    for (auto& h : echoers) EXPECT_TRUE((co_await h).ok());
  });
  std::vector<JoinHandle<void>> clients;
  for (int c = 0; c < kConns; ++c) {
    clients.push_back(rt.spawn([&, c] {
      Result<net::TcpStream> st = net::TcpStream::connect(at);
      ASSERT_TRUE(st.ok());
      (void)st->set_nodelay(true);
      std::string out(100 + 700 * c, '\0'), in(out.size(), '\0');
      for (int i = 0; i < trips; ++i) {
        for (std::size_t k = 0; k < out.size(); ++k) out[k] = static_cast<char>(c * 31 + i + k);
        ASSERT_TRUE(st->write_all(out.data(), out.size()).ok());
        ASSERT_TRUE(st->read_exact(in.data(), in.size()).ok());
        ASSERT_TRUE(in == out);
      }
      ASSERT_TRUE(st->shutdown_write().ok());
    }));
  }
  for (auto& h : clients) ASSERT_TRUE(h.join().ok());
  ASSERT_TRUE(server.join().ok());
  EXPECT_EQ(ended.load(), kConns);
}

// More tasks wait than the ring has buffers, and none falls back: a task parked in
// async_recv_buffer holds no buffer.
TEST(TaskRecvBufferRingTest, WaitingTasksHoldNoBuffer) {
  const int n = 1100;  // > Reactor::kPooledBuffers (1,024)
  if (testing::RaiseFdLimit() < 2 * n + 256) GTEST_SKIP() << "needs " << 2 * n + 256 << " fds";
  Runtime rt({.workers = 1});
  std::vector<Pair> pairs(n);
  for (const Pair& p : pairs) ASSERT_GE(p.a, 0);
  const io::RecvBufferStats before = io::recv_buffer_stats();
  std::atomic<int> done{0};
  std::vector<JoinHandle<void>> tasks;
  for (int i = 0; i < n; ++i) {
    tasks.push_back(rt.spawn_task([&, i]() -> Task<> {
      net::TcpStream st = net::TcpStream(pairs[i].a);
      pairs[i].a = -1;
      Result<io::RecvBuffer> b = co_await st.async_recv_buffer();
      EXPECT_TRUE(b.ok());
      if (b.ok()) EXPECT_EQ(b->view(), std::to_string(i));
      done.fetch_add(1);
    }));
  }
  rt.block_on([&] {
    for (int k = 0; k < 50; ++k) this_fiber::yield();  // let them all park
    for (int i = 0; i < n; ++i) {
      const std::string m = std::to_string(i);
      ASSERT_TRUE(io::send_all(pairs[i].b, m.data(), m.size()).ok());
      if (i % 100 == 99) {
        while (done.load() <= i) this_fiber::yield();
      }
    }
  });
  for (auto& t : tasks) ASSERT_TRUE(t.join().ok());
  const io::RecvBufferStats after = io::recv_buffer_stats();
  if (Uring()) {
    EXPECT_EQ(after.pooled - before.pooled, static_cast<std::uint64_t>(n));
    EXPECT_EQ(after.fallback_no_buffers, before.fallback_no_buffers);
  } else {
    EXPECT_EQ(after.fallback - before.fallback, static_cast<std::uint64_t>(n));
  }
}

// A task parked in async_recv_buffer when the ring has no buffer left for its bytes (all lent
// and kept) takes them into a buffer of its own: the receive's next attempt, made while the task
// is still suspended, loses no byte.
TEST(TaskRecvBufferRingTest, AWaitingTaskFallsBackWhenEveryBufferIsKept) {
  const int n = 1030;  // > Reactor::kPooledBuffers (1,024)
  if (testing::RaiseFdLimit() < 2 * n + 256) GTEST_SKIP() << "needs " << 2 * n + 256 << " fds";
  Runtime rt({.workers = 1});
  std::vector<Pair> pairs(n);
  for (const Pair& p : pairs) ASSERT_GE(p.a, 0);
  const io::RecvBufferStats before = io::recv_buffer_stats();
  rt.block_on([&] {
    // The waiter parks first, its receive submitted while the ring still has buffers.
    Event parked;
    auto waiter = rt.spawn_task([&]() -> Task<std::string> {
      net::TcpStream st = net::TcpStream(pairs[0].a);
      pairs[0].a = -1;
      parked.set();
      Result<io::RecvBuffer> b = co_await st.async_recv_buffer();
      EXPECT_TRUE(b.ok());
      co_return b.ok() ? std::string(b->view()) : std::string();
    });
    ASSERT_TRUE(parked.wait());
    for (int k = 0; k < 20; ++k) this_fiber::yield();  // let it park in the receive
    // Then every buffer is taken and kept.
    std::vector<io::RecvBuffer> kept;
    KeepBuffers(pairs, 1, "k", &kept);
    if (::testing::Test::HasFatalFailure()) return;
    const io::RecvBufferStats mid = io::recv_buffer_stats();
    const std::string m = "the waiter's bytes";
    ASSERT_TRUE(io::send_all(pairs[0].b, m.data(), m.size()).ok());
    Result<std::string> got = waiter.join();
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, m);
    const io::RecvBufferStats after = io::recv_buffer_stats();
    if (Uring()) {
      EXPECT_GE(mid.fallback_no_buffers - before.fallback_no_buffers, 1u);  // the kept ones'
      EXPECT_EQ(after.fallback_no_buffers - mid.fallback_no_buffers, 1u);   // the waiter's
    }
    kept.clear();
  });
}

// TcpStream::async_recv_buffer's operation: kept as a Task (awaited later, or spawned) it
// receives as awaited at once; a second await throws, as does awaiting one moved from; one never
// awaited receives nothing; from a coroutine that is not a task it blocks the fiber that runs
// it.
TEST_P(TaskRecvBufferTest, TheOperationAsATaskAwaitedTwiceNeverAwaitedAndOnAFiber) {
  Runtime rt({.workers = GetParam()});
  Pair p;
  ASSERT_GE(p.a, 0);
  net::TcpStream st = net::TcpStream(p.a);
  p.a = -1;
  auto h = rt.spawn_task([&]() -> Task<> {
    { net::RecvBufferOperation unused = st.async_recv_buffer(); }  // receives nothing
    EXPECT_TRUE(SendFromTask(p.b, "ab"));
    Task<Result<io::RecvBuffer>> later = st.async_recv_buffer();
    Result<io::RecvBuffer> b = co_await std::move(later);
    EXPECT_TRUE(b.ok());
    if (b.ok()) EXPECT_EQ(b->view(), "ab");
    net::RecvBufferOperation op = st.async_recv_buffer();
    EXPECT_TRUE(SendFromTask(p.b, "cd"));
    b = co_await op;
    EXPECT_TRUE(b.ok());
    if (b.ok()) EXPECT_EQ(b->view(), "cd");
    bool threw = false;
    try {
      (void)co_await op;
    } catch (const std::logic_error&) {
      threw = true;
    }
    EXPECT_TRUE(threw);
    // Moved before it is awaited: the new one receives, the moved-from one throws.
    net::RecvBufferOperation first = st.async_recv_buffer();
    net::RecvBufferOperation moved = std::move(first);
    EXPECT_TRUE(SendFromTask(p.b, "ij"));
    b = co_await moved;
    EXPECT_TRUE(b.ok());
    if (b.ok()) EXPECT_EQ(b->view(), "ij");
    threw = false;
    try {
      (void)co_await first;
    } catch (const std::logic_error&) {
      threw = true;
    }
    EXPECT_TRUE(threw);
  });
  ASSERT_TRUE(h.join().ok());
  auto spawned = rt.spawn_task(Task<Result<io::RecvBuffer>>(st.async_recv_buffer()));
  ASSERT_TRUE(io::send_all(p.b, "ef", 2).ok());
  Result<Result<io::RecvBuffer>> r = spawned.join();
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ((*r)->view(), "ef");
  // On a fiber, through a coroutine that is not a task: the fiber blocks in it.
  rt.block_on([&] {
    std::string got;
    auto eager = [&]() -> Eager {
      Result<io::RecvBuffer> b = co_await st.async_recv_buffer();
      if (b.ok()) got = std::string(b->view());
    };
    auto sender = rt.spawn([&] {
      for (int k = 0; k < 10; ++k) this_fiber::yield();
      ASSERT_TRUE(io::send_all(p.b, "gh", 2).ok());
    });
    eager();
    EXPECT_EQ(got, "gh");
    ASSERT_TRUE(sender.join().ok());
  });
}

// A task's waiting async_recv_buffer ends with its deadline, its token, or a close by another
// task; a bad fd is an error at once.
TEST_P(TaskRecvBufferTest, DeadlineCancelCloseAndBadFd) {
  Runtime rt({.workers = GetParam()});
  Pair p;
  ASSERT_GE(p.a, 0);
  net::TcpStream st = net::TcpStream(p.a);
  p.a = -1;
  auto h = rt.spawn_task([&]() -> Task<> {
    Result<io::RecvBuffer> r = co_await st.async_recv_buffer({.deadline = SyncClock::now() + 10ms});
    EXPECT_EQ(r.error(), std::errc::timed_out);
    CancellationSource source;
    CancellationToken token = source.token();
    source.cancel_after(5ms);
    r = co_await st.async_recv_buffer({.cancel = &token});
    EXPECT_EQ(r.error(), std::errc::operation_canceled);
    Event parked;
    auto closer = rt.spawn_task([&]() -> Task<> {
      EXPECT_TRUE(co_await parked.async_wait());
      co_await this_task::sleep_for(2ms);
      EXPECT_TRUE(st.close().ok());
    });
    parked.set();
    r = co_await st.async_recv_buffer();
    EXPECT_FALSE(r.ok());
    if (!r.ok()) {
      EXPECT_TRUE(r.error() == std::errc::operation_canceled ||
                  r.error() == std::errc::bad_file_descriptor);
    }
    EXPECT_TRUE((co_await closer).ok());
    net::TcpStream bad = net::TcpStream(-1);
    r = co_await bad.async_recv_buffer();
    EXPECT_EQ(r.error(), std::errc::bad_file_descriptor);
  });
  ASSERT_TRUE(h.join().ok());
}

}  // namespace
}  // namespace weft
