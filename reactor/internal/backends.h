// reactor/internal/backends.h: the backend factories that Reactor::create chooses between.

#ifndef WEFT_REACTOR_INTERNAL_BACKENDS_H_
#define WEFT_REACTOR_INTERNAL_BACKENDS_H_

#include <algorithm>
#include <chrono>
#include <memory>

#include "weft/base/result.h"
#include "weft/reactor/reactor.h"

namespace weft::reactor_internal {

// Linux only.
Result<std::unique_ptr<Reactor>> MakeEpollReactor(const ReactorOptions& options);

// TimeLeft: how long until `deadline`, 0 if it passed. Compares before subtracting: a deadline
// such as time_point::min() ("do not block") would overflow the subtraction.
inline std::chrono::nanoseconds TimeLeft(ReactorClock::time_point deadline) {
  ReactorClock::time_point now = ReactorClock::now();
  if (deadline <= now) return std::chrono::nanoseconds(0);
  // deadline > now >= 0 (steady_clock counts from boot): the difference cannot overflow.
  return std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::hours(24 * 365));
}
// Defined only when the io_uring backend is compiled in (see reactor/BUILD.bazel).
Result<std::unique_ptr<Reactor>> MakeIoUringReactor(const ReactorOptions& options);
// Windows only.
Result<std::unique_ptr<Reactor>> MakeIocpReactor(const ReactorOptions& options);
// MakeFaultyReactor: `inner` with base/fault.h's faults injected (Reactor::create uses it while
// faults are on).
std::unique_ptr<Reactor> MakeFaultyReactor(std::unique_ptr<Reactor> inner);

}  // namespace weft::reactor_internal

#endif  // WEFT_REACTOR_INTERNAL_BACKENDS_H_
