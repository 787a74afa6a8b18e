// base/cpu_relax.h: CpuRelax, the spin-wait hint (x86 pause, arm64 yield): tells the core a
// spin loop is running, which saves power and lets a sibling hyperthread run.

#ifndef WEFT_BASE_CPU_RELAX_H_
#define WEFT_BASE_CPU_RELAX_H_

namespace weft {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace weft

#endif  // WEFT_BASE_CPU_RELAX_H_
