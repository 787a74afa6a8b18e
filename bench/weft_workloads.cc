// bench/weft_workloads.cc: the standard workloads W1..W10 of ../shared/WORKLOADS.md on
// weft's public API (api/weft.h), one JSON line per workload in the format of
// bench/workload_common.h. Each workload runs once as a warm-up, then --reps times (default 5); the
// line reports the median and the samples. Usage: weft_workloads [--reps N] [--workers N] [--only
// W1,W4,...]
//
//   ./bazelw run -c opt //bench:weft_workloads
//
// Extra fields: W4 adds "seq_ms" (sequential fib(30) in the same process) and "ns_per_task";
// W6 adds "msgs_per_s" and the round trips' "p50_us", "p99_us", "p999_us" (bench/latency.h; W9
// too); W8 adds "release_ms" (ns_per_op is then unused) and "rss_kb_per_task";
// W9 adds "msgs_per_s", "rss_kb_per_conn" (the first run's, as W8: later runs reuse its memory)
// and "conns"; W10 (file_read_4k, file_read_1m) adds "mib_per_s".

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
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
  bench::Emit("weft", workload, n, workers, ns_per_op, samples, extra);
}

// SpawnAllThenJoin: from a fiber of rt, spawns n fibers running f, then joins every one.
template <typename F>
void SpawnAllThenJoin(Runtime& rt, long n, const F& f) {
  std::vector<JoinHandle<void>> hs;
  hs.reserve(static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i) hs.push_back(rt.spawn(f));
  for (auto& h : hs) (void)h.join();
}

// ---- W1: two fibers on one worker alternately yield -------------------------------------------
void W1(const Options& o) {
  constexpr long kYields = 1000000;
  Runtime rt({.workers = 1});
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    rt.block_on([&] {
      auto a = rt.spawn([] {
        for (long i = 0; i < kYields; ++i) this_fiber::yield();
      });
      auto b = rt.spawn([] {
        for (long i = 0; i < kYields; ++i) this_fiber::yield();
      });
      (void)a.join();
      (void)b.join();
    });
    return Ms(Clock::now() - start);
  });
  double wall = bench::Median(s);
  Emit("yield_pingpong", kYields, 1, wall * 1e6 / (2.0 * kYields), s);
}

// ---- W2: a root fiber spawns 100,000 empty fibers, then joins every one ----------------------
void W2(const Options& o, unsigned workers) {
  constexpr long kN = 100000;
  Runtime rt({.workers = workers, .stack_size = 16 << 10});
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    rt.block_on([&] { SpawnAllThenJoin(rt, kN, [] {}); });
    return Ms(Clock::now() - start);
  });
  double wall = bench::Median(s);
  Emit("spawn_join", kN, rt.workers(), wall * 1e6 / kN, s);
}

// ---- W3: two fibers bounce a message over two capacity-1 channels -----------------------------
void W3(const Options& o, unsigned workers) {
  constexpr long kRounds = 1000000;
  Runtime rt({.workers = workers});
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    rt.block_on([&] {
      Channel<int> ping(1), pong(1);
      auto echo = rt.spawn([&] {
        for (long i = 0; i < kRounds; ++i) (void)pong.send(*ping.recv());
      });
      for (long i = 0; i < kRounds; ++i) {
        (void)ping.send(static_cast<int>(i));
        (void)pong.recv();
      }
      (void)echo.join();
    });
    return Ms(Clock::now() - start);
  });
  double wall = bench::Median(s);
  Emit("channel_pingpong", kRounds, rt.workers(), wall * 1e6 / kRounds, s);
}

// ---- W4: fork-join fib(30), a task per call ----------------------------------------------------
std::uint64_t Fib(ForkJoinWorker& w, int n) {
  if (n < 2) return static_cast<std::uint64_t>(n);
  auto a = w.spawn<Fib>(n - 1);
  std::uint64_t b = Fib(w, n - 2);
  return w.sync(a) + b;
}

