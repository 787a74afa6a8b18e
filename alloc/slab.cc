// alloc/slab.cc: SlabAllocator's slow paths (new slabs, partial and empty lists, remote frees)
// and SizeClassShard. See slab.h for the layout and invariants.

#include "weft/alloc/slab.h"

#ifdef _WIN32
#include <windows.h>
#else
#include <sys/mman.h>
#endif

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <new>
#include <system_error>

#include "weft/base/fault.h"

#if defined(__SANITIZE_ADDRESS__)
#define WEFT_ALLOC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_ALLOC_ASAN 1
#endif
#endif
#ifdef WEFT_ALLOC_ASAN
#include <sanitizer/asan_interface.h>
// Freed objects are poisoned (all but the free-list link), so a use after free through a stale
// pointer is reported by ASan even though the memory stays in the slab.
#define WEFT_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define WEFT_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define WEFT_POISON(p, n) ((void)(p), (void)(n))
#define WEFT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace weft {
namespace alloc_internal {

struct alignas(64) SlabHeader {
  SlabAllocator* owner;
  FreeObject* free;    // objects freed by the owner (or collected from remote frees)
  std::byte* bump;     // next never-used object
  std::byte* end;      // end of the object area
  std::uint32_t used;  // objects handed out and not freed (locally known)
  std::uint32_t object_size;
  SlabHeader* prev;  // partial list
  SlabHeader* next;
  SlabHeader* all_prev;  // every slab of the allocator, for stats and teardown
  SlabHeader* all_next;
  bool in_partial;
  bool in_empty;
};
static_assert(sizeof(SlabHeader) <= 128);

}  // namespace alloc_internal

using alloc_internal::FreeObject;
using alloc_internal::SlabHeader;

namespace {

constexpr std::size_t kHeaderBytes = (sizeof(SlabHeader) + 63) & ~std::size_t{63};

SlabHeader* SlabOf(const void* p) {
  return reinterpret_cast<SlabHeader*>(reinterpret_cast<std::uintptr_t>(p) &
                                       ~(SlabAllocator::kSlabSize - 1));
}

// MapAlignedSlab / UnmapSlab: kSlabSize bytes aligned to kSlabSize, from the OS.
#ifdef _WIN32
// VirtualAlloc hands out regions aligned to the allocation granularity, 64 KiB on every Windows
// that runs x64: exactly a slab.
static_assert(SlabAllocator::kSlabSize == std::size_t{64} << 10);
void* MapAlignedSlab() {
  void* p =
      VirtualAlloc(nullptr, SlabAllocator::kSlabSize, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
  if (p != nullptr && (reinterpret_cast<std::uintptr_t>(p) & (SlabAllocator::kSlabSize - 1)) != 0) {
    VirtualFree(p, 0, MEM_RELEASE);  // a granularity other than 64 KiB: not supported
    return nullptr;
  }
  return p;
}
void UnmapSlab(void* p) { VirtualFree(p, 0, MEM_RELEASE); }
#else
// Over-map twice the size, then trim the ends.
void* MapAlignedSlab() {
  const std::size_t size = SlabAllocator::kSlabSize;
  void* raw = mmap(nullptr, 2 * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  auto start = reinterpret_cast<std::uintptr_t>(raw);
  auto aligned = (start + size - 1) & ~(size - 1);
  if (aligned > start) munmap(raw, aligned - start);
  std::uintptr_t tail = aligned + size;
  std::uintptr_t raw_end = start + 2 * size;
  if (raw_end > tail) munmap(reinterpret_cast<void*>(tail), raw_end - tail);
  return reinterpret_cast<void*>(aligned);
}
void UnmapSlab(void* p) { munmap(p, SlabAllocator::kSlabSize); }
#endif

}  // namespace

SlabAllocator::SlabAllocator(std::size_t object_size, SlabOptions options) : options_(options) {
  if (object_size < 16) object_size = 16;
  if (object_size > kMaxObjectSize) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "weft: a SlabAllocator's objects are at most 8192 bytes");
  }
  object_size_ = (object_size + 15) & ~std::size_t{15};
  objects_per_slab_ = static_cast<std::uint32_t>((kSlabSize - kHeaderBytes) / object_size_);
}

