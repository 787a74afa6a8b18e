/* api/c/weft_c_test.c: the C ABI from C11 (built with -Wall -Wextra -Werror -pedantic): the
 * version, a runtime's life, fibers spawned, joined (with a timeout) and detached, sleeps and
 * yields on fibers and threads, and bad input as error codes. Exits 0 when every check holds. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>

#include "weft/api/c/weft.h"

static int failures = 0;
#define CHECK(cond)                                                    \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                      \
    }                                                                  \
  } while (0)

static atomic_int counter;

static void add_one(void* arg) {
  (void)arg;
  atomic_fetch_add(&counter, 1);
}

static void sleeper(void* arg) {
  int64_t ns = *(const int64_t*)arg;
  CHECK(weft_sleep_ns(ns) == 0);
}

struct fan {
  weft_runtime_t* rt;
  int n;
};

/* On a fiber: spawns n fibers, joins them all; also a join that times out, then succeeds. */
static void fan_out(void* arg) {
  struct fan* f = (struct fan*)arg;
  weft_fiber_t* fibers[64];
  for (int i = 0; i < f->n; ++i) CHECK(weft_spawn(f->rt, add_one, NULL, &fibers[i]) == 0);
  for (int i = 0; i < f->n; ++i) CHECK(weft_fiber_join(fibers[i], -1) == 0);
  int64_t long_sleep = 50 * 1000 * 1000;
  weft_fiber_t* slow = NULL;
  CHECK(weft_spawn(f->rt, sleeper, &long_sleep, &slow) == 0);
  CHECK(weft_fiber_join(slow, 1000) == -ETIMEDOUT); /* still joinable */
  CHECK(weft_fiber_join(slow, -1) == 0);
  CHECK(weft_yield() == 0);
}

int main(void) {
  CHECK(weft_abi_version() == WEFT_ABI_VERSION);
  CHECK((weft_abi_version() >> 16) == WEFT_ABI_VERSION_MAJOR);

  /* Bad input: error codes, never a crash. */
  weft_runtime_t* rt = NULL;
  CHECK(weft_runtime_create(NULL, NULL) == -EINVAL);
  weft_runtime_options_t bad = {.size = 3};
  CHECK(weft_runtime_create(&bad, &rt) == -EINVAL);
  CHECK(rt == NULL);
  weft_runtime_options_t huge = {.size = sizeof huge, .workers = 1u << 20};
  CHECK(weft_runtime_create(&huge, &rt) == -EINVAL);
  CHECK(weft_runtime_destroy(NULL) == -EINVAL);
  CHECK(weft_block_on(NULL, add_one, NULL) == -EINVAL);
  CHECK(weft_spawn(NULL, add_one, NULL, NULL) == -EINVAL);
  CHECK(weft_fiber_join(NULL, -1) == -EINVAL);
  CHECK(weft_fiber_detach(NULL) == -EINVAL);
  CHECK(weft_sleep_ns(-1) == -EINVAL);

  /* A runtime's life. */
  weft_runtime_options_t o = {.size = sizeof o, .workers = 2, .stack_size = 0};
  CHECK(weft_runtime_create(&o, &rt) == 0);
  CHECK(rt != NULL);
  CHECK(weft_spawn(rt, NULL, NULL, NULL) == -EINVAL);
  struct fan f = {rt, 64};
  CHECK(weft_block_on(rt, fan_out, &f) == 0);
  CHECK(atomic_load(&counter) == 64);
  /* Detached fibers, and one that sleeps through the shutdown (its sleep fails -ECANCELED). */
  for (int i = 0; i < 16; ++i) CHECK(weft_spawn(rt, add_one, NULL, NULL) == 0);
  weft_fiber_t* d = NULL;
  CHECK(weft_spawn(rt, add_one, NULL, &d) == 0);
  CHECK(weft_fiber_detach(d) == 0);
  CHECK(weft_runtime_destroy(rt) == 0);
  CHECK(atomic_load(&counter) == 64 + 17);

  /* Plain threads: sleep and yield work outside any runtime. */
  CHECK(weft_sleep_ns(1000) == 0);
  CHECK(weft_yield() == 0);

  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("weft C ABI: all checks passed\n");
  return 0;
}
