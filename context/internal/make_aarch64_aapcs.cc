// context/internal/make_aarch64_aapcs.cc: weft_context_make for the AArch64 asm backend. Writes
// the initial frame (layout in frame_aarch64_aapcs.h) so that the first switch into the context
// "returns" into weft_context_trampoline with the entry function in x19 and its argument in x20.

#include <cstdint>
#include <cstring>

#include "frame_aarch64_aapcs.h"
#include "weft/context/internal/raw.h"

extern "C" void weft_context_trampoline();

extern "C" void* weft_context_make(void* /*stack_lo*/, void* stack_top, WeftRawEntry entry,
                                   void* arg) noexcept {
  using weft::context_internal::Aarch64AapcsFrame;
  // The frame sits directly below the 16-byte aligned top: popping it leaves sp at the top,
  // aligned as AAPCS64 requires at every instruction that uses sp.
  auto top = reinterpret_cast<std::uintptr_t>(stack_top) & ~std::uintptr_t{15};
  auto* frame = reinterpret_cast<Aarch64AapcsFrame*>(top - sizeof(Aarch64AapcsFrame));
  std::memset(frame, 0, sizeof *frame);
  frame->x[0] = reinterpret_cast<std::uint64_t>(entry);  // x19
  frame->x[1] = reinterpret_cast<std::uint64_t>(arg);    // x20
  frame->x29 = 0;  // frame-pointer walkers stop at a null frame record
  frame->x30 = reinterpret_cast<std::uint64_t>(&weft_context_trampoline);
  // A new context starts with the creating thread's FP control mode, as a new thread would.
  asm volatile("mrs %0, fpcr" : "=r"(frame->fpcr));
  return frame;
}
