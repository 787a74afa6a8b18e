// deque/internal/futex.h: wait on a 32-bit word until it changes or a timeout passes, and wake
// waiters. Linux uses futex(2) (futex_linux.cc); other systems a portable stand-in
// (futex_portable.cc), chosen by select() in deque/BUILD.bazel.

#ifndef WEFT_DEQUE_INTERNAL_FUTEX_H_
#define WEFT_DEQUE_INTERNAL_FUTEX_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace weft::deque_internal {

// FutexWait: blocks while word == expected, for at most `timeout`; may wake spuriously.
void FutexWait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               std::chrono::microseconds timeout);

// FutexWake: wakes up to `count` threads blocked in FutexWait on `word`.
void FutexWake(std::atomic<std::uint32_t>& word, int count);

}  // namespace weft::deque_internal

#endif  // WEFT_DEQUE_INTERNAL_FUTEX_H_
