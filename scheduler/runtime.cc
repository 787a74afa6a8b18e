// scheduler/runtime.cc: a Runtime's construction (its workers, each with a reactor made on its own
// thread) and its shutdown (interrupt every wait, wait for every fiber, stop the workers, keep
// the Fiber objects for later runtimes); the thread-local and process-wide state the other
// files share.
//
// The rest of the runtime: worker_loop.cc (the loop), timers.cc, park.cc, spawn.cc,
// fiber_io.cc, blocking.cc, fiber_local.cc, introspect.cc, this_fiber.cc; the shared types in
// internal/fiber.h, internal/worker.h and internal/runtime_impl.h.

#include "weft/scheduler/runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "internal/runtime_impl.h"
#include "weft/base/asymmetric_fence.h"
#include "weft/base/futex.h"

namespace weft {
namespace scheduler_internal {

thread_local constinit Worker* t_worker = nullptr;
thread_local constinit Fiber* t_region_fiber = nullptr;
std::atomic<std::uint64_t> g_next_fiber_id{1};
std::atomic<bool> g_fail_queue_growth{false};

}  // namespace scheduler_internal

using namespace scheduler_internal;

namespace {

// LightParkWanted: whether this runtime's parks use the asymmetric Dekker pair (the file
// comment). x86-64 only: there the symmetric pair's seq_cst store is a locked instruction, while
// aarch64's store-release and load-acquire pair is sequentially consistent already, at no
// extra cost. WEFT_PARK_FENCE=symmetric turns it off (the tests' epoll configuration does, so
// both pairs are tested on x86-64).
bool LightParkWanted() {
#if defined(__x86_64__)
  if (const char* env = std::getenv("WEFT_PARK_FENCE")) {
    if (std::strcmp(env, "symmetric") == 0) return false;
    if (std::strcmp(env, "asymmetric") != 0) {
      std::fprintf(stderr, "weft: ignoring WEFT_PARK_FENCE=%s (want asymmetric or symmetric)\n",
                   env);
    }
  }
  return base_internal::HeavyFenceAvailable();
#else
  return false;
#endif
}

}  // namespace

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.simulation) {
    // One thread, nothing that runs on real time beside it: no monitor (and so no spares), no
    // console, no latency measurement (its clock reads would be virtual anyway).
    options.workers = 1;
    options.stuck_threshold = std::chrono::microseconds::zero();
    options.console = false;
    options.measure_latency = false;
    std::uint64_t seed = options.simulation->seed;
    if (const char* env = std::getenv("WEFT_SIM_SEED"); env != nullptr && *env != '\0') {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(env, &end, 0);
      if (*end == '\0') {
        seed = v;
      } else {
        std::fprintf(stderr, "weft: WEFT_SIM_SEED=%s is not a number; seed %" PRIu64 " runs\n", env,
                     seed);
      }
    }
    impl_->sim = std::make_unique<SimState>(*options.simulation, seed);
  }
  unsigned n = options.workers != 0 ? options.workers : std::thread::hardware_concurrency();
  if (n == 0) n = 1;
  impl_->options = options;
  impl_->self = this;
  impl_->light_park = LightParkWanted();
  impl_->measure_latency = options.measure_latency;
  impl_->cold_spawn = options.measure_latency || impl_->sim != nullptr;
  impl_->blocking = std::make_unique<BlockingPool>(options.max_blocking_threads);
  impl_->fork_join = std::make_unique<ForkJoinPool>(
      ForkJoinPoolOptions{.workers = n,
                          .deque_capacity = std::max<std::size_t>(16, options.fork_join_depth),
                          .host_wake = [](void* impl) { static_cast<Impl*>(impl)->WakeOne(); },
                          .host_arg = impl_.get()});
  impl_->nworkers = n;
  impl_->slots_started.store(n, std::memory_order_relaxed);  // before any thread starts
  // Spares only serve where a monitor sees workers stuck.
  const unsigned spares =
      options.stuck_threshold > std::chrono::microseconds::zero()
          ? std::min(options.spare_workers.value_or(n), RuntimeOptions::kMaxSpareWorkers)
          : 0;
  for (unsigned i = 0; i < n + spares; ++i) {
    auto w = std::make_unique<Worker>();
    w->rt = impl_.get();
    w->index = i;
    w->spare = i >= n;
    w->rng = 0x9E3779B97F4A7C15ull * (i + 1);
    // A simulation's fairness pass is always due: DirectNext declines every switch, so that
    // every choice of the next fiber is SimNext's.
    if (impl_->sim != nullptr) w->fair_tick = ~std::uint64_t{0} - 2 * Impl::kFairnessInterval;
    if (options.measure_latency) {
      w->measure_latency = true;
      w->sched_latency = std::make_unique<LogHistogram>();
    }
    impl_->workers.push_back(std::move(w));
  }
  if (options.stuck_threshold > std::chrono::microseconds::zero()) {
    try {
      impl_->monitor = std::make_unique<Monitor>(impl_.get());
    } catch (const std::system_error&) {
      // Out of threads: the runtime serves all the same, unwatched.
      std::fprintf(stderr,
                   "weft: the runtime's monitor thread could not start; stuck fibers "
                   "go unreported\n");
    }
  }
  // Each worker creates its reactor on its own thread (io_uring's single-issuer rings require
  // it) before it runs any fiber; the constructor waits, so Wake() always finds it settled.
  std::atomic<unsigned> ready{0};
  unsigned started = 0;
  // Fault injection for tests: WEFT_TEST_FAIL_WORKER_THREAD=k makes worker k's thread fail to
  // start, as std::thread does when the system is out of threads or memory.
  // WEFT_TEST_QUEUE_OOM: the scheduler's queues act as if out of memory once past their first
  // 64 fibers (tests of the chain that takes over then; see FiberFifo).
  g_fail_queue_growth.store(std::getenv("WEFT_TEST_QUEUE_OOM") != nullptr,
                            std::memory_order_relaxed);
  const char* fail_env = std::getenv("WEFT_TEST_FAIL_WORKER_THREAD");
  const long fail_at = fail_env != nullptr ? std::strtol(fail_env, nullptr, 10) : -1;
  try {
    for (unsigned i = 0; i < n; ++i) {
      if (static_cast<long>(started) == fail_at) {
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                                "weft: a worker thread could not start (injected)");
      }
      impl_->StartWorkerThread(*impl_->workers[i], &ready);
      ++started;
    }
  } catch (const std::system_error&) {
    // Leave nothing running: the workers that did start settle (their reactors), see stop with
    // no fiber alive, and exit; then the exception goes to the caller. (Without this, the
    // joinable threads' destructors would call std::terminate.)
    for (unsigned k; (k = ready.load(std::memory_order_acquire)) != started;) {
      base_internal::FutexWait(ready, k, std::chrono::milliseconds(10));
    }
    impl_->stop.store(true, std::memory_order_release);
    impl_->WakeAll();
    for (auto& w : impl_->workers) {
      if (w->thread.joinable()) w->thread.join();
    }
    impl_->monitor.reset();  // it never started: no spare ran
    throw;
  }
  for (unsigned k; (k = ready.load(std::memory_order_acquire)) != n;) {
    base_internal::FutexWait(ready, k, std::chrono::milliseconds(10));
  }
  if (impl_->monitor != nullptr) impl_->monitor->Start();  // the workers are settled
  const char* console_env = std::getenv("WEFT_CONSOLE");
  if (options.console || (console_env != nullptr && std::strcmp(console_env, "1") == 0)) {
    // Off on an error (said on stderr): the runtime serves all the same.
    if (Result<std::unique_ptr<Console>> c = Console::Start(impl_.get(), options.console_dir);
        c.ok()) {
      impl_->console = std::move(c).value();
    }
  }
}

