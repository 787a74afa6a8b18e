// context/internal/make_x86_64_ms.cc: weft_context_make for the Windows x64 asm backend. Writes
// the initial frame (layout in frame_x86_64_ms.h) so that the first switch into the context
// "resumes" into weft_context_trampoline with the entry function in r12, its argument in r13,
// and the first transfer in the slot the frame's RETPTR names.

#include <cstdint>
#include <cstring>

#include "frame_x86_64_ms.h"
#include "weft/context/internal/raw.h"

extern "C" void weft_context_trampoline();

extern "C" void* weft_context_make(void* stack_lo, void* stack_top, WeftRawEntry entry,
                                   void* arg) noexcept {
  using weft::context_internal::X86_64MsFrame;
  // From the 16-byte aligned top down: the transfer slot, the home space, then the frame, so
  // that popping the frame leaves rsp 16-byte aligned for the trampoline's call.
  auto top = reinterpret_cast<std::uintptr_t>(stack_top) & ~std::uintptr_t{15};
  std::uintptr_t transfer = top - WEFT_FRESH_TRANSFER;
  auto* frame =
      reinterpret_cast<X86_64MsFrame*>(transfer - WEFT_FRESH_HOME - sizeof(X86_64MsFrame));
  std::memset(frame, 0, top - reinterpret_cast<std::uintptr_t>(frame));
  // A new context starts with the creating thread's FP control state (rounding mode, exception
  // masks), as a new thread would.
  asm volatile("stmxcsr %0" : "=m"(frame->mxcsr));
  asm volatile("fnstcw %0" : "=m"(frame->x87_cw));
  frame->retptr = transfer;
  frame->r12 = reinterpret_cast<std::uint64_t>(entry);
  frame->r13 = reinterpret_cast<std::uint64_t>(arg);
  frame->rbp = 0;  // frame-pointer walkers stop at a null rbp
  frame->stack_base = top;
  frame->stack_limit = reinterpret_cast<std::uint64_t>(stack_lo);
  frame->deallocation_stack = reinterpret_cast<std::uint64_t>(stack_lo);
  frame->exception_list = ~std::uint64_t{0};  // an empty SEH frame list
  frame->rip = reinterpret_cast<std::uint64_t>(&weft_context_trampoline);
  return frame;
}
