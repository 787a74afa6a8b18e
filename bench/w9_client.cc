// bench/w9_client.cc: W9's clients (../shared/WORKLOADS.md), one process that every runtime's
// W9 server starts as its second process, so each server meets the same load. Plain Linux
// sockets and one epoll thread: no runtime of its own.
//
//   w9_client PORT CONNS TRIPS SIZE
//
// Connects CONNS loopback TCP connections to 127.0.0.1:PORT, prints "connected" and waits for a
// line on stdin (the server measures its memory with every connection idle meanwhile). Then
// every connection at once does TRIPS round trips of SIZE bytes, each message checked when it
// comes back, and prints "done WALL_NS MESSAGES BAD P50_NS P99_NS P999_NS" (BAD: messages lost or
// wrong; the percentiles of the round trips, each from its send to the last byte of its echo,
// bench/latency.h). Closes with a reset (SO_LINGER 0), so repetitions leave no TIME_WAIT behind.

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "weft/bench/latency.h"

namespace {

struct Conn {
  int fd = -1;
  int trip = 0;                                   // the round trip under way
  std::size_t sent = 0;                           // of its message
  std::size_t got = 0;                            // of its echo
  std::chrono::steady_clock::time_point sent_at;  // when its message began to go
  std::vector<char> out, in;
};

void Fill(Conn& c, std::size_t id, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) {
    c.out[i] = static_cast<char>((id * 7 + static_cast<std::size_t>(c.trip) * 13 + i) & 0xff);
  }
  c.sent = 0;
  c.got = 0;
}

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "w9_client: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: w9_client PORT CONNS TRIPS SIZE\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::size_t conns = std::strtoul(argv[2], nullptr, 10);
  const int trips = std::atoi(argv[3]);
  const std::size_t size = std::strtoul(argv[4], nullptr, 10);
  if (port <= 0 || port > 65535 || conns == 0 || trips <= 0 || size == 0 || size > 65536) {
    std::fprintf(stderr, "w9_client: bad arguments\n");
    return 2;
  }
  rlimit l{};
  if (::getrlimit(RLIMIT_NOFILE, &l) == 0 && l.rlim_cur < conns + 64) {
    l.rlim_cur = std::min<rlim_t>(l.rlim_max, conns + 64);
    (void)::setrlimit(RLIMIT_NOFILE, &l);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

  std::vector<Conn> cs(conns);
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) Die("epoll_create1");
  for (std::size_t i = 0; i < conns; ++i) {
    Conn& c = cs[i];
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c.fd < 0) Die("socket");
    if (::connect(c.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      Die("connect");
    }
    int one = 1;
    (void)::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c.out.resize(size);
    c.in.resize(size);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev) != 0) Die("epoll_ctl");
  }
  std::printf("connected\n");
  std::fflush(stdout);
  char line[64];
  if (std::fgets(line, sizeof line, stdin) == nullptr) return 1;  // the server went away

  const auto start = std::chrono::steady_clock::now();
  std::size_t active = conns;
  std::uint64_t messages = 0, bad = 0;
  weft::bench::LatencyHistogram latency;
  // Blocking sends of SIZE bytes: a socket's buffer always has room for one small message.
  auto send_message = [&](std::size_t i) {
    Conn& c = cs[i];
    Fill(c, i, size);
    c.sent_at = std::chrono::steady_clock::now();
    while (c.sent < size) {
      ssize_t n = ::send(c.fd, c.out.data() + c.sent, size - c.sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      c.sent += static_cast<std::size_t>(n);
    }
    return true;
  };
  for (std::size_t i = 0; i < conns; ++i) {
    if (!send_message(i)) {
      ++bad;
      --active;
      (void)::epoll_ctl(ep, EPOLL_CTL_DEL, cs[i].fd, nullptr);
    }
  }
  std::vector<epoll_event> events(1024);
  while (active > 0) {
    int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 10000);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // nothing for 10 s: the server lost messages
    for (int k = 0; k < n; ++k) {
      const std::size_t i = events[k].data.u64;
      Conn& c = cs[i];
      ssize_t got = ::recv(c.fd, c.in.data() + c.got, size - c.got, MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      bool finished = false;
      if (got <= 0) {
        ++bad;
        finished = true;
      } else {
        c.got += static_cast<std::size_t>(got);
        if (c.got < size) continue;
        if (std::memcmp(c.in.data(), c.out.data(), size) != 0) ++bad;
        ++messages;
        latency.record(
            static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::steady_clock::now() - c.sent_at)
                                           .count()));
        if (++c.trip == trips) {
          finished = true;
        } else if (!send_message(i)) {
          ++bad;
          finished = true;
        }
      }
      if (finished) {
        --active;
        (void)::epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
      }
    }
  }
  const auto wall = std::chrono::steady_clock::now() - start;
  bad += active * static_cast<std::uint64_t>(trips);  // connections that never finished
  std::printf(
      "done %lld %llu %llu %llu %llu %llu\n",
      static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count()),
      static_cast<unsigned long long>(messages), static_cast<unsigned long long>(bad),
      static_cast<unsigned long long>(latency.percentile(0.5)),
      static_cast<unsigned long long>(latency.percentile(0.99)),
      static_cast<unsigned long long>(latency.percentile(0.999)));
  std::fflush(stdout);
  for (Conn& c : cs) {
    linger lg{1, 0};  // a reset: no TIME_WAIT
    (void)::setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    ::close(c.fd);
  }
  return 0;
}
