// base/cpu_relax.h: CpuRelax, the spin-wait hint (x86 pause, arm64 yield): tells the core a
// spin loop is running, which saves power and lets a sibling hyperthread run.

#ifndef WEFT_BASE_CPU_RELAX_H_
#define WEFT_BASE_CPU_RELAX_H_

#include "weft/base/internal/model_hooks.h"

namespace weft {

// CpuRelax: one iteration of a spin-wait. Under the model checker (base/atomic.h) it lets the
// other model threads run until one changes something.
inline void CpuRelax() {
#ifdef WEFT_MODEL
  if (base_internal::ModelHooks* m = base_internal::ActiveModel()) return m->SpinWait();
#endif
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace weft

#endif  // WEFT_BASE_CPU_RELAX_H_
