// Reading a file through api/fs.h, the two ways weft has, in one binary: 16 fibers on 2 workers
// each read their sixteenth of a warm 256 MiB file in chunks of 4 KiB or 1 MiB.
//   BM_FileRead/<chunk>/0   io_uring: each read_at is one IORING_OP_READ of the worker's ring
//   BM_FileRead/<chunk>/1   epoll: each read_at is a pread on a blocking thread (call_blocking)
// Items are bytes. The file is made once under $TMPDIR (or /tmp) and read once before timing,
// so the page cache holds it. Run with:
//   ./bazelw run -c opt //api:fs_benchmark -- --benchmark_format=json

#include <cstdlib>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "weft/api/fs.h"
#include "weft/scheduler/runtime.h"

namespace weft {
namespace {

constexpr std::size_t kFileSize = std::size_t{256} << 20;
constexpr int kFibers = 16;

const std::string& TheFile() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string p = std::string(dir != nullptr ? dir : "/tmp") + "/weft_fs_benchmark.dat";
    Runtime rt({.workers = 1});
    rt.block_on([&] {
      Result<fs::File> f = fs::File::open(p, {.write = true, .create = true, .truncate = true});
      if (!f.ok()) std::abort();
      std::string chunk(1 << 20, 'w');
      for (std::size_t off = 0; off < kFileSize; off += chunk.size()) {
        if (!f->write_all_at(chunk.data(), chunk.size(), off).ok()) std::abort();
      }
      std::string sink(1 << 20, '\0');
      for (std::size_t off = 0; off < kFileSize; off += sink.size()) {  // warm the cache
        (void)f->read_full_at(sink.data(), sink.size(), off);
      }
    });
    return p;
  }();
  return path;
}

void BM_FileRead(benchmark::State& state) {
  const std::size_t chunk = static_cast<std::size_t>(state.range(0));
  const bool blocking = state.range(1) != 0;
  const std::string& path = TheFile();
  RuntimeOptions options{.workers = 2};
  if (blocking) options.reactor.backend = ReactorBackend::kEpoll;
  Runtime rt(options);
  for (auto _ : state) {
    rt.block_on([&] {
      Result<fs::File> f = fs::File::open(path);
      if (!f.ok()) return state.SkipWithError("open failed");
      std::vector<JoinHandle<void>> hs;
      const std::size_t part = kFileSize / kFibers;
      for (int k = 0; k < kFibers; ++k) {
        hs.push_back(rt.spawn([&, k] {
          std::string buf(chunk, '\0');
          for (std::size_t off = k * part; off < (k + 1) * part; off += chunk) {
            if (!f->read_full_at(buf.data(), chunk, off).ok()) std::abort();
          }
        }));
      }
      for (auto& h : hs) (void)h.join();
    });
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kFileSize));
  state.SetLabel(blocking ? "blocking threads (epoll)" : "io_uring");
}
BENCHMARK(BM_FileRead)
    ->Args({4096, 0})
    ->Args({4096, 1})
    ->Args({1 << 20, 0})
    ->Args({1 << 20, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace weft
