// TCP from stackless tasks (scheduler/task.h, the async_ calls of api/net.h): an echo between
// tasks and fibers with every byte checked on 1, 2 and 4 workers, deadlines and tokens, writes
// larger than the socket takes, a stream closed by another task while one reads or writes it
// (and its fd number reused at once), a stream closed by its own task's destructor, and shutdown
// with tasks parked in accept and read.
// WEFT_STRESS_SCALE=N multiplies the round trips.

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/net.h"
#include "weft/api/testing/dual_mode.h"
#include "weft/base/stress_scale.h"
#include "weft/reactor/reactor.h"
#include "weft/scheduler/io.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/task.h"
#include "weft/scheduler/testing/eager.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/coordination.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using net::ReadOperation;
using net::SocketAddress;
using net::TcpListener;
using net::TcpStream;
using testing::StressScale;

// Connect: a connected loopback pair, made with the blocking calls: *client and the *served end
// its listener accepted.
void Connect(TcpStream* client, TcpStream* served) {
  auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0));
  ASSERT_TRUE(listener.ok());
  Result<TcpStream> c = TcpStream::connect(*listener->local_address());
  ASSERT_TRUE(c.ok());
  Result<TcpStream> s = listener->accept();
  ASSERT_TRUE(s.ok());
  *client = std::move(*c);
  *served = std::move(*s);
}

Task<> EchoTask(TcpStream st) {
  char buf[256];
  for (;;) {
    Result<std::size_t> n = co_await st.async_read(buf, sizeof buf);
    if (!n.ok() || *n == 0) co_return;
    if (!(co_await st.async_write_all(buf, *n)).ok()) co_return;
  }
}

class TaskIoTest : public ::testing::TestWithParam<unsigned> {};

// ReuseTheNumber: after a stream with fd `number` was closed, connections through listener until
// one takes that number (the close completes on the reactor); then bytes both ways on it: each
// end gets exactly the other's, so an operation of the closed stream still parked neither took
// the new connection's bytes nor sent bytes into it. True if so, or if the number went elsewhere.
Task<bool> ReuseTheNumber(TcpListener& listener, SocketAddress addr, int number) {
  for (int tries = 0; tries < 50; ++tries) {
    Result<TcpStream> again = co_await TcpStream::async_connect(addr);
    if (!again.ok()) co_return false;
    Result<TcpStream> other = co_await listener.async_accept();
    if (!other.ok()) co_return false;
    if (other->fd() == number) {
      char buf[4];
      if (!(co_await again->async_write_all("new", 3)).ok() ||
          !(co_await other->async_read_exact(buf, 3)).ok() || std::memcmp(buf, "new", 3) != 0) {
        co_return false;
      }
      if (!(co_await other->async_write_all("back", 4)).ok() ||
          !(co_await again->async_read_exact(buf, 4)).ok() || std::memcmp(buf, "back", 4) != 0) {
        co_return false;
      }
      co_return ::recv(again->fd(), buf, 1, MSG_DONTWAIT) < 0;  // and nothing more
    }
    co_await this_task::sleep_for(1ms);
  }
  co_return true;  // the number went elsewhere: nothing to check
}
INSTANTIATE_TEST_SUITE_P(Workers, TaskIoTest, ::testing::Values(1u, 2u, 4u));

