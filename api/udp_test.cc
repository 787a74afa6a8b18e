// api/udp_test.cc: UdpSocket on fibers and on plain threads: datagrams with their senders,
// truncation, request/response between many senders and one server with every reply checked,
// connected sockets, deadlines, cancellation, a close from another execution, oversized and bad
// input, and refusal in a simulated runtime; the same from stackless tasks (the async_ forms).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/io.h"
#include "weft/api/net.h"
#include "weft/api/testing/dual_mode.h"
#include "weft/base/stress_scale.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/task.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/coordination.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::Mode;

class UdpTest : public testing::DualModeTest {
 protected:
  UdpTest() : DualModeTest(2) {}
};

net::UdpSocket Bound() {
  Result<net::UdpSocket> s = net::UdpSocket::bind(net::SocketAddress::ipv4_loopback(0));
  EXPECT_TRUE(s.ok());
  return std::move(*s);
}

TEST_P(UdpTest, DatagramsArriveWholeWithTheirSender) {
  Run([&] {
    net::UdpSocket a = Bound(), b = Bound();
    const net::SocketAddress b_addr = *b.local_address();
    ASSERT_EQ(*a.send_to("ping", 4, b_addr), 4u);
    ASSERT_EQ(*a.send_to("pong!", 5, b_addr), 5u);
    char buf[64];
    Result<net::UdpSocket::Datagram> d = b.recv_from(buf, sizeof buf);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(std::string(buf, d->size), "ping");  // one datagram per receive, never merged
    EXPECT_EQ(d->from.to_string(), a.local_address()->to_string());
    EXPECT_FALSE(d->truncated);
    d = b.recv_from(buf, sizeof buf);
    EXPECT_EQ(std::string(buf, d->size), "pong!");
    // Longer than the buffer: cut, flagged, the rest lost.
    ASSERT_TRUE(a.send_to("0123456789", 10, b_addr).ok());
    ASSERT_TRUE(a.send_to("next", 4, b_addr).ok());
    d = b.recv_from(buf, 3);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->size, 3u);
    EXPECT_TRUE(d->truncated);
    EXPECT_EQ(std::string(buf, 3), "012");
    d = b.recv_from(buf, sizeof buf);
    EXPECT_EQ(std::string(buf, d->size), "next");
    // An empty datagram is a datagram.
    ASSERT_EQ(*a.send_to(buf, 0, b_addr), 0u);
    d = b.recv_from(buf, sizeof buf);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->size, 0u);
  });
}

// Request/response: clients on other executions each send numbered requests and wait for each
// reply; the server answers every one to its sender. Every reply is checked.
TEST_P(UdpTest, ManyClientsOneServerEveryReplyChecked) {
  const int clients = 4, requests = 100 * testing::StressScale();
  Run([&] {
    net::UdpSocket server = Bound();
    const net::SocketAddress addr = *server.local_address();
    std::atomic<int> replies{0};
    std::vector<Other> others;
    for (int c = 0; c < clients; ++c) {
      others.push_back(Concurrently([&, c] {
        net::UdpSocket me = Bound();
        char buf[64];
        for (int i = 0; i < requests; ++i) {
          const std::string req = std::to_string(c) + ":" + std::to_string(i);
          ASSERT_TRUE(me.send_to(req.data(), req.size(), addr).ok());
          Result<net::UdpSocket::Datagram> d =
              me.recv_from(buf, sizeof buf, {.deadline = SyncClock::now() + 10s});
          ASSERT_TRUE(d.ok()) << "client " << c << " request " << i;
          ASSERT_EQ(std::string(buf, d->size), "re " + req);
          replies.fetch_add(1);
        }
      }));
    }
    char buf[64];
    for (int n = 0; n < clients * requests; ++n) {
      Result<net::UdpSocket::Datagram> d =
          server.recv_from(buf, sizeof buf, {.deadline = SyncClock::now() + 10s});
      ASSERT_TRUE(d.ok());
      const std::string reply = "re " + std::string(buf, d->size);
      ASSERT_TRUE(server.send_to(reply.data(), reply.size(), d->from).ok());
    }
    for (auto& o : others) o.join();
    EXPECT_EQ(replies.load(), clients * requests);
  });
}

