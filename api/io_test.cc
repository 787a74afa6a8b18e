// Tests of fiber I/O (api/io.h, api/net.h), each run twice: inside fibers of a Runtime, and on a
// plain thread (dual mode: the same calls block the thread). Deadline and cancellation are
// checked on every blocking call; bad input gives errors; close and shutdown with operations in
// flight complete them with operation_canceled.

#include "weft/api/io.h"

#ifndef _WIN32
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
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

WaitOptions In(std::chrono::milliseconds d) {
  return WaitOptions{.deadline = std::chrono::steady_clock::now() + d};
}

// The plain calls the tests make besides weft's. On Windows an fd is a SOCKET cast to int.
#ifdef _WIN32
void CloseFd(int fd) { ::closesocket(NativeSocket(fd)); }
long RawWrite(int fd, const void* buf, std::size_t n) {
  return ::send(NativeSocket(fd), static_cast<const char*>(buf), static_cast<int>(n), 0);
}
int NewTcpSocket() {
  WSADATA data;
  (void)::WSAStartup(MAKEWORD(2, 2), &data);  // reference-counted; weft's own calls start it too
  return static_cast<int>(::socket(AF_INET, SOCK_STREAM, IPPROTO_TCP));
}
#else
void CloseFd(int fd) { ::close(fd); }
long RawWrite(int fd, const void* buf, std::size_t n) { return ::write(fd, buf, n); }
int NewTcpSocket() { return ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); }
#endif

// Pipe: a non-blocking pipe (Windows: a connected loopback TCP pair; anonymous pipes there cannot
// do overlapped I/O). r is the read end, w the write end.
struct Pipe {
  int r = -1, w = -1;
  // socket: a connected pair of stream sockets instead (closing one end is end of file at the
  // other, where a pipe's writer would get SIGPIPE).
  explicit Pipe(bool socket = false) {
#ifdef _WIN32
    int l = NewTcpSocket();
    SocketAddress any = SocketAddress::ipv4_loopback(0);
    sockaddr_storage ss{};
    int len = sizeof ss;
    if (::bind(NativeSocket(l), any.data(), any.size()) == 0 && ::listen(NativeSocket(l), 1) == 0 &&
        ::getsockname(NativeSocket(l), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      w = NewTcpSocket();
      if (::connect(NativeSocket(w), reinterpret_cast<sockaddr*>(&ss), len) == 0) {
        r = static_cast<int>(::accept(NativeSocket(l), nullptr, nullptr));
      }
    }
    CloseFd(l);
    for (int fd : {r, w}) EXPECT_TRUE(fd >= 0 && io::make_nonblocking(fd).ok());
#else
    int fds[2];
    if (socket ? ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0
               : ::pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0) {
      r = fds[0];
      w = fds[1];
    }
#endif
  }
  ~Pipe() {
    if (r >= 0) CloseFd(r);
    if (w >= 0) CloseFd(w);
  }
  // release_read: the read end, which the caller now owns.
  int release_read() {
    int fd = r;
    r = -1;
    return fd;
  }
  void FillWriteEnd() const {
    char buf[4096] = {};
    while (RawWrite(w, buf, sizeof buf) > 0) {
    }
  }
};

#ifndef _WIN32
using testing::Backlog;  // (Linux)
#endif
using testing::Mode;

class IoTest : public testing::DualModeTest {
 protected:
  IoTest() : DualModeTest(/*workers=*/1) {}
};

TEST_P(IoTest, PipeReadAndWrite) {
  Pipe p;
  Run([&] {
    auto writer = Concurrently([&] {
      ASSERT_TRUE(this_fiber::sleep_for(2ms).ok());  // the reader parks first
      ASSERT_TRUE(io::write_all(p.w, "hello", 5).ok());
    });
    char buf[5];
    ASSERT_TRUE(io::read_exact(p.r, buf, 5).ok());
    EXPECT_EQ(std::string(buf, 5), "hello");
    writer.join();
    IoVec out[2] = {{const_cast<char*>("ab"), 2}, {const_cast<char*>("cd"), 2}};
    auto n = io::writev(p.w, out, 2);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 4u);
    char a[2], b[2];
    IoVec in[2] = {{a, 2}, {b, 2}};
    n = io::readv(p.r, in, 2);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 4u);
    EXPECT_EQ(std::string(b, 2), "cd");
  });
}