// Task servers, clients half tasks and half fibers: every byte comes back to its sender.
TEST_P(TaskIoTest, EchoBetweenTasksAndFibers) {
  Runtime rt({.workers = GetParam()});
  auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0));
  ASSERT_TRUE(listener.ok());
  const SocketAddress addr = *listener->local_address();
  constexpr int kConns = 16;
  const int trips = 100 * StressScale();
  auto server = rt.spawn_task([&]() -> Task<> {
    std::vector<JoinHandle<void>> conns;
    for (int c = 0; c < kConns; ++c) {
      Result<TcpStream> conn = co_await listener->async_accept();
      EXPECT_TRUE(conn.ok());
      if (!conn.ok()) co_return;
      conns.push_back(rt.spawn_task(EchoTask(std::move(*conn))));
    }
    for (auto& h : conns) EXPECT_TRUE((co_await h).ok());
  });
  std::atomic<int> good{0};
  std::vector<JoinHandle<void>> clients;
  for (int c = 0; c < kConns; ++c) {
    if (c % 2 == 0) {
      clients.push_back(rt.spawn_task([&, c]() -> Task<> {
        Result<TcpStream> st = co_await TcpStream::async_connect(addr);
        EXPECT_TRUE(st.ok());
        if (!st.ok()) co_return;
        char out[100], in[100];
        for (int i = 0; i < trips; ++i) {
          std::memset(out, c * 31 + i, sizeof out);
          EXPECT_TRUE((co_await st->async_write_all(out, sizeof out)).ok());
          EXPECT_TRUE((co_await st->async_read_exact(in, sizeof in)).ok());
          if (std::memcmp(in, out, sizeof in) != 0) co_return;
        }
        good.fetch_add(1);
      }));
    } else {
      clients.push_back(rt.spawn([&, c] {
        Result<TcpStream> st = TcpStream::connect(addr);
        ASSERT_TRUE(st.ok());
        char out[100], in[100];
        for (int i = 0; i < trips; ++i) {
          std::memset(out, c * 31 + i, sizeof out);
          ASSERT_TRUE(st->write_all(out, sizeof out).ok());
          ASSERT_TRUE(st->read_exact(in, sizeof in).ok());
          if (std::memcmp(in, out, sizeof in) != 0) return;
        }
        good.fetch_add(1);
      }));
    }
  }
  for (auto& h : clients) ASSERT_TRUE(h.join().ok());
  ASSERT_TRUE(server.join().ok());
  EXPECT_EQ(good.load(), kConns);
}

TEST(TaskIoTest, DeadlinesTokensAndTheEndOfAStream) {
  Runtime rt({.workers = 2});
  auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0));
  ASSERT_TRUE(listener.ok());
  const SocketAddress addr = *listener->local_address();
  auto h = rt.spawn_task([&]() -> Task<> {
    // An accept with nobody connecting: the deadline, then a token.
    Result<TcpStream> none = co_await listener->async_accept({.deadline = SyncClock::now() + 10ms});
    EXPECT_EQ(none.error(), std::errc::timed_out);
    CancellationSource source;
    CancellationToken token = source.token();
    source.cancel_after(5ms);
    none = co_await listener->async_accept({.cancel = &token});
    EXPECT_EQ(none.error(), std::errc::operation_canceled);
    // A read with nothing sent: the deadline.
    Result<TcpStream> client = co_await TcpStream::async_connect(addr);
    EXPECT_TRUE(client.ok());
    Result<TcpStream> served = co_await listener->async_accept();
    EXPECT_TRUE(served.ok());
    char buf[8];
    Result<std::size_t> n =
        co_await served->async_read(buf, sizeof buf, {.deadline = SyncClock::now() + 10ms});
    EXPECT_EQ(n.error(), std::errc::timed_out);
    // The end of the stream: 0, and read_exact's error for a short stream.
    EXPECT_TRUE((co_await client->async_write_all("abc", 3)).ok());
    EXPECT_TRUE(client->close().ok());  // from a task: completes on the worker's reactor
    EXPECT_EQ(co_await served->async_read_exact(buf, sizeof buf), std::errc::connection_aborted);
    n = co_await served->async_read(buf, sizeof buf);
    EXPECT_TRUE(n.ok() && *n == 0);
  });
  ASSERT_TRUE(h.join().ok());
}

using testing::Backlog;

// As a fiber's accept: connections waiting in the backlog are accepted without suspending the
// task (no park: stats_json's "parked" stays), non-blocking and close-on-exec.
TEST(TaskIoTest, ConnectionsWaitingInTheBacklogAreAcceptedWithoutParking) {
  constexpr int kWaiting = 4;
  const testing::NoSoftFaults no_faults;
  Backlog b(kWaiting);
  ASSERT_EQ(b.waiting, kWaiting);
  Result<TcpListener>& listener = b.listener;
  Runtime rt({.workers = 1});
  auto h = rt.spawn_task([&]() -> Task<int> {
    const std::uint64_t before = testing::ParkedSoFar(rt);
    int good = 0;
    for (int i = 0; i < kWaiting; ++i) {
      Result<TcpStream> s = co_await listener->async_accept();
      if (s.ok() && (::fcntl(s->fd(), F_GETFL) & O_NONBLOCK) != 0 &&
          (::fcntl(s->fd(), F_GETFD) & FD_CLOEXEC) != 0) {
        ++good;
      }
    }
    EXPECT_EQ(testing::ParkedSoFar(rt), before);
    co_return good;
  });
  Result<int> good = h.join();
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, kWaiting);
}