TEST_P(UdpTest, ConnectedSocketsSendAndRecv) {
  Run([&] {
    net::UdpSocket a = Bound(), b = Bound();
    ASSERT_TRUE(a.connect(*b.local_address()).ok());
    ASSERT_TRUE(b.connect(*a.local_address()).ok());
    ASSERT_EQ(*a.send("hi", 2), 2u);
    char buf[8];
    ASSERT_EQ(*b.recv(buf, sizeof buf), 2u);
    EXPECT_EQ(std::string(buf, 2), "hi");
    // An unbound socket is bound by its first send.
    Result<net::UdpSocket> c = net::UdpSocket::open();
    ASSERT_TRUE(c.ok());
    net::UdpSocket free_one = Bound();
    ASSERT_TRUE(c->send_to("x", 1, *free_one.local_address()).ok());
    EXPECT_NE(c->local_address()->port(), 0);
  });
}

TEST_P(UdpTest, DeadlinesCancellationAndCloseFromAnotherExecution) {
  Run([&] {
    net::UdpSocket s = Bound();
    char buf[8];
    EXPECT_EQ(s.recv_from(buf, sizeof buf, {.deadline = SyncClock::now() + 20ms}).error(),
              std::errc::timed_out);
    CancellationSource src;
    src.cancel();
    CancellationToken tok = src.token();
    EXPECT_EQ(s.recv_from(buf, sizeof buf, {.cancel = &tok}).error(),
              std::errc::operation_canceled);
    std::atomic<bool> waiting{false};
    Result<net::UdpSocket::Datagram> got = std::errc::io_error;
    const int fd = s.fd();
    Other reader = Concurrently([&] {
      waiting = true;
      char b[8];
      IoVec v{b, sizeof b};
      MsgHdr m{};
      m.msg_iov = &v;
      m.msg_iovlen = 1;
      Result<std::size_t> n = io::recvmsg(fd, &m);
      got = n.ok() ? Result<net::UdpSocket::Datagram>(net::UdpSocket::Datagram{})
                   : Result<net::UdpSocket::Datagram>(n.error());
    });
    while (!waiting) ASSERT_TRUE(this_fiber::sleep_for(1ms).ok());
    ASSERT_TRUE(this_fiber::sleep_for(20ms).ok());  // (it is in its receive, or about to be)
    ASSERT_TRUE(s.close().ok());
    reader.join();
    EXPECT_EQ(got.error(), std::errc::operation_canceled);
  });
}

TEST_P(UdpTest, OversizedAndBadInputAreErrors) {
  Run([&] {
    net::UdpSocket a = Bound(), b = Bound();
    std::vector<char> huge(70000, 'h');
    EXPECT_EQ(a.send_to(huge.data(), huge.size(), *b.local_address()).error(),
              std::errc::message_size);
    EXPECT_EQ(a.send_to(nullptr, 5, *b.local_address()).error(), std::errc::invalid_argument);
    EXPECT_EQ(a.send_to("x", 1, net::SocketAddress()).error(), std::errc::invalid_argument);
    EXPECT_EQ(a.recv_from(nullptr, 5).error(), std::errc::invalid_argument);
    EXPECT_EQ(io::recvmsg(a.fd(), nullptr).error(), std::errc::invalid_argument);
    EXPECT_EQ(net::UdpSocket::open(12345).error(), std::errc::address_family_not_supported);
    net::UdpSocket closed;
    EXPECT_EQ(closed.send_to("x", 1, *b.local_address()).error(), std::errc::bad_file_descriptor);
  });
}

