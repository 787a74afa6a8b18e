// scheduler/internal/hold.h: how the monitor (internal/monitor.h) judges a run that has lasted
// past the stuck threshold from the worker thread's CPU clock: does the fiber hold its worker,
// or has the system merely not given the thread a core? Header-only, so its test reads it alone.
//
// Defines: weft::scheduler_internal::CpuEvidence, JudgeCpu.

#ifndef WEFT_SCHEDULER_INTERNAL_HOLD_H_
#define WEFT_SCHEDULER_INTERNAL_HOLD_H_

#include <cstdint>

namespace weft::scheduler_internal {

enum class CpuEvidence {
  kNone,      // one reading only: judge at the next sample
  kComputes,  // the fiber computes: it holds its worker
  kLittle,    // little CPU: blocked in the kernel, or runnable and waiting for a core
};

// JudgeCpu: the thread used `used_ns` of CPU over the `wall_ns` since the run's first reading.
// Computing is at least half the CPU, or (on a machine whose other threads take most of it) a
// threshold's worth of CPU however long that took; judged by the share alone, a fiber that
// computes for ever on an oversubscribed machine would never be reported. No wall time between
// the readings is no evidence: the monitor reads the clock first at the sample that finds a run
// held, and a sample that comes late (the monitor's thread descheduled, or a threshold shorter
// than the sampling period) finds the run past the threshold at that same sample; reporting it
// then would report a thread that merely waits for a core.
constexpr CpuEvidence JudgeCpu(std::int64_t used_ns, std::int64_t wall_ns,
                               std::int64_t threshold_ns) {
  if (wall_ns <= 0) return CpuEvidence::kNone;
  if (2 * used_ns >= wall_ns || used_ns >= threshold_ns) return CpuEvidence::kComputes;
  return CpuEvidence::kLittle;
}

}  // namespace weft::scheduler_internal

#endif  // WEFT_SCHEDULER_INTERNAL_HOLD_H_
