// api/c/weft_c_exception_test.cc: a C++ exception never crosses the C ABI: one thrown by a
// callback (a C++ function behind a C pointer) is caught on its fiber and reported as -EIO to
// the joiner and to weft_block_on, and the runtime keeps serving.

#include <cerrno>
#include <stdexcept>

#include "gtest/gtest.h"
#include "weft/api/c/weft.h"

namespace {

void Throws(void*) { throw std::runtime_error("from a callback"); }
void ThrowsAnInt(void*) { throw 42; }
void Counts(void* arg) { ++*static_cast<int*>(arg); }

TEST(CAbiExceptions, AThrowingCallbackIsEioAndTheRuntimeKeepsServing) {
  weft_runtime_t* rt = nullptr;
  ASSERT_EQ(weft_runtime_create(nullptr, &rt), 0);
  EXPECT_EQ(weft_block_on(rt, Throws, nullptr), -EIO);
  weft_fiber_t* f = nullptr;
  ASSERT_EQ(weft_spawn(rt, ThrowsAnInt, nullptr, &f), 0);
  EXPECT_EQ(weft_fiber_join(f, -1), -EIO);
  int n = 0;
  EXPECT_EQ(weft_block_on(rt, Counts, &n), 0);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(weft_runtime_destroy(rt), 0);
}

TEST(CAbiExceptions, DestroyOrBlockOnFromTheRuntimesOwnFiberIsEdeadlk) {
  weft_runtime_t* rt = nullptr;
  ASSERT_EQ(weft_runtime_create(nullptr, &rt), 0);
  struct Args {
    weft_runtime_t* rt;
    int destroy = 0, block_on = 0;
  } args{rt};
  ASSERT_EQ(weft_block_on(
                rt,
                [](void* p) {
                  auto* a = static_cast<Args*>(p);
                  a->destroy = weft_runtime_destroy(a->rt);
                  a->block_on = weft_block_on(a->rt, Counts, nullptr);
                },
                &args),
            0);
  EXPECT_EQ(args.destroy, -EDEADLK);
  EXPECT_EQ(args.block_on, -EDEADLK);
  EXPECT_EQ(weft_runtime_destroy(rt), 0);
}

}  // namespace
