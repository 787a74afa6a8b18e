// model/model.cc: the model checker (see model.h and docs/model.md).
//
// One schedule is one run of the body in which every choice (which thread runs its next
// scheduling point; which store a load reads; whether a timed wait times out) comes from a path:
// a list of (chosen, allowed) pairs. The exhaustive search is stateless and depth-first: run the
// path's prefix, take option 0 at every new choice, then advance the deepest choice that has an
// untried option and run again (Godefroid, "Model Checking for Programming Languages using
// VeriSoft", POPL 1997), with preemption bounding (Musuvathi and Qadeer, PLDI 2007).
//
// Memory: vector clocks give happens-before. Each atomic location keeps its stores in
// modification order with the clock a reader synchronises with (the storing thread's clock for a
// release store, its last release fence's for a relaxed one, joined with the store read by a
// read-modify-write, as C++20 release sequences). A load may read any store from the newest one
// that happens-before it, or that this thread has already seen (coherence), to the newest. All
// seq_cst operations and fences form one total order, the execution order, and each
// synchronises with the ones before it: stronger than C++, so it finds no false failures but
// misses bugs that need seq_cst to be weaker than that.

#include "weft/model/model.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/base/internal/model_hooks.h"
#include "weft/context/context.h"
#include "weft/sync/waiter.h"

namespace weft::model {
namespace {

using base_internal::ModelHooks;
using base_internal::ModelOp;
using VClock = std::array<std::uint32_t, kMaxThreads>;

void JoinClock(VClock& into, const VClock& from) {
  for (int i = 0; i < kMaxThreads; ++i) into[i] = std::max(into[i], from[i]);
}

bool IsAcquire(std::memory_order o) {
  return o == std::memory_order_acquire || o == std::memory_order_acq_rel ||
         o == std::memory_order_seq_cst || o == std::memory_order_consume;
}
bool IsRelease(std::memory_order o) {
  return o == std::memory_order_release || o == std::memory_order_acq_rel ||
         o == std::memory_order_seq_cst;
}
const char* OrderName(std::memory_order o) {
  switch (o) {
    case std::memory_order_relaxed:
      return "relaxed";
    case std::memory_order_consume:
      return "consume";
    case std::memory_order_acquire:
      return "acquire";
    case std::memory_order_release:
      return "release";
    case std::memory_order_acq_rel:
      return "acq_rel";
    case std::memory_order_seq_cst:
      return "seq_cst";
  }
  return "?";
}

// ---- The record of one schedule ----------------------------------------------------------------

enum class Event : std::uint8_t {
  kLoad,
  kStore,
  kRmw,
  kCasFail,
  kFence,
  kLightFence,
  kHeavyFence,
  kSpin,
  kPark,
  kWake,     // park returned with a permit
  kTimeout,  // park returned without one
  kNotify,
  kSpawn,
  kJoin,
  kFinish,
  kFail,
};

struct Step {
  int thread;
  Event event;
  std::memory_order order = std::memory_order_relaxed;
  bool stale = false;  // a load that read an older store than the newest
  const void* addr = nullptr;
  std::uint64_t a = 0, b = 0;  // values: read / written, or a thread id
  std::source_location site;
};

// ---- Locations ---------------------------------------------------------------------------------

struct StoreRec {
  std::uint64_t value;
  int thread;           // -1: the value the location had when the schedule first touched it
  std::uint32_t epoch;  // the storing thread's clock entry at the store
  VClock sync;          // what a reader that synchronises with this store learns
};

// Location: one atomic's stores in modification order. Only the last kKeep are kept (a load
// cannot read further back than that).
struct Location {
  static constexpr std::size_t kKeep = 8;
  std::vector<StoreRec> stores;
  std::uint64_t first = 0;                        // modification-order index of stores[0]
  std::array<std::uint64_t, kMaxThreads> seen{};  // per thread: newest index read or written
  std::uint64_t last() const { return first + stores.size() - 1; }
  const StoreRec& at(std::uint64_t index) const { return stores[index - first]; }
  void Append(const StoreRec& s) {
    if (stores.size() == kKeep) {
      stores.erase(stores.begin());
      ++first;
    }
    stores.push_back(s);
  }
};

// CellState: the last write to a Cell and the reads since, for the race check (as FastTrack,
// Flanagan and Freund, PLDI 2009, with a full read clock).
struct CellState {
  int writer = -1;
  std::uint32_t write_epoch = 0;
  std::source_location write_site;
  VClock reads{};
  std::array<std::source_location, kMaxThreads> read_sites{};
};

// ---- Threads -----------------------------------------------------------------------------------

enum class State : std::uint8_t { kRunnable, kParked, kJoining, kSpinning, kFinished };

class Execution;

// ModelWaiter: a model thread's Waiter: wait() parks the model thread until a notify() (a permit,
// as every Waiter), or until the checker chooses to time it out.
class ModelWaiter final : public Waiter {
 public:
  ModelWaiter() : Waiter(/*spins_before_park=*/0) {}
  void Bind(Execution* exec, int id, std::uint64_t identity) {
    exec_ = exec;
    id_ = id;
    set_identity(identity);
  }
  bool wait(std::optional<SyncClock::time_point> deadline) override;
  void notify() override;
  sync_internal::WaitNode& own_node() override { return node_; }

