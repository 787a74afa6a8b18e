/* context/internal/asm/jump_x86_64_ms_pe.S: weft's context switch for Windows x64 (Microsoft x64
 * calling convention, PE/COFF, GNU as syntax as MinGW-w64 assembles it).
 *
 * Provides weft_context_jump, weft_context_ontop (see context/internal/raw.h for the contract) and
 * weft_context_trampoline, the first "resume address" of every fresh context (written there by
 * weft_context_make in make_x86_64_ms.cc). The frame is described in frame_x86_64_ms.h.
 *
 * What differs from the SysV variant:
 *   - More callee-saved state: rdi, rsi and xmm6..xmm15 besides rbx, rbp, r12..r15.
 *   - WeftRawTransfer (16 bytes) is returned through a hidden pointer the caller passes in rcx;
 *     the declared arguments shift one register right and the fifth and later are on the stack,
 *     above the caller's 32-byte home space. A suspended context keeps its hidden pointer in its
 *     frame; whoever resumes it writes {tag, data} there and hands the pointer back in rax.
 *   - The TEB's StackBase, StackLimit, DeallocationStack and ExceptionList follow the running
 *     context (frame_x86_64_ms.h says why each).
 *
 * Only the trampoline has unwind data: it is where a fiber's call chain begins, and its frame
 * holds a null return address so that stack walks end there. The switch functions are treated
 * as leaves by unwinders, which is what they look like at every instruction that can fault
 * (none in practice: they touch only the two stacks and the TEB).
 */

#include "../frame_x86_64_ms.h"

    .text

/* WEFT_SAVE_FRAME scratch: pushes the frame below the return address (rsp ends at offset 0, the
 * handle) with rcx as the hidden return pointer. */
.macro WEFT_SAVE_FRAME scratch
    leaq    -WEFT_FRAME_RIP(%rsp), %rsp       /* room for the frame below the return address */
    stmxcsr WEFT_FRAME_MXCSR(%rsp)            /* SSE control/status */
    fnstcw  WEFT_FRAME_X87CW(%rsp)            /* x87 control word */
    movq    %rcx, WEFT_FRAME_RETPTR(%rsp)     /* where our pending call returns its transfer */
    movaps  %xmm6,  WEFT_FRAME_XMM6+0x00(%rsp) /* callee-saved vector registers (aligned) */
    movaps  %xmm7,  WEFT_FRAME_XMM6+0x10(%rsp)
    movaps  %xmm8,  WEFT_FRAME_XMM6+0x20(%rsp)
    movaps  %xmm9,  WEFT_FRAME_XMM6+0x30(%rsp)
    movaps  %xmm10, WEFT_FRAME_XMM6+0x40(%rsp)
    movaps  %xmm11, WEFT_FRAME_XMM6+0x50(%rsp)
    movaps  %xmm12, WEFT_FRAME_XMM6+0x60(%rsp)
    movaps  %xmm13, WEFT_FRAME_XMM6+0x70(%rsp)
    movaps  %xmm14, WEFT_FRAME_XMM6+0x80(%rsp)
    movaps  %xmm15, WEFT_FRAME_XMM6+0x90(%rsp)
    movq    %r12, WEFT_FRAME_R12(%rsp)        /* callee-saved GPRs */
    movq    %r13, WEFT_FRAME_R13(%rsp)
    movq    %r14, WEFT_FRAME_R14(%rsp)
    movq    %r15, WEFT_FRAME_R15(%rsp)
    movq    %rdi, WEFT_FRAME_RDI(%rsp)
    movq    %rsi, WEFT_FRAME_RSI(%rsp)
    movq    %rbx, WEFT_FRAME_RBX(%rsp)
    movq    %rbp, WEFT_FRAME_RBP(%rsp)
    movq    %gs:WEFT_TEB_STACK_BASE, \scratch /* this stack's bounds, as the TEB has them */
    movq    \scratch, WEFT_FRAME_STACK_BASE(%rsp)
    movq    %gs:WEFT_TEB_STACK_LIMIT, \scratch
    movq    \scratch, WEFT_FRAME_STACK_LIMIT(%rsp)
    movq    %gs:WEFT_TEB_DEALLOC_STACK, \scratch
    movq    \scratch, WEFT_FRAME_DEALLOC_STACK(%rsp)
    movq    %gs:WEFT_TEB_EXCEPTION_LIST, \scratch
    movq    \scratch, WEFT_FRAME_EXCEPTION_LIST(%rsp)
.endm

/* WEFT_RESTORE_FRAME scratch: loads the frame at rsp (rsp unchanged; RETPTR and RIP are left for
 * the caller of the macro). */
