// scheduler/internal/simulation.h: the state of a simulated runtime (RuntimeOptions::simulation):
// its virtual clock, its seeded choice of the next fiber, and the trace of its decisions. The
// loop that uses them is Runtime::Impl::SimLoop (scheduler/simulation.cc); docs/simulation.md
// has the design.

#ifndef WEFT_SCHEDULER_INTERNAL_SIMULATION_H_
#define WEFT_SCHEDULER_INTERNAL_SIMULATION_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "weft/base/result.h"
#include "weft/scheduler/runtime.h"
#include "weft/sync/cancellation.h"

namespace weft {
namespace scheduler_internal {

struct Fiber;

// SimState is also its thread's DeadlineService: a CancellationSource's cancel_at deadline
// fires at its virtual time (on a fiber of its own, since a cancel's callbacks may park).
struct SimState final : sync_internal::DeadlineService {
  SimState(const SimulationOptions& options, std::uint64_t seed_in_use);
  ~SimState() = default;

  // Set at construction.
  const std::uint64_t seed;
  const std::int64_t step_ns;
  const bool keep_trace;
  // The virtual clock, on steady_clock's scale (SyncClock::now() on the simulation's thread
  // reads it). It starts at the same value on every run and machine (kEpoch), so that times a
  // program prints or hashes replay too. Written by the simulation's thread only; atomic for the
  // snapshot another thread may take (relaxed: a figure).
  static constexpr std::int64_t kEpoch = std::int64_t{3600} * 1000 * 1000 * 1000;  // 1 h
  std::atomic<std::int64_t> now_ns{kEpoch};
  // Spawn numbers (1, 2, ...): the fiber's name in the trace, since ids and addresses differ
  // from run to run. A spawn from another thread while the simulation runs takes its number
  // when it gets there (such spawns are not deterministic).
  std::atomic<std::uint64_t> spawned{0};

  // The simulation's thread only.
  std::vector<Fiber*> ready;  // every runnable fiber, in the order it became so
  std::uint64_t rng;          // splitmix64's state
  // Next: the next pseudo-random number (splitmix64: Steele, Lea and Flood, "Fast splittable
  // pseudorandom number generators", OOPSLA 2014).
  std::uint64_t Next() {
    std::uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // The armed deadlines, by virtual time (a multimap keeps equal times in the order armed).
  struct Deadline {
    std::weak_ptr<sync_internal::CancelState> state;
    bool force;
    std::uint32_t host;  // the simulated host of the fiber that armed it: its callbacks run there
  };
  std::multimap<std::int64_t, Deadline> deadlines;
  Result<void> Arm(std::weak_ptr<sync_internal::CancelState> state, SyncClock::time_point at,
                   bool force) override;

  // Record: a decision: the fiber numbered `fiber` runs, chosen among `of` runnable ones, at the
  // current virtual time.
  void Record(std::uint64_t fiber, std::size_t of);
  // RecordEvent: an event of the simulated network (api/sim.cc), hashed into the trace.
  void RecordEvent(const char* what, std::uint64_t a, std::uint64_t b, std::uint64_t c);
  // The simulated network (api/sim.cc), made on its first use; destroyed with the runtime,
  // after every fiber has ended.
  std::shared_ptr<void> network;
  SimulationReport Report() const;

 private:
  mutable std::mutex mu_;  // the report's fields: written by the simulation, read by Report
  std::uint64_t steps_ = 0;
  std::uint64_t hash_ = 0xcbf29ce484222325ull;  // FNV-1a's offset basis
  std::string trace_;
};

}  // namespace scheduler_internal
}  // namespace weft

#endif  // WEFT_SCHEDULER_INTERNAL_SIMULATION_H_
