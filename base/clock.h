// base/clock.h: weft::SyncClock, the clock every weft deadline is on. It is
// std::chrono::steady_clock, except on the thread of a simulated runtime
// (RuntimeOptions::simulation), where now() reads the simulation's virtual clock. Its time_point
// is steady_clock's own, so deadlines of either convert to nothing and compare directly.
//
// Defines: weft::SyncClock.

#ifndef WEFT_BASE_CLOCK_H_
#define WEFT_BASE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "weft/base/config.h"

namespace weft {
namespace base_internal {
// The virtual clock (nanoseconds on steady_clock's scale) of the simulated runtime whose thread
// this is; null elsewhere. Set and cleared by that thread only. constinit: no dynamic
// initialisation, so a read is one TLS load.
inline constinit thread_local const std::atomic<std::int64_t>* t_virtual_now = nullptr;
}  // namespace base_internal

struct SyncClock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr bool is_steady = true;
  static time_point now() noexcept {
    if (const std::atomic<std::int64_t>* v = base_internal::t_virtual_now) [[unlikely]] {
      // relaxed: written by this same thread.
      return time_point(std::chrono::nanoseconds(v->load(std::memory_order_relaxed)));
    }
    return std::chrono::steady_clock::now();
  }
};

// SaturatingAfter: t + d, or time_point::max() where that would overflow (a timeout of
// "practically forever", such as INT64_MAX ns); t itself for d < 0 (already due). For t >= 0,
// as SyncClock's readings are (steady_clock counts from boot, a virtual clock from 0).
inline SyncClock::time_point SaturatingAfter(SyncClock::time_point t, SyncClock::duration d) {
  if (d <= SyncClock::duration::zero()) return t;
  if (d >= SyncClock::time_point::max() - t) return SyncClock::time_point::max();
  return t + d;
}

}  // namespace weft

#endif  // WEFT_BASE_CLOCK_H_
