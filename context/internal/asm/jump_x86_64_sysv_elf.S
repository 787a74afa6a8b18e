/* context/internal/asm/jump_x86_64_sysv_elf.S: weft's context switch for x86-64, System V ABI, ELF.
 *
 * Provides weft_context_jump, weft_context_ontop (see context/internal/raw.h for the contract),
 * weft_context_resume_frame (for the inline switch) and weft_context_trampoline, the first
 * "resume address" of every fresh context (written there by weft_context_make in
 * make_x86_64_sysv.cc).
 *
 * Frame pushed on the suspending stack (offsets from context/internal/frame_x86_64_sysv.h):
 *
 *     high  +-------------------------+ <- caller rsp before `call` (16-byte aligned)
 *           | 0x38 resume address     |    pushed by the call instruction
 *           | 0x30 rbp                |
 *           | 0x28 rbx                |
 *           | 0x20 r15                |
 *           | 0x18 r14                |
 *           | 0x10 r13                |
 *           | 0x08 r12                |
 *           | 0x04 x87 CW | 0x06 pad  |
 *     low   | 0x00 MXCSR              | <- handle stored in *save
 *           +-------------------------+
 *
 * Resuming pops the frame and jumps to the resume address with rax:rdx = {tag, data}, which is
 * the WeftRawTransfer return value of the switch that suspended the target, or (for a fresh
 * context) what the trampoline passes on to the entry function.
 *
 * A target suspended by the inline switch (inline_x86_64_sysv.h) has a handle with
 * WEFT_INLINE_TAG set and the smaller frame of frame_x86_64_sysv.h: both switches here resume
 * it too. The inline switch resumes a full frame through weft_context_resume_frame.
 *
 * CET: entry points start with endbr64 (IBT landing pads). Resuming uses `jmp` to the saved
 * address, not `ret`, so this file is NOT shadow-stack compatible and deliberately carries no
 * .note.gnu.property: the linker then marks the whole program as not SHSTK-ready, which is true.
 */

#include "../frame_x86_64_sysv.h"

    .text

/* WEFT_SAVE_FRAME: pushes the frame of the table above below the return address, leaving rsp at
 * offset 0 (the handle). WEFT_RESTORE_FRAME: loads a frame at rsp, leaving rsp where it is.
 * Both switch paths (jump and on-top) use the pair, so the layout lives in one place. */
.macro WEFT_SAVE_FRAME
    leaq    -WEFT_FRAME_RIP(%rsp), %rsp       /* room for the frame below the return address */
    .cfi_adjust_cfa_offset WEFT_FRAME_RIP
    stmxcsr WEFT_FRAME_MXCSR(%rsp)            /* save SSE control/status */
    fnstcw  WEFT_FRAME_X87CW(%rsp)            /* save x87 control word */
    movq    %r12, WEFT_FRAME_R12(%rsp)        /* save callee-saved GPRs */
    movq    %r13, WEFT_FRAME_R13(%rsp)
    movq    %r14, WEFT_FRAME_R14(%rsp)
    movq    %r15, WEFT_FRAME_R15(%rsp)
    movq    %rbx, WEFT_FRAME_RBX(%rsp)
    movq    %rbp, WEFT_FRAME_RBP(%rsp)
.endm

.macro WEFT_RESTORE_FRAME
    ldmxcsr WEFT_FRAME_MXCSR(%rsp)            /* restore the target's SSE control */
    fldcw   WEFT_FRAME_X87CW(%rsp)            /* restore the target's x87 control word */
    movq    WEFT_FRAME_R12(%rsp), %r12        /* restore callee-saved GPRs */
    movq    WEFT_FRAME_R13(%rsp), %r13
    movq    WEFT_FRAME_R14(%rsp), %r14
    movq    WEFT_FRAME_R15(%rsp), %r15
    movq    WEFT_FRAME_RBX(%rsp), %rbx
    movq    WEFT_FRAME_RBP(%rsp), %rbp
.endm

/* WeftRawTransfer weft_context_jump(void* to    = rdi,
 *                                   void** save = rsi,
 *                                   void* tag   = rdx,
 *                                   void* data  = rcx);                                        */
    .globl  weft_context_jump
    .type   weft_context_jump, @function
    .align  16
weft_context_jump:
    .cfi_startproc
    endbr64                                   /* IBT landing pad */
    WEFT_SAVE_FRAME                           /* push the frame (table above) */
    movq    %rsp, (%rsi)                      /* *save = our handle; nothing reads our stack after */
    movq    %rdx, %rax                        /* return value, first word: tag */
    movq    %rcx, %rdx                        /* return value, second word: data */
    testb   $WEFT_INLINE_TAG, %dil
    jnz     .Ljump_inline                     /* the target has an inline frame */

    movq    %rdi, %rsp                        /* switch to the target's stack */
    WEFT_RESTORE_FRAME                        /* load the target's frame, rsp unchanged */
    movq    WEFT_FRAME_RIP(%rsp), %r8         /* resume address (r8 is caller-saved: free) */
    leaq    WEFT_FRAME_SIZE(%rsp), %rsp       /* pop the frame: rsp is the target's pre-call rsp */
    jmpq    *%r8                              /* resume the target */

.Ljump_inline:                                /* rdi = the frame + WEFT_INLINE_TAG */
    movq    WEFT_INLINE_FRAME_RIP-WEFT_INLINE_TAG(%rdi), %r8
    movq    WEFT_INLINE_FRAME_RBP-WEFT_INLINE_TAG(%rdi), %rbp
    movq    WEFT_INLINE_FRAME_RBX-WEFT_INLINE_TAG(%rdi), %rbx
    leaq    WEFT_INLINE_FRAME_SIZE-WEFT_INLINE_TAG(%rdi), %rsp
    jmpq    *%r8                              /* the rest is clobbered for the inline switch */
    .cfi_endproc
    .size   weft_context_jump, .-weft_context_jump

