// base/internal/asymmetric_fence_linux.cc: HeavyFence on membarrier(2).

#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "weft/base/asymmetric_fence.h"

namespace weft::base_internal {

bool HeavyFenceAvailable() noexcept {
  // Registration is per process and idempotent; a static keeps it to one try. The command is
  // tried once too, so that a seccomp filter that lets the registration through but refuses the
  // command makes this false instead of making HeavyFence spin. A child of fork() inherits the
  // registration with its copy of this static (checked on 6.18); exec drops both.
  static const bool available =
      syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 &&
      syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
  return available;
}

void HeavyFence() noexcept {
#ifdef WEFT_MODEL
  if (ModelAsymmetricFence(/*heavy=*/true)) return;
#endif
  // Once it has worked, the command fails only if the kernel cannot allocate a CPU mask
  // (ENOMEM, with CONFIG_CPUMASK_OFFSTACK), which is transient: retry, as a fence that did not
  // happen must not return.
  while (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) sched_yield();
}

}  // namespace weft::base_internal
