// api/sim_test.cc: the simulated network (api/sim.h) through weft's own TCP types and io calls:
// connections between named hosts and on loopback; refusal, unreachable hosts and names; bytes
// held by a partition and delivered in order, exactly once, after the heal; connects across a
// partition retried, and given up; resets, FINs, close with unread bytes; backpressure; per-host
// fd limits; a close from another fiber and the fd number's reuse; deadlines, cancellation and
// bad input; seeded loss and latency that replay to the same trace hash.

#include "weft/api/sim.h"

#ifdef _WIN32
#include <winsock2.h>
#else
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/io.h"
#include "weft/api/net.h"
#include "weft/base/clock.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/simulation.h"
#include "weft/scheduler/task.h"
#include "weft/sync/coordination.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

RuntimeOptions Sim(std::uint64_t seed) { return {.simulation = SimulationOptions{.seed = seed}}; }

sim::Network& Net() {
  sim::Network* n = sim::Network::current();
  EXPECT_NE(n, nullptr);
  return *n;
}

// OnHost: runs body on a fiber of host `host`.
template <typename F>
JoinHandle<void> OnHost(Runtime& rt, const char* host, F body) {
  return rt.spawn([host, body]() mutable {
    ASSERT_TRUE(Net().enter(host).ok());
    body();
  });
}

// EchoOnce: accepts one connection and echoes it to its end.
void EchoOnce(net::TcpListener& l) {
  Result<net::TcpStream> s = l.accept();
  ASSERT_TRUE(s.ok());
  char buf[4096];
  for (;;) {
    Result<std::size_t> n = s->read(buf, sizeof buf);
    if (!n.ok() || *n == 0) return;
    ASSERT_TRUE(s->write_all(buf, *n).ok());
  }
}

TEST(SimNetwork, IsNullOutsideASimulation) {
  EXPECT_EQ(sim::Network::current(), nullptr);
  Runtime rt({.workers = 1});
  rt.block_on([] { EXPECT_EQ(sim::Network::current(), nullptr); });
}

TEST(SimNetwork, EchoBetweenTwoHostsByName) {
  Runtime rt(Sim(1));
  rt.block_on([&] {
    Event listening;
    auto server = OnHost(rt, "server", [&] {
      Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(7000));
      ASSERT_TRUE(l.ok());
      EXPECT_EQ(l->local_address()->to_string(), "0.0.0.0:7000");  // as bound
      listening.set();
      EchoOnce(*l);
    });
    auto client = OnHost(rt, "client", [&] {
      ASSERT_TRUE(listening.wait().ok());
      Result<net::TcpStream> s = net::TcpStream::connect("server", 7000);
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(s->peer_address()->to_string(), "10.0.0.2:7000");
      EXPECT_EQ(s->local_address()->to_string().substr(0, 9), "10.0.0.3:");
      EXPECT_TRUE(s->set_nodelay(true).ok());
      const std::string msg = "hello over a simulated wire";
      ASSERT_TRUE(s->write_all(msg.data(), msg.size()).ok());
      std::string got(msg.size(), '\0');
      ASSERT_TRUE(s->read_exact(got.data(), got.size()).ok());
      EXPECT_EQ(got, msg);
      ASSERT_TRUE(s->shutdown_write().ok());
      char c;
      EXPECT_EQ(*s->read(&c, 1), 0u);  // the server saw the FIN and closed
    });
    EXPECT_TRUE(client.join().ok());
    EXPECT_TRUE(server.join().ok());
    sim::NetworkStats st = Net().stats();
    EXPECT_EQ(st.connections, 1u);
    EXPECT_EQ(st.hosts, 3u);
    EXPECT_EQ(*Net().open_fds("server"), 0);
  });
  // Time passed only virtually: a few latencies.
  EXPECT_LT(rt.simulation()->virtual_elapsed, 100ms);
}

// recv_buffer on a simulated socket: the bytes in a buffer of the call's own, then end of stream.
TEST(SimNetwork, RecvBufferReceivesIntoItsOwnBuffers) {
  Runtime rt(Sim(1));
  rt.block_on([&] {
    Event listening;
    const std::string msg = "lent or not, the same bytes";
    auto server = OnHost(rt, "server", [&] {
      Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(7001));
      ASSERT_TRUE(l.ok());
      listening.set();
      Result<net::TcpStream> s = l->accept();
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE(s->write_all(msg.data(), msg.size()).ok());
    });
    auto client = OnHost(rt, "client", [&] {
      ASSERT_TRUE(listening.wait().ok());
      Result<net::TcpStream> s = net::TcpStream::connect("server", 7001);
      ASSERT_TRUE(s.ok());
      const io::RecvBufferStats before = io::recv_buffer_stats();
      std::string got;
      for (;;) {
        Result<io::RecvBuffer> b = s->recv_buffer();
        ASSERT_TRUE(b.ok());
        if (b->empty()) break;
        got.append(b->view());
      }
      EXPECT_EQ(got, msg);
      EXPECT_GE(io::recv_buffer_stats().fallback, before.fallback + 1);
    });
    EXPECT_TRUE(client.join().ok());
    EXPECT_TRUE(server.join().ok());
  });
}

TEST(SimNetwork, LoopbackOnTheDefaultHostRunsUnchangedCode) {
  Runtime rt(Sim(2));
  rt.block_on([&] {
    Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_loopback(0));
    ASSERT_TRUE(l.ok());
    const std::uint16_t port = l->local_address()->port();
    EXPECT_GE(port, 32768);
    auto server = rt.spawn([&] { EchoOnce(*l); });
    Result<net::TcpStream> s = net::TcpStream::connect("localhost", port);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(Net().current_host().name, "main");
    // The io calls on the same fds: writev, readv, poll.
    char a[] = "ab", b[] = "cde";
    IoVec out[2] = {{a, 2}, {b, 3}};
    ASSERT_EQ(*io::writev(s->fd(), out, 2), 5u);
    EXPECT_EQ(*io::poll(s->fd(), POLLIN) & POLLIN, static_cast<std::uint32_t>(POLLIN));
    char x[2], y[3];
    IoVec in[2] = {{x, 2}, {y, 3}};
    std::size_t got = 0;
    while (got < 5) {
      // (readv fills the list in order; a short read leaves the rest for the next)
      Result<std::size_t> n = io::readv(s->fd(), in, 2);
      ASSERT_TRUE(n.ok());
      got += *n;
      std::size_t left = *n;
      for (IoVec& v : in) {
        const std::size_t t = std::min(left, v.iov_len);
        v.iov_base = static_cast<char*>(v.iov_base) + t;
        v.iov_len -= t;
        left -= t;
      }
    }
    EXPECT_EQ(std::string(x, 2) + std::string(y, 3), "abcde");
    ASSERT_TRUE(s->close().ok());
    EXPECT_TRUE(server.join().ok());
  });
}

TEST(SimNetwork, RefusedUnreachableAndUnknownNames) {
  Runtime rt(Sim(3));
  rt.block_on([&] {
    ASSERT_TRUE(Net().host("db").ok());
    const auto t0 = SyncClock::now();
    EXPECT_EQ(net::TcpStream::connect("db", 5432).error(), std::errc::connection_refused);
    EXPECT_GT(SyncClock::now(), t0);  // a round trip
    EXPECT_EQ(net::TcpStream::connect(*net::SocketAddress::parse("10.9.9.9:80")).error(),
              std::errc::host_unreachable);
    EXPECT_EQ(net::TcpStream::connect("nosuchhost", 80).error(), std::errc::address_not_available);
    EXPECT_EQ(Net().stats().refused, 1u);
    // IPv6 is not simulated: a clear error.
    EXPECT_EQ(net::TcpStream::connect(*net::SocketAddress::parse("[::1]:80")).error(),
              std::errc::address_family_not_supported);
  });
}

