// NURL's acceptance for fiber I/O: 10,000 concurrent loopback connections, each echoing 100
// messages, every byte delivered. The clients run in a forked child process with its own Runtime:
// the two sides together need 20,000 fds, and this machine's hard limit is 20,000 per process.
//
// Sized by WEFT_STRESS_SCALE (the connection count scales; 0.1 gives 1,000) and scaled down under
// the sanitizers, where each switch and syscall costs many times more.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/net.h"
#include "weft/api/testing/dual_mode.h"
#include "weft/base/stress_scale.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/coordination.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using net::SocketAddress;
using net::TcpListener;
using net::TcpStream;

constexpr int kSanitizerDivisor = ::weft::testing::kTsan || ::weft::testing::kAsan ? 10 : 1;

constexpr int kMessages = 100;
constexpr std::size_t kMessageSize = 32;

// The client side: `conns` connections at once (connects throttled to 512 in flight, below the
// listen backlog), each sending kMessages messages and checking each echo. Returns the number of
// connections whose every echo came back intact.
int RunClients(const SocketAddress& addr, int conns) {
  (void)testing::RaiseFdLimit();
  Runtime rt({.workers = 2, .stack_size = 16 << 10});
  return rt.block_on([&] {
    std::atomic<int> ok{0};
    Semaphore connecting(512);
    WaitGroup all_connected;
    (void)all_connected.add(conns);
    std::vector<JoinHandle<void>> hs;
    hs.reserve(static_cast<std::size_t>(conns));
    for (int c = 0; c < conns; ++c) {
      hs.push_back(rt.spawn([&, c] {
        (void)connecting.acquire();
        Result<TcpStream> s = TcpStream::connect(addr, {.deadline = SyncClock::now() + 60s});
        connecting.release();
        all_connected.done();
        if (!s.ok()) {
          std::fprintf(stderr, "connect %d: %s\n", c,
                       std::make_error_code(s.error()).message().c_str());
          return;
        }
        // Every connection is open before any traffic: 10,000 concurrent connections.
        (void)all_connected.wait();
        char out[kMessageSize], in[kMessageSize];
        for (int m = 0; m < kMessages; ++m) {
          std::snprintf(out, sizeof out, "conn %6d message %3d ......", c, m);
          if (!s->write_all(out, sizeof out).ok()) return;
          if (!s->read_exact(in, sizeof in, {.deadline = SyncClock::now() + 60s}).ok()) return;
          if (std::memcmp(in, out, sizeof out) != 0) return;
        }
        ok.fetch_add(1, std::memory_order_relaxed);
      }));
    }
    for (auto& h : hs) (void)h.join();
    return ok.load();
  });
}

TEST(NetStressTest, TenThousandConcurrentEchoConnections) {
  int conns =
      std::max(10, static_cast<int>(10000 * ::weft::testing::StressScale()) / kSanitizerDivisor);
  (void)testing::RaiseFdLimit();
  // Each side holds one fd per connection (the client and the server are separate processes), so
  // a larger WEFT_STRESS_SCALE is capped by the fd limit, with room for the runtimes' own fds.
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY &&
      static_cast<rlim_t>(conns) + 512 > r.rlim_cur) {
    const int cap = std::max(10, static_cast<int>(r.rlim_cur) - 512);
    std::fprintf(stderr, "%d connections capped at %d by RLIMIT_NOFILE (%llu)\n", conns, cap,
                 static_cast<unsigned long long>(r.rlim_cur));
    conns = cap;
  }
  auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0), 4096);
  ASSERT_TRUE(listener.ok());
  SocketAddress addr = *listener->local_address();

  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int ok = RunClients(addr, conns);
    std::fprintf(stderr, "client: %d of %d connections fully echoed\n", ok, conns);
    ::_exit(ok == conns ? 0 : 1);
  }

  std::atomic<int> served{0};
  std::atomic<long> bytes{0};
  {
    Runtime rt({.workers = 2, .stack_size = 16 << 10});
    rt.block_on([&] {
      std::vector<JoinHandle<void>> hs;
      hs.reserve(static_cast<std::size_t>(conns));
      for (int c = 0; c < conns; ++c) {
        Result<TcpStream> s = listener->accept({.deadline = SyncClock::now() + 120s});
        ASSERT_TRUE(s.ok()) << std::make_error_code(s.error()).message();
        hs.push_back(rt.spawn([&, stream = std::move(*s)]() mutable {
          char buf[4096];
          for (;;) {
            Result<std::size_t> n = stream.read(buf, sizeof buf);
            if (!n.ok() || *n == 0) break;
            if (!stream.write_all(buf, *n).ok()) break;
            bytes.fetch_add(static_cast<long>(*n), std::memory_order_relaxed);
          }
          served.fetch_add(1, std::memory_order_relaxed);
        }));
      }
      for (auto& h : hs) (void)h.join();
    });
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "some client connections lost messages";
  EXPECT_EQ(served.load(), conns);
  EXPECT_EQ(bytes.load(), long{conns} * kMessages * static_cast<long>(kMessageSize));
}

}  // namespace
}  // namespace weft
