// scheduler/internal/blocking_pool.cc

#include "blocking_pool.h"

#include <exception>
#include <memory>
#include <system_error>

#include "weft/base/fault.h"

namespace weft::scheduler_internal {

BlockingPool::BlockingPool(std::size_t max_threads, std::chrono::milliseconds idle_timeout)
    : max_threads_(max_threads == 0 ? 1 : max_threads), idle_timeout_(idle_timeout) {}

BlockingPool::~BlockingPool() {
  std::list<Slot> slots;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
    slots.swap(slots_);
  }
  for (Slot& s : slots) s.thread.join();
}

bool BlockingPool::submit(BlockingTask* task) {
  std::unique_lock<std::mutex> lock(mu_);
  // Join threads that timed out (each set `exited` as its very last step under mu_).
  for (auto it = slots_.begin(); it != slots_.end();) {
    if (it->exited) {
      it->thread.join();
      it = slots_.erase(it);
    } else {
      ++it;
    }
  }
  task->next = nullptr;
  if (tail_ != nullptr) {
    tail_->next = task;
  } else {
    head_ = task;
  }
  tail_ = task;
  ++queued_;
  if (queued_ <= idle_) {
    cv_.notify_one();
    return true;
  }
  if (threads_ < max_threads_) {
    bool added = false;
    try {
      slots_.emplace_back();
      added = true;
      if (fault::Inject(fault::Site::kThread, fault::Kind::kNoThread)) [[unlikely]] {
        // WEFT_FAULTS (base/fault.h)
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
      }
      slots_.back().thread = std::thread([this] { Loop(); });
      ++threads_;
    } catch (const std::exception&) {  // no thread (std::system_error), or no memory for its slot
      if (added) slots_.pop_back();
    }
  }
  if (threads_ == 0) {  // none could start (or none may: max_threads 0): nothing would run it
    head_ = tail_ = nullptr;
    queued_ = 0;
    return false;
  }
  return true;
}

void BlockingPool::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    while (head_ == nullptr && !stop_) {
      ++idle_;
      bool timed_out = cv_.wait_for(lock, idle_timeout_) == std::cv_status::timeout;
      --idle_;
      if (timed_out && head_ == nullptr && !stop_) {
        --threads_;
        for (Slot& s : slots_) {
          if (s.thread.get_id() == std::this_thread::get_id()) s.exited = true;
        }
        return;
      }
    }
    if (head_ == nullptr) return;  // stopping, queue drained
    BlockingTask* t = head_;
    head_ = t->next;
    if (head_ == nullptr) tail_ = nullptr;
    --queued_;
    ++busy_;
    lock.unlock();
    t->run(t);  // t may be gone once run returns
    lock.lock();
    --busy_;
  }
}

std::size_t BlockingPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_;
}

std::size_t BlockingPool::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

}  // namespace weft::scheduler_internal
