/* context/internal/asm/jump_aarch64_aapcs_elf.S: weft's context switch for AArch64, AAPCS64, ELF.
 *
 * Provides weft_context_jump, weft_context_ontop (see context/internal/raw.h for the contract) and
 * weft_context_trampoline, the first resume address of every fresh context (written there by
 * weft_context_make in make_aarch64_aapcs.cc). The frame's layout is in frame_aarch64_aapcs.h.
 *
 * Resuming loads the target's frame and returns to its x30 with x0:x1 = {tag, data}: the
 * WeftRawTransfer return value of the switch that suspended the target, or what the trampoline
 * passes on to the entry function of a fresh context.
 *
 * Branch protection (-mbranch-protection=standard): the two entry points start with `bti c`, the
 * landing pad for calls through a pointer or a PLT. Resuming uses `ret`, which BTI does not
 * check; the on-top call branches to fn through x16, the register a `bti c` pad accepts for `br`.
 * Return addresses are saved as they arrive in x30: the callers sign and authenticate their own
 * (PAC), and these leaf routines never sign anything. Hence the GNU property note at the end,
 * which tells the linker this object is BTI- and PAC-compatible.
 */

#include "../frame_aarch64_aapcs.h"

    .text

/* WEFT_SAVE_FRAME: pushes the callee-saved registers and FPCR below sp, leaving sp at the handle.
 * WEFT_RESTORE_FRAME: loads a frame at sp, leaving sp where it is. Both use x9/x10, which are
 * caller-saved (free at a call boundary). */
.macro WEFT_SAVE_FRAME
    sub     sp, sp, #WEFT_FRAME_SIZE
    stp     d8, d9, [sp, #WEFT_FRAME_D8]
    stp     d10, d11, [sp, #WEFT_FRAME_D10]
    stp     d12, d13, [sp, #WEFT_FRAME_D12]
    stp     d14, d15, [sp, #WEFT_FRAME_D14]
    stp     x19, x20, [sp, #WEFT_FRAME_X19]
    stp     x21, x22, [sp, #WEFT_FRAME_X21]
    stp     x23, x24, [sp, #WEFT_FRAME_X23]
    stp     x25, x26, [sp, #WEFT_FRAME_X25]
    stp     x27, x28, [sp, #WEFT_FRAME_X27]
    stp     x29, x30, [sp, #WEFT_FRAME_X29]   /* x30: where this context resumes */
    mrs     x9, fpcr
    str     x9, [sp, #WEFT_FRAME_FPCR]
.endm

.macro WEFT_RESTORE_FRAME
    ldp     d8, d9, [sp, #WEFT_FRAME_D8]
    ldp     d10, d11, [sp, #WEFT_FRAME_D10]
    ldp     d12, d13, [sp, #WEFT_FRAME_D12]
    ldp     d14, d15, [sp, #WEFT_FRAME_D14]
    ldp     x19, x20, [sp, #WEFT_FRAME_X19]
    ldp     x21, x22, [sp, #WEFT_FRAME_X21]
    ldp     x23, x24, [sp, #WEFT_FRAME_X23]
    ldp     x25, x26, [sp, #WEFT_FRAME_X25]
    ldp     x27, x28, [sp, #WEFT_FRAME_X27]
    ldp     x29, x30, [sp, #WEFT_FRAME_X29]
    ldr     x9, [sp, #WEFT_FRAME_FPCR]
    mrs     x10, fpcr
    cmp     x9, x10
    b.eq    1f                         /* the same mode (nearly always): skip the write */
    msr     fpcr, x9
1:
.endm

/* WeftRawTransfer weft_context_jump(void* to = x0, void** save = x1, void* tag = x2,
 *                                   void* data = x3);                                           */
    .globl  weft_context_jump
    .type   weft_context_jump, %function
    .p2align 4
weft_context_jump:
    .cfi_startproc
    bti     c                          /* landing pad for indirect calls */
    WEFT_SAVE_FRAME
    mov     x11, sp
    str     x11, [x1]                  /* *save = our handle; nothing reads our stack after */
    mov     sp, x0                     /* switch to the target's stack */
    WEFT_RESTORE_FRAME
    add     sp, sp, #WEFT_FRAME_SIZE   /* pop: sp is the target's sp before its call */
    mov     x0, x2                     /* return value, first word: tag */
    mov     x1, x3                     /* return value, second word: data */
    ret                                /* resume the target at its x30 */
    .cfi_endproc
    .size   weft_context_jump, .-weft_context_jump

/* WeftRawTransfer weft_context_ontop(void* to = x0, void** save = x1, void* tag = x2,
 *                                    void* data = x3, WeftRawOnTop fn = x4, void* arg = x5);     */
    .globl  weft_context_ontop
    .type   weft_context_ontop, %function
    .p2align 4
weft_context_ontop:
    .cfi_startproc
    bti     c
    WEFT_SAVE_FRAME
    mov     x11, sp
    str     x11, [x1]                  /* *save = our handle */
    mov     sp, x0                     /* switch to the target's stack */
    WEFT_RESTORE_FRAME                 /* x30 = the target's resume address: fn returns there,
                                          with x0:x1 = its result */
    add     sp, sp, #WEFT_FRAME_SIZE
    mov     x0, x2                     /* fn arg 1: tag */
    mov     x1, x3                     /* fn arg 2: data */
    mov     x2, x5                     /* fn arg 3: arg */
    mov     x16, x4                    /* x16: a `br` that `bti c` accepts */
    br      x16                        /* tail-call fn on the target's stack */
    .cfi_endproc
    .size   weft_context_ontop, .-weft_context_ontop

/* weft_context_trampoline: first resume address of a fresh context, reached by `ret` from
 * weft_context_jump (or by fn's return after weft_context_ontop) with sp == the aligned stack
 * top, x0:x1 = {tag, data}, x19 = the WeftRawEntry, x20 = its arg. Calls entry(tag, data, arg),
 * which never returns. The CFI marks the return address undefined: unwinders stop here.        */
    .globl  weft_context_trampoline
    .hidden weft_context_trampoline
    .type   weft_context_trampoline, %function
    .p2align 4
weft_context_trampoline:
    .cfi_startproc
    .cfi_undefined x30                 /* end of the call chain for unwinders */
    bti     c                          /* harmless when reached by ret; kept for symmetry */
    mov     x2, x20                    /* entry arg 3: arg */
    blr     x19
    brk     #0                         /* entry returned: impossible by contract */
    .cfi_endproc
    .size   weft_context_trampoline, .-weft_context_trampoline

    .section .note.GNU-stack, "", %progbits   /* the stack is not executable */

/* GNU property note: GNU_PROPERTY_AARCH64_FEATURE_1_AND = BTI | PAC (see the header comment). */
    .section .note.gnu.property, "a"
    .p2align 3
    .word   4                          /* n_namesz: "GNU\0" */
    .word   16                         /* n_descsz */
    .word   5                          /* n_type: NT_GNU_PROPERTY_TYPE_0 */
    .asciz  "GNU"
    .word   0xc0000000                 /* pr_type: GNU_PROPERTY_AARCH64_FEATURE_1_AND */
    .word   4                          /* pr_datasz */
    .word   3                          /* BTI (1) | PAC (2) */
    .word   0                          /* padding to 8 bytes */