SlabAllocator::~SlabAllocator() {
  collect_mt_frees();
  std::size_t leaked = 0;
  for (SlabHeader* it = all_; it != nullptr;) {
    SlabHeader* next = it->all_next;
    leaked += it->used;
    WEFT_UNPOISON(it, kSlabSize);
    UnmapSlab(it);
    it = next;
  }
  if (leaked != 0) {
    std::fprintf(stderr, "weft: SlabAllocator(%zu bytes) destroyed with %zu live objects\n",
                 object_size_, leaked);
  }
}

void* SlabAllocator::PopLocal(SlabHeader* s) {
  if (FreeObject* f = s->free) {
    s->free = f->next;
    ++s->used;
    WEFT_UNPOISON(f, s->object_size);
    return f;
  }
  if (s->bump != s->end) {
    void* p = s->bump;
    s->bump += s->object_size;
    ++s->used;
    WEFT_UNPOISON(p, s->object_size);
    return p;
  }
  return nullptr;
}

SlabHeader* SlabAllocator::NewSlab() {
  if (empty_ != nullptr) {
    SlabHeader* s = empty_;
    empty_ = s->next;
    s->in_empty = false;
    --empty_count_;
    return s;  // used == 0: its free list and bump hold every object
  }
  if (fault::Inject(fault::Site::kSlab, fault::Kind::kNoMemory)) [[unlikely]] {
    return nullptr;  // WEFT_FAULTS (base/fault.h)
  }
  void* memory = MapAlignedSlab();
  if (memory == nullptr) return nullptr;
  auto* s = new (memory) SlabHeader{};
  s->owner = this;
  s->object_size = static_cast<std::uint32_t>(object_size_);
  s->bump = static_cast<std::byte*>(memory) + kHeaderBytes;
  s->end = s->bump + std::size_t{objects_per_slab_} * object_size_;
  WEFT_POISON(s->bump, s->end - s->bump);
  s->all_next = all_;
  if (all_ != nullptr) all_->all_prev = s;
  all_ = s;
  ++slabs_;
  return s;
}

void* SlabAllocator::allocate_slow() {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (current_ != nullptr) {
      if (void* p = PopLocal(current_)) return p;
    }
    // current_ is full: it leaves every list until a free makes it partial again.
    if (partial_ != nullptr) {
      SlabHeader* s = partial_;
      Unlink(s);
      current_ = s;
      return PopLocal(s);
    }
    // Before growing, take back what other threads freed (it may refill current_ or partial_).
    if (attempt == 0 && collect_mt_frees() != 0) continue;
    break;
  }
  SlabHeader* s = NewSlab();
  if (s == nullptr) return nullptr;
  current_ = s;
  return PopLocal(s);
}

void SlabAllocator::free(void* p) {
  if (p == nullptr) return;
  SlabHeader* s = SlabOf(p);
  if (s->owner != this) {  // not ours after all: hand it to its owner
    free_mt(p);
    return;
  }
  FreeLocal(s, p);
}

void SlabAllocator::FreeLocal(SlabHeader* s, void* p) {
  auto* f = static_cast<FreeObject*>(p);
  f->next = s->free;
  s->free = f;
  WEFT_POISON(reinterpret_cast<std::byte*>(p) + sizeof(FreeObject),
              s->object_size - sizeof(FreeObject));
  --s->used;
  if (s == current_) return;
  if (s->used == 0) {
    Retire(s);
  } else if (!s->in_partial) {
    PushPartial(s);  // was full
  }
}

void SlabAllocator::free_mt(void* p) {
  if (p == nullptr) return;
  SlabAllocator* owner = SlabOf(p)->owner;
  auto* f = static_cast<FreeObject*>(p);
  // relaxed: only seeds the CAS.
  FreeObject* head = owner->xthread_free_.load(std::memory_order_relaxed);
  do {
    f->next = head;
    // release: our last uses of the object, and the link, happen before the owner reuses it
    // (it takes the list with an acquire exchange). relaxed on failure: retry with the new head.
  } while (!owner->xthread_free_.compare_exchange_weak(head, f, std::memory_order_release,
                                                       std::memory_order_relaxed));
}

std::size_t SlabAllocator::collect_mt_frees() {
  // acquire: pairs with every free_mt's release; one exchange takes the whole list, so no
  // element is ever popped singly (no ABA).
  FreeObject* list = xthread_free_.exchange(nullptr, std::memory_order_acquire);
  std::size_t n = 0;
  while (list != nullptr) {
    FreeObject* next = list->next;
    FreeLocal(SlabOf(list), list);
    list = next;
    ++n;
  }
  return n;
}

