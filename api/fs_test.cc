// api/fs_test.cc: files (api/fs.h) on fibers and on plain threads: written and read back at
// offsets in small and large pieces, the end of a file and the largest offsets, append, stat,
// sync, whole-file reads, many executions reading one file at once, readers and writers of a
// File closed meanwhile (never the next file with its number), and every kind of bad input; the
// same from stackless tasks (async_read_at, async_write_at). Under the default configuration
// reads and writes go through io_uring, and under --config=epoll and on Windows
// (tools/test_cross.sh) through the blocking threads.

#include "weft/api/fs.h"

#ifdef __linux__
#include <fcntl.h>
#endif
#ifdef _WIN32
#include <windows.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/testing/dual_mode.h"
#include "weft/base/clock.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/task.h"
#include "weft/sync/cancellation.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::Mode;

// Path: a fresh file name under the test's temporary directory.
std::string Path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  static std::atomic<int> n{0};
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name + "." +
         std::to_string(n.fetch_add(1));
}

class FsTest : public testing::DualModeTest {
 protected:
  FsTest() : DualModeTest(2) {}
};

std::string Pattern(std::size_t n, int seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7) % 251);
  return s;
}

TEST_P(FsTest, WriteThenReadBackAtOffsets) {
  const std::string path = Path("rw");
  Run([&] {
    Result<fs::File> f = fs::File::open(path, {.write = true, .create = true, .truncate = true});
    ASSERT_TRUE(f.ok()) << f.error_code().message();
    const std::string data = Pattern(1 << 20, 1);
    ASSERT_TRUE(f->write_all_at(data.data(), data.size(), 0).ok());
    ASSERT_TRUE(f->sync().ok());
    ASSERT_TRUE(f->sync_data().ok());
    Result<fs::FileStat> st = f->stat();
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->size, data.size());
    EXPECT_TRUE(st->regular);
    EXPECT_FALSE(st->directory);
    // Back in 4 KiB pieces and in one, and across the end. (A read may return fewer bytes than
    // asked, as the kernel's may: read_full_at asks again.)
    std::string back(data.size(), '\0');
    for (std::size_t off = 0; off < data.size(); off += 4096) {
      ASSERT_EQ(*f->read_full_at(back.data() + off, 4096, off), 4096u);
    }
    EXPECT_EQ(back, data);
    std::string all(data.size() + 100, '\0');
    EXPECT_EQ(*f->read_full_at(all.data(), all.size(), 0), data.size());
    EXPECT_EQ(all.substr(0, data.size()), data);
    char c;
    EXPECT_EQ(*f->read_at(&c, 1, data.size()), 0u);       // at the end
    EXPECT_EQ(*f->read_at(&c, 1, data.size() + 10), 0u);  // past it
    // A write past the end leaves a hole of zeros.
    ASSERT_TRUE(f->write_all_at("z", 1, data.size() + 9).ok());
    EXPECT_EQ(f->stat()->size, data.size() + 10);
    std::string hole(10, 'x');
    EXPECT_EQ(*f->read_full_at(hole.data(), 10, data.size()), 10u);
    EXPECT_EQ(hole, std::string(9, '\0') + "z");
    ASSERT_TRUE(f->close().ok());
    ASSERT_TRUE(f->close().ok());  // idempotent
    Result<std::string> whole = fs::read_file(path);
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(whole->size(), data.size() + 10);
    EXPECT_EQ(whole->substr(0, data.size()), data);
    EXPECT_EQ(fs::read_file(path, {}, 1000).error(), std::errc::file_too_large);
  });
}

// Executions reading disjoint ranges of one File at once (offsets, no shared position).
TEST_P(FsTest, ManyReadersShareOneFile) {
  const std::string path = Path("shared");
  const std::string data = Pattern(8 * 65536, 2);
  Run([&] {
    {
      Result<fs::File> w = fs::File::open(path, {.write = true, .create = true});
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE(w->write_all_at(data.data(), data.size(), 0).ok());
    }
    Result<fs::File> f = fs::File::open(path);
    ASSERT_TRUE(f.ok());
    std::vector<Other> readers;
    std::atomic<int> exact{0};
    for (int k = 0; k < 8; ++k) {
      readers.push_back(Concurrently([&, k] {
        std::string part(65536, '\0');
        for (int round = 0; round < 4; ++round) {
          ASSERT_EQ(*f->read_full_at(part.data(), part.size(), std::uint64_t(k) * 65536), 65536u);
          ASSERT_EQ(part, data.substr(std::size_t(k) * 65536, 65536));
        }
        exact.fetch_add(1);
      }));
    }
    for (auto& r : readers) r.join();
    EXPECT_EQ(exact.load(), 8);
  });
}