/* WeftRawTransfer weft_context_ontop(void* to    = rdi,
 *                                    void** save = rsi,
 *                                    void* tag   = rdx,
 *                                    void* data  = rcx,
 *                                    WeftRawOnTop fn = r8,
 *                                    void* arg   = r9);                                        */
    .globl  weft_context_ontop
    .type   weft_context_ontop, @function
    .align  16
weft_context_ontop:
    .cfi_startproc
    endbr64                                   /* IBT landing pad */
    WEFT_SAVE_FRAME                           /* push the frame (table above) */
    movq    %rsp, (%rsi)                      /* *save = our handle */
    testb   $WEFT_INLINE_TAG, %dil
    jnz     .Lontop_inline                    /* the target has an inline frame */

    movq    %rdi, %rsp                        /* switch to the target's stack */
    WEFT_RESTORE_FRAME                        /* load the target's frame, rsp unchanged */
    leaq    WEFT_FRAME_RIP(%rsp), %rsp        /* leave the resume address as fn's return address:
                                                 fn "returns" into the target, rax:rdx = result;
                                                 rsp % 16 == 8 here, as at any function entry */
.Lontop_call:
    movq    %rdx, %rdi                        /* fn arg 1: tag */
    movq    %rcx, %rsi                        /* fn arg 2: data */
    movq    %r9, %rdx                         /* fn arg 3: arg */
    jmpq    *%r8                              /* tail-call fn on the target's stack */

.Lontop_inline:                               /* rdi = the frame + WEFT_INLINE_TAG */
    leaq    -WEFT_INLINE_TAG(%rdi), %rbx      /* the frame, kept across fn (callee-saved); the
                                                 target's rbx comes back after fn */
    movq    WEFT_INLINE_FRAME_RBP(%rbx), %rbp /* the target's, as a full frame gives fn */
    movq    %rbx, %rsp                        /* fn runs below the frame (and the red zone) */
    andq    $-16, %rsp
    leaq    weft_context_inline_return(%rip), %r10
    pushq   %r10                              /* fn returns there: rsp % 16 == 8 at its entry */
    jmp     .Lontop_call
    .cfi_endproc
    .size   weft_context_ontop, .-weft_context_ontop

/* weft_context_inline_return: where fn of weft_context_ontop returns when its target has an
 * inline frame: rbx = the frame, rax:rdx = fn's result, which the target's switch returns.
 * Not a function anyone calls: its CFI ends the call chain for unwinders, as the trampoline's. */
    .hidden weft_context_inline_return
    .type   weft_context_inline_return, @function
    .align  16
weft_context_inline_return:
    .cfi_startproc
    .cfi_undefined rip
    movq    WEFT_INLINE_FRAME_RIP(%rbx), %r8
    movq    WEFT_INLINE_FRAME_RBP(%rbx), %rbp
    leaq    WEFT_INLINE_FRAME_SIZE(%rbx), %rsp
    movq    WEFT_INLINE_FRAME_RBX(%rbx), %rbx /* last: rbx addressed the frame */
    jmpq    *%r8
    .cfi_endproc
    .size   weft_context_inline_return, .-weft_context_inline_return

/* weft_context_resume_frame: resumes a full frame for the inline switch, which jumps here with
 * rsp = the frame's handle and rax:rdx = {tag, data}. Exported: the inline switch is compiled
 * into its callers, in any object. */
    .globl  weft_context_resume_frame
    .type   weft_context_resume_frame, @function
    .align  16
weft_context_resume_frame:
    .cfi_startproc
    .cfi_undefined rip
    endbr64                                   /* IBT landing pad (reached by jmp) */
    WEFT_RESTORE_FRAME                        /* load the target's frame, rsp unchanged */
    movq    WEFT_FRAME_RIP(%rsp), %r8
    leaq    WEFT_FRAME_SIZE(%rsp), %rsp
    jmpq    *%r8
    .cfi_endproc
    .size   weft_context_resume_frame, .-weft_context_resume_frame

/* weft_context_trampoline: first resume address of a fresh context. Entered by jmp from
 * weft_context_jump (or by fn's ret after weft_context_ontop) with rsp == the 16-byte aligned
 * stack top, rax:rdx = {tag, data}, r12 = the WeftRawEntry, r13 = its arg (both placed in the
 * initial frame by weft_context_make). Calls entry(tag, data, arg), which never returns.
 * The CFI marks the return address undefined: unwinders and debuggers stop here.               */
    .globl  weft_context_trampoline
    .hidden weft_context_trampoline
    .type   weft_context_trampoline, @function
    .align  16
weft_context_trampoline:
    .cfi_startproc
    .cfi_undefined rip                        /* end of the call chain for unwinders */
    endbr64                                   /* IBT landing pad (reached by jmp) */
    movq    %rax, %rdi                        /* entry arg 1: tag */
    movq    %rdx, %rsi                        /* entry arg 2: data */
    movq    %r13, %rdx                        /* entry arg 3: arg */
    callq   *%r12                             /* rsp is 16-byte aligned before the call */
    ud2                                       /* entry returned: impossible by contract */
    .cfi_endproc
    .size   weft_context_trampoline, .-weft_context_trampoline

    .section .note.GNU-stack, "", @progbits   /* the stack is not executable */
