// bench/peers/boost_fiber: the standard workloads of ../../../../shared/WORKLOADS.md written for
// Boost.Fiber (Debian's libboost-fiber-dev, 1.74), printing the same JSON lines as
// //bench:weft_workloads ("runtime":"boost_fiber"). Run through bench/run_workloads.sh, or:
//
//   ./bazelw run -c opt //bench/peers/boost_fiber:boost_fiber_workloads -- --reps 5 --workers 2
//
// M:N set-up: every worker thread (the main thread is one of them) installs
// algo::work_stealing(workers), Boost's work-stealing scheduler, with its default of spinning
// rather than sleeping when idle. The main thread's own fiber is the root task; Boost never
// migrates a thread's main fiber, so the root stays on the main thread.
//
// Where Boost.Fiber cannot express a workload exactly:
//   - Stacks: fixedsize_stack of 16 KiB (malloc'd, no guard page), the size weft uses for W2, W5,
//     W7 and W8.
//   - W3: buffered_channel needs a power-of-two capacity of at least 2, and one of its slots stays
//     empty, so buffered_channel(2) holds one message: capacity 1 as specified.
//   - W6 is not implemented: Boost.Fiber has no I/O integration; a socket call would block the
//     whole worker thread. The line is omitted (bench/run_workloads.sh prints a note).
//   - W4: the child fiber is launched with launch::dispatch (it runs at once, its parent queued),
//     which is what Boost's users pick for recursion: with the default launch::post, fib expands
//     breadth-first (every call's fiber queued before any runs: about 4 GB of stacks, seconds).
//   - W8: two variants (a "variant" field; bench/report.py headlines the faster):
//     "channel_close", the fibers park in pop() on one buffered_channel and the release is its
//     close(); and "condvar", they wait on a fibers::condition_variable under a fibers::mutex and
//     the release is one notify_all (each then re-acquires the mutex, one at a time). RSS per
//     task is measured on the first (the second reuses the first's freed stacks).

#include <atomic>
#include <boost/fiber/all.hpp>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "weft/bench/workload_common.h"

namespace {

using weft::bench::Clock;
using weft::bench::Ms;
using weft::bench::Options;
using weft::bench::Repeat;
namespace fibers = boost::fibers;

constexpr std::size_t kStack = 16 << 10;

fibers::fiber Spawn(auto&& f, fibers::launch policy = fibers::launch::post) {
  return fibers::fiber(policy, std::allocator_arg, fibers::fixedsize_stack(kStack),
                       std::forward<decltype(f)>(f));
}

// Spawns n fibers running f, then joins every one (W2, W5, W7).
template <typename F>
void SpawnAllThenJoin(long n, const F& f) {
  std::vector<fibers::fiber> fs;
  fs.reserve(static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i) fs.push_back(Spawn(f));
  for (auto& fb : fs) fb.join();
}

void Emit(const char* workload, long n, unsigned workers, double ns_per_op,
          const std::vector<double>& samples, const std::string& extra = "") {
  weft::bench::Emit("boost_fiber", workload, n, workers, ns_per_op, samples, extra);
}

// The worker threads of work_stealing. Boost lets a process install it once (all threads meet in
// a barrier inside its constructor), so the pool lives until main returns.
class Pool {
 public:
  explicit Pool(unsigned workers) : workers_(workers) {
    for (unsigned i = 1; i < workers; ++i) {
      threads_.emplace_back([this] {
        fibers::use_scheduling_algorithm<fibers::algo::work_stealing>(workers_);
        std::unique_lock<fibers::mutex> lock(mu_);
        stop_cv_.wait(lock, [&] { return stop_; });  // this thread's main fiber parks; others run
      });
    }
    fibers::use_scheduling_algorithm<fibers::algo::work_stealing>(workers_);
  }
  ~Pool() {
    {
      std::lock_guard<fibers::mutex> lock(mu_);
      stop_ = true;
    }
    stop_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  unsigned workers() const { return workers_; }

 private:
  unsigned workers_;
  std::vector<std::thread> threads_;
  fibers::mutex mu_;
  fibers::condition_variable stop_cv_;
  bool stop_ = false;
};

// ---- W1: two fibers on ONE thread alternately yield (Boost's default round_robin) ---------------
void W1(const Options& o) {
  constexpr long kYields = 1000000;
  std::vector<double> s;
  // A fresh thread: its scheduler is round_robin, independent of the work-stealing pool.
  std::thread([&] {
    s = Repeat(o, [&] {
      auto start = Clock::now();
      auto body = [] {
        for (long i = 0; i < kYields; ++i) boost::this_fiber::yield();
      };
      fibers::fiber a = Spawn(body), b = Spawn(body);
      a.join();
      b.join();
      return Ms(Clock::now() - start);
    });
  }).join();
  Emit("yield_pingpong", kYields, 1, weft::bench::Median(s) * 1e6 / (2.0 * kYields), s);
}

// ---- W2: the root spawns 100,000 empty fibers, then joins every one ---------------------------
void W2(const Options& o, Pool& pool) {
  constexpr long kN = 100000;
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    SpawnAllThenJoin(kN, [] {});
    return Ms(Clock::now() - start);
  });
  Emit("spawn_join", kN, pool.workers(), weft::bench::Median(s) * 1e6 / kN, s);
}

