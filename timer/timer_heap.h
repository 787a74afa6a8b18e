// timer/timer_heap.h: a 4-ary min-heap of deadlines with intrusive handles. Insert, cancel and
// reschedule in O(log n); peek the next deadline in O(1); pop everything due. Equal deadlines fire
// in insertion order. One owner thread (a worker); not thread-safe.
//
// Defines: weft::TimerClock, weft::TimerNode, weft::TimerHeap.
//
// The node lives in the caller's object (a fiber, an I/O operation): inserting allocates nothing
// unless the heap's array must grow, and a failed growth is reported (ENOMEM), never a crash. The
// array holds (deadline, sequence, node) so sifting compares without touching nodes; each move
// writes the node's index, which is what makes cancel O(log n) without a search.
//
// Layout, for the array a[0..n):
//   children of i are 4i+1 .. 4i+4; parent of i is (i-1)/4
//   heap order:  key(a[parent(i)]) <= key(a[i]), key = (deadline, seq)
//   handles:     a[i].node->index == i for every i;  node not queued  <=>  index == kNotQueued
// A 4-ary heap is half as deep as a binary one and its four children share a cache line or two,
// which is why pop and cancel are cheaper in it despite the extra compares.

#ifndef WEFT_TIMER_TIMER_HEAP_H_
#define WEFT_TIMER_TIMER_HEAP_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "weft/base/result.h"

namespace weft {

using TimerClock = std::chrono::steady_clock;

// TimerNode: embed one in each object that can wait for a deadline. Not copyable while queued.
class TimerNode {
 public:
  static constexpr std::uint32_t kNotQueued = ~std::uint32_t{0};

  TimerNode() = default;
  TimerNode(const TimerNode&) = delete;
  TimerNode& operator=(const TimerNode&) = delete;

  bool queued() const { return index_ != kNotQueued; }
  // deadline: the deadline it is (or was last) queued for.
  TimerClock::time_point deadline() const { return deadline_; }

 private:
  friend class TimerHeap;
  TimerClock::time_point deadline_{};
  std::uint32_t index_ = kNotQueued;
};

class TimerHeap {
 public:
  TimerHeap() = default;
  ~TimerHeap();
  TimerHeap(const TimerHeap&) = delete;
  TimerHeap& operator=(const TimerHeap&) = delete;

  // reserve: room for `capacity` timers without growing. ENOMEM if memory is refused.
  Result<void> reserve(std::size_t capacity);

  // insert: queues `node` for `deadline`. EINVAL if it is already queued (use reschedule);
  // ENOMEM if the array could not grow, EINVAL past 2^31 timers (the node is then not queued).
  Result<void> insert(TimerNode& node, TimerClock::time_point deadline);

  // cancel: removes `node`; false if it was not queued (already fired or cancelled).
  bool cancel(TimerNode& node);

  // reschedule: moves a queued node to a new deadline (it then fires after timers already due at
  // that deadline), or inserts it if not queued. ENOMEM as insert.
  Result<void> reschedule(TimerNode& node, TimerClock::time_point deadline);

  // next_deadline: the earliest deadline, or nullopt when empty.
  std::optional<TimerClock::time_point> next_deadline() const {
    if (size_ == 0) return std::nullopt;
    return entries_[0].node->deadline_;
  }

  // pop_due: removes and returns the earliest node whose deadline is <= now, else nullptr.
  TimerNode* pop_due(TimerClock::time_point now);

  // pop_all_due: calls fn(node) for every node due by `now`, earliest first (ties in insertion
  // order); each is removed before fn runs, so fn may re-insert it. Returns how many fired.
  template <typename Fn>
  std::size_t pop_all_due(TimerClock::time_point now, Fn&& fn) {
    std::size_t fired = 0;
    while (TimerNode* node = pop_due(now)) {
      fn(*node);
      ++fired;
    }
    return fired;
  }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  struct Entry {
    std::int64_t deadline;  // nanoseconds since the clock's epoch
    std::uint64_t seq;      // insertion order, for FIFO ties
    TimerNode* node;
  };
  static bool Before(const Entry& a, const Entry& b) {
    return a.deadline < b.deadline || (a.deadline == b.deadline && a.seq < b.seq);
  }
  Result<void> Grow();
  void Place(std::size_t i, const Entry& e) {
    entries_[i] = e;
    e.node->index_ = static_cast<std::uint32_t>(i);
  }
  // The entry comes as its three words, in registers: passed as a 24-byte Entry it went through
  // memory, and reading it back as one 16-byte load from two 8-byte stores missed store
  // forwarding, so the load waited for every older store to reach the cache (W5: 97% of
  // insert's samples, behind the cold lines a parking fiber had just written).
  void SiftUp(std::size_t i, std::int64_t deadline, std::uint64_t seq, TimerNode* node);
  void SiftDown(std::size_t i, std::int64_t deadline, std::uint64_t seq, TimerNode* node);
  void RemoveAt(std::size_t i);

  Entry* entries_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  std::uint64_t next_seq_ = 0;
};

}  // namespace weft

#endif  // WEFT_TIMER_TIMER_HEAP_H_