 private:
  Execution* exec_ = nullptr;
  int id_ = 0;
  sync_internal::WaitNode node_;
};

struct ModelThread {
  int id = 0;
  State state = State::kFinished;
  Context context = nullptr;
  std::unique_ptr<std::byte[]> stack;
  std::function<void()> fn;
  VClock clock{};
  VClock acquire_pending{};  // what relaxed loads read, for a later acquire fence
  VClock release_fence{};    // the clock at the last release fence, carried by relaxed stores
  bool permit = false;
  VClock permit_clock{};
  bool timed = false;  // parked with a deadline
  int joining = -1;
  std::uint64_t spin_writes = 0;  // writes_ when it started spinning
  bool stale_since_spin = false;  // read an older store since it last spun
  bool fresh = false;             // spun since its last store: its loads read the newest
  // The scheduling point it waits at (for the trace).
  ModelOp pending_op = ModelOp::kLoad;
  std::source_location pending_site;
  ModelWaiter waiter;
};

// ---- Choices -----------------------------------------------------------------------------------

struct Choice {
  std::uint16_t chosen;
  std::uint16_t allowed;
};

std::string EncodePath(const std::vector<Choice>& path) {
  // One base-36 digit per choice; runs of 4+ zeros as "-<count>.".
  static const char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::string out;
  for (std::size_t i = 0; i < path.size();) {
    std::size_t j = i;
    while (j < path.size() && path[j].chosen == 0) ++j;
    if (j - i >= 4) {
      out += "-" + std::to_string(j - i) + ".";
      i = j;
      continue;
    }
    out += kDigits[path[i].chosen];
    ++i;
  }
  return out;
}

std::optional<std::vector<std::uint16_t>> DecodePath(const std::string& id) {
  std::vector<std::uint16_t> out;
  for (std::size_t i = 0; i < id.size(); ++i) {
    char c = id[i];
    if (c == '-') {
      std::size_t dot = id.find('.', i);
      if (dot == std::string::npos) return std::nullopt;
      int n = std::atoi(id.substr(i + 1, dot - i - 1).c_str());
      out.insert(out.end(), n, 0);
      i = dot;
    } else if (c >= '0' && c <= '9') {
      out.push_back(static_cast<std::uint16_t>(c - '0'));
    } else if (c >= 'a' && c <= 'z') {
      out.push_back(static_cast<std::uint16_t>(c - 'a' + 10));
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// A schedule that fails leaves its threads where they stand: the hub discards their contexts,
// and what their stacks held is leaked (nothing is unwound).
thread_local Execution* t_execution = nullptr;

// ---- Execution: one schedule
// ---------------------------------------------------------------------

class Execution final : public ModelHooks {
 public:
  // The path to follow: `prefix` (replayed), then new choices; `rng` set: random choices.
  Execution(const Options& options, std::vector<ModelThread>& threads, std::vector<Choice>& path,
            std::mt19937_64* rng, std::uint64_t serial)
      : options_(options), threads_(threads), path_(path), rng_(rng), serial_(serial) {}

  // Run: the whole schedule. Returns false on failure (failure_ says what).
  bool Run(const std::function<void()>& body) {
    hub_ = current_context();
    Execution* outer = t_execution;
    t_execution = this;
    ModelHooks* outer_hooks = base_internal::ActiveModel();
    base_internal::SetActiveModel(this);
    set_waiter_provider(&Provide, this);
    Spawn(body, -1);
    current_ = -1;
    for (;;) {
      int next = PickNext();
      if (next < 0) break;
      ModelThread& t = threads_[next];
      if (t.state == State::kParked) {  // chosen while parked with a deadline: it times out
        t.state = State::kRunnable;
        now_ns_ += 1'000'000'000;  // a timeout takes 1 s of the model clock
      } else if (t.state == State::kSpinning) {
        t.state = State::kRunnable;
        t.stale_since_spin = false;
        t.fresh = true;  // until its next store, its loads read the newest values
      }
      current_ = next;
      jump_context(t.context, &t);
      if (!failure_.empty()) break;
    }
    set_waiter_provider(nullptr, nullptr);
    base_internal::SetActiveModel(outer_hooks);
    t_execution = outer;
    for (ModelThread& t : threads_) {
      if (t.context != nullptr) discard_context(t.context);
      t.context = nullptr;
      t.fn = nullptr;
    }
    return failure_.empty();
  }

  const std::string& failure() const { return failure_; }
  const std::vector<Step>& steps() const { return steps_; }
  std::size_t position() const { return position_; }

  // ---- ModelHooks (called on model threads) ----

  void Schedule(const void* addr, ModelOp op, std::memory_order order,
                const std::source_location& site) override {
    ModelThread& t = Current();
    t.pending_op = op;
    t.pending_site = site;
    (void)addr;
    Point();
  }

  std::uint64_t Load(const void* addr, std::uint64_t latest, std::memory_order order) override {
    ModelThread& t = Current();
    Location& loc = Touch(addr, latest);
    std::uint64_t index = loc.last();
    bool stale = false;
    // A failed compare-exchange reads the newest store, as a read-modify-write would have.
    if (!IsSeqCst(order) && !t.fresh && t.pending_op != ModelOp::kCas) {
      // The oldest store this load may read: not older than one it has seen, nor than the
      // newest one that happens-before it.
      std::uint64_t lo = std::max(loc.seen[t.id], loc.first);
      for (std::uint64_t i = loc.last(); i > lo; --i) {
        if (HappensBefore(loc.at(i), t)) {
          lo = i;
          break;
        }
      }
      int k = static_cast<int>(loc.last() - lo + 1);
      int pick = Decide(k, 1, Budget::kStale);
      index = loc.last() - pick;
      stale = pick > 0;
      if (stale) t.stale_since_spin = true;
    }
    const StoreRec& s = loc.at(index);
    loc.seen[t.id] = std::max(loc.seen[t.id], index);
    ReadFrom(t, s.sync, order);
    Record(Step{t.id, t.pending_op == ModelOp::kCas ? Event::kCasFail : Event::kLoad, order, stale,
                addr, s.value, 0, t.pending_site});
    return s.value;
  }

  void Store(const void* addr, std::uint64_t old, std::uint64_t value,
             std::memory_order order) override {
    ModelThread& t = Current();
    Location& loc = Touch(addr, old);
    if (IsSeqCst(order)) SeqCst(t);
    Write(t, loc, value, order, VClock{});
    Record(Step{t.id, Event::kStore, order, false, addr, value, 0, t.pending_site});
  }

  void Rmw(const void* addr, std::uint64_t old, std::uint64_t value,
           std::memory_order order) override {
    ModelThread& t = Current();
    Location& loc = Touch(addr, old);
    const VClock read_sync = loc.at(loc.last()).sync;  // an RMW reads the newest store
    ReadFrom(t, read_sync, order);
    Write(t, loc, value, order, read_sync);  // the release sequence continues through an RMW
    Record(Step{t.id, Event::kRmw, order, false, addr, old, value, t.pending_site});
  }

  void Fence(std::memory_order order) override {
    ModelThread& t = Current();
    if (IsAcquire(order)) JoinClock(t.clock, t.acquire_pending);
    if (IsSeqCst(order)) SeqCst(t);
    if (IsRelease(order)) t.release_fence = t.clock;
    ++t.clock[t.id];
    Record(Step{t.id, Event::kFence, order, false, nullptr, 0, 0, t.pending_site});
  }

  // A light fence learns what the heavy fences before it published, and publishes to the heavy
  // fences after it; light fences do not synchronise with each other. So the Dekker pair
  // (store; light fence; load) against (store; heavy fence; load) cannot have both loads miss
  // the other side's store, and a light fence with no heavy partner orders nothing.
  void AsymmetricFence(bool heavy) override {
    ModelThread& t = Current();
    if (heavy) {
      JoinClock(t.clock, lights_clock_);
      SeqCst(t);  // also a full fence of its own thread
      JoinClock(t.clock, t.acquire_pending);
      t.release_fence = t.clock;
      heavy_clock_ = t.clock;
    } else {
      JoinClock(t.clock, heavy_clock_);
      JoinClock(lights_clock_, t.clock);
    }
    ++t.clock[t.id];
    Record(Step{t.id, heavy ? Event::kHeavyFence : Event::kLightFence, std::memory_order_seq_cst,
                false, nullptr, 0, 0, t.pending_site});
  }

  void Construct(const void* addr, std::uint64_t value) override {
    dead_.erase(addr);
    Location& loc = locations_[addr];
    loc = Location{};
    if (current_ < 0) {
      loc.Append(StoreRec{value, -1, 0, VClock{}});
      return;
    }
    ModelThread& t = Current();
    loc.Append(StoreRec{value, t.id, t.clock[t.id], VClock{}});
    loc.seen[t.id] = loc.last();
  }
  void Destroy(const void* addr) override {
    locations_.erase(addr);
    if (current_ >= 0) dead_.emplace(addr, Current().pending_site);
  }

  void SpinWait() override {
    ModelThread& t = Current();
    // pending_site stays the last access's: the load the spin re-checks, where the trace and
    // a livelock report should point.
    Note(t.id, Event::kSpin);
    t.state = State::kSpinning;
    t.spin_writes = writes_;
    SwitchToHub();
  }

  std::int64_t NowNanos() override { return now_ns_; }

  std::uint64_t Choose(std::uint64_t n) override {
    if (n <= 1) return 0;
    // All options free; at most 36 (one base-36 digit in a schedule id).
    const int k = static_cast<int>(std::min<std::uint64_t>(n, 36));
    return static_cast<std::uint64_t>(Decide(k, k, Budget::kPreempt));
  }

  // ---- Waits, threads, cells ----

  bool Park(int id, std::optional<SyncClock::time_point> deadline) {
    ModelThread& t = threads_[id];
    t.pending_site = std::source_location::current();
    Point();
    if (!t.permit) {
      t.state = State::kParked;
      t.timed = deadline.has_value();
      Note(id, Event::kPark);
      SwitchToHub();
    }
    if (!t.permit) {
      Note(id, Event::kTimeout);
      return false;
    }
    t.permit = false;
    JoinClock(t.clock, t.permit_clock);
    Note(id, Event::kWake);
    return true;
  }

  void Unpark(int target) {
    ModelThread& t = Current();
    t.pending_site = std::source_location::current();
    Point();
    ModelThread& u = threads_[target];
    u.permit = true;
    JoinClock(u.permit_clock, t.clock);
    ++t.clock[t.id];
    if (u.state == State::kParked) u.state = State::kRunnable;
    Note(t.id, Event::kNotify, target);
  }

  int Spawn(std::function<void()> fn, int parent) {
    int id = -1;
    for (std::size_t i = 0; i < threads_.size(); ++i) {
      if (threads_[i].context == nullptr) {
        id = static_cast<int>(i);
        break;
      }
    }
    if (id < 0) {
      Fail("more than " + std::to_string(kMaxThreads) + " model threads",
           std::source_location::current());
      return -1;
    }
    ModelThread& t = threads_[id];
    t.id = id;
    t.state = State::kRunnable;
    t.fn = std::move(fn);
    t.clock = parent >= 0 ? threads_[parent].clock : VClock{};
    t.clock[id] = 1;
    t.acquire_pending = VClock{};
    t.release_fence = VClock{};
    t.permit = false;
    t.permit_clock = VClock{};
    t.timed = false;
    t.joining = -1;
    t.stale_since_spin = false;
    t.fresh = false;
    // Identities: unique per schedule and thread, below 2^63 (thread waiters use the top bit).
    t.waiter.Bind(this, id, (std::uint64_t{1} << 62) + serial_ * kMaxThreads + id);
    if (!t.stack) t.stack = std::make_unique<std::byte[]>(options_.stack_size);
    Result<Context> c = make_context({t.stack.get(), options_.stack_size}, &Entry);
    if (!c.ok()) std::abort();
    t.context = c.value();
    if (parent >= 0) {
      ++threads_[parent].clock[parent];
      Note(parent, Event::kSpawn, id);
    }
    return id;
  }

  void JoinThread(int target) {
    ModelThread& t = Current();
    t.pending_site = std::source_location::current();
    Point();
    if (threads_[target].state != State::kFinished) {
      t.state = State::kJoining;
      t.joining = target;
      SwitchToHub();
    }
    JoinClock(t.clock, threads_[target].clock);
    Note(t.id, Event::kJoin, target);
  }

  void CellAccess(const void* addr, bool write, const std::source_location& site) {
    ModelThread& t = Current();
    CellState& c = cells_[addr];
    auto ordered = [&](int u, std::uint32_t epoch) { return u == t.id || t.clock[u] >= epoch; };
    if (c.writer >= 0 && !ordered(c.writer, c.write_epoch)) {
      return Fail(std::string("data race: ") + (write ? "write" : "read") + " at " + Where(site) +
                      " (thread " + std::to_string(t.id) + ") is not ordered after the write at " +
                      Where(c.write_site) + " (thread " + std::to_string(c.writer) + ")",
                  site);
    }
    if (write) {
      for (int u = 0; u < kMaxThreads; ++u) {
        if (c.reads[u] != 0 && !ordered(u, c.reads[u])) {
          return Fail("data race: write at " + Where(site) + " (thread " + std::to_string(t.id) +
                          ") is not ordered after the read at " + Where(c.read_sites[u]) +
                          " (thread " + std::to_string(u) + ")",
                      site);
        }
      }
      c.writer = t.id;
      c.write_epoch = t.clock[t.id];
      c.write_site = site;
      c.reads = VClock{};
    } else {
      c.reads[t.id] = t.clock[t.id];
      c.read_sites[t.id] = site;
    }
  }
  void CellDestroy(const void* addr) { cells_.erase(addr); }

  // Fail: ends the schedule from a model thread (never returns to it).
  void Fail(const std::string& message, const std::source_location& site) {
    if (failure_.empty()) failure_ = message;
    if (current_ >= 0) {
      ModelThread& t = Current();
      Note(t.id, Event::kFail, 0, site);
      SwitchToHub();
      std::abort();  // the hub never resumes a failed schedule
    }
  }

  ModelThread& Current() { return threads_[current_]; }
  int current() const { return current_; }

  static std::string Where(const std::source_location& s) {
    if (s.file_name() == nullptr || s.line() == 0) return "?";
    std::string file = s.file_name();
    return file + ":" + std::to_string(s.line());
  }

 private:
  enum class Budget { kPreempt, kStale };

  static bool IsSeqCst(std::memory_order o) { return o == std::memory_order_seq_cst; }
  static Waiter* Provide(void* self) {
    auto* e = static_cast<Execution*>(self);
    return e->current_ >= 0 ? &e->threads_[e->current_].waiter : nullptr;
  }

  static void Entry(Transfer t) {
    auto* thread = static_cast<ModelThread*>(t.data);
    Execution* e = t_execution;
    try {
      thread->fn();
    } catch (const std::exception& ex) {
      e->Fail(std::string("exception: ") + ex.what(), std::source_location::current());
    } catch (...) {
      e->Fail("exception", std::source_location::current());
    }
    e->Finish(*thread);
  }

  void Finish(ModelThread& t) {
    t.state = State::kFinished;
    Note(t.id, Event::kFinish);
    for (ModelThread& u : threads_) {
      if (u.context != nullptr && u.state == State::kJoining && u.joining == t.id) {
        u.state = State::kRunnable;
      }
    }
    SwitchToHub();
    std::abort();  // never resumed
  }

  // Point: a scheduling point of the current thread.
  void Point() {
    if (++steps_taken_ > options_.max_steps) {
      Fail("livelock: more than " + std::to_string(options_.max_steps) +
               " scheduling points in one schedule (or raise Options::max_steps)",
           Current().pending_site);
    }
    now_ns_ += 10'000;  // the model clock: 10 us per step
    SwitchToHub();
  }

  void SwitchToHub() { jump_context(hub_, nullptr); }

  bool HappensBefore(const StoreRec& s, const ModelThread& t) const {
    return s.thread < 0 || t.clock[s.thread] >= s.epoch;
  }

  void SeqCst(ModelThread& t) {
    JoinClock(t.clock, sc_clock_);
    JoinClock(t.clock, t.acquire_pending);
    sc_clock_ = t.clock;
  }

  // ReadFrom: t read a store whose readers learn `sync`: at once if the access acquires, at
  // t's next acquire fence if not.
  void ReadFrom(ModelThread& t, const VClock& sync, std::memory_order order) {
    JoinClock(IsAcquire(order) ? t.clock : t.acquire_pending, sync);
    if (IsSeqCst(order)) SeqCst(t);
  }

  // Write: t appends `value` to loc's modification order. Its readers learn t's clock if the
  // access releases, t's last release fence's if not, joined with `carried` (what an RMW read).
  void Write(ModelThread& t, Location& loc, std::uint64_t value, std::memory_order order,
             const VClock& carried) {
    StoreRec s{value, t.id, t.clock[t.id], IsRelease(order) ? t.clock : t.release_fence};
    JoinClock(s.sync, carried);
    loc.Append(s);
    loc.seen[t.id] = loc.last();
    ++t.clock[t.id];
    ++writes_;
    t.fresh = false;
  }

  Location& Touch(const void* addr, std::uint64_t latest) {
    if (auto d = dead_.find(addr); d != dead_.end() && current_ >= 0) {
      Fail(
          "use after destruction: an atomic accessed after it was destroyed (last accessed "
          "before that at " +
              Where(d->second) + ")",
          Current().pending_site);
    }
    auto [it, fresh] = locations_.try_emplace(addr);
    if (fresh) {
      // First touched in this schedule: its value so far is known to every thread.
      it->second.Append(StoreRec{latest, -1, 0, VClock{}});
    }
    return it->second;
  }

  void Record(const Step& s) { steps_.push_back(s); }
  // Note: a step that is not a memory access (a park, a spawn, ...), with its thread id or 0.
  void Note(int thread, Event event, std::uint64_t arg = 0, const std::source_location& site = {}) {
    Record(Step{thread, event, std::memory_order_relaxed, false, nullptr, arg, 0, site});
  }

  // Decide: one of n options. Options from `costly` on cost one unit of `budget`. Returns the
  // chosen index; follows the path while it lasts.
  int Decide(int n, int costly, Budget budget) {
    int& used = budget == Budget::kPreempt ? preemptions_ : stale_reads_;
    // Random schedules have no preemption bound, and neither has a replay: its id may come from
    // one, and it decides every choice itself.
    const bool unbounded = rng_ != nullptr || !options_.replay.empty();
    int bound = budget == Budget::kPreempt ? (unbounded ? INT32_MAX : options_.preemption_bound)
                                           : options_.stale_reads;
    int allowed = used < bound ? n : std::min(n, costly);
    if (allowed <= 1) return 0;
    int chosen;
    if (position_ < path_.size()) {
      Choice& c = path_[position_];
      if (c.allowed == 0 && c.chosen < allowed) c.allowed = static_cast<std::uint16_t>(allowed);
      if (c.allowed != allowed || c.chosen >= allowed) {
        if (failure_.empty()) {
          failure_ =
              "nondeterminism: the body made different choices on a replay of the same schedule "
              "(it must depend only on the checker's choices: no real time, no randomness, no "
              "state kept between schedules)";
        }
        chosen = 0;
      } else {
        chosen = c.chosen;
      }
    } else {
      chosen = 0;
      if (rng_ != nullptr) chosen = RandomChoice(allowed, costly, budget);
      path_.push_back(
          Choice{static_cast<std::uint16_t>(chosen), static_cast<std::uint16_t>(allowed)});
    }
    ++position_;
    if (chosen >= costly) ++used;
    return chosen;
  }

  int RandomChoice(int allowed, int costly, Budget budget) {
    // Stay on the cheap options mostly: a switch at 1 point in 8, a stale read at 1 in 4.
    std::uniform_int_distribution<int> coin(0, budget == Budget::kPreempt ? 7 : 3);
    if (costly >= allowed || coin(*rng_) != 0) {
      return costly > 0
                 ? std::uniform_int_distribution<int>(0, std::min(costly, allowed) - 1)(*rng_)
                 : 0;
    }
    return std::uniform_int_distribution<int>(costly, allowed - 1)(*rng_);
  }

  // SpinnerMayRun: a spinning thread may run again once someone wrote something since it
  // spun, or at once if it read an older store since it last spun (a newer one may end the spin).
  bool SpinnerMayRun(const ModelThread& t) const {
    return t.state == State::kSpinning && (writes_ != t.spin_writes || t.stale_since_spin);
  }

  // PickNext: the thread to run next, -1 when all finished (or the schedule failed). Options
  // in order: the current thread (going on is free; anything else then is a preemption), the
  // other runnable threads, spinning threads that may see a change (the one that just spun
  // last), then timed waits to time out, which cost a preemption while anything else can run.
  int PickNext() {
    if (!failure_.empty()) return -1;
    int options[kMaxThreads];  // each live thread at most once
    int n = 0;
    const ModelThread* current =
        current_ >= 0 && threads_[current_].context != nullptr ? &threads_[current_] : nullptr;
    bool continuing = current != nullptr && current->state == State::kRunnable;
    if (continuing) options[n++] = current_;
    int live = 0;
    for (const ModelThread& t : threads_) {
      if (t.context == nullptr || t.state == State::kFinished) continue;
      ++live;
      if (t.id != current_ && t.state == State::kRunnable) options[n++] = t.id;
    }
    for (const ModelThread& t : threads_) {
      if (t.context != nullptr && t.id != current_ && SpinnerMayRun(t)) options[n++] = t.id;
    }
    if (current != nullptr && SpinnerMayRun(*current)) options[n++] = current_;
    const int progress = n;
    for (const ModelThread& t : threads_) {
      if (t.context != nullptr && t.state == State::kParked && t.timed) options[n++] = t.id;
    }
    if (live == 0) return -1;
    if (n == 0) {
      failure_ = Stuck();
      return -1;
    }
    int costly = continuing ? 1 : progress > 0 ? progress : n;
    return options[Decide(n, costly, Budget::kPreempt)];
  }

  std::string Stuck() {
    bool spinning = false;
    std::string detail;
    for (const ModelThread& t : threads_) {
      if (t.context == nullptr || t.state == State::kFinished) continue;
      detail += "\n  thread " + std::to_string(t.id) + ": ";
      switch (t.state) {
        case State::kParked: {
          const char* what = t.waiter.waiting_on();
          detail += std::string("parked") + (what != nullptr ? std::string(" in ") + what : "") +
                    ", never notified";
          break;
        }
        case State::kJoining:
          detail += "joining thread " + std::to_string(t.joining);
          break;
        case State::kSpinning:
          spinning = true;
          detail += "spinning after " + Where(t.pending_site) +
                    ", and no other thread can change anything";
          break;
        default:
          detail += "?";
      }
    }
    return (spinning ? "livelock: no thread can make progress"
                     : "deadlock: every thread is blocked") +
           detail;
  }

  const Options& options_;
  std::vector<ModelThread>& threads_;
  std::vector<Choice>& path_;
  std::mt19937_64* rng_;
  std::uint64_t serial_;
  Context hub_ = nullptr;
  int current_ = -1;
  std::size_t position_ = 0;
  int preemptions_ = 0;
  int stale_reads_ = 0;
  std::uint64_t steps_taken_ = 0;
  std::uint64_t writes_ = 0;
  std::int64_t now_ns_ = 1'000'000'000;  // the model clock starts at 1 s
  VClock sc_clock_{};
  VClock heavy_clock_{};   // the clock of the last heavy fence
  VClock lights_clock_{};  // every light fence's clock, joined
  std::unordered_map<const void*, Location> locations_;
  std::unordered_map<const void*, CellState> cells_;
  // Atomics destroyed in this schedule (and not constructed again): an access is a use after
  // free. With the site of the destroying thread's last scheduling point.
  std::unordered_map<const void*, std::source_location> dead_;
  std::vector<Step> steps_;
  std::string failure_;
};

bool ModelWaiter::wait(std::optional<SyncClock::time_point> deadline) {
  return exec_->Park(id_, deadline);
}
void ModelWaiter::notify() {
  // From a model thread only (the checker runs nothing else); a notify from outside would be a
  // test bug.
  if (t_execution != exec_ || exec_->current() < 0) std::abort();
  exec_->Unpark(id_);
}

// ---- Trace -------------------------------------------------------------------------------------

// Value: a stored word as the trace shows it (large ones, pointers mostly, in hex).
std::string Value(std::uint64_t v) {
  if (v < 1'000'000 || v > ~std::uint64_t{0} - 1'000'000) {
    return std::to_string(static_cast<std::int64_t>(v));
  }
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

std::string FormatTrace(const std::vector<Step>& steps) {
  std::unordered_map<const void*, int> names;
  auto name = [&](const void* a) {
    auto [it, fresh] = names.try_emplace(a, static_cast<int>(names.size()) + 1);
    return "@" + std::to_string(it->second);
  };
  std::ostringstream out;
  constexpr std::size_t kShown = 400;
  std::size_t begin = steps.size() > kShown ? steps.size() - kShown : 0;
  if (begin > 0) out << "  ... " << begin << " earlier steps\n";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    if (s.addr != nullptr) name(s.addr);  // names in order of first use, shown or not
    if (i < begin) continue;
    std::string what;
    switch (s.event) {
      case Event::kLoad:
        what = "load " + name(s.addr) + " -> " + Value(s.a) + (s.stale ? " (stale)" : "");
        break;
      case Event::kCasFail:
        what = "cas " + name(s.addr) + " failed, read " + Value(s.a);
        break;
      case Event::kStore:
        what = "store " + name(s.addr) + " = " + Value(s.a);
        break;
      case Event::kRmw:
        what = "rmw " + name(s.addr) + " " + Value(s.a) + " -> " + Value(s.b);
        break;
      case Event::kFence:
        what = "fence";
        break;
      case Event::kLightFence:
        what = "light fence (asymmetric)";
        break;
      case Event::kHeavyFence:
        what = "heavy fence (asymmetric)";
        break;
      case Event::kSpin:
        what = "spin (waits for another thread's write)";
        break;
      case Event::kPark:
        what = "park";
        break;
      case Event::kWake:
        what = "park returns: notified";
        break;
      case Event::kTimeout:
        what = "park returns: timed out";
        break;
      case Event::kNotify:
        what = "notify thread " + std::to_string(s.a);
        break;
      case Event::kSpawn:
        what = "spawn thread " + std::to_string(s.a);
        break;
      case Event::kJoin:
        what = "join thread " + std::to_string(s.a);
        break;
      case Event::kFinish:
        what = "finish";
        break;
      case Event::kFail:
        what = "FAIL";
        break;
    }
    char head[32];
    std::snprintf(head, sizeof head, "%5zu  t%d  ", i, s.thread);
    out << head << what;
    if (s.event == Event::kLoad || s.event == Event::kStore || s.event == Event::kRmw ||
        s.event == Event::kCasFail || s.event == Event::kFence) {
      out << "  " << OrderName(s.order);
    }
    if (s.site.line() != 0) {
      out << "  " << s.site.function_name() << "  " << Execution::Where(s.site);
    }
    out << "\n";
  }
  return out.str();
}

std::uint64_t EnvU64(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::strtoull(v, nullptr, 10);
}

}  // namespace

Options Options::FromEnvironment() const {
  Options o = *this;
  o.preemption_bound = static_cast<int>(
      std::max<std::uint64_t>(o.preemption_bound, EnvU64("WEFT_MODEL_PREEMPTIONS", 0)));
  o.stale_reads =
      static_cast<int>(std::max<std::uint64_t>(o.stale_reads, EnvU64("WEFT_MODEL_STALE_READS", 0)));
  o.random_schedules = std::max(o.random_schedules, EnvU64("WEFT_MODEL_RANDOM_SCHEDULES", 0));
  o.seed = EnvU64("WEFT_MODEL_SEED", o.seed);
  std::uint64_t max = EnvU64("WEFT_MODEL_MAX_SCHEDULES", 0);
  if (max != 0 && o.max_schedules != 0) o.max_schedules = std::max(o.max_schedules, max);
  if (const char* r = std::getenv("WEFT_MODEL_REPLAY"); r != nullptr && *r != '\0') o.replay = r;
  return o;
}

std::ostream& operator<<(std::ostream& os, const Report& r) {
  if (r.ok) {
    return os << "ok: " << r.schedules << " schedules"
              << (r.exhausted ? " (bounded space exhausted)" : "") << " in " << r.seconds << " s";
  }
  return os << r.failure << "\nafter " << r.schedules << " schedules; replay with "
            << "WEFT_MODEL_REPLAY=" << r.schedule << "\ntrace:\n"
            << r.trace;
}

namespace {

class Explorer {
 public:
  explicit Explorer(const Options& options) : options_(options), threads_(kMaxThreads) {}

  Report Explore(const std::function<void()>& body) {
    auto start = std::chrono::steady_clock::now();
    Report report;
    auto finish = [&] {
      report.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return report;
    };
    if (!options_.replay.empty()) {
      std::optional<std::vector<std::uint16_t>> choices = DecodePath(options_.replay);
      if (!choices) {
        report.ok = false;
        report.failure = "not a schedule id: " + options_.replay;
        return finish();
      }
      // The id carries the choices only; each one's option count comes from the run itself.
      for (std::uint16_t c : *choices) path_.push_back(Choice{c, 0});
      RunOne(body, nullptr, report);
      return finish();
    }
    if (options_.exhaustive) {
      for (;;) {
        if (!RunOne(body, nullptr, report)) return finish();
        if (!Backtrack()) {
          report.exhausted = true;
          break;
        }
        if (options_.max_schedules != 0 && report.schedules >= options_.max_schedules) break;
      }
    }
    for (std::uint64_t i = 0; i < options_.random_schedules; ++i) {
      std::mt19937_64 rng(options_.seed + i);
      path_.clear();
      if (!RunOne(body, &rng, report)) {
        report.failure += " (random schedule, seed " + std::to_string(options_.seed + i) + ")";
        return finish();
      }
    }
    return finish();
  }

 private:
  // RunOne: one schedule along path_ (extended with new choices); false, with the report filled
  // in, if it failed.
  bool RunOne(const std::function<void()>& body, std::mt19937_64* rng, Report& report) {
    Execution exec(options_, threads_, path_, rng, report.schedules);
    bool ok = exec.Run(body);
    ++report.schedules;
    std::string failure = exec.failure();
    if (ok && exec.position() < path_.size()) {
      // The schedule ended before the path did: the body took another course than on the run
      // that recorded the path.
      failure =
          "nondeterminism: the schedule ended before its recorded choices did (the body "
          "must depend only on the checker's choices)";
    }
    path_.resize(std::min(path_.size(), exec.position()));
    if (failure.empty()) return true;
    report.ok = false;
    report.failure = failure;
    report.schedule = EncodePath(path_);
    report.trace = FormatTrace(exec.steps());
    return false;
  }

  // Backtrack: advances path_ to the next unexplored schedule; false when none is left.
  bool Backtrack() {
    while (!path_.empty() && path_.back().chosen + 1 >= path_.back().allowed) path_.pop_back();
    if (path_.empty()) return false;
    ++path_.back().chosen;
    return true;
  }

  Options options_;
  std::vector<ModelThread> threads_;
  std::vector<Choice> path_;
};

}  // namespace

Report check(const std::function<void()>& body, const Options& options) {
  Explorer explorer(options.FromEnvironment());
  return explorer.Explore(body);
}

thread::thread(std::function<void()> fn) {
  Execution* e = t_execution;
  if (e == nullptr || e->current() < 0) {
    std::fprintf(stderr, "weft::model::thread: only inside weft::model::check\n");
    std::abort();
  }
  id_ = e->Spawn(std::move(fn), e->current());
}

thread::~thread() {
  if (!joined_ && t_execution != nullptr && t_execution->current() >= 0) {
    fail("a weft::model::thread was destroyed without join()");
  }
}

void thread::join() {
  Execution* e = t_execution;
  if (e == nullptr || e->current() < 0 || id_ < 0) std::abort();
  e->JoinThread(id_);
  joined_ = true;
}

void yield() {
  Execution* e = t_execution;
  if (e != nullptr && e->current() >= 0) e->SpinWait();
}

void fail(const std::string& message, const std::source_location& site) {
  Execution* e = t_execution;
  if (e == nullptr || e->current() < 0) {
    std::fprintf(stderr, "weft::model::fail outside a model check: %s (%s:%u)\n", message.c_str(),
                 site.file_name(), site.line());
    std::abort();
  }
  e->Fail(message + " at " + Execution::Where(site), site);
}

namespace model_internal {
void CellRead(const void* addr, const std::source_location& site) {
  Execution* e = t_execution;
  if (e != nullptr && e->current() >= 0) e->CellAccess(addr, false, site);
}
void CellWrite(const void* addr, const std::source_location& site) {
  Execution* e = t_execution;
  if (e != nullptr && e->current() >= 0) e->CellAccess(addr, true, site);
}
void CellDestroy(const void* addr) {
  Execution* e = t_execution;
  if (e != nullptr) e->CellDestroy(addr);
}
}  // namespace model_internal

}  // namespace weft::model
