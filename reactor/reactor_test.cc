// The reactor conformance suite, run against every backend present (io_uring when the kernel
// allows it, epoll always; IOCP on Windows, under Wine here). Every operation must complete
// exactly once: each test's ops count their completions, and the fixture checks that nothing is
// left pending at teardown.

#include "weft/reactor/reactor.h"

#ifndef _WIN32
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// The few plain socket calls the tests make themselves, on both kinds of system. On Windows an
// fd is a SOCKET cast to int (see reactor/reactor.h).
#ifdef _WIN32
void CloseFd(int fd) { closesocket(NativeSocket(fd)); }
int NewTcpSocket() { return static_cast<int>(socket(AF_INET, SOCK_STREAM, IPPROTO_TCP)); }
int ConnectBlocking(int fd, const sockaddr_in& addr) {
  return connect(NativeSocket(fd), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
}
int SendBytes(int fd, const char* p, int n) { return send(NativeSocket(fd), p, n, 0); }
#else
void CloseFd(int fd) { ::close(fd); }
int NewTcpSocket() { return socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); }
int ConnectBlocking(int fd, const sockaddr_in& addr) {
  return connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
}
int SendBytes(int fd, const char* p, int n) {
  return static_cast<int>(send(fd, p, static_cast<std::size_t>(n), MSG_NOSIGNAL));
}
#endif

// Op: an IoOp that records its completions.
struct Op : IoOp {
  int completions = 0;
  int final_completions = 0;
  std::int64_t last = 0;
  std::vector<std::int64_t> results;
  Op() {
    on_complete = [](IoOp& op, std::int64_t result, unsigned flags) {
      auto& self = static_cast<Op&>(op);
      ++self.completions;
      if ((flags & IoOp::kMore) == 0) ++self.final_completions;
      self.last = result;
      self.results.push_back(result);
    };
  }
  bool done() const { return final_completions > 0; }
  // Reset: for reuse once completed (an IoOp is reusable after its final completion).
  void Reset() {
    completions = final_completions = 0;
    results.clear();
  }
};

class ReactorTest : public ::testing::TestWithParam<ReactorBackend> {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<Reactor>> r = Reactor::create({.backend = GetParam()});
    if (!r.ok()) {
      GTEST_SKIP() << "backend not available here: " << r.error_code().message();
    }
    reactor_ = std::move(r).value();
  }
  void TearDown() override {
    if (reactor_ != nullptr) EXPECT_EQ(reactor_->pending_ops(), 0u) << "operations left pending";
    for (int fd : fds_) CloseFd(fd);
  }

  // RunUntil: polls until pred() holds. The 10 s limit only turns a hang into a failure.
  template <typename Pred>
  void RunUntil(Pred pred) {
    auto give_up = ReactorClock::now() + 10s;
    while (!pred()) {
      ASSERT_LT(ReactorClock::now(), give_up) << "the reactor stopped making progress";
      ASSERT_TRUE(reactor_->poll(ReactorClock::now() + 100ms).ok());
    }
  }
  // AllDone: whether every op in `ops` has completed (a RunUntil predicate).
  static bool AllDone(const std::vector<Op>& ops) {
    return std::all_of(ops.begin(), ops.end(), [](const Op& op) { return op.done(); });
  }
  // ReadByteByByte: writes n bytes into `a`, then submits n one-byte reads on `b` between two
  // polls (every other one with a 10 s deadline, a linked pair on io_uring), and checks that each
  // read completes once, with its byte, in submission order. (With the data already there, each
  // read takes the next byte as it is submitted, so the bytes show the order of submission.)
  void ReadByteByByte(int a, int b, int n) {
    std::vector<char> out(n);
    for (int i = 0; i < n; ++i) out[i] = static_cast<char>(i % 251);
    std::vector<Op> reads(n);
    std::vector<char> in(n, 0);
    Op w;
    reactor_->write(w, a, out.data(), out.size());
    RunUntil([&] { return w.done(); });
    ASSERT_EQ(w.last, n);
    for (int i = 0; i < n; ++i) {
      if (i % 2 == 0) reads[i].deadline = ReactorClock::now() + 10s;
      reactor_->read(reads[i], b, &in[i], 1);
    }
    RunUntil([&] { return AllDone(reads); });
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(reads[i].completions, 1) << "read " << i;
      ASSERT_EQ(reads[i].last, 1) << "read " << i;
    }
    EXPECT_EQ(in, out);
  }
  // TcpPair: a loopback TCP connection: the connecting socket and the accepted one.
  std::pair<int, int> TcpPair() {
    sockaddr_in addr;
    int l = Listener(&addr);
    int a = Tcp();
    EXPECT_EQ(ConnectBlocking(a, addr), 0);
    int b = static_cast<int>(::accept(NativeSocket(l), nullptr, nullptr));
    fds_.push_back(b);
    return {a, b};
  }
  // SocketPair: two connected stream sockets (Windows has no socketpair: loopback TCP there).
  std::pair<int, int> SocketPair() {
#ifdef _WIN32
    return TcpPair();
#else
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    fds_.push_back(sv[0]);
    fds_.push_back(sv[1]);
    return {sv[0], sv[1]};
#endif
  }
  int Listener(sockaddr_in* addr) {
    int fd = NewTcpSocket();
    EXPECT_GE(fd, 0);
    *addr = sockaddr_in{};
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(NativeSocket(fd), reinterpret_cast<sockaddr*>(addr), sizeof *addr), 0);
    socklen_t len = sizeof *addr;
    EXPECT_EQ(getsockname(NativeSocket(fd), reinterpret_cast<sockaddr*>(addr), &len), 0);
    EXPECT_EQ(listen(NativeSocket(fd), 128), 0);
    fds_.push_back(fd);
    return fd;
  }
  int Tcp() {
    int fd = NewTcpSocket();
    fds_.push_back(fd);
    return fd;
  }
  // Udp: a datagram socket bound to a free loopback port (its address in *addr).
  int Udp(sockaddr_in* addr) {
#ifdef _WIN32
    int fd = static_cast<int>(socket(AF_INET, SOCK_DGRAM, IPPROTO_UDP));
#else
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
#endif
    EXPECT_GE(fd, 0);
    *addr = sockaddr_in{};
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(NativeSocket(fd), reinterpret_cast<sockaddr*>(addr), sizeof *addr), 0);
    socklen_t len = sizeof *addr;
    EXPECT_EQ(getsockname(NativeSocket(fd), reinterpret_cast<sockaddr*>(addr), &len), 0);
    fds_.push_back(fd);
    return fd;
  }

  std::unique_ptr<Reactor> reactor_;
  std::vector<int> fds_;
};