// A task that accepts connection after connection (each waiting: tried directly, then through
// the reactor once per budget of direct turns) lets a task that yields run between budgets, as
// a fiber's accept loop lets a yielding fiber run. And once the runtime's shutdown interrupted a
// task, an accept with connections waiting ends operation_canceled, as one that waits does.
TEST(TaskIoTest, AnAcceptLoopLetsAYieldingTaskRunAndTheShutdownEndsIt) {
  constexpr int kWaiting = 300;
  const testing::NoSoftFaults no_faults;
  Backlog b(kWaiting);
  ASSERT_EQ(b.waiting, kWaiting);
  Result<TcpListener>& listener = b.listener;
  std::atomic<int> accepted{0}, after_shutdown{-1};
  std::atomic<bool> started{false}, done{false};
  std::vector<int> seen;  // accepted, each time the yielding task ran (one worker: no race)
  {
    Runtime rt({.workers = 1});
    auto yielder = rt.spawn_task([&]() -> Task<> {
      started = true;
      while (!done.load()) {
        seen.push_back(accepted.load());
        co_await this_task::yield();
      }
      seen.push_back(accepted.load());
    });
    while (!started.load()) std::this_thread::yield();
    auto acceptor = rt.spawn_task([&]() -> Task<> {
      std::vector<TcpStream> keep;
      for (int i = 0; i < kWaiting - 100; ++i) {
        Result<TcpStream> s = co_await listener->async_accept({.deadline = SyncClock::now() + 1h});
        if (!s.ok()) break;
        keep.push_back(std::move(*s));
        accepted.fetch_add(1);
      }
      done = true;
    });
    ASSERT_TRUE(acceptor.join().ok());
    ASSERT_TRUE(yielder.join().ok());
    EXPECT_EQ(accepted.load(), kWaiting - 100);
    int max_gap = 0;
    for (std::size_t i = 1; i < seen.size(); ++i)
      max_gap = std::max(max_gap, seen[i] - seen[i - 1]);
    EXPECT_LE(max_gap, static_cast<int>(scheduler_internal::kDirectIoBudget) + 1) << seen.size();
    rt.spawn_task([&]() -> Task<> {
        (void)co_await this_task::sleep_for(1h);  // until the shutdown interrupts it
        int n = 0;
        for (;;) {
          Result<TcpStream> s = co_await listener->async_accept();
          if (!s.ok()) break;
          ++n;
        }
        after_shutdown = n;
      }).detach();
    testing::WaitUntilDumpShows(rt, "sleep", 1);
  }
  EXPECT_EQ(after_shutdown.load(), 0);
}

using testing::Eager;  // a coroutine that is not a task (a fiber runs it, below)

// ThrowsLogicError: whether awaiting op throws std::logic_error (an operation awaited before, or
// an operation or Task moved from).
template <typename Op>
Task<bool> ThrowsLogicError(Op& op) {
  try {
    (void)co_await std::move(op);
  } catch (const std::logic_error&) {
    co_return true;
  }
  co_return false;
}

// async_read's operation: kept as a Task (awaited later, or spawned) it reads as awaited at
// once; a second await throws, as does awaiting one moved from; one never awaited reads
// nothing; from a coroutine that is not a task it blocks the fiber that runs it.
TEST(TaskIoTest, TheReadOperationAsATaskAwaitedTwiceMovedNeverAwaitedAndOnAFiber) {
  Runtime rt({.workers = 2});
  TcpStream client, st;
  ASSERT_NO_FATAL_FAILURE(Connect(&client, &st));
  auto h = rt.spawn_task([&]() -> Task<> {
    char buf[8];
    { ReadOperation unused = st.async_read(buf, 2); }  // reads nothing
    EXPECT_TRUE((co_await client.async_write_all("ab", 2)).ok());
    Task<Result<std::size_t>> later = st.async_read(buf, 2);
    Result<std::size_t> n = co_await std::move(later);
    EXPECT_TRUE(n.ok() && *n == 2 && std::string(buf, 2) == "ab");
    ReadOperation op = st.async_read(buf, 2);
    EXPECT_TRUE((co_await client.async_write_all("cd", 2)).ok());
    n = co_await op;
    EXPECT_TRUE(n.ok() && *n == 2 && std::string(buf, 2) == "cd");
    EXPECT_TRUE(co_await ThrowsLogicError(op));
    ReadOperation first = st.async_read(buf, 2);
    ReadOperation moved = std::move(first);
    EXPECT_TRUE((co_await client.async_write_all("ef", 2)).ok());
    n = co_await moved;
    EXPECT_TRUE(n.ok() && *n == 2 && std::string(buf, 2) == "ef");
    EXPECT_TRUE(co_await ThrowsLogicError(first));
  });
  ASSERT_TRUE(h.join().ok());
  char buf[8];
  auto spawned = rt.spawn_task(Task<Result<std::size_t>>(st.async_read(buf, 2)));
  ASSERT_TRUE(client.write_all("gh", 2).ok());
  Result<Result<std::size_t>> r = spawned.join();
  ASSERT_TRUE(r.ok() && r->ok() && **r == 2);
  EXPECT_EQ(std::string(buf, 2), "gh");
  rt.block_on([&] {
    std::size_t got = 0;
    auto eager = [&]() -> Eager {
      Result<std::size_t> n = co_await st.async_read(buf, 2);
      if (n.ok()) got = *n;
    };
    auto sender = rt.spawn([&] {
      for (int k = 0; k < 10; ++k) this_fiber::yield();
      EXPECT_TRUE(client.write_all("ij", 2).ok());
    });
    eager();
    EXPECT_EQ(got, 2u);
    EXPECT_EQ(std::string(buf, 2), "ij");
    ASSERT_TRUE(sender.join().ok());
  });
}