Runtime::~Runtime() {
  // Interrupt: every wait from now on fails with operation_canceled (FiberWaiter::interrupted),
  // and fibers parked now are woken to see it. Repeated until every fiber has finished: a fiber
  // may park again after an interruption (or be spawned by one that unwinds), and the live count
  // may reach zero and rise again, which a one-shot event cannot express.
  impl_->console.reset();  // it reads the runtime; nothing to show from here on
  impl_->shutting_down.store(true, std::memory_order_release);
  while (impl_->credits.load(std::memory_order_acquire) != 0) {
    std::vector<Fiber*> parked;
    {
      std::lock_guard<std::mutex> lock(impl_->fibers_mu);
      impl_->ForEachFiberLocked([&](Fiber* f) {
        // relaxed (both): a hint; a wait that starts later checks interrupted() itself.
        if (f->state.load(std::memory_order_relaxed) == kParked ||
            f->region_waiting.load(std::memory_order_relaxed)) {
          parked.push_back(f);
        }
      });
    }
    for (Fiber* f : parked) f->waiter.notify();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->blocking.reset();  // idle by now: no fiber waits on it
  {
    // No spare starts from now on; every one that did is joined below.
    std::lock_guard<std::mutex> lock(impl_->spare_mu);
    impl_->spares_closed = true;
  }
  impl_->stop.store(true, std::memory_order_release);
  impl_->WakeAll();
  for (auto& w : impl_->workers) {
    if (w->thread.joinable()) w->thread.join();
  }
  impl_->monitor.reset();  // it watched the fibers that held shutdown up too
  // Every fiber has finished: their blocks go to the process's pool (see RetiredBlocks).
  std::vector<std::unique_ptr<RecordBlock>> blocks;
  {
    std::lock_guard<std::mutex> lock(impl_->fibers_mu);
    blocks.swap(impl_->all_fibers);
  }
  RetiredBlocks& retired = RetiredBlocks::Get();
  {
    std::lock_guard<std::mutex> lock(retired.mu);
    for (auto& b : blocks) {
      try {
        retired.blocks[static_cast<int>(b->kind())].push_back(std::move(b));
      } catch (const std::bad_alloc&) {
        (void)b.release();  // no memory to list it: it stays allocated all the same
      }
    }
  }
  // Threads outside may still be on their way out of impl_: one in block_on whose fiber has
  // finished (~BlockOnScope), one returning from waking a fiber (ScheduleElsewhere). Wait for
  // them before impl_ goes. acquire (both): pairs with their release decrements.
  while (impl_->block_on_waiters.load(std::memory_order_acquire) != 0 ||
         impl_->elsewhere_in_flight.load(std::memory_order_acquire) != 0) {
    std::this_thread::yield();
  }
}

unsigned Runtime::workers() const { return impl_->nworkers; }

std::string Runtime::console_path() const {
  return impl_->console != nullptr ? impl_->console->path() : std::string();
}

void Runtime::Impl::StartWorkerThread(Worker& w, std::atomic<unsigned>* ready) {
  w.thread = std::thread([this, &w, ready] {
    w.cpu_clock.SetToCallingThread();
    // The reactor is made on its own thread (io_uring's single-issuer rings require it), and
    // published under the idle lock, which every Wake() holds.
    // A simulation has none: its fibers' I/O fails with ENOTSUP, and no real fd is touched.
    Result<std::unique_ptr<Reactor>> r =
        sim != nullptr ? Result<std::unique_ptr<Reactor>>(std::errc::not_supported)
                       : Reactor::create(options.reactor);
    {
      std::lock_guard<std::mutex> lock(idle.lock());
      if (r.ok()) {
        w.reactor = std::move(r).value();
      } else {
        w.reactor_error = r.error();
      }
    }
    w.ready.store(true, std::memory_order_release);  // the fields above, for the monitor
    if (ready != nullptr) {
      ready->fetch_add(1, std::memory_order_release);
      base_internal::FutexWake(*ready, 1);
    }
    // A worker without a reactor serves (its fibers' I/O reports the error); a spare does not:
    // SetSpareActive sees it and joins this thread.
    if (w.spare && w.reactor == nullptr) return;
    WorkerLoop(w);
  });
}

bool Runtime::Impl::SetSpareActive(Worker& w, bool active) {
  if (active) {
    // Once closed, the destructor joins the threads: thread is no longer read here.
    std::lock_guard<std::mutex> lock(spare_mu);
    if (spares_closed) return false;
    if (!w.thread.joinable()) {
      try {
        StartWorkerThread(w, nullptr);
      } catch (const std::system_error&) {
        return false;
      }
      // acquire: its fields (the reactor) are set. Short: a thread's start and a reactor's.
      while (!w.ready.load(std::memory_order_acquire)) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (w.reactor == nullptr) {  // its thread returned without serving
        w.thread.join();
        w.ready.store(false, std::memory_order_relaxed);
        return false;
      }
      // relaxed: a hint for thieves (see slots_started).
      if (slots_started.load(std::memory_order_relaxed) <= w.index) {
        slots_started.store(w.index + 1, std::memory_order_relaxed);
      }
    }
  }
  // relaxed: the wake-up below orders it (the wake word's release, or the worker's next pass).
  w.active.store(active, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(idle.lock());
  if (!w.exited) w.Wake();
  return true;
}

namespace scheduler_internal {
ForkJoinPool& ForkJoinPoolOf(Runtime& rt) { return *rt.impl_->fork_join; }
BlockOnScope::BlockOnScope(Runtime& rt) : rt_(rt) {
  rt_.impl_->block_on_waiters.fetch_add(1, std::memory_order_relaxed);  // a hint
}
BlockOnScope::~BlockOnScope() {
  // release: its last touch of impl_; ~Runtime waits for the count to reach 0 (acquire).
  rt_.impl_->block_on_waiters.fetch_sub(1, std::memory_order_release);
}
ForkJoinScope::ForkJoinScope(Runtime& rt) : worker_(WorkerOf(rt.impl_.get())) {
  Worker* w = static_cast<Worker*>(worker_);
  // Nested (a root that calls fork_join again): the outermost scope sets and clears the flag.
  if (w != nullptr && w->in_fork_join) worker_ = nullptr;
  if (worker_ != nullptr) w->in_fork_join = true;
}
ForkJoinScope::~ForkJoinScope() {
  if (worker_ != nullptr) static_cast<Worker*>(worker_)->in_fork_join = false;
}
int ForkJoinWorkerForSpare(const Runtime& rt) {
  Worker* w = WorkerOf(rt.impl_.get());
  if (w == nullptr || !w->spare) return -1;
  for (unsigned i = 0; i < rt.impl_->nworkers; ++i) {
    if (!rt.impl_->workers[i]->held) return static_cast<int>(i);
  }
  return 0;
}
bool InFiberOf(const Runtime& rt) {
  Worker* w = WorkerOf(rt.impl_.get());
  return w != nullptr && w->current != nullptr;
}
}  // namespace scheduler_internal

Runtime* Runtime::current() {
  Fiber* f = CurrentFiber();
  return f != nullptr ? f->rt->self : nullptr;
}

}  // namespace weft
