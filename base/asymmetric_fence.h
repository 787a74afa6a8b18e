// base/asymmetric_fence.h: a pair of memory fences for a Dekker handshake whose two sides run
// at very different rates. Each side stores its own flag, fences, and loads the other's; the
// fences make sure at least one side sees the other's store. With LightFence on the frequent
// side and HeavyFence on the rare one, the frequent side pays a compiler fence only (no locked
// instruction, no mfence), and the rare side a system call.
//
// HeavyFence is Linux's membarrier(2) with MEMBARRIER_CMD_PRIVATE_EXPEDITED: every CPU that runs
// a thread of this process executes a full memory barrier before it returns, and a thread that
// is not running passed one when it was switched out. So either the frequent side's store was
// visible before HeavyFence returned (the rare side's later load sees it), or that side's fence
// point came after the barrier, and its later load sees the rare side's store. This is the
// pattern of Linux's own sys_membarrier users (liburcu's urcu-memb flavour) and of folly's
// asymmetricHeavyBarrier.
//
// Defines: weft::base_internal::HeavyFenceAvailable, LightFence, HeavyFence.

#ifndef WEFT_BASE_ASYMMETRIC_FENCE_H_
#define WEFT_BASE_ASYMMETRIC_FENCE_H_

#include <atomic>

#include "weft/base/atomic.h"

namespace weft::base_internal {

// HeavyFenceAvailable: true when HeavyFence works in this process. The first call registers
// the process for expedited membarrier; false off Linux, on kernels before 4.14, and where a
// seccomp filter refuses the call. Callers that get false use seq_cst fences on both sides.
bool HeavyFenceAvailable() noexcept;

// LightFence: the frequent side's fence. A compiler fence only: the hardware may still let the
// load pass the store, and HeavyFence on the other side is what forbids the outcome where
// neither sees the other. Valid only while HeavyFenceAvailable() is true. In a model build both
// fences are reported to the checker, which models the pair (docs/model.md).
inline void LightFence() noexcept {
#ifdef WEFT_MODEL
  if (ModelAsymmetricFence(/*heavy=*/false)) return;
#endif
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

// HeavyFence: the rare side's fence, a full memory barrier on every thread of the process. About
// a microsecond (an interrupt to each CPU running one of them). Call only after
// HeavyFenceAvailable() returned true.
void HeavyFence() noexcept;

}  // namespace weft::base_internal

#endif  // WEFT_BASE_ASYMMETRIC_FENCE_H_
