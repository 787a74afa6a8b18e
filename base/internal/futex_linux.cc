// base/internal/futex_linux.cc: FutexWait/FutexWake on Linux futex(2), process-private.

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "weft/base/futex.h"

namespace weft::base_internal {

void FutexWait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               std::chrono::microseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000000) * 1000);
  // EAGAIN (word changed), ETIMEDOUT and EINTR all mean: go and look again.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, &ts,
          nullptr, 0);
}

void FutexWake(std::atomic<std::uint32_t>& word, int count) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, count, nullptr,
          nullptr, 0);
}

}  // namespace weft::base_internal
