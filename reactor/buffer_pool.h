// reactor/buffer_pool.h: BufferPool, the fixed-size buffers a reactor lends for pooled receives
// (Reactor::recv_pooled): io_uring picks one from a provided buffer ring when data arrives, so a
// receive that waits holds no buffer. A lent buffer goes back with release(id), from any thread;
// the pool outlives its reactor while buffers are out.
//
// Defines: weft::BufferPool, weft::PooledBuffer.
//
//   PooledBuffer got;             // filled by the reactor when a pooled receive completes
//   ... use got.data[0 .. result) ...
//   got.pool->release(got.id);    // on any thread; the reactor lends it again
//
// Returns are a lock-free stack that any thread pushes to and only the owning reactor empties
// whole (Treiber's stack, R. K. Treiber, "Systems Programming: Coping with Parallelism", IBM
// RJ 5118, 1986, with take-all in place of pop: a push's CAS only checks that the head it linked
// to is still the head, so reusing an id is no ABA hazard). A count of references (the owner's
// and one per lent buffer) frees the pool when the last one goes.

#ifndef WEFT_REACTOR_BUFFER_POOL_H_
#define WEFT_REACTOR_BUFFER_POOL_H_

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace weft {

class BufferPool {
 public:
  static constexpr std::uint32_t kNone = 0xffffffffu;

  // Create: count buffers of size bytes each (count <= 2^16, the kernel's buffer ids); null
  // without memory. The caller holds the owner's reference (drop it with Unref).
  static BufferPool* Create(std::uint32_t count, std::uint32_t size) {
    if (count == 0 || count > (1u << 16) || size == 0) return nullptr;
    auto* p = new (std::nothrow) BufferPool(count, size);
    if (p == nullptr) return nullptr;
    // malloc: the kernel maps pages on first touch, so buffers never lent cost no memory.
    p->data_ = static_cast<char*>(std::malloc(std::size_t{count} * size));
    p->next_ = new (std::nothrow) std::atomic<std::uint32_t>[count];
    if (p->data_ == nullptr || p->next_ == nullptr) {
      p->Unref();
      return nullptr;
    }
    return p;
  }

  std::uint32_t count() const { return count_; }
  std::uint32_t buffer_size() const { return size_; }
  char* data(std::uint32_t id) const { return data_ + std::size_t{id} * size_; }

  // release: hands buffer id back (any thread, once per lend). The owner lends it again after
  // its next TakeReturned; a pool whose owner is gone is freed with its last buffer.
  void release(std::uint32_t id) {
    std::uint32_t head = returned_.load(std::memory_order_relaxed);
    do {
      // relaxed: published by the CAS's release below.
      next_[id].store(head, std::memory_order_relaxed);
      // release: the link (and the caller's last use of the buffer) happen before the owner's
      // acquire exchange in TakeReturned, which then lends the buffer to the kernel.
    } while (!returned_.compare_exchange_weak(head, id, std::memory_order_release,
                                              std::memory_order_relaxed));
    Unref();
  }

  // Owner only: Lend notes a buffer handed to a caller (its reference); TakeReturned calls f(id)
  // for each buffer released since the last call.
  void Lend() {
    // relaxed: the owner holds a reference, so the count cannot reach zero meanwhile.
    refs_.fetch_add(1, std::memory_order_relaxed);
  }
  template <typename F>
  void TakeReturned(F f) {
    if (returned_.load(std::memory_order_relaxed) == kNone) return;  // the common case
    // acquire: pairs with release()'s CAS: the links and the callers' writes are visible.
    std::uint32_t id = returned_.exchange(kNone, std::memory_order_acquire);
    while (id != kNone) {
      const std::uint32_t next = next_[id].load(std::memory_order_relaxed);
      f(id);
      id = next;
    }
  }

  // Unref: drops a reference (the owner's, or a lent buffer's in release()).
  void Unref() {
    // acq_rel: the last one frees the pool after every other holder's accesses.
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 private:
  BufferPool(std::uint32_t count, std::uint32_t size) : count_(count), size_(size) {}
  ~BufferPool() {
    std::free(data_);
    delete[] next_;
  }

  const std::uint32_t count_;
  const std::uint32_t size_;
  char* data_ = nullptr;
  std::atomic<std::uint32_t>* next_ = nullptr;  // the returns' links, by id
  std::atomic<std::uint32_t> returned_{kNone};  // the returns' head
  std::atomic<std::uint64_t> refs_{1};
};

// PooledBuffer: where a pooled receive puts the buffer it filled (pool null when none).
struct PooledBuffer {
  BufferPool* pool = nullptr;
  std::uint32_t id = 0;
  char* data = nullptr;
};

}  // namespace weft

#endif  // WEFT_REACTOR_BUFFER_POOL_H_
