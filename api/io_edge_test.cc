// api/io_edge_test.cc: edge cases of the datagram and file calls on Linux:
// /proc files, FIFOs, batches, IPv6, a socket closed while others use it (never another
// socket's datagrams), MSG_DONTWAIT, shutdown mid-call. (A File closed while others use it, the
// largest offsets and append are api/fs_test.cc's, which runs on Windows too.)

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/fs.h"
#include "weft/api/io.h"
#include "weft/api/net.h"
#include "weft/api/testing/dual_mode.h"
#include "weft/base/clock.h"
#include "weft/scheduler/io.h"
#include "weft/scheduler/runtime.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::Mode;

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  static std::atomic<int> n{0};
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name + "." +
         std::to_string(n.fetch_add(1));
}

bool Uring() {
  const char* e = std::getenv("WEFT_REACTOR");
  return e == nullptr || std::string(e) != "epoll";
}

class AdvTest : public testing::DualModeTest {
 protected:
  AdvTest() : DualModeTest(2) {}
};

net::UdpSocket Bound4() {
  Result<net::UdpSocket> s = net::UdpSocket::bind(net::SocketAddress::ipv4_loopback(0));
  EXPECT_TRUE(s.ok());
  return std::move(*s);
}

// ---- files ----------------------------------------------------------------------------------

TEST_P(AdvTest, ReadFileOfAProcFileReturnsItsContent) {
  Run([&] {
    Result<std::string> s = fs::read_file("/proc/self/status");
    ASSERT_TRUE(s.ok()) << s.error_code().message();
    EXPECT_NE(s->find("Name:"), std::string::npos) << "got " << s->size() << " bytes";
  });
}

TEST_P(AdvTest, SyncOnAReadOnlyFileAndStatOfAFifo) {
  const std::string path = TmpPath("ro");
  const std::string fifo = TmpPath("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Run([&] {
    {
      Result<fs::File> f = fs::File::open(path, {.write = true, .create = true});
      ASSERT_TRUE(f.ok());
    }
    Result<fs::File> f = fs::File::open(path);
    ASSERT_TRUE(f.ok());
    EXPECT_TRUE(f->sync().ok());
    EXPECT_TRUE(f->sync_data().ok());
    // O_RDWR on a FIFO does not wait for a partner (Linux).
    Result<fs::File> p = fs::File::open(fifo, {.read = true, .write = true});
    ASSERT_TRUE(p.ok());
    Result<fs::FileStat> st = p->stat();
    ASSERT_TRUE(st.ok());
    EXPECT_FALSE(st->regular);
    EXPECT_FALSE(st->directory);
    EXPECT_EQ(st->size, 0u);
  });
}

// A FIFO: a small read_at and a large one of the same data behave alike.
TEST_P(AdvTest, ReadAtOnAFifoAgreesForSmallAndLargeReads) {
  const std::string fifo = TmpPath("fifo2");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Run([&] {
    Result<fs::File> p = fs::File::open(fifo, {.read = true, .write = true});
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(::write(p->fd(), "hello world", 11), 11);
    std::vector<char> buf(256 << 10);
    Result<std::size_t> small = p->read_at(buf.data(), 5, 0);
    Result<std::size_t> large = p->read_at(buf.data(), buf.size(), 0);
    std::string s = small.ok() ? std::to_string(*small) : small.error_code().message();
    std::string l = large.ok() ? std::to_string(*large) : large.error_code().message();
    EXPECT_EQ(small.ok(), large.ok()) << "small: " << s << ", large: " << l;
  });
}

// ---- datagrams ------------------------------------------------------------------------------

TEST_P(AdvTest, Ipv6LoopbackSendRecvAndBatches) {
  Run([&] {
    Result<net::SocketAddress> any6 = net::SocketAddress::parse("[::1]:0");
    ASSERT_TRUE(any6.ok());
    Result<net::UdpSocket> a = net::UdpSocket::bind(*any6);
    Result<net::UdpSocket> b = net::UdpSocket::bind(*any6);
    if (!a.ok()) GTEST_SKIP() << "no IPv6: " << a.error_code().message();
    ASSERT_TRUE(b.ok());
    const net::SocketAddress to = *b->local_address();
    ASSERT_EQ(*a->send_to("v6", 2, to), 2u);
    char buf[16];
    Result<net::UdpSocket::Datagram> d = b->recv_from(buf, sizeof buf);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->size, 2u);
    EXPECT_EQ(d->from.to_string(), a->local_address()->to_string());
    EXPECT_EQ(d->from.family(), AF_INET6);
    std::vector<net::UdpSocket::Outgoing> out = {{"a", 1, to}, {"bb", 2, to}, {"ccc", 3, to}};
    ASSERT_EQ(*a->send_batch(out.data(), out.size()), 3u);
    std::vector<std::string> st(3, std::string(8, '\0'));
    std::vector<net::UdpSocket::Buffer> bufs(3);
    for (int i = 0; i < 3; ++i) bufs[i] = {st[i].data(), st[i].size(), {}};
    std::size_t got = 0;
    while (got < 3) {
      Result<std::size_t> n = b->recv_batch(bufs.data() + got, 3 - got);
      ASSERT_TRUE(n.ok());
      for (std::size_t i = got; i < got + *n; ++i) {
        EXPECT_EQ(bufs[i].got.from.to_string(), a->local_address()->to_string());
      }
      got += *n;
    }
    // an IPv4 address to an IPv6 socket (not v6only): mapped, works
  });
}

