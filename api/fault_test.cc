// api/fault_test.cc: hard faults (base/fault.h) surface as clean errors, and the runtime keeps
// serving. Each test turns injection on for itself (fault::Configure), as WEFT_FAULTS=...,hard
// would: I/O fails with ECONNRESET or EPIPE, accept with EMFILE, stacks and slabs are refused
// their memory, blocking threads fail to start. Every operation either completes exactly (the
// bytes echoed are the bytes sent) or returns one of those errors; nothing crashes or hangs, and
// once injection stops every client is served again, with the fds back to what they were.
//
// Sized by WEFT_STRESS_SCALE.

#include "weft/base/fault.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/testing/dual_mode.h"
#include "weft/api/weft.h"
#include "weft/base/stress_scale.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using net::SocketAddress;
using net::TcpListener;
using net::TcpStream;

using testing::OpenFds;

// FaultsOn: injection for the scope of a test, off again at its end (also on failure).
class FaultsOn {
 public:
  explicit FaultsOn(double rate, std::uint64_t seed = 1) {
    fault::Configure({.rate = rate, .seed = seed, .hard = true});
  }
  ~FaultsOn() { Off(); }
  static void Off() { fault::Configure({}); }
};

// NoStack: fibers of rt that found no stack (the per-worker "no_stack" counters).
int NoStack(Runtime& rt) {
  std::string json = rt.stats_json();
  int n = 0;
  for (std::size_t at = json.find("\"no_stack\":"); at != std::string::npos;
       at = json.find("\"no_stack\":", at + 1)) {
    n += std::atoi(json.c_str() + at + std::strlen("\"no_stack\":"));
  }
  return n;
}

bool InjectedIoError(std::errc e) {
  // The injected ones, and what the other side sees when a fault closed its peer's end.
  return e == std::errc::connection_reset || e == std::errc::broken_pipe ||
         e == std::errc::connection_aborted;
}

// Echo: serves one connection until it ends or fails.
void Echo(TcpStream s) {
  char buf[256];
  for (;;) {
    Result<std::size_t> n = s.read(buf, sizeof buf);
    if (!n.ok() || *n == 0) return;
    if (!s.write_all(buf, *n).ok()) return;
  }
}

struct Tally {
  std::atomic<int> exchanges{0};   // messages echoed back exactly
  std::atomic<int> failures{0};    // exchanges that failed with an injected (or induced) error
  std::atomic<int> unexpected{0};  // anything else: wrong bytes, an error nobody injected
};

// Client: `messages` exchanges, each on the current connection or, after a failure, on a new
// one: every exchange ends echoed exactly or failed with an expected error.
void Client(const SocketAddress& addr, int id, int messages, Tally& t) {
  std::optional<TcpStream> s;
  for (int m = 0; m < messages; ++m) {
    if (!s) {
      Result<TcpStream> c = TcpStream::connect(addr, {.deadline = SyncClock::now() + 30s});
      if (!c.ok()) {
        std::fprintf(stderr, "connect: %s\n", std::make_error_code(c.error()).message().c_str());
        t.unexpected.fetch_add(1);
        return;
      }
      s.emplace(std::move(*c));
    }
    char out[64] = {}, in[64];
    std::snprintf(out, sizeof out, "client %d message %d", id, m);
    Result<void> w = s->write_all(out, sizeof out);
    Result<void> r = w.ok() ? s->read_exact(in, sizeof in, {.deadline = SyncClock::now() + 30s})
                            : Result<void>(w.error());
    if (r.ok()) {
      if (std::memcmp(in, out, sizeof out) == 0) {
        t.exchanges.fetch_add(1);
      } else {
        t.unexpected.fetch_add(1);
      }
      continue;
    }
    if (InjectedIoError(r.error())) {
      t.failures.fetch_add(1);
    } else {
      std::fprintf(stderr, "exchange: %s\n", std::make_error_code(r.error()).message().c_str());
      t.unexpected.fetch_add(1);
    }
    s.reset();  // that connection is done; the next message opens a new one
  }
}