// The exact-delivery property: bytes sent while a partition holds them arrive, after the heal,
// in order and exactly once; a read during the partition times out.
TEST(SimNetwork, APartitionHoldsBytesAndTheHealDeliversThemExactlyOnce) {
  Runtime rt(Sim(4));
  rt.block_on([&] {
    Event listening, sent_half;
    std::string received;
    auto server = OnHost(rt, "server", [&] {
      Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(80));
      ASSERT_TRUE(l.ok());
      listening.set();
      Result<net::TcpStream> s = l->accept();
      ASSERT_TRUE(s.ok());
      char buf[100];
      for (;;) {
        Result<std::size_t> n = s->read(buf, sizeof buf);
        ASSERT_TRUE(n.ok());
        if (*n == 0) break;
        received.append(buf, *n);
      }
    });
    auto client = OnHost(rt, "client", [&] {
      ASSERT_TRUE(listening.wait().ok());
      Result<net::TcpStream> s = net::TcpStream::connect("server", 80);
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE(Net().partition("client", "server").ok());
      std::string all;
      for (int i = 0; i < 200; ++i) {
        std::string line = "message " + std::to_string(i) + "\n";
        all += line;
        ASSERT_TRUE(s->write_all(line.data(), line.size()).ok());
      }
      // Cut off: nothing reaches the server, and a reply would not reach us.
      char c;
      EXPECT_EQ(s->read(&c, 1, {.deadline = SyncClock::now() + 5s}).error(), std::errc::timed_out);
      EXPECT_EQ(received, "");
      ASSERT_TRUE(Net().heal("client", "server").ok());
      ASSERT_TRUE(s->shutdown_write().ok());
      EXPECT_EQ(*s->read(&c, 1), 0u);  // the server closes once it has read everything
      EXPECT_EQ(received, all);
    });
    EXPECT_TRUE(client.join().ok());
    EXPECT_TRUE(server.join().ok());
  });
}

TEST(SimNetwork, AConnectAcrossAPartitionRetriesUntilTheHealOrGivesUp) {
  Runtime rt(Sim(5));
  rt.block_on([&] {
    Event listening;
    auto server = OnHost(rt, "server", [&] {
      Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(80));
      ASSERT_TRUE(l.ok());
      listening.set();
      EchoOnce(*l);
    });
    ASSERT_TRUE(listening.wait().ok());
    ASSERT_TRUE(Net().host("client").ok());
    ASSERT_TRUE(Net().partition("client", "server").ok());
    auto client = OnHost(rt, "client", [&] {
      // A deadline first: the call's own.
      EXPECT_EQ(
          net::TcpStream::connect("server", 80, {.deadline = SyncClock::now() + 2500ms}).error(),
          std::errc::timed_out);
      // Then a connect that waits through the partition: the heal comes at 10 s; its SYN
      // retries (1, 2, 4, 8 s) reach the server at the 15th second.
      const auto t0 = SyncClock::now();
      Result<net::TcpStream> s = net::TcpStream::connect("server", 80);
      ASSERT_TRUE(s.ok());
      EXPECT_GE(SyncClock::now() - t0, 10s);
      ASSERT_TRUE(s->close().ok());
    });
    ASSERT_TRUE(this_fiber::sleep_for(12500ms).ok());
    ASSERT_TRUE(Net().heal("client", "server").ok());
    EXPECT_TRUE(client.join().ok());
    EXPECT_TRUE(server.join().ok());
    // Given up: connect_timeout.
    sim::NetworkOptions o = Net().options();
    o.connect_timeout = 3s;
    ASSERT_TRUE(Net().configure(o).ok());
    ASSERT_TRUE(Net().partition("client", "server").ok());
    auto late = OnHost(rt, "client", [&] {
      EXPECT_EQ(net::TcpStream::connect("server", 80).error(), std::errc::timed_out);
    });
    EXPECT_TRUE(late.join().ok());
    EXPECT_EQ(Net().stats().timed_out, 1u);
  });
}

// Connected: a connected pair on loopback of the default host (client, accepted).
struct Pair {
  net::TcpStream client, server;
};
Pair Connected() {
  Pair p;
  Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_loopback(0));
  EXPECT_TRUE(l.ok());
  Result<net::TcpStream> c = net::TcpStream::connect(*l->local_address());
  EXPECT_TRUE(c.ok());
  Result<net::TcpStream> s = l->accept();
  EXPECT_TRUE(s.ok());
  p.client = std::move(*c);
  p.server = std::move(*s);
  return p;
}

TEST(SimNetwork, ResetsFailBothEndsAndLoseBytesInFlight) {
  Runtime rt(Sim(6));
  rt.block_on([&] {
    Pair p = Connected();
    ASSERT_TRUE(p.client.write_all("xyz", 3).ok());
    EXPECT_EQ(*Net().reset("main", "main"), 1u);
    char buf[8];
    EXPECT_EQ(p.server.read(buf, sizeof buf).error(), std::errc::connection_reset);
    EXPECT_EQ(p.client.write("a", 1).error(), std::errc::connection_reset);
    EXPECT_EQ(Net().stats().resets, 1u);

    // Bytes that had arrived before a reset stay readable; the reset comes after them.
    Pair a = Connected();
    ASSERT_TRUE(a.client.write_all("arrived", 7).ok());
    ASSERT_TRUE(this_fiber::sleep_for(10ms).ok());
    ASSERT_TRUE(a.client.write_all("in flight", 9).ok());
    EXPECT_EQ(*Net().reset("main", "main"), 1u);
    EXPECT_EQ(*a.server.read(buf, sizeof buf), 7u);
    EXPECT_EQ(std::string(buf, 7), "arrived");
    EXPECT_EQ(a.server.read(buf, sizeof buf).error(), std::errc::connection_reset);
    // Reported once: then reads end and writes are EPIPE, as on Linux.
    EXPECT_EQ(*a.server.read(buf, sizeof buf), 0u);
    EXPECT_EQ(a.server.write("x", 1).error(), std::errc::broken_pipe);

    // A close with bytes unread resets; the peer's read says so.
    Pair q = Connected();
    ASSERT_TRUE(q.client.write_all("unread", 6).ok());
    ASSERT_TRUE(this_fiber::sleep_for(10ms).ok());  // it arrives
    ASSERT_TRUE(q.server.close().ok());
    EXPECT_EQ(q.client.read(buf, sizeof buf).error(), std::errc::connection_reset);

    // A write to a peer that closed cleanly is answered by a reset.
    Pair r = Connected();
    ASSERT_TRUE(r.server.close().ok());
    EXPECT_EQ(*r.client.read(buf, sizeof buf), 0u);  // its FIN
    EXPECT_EQ(*r.client.write("late", 4), 4u);
    EXPECT_EQ(r.client.write("late", 4).error(), std::errc::connection_reset);
  });
}

TEST(SimNetwork, HalfCloseAndShutdown) {
  Runtime rt(Sim(7));
  rt.block_on([&] {
    Pair p = Connected();
    ASSERT_TRUE(p.client.write_all("last words", 10).ok());
    ASSERT_TRUE(p.client.shutdown_write().ok());
    EXPECT_EQ(p.client.write("x", 1).error(), std::errc::broken_pipe);
    std::string got(10, '\0');
    ASSERT_TRUE(p.server.read_exact(got.data(), 10).ok());
    EXPECT_EQ(got, "last words");
    char c;
    EXPECT_EQ(*p.server.read(&c, 1), 0u);
    // The other way still works after the half-close.
    ASSERT_TRUE(p.server.write_all("reply", 5).ok());
    std::string reply(5, '\0');
    ASSERT_TRUE(p.client.read_exact(reply.data(), 5).ok());
    EXPECT_EQ(reply, "reply");
    // shutdown (both ways) ends a read that waits, with 0.
    auto reader = rt.spawn([&] { EXPECT_EQ(*p.server.read(&c, 1), 0u); });
    ASSERT_TRUE(this_fiber::sleep_for(1ms).ok());
    ASSERT_TRUE(p.server.shutdown().ok());
    EXPECT_TRUE(reader.join().ok());
  });
}

