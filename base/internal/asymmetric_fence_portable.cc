// base/internal/asymmetric_fence_portable.cc: no process-wide barrier off Linux (Windows has
// FlushProcessWriteBuffers, not used yet): callers use seq_cst fences on both sides.

#include <atomic>

#include "weft/base/asymmetric_fence.h"

namespace weft::base_internal {

bool HeavyFenceAvailable() noexcept { return false; }

void HeavyFence() noexcept {
#ifdef WEFT_MODEL
  if (ModelAsymmetricFence(/*heavy=*/true)) return;
#endif
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace weft::base_internal
