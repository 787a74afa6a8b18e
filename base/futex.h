// base/futex.h: wait on a 32-bit word until it changes or a timeout passes, and wake
// waiters. Linux uses futex(2) (futex_linux.cc), Windows WaitOnAddress (futex_windows.cc),
// other systems a portable stand-in (futex_portable.cc), chosen by select() in
// base/BUILD.bazel.

#ifndef WEFT_BASE_FUTEX_H_
#define WEFT_BASE_FUTEX_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace weft::base_internal {

// FutexWait: blocks while word == expected, for at most `timeout`; may wake spuriously.
void FutexWait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               std::chrono::microseconds timeout);

// FutexWake: wakes up to `count` threads blocked in FutexWait on `word`.
void FutexWake(std::atomic<std::uint32_t>& word, int count);

}  // namespace weft::base_internal

#endif  // WEFT_BASE_FUTEX_H_