// Batches: a send_batch of many datagrams, then recv_batch calls that each take one wake-up and
// as many datagrams as are queued; every datagram arrives once, whole, in order (loopback).
TEST_P(UdpTest, BatchesSendAndReceiveManyDatagramsPerCall) {
  Run([&] {
    net::UdpSocket a = Bound(), b = Bound();
    const net::SocketAddress to = *b.local_address();
    constexpr int kCount = 64;
    std::vector<std::string> payload(kCount);
    std::vector<net::UdpSocket::Outgoing> out(kCount);
    for (int i = 0; i < kCount; ++i) {
      payload[i] = "datagram " + std::to_string(i);
      out[i] = {payload[i].data(), payload[i].size(), to};
    }
    std::size_t sent = 0;
    while (sent < out.size()) {
      Result<std::size_t> n = a.send_batch(out.data() + sent, out.size() - sent);
      ASSERT_TRUE(n.ok());
      ASSERT_GE(*n, 1u);
      sent += *n;
    }
    std::vector<std::string> storage(16, std::string(64, '\0'));
    std::vector<net::UdpSocket::Buffer> bufs(16);
    for (std::size_t i = 0; i < bufs.size(); ++i)
      bufs[i] = {storage[i].data(), storage[i].size(), {}};
    int next = 0, calls = 0;
    while (next < kCount) {
      Result<std::size_t> n =
          b.recv_batch(bufs.data(), bufs.size(), {.deadline = SyncClock::now() + 10s});
      ASSERT_TRUE(n.ok());
      ++calls;
      for (std::size_t i = 0; i < *n; ++i, ++next) {
        ASSERT_EQ(std::string(storage[i].data(), bufs[i].got.size), payload[next]);
        EXPECT_EQ(bufs[i].got.from.to_string(), a.local_address()->to_string());
      }
    }
    EXPECT_EQ(next, kCount);
    EXPECT_LE(calls, kCount);  // (a batch took more than one when they were queued)
    EXPECT_EQ(a.recv_batch(bufs.data(), 0).error(), std::errc::invalid_argument);
    EXPECT_EQ(a.send_batch(out.data(), 0).error(), std::errc::invalid_argument);
    net::UdpSocket::Outgoing bad{nullptr, 3, to};
    EXPECT_EQ(a.send_batch(&bad, 1).error(), std::errc::invalid_argument);
  });
}

INSTANTIATE_TEST_SUITE_P(FibersAndThreads, UdpTest,
                         ::testing::Values(Mode::kFibers, Mode::kThreads), testing::ModeName);

// ---- From stackless tasks: the async_ forms ----

class UdpTaskTest : public ::testing::TestWithParam<unsigned> {};
INSTANTIATE_TEST_SUITE_P(Workers, UdpTaskTest, ::testing::Values(1u, 2u, 4u));

// A task server answers task and fiber clients; every reply is checked, each datagram comes
// with its sender, and a datagram longer than the buffer is reported truncated.
TEST_P(UdpTaskTest, ATaskServerAnswersTasksAndFibers) {
  Runtime rt({.workers = GetParam()});
  const int clients = 4, requests = 100 * testing::StressScale();
  net::UdpSocket server = Bound();
  const net::SocketAddress addr = *server.local_address();
  auto serve = rt.spawn_task([&]() -> Task<> {
    char buf[64];
    for (int n = 0; n < clients * requests; ++n) {
      Result<net::UdpSocket::Datagram> d =
          co_await server.async_recv_from(buf, sizeof buf, {.deadline = SyncClock::now() + 10s});
      EXPECT_TRUE(d.ok());
      if (!d.ok()) co_return;
      const std::string reply = "re " + std::string(buf, d->size);
      EXPECT_TRUE((co_await server.async_send_to(reply.data(), reply.size(), d->from)).ok());
    }
  });
  std::atomic<int> replies{0};
  std::vector<JoinHandle<void>> hs;
  for (int c = 0; c < clients; ++c) {
    if (c % 2 == 0) {
      hs.push_back(rt.spawn_task([&, c]() -> Task<> {
        net::UdpSocket me = Bound();
        char buf[64];
        for (int i = 0; i < requests; ++i) {
          const std::string req = std::to_string(c) + ":" + std::to_string(i);
          EXPECT_TRUE((co_await me.async_send_to(req.data(), req.size(), addr)).ok());
          Result<net::UdpSocket::Datagram> d =
              co_await me.async_recv_from(buf, sizeof buf, {.deadline = SyncClock::now() + 10s});
          EXPECT_TRUE(d.ok());
          if (!d.ok()) co_return;
          EXPECT_EQ(std::string(buf, d->size), "re " + req);
          EXPECT_EQ(d->from.port(), addr.port());
          replies.fetch_add(1);
        }
      }));
    } else {
      hs.push_back(rt.spawn([&, c] {
        net::UdpSocket me = Bound();
        char buf[64];
        for (int i = 0; i < requests; ++i) {
          const std::string req = std::to_string(c) + ":" + std::to_string(i);
          ASSERT_TRUE(me.send_to(req.data(), req.size(), addr).ok());
          Result<net::UdpSocket::Datagram> d =
              me.recv_from(buf, sizeof buf, {.deadline = SyncClock::now() + 10s});
          ASSERT_TRUE(d.ok());
          ASSERT_EQ(std::string(buf, d->size), "re " + req);
          replies.fetch_add(1);
        }
      }));
    }
  }
  for (auto& h : hs) ASSERT_TRUE(h.join().ok());
  ASSERT_TRUE(serve.join().ok());
  EXPECT_EQ(replies.load(), clients * requests);

  // Truncation, and connected sockets' send and recv.
  auto h = rt.spawn_task([&]() -> Task<> {
    net::UdpSocket a = Bound(), b = Bound();
    const net::SocketAddress b_addr = *b.local_address();
    EXPECT_EQ(*co_await a.async_send_to("0123456789", 10, b_addr), 10u);
    char small[4];
    Result<net::UdpSocket::Datagram> d = co_await b.async_recv_from(small, sizeof small);
    EXPECT_TRUE(d.ok() && d->truncated && d->size == 4);
    EXPECT_TRUE(a.connect(b_addr).ok());
    EXPECT_TRUE(b.connect(*a.local_address()).ok());
    EXPECT_EQ(*co_await a.async_send("hi", 2), 2u);
    char buf[8];
    Result<std::size_t> n = co_await b.async_recv(buf, sizeof buf);
    EXPECT_TRUE(n.ok() && *n == 2 && std::string(buf, 2) == "hi");
  });
  ASSERT_TRUE(h.join().ok());
}