void W4(const Options& o, unsigned workers) {
  Runtime rt({.workers = workers});
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    std::uint64_t r = rt.fork_join(Fib, bench::kFibN);
    double ms = Ms(Clock::now() - start);
    if (r != bench::kFibResult) {
      std::fprintf(stderr, "W4: wrong result\n");
      std::exit(1);
    }
    return ms;
  });
  bench::EmitFib("weft", o, rt.workers(), s);
}

// ---- W5: 10,000 fibers each sleep 1 ms ----------------------------------------------------------
void W5(const Options& o, unsigned workers) {
  constexpr long kN = 10000;
  Runtime rt({.workers = workers, .stack_size = 16 << 10});
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    rt.block_on([&] {
      SpawnAllThenJoin(rt, kN, [] { (void)this_fiber::sleep_for(std::chrono::milliseconds(1)); });
    });
    return Ms(Clock::now() - start);
  });
  double wall = bench::Median(s);
  Emit("sleep_fanout", kN, rt.workers(), wall * 1e6 / kN, s);
}

// EchoThroughBuffer: a connection's server fiber (W6, W9's plain variant): echoes through an
// N-byte buffer on its stack until the stream ends.
template <std::size_t N>
void EchoThroughBuffer(net::TcpStream& st) {
  char buf[N];
  for (;;) {
    auto n = st.read(buf, sizeof buf);
    if (!n.ok() || *n == 0 || !st.write_all(buf, *n).ok()) return;
  }
}

// ---- W6: loopback TCP echo, 100 connections x 1,000 round trips of 64 bytes ------------------
void W6(const Options& o, unsigned workers) {
  constexpr int kConns = 100, kTrips = 1000, kSize = 64;
  Runtime rt({.workers = workers});
  std::vector<bench::Percentiles> latency;  // per run, the warm-up first
  auto s = Repeat(o, [&] {
    std::vector<bench::LatencyHistogram> trips(kConns);  // each client's round trips (untimed)
    auto start = Clock::now();
    bool ok = rt.block_on([&] {
      auto listener = net::TcpListener::bind(net::SocketAddress::ipv4_loopback(0));
      if (!listener.ok()) return false;
      net::SocketAddress addr = *listener->local_address();
      auto server = rt.spawn([&] {
        std::vector<JoinHandle<void>> conns;
        for (int c = 0; c < kConns; ++c) {
          auto conn = listener->accept();
          if (!conn.ok()) return;
          (void)conn->set_nodelay(true);
          conns.push_back(
              rt.spawn([st = std::move(*conn)]() mutable { EchoThroughBuffer<kSize * 4>(st); }));
        }
        for (auto& h : conns) (void)h.join();
      });
      std::atomic<long> delivered{0};
      std::vector<JoinHandle<void>> clients;
      for (int c = 0; c < kConns; ++c) {
        clients.push_back(rt.spawn([&, c] {
          auto st = net::TcpStream::connect(addr);
          if (!st.ok()) return;
          (void)st->set_nodelay(true);
          char out[kSize] = {}, in[kSize];
          for (int i = 0; i < kTrips; ++i) {
            std::memcpy(out, &i, sizeof i);
            const auto sent = Clock::now();
            if (!st->write_all(out, kSize).ok() || !st->read_exact(in, kSize).ok()) return;
            trips[c].record(static_cast<std::uint64_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - sent).count()));
            if (std::memcmp(in, out, kSize) != 0) return;
            delivered.fetch_add(1, std::memory_order_relaxed);
          }
        }));
      }
      for (auto& h : clients) (void)h.join();
      bench::LatencyHistogram all;
      for (const auto& t : trips) all.merge(t);
      latency.push_back(bench::PercentilesOf(all));
      (void)server.join();
      return delivered.load() == long{kConns} * kTrips;
    });
    if (!ok) {
      std::fprintf(stderr, "W6: lost messages\n");
      std::exit(1);
    }
    return Ms(Clock::now() - start);
  });
  bench::EmitTcpEcho("weft", rt.workers(), long{kConns} * kTrips, s, latency);
}

