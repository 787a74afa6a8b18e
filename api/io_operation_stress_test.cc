// api/io_operation_stress_test.cc: the task forms that keep their state in the awaiting frame
// (TcpStream::async_read and async_recv_buffer, api/internal/io_operation.h) under attack:
// streams closed at random while hundreds of tasks read them, their fd numbers taken at once by
// new sockets that already hold bytes (a read ends with an error and never reads the new file);
// and, with every buffer of the ring kept, receives that fall back from inside their wait while
// deadlines pass and tokens are cancelled at random (every call returns once, no byte is lost
// or read twice). Sized for seconds on 2 cores; WEFT_STRESS_SCALE makes them longer.

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "gtest/gtest.h"
#include "weft/api/io.h"
#include "weft/api/net.h"
#include "weft/api/testing/dual_mode.h"
#include "weft/base/clock.h"
#include "weft/base/stress_scale.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/task.h"
#include "weft/sync/cancellation.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using net::TcpStream;

using Pair = testing::SocketPair;

// Byte k of stream `slot`: every stream carries its own sequence, so a byte read from another
// file, lost or read twice shows.
unsigned char Pattern(std::size_t slot, std::size_t k) {
  return static_cast<unsigned char>((slot * 131 + k * 7 + (k >> 8) * 13 + 1) & 0xff);
}

// SendPattern: bytes [from, to) of slot's sequence (at most 512) on fd without waiting: how many
// went, 0 when the socket is full, -1 on an error.
long SendPattern(int fd, std::size_t slot, std::size_t from, std::size_t to) {
  unsigned char out[512];
  const std::size_t n = std::min(to - from, sizeof out);
  for (std::size_t i = 0; i < n; ++i) out[i] = Pattern(slot, from + i);
  const ssize_t r = ::send(fd, out, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
  return r;
}

// Reader: what one task read of its stream.
struct Reader {
  std::size_t got = 0;      // bytes, in order
  int wrong = 0;            // bytes not its own (or out of place)
  int calls = 0, ends = 0;  // receives asked, and returned
  std::errc error{};        // how the stream ended
  // Take: n bytes received: checked against the sequence.
  void Take(std::size_t slot, const char* data, std::size_t n) {
    for (std::size_t j = 0; j < n; ++j) {
      if (static_cast<unsigned char>(data[j]) != Pattern(slot, got + j)) ++wrong;
    }
    got += n;
  }
};

// One receive of the three task forms, chosen by `how`: async_read, async_read kept as a Task
// and awaited, async_recv_buffer. The bytes (checked) or the error; 0 at end of stream.
Task<Result<std::size_t>> ReceiveOnce(TcpStream& st, std::size_t slot, Reader& r, unsigned how,
                                      std::size_t len, WaitOptions options) {
  char buf[300];
  len = std::min(len, sizeof buf);
  ++r.calls;
  Result<std::size_t> n = std::errc::invalid_argument;
  if (how % 3 == 2) {
    Result<io::RecvBuffer> b = co_await st.async_recv_buffer(options);
    ++r.ends;
    if (!b.ok()) co_return b.error();
    r.Take(slot, b->data(), b->size());
    co_return b->size();
  }
  if (how % 3 == 1) {
    Task<Result<std::size_t>> later = st.async_read(buf, len, options);
    n = co_await std::move(later);
  } else {
    n = co_await st.async_read(buf, len, options);
  }
  ++r.ends;
  if (n.ok()) r.Take(slot, buf, *n);
  co_return n;
}

class IoOperationStress : public ::testing::TestWithParam<unsigned> {};
INSTANTIATE_TEST_SUITE_P(Workers, IoOperationStress, ::testing::Values(1u, 2u, 4u, 8u));

// Hundreds of tasks read their streams through the three forms while writers send each its
// sequence; a closer closes the streams in random order at random moments and at once opens
// two socket pairs holding bytes, which take the freed numbers. On 1 to 8 workers. Each read ends
// with operation_canceled or bad_file_descriptor, and no task reads a byte that is not its own.
TEST_P(IoOperationStress, ClosedStreamsNeverReadTheNumbersNextFile) {
  const int n = 100 * testing::StressScale();
  if (testing::RaiseFdLimit() < 6 * n + 256) GTEST_SKIP() << "needs " << 6 * n + 256 << " fds";
  Runtime rt({.workers = GetParam()});
  std::vector<Pair> pairs(n);
  std::vector<std::unique_ptr<TcpStream>> streams;
  for (Pair& p : pairs) {
    ASSERT_GE(p.a, 0);
    streams.push_back(std::make_unique<TcpStream>(std::exchange(p.a, -1)));
  }
  std::vector<Reader> readers(n);
  std::vector<JoinHandle<void>> tasks;
  for (int i = 0; i < n; ++i) {
    tasks.push_back(rt.spawn_task([&, i]() -> Task<> {
      std::mt19937 rng(static_cast<unsigned>(i) * 7919u);
      for (;;) {
        Result<std::size_t> got =
            co_await ReceiveOnce(*streams[i], i, readers[i], rng(), 1 + rng() % 300, {});
        if (!got.ok()) {
          readers[i].error = got.error();
          co_return;
        }
        if (*got == 0) co_return;  // (an end of stream: reported below as no error)
      }
    }));
  }
  std::vector<std::atomic<bool>> closed(n);
  std::vector<Pair> intruders;
  intruders.reserve(2 * n);
  rt.block_on([&] {
    std::atomic<bool> stop{false};
    std::vector<std::size_t> sent(n, 0);
    const unsigned writers = GetParam();
    std::vector<JoinHandle<void>> writing;
    for (unsigned w = 0; w < writers; ++w) {
      writing.push_back(rt.spawn([&, w] {
        std::mt19937 rng(w + 99);
        while (!stop.load()) {
          for (int i = static_cast<int>(w); i < n; i += static_cast<int>(writers)) {
            if (closed[i].load() || sent[i] >= 16384) continue;  // bounded: readers keep up
            const long r = SendPattern(pairs[i].b, i, sent[i], sent[i] + 1 + rng() % 700);
            if (r > 0) sent[i] += static_cast<std::size_t>(r);
          }
          (void)this_fiber::sleep_for(100us);
        }
      }));
    }
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::mt19937 rng(12345);
    std::shuffle(order.begin(), order.end(), rng);
    for (int i : order) {
      if (rng() % 3 == 0) {
        (void)this_fiber::sleep_for(std::chrono::microseconds(rng() % 300));
      } else {
        this_fiber::yield();
      }
      closed[i].store(true);
      EXPECT_TRUE(streams[i]->close().ok());
      for (int k = 0; k < 2; ++k) {  // the freed number goes to one of these at once
        Pair& p = intruders.emplace_back();
        (void)::send(p.a, "ZZZZZZZZ", 8, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)::send(p.b, "YYYYYYYY", 8, MSG_DONTWAIT | MSG_NOSIGNAL);
      }
    }
    stop.store(true);
    for (auto& w : writing) ASSERT_TRUE(w.join().ok());
  });
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(tasks[i].join().ok());
    EXPECT_EQ(readers[i].wrong, 0) << "stream " << i << " read bytes not its own";
    EXPECT_EQ(readers[i].calls, readers[i].ends) << "stream " << i;
    EXPECT_TRUE(readers[i].error == std::errc::operation_canceled ||
                readers[i].error == std::errc::bad_file_descriptor)
        << "stream " << i << " ended with " << static_cast<int>(readers[i].error);
  }
}

