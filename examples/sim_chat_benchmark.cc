// The chat example under simulation (examples/chat.h on the simulated network, api/sim.h): how
// many simulated seconds a wall-clock second runs, and how many seeds.
//   BM_SimulatedChat/N   the chat room on host "chat" and N clients on hosts of their own, for
//                        60 virtual seconds: each client sends a line every 100 ms (600 lines
//                        each) and reads every line of the room; latency 50-500 us, 1% loss.
//                        Counters: virtual_s_per_s (simulated seconds per wall second),
//                        lines_per_s (lines delivered to clients per wall second); items are
//                        seeds (one runtime each).
// Run with:
//   ./bazelw run -c opt //examples:sim_chat_benchmark -- --benchmark_format=json

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "weft/api/sim.h"
#include "weft/api/weft.h"
#include "weft/examples/chat.h"
#include "weft/examples/serve_connections.h"

namespace weft::examples {
namespace {

using namespace std::chrono_literals;

constexpr auto kRun = 60s;
constexpr auto kEvery = 100ms;

// OneSeed: returns the lines the clients received.
std::uint64_t OneSeed(std::uint64_t seed, int clients) {
  std::uint64_t delivered = 0;
  Runtime rt({.simulation = SimulationOptions{.seed = seed}});
  rt.block_on([&] {
    sim::Network& net = *sim::Network::current();
    sim::NetworkOptions o;
    o.loss = 0.01;
    (void)net.configure(o);
    ChatRoom room({});
    CancellationSource stop;
    const CancellationToken stop_token = stop.token();
    Event listening;
    auto server = rt.spawn([&] {
      (void)sim::Network::current()->enter("chat");
      Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_any(7001));
      if (!l.ok()) std::abort();
      listening.set();
      auto handler = [&room](net::TcpStream s, const CancellationToken& t) {
        room.serve(std::move(s), t);
      };
      (void)ServeConnections(nullptr, *l, stop_token, handler);
    });
    const auto end = SyncClock::now() + kRun;
    std::vector<JoinHandle<void>> hs;
    for (int k = 0; k < clients; ++k) {
      hs.push_back(rt.spawn([&, k] {
        (void)sim::Network::current()->enter("client" + std::to_string(k));
        (void)listening.wait();
        Result<net::TcpStream> s = net::TcpStream::connect("chat", 7001);
        if (!s.ok()) std::abort();
        TaskGroup<> reader;
        (void)reader.spawn([&] {
          char buf[4096];
          for (;;) {
            Result<std::size_t> n = s->read(buf, sizeof buf);
            if (!n.ok() || *n == 0) return;
            for (std::size_t i = 0; i < *n; ++i) delivered += buf[i] == '\n';
          }
        });
        const std::string line = "client " + std::to_string(k) + " says hello\n";
        while (SyncClock::now() < end) {
          if (!s->write_all(line.data(), line.size()).ok()) break;
          (void)this_fiber::sleep_for(kEvery);
        }
        (void)this_fiber::sleep_for(1s);  // the last lines arrive
        (void)s->shutdown();
        (void)reader.join_all();
      }));
    }
    for (auto& h : hs) (void)h.join();
    stop.cancel();
    (void)server.join();
  });
  return delivered;
}

void BM_SimulatedChat(benchmark::State& state) {
  const int clients = static_cast<int>(state.range(0));
  std::uint64_t seed = 0, lines = 0;
  for (auto _ : state) lines += OneSeed(++seed, clients);
  const double runs = static_cast<double>(state.iterations());
  state.counters["virtual_s_per_s"] = benchmark::Counter(
      runs * std::chrono::duration<double>(kRun).count(), benchmark::Counter::kIsRate);
  state.counters["lines_per_s"] =
      benchmark::Counter(static_cast<double>(lines), benchmark::Counter::kIsRate);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SimulatedChat)->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace weft::examples

BENCHMARK_MAIN();
