// timer/timer_heap.cc: TimerHeap's sifting and growth. See timer_heap.h for the invariants.

#include "weft/timer/timer_heap.h"

#include <cstdlib>
#include <system_error>

namespace weft {
namespace {

constexpr std::size_t kArity = 4;

std::int64_t Nanos(TimerClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

TimerHeap::~TimerHeap() {
  for (std::size_t i = 0; i < size_; ++i) entries_[i].node->index_ = TimerNode::kNotQueued;
  std::free(entries_);
}

Result<void> TimerHeap::reserve(std::size_t capacity) {
  if (capacity <= capacity_) return {};
  if (capacity >= TimerNode::kNotQueued) return std::errc::invalid_argument;
  void* grown = std::realloc(entries_, capacity * sizeof(Entry));
  if (grown == nullptr) return std::errc::not_enough_memory;
  entries_ = static_cast<Entry*>(grown);
  capacity_ = capacity;
  return {};
}

Result<void> TimerHeap::Grow() { return reserve(capacity_ < 64 ? 64 : capacity_ * 2); }

Result<void> TimerHeap::insert(TimerNode& node, TimerClock::time_point deadline) {
  if (node.queued()) return std::errc::invalid_argument;
  if (size_ == capacity_) {
    if (Result<void> r = Grow(); !r) return r;
  }
  node.deadline_ = deadline;
  SiftUp(size_++, Nanos(deadline), next_seq_++, &node);
  return {};
}

bool TimerHeap::cancel(TimerNode& node) {
  if (!node.queued()) return false;
  RemoveAt(node.index_);
  return true;
}

Result<void> TimerHeap::reschedule(TimerNode& node, TimerClock::time_point deadline) {
  if (!node.queued()) return insert(node, deadline);
  std::size_t i = node.index_;
  node.deadline_ = deadline;
  const Entry e{Nanos(deadline), next_seq_++, &node};
  // The new key is later than every key now in the heap with the same deadline (fresh seq), so
  // the entry moves up only if its deadline got earlier than its parent's.
  if (i > 0 && Before(e, entries_[(i - 1) / kArity])) {
    SiftUp(i, e.deadline, e.seq, e.node);
  } else {
    SiftDown(i, e.deadline, e.seq, e.node);
  }
  return {};
}

TimerNode* TimerHeap::pop_due(TimerClock::time_point now) {
  if (size_ == 0 || entries_[0].deadline > Nanos(now)) return nullptr;
  TimerNode* node = entries_[0].node;
  RemoveAt(0);
  return node;
}

void TimerHeap::RemoveAt(std::size_t i) {
  entries_[i].node->index_ = TimerNode::kNotQueued;
  const Entry last = entries_[--size_];
  if (i == size_) return;  // removed the last entry
  if (i > 0 && Before(last, entries_[(i - 1) / kArity])) {
    SiftUp(i, last.deadline, last.seq, last.node);
  } else {
    SiftDown(i, last.deadline, last.seq, last.node);
  }
}

void TimerHeap::SiftUp(std::size_t i, std::int64_t deadline, std::uint64_t seq, TimerNode* node) {
  const Entry e{deadline, seq, node};
  while (i > 0) {
    std::size_t parent = (i - 1) / kArity;
    if (!Before(e, entries_[parent])) break;
    Place(i, entries_[parent]);
    i = parent;
  }
  Place(i, e);
}

void TimerHeap::SiftDown(std::size_t i, std::int64_t deadline, std::uint64_t seq, TimerNode* node) {
  const Entry e{deadline, seq, node};
  for (;;) {
    std::size_t first = i * kArity + 1;
    if (first >= size_) break;
    std::size_t last = first + kArity < size_ ? first + kArity : size_;
    std::size_t best = first;
    for (std::size_t c = first + 1; c < last; ++c) {
      if (Before(entries_[c], entries_[best])) best = c;
    }
    if (!Before(entries_[best], e)) break;
    Place(i, entries_[best]);
    i = best;
  }
  Place(i, e);
}

}  // namespace weft