.macro WEFT_RESTORE_FRAME scratch
    ldmxcsr WEFT_FRAME_MXCSR(%rsp)
    fldcw   WEFT_FRAME_X87CW(%rsp)
    movaps  WEFT_FRAME_XMM6+0x00(%rsp), %xmm6
    movaps  WEFT_FRAME_XMM6+0x10(%rsp), %xmm7
    movaps  WEFT_FRAME_XMM6+0x20(%rsp), %xmm8
    movaps  WEFT_FRAME_XMM6+0x30(%rsp), %xmm9
    movaps  WEFT_FRAME_XMM6+0x40(%rsp), %xmm10
    movaps  WEFT_FRAME_XMM6+0x50(%rsp), %xmm11
    movaps  WEFT_FRAME_XMM6+0x60(%rsp), %xmm12
    movaps  WEFT_FRAME_XMM6+0x70(%rsp), %xmm13
    movaps  WEFT_FRAME_XMM6+0x80(%rsp), %xmm14
    movaps  WEFT_FRAME_XMM6+0x90(%rsp), %xmm15
    movq    WEFT_FRAME_R12(%rsp), %r12
    movq    WEFT_FRAME_R13(%rsp), %r13
    movq    WEFT_FRAME_R14(%rsp), %r14
    movq    WEFT_FRAME_R15(%rsp), %r15
    movq    WEFT_FRAME_RDI(%rsp), %rdi
    movq    WEFT_FRAME_RSI(%rsp), %rsi
    movq    WEFT_FRAME_RBX(%rsp), %rbx
    movq    WEFT_FRAME_RBP(%rsp), %rbp
    movq    WEFT_FRAME_STACK_BASE(%rsp), \scratch  /* the target's stack bounds into the TEB */
    movq    \scratch, %gs:WEFT_TEB_STACK_BASE
    movq    WEFT_FRAME_STACK_LIMIT(%rsp), \scratch
    movq    \scratch, %gs:WEFT_TEB_STACK_LIMIT
    movq    WEFT_FRAME_DEALLOC_STACK(%rsp), \scratch
    movq    \scratch, %gs:WEFT_TEB_DEALLOC_STACK
    movq    WEFT_FRAME_EXCEPTION_LIST(%rsp), \scratch
    movq    \scratch, %gs:WEFT_TEB_EXCEPTION_LIST
.endm

/* WeftRawTransfer weft_context_jump(void* to, void** save, void* tag, void* data):
 *   rcx = hidden return pointer, rdx = to, r8 = save, r9 = tag, [entry rsp + 0x28] = data.     */
    .globl  weft_context_jump
    .def    weft_context_jump; .scl 2; .type 32; .endef
    .p2align 4
weft_context_jump:
    WEFT_SAVE_FRAME %r10
    movq    WEFT_FRAME_SIZE+0x20(%rsp), %r10  /* data: entry rsp + 0x28 (entry rsp = frame + RIP) */
    movq    %rsp, (%r8)                       /* *save = our handle; nothing reads our stack after */

    movq    %rdx, %rsp                        /* switch to the target's stack */
    WEFT_RESTORE_FRAME %r11
    movq    WEFT_FRAME_RETPTR(%rsp), %rax     /* the target's pending call returns through rax */
    movq    %r9, (%rax)                       /* ... the transfer {tag, data} */
    movq    %r10, 8(%rax)
    movq    WEFT_FRAME_RIP(%rsp), %r11        /* resume address (r11 is volatile: free) */
    leaq    WEFT_FRAME_SIZE(%rsp), %rsp       /* pop the frame: rsp is the target's pre-call rsp */
    jmpq    *%r11                             /* resume the target */

/* WeftRawTransfer weft_context_ontop(void* to, void** save, void* tag, void* data,
 *                                    WeftRawOnTop fn, void* arg):
 *   rcx = hidden return pointer, rdx = to, r8 = save, r9 = tag,
 *   [entry rsp + 0x28] = data, [+ 0x30] = fn, [+ 0x38] = arg.                                  */
    .globl  weft_context_ontop
    .def    weft_context_ontop; .scl 2; .type 32; .endef
    .p2align 4
weft_context_ontop:
    WEFT_SAVE_FRAME %r10
    movq    WEFT_FRAME_SIZE+0x20(%rsp), %r10  /* data */
    movq    WEFT_FRAME_SIZE+0x28(%rsp), %r11  /* fn */
    movq    WEFT_FRAME_SIZE+0x30(%rsp), %rax  /* arg */
    movq    %rsp, (%r8)                       /* *save = our handle */

    movq    %rdx, %rsp                        /* switch to the target's stack */
    WEFT_RESTORE_FRAME %rcx
    movq    WEFT_FRAME_RETPTR(%rsp), %rcx     /* fn's hidden return pointer is the target's: fn
                                                 writes the target's transfer and returns it in
                                                 rax, as the target's pending call expects */
    movq    %r9, %rdx                         /* fn arg 1: tag */
    movq    %r10, %r8                         /* fn arg 2: data */
    movq    %rax, %r9                         /* fn arg 3: arg */
    leaq    WEFT_FRAME_RIP(%rsp), %rsp        /* the resume address becomes fn's return address;
                                                 rsp % 16 == 8 as at any function entry, and the
                                                 32 bytes above it are fn's home space (the
                                                 target call's own, or a fresh context's) */
    jmpq    *%r11                             /* tail-call fn on the target's stack */

/* weft_context_trampoline: first resume address of a fresh context. Entered by jmp from
 * weft_context_jump (or by fn's ret after weft_context_ontop) with rsp 16-byte aligned,
 * rax = the transfer slot holding {tag, data}, r12 = the WeftRawEntry, r13 = its arg. Calls
 * entry(tag, data, arg), which never returns.                                                  */
    .globl  weft_context_trampoline
    .def    weft_context_trampoline; .scl 2; .type 32; .endef
    .p2align 4
weft_context_trampoline:
    pushq   $0                                /* a null return address: stack walks end here */
    .seh_proc weft_context_trampoline_body
weft_context_trampoline_body:
    subq    $0x28, %rsp                       /* home space (32) + alignment (8) for the call */
    .seh_stackalloc 0x28
    .seh_endprologue
    movq    (%rax), %rcx                      /* entry arg 1: tag */
    movq    8(%rax), %rdx                     /* entry arg 2: data */
    movq    %r13, %r8                         /* entry arg 3: arg */
    callq   *%r12
    ud2                                       /* entry returned: impossible by contract */
    .seh_endproc