TEST_P(AdvTest, RecvBatchTruncationPerBufferAndFewerQueued) {
  Run([&] {
    net::UdpSocket a = Bound4(), b = Bound4();
    const net::SocketAddress to = *b.local_address();
    ASSERT_TRUE(a.send_to("0123456789", 10, to).ok());
    ASSERT_TRUE(a.send_to("abcdefghij", 10, to).ok());
    ASSERT_TRUE(a.send_to("", 0, to).ok());
    ASSERT_TRUE(a.send_to("KLMNOPQRST", 10, to).ok());
    ASSERT_TRUE(this_fiber::sleep_for(20ms).ok());  // all queued
    char b0[4], b1[20], b2[4], b3[4];
    char b4[8], b5[8], b6[8], b7[8];
    std::vector<net::UdpSocket::Buffer> bufs = {{b0, 4, {}}, {b1, 20, {}}, {b2, 4, {}},
                                                {b3, 4, {}}, {b4, 8, {}},  {b5, 8, {}},
                                                {b6, 8, {}}, {b7, 8, {}}};
    Result<std::size_t> n =
        b.recv_batch(bufs.data(), bufs.size(), {.deadline = SyncClock::now() + 5s});
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, 4u);
    EXPECT_EQ(bufs[0].got.size, 4u);
    EXPECT_TRUE(bufs[0].got.truncated);
    EXPECT_EQ(bufs[1].got.size, 10u);
    EXPECT_FALSE(bufs[1].got.truncated);
    EXPECT_EQ(bufs[2].got.size, 0u);
    EXPECT_FALSE(bufs[2].got.truncated);
    EXPECT_EQ(bufs[3].got.size, 4u);
    EXPECT_TRUE(bufs[3].got.truncated);
    EXPECT_EQ(std::string(b3, 4), "KLMN");
    EXPECT_EQ(bufs[3].got.from.to_string(), a.local_address()->to_string());
  });
}

TEST_P(AdvTest, SendBatchWithABadAddressInTheMiddle) {
  Run([&] {
    net::UdpSocket a = Bound4(), b = Bound4();
    const net::SocketAddress to = *b.local_address();
    net::SocketAddress v6 = *net::SocketAddress::parse("[::1]:9");
    std::vector<net::UdpSocket::Outgoing> out = {{"1", 1, to}, {"2", 1, v6}, {"3", 1, to}};
    Result<std::size_t> n = a.send_batch(out.data(), out.size());
    ASSERT_TRUE(n.ok()) << n.error_code().message();
    EXPECT_EQ(*n, 1u);
    // the rest again: the bad one first: its error
    n = a.send_batch(out.data() + 1, 2);
    EXPECT_FALSE(n.ok());
    // a datagram too large in the middle
    std::vector<char> huge(70000, 'h');
    std::vector<net::UdpSocket::Outgoing> out2 = {{"1", 1, to}, {huge.data(), huge.size(), to}};
    n = a.send_batch(out2.data(), out2.size());
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 1u);
    // 1024 goes (or some), 1025 is refused
    std::vector<net::UdpSocket::Outgoing> many(1025, {"m", 1, to});
    n = a.send_batch(many.data(), 1024);
    ASSERT_TRUE(n.ok());
    EXPECT_GE(*n, 1u);
    EXPECT_EQ(a.send_batch(many.data(), 1025).error(), std::errc::invalid_argument);
  });
}