// Bad input and absurd sizes: async_read and async_recv_buffer give what read and recv_buffer
// give (a null buffer, a length of 0 or of SIZE_MAX, a closed stream), and the stream serves
// on. A Task made from an operation when no memory is left throws std::bad_alloc.
TEST(TaskIoTest, BadInputAbsurdSizesAndNoMemoryAsTheBlockingForms) {
  Runtime rt({.workers = 2});
  TcpStream client, st;
  ASSERT_NO_FATAL_FAILURE(Connect(&client, &st));
  char buf[8];
  struct Case {
    void* buf;
    std::size_t len;
  };
  const Case cases[] = {{nullptr, 4}, {buf, 0}, {nullptr, 0}, {buf, SIZE_MAX}};
  for (const Case& c : cases) {
    ASSERT_TRUE(client.write_all("ab", 2).ok());
    // The blocking form's answer first (it takes the bytes when it succeeds: send them again).
    Result<std::size_t> blocking = st.read(c.buf, c.len);
    if (blocking.ok() && *blocking > 0) ASSERT_TRUE(client.write_all("ab", 2).ok());
    Result<std::size_t> from_task = rt.spawn_task([&]() -> Task<Result<std::size_t>> {
                                        co_return co_await st.async_read(c.buf, c.len);
                                      })
                                        .join()
                                        .value();
    EXPECT_EQ(from_task.ok(), blocking.ok()) << "len " << c.len;
    if (from_task.ok() && blocking.ok()) {
      EXPECT_EQ(*from_task, *blocking) << "len " << c.len;
    } else if (!from_task.ok() && !blocking.ok()) {
      EXPECT_EQ(from_task.error(), blocking.error()) << "len " << c.len;
    }
    // Whatever is left is read, so each case starts from an empty stream.
    while (io::recv(st.fd(), buf, sizeof buf, MSG_DONTWAIT).ok()) {
    }
  }
  // No memory for the Task's frame: the conversion throws, and the stream reads on.
  ASSERT_TRUE(client.write_all("cd", 2).ok());
  auto h = rt.spawn_task([&]() -> Task<> {
    scheduler_internal::g_fail_spawn_states.store(1);
    bool threw = false;
    try {
      Task<Result<std::size_t>> t = st.async_read(buf, 2);
      (void)t;
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    scheduler_internal::g_fail_spawn_states.store(0);
    EXPECT_TRUE(threw);
    Result<std::size_t> n = co_await st.async_read(buf, 2);
    EXPECT_TRUE(n.ok() && *n == 2 && std::string(buf, 2) == "cd");
  });
  ASSERT_TRUE(h.join().ok());
  // A closed stream: the same error from both forms.
  ASSERT_TRUE(st.close().ok());
  Result<std::size_t> blocking = st.read(buf, 2);
  Result<std::size_t> from_task = rt.spawn_task([&]() -> Task<Result<std::size_t>> {
                                      co_return co_await st.async_read(buf, 2);
                                    })
                                      .join()
                                      .value();
  ASSERT_FALSE(blocking.ok());
  ASSERT_FALSE(from_task.ok());
  EXPECT_EQ(from_task.error(), blocking.error());
  Result<io::RecvBuffer> b = rt.spawn_task([&]() -> Task<Result<io::RecvBuffer>> {
                                 co_return co_await st.async_recv_buffer();
                               })
                                 .join()
                                 .value();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error(), st.recv_buffer().error());
}

