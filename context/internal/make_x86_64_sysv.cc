// context/internal/make_x86_64_sysv.cc: weft_context_make for the x86-64 SysV asm backend. Writes
// the initial frame (layout in frame_x86_64_sysv.h) so that the first switch into the context
// "resumes" into weft_context_trampoline with the entry function in r12 and its argument in r13.

#include <cstdint>
#include <cstring>

#include "frame_x86_64_sysv.h"
#include "weft/context/internal/raw.h"

extern "C" void weft_context_trampoline();

extern "C" void* weft_context_make(void* /*stack_lo*/, void* stack_top, WeftRawEntry entry,
                                   void* arg) noexcept {
  using weft::context_internal::X86_64SysVFrame;
  // The frame sits directly below the 16-byte aligned top, so that popping it (64 bytes) leaves
  // rsp aligned for the trampoline's call, as the ABI wants before a call.
  auto top = reinterpret_cast<std::uintptr_t>(stack_top) & ~std::uintptr_t{15};
  auto* frame = reinterpret_cast<X86_64SysVFrame*>(top - sizeof(X86_64SysVFrame));
  std::memset(frame, 0, sizeof *frame);
  // A new context starts with the creating thread's FP control state (rounding mode, exception
  // masks), as a new thread would.
  asm volatile("stmxcsr %0" : "=m"(frame->mxcsr));
  asm volatile("fnstcw %0" : "=m"(frame->x87_cw));
  frame->r12 = reinterpret_cast<std::uint64_t>(entry);
  frame->r13 = reinterpret_cast<std::uint64_t>(arg);
  frame->rbp = 0;  // frame-pointer walkers stop at a null rbp
  frame->rip = reinterpret_cast<std::uint64_t>(&weft_context_trampoline);
  return frame;
}
