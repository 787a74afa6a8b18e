// context/internal/stack_guard.h: the registry of guard areas that the stack-overflow handler
// reads (stack_guard.cc), written by the stack pool as it maps and unmaps guarded stacks.
//
// Writers take the registry's mutex (lock order: the pool's mutex, then the registry's); the
// handler reads without locks (atomic loads only), so it is async-signal-safe.

#ifndef WEFT_CONTEXT_INTERNAL_STACK_GUARD_H_
#define WEFT_CONTEXT_INTERNAL_STACK_GUARD_H_

#include <cstddef>

namespace weft::context_internal {

// RegisterGuard: a guarded stack in its own mapping, whose guard area starts at `page` and whose
// usable size is `usable`. A full registry drops it: the stack still works, but an overflow
// into its guard is passed on as a plain SIGSEGV, without weft's message.
void RegisterGuard(std::byte* page, std::size_t usable);
void UnregisterGuard(std::byte* page);
// RegisterGuardChunk: a chunk of `bytes` at `base` carved into slots of `slot` bytes, each with
// its guard area at the slot's start.
void RegisterGuardChunk(std::byte* base, std::size_t bytes, std::size_t slot);
void UnregisterGuardChunk(std::byte* base);

// DieRedZone: a compact stack's red zone (below usable_lo) was found written: prints which stack
// and aborts.
[[noreturn]] void DieRedZone(const std::byte* usable_lo, std::size_t usable);

}  // namespace weft::context_internal

#endif  // WEFT_CONTEXT_INTERNAL_STACK_GUARD_H_