// Pattern: n bytes that show their own offsets.
std::string Pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + i / 251) % 256);
  return s;
}

// Writes larger than the socket takes at once: write_all goes on through the reactor from where
// its direct sends left it, and every byte arrives once, in order, while a fiber reads slowly;
// one that cannot finish ends at its deadline or its token, each a write that had sent some.
TEST_P(TaskIoTest, WritesLargerThanTheSocketTakesGoOnThroughTheReactor) {
  Runtime rt({.workers = GetParam()});
  TcpStream client, st;
  ASSERT_NO_FATAL_FAILURE(Connect(&client, &st));
  // Small socket buffers, fixed (the kernel's autotuning would let the peer's queue grow to
  // tens of MiB, and the "stuck" writes below would fit).
  const int small = 64 << 10;
  ASSERT_EQ(::setsockopt(client.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
  ASSERT_EQ(::setsockopt(st.fd(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  const std::string data = Pattern(std::size_t{8} << 20);
  auto reader = rt.spawn([&] {
    std::string got(data.size(), '\0');
    for (std::size_t at = 0; at < got.size();) {
      this_fiber::yield();  // slowly: the writer's socket fills
      Result<std::size_t> n =
          client.read(got.data() + at, std::min<std::size_t>(64 << 10, got.size() - at));
      ASSERT_TRUE(n.ok() && *n > 0);
      at += *n;
    }
    EXPECT_TRUE(got == data) << "the bytes arrived changed";
  });
  auto writer = rt.spawn_task([&]() -> Task<bool> {
    co_return (co_await st.async_write_all(data.data(), data.size())).ok();
  });
  EXPECT_TRUE(*writer.join());
  ASSERT_TRUE(reader.join().ok());
  // Nobody reads now: the deadline, then the token, ends a write that cannot finish.
  auto stuck = rt.spawn_task([&]() -> Task<> {
    Result<void> r = co_await st.async_write_all(data.data(), data.size(),
                                                 {.deadline = SyncClock::now() + 20ms});
    EXPECT_EQ(r.error(), std::errc::timed_out);
    CancellationSource source;
    CancellationToken token = source.token();
    source.cancel_after(5ms);
    r = co_await st.async_write_all(data.data(), data.size(), {.cancel = &token});
    EXPECT_EQ(r.error(), std::errc::operation_canceled);
  });
  ASSERT_TRUE(stuck.join().ok());
}

// async_write's and async_write_all's Tasks: one never awaited writes nothing; kept (awaited
// later, or spawned) each writes as awaited at once; awaiting one moved from throws; from a
// coroutine that is not a task they block the fiber that runs it. Bad input and a closed stream
// give what write and write_all give.
TEST(TaskIoTest, TheWriteTasksNeverAwaitedMovedOnAFiberAndOnBadInput) {
  Runtime rt({.workers = 2});
  TcpStream client, st;
  ASSERT_NO_FATAL_FAILURE(Connect(&client, &st));
  auto h = rt.spawn_task([&]() -> Task<> {
    { Task<Result<void>> unused = st.async_write_all("zz", 2); }  // writes nothing
    { Task<Result<std::size_t>> unused = st.async_write("zz", 2); }
    Task<Result<std::size_t>> later = st.async_write("ab", 2);
    EXPECT_EQ(*co_await std::move(later), 2u);
    EXPECT_TRUE((co_await st.async_write_all("cd", 2)).ok());
    Task<Result<void>> first = st.async_write_all("ef", 2);
    Task<Result<void>> moved = std::move(first);
    EXPECT_TRUE((co_await std::move(moved)).ok());
    EXPECT_TRUE(co_await ThrowsLogicError(first));
  });
  ASSERT_TRUE(h.join().ok());
  auto spawned = rt.spawn_task(Task<Result<void>>(st.async_write_all("gh", 2)));
  ASSERT_TRUE(spawned.join().ok());
  rt.block_on([&] {
    auto eager = [&]() -> Eager { EXPECT_TRUE((co_await st.async_write_all("ij", 2)).ok()); };
    eager();
  });
  char got[10];
  ASSERT_TRUE(client.read_exact(got, sizeof got).ok());
  EXPECT_EQ(std::string(got, sizeof got), "abcdefghij");  // and no "zz"
  char more;
  EXPECT_FALSE(io::recv(client.fd(), &more, 1, MSG_DONTWAIT).ok());
  // Bad input: the same answers as the blocking forms.
  char buf[8] = {};
  struct Case {
    const void* buf;
    std::size_t len;
  };
  const Case cases[] = {{nullptr, 4}, {buf, 0}, {nullptr, 0}, {buf, SIZE_MAX}};
  for (const Case& c : cases) {
    Result<std::size_t> blocking = st.write(c.buf, c.len);
    Result<void> blocking_all = st.write_all(c.buf, c.len);
    auto [from_task, from_task_all] =
        rt.spawn_task([&]() -> Task<std::pair<Result<std::size_t>, Result<void>>> {
            Result<std::size_t> n = co_await st.async_write(c.buf, c.len);
            Result<void> all = co_await st.async_write_all(c.buf, c.len);
            co_return std::pair{n, all};
          })
            .join()
            .value();
    EXPECT_EQ(from_task.ok(), blocking.ok()) << "len " << c.len;
    if (from_task.ok() && blocking.ok()) EXPECT_EQ(*from_task, *blocking);
    if (!from_task.ok() && !blocking.ok()) EXPECT_EQ(from_task.error(), blocking.error());
    EXPECT_EQ(from_task_all.ok(), blocking_all.ok()) << "len " << c.len;
    if (!from_task_all.ok() && !blocking_all.ok()) {
      EXPECT_EQ(from_task_all.error(), blocking_all.error());
    }
  }
  ASSERT_TRUE(st.close().ok());
  Result<void> blocking = st.write_all("x", 1);
  Result<void> from_task =
      rt.spawn_task([&]() -> Task<Result<void>> { co_return co_await st.async_write_all("x", 1); })
          .join()
          .value();
  ASSERT_FALSE(blocking.ok());
  ASSERT_FALSE(from_task.ok());
  EXPECT_EQ(from_task.error(), blocking.error());
}

// A task parked in a write_all (its peer reads nothing) while another task closes the stream: the
// write ends with operation_canceled, and none of its bytes reach a connection that takes the
// same fd number at once.
TEST_P(TaskIoTest, ACloseFromAnotherTaskEndsAParkedWriteAndTheNumberIsReused) {
  Runtime rt({.workers = GetParam()});
  auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0));
  ASSERT_TRUE(listener.ok());
  const SocketAddress addr = *listener->local_address();
  const std::string data = Pattern(std::size_t{16} << 20);
  for (int round = 0; round < 5 * StressScale(); ++round) {
    Result<TcpStream> client = TcpStream::connect(addr);
    ASSERT_TRUE(client.ok());
    Result<TcpStream> served = listener->accept();
    ASSERT_TRUE(served.ok());
    const int number = served->fd();
    Event writing;
    auto writer = rt.spawn_task([&]() -> Task<int> {  // the error's value (0: none)
      writing.set();
      Result<void> r = co_await served->async_write_all(data.data(), data.size());
      co_return r.ok() ? 0 : static_cast<int>(r.error());
    });
    auto closer = rt.spawn_task([&]() -> Task<bool> {
      EXPECT_TRUE(co_await writing.async_wait());
      co_await this_task::sleep_for(2ms);  // parked in the write by now, most often
      EXPECT_TRUE(served->close().ok());
      co_return co_await ReuseTheNumber(*listener, addr, number);
    });
    Result<int> wrote = writer.join();
    ASSERT_TRUE(wrote.ok());
    // A write that had not started before the close may also find the fd closed; one that had
    // sent everything before it (a large socket buffer) is over.
    EXPECT_TRUE(*wrote == ECANCELED || *wrote == EBADF || *wrote == 0) << std::strerror(*wrote);
    EXPECT_TRUE(*closer.join());
  }
}

// A token that can never be cancelled (a default one, or one of a std::stop_token that cannot
// stop) is no token: reads that wait with one, from a task and from a fiber, complete.
TEST(TaskIoTest, ATokenThatCannotBeCancelledIsNoToken) {
  Runtime rt({.workers = 2});
  auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0));
  ASSERT_TRUE(listener.ok());
  const SocketAddress addr = *listener->local_address();
  const CancellationToken never;
  const CancellationToken never_stops{std::stop_token()};
  ASSERT_FALSE(never.can_be_cancelled());
  ASSERT_FALSE(never_stops.can_be_cancelled());
  auto h = rt.spawn_task([&]() -> Task<> {
    Result<TcpStream> client = co_await TcpStream::async_connect(addr, {.cancel = &never});
    EXPECT_TRUE(client.ok());
    Result<TcpStream> served = co_await listener->async_accept({.cancel = &never_stops});
    EXPECT_TRUE(served.ok());
    if (!client.ok() || !served.ok()) co_return;
    auto writer = rt.spawn([&] {
      for (int k = 0; k < 10; ++k) this_fiber::yield();
      EXPECT_TRUE(client->write_all("abcd", 4).ok());
    });
    char buf[2];
    EXPECT_TRUE((co_await served->async_read_exact(buf, sizeof buf, {.cancel = &never})).ok());
    Result<io::RecvBuffer> b = co_await served->async_recv_buffer({.cancel = &never});
    EXPECT_TRUE(b.ok());
    EXPECT_TRUE((co_await writer.async_join()).ok());
    // From a fiber: the blocking forms.
    auto reader = rt.spawn([&] {
      EXPECT_TRUE(client->write_all("ef", 2).ok());
      char in[2];
      EXPECT_TRUE(served->read_exact(in, sizeof in, {.cancel = &never_stops}).ok());
    });
    EXPECT_TRUE((co_await reader.async_join()).ok());
  });
  ASSERT_TRUE(h.join().ok());
}

// A task parked in a read while another task closes the stream: the read ends with
// operation_canceled, and a connection that takes the same fd number at once is not read by it.
TEST_P(TaskIoTest, ACloseFromAnotherTaskEndsAParkedReadAndTheNumberIsReused) {
  Runtime rt({.workers = GetParam()});
  auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0));
  ASSERT_TRUE(listener.ok());
  const SocketAddress addr = *listener->local_address();
  for (int round = 0; round < 20 * StressScale(); ++round) {
    Result<TcpStream> client = TcpStream::connect(addr);
    ASSERT_TRUE(client.ok());
    Result<TcpStream> served = listener->accept();
    ASSERT_TRUE(served.ok());
    const int number = served->fd();
    Event parked;
    auto reader = rt.spawn_task([&]() -> Task<int> {  // the error's value (0: none)
      char buf[16];
      parked.set();
      Result<std::size_t> n = co_await served->async_read(buf, sizeof buf);
      co_return n.ok() ? 0 : static_cast<int>(n.error());
    });
    auto closer = rt.spawn_task([&]() -> Task<bool> {
      EXPECT_TRUE(co_await parked.async_wait());
      co_await this_task::sleep_for(1ms);  // most often parked in the read by now
      EXPECT_TRUE(served->close().ok());
      co_return co_await ReuseTheNumber(*listener, addr, number);
    });
    Result<int> read = reader.join();
    ASSERT_TRUE(read.ok());
    // A read that had not started before the close may also find the fd closed.
    EXPECT_TRUE(*read == ECANCELED || *read == EBADF) << std::strerror(*read);
    EXPECT_TRUE(*closer.join());
  }
}