TEST_P(IoTest, ReadDeadlineAndCancellation) {
  Pipe p;
  Run([&] {
    char c;
    EXPECT_EQ(io::read(p.r, &c, 1, In(5ms)).error(), std::errc::timed_out);
    CancellationSource src;
    CancellationToken tok = src.token();
    std::thread canceller([&] {
      std::this_thread::sleep_for(5ms);
      src.cancel();
    });
    EXPECT_EQ(io::read(p.r, &c, 1, {.cancel = &tok}).error(), std::errc::operation_canceled);
    canceller.join();
    // Already cancelled: fails at once.
    EXPECT_EQ(io::read(p.r, &c, 1, {.cancel = &tok}).error(), std::errc::operation_canceled);
    // The fd is still usable afterwards.
    ASSERT_EQ(RawWrite(p.w, "x", 1), 1);
    auto n = io::read(p.r, &c, 1, In(1000ms));
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(c, 'x');
  });
}

// A token's deadline (a source's cancel_at, or its parent's) ends an I/O wait as a cancellation;
// the call's own earlier deadline is still a timeout.
TEST_P(IoTest, ATokensDeadlineCancelsTheRead) {
  Pipe p;
  Run([&] {
    char c;
    CancellationSource request;
    ASSERT_TRUE(request.cancel_after(20ms).ok());
    CancellationSource call(request.token());
    CancellationToken tok = call.token();
    EXPECT_EQ(io::read(p.r, &c, 1, {.deadline = SyncClock::now() + 1ms, .cancel = &tok}).error(),
              std::errc::timed_out);
    EXPECT_EQ(io::read(p.r, &c, 1, {.cancel = &tok}).error(), std::errc::operation_canceled);
    EXPECT_TRUE(tok.is_cancelled());
    ASSERT_EQ(RawWrite(p.w, "y", 1), 1);  // the fd is still usable
    auto n = io::read(p.r, &c, 1, In(1000ms));
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(c, 'y');
  });
}

TEST_P(IoTest, WriteDeadlineAndCancellationOnAFullPipe) {
  Pipe p;
  p.FillWriteEnd();
  Run([&] {
    char c = 'y';
    EXPECT_EQ(io::write(p.w, &c, 1, In(5ms)).error(), std::errc::timed_out);
    CancellationSource src;
    CancellationToken tok = src.token();
    std::thread canceller([&] {
      std::this_thread::sleep_for(5ms);
      src.cancel();
    });
    EXPECT_EQ(io::write(p.w, &c, 1, {.cancel = &tok}).error(), std::errc::operation_canceled);
    canceller.join();
  });
}

