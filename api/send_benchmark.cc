// A stream of large sends between two fibers over loopback TCP, each send either a plain one
// (copied into the socket) or zero-copy (io::send with MSG_ZEROCOPY: io_uring's SEND_ZC, the
// call returning at the kernel's notification), side by side in one run:
//   BM_LoopbackSend/<size>/0   plain send_all of <size> bytes at a time
//   BM_LoopbackSend/<size>/1   MSG_ZEROCOPY
// 64 MiB per iteration; items are bytes. Run with:
//   ./bazelw run -c opt //api:send_benchmark -- --benchmark_format=json

#include <sys/socket.h>

#include <string>

#include "benchmark/benchmark.h"
#include "weft/api/io.h"
#include "weft/api/net.h"
#include "weft/scheduler/runtime.h"

namespace weft {
namespace {

constexpr std::size_t kPerIteration = std::size_t{64} << 20;

void BM_LoopbackSend(benchmark::State& state) {
  const std::size_t size = static_cast<std::size_t>(state.range(0));
  const int flags = state.range(1) != 0 ? MSG_ZEROCOPY : 0;
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    auto l = net::TcpListener::bind(net::SocketAddress::ipv4_loopback(0));
    auto c = net::TcpStream::connect(*l->local_address());
    auto s = l->accept();
    if (!c.ok() || !s.ok()) return state.SkipWithError("no loopback TCP");
    const std::string out(size, 'z');
    for (auto _ : state) {
      auto reader = rt.spawn([&] {
        std::string in(1 << 20, '\0');
        std::size_t got = 0;
        while (got < kPerIteration) {
          auto n = s->read(in.data(), in.size());
          if (!n.ok() || *n == 0) return;
          got += *n;
        }
      });
      for (std::size_t sent = 0; sent < kPerIteration;) {
        auto n = io::send(c->fd(), out.data(), out.size(), flags);
        if (!n.ok()) return state.SkipWithError("send failed");
        sent += *n;
      }
      (void)reader.join();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kPerIteration));
    state.SetLabel(flags != 0 ? "zerocopy" : "plain");
  });
}
BENCHMARK(BM_LoopbackSend)
    ->Args({64 << 10, 0})
    ->Args({64 << 10, 1})
    ->Args({256 << 10, 0})
    ->Args({256 << 10, 1})
    ->Args({1 << 20, 0})
    ->Args({1 << 20, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace weft
