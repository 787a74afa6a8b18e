// base/internal/fd_table.h: a process-wide table of one atomic counter per file descriptor,
// grown lazily in chunks that are never freed (so a pointer into it stays valid for good), for
// per-fd state that any thread reads without a lock: the close coordinator's users of an fd, the
// runtime's close epochs.
//
// Defines: weft::base_internal::FdTable.
//
//   FdTable<std::uint64_t, /*kChunkBits=*/12, /*kMaxFd=*/1 << 24> table;  // static storage
//   if (auto* c = table.at(fd, /*make=*/true)) c->fetch_add(1, ...);
//
// Chunks are published with a CAS, so makers race without a lock; a maker that loses frees its
// chunk. fds outside [0, kMaxFd), and an fd whose chunk could not be allocated, have no counter
// (at() returns null): the caller treats them as untracked.

#ifndef WEFT_BASE_INTERNAL_FD_TABLE_H_
#define WEFT_BASE_INTERNAL_FD_TABLE_H_

#include <atomic>
#include <cstddef>
#include <new>

namespace weft::base_internal {

template <typename T, int kChunkBits, int kMaxFd>
class FdTable {
 public:
  static_assert(kMaxFd % (1 << kChunkBits) == 0, "kMaxFd must be a multiple of the chunk size");

  // at: fd's counter, or null when fd is out of range or its chunk does not exist (make false)
  // or could not be made (out of memory).
  std::atomic<T>* at(int fd, bool make) {
    if (fd < 0 || fd >= kMaxFd) return nullptr;
    std::atomic<std::atomic<T>*>& slot = chunks_[fd >> kChunkBits];
    // acquire: a chunk published by another thread's CAS is seen zero-initialised.
    std::atomic<T>* chunk = slot.load(std::memory_order_acquire);
    if (chunk == nullptr) {
      if (!make) return nullptr;
      auto* fresh = new (std::nothrow) std::atomic<T>[kChunkSize]();
      if (fresh == nullptr) return nullptr;
      // acq_rel: release publishes the zeroed chunk; acquire reads a competitor's on failure.
      if (slot.compare_exchange_strong(chunk, fresh, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        chunk = fresh;
      } else {
        delete[] fresh;
      }
    }
    return &chunk[fd & (kChunkSize - 1)];
  }

 private:
  static constexpr int kChunkSize = 1 << kChunkBits;
  std::atomic<std::atomic<T>*> chunks_[kMaxFd / kChunkSize] = {};
};

}  // namespace weft::base_internal

#endif  // WEFT_BASE_INTERNAL_FD_TABLE_H_
