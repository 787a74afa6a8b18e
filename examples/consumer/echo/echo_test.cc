// An echo server and a client on weft's fibers, from a monorepo whose own base/result.h and
// sync/mutex.h share their paths with weft's headers.
#include <cstring>
#include <string>

#include "base/result.h"  // the consumer's
#include "gtest/gtest.h"
#include "sync/mutex.h"  // the consumer's
#include "weft/api/weft.h"
#include "weft/sync/mutex.h"  // weft's

namespace {

TEST(ConsumerTest, OwnHeadersAndWeftsSideBySide) {
  EXPECT_EQ(consumer::kResultMarker, 42);
  EXPECT_EQ(consumer::Mutex::kMarker, 7);
  weft::Mutex m;  // weft's, through its prefixed header
  m.lock();
  m.unlock();
}

TEST(ConsumerTest, EchoServerOnWeft) {
  weft::Runtime rt({.workers = 2});
  std::string echoed = rt.block_on([&] {
    auto listener = weft::net::TcpListener::bind(weft::net::SocketAddress::ipv4_loopback(0));
    EXPECT_TRUE(listener.ok());
    const auto addr = *listener->local_address();
    auto server = rt.spawn([&] {
      auto conn = listener->accept();
      if (!conn.ok()) return;
      char buf[64];
      auto n = conn->read(buf, sizeof buf);
      if (n.ok() && *n > 0) (void)conn->write_all(buf, *n);
    });
    auto client = weft::net::TcpStream::connect(addr);
    EXPECT_TRUE(client.ok());
    const char hello[] = "hello, weft";
    EXPECT_TRUE(client->write_all(hello, std::strlen(hello)).ok());
    char buf[64] = {};
    std::size_t got = 0;
    while (got < std::strlen(hello)) {
      auto n = client->read(buf + got, sizeof buf - got);
      if (!n.ok() || *n == 0) break;
      got += *n;
    }
    (void)server.join();
    return std::string(buf, got);
  });
  EXPECT_EQ(echoed, "hello, weft");
}

}  // namespace