void SlabAllocator::PushPartial(SlabHeader* s) {
  s->prev = nullptr;
  s->next = partial_;
  if (partial_ != nullptr) partial_->prev = s;
  partial_ = s;
  s->in_partial = true;
}

void SlabAllocator::Unlink(SlabHeader* s) {
  if (!s->in_partial) return;
  if (s->prev != nullptr) s->prev->next = s->next;
  if (s->next != nullptr) s->next->prev = s->prev;
  if (partial_ == s) partial_ = s->next;
  s->prev = s->next = nullptr;
  s->in_partial = false;
}

void SlabAllocator::Retire(SlabHeader* s) {
  Unlink(s);
  if (empty_count_ < options_.max_empty_slabs) {
    s->next = empty_;
    empty_ = s;
    s->in_empty = true;
    ++empty_count_;
    return;
  }
  // Back to the OS: unlink from the all-slabs list first.
  if (s->all_prev != nullptr) s->all_prev->all_next = s->all_next;
  if (s->all_next != nullptr) s->all_next->all_prev = s->all_prev;
  if (all_ == s) all_ = s->all_next;
  --slabs_;
  ++released_;
  WEFT_UNPOISON(s, kSlabSize);
  UnmapSlab(s);
}

SlabStats SlabAllocator::stats() const {
  SlabStats st;
  for (SlabHeader* it = all_; it != nullptr; it = it->all_next) {
    st.live_objects += it->used;
    ++st.slabs;
    if (it->in_empty) ++st.empty_slabs;
  }
  st.slabs_released = released_;
  return st;
}

SlabAllocator* SlabAllocator::owner_of(const void* p) { return SlabOf(p)->owner; }

// ---- SizeClassShard -----------------------------------------------------------------------------

std::size_t SizeClassShard::class_size(int c) {
  // 16..128 in steps of 16 (classes 0-7), then four classes per doubling up to 8192.
  if (c < 8) return 16 * static_cast<std::size_t>(c + 1);
  int group = (c - 8) / 4;     // 0: 128..256, 1: 256..512, ...
  int step = (c - 8) % 4 + 1;  // 1..4
  std::size_t base = std::size_t{128} << group;
  return base + base / 4 * static_cast<std::size_t>(step);
}

SizeClassShard::SizeClassShard(SlabOptions options) : options_(options) {
  for (SlabAllocator*& a : classes_) a = nullptr;
}

SizeClassShard::~SizeClassShard() {
  for (SlabAllocator* a : classes_) delete a;
}

int SizeClassShard::class_of(std::size_t size) {
  if (size <= 128) return size == 0 ? 0 : static_cast<int>((size - 1) / 16);
  // size in (128 << group, 256 << group]: (size - 1) >> 7 has group + 1 bits. (A loop over the
  // groups took 24 instructions a call at W8's sizes, two calls a task spawn.)
  const int group = static_cast<int>(std::bit_width((size - 1) >> 7)) - 1;
  const std::size_t quarter = std::size_t{32} << group;  // a class's step: a quarter of its base
  const std::size_t base = 4 * quarter;
  return 8 + 4 * group + static_cast<int>((size - base - 1) / quarter);
}

void* SizeClassShard::allocate(std::size_t size) {
  if (size == 0 || size > SlabAllocator::kMaxObjectSize) return nullptr;
  const int c = class_of(size);
  if (classes_[c] == nullptr) {
    classes_[c] = new (std::nothrow) SlabAllocator(class_size(c), options_);
    if (classes_[c] == nullptr) return nullptr;
  }
  return classes_[c]->allocate();
}

void SizeClassShard::free(void* p) {
  if (p == nullptr) return;
  SlabAllocator* owner = SlabAllocator::owner_of(p);
  if (owner == classes_[class_of(owner->object_size())]) {
    owner->free(p);
  } else {
    SlabAllocator::free_mt(p);  // another thread's: never touch its lists from here
  }
}

std::size_t SizeClassShard::collect_mt_frees() {
  std::size_t n = 0;
  for (SlabAllocator* a : classes_) {
    if (a != nullptr) n += a->collect_mt_frees();
  }
  return n;
}

SlabStats SizeClassShard::stats() const {
  SlabStats total;
  for (SlabAllocator* a : classes_) {
    if (a == nullptr) continue;
    SlabStats s = a->stats();
    total.live_objects += s.live_objects;
    total.slabs += s.slabs;
    total.empty_slabs += s.empty_slabs;
    total.slabs_released += s.slabs_released;
  }
  return total;
}

}  // namespace weft
