// context/context.h: weft's stackful context switch. The lowest layer of the runtime and usable
// alone: create an execution context on a stack you provide, switch to it passing a value, get a
// value back when something switches to you, and switch while running a function on top of the
// target (to release a lock only once you are no longer running). Boost.Context's fcontext shape,
// plus a per-context record that makes the switch visible to AddressSanitizer and
// ThreadSanitizer.
//
// Defines: weft::Context, weft::StackSpan, weft::Transfer, weft::ContextEntry, weft::OnTopFn and
// the functions make_context, jump_context, jump_context_last, jump_context_inline,
// jump_context_ontop, exit_context, discard_context, current_context, prefetch_context,
// set_context_name, context_name.
//
// Backends (chosen at build time, see docs/context.md): hand-written assembly for x86-64 SysV
// ELF; ucontext elsewhere or with --define=weft_context=ucontext. Stacks with guard pages and
// pooling are in context/stack.h; this header needs none of that.
//
// Non-goals: the signal mask is not switched (use the ucontext backend if you need that); a
// context is not tied to a thread, so code that caches thread-local addresses across a switch
// (errno included) must re-read them if contexts migrate between threads.

#ifndef WEFT_CONTEXT_CONTEXT_H_
#define WEFT_CONTEXT_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "weft/base/result.h"
#include "weft/context/internal/prefetch.h"

namespace weft {

namespace context_internal {
struct ContextRecord;
}  // namespace context_internal

// Context: a handle to an execution context (a stack and where it stopped). A suspended context
// is resumed by switching to its handle; the handle stays the same across suspensions, and
// switching to it while the context runs is an error caught at once. A thread's original
// stack has a Context too (current_context()), so it can be switched back to like any other.
using Context = context_internal::ContextRecord*;

// StackSpan: the memory a context runs on, [base, base + size); it grows down from the top.
struct StackSpan {
  void* base = nullptr;
  std::size_t size = 0;
};

// Transfer: what a switch delivers to the side that resumes: the context that switched away
// (now suspended, resumable through this handle) and the data word it passed.
struct Transfer {
  Context from;
  void* data;
};

// ContextEntry: the function a new context starts in. It must never return: it ends by
// exit_context() (or by switching away and never being resumed). Returning aborts the process
// with a message; an exception escaping it calls std::terminate.
using ContextEntry = void (*)(Transfer);

// OnTopFn: runs on the target's stack right after a switch, before the target resumes; its result
// is what the target's pending jump_context* call returns.
using OnTopFn = Transfer (*)(Transfer);

// kMinContextStackSize: the smallest StackSpan make_context accepts. Real fibers want 16 KiB+.
inline constexpr std::size_t kMinContextStackSize = 4096;

// make_context: prepares a new context on `stack` that will call `entry` on the first switch to
// it. The context's record (128 bytes) takes the top of the stack. Does not switch; any thread.
// Errors: EINVAL for a null entry, a null base, or a span under kMinContextStackSize.
Result<Context> make_context(StackSpan stack, ContextEntry entry) noexcept;

// jump_context: suspends the calling context and resumes `to`, delivering {caller, data} to it.
// Returns when some context switches back to the caller, with what that switch delivered.
// Precondition: `to` is suspended (fresh, or switched away from and not resumed since);
// switching to a running context (another thread's, or the caller itself) aborts with a message.
// Any thread: contexts may migrate between threads, one thread at a time.
inline Transfer jump_context(Context to, void* data = nullptr) noexcept;

// jump_context_last: jump_context for a caller whose very next step is to return: write it as
// the last statement of a function returning void. The compiler then makes it a tail call, and
// the caller's frame is gone before the switch: when something later resumes the caller, it
// returns straight into the caller's caller. That saves the `ret` through the caller's frame,
// which the return predictor gets wrong at every switch between two different call paths. What
// the resuming switch delivers is dropped. Same preconditions as jump_context. (Under ASan, where
// the resumed side must finish the sanitizer's switch, it is a plain jump_context.)
inline void jump_context_last(Context to, void* data = nullptr) noexcept;

// jump_context_inline: jump_context compiled into the caller as an asm statement instead of a
// call into the assembly. The compiler is told that every register but rsp, rbp and rbx is
// clobbered, so it saves only what is live at the call site; and the FP control words (MXCSR
// and the x87 control word) are not carried: a context it suspends runs on, once resumed, with
// those of the context that resumed it, as after a plain function call. About a third of
// jump_context's cost where little is live (docs/context.md, "The inline switch"); but a switch
// inside a function that then returns to its caller pays for that return's misprediction,
// which jump_context_last avoids. Use it where switches are hot, in the loop that switches, and
// no context changes the rounding mode or exception masks (fesetround, feenableexcept). Either
// switch resumes a context the other suspended, and jump_context_ontop and exit_context target
// either. Same preconditions as jump_context. With GCC, a function built for AVX-512 only by a
// target attribute must not call it (GCC cannot be told that xmm16-31 are clobbered outside
// such a translation unit). x86-64 System V (Linux) with the asm backend; elsewhere it is
// jump_context.
[[gnu::always_inline]] inline Transfer jump_context_inline(Context to,
                                                           void* data = nullptr) noexcept;

// jump_context_ontop: as jump_context, but once the caller is suspended, fn({caller, data}) runs
// on `to`'s stack, and `to` resumes with fn's result. The way to park: fn publishes the caller's
// handle (or unlocks the lock guarding it) after the caller can no longer be running.
inline Transfer jump_context_ontop(Context to, void* data, OnTopFn fn) noexcept;

// exit_context: the last switch of a context that has finished: like jump_context_ontop, but the
// caller is never resumed; its sanitizer state is released before fn runs, so fn may free the
// caller's stack (Transfer::from names it; discard it, never resume it).
[[noreturn]] void exit_context(Context to, void* data, OnTopFn fn) noexcept;

// discard_context: releases the sanitizer state of a context that will never run again (fresh,
// or suspended for good) so that its stack can be reused. The handle is dead afterwards.
void discard_context(Context context) noexcept;

// current_context: the running context of the calling thread (its own record if no weft context
// is running). Valid to pass to other contexts, which may switch back to it once it is suspended.
Context current_context() noexcept;

// prefetch_context: a hint that `context` will be resumed soon. Asks the CPU for its record and
// the stack lines just under it (for writing), where a shallow context's frames are: a context
// suspended for long is out of the caches, and resuming it otherwise waits on those misses one
// by one. Never faults, even on a dead handle; no effect on behaviour. Any thread.
[[gnu::always_inline]] inline void prefetch_context(Context context) noexcept {
  // The record's two lines, and 14 below it.
  context_internal::PrefetchLinesForWrite(reinterpret_cast<std::uintptr_t>(context), -14, 2);
}

// set_context_name / context_name: a label (truncated to 31 bytes) shown in diagnostics such as
// the stack-overflow message. Any thread, but not concurrently with another set on the same one.
void set_context_name(Context context, std::string_view name) noexcept;
std::string_view context_name(Context context) noexcept;

}  // namespace weft

#include "weft/context/internal/context_inl.h"  // IWYU pragma: export

#endif  // WEFT_CONTEXT_CONTEXT_H_