TEST_P(FsTest, BadInputAndMissingFilesAreErrors) {
  const std::string path = Path("bad");
  Run([&] {
    EXPECT_EQ(fs::File::open(path).error(), std::errc::no_such_file_or_directory);
    EXPECT_EQ(fs::File::open("").error(), std::errc::invalid_argument);
    EXPECT_EQ(fs::File::open(std::string("a\0b", 3)).error(), std::errc::invalid_argument);
    EXPECT_EQ(fs::File::open(path, {.create = true}).error(), std::errc::invalid_argument);
    EXPECT_EQ(fs::File::open(path, {.read = false}).error(), std::errc::invalid_argument);
    Result<fs::File> f =
        fs::File::open(path, {.read = false, .write = true, .create = true, .exclusive = true});
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(fs::File::open(path, {.write = true, .create = true, .exclusive = true}).error(),
              std::errc::file_exists);
    char c = 0;
    EXPECT_EQ(f->read_at(nullptr, 5, 0).error(), std::errc::invalid_argument);
    EXPECT_EQ(f->write_at(&c, 1, std::uint64_t{1} << 63).error(), std::errc::invalid_argument);
    EXPECT_EQ(f->write_all_at(&c, 10, UINT64_MAX - 5).error(), std::errc::invalid_argument);
    CancellationSource src;
    src.cancel();
    CancellationToken tok = src.token();
    EXPECT_EQ(f->write_at(&c, 1, 0, {.cancel = &tok}).error(), std::errc::operation_canceled);
    EXPECT_EQ(f->sync({.deadline = SyncClock::now() - 1s}).error(), std::errc::timed_out);
    // Write-only: reading it is the system's EBADF.
    EXPECT_EQ(f->read_at(&c, 1, 0).error(), std::errc::bad_file_descriptor);
    ASSERT_TRUE(f->close().ok());
    EXPECT_EQ(f->read_at(&c, 1, 0).error(), std::errc::bad_file_descriptor);
    EXPECT_EQ(f->stat().error(), std::errc::bad_file_descriptor);
    fs::File none;
    EXPECT_EQ(none.sync().error(), std::errc::bad_file_descriptor);
#ifndef _WIN32
    Result<fs::File> dir =
        fs::File::open(std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR") : "/tmp");
    ASSERT_TRUE(dir.ok());
    EXPECT_TRUE(dir->stat()->directory);
    EXPECT_EQ(dir->read_at(&c, 1, 0).error(), std::errc::is_a_directory);
#endif
  });
}

TEST_P(FsTest, ReadAtAtTheLargestOffsetIsEndOfFile) {
  const std::string path = Path("huge");
  Run([&] {
    Result<fs::File> f = fs::File::open(path, {.write = true, .create = true});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->write_all_at("abc", 3, 0).ok());
    char c[2];
    Result<std::size_t> r = f->read_at(c, 1, (std::uint64_t{1} << 62));
    EXPECT_TRUE(r.ok() && *r == 0u) << (r.ok() ? "n" : r.error_code().message());
    r = f->read_at(c, 2, INT64_MAX);
    EXPECT_TRUE(r.ok() && *r == 0u) << (r.ok() ? std::to_string(*r) : r.error_code().message());
  });
}

// A write that fails at once (past the largest file the host allows) leaves the File working:
// the reads and writes after it each get their own result. (Through overlapped handles under
// Wine, such a failure left a completion behind that later calls took: docs/platforms.md.) On a
// filesystem that allows the write, it writes its byte far away and changes nothing below.
TEST_P(FsTest, AFailedWriteLeavesTheFileWorking) {
  const std::string path = Path("efbig");
  Run([&] {
    Result<fs::File> f =
        fs::File::open(path, {.read = true, .write = true, .create = true, .truncate = true});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->write_all_at("abc", 3, 0).ok());
    const std::uint64_t beyond = std::uint64_t{1} << 50;
    for (int i = 0; i < 4; ++i) {
      (void)f->write_at("z", 1, beyond);
      char b[8] = {};
      EXPECT_EQ(*f->read_full_at(b, 3, 0), 3u) << "round " << i;
      EXPECT_EQ(std::string(b, 3), "abc");
      EXPECT_EQ(*f->read_at(b, sizeof b, beyond + 100), 0u) << "round " << i;  // past the end
      EXPECT_EQ(*f->write_at("d", 1, 3), 1u) << "round " << i;
    }
  });
}