TEST(SimNetwork, ASendWaitsForTheWindowToOpen) {
  Runtime rt(Sim(8));
  rt.block_on([&] {
    sim::NetworkOptions o;
    o.window = 1000;
    ASSERT_TRUE(Net().configure(o).ok());
    Pair p = Connected();
    std::string big(5000, 'w');
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
    EXPECT_EQ(*p.client.write(big.data(), big.size()), 1000u);  // a short write: the window
    EXPECT_EQ(p.client.write(big.data(), 1, {.deadline = SyncClock::now() + 1s}).error(),
              std::errc::timed_out);
#ifdef MSG_DONTWAIT
    EXPECT_EQ(io::send(p.client.fd(), big.data(), 1, MSG_DONTWAIT).error(),
              std::errc::resource_unavailable_try_again);
#endif
    auto writer = rt.spawn([&] { EXPECT_TRUE(p.client.write_all(big.data() + 1000, 4000).ok()); });
    std::string got(5000, '\0');
    ASSERT_TRUE(p.server.read_exact(got.data(), got.size()).ok());
    EXPECT_EQ(got, big);
    EXPECT_TRUE(writer.join().ok());
  });
}

TEST(SimNetwork, AHostsFdLimitIsEmfileAndTheConnectionStaysQueued) {
  Runtime rt(Sim(9));
  rt.block_on([&] {
    ASSERT_TRUE(Net().host("server").ok());
    ASSERT_TRUE(Net().set_fd_limit("server", 2).ok());
    Event listening, server_done;
    auto server = OnHost(rt, "server", [&] {
      Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(80));
      ASSERT_TRUE(l.ok());
      listening.set();
      Result<net::TcpStream> a = l->accept();
      ASSERT_TRUE(a.ok());
      // Listener + one connection: the host is full. The second connection waits in the backlog.
      ASSERT_TRUE(this_fiber::sleep_for(10ms).ok());
      EXPECT_EQ(l->accept().error(), std::errc::too_many_files_open);
      EXPECT_EQ(net::TcpListener::bind(net::SocketAddress::ipv4_any(81)).error(),
                std::errc::too_many_files_open);
      ASSERT_TRUE(a->close().ok());
      Result<net::TcpStream> b = l->accept();  // the queued one
      ASSERT_TRUE(b.ok());
      char c;
      EXPECT_EQ(*b->read(&c, 1), 1u);
      EXPECT_EQ(c, '2');
      server_done.set();
    });
    auto client = OnHost(rt, "client", [&] {
      ASSERT_TRUE(listening.wait().ok());
      Result<net::TcpStream> one = net::TcpStream::connect("server", 80);
      Result<net::TcpStream> two = net::TcpStream::connect("server", 80);
      ASSERT_TRUE(one.ok());
      ASSERT_TRUE(two.ok());
      ASSERT_TRUE(two->write_all("2", 1).ok());
      ASSERT_TRUE(server_done.wait().ok());
    });
    EXPECT_TRUE(server.join().ok());
    EXPECT_TRUE(client.join().ok());
    EXPECT_GE(Net().stats().emfile, 2u);
  });
}

// A close from another fiber ends a read that waits (ECANCELED), and the fd number, reused at
// once by a new connection, never hands that reader the new connection's bytes.
TEST(SimNetwork, ACloseFromAnotherFiberEndsItsCallsAndTheReusedNumberIsNotTheirs) {
  Runtime rt(Sim(10));
  rt.block_on([&] {
    Pair p = Connected();
    const int fd = p.server.fd();
    Result<std::size_t> seen = std::size_t{0};
    char buf[16] = {};
    Event reading;
    auto reader = rt.spawn([&] {
      reading.set();
      seen = io::read(fd, buf, sizeof buf);
    });
    ASSERT_TRUE(reading.wait().ok());
    ASSERT_TRUE(io::close(p.server.release()).ok());
    Pair q = Connected();  // its accepted end or its client takes the freed number
    EXPECT_TRUE(q.client.fd() == fd || q.server.fd() == fd);
    ASSERT_TRUE(q.client.write_all("fresh", 5).ok());
    ASSERT_TRUE(q.server.write_all("fresh", 5).ok());
    EXPECT_TRUE(reader.join().ok());
    EXPECT_EQ(seen.error(), std::errc::operation_canceled);
    EXPECT_EQ(std::string(buf, 5), std::string(5, '\0'));
    char got[5];
    ASSERT_TRUE(q.server.read_exact(got, 5).ok());  // every byte still there for its reader
    EXPECT_EQ(std::string(got, 5), "fresh");
    EXPECT_EQ(io::close(fd + 1000).error(), std::errc::bad_file_descriptor);
  });
}

TEST(SimNetwork, DeadlinesCancellationAndBadInput) {
  Runtime rt(Sim(11));
  rt.block_on([&] {
    Pair p = Connected();
    char c;
    EXPECT_EQ(p.server.read(&c, 1, {.deadline = SyncClock::now() + 1h}).error(),
              std::errc::timed_out);
    CancellationSource src;
    src.cancel();
    CancellationToken tok = src.token();
    EXPECT_EQ(p.server.read(&c, 1, {.cancel = &tok}).error(), std::errc::operation_canceled);
    CancellationSource later;
    ASSERT_TRUE(later.cancel_at(SyncClock::now() + 3s).ok());
    CancellationToken late = later.token();
    EXPECT_EQ(p.server.read(&c, 1, {.cancel = &late}).error(), std::errc::operation_canceled);
#ifdef MSG_DONTWAIT
    EXPECT_EQ(io::recv(p.server.fd(), &c, 1, MSG_DONTWAIT).error(),
              std::errc::resource_unavailable_try_again);
#endif
    EXPECT_EQ(io::read(p.server.fd(), nullptr, 5).error(), std::errc::invalid_argument);
    EXPECT_EQ(*io::read(p.server.fd(), &c, 0), 0u);
    EXPECT_EQ(io::accept(p.server.fd()).error(), std::errc::invalid_argument);  // not listening
    sim::NetworkOptions bad;
    bad.loss = 1.5;
    EXPECT_EQ(Net().configure(bad).error(), std::errc::invalid_argument);
    bad = {};
    bad.min_latency = 2ms;
    bad.max_latency = 1ms;
    EXPECT_EQ(Net().configure(bad).error(), std::errc::invalid_argument);
    bad = {};
    bad.window = 0;
    EXPECT_EQ(Net().configure(bad).error(), std::errc::invalid_argument);
    EXPECT_EQ(Net().host("").error(), std::errc::invalid_argument);
    EXPECT_EQ(Net().host("1.2.3.4").error(), std::errc::invalid_argument);
    EXPECT_EQ(Net().host("bad name").error(), std::errc::invalid_argument);
    EXPECT_EQ(Net().host(std::string(65, 'h')).error(), std::errc::invalid_argument);
    EXPECT_EQ(Net().partition("main", "main").error(), std::errc::invalid_argument);
    EXPECT_EQ(Net().partition("main", "nowhere").error(), std::errc::no_such_file_or_directory);
    EXPECT_EQ(Net().set_fd_limit("main", 0).error(), std::errc::invalid_argument);
    EXPECT_EQ(net::TcpListener::bind(*net::SocketAddress::parse("10.0.0.7:80")).error(),
              std::errc::address_not_available);  // not this host's address
    Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(99));
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(net::TcpListener::bind(net::SocketAddress::ipv4_any(99)).error(),
              std::errc::address_in_use);
    // A listener closed while a fiber waits in accept: ECANCELED.
    auto acceptor =
        rt.spawn([&] { EXPECT_EQ(l->accept().error(), std::errc::operation_canceled); });
    ASSERT_TRUE(this_fiber::sleep_for(1ms).ok());
    ASSERT_TRUE(l->close().ok());
    EXPECT_TRUE(acceptor.join().ok());
  });
}

