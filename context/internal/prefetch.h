// context/internal/prefetch.h: PrefetchLinesForWrite, the prefetch loop behind prefetch_context
// (context.h) and the stack cache's look-ahead (stack.cc).

#ifndef WEFT_CONTEXT_INTERNAL_PREFETCH_H_
#define WEFT_CONTEXT_INTERNAL_PREFETCH_H_

#include <cstdint>

namespace weft::context_internal {

// PrefetchLinesForWrite: asks the CPU for the 64-byte lines at `at` + 64 * i, for i in
// [first, end), for writing. A hint: never faults, even on unmapped memory. Integer arithmetic,
// so `at` may be null or stale (pointer arithmetic on those is undefined: UBSan's
// pointer-overflow check). always_inline: GCC 12 at -O2 finds a small out-of-line function that
// only prefetches free of side effects and deletes every call to it (found by counting prefetch
// instructions in a binary: none).
[[gnu::always_inline]] inline void PrefetchLinesForWrite(std::uintptr_t at, int first,
                                                         int end) noexcept {
#if defined(__GNUC__)
  for (int i = first; i < end; ++i) {
    __builtin_prefetch(reinterpret_cast<const void*>(at + std::uintptr_t(64 * i)), 1, 3);
  }
#else
  (void)at, (void)first, (void)end;
#endif
}

}  // namespace weft::context_internal

#endif  // WEFT_CONTEXT_INTERNAL_PREFETCH_H_