TEST_P(AdvTest, RecvmsgSeveralIovecsLargerDatagram) {
  Run([&] {
    net::UdpSocket a = Bound4(), b = Bound4();
    ASSERT_TRUE(a.send_to("0123456789ABCDEF", 16, *b.local_address()).ok());
    char p[3], q[0 + 1], r[5];
    IoVec v[4] = {{p, 3}, {q, 0}, {r, 5}, {nullptr, 0}};
    sockaddr_storage from{};
    MsgHdr m{};
    m.msg_name = &from;
    m.msg_namelen = sizeof from;
    m.msg_iov = v;
    m.msg_iovlen = 4;
    Result<std::size_t> n = io::recvmsg(b.fd(), &m, 0, {.deadline = SyncClock::now() + 5s});
    ASSERT_TRUE(n.ok()) << n.error_code().message();
    EXPECT_EQ(*n, 8u);
    EXPECT_NE(m.msg_flags & kMsgTruncated, 0);
    EXPECT_EQ(std::string(p, 3) + std::string(r, 5), "01234567");
    EXPECT_EQ(m.msg_namelen, sizeof(sockaddr_in));
  });
}

// A close of the socket object from another execution while a receive waits on it.
TEST_P(AdvTest, CloseTheSocketObjectWhileReceiving) {
  Run([&] {
    for (int round = 0; round < 20; ++round) {
      net::UdpSocket s = Bound4();
      std::atomic<bool> waiting{false};
      Result<net::UdpSocket::Datagram> got = std::errc::io_error;
      Other reader = Concurrently([&] {
        waiting = true;
        char b[8];
        got = s.recv_from(b, sizeof b, {.deadline = SyncClock::now() + 10s});
      });
      while (!waiting) ASSERT_TRUE(this_fiber::sleep_for(100us).ok());
      ASSERT_TRUE(this_fiber::sleep_for(5ms).ok());
      ASSERT_TRUE(s.close().ok());
      reader.join();
      ASSERT_FALSE(got.ok());
      EXPECT_TRUE(got.error() == std::errc::operation_canceled ||
                  got.error() == std::errc::bad_file_descriptor)
          << got.error_code().message();
    }
  });
}

// POSIX: open of a FIFO for writing waits for a reader; for reading, for a writer.
TEST_P(AdvTest, OpeningAFifoWaitsForItsPartnerAsOpenDoes) {
  const std::string fifo = TmpPath("fifo6");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Run([&] {
    std::thread partner([&] {
      std::this_thread::sleep_for(100ms);
      int fd = ::open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
      char buf[16];
      ssize_t n = ::read(fd, buf, sizeof buf);
      (void)n;
      ::close(fd);
    });
    Result<fs::File> w = fs::File::open(fifo, {.read = false, .write = true});
    EXPECT_TRUE(w.ok()) << w.error_code().message();
    if (!w.ok()) ADD_FAILURE() << "open for writing: " << w.error_code().message();
    if (w.ok()) {
      Result<std::size_t> wn = w->write_at("hello", 5, 0);
      EXPECT_TRUE(wn.ok()) << "write_at on the FIFO: " << wn.error_code().message();
      (void)w->close();
    } else {
      int fd = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);  // release the partner
      ::close(fd);
    }
    partner.join();
  });
}

TEST_P(AdvTest, ReadFileOfAFifoWaitsForTheWriter) {
  const std::string fifo = TmpPath("fifo7");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Run([&] {
    std::thread partner([&] {
      std::this_thread::sleep_for(100ms);
      int fd = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
      ssize_t n = ::write(fd, "hello", 5);
      (void)n;
      ::close(fd);
    });
    Result<fs::File> r = fs::File::open(fifo);
    ASSERT_TRUE(r.ok()) << r.error_code().message();
    std::vector<char> buf(256 << 10);
    Result<std::size_t> n = r->read_at(buf.data(), buf.size(), 0);
    ASSERT_TRUE(n.ok()) << n.error_code().message();
    EXPECT_EQ(*n, 5u) << "end of file before the writer came";
    partner.join();
  });
}

// io.h: EAGAIN is absorbed "unless the caller asked not to wait (MSG_DONTWAIT)".
TEST_P(AdvTest, RecvmsgWithDontwaitOnAnEmptySocketSaysEagainAtOnce) {
  Run([&] {
    net::UdpSocket s = Bound4();
    char b[8];
    IoVec v{b, sizeof b};
    MsgHdr m{};
    m.msg_iov = &v;
    m.msg_iovlen = 1;
    auto t0 = std::chrono::steady_clock::now();
    Result<std::size_t> n =
        io::recvmsg(s.fd(), &m, MSG_DONTWAIT, {.deadline = SyncClock::now() + 1s});
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.error(), std::errc::resource_unavailable_try_again) << n.error_code().message();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
  });
}

