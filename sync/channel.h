// sync/channel.h: Go-style channels and select, parking fibers (or blocking threads).
//
// Defines: weft::Channel<T>, weft::SelectCase, weft::SelectResult, weft::select,
// weft::async_select, weft::cancel_case.
//
// Channel<T>: bounded FIFO (capacity >= 1) or unbuffered (capacity 0: a send completes only when
// a receiver takes the value, a rendezvous). T may be move-only. close() is idempotent; values
// already buffered stay receivable after it; then receivers get EPIPE ("closed"). Senders get
// EPIPE once it is closed, and their value is not consumed (still theirs).
//
// A T whose move constructor or assignment throws: the send, receive or select that moved it
// throws that exception, and no lock stays held. A move into or out of the channel's buffer
// that throws leaves the channel as it was (the value stays with its sender, or in the
// buffer). A receive's later move, of the value already taken out of the channel into the
// caller's Result, destroys that value when it throws: it is lost, with the exception.
//
// Errors (std::errc): broken_pipe (closed), resource_unavailable_try_again (try_* and not
// ready), timed_out, operation_canceled.
//
// select(cases, options, has_default): exactly one case happens. When several are ready, one is
// picked at random (fair). With has_default and none ready, returns index -1 at once. A close or
// cancellation racing a select yields exactly one outcome. Besides sends and receives, a case may
// be a Timer or a Ticker (sync/timer.h: ready once its deadline or tick is due) or a
// CancellationToken (cancel_case: ready once the token is cancelled).
//
// Destroying a Channel while anything waits on it aborts with a message.

#ifndef WEFT_SYNC_CHANNEL_H_
#define WEFT_SYNC_CHANNEL_H_

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <iterator>
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
  // For the awaitables (Channel::async_send, async_recv). StartWait: the send (of *node.value)
  // or receive (into node.value) now, else queues `node`, whose waiter is set, and returns
  // operation_in_progress. FinishWait: the outcome of a queued node's wait that ended with r.
  std::errc StartWait(ChannelNode& node, bool is_send);
  std::errc FinishWait(ChannelNode& node, bool is_send, ParkResult r);

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

// Selectable: a select case that is neither a send nor a receive, made ready by time passing or
// by its owner's calls rather than by a counterpart (a Timer, a Ticker: sync/timer.h). select
// takes select_lock_ with the channels' locks (all in address order) to poll it, to watch it
// (queue a node that the owner grants when the case may have become ready sooner than the time
// Watch returned) and to claim it. The virtual calls below are made with select_lock_ held.
class Selectable {
 public:
  SpinLock& select_lock() const { return select_lock_; }
  // select_refused: a case that select() must refuse with invalid_argument (a Ticker whose
  // period is not positive). Set before the object is shared, never changed.
  bool select_refused() const { return select_refused_; }

  // SelectEpoch: a count the owner raises each time the case becomes ready and then stops
  // being ready by the owner's own call (a Timer whose deadline passed, then reset or stopped).
  // SelectReady(epoch, now): ready now, or made ready since SelectEpoch() returned `epoch`.
  virtual std::uint64_t SelectEpoch() const = 0;
  virtual bool SelectReady(std::uint64_t epoch, SyncClock::time_point now) const = 0;
  // SelectTake: the case happens (select claimed it). `out` is the case's value pointer (a
  // Ticker writes the tick's time there), possibly null.
  virtual void SelectTake(void* out, SyncClock::time_point now) = 0;
  // SelectWatch: queues `node` (if it is not queued) for a grant when the case may become ready
  // sooner than the returned time (nullopt: not before a grant). The caller then parks until
  // the node is granted or that time passes, and asks again.
  virtual std::optional<SyncClock::time_point> SelectWatch(WaitNode* node) = 0;
  // SelectUnwatch: takes `node` off the queue if it is queued.
  virtual void SelectUnwatch(WaitNode* node) = 0;

 protected:
  explicit Selectable(bool refused = false) : select_refused_(refused) {}
  ~Selectable() = default;
  Selectable(const Selectable&) = delete;
  Selectable& operator=(const Selectable&) = delete;

  mutable SpinLock select_lock_;

 private:
  const bool select_refused_;
};

}  // namespace sync_internal