#ifndef _WIN32
// send tries a non-blocking send first (api/io.cc); these check it keeps send's contract.
TEST_P(IoTest, SendOnAFullSocketWaitsAndHonoursDeadlineAndCancellation) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  Run([&] {
    char c = 'x';
    // Room in the buffer: done at once, even with a deadline.
    EXPECT_EQ(*io::send(sv[0], &c, 1, 0, In(1000ms)), 1u);
    // A cancelled token fails the call even when it would not have to wait.
    CancellationSource cancelled;
    cancelled.cancel();
    CancellationToken dead = cancelled.token();
    EXPECT_EQ(io::send(sv[0], &c, 1, 0, {.cancel = &dead}).error(), std::errc::operation_canceled);
    char buf[4096] = {};
    while (::send(sv[0], buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
    EXPECT_EQ(io::send(sv[0], &c, 1, 0, In(5ms)).error(), std::errc::timed_out);
    CancellationSource src;
    CancellationToken tok = src.token();
    std::thread canceller([&] {
      std::this_thread::sleep_for(5ms);
      src.cancel();
    });
    EXPECT_EQ(io::send(sv[0], &c, 1, 0, {.cancel = &tok}).error(), std::errc::operation_canceled);
    canceller.join();
    // A reader drains it: the waiting send completes.
    std::thread reader([&] {
      std::this_thread::sleep_for(5ms);
      while (::recv(sv[1], buf, sizeof buf, MSG_DONTWAIT) > 0) {
      }
    });
    EXPECT_EQ(*io::send(sv[0], &c, 1, 0), 1u);
    reader.join();
  });
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(IoBudgetTest, SendsThatNeverWaitStillLetOtherFibersRun) {
  // One worker: fiber `sender` sends 1,000 UDP datagrams to a loopback port nobody reads (a UDP
  // send never waits: the kernel drops what the receiver has no room for), and `other` needs a
  // turn while sender is still sending. It gets one because a fiber's non-blocking sends are
  // budgeted (kDirectIoBudget per run).
  int rx = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int tx = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(rx, 0);
  ASSERT_GE(tx, 0);
  SocketAddress any = SocketAddress::ipv4_loopback(0);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ASSERT_EQ(::bind(rx, any.data(), any.size()), 0);
  ASSERT_EQ(::getsockname(rx, reinterpret_cast<sockaddr*>(&ss), &len), 0);
  ASSERT_EQ(::connect(tx, reinterpret_cast<sockaddr*>(&ss), len), 0);
  Runtime rt({.workers = 1});
  std::atomic<bool> started{false}, done{false}, other_ran_during{false};
  rt.block_on([&] {
    auto sender = rt.spawn([&] {
      started = true;
      char c = 'z';
      for (int i = 0; i < 1000; ++i) ASSERT_EQ(*io::send(tx, &c, 1, 0), 1u);
      done = true;
    });
    auto other = rt.spawn([&] {
      while (!started) this_fiber::yield();
      other_ran_during = !done;
    });
    (void)sender.join();
    (void)other.join();
  });
  EXPECT_TRUE(other_ran_during);
  ::close(rx);
  ::close(tx);
}
#endif

TEST_P(IoTest, PollReadiness) {
  Pipe p;
  Run([&] {
    EXPECT_EQ(io::poll(p.r, POLLIN, In(5ms)).error(), std::errc::timed_out);
    ASSERT_EQ(RawWrite(p.w, "x", 1), 1);
    auto ev = io::poll(p.r, POLLIN, In(1000ms));
    ASSERT_TRUE(ev.ok());
    EXPECT_TRUE(*ev & POLLIN);
  });
}

TEST_P(IoTest, TcpEchoWithListenerAndStreams) {
  Run([&] {
    auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0));
    ASSERT_TRUE(listener.ok());
    auto addr = listener->local_address();
    ASSERT_TRUE(addr.ok());
    auto server = Concurrently([&] {
      auto conn = listener->accept(In(5000ms));
      ASSERT_TRUE(conn.ok());
      char buf[64];
      for (;;) {
        auto n = conn->read(buf, sizeof buf);
        ASSERT_TRUE(n.ok());
        if (*n == 0) break;
        ASSERT_TRUE(conn->write_all(buf, *n).ok());
      }
    });
    auto client = TcpStream::connect(*addr, In(5000ms));
    ASSERT_TRUE(client.ok()) << std::make_error_code(client.error()).message();
    ASSERT_TRUE(client->set_nodelay(true).ok());
    for (int i = 0; i < 100; ++i) {
      std::string msg = "message " + std::to_string(i);
      ASSERT_TRUE(client->write_all(msg.data(), msg.size()).ok());
      std::string back(msg.size(), '\0');
      ASSERT_TRUE(client->read_exact(back.data(), back.size(), In(5000ms)).ok());
      ASSERT_EQ(back, msg);
    }
    auto peer = client->peer_address();
    ASSERT_TRUE(peer.ok());
    EXPECT_EQ(peer->port(), addr->port());
    ASSERT_TRUE(client->shutdown_write().ok());
    server.join();
  });
}

TEST_P(IoTest, AcceptDeadlineAndCancellation) {
  Run([&] {
    auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0));
    ASSERT_TRUE(listener.ok());
    EXPECT_EQ(listener->accept(In(5ms)).error(), std::errc::timed_out);
    CancellationSource src;
    CancellationToken tok = src.token();
    std::thread canceller([&] {
      std::this_thread::sleep_for(5ms);
      src.cancel();
    });
    EXPECT_EQ(listener->accept({.cancel = &tok}).error(), std::errc::operation_canceled);
    canceller.join();
  });
}

