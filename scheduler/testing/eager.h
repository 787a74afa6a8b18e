// scheduler/testing/eager.h: for weft's own tests, a coroutine that is not a task.
//
// Defines: weft::testing::Eager.

#ifndef WEFT_SCHEDULER_TESTING_EAGER_H_
#define WEFT_SCHEDULER_TESTING_EAGER_H_

#include <coroutine>
#include <exception>

namespace weft::testing {

// Eager: a coroutine run at once, to its end or its first suspension, by whoever calls it (a
// fiber or a plain thread): weft's awaitables block the fiber or thread that runs it, through
// the same steps a task's await takes. Returns nothing; an exception escaping it terminates.
struct Eager {
  struct promise_type {
    Eager get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
};

}  // namespace weft::testing

#endif  // WEFT_SCHEDULER_TESTING_EAGER_H_