TEST_P(ReactorTest, ReportsItsBackend) {
  EXPECT_EQ(reactor_->backend(), GetParam());
  EXPECT_EQ(reactor_->backend_name(), ReactorBackendName(GetParam()));
}

TEST_P(ReactorTest, SocketPairReadWrite) {
  auto [a, b] = SocketPair();
  Op w, r;
  char in[16] = {};
  reactor_->write(w, a, "hello", 5);
  reactor_->read(r, b, in, sizeof in);
  RunUntil([&] { return w.done() && r.done(); });
  EXPECT_EQ(w.last, 5);
  EXPECT_EQ(r.last, 5);
  EXPECT_EQ(std::string(in, 5), "hello");
  EXPECT_EQ(w.completions, 1);
  EXPECT_EQ(r.completions, 1);
}

// A socket is not tied to the reactor that used it first: a scheduler's fibers move between
// workers (one reactor each), and sockets outlive reactors. (IOCP ties a handle to one completion
// port for good: the backend routes completions to the submitting reactor.)
TEST_P(ReactorTest, ASocketMovesToAnotherReactorAndOutlivesTheFirst) {
  auto [a, b] = SocketPair();
  char got[2] = {};
  {
    Result<std::unique_ptr<Reactor>> first = Reactor::create({.backend = GetParam()});
    ASSERT_TRUE(first.ok());
    Op w, r;
    reactor_->write(w, a, "x", 1);
    (*first)->read(r, b, &got[0], 1);
    RunUntil([&] { return w.done(); });
    auto give_up = ReactorClock::now() + 10s;
    while (!r.done() && ReactorClock::now() < give_up) {
      ASSERT_TRUE((*first)->poll(ReactorClock::now() + 100ms).ok());
    }
    ASSERT_EQ(r.last, 1);
  }
  Op w, r;
  reactor_->read(r, b, &got[1], 1);  // the same socket, another reactor, the first one gone
  reactor_->write(w, a, "y", 1);
  RunUntil([&] { return w.done() && r.done(); });
  EXPECT_EQ(r.last, 1);
  EXPECT_EQ(std::string(got, 2), "xy");
}

TEST_P(ReactorTest, PipeEndOfFile) {
#ifdef _WIN32
  // Anonymous pipes cannot do overlapped I/O: the far end of a socket pair closes instead.
  auto [writer, reader] = SocketPair();
  fds_.erase(std::find(fds_.begin(), fds_.end(), writer));
#else
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  fds_.push_back(p[0]);
  int reader = p[0], writer = p[1];
#endif
  Op r;
  char buf[8];
  reactor_->read(r, reader, buf, sizeof buf);
  ASSERT_TRUE(reactor_->poll(ReactorClock::now()).ok());
  CloseFd(writer);
  RunUntil([&] { return r.done(); });
  EXPECT_EQ(r.last, 0);  // end of file
}