TEST_P(IoTest, ConnectDeadlineAndCancellation) {
  Run([&] {
    // A listener that never accepts, with a backlog of 0, takes one connection; the SYNs of
    // later ones are dropped, so their connects hang until the deadline.
    int lfd = NewTcpSocket();
    ASSERT_GE(lfd, 0);
    SocketAddress any = SocketAddress::ipv4_loopback(0);
    ASSERT_EQ(::bind(NativeSocket(lfd), any.data(), any.size()), 0);
    ASSERT_EQ(::listen(NativeSocket(lfd), 0), 0);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ASSERT_EQ(::getsockname(NativeSocket(lfd), reinterpret_cast<sockaddr*>(&ss), &len), 0);
    auto addr = *SocketAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len);
    std::vector<TcpStream> filled;
    bool saw_timeout = false;
    for (int i = 0; i < 8 && !saw_timeout; ++i) {
      auto s = TcpStream::connect(addr, In(50ms));
      if (s.ok()) {
        filled.push_back(std::move(*s));
      } else {
        EXPECT_EQ(s.error(), std::errc::timed_out);
        saw_timeout = true;
      }
    }
    EXPECT_TRUE(saw_timeout);
    CancellationSource src;
    CancellationToken tok = src.token();
    std::thread canceller([&] {
      std::this_thread::sleep_for(5ms);
      src.cancel();
    });
    EXPECT_EQ(TcpStream::connect(addr, {.cancel = &tok}).error(), std::errc::operation_canceled);
    canceller.join();
    CloseFd(lfd);
  });
}

TEST_P(IoTest, BadInputGivesErrors) {
  Run([&] {
    char c;
    EXPECT_EQ(io::read(-1, &c, 1).error(), std::errc::bad_file_descriptor);
    EXPECT_EQ(io::write(987654, &c, 1).error(), std::errc::bad_file_descriptor);
    EXPECT_EQ(io::close(-1).error(), std::errc::bad_file_descriptor);
    EXPECT_EQ(io::close(987654).error(), std::errc::bad_file_descriptor);
    EXPECT_EQ(SocketAddress::parse("nonsense").error(), std::errc::invalid_argument);
    EXPECT_EQ(SocketAddress::parse("1.2.3.4:99999").error(), std::errc::invalid_argument);
    EXPECT_EQ(net::resolve("", 80).error(), std::errc::invalid_argument);
    auto p = SocketAddress::parse("[::1]:8080");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->to_string(), "[::1]:8080");
    EXPECT_EQ(SocketAddress::parse("127.0.0.1:80")->port(), 80);
    // A connection refused is an error, not a hang.
    auto l = TcpListener::bind(SocketAddress::ipv4_loopback(0));
    ASSERT_TRUE(l.ok());
    auto addr = *l->local_address();
    ASSERT_TRUE(l->close().ok());
    EXPECT_EQ(TcpStream::connect(addr, In(5000ms)).error(), std::errc::connection_refused);
  });
}

TEST_P(IoTest, ResolveLocalhostWithoutBlockingAWorker) {
  Run([&] {
    auto addrs = net::resolve("localhost", 8080);
    ASSERT_TRUE(addrs.ok()) << std::make_error_code(addrs.error()).message();
    ASSERT_FALSE(addrs->empty());
    EXPECT_EQ((*addrs)[0].port(), 8080);
    auto l = TcpListener::bind(SocketAddress::ipv4_loopback(0));
    ASSERT_TRUE(l.ok());
    auto port = l->local_address()->port();
    auto server = Concurrently([&] { ASSERT_TRUE(l->accept(In(5000ms)).ok()); });
    auto s = TcpStream::connect("127.0.0.1", port, In(5000ms));
    ASSERT_TRUE(s.ok());
  });
}

TEST_P(IoTest, CloseFailsAPendingRead) {
  Pipe p;
  Run([&] {
    int r = p.release_read();  // closed below, by io::close or by hand
    ASSERT_GE(r, 0);
    std::atomic<bool> parked{false};
    auto reader = Concurrently([&] {
      char c;
      parked = true;
      auto n = io::read(r, &c, 1);
      EXPECT_EQ(n.error(), std::errc::operation_canceled);
    });
    while (!parked.load()) ASSERT_TRUE(this_fiber::sleep_for(1ms).ok());
    ASSERT_TRUE(this_fiber::sleep_for(5ms).ok());
    // Fibers: the same worker's reactor. Threads: another thread's reactor, told by the close,
    // which waits until that reactor has ended the read.
    ASSERT_TRUE(io::close(r).ok());
    reader.join();
  });
}

