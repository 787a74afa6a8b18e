/* context/internal/frame_x86_64_ms.h: the frame weft_context_jump pushes on Windows x64 (the
 * Microsoft x64 calling convention). Included by jump_x86_64_ms_pe.S (offsets only) and by
 * make_x86_64_ms.cc (which checks the struct against the offsets with static_assert).
 *
 * A suspended context's handle points at offset 0 of this frame, on its own stack:
 *
 *   offset  size  content
 *   ------  ----  -----------------------------------------------------------------------------
 *    0x00     4   MXCSR (SSE control bits are callee-saved on Win64)
 *    0x04     2   x87 FPU control word (callee-saved)
 *    0x06     2   (padding)
 *    0x08     8   where the suspended call returns its WeftRawTransfer: a 16-byte struct is
 *                 returned through a hidden pointer the caller passes in rcx, so the side that
 *                 resumes us writes {tag, data} there and sets rax to it
 *    0x10   160   xmm6 .. xmm15 (callee-saved on Win64; 16-byte aligned)
 *    0xb0     8   r12
 *    0xb8     8   r13
 *    0xc0     8   r14
 *    0xc8     8   r15
 *    0xd0     8   rdi (callee-saved on Win64, unlike SysV)
 *    0xd8     8   rsi (idem)
 *    0xe0     8   rbx
 *    0xe8     8   rbp
 *    0xf0     8   TEB StackBase        (gs:0x08, top of the running stack)
 *    0xf8     8   TEB StackLimit       (gs:0x10, lowest committed address)
 *   0x100     8   TEB DeallocationStack (gs:0x1478, base of the stack's reservation)
 *   0x108     8   TEB ExceptionList    (gs:0x00; see below)
 *   0x110     8   (padding)
 *   0x118     8   resume address (pushed by the `call` into weft_context_jump)
 *   0x120         = caller's rsp before the call: 16-byte aligned per the ABI; above it the
 *                   caller's 32-byte home space, which belongs to the callee (us)
 *
 * The three TEB fields describe "the current stack" to the OS: the unwinder (RtlUnwindEx, which
 * C++ exceptions use under SEH) rejects frames outside [StackLimit, StackBase), and stack probes
 * and the guard-page logic read them too. Each context carries its own. x64 Windows itself does
 * not use ExceptionList (x86's SEH chain), but Wine keeps its own internal handler frames there
 * and, dispatching an exception, calls every one whose address is below the faulting rsp: with
 * the thread's list showing on a fiber stack above the thread's, a C++ throw on a fiber reached
 * Wine's handlers and ended in std::terminate. A fresh context starts with an empty list (~0).
 */
#ifndef WEFT_CONTEXT_INTERNAL_FRAME_X86_64_MS_H_
#define WEFT_CONTEXT_INTERNAL_FRAME_X86_64_MS_H_

#define WEFT_FRAME_MXCSR 0x00
#define WEFT_FRAME_X87CW 0x04
#define WEFT_FRAME_RETPTR 0x08
#define WEFT_FRAME_XMM6 0x10
#define WEFT_FRAME_R12 0xb0
#define WEFT_FRAME_R13 0xb8
#define WEFT_FRAME_R14 0xc0
#define WEFT_FRAME_R15 0xc8
#define WEFT_FRAME_RDI 0xd0
#define WEFT_FRAME_RSI 0xd8
#define WEFT_FRAME_RBX 0xe0
#define WEFT_FRAME_RBP 0xe8
#define WEFT_FRAME_STACK_BASE 0xf0
#define WEFT_FRAME_STACK_LIMIT 0xf8
#define WEFT_FRAME_DEALLOC_STACK 0x100
#define WEFT_FRAME_EXCEPTION_LIST 0x108
#define WEFT_FRAME_RIP 0x118
#define WEFT_FRAME_SIZE 0x120

/* TEB offsets (x64): NT_TIB.StackBase, NT_TIB.StackLimit, TEB.DeallocationStack,
 * NT_TIB.ExceptionList. */
#define WEFT_TEB_STACK_BASE 0x08
#define WEFT_TEB_STACK_LIMIT 0x10
#define WEFT_TEB_DEALLOC_STACK 0x1478
#define WEFT_TEB_EXCEPTION_LIST 0x00

/* A fresh context: above its frame, 32 bytes of home space for the first on-top function, then
 * the 16-byte slot its first WeftRawTransfer is written to (the frame's RETPTR points there). */
#define WEFT_FRESH_HOME 0x20
#define WEFT_FRESH_TRANSFER 0x10

#ifndef __ASSEMBLER__
#include <cstddef>
#include <cstdint>

namespace weft::context_internal {

struct alignas(16) X86_64MsFrame {
  std::uint32_t mxcsr;
  std::uint16_t x87_cw;
  std::uint16_t pad;
  std::uint64_t retptr;
  std::uint64_t xmm[10][2];
  std::uint64_t r12, r13, r14, r15, rdi, rsi, rbx, rbp;
  std::uint64_t stack_base, stack_limit, deallocation_stack;
  std::uint64_t exception_list, pad2;
  std::uint64_t rip;
};

static_assert(offsetof(X86_64MsFrame, mxcsr) == WEFT_FRAME_MXCSR);
static_assert(offsetof(X86_64MsFrame, x87_cw) == WEFT_FRAME_X87CW);
static_assert(offsetof(X86_64MsFrame, retptr) == WEFT_FRAME_RETPTR);
static_assert(offsetof(X86_64MsFrame, xmm) == WEFT_FRAME_XMM6);
static_assert(offsetof(X86_64MsFrame, r12) == WEFT_FRAME_R12);
static_assert(offsetof(X86_64MsFrame, r13) == WEFT_FRAME_R13);
static_assert(offsetof(X86_64MsFrame, r14) == WEFT_FRAME_R14);
static_assert(offsetof(X86_64MsFrame, r15) == WEFT_FRAME_R15);
static_assert(offsetof(X86_64MsFrame, rdi) == WEFT_FRAME_RDI);
static_assert(offsetof(X86_64MsFrame, rsi) == WEFT_FRAME_RSI);
static_assert(offsetof(X86_64MsFrame, rbx) == WEFT_FRAME_RBX);
static_assert(offsetof(X86_64MsFrame, rbp) == WEFT_FRAME_RBP);
static_assert(offsetof(X86_64MsFrame, stack_base) == WEFT_FRAME_STACK_BASE);
static_assert(offsetof(X86_64MsFrame, stack_limit) == WEFT_FRAME_STACK_LIMIT);
static_assert(offsetof(X86_64MsFrame, deallocation_stack) == WEFT_FRAME_DEALLOC_STACK);
static_assert(offsetof(X86_64MsFrame, exception_list) == WEFT_FRAME_EXCEPTION_LIST);
static_assert(offsetof(X86_64MsFrame, rip) == WEFT_FRAME_RIP);
static_assert(sizeof(X86_64MsFrame) == WEFT_FRAME_SIZE);

}  // namespace weft::context_internal
#endif  // __ASSEMBLER__

#endif /* WEFT_CONTEXT_INTERNAL_FRAME_X86_64_MS_H_ */