// With every buffer of the worker's ring kept, tasks receive their streams through
// async_recv_buffer and async_read while deadlines pass and tokens are cancelled at random
// (some before the call): a receive waiting when its bytes come finds no buffer and falls back
// from inside its wait. Every call returns once, and each stream arrives whole and in order.
TEST(IoOperationRingStress, CancelsAndDeadlinesWhileTheRingIsEmpty) {
  const int kept_n = 1030;  // > Reactor::kPooledBuffers (1,024)
  const int n = 100;
  const std::size_t total = 16000 * static_cast<std::size_t>(testing::StressScale());
  if (testing::RaiseFdLimit() < 2 * (kept_n + n) + 256) GTEST_SKIP() << "needs more fds";
  Runtime rt({.workers = 1});
  std::vector<Pair> keep(kept_n), pairs(n);
  for (const Pair& p : pairs) ASSERT_GE(p.a, 0);
  std::vector<io::RecvBuffer> kept;
  rt.block_on([&] {
    for (std::size_t i = 0; i < keep.size(); ++i) {
      ASSERT_TRUE(io::send_all(keep[i].b, "k", 1).ok());
      Result<io::RecvBuffer> b = io::recv_buffer(keep[i].a);
      ASSERT_TRUE(b.ok());
      kept.push_back(std::move(*b));
    }
  });
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::vector<Reader> readers(n);
  std::vector<JoinHandle<void>> tasks;
  for (int i = 0; i < n; ++i) {
    tasks.push_back(rt.spawn_task([&, i]() -> Task<> {
      TcpStream st(std::exchange(pairs[i].a, -1));
      std::mt19937 rng(static_cast<unsigned>(i) + 5u);
      while (readers[i].got < total) {
        CancellationSource source;
        const CancellationToken token = source.token();
        WaitOptions options;
        switch (rng() % 5) {
          case 0:
            options.deadline = SyncClock::now() + std::chrono::microseconds(rng() % 500);
            break;
          case 1:
          case 2:
            options.cancel = &token;
            (void)source.cancel_after(std::chrono::microseconds(rng() % 500));
            break;
          case 3:
            options.cancel = &token;
            if (rng() % 2 != 0) source.cancel();  // cancelled before the call
            break;
          default:
            break;
        }
        // (how: 0 async_read, 2 async_recv_buffer; the Task form is the first test's.)
        Result<std::size_t> got =
            co_await ReceiveOnce(st, i, readers[i], (rng() % 2) * 2, 1 + rng() % 200, options);
        if (!got.ok() && got.error() != std::errc::operation_canceled &&
            got.error() != std::errc::timed_out) {
          readers[i].error = got.error();
          break;
        }
        if (got.ok() && *got == 0) break;  // an end of stream: the count below tells
      }
    }));
  }
  rt.block_on([&] {
    std::vector<std::size_t> sent(n, 0);
    std::mt19937 rng(7);
    for (bool more = true; more;) {
      more = false;
      for (int i = 0; i < n; ++i) {
        if (sent[i] >= total) continue;
        more = true;
        const long r =
            SendPattern(pairs[i].b, i, sent[i], std::min(total, sent[i] + 1 + rng() % 300));
        ASSERT_GE(r, 0);
        sent[i] += static_cast<std::size_t>(r);
      }
      if (rng() % 2 != 0) {
        (void)this_fiber::sleep_for(std::chrono::microseconds(rng() % 200));
      } else {
        this_fiber::yield();
      }
    }
  });
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(tasks[i].join().ok());
    EXPECT_EQ(readers[i].error, std::errc{}) << "stream " << i;
    EXPECT_EQ(readers[i].got, total) << "stream " << i;
    EXPECT_EQ(readers[i].wrong, 0) << "stream " << i;
    EXPECT_EQ(readers[i].calls, readers[i].ends) << "stream " << i;
  }
  kept.clear();
}

}  // namespace
}  // namespace weft