#ifndef _WIN32  // RLIMIT_NOFILE is POSIX's; Windows has no per-process descriptor limit
TEST_P(IoTest, AcceptOutOfFdsIsReportedAndTheListenerRecovers) {
  Run([&] {
    auto l = TcpListener::bind(SocketAddress::ipv4_loopback(0));
    ASSERT_TRUE(l.ok());
    auto addr = *l->local_address();
    auto client = TcpStream::connect(addr, In(5000ms));
    ASSERT_TRUE(client.ok());
    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
    std::vector<int> hog;
    for (int fd; (fd = ::dup(0)) >= 0;) {  // take every remaining fd under a lowered limit
      hog.push_back(fd);
      if (hog.size() == 1) {
        rlimit low = old;
        low.rlim_cur = static_cast<rlim_t>(fd + 4);
        ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
      }
    }
    auto refused = l->accept(In(1000ms));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error(), std::errc::too_many_files_open);
    for (int fd : hog) ::close(fd);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
    auto ok = l->accept(In(1000ms));
    ASSERT_TRUE(ok.ok()) << std::make_error_code(ok.error()).message();
  });
}

// Connections already in a listener's backlog are accepted without parking (the call tries
// accept4 before the reactor, as a send tries send), and each comes non-blocking and
// close-on-exec, as the reactor's accepts do. A cancelled token still wins over a waiting
// connection, which a later accept then gets.
TEST(IoAcceptTest, ConnectionsWaitingInTheBacklogAreAcceptedWithoutParking) {
  constexpr int kWaiting = 8;
  const testing::NoSoftFaults no_faults;
  Backlog b(kWaiting + 1);
  ASSERT_EQ(b.waiting, kWaiting + 1);
  Result<TcpListener>& l = b.listener;
  const std::vector<int>& clients = b.clients;
  Runtime rt({.workers = 1});
  rt.block_on([&] {
    const std::uint64_t parked_before = testing::ParkedSoFar(rt);
    std::vector<TcpStream> accepted;
    for (int i = 0; i < kWaiting; ++i) {
      Result<TcpStream> s = l->accept(In(5000ms));
      ASSERT_TRUE(s.ok()) << std::make_error_code(s.error()).message();
      EXPECT_NE(::fcntl(s->fd(), F_GETFL) & O_NONBLOCK, 0);
      EXPECT_NE(::fcntl(s->fd(), F_GETFD) & FD_CLOEXEC, 0);
      accepted.push_back(std::move(*s));
    }
    EXPECT_EQ(testing::ParkedSoFar(rt), parked_before);
    CancellationSource src;
    src.cancel();
    const CancellationToken tok = src.token();
    EXPECT_EQ(l->accept({.cancel = &tok}).error(), std::errc::operation_canceled);
    Result<TcpStream> last = l->accept(In(5000ms));
    ASSERT_TRUE(last.ok()) << std::make_error_code(last.error()).message();
    // Each is its client's connection: what a client writes, its accepted stream reads.
    accepted.push_back(std::move(*last));
    for (std::size_t i = 0; i < clients.size(); ++i) {
      const char c = static_cast<char>('a' + i);
      ASSERT_EQ(RawWrite(clients[i], &c, 1), 1);
      char got = 0;
      ASSERT_EQ(*accepted[i].read(&got, 1, In(5000ms)), 1u);
      EXPECT_EQ(got, c);
    }
  });
}
#endif

INSTANTIATE_TEST_SUITE_P(FibersAndThreads, IoTest, ::testing::Values(Mode::kFibers, Mode::kThreads),
                         testing::ModeName);

// WaitUntilParkedOn: until dump_fibers shows a fiber parked in an I/O call (`what`) on fd.
void WaitUntilParkedOn(Runtime& rt, const char* what, int fd) {
  const std::string needle = " on " + std::string(what) + " fd " + std::to_string(fd);
  for (;;) {
    std::string dump = rt.dump_fibers();
    for (std::size_t at = dump.find(needle); at != std::string::npos;
         at = dump.find(needle, at + 1)) {
      char after = at + needle.size() < dump.size() ? dump[at + needle.size()] : '\n';
      if (after == '\n' || after == ' ') return;  // fd 7, not fd 71
    }
    ASSERT_TRUE(this_fiber::sleep_for(1ms).ok());
  }
}

// Closing an fd while a fiber on another worker reads it, at 1, 2, 4 and 8 workers: the read
// ends with operation_canceled before io::close returns (it never sees bytes meant for the next
// file with the same number), the peer sees end of file (no operation keeps the file open), and
// the next fd with that number works on every worker's reactor, including the reader's (no
// stale registration there).
class CrossWorkerCloseTest : public ::testing::TestWithParam<int> {};

