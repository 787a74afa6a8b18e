// bench/weft_task_workloads.cc: the standard workloads of ../shared/WORKLOADS.md that tasks
// change, on weft's stackless tasks (scheduler/task.h) instead of fibers: the runtime
// "weft_task" in bench/run_workloads.sh, beside "weft" (fibers), in the same JSON lines
// (bench/workload_common.h). W2: a root task spawns 100,000 empty tasks and joins each; W3: two
// tasks bounce a message over two capacity-1 channels; W6: loopback TCP echo with a task per
// connection (msgs_per_s and the round trips' percentiles); W8: 100,000 tasks parked on one
// event, then released (release_ms, rss_kb_per_task); W9: 10,000 connections, a task each,
// echoing through lent buffers (msgs_per_s, rss_kb_per_conn).
//
//   ./bazelw run -c opt //bench:weft_task_workloads -- --only W2,W3,W6,W8,W9

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "weft/api/weft.h"
#include "weft/bench/workload_common.h"

namespace {

using namespace weft;
using bench::Clock;
using bench::Ms;
using bench::Options;
using bench::Repeat;
using bench::RssKb;

void Emit(const char* workload, long n, unsigned workers, double ns_per_op,
          const std::vector<double>& samples, const std::string& extra = "") {
  bench::Emit("weft_task", workload, n, workers, ns_per_op, samples, extra);
}

Task<> Empty() { co_return; }

// ---- W2: a root task spawns 100,000 empty tasks, then joins every one -------------------------
void W2(const Options& o, unsigned workers) {
  constexpr long kN = 100000;
  Runtime rt({.workers = workers});
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    (void)
        rt.spawn_task([&]() -> Task<> {
            std::vector<JoinHandle<void>> hs;
            hs.reserve(kN);
            for (long i = 0; i < kN; ++i) hs.push_back(rt.spawn_task(Empty()));
            for (auto& h : hs) (void)co_await h;
          }).join();
    return Ms(Clock::now() - start);
  });
  double wall = bench::Median(s);
  Emit("spawn_join", kN, rt.workers(), wall * 1e6 / kN, s);
}

// ---- W3: two tasks bounce a message over two capacity-1 channels ------------------------------
void W3(const Options& o, unsigned workers) {
  constexpr long kRounds = 1000000;
  Runtime rt({.workers = workers});
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    Channel<int> ping(1), pong(1);
    auto echo = rt.spawn_task([&]() -> Task<> {
      for (long i = 0; i < kRounds; ++i)
        (void)co_await pong.async_send(*co_await ping.async_recv());
    });
    auto main = rt.spawn_task([&]() -> Task<> {
      for (long i = 0; i < kRounds; ++i) {
        (void)co_await ping.async_send(static_cast<int>(i));
        (void)co_await pong.async_recv();
      }
    });
    (void)main.join();
    (void)echo.join();
    return Ms(Clock::now() - start);
  });
  double wall = bench::Median(s);
  Emit("channel_pingpong", kRounds, rt.workers(), wall * 1e6 / kRounds, s);
}

// ---- W8: 100,000 tasks parked on one event at once, then released -----------------------------
void W8(const Options& o, unsigned workers) {
  constexpr long kN = 100000;
  Runtime rt({.workers = workers});
  std::vector<double> rss_per_task;
  auto s = Repeat(o, [&] {
    return *rt.spawn_task([&]() -> Task<double> {
                Event go;
                WaitGroup parked;
                (void)parked.add(kN);
                long rss0 = RssKb();
                std::vector<JoinHandle<void>> hs;
                hs.reserve(kN);
                for (long i = 0; i < kN; ++i) {
                  hs.push_back(rt.spawn_task([&]() -> Task<> {
                    parked.done();
                    (void)co_await go.async_wait();
                  }));
                }
                (void)co_await parked.async_wait();
                long rss1 = RssKb();
                auto release = Clock::now();
                go.set();
                for (auto& h : hs) (void)co_await h;
                auto end = Clock::now();
                rss_per_task.push_back(static_cast<double>(rss1 - rss0) / kN);
                co_return Ms(end - release);
              }).join();
  });
  // RSS per task from the first (warm-up) run: later runs reuse the memory it left resident
  // (stacks and records), so their deltas show only what was not kept.
  bench::EmitParkMany("weft_task", rt.workers(), kN, s, rss_per_task);
}

// ---- W6: loopback TCP echo, 100 connections x 1,000 round trips of 64 bytes, a task each ------
Task<> Echo(net::TcpStream st) {
  char buf[64 * 4];
  for (;;) {
    auto n = co_await st.async_read(buf, sizeof buf);
    if (!n.ok() || *n == 0 || !(co_await st.async_write_all(buf, *n)).ok()) co_return;
  }
}

