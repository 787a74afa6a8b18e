/* context/internal/frame_aarch64_aapcs.h: the frame weft_context_jump pushes on AArch64 (AAPCS64).
 * Included by jump_aarch64_aapcs_elf.S (offsets only) and by make_aarch64_aapcs.cc (which also
 * checks the struct against the offsets with static_assert).
 *
 * A suspended context's handle points at offset 0 of this frame, on its own stack:
 *
 *   offset  size  content
 *   ------  ----  -----------------------------------------------------------
 *    0x00    64   d8..d15 (the low halves of v8..v15: the callee-saved FP/SIMD state)
 *    0x40    80   x19..x28
 *    0x90     8   x29 (frame pointer)
 *    0x98     8   x30 (link register: the resume address)
 *    0xa0     8   FPCR (rounding mode, flush-to-zero, default NaN, trap enables)
 *    0xa8     8   (padding)
 *    0xb0         = the caller's sp before the call: 16-byte aligned, as sp always is
 *
 * These are the AAPCS64 callee-saved registers (procedure call standard, 6.1.1 and 6.1.2) plus
 * FPCR, so that a context's FP control mode is its own, as on x86-64 (MXCSR and the x87 control
 * word). Restoring FPCR writes it only when it differs: a write can stall the pipeline on some
 * cores. The signal mask is not saved.
 */
#ifndef WEFT_CONTEXT_INTERNAL_FRAME_AARCH64_AAPCS_H_
#define WEFT_CONTEXT_INTERNAL_FRAME_AARCH64_AAPCS_H_

#define WEFT_FRAME_D8 0x00
#define WEFT_FRAME_D10 0x10
#define WEFT_FRAME_D12 0x20
#define WEFT_FRAME_D14 0x30
#define WEFT_FRAME_X19 0x40
#define WEFT_FRAME_X21 0x50
#define WEFT_FRAME_X23 0x60
#define WEFT_FRAME_X25 0x70
#define WEFT_FRAME_X27 0x80
#define WEFT_FRAME_X29 0x90
#define WEFT_FRAME_X30 0x98
#define WEFT_FRAME_FPCR 0xa0
#define WEFT_FRAME_SIZE 0xb0

#ifndef __ASSEMBLER__
#include <cstddef>
#include <cstdint>

namespace weft::context_internal {

struct Aarch64AapcsFrame {
  std::uint64_t d[8];   // d8..d15
  std::uint64_t x[10];  // x19..x28
  std::uint64_t x29;    // frame pointer
  std::uint64_t x30;    // resume address
  std::uint64_t fpcr;
  std::uint64_t pad;
};

static_assert(offsetof(Aarch64AapcsFrame, d) == WEFT_FRAME_D8);
static_assert(offsetof(Aarch64AapcsFrame, x) == WEFT_FRAME_X19);
static_assert(offsetof(Aarch64AapcsFrame, x29) == WEFT_FRAME_X29);
static_assert(offsetof(Aarch64AapcsFrame, x30) == WEFT_FRAME_X30);
static_assert(offsetof(Aarch64AapcsFrame, fpcr) == WEFT_FRAME_FPCR);
static_assert(sizeof(Aarch64AapcsFrame) == WEFT_FRAME_SIZE);
static_assert(WEFT_FRAME_SIZE % 16 == 0, "sp must stay 16-byte aligned");

}  // namespace weft::context_internal
#endif  // __ASSEMBLER__

#endif /* WEFT_CONTEXT_INTERNAL_FRAME_AARCH64_AAPCS_H_ */
