// Spare workers and fiber I/O: while every worker is held by a fiber that never switches, a
// spare serves the other fibers, whose I/O then waits on the spare's reactor; once the holders
// let go the spare goes dormant, and the operations still in flight on its reactor complete
// there and their fibers move to the workers. Run on each reactor backend (the epoll
// configuration runs it on epoll).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/io.h"
#include "weft/base/stress_scale.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/coordination.h"

#ifndef _WIN32
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

namespace weft {
namespace {

#ifndef _WIN32
using namespace std::chrono_literals;

using testing::HoldUntil;

void EchoBesideHeldWorkers(unsigned workers) {
  std::atomic<unsigned> reports{0};
  Runtime rt({.workers = workers, .stuck_threshold = 2ms, .on_stuck = [&](const StuckFiber&) {
                reports.fetch_add(1);
              }});
  // Every worker held, and reported (so a spare serves).
  std::atomic<bool> release{false};
  std::vector<JoinHandle<bool>> holders;
  for (unsigned i = 0; i < workers; ++i) {
    holders.push_back(rt.spawn([&] { return HoldUntil([&] { return release.load(); }); },
                               {.pinned_worker = static_cast<int>(i)}));
  }
  ASSERT_TRUE(HoldUntil([&] { return reports.load() >= workers; }));
  // Echo pairs over socket pairs: kFirst rounds while the workers are held (on the spare), then
  // the clients wait at a gate, their servers parked in reads on the spare's reactor; the rest
  // once the spare has gone dormant.
  constexpr int kPairs = 16, kFirst = 50, kRounds = 150;
  Event resume;
  std::atomic<int> at_gate{0};
  std::vector<JoinHandle<int>> fibers;
  std::vector<int> fds;
  for (int p = 0; p < kPairs; ++p) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    fds.insert(fds.end(), {sv[0], sv[1]});
    fibers.push_back(rt.spawn([&, fd = sv[0], p]() -> int {  // client: the rounds it got right
      int good = 0;
      for (std::uint64_t r = 0; r < kRounds; ++r) {
        if (r == kFirst) {
          at_gate.fetch_add(1);
          if (!resume.wait().ok()) return -1;
        }
        const std::uint64_t out = (std::uint64_t(p) << 32) | r;
        std::uint64_t in = 0;
        if (!io::write_all(fd, &out, sizeof out).ok()) return good;
        if (!io::read_exact(fd, &in, sizeof in).ok()) return good;
        good += in == out;
      }
      return good;
    }));
    fibers.push_back(rt.spawn([fd = sv[1]]() -> int {  // server: echoes every round
      for (int r = 0; r < kRounds; ++r) {
        std::uint64_t v = 0;
        if (!io::read_exact(fd, &v, sizeof v).ok()) return r;
        if (!io::write_all(fd, &v, sizeof v).ok()) return r;
      }
      return kRounds;
    }));
  }
  EXPECT_TRUE(HoldUntil([&] { return at_gate.load() == kPairs; })) << rt.stats_json();
  release.store(true);
  for (auto& h : holders) {
    Result<bool> held = h.join();
    ASSERT_TRUE(held);
    EXPECT_TRUE(*held);
  }
  // The spare goes dormant with the servers' reads in flight on its reactor.
  std::string json;
  EXPECT_TRUE(HoldUntil([&] {
    json = rt.stats_json();
    return json.find("\"spare\":\"active\"") == std::string::npos;
  })) << json;
  EXPECT_NE(json.find("\"spare\":\"dormant\""), std::string::npos) << json;
  resume.set();
  for (auto& h : fibers) {
    Result<int> got = h.join();
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, kRounds);
  }
  for (int fd : fds) ::close(fd);
}

int Fib(ForkJoinWorker& w, int n) {
  if (n < 2) return n;
  auto a = w.spawn(Fib, n - 1);
  int b = Fib(w, n - 2);
  return w.sync(a) + b;
}

// Runtime::fork_join from a fiber on a spare (which has no deque in the fork-join pool): the
// root runs on a worker's fiber once that worker is free, and the result comes back.
TEST(SpareWorkerIo, ForkJoinFromAFiberOnASpare) {
  std::atomic<unsigned> reports{0};
  Runtime rt({.workers = 1, .stuck_threshold = 2ms, .on_stuck = [&](const StuckFiber&) {
                reports.fetch_add(1);
              }});
  std::atomic<bool> release{false};
  JoinHandle<bool> holder =
      rt.spawn([&] { return HoldUntil([&] { return release.load(); }); }, {.pinned_worker = 0});
  ASSERT_TRUE(HoldUntil([&] { return reports.load() >= 1; }));
  std::atomic<int> where{-2};
  JoinHandle<int> fj = rt.spawn([&] {
    where.store(this_fiber::worker_index());
    return rt.fork_join(Fib, 20);
  });
  ASSERT_TRUE(HoldUntil([&] { return where.load() != -2; }));  // it runs on the spare
  EXPECT_GE(where.load(), 1);
  release.store(true);
  EXPECT_TRUE(*holder.join());
  Result<int> r = fj.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 6765);
}

// A spare whose reactor cannot be made (out of fds) does not serve: its fibers' I/O would fail.
// The fiber waits for the worker instead, and its read then succeeds.
TEST(SpareWorkerIo, NoSpareServesWithoutAReactor) {
  if (std::getenv("UBSAN_OPTIONS") != nullptr) {
    // UBSan's dynamic type check opens a pipe to probe memory; with every fd taken it reports
    // each virtual call it has not cached as made on an invalid object.
    GTEST_SKIP() << "takes every fd, which UBSan's vptr check needs";
  }
  std::atomic<unsigned> reports{0};
  Runtime rt({.workers = 1, .stuck_threshold = 2ms, .on_stuck = [&](const StuckFiber&) {
                reports.fetch_add(1);
              }});
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  ASSERT_EQ(::write(sv[1], "x", 1), 1);
  rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int fd; (fd = ::dup(0)) >= 0;) filler.push_back(fd);
  std::atomic<bool> release{false};
  JoinHandle<bool> holder =
      rt.spawn([&] { return HoldUntil([&] { return release.load(); }); }, {.pinned_worker = 0});
  std::atomic<int> err{-1};
  JoinHandle<void> reader = rt.spawn([&] {
    char c;
    Result<std::size_t> r = io::read(sv[0], &c, 1);
    err.store(r.ok() ? 0 : static_cast<int>(r.error()));
  });
  // The worker is reported (and the spare tried) while the process has no fds to spare.
  ASSERT_TRUE(HoldUntil([&] { return reports.load() >= 1; }));
  std::this_thread::sleep_for(50ms);
  const std::string json = rt.stats_json();
  for (int fd : filler) ::close(fd);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_EQ(json.find("\"spare\":\"active\""), std::string::npos) << json;
  release.store(true);
  EXPECT_TRUE(*holder.join());
  (void)reader.join();
  EXPECT_EQ(err.load(), 0);
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(SpareWorkerIo, EchoBesideOneHeldWorker) { EchoBesideHeldWorkers(1); }
TEST(SpareWorkerIo, EchoBesideTwoHeldWorkers) { EchoBesideHeldWorkers(2); }
#endif

}  // namespace
}  // namespace weft