#ifndef _WIN32
// Real fds are refused in a simulation, and a simulated fd means nothing outside it.
TEST(SimNetwork, RealFdsAreRefusedAndSimulatedOnesAreUnknownOutside) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  int kept = -1;
  {
    Runtime rt(Sim(12));
    rt.block_on([&] {
      char c = 'x';
      EXPECT_EQ(io::write(fds[1], &c, 1).error(), std::errc::not_supported);
      EXPECT_EQ(io::close(fds[1]).error(), std::errc::not_supported);
      Pair p = Connected();
      kept = p.client.release();
    });
  }
  char c = 'x';
  EXPECT_EQ(io::write(kept, &c, 1).error(), std::errc::bad_file_descriptor);
  EXPECT_EQ(io::close(kept).error(), std::errc::bad_file_descriptor);
  EXPECT_EQ(::write(fds[1], &c, 1), 1);  // still open: the simulation never closed it
  ::close(fds[0]);
  ::close(fds[1]);
}
#endif

// Traffic with seeded latency and loss: the same seed gives the same trace hash and the same
// network figures; the bytes are exact whatever the seed.
std::uint64_t LossyEcho(std::uint64_t seed, sim::NetworkStats* stats) {
  Runtime rt(Sim(seed));
  rt.block_on([&] {
    sim::NetworkOptions o;
    o.loss = 0.2;
    o.max_latency = 5ms;
    ASSERT_TRUE(Net().configure(o).ok());
    Event listening;
    auto server = OnHost(rt, "server", [&] {
      Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(7));
      ASSERT_TRUE(l.ok());
      listening.set();
      std::vector<JoinHandle<void>> conns;
      for (int i = 0; i < 3; ++i) {
        Result<net::TcpStream> s = l->accept();
        ASSERT_TRUE(s.ok());
        conns.push_back(rt.spawn([s = std::move(*s)]() mutable {
          char buf[64];
          for (;;) {
            Result<std::size_t> n = s.read(buf, sizeof buf);
            if (!n.ok() || *n == 0) return;
            if (!s.write_all(buf, *n).ok()) return;
          }
        }));
      }
      for (auto& h : conns) EXPECT_TRUE(h.join().ok());
    });
    std::vector<JoinHandle<void>> clients;
    for (int k = 0; k < 3; ++k) {
      const char* host = k == 0 ? "c0" : k == 1 ? "c1" : "c2";
      clients.push_back(OnHost(rt, host, [&, k] {
        ASSERT_TRUE(listening.wait().ok());
        Result<net::TcpStream> s = net::TcpStream::connect("server", 7);
        ASSERT_TRUE(s.ok());
        for (int i = 0; i < 20; ++i) {
          const std::string msg = std::to_string(k) + ":" + std::to_string(i) + ";";
          ASSERT_TRUE(s->write_all(msg.data(), msg.size()).ok());
          std::string back(msg.size(), '\0');
          ASSERT_TRUE(s->read_exact(back.data(), back.size()).ok());
          ASSERT_EQ(back, msg);
        }
      }));
    }
    for (auto& h : clients) EXPECT_TRUE(h.join().ok());
    EXPECT_TRUE(server.join().ok());
    *stats = Net().stats();
  });
  return rt.simulation()->trace_hash;
}

TEST(SimNetwork, SeededLossAndLatencyReplayToTheSameTrace) {
  sim::NetworkStats a, b, c;
  const std::uint64_t h1 = LossyEcho(77, &a);
  const std::uint64_t h2 = LossyEcho(77, &b);
  const std::uint64_t h3 = LossyEcho(78, &c);
  EXPECT_EQ(h1, h2);
  EXPECT_EQ(a.lost, b.lost);
  EXPECT_EQ(a.segments, b.segments);
  EXPECT_GT(a.lost, 0u);
  EXPECT_NE(h1, h3);
}

// TaskEcho: a task server on host "server" (a task per connection, on lent buffers too) and
// three task clients on their own hosts, over a lossy network; returns the trace hash and
// writes what each client's connection saw as its own address into *seen.
std::uint64_t TaskEcho(std::uint64_t seed, std::vector<std::string>* seen) {
  Runtime rt(Sim(seed));
  rt.block_on([&] {
    sim::NetworkOptions o;
    o.loss = 0.1;
    o.min_latency = 50us;
    o.max_latency = 2ms;
    ASSERT_TRUE(Net().configure(o).ok());
    Result<sim::Host> server_host = Net().host("server");
    ASSERT_TRUE(server_host.ok());
    const std::string ip = server_host->address.to_string();
    Result<net::SocketAddress> parsed =
        net::SocketAddress::parse(ip.substr(0, ip.find(':')) + ":7100");
    ASSERT_TRUE(parsed.ok());
    const net::SocketAddress to = *parsed;
    Event listening;
    JoinHandle<int> server = rt.spawn_task([&]() -> Task<int> {
      EXPECT_TRUE(Net().enter("server").ok());
      Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(7100));
      if (!l.ok()) co_return -1;
      listening.set();
      std::vector<JoinHandle<std::size_t>> conns;
      for (int k = 0; k < 3; ++k) {
        Result<net::TcpStream> s = co_await l->async_accept();
        if (!s.ok()) co_return -2;
        // k is a parameter, not a capture: this lambda object dies with the full expression,
        // while the coroutine it started runs on.
        conns.push_back(rt.spawn_task([](net::TcpStream st, int k) -> Task<std::size_t> {
          std::size_t echoed = 0;
          for (;;) {
            if (k == 0) {  // one connection on recv_buffer, the others on async_read
              Result<io::RecvBuffer> b = co_await st.async_recv_buffer();
              if (!b.ok() || b->empty()) co_return echoed;
              if (!(co_await st.async_write_all(b->data(), b->size())).ok()) co_return echoed;
              echoed += b->size();
            } else {
              char buf[64];
              Result<std::size_t> n = co_await st.async_read(buf, sizeof buf);
              if (!n.ok() || *n == 0) co_return echoed;
              if (!(co_await st.async_write_all(buf, *n)).ok()) co_return echoed;
              echoed += *n;
            }
          }
        }(std::move(*s), k)));
      }
      int total = 0;
      for (auto& h : conns) total += static_cast<int>(*co_await h);
      co_return total;
    });
    std::vector<JoinHandle<void>> clients;
    seen->assign(3, "");
    for (int k = 0; k < 3; ++k) {
      clients.push_back(rt.spawn_task([&, k]() -> Task<> {
        EXPECT_TRUE(Net().enter("c" + std::to_string(k)).ok());
        (void)co_await listening.async_wait();
        Result<net::TcpStream> s = co_await net::TcpStream::async_connect(to);
        EXPECT_TRUE(s.ok());
        if (!s.ok()) co_return;
        // The connect ran on a fiber of its own, on the task's host.
        const std::string local = s->local_address()->to_string();
        const std::string host = Net().current_host().address.to_string();
        EXPECT_EQ(local.substr(0, local.find(':')), host.substr(0, host.find(':')));
        (*seen)[k] = local;
        for (int i = 0; i < 20; ++i) {
          const std::string msg = std::to_string(k) + ":" + std::to_string(i) + ";";
          EXPECT_TRUE((co_await s->async_write_all(msg.data(), msg.size())).ok());
          std::string back(msg.size(), '\0');
          EXPECT_TRUE((co_await s->async_read_exact(back.data(), back.size())).ok());
          EXPECT_EQ(back, msg);
        }
        EXPECT_TRUE(s->shutdown_write().ok());
      }));
    }
    for (auto& h : clients) EXPECT_TRUE(h.join().ok());
    Result<int> echoed = server.join();
    ASSERT_TRUE(echoed.ok());
    int expected = 0;
    for (int k = 0; k < 3; ++k) {
      for (int i = 0; i < 20; ++i) {
        expected += static_cast<int>((std::to_string(k) + ":" + std::to_string(i) + ";").size());
      }
    }
    EXPECT_EQ(*echoed, expected);
    EXPECT_GT(Net().stats().lost, 0u);
  });
  return rt.simulation()->trace_hash;
}

