// base/internal/atomic_model.h: weft::atomic<T> for model builds (WEFT_MODEL defined; included
// by base/atomic.h only). Each operation asks the model checker running on this thread, if any,
// to schedule it and to record it; with none running it is a plain std::atomic<T> operation.
//
// Defines: weft::atomic<T>, weft::atomic_fence.

#ifndef WEFT_BASE_INTERNAL_ATOMIC_MODEL_H_
#define WEFT_BASE_INTERNAL_ATOMIC_MODEL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "weft/base/internal/model_hooks.h"

namespace weft {
namespace base_internal {

template <typename T>
std::uint64_t ToBits(T v) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
T FromBits(std::uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

// FailureOrder: compare_exchange's failure order when only the success order is given.
constexpr std::memory_order FailureOrder(std::memory_order order) {
  return order == std::memory_order_acq_rel   ? std::memory_order_acquire
         : order == std::memory_order_release ? std::memory_order_relaxed
                                              : order;
}

}  // namespace base_internal

// atomic: std::atomic<T>'s interface; see base/atomic.h. A compare_exchange_weak never fails
// spuriously under the checker.
template <typename T>
class atomic {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "a model build checks atomics of up to 8 trivially copyable bytes");
  using Site = std::source_location;
  using Hooks = base_internal::ModelHooks;
  using Op = base_internal::ModelOp;

 public:
  using value_type = T;
  static constexpr bool is_always_lock_free = std::atomic<T>::is_always_lock_free;

  constexpr atomic() noexcept(std::is_nothrow_default_constructible_v<T>) : atomic(T()) {}
  constexpr atomic(T v) noexcept : v_(v) {  // NOLINT: implicit, as std::atomic's
    if (!std::is_constant_evaluated()) {
      if (Hooks* m = base_internal::ActiveModel()) m->Construct(this, base_internal::ToBits(v));
    }
  }
  constexpr ~atomic() {
    if (!std::is_constant_evaluated()) {
      if (Hooks* m = base_internal::ActiveModel()) m->Destroy(this);
    }
  }
  atomic(const atomic&) = delete;
  atomic& operator=(const atomic&) = delete;

  bool is_lock_free() const noexcept { return v_.is_lock_free(); }

  T load(std::memory_order order = std::memory_order_seq_cst,
         const Site& site = Site::current()) const noexcept {
    Hooks* m = base_internal::ActiveModel();
    if (m == nullptr) return v_.load(order);
    m->Schedule(this, Op::kLoad, order, site);
    return base_internal::FromBits<T>(m->Load(this, base_internal::ToBits(v_.load()), order));
  }
  operator T() const noexcept { return load(); }

  void store(T v, std::memory_order order = std::memory_order_seq_cst,
             const Site& site = Site::current()) noexcept {
    Hooks* m = base_internal::ActiveModel();
    if (m == nullptr) return v_.store(v, order);
    m->Schedule(this, Op::kStore, order, site);
    T old = v_.exchange(v);
    m->Store(this, base_internal::ToBits(old), base_internal::ToBits(v), order);
  }
  T operator=(T v) noexcept {
    store(v);
    return v;
  }

  T exchange(T v, std::memory_order order = std::memory_order_seq_cst,
             const Site& site = Site::current()) noexcept {
    return Rmw([v](T) { return v; }, order, site, [&] { return v_.exchange(v, order); });
  }

  bool compare_exchange_strong(T& expected, T desired, std::memory_order success,
                               std::memory_order failure,
                               const Site& site = Site::current()) noexcept {
    Hooks* m = base_internal::ActiveModel();
    if (m == nullptr) return v_.compare_exchange_strong(expected, desired, success, failure);
    m->Schedule(this, Op::kCas, success, site);
    T old = v_.load();
    if (base_internal::ToBits(old) == base_internal::ToBits(expected)) {
      v_.store(desired);
      m->Rmw(this, base_internal::ToBits(old), base_internal::ToBits(desired), success);
      return true;
    }
    // A failed compare-exchange is a load; the checker has it read the newest store.
    expected = base_internal::FromBits<T>(m->Load(this, base_internal::ToBits(old), failure));
    return false;
  }
  bool compare_exchange_strong(T& expected, T desired,
                               std::memory_order order = std::memory_order_seq_cst,
                               const Site& site = Site::current()) noexcept {
    return compare_exchange_strong(expected, desired, order, base_internal::FailureOrder(order),
                                   site);
  }
  bool compare_exchange_weak(T& expected, T desired, std::memory_order success,
                             std::memory_order failure,
                             const Site& site = Site::current()) noexcept {
    if (base_internal::ActiveModel() == nullptr) {
      return v_.compare_exchange_weak(expected, desired, success, failure);
    }
    return compare_exchange_strong(expected, desired, success, failure, site);
  }
  bool compare_exchange_weak(T& expected, T desired,
                             std::memory_order order = std::memory_order_seq_cst,
                             const Site& site = Site::current()) noexcept {
    return compare_exchange_weak(expected, desired, order, base_internal::FailureOrder(order),
                                 site);
  }