// SelectCase: one case offered to select(), exactly one of:
// - a send or receive: `channel`, `is_send` and `value`. Make them with Channel::send_case and
//   Channel::recv_case; they refer to the channel and the value, which must outlive the select.
// - a Timer or Ticker: `timer` (Timer::select_case, Ticker::select_case; a Ticker's case writes
//   the tick's scheduled time to *value when value is not null).
// - a CancellationToken: `token` (cancel_case); ready once the token is cancelled. The token
//   must outlive the select.
// Anything else (a zero-initialised case, a channel without a value, two kinds in one case) is
// refused with invalid_argument.
struct SelectCase {
  sync_internal::ChannelCore* channel = nullptr;
  bool is_send = false;
  // send: the value (moved from only if this case happens); recv: receives it.
  void* value = nullptr;
  sync_internal::Selectable* timer = nullptr;
  const CancellationToken* token = nullptr;
};

// cancel_case: a select case that happens when `token` is cancelled (at once if it is already;
// a default token never is).
inline SelectCase cancel_case(const CancellationToken& token) {
  SelectCase c;
  c.token = &token;
  return c;
}

struct SelectResult {
  int index;  // the case that happened; -1: the default (nothing was ready)
  bool ok;    // false: that case's channel was closed (nothing sent / received); timer, ticker
              // and token cases are always ok
};

// select: see the file comment. Errors: timed_out (options.deadline), operation_canceled
// (options.cancel, or the runtime shutting down); invalid_argument for no cases with neither
// default, deadline nor token (it would block forever), for more than 64 cases, and for a case
// that is not exactly one of the kinds above (a zero-initialised SelectCase, a channel case
// without a value), or a Ticker whose period is not positive. A timer case sees resets and
// stops made while the select waits: it happens when the timer's deadline passes while the
// timer is armed with it (docs/sync.md, "Timer and Ticker").
Result<SelectResult> select(std::span<const SelectCase> cases, const WaitOptions& options = {},
                            bool has_default = false);

namespace sync_internal {

// SelectGroup: one waiting select. fired: -1 while open, then the index of the case that
// happened, or kAborted, claimed by a CAS (reopened only by Requeue). recheck: a token case was
// cancelled already as the select registered on it: look at the cases again.
struct SelectGroup {
  atomic<int> fired{-1};
  atomic<bool> recheck{false};
};

enum class SelectCaseKind : unsigned char { kChannel, kTimer, kToken };

// SelectRun: one select, in steps around its parks (channel.cc tells the algorithm): Start
// validates and polls the cases and either decides or queues the select on every case; then the
// caller parks until ParkDeadline() with Done() as the condition, and calls AfterPark with how
// each park ended until it returns true; Finish takes the select off the cases and gives the
// outcome. select() runs it on the stack, SelectAwaiter in a task's coroutine frame (8.5 KiB,
// for up to kMaxCases cases).
class SelectRun {
 public:
  static constexpr std::size_t kMaxCases = 64;
  std::optional<Result<SelectResult>> Start(std::span<const SelectCase> cases,
                                            const WaitOptions& options, bool has_default,
                                            Waiter* me);
  std::optional<SyncClock::time_point> ParkDeadline();
  bool Done();
  bool AfterPark(ParkResult r);
  Result<SelectResult> Finish();
  const char* what() const { return n_ == 0 ? "select (no cases)" : "select"; }

 private:
  bool Claim(int i);
  bool LookAgain();
  // Decided: a case claimed the select for good (a channel's claim can be undone while its
  // claimer delivers: see channel.cc).
  bool Decided();
  void LockAll();
  void UnlockAll();

  std::span<const SelectCase> cases_;
  WaitOptions options_;
  std::size_t n_ = 0, nothers_ = 0, nlocks_ = 0;
  SelectCaseKind kind_[kMaxCases];
  int others_[kMaxCases];  // the timer and token cases
  SpinLock* locks_[kMaxCases];
  std::uint64_t epoch_[kMaxCases];
  SelectGroup group_;
  ChannelNode nodes_[kMaxCases];  // the channel and timer cases'
  std::optional<SyncClock::time_point> wake_at_;
  CancelRegistration regs_[kMaxCases];
  bool registered_[kMaxCases] = {};
  bool cases_first_ = false;  // the current park ends at wake_at_, before the select's deadline
  bool queued_ = false;
  ParkResult result_ = ParkResult::kWoken;
};

// SelectAwaiter: what async_select returns.
class SelectAwaiter {
 public:
  SelectAwaiter(std::span<const SelectCase> cases, const WaitOptions& options, bool has_default)
      : cases_(cases), options_(options), has_default_(has_default), park_(&Done, this, &Again) {}
  SelectAwaiter(const SelectAwaiter&) = delete;
  SelectAwaiter& operator=(const SelectAwaiter&) = delete;
  bool await_ready();
  bool await_suspend(std::coroutine_handle<> h);
  Result<SelectResult> await_resume();