// The same for datagrams: senders on one UdpSocket while another execution closes it and opens
// new sockets (which take the number): no datagram may leave from another socket. A send's
// first, direct try (a non-blocking sendmsg outside the reactor) is an FdUse of the socket's fd
// like every submission (scheduler/io.h): a close waits for one under way and refuses later ones
// (docs/api.md, "Rules and limits").
TEST_P(AdvTest, SendersOnASocketClosedMeanwhileNeverSendFromTheNextSocket) {
  const int rounds = std::getenv("ADV_ROUNDS") ? std::atoi(std::getenv("ADV_ROUNDS")) : 200;
  Run([&] {
    net::UdpSocket sink = Bound4();
    const net::SocketAddress to = *sink.local_address();
    std::atomic<long> wrong{0}, sent{0};
    for (int round = 0; round < rounds; ++round) {
      net::UdpSocket x = Bound4();
      const std::string xs = x.local_address()->to_string();
      net::UdpSocket* shared = &x;
      std::atomic<bool> go{false};
      std::vector<Other> senders;
      for (int k = 0; k < 3; ++k) {
        senders.push_back(Concurrently([&] {
          while (!go.load()) {
          }
          for (;;) {
            if (!shared->send_to("d", 1, to).ok()) return;
            sent.fetch_add(1);
          }
        }));
      }
      go = true;
      (void)this_fiber::sleep_for(std::chrono::microseconds(100 + round % 200));
      ASSERT_TRUE(shared->close().ok());
      std::vector<net::UdpSocket> ys;
      for (int i = 0; i < 4; ++i) ys.push_back(Bound4());
      for (auto& s : senders) s.join();
      // drain the sink: every datagram must come from x
      char b[4];
      for (;;) {
        Result<net::UdpSocket::Datagram> d =
            sink.recv_from(b, sizeof b, {.deadline = SyncClock::now() + 5ms});
        if (!d.ok()) break;
        if (d->from.to_string() != xs) wrong.fetch_add(1);
      }
    }
    EXPECT_EQ(wrong.load(), 0) << "datagrams from another socket; sent " << sent.load();
  });
}

// The protocol under the test above (scheduler/io.h's FdUse), step by step: a close waits for a
// use under way before it closes, and a use whose epoch predates the close is refused.
TEST(FdUseTest, ACloseWaitsForAUseUnderWayAndRefusesLaterOnes) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const std::uint32_t epoch = scheduler_internal::CloseEpoch(p[0]);
  std::atomic<bool> closed{false};
  std::thread closer;
  {
    scheduler_internal::FdUse use(p[0], epoch);
    ASSERT_FALSE(use.refused());
    closer = std::thread([&] {
      ASSERT_TRUE(io::close(p[0]).ok());
      closed = true;
    });
    while (scheduler_internal::CloseEpoch(p[0]) == epoch) std::this_thread::yield();
    // The close has begun and waits for this use: the fd is still open.
    EXPECT_FALSE(closed.load());
    EXPECT_EQ(::fcntl(p[0], F_GETFD), 0);
    scheduler_internal::FdUse late(p[0], epoch);
    EXPECT_TRUE(late.refused());
    scheduler_internal::FdUse unchecked(p[0], scheduler_internal::kNoEpoch);
    EXPECT_FALSE(unchecked.refused());
  }
  closer.join();
  EXPECT_TRUE(closed.load());
  ::close(p[1]);
}

// A socket closed by its destructor while its runtime shuts down (the fiber unwinds): the close
// still ends another execution's receive on the fd before the fd is closed, so the peer sees end
// of file and the receive never reaches the next file given the number.
TEST(AdvShutdownClose, ADestructorsCloseDuringShutdownEndsAnotherThreadsReceive) {
  int p[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, p), 0);
  const int fd = p[0];
  std::atomic<bool> waiting{false};
  std::atomic<int> err{-1};
  std::thread t([&] {
    waiting = true;
    Result<io::RecvBuffer> r = io::recv_buffer(fd, {.deadline = SyncClock::now() + 10s});
    err = r.ok() ? 0 : static_cast<int>(r.error());
  });
  while (!waiting) std::this_thread::yield();
  std::this_thread::sleep_for(50ms);  // the receive is waiting (not asserted: ordering only)
  {
    Runtime rt({.workers = 1});
    (void)rt.spawn([fd] {
      net::TcpStream s(fd);
      (void)this_fiber::sleep_for(30s);  // ended by the shutdown; ~TcpStream closes fd
    });
    std::this_thread::sleep_for(50ms);
  }
  t.join();
  EXPECT_EQ(err.load(), static_cast<int>(std::errc::operation_canceled));
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "fd still open";
  char c;
  EXPECT_EQ(::recv(p[1], &c, 1, MSG_DONTWAIT), 0) << "the peer sees no end of file";
  ::close(p[1]);
}