  // Arithmetic (integers and pointers) and bitwise (integers) read-modify-writes.
  template <typename D, typename U = T,
            typename = std::enable_if_t<std::is_integral_v<U> || std::is_pointer_v<U>>>
  T fetch_add(D d, std::memory_order order = std::memory_order_seq_cst,
              const Site& site = Site::current()) noexcept {
    return Rmw([d](T x) { return static_cast<T>(x + d); }, order, site,
               [&] { return v_.fetch_add(d, order); });
  }
  template <typename D, typename U = T,
            typename = std::enable_if_t<std::is_integral_v<U> || std::is_pointer_v<U>>>
  T fetch_sub(D d, std::memory_order order = std::memory_order_seq_cst,
              const Site& site = Site::current()) noexcept {
    return Rmw([d](T x) { return static_cast<T>(x - d); }, order, site,
               [&] { return v_.fetch_sub(d, order); });
  }
  template <typename U = T, typename = std::enable_if_t<std::is_integral_v<U>>>
  T fetch_and(T d, std::memory_order order = std::memory_order_seq_cst,
              const Site& site = Site::current()) noexcept {
    return Rmw([d](T x) { return static_cast<T>(x & d); }, order, site,
               [&] { return v_.fetch_and(d, order); });
  }
  template <typename U = T, typename = std::enable_if_t<std::is_integral_v<U>>>
  T fetch_or(T d, std::memory_order order = std::memory_order_seq_cst,
             const Site& site = Site::current()) noexcept {
    return Rmw([d](T x) { return static_cast<T>(x | d); }, order, site,
               [&] { return v_.fetch_or(d, order); });
  }
  template <typename U = T, typename = std::enable_if_t<std::is_integral_v<U>>>
  T fetch_xor(T d, std::memory_order order = std::memory_order_seq_cst,
              const Site& site = Site::current()) noexcept {
    return Rmw([d](T x) { return static_cast<T>(x ^ d); }, order, site,
               [&] { return v_.fetch_xor(d, order); });
  }
  T operator++() noexcept { return fetch_add(1) + 1; }
  T operator--() noexcept { return fetch_sub(1) - 1; }
  T operator++(int) noexcept { return fetch_add(1); }
  T operator--(int) noexcept { return fetch_sub(1); }
  template <typename D>
  T operator+=(D d) noexcept {
    return fetch_add(d) + d;
  }
  template <typename D>
  T operator-=(D d) noexcept {
    return fetch_sub(d) - d;
  }

 private:
  // Rmw: apply(old) is the new value; plain() is the operation with no checker running.
  template <typename Apply, typename Plain>
  T Rmw(Apply apply, std::memory_order order, const Site& site, Plain plain) {
    Hooks* m = base_internal::ActiveModel();
    if (m == nullptr) return plain();
    m->Schedule(this, Op::kRmw, order, site);
    T old = v_.load();
    T next = apply(old);
    v_.store(next);
    m->Rmw(this, base_internal::ToBits(old), base_internal::ToBits(next), order);
    return old;
  }

  std::atomic<T> v_;
};

// atomic_fence: std::atomic_thread_fence(order), reported to the checker when one runs.
inline void atomic_fence(std::memory_order order,
                         const std::source_location& site = std::source_location::current()) {
  if (base_internal::ModelHooks* m = base_internal::ActiveModel()) {
    m->Schedule(nullptr, base_internal::ModelOp::kFence, order, site);
    m->Fence(order);
    return;
  }
  std::atomic_thread_fence(order);
}

namespace base_internal {
// ModelAsymmetricFence: base/asymmetric_fence.h's fences, reported to the checker when one runs
// on this thread (true), else false (the caller runs the real fence).
inline bool ModelAsymmetricFence(
    bool heavy, const std::source_location& site = std::source_location::current()) {
  ModelHooks* m = ActiveModel();
  if (m == nullptr) return false;
  m->Schedule(nullptr, ModelOp::kFence, std::memory_order_seq_cst, site);
  m->AsymmetricFence(heavy);
  return true;
}
}  // namespace base_internal

}  // namespace weft

#endif  // WEFT_BASE_INTERNAL_ATOMIC_MODEL_H_
