// scheduler/simulation.cc: a simulated runtime's loop (RuntimeOptions::simulation). One worker
// thread runs every fiber. At each switch it gathers every runnable fiber (its run_next slot,
// pinned fibers, mailbox, queue, yield ring, the inject queue and the overflow list) into one
// list and runs one chosen by the seeded PRNG; fibers never switch to each other directly (the
// runtime sets the fairness tick so that DirectNext always declines). When none can run, the
// virtual clock jumps to the worker's next timer; with no timer either, only another thread can
// bring work (a spawn, a call_blocking's end), and the thread waits for it for real.

#include "internal/simulation.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "internal/runtime_impl.h"
#include "weft/base/clock.h"
#include "weft/base/futex.h"
#include "weft/scheduler/io.h"
#include "weft/scheduler/simulation.h"

namespace weft {
namespace scheduler_internal {

SimState::SimState(const SimulationOptions& options, std::uint64_t seed_in_use)
    : seed(seed_in_use),
      step_ns(std::max<std::int64_t>(0, options.step.count())),
      keep_trace(options.trace),
      rng(seed_in_use) {}

Result<void> SimState::Arm(std::weak_ptr<sync_internal::CancelState> state,
                           SyncClock::time_point at, bool force) {
  try {
    Fiber* armer = CurrentFiber();
    deadlines.emplace(at.time_since_epoch().count(),
                      Deadline{std::move(state), force, armer != nullptr ? armer->sim_host : 0});
  } catch (const std::bad_alloc&) {
    return std::errc::not_enough_memory;
  }
  return {};
}

void SimState::Record(std::uint64_t fiber, std::size_t of) {
  const std::int64_t now = now_ns.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  // FNV-1a over the three words of the decision.
  for (std::uint64_t word :
       {fiber, static_cast<std::uint64_t>(of), static_cast<std::uint64_t>(now - kEpoch)}) {
    hash_ = (hash_ ^ word) * 0x100000001b3ull;
  }
  if (keep_trace) {
    char line[96];
    std::snprintf(line, sizeof line, "%" PRIu64 " t=%" PRId64 " run=%" PRIu64 " of=%zu\n", steps_,
                  now - kEpoch, fiber, of);
    trace_ += line;
  }
  ++steps_;
}

void SimState::RecordEvent(const char* what, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  const std::int64_t now = now_ns.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  for (const char* p = what; *p != '\0'; ++p) {
    hash_ = (hash_ ^ static_cast<unsigned char>(*p)) * 0x100000001b3ull;
  }
  for (std::uint64_t word : {a, b, c, static_cast<std::uint64_t>(now - kEpoch)}) {
    hash_ = (hash_ ^ word) * 0x100000001b3ull;
  }
  if (keep_trace) {
    char line[128];
    std::snprintf(line, sizeof line,
                  "%" PRIu64 " t=%" PRId64 " %s %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", steps_,
                  now - kEpoch, what, a, b, c);
    trace_ += line;
  }
}

SimulationReport SimState::Report() const {
  SimulationReport r;
  r.seed = seed;
  r.virtual_elapsed = std::chrono::nanoseconds(now_ns.load(std::memory_order_relaxed) - kEpoch);
  std::lock_guard<std::mutex> lock(mu_);
  r.steps = steps_;
  r.trace_hash = hash_;
  r.trace = trace_;
  return r;
}

namespace {
// TheSim: the simulation the calling thread runs, if any.
SimState* TheSim() {
  if (!InSimulation()) return nullptr;
  Worker* w = t_worker;
  return w != nullptr ? w->rt->sim.get() : nullptr;
}
}  // namespace

std::shared_ptr<void>* SimNetworkSlot() {
  SimState* s = TheSim();
  return s != nullptr ? &s->network : nullptr;
}

std::uint64_t SimRandom() {
  SimState* s = TheSim();
  return s != nullptr ? s->Next() : 0;
}

void SimRecordEvent(const char* what, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  if (SimState* s = TheSim()) s->RecordEvent(what, a, b, c);
}

std::uint32_t SimHost() {
  Fiber* f = TheSim() != nullptr ? CurrentFiber() : nullptr;
  return f != nullptr ? f->sim_host : 0;
}

void SetSimHost(std::uint32_t host) {
  Fiber* f = TheSim() != nullptr ? CurrentFiber() : nullptr;
  if (f != nullptr) f->sim_host = host;
}

}  // namespace scheduler_internal

using namespace scheduler_internal;

Runtime::Impl::Fiber* Runtime::Impl::SimNext(Worker& w) {
  SimState& s = *sim;
  if (w.has_mail.load(std::memory_order_relaxed)) TakeMail(w);
  PopDueTimers(w);
  // Cancellation deadlines that have come: each cancel on a fiber of its own (its callbacks may
  // park). One that cannot be spawned now (no memory) stays for the next pass.
  const std::int64_t now = s.now_ns.load(std::memory_order_relaxed);
  while (!s.deadlines.empty() && s.deadlines.begin()->first <= now) {
    auto it = s.deadlines.begin();
    const SyncClock::time_point at{SyncClock::duration(it->first)};
    try {
      self->spawn(
              [state = it->second.state, at, force = it->second.force, host = it->second.host] {
                SetSimHost(host);
                if (std::shared_ptr<sync_internal::CancelState> cancel = state.lock()) {
                  sync_internal::FireDeadline(cancel.get(), at, force);
                }
              },
              {.name = "cancel deadline"})
          .detach();
    } catch (const std::exception&) {
      break;
    }
    s.deadlines.erase(it);
  }
  // Room: the list has room for one more without allocating (push_back below never throws),
  // or could be given it. Out of memory, gathering stops: the fibers not taken stay queued.
  auto room = [&s] {
    if (s.ready.size() < s.ready.capacity()) return true;
    try {
      s.ready.reserve(std::max<std::size_t>(64, s.ready.capacity() * 2));
    } catch (const std::bad_alloc&) {
      return false;
    }
    return true;
  };
  bool full = false;
  while (!(full = !room())) {
    Fiber* f = NextLocal(w);
    if (f == nullptr) break;
    s.ready.push_back(f);
  }
  while (!full && !(full = !room())) {
    std::optional<Fiber*> f = inject.try_pop();
    if (!f) break;
    s.ready.push_back(*f);
  }
  while (!full && !(full = !room())) {
    Fiber* f = TakeOverflow(w, /*batch=*/false);
    if (f == nullptr) break;
    s.ready.push_back(f);
  }
  const std::size_t n = s.ready.size();
  if (n == 0) {
    // No memory for even one entry: run the next local fiber unchosen (the run stops being
    // deterministic, but no fiber is lost or left waiting).
    if (full) return NextLocal(w);
    return nullptr;
  }
  const std::size_t pick = static_cast<std::size_t>(s.Next() % n);
  Fiber* f = s.ready[pick];
  s.ready[pick] = s.ready.back();
  s.ready.pop_back();
  s.Record(static_cast<std::uint64_t>(f->runnable_at), n);
  s.now_ns.store(s.now_ns.load(std::memory_order_relaxed) + s.step_ns, std::memory_order_relaxed);
  return f;
}

void Runtime::Impl::SimWait(Worker& w) {
  // As Sleep, without a reactor or timers: listed, then a last look, then the futex (every way
  // work arrives from another thread wakes a listed worker).
  const std::uint32_t word = idle.BeginSleep(w);
  if (!WorkVisible(w) && !stop.load(std::memory_order_acquire)) {
    base_internal::FutexWait(w.wake_word, word, std::chrono::milliseconds(100));
  }
  idle.EndSleep(w);
}

std::optional<SimulationReport> Runtime::simulation() const {
  if (impl_->sim == nullptr) return std::nullopt;
  return impl_->sim->Report();
}

}  // namespace weft

