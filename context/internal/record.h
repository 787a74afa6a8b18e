// context/internal/record.h: ContextRecord, the bookkeeping behind a weft::Context handle.
//
// One record per execution context: make_context places it at the top of the context's stack;
// each OS thread has one for its original stack (thread-local). Readable by the stack-overflow
// signal handler (//context:stack), which finds the record at the top of a faulting stack through
// `magic` and prints its name.

#ifndef WEFT_CONTEXT_INTERNAL_RECORD_H_
#define WEFT_CONTEXT_INTERNAL_RECORD_H_

#include <cstddef>
#include <cstdint>

namespace weft::context_internal {

inline constexpr std::uint64_t kRecordMagic = 0x3178746374666577;  // "weftctx1", little-endian
inline constexpr std::size_t kNameCapacity = 32;                   // including the NUL
// make_context puts a record at the top of its stack, at this alignment (a cache line of its own).
// The type itself is not over-aligned: thread records live in static TLS, where large alignments
// are poorly supported in shared objects.
inline constexpr std::size_t kRecordAlignment = 64;

// Invariants:
//   sp != nullptr  <=>  the context is suspended (or fresh) and may be resumed exactly once
//   stack_lo + stack_size == the record's own address, for records made by make_context
//   asan_switch_pending  =>  a switch into this context has not yet been finished for ASan
struct ContextRecord {
  std::uint64_t magic = 0;
  void* sp = nullptr;        // raw handle of the suspended context (see internal/raw.h)
  void* entry = nullptr;     // weft::ContextEntry of a made context; null for a thread's own record
  void* stack_lo = nullptr;  // stack bounds told to ASan; learnt on first switch for thread records
  std::size_t stack_size = 0;
  void* asan_fake_stack = nullptr;  // ASan fake-stack cookie saved while suspended
  void* tsan_fiber = nullptr;       // TSan fiber handle (created lazily for thread records)
  bool asan_switch_pending = false;
  bool exiting = false;  // set by exit_context: the context will never be resumed
  // NUL-terminated. make_context writes only name[0], so that a new context's record costs one
  // cache line, not two: the rest of the name sits on the stack's top line, touched only when
  // a name is set (a spawn burst's first runs wrote both lines; W5).
  char name[kNameCapacity];
};

}  // namespace weft::context_internal

#endif  // WEFT_CONTEXT_INTERNAL_RECORD_H_
