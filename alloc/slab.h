// alloc/slab.h: a slab allocator for fixed-size objects, owned by one thread (a shard). The owner
// allocates and frees without atomics; any other thread frees by pushing the object onto the
// owner's remote-free list, which the owner takes whole, in one exchange, when its slabs run dry
// (or at a quiescent point it chooses: collect_mt_frees()). Slabs grow on demand; emptied slabs
// are kept up to a limit and then returned to the OS.
//
// Defines: weft::SlabAllocator, weft::SlabOptions, weft::SlabStats, weft::SizeClassShard.
//
// The remote-free list is the thread-free idea of mimalloc (D. Leijen, B. Zorn, L. de Moura,
// "Mimalloc: Free List Sharding in Action", APLAS 2019, section 2.2), kept per allocator rather
// than per page: a Treiber stack (R. K. Treiber, IBM RJ 5118, 1986) that only the owner pops,
// and pops whole with one exchange, so it has no ABA problem.
//
// Naming: entry points other threads may call end in _mt; fields they touch start with x.
//
// Slab layout (kSlabSize = 64 KiB, aligned to its size, so an object's slab is its address with
// the low 16 bits cleared):
//   [SlabHeader | object 0 | object 1 | ... | object capacity-1]
// Invariants, per slab:   used + |local free list| + (capacity - bump) == capacity
//                         objects at index >= bump were never handed out (never touched)
// The fast path allocates from `current_` (pop its free list, else bump) and frees into the
// object's own slab: no search, no atomics.

#ifndef WEFT_ALLOC_SLAB_H_
#define WEFT_ALLOC_SLAB_H_

#include <cstddef>
#include <cstdint>

#include "weft/base/atomic.h"

namespace weft {

struct SlabOptions {
  std::size_t max_empty_slabs = 4;  // emptied slabs kept for reuse; more go back to the OS
};

struct SlabStats {
  std::size_t live_objects = 0;  // allocated and not yet freed (remote frees count once collected)
  std::size_t slabs = 0;         // slabs held, empty ones included
  std::size_t empty_slabs = 0;
  std::size_t slabs_released = 0;  // returned to the OS so far
};

namespace alloc_internal {
struct SlabHeader;
struct FreeObject {
  FreeObject* next;
};
}  // namespace alloc_internal

class SlabAllocator {
 public:
  static constexpr std::size_t kSlabSize = std::size_t{64} << 10;
  static constexpr std::size_t kMaxObjectSize = 8192;

  // SlabAllocator: objects of `object_size` bytes (rounded up to 16; 16 to 8192), owned by the
  // calling thread. Objects are 16-byte aligned. Over 8192 bytes: std::system_error (EINVAL),
  // rather than objects smaller than asked for.
  explicit SlabAllocator(std::size_t object_size, SlabOptions options = {});
  // ~SlabAllocator: owner thread, once no other thread will free into it any more. Returns every
  // slab to the OS; objects still live are reported on stderr (a leak) and their memory freed.
  ~SlabAllocator();
  SlabAllocator(const SlabAllocator&) = delete;
  SlabAllocator& operator=(const SlabAllocator&) = delete;

  // allocate: owner thread. An object, or nullptr when the OS refuses memory (ENOMEM).
  void* allocate() {
    alloc_internal::SlabHeader* s = current_;
    if (s != nullptr) [[likely]] {
      if (void* p = PopLocal(s)) [[likely]]
        return p;
    }
    return allocate_slow();
  }

  // free: owner thread only; p came from this allocator.
  void free(void* p);

  // free_mt: any thread. Returns p to the allocator that owns it (found from p alone), through
  // that allocator's remote-free list. The owner reuses it after its next collect.
  static void free_mt(void* p);

  // collect_mt_frees: owner thread. Takes every remotely freed object back; returns how many.
  std::size_t collect_mt_frees();

  std::size_t object_size() const { return object_size_; }
  SlabStats stats() const;

  // owner_of: the allocator an object belongs to.
  static SlabAllocator* owner_of(const void* p);

 private:
  static void* PopLocal(alloc_internal::SlabHeader* s);
  [[gnu::noinline]] void* allocate_slow();
  alloc_internal::SlabHeader* NewSlab();
  void FreeLocal(alloc_internal::SlabHeader* s, void* p);
  void Unlink(alloc_internal::SlabHeader* s);
  void PushPartial(alloc_internal::SlabHeader* s);
  void Retire(alloc_internal::SlabHeader* s);

  std::size_t object_size_;
  std::uint32_t objects_per_slab_;
  SlabOptions options_;
  alloc_internal::SlabHeader* current_ = nullptr;  // the slab allocations come from
  alloc_internal::SlabHeader* partial_ = nullptr;  // other slabs with free objects (doubly linked)
  alloc_internal::SlabHeader* empty_ = nullptr;    // emptied slabs kept for reuse (singly linked)
  alloc_internal::SlabHeader* all_ = nullptr;      // every slab held (for stats and teardown)
  std::size_t slabs_ = 0;
  std::size_t empty_count_ = 0;
  std::size_t released_ = 0;
  // Touched by other threads: objects freed remotely, pushed by free_mt, taken by the owner.
  alignas(64) atomic<alloc_internal::FreeObject*> xthread_free_{nullptr};
};

// SizeClassShard: one thread's allocators for several object sizes (16 B .. 8 KiB in classes
// roughly 25% apart). allocate(size) picks the class; free(p) finds the owning allocator from p.
class SizeClassShard {
 public:
  explicit SizeClassShard(SlabOptions options = {});
  ~SizeClassShard();
  SizeClassShard(const SizeClassShard&) = delete;
  SizeClassShard& operator=(const SizeClassShard&) = delete;

  // allocate: owner thread. nullptr for size 0 or over 8 KiB (EINVAL), or when memory is refused.
  void* allocate(std::size_t size);
  // free: owner thread. Objects of this shard are freed locally; objects of other shards (or
  // plain SlabAllocators) go to their owner through SlabAllocator::free_mt.
  void free(void* p);
  std::size_t collect_mt_frees();
  SlabStats stats() const;

  static constexpr int kClasses = 32;
  static std::size_t class_size(int c);
  // class_of: the smallest class that holds `size` bytes (size 1 .. 8192).
  static int class_of(std::size_t size);

 private:
  SlabAllocator* classes_[kClasses];
  SlabOptions options_;
};

}  // namespace weft

#endif  // WEFT_ALLOC_SLAB_H_
