/* context/internal/frame_x86_64_sysv.h: the frames weft_context_jump and the inline switch push
 * on x86-64 SysV. Included by jump_x86_64_sysv_elf.S (offsets only), by make_x86_64_sysv.cc
 * (which also checks the struct against the offsets with static_assert) and by
 * inline_x86_64_sysv.h (the inline frame's offsets, in its asm).
 *
 * A suspended context's handle points at offset 0 of this frame, on its own stack:
 *
 *   offset  size  content
 *   ------  ----  -----------------------------------------------------------
 *    0x00     4   MXCSR (SSE control/status: rounding, exception masks)
 *    0x04     2   x87 FPU control word (precision, rounding, exception masks)
 *    0x06     2   (padding)
 *    0x08     8   r12
 *    0x10     8   r13
 *    0x18     8   r14
 *    0x20     8   r15
 *    0x28     8   rbx
 *    0x30     8   rbp
 *    0x38     8   resume address (pushed by the `call` into weft_context_jump)
 *    0x40         = caller's rsp before the call: 16-byte aligned per the ABI
 *
 * These are exactly the SysV callee-saved registers plus the two FP control words the ABI says
 * are callee-saved. The signal mask is not saved (a non-goal: that is what makes it fast).
 *
 * A context suspended by the inline switch (jump_context_inline: inline_x86_64_sysv.h) keeps a
 * smaller frame, and its handle carries WEFT_INLINE_TAG in its low bit (a full frame's
 * handle is 16-byte aligned, so the bit is free). Below the 128-byte red zone of the code it
 * suspended in, which may hold that code's live values:
 *
 *   offset  size  content
 *   ------  ----  -----------------------------------------------------------
 *    0x00     8   resume address (inside the inline switch)
 *    0x08     8   rbp
 *    0x10     8   rbx
 *    0x18   128   the suspended code's red zone, untouched
 *    0x98         = the suspended code's rsp
 *
 * The other registers are the compiler's business: the inline switch tells it that every one
 * but rsp, rbp and rbx is clobbered, so it keeps in them only what it saves itself. rbp and rbx
 * are kept because a compiler may need them across any statement, clobbered or not: the frame
 * pointer, and clang's base pointer in a function with both over-aligned locals and alloca. The FP
 * control words are not in it: a context resumed from an inline frame runs with the resumer's.
 */
#ifndef WEFT_CONTEXT_INTERNAL_FRAME_X86_64_SYSV_H_
#define WEFT_CONTEXT_INTERNAL_FRAME_X86_64_SYSV_H_

#define WEFT_FRAME_MXCSR 0x00
#define WEFT_FRAME_X87CW 0x04
#define WEFT_FRAME_R12 0x08
#define WEFT_FRAME_R13 0x10
#define WEFT_FRAME_R14 0x18
#define WEFT_FRAME_R15 0x20
#define WEFT_FRAME_RBX 0x28
#define WEFT_FRAME_RBP 0x30
#define WEFT_FRAME_RIP 0x38
#define WEFT_FRAME_SIZE 0x40

#define WEFT_INLINE_TAG 1
#define WEFT_INLINE_FRAME_RIP 0x00
#define WEFT_INLINE_FRAME_RBP 0x08
#define WEFT_INLINE_FRAME_RBX 0x10
#define WEFT_INLINE_FRAME_SIZE 0x98

#ifndef __ASSEMBLER__
#include <cstddef>
#include <cstdint>

namespace weft::context_internal {

struct X86_64SysVFrame {
  std::uint32_t mxcsr;
  std::uint16_t x87_cw;
  std::uint16_t pad;
  std::uint64_t r12, r13, r14, r15, rbx, rbp;
  std::uint64_t rip;
};

static_assert(offsetof(X86_64SysVFrame, mxcsr) == WEFT_FRAME_MXCSR);
static_assert(offsetof(X86_64SysVFrame, x87_cw) == WEFT_FRAME_X87CW);
static_assert(offsetof(X86_64SysVFrame, r12) == WEFT_FRAME_R12);
static_assert(offsetof(X86_64SysVFrame, r13) == WEFT_FRAME_R13);
static_assert(offsetof(X86_64SysVFrame, r14) == WEFT_FRAME_R14);
static_assert(offsetof(X86_64SysVFrame, r15) == WEFT_FRAME_R15);
static_assert(offsetof(X86_64SysVFrame, rbx) == WEFT_FRAME_RBX);
static_assert(offsetof(X86_64SysVFrame, rbp) == WEFT_FRAME_RBP);
static_assert(offsetof(X86_64SysVFrame, rip) == WEFT_FRAME_RIP);
static_assert(sizeof(X86_64SysVFrame) == WEFT_FRAME_SIZE);

}  // namespace weft::context_internal
#endif  // __ASSEMBLER__

#endif /* WEFT_CONTEXT_INTERNAL_FRAME_X86_64_SYSV_H_ */