// Tasks on the simulated network: their calls run on fibers of their own, on the task's host,
// and a seed replays to the same trace as fibers' calls do.
TEST(SimNetwork, TasksServeAndConnectAndReplayToTheSameTrace) {
  std::vector<std::string> a, b, c;
  const std::uint64_t h1 = TaskEcho(31, &a);
  const std::uint64_t h2 = TaskEcho(31, &b);
  const std::uint64_t h3 = TaskEcho(32, &c);
  EXPECT_EQ(h1, h2);
  EXPECT_NE(h1, h3);
  EXPECT_EQ(a, b);
}

// A task's calls on a simulated socket keep their deadlines, cancellation and errors, and a
// close from another task ends them.
TEST(SimNetwork, TaskCallsEndByDeadlineCancelAndClose) {
  Runtime rt(Sim(33));
  rt.block_on([&] {
    Pair p = Connected();
    auto h = rt.spawn_task([&]() -> Task<> {
      char c;
      EXPECT_EQ((co_await p.server.async_read(&c, 1, {.deadline = SyncClock::now() + 1h})).error(),
                std::errc::timed_out);
      CancellationSource src;
      src.cancel();
      const CancellationToken tok = src.token();
      EXPECT_EQ((co_await p.server.async_read(&c, 1, {.cancel = &tok})).error(),
                std::errc::operation_canceled);
      EXPECT_EQ((co_await p.server.async_read(nullptr, 5)).error(), std::errc::invalid_argument);
      Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(7200));
      EXPECT_TRUE(l.ok());
      if (!l.ok()) co_return;
      // A refused connect, as a fiber's.
      Result<net::TcpStream> refused =
          co_await net::TcpStream::async_connect(*net::SocketAddress::parse("127.0.0.1:7201"));
      EXPECT_EQ(refused.error(), std::errc::connection_refused);
      // A listener closed by another task while this one waits in accept.
      auto closer = rt.spawn_task([&]() -> Task<> {
        co_await this_task::sleep_for(1ms);
        EXPECT_TRUE(l->close().ok());
      });
      EXPECT_EQ((co_await l->async_accept()).error(), std::errc::operation_canceled);
      (void)co_await closer;
    });
    EXPECT_TRUE(h.join().ok());
  });
}

// A close from a fiber while a task's read or write on the socket waits to run (a task's call
// runs on a fiber of its own, which the seeded scheduler may start after others), the number
// taken at once by a newly accepted connection: the task's call never reaches that connection
// (no bytes read from it, none written to it); it ends with operation_canceled (or
// bad_file_descriptor, when the close came before the call was asked for), across seeds.
TEST(SimNetwork, ATasksCallNeverReachesTheSocketThatTakesAClosedNumber) {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    for (const bool write : {false, true}) {
      Runtime rt(Sim(seed));
      rt.block_on([&] {
        Pair p = Connected();
        Result<net::TcpListener> l2 = net::TcpListener::bind(net::SocketAddress::ipv4_loopback(0));
        ASSERT_TRUE(l2.ok());
        Result<net::TcpStream> c2 = net::TcpStream::connect(*l2->local_address());
        ASSERT_TRUE(c2.ok());
        ASSERT_TRUE(c2->write_all("secret", 6).ok());
        ASSERT_TRUE(this_fiber::sleep_for(50ms).ok());  // virtual: the bytes have arrived
        const int fd = p.server.fd();
        net::TcpStream taker;
        char buf[16] = {};
        JoinHandle<Result<std::size_t>> h = rt.spawn_task([&]() -> Task<Result<std::size_t>> {
          JoinHandle<void> closer = rt.spawn([&] {
            EXPECT_TRUE(p.server.close().ok());
            Result<net::TcpStream> a = l2->accept();  // the lowest free number: fd
            ASSERT_TRUE(a.ok());
            EXPECT_EQ(a->fd(), fd);
            taker = std::move(*a);
          });
          Result<std::size_t> n = write ? co_await p.server.async_write("LEAK", 4)
                                        : co_await p.server.async_read(buf, sizeof buf);
          (void)co_await closer;
          co_return n;
        });
        Result<Result<std::size_t>> r = h.join();
        ASSERT_TRUE(r.ok());
        // A read can only have failed (nothing was sent to the closed socket); a write may have
        // gone out on it before the close, never on the new connection (checked below).
        if (!r->ok()) {
          EXPECT_TRUE(r->error() == std::errc::operation_canceled ||
                      r->error() == std::errc::bad_file_descriptor)
              << "seed " << seed << ": " << std::make_error_code(r->error()).message();
        } else {
          EXPECT_TRUE(write) << "seed " << seed << ": read " << **r << " bytes of the next socket";
        }
        // The new connection's bytes are all still its own, and nothing reached its peer.
        char got[6];
        ASSERT_TRUE(taker.read_exact(got, 6).ok());
        EXPECT_EQ(std::string(got, 6), "secret");
        char c;
        EXPECT_EQ(c2->read(&c, 1, {.deadline = SyncClock::now() + 1s}).error(),
                  std::errc::timed_out);
      });
    }
  }
}