// A stream destroyed in its task closes its fd (without blocking the worker).
TEST(TaskIoTest, AStreamDestroyedInATaskClosesItsFd) {
  auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0));
  ASSERT_TRUE(listener.ok());
  const SocketAddress addr = *listener->local_address();
  int fd = -1;
  {
    Runtime rt({.workers = 1});
    ASSERT_TRUE(rt.spawn_task([&]() -> Task<> {
                    Result<TcpStream> st = co_await TcpStream::async_connect(addr);
                    EXPECT_TRUE(st.ok());
                    fd = st->fd();
                    co_return;  // st's destructor closes it here
                  })
                    .join()
                    .ok());
  }
  Result<TcpStream> served = listener->accept();
  ASSERT_TRUE(served.ok());
  char buf[1];
  Result<std::size_t> n = served->read(buf, 1, {.deadline = SyncClock::now() + 5s});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);  // the client's end was closed: end of stream
  (void)fd;
}

// Shutdown with tasks parked in accept and in read: both end, the runtime goes.
TEST(TaskIoTest, ShutdownEndsParkedAcceptsAndReads) {
  auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0));
  ASSERT_TRUE(listener.ok());
  const SocketAddress addr = *listener->local_address();
  Result<TcpStream> client = TcpStream::connect(addr);
  ASSERT_TRUE(client.ok());
  Result<TcpStream> served = listener->accept();
  ASSERT_TRUE(served.ok());
  std::atomic<int> cancelled{0};
  {
    Runtime rt({.workers = 2});
    WaitGroup started;
    ASSERT_TRUE(started.add(2).ok());
    rt.spawn_task([&]() -> Task<> {
        started.done();
        Result<TcpStream> c = co_await listener->async_accept();
        if (c.error() == std::errc::operation_canceled) cancelled.fetch_add(1);
      }).detach();
    rt.spawn_task([&]() -> Task<> {
        started.done();
        char buf[4];
        Result<std::size_t> n = co_await served->async_read(buf, sizeof buf);
        if (n.error() == std::errc::operation_canceled) cancelled.fetch_add(1);
      }).detach();
    ASSERT_TRUE(started.wait().ok());
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(cancelled.load(), 2);
}

