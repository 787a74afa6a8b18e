// context/stack_cache.cc: StackCache, a worker's cache of stacks in front of the shared pool:
// per size class and protection, refilled and spilled half a class at a time under one pool lock.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

#include "internal/stack_layout.h"
#include "weft/context/internal/prefetch.h"
#include "weft/context/stack.h"

namespace weft {

using namespace context_internal;

// ---- StackCache -------------------------------------------------------------------------------

static_assert(kNumClasses == 13, "StackCache::kClasses must match the pool's size classes");

StackCache::StackCache(StackPool& pool, std::size_t per_class)
    : pool_(&pool), per_class_(per_class) {}

StackCache::~StackCache() = default;  // the cached Stacks return themselves to the pool

namespace {

// PrefetchTop: asks for the top of a cached stack's memory, for writing, ahead of its use. The
// next fiber started on it writes its context record and first frames there, and a stack that
// has sat in the cache is usually out of the CPU caches (and the TLB): fetched on demand, that
// miss was most of make_context's time in a profile of W5 (10,000 fibers sleeping at once).
// Called one allocation ahead, so the miss overlaps the current fiber's start. (always_inline
// for the reason PrefetchLinesForWrite gives.)
[[gnu::always_inline]] inline void PrefetchTop(const Stack& stack) {
  constexpr int kLines = 8;  // the context record and the frames down to a fiber's first park
  StackSpan span = stack.span();
  context_internal::PrefetchLinesForWrite(reinterpret_cast<std::uintptr_t>(span.base) + span.size,
                                          -kLines, 0);
}

}  // namespace

Result<Stack> StackCache::allocate(const StackOptions& options) {
  if (!valid_stack_size(options.size)) {
    return std::errc::invalid_argument;
  }
  const int c = ClassIndex(options.size);
  std::vector<Stack>* order[2] = {&guarded_[c], &compact_[c]};
  if (options.protection == StackProtection::kCompact) std::swap(order[0], order[1]);
  const int tries = options.protection == StackProtection::kAuto ? 2 : 1;
  for (int i = 0; i < tries; ++i) {
    if (!order[i]->empty()) {
      Stack stack = std::move(order[i]->back());
      order[i]->pop_back();
      if (!order[i]->empty()) PrefetchTop(order[i]->back());
      return stack;
    }
  }
  // Empty: refill half a class from the pool's cached stacks under one lock.
  std::vector<Stack> batch(std::max<std::size_t>(1, per_class_ / 2));
  std::size_t got = pool_->allocate_cached(options, batch.data(), batch.size());
  if (got == 0) return pool_->allocate(options);
  // The pool hands them out in carving order; pushed in reverse, the next allocates keep it.
  if (got > 1) PrefetchTop(batch[1]);  // the next allocate's (the last pushed below)
  for (std::size_t i = got; i-- > 1;) {
    (batch[i].protection() == StackProtection::kGuarded ? guarded_ : compact_)[c].push_back(
        std::move(batch[i]));
  }
  return std::move(batch[0]);
}

void StackCache::recycle(Stack&& stack) {
  if (!stack || stack.pool_ != pool_) {
    stack.reset();
    return;
  }
  std::vector<Stack>& bin = stack.protection_ == StackProtection::kGuarded
                                ? guarded_[stack.class_index_]
                                : compact_[stack.class_index_];
  if (bin.size() >= per_class_) {
    // Full: spill the older half to the pool under one lock.
    std::size_t half = std::max<std::size_t>(1, per_class_ / 2);
    pool_->release_many(bin.data(), half);
    bin.erase(bin.begin(), bin.begin() + static_cast<std::ptrdiff_t>(half));
  }
  bin.push_back(std::move(stack));
}

std::size_t StackCache::cached() const {
  std::size_t n = 0;
  for (int c = 0; c < kClasses; ++c) n += guarded_[c].size() + compact_[c].size();
  return n;
}

}  // namespace weft