void W6(const Options& o, unsigned workers) {
  constexpr int kConns = 100, kTrips = 1000, kSize = 64;
  Runtime rt({.workers = workers});
  std::vector<bench::Percentiles> latency;  // per run, the warm-up first
  auto s = Repeat(o, [&] {
    std::vector<bench::LatencyHistogram> trips(kConns);  // each client's round trips (untimed)
    auto start = Clock::now();
    auto listener = net::TcpListener::bind(net::SocketAddress::ipv4_loopback(0));
    if (!listener.ok()) std::exit(1);
    net::SocketAddress addr = *listener->local_address();
    auto server = rt.spawn_task([&]() -> Task<> {
      std::vector<JoinHandle<void>> conns;
      for (int c = 0; c < kConns; ++c) {
        auto conn = co_await listener->async_accept();
        if (!conn.ok()) co_return;
        (void)conn->set_nodelay(true);
        conns.push_back(rt.spawn_task(Echo(std::move(*conn))));
      }
      for (auto& h : conns) (void)co_await h;
    });
    std::atomic<long> delivered{0};
    std::vector<JoinHandle<void>> clients;
    for (int c = 0; c < kConns; ++c) {
      clients.push_back(rt.spawn_task([&, c]() -> Task<> {
        auto st = co_await net::TcpStream::async_connect(addr);
        if (!st.ok()) co_return;
        (void)st->set_nodelay(true);
        char out[kSize] = {}, in[kSize];
        for (int i = 0; i < kTrips; ++i) {
          std::memcpy(out, &i, sizeof i);
          const auto sent = Clock::now();
          if (!(co_await st->async_write_all(out, kSize)).ok() ||
              !(co_await st->async_read_exact(in, kSize)).ok()) {
            co_return;
          }
          trips[c].record(static_cast<std::uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - sent).count()));
          if (std::memcmp(in, out, kSize) != 0) co_return;
          delivered.fetch_add(1, std::memory_order_relaxed);
        }
      }));
    }
    for (auto& h : clients) (void)h.join();
    bench::LatencyHistogram all;
    for (const auto& t : trips) all.merge(t);
    latency.push_back(bench::PercentilesOf(all));
    (void)server.join();
    if (delivered.load() != long{kConns} * kTrips) {
      std::fprintf(stderr, "W6: lost messages\n");
      std::exit(1);
    }
    return Ms(Clock::now() - start);
  });
  bench::EmitTcpEcho("weft_task", rt.workers(), long{kConns} * kTrips, s, latency);
}

// ---- W9: 10,000 connections, clients in a second process (bench/w9_client), a task each ------
// Each task echoes with async_recv_buffer: on io_uring the kernel picks a buffer from the
// worker's ring when data arrives, so an idle connection holds its task and no buffer.
void W9(const Options& o, unsigned workers) {
  const int conns = bench::W9Conns();
  const long messages = static_cast<long>(conns) * bench::kW9Trips;
  Runtime rt({.workers = workers});
  std::vector<double> rss_per_conn;
  std::vector<bench::Percentiles> latency;  // per run, the warm-up first
  auto s = Repeat(o, [&] {
    auto listener = net::TcpListener::bind(net::SocketAddress::ipv4_loopback(0));
    if (!listener.ok()) {
      std::fprintf(stderr, "W9: cannot listen\n");
      std::exit(1);
    }
    const long rss0 = RssKb();
    std::atomic<int> accepted{0};
    auto server = rt.spawn_task([&]() -> Task<> {
      std::vector<JoinHandle<void>> echoers;
      echoers.reserve(static_cast<std::size_t>(conns));
      for (int c = 0; c < conns; ++c) {
        auto conn = co_await listener->async_accept();
        if (!conn.ok()) co_return;
        (void)conn->set_nodelay(true);
        echoers.push_back(rt.spawn_task([&, st = std::move(*conn)]() mutable -> Task<> {
          accepted.fetch_add(1, std::memory_order_relaxed);
          for (;;) {
            auto b = co_await st.async_recv_buffer();
            if (!b.ok() || b->empty() ||
                !(co_await st.async_write_all(b->data(), b->size())).ok()) {
              co_return;
            }
          }
        }));
      }
      for (auto& h : echoers) (void)co_await h;
    });
    bench::W9Client client(listener->local_address()->port(), conns);
    std::string line = client.ReadLine();
    if (line != "connected") {
      std::fprintf(stderr, "W9: the client did not connect (\"%s\")\n", line.c_str());
      std::exit(1);
    }
    while (accepted.load(std::memory_order_relaxed) < conns) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // Every echoer parked in its first receive: its frames are made after it counted itself,
    // so the RSS is read once it stops growing (three readings 10 ms apart, equal).
    long rss = RssKb();
    for (int same = 0; same < 2;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const long now = RssKb();
      same = now == rss ? same + 1 : 0;
      rss = now;
    }
    rss_per_conn.push_back(static_cast<double>(rss - rss0) / conns);
    client.WriteLine("go");
    line = client.ReadLine();
    bench::Percentiles p;
    const double wall = bench::W9WallMs(line, messages, &p);
    latency.push_back(p);
    (void)server.join();  // the client's resets end every echoer
    return wall;
  });
  bench::EmitManyConnEcho("weft_task", rt.workers(), conns, s, rss_per_conn, latency);
}

}  // namespace

int main(int argc, char** argv) {
  bench::KeepFreedMemory();
  Options o;
  if (!bench::ParseOptions(argc, argv, &o, "weft's workloads on stackless tasks")) return 2;
  if (o.wants("W2")) W2(o, o.workers);
  if (o.wants("W3")) W3(o, o.workers);
  if (o.wants("W6")) W6(o, o.workers);
  if (o.wants("W8")) W8(o, o.workers);
  if (o.wants("W9")) W9(o, o.workers);
  return 0;
}