// ---- W7: 1,000 fibers x 1,000 lock/increment/unlock on one mutex ------------------------------
void W7(const Options& o, unsigned workers) {
  constexpr long kFibers = 1000, kOps = 1000;
  Runtime rt({.workers = workers, .stack_size = 16 << 10});
  auto s = Repeat(o, [&] {
    Mutex m;
    long counter = 0;
    auto start = Clock::now();
    rt.block_on([&] {
      SpawnAllThenJoin(rt, kFibers, [&] {
        for (long k = 0; k < kOps; ++k) {
          (void)m.lock();
          ++counter;
          (void)m.unlock();
        }
      });
    });
    double ms = Ms(Clock::now() - start);
    if (counter != kFibers * kOps) {
      std::fprintf(stderr, "W7: lost increments\n");
      std::exit(1);
    }
    return ms;
  });
  double wall = bench::Median(s);
  Emit("mutex_contended", kFibers * kOps, rt.workers(), wall * 1e6 / (kFibers * kOps), s);
}

// ---- W8: 100,000 fibers parked on one event at once, then released ---------------------------
void W8(const Options& o, unsigned workers) {
  constexpr long kN = 100000;
  Runtime rt({.workers = workers, .stack_size = 16 << 10});
  std::vector<double> rss_per_task;
  auto s = Repeat(o, [&] {
    // A root fiber spawns them, waits until all are parked, then releases them (as a Go main
    // goroutine closing a channel would).
    return rt.block_on([&] {
      Event go;
      WaitGroup parked;
      (void)parked.add(kN);
      long rss0 = RssKb();
      std::vector<JoinHandle<void>> hs;
      hs.reserve(kN);
      for (long i = 0; i < kN; ++i) {
        hs.push_back(rt.spawn([&] {
          parked.done();
          (void)go.wait();
        }));
      }
      (void)parked.wait();
      long rss1 = RssKb();
      auto release = Clock::now();
      go.set();
      for (auto& h : hs) (void)h.join();
      auto end = Clock::now();
      rss_per_task.push_back(static_cast<double>(rss1 - rss0) / kN);
      return Ms(end - release);
    });
  });
  // RSS per task from the first (warm-up) run: later runs reuse the memory it left resident
  // (stacks and records), so their deltas show only what was not kept.
  bench::EmitParkMany("weft", rt.workers(), kN, s, rss_per_task);
}

// ---- W9: 10,000 connections, clients in a second process (bench/w9_client) -----------------
// One fiber per connection echoes with recv_buffer: on io_uring the kernel picks a buffer from
// the worker's ring when data arrives, so an idle connection holds no buffer, only its fiber
// (WEFT_W9_READ=plain: a 1 KiB buffer on the fiber's stack instead).
void W9(const Options& o, unsigned workers) {
  const int conns = bench::W9Conns();
  const long messages = static_cast<long>(conns) * bench::kW9Trips;
  // WEFT_W9_READ=plain: read into a 1 KiB buffer on each fiber's stack instead (the comparison
  // in docs/reactor.md).
  const char* read_env = std::getenv("WEFT_W9_READ");
  const bool plain = read_env != nullptr && std::string(read_env) == "plain";
  Runtime rt({.workers = workers, .stack_size = 16 << 10});
  std::vector<double> rss_per_conn;
  std::vector<bench::Percentiles> latency;  // per run, the warm-up first
  auto s = Repeat(o, [&] {
    return rt.block_on([&] {
      auto listener = net::TcpListener::bind(net::SocketAddress::ipv4_loopback(0));
      if (!listener.ok()) {
        std::fprintf(stderr, "W9: cannot listen\n");
        std::exit(1);
      }
      const long rss0 = RssKb();
      std::atomic<int> accepted{0};
      auto server = rt.spawn([&] {
        std::vector<JoinHandle<void>> echoers;
        echoers.reserve(static_cast<std::size_t>(conns));
        for (int c = 0; c < conns; ++c) {
          auto conn = listener->accept();
          if (!conn.ok()) return;
          (void)conn->set_nodelay(true);
          echoers.push_back(rt.spawn([st = std::move(*conn), &accepted, plain]() mutable {
            accepted.fetch_add(1, std::memory_order_relaxed);
            if (plain) return EchoThroughBuffer<1024>(st);  // a buffer on the fiber's stack
            for (;;) {
              auto b = st.recv_buffer();
              if (!b.ok() || b->empty() || !st.write_all(b->data(), b->size()).ok()) return;
            }
          }));
        }
        for (auto& h : echoers) (void)h.join();
      });
      std::string line;
      bench::W9Client client(listener->local_address()->port(), conns);
      call_blocking([&] { line = client.ReadLine(); });
      if (line != "connected") {
        std::fprintf(stderr, "W9: the client did not connect (\"%s\")\n", line.c_str());
        std::exit(1);
      }
      while (accepted.load(std::memory_order_relaxed) < conns) {
        (void)this_fiber::sleep_for(std::chrono::milliseconds(1));
      }
      (void)this_fiber::sleep_for(std::chrono::milliseconds(20));  // every echoer parked
      rss_per_conn.push_back(static_cast<double>(RssKb() - rss0) / conns);
      client.WriteLine("go");
      call_blocking([&] { line = client.ReadLine(); });
      bench::Percentiles p;
      const double wall = bench::W9WallMs(line, messages, &p);
      latency.push_back(p);
      (void)server.join();  // the client's resets end every echoer
      return wall;
    });
  });
  bench::EmitManyConnEcho("weft", rt.workers(), conns, s, rss_per_conn, latency);
}