TEST_P(FsTest, AppendIgnoresTheOffset) {
  const std::string path = Path("append");
  Run([&] {
    {
      Result<fs::File> f = fs::File::open(path, {.write = true, .create = true});
      ASSERT_TRUE(f.ok());
      ASSERT_TRUE(f->write_all_at("0123456789", 10, 0).ok());
    }
    Result<fs::File> f = fs::File::open(path, {.read = true, .write = true, .append = true});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->write_all_at("AB", 2, 0).ok());
    // a big one too (through the ring on io_uring)
    std::string big(300000, 'z');
    ASSERT_TRUE(f->write_all_at(big.data(), big.size(), 3).ok());
    EXPECT_EQ(f->stat()->size, 10u + 2u + big.size());
    char buf[12];
    ASSERT_EQ(*f->read_full_at(buf, 12, 0), 12u);
    EXPECT_EQ(std::string(buf, 12), "0123456789AB");
  });
}

// Many executions read one File while another closes it and opens other files, which take the
// freed number: a read must return the first file's bytes or an error, never another file's.
TEST_P(FsTest, ReadersOfAFileClosedMeanwhileNeverReadTheNextFileWithItsNumber) {
  const std::string xpath = Path("x"), ypath = Path("y");
  const int rounds = std::getenv("ADV_ROUNDS") ? std::atoi(std::getenv("ADV_ROUNDS")) : 200;
  Run([&] {
    {
      Result<fs::File> x = fs::File::open(xpath, {.write = true, .create = true});
      Result<fs::File> y = fs::File::open(ypath, {.write = true, .create = true});
      ASSERT_TRUE(x.ok() && y.ok());
      ASSERT_TRUE(x->write_all_at(std::string(4096, 'X').data(), 4096, 0).ok());
      ASSERT_TRUE(y->write_all_at(std::string(4096, 'Y').data(), 4096, 0).ok());
    }
    std::atomic<long> wrong{0}, good{0}, errors{0};
    for (int round = 0; round < rounds; ++round) {
      Result<fs::File> fx = fs::File::open(xpath);
      ASSERT_TRUE(fx.ok());
      fs::File* shared = &*fx;
      std::atomic<bool> go{false};
      std::vector<Other> readers;
      for (int k = 0; k < 3; ++k) {
        readers.push_back(Concurrently([&] {
          while (!go.load()) {
          }
          char buf[64];
          for (;;) {
            Result<std::size_t> n = shared->read_at(buf, sizeof buf, 0);
            if (!n.ok()) {
              errors.fetch_add(1);
              return;
            }
            for (std::size_t i = 0; i < *n; ++i) {
              if (buf[i] != 'X') {
                wrong.fetch_add(1);
                return;
              }
            }
            good.fetch_add(1);
          }
        }));
      }
      go = true;
      (void)this_fiber::sleep_for(std::chrono::microseconds(200 + round % 300));
      ASSERT_TRUE(shared->close().ok());
      std::vector<fs::File> ys;
      for (int i = 0; i < 4; ++i) {
        Result<fs::File> y = fs::File::open(ypath);
        ASSERT_TRUE(y.ok());
        ys.push_back(std::move(*y));
      }
      for (auto& r : readers) r.join();
    }
    EXPECT_EQ(wrong.load(), 0) << "reads of the other file; good " << good.load();
  });
}

