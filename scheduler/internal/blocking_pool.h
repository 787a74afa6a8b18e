// scheduler/internal/blocking_pool.h: the threads that run blocking work for a Runtime, so its
// workers never block: call_blocking's functions, and fibers inside a blocking region (which move
// onto one of these threads until they leave it).
//
// Threads start on demand, up to a maximum; a thread idle for `idle_timeout` exits. Tasks beyond
// the maximum queue in FIFO order.

#ifndef WEFT_SCHEDULER_INTERNAL_BLOCKING_POOL_H_
#define WEFT_SCHEDULER_INTERNAL_BLOCKING_POOL_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <list>
#include <mutex>
#include <thread>

namespace weft::scheduler_internal {

// BlockingTask: intrusive; owned by the submitter, alive until run() has been called.
struct BlockingTask {
  void (*run)(BlockingTask* self) = nullptr;
  BlockingTask* next = nullptr;
};

class BlockingPool {
 public:
  explicit BlockingPool(std::size_t max_threads,
                        std::chrono::milliseconds idle_timeout = std::chrono::seconds(10));
  // ~BlockingPool: runs every queued task, then joins the threads.
  ~BlockingPool();
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  // submit: any thread. false (task not queued) only if no thread exists and none can be started.
  bool submit(BlockingTask* task);

  std::size_t threads() const;  // running now
  std::size_t busy() const;     // running a task now

 private:
  void Loop();

  const std::size_t max_threads_;
  const std::chrono::milliseconds idle_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  BlockingTask* head_ = nullptr;  // FIFO of queued tasks
  BlockingTask* tail_ = nullptr;
  std::size_t queued_ = 0;
  std::size_t threads_ = 0;
  std::size_t idle_ = 0;
  std::size_t busy_ = 0;
  bool stop_ = false;
  struct Slot {
    std::thread thread;
    bool exited = false;  // the thread left Loop and touches nothing any more
  };
  std::list<Slot> slots_;  // joined and erased once exited (by the next submit, or ~)
};

}  // namespace weft::scheduler_internal

#endif  // WEFT_SCHEDULER_INTERNAL_BLOCKING_POOL_H_
