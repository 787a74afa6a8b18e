// examples/tour.cc: the tour of docs/api.md, compiled (so the docs stay true) and runnable:
//   ./bazelw run //examples:tour

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "weft/api/weft.h"

namespace {

std::uint64_t Fib(weft::ForkJoinWorker& w, int n) {
  if (n < 2) return static_cast<std::uint64_t>(n);
  auto a = w.spawn<Fib>(n - 1);  // may run on another worker
  std::uint64_t b = Fib(w, n - 2);
  return w.sync(a) + b;
}

weft::FiberLocal<int> g_requests;  // one counter per fiber

// Stackless tasks (docs/api.md, "Fibers and tasks").
weft::Task<int> Child() { co_return 41; }

weft::Task<int> TaskTour(weft::Runtime& rt, weft::Channel<int>& ch, weft::Mutex& mu) {
  int v = co_await Child() + 1;                    // a Task awaited runs inline, as a call
  weft::Result<int> r = co_await ch.async_recv();  // parks the task, not the worker
  if (weft::Result<void> l = co_await mu.async_lock(); l.ok()) (void)mu.unlock();
  co_await weft::this_task::sleep_for(std::chrono::milliseconds(1));
  weft::JoinHandle<int> fiber = rt.spawn([] { return 1; });
  int one = *co_await fiber;   // joins a fiber (or a task)
  weft::TaskGroup<int> group;  // children of both kinds; a task joins it with co_await
  (void)group.spawn_task([]() -> weft::Task<int> { co_return 2; });
  (void)group.spawn([] { return 3; });
  weft::Result<std::vector<int>> parts = co_await group.async_join_all();  // spawn order
  const int five = parts.ok() ? (*parts)[0] + (*parts)[1] : 0;
  co_return v + r.value_or(0) + one + five;
}

}  // namespace

int main() {
  weft::Runtime rt;  // one worker per core; the destructor shuts down gracefully

  int answer = rt.block_on([] { return 6 * 7; });

  weft::JoinHandle<std::string> h = rt.spawn([] { return std::string("hi"); }, {.name = "greeter"});
  std::string s = *h.join();  // from a thread: blocks; from a fiber: parks

  long sum = 0, pages = 0;
  std::uint64_t fib = 0;
  rt.block_on([&] {
    weft::Channel<int> ch(16);
    auto producer = rt.spawn([&] {
      for (int i = 0; i < 100; ++i) (void)ch.send(int(i));
      ch.close();
    });
    for (int v : ch) sum += v;  // until closed and drained
    (void)producer.join();

    (void)weft::this_fiber::sleep_for(std::chrono::milliseconds(5));
    pages = weft::call_blocking([] { return sysconf(_SC_PHYS_PAGES); });
    fib = rt.fork_join(Fib, 25);
    ++*g_requests;
  });

  // TCP: an echo server fiber and a client, with deadlines.
  std::string echoed = rt.block_on([&] {
    auto listener = weft::net::TcpListener::bind(weft::net::SocketAddress::ipv4_loopback(0));
    if (!listener.ok()) return std::string("(no listener)");
    auto server = rt.spawn([&] {
      auto conn = listener->accept();
      if (!conn.ok()) return;
      char buf[64];
      auto n = conn->read(buf, sizeof buf);
      if (n.ok()) (void)conn->write_all(buf, *n);
    });
    auto deadline = weft::SyncClock::now() + std::chrono::seconds(5);
    auto client = weft::net::TcpStream::connect(*listener->local_address(), {.deadline = deadline});
    std::string reply(5, '\0');
    if (!client.ok() || !client->write_all("hello", 5).ok() ||
        !client->read_exact(reply.data(), reply.size(), {.deadline = deadline}).ok()) {
      reply = "(failed)";
    }
    (void)server.join();
    return reply;
  });

  // A server: its connections are children of a TaskGroup nested in the server's, each request
  // has its own deadline under the server's stop, and SIGINT or SIGTERM stop it gracefully.
  int served = rt.block_on([&] {
    auto signals = weft::SignalSet::open({SIGINT, SIGTERM});  // first: from now on, queued
    auto listener = weft::net::TcpListener::bind(weft::net::SocketAddress::ipv4_loopback(0));
    if (!signals.ok() || !listener.ok()) return -1;
    std::atomic<int> requests{0};
    weft::TaskGroup<> server;
    (void)server.spawn([&](const weft::CancellationToken& stop) {  // the stop: a signal
      if (signals->recv({.cancel = &stop}).ok()) server.cancel();
    });
    (void)server.spawn([&](const weft::CancellationToken& stop) {  // the accept loop
      // Nested: cancelled with the server; outcomes dropped as connections end.
      weft::TaskGroup<> connections(
          {.policy = weft::GroupPolicy::kCollectAll, .discard_outcomes = true});
      for (;;) {
        auto conn = listener->accept({.cancel = &stop});
        if (!conn.ok()) return;  // stopped: ~TaskGroup cancels and joins the connections
        (void)connections.spawn(
            [&, s = std::move(*conn)](const weft::CancellationToken& cancel) mutable {
              char buf[64];
              for (;;) {
                weft::CancellationSource request(cancel);  // 2 s per request, or the stop
                (void)request.cancel_after(std::chrono::seconds(2));
                const weft::CancellationToken deadline = request.token();
                auto n = s.read(buf, sizeof buf, {.cancel = &deadline});
                if (!n.ok() || *n == 0) return;
                ++requests;
                if (!s.write_all(buf, *n, {.cancel = &deadline}).ok()) return;
              }
            });
      }
    });
    // A client sends one request and stays connected; then the signal Ctrl-C would send.
    auto client = weft::net::TcpStream::connect(*listener->local_address());
    char reply[4];
    if (client.ok() && client->write_all("ping", 4).ok()) (void)client->read_exact(reply, 4);
    ::kill(::getpid(), SIGINT);
    (void)server.join_all();  // the signal cancelled the group; every connection has drained
    return requests.load();
  });

  // A task and a fiber share a channel and a mutex.
  weft::Channel<int> ch(1);
  weft::Mutex mu;
  weft::JoinHandle<int> task = rt.spawn_task([&] { return TaskTour(rt, ch, mu); });
  (void)rt.spawn([&] { (void)ch.send(100); }).join();
  const int from_task = *task.join();  // 42 + 100 + 1 + 5

  std::printf(
      "answer %d, greeting %s, sum %ld, fib(25) %llu, pages %ld, echoed %s, served %d, "
      "task %d\n",
      answer, s.c_str(), sum, static_cast<unsigned long long>(fib), pages, echoed.c_str(), served,
      from_task);
  std::printf("stats: %s\n", rt.stats_json().c_str());
  return echoed == "hello" && sum == 4950 && fib == 75025 && served == 1 && from_task == 148 ? 0
                                                                                             : 1;
}