#ifdef __linux__
// A read of what the page cache does not hold: the first try (preadv2, RWF_NOWAIT) says EAGAIN
// and the read goes through the ring or a blocking thread; the bytes are the same.
TEST_P(FsTest, AReadTheCacheCannotServeStillReturnsTheBytes) {
  const std::string path = Path("cold");
  const std::string data = Pattern(1 << 20, 3);
  Run([&] {
    Result<fs::File> f = fs::File::open(path, {.write = true, .create = true});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->write_all_at(data.data(), data.size(), 0).ok());
    ASSERT_TRUE(f->sync().ok());
    // Clean pages can be dropped: ask the kernel to (it may keep some; either way is tested).
    ASSERT_EQ(::posix_fadvise(f->fd(), 0, 0, POSIX_FADV_DONTNEED), 0);
    std::string back(data.size(), '\0');
    for (std::size_t off = 0; off < data.size(); off += 4096) {
      ASSERT_EQ(*f->read_full_at(back.data() + off, 4096, off), 4096u);
    }
    EXPECT_EQ(back, data);
  });
}
#endif

INSTANTIATE_TEST_SUITE_P(FibersAndThreads, FsTest, ::testing::Values(Mode::kFibers, Mode::kThreads),
                         testing::ModeName);

// Once the runtime's shutdown has interrupted a fiber or a task, its file calls end
// operation_canceled, however each would go (io_uring, a read the page cache serves directly,
// or a blocking thread under epoll, which nothing interrupts): a loop of reads that never wait
// cannot hold the shutdown up. A File still closes.
TEST(FsShutdownTest, AnInterruptedFibersAndTasksFileCallsEndCanceled) {
  const std::string path = Path("interrupted");
  {
    Result<fs::File> f = fs::File::open(path, {.write = true, .create = true, .truncate = true});
    ASSERT_TRUE(f.ok());
    ASSERT_EQ(*f->write_at("0123456789", 10, 0), 10u);
  }
  std::atomic<int> fiber_cancelled{0}, task_cancelled{0}, closed{0};
  Result<fs::File> for_task = fs::File::open(path, {.write = true});  // (a task opens through
  ASSERT_TRUE(for_task.ok());                                         // a blocking thread)
  {
    Runtime rt({.workers = 1});
    rt.spawn([&] {
        Result<fs::File> f = fs::File::open(path, {.write = true});
        ASSERT_TRUE(f.ok());
        (void)this_fiber::sleep_for(1h);  // until the shutdown interrupts it
        char c;
        fiber_cancelled += f->read_at(&c, 1, 0).error() == std::errc::operation_canceled;
        fiber_cancelled += f->write_at("x", 1, 0).error() == std::errc::operation_canceled;
        fiber_cancelled += f->stat().error() == std::errc::operation_canceled;
        fiber_cancelled += fs::File::open(path).error() == std::errc::operation_canceled;
        closed += f->close().ok();
      }).detach();
    rt.spawn_task([&]() -> Task<> {
        (void)co_await this_task::sleep_for(1h);
        char c;
        task_cancelled +=
            (co_await for_task->async_read_at(&c, 1, 0)).error() == std::errc::operation_canceled;
        task_cancelled +=
            (co_await for_task->async_write_at("x", 1, 0)).error() == std::errc::operation_canceled;
      }).detach();
    testing::WaitUntilDumpShows(rt, "sleep", 2, /*tries=*/2000);
  }
  EXPECT_EQ(fiber_cancelled.load(), 4);
  EXPECT_EQ(task_cancelled.load(), 2);
  EXPECT_EQ(closed.load(), 1);
  std::filesystem::remove(path);
}

// ---- From stackless tasks: async_read_at and async_write_at ----

class FsTaskTest : public ::testing::TestWithParam<unsigned> {};
INSTANTIATE_TEST_SUITE_P(Workers, FsTaskTest, ::testing::Values(1u, 2u, 4u));