TEST(AdvShutdownClose, AReceiveInAnotherRuntimeNeverReadsTheNextSocket) {
  int p[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, p), 0);
  const int fd = p[0];
  Runtime a({.workers = 1});
  std::atomic<bool> waiting{false};
  std::string got;
  int err = -1;
  JoinHandle<void> receiver = a.spawn([&] {
    char buf[64];
    waiting = true;
    Result<std::size_t> n = io::recv(fd, buf, sizeof buf, 0, {.deadline = SyncClock::now() + 10s});
    if (n.ok()) got.assign(buf, *n);
    err = n.ok() ? 0 : static_cast<int>(n.error());
  });
  while (!waiting) std::this_thread::yield();
  std::this_thread::sleep_for(50ms);
  {
    Runtime b({.workers = 1});
    (void)b.spawn([fd] {
      net::TcpStream s(fd);
      (void)this_fiber::sleep_for(30s);
    });
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(::fcntl(fd, F_GETFD), -1);
  int y[2];  // the next socket, likely given the number, with bytes waiting
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, y), 0);
  ASSERT_EQ(::send(y[1], "SECRET", 6, 0), 6);
  (void)receiver.join();
  EXPECT_EQ(got, "") << "the old receive read the next socket's bytes";
  EXPECT_EQ(err, static_cast<int>(std::errc::operation_canceled));
  (void)io::close(y[0]);
  (void)io::close(y[1]);
  ::close(p[1]);
}

INSTANTIATE_TEST_SUITE_P(FibersAndThreads, AdvTest,
                         ::testing::Values(Mode::kFibers, Mode::kThreads), testing::ModeName);

// Runtime shutdown with a fiber in a file open that waits (a FIFO without a writer).
TEST(AdvShutdown, ShutdownWithAFiberWaitingInAFileRead) {
  if (!Uring()) GTEST_SKIP() << "blocking threads run the open to its end (documented)";
  const std::string fifo = TmpPath("fifo5");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::atomic<int> result{-1};
  auto t0 = std::chrono::steady_clock::now();
  {
    Runtime rt({.workers = 2});
    rt.spawn([&] {
      Result<fs::File> f = fs::File::open(fifo, {.read = true, .write = true});
      if (!f.ok()) return;
      std::vector<char> buf(256 << 10);
      Result<std::size_t> n = f->read_at(buf.data(), buf.size(), 0);  // an empty FIFO: waits
      result = n.ok() ? 0 : static_cast<int>(n.error());
    });
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(result.load(), static_cast<int>(std::errc::operation_canceled));
}

// Epoll: a sync queued for a blocking thread, the File closed and the number reused meanwhile.
TEST(AdvStale, SyncQueuedBehindABusyPoolReachesTheNextFileWithThatNumber) {
  if (Uring()) GTEST_SKIP() << "the blocking-thread path";
  const std::string path = TmpPath("stale");
  Runtime rt({.workers = 2, .max_blocking_threads = 1});
  rt.block_on([&] {
    Result<fs::File> f = fs::File::open(path, {.write = true, .create = true});
    ASSERT_TRUE(f.ok());
    const int old_fd = f->fd();
    std::atomic<bool> hold{true};
    auto blocker = rt.spawn([&] {
      call_blocking([&] {
        while (hold) std::this_thread::sleep_for(1ms);
      });
    });
    ASSERT_TRUE(this_fiber::sleep_for(50ms).ok());  // (blocker holds the only blocking thread)
    ASSERT_NE(rt.stats_json().find("\"blocking_busy\":1"), std::string::npos) << rt.stats_json();
    Result<void> sync_result = std::errc::io_error;
    std::atomic<bool> started{false};
    auto syncer = rt.spawn([&] {
      started = true;
      sync_result = f->sync();
    });
    while (!started) ASSERT_TRUE(this_fiber::sleep_for(1ms).ok());
    ASSERT_TRUE(this_fiber::sleep_for(50ms).ok());  // queued
    ASSERT_TRUE(f->close().ok());
    ASSERT_TRUE(hold.load());
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    EXPECT_EQ(sv[0], old_fd) << "number not reused; the test proves nothing";
    hold = false;
    (void)syncer.join();
    (void)blocker.join();
    // The File was closed before the sync ran: operation_canceled (as any call pending at a
    // close), not fsync's answer for the socket that now has the number (EINVAL).
    EXPECT_EQ(sync_result.error(), std::errc::operation_canceled)
        << sync_result.error_code().message();
    ::close(sv[0]);
    ::close(sv[1]);
  });
}

}  // namespace
}  // namespace weft