// UDP between two hosts: datagrams keep their boundaries and senders, a short buffer truncates,
// connect filters the sources, and tasks use the same sockets; TCP and UDP ports are apart.
TEST(SimNetwork, DatagramsBetweenHostsWithTheirSendersAndBoundaries) {
  Runtime rt(Sim(41));
  rt.block_on([&] {
    Result<sim::Host> server_host = Net().host("server");
    ASSERT_TRUE(server_host.ok());
    const std::string ip = server_host->address.to_string();
    const net::SocketAddress to = *net::SocketAddress::parse(ip.substr(0, ip.find(':')) + ":5300");
    Event bound;
    auto server = OnHost(rt, "server", [&] {
      Result<net::UdpSocket> u = net::UdpSocket::bind(net::SocketAddress::ipv4_any(5300));
      ASSERT_TRUE(u.ok());
      // The same port for TCP is another port.
      EXPECT_TRUE(net::TcpListener::bind(net::SocketAddress::ipv4_any(5300)).ok());
      EXPECT_EQ(net::UdpSocket::bind(net::SocketAddress::ipv4_any(5300)).error(),
                std::errc::address_in_use);
      bound.set();
      for (int i = 0; i < 3; ++i) {  // echo three datagrams to their senders
        char buf[64];
        Result<net::UdpSocket::Datagram> d = u->recv_from(buf, sizeof buf);
        ASSERT_TRUE(d.ok());
        EXPECT_FALSE(d->truncated);
        ASSERT_TRUE(u->send_to(buf, d->size, d->from).ok());
      }
      char small[4];
      Result<net::UdpSocket::Datagram> d = u->recv_from(small, sizeof small);
      ASSERT_TRUE(d.ok());
      EXPECT_TRUE(d->truncated);  // "truncate me": the rest is lost
      EXPECT_EQ(std::string(small, 4), "trun");
    });
    auto client = OnHost(rt, "client", [&] {
      ASSERT_TRUE(bound.wait().ok());
      Result<net::UdpSocket> u = net::UdpSocket::open();
      ASSERT_TRUE(u.ok());
      for (const char* m : {"one", "two", "three"}) {
        ASSERT_EQ(*u->send_to(m, std::strlen(m), to), std::strlen(m));
      }
      std::vector<std::string> back;
      for (int i = 0; i < 3; ++i) {
        char buf[64];
        Result<net::UdpSocket::Datagram> d = u->recv_from(buf, sizeof buf);
        ASSERT_TRUE(d.ok());
        EXPECT_EQ(d->from.to_string(), to.to_string());
        back.emplace_back(buf, d->size);
      }
      std::sort(back.begin(), back.end());  // latencies differ: they may come back in any order
      EXPECT_EQ(back, (std::vector<std::string>{"one", "three", "two"}));
      ASSERT_TRUE(u->send_to("truncate me", 11, to).ok());
      // Its own address: this host's, an ephemeral port.
      EXPECT_EQ(u->local_address()->port() >= 32768, true);
    });
    EXPECT_TRUE(client.join().ok());
    EXPECT_TRUE(server.join().ok());
    EXPECT_EQ(Net().stats().datagrams, 7u);
    EXPECT_EQ(Net().stats().datagrams_dropped, 0u);

    // Connected: send without an address, and only the peer's datagrams are taken.
    Result<net::UdpSocket> a = net::UdpSocket::bind(net::SocketAddress::ipv4_loopback(0));
    Result<net::UdpSocket> b = net::UdpSocket::bind(net::SocketAddress::ipv4_loopback(0));
    Result<net::UdpSocket> stranger = net::UdpSocket::open();
    ASSERT_TRUE(a.ok() && b.ok() && stranger.ok());
    ASSERT_TRUE(a->connect(*b->local_address()).ok());
    ASSERT_TRUE(b->connect(*a->local_address()).ok());
    ASSERT_TRUE(stranger->send_to("noise", 5, *a->local_address()).ok());
    ASSERT_TRUE(b->send("hi", 2).ok());
    char buf[8];
    EXPECT_EQ(*a->recv(buf, sizeof buf), 2u);  // b's, not the stranger's
    EXPECT_EQ(std::string(buf, 2), "hi");
    EXPECT_EQ(a->recv(buf, sizeof buf, {.deadline = SyncClock::now() + 1s}).error(),
              std::errc::timed_out);
    Result<net::UdpSocket> lone = net::UdpSocket::open();
    ASSERT_TRUE(lone.ok());
    EXPECT_EQ(lone->send("x", 1).error(), std::errc::destination_address_required);
    EXPECT_EQ(lone->send_to(buf, 70000, *b->local_address()).error(), std::errc::message_size);
    // A close from another fiber ends a receive that waits.
    auto waiter = rt.spawn([&] {
      char c;
      EXPECT_EQ(lone->recv_from(&c, 1).error(), std::errc::operation_canceled);
    });
    ASSERT_TRUE(this_fiber::sleep_for(1ms).ok());
    ASSERT_TRUE(io::close(lone->release()).ok());
    EXPECT_TRUE(waiter.join().ok());

    // A task's forms on the same sockets.
    auto h = rt.spawn_task([&]() -> Task<std::string> {
      EXPECT_TRUE((co_await b->async_send("task", 4)).ok());
      char got[8];
      Result<net::UdpSocket::Datagram> d = co_await a->async_recv_from(got, sizeof got);
      if (!d.ok()) co_return "";
      EXPECT_EQ(d->from.to_string(), b->local_address()->to_string());
      co_return std::string(got, d->size);
    });
    EXPECT_EQ(*h.join(), "task");
  });
}

// Datagrams are lost (no retransmission), dropped across a partition, and dropped when nobody
// is bound at the address; nobody is told. The same seed gives the same losses.
std::uint64_t LossyDatagrams(std::uint64_t seed, std::uint64_t* received) {
  Runtime rt(Sim(seed));
  rt.block_on([&] {
    sim::NetworkOptions o;
    o.loss = 0.3;
    ASSERT_TRUE(Net().configure(o).ok());
    ASSERT_TRUE(Net().host("far").ok());
    Result<net::UdpSocket> rx = net::UdpSocket::bind(net::SocketAddress::ipv4_any(5400));
    ASSERT_TRUE(rx.ok());
    const std::string ip = Net().current_host().address.to_string();
    const net::SocketAddress to = *net::SocketAddress::parse(ip.substr(0, ip.find(':')) + ":5400");
    const net::SocketAddress nobody =
        *net::SocketAddress::parse(ip.substr(0, ip.find(':')) + ":5401");
    auto sender = OnHost(rt, "far", [&] {
      Result<net::UdpSocket> tx = net::UdpSocket::open();
      ASSERT_TRUE(tx.ok());
      for (int i = 0; i < 100; ++i) ASSERT_TRUE(tx->send_to(&i, sizeof i, to).ok());
      ASSERT_TRUE(tx->send_to("x", 1, nobody).ok());  // dropped: no socket there
      ASSERT_TRUE(Net().partition("far", "main").ok());
      ASSERT_TRUE(tx->send_to("y", 1, to).ok());  // dropped: cut off
      Net().heal_all();
    });
    ASSERT_TRUE(sender.join().ok());
    std::uint64_t got = 0;
    char buf[8];
    while (rx->recv_from(buf, sizeof buf, {.deadline = SyncClock::now() + 1s}).ok()) ++got;
    *received = got;
    const sim::NetworkStats st = Net().stats();
    EXPECT_EQ(st.datagrams, 102u);
    EXPECT_EQ(st.datagrams_dropped, 102u - got);
    EXPECT_GT(got, 40u);
    EXPECT_LT(got, 100u);
  });
  return rt.simulation()->trace_hash;
}

// Each datagram meets the network as it is when it arrives, not when it was sent: a connect
// made while a stranger's datagram is in flight filters it, a partition made meanwhile cuts it
// off, a socket bound at the address meanwhile receives it, and the receive queue's limit
// counts only datagrams that have arrived.
TEST(SimNetwork, ADatagramMeetsTheNetworkAsItIsWhenItArrives) {
  Runtime rt(Sim(43));
  rt.block_on([&] {
    sim::NetworkOptions o;
    o.min_latency = o.max_latency = 10ms;
    ASSERT_TRUE(Net().configure(o).ok());
    char buf[8];
    // A connect while a stranger's datagram is on its way.
    Result<net::UdpSocket> rx = net::UdpSocket::bind(net::SocketAddress::ipv4_loopback(0));
    Result<net::UdpSocket> peer = net::UdpSocket::bind(net::SocketAddress::ipv4_loopback(0));
    Result<net::UdpSocket> stranger = net::UdpSocket::open();
    ASSERT_TRUE(rx.ok() && peer.ok() && stranger.ok());
    ASSERT_TRUE(stranger->send_to("noise", 5, *rx->local_address()).ok());
    ASSERT_TRUE(this_fiber::sleep_for(1ms).ok());
    ASSERT_TRUE(rx->connect(*peer->local_address()).ok());
    EXPECT_EQ(rx->recv(buf, sizeof buf, {.deadline = SyncClock::now() + 1s}).error(),
              std::errc::timed_out);
    // A partition made while a datagram is on its way.
    ASSERT_TRUE(Net().host("far").ok());
    Result<net::UdpSocket> here = net::UdpSocket::bind(net::SocketAddress::ipv4_any(6100));
    ASSERT_TRUE(here.ok());
    const std::string ip = Net().current_host().address.to_string();
    const net::SocketAddress to = *net::SocketAddress::parse(ip.substr(0, ip.find(':')) + ":6100");
    auto sender = OnHost(rt, "far", [&] {
      Result<net::UdpSocket> tx = net::UdpSocket::open();
      ASSERT_TRUE(tx.ok());
      ASSERT_TRUE(tx->send_to("cut", 3, to).ok());
    });
    ASSERT_TRUE(sender.join().ok());
    ASSERT_TRUE(this_fiber::sleep_for(1ms).ok());
    ASSERT_TRUE(Net().partition("far", "main").ok());
    EXPECT_EQ(here->recv_from(buf, sizeof buf, {.deadline = SyncClock::now() + 1s}).error(),
              std::errc::timed_out);
    Net().heal_all();
    // A socket bound at the address after the datagram left takes it.
    Result<net::UdpSocket> tx = net::UdpSocket::open();
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(tx->send_to("late", 4, *net::SocketAddress::parse("127.0.0.1:6200")).ok());
    Result<net::UdpSocket> late = net::UdpSocket::bind(net::SocketAddress::ipv4_loopback(6200));
    ASSERT_TRUE(late.ok());
    Result<net::UdpSocket::Datagram> d = late->recv_from(buf, sizeof buf);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(std::string(buf, d->size), "late");
    // 300 in flight, read as they land: none dropped (only arrived ones count for the limit).
    const std::uint64_t dropped = Net().stats().datagrams_dropped;
    for (int i = 0; i < 200; ++i)
      ASSERT_TRUE(tx->send_to(&i, sizeof i, *late->local_address()).ok());
    ASSERT_TRUE(this_fiber::sleep_for(5ms).ok());
    for (int i = 0; i < 100; ++i)
      ASSERT_TRUE(tx->send_to(&i, sizeof i, *late->local_address()).ok());
    int got = 0;
    while (late->recv_from(buf, sizeof buf, {.deadline = SyncClock::now() + 1s}).ok()) ++got;
    EXPECT_EQ(got, 300);
    EXPECT_EQ(Net().stats().datagrams_dropped, dropped);
    // More than 256 unread at once: the rest are dropped.
    for (int i = 0; i < 300; ++i)
      ASSERT_TRUE(tx->send_to(&i, sizeof i, *late->local_address()).ok());
    ASSERT_TRUE(this_fiber::sleep_for(1s).ok());
    got = 0;
    while (late->recv_from(buf, sizeof buf, {.deadline = SyncClock::now() + 1s}).ok()) ++got;
    EXPECT_EQ(got, 256);
    EXPECT_EQ(Net().stats().datagrams_dropped, dropped + 44);
  });
}