// A task's receive ends with its deadline, its token, a close by another task, or the runtime's
// shutdown; bad input is an error at once.
TEST_P(UdpTaskTest, DeadlinesCancellationCloseShutdownAndBadInput) {
  std::atomic<int> shut{0};
  net::UdpSocket idle = Bound();  // outlives the runtime: only the shutdown ends its receive
  {
    Runtime rt({.workers = GetParam()});
    net::UdpSocket s = Bound();
    auto h = rt.spawn_task([&]() -> Task<> {
      char buf[16];
      EXPECT_EQ(co_await s.async_recv_from(buf, sizeof buf, {.deadline = SyncClock::now() + 5ms}),
                std::errc::timed_out);
      CancellationSource source;
      CancellationToken token = source.token();
      source.cancel_after(2ms);
      EXPECT_EQ(co_await s.async_recv(buf, sizeof buf, {.cancel = &token}),
                std::errc::operation_canceled);
      EXPECT_EQ(co_await s.async_recv_from(nullptr, 4), std::errc::invalid_argument);
      EXPECT_EQ(co_await s.async_send_to(buf, 4, net::SocketAddress()),
                std::errc::invalid_argument);
      Event parked;
      auto closer = Runtime::current()->spawn_task([&]() -> Task<> {
        EXPECT_TRUE(co_await parked.async_wait());
        co_await this_task::sleep_for(2ms);
        EXPECT_TRUE(s.close().ok());
      });
      parked.set();
      Result<net::UdpSocket::Datagram> d = co_await s.async_recv_from(buf, sizeof buf);
      EXPECT_FALSE(d.ok());
      if (!d.ok()) {
        EXPECT_TRUE(d.error() == std::errc::operation_canceled ||
                    d.error() == std::errc::bad_file_descriptor);
      }
      EXPECT_TRUE(co_await closer);
    });
    ASSERT_TRUE(h.join().ok());
    Event parked;
    rt.spawn_task([&]() -> Task<> {
        char buf[16];
        parked.set();
        if ((co_await idle.async_recv_from(buf, sizeof buf)) == std::errc::operation_canceled) {
          shut.fetch_add(1);
        }
      }).detach();
    ASSERT_TRUE(parked.wait().ok());
  }
  EXPECT_EQ(shut.load(), 1);
}

// (UDP on a simulated runtime's network: api/sim_test.cc.)

}  // namespace
}  // namespace weft
