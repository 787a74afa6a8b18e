// Loopback TCP echo on one thread: 100 client connections each send 64 bytes, their server side
// echoes them back, the client receives and sends again. Driven by the reactor alone with
// completion callbacks, for each backend, and by a hand-rolled epoll loop in the same binary (the
// baseline). Each benchmark iteration is 100 round trips per connection; items/s = round trips
// per second. Run with:
//   ./bazelw run -c opt //reactor:reactor_benchmark -- --benchmark_repetitions=5

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "weft/reactor/reactor.h"

namespace weft {
namespace {

constexpr int kConnections = 100;
constexpr int kRoundTripsPerIteration = 100;
constexpr std::size_t kMessage = 64;

struct Sockets {
  std::vector<int> clients, servers;
  ~Sockets() {
    for (int fd : clients) ::close(fd);
    for (int fd : servers) ::close(fd);
  }
};

// Connected loopback pairs, made with plain blocking calls before timing starts.
void Connect(Sockets& s) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(listener, kConnections);
  int one = 1;
  for (int i = 0; i < kConnections; ++i) {
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    int sv = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(sv, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    s.clients.push_back(c);
    s.servers.push_back(sv);
  }
  ::close(listener);
}

// ---- Reactor-driven echo ----

struct Conn {
  Reactor* reactor = nullptr;
  int fd = -1;
  bool client = false;
  int left = 0;           // round trips still to do in this iteration (clients)
  int* active = nullptr;  // clients with round trips left
  char buf[kMessage] = {};
  IoOp op;
};

void OnServer(IoOp& op, std::int64_t result, unsigned);
void OnClient(IoOp& op, std::int64_t result, unsigned);

void ClientSend(Conn& c) {
  c.op.on_complete = &OnClient;
  c.op.user = &c;
  c.op.result = 0;
  c.reactor->send(c.op, c.fd, c.buf, kMessage);
}

// Client: send -> recv -> (next round trip). The op's kind tells which step completed.
void OnClient(IoOp& op, std::int64_t result, unsigned) {
  auto& c = *static_cast<Conn*>(op.user);
  if (result <= 0) std::abort();
  if (op.kind == IoOp::Kind::kSend) {
    c.reactor->recv(c.op, c.fd, c.buf, kMessage);
    return;
  }
  if (--c.left > 0) {
    ClientSend(c);
  } else {
    --*c.active;
  }
}

// Server: recv -> send back -> recv ...
void OnServer(IoOp& op, std::int64_t result, unsigned) {
  auto& c = *static_cast<Conn*>(op.user);
  if (result <= 0) return;  // the client went away: stop
  if (op.kind == IoOp::Kind::kRecv) {
    c.reactor->send(c.op, c.fd, c.buf, static_cast<std::size_t>(result));
  } else {
    c.reactor->recv(c.op, c.fd, c.buf, kMessage);
  }
}

void BM_ReactorEcho(benchmark::State& state) {
  auto backend = static_cast<ReactorBackend>(state.range(0));
  Result<std::unique_ptr<Reactor>> made = Reactor::create({.backend = backend});
  if (!made.ok()) {
    state.SkipWithError("backend not available");
    return;
  }
  Reactor& reactor = **made;
  Sockets s;
  Connect(s);
  int active = 0;
  std::vector<Conn> clients(kConnections), servers(kConnections);
  for (int i = 0; i < kConnections; ++i) {
    clients[i].reactor = servers[i].reactor = &reactor;
    clients[i].fd = s.clients[i];
    servers[i].fd = s.servers[i];
    clients[i].client = true;
    clients[i].active = servers[i].active = &active;
    servers[i].op.on_complete = &OnServer;
    servers[i].op.user = &servers[i];
    reactor.recv(servers[i].op, servers[i].fd, servers[i].buf, kMessage);
  }
  for (auto _ : state) {
    active = kConnections;
    for (Conn& c : clients) {
      c.left = kRoundTripsPerIteration;
      ClientSend(c);
    }
    while (active > 0) (void)reactor.poll(std::nullopt);
  }
  state.SetItemsProcessed(state.iterations() * kConnections * kRoundTripsPerIteration);
  state.SetLabel(std::string(reactor.backend_name()));
  for (Conn& c : servers) reactor.close(c.fd);  // fails the standing receives
  s.servers.clear();
  while (reactor.pending_ops() > 0) (void)reactor.poll(ReactorClock::now());
}
BENCHMARK(BM_ReactorEcho)
    ->Arg(static_cast<int>(ReactorBackend::kIoUring))
    ->Arg(static_cast<int>(ReactorBackend::kEpoll))
    ->ArgNames({"backend"})
    ->UseRealTime();

// ---- The baseline: a plain level-triggered epoll loop ----

void BM_RawEpollEcho(benchmark::State& state) {
  Sockets s;
  Connect(s);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  std::vector<int> left(kConnections);
  // data: index, with the top bit set for server sockets.
  for (int i = 0; i < kConnections; ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<std::uint64_t>(i);
    epoll_ctl(ep, EPOLL_CTL_ADD, s.clients[i], &ev);
    ev.data.u64 = static_cast<std::uint64_t>(i) | (1ull << 63);
    epoll_ctl(ep, EPOLL_CTL_ADD, s.servers[i], &ev);
  }
  char buf[kMessage] = {};
  epoll_event events[256];
  for (auto _ : state) {
    int active = kConnections;
    for (int i = 0; i < kConnections; ++i) {
      left[i] = kRoundTripsPerIteration;
      if (::send(s.clients[i], buf, kMessage, MSG_NOSIGNAL) != kMessage) std::abort();
    }
    while (active > 0) {
      int n = epoll_wait(ep, events, 256, -1);
      for (int k = 0; k < n; ++k) {
        std::uint64_t d = events[k].data.u64;
        int i = static_cast<int>(d & ~(1ull << 63));
        if ((d >> 63) != 0) {  // server: echo
          ssize_t r = ::recv(s.servers[i], buf, kMessage, 0);
          if (r > 0) ::send(s.servers[i], buf, static_cast<std::size_t>(r), MSG_NOSIGNAL);
        } else {  // client: reply arrived
          if (::recv(s.clients[i], buf, kMessage, 0) <= 0) std::abort();
          if (--left[i] > 0) {
            ::send(s.clients[i], buf, kMessage, MSG_NOSIGNAL);
          } else {
            --active;
          }
        }
      }
    }
  }
  ::close(ep);
  state.SetItemsProcessed(state.iterations() * kConnections * kRoundTripsPerIteration);
}
BENCHMARK(BM_RawEpollEcho)->UseRealTime();

}  // namespace
}  // namespace weft