// Tasks write a file in pieces at their offsets, then eight tasks and a fiber read it back in
// small and large chunks; every byte is checked. Past the end a read gives 0.
TEST_P(FsTaskTest, TasksWriteAndReadBackAtOffsets) {
  Runtime rt({.workers = GetParam()});
  const std::string path = Path("rw");
  // The open through a blocking thread, as a task does it.
  Result<fs::File> f =
      rt.spawn_task([&]() -> Task<Result<fs::File>> {
          co_return co_await this_task::call_blocking([&] {
            return fs::File::open(path, {.write = true, .create = true, .truncate = true});
          });
        })
          .join()
          .value();
  ASSERT_TRUE(f.ok()) << f.error_code().message();
  const std::size_t size = 3 << 20;
  const std::string data = Pattern(size, 3);
  constexpr std::size_t kPieces = 6;
  std::vector<JoinHandle<void>> writers;
  for (std::size_t p = 0; p < kPieces; ++p) {
    writers.push_back(rt.spawn_task([&, p]() -> Task<> {
      const std::size_t at = p * (size / kPieces), end = at + size / kPieces;
      for (std::size_t done = at; done < end;) {
        Result<std::size_t> n = co_await f->async_write_at(data.data() + done, end - done, done);
        EXPECT_TRUE(n.ok() && *n > 0);
        if (!n.ok() || *n == 0) co_return;
        done += *n;
      }
    }));
  }
  for (auto& w : writers) ASSERT_TRUE(w.join().ok());
  std::atomic<int> good{0};
  std::vector<JoinHandle<void>> readers;
  for (int r = 0; r < 8; ++r) {
    const std::size_t chunk = r % 2 == 0 ? 4096 : (std::size_t{1} << 20) + 17;
    readers.push_back(rt.spawn_task([&, chunk]() -> Task<> {
      std::string back(size, '\0');
      for (std::size_t done = 0; done < size;) {
        Result<std::size_t> n =
            co_await f->async_read_at(back.data() + done, std::min(chunk, size - done), done);
        EXPECT_TRUE(n.ok() && *n > 0);
        if (!n.ok() || *n == 0) co_return;
        done += *n;
      }
      char more[8];
      EXPECT_EQ(*co_await f->async_read_at(more, sizeof more, size), 0u);  // past the end
      if (back == data) good.fetch_add(1);
    }));
  }
  readers.push_back(rt.spawn([&] {
    std::string back(size, '\0');
    Result<std::size_t> n = f->read_full_at(back.data(), size, 0);
    ASSERT_TRUE(n.ok() && *n == size);
    if (back == data) good.fetch_add(1);
  }));
  for (auto& r : readers) ASSERT_TRUE(r.join().ok());
  EXPECT_EQ(good.load(), 9);
}

// Bad input, a deadline already passed, a cancelled token and a closed File are errors at once.
TEST_P(FsTaskTest, BadInputAndEndedWaitsAreErrors) {
  Runtime rt({.workers = GetParam()});
  const std::string path = Path("bad");
  Result<fs::File> f = fs::File::open(path, {.write = true, .create = true, .truncate = true});
  ASSERT_TRUE(f.ok());
  auto h = rt.spawn_task([&]() -> Task<> {
    char buf[8] = {};
    EXPECT_EQ(co_await f->async_read_at(nullptr, 8, 0), std::errc::invalid_argument);
    EXPECT_EQ(co_await f->async_write_at(buf, 8, std::uint64_t{1} << 63),
              std::errc::invalid_argument);
    EXPECT_EQ(co_await f->async_read_at(buf, 8, 0, {.deadline = SyncClock::now() - 1s}),
              std::errc::timed_out);
    CancellationSource source;
    CancellationToken token = source.token();
    source.cancel();
    EXPECT_EQ(co_await f->async_write_at(buf, 8, 0, {.cancel = &token}),
              std::errc::operation_canceled);
    // One byte: never shortened (WEFT_FAULTS shortens longer transfers, as the kernel may).
    EXPECT_EQ(*co_await f->async_write_at("a", 1, 0), 1u);
    EXPECT_EQ(*co_await f->async_read_at(buf, sizeof buf, 0), 1u);
    EXPECT_TRUE(f->close().ok());
    EXPECT_EQ(co_await f->async_read_at(buf, 8, 0), std::errc::bad_file_descriptor);
  });
  ASSERT_TRUE(h.join().ok());
}