TEST(FaultTest, HardIoFaultsSurfaceAsErrorsAndTheServerKeepsServing) {
  const int clients = 40 * testing::StressScale();
  const int messages = 40 * testing::StressScale();
  const int fds_before = OpenFds();
  const std::uint64_t injected_before = fault::InjectedCount();
  {
    FaultsOn faults(0.02, /*seed=*/7);
    Runtime rt({.workers = 2});
    rt.block_on([&] {
      Result<TcpListener> l = TcpListener::bind(SocketAddress::ipv4_loopback(0));
      ASSERT_TRUE(l.ok());
      SocketAddress addr = *l->local_address();
      std::atomic<int> accept_errors{0};
      JoinHandle<void> server = rt.spawn([&] {
        for (;;) {
          Result<TcpStream> s = l->accept();
          if (!s.ok()) {
            if (s.error() == std::errc::operation_canceled) return;  // shutting down
            // EMFILE (injected): a real server would back off; this one goes on at once.
            if (s.error() != std::errc::too_many_files_open) {
              std::fprintf(stderr, "accept: %s\n",
                           std::make_error_code(s.error()).message().c_str());
              return;
            }
            accept_errors.fetch_add(1);
            continue;
          }
          rt.spawn([c = std::move(*s)]() mutable { Echo(std::move(c)); }).detach();
        }
      });
      Tally faulty;
      std::vector<JoinHandle<void>> hs;
      for (int c = 0; c < clients; ++c) {
        hs.push_back(rt.spawn([&, c] { Client(addr, c, messages, faulty); }));
      }
      for (auto& h : hs) ASSERT_TRUE(h.join().ok());
      EXPECT_EQ(faulty.unexpected.load(), 0);
      EXPECT_EQ(faulty.exchanges.load() + faulty.failures.load(), clients * messages);
      EXPECT_GT(faulty.exchanges.load(), 0);

      // Injection off: the same server serves every exchange.
      FaultsOn::Off();
      Tally clean;
      hs.clear();
      for (int c = 0; c < 10; ++c) {
        hs.push_back(rt.spawn([&, c] { Client(addr, 1000 + c, 20, clean); }));
      }
      for (auto& h : hs) ASSERT_TRUE(h.join().ok());
      EXPECT_EQ(clean.unexpected.load(), 0);
      EXPECT_EQ(clean.failures.load(), 0);
      EXPECT_EQ(clean.exchanges.load(), 200);
      std::printf("faulty round: %d exchanges echoed, %d failed cleanly, %d accepts refused\n",
                  faulty.exchanges.load(), faulty.failures.load(), accept_errors.load());
      ASSERT_TRUE(l->close().ok());  // the acceptor's accept ends (ECANCELED)
      ASSERT_TRUE(server.join().ok());
    });
  }
  EXPECT_GT(fault::InjectedCount(), injected_before);
  std::printf("%s\n", fault::Summary().c_str());
  EXPECT_EQ(OpenFds(), fds_before);  // every connection closed, the runtime's fds too
}

// A stack (or a slab's memory) refused: the fiber never runs and its join reports ENOMEM, or
// the spawn itself throws std::bad_alloc; the others run. Without faults every spawn works.
TEST(FaultTest, RefusedMemoryFailsSpawnsCleanly) {
  const int n = 200 * testing::StressScale();
  int ran = 0, refused = 0;
  {
    // 4 MiB stacks, one to a mapping, all alive at once (each fiber waits for `go`): each
    // spawn needs a new mapping.
    Runtime rt({.workers = 2, .stack_size = 3 << 20});
    FaultsOn faults(0.3, /*seed=*/3);
    rt.block_on([&] {
      Event go;
      std::atomic<int> started{0};
      std::vector<JoinHandle<int>> hs;
      for (int i = 0; i < n; ++i) {
        try {
          hs.push_back(rt.spawn([&go, &started, i] {
            started.fetch_add(1);
            (void)go.wait();
            return i;
          }));
        } catch (const std::bad_alloc&) {
          ++refused;
        }
      }
      // Every fiber either holds its stack (waiting for go) or was refused one.
      while (started.load() + NoStack(rt) < static_cast<int>(hs.size())) this_fiber::yield();
      go.set();
      for (int i = 0; i < static_cast<int>(hs.size()); ++i) {
        try {
          EXPECT_EQ(*hs[static_cast<std::size_t>(i)].join(), i);
          ++ran;
        } catch (const std::system_error& e) {
          EXPECT_EQ(e.code(), std::errc::not_enough_memory) << e.what();
          ++refused;
        }
      }
    });
    EXPECT_EQ(ran + refused, n);
    EXPECT_GT(refused, 0);
    EXPECT_GT(ran, 0);
    FaultsOn::Off();
    rt.block_on([&] {
      std::vector<JoinHandle<int>> hs;
      for (int i = 0; i < 100; ++i) hs.push_back(rt.spawn([i] { return i; }));
      for (int i = 0; i < 100; ++i) EXPECT_EQ(*hs[static_cast<std::size_t>(i)].join(), i);
    });
  }
  std::printf("%d fibers ran, %d refused memory cleanly\n", ran, refused);
}

