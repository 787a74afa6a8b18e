// base/atomic.h: the atomics weft's concurrent protocols are written with, so that the model
// checker (//model) can explore their interleavings.
//
// Defines: weft::atomic<T>, weft::atomic_fence.
//
// In every normal build these are std::atomic<T> itself (an alias: no wrapper, no cost) and an
// inline call of std::atomic_thread_fence. (Not named atomic_thread_fence: an unqualified call
// with a std::memory_order argument would also find std's by argument-dependent lookup.) In a model
// build (`--config=model`, which defines WEFT_MODEL), weft::atomic<T> is a class with
// std::atomic<T>'s interface that, while a model checker runs on the calling thread, hands each
// load, store, read-modify-write and fence to it: the checker decides which model thread runs next
// and which store a load reads. With no checker running it behaves as std::atomic<T>. See
// docs/model.md.
//
// T: as std::atomic<T>, and in a model build also at most 8 bytes (the checker keeps each
// location's stores as 64-bit words).

#ifndef WEFT_BASE_ATOMIC_H_
#define WEFT_BASE_ATOMIC_H_

// First, for the C++20 check.
// clang-format off
#include "weft/base/config.h"
// clang-format on

#include <atomic>

#ifdef WEFT_MODEL
#include "weft/base/internal/atomic_model.h"  // IWYU pragma: export
#else
namespace weft {

template <typename T>
using atomic = std::atomic<T>;

// atomic_fence: std::atomic_thread_fence(order).
[[gnu::always_inline]] inline void atomic_fence(std::memory_order order) noexcept {
  std::atomic_thread_fence(order);
}

}  // namespace weft
#endif

#endif  // WEFT_BASE_ATOMIC_H_