// Writers on a regular File closed meanwhile, its number then reused by another file: no write
// reaches the other file (on io_uring, where the close ends the operations first, and on the
// blocking threads under epoll and on Windows, where each call is an FdUse that the close waits
// for).
TEST(FsClose, WritersOnAFileClosedMeanwhileNeverWriteTheNextFile) {
  const int rounds = std::getenv("ADV_ROUNDS") ? std::atoi(std::getenv("ADV_ROUNDS")) : 40;
  Runtime rt({.workers = 2});
  rt.block_on([&] {
    for (int round = 0; round < rounds; ++round) {
      const std::string a_path = Path("fa" + std::to_string(round));
      const std::string b_path = Path("fb" + std::to_string(round));
      Result<fs::File> a =
          fs::File::open(a_path, {.write = true, .create = true, .truncate = true});
      ASSERT_TRUE(a.ok());
      std::atomic<bool> stop{false};
      std::vector<JoinHandle<void>> writers;
      for (int k = 0; k < 3; ++k) {
        writers.push_back(rt.spawn([&] {
          const char w[64] = {'W'};
          while (!stop.load()) {
            if (!a->write_at(w, sizeof w, 0).ok()) return;
          }
        }));
      }
      (void)this_fiber::sleep_for(std::chrono::microseconds(50 + round * 7));
      ASSERT_TRUE(a->close().ok());
      Result<fs::File> b =
          fs::File::open(b_path, {.read = true, .write = true, .create = true, .truncate = true});
      ASSERT_TRUE(b.ok());
      const std::string clean(64, 'B');
      ASSERT_TRUE(b->write_all_at(clean.data(), clean.size(), 0).ok());
      (void)this_fiber::sleep_for(std::chrono::microseconds(200));
      stop = true;
      for (auto& w : writers) (void)w.join();
      std::string got(64, '\0');
      ASSERT_TRUE(b->read_full_at(got.data(), got.size(), 0).ok());
      EXPECT_EQ(got, clean) << "a write on the closed file reached the next one (round " << round
                            << ")";
      (void)b->close();
      std::filesystem::remove(a_path);
      std::filesystem::remove(b_path);
    }
  });
}

// With io_uring reads and writes are operations of the worker's ring: they complete while the
// runtime's one blocking thread is taken. (epoll and Windows run them on the blocking threads:
// skipped there.) Were they to wait for that thread, the thread's holder would give up after 20
// seconds and the test would fail.
TEST(FsReactor, ReadsAndWritesNeedNoBlockingThread) {
#ifdef _WIN32
  GTEST_SKIP() << "Windows reads and writes files on the blocking threads";
#endif
  Runtime rt({.workers = 2, .max_blocking_threads = 1});
  // epoll (WEFT_REACTOR=epoll, or a build without io_uring: the aarch64 cross build) reads and
  // writes files on the blocking threads, except reads and writes the page cache serves at once.
  if (rt.stats_json().find("\"reactor\":\"io_uring\"") == std::string::npos) {
    GTEST_SKIP() << "epoll reads and writes files on the blocking threads";
  }
  const std::string path = Path("no_pool");
  rt.block_on([&] {
    Result<fs::File> f = fs::File::open(path, {.write = true, .create = true, .truncate = true});
    ASSERT_TRUE(f.ok());
    std::atomic<bool> holding{false}, done{false}, released_by_io{false};
    JoinHandle<void> holder = rt.spawn([&] {
      call_blocking([&] {
        holding = true;
        const auto give_up = std::chrono::steady_clock::now() + 20s;
        while (!done.load() && std::chrono::steady_clock::now() < give_up) {
          std::this_thread::sleep_for(1ms);
        }
        released_by_io = done.load();
      });
    });
    while (!holding.load()) this_fiber::yield();
    const std::string data = Pattern(256 << 10, 5);
    EXPECT_TRUE(f->write_all_at(data.data(), data.size(), 0).ok());
    std::string back(data.size(), '\0');
    EXPECT_EQ(*f->read_full_at(back.data(), back.size(), 0), data.size());
    EXPECT_EQ(back, data);
    Result<std::size_t> from_task = rt.spawn_task([&]() -> Task<Result<std::size_t>> {
                                        char head[16];
                                        Result<std::size_t> n =
                                            co_await f->async_read_at(head, sizeof head, 0);
                                        if (n.ok() && std::string(head, *n) != data.substr(0, *n))
                                          co_return std::errc::io_error;
                                        if (!(co_await f->async_write_at("t", 1, data.size())).ok())
                                          co_return std::errc::io_error;
                                        co_return n;
                                      })
                                        .join()
                                        .value();
    EXPECT_EQ(*from_task, 16u);
    done = true;
    ASSERT_TRUE(holder.join().ok());
    EXPECT_TRUE(released_by_io.load()) << "a file call waited for the blocking thread";
  });
}

