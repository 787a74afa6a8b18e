// sync/channel.h: Go-style channels and select, parking fibers (or blocking threads).
//
// Defines: weft::Channel<T>, weft::SelectCase, weft::SelectResult, weft::select.
//
// Channel<T>: bounded FIFO (capacity >= 1) or unbuffered (capacity 0: a send completes only when
// a receiver takes the value, a rendezvous). T may be move-only. close() is idempotent; values
// already buffered stay receivable after it; then receivers get EPIPE ("closed"). Senders get
// EPIPE once it is closed, and their value is not consumed (still theirs).
//
// A T whose move constructor or assignment throws: the send, receive or select that moved it
// throws that exception, and the channel is as it was (the value stays with its sender, or in
// the buffer); nothing is lost and no lock stays held.
//
// Errors (std::errc): broken_pipe (closed), resource_unavailable_try_again (try_* and not
// ready), timed_out, operation_canceled.
//
// select(cases, options, has_default): exactly one case happens. When several are ready, one is
// picked at random (fair). With has_default and none ready, returns index -1 at once. A close or
// cancellation racing a select yields exactly one outcome.
//
// Destroying a Channel while anything waits on it aborts with a message.

#ifndef WEFT_SYNC_CHANNEL_H_
#define WEFT_SYNC_CHANNEL_H_

#include <cstddef>
#include <new>
#include <optional>
#include <span>
#include <system_error>
#include <type_traits>
#include <utility>

#include "weft/base/result.h"
#include "weft/sync/cancellation.h"
#include "weft/sync/internal/spin_lock.h"
#include "weft/sync/internal/wait_queue.h"

namespace weft {

namespace sync_internal {

// How the type-erased core moves elements.
struct ElementOps {
  std::size_t size;
  std::size_t align;
  void (*move_construct)(void* dst, void* src);
  void (*move_assign)(void* dst, void* src);
  void (*destroy)(void* p);
};

template <typename T>
inline constexpr ElementOps kOpsOf = {
    sizeof(T),
    alignof(T),
    [](void* d, void* s) { new (d) T(std::move(*static_cast<T*>(s))); },
    [](void* d, void* s) { *static_cast<T*>(d) = std::move(*static_cast<T*>(s)); },
    [](void* p) { static_cast<T*>(p)->~T(); },
};

struct SelectGroup;

// A waiting send or receive. For a send, `value` is the sender's object (moved from only when
// taken); for a receive, where the value goes (constructed, or assigned when `assign`).
struct ChannelNode : WaitNode {
  void* value = nullptr;
  bool assign = false;
  SelectGroup* group = nullptr;  // non-null for select cases
  int case_index = 0;
};

class ChannelCore {
 public:
  ChannelCore(std::size_t capacity, const ElementOps* ops);
  ~ChannelCore();
  ChannelCore(const ChannelCore&) = delete;
  ChannelCore& operator=(const ChannelCore&) = delete;

  std::errc send(void* value, bool wait, const WaitOptions& options);
  std::errc recv(void* out, bool assign, bool wait, const WaitOptions& options);
  void close();
  bool closed() const;
  std::size_t size() const;
  std::size_t capacity() const { return capacity_; }
  std::size_t waiters() const;

  // For select (the caller holds lock_ of every channel involved).
  // Returns {} on success, broken_pipe if closed, resource_unavailable_try_again if not ready;
  // *to_notify gets a waiter to notify after unlocking, or null.
  std::errc TrySendLocked(void* value, Waiter** to_notify);
  std::errc TryRecvLocked(void* out, bool assign, Waiter** to_notify);
  void Enqueue(ChannelNode* node, bool is_send);
  void Dequeue(ChannelNode* node, bool is_send);

  mutable SpinLock lock_;  // mutable: const accessors (size, closed) take it too

 private:
  void* Slot(std::size_t i) { return buffer_ + ((head_ + i) % capacity_) * ops_->size; }
  ChannelNode* TakeWaiter(WaitQueue& q);
  void Requeue(WaitQueue& q, ChannelNode* n);