 private:
  static bool Done(void* self) { return static_cast<SelectAwaiter*>(self)->run_.Done(); }
  static bool Again(void* self, ParkResult r, std::optional<SyncClock::time_point>* deadline);
  std::span<const SelectCase> cases_;
  WaitOptions options_;
  bool has_default_;
  Waiter* me_ = nullptr;
  std::optional<Result<SelectResult>> started_;  // decided at once
  WaitOptions park_options_;
  SelectRun run_;
  AsyncRepark park_;
};

}  // namespace sync_internal

// async_select: select for a task (scheduler/task.h), which waits without blocking its worker:
// `Result<SelectResult> r = co_await async_select(cases)`. The same cases, results and errors;
// the cases and their values must outlive the call (awaited at once, an array in the task's
// frame does). From a coroutine that is not a task, it blocks the fiber or thread that runs it.
inline sync_internal::SelectAwaiter async_select(
    std::span<const SelectCase> cases, const WaitOptions& options = sync_internal::kNoWaitOptions,
    bool has_default = false) {
  return sync_internal::SelectAwaiter(cases, options, has_default);
}

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

  // async_send / async_recv: send and recv for a task (scheduler/task.h), which waits without
  // blocking its worker: `co_await ch.async_send(std::move(v))`, `Result<T> r = co_await
  // ch.async_recv()`. The same results and errors; `value` must live until the send completes
  // (a temporary in the co_await's expression does). From a coroutine that is not a task, they
  // block the fiber or thread that runs it, as send and recv.
  class SendAwaiter;
  class RecvAwaiter;
  SendAwaiter async_send(T&& value, const WaitOptions& options = sync_internal::kNoWaitOptions) {
    return SendAwaiter(core_, &value, options);
  }
  RecvAwaiter async_recv(const WaitOptions& options = sync_internal::kNoWaitOptions) {
    return RecvAwaiter(core_, options);
  }

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

  // Iteration. `for (T v : channel)` (`for (T& v : channel)` for a move-only T: the loop's
  // element is the iterator's) receives until the channel is closed and drained; any other
  // error (operation_canceled: the runtime shutting down) is thrown as std::system_error, so a
  // loop never ends silently on a failure. Channel is an input range (std::ranges::input_range:
  // one pass, each value received once), so ranges algorithms and views such as
  // std::views::take apply. range(options) iterates with a deadline or token and without
  // exceptions: the loop ends at the first error, which the range's error() then tells.
  class Range;
  class iterator {
   public:
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;
    iterator() = default;  // compares equal to the end
    // Move-only: each copy would receive values of its own.
    iterator(iterator&&) = default;
    iterator& operator=(iterator&&) = default;
    iterator(const iterator&) = delete;
    iterator& operator=(const iterator&) = delete;
    T& operator*() const {
      Fetch();
      return *current_;
    }
    T* operator->() const { return &**this; }
    iterator& operator++() {
      Fetch();  // a value skipped without being read is received all the same
      fetched_ = false;
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& it, std::default_sentinel_t) {
      it.Fetch();
      return !it.current_.has_value();
    }

   private:
    friend class Channel;
    iterator(Channel* channel, const WaitOptions* options, std::errc* error)
        : channel_(channel), options_(options), error_(error) {}
    // Fetch: receives the next value, once per step, when it is first needed (comparing with
    // the end or reading it): a loop that stops after n values (std::views::take) receives n.
    // A move of T that throws leaves the step to do again: the next look receives anew.
    void Fetch() const {
      if (fetched_) return;
      current_.reset();
      if (channel_ == nullptr) {  // a default iterator: the end
        fetched_ = true;
        return;
      }
      Result<T> r = channel_->recv(options_ != nullptr ? *options_ : WaitOptions{});
      if (r.ok()) {
        current_.emplace(std::move(*r));  // if this throws, fetched_ stays false
        fetched_ = true;
        return;
      }
      fetched_ = true;
      if (error_ != nullptr) {
        *error_ = r.error() == std::errc::broken_pipe ? std::errc{} : r.error();
      } else if (r.error() != std::errc::broken_pipe) {
        throw std::system_error(r.error_code(), "weft::Channel iteration");
      }
    }
    Channel* channel_ = nullptr;
    const WaitOptions* options_ = nullptr;
    std::errc* error_ = nullptr;  // the range's; null: throw
    mutable bool fetched_ = false;
    mutable std::optional<T> current_;
  };
  iterator begin() { return iterator(this, nullptr, nullptr); }
  std::default_sentinel_t end() const { return {}; }

  class Range {
   public:
    iterator begin() {
      error_ = std::errc{};
      return iterator(channel_, &options_, &error_);
    }
    std::default_sentinel_t end() const { return {}; }
    // error: why the last loop ended: std::errc{} when the channel was closed and drained (or
    // the loop stopped by itself), else timed_out, operation_canceled...
    std::errc error() const { return error_; }

   private:
    friend class Channel;
    Range(Channel* channel, const WaitOptions& options) : channel_(channel), options_(options) {}
    Channel* channel_;
    WaitOptions options_;
    std::errc error_{};
  };
  Range range(const WaitOptions& options = {}) { return Range(this, options); }

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
    // The received value is destroyed on every way out, also when its move below throws (it
    // has left the channel by then: that value is lost, with the exception).
    struct Destroy {
      T* p;
      ~Destroy() { p->~T(); }
    } destroy{p};
    return Result<T>(std::in_place, std::move(*p));
  }

  sync_internal::ChannelCore core_;
};

