// reactor/reactor_edge_test.cc: edge cases on every backend:
// datagrams with several buffers and none, MSG_DONTWAIT, close and cancel after a deadline, file
// operations with deadlines.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "weft/base/stress_scale.h"
#include "weft/reactor/reactor.h"

namespace weft {
namespace {
using namespace std::chrono_literals;

struct Op : IoOp {
  int completions = 0;
  std::int64_t last = 0;
  Op() {
    on_complete = [](IoOp& op, std::int64_t result, unsigned) {
      auto& self = static_cast<Op&>(op);
      ++self.completions;
      self.last = result;
    };
  }
  bool done() const { return completions > 0; }
};

std::vector<ReactorBackend> Backends() {
  return {ReactorBackend::kIoUring, ReactorBackend::kEpoll};
}

class AdvReactor : public ::testing::TestWithParam<ReactorBackend> {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<Reactor>> r = Reactor::create({.backend = GetParam()});
    if (!r.ok()) GTEST_SKIP() << r.error_code().message();
    reactor_ = std::move(r).value();
  }
  void TearDown() override {
    if (reactor_ != nullptr) EXPECT_EQ(reactor_->pending_ops(), 0u) << "operations left pending";
    for (int fd : fds_) ::close(fd);
  }
  template <typename Pred>
  void RunUntil(Pred pred) {
    auto give_up = ReactorClock::now() + 5s;
    while (!pred()) {
      ASSERT_LT(ReactorClock::now(), give_up) << "no progress";
      ASSERT_TRUE(reactor_->poll(ReactorClock::now() + 50ms).ok());
    }
  }
  int Udp(sockaddr_in* addr) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    *addr = sockaddr_in{};
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(addr), sizeof *addr), 0);
    socklen_t len = sizeof *addr;
    EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(addr), &len), 0);
    fds_.push_back(fd);
    return fd;
  }
  std::unique_ptr<Reactor> reactor_;
  std::vector<int> fds_;
};

TEST_P(AdvReactor, SeveralIovecsTruncationAndEmptyDatagrams) {
  sockaddr_in aa, ba;
  int a = Udp(&aa), b = Udp(&ba);
  ASSERT_EQ(sendto(a, "0123456789ABCDEF", 16, 0, reinterpret_cast<sockaddr*>(&ba), sizeof ba), 16);
  ASSERT_EQ(sendto(a, "", 0, 0, reinterpret_cast<sockaddr*>(&ba), sizeof ba), 0);
  ASSERT_EQ(sendto(a, "xyz", 3, 0, reinterpret_cast<sockaddr*>(&ba), sizeof ba), 3);
  char p[3], r[5];
  IoVec v[3] = {{p, 3}, {nullptr, 0}, {r, 5}};
  sockaddr_in from{};
  MsgHdr m{};
  m.msg_name = &from;
  m.msg_namelen = sizeof from;
  m.msg_iov = v;
  m.msg_iovlen = 3;
  Op r1;
  reactor_->recvmsg(r1, b, &m);
  RunUntil([&] { return r1.done(); });
  EXPECT_EQ(r1.last, 8);
  EXPECT_NE(m.msg_flags & kMsgTruncated, 0);
  EXPECT_EQ(std::string(p, 3) + std::string(r, 5), "01234567");
  MsgHdr e{};  // no buffers at all
  Op r2, r3;
  reactor_->recvmsg(r2, b, &e);
  RunUntil([&] { return r2.done(); });
  EXPECT_EQ(r2.last, 0);
  EXPECT_EQ(e.msg_flags & kMsgTruncated, 0);
  MsgHdr e2{};
  reactor_->recvmsg(r3, b, &e2);
  RunUntil([&] { return r3.done(); });
  EXPECT_EQ(r3.last, 0);
  // "xyz" into nothing. (qemu-user's recvmsg drops MSG_TRUNC when there are no buffers: the
  // aarch64 configuration runs under it.)
  if (!testing::Emulated()) EXPECT_NE(e2.msg_flags & kMsgTruncated, 0);
  EXPECT_EQ(r1.completions + r2.completions + r3.completions, 3);
}