namespace weft {

SimExploreResult sim_explore(std::uint64_t first_seed, std::size_t seeds,
                             const std::function<bool(Runtime&)>& body, RuntimeOptions options) {
  SimExploreResult result;
  const char* env = std::getenv("WEFT_SIM_SEED");
  const bool replay = env != nullptr && *env != '\0';
  for (std::size_t i = 0; i < (replay ? 1 : seeds); ++i) {
    SimulationOptions sim = options.simulation.value_or(SimulationOptions{});
    sim.seed = first_seed + i;
    RuntimeOptions o = options;
    o.simulation = sim;
    bool ok = false;
    std::uint64_t seed = sim.seed;
    std::uint64_t hash = 0;
    {
      Runtime rt(o);
      try {
        ok = rt.block_on([&] { return body(rt); });
      } catch (const std::exception& e) {
        std::fprintf(stderr, "weft: the simulated run threw: %s\n", e.what());
      } catch (...) {
        std::fputs("weft: the simulated run threw\n", stderr);
      }
      const SimulationReport report = *rt.simulation();
      seed = report.seed;
      hash = report.trace_hash;
    }
    ++result.runs;
    result.trace_hashes.push_back(hash);
    if (!ok) {
      std::fprintf(stderr, "weft: seed %" PRIu64 " fails; replay with WEFT_SIM_SEED=%" PRIu64 "\n",
                   seed, seed);
      result.failing.push_back(seed);
    }
  }
  return result;
}

}  // namespace weft