// Addresses as Linux gives them: a socket bound to its host's address sends from it (also to
// loopback), one bound to loopback cannot reach another host, a connected socket's own address
// is the one its datagrams leave from; port 0 is no destination; the io calls move datagrams.
TEST(SimNetwork, DatagramAddressesAndTheIoCallsOnAUdpSocket) {
  Runtime rt(Sim(44));
  rt.block_on([&] {
    ASSERT_TRUE(Net().host("far").ok());
    const std::string host_ip = [] {
      const std::string a = Net().current_host().address.to_string();
      return a.substr(0, a.find(':'));
    }();
    Result<net::UdpSocket> server = net::UdpSocket::bind(net::SocketAddress::ipv4_any(7000));
    ASSERT_TRUE(server.ok());
    Result<net::UdpSocket> bound = net::UdpSocket::bind(*net::SocketAddress::parse(host_ip + ":0"));
    ASSERT_TRUE(bound.ok());
    ASSERT_TRUE(bound->send_to("a", 1, *net::SocketAddress::parse("127.0.0.1:7000")).ok());
    char buf[8];
    Result<net::UdpSocket::Datagram> d = server->recv_from(buf, sizeof buf);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->from.to_string(), bound->local_address()->to_string());  // not 127.0.0.1
    Result<net::UdpSocket> lo = net::UdpSocket::bind(net::SocketAddress::ipv4_loopback(0));
    ASSERT_TRUE(lo.ok());
    const std::string far_host = Net().host("far")->address.to_string();
    EXPECT_EQ(
        lo->send_to("b", 1,
                    *net::SocketAddress::parse(far_host.substr(0, far_host.find(':')) + ":7000"))
            .error(),
        std::errc::invalid_argument);  // from loopback to another host
    EXPECT_EQ(lo->send_to("c", 1, *net::SocketAddress::parse("127.0.0.1:0")).error(),
              std::errc::invalid_argument);
    Result<net::UdpSocket> c = net::UdpSocket::open();
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c->connect(*net::SocketAddress::parse("127.0.0.1:7000")).ok());
    EXPECT_EQ(c->local_address()->to_string().substr(0, 10), "127.0.0.1:");
    // io::write / io::read / io::recv on the fd: one datagram each.
    ASSERT_EQ(*io::write(c->fd(), "dgram", 5), 5u);
    d = server->recv_from(buf, sizeof buf);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(std::string(buf, d->size), "dgram");
    ASSERT_TRUE(server->send_to("back", 4, d->from).ok());
    ASSERT_EQ(*io::read(c->fd(), buf, sizeof buf), 4u);
    EXPECT_EQ(std::string(buf, 4), "back");
    EXPECT_EQ(io::accept(c->fd()).error(), std::errc::operation_not_supported);
    // A server bound to loopback answers a socket bound to its host's address (the same host).
    Result<net::UdpSocket> lo_server = net::UdpSocket::bind(net::SocketAddress::ipv4_loopback(0));
    ASSERT_TRUE(lo_server.ok());
    ASSERT_TRUE(bound->send_to("ping", 4, *lo_server->local_address()).ok());
    d = lo_server->recv_from(buf, sizeof buf);
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE(lo_server->send_to("pong", 4, d->from).ok());
    ASSERT_EQ(*bound->recv(buf, sizeof buf, {.deadline = SyncClock::now() + 1s}), 4u);
    // poll waits for a datagram still in flight, and says POLLIN once it has arrived.
    ASSERT_TRUE(bound->send_to("p", 1, *lo_server->local_address()).ok());
    EXPECT_EQ(*io::poll(lo_server->fd(), POLLIN, {.deadline = SyncClock::now() + 1s}),
              static_cast<std::uint32_t>(POLLIN));
  });
}

TEST(SimNetwork, DatagramsAreLostDroppedAcrossPartitionsAndReplay) {
  std::uint64_t a = 0, b = 0, c = 0;
  const std::uint64_t h1 = LossyDatagrams(51, &a);
  const std::uint64_t h2 = LossyDatagrams(51, &b);
  const std::uint64_t h3 = LossyDatagrams(52, &c);
  EXPECT_EQ(h1, h2);
  EXPECT_EQ(a, b);
  EXPECT_NE(h1, h3);
}

TEST(SimNetwork, APartitionHoldsWhatIsInFlightNotWhatHasArrived) {
  Runtime rt(Sim(13));
  rt.block_on([&] {
    ASSERT_TRUE(Net().host("far").ok());
    Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(80));
    ASSERT_TRUE(l.ok());
    net::TcpStream remote;
    auto client = OnHost(rt, "far", [&] {
      Result<net::TcpStream> s = net::TcpStream::connect("main", 80);
      ASSERT_TRUE(s.ok());
      remote = std::move(*s);
    });
    EXPECT_TRUE(client.join().ok());
    Result<net::TcpStream> s = l->accept();
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(remote.write_all("hello", 5).ok());
    ASSERT_TRUE(remote.shutdown_write().ok());
    ASSERT_TRUE(this_fiber::sleep_for(100ms).ok());  // the bytes and the FIN have arrived
    ASSERT_TRUE(Net().partition("far", "main").ok());
    char buf[16];
    EXPECT_EQ(*s->read(buf, sizeof buf, {.deadline = SyncClock::now() + 1s}), 5u);
    EXPECT_EQ(*s->read(buf, sizeof buf, {.deadline = SyncClock::now() + 1s}), 0u);
    Net().heal_all();
  });
}