// A task's close of a socket that another reactor also holds an operation on waits for that
// reactor's acknowledgement without the task waiting. If the runtime goes first, the close's op
// is freed with the worker (ASan would report it leaked) and the other reactor's operation still
// ends, and the fd is closed, when that reactor acknowledges.
TEST(TaskIoTest, ATaskCloseStillWaitingWhenTheRuntimeGoes) {
  TcpStream client, served;
  ASSERT_NO_FATAL_FAILURE(Connect(&client, &served));
  const int fd = served.fd();
  // Another reactor (this thread's, polled only below) with a receive pending on fd.
  Result<std::unique_ptr<Reactor>> other = Reactor::create();
  ASSERT_TRUE(other.ok());
  struct Pending {
    IoOp op;
    std::atomic<bool> done{false};
    std::int64_t result = 0;
  } pending;
  char buf[8];
  pending.op.user = &pending;
  pending.op.on_complete = [](IoOp& op, std::int64_t r, unsigned) {
    auto* p = static_cast<Pending*>(op.user);
    p->result = r;
    p->done.store(true);
  };
  (*other)->recv(pending.op, fd, buf, sizeof buf, 0);
  (void)(*other)->poll(std::chrono::steady_clock::now());  // submitted, still pending
  {
    Runtime rt({.workers = 1});
    ASSERT_TRUE(rt.spawn_task([&]() -> Task<> {
                    EXPECT_TRUE(served.close().ok());  // a task: does not wait
                    co_return;
                  })
                    .join()
                    .ok());
  }  // the worker's reactor goes with the close still waiting for `other`
  for (int i = 0; i < 1000 && !pending.done.load(); ++i) {
    (void)(*other)->poll(std::chrono::steady_clock::now() + 1ms);
  }
  EXPECT_TRUE(pending.done.load());
  EXPECT_EQ(pending.result, -ECANCELED);
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "fd still open";
}

