// The console server (RuntimeOptions::console): its socket's place and permissions, its
// requests (hello, stats, fibers, stuck) and their JSON lines, what it refuses (a directory
// others may use, a request line too long), and that a runtime that did not opt in serves
// nothing. tools/console_test.sh drives tools/weft-console itself in a terminal.

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/coordination.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// PrivateDir: a fresh directory under /tmp (a socket path must fit in 108 bytes), removed at
// the end with what is left in it.
struct PrivateDir {
  std::string path;
  PrivateDir() {
    char tmpl[] = "/tmp/weft_console_test_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~PrivateDir() { (void)std::system(("rm -rf '" + path + "'").c_str()); }
};

// Client: a connection to a console socket, one request line at a time.
struct Client {
  int fd = -1;
  std::string buf;
  explicit Client(const std::string& path) {
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~Client() {
    if (fd >= 0) ::close(fd);
  }
  // AskUntil: asks `line` until the reply has `needle` (or 30 s); the last reply.
  std::string AskUntil(const std::string& line, const std::string& needle) {
    std::string reply;
    for (auto end = std::chrono::steady_clock::now() + 30s;
         std::chrono::steady_clock::now() < end;) {
      reply = Ask(line);
      if (reply.find(needle) != std::string::npos) break;
    }
    return reply;
  }
  // Ask: sends line and returns the reply line; empty if the server closed the connection.
  std::string Ask(const std::string& line) {
    (void)::send(fd, (line + "\n").data(), line.size() + 1, MSG_NOSIGNAL);
    for (;;) {
      const std::size_t nl = buf.find('\n');
      if (nl != std::string::npos) {
        std::string reply = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        return reply;
      }
      char chunk[4096];
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return {};
      buf.append(chunk, static_cast<std::size_t>(n));
    }
  }
};

TEST(Console, ServesHelloStatsFibersAndStuckAsJsonLines) {
  PrivateDir dir;
  std::atomic<int> reports{0};
  Runtime rt({.workers = 2,
              .stuck_threshold = 2ms,
              .on_stuck = [&](const StuckFiber&) { reports.fetch_add(1); },
              .console = true,
              .console_dir = dir.path});
  const std::string path = rt.console_path();
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(path.rfind(dir.path + "/" + std::to_string(::getpid()) + "-", 0), 0u) << path;
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(dir.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  // A fiber parked on an Event, with a name that needs escaping; one that held its worker.
  Event never;
  JoinHandle<void> parked =
      rt.spawn([&] { (void)never.wait(); }, {.name = "quote\"back\\slash\x01"});
  rt.block_on([&] {
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (reports.load() == 0 && std::chrono::steady_clock::now() < end) {
    }
  });
  Client c(path);
  ASSERT_GE(c.fd, 0);
  const std::string hello = c.Ask("hello");
  EXPECT_NE(hello.find("\"weft_console\":1"), std::string::npos) << hello;
  EXPECT_NE(hello.find("\"pid\":" + std::to_string(::getpid())), std::string::npos) << hello;
  EXPECT_NE(hello.find("\"workers\":2"), std::string::npos) << hello;
  const std::string stats = c.Ask("stats");
  EXPECT_NE(stats.find("\"workers\":[{\"index\":0"), std::string::npos) << stats;
  const std::string fibers = c.Ask("fibers");
  EXPECT_NE(fibers.find("\"name\":\"quote\\\"back\\\\slash\\u0001\""), std::string::npos) << fibers;
  EXPECT_NE(fibers.find("\"on\":\"Event\""), std::string::npos) << fibers;
  EXPECT_NE(fibers.find("\"spawned_at\":\"scheduler/console_test.cc:"), std::string::npos)
      << fibers;
  EXPECT_NE(fibers.find("\"states\":{"), std::string::npos) << fibers;
  EXPECT_NE(fibers.find("\"deadlock_suspected\":false"), std::string::npos) << fibers;
  // The held run ended: the monitor's next sample lists the fiber's longest.
  const std::string runs = c.AskUntil("runs", "\"fiber_id\":");
  EXPECT_NE(runs.find("{\"longest_runs\":[{\"fiber_id\":"), std::string::npos) << runs;
  const std::string stuck = c.Ask("stuck");
  EXPECT_NE(stuck.find("{\"stuck\":[{\"fiber_id\":"), std::string::npos) << stuck;
  EXPECT_NE(stuck.find("\"running_for_ns\":"), std::string::npos) << stuck;
  EXPECT_NE(stuck.find("\"spawned_at\":\"scheduler/console_test.cc:"), std::string::npos) << stuck;
  EXPECT_NE(c.Ask("shutdown").find("\"error\""), std::string::npos);  // read-only: no such thing
  // A line longer than any request: the connection is dropped; others go on.
  EXPECT_EQ(c.Ask(std::string(4096, 'x')), "");
  Client d(path);
  EXPECT_NE(d.Ask("hello").find("\"weft_console\":1"), std::string::npos);
  never.set();
  (void)parked.join();
}

// A client that pipelines requests and shuts its side down (as `socat - UNIX:<socket>` does at
// the end of its input) still gets every reply.
TEST(Console, AClientThatHalfClosesGetsEveryReply) {
  PrivateDir dir;
  Runtime rt({.workers = 1, .console = true, .console_dir = dir.path});
  Event never;
  std::vector<JoinHandle<void>> hs;
  for (int i = 0; i < 300; ++i) {  // replies of ~15 KB each: more than a socket buffer in all
    hs.push_back(rt.spawn([&] { (void)never.wait(); }, {.name = "a-fairly-long-fiber-name"}));
  }
  Client c(rt.console_path());
  ASSERT_GE(c.fd, 0);
  constexpr int kRequests = 36;
  std::string requests;
  for (int i = 0; i < kRequests; ++i) requests += "fibers\n";
  ASSERT_EQ(::send(c.fd, requests.data(), requests.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(requests.size()));
  ASSERT_EQ(::shutdown(c.fd, SHUT_WR), 0);
  std::string got;
  char buf[65536];
  for (ssize_t n; (n = ::recv(c.fd, buf, sizeof buf, 0)) > 0;) {
    got.append(buf, static_cast<std::size_t>(n));
  }
  int lines = 0;
  for (char ch : got) lines += ch == '\n';
  EXPECT_EQ(lines, kRequests);
  never.set();
  for (auto& h : hs) (void)h.join();
}

// Names are bytes: valid UTF-8 passes through, a byte that is not becomes U+FFFD.
TEST(Console, NamesAreUtf8InTheJson) {
  PrivateDir dir;
  Runtime rt({.workers = 1, .console = true, .console_dir = dir.path});
  Event never;
  JoinHandle<void> a = rt.spawn([&] { (void)never.wait(); }, {.name = "caf\xc3\xa9"});
  JoinHandle<void> b = rt.spawn([&] { (void)never.wait(); }, {.name = "bad\xff\xc3"});
  Client c(rt.console_path());
  const std::string fibers = c.AskUntil("fibers", "\"parked\":2");
  EXPECT_NE(fibers.find("\"name\":\"caf\xc3\xa9\""), std::string::npos) << fibers;
  EXPECT_NE(fibers.find("\"name\":\"bad\\ufffd\\ufffd\""), std::string::npos) << fibers;
  never.set();
  (void)a.join();
  (void)b.join();
}

// Out of fds, a pending connection cannot be accepted: the console waits (it does not spin on
// the listening socket, which stays readable), and accepts it once fds are back.
TEST(Console, OutOfFdsItWaitsInsteadOfSpinning) {
  PrivateDir dir;
  Runtime rt({.workers = 1, .console = true, .console_dir = dir.path});
  rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  const int client = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(client, 0);
  rlimit low = old;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int fd; (fd = ::dup(0)) >= 0;) filler.push_back(fd);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, rt.console_path().c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  std::this_thread::sleep_for(100ms);
  const double before = testing::ProcessCpuSeconds();
  std::this_thread::sleep_for(500ms);
  const double used = testing::ProcessCpuSeconds() - before;
  for (int fd : filler) ::close(fd);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  // An idle runtime and a waiting console use next to nothing; a spin would use the 0.5 s.
  EXPECT_LT(used, 0.15);
  const std::string hello = "hello\n";
  ASSERT_EQ(::send(client, hello.data(), hello.size(), MSG_NOSIGNAL), 6);
  char buf[512];
  const ssize_t n = ::recv(client, buf, sizeof buf, 0);  // accepted once fds were back
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buf, static_cast<std::size_t>(n)).find("weft_console"), std::string::npos);
  ::close(client);
}

// With RuntimeOptions::measure_latency, each fiber listed carries the longest it waited to run.
TEST(Console, FibersCarryTheirLongestWaitWhenMeasured) {
  PrivateDir dir;
  Runtime rt({.workers = 1, .console = true, .console_dir = dir.path, .measure_latency = true});
  Event never;
  JoinHandle<void> parked = rt.spawn([&] { (void)never.wait(); });
  Client c(rt.console_path());
  const std::string fibers = c.AskUntil("fibers", "\"parked\":1");
  EXPECT_NE(fibers.find("\"max_wait_us\":"), std::string::npos) << fibers;
  never.set();
  (void)parked.join();
}

TEST(Console, TheSocketGoesAwayWithTheRuntime) {
  PrivateDir dir;
  std::string path;
  {
    Runtime rt({.workers = 1, .console = true, .console_dir = dir.path});
    path = rt.console_path();
    ASSERT_FALSE(path.empty());
    Client attached(path);  // a client attached meanwhile does not hold up the shutdown
    ASSERT_GE(attached.fd, 0);
  }
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

TEST(Console, ADirectoryOthersMayUseLeavesItOff) {
  PrivateDir dir;
  ASSERT_EQ(::chmod(dir.path.c_str(), 0755), 0);
  Runtime rt({.workers = 1, .console = true, .console_dir = dir.path});
  EXPECT_TRUE(rt.console_path().empty());
  rt.block_on([] {});  // and the runtime serves all the same
  // A path that is a file, not a directory.
  const std::string file = dir.path + "/file";
  ASSERT_EQ(std::system(("touch '" + file + "'").c_str()), 0);
  Runtime rt2({.workers = 1, .console = true, .console_dir = file});
  EXPECT_TRUE(rt2.console_path().empty());
}

TEST(Console, OffUnlessAskedFor) {
  PrivateDir dir;
  ::unsetenv("WEFT_CONSOLE");
  ASSERT_EQ(::setenv("WEFT_CONSOLE_DIR", dir.path.c_str(), 1), 0);
  {
    Runtime rt({.workers = 1});
    EXPECT_TRUE(rt.console_path().empty());
  }
  ASSERT_EQ(::setenv("WEFT_CONSOLE", "1", 1), 0);
  {
    Runtime rt({.workers = 1});  // the environment opts in, into $WEFT_CONSOLE_DIR
    EXPECT_EQ(rt.console_path().rfind(dir.path + "/", 0), 0u) << rt.console_path();
  }
  ::unsetenv("WEFT_CONSOLE");
  ::unsetenv("WEFT_CONSOLE_DIR");
}

}  // namespace
}  // namespace weft
