// base/internal/model_hooks.h: the seam between weft::atomic (base/atomic.h, in model builds)
// and a model checker (//model), which implements ModelHooks and installs it on the OS thread
// it runs its model threads on.
//
// Defines: weft::base_internal::ModelHooks, ModelOp, ActiveModel, SetActiveModel.

#ifndef WEFT_BASE_INTERNAL_MODEL_HOOKS_H_
#define WEFT_BASE_INTERNAL_MODEL_HOOKS_H_

#include <atomic>
#include <cstdint>
#include <source_location>

namespace weft {
namespace base_internal {

// ModelOp: what an access does, for the checker's trace.
enum class ModelOp : std::uint8_t { kLoad, kStore, kRmw, kCas, kFence };

// ModelHooks: the model checker's side of the seam (//model implements it). All calls come from
// the one OS thread the checker runs its model threads on.
class ModelHooks {
 public:
  // Schedule: a scheduling point before an access to `addr` (null for a fence): the checker may
  // switch to another model thread first. Returns once this thread may perform the access.
  virtual void Schedule(const void* addr, ModelOp op, std::memory_order order,
                        const std::source_location& site) = 0;
  // Load: the access was a load and `latest` is the location's newest value; returns the value
  // the load reads (the checker may choose an older store that the memory model allows).
  virtual std::uint64_t Load(const void* addr, std::uint64_t latest, std::memory_order order) = 0;
  // Store: a store replaced `old` (the newest value) with `value`. Rmw: a read-modify-write
  // (a successful compare-exchange included) read `old` and wrote `value`.
  virtual void Store(const void* addr, std::uint64_t old, std::uint64_t value,
                     std::memory_order order) = 0;
  virtual void Rmw(const void* addr, std::uint64_t old, std::uint64_t value,
                   std::memory_order order) = 0;
  // Fence: atomic_thread_fence(order).
  virtual void Fence(std::memory_order order) = 0;
  // AsymmetricFence: base/asymmetric_fence.h's LightFence (heavy false) or HeavyFence (true).
  // A light fence orders nothing by itself; each light and heavy fence meet in one order, as
  // membarrier(2) makes each running thread execute a full barrier at some point of it.
  virtual void AsymmetricFence(bool heavy) = 0;
  // Construct / Destroy: an atomic begins or ends its life at `addr` (initial value `value`).
  virtual void Construct(const void* addr, std::uint64_t value) = 0;
  virtual void Destroy(const void* addr) = 0;
  // SpinWait: the caller spins until another thread changes something (weft::CpuRelax).
  virtual void SpinWait() = 0;
  // Choose: one of [0, n), for a choice the code leaves to chance (select's poll order); the
  // checker explores each.
  virtual std::uint64_t Choose(std::uint64_t n) = 0;
  // NowNanos: the model's clock (deterministic, so that schedules replay).
  virtual std::int64_t NowNanos() = 0;

 protected:
  ~ModelHooks() = default;
};

// ActiveModel: the checker running model threads on the calling OS thread, or null.
inline thread_local ModelHooks* t_active_model = nullptr;
inline ModelHooks* ActiveModel() { return t_active_model; }
inline void SetActiveModel(ModelHooks* hooks) { t_active_model = hooks; }

}  // namespace base_internal
}  // namespace weft

#endif  // WEFT_BASE_INTERNAL_MODEL_HOOKS_H_