namespace sync_internal {
// ChannelAwait: what Channel's two awaiters share: the node, queued (if the operation must wait)
// in await_ready, the wait in await_suspend, the outcome in Finish.
class ChannelAwait {
 protected:
  ChannelAwait(ChannelCore& core, void* value, bool is_send, const WaitOptions& options)
      : core_(core), park_(&Done, &node_, options), is_send_(is_send) {
    node_.value = value;
  }
  bool Start() {
    node_.waiter = &current_waiter();
    error_ = core_.StartWait(node_, is_send_);
    return error_ != std::errc::operation_in_progress;
  }
  bool Suspend(std::coroutine_handle<> h) {
    return park_.Begin(*node_.waiter, h, is_send_ ? "Channel send" : "Channel recv", &core_);
  }
  std::errc Finish() {
    if (error_ == std::errc::operation_in_progress) {
      error_ = core_.FinishWait(node_, is_send_, park_.End());
    }
    return error_;
  }

 private:
  static bool Done(void* node) {
    // acquire: pairs with Grant's release; the delivery is visible.
    return static_cast<ChannelNode*>(node)->state.load(std::memory_order_acquire) != kWaiting;
  }
  ChannelCore& core_;
  ChannelNode node_;
  AsyncPark park_;
  bool is_send_;
  std::errc error_{};
};
}  // namespace sync_internal

template <typename T>
class Channel<T>::SendAwaiter : sync_internal::ChannelAwait {
 public:
  bool await_ready() { return Start(); }
  bool await_suspend(std::coroutine_handle<> h) { return Suspend(h); }
  Result<void> await_resume() { return Wrap(Finish()); }

 private:
  friend class Channel;
  SendAwaiter(sync_internal::ChannelCore& core, T* value, const WaitOptions& options)
      : ChannelAwait(core, value, /*is_send=*/true, options) {}
};

template <typename T>
class Channel<T>::RecvAwaiter : sync_internal::ChannelAwait {
 public:
  bool await_ready() { return Start(); }
  bool await_suspend(std::coroutine_handle<> h) { return Suspend(h); }
  Result<T> await_resume() {
    if (std::errc e = Finish(); e != std::errc{}) return e;
    T* p = std::launder(reinterpret_cast<T*>(storage_));
    struct Destroy {  // as Receive: on every way out
      T* p;
      ~Destroy() { p->~T(); }
    } destroy{p};
    return Result<T>(std::in_place, std::move(*p));
  }

 private:
  friend class Channel;
  RecvAwaiter(sync_internal::ChannelCore& core, const WaitOptions& options)
      : ChannelAwait(core, storage_, /*is_send=*/false, options) {}
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace weft

#endif  // WEFT_SYNC_CHANNEL_H_