TEST_P(ReactorTest, LargeTransfersCompleteThroughPartialWrites) {
  auto [a, b] = SocketPair();
  std::vector<unsigned char> out(4 << 20), in(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<unsigned char>(i * 31 + 7);
  std::size_t sent = 0, received = 0;
  Op w, r;
  bool writing = false, reading = false;
  int partial_writes = 0;
  RunUntil([&] {
    if (w.done() && writing) {
      EXPECT_GT(w.last, 0);
      if (w.last <= 0) return true;
      if (static_cast<std::size_t>(w.last) < out.size() - sent) ++partial_writes;
      sent += static_cast<std::size_t>(w.last);
      writing = false;
    }
    if (r.done() && reading) {
      EXPECT_GT(r.last, 0);
      if (r.last <= 0) return true;
      received += static_cast<std::size_t>(r.last);
      reading = false;
    }
    if (!writing && sent < out.size()) {
      w.Reset();
      reactor_->write(w, a, out.data() + sent, out.size() - sent);
      writing = true;
    }
    if (!reading && received < in.size()) {
      r.Reset();
      reactor_->read(r, b, in.data() + received, in.size() - received);
      reading = true;
    }
    return sent == out.size() && received == in.size();
  });
  EXPECT_EQ(in, out);
  if (GetParam() == ReactorBackend::kIocp) {
    EXPECT_EQ(partial_writes, 0);  // an overlapped send completes once all of it is sent
  } else {
    EXPECT_GT(partial_writes, 0);  // 4 MiB does not fit a socket buffer in one write
  }
}

TEST_P(ReactorTest, ReadvAndWritev) {
  auto [a, b] = SocketPair();
  char x[] = "ab", y[] = "cde", z[] = "f";
  IoVec out[3] = {{x, 2}, {y, 3}, {z, 1}};
  char p[3] = {}, q[3] = {};
  IoVec in[2] = {{p, 3}, {q, 3}};
  Op w, r;
  reactor_->writev(w, a, out, 3);
  RunUntil([&] { return w.done(); });
  reactor_->readv(r, b, in, 2);
  RunUntil([&] { return r.done(); });
  EXPECT_EQ(w.last, 6);
  EXPECT_EQ(r.last, 6);
  EXPECT_EQ(std::string(p, 3) + std::string(q, 3), "abcdef");
}

TEST_P(ReactorTest, TcpAcceptConnectEcho) {
  sockaddr_in addr;
  int listener = Listener(&addr);
  int client = Tcp();
  Op acc, con;
  reactor_->accept(acc, listener);
  reactor_->connect(con, client, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  RunUntil([&] { return acc.done() && con.done(); });
  ASSERT_EQ(con.last, 0);
  ASSERT_GE(acc.last, 0);
  int server = static_cast<int>(acc.last);
  fds_.push_back(server);
  Op s1, r1, s2, r2;
  char buf[8] = {}, back[8] = {};
  reactor_->send(s1, client, "ping", 4);
  reactor_->recv(r1, server, buf, sizeof buf);
  RunUntil([&] { return s1.done() && r1.done(); });
  ASSERT_EQ(r1.last, 4);
  reactor_->send(s2, server, buf, 4);
  reactor_->recv(r2, client, back, sizeof back);
  RunUntil([&] { return s2.done() && r2.done(); });
  EXPECT_EQ(std::string(back, 4), "ping");
}

TEST_P(ReactorTest, ConnectToAClosedPortIsRefused) {
  sockaddr_in addr;
  int l = Listener(&addr);
  CloseFd(l);  // the port is free again: nobody listens
  fds_.erase(std::find(fds_.begin(), fds_.end(), l));
  Op con;
  reactor_->connect(con, Tcp(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  RunUntil([&] { return con.done(); });
  EXPECT_EQ(con.last, -ECONNREFUSED);
}

TEST_P(ReactorTest, DeadlinesTimeoutsAndAnIdlePoll) {
  auto [a, b] = SocketPair();
  (void)a;
  Result<int> idle = reactor_->poll(ReactorClock::now() + 5ms);  // nothing to do: returns
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(*idle, 0);
  Op r, t;
  char buf[4];
  r.deadline = ReactorClock::now() + 10ms;
  reactor_->read(r, b, buf, sizeof buf);
  reactor_->timeout(t, ReactorClock::now() + 5ms);
  RunUntil([&] { return r.done() && t.done(); });
  EXPECT_EQ(r.last, -ETIMEDOUT);
  EXPECT_EQ(t.last, 0);
}

TEST_P(ReactorTest, CancelAnInFlightRead) {
  auto [a, b] = SocketPair();
  (void)a;
  Op r, t;
  char buf[4];
  reactor_->read(r, b, buf, sizeof buf);
  ASSERT_TRUE(reactor_->poll(ReactorClock::now()).ok());  // it is in flight now
  reactor_->cancel(r);
  reactor_->cancel(r);  // twice: still one completion
  reactor_->timeout(t, ReactorClock::now() + 1h);
  reactor_->cancel(t);
  RunUntil([&] { return r.done() && t.done(); });
  EXPECT_EQ(r.last, -ECANCELED);
  EXPECT_EQ(t.last, -ECANCELED);
  EXPECT_EQ(r.completions, 1);
}

TEST_P(ReactorTest, WakeFromAnotherThread) {
  std::atomic<bool> polled{false};
  std::thread waker([&] {
    while (!polled.load()) std::this_thread::yield();
    reactor_->wake();
  });
  polled = true;
  Result<int> r = reactor_->poll(std::nullopt);  // would block forever without the wake
  waker.join();
  ASSERT_TRUE(r.ok());
  reactor_->wake();  // a wake with nobody polling makes the next poll return too
  ASSERT_TRUE(reactor_->poll(std::nullopt).ok());
}

TEST_P(ReactorTest, CloseFailsOperationsInFlight) {
  auto [a, b] = SocketPair();
  (void)a;
  Op r1, r2;
  char buf[4];
  reactor_->read(r1, b, buf, sizeof buf);
  reactor_->poll_readiness(r2, b, POLLIN);
  ASSERT_TRUE(reactor_->poll(ReactorClock::now()).ok());
  reactor_->close(b);
  fds_.erase(std::find(fds_.begin(), fds_.end(), b));
  RunUntil([&] { return r1.done() && r2.done(); });
  EXPECT_EQ(r1.last, -ECANCELED);
  EXPECT_EQ(r2.last, -ECANCELED);
}

// The close that waits: an operation of another reactor (polled by its own thread, as a worker's
// is) ends with -ECANCELED before the fd is closed, so the peer sees end of file (no operation
// keeps the file open) and the op never sees the number's next file.
TEST_P(ReactorTest, CloseEndsAnotherReactorsOperationsBeforeClosing) {
  auto [a, b] = SocketPair();
  fds_.erase(std::find(fds_.begin(), fds_.end(), b));  // closed below
  std::atomic<bool> submitted{false};
  Op r;
  char buf[8];
  std::thread other([&] {
    Result<std::unique_ptr<Reactor>> o = Reactor::create({.backend = GetParam()});
    ASSERT_TRUE(o.ok());
    (*o)->read(r, b, buf, sizeof buf);
    ASSERT_TRUE((*o)->poll(ReactorClock::now()).ok());  // in flight now
    submitted = true;
    auto give_up = ReactorClock::now() + 10s;
    while (!r.done() && ReactorClock::now() < give_up) {
      ASSERT_TRUE((*o)->poll(ReactorClock::now() + 100ms).ok());
    }
    EXPECT_EQ((*o)->pending_ops(), 0u);
  });
  while (!submitted.load()) std::this_thread::yield();
  Op c;
  reactor_->close(c, b);
  RunUntil([&] { return c.done(); });
  EXPECT_EQ(c.last, 0);
  other.join();
  EXPECT_EQ(r.last, -ECANCELED);
  EXPECT_EQ(r.completions, 1);
  Op eof;
  reactor_->read(eof, a, buf, sizeof buf);
  RunUntil([&] { return eof.done(); });
  EXPECT_EQ(eof.last, 0);
}

// A reactor with nothing pending is not waited for (it may never poll again), and forgets what it
// knew of the fd before its next operation: a new file with the same number works there.
TEST_P(ReactorTest, AnIdleReactorIsNotWaitedForAndForgetsTheClosedFd) {
  Result<std::unique_ptr<Reactor>> o = Reactor::create({.backend = GetParam()});
  ASSERT_TRUE(o.ok());
  Reactor& other = **o;
  auto poll_other_until = [&](Op& op) {
    auto give_up = ReactorClock::now() + 10s;
    while (!op.done() && ReactorClock::now() < give_up) {
      ASSERT_TRUE(other.poll(ReactorClock::now() + 100ms).ok());
    }
    ASSERT_TRUE(op.done()) << "the other reactor stopped making progress";
  };
  auto [a, b] = SocketPair();
  fds_.erase(std::find(fds_.begin(), fds_.end(), b));
  char buf[8];
  {
    Op r, w;
    other.read(r, b, buf, sizeof buf);  // waits, so the other reactor registers b
    ASSERT_TRUE(other.poll(ReactorClock::now()).ok());
    reactor_->write(w, a, "x", 1);
    RunUntil([&] { return w.done(); });
    poll_other_until(r);
    ASSERT_EQ(r.last, 1);
  }
  Op c;
  reactor_->close(c, b);  // the other reactor is not polled from here on, until its next op
  RunUntil([&] { return c.done(); });
  EXPECT_EQ(c.last, 0);
  auto [a2, b2] = SocketPair();  // likely b's number again
  Op r2, w2;
  other.read(r2, b2, buf, sizeof buf);
  ASSERT_TRUE(other.poll(ReactorClock::now()).ok());  // waits for data
  reactor_->write(w2, a2, "yz", 2);
  RunUntil([&] { return w2.done(); });
  poll_other_until(r2);
  EXPECT_EQ(r2.last, 2);
  EXPECT_EQ(std::string(buf, 2), "yz");
  EXPECT_EQ(other.pending_ops(), 0u);
}

// Lengths past 32 bits: at most kMaxIoLength per operation, never wrapped (a 4 GiB read of 3
// available bytes returns 3, not 0, which a caller would take for end of file); past SSIZE_MAX,
// -EINVAL. The buffer really is 4 GiB (address space only, MAP_NORESERVE: the kernel writes just
// the bytes the socket holds; emulators such as qemu-user check the whole range).
TEST_P(ReactorTest, HugeLengthsAreClampedNeverWrappedAndAbsurdOnesRefused) {
  auto [a, b] = SocketPair();
  auto heap = std::make_unique<char[]>(64);
#ifndef _WIN32  // Windows has no MAP_NORESERVE; Winsock checks the whole buffer: the clamp alone
  const std::size_t four_gib = std::size_t{1} << 32;
  void* big = mmap(nullptr, four_gib + 4096, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (big != MAP_FAILED) {
    char* p = static_cast<char*>(big);
    Op w, w2, r1, r2;
    reactor_->write(w, a, "abc", 3);
    RunUntil([&] { return w.done(); });
    ASSERT_EQ(w.last, 3);
    reactor_->read(r1, b, p, four_gib);
    RunUntil([&] { return r1.done(); });
    EXPECT_EQ(r1.last, 3);
    EXPECT_EQ(std::string(p, 3), "abc");
    reactor_->write(w2, a, "de", 2);
    RunUntil([&] { return w2.done(); });
    reactor_->recv(r2, b, p, four_gib + 1);
    RunUntil([&] { return r2.done(); });
    EXPECT_EQ(r2.last, 2);
    EXPECT_EQ(munmap(big, four_gib + 4096), 0);
  }
#endif
  const std::size_t absurd = (std::size_t{1} << 63) + 5;
  Op e1, e2, e3, e4;
  reactor_->read(e1, b, heap.get(), absurd);
  reactor_->write(e2, a, heap.get(), absurd);
  reactor_->recv(e3, b, heap.get(), absurd);
  reactor_->send(e4, a, heap.get(), absurd);
  RunUntil([&] { return e1.done() && e2.done() && e3.done() && e4.done(); });
  for (Op* e : {&e1, &e2, &e3, &e4}) EXPECT_EQ(e->last, -EINVAL);
}

// An offset on a pipe or socket is ignored on every backend (io_uring's rule), never ESPIPE on
// one and data on another; an offset below -1 is -EINVAL.
TEST_P(ReactorTest, AnOffsetOnAPipeOrSocketIsIgnoredAndANegativeOneIsRefused) {
  auto [a, b] = SocketPair();
  Op w, r, bad_r, bad_w;
  char buf[8] = {};
  reactor_->write(w, a, "hello", 5, /*offset=*/3);
  RunUntil([&] { return w.done(); });
  EXPECT_EQ(w.last, 5);
  reactor_->read(r, b, buf, sizeof buf, /*offset=*/7);
  RunUntil([&] { return r.done(); });
  EXPECT_EQ(r.last, 5);
  EXPECT_EQ(std::string(buf, 5), "hello");
  reactor_->read(bad_r, b, buf, sizeof buf, /*offset=*/-2);
  reactor_->write(bad_w, a, buf, 1, /*offset=*/-7);
  RunUntil([&] { return bad_r.done() && bad_w.done(); });
  EXPECT_EQ(bad_r.last, -EINVAL);
  EXPECT_EQ(bad_w.last, -EINVAL);
#ifndef _WIN32
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  fds_.push_back(p[0]);
  fds_.push_back(p[1]);
  Op pw, pr;
  reactor_->write(pw, p[1], "pipe", 4, /*offset=*/100);
  RunUntil([&] { return pw.done(); });
  EXPECT_EQ(pw.last, 4);
  reactor_->read(pr, p[0], buf, sizeof buf, /*offset=*/100);
  RunUntil([&] { return pr.done(); });
  EXPECT_EQ(pr.last, 4);
  EXPECT_EQ(std::string(buf, 4), "pipe");
#endif
}

// Many operations between two polls on the smallest ring: the submission queue fills again and
// again, and the completion queue overflows (the kernel may then refuse submissions for a while,
// which leaves operations waiting for room). Every op completes once, in order, with its byte.
TEST_P(ReactorTest, ThousandsOfOpsBetweenTwoPollsOnASmallRingAllCompleteInOrder) {
  Result<std::unique_ptr<Reactor>> small = Reactor::create({.backend = GetParam(), .entries = 8});
  ASSERT_TRUE(small.ok());
  reactor_ = std::move(small).value();
  auto [a, b] = SocketPair();
  ReadByteByByte(a, b, 2000);
}

#ifndef _WIN32
// The same, and cancels and a close on top, with every third SQE refused (io_uring's fault
// injection; the kernel refuses submissions with EBUSY or EAGAIN under pressure): operations and
// cancels wait for room in submission order and none is lost or delivered twice.
TEST_P(ReactorTest, RefusedSubmissionsWaitAndNothingIsLost) {
  ASSERT_EQ(setenv("WEFT_URING_REFUSE_SQES", "3", 1), 0);
  Result<std::unique_ptr<Reactor>> faulty = Reactor::create({.backend = GetParam(), .entries = 8});
  ASSERT_EQ(unsetenv("WEFT_URING_REFUSE_SQES"), 0);
  ASSERT_TRUE(faulty.ok());
  reactor_ = std::move(faulty).value();
  auto [a, b] = SocketPair();
  ReadByteByByte(a, b, 300);
  if (HasFatalFailure()) return;
  // Reads that wait, then cancels, then a close, all through refused SQEs.
  std::vector<Op> waiting(40);
  char sink[40];
  for (int i = 0; i < 40; ++i) reactor_->read(waiting[i], b, &sink[i], 1);
  for (int i = 0; i < 20; ++i) reactor_->cancel(waiting[i]);
  Op c;
  reactor_->close(c, b);
  fds_.erase(std::find(fds_.begin(), fds_.end(), b));
  RunUntil([&] { return AllDone(waiting) && c.done(); });
  for (const Op& r : waiting) {
    EXPECT_EQ(r.completions, 1);
    EXPECT_EQ(r.last, -ECANCELED);
  }
  EXPECT_EQ(c.last, 0);
}
#endif

// accept with an address buffer but no length is refused before a connection is taken: the
// client stays queued and the next, well-formed accept gets it.
TEST_P(ReactorTest, AcceptWithAnAddressButNoLengthTakesNoConnection) {
  sockaddr_in addr;
  int l = Listener(&addr);
  int c = Tcp();
  ASSERT_EQ(ConnectBlocking(c, addr), 0);
  sockaddr_storage peer{};
  socklen_t huge = 0x80000000u;
  Op bad, bad_len, good;
  reactor_->accept(bad, l, reinterpret_cast<sockaddr*>(&peer), nullptr);
  reactor_->accept(bad_len, l, reinterpret_cast<sockaddr*>(&peer), &huge);
  RunUntil([&] { return bad.done() && bad_len.done(); });
  EXPECT_EQ(bad.last, -EINVAL);
  EXPECT_EQ(bad_len.last, -EINVAL);
  socklen_t len = sizeof peer;
  reactor_->accept(good, l, reinterpret_cast<sockaddr*>(&peer), &len);
  RunUntil([&] { return good.done(); });
  ASSERT_GE(good.last, 0) << "the connection was dropped";
  fds_.push_back(static_cast<int>(good.last));
  EXPECT_EQ(peer.ss_family, AF_INET);
}

TEST_P(ReactorTest, BadFdsAndArgumentsAreErrors) {
  Op a, b, c, d, e;
  char buf[4];
  reactor_->read(a, -1, buf, sizeof buf);
  reactor_->read(b, 1000000, buf, sizeof buf);  // not an open fd (nor a Windows handle)
  auto [x, y] = SocketPair();
  (void)y;
  reactor_->read(c, x, nullptr, 16);
  reactor_->connect(d, Tcp(), nullptr, 0);
  reactor_->poll_readiness(e, x, 0);
  RunUntil([&] { return a.done() && b.done() && c.done() && d.done() && e.done(); });
  EXPECT_EQ(a.last, -EBADF);
  EXPECT_EQ(b.last, -EBADF);
  EXPECT_EQ(c.last, -EINVAL);
  EXPECT_EQ(d.last, -EINVAL);
  EXPECT_EQ(e.last, -EINVAL);
}

// recvmsg / sendmsg: whole datagrams with their addresses; one longer than the buffer is cut
// and flagged; every op completes once.
TEST_P(ReactorTest, DatagramsWithTheirAddresses) {
  sockaddr_in a_addr, b_addr;
  int a = Udp(&a_addr);
  int b = Udp(&b_addr);
  char out[] = "datagram one";
  IoVec ov{out, sizeof out};
  MsgHdr sm{};
  sm.msg_name = &b_addr;
  sm.msg_namelen = sizeof b_addr;
  sm.msg_iov = &ov;
  sm.msg_iovlen = 1;
  Op s1, s2;
  reactor_->sendmsg(s1, a, &sm);
  RunUntil([&] { return s1.done(); });
  ASSERT_EQ(s1.last, static_cast<std::int64_t>(sizeof out));
  char in[64] = {};
  sockaddr_in from{};
  IoVec iv{in, sizeof in};
  MsgHdr rm{};
  rm.msg_name = &from;
  rm.msg_namelen = sizeof from;
  rm.msg_iov = &iv;
  rm.msg_iovlen = 1;
  Op r1;
  reactor_->recvmsg(r1, b, &rm);
  RunUntil([&] { return r1.done(); });
  ASSERT_EQ(r1.last, static_cast<std::int64_t>(sizeof out));
  EXPECT_EQ(r1.completions, 1);
  EXPECT_STREQ(in, out);
  EXPECT_EQ(rm.msg_namelen, static_cast<socklen_t>(sizeof from));
  EXPECT_EQ(from.sin_port, a_addr.sin_port);
  EXPECT_EQ(rm.msg_flags & kMsgTruncated, 0);
  // Longer than the buffer: the first 4 bytes, flagged; the rest is gone (the next datagram
  // is whole).
  reactor_->sendmsg(s2, a, &sm);
  RunUntil([&] { return s2.done(); });
  Op r2, r3;
  char small[4];
  IoVec sv{small, sizeof small};
  rm.msg_iov = &sv;
  rm.msg_namelen = sizeof from;
  reactor_->recvmsg(r2, b, &rm);
  RunUntil([&] { return r2.done(); });
  EXPECT_EQ(r2.last, 4);
  EXPECT_NE(rm.msg_flags & kMsgTruncated, 0);
  EXPECT_EQ(std::string(small, 4), "data");
  Op s3;
  reactor_->sendmsg(s3, a, &sm);
  rm.msg_iov = &iv;
  rm.msg_namelen = sizeof from;
  reactor_->recvmsg(r3, b, &rm);
  RunUntil([&] { return s3.done() && r3.done(); });
  EXPECT_EQ(r3.last, static_cast<std::int64_t>(sizeof out));
  EXPECT_EQ(rm.msg_flags & kMsgTruncated, 0);
}

TEST_P(ReactorTest, DatagramCancelDeadlineCloseAndBadInput) {
  sockaddr_in addr;
  int u = Udp(&addr);
  char buf[16];
  IoVec v{buf, sizeof buf};
  MsgHdr m1{}, m2{}, m3{};
  for (MsgHdr* m : {&m1, &m2, &m3}) {
    m->msg_iov = &v;
    m->msg_iovlen = 1;
  }
  Op cancelled, timed, bad_msg, bad_fd, too_many;
  reactor_->recvmsg(cancelled, u, &m1);
  timed.deadline = ReactorClock::now() + 20ms;
  reactor_->recvmsg(timed, u, &m2);
  ASSERT_TRUE(reactor_->poll(ReactorClock::now()).ok());
  reactor_->cancel(cancelled);
  reactor_->cancel(cancelled);
  reactor_->recvmsg(bad_msg, u, nullptr);
  reactor_->sendmsg(bad_fd, -1, &m3);
  MsgHdr huge = m3;
  huge.msg_iovlen = 5000;
  reactor_->sendmsg(too_many, u, &huge);
  RunUntil([&] {
    return cancelled.done() && timed.done() && bad_msg.done() && bad_fd.done() && too_many.done();
  });
  EXPECT_EQ(cancelled.last, -ECANCELED);
  EXPECT_EQ(cancelled.completions, 1);
  EXPECT_EQ(timed.last, -ETIMEDOUT);
  EXPECT_EQ(bad_msg.last, -EINVAL);
  EXPECT_EQ(bad_fd.last, -EBADF);
  EXPECT_EQ(too_many.last, -EINVAL);
  // A close fails a receive in flight.
  Op closed;
  reactor_->recvmsg(closed, u, &m1);
  ASSERT_TRUE(reactor_->poll(ReactorClock::now()).ok());
  reactor_->close(u);
  fds_.erase(std::find(fds_.begin(), fds_.end(), u));
  RunUntil([&] { return closed.done(); });
  EXPECT_EQ(closed.last, -ECANCELED);
}

#ifndef _WIN32
// openat, fsync, statx: done by io_uring (each completes once, a read at an offset between
// them), refused by epoll with -ENOSYS (once each too); a null path or buffer is -EINVAL.
TEST_P(ReactorTest, FileOperationsCompleteOnceOrAreRefused) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/reactor_file_ops";
  {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "0123456789", 10), 10);
    ::close(fd);
  }
  Op open_op, bad_open, bad_statx;
  reactor_->openat(open_op, AT_FDCWD, path.c_str(), O_RDWR | O_CLOEXEC, 0);
  reactor_->openat(bad_open, AT_FDCWD, nullptr, O_RDONLY, 0);
  RunUntil([&] { return open_op.done() && bad_open.done(); });
  EXPECT_EQ(open_op.completions, 1);
  EXPECT_EQ(bad_open.last, reactor_->backend() == ReactorBackend::kIoUring ? -EINVAL : -ENOSYS);
  if (reactor_->backend() != ReactorBackend::kIoUring) {
    EXPECT_EQ(open_op.last, -ENOSYS);
    return;
  }
  ASSERT_GE(open_op.last, 0);
  const int fd = static_cast<int>(open_op.last);
  fds_.push_back(fd);
  Op read_op, sync_op, stat_op;
  char buf[4] = {};
  reactor_->read(read_op, fd, buf, 4, 3);
  reactor_->fsync(sync_op, fd, /*datasync=*/true);
  struct statx sx {};
  reactor_->statx(stat_op, fd, &sx);
  reactor_->statx(bad_statx, fd, nullptr);
  RunUntil([&] { return read_op.done() && sync_op.done() && stat_op.done() && bad_statx.done(); });
  EXPECT_EQ(read_op.last, 4);
  EXPECT_EQ(std::string(buf, 4), "3456");
  EXPECT_EQ(sync_op.last, 0);
  EXPECT_EQ(stat_op.last, 0);
  EXPECT_EQ(sx.stx_size, 10u);
  EXPECT_EQ(bad_statx.last, -EINVAL);
  EXPECT_EQ(read_op.completions + sync_op.completions + stat_op.completions, 3);
}
#endif

// send_zerocopy: over TCP (io_uring: SEND_ZC, completing at its notification) and over a
// stream socket pair (a Unix socket on Linux: io_uring falls back to a plain send); the bytes
// arrive whole and each op completes once.
TEST_P(ReactorTest, ZeroCopySendsCompleteOnceWithTheirBytes) {
  auto [c, s] = TcpPair();
  ASSERT_GE(s, 0);
  auto [a, b] = SocketPair();
  for (auto [from, to] : {std::pair<int, int>{c, s}, std::pair<int, int>{a, b}}) {
    std::string out(256 << 10, '\0');
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i % 253);
    std::string in(out.size(), '\0');
    // A zero-copy send completes once the kernel is done with the buffer: on loopback, once
    // the peer has read the bytes, so the reads go on while the send waits.
    std::size_t sent = 0, got = 0;
    while (sent < out.size()) {
      Op w;
      reactor_->send_zerocopy(w, from, out.data() + sent, out.size() - sent);
      while (!w.done() || got < sent + (w.done() ? static_cast<std::size_t>(w.last) : 0)) {
        Op r;
        r.deadline = ReactorClock::now() + 50ms;  // (all read, the send's notification pending)
        reactor_->recv(r, to, in.data() + got, in.size() - got);
        RunUntil([&] { return r.done(); });
        if (r.last == -ETIMEDOUT) continue;
        ASSERT_GT(r.last, 0);
        got += static_cast<std::size_t>(r.last);
      }
      ASSERT_EQ(w.completions, 1);
      ASSERT_GT(w.last, 0) << w.last;
      sent += static_cast<std::size_t>(w.last);
    }
    EXPECT_EQ(got, out.size());
    EXPECT_EQ(in, out);
  }
  Op bad;
  reactor_->send_zerocopy(bad, c, nullptr, 5);
  RunUntil([&] { return bad.done(); });
  EXPECT_EQ(bad.last, -EINVAL);
}

// Pooled receives: on io_uring each completes once, with its bytes in a lent buffer that goes
// back (on another thread) and is lent again; a cancel, a deadline and a close end one that waits
// without a buffer; bad input is an error. Elsewhere pooled_receives() is false and the call is
// refused.
TEST_P(ReactorTest, PooledReceivesCompleteOnceWithALentBuffer) {
  auto [a, b] = SocketPair();
  Op r;
  PooledBuffer got;
  if (!reactor_->pooled_receives()) {
    reactor_->recv_pooled(r, b, &got);
    RunUntil([&] { return r.done(); });
    EXPECT_EQ(r.last, -EINVAL);
    EXPECT_EQ(got.pool, nullptr);
    return;
  }
  // More receives than the pool has buffers, each handed back on another thread.
  for (int i = 0; i < 2500; ++i) {
    r.Reset();
    const char byte = static_cast<char>('a' + i % 26);
    reactor_->recv_pooled(r, b, &got);
    ASSERT_TRUE(reactor_->poll(ReactorClock::now()).ok());  // waiting, with no buffer
    ASSERT_EQ(SendBytes(a, &byte, 1), 1);
    RunUntil([&] { return r.done(); });
    ASSERT_EQ(r.completions, 1);
    ASSERT_EQ(r.last, 1) << "receive " << i;
    ASSERT_NE(got.pool, nullptr);
    ASSERT_EQ(got.data[0], byte);
    std::thread([&] { got.pool->release(got.id); }).join();
  }
  // Cancel, deadline, close: each ends a waiting receive once, with no buffer.
  r.Reset();
  reactor_->recv_pooled(r, b, &got);
  ASSERT_TRUE(reactor_->poll(ReactorClock::now()).ok());
  reactor_->cancel(r);
  RunUntil([&] { return r.done(); });
  EXPECT_EQ(r.last, -ECANCELED);
  EXPECT_EQ(got.pool, nullptr);
  r.Reset();
  r.deadline = ReactorClock::now() + 20ms;
  reactor_->recv_pooled(r, b, &got);
  RunUntil([&] { return r.done(); });
  EXPECT_EQ(r.last, -ETIMEDOUT);
  EXPECT_EQ(r.completions, 1);
  r.deadline.reset();
  r.Reset();
  reactor_->recv_pooled(r, b, &got);
  ASSERT_TRUE(reactor_->poll(ReactorClock::now()).ok());
  Op c;
  reactor_->close(c, b);
  fds_.erase(std::find(fds_.begin(), fds_.end(), b));
  RunUntil([&] { return r.done() && c.done(); });
  EXPECT_EQ(r.last, -ECANCELED);
  EXPECT_EQ(r.completions, 1);
  // Bad input.
  Op bad_fd, no_out;
  reactor_->recv_pooled(bad_fd, -1, &got);
  reactor_->recv_pooled(no_out, a, nullptr);
  RunUntil([&] { return bad_fd.done() && no_out.done(); });
  EXPECT_EQ(bad_fd.last, -EBADF);
  EXPECT_EQ(no_out.last, -EINVAL);
}

TEST_P(ReactorTest, MultishotAccept) {
  sockaddr_in addr;
  int listener = Listener(&addr);
  Op acc;
  reactor_->accept_multishot(acc, listener);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(ConnectBlocking(Tcp(), addr), 0);
  RunUntil([&] { return acc.completions >= 3; });
  EXPECT_EQ(acc.final_completions, 0);  // still accepting
  for (std::int64_t fd : acc.results) {
    ASSERT_GE(fd, 0);
    fds_.push_back(static_cast<int>(fd));
  }
  reactor_->cancel(acc);
  RunUntil([&] { return acc.done(); });
  EXPECT_EQ(acc.last, -ECANCELED);
  EXPECT_EQ(acc.completions, 4);
}

#ifndef _WIN32
// RLIMIT_NOFILE and EMFILE are POSIX's; Windows has no per-process descriptor limit.
TEST_P(ReactorTest, TenThousandFdsAtOnce) {
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_max < 10200) GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << lim.rlim_max;
  rlimit raised = lim;
  raised.rlim_cur = lim.rlim_max < 20000 ? lim.rlim_max : 20000;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &raised), 0);
  constexpr int kPairs = 5000;
  std::vector<Op> reads(kPairs);
  std::vector<char> bufs(kPairs);
  std::vector<int> writers;
  for (int i = 0; i < kPairs; ++i) {
    auto [a, b] = SocketPair();
    writers.push_back(a);
    reactor_->read(reads[i], b, &bufs[i], 1);
  }
  ASSERT_TRUE(reactor_->poll(ReactorClock::now()).ok());
  EXPECT_EQ(reactor_->pending_ops(), static_cast<std::size_t>(kPairs));
  for (int fd : writers) ASSERT_EQ(::write(fd, "x", 1), 1);
  RunUntil([&] { return AllDone(reads); });
  for (const Op& r : reads) EXPECT_EQ(r.last, 1);
  for (int fd : fds_) ::close(fd);
  fds_.clear();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lim), 0);
}

