// base/internal/futex_portable.cc: FutexWait/FutexWake where no futex is wired up yet: a short
// sleep bounded by the timeout, and std::atomic notification. Correct (callers re-check their
// condition after every wait), only less prompt than a real futex.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "weft/base/futex.h"

namespace weft::base_internal {

void FutexWait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               std::chrono::microseconds timeout) {
  // relaxed: the caller re-checks everything it cares about after returning.
  if (word.load(std::memory_order_relaxed) != expected) return;
  std::this_thread::sleep_for(std::min(timeout, std::chrono::microseconds(200)));
}

void FutexWake(std::atomic<std::uint32_t>& word, int count) {
  if (count == 1) {
    word.notify_one();
  } else {
    word.notify_all();
  }
}

}  // namespace weft::base_internal
