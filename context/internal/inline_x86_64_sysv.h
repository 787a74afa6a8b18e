// context/internal/inline_x86_64_sysv.h: the raw inline switch for x86-64 SysV (behind
// jump_context_inline in context/context.h). The switch is an asm statement in its caller, not a
// call: it tells the compiler that every register but rsp, rbp and rbx is clobbered, so the
// compiler saves around it only the values that are live there, usually none or one or two, instead
// of the six callee-saved registers and two FP control words the out-of-line switch always saves.
// That and the control words (stmxcsr/ldmxcsr and fnstcw/fldcw cost about 3 ns of its 5 here)
// are the difference (docs/context.md, "The inline switch", has the figures). Photon's switch is
// built the same way.
//
// The frame it leaves (frame_x86_64_sysv.h, "inline frame"): the resume address, rbp and rbx
// (the frame pointer, and clang's base pointer, which it uses even across a clobber), below the
// caller's 128-byte red zone, which the compiler may be using in a function that calls
// nothing; its handle carries WEFT_INLINE_TAG. It resumes either kind of frame: an inline one
// here, a full one (a fresh context, or one suspended by weft_context_jump/ontop) through
// weft_context_resume_frame. Both asm switches resume inline frames in turn.
//
// The window between the stack pointer's move and the jump has no CFI: an unwinder that samples
// exactly there (a profiler's signal) sees a wrong frame, as inside the asm switches.

#ifndef WEFT_CONTEXT_INTERNAL_INLINE_X86_64_SYSV_H_
#define WEFT_CONTEXT_INTERNAL_INLINE_X86_64_SYSV_H_

#include "weft/context/internal/frame_x86_64_sysv.h"
#include "weft/context/internal/raw.h"

extern "C" void weft_context_resume_frame() noexcept;

namespace weft::context_internal {

// The frame InlineJump's pushes make: the resume address last (lowest), above it rbp, then rbx,
// then the 128-byte red zone stepped over first.
static_assert(WEFT_INLINE_FRAME_RIP == 0 && WEFT_INLINE_FRAME_RBP == 8 &&
              WEFT_INLINE_FRAME_RBX == 16 && WEFT_INLINE_FRAME_SIZE == 24 + 128);

// InlineJump: weft_context_jump's contract (raw.h), without the FP control words: the resumed
// side runs with the control words the switching thread has.
[[gnu::always_inline]] inline WeftRawTransfer InlineJump(void* to, void** save, void* tag,
                                                         void* data) noexcept {
  // rax:rdx carry {tag, data} across, as the asm switches' return value does; rdi = the target's
  // handle, rsi = where ours goes. The red zone is stepped over first (128 bytes), then rbx, rbp
  // and the resume address are pushed: the handle is rsp + WEFT_INLINE_TAG. An inline target (tag
  // set) is resumed here; a full frame by weft_context_resume_frame, which restores what it
  // saved, all of which this statement clobbers.
  asm volatile(
      "leaq -128(%%rsp), %%rsp\n\t"
      "pushq %%rbx\n\t"
      "pushq %%rbp\n\t"
      "leaq .Lweft_resume%=(%%rip), %%rcx\n\t"
      "pushq %%rcx\n\t"
      "leaq %c[tag](%%rsp), %%rcx\n\t"
      "movq %%rcx, (%%rsi)\n\t"
      "testb %[tag], %%dil\n\t"
      "jz .Lweft_full%=\n\t"
      "movq %c[rip](%%rdi), %%rcx\n\t"
      "movq %c[rbp](%%rdi), %%rbp\n\t"
      "movq %c[rbx](%%rdi), %%rbx\n\t"
      "leaq %c[size](%%rdi), %%rsp\n\t"
      "jmpq *%%rcx\n"
      ".Lweft_full%=:\n\t"
      "movq %%rdi, %%rsp\n\t"
      "jmp weft_context_resume_frame@PLT\n"
      ".Lweft_resume%=:"
      : "+a"(tag), "+d"(data), "+D"(to), "+S"(save)
      // Offsets from the tagged handle in rdi.
      : [tag] "i"(WEFT_INLINE_TAG), [rip] "i"(WEFT_INLINE_FRAME_RIP - WEFT_INLINE_TAG),
        [rbp] "i"(WEFT_INLINE_FRAME_RBP - WEFT_INLINE_TAG),
        [rbx] "i"(WEFT_INLINE_FRAME_RBX - WEFT_INLINE_TAG),
        [size] "i"(WEFT_INLINE_FRAME_SIZE - WEFT_INLINE_TAG)
      : "rcx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",           //
        "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",        //
        "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15",  //
#if defined(__AVX512F__) || defined(__clang__)
        // Clang takes these in any translation unit, GCC only in one built for AVX-512: with
        // GCC, a function built for AVX-512 by a target attribute alone must not switch inline
        // (it could keep values in them across the switch; context.h).
        "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23",  //
        "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31",  //
        "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7",                          //
#endif
        "st", "st(1)", "st(2)", "st(3)", "st(4)", "st(5)", "st(6)", "st(7)",  //
        "mm0", "mm1", "mm2", "mm3", "mm4", "mm5", "mm6", "mm7",               //
        "memory", "cc");
  return WeftRawTransfer{tag, data};
}

}  // namespace weft::context_internal

#endif  // WEFT_CONTEXT_INTERNAL_INLINE_X86_64_SYSV_H_