TEST_P(ReactorTest, EmfileOnAcceptIsReportedAndTheListenerRecovers) {
  sockaddr_in addr;
  int listener = Listener(&addr);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(connect(Tcp(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  }
  // No descriptor left: the highest open fd + 1 becomes the limit.
  int probe = dup(listener);
  ASSERT_GE(probe, 0);
  ::close(probe);
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  rlimit tight = lim;
  tight.rlim_cur = static_cast<rlim_t>(probe);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  Op full;
  reactor_->accept(full, listener);
  RunUntil([&] { return full.done(); });
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lim), 0);
  EXPECT_EQ(full.last, -EMFILE);
  Op again;
  reactor_->accept(again, listener);  // the same listener, now that fds are available
  RunUntil([&] { return again.done(); });
  ASSERT_GE(again.last, 0);
  fds_.push_back(static_cast<int>(again.last));
}
#endif  // !_WIN32

std::vector<ReactorBackend> Backends() {
#ifdef _WIN32
  return {ReactorBackend::kIocp};
#else
  return {ReactorBackend::kIoUring, ReactorBackend::kEpoll};
#endif
}

INSTANTIATE_TEST_SUITE_P(Backends, ReactorTest, ::testing::ValuesIn(Backends()),
                         [](const auto& info) {
                           return std::string(ReactorBackendName(info.param));
                         });

