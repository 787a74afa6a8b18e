// What a datagram costs through net::UdpSocket on a fiber, one call per datagram beside the
// batch calls, on loopback:
//   BM_UdpBurst/single   64 send_to calls, then 64 recv_from calls (the datagrams are queued
//                        by then, so a receive finds one at once)
//   BM_UdpBurst/batch    one send_batch of 64, then recv_batch calls until 64 are in
// Items are datagrams (sent and received once each). Run with:
//   ./bazelw run -c opt //api:udp_benchmark -- --benchmark_format=json

#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "weft/api/net.h"
#include "weft/scheduler/runtime.h"

namespace weft {
namespace {

constexpr int kBurst = 64;

void BM_UdpBurst(benchmark::State& state) {
  const bool batch = state.range(0) != 0;
  Runtime rt({.workers = 1});
  rt.block_on([&] {
    auto a = net::UdpSocket::bind(net::SocketAddress::ipv4_loopback(0));
    auto b = net::UdpSocket::bind(net::SocketAddress::ipv4_loopback(0));
    if (!a.ok() || !b.ok()) {
      state.SkipWithError("no loopback UDP");
      return;
    }
    const net::SocketAddress to = *b->local_address();
    std::string payload(64, 'd');
    std::vector<net::UdpSocket::Outgoing> out(kBurst, {payload.data(), payload.size(), to});
    std::vector<std::string> storage(kBurst, std::string(2048, '\0'));
    std::vector<net::UdpSocket::Buffer> bufs(kBurst);
    for (int i = 0; i < kBurst; ++i) bufs[i] = {storage[i].data(), storage[i].size(), {}};
    for (auto _ : state) {
      int sent = 0, got = 0;
      if (batch) {
        while (sent < kBurst) {
          Result<std::size_t> n = a->send_batch(out.data() + sent, kBurst - sent);
          if (!n.ok()) return state.SkipWithError("send_batch failed");
          sent += static_cast<int>(*n);
        }
        while (got < kBurst) {
          Result<std::size_t> n = b->recv_batch(bufs.data(), kBurst - got);
          if (!n.ok()) return state.SkipWithError("recv_batch failed");
          got += static_cast<int>(*n);
        }
      } else {
        for (; sent < kBurst; ++sent) {
          if (!a->send_to(payload.data(), payload.size(), to).ok()) {
            return state.SkipWithError("send_to failed");
          }
        }
        for (; got < kBurst; ++got) {
          if (!b->recv_from(storage[0].data(), storage[0].size()).ok()) {
            return state.SkipWithError("recv_from failed");
          }
        }
      }
    }
    state.SetItemsProcessed(state.iterations() * kBurst);
    state.SetLabel(batch ? "batch" : "single");
  });
}
BENCHMARK(BM_UdpBurst)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace weft