// A worker without a reactor (its creation failed: here a backend this system lacks) still
// serves; a task's close there closes directly, as a fiber's does.
TEST(TaskIoTest, ACloseInATaskOnAWorkerWithoutAReactor) {
  auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0));
  ASSERT_TRUE(listener.ok());
  Result<TcpStream> client = TcpStream::connect(*listener->local_address());
  ASSERT_TRUE(client.ok());
  const int fd = client->fd();
  Runtime rt({.workers = 1, .reactor = {.backend = ReactorBackend::kIocp}});
  Result<void> closed =
      rt.spawn_task([&]() -> Task<Result<void>> { co_return client->close(); }).join().value();
  EXPECT_TRUE(closed.ok());
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "fd still open";
}

// A task that calls a blocking I/O form aborts every time, also when the call would complete at
// once (a send into a socket with room, a datagram already queued): the mistake does not wait
// for load, or for an injected fault, to show.
TEST(TaskIoDeathTest, ABlockingCallThatWouldNotWaitStillAbortsInATask) {
  GTEST_FLAG_SET(death_test_style, testing::DeathTestStyle());
  const auto in_a_task = [](auto call) {
    Runtime rt({.workers = 1});
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0) std::abort();
    (void)::send(sv[1], "x", 1, 0);  // a datagram queued for sv[0]
    (void)
        rt.spawn_task([&]() -> Task<> {
            call(sv);
            co_return;
          }).join();
  };
  EXPECT_DEATH(in_a_task([](int* sv) { (void)io::send(sv[0], "y", 1); }),
               "called blocking I/O \\(io send\\), which would block its worker");
  EXPECT_DEATH(in_a_task([](int* sv) {
                 char c;
                 IoVec v{&c, 1};
                 MsgHdr m{};
                 m.msg_iov = &v;
                 m.msg_iovlen = 1;
                 (void)io::recvmsg(sv[0], &m, 0);
               }),
               "called blocking I/O \\(io recvmsg\\)");
}

}  // namespace
}  // namespace weft