TEST_P(CrossWorkerCloseTest, CloseEndsAnotherWorkersReadAndTheNumberIsReusedCleanly) {
  const int workers = GetParam();
  Runtime rt({.workers = static_cast<unsigned>(workers)});
  const int rounds = 24 * weft::testing::StressScale();
  rt.block_on([&] {
    for (int i = 0; i < rounds; ++i) {
      const int reader_worker = i % workers;
      const int closer_worker = (i + 1) % workers;
      auto p = std::make_unique<Pipe>(/*socket=*/true);
      int fd = p->release_read();
      ASSERT_GE(fd, 0);
      auto reader = rt.spawn(
          [fd] {
            char buf[16];
            return io::read(fd, buf, sizeof buf);
          },
          {.pinned_worker = reader_worker});
      WaitUntilParkedOn(rt, "io read", fd);
      auto closer = rt.spawn([fd] { return io::close(fd); }, {.pinned_worker = closer_worker});
      ASSERT_TRUE(closer.join()->ok());
      // The number is free now: the next fd is likely to get it. Bytes written to the new file
      // must reach only its own reader.
      auto next = std::make_unique<Pipe>(/*socket=*/true);
      ASSERT_EQ(RawWrite(next->w, "new", 3), 3);
      Result<std::size_t> old_read = *reader.join();
      ASSERT_FALSE(old_read.ok()) << "the closed fd's reader got " << *old_read << " bytes";
      EXPECT_EQ(old_read.error(), std::errc::operation_canceled);
      char eof;
      auto at_peer = io::read(p->w, &eof, 1, In(5000ms));
      ASSERT_TRUE(at_peer.ok()) << std::make_error_code(at_peer.error()).message();
      EXPECT_EQ(*at_peer, 0u) << "the peer of a closed socket sees end of file";
      // The new file, read on the reader's worker (which knew the old file by this number):
      // "new" is there already; "more" comes once the reader waits for it (on epoll, through
      // a registration that must be the new file's).
      std::atomic<bool> first_read{false};
      auto fresh = rt.spawn(
          [&] {
            char buf[8] = {};
            EXPECT_TRUE(io::read_exact(next->r, buf, 3, In(5000ms)).ok());
            EXPECT_EQ(std::string(buf, 3), "new");
            first_read = true;
            EXPECT_TRUE(io::read_exact(next->r, buf, 4, In(5000ms)).ok());
            EXPECT_EQ(std::string(buf, 4), "more");
          },
          {.pinned_worker = reader_worker});
      while (!first_read.load()) ASSERT_TRUE(this_fiber::sleep_for(1ms).ok());
      WaitUntilParkedOn(rt, "io read", next->r);
      ASSERT_EQ(RawWrite(next->w, "more", 4), 4);
      (void)fresh.join();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Workers, CrossWorkerCloseTest, ::testing::Values(1, 2, 4, 8));

// Shutdown with fibers parked on I/O: each read, accept and write completes with
// operation_canceled, and the runtime's destructor returns.
TEST(IoShutdownTest, ShutdownCancelsIoInFlight) {
  Pipe p;
  Pipe full;
  full.FillWriteEnd();
  std::atomic<int> cancelled{0};
  auto listener = TcpListener::bind(SocketAddress::ipv4_loopback(0));
  ASSERT_TRUE(listener.ok());
  {
    Runtime rt({.workers = 2});
    for (int i = 0; i < 4; ++i) {
      rt.spawn([&] {
          char c;
          if (io::read(p.r, &c, 1).error() == std::errc::operation_canceled) cancelled.fetch_add(1);
        }).detach();
      rt.spawn([&] {
          char c = 0;
          if (io::write(full.w, &c, 1).error() == std::errc::operation_canceled) {
            cancelled.fetch_add(1);
          }
        }).detach();
      rt.spawn([&] {
          if (listener->accept().error() == std::errc::operation_canceled) cancelled.fetch_add(1);
        }).detach();
    }
    for (int i = 0; i < 1000 && rt.dump_fibers().find("runnable") != std::string::npos; ++i) {
      std::this_thread::sleep_for(1ms);
    }
    std::string dump = rt.dump_fibers();
    EXPECT_NE(dump.find("on io read fd"), std::string::npos) << dump;
    EXPECT_NE(dump.find("on io accept fd"), std::string::npos) << dump;
  }
  EXPECT_EQ(cancelled.load(), 12);
}

// Once the runtime's shutdown has interrupted a fiber, its calls that would not wait are not
// tried directly either: an accept with connections waiting and a send with room both end
// operation_canceled, as a call that waits does. (Tried directly, an accept loop fed by
// arriving connections held the shutdown up for as long as they came.)
#ifndef _WIN32
TEST(IoShutdownTest, AnInterruptedFibersCallsThatWouldNotWaitEndCanceledToo) {
  constexpr int kWaiting = 100;
  Backlog b(kWaiting);
  ASSERT_EQ(b.waiting, kWaiting);
  Result<TcpListener>& l = b.listener;
  Pipe room(/*socket=*/true);
  std::atomic<int> accepted{-1};
  std::atomic<bool> send_cancelled{false};
  {
    Runtime rt({.workers = 1});
    rt.spawn([&] {
        (void)this_fiber::sleep_for(1h);  // until the shutdown interrupts it
        int n = 0;
        for (Result<TcpStream> s = l->accept(); s.ok(); s = l->accept()) ++n;
        accepted = n;
        send_cancelled = io::send(room.w, "x", 1, 0).error() == std::errc::operation_canceled;
      }).detach();
    testing::WaitUntilDumpShows(rt, "sleep", 1);
  }
  EXPECT_EQ(accepted.load(), 0);
  EXPECT_TRUE(send_cancelled.load());
}
#endif

// Inside a BlockingRegion a fiber's I/O blocks its thread, but the runtime's shutdown still ends
// it: an accept with nobody connecting ends operation_canceled (before, ~Runtime waited for a
// connection that never came), and so does one with connections waiting.
#ifndef _WIN32
TEST(IoShutdownTest, ShutdownEndsAFibersIoInsideARegion) {
  Backlog b(3);
  ASSERT_EQ(b.waiting, 3);
  auto idle = TcpListener::bind(SocketAddress::ipv4_loopback(0));
  ASSERT_TRUE(idle.ok());
  std::atomic<int> cancelled{0}, accepted_after{0};
  {
    Runtime rt({.workers = 2});
    rt.spawn([&] {
        BlockingRegion region;
        cancelled += idle->accept().error() == std::errc::operation_canceled;
      }).detach();
    rt.spawn([&] {
        BlockingRegion region;
        Event never;
        cancelled += never.wait().error() == std::errc::operation_canceled;  // the interruption
        for (Result<TcpStream> s = b.listener->accept(); s.ok(); s = b.listener->accept()) {
          ++accepted_after;
        }
        cancelled += 1;
      }).detach();
    std::this_thread::sleep_for(50ms);  // both into their regions' waits (or not: the same)
  }
  EXPECT_EQ(cancelled.load(), 3);
  EXPECT_EQ(accepted_after.load(), 0);
}
#endif

// A simulated runtime (RuntimeOptions::simulation) touches no real fd: fiber I/O, including the
// send that would first be tried as a direct system call, fails with ENOTSUP and leaves the
// pipe untouched; a new socket is the simulated network's.
#ifndef _WIN32  // (a pipe is the real fd)
TEST(SimulatedRuntime, RealFdsAreRefusedAndSocketsAreSimulated) {
  Runtime rt({.simulation = SimulationOptions{.seed = 1}});
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  rt.block_on([&] {
    char c = 'x';
    EXPECT_EQ(io::write(fds[1], &c, 1).error(), std::errc::not_supported);
    EXPECT_EQ(io::read(fds[0], &c, 1).error(), std::errc::not_supported);
    EXPECT_EQ(io::close(fds[0]).error(), std::errc::not_supported);
    // Sockets are the simulated network's (api/sim.h), numbered far above any real fd.
    Result<net::TcpListener> l = net::TcpListener::bind(net::SocketAddress::ipv4_loopback(0));
    ASSERT_TRUE(l.ok());
    EXPECT_GE(l->fd(), 0x40000000);
    EXPECT_EQ(net::TcpStream::connect(net::SocketAddress::ipv4_loopback(9)).error(),
              std::errc::connection_refused);
  });
  // Nothing was written: the pipe is empty.
  char c;
  ASSERT_EQ(::fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
  EXPECT_EQ(::read(fds[0], &c, 1), -1);
  EXPECT_EQ(errno, EAGAIN);
  ::close(fds[0]);
  ::close(fds[1]);
}
#endif

}  // namespace
}  // namespace weft
