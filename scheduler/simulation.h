// scheduler/simulation.h: running a test body under simulation across many seeds
// (docs/simulation.md). A simulated runtime itself is a Runtime made with
// RuntimeOptions::simulation.
//
// Defines: weft::SimExploreResult, weft::sim_explore.

#ifndef WEFT_SCHEDULER_SIMULATION_H_
#define WEFT_SCHEDULER_SIMULATION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "weft/scheduler/runtime.h"

namespace weft {

struct SimExploreResult {
  std::size_t runs = 0;                // seeds tried
  std::vector<std::uint64_t> failing;  // the seeds whose run failed, in the order tried
  // trace_hashes: each run's SimulationReport::trace_hash, in the order tried.
  std::vector<std::uint64_t> trace_hashes;
};

// sim_explore: for each seed in [first_seed, first_seed + seeds), makes a simulated runtime
// (`options`, with simulation.seed set to the seed) and runs body(runtime) on it with block_on;
// a run fails if body returns false or throws. Each failing seed is reported on stderr as
// "weft: seed N fails; replay with WEFT_SIM_SEED=N". With WEFT_SIM_SEED set in the environment,
// only that seed runs. Call it from outside any runtime (a test's own thread).
SimExploreResult sim_explore(std::uint64_t first_seed, std::size_t seeds,
                             const std::function<bool(Runtime&)>& body,
                             RuntimeOptions options = {});

}  // namespace weft

#endif  // WEFT_SCHEDULER_SIMULATION_H_