// A read that fails with an injected EINTR or EAGAIN is submitted again, but not once another
// fiber has begun closing its fd: the number may be a new file's by then (here it is: a new
// pipe takes it and holds a byte), and the read must not take that byte. Each trial: the read
// parks, the closer closes the fd and makes a pipe on the same number with "X" in it, and the
// read then either fails or (had it not been retried) reads nothing from the new pipe.
TEST(FaultTest, ARetriedReadNeverReachesTheNextFileOnItsNumber) {
  FaultsOn faults(0.5, /*seed=*/11);
  Runtime rt({.workers = 1});
  int wrong = 0, cancelled = 0;
  for (int trial = 0; trial < 60; ++trial) {
    rt.block_on([&] {
      int p[2];
      ASSERT_EQ(::pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
      std::atomic<bool> reading{false};
      JoinHandle<Result<std::size_t>> reader = rt.spawn([fd = p[0], &reading] {
        char c = 0;
        reading.store(true);  // the read below is submitted before this fiber next yields
        Result<std::size_t> n = io::read(fd, &c, 1);
        return n.ok() && *n == 1 && c == 'X' ? Result<std::size_t>(std::errc::io_error) : n;
      });
      JoinHandle<void> closer = rt.spawn([&] {
        while (!reading.load()) this_fiber::yield();  // the read is in flight: close it under it
        (void)io::close(p[0]);
        int q[2];
        ASSERT_EQ(::pipe2(q, O_NONBLOCK | O_CLOEXEC), 0);
        ASSERT_EQ(::write(q[1], "X", 1), 1);
        for (int i = 0; i < 8; ++i) this_fiber::yield();  // the reader's retries run meanwhile
        (void)io::close(q[0]);
        (void)io::close(q[1]);
      });
      ASSERT_TRUE(closer.join().ok());
      Result<Result<std::size_t>> got = reader.join();
      ASSERT_TRUE(got.ok());
      if (!got->ok() && got->error() == std::errc::io_error) ++wrong;
      if (!got->ok() && got->error() == std::errc::operation_canceled) ++cancelled;
      (void)io::close(p[1]);
    });
  }
  EXPECT_EQ(wrong, 0);  // the read took the new pipe's byte
  std::printf("60 trials: %d reads ended cancelled by the close\n", cancelled);
}

// Blocking threads that fail to start: call_blocking runs the call inline instead; every call
// returns its result.
TEST(FaultTest, BlockingThreadsThatFailToStartDegradeToInlineCalls) {
  Runtime rt({.workers = 2, .max_blocking_threads = 4});
  FaultsOn faults(0.5, /*seed=*/5);
  rt.block_on([&] {
    std::vector<JoinHandle<int>> hs;
    for (int i = 0; i < 50; ++i) {
      hs.push_back(rt.spawn([i] { return call_blocking([i] { return i * 2; }); }));
    }
    for (int i = 0; i < 50; ++i) EXPECT_EQ(*hs[static_cast<std::size_t>(i)].join(), i * 2);
  });
}

}  // namespace
}  // namespace weft