// Segments held by a partition leave together at the heal: a thousand writes arrive one latency
// after it, not a thousand latencies.
TEST(SimNetwork, AHealDeliversTheHeldSegmentsOneLatencyLaterTogether) {
  Runtime rt(Sim(14));
  rt.block_on([&] {
    sim::NetworkOptions o;
    o.min_latency = o.max_latency = 10ms;
    ASSERT_TRUE(Net().configure(o).ok());
    ASSERT_TRUE(Net().host("far").ok());
    Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(80));
    ASSERT_TRUE(l.ok());
    SyncClock::time_point healed_at;
    auto client = OnHost(rt, "far", [&] {
      Result<net::TcpStream> s = net::TcpStream::connect("main", 80);
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE(Net().partition("far", "main").ok());
      for (int i = 0; i < 1000; ++i) ASSERT_TRUE(s->write_all("x", 1).ok());
      ASSERT_TRUE(this_fiber::sleep_for(1s).ok());
      healed_at = SyncClock::now();
      Net().heal_all();
      ASSERT_TRUE(s->shutdown_write().ok());
      char c;
      EXPECT_EQ(*s->read(&c, 1), 0u);
    });
    Result<net::TcpStream> s = l->accept();
    ASSERT_TRUE(s.ok());
    std::string got(1000, '\0');
    ASSERT_TRUE(s->read_exact(got.data(), got.size()).ok());
    EXPECT_EQ(got, std::string(1000, 'x'));
    // All of it within one latency of the heal (one by one, it would take 10 s).
    EXPECT_LE(SyncClock::now() - healed_at, 11ms);
    ASSERT_TRUE(s->close().ok());
    EXPECT_TRUE(client.join().ok());
  });
}

TEST(SimNetwork, AListenersAddressDecidesWhoReachesIt) {
  Runtime rt(Sim(15));
  rt.block_on([&] {
    // Loopback only: the host itself reaches it, another host is refused.
    Result<net::TcpListener> local =
        net::TcpListener::bind(*net::SocketAddress::parse("127.0.0.1:9000"));
    ASSERT_TRUE(local.ok());
    EXPECT_TRUE(net::TcpStream::connect("localhost", 9000).ok());
    auto other = OnHost(rt, "other", [&] {
      EXPECT_EQ(net::TcpStream::connect("main", 9000).error(), std::errc::connection_refused);
    });
    EXPECT_TRUE(other.join().ok());
    // The same port on the host's own address is another socket; on INADDR_ANY it overlaps.
    Result<net::TcpListener> own =
        net::TcpListener::bind(*net::SocketAddress::parse("10.0.0.1:9000"));
    EXPECT_TRUE(own.ok());
    EXPECT_EQ(net::TcpListener::bind(net::SocketAddress::ipv4_any(9000)).error(),
              std::errc::address_in_use);
    // A closed listener's port is free again.
    ASSERT_TRUE(local->close().ok());
    EXPECT_TRUE(net::TcpListener::bind(*net::SocketAddress::parse("127.0.0.1:9000")).ok());
  });
}

TEST(SimNetwork, ShutdownStillReturnsTheBytesThatHadArrivedAndPollSaysHangUp) {
  Runtime rt(Sim(16));
  rt.block_on([&] {
    Pair p = Connected();
    ASSERT_TRUE(p.client.write_all("kept", 4).ok());
    ASSERT_TRUE(this_fiber::sleep_for(10ms).ok());
    ASSERT_TRUE(p.server.shutdown().ok());
    char buf[8];
    EXPECT_EQ(*p.server.read(buf, sizeof buf), 4u);
    EXPECT_EQ(*p.server.read(buf, sizeof buf), 0u);
    const std::uint32_t ev = *io::poll(p.server.fd(), POLLIN);
    EXPECT_NE(ev & POLLHUP, 0u);
  });
}

TEST(SimNetwork, HugeOptionsAreRefusedNotOverflowed) {
  Runtime rt(Sim(17));
  rt.block_on([&] {
    sim::NetworkOptions o;
    o.connect_timeout = std::chrono::nanoseconds::max();
    EXPECT_EQ(Net().configure(o).error(), std::errc::invalid_argument);
    o = {};
    o.max_latency = std::chrono::nanoseconds::max();
    EXPECT_EQ(Net().configure(o).error(), std::errc::invalid_argument);
    o = {};
    o.retransmit = std::chrono::hours(2);
    EXPECT_EQ(Net().configure(o).error(), std::errc::invalid_argument);
    o = {};
    o.connect_timeout = std::chrono::hours(24);
    o.max_latency = std::chrono::hours(1);
    EXPECT_TRUE(Net().configure(o).ok());
    // The largest bounds work: a connect across a partition gives up after a day.
    ASSERT_TRUE(Net().host("far").ok());
    Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(80));
    ASSERT_TRUE(l.ok());
    ASSERT_TRUE(Net().partition("far", "main").ok());
    auto c = OnHost(rt, "far", [&] {
      EXPECT_EQ(net::TcpStream::connect("main", 80).error(), std::errc::timed_out);
    });
    EXPECT_TRUE(c.join().ok());
    EXPECT_EQ(Net().host("MAIN")->id, 0u);  // names are case-insensitive
  });
}

// A socket kept past its simulation is unknown in the next one (their fd bases differ), so a
// close there cannot take that simulation's socket.
TEST(SimNetwork, ASocketKeptPastItsSimulationIsUnknownInTheNext) {
  net::TcpStream stale;
  {
    Runtime a(Sim(106));
    a.block_on([&] {
      Pair p = Connected();
      stale = std::move(p.client);
    });
  }
  Runtime b(Sim(107));
  b.block_on([&] {
    Pair p = Connected();
    // A write of nothing touches no socket, in both forms; a write of something is refused.
    char c = 0;
    EXPECT_TRUE(stale.write_all(&c, 0).ok());
    Result<void> none = b.spawn_task([&]() -> Task<Result<void>> {
                           co_return co_await stale.async_write_all(&c, 0);
                         })
                            .join()
                            .value();
    EXPECT_TRUE(none.ok()) << none.error_code().message();
    EXPECT_EQ(stale.write_all(&c, 1).error(), std::errc::bad_file_descriptor);
    EXPECT_EQ(stale.close().error(), std::errc::bad_file_descriptor);
    EXPECT_TRUE(p.client.write_all("ok", 2).ok());
  });
}

// Many sockets: numbering stays cheap (the lowest free number, from a set).
TEST(SimNetwork, ThousandsOfConnectionsOnOneHost) {
  Runtime rt(Sim(18));
  rt.block_on([&] {
    ASSERT_TRUE(Net().set_fd_limit("main", 20000).ok());
    Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_loopback(0));
    ASSERT_TRUE(l.ok());
    const auto addr = *l->local_address();
    std::vector<net::TcpStream> all;
    for (int i = 0; i < 4000; ++i) {
      Result<net::TcpStream> c = net::TcpStream::connect(addr);
      ASSERT_TRUE(c.ok());
      Result<net::TcpStream> s = l->accept();
      ASSERT_TRUE(s.ok());
      all.push_back(std::move(*c));
      all.push_back(std::move(*s));
    }
    EXPECT_EQ(*Net().open_fds("main"), 8001);
    const int reused = all[10].fd();
    ASSERT_TRUE(all[10].close().ok());
    Result<net::TcpStream> again = net::TcpStream::connect(addr);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->fd(), reused);  // the lowest free number
  });
}

// A connect given up before its SYN-ACK (the caller's deadline) and then closed never completes
// the handshake: the listener never hands it out.
TEST(SimNetwork, AConnectAbandonedMidHandshakeIsNeverAccepted) {
  Runtime rt(Sim(19));
  rt.block_on([&] {
    sim::NetworkOptions o;
    o.min_latency = o.max_latency = 10ms;
    ASSERT_TRUE(Net().configure(o).ok());
    Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(80));
    ASSERT_TRUE(l.ok());
    // 0.0.0.0 is this host, as on Linux: the address getsockname gives a wildcard listener.
    EXPECT_EQ(
        net::TcpStream::connect(*l->local_address(), {.deadline = SyncClock::now() + 5ms}).error(),
        std::errc::timed_out);  // and the stream is closed as connect returns
    EXPECT_EQ(l->accept({.deadline = SyncClock::now() + 1s}).error(), std::errc::timed_out);
    Result<net::TcpStream> c = net::TcpStream::connect(*l->local_address());
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(l->accept().ok());
  });
}

}  // namespace
}  // namespace weft
