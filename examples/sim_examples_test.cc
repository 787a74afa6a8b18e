// examples/sim_examples_test.cc: the example servers' own code (the accept loop of
// serve_connections.h, the echo handler, the chat room) under a simulated runtime, with
// simulated clients on their own hosts, seeded latency and loss, partitions that heal and
// connections reset. Asserts exact delivery: every echo comes back byte for byte, and after a
// heal every chat client has every line, once, in each sender's order. And determinism: the same
// seed gives the same trace hash run after run and whatever worker count is asked for.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/sim.h"
#include "weft/api/weft.h"
#include "weft/base/stress_scale.h"
#include "weft/examples/chat.h"
#include "weft/examples/echo.h"
#include "weft/examples/serve_connections.h"

namespace weft::examples {
namespace {

using namespace std::chrono_literals;

RuntimeOptions Sim(std::uint64_t seed, unsigned workers) {
  return {.workers = workers, .simulation = SimulationOptions{.seed = seed}};
}

sim::Network& Net() { return *sim::Network::current(); }

// OnHost: runs body on a fiber of simulated host `host`.
template <typename F>
JoinHandle<void> OnHost(Runtime& rt, std::string host, F body) {
  return rt.spawn([host, body]() mutable {
    if (!Net().enter(host).ok()) std::abort();
    body();
  });
}

// Connect: to host:port, retrying (a refused or reset connect, while the server starts or the
// network misbehaves) every 100 ms of virtual time.
net::TcpStream Connect(const char* host, std::uint16_t port, int* attempts) {
  for (;;) {
    ++*attempts;
    Result<net::TcpStream> s = net::TcpStream::connect(host, port);
    if (s.ok()) return std::move(*s);
    (void)this_fiber::sleep_for(100ms);
  }
}

struct EchoOutcome {
  std::uint64_t trace_hash = 0;
  int round_trips = 0;  // exact ones
  int reconnects = 0;   // connects past each client's first
  sim::NetworkStats net;
};

// EchoUnderFaults: the echo server on host "server"; kClients clients on hosts of their own,
// each making kTrips round trips of a message of its own; a chaos fiber partitions two clients
// for a few virtual seconds and resets two others' connections. A round trip cut by a reset is
// made again on a new connection; every one that completes is compared byte for byte.
constexpr int kClients = 6, kTrips = 40;
void EchoBody(Runtime& rt, EchoOutcome& out) {
  {
    sim::NetworkOptions o;
    o.min_latency = 100us;
    o.max_latency = 3ms;
    o.loss = 0.05;
    o.reset = 0.002;
    EXPECT_TRUE(Net().configure(o).ok());
    CancellationSource stop;
    const CancellationToken stop_token = stop.token();
    Event listening;
    WaitGroup connected;
    EXPECT_TRUE(connected.add(kClients).ok());
    auto server = OnHost(rt, "server", [&] {
      Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(7000));
      ASSERT_TRUE(l.ok());
      listening.set();
      auto handler = &EchoConnection;
      (void)ServeConnections("sim echo", *l, stop_token, handler);
    });
    std::vector<JoinHandle<void>> clients;
    for (int k = 0; k < kClients; ++k) {
      clients.push_back(OnHost(rt, "client" + std::to_string(k), [&, k] {
        int attempts = 0;
        EXPECT_TRUE(listening.wait().ok());
        net::TcpStream s = Connect("server", 7000, &attempts);
        connected.done();
        for (int i = 0; i < kTrips;) {
          // Sizes from a few bytes to several segments' worth.
          std::string msg = "c" + std::to_string(k) + "#" + std::to_string(i) + ":";
          msg.append(static_cast<std::size_t>((i * 977 + k * 131) % 3000), 'a' + (i + k) % 26);
          std::string back(msg.size(), '\0');
          if (s.write_all(msg.data(), msg.size()).ok() &&
              s.read_exact(back.data(), back.size(), {.deadline = SyncClock::now() + 60s}).ok()) {
            ASSERT_EQ(back, msg);
            ++out.round_trips;
            ++i;
            continue;
          }
          s = Connect("server", 7000, &attempts);  // reset: the same trip again
        }
        out.reconnects += attempts - 1;
      }));
    }
    auto chaos = rt.spawn([&] {
      EXPECT_TRUE(connected.wait().ok());
      (void)this_fiber::sleep_for(5ms);
      EXPECT_TRUE(Net().partition("client1", "server").ok());
      EXPECT_TRUE(Net().partition("client2", "server").ok());
      (void)this_fiber::sleep_for(5ms);
      (void)Net().reset("client3", "server");  // (0 if a seeded reset just broke it)
      (void)this_fiber::sleep_for(5ms);
      (void)Net().reset("client4", "server");
      (void)this_fiber::sleep_for(3s);
      EXPECT_TRUE(Net().heal("client1", "server").ok());
      (void)this_fiber::sleep_for(2s);
      Net().heal_all();
    });
    for (auto& c : clients) EXPECT_TRUE(c.join().ok());
    EXPECT_TRUE(chaos.join().ok());
    stop.cancel();
    EXPECT_TRUE(server.join().ok());
    out.net = Net().stats();
  }
}

EchoOutcome EchoUnderFaults(std::uint64_t seed, unsigned workers) {
  EchoOutcome out;
  Runtime rt(Sim(seed, workers));
  rt.block_on([&] { EchoBody(rt, out); });
  out.trace_hash = rt.simulation()->trace_hash;
  return out;
}

TEST(SimulatedEchoServer, EveryRoundTripIsExactThroughPartitionsLossAndResets) {
  const EchoOutcome a = EchoUnderFaults(2026, 1);
  EXPECT_EQ(a.round_trips, kClients * kTrips);
  EXPECT_GE(a.net.resets, 2u);  // the chaos fiber's two at least
  EXPECT_GE(a.reconnects, 2);
  EXPECT_GT(a.net.lost, 0u);
}

TEST(SimulatedEchoServer, TheSameSeedGivesTheSameTraceRunAfterRunAndWhateverTheWorkers) {
  const EchoOutcome a = EchoUnderFaults(7, 1);
  const EchoOutcome b = EchoUnderFaults(7, 1);
  const EchoOutcome c = EchoUnderFaults(7, 4);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_EQ(a.trace_hash, c.trace_hash);
  EXPECT_EQ(a.net.segments, c.net.segments);
  EXPECT_EQ(a.net.resets, c.net.resets);
  EXPECT_NE(a.trace_hash, EchoUnderFaults(8, 1).trace_hash);
}

TEST(SimulatedEchoServer, ManySeedsAllDeliverExactly) {
  const int seeds = 8 * testing::StressScale();
  SimExploreResult r = sim_explore(100, static_cast<std::size_t>(seeds), [](Runtime& rt) {
    EchoOutcome out;
    EchoBody(rt, out);
    return out.round_trips == kClients * kTrips;
  });
  EXPECT_EQ(r.runs, static_cast<std::size_t>(seeds));
  EXPECT_TRUE(r.failing.empty());
}

// LineReader: lines from a stream.
class LineReader {
 public:
  explicit LineReader(net::TcpStream& s) : s_(s) {}
  Result<std::string> next(std::chrono::nanoseconds patience) {
    for (;;) {
      if (std::size_t nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      char tmp[512];
      Result<std::size_t> n = s_.read(tmp, sizeof tmp, {.deadline = SyncClock::now() + patience});
      if (!n.ok()) return n.error();
      if (*n == 0) return std::errc::connection_aborted;
      buf_.append(tmp, *n);
    }
  }

 private:
  net::TcpStream& s_;
  std::string buf_;
};

struct ChatOutcome {
  std::uint64_t trace_hash = 0;
  int exact_clients = 0;  // clients that got every line of a round, once, in order
  sim::NetworkStats net;
};

// ChatUnderFaults: the chat room on host "chat", four clients on hosts of their own. Round one:
// alice is cut off by a partition while everyone sends kLines lines; the partition heals two
// virtual seconds later. Round two: bob's connection is reset; he reconnects, and everyone
// sends kLines more. After each round every client must hold every line of the round exactly
// once, in each sender's order.
ChatOutcome ChatUnderFaults(std::uint64_t seed, unsigned workers) {
  constexpr int kLines = 10;
  const std::vector<std::string> names = {"alice", "bob", "carol", "dave"};
  const int n = static_cast<int>(names.size());
  ChatOutcome out;
  Runtime rt(Sim(seed, workers));
  rt.block_on([&] {
    sim::NetworkOptions o;
    o.max_latency = 2ms;
    o.loss = 0.05;
    EXPECT_TRUE(Net().configure(o).ok());
    ChatRoom room({});
    CancellationSource stop;
    const CancellationToken stop_token = stop.token();
    auto server = OnHost(rt, "chat", [&] {
      Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(7001));
      ASSERT_TRUE(l.ok());
      auto handler = [&room](net::TcpStream s, const CancellationToken& t) {
        room.serve(std::move(s), t);
      };
      (void)ServeConnections("sim chat", *l, stop_token, handler);
    });
    Barrier joined(static_cast<std::size_t>(n) + 1), round_done(static_cast<std::size_t>(n) + 1),
        rejoined(static_cast<std::size_t>(n) + 1);
    // Receive: a round's lines, n * kLines of them, checked: once each, in each sender's order.
    auto receive = [&](LineReader& in, const std::string& me) {
      std::map<std::string, int> next;  // sender -> next line number expected
      for (int got = 0; got < n * kLines; ++got) {
        Result<std::string> line = in.next(120s);
        ASSERT_TRUE(line.ok()) << me << " after " << got << " lines";
        const std::size_t sp = line->find(' ');
        ASSERT_NE(sp, std::string::npos) << *line;
        const std::string from = line->substr(0, sp);
        ASSERT_EQ(std::stoi(line->substr(sp + 1)), next[from]++) << me << " got " << *line;
      }
      for (const std::string& from : names) ASSERT_EQ(next[from], kLines) << me << " from " << from;
      ++out.exact_clients;
    };
    std::vector<JoinHandle<void>> clients;
    for (int k = 0; k < n; ++k) {
      clients.push_back(OnHost(rt, names[static_cast<std::size_t>(k)], [&, k] {
        const std::string& me = names[static_cast<std::size_t>(k)];
        int attempts = 0;
        net::TcpStream s = Connect("chat", 7001, &attempts);
        auto in = std::make_unique<LineReader>(s);
        ASSERT_EQ(in->next(60s)->substr(0, 8), "welcome ");
        (void)joined.arrive_and_wait();  // everyone is in the room; alice is cut off now
        (void)joined.arrive_and_wait();
        auto send = [&](int i) {
          const std::string line = me + " " + std::to_string(i) + "\n";
          ASSERT_TRUE(s.write_all(line.data(), line.size()).ok());
        };
        for (int i = 0; i < kLines; ++i) send(i);
        receive(*in, me);
        (void)round_done.arrive_and_wait();
        (void)round_done.arrive_and_wait();  // bob's connection is reset now
        if (me == "bob") {
          char c;
          Result<std::size_t> r = s.read(&c, 1, {.deadline = SyncClock::now() + 10s});
          EXPECT_EQ(r.error(), std::errc::connection_reset);
          s = Connect("chat", 7001, &attempts);
          in = std::make_unique<LineReader>(s);
          ASSERT_EQ(in->next(60s)->substr(0, 8), "welcome ");
        }
        (void)rejoined.arrive_and_wait();
        for (int i = 0; i < kLines; ++i) send(i);
        receive(*in, me);
      }));
    }
    (void)joined.arrive_and_wait();
    EXPECT_TRUE(Net().partition("alice", "chat").ok());
    (void)joined.arrive_and_wait();
    (void)this_fiber::sleep_for(2s);
    EXPECT_TRUE(Net().heal("alice", "chat").ok());
    (void)round_done.arrive_and_wait();
    EXPECT_EQ(*Net().reset("bob", "chat"), 1u);
    (void)round_done.arrive_and_wait();
    (void)rejoined.arrive_and_wait();
    for (auto& c : clients) EXPECT_TRUE(c.join().ok());
    stop.cancel();
    EXPECT_TRUE(server.join().ok());
    out.net = Net().stats();
  });
  out.trace_hash = rt.simulation()->trace_hash;
  return out;
}

TEST(SimulatedChatServer, EveryLineArrivesOnceInOrderAfterAHealAndAReset) {
  const ChatOutcome a = ChatUnderFaults(2026, 1);
  EXPECT_EQ(a.exact_clients, 8);  // four clients, two rounds
  EXPECT_GE(a.net.resets, 1u);
  EXPECT_EQ(a.net.connections, 5u);  // four, and bob's second
}

TEST(SimulatedChatServer, TheSameSeedGivesTheSameTraceRunAfterRunAndWhateverTheWorkers) {
  const ChatOutcome a = ChatUnderFaults(11, 1);
  const ChatOutcome b = ChatUnderFaults(11, 1);
  const ChatOutcome c = ChatUnderFaults(11, 2);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_EQ(a.trace_hash, c.trace_hash);
  EXPECT_EQ(a.exact_clients, 8);
  const int seeds = 6 * testing::StressScale();
  for (int s = 0; s < seeds; ++s) {
    EXPECT_EQ(ChatUnderFaults(200 + static_cast<std::uint64_t>(s), 1).exact_clients, 8)
        << "seed " << 200 + s;
  }
}

}  // namespace
}  // namespace weft::examples