// ---- W10: 16 fibers read a warm 1 GiB file, each its sixteenth, in 4 KiB and 1 MiB chunks -------
void W10(const Options& o, unsigned workers) {
  constexpr int kTasks = 16;
  const std::string path = bench::W10File();
  if (path.empty()) {
    std::fprintf(stderr, "W10: cannot make the file\n");
    std::exit(1);
  }
  Runtime rt({.workers = workers});
  for (std::size_t chunk : {std::size_t{4096}, std::size_t{1} << 20}) {
    auto s = Repeat(o, [&] {
      auto start = Clock::now();
      bool ok = rt.block_on([&] {
        auto f = fs::File::open(path);
        if (!f.ok()) return false;
        std::atomic<std::uint64_t> bytes{0};
        const std::uint64_t part = bench::kW10Bytes / kTasks;
        std::vector<JoinHandle<void>> hs;
        for (int k = 0; k < kTasks; ++k) {
          hs.push_back(rt.spawn([&, k] {
            std::vector<char> buf(chunk);
            std::uint64_t got = 0;
            for (std::uint64_t off = k * part; off < (k + 1) * part; off += chunk) {
              auto n = f->read_full_at(buf.data(), chunk, off);
              if (!n.ok() || *n != chunk) return;
              got += *n;
            }
            bytes.fetch_add(got, std::memory_order_relaxed);
          }));
        }
        for (auto& h : hs) (void)h.join();
        return bytes.load() == bench::kW10Bytes;
      });
      if (!ok) {
        std::fprintf(stderr, "W10: a read failed or came short\n");
        std::exit(1);
      }
      return Ms(Clock::now() - start);
    });
    const double wall = bench::Median(s);
    char extra[64];
    std::snprintf(extra, sizeof extra, ",\"mib_per_s\":%.0f",
                  static_cast<double>(bench::kW10Bytes >> 20) / (wall / 1000.0));
    const long reads = static_cast<long>(bench::kW10Bytes / chunk);
    Emit(chunk == 4096 ? "file_read_4k" : "file_read_1m", reads, rt.workers(), wall * 1e6 / reads,
         s, extra);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::KeepFreedMemory();
  Options o;
  if (!bench::ParseOptions(argc, argv, &o)) return 2;
  if (o.wants("W1")) W1(o);
  if (o.wants("W2")) W2(o, o.workers);
  if (o.wants("W3")) W3(o, o.workers);
  if (o.wants("W4")) W4(o, o.workers);
  if (o.wants("W5")) W5(o, o.workers);
  if (o.wants("W6")) W6(o, o.workers);
  if (o.wants("W7")) W7(o, o.workers);
  if (o.wants("W8")) W8(o, o.workers);
  if (o.wants("W9")) W9(o, o.workers);
  if (o.wants("W10")) W10(o, o.workers);
  return 0;
}