#ifdef _WIN32
TEST(ReactorCreateTest, AutoIsIocpAndLinuxBackendsAreRefused) {
  Result<std::unique_ptr<Reactor>> any = Reactor::create();
  ASSERT_TRUE(any.ok());
  EXPECT_EQ((*any)->backend(), ReactorBackend::kIocp);
  EXPECT_EQ(Reactor::create({.backend = ReactorBackend::kEpoll}).error(),
            std::errc::invalid_argument);
}
#else
TEST(ReactorCreateTest, ARefusedRingClosesNothingItDidNotOpen) {
  // Past IORING_MAX_ENTRIES the kernel refuses the ring with EINVAL. The failed reactor used to
  // "exit" its zeroed ring on destruction, closing fd 0.
  if (fcntl(0, F_GETFD) < 0) ASSERT_EQ(open("/dev/null", O_RDONLY), 0);
  Result<std::unique_ptr<Reactor>> r =
      Reactor::create({.backend = ReactorBackend::kIoUring, .entries = 1u << 20});
  EXPECT_FALSE(r.ok());
  EXPECT_GE(fcntl(0, F_GETFD), 0) << "fd 0 was closed by a reactor that never opened it";
}

TEST(ReactorCreateTest, AutoPicksABackendAndTheEnvironmentOverridesIt) {
  Result<std::unique_ptr<Reactor>> any = Reactor::create();
  ASSERT_TRUE(any.ok());
  setenv("WEFT_REACTOR", "epoll", 1);
  Result<std::unique_ptr<Reactor>> forced = Reactor::create();
  unsetenv("WEFT_REACTOR");
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ((*forced)->backend(), ReactorBackend::kEpoll);
}
#endif

}  // namespace
}  // namespace weft