TEST_P(AdvReactor, DontwaitReceiveOnAnEmptySocketIsEagainAtOnce) {
  sockaddr_in ba;
  int b = Udp(&ba);
  char buf[8];
  IoVec v{buf, sizeof buf};
  MsgHdr m{};
  m.msg_iov = &v;
  m.msg_iovlen = 1;
  Op r, q;
  r.deadline = ReactorClock::now() + 1s;
  reactor_->recvmsg(r, b, &m, MSG_DONTWAIT);
  q.deadline = ReactorClock::now() + 1s;
  reactor_->recv(q, b, buf, sizeof buf, MSG_DONTWAIT);
  RunUntil([&] { return r.done() && q.done(); });
  EXPECT_EQ(r.last, -EAGAIN) << "recvmsg: " << std::strerror(static_cast<int>(-r.last));
  EXPECT_EQ(q.last, -EAGAIN) << "recv: " << std::strerror(static_cast<int>(-q.last));
}

TEST_P(AdvReactor, CloseWithAnOpEndsDatagramOpsAndCancelAfterDeadline) {
  sockaddr_in ba;
  int b = Udp(&ba);
  char buf[8];
  IoVec v{buf, sizeof buf};
  MsgHdr m1{}, m2{};
  m1.msg_iov = m2.msg_iov = &v;
  m1.msg_iovlen = m2.msg_iovlen = 1;
  Op timed;
  timed.deadline = ReactorClock::now() + 10ms;
  reactor_->recvmsg(timed, b, &m1);
  RunUntil([&] { return timed.done(); });
  reactor_->cancel(timed);  // after its completion: nothing
  EXPECT_EQ(timed.last, -ETIMEDOUT);
  Op waiting, closer;
  waiting.deadline = ReactorClock::now() + 5s;
  reactor_->recvmsg(waiting, b, &m2);
  ASSERT_TRUE(reactor_->poll(ReactorClock::now()).ok());
  reactor_->close(closer, b);
  fds_.erase(std::find(fds_.begin(), fds_.end(), b));
  RunUntil([&] { return waiting.done() && closer.done(); });
  EXPECT_EQ(waiting.last, -ECANCELED);
  EXPECT_EQ(closer.last, 0);
  EXPECT_EQ(timed.completions + waiting.completions + closer.completions, 3);
}

TEST_P(AdvReactor, FileOpsWithDeadlinesCompleteOnce) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/adv_reactor_file";
  Op o1, o2;
  o1.deadline = ReactorClock::now() - 1s;  // past
  reactor_->openat(o1, AT_FDCWD, path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  o2.deadline = ReactorClock::now() + 5s;
  reactor_->openat(o2, AT_FDCWD, path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  RunUntil([&] { return o1.done() && o2.done(); });
  EXPECT_EQ(o1.completions, 1);
  EXPECT_EQ(o2.completions, 1);
  if (o1.last >= 0) fds_.push_back(static_cast<int>(o1.last));
  if (o2.last >= 0) fds_.push_back(static_cast<int>(o2.last));
  if (GetParam() == ReactorBackend::kEpoll) {
    EXPECT_EQ(o1.last, -ENOSYS);
    return;
  }
  ASSERT_GE(o2.last, 0);
  int fd = static_cast<int>(o2.last);
  Op s, f;
  struct statx sx {};
  s.deadline = ReactorClock::now() + 5s;
  reactor_->statx(s, fd, &sx);
  f.deadline = ReactorClock::now() + 5s;
  reactor_->fsync(f, fd, false);
  RunUntil([&] { return s.done() && f.done(); });
  EXPECT_EQ(s.last, 0);
  EXPECT_EQ(f.last, 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, AdvReactor, ::testing::ValuesIn(Backends()),
                         [](const ::testing::TestParamInfo<ReactorBackend>& i) {
                           return std::string(ReactorBackendName(i.param) == "epoll" ? "epoll"
                                                                                     : "io_uring");
                         });

}  // namespace
}  // namespace weft