// The null device is no regular file: stat says so, where it answers (Windows' NUL may refuse
// GetFileInformationByHandle), and a read of it is the end of the file.
TEST(FsStat, TheNullDeviceIsNotARegularFile) {
#ifdef _WIN32
  const char* null_device = "NUL";
#else
  const char* null_device = "/dev/null";
#endif
  Runtime rt({.workers = 1});
  rt.block_on([&] {
    Result<fs::File> f = fs::File::open(null_device, {.read = true, .write = true});
    ASSERT_TRUE(f.ok()) << std::make_error_code(f.error()).message();
    Result<fs::FileStat> st = f->stat();
    if (st.ok()) {
      EXPECT_FALSE(st->regular);
      EXPECT_FALSE(st->directory);
    }
    char b[4];
    EXPECT_EQ(*f->read_at(b, sizeof b, 0), 0u);
  });
}

#ifdef _WIN32
// fd() is the file's handle, for the system's own calls: a synchronous one, as a handle from
// CreateFile without FILE_FLAG_OVERLAPPED.
TEST(FsWindows, TheHandleServesTheSystemsOwnCalls) {
  Runtime rt({.workers = 2});
  const std::string path = Path("handle");
  rt.block_on([&] {
    Result<fs::File> f =
        fs::File::open(path, {.read = true, .write = true, .create = true, .truncate = true});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->write_all_at("wxyz", 4, 0).ok());
    HANDLE h = reinterpret_cast<HANDLE>(static_cast<std::intptr_t>(f->fd()));
    LARGE_INTEGER zero{};
    ASSERT_TRUE(SetFilePointerEx(h, zero, nullptr, FILE_BEGIN));
    char b[4] = {};
    DWORD got = 0;
    ASSERT_TRUE(ReadFile(h, b, sizeof b, &got, nullptr)) << GetLastError();
    EXPECT_EQ(std::string(b, got), "wxyz");
    char c[4] = {};
    EXPECT_EQ(*f->read_full_at(c, 4, 0), 4u);  // and weft's calls still work
  });
}

// A named pipe opened as a File is no regular file: its type comes from GetFileType, not from
// GetFileInformationByHandle's attributes. (Wine refuses the latter for a pipe: io_error.)
TEST(FsWindows, APipeIsNotARegularFile) {
  const std::string path = "\\\\.\\pipe\\weft_fs_test_" + std::to_string(GetCurrentProcessId());
  HANDLE server =
      CreateNamedPipeA(path.c_str(), PIPE_ACCESS_DUPLEX, PIPE_TYPE_BYTE, 1, 4096, 4096, 0, nullptr);
  ASSERT_NE(server, INVALID_HANDLE_VALUE) << GetLastError();
  Runtime rt({.workers = 1});
  rt.block_on([&] {
    Result<fs::File> f = fs::File::open(path, {.read = true, .write = true});
    ASSERT_TRUE(f.ok()) << std::make_error_code(f.error()).message();
    Result<fs::FileStat> st = f->stat();
    if (st.ok()) {
      EXPECT_FALSE(st->regular);
      EXPECT_FALSE(st->directory);
    } else {
      EXPECT_EQ(st.error(), std::errc::io_error);
    }
  });
  CloseHandle(server);
}

// A File closed where no reactor can take the close (a simulated runtime's fiber): its handle is
// still closed. (closesocket refuses a file's handle, with WSAENOTSOCK here; in a process that
// never started Winsock, with WSANOTINITIALISED, which the close handles too.)
TEST(FsWindows, ACloseWithoutAReactorClosesTheHandle) {
  const std::string path = Path("noreactor");
  Result<fs::File> f = fs::File::open(path, {.write = true, .create = true});
  ASSERT_TRUE(f.ok());
  HANDLE h = reinterpret_cast<HANDLE>(static_cast<std::intptr_t>(f->fd()));
  Runtime rt({.simulation = SimulationOptions{.seed = 1}});
  rt.block_on([&] { EXPECT_TRUE(f->close().ok()); });
  BY_HANDLE_FILE_INFORMATION info{};
  EXPECT_FALSE(GetFileInformationByHandle(h, &info)) << "the handle is still open";
}
#endif

TEST(FsSimulation, RealFilesAreNotTouched) {
  Runtime rt({.simulation = SimulationOptions{.seed = 1}});
  rt.block_on([] {
    EXPECT_EQ(fs::File::open("/etc/hostname").error(), std::errc::not_supported);
    EXPECT_EQ(fs::read_file("/etc/hostname").error(), std::errc::not_supported);
  });
}

}  // namespace
}  // namespace weft
