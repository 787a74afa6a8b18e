// context/internal/stack_layout.h: the stack pool's size classes and slot layout, shared by
// stack.cc (the pool), stack_cache.cc and stack_guard.cc (the overflow diagnostics).
//
// Slot layout, for both protection classes (G = kGuard: 4 KiB, 8 KiB on Windows; S = the
// class's usable size):
//
//   lo                lo + G                                       lo + G + S
//   | guard / red zone | usable stack (grows down) ... [record] |

#ifndef WEFT_CONTEXT_INTERNAL_STACK_LAYOUT_H_
#define WEFT_CONTEXT_INTERNAL_STACK_LAYOUT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "vm.h"
#include "weft/context/stack.h"

namespace weft::context_internal {

constexpr std::size_t kPage = 4096;
// kGuard: the guard area or red zone below each stack (see context/internal/vm.h).
constexpr std::size_t kGuard = context_internal::kVmGuardBytes;
constexpr int kMinClassShift = 14;  // 16 KiB
constexpr int kMaxClassShift = 26;  // 64 MiB
static_assert(std::size_t{1} << kMaxClassShift == kMaxStackSize);
constexpr int kNumClasses = kMaxClassShift - kMinClassShift + 1;
constexpr std::size_t kCompactChunkBytes = std::size_t{4} << 20;
constexpr std::size_t kRedZoneCheckBytes = 256;

constexpr std::size_t ClassSize(int index) { return std::size_t{1} << (kMinClassShift + index); }
constexpr std::size_t SlotSize(int index) { return ClassSize(index) + kGuard; }
// SlotsPerChunk: how many slots of class `index` a chunk (compact or guarded) holds.
constexpr std::size_t SlotsPerChunk(int index) {
  return std::max<std::size_t>(1, kCompactChunkBytes / SlotSize(index));
}
static_assert(SlotsPerChunk(0) <= UINT16_MAX, "Stack::slot_ must hold a slot index");
// kLooseChunk: Stack::chunk_ of a guarded stack in its own mapping (no guard markers).
constexpr std::uint32_t kLooseChunk = UINT32_MAX;

inline int ClassIndex(std::size_t size) {
  int index = 0;
  while (ClassSize(index) < size) ++index;
  return index;
}

}  // namespace weft::context_internal

#endif  // WEFT_CONTEXT_INTERNAL_STACK_LAYOUT_H_
