// context/internal/raw.h: the ABI every context-switch backend implements (asm per architecture,
// or the ucontext fallback). Only context.cc calls these; users go through context/context.h,
// which adds the context records and the sanitizer annotations.
//
// A suspended context is named by an opaque "stack handle" (for the asm backends: the stack
// pointer after the callee-saved registers were pushed; for ucontext: the address of a
// ucontext_t). Each switch passes two words to the side that resumes: `tag` (context.cc passes
// the record of the context that switched away) and `data`.

#ifndef WEFT_CONTEXT_INTERNAL_RAW_H_
#define WEFT_CONTEXT_INTERNAL_RAW_H_

// noexcept: nothing unwinds across a switch. It also lets a compiler make a switch that ends a
// noexcept caller a tail call (jump_context_last): a call that might throw inside a noexcept
// region never is one.
extern "C" {

// Two words handed to the resumed side; returned in rax:rdx on x86-64 SysV, x0:x1 on AAPCS64.
struct WeftRawTransfer {
  void* tag;
  void* data;
};

// Entry of a fresh context: called once, on the new stack, with the transfer of the first switch
// into it and the `arg` given to weft_context_make. Must never return.
typedef void (*WeftRawEntry)(void* tag, void* data, void* arg);

// Runs on the target stack at arrival (see weft_context_ontop); its result is what the target's
// pending switch returns.
typedef WeftRawTransfer (*WeftRawOnTop)(void* tag, void* data, void* arg);

// weft_context_make: prepares a fresh context on the stack [stack_lo, stack_top), which grows
// down from stack_top; at least 2 KiB (the ucontext backend keeps a ucontext_t there too). The
// first switch into the returned handle calls entry(tag, data, arg). Does not switch. Any thread.
void* weft_context_make(void* stack_lo, void* stack_top, WeftRawEntry entry, void* arg) noexcept;

// weft_context_jump: saves the caller's callee-saved state on its own stack, stores the handle
// for it in *save, and resumes `to`, which sees {tag, data}. Returns when something switches
// back to *save, with what that switch passed. `to` is consumed: a handle resumes once.
WeftRawTransfer weft_context_jump(void* to, void** save, void* tag, void* data) noexcept;

// weft_context_ontop: like weft_context_jump, but on arrival calls fn(tag, data, arg) on top of
// the target's stack before the target resumes; the target's pending switch returns fn's result.
// This is how a context parks itself and then releases a lock once it is no longer running.
WeftRawTransfer weft_context_ontop(void* to, void** save, void* tag, void* data, WeftRawOnTop fn,
                                   void* arg) noexcept;

}  // extern "C"

#endif  // WEFT_CONTEXT_INTERNAL_RAW_H_