// ---- W3: two fibers bounce a message over two capacity-1 channels ----------------------------
void W3(const Options& o, Pool& pool) {
  constexpr long kRounds = 1000000;
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    fibers::buffered_channel<long> ping(2), pong(2);  // capacity 2 holds one message
    fibers::fiber echo = Spawn([&] {
      long v;
      for (long i = 0; i < kRounds; ++i) {
        (void)ping.pop(v);
        (void)pong.push(v);
      }
    });
    long v;
    for (long i = 0; i < kRounds; ++i) {
      (void)ping.push(i);
      (void)pong.pop(v);
    }
    echo.join();
    return Ms(Clock::now() - start);
  });
  Emit("channel_pingpong", kRounds, pool.workers(), weft::bench::Median(s) * 1e6 / kRounds, s);
}

// ---- W4: fork-join fib(30), a fiber for each call ---------------------------------------------
std::uint64_t Fib(int n) {
  if (n < 2) return static_cast<std::uint64_t>(n);
  std::uint64_t a = 0;
  fibers::fiber child = Spawn([&a, n] { a = Fib(n - 1); }, fibers::launch::dispatch);
  std::uint64_t b = Fib(n - 2);
  child.join();
  return a + b;
}

void W4(const Options& o, Pool& pool) {
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    if (Fib(weft::bench::kFibN) != weft::bench::kFibResult) {
      std::fprintf(stderr, "W4: wrong result\n");
      std::exit(1);
    }
    return Ms(Clock::now() - start);
  });
  weft::bench::EmitFib("boost_fiber", o, pool.workers(), s);
}

// ---- W5: 10,000 fibers each sleep 1 ms ---------------------------------------------------------
void W5(const Options& o, Pool& pool) {
  constexpr long kN = 10000;
  auto s = Repeat(o, [&] {
    auto start = Clock::now();
    SpawnAllThenJoin(kN, [] { boost::this_fiber::sleep_for(std::chrono::milliseconds(1)); });
    return Ms(Clock::now() - start);
  });
  Emit("sleep_fanout", kN, pool.workers(), weft::bench::Median(s) * 1e6 / kN, s);
}

