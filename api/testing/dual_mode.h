// api/testing/dual_mode.h: for weft's own tests of calls that work both on fibers and on plain
// threads: a fixture parameterised by Mode that runs a test body on a fiber of its runtime or
// on the test's thread, with a concurrent execution of the same kind; and OpenFds (Linux), the
// count of the process's open file descriptors, for leak checks, RaiseFdLimit, SocketPair and
// Backlog (Linux); NoSoftFaults, ParkedSoFar and WaitUntilDumpShows. Bazel target:
// //api:dual_mode_testing (testonly).

#ifndef WEFT_API_TESTING_DUAL_MODE_H_
#define WEFT_API_TESTING_DUAL_MODE_H_

#ifdef __linux__
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/io.h"
#include "weft/api/net.h"
#include "weft/base/fault.h"
#include "weft/scheduler/runtime.h"

namespace weft::testing {

// Runs test bodies on fibers (kFibers) or on plain threads (kThreads).
enum class Mode { kFibers, kThreads };

// ModeName: "Fibers" or "Threads", for INSTANTIATE_TEST_SUITE_P's name generator.
inline std::string ModeName(const ::testing::TestParamInfo<Mode>& info) {
  return info.param == Mode::kFibers ? "Fibers" : "Threads";
}

class DualModeTest : public ::testing::TestWithParam<Mode> {
 protected:
  // workers: the runtime's, in kFibers mode.
  explicit DualModeTest(unsigned workers) : workers_(workers) {}

  void SetUp() override {
    if (GetParam() == Mode::kFibers)
      rt_ = std::make_unique<Runtime>(RuntimeOptions{.workers = workers_});
  }
  // Run: the body, on a fiber or on this thread.
  void Run(const std::function<void()>& body) {
    if (rt_ != nullptr) {
      rt_->block_on(body);
    } else {
      body();
    }
  }
  // Concurrently: another execution of the same kind (a fiber, or a thread); join() waits.
  class Other {
   public:
    explicit Other(JoinHandle<void> h) : fiber_(std::move(h)) {}
    explicit Other(std::thread t) : thread_(std::move(t)) {}
    Other(Other&&) = default;
    void join() {
      if (thread_.joinable()) thread_.join();
      if (fiber_.joinable()) (void)fiber_.join();
    }
    ~Other() { join(); }

   private:
    JoinHandle<void> fiber_;
    std::thread thread_;
  };
  Other Concurrently(std::function<void()> f) {
    if (rt_ != nullptr) return Other(rt_->spawn(std::move(f)));
    return Other(std::thread(std::move(f)));
  }

  std::unique_ptr<Runtime> rt_;

 private:
  const unsigned workers_;
};

#ifdef __linux__
// RaiseFdLimit: the soft limit on open fds raised to the hard one; returns the limit now.
inline rlim_t RaiseFdLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 0;
  if (r.rlim_cur < r.rlim_max) {
    rlimit raised = r;
    raised.rlim_cur = r.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) return raised.rlim_cur;
  }
  return r.rlim_cur;
}

// SocketPair: a connected pair of non-blocking stream sockets (AF_UNIX), closed through weft
// (io::close) unless taken (set to -1). a < 0 if the pair could not be made.
struct SocketPair {
  int a = -1, b = -1;
  SocketPair() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0) {
      a = fds[0];
      b = fds[1];
    }
  }
  SocketPair(SocketPair&& other) noexcept
      : a(std::exchange(other.a, -1)), b(std::exchange(other.b, -1)) {}
  SocketPair& operator=(SocketPair&&) = delete;
  ~SocketPair() {
    if (a >= 0) (void)io::close(a);
    if (b >= 0) (void)io::close(b);
  }
};

// Backlog: a loopback listener with n connections waiting to be accepted (blocking connects
// from the calling thread: the kernel completes them without an accept); the clients' ends
// close with it. `waiting` says how many connected.
struct Backlog {
  explicit Backlog(int n) : listener(net::TcpListener::bind(net::SocketAddress::ipv4_loopback(0))) {
    if (!listener.ok()) return;
    const net::SocketAddress addr = *listener->local_address();
    for (int i = 0; i < n; ++i) {
      const int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (c < 0) return;
      clients.push_back(c);
      if (::connect(c, addr.data(), addr.size()) != 0) return;
      ++waiting;
    }
  }
  ~Backlog() {
    for (int c : clients) ::close(c);
  }
  Backlog(const Backlog&) = delete;
  Backlog& operator=(const Backlog&) = delete;
  Result<net::TcpListener> listener;
  std::vector<int> clients;
  int waiting = 0;
};

// OpenFds: how many file descriptors the process has open now (one more while counting).
inline int OpenFds() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}
#endif

// NoSoftFaults: no injected faults while it lives (base/fault.h; the faults configurations set
// WEFT_FAULTS), for a test of what a call does when the system does not fail it: with faults
// some direct tries say EAGAIN, and the call then parks in the reactor.
class NoSoftFaults {
 public:
  NoSoftFaults() { fault::Configure({}); }
  ~NoSoftFaults() { fault::Configure(before_); }
  NoSoftFaults(const NoSoftFaults&) = delete;
  NoSoftFaults& operator=(const NoSoftFaults&) = delete;

 private:
  fault::Config before_ = fault::Current();
};

// ParkedSoFar: how many times rt's fibers and tasks have parked (stats_json's "parked", summed
// over the workers).
inline std::uint64_t ParkedSoFar(const Runtime& rt) {
  const std::string stats = rt.stats_json();
  std::uint64_t parked = 0;
  for (std::size_t at = stats.find("\"parked\":"); at != std::string::npos;
       at = stats.find("\"parked\":", at + 1)) {
    parked += std::strtoull(stats.c_str() + at + 9, nullptr, 10);
  }
  return parked;
}

// WaitUntilDumpShows: from a thread outside rt, until rt.dump_fibers() holds `needle` at least
// n times ("sleep": n fibers or tasks asleep), looking every millisecond, at most `tries` times.
inline void WaitUntilDumpShows(const Runtime& rt, const char* needle, std::size_t n,
                               int tries = 1000) {
  for (int i = 0; i < tries; ++i) {
    const std::string dump = rt.dump_fibers();
    std::size_t seen = 0;
    for (std::size_t at = dump.find(needle); at != std::string::npos;
         at = dump.find(needle, at + 1)) {
      ++seen;
    }
    if (seen >= n) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace weft::testing

#endif  // WEFT_API_TESTING_DUAL_MODE_H_
