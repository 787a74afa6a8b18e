// context/testing/test_fiber.h: helpers for //context's own tests: TestFiber (a pooled stack and
// the context made on it), Finish (the last switch of a test context), ThreadId (the calling
// thread's id, read afresh across switches), ThrowFrom (an exception from deep frames) and
// ExpectMigratesBetweenThreads.

#ifndef WEFT_CONTEXT_TESTING_TEST_FIBER_H_
#define WEFT_CONTEXT_TESTING_TEST_FIBER_H_

#include <atomic>
#include <cstddef>
#include <stdexcept>
#include <thread>
#include <utility>

#include "gtest/gtest.h"
#include "weft/context/context.h"
#include "weft/context/stack.h"

namespace weft::testing {

struct TestFiber {
  Stack stack;
  Context context = nullptr;

  explicit TestFiber(ContextEntry entry, std::size_t size = 64 << 10) {
    Result<Stack> s = StackPool::default_pool().allocate({.size = size});
    EXPECT_TRUE(s.ok());
    stack = std::move(s).value();
    Result<Context> c = make_context(stack.span(), entry);
    EXPECT_TRUE(c.ok());
    context = *c;
  }
};

// Finish: exits the calling context into `to`; the on-top function only releases the caller
// and returns a null `from`.
[[noreturn]] inline void Finish(Context to, void* data = nullptr) {
  exit_context(to, data, [](Transfer t) {
    discard_context(t.from);
    return Transfer{nullptr, t.data};
  });
}

// ThreadId: the calling thread's id, read afresh. std::this_thread::get_id() is pthread_self(),
// which glibc declares __attribute__((const)): the compiler may reuse one call's result across a
// context switch, so a migrated context would see its old thread. The barrier forbids that.
[[gnu::noinline]] inline std::thread::id ThreadId() {
  asm volatile("" ::: "memory");
  return std::this_thread::get_id();
}

// ThrowFrom: throws std::runtime_error(what) from `depth` frames down.
[[gnu::noinline]] inline int ThrowFrom(int depth, const char* what) {
  volatile char pad[64];
  pad[0] = static_cast<char>(depth);
  if (depth == 0) throw std::runtime_error(what);
  return ThrowFrom(depth - 1, what) + pad[0];
}

// ExpectMigratesBetweenThreads: a context started on one thread, suspended, resumed and finished
// on another while the first is still alive (so the two thread ids cannot be the same recycled
// id), every switch made by `Jump`.
template <Transfer (*Jump)(Context, void*)>
void ExpectMigratesBetweenThreads() {
  static std::thread::id first, second;
  TestFiber fiber([](Transfer t) {
    first = ThreadId();
    t = Jump(t.from, nullptr);
    second = ThreadId();
    Finish(t.from);
  });
  Context suspended = nullptr;
  // Not std::latch: libstdc++ 12's atomic wait off Linux (a shared condition-variable pool) lost
  // the wake-up now and then under Wine, as it did in fork-join (docs/platforms.md).
  std::atomic<bool> resumed_elsewhere{false};
  std::thread a([&] {
    suspended = Jump(fiber.context, nullptr).from;
    std::thread b([&] {
      Jump(suspended, nullptr);
      resumed_elsewhere.store(true);
    });
    while (!resumed_elsewhere.load()) std::this_thread::yield();
    b.join();
  });
  a.join();
  EXPECT_NE(first, second);
  EXPECT_NE(first, std::thread::id());
  EXPECT_NE(second, std::thread::id());
}

}  // namespace weft::testing

#endif  // WEFT_CONTEXT_TESTING_TEST_FIBER_H_