// ---- W7: 1,000 fibers x 1,000 lock/increment/unlock on one fibers::mutex ------------------------
void W7(const Options& o, Pool& pool) {
  constexpr long kFibers = 1000, kOps = 1000;
  auto s = Repeat(o, [&] {
    fibers::mutex m;
    long counter = 0;
    auto start = Clock::now();
    SpawnAllThenJoin(kFibers, [&] {
      for (long k = 0; k < kOps; ++k) {
        std::lock_guard<fibers::mutex> lock(m);
        ++counter;
      }
    });
    double ms = Ms(Clock::now() - start);
    if (counter != kFibers * kOps) {
      std::fprintf(stderr, "W7: lost increments\n");
      std::exit(1);
    }
    return ms;
  });
  Emit("mutex_contended", kFibers * kOps, pool.workers(),
       weft::bench::Median(s) * 1e6 / (kFibers * kOps), s);
}

// ---- W8: 100,000 fibers parked at once, then released -----------------------------------------
// Park: how the fibers wait and how the root releases them (one variant of W8).
struct ChannelClose {
  static constexpr const char* kName = "channel_close";
  fibers::buffered_channel<int> gate{2};
  void Wait() {
    int v;
    (void)gate.pop(v);  // closed: returns channel_op_status::closed
  }
  void Release() { gate.close(); }
};
struct CondVar {
  static constexpr const char* kName = "condvar";
  fibers::mutex m;
  fibers::condition_variable cv;
  bool go = false;
  void Wait() {
    std::unique_lock<fibers::mutex> lock(m);
    cv.wait(lock, [&] { return go; });
  }
  void Release() {
    {
      std::lock_guard<fibers::mutex> lock(m);
      go = true;
    }
    cv.notify_all();
  }
};

// rss: report RSS per task; only for the variant that runs first in the process (the second
// reuses the stacks the first left in the allocator, so its RSS grows by nothing).
template <typename Park>
void W8Variant(const Options& o, Pool& pool, bool rss) {
  constexpr long kN = 100000;
  std::vector<double> rss_per_task;
  auto s = Repeat(o, [&] {
    Park park;
    std::atomic<long> parked{0};
    long rss0 = weft::bench::RssKb();
    std::vector<fibers::fiber> fs;
    fs.reserve(kN);
    for (long i = 0; i < kN; ++i) {
      fs.push_back(Spawn([&] {
        parked.fetch_add(1, std::memory_order_relaxed);
        park.Wait();
      }));
    }
    // Every fiber has started and is about to park (or parked): let them settle.
    while (parked.load(std::memory_order_relaxed) < kN) boost::this_fiber::yield();
    boost::this_fiber::sleep_for(std::chrono::milliseconds(1));
    rss_per_task.push_back(static_cast<double>(weft::bench::RssKb() - rss0) / kN);
    auto release = Clock::now();
    park.Release();
    for (auto& f : fs) f.join();
    return Ms(Clock::now() - release);
  });
  char extra[160];
  std::snprintf(extra, sizeof extra, ",\"release_ms\":%.3f,\"variant\":\"%s\"",
                weft::bench::Median(s), Park::kName);
  std::string fields = extra;
  if (rss) {
    // As weft's: RSS per task from the first (warm-up) run.
    std::snprintf(extra, sizeof extra, ",\"rss_kb_per_task\":%.3f", rss_per_task.front());
    fields += extra;
  }
  Emit("park_many", kN, pool.workers(), 0, s, fields);
}

void W8(const Options& o, Pool& pool) {
  W8Variant<ChannelClose>(o, pool, /*rss=*/true);
  W8Variant<CondVar>(o, pool, /*rss=*/false);
}

}  // namespace

int main(int argc, char** argv) {
  weft::bench::KeepFreedMemory();
  Options o;
  if (!weft::bench::ParseOptions(argc, argv, &o)) return 2;
  if (o.wants("W1")) W1(o);
  unsigned workers = o.workers ? o.workers : std::max(1u, std::thread::hardware_concurrency());
  Pool pool(workers);
  if (o.wants("W2")) W2(o, pool);
  if (o.wants("W3")) W3(o, pool);
  if (o.wants("W4")) W4(o, pool);
  if (o.wants("W5")) W5(o, pool);
  if (o.wants("W7")) W7(o, pool);
  if (o.wants("W8")) W8(o, pool);
  return 0;
}
