// scheduler/internal/fd_use.h: the protocol between a call on an fd and a close of that fd
// (scheduler/io.h's FdUse and CloseFd), on one 64-bit word per fd: the fd's close epoch in the
// high half, the number of uses under way in the low half. Templates over the atomic type, so
// that the model checker runs the same code on weft::atomic (scheduler/fd_use_model_test.cc).
//
// Defines: weft::scheduler_internal::fd_use::Enter, Leave, Epoch, BeginClose.
//
// A use is one RMW that registers and reads the epoch at once; a close's bump of the epoch is an
// RMW on the same word. RMWs on one location are totally ordered, so either the use comes first
// (the close sees its count and waits for its Leave) or the close does (the use reads the new
// epoch and backs off). Checking the epoch with a load before registering would leave a gap: a
// close could bump and find no use between the check and the registration.

#ifndef WEFT_SCHEDULER_INTERNAL_FD_USE_H_
#define WEFT_SCHEDULER_INTERNAL_FD_USE_H_

#include <atomic>
#include <cstdint>
#include <thread>

#include "weft/base/cpu_relax.h"

namespace weft::scheduler_internal::fd_use {

inline constexpr int kEpochShift = 32;
inline constexpr std::uint64_t kUsesMask = (std::uint64_t{1} << kEpochShift) - 1;

// Epoch: the close epoch (how many closes have begun).
template <typename Atomic>
std::uint32_t Epoch(const Atomic& word) {
  // seq_cst: ordered with the closes' bumps, which come before their closes begin.
  return static_cast<std::uint32_t>(word.load(std::memory_order_seq_cst) >> kEpochShift);
}

// Enter: registers a use. With an epoch (>= 0) that is no longer the word's, registers nothing
// and returns false: a close began since the caller noted it.
template <typename Atomic>
bool Enter(Atomic& word, std::int64_t epoch) {
  // seq_cst: the one RMW both registers and reads the epoch (see above).
  const std::uint64_t v = word.fetch_add(1, std::memory_order_seq_cst);
  if (epoch >= 0 &&
      static_cast<std::uint32_t>(v >> kEpochShift) != static_cast<std::uint32_t>(epoch)) {
    // relaxed: this use touched nothing; the closer only waits for the count to drain.
    word.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

// Leave: ends a use that Enter registered.
template <typename Atomic>
void Leave(Atomic& word) {
  // release: the use's system call happens before the closer's acquire load that sees it end.
  word.fetch_sub(1, std::memory_order_release);
}

// BeginClose: bumps the epoch (uses from here on back off), then waits until the uses that came
// before it have left. Each is a system call that does not wait, or a submission, so the wait is
// short; past a few spins it yields the thread, in case a use's thread was descheduled.
template <typename Atomic>
void BeginClose(Atomic& word) {
  // seq_cst: ordered with every use's Enter (see above).
  word.fetch_add(std::uint64_t{1} << kEpochShift, std::memory_order_seq_cst);
  // acquire: pairs with Leave's release, so each earlier use's call happens before the close.
  for (int spins = 0; (word.load(std::memory_order_acquire) & kUsesMask) != 0; ++spins) {
    CpuRelax();
    if (spins >= 64) std::this_thread::yield();
  }
}

}  // namespace weft::scheduler_internal::fd_use

#endif  // WEFT_SCHEDULER_INTERNAL_FD_USE_H_