  const ElementOps* ops_;
  std::size_t capacity_;
  unsigned char* buffer_ = nullptr;
  std::size_t head_ ABSL_GUARDED_BY(lock_) = 0;
  std::size_t count_ ABSL_GUARDED_BY(lock_) = 0;
  bool closed_ ABSL_GUARDED_BY(lock_) = false;
  WaitQueue sendq_ ABSL_GUARDED_BY(lock_);
  WaitQueue recvq_ ABSL_GUARDED_BY(lock_);
};

}  // namespace sync_internal

// SelectCase: one send or receive offered to select(). Make them with Channel::send_case and
// Channel::recv_case; they refer to the channel and the value, which must outlive the select.
struct SelectCase {
  sync_internal::ChannelCore* channel;
  bool is_send;
  void* value;  // send: the value (moved from only if this case happens); recv: receives it
};

struct SelectResult {
  int index;  // the case that happened; -1: the default (nothing was ready)
  bool ok;    // false: that case's channel was closed (nothing sent / received)
};

// select: see the file comment. Errors: timed_out, operation_canceled; invalid_argument for no
// cases with neither default, deadline nor token (it would block forever), for more than 64
// cases, and for a case with a null channel or value (a zero-initialised SelectCase).
Result<SelectResult> select(std::span<const SelectCase> cases, const WaitOptions& options = {},
                            bool has_default = false);

template <typename T>
class Channel {
  static_assert(std::is_move_constructible_v<T>, "Channel<T> needs a movable T");

 public:
  // Channel: throws std::length_error when capacity * sizeof(T) does not fit in std::size_t,
  // and std::bad_alloc when the buffer cannot be allocated; nothing else throws here.
  explicit Channel(std::size_t capacity = 0) : core_(capacity, &sync_internal::kOpsOf<T>) {}

  // send: blocks until the value is buffered or taken by a receiver. On error, `value` is
  // untouched.
  Result<void> send(T&& value, const WaitOptions& options = {}) {
    return Wrap(core_.send(&value, true, options));
  }
  Result<void> send(const T& value, const WaitOptions& options = {}) {
    T copy(value);
    return send(std::move(copy), options);
  }
  // try_send: without waiting; EAGAIN when full (or no receiver waits, unbuffered).
  Result<void> try_send(T&& value) { return Wrap(core_.send(&value, false, {})); }

  // recv: blocks until a value arrives; EPIPE once closed and drained.
  Result<T> recv(const WaitOptions& options = {}) { return Receive(true, options); }
  // try_recv: without waiting; EAGAIN when nothing is ready.
  Result<T> try_recv() { return Receive(false, {}); }

  // close: idempotent; wakes every waiter (senders get EPIPE, receivers drain then EPIPE).
  void close() { core_.close(); }
  bool closed() const { return core_.closed(); }
  std::size_t size() const { return core_.size(); }
  std::size_t capacity() const { return core_.capacity(); }
  // waiters: senders and receivers blocked on it now (for dumps and tests).
  std::size_t waiters() const { return core_.waiters(); }

  // send_case / recv_case: for select(). recv_case assigns the value to `out`.
  SelectCase send_case(T& value) { return SelectCase{&core_, true, &value}; }
  SelectCase recv_case(T& out) { return SelectCase{&core_, false, &out}; }

 private:
  static Result<void> Wrap(std::errc e) {
    if (e == std::errc{}) return {};
    return e;
  }
  Result<T> Receive(bool wait, const WaitOptions& options) {
    alignas(T) unsigned char storage[sizeof(T)];
    std::errc e = core_.recv(storage, false, wait, options);
    if (e != std::errc{}) return e;
    T* p = std::launder(reinterpret_cast<T*>(storage));
    Result<T> r(std::move(*p));
    p->~T();
    return r;
  }

  sync_internal::ChannelCore core_;
};

}  // namespace weft

#endif  // WEFT_SYNC_CHANNEL_H_
