/* api/c/weft_c_test.c: the calls of ABI 0.1 from C11 (built with -Wall -Wextra -Werror
 * -pedantic): the version, a runtime's life, fibers spawned, joined (with a timeout) and
 * detached, sleeps and yields on fibers and threads, channels between fibers and a plain thread
 * (echo, close, timeouts, try calls), a mutex and condition variable shared by fibers and a
 * plain thread, and bad input as error codes. Exits 0 when every check holds. Built twice:
 * against api/c/weft.h, and against the frozen 0.1 header (WEFT_C_TEST_ABI_0_1) and run with
 * the current libweft.so. The later calls are in weft_c_io_test.c. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

/* WEFT_C_TEST_ABI_0_1: built against the frozen header of ABI 0.1 (the ABI test). */
#ifdef WEFT_C_TEST_ABI_0_1
#include "weft/api/c/abi/weft_0_1.h"
#else
#include "weft/api/c/weft.h"
#endif
#include "weft/api/c/c_check.h"

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

struct msg {
  uint32_t seq;
  char text[12];
};

struct pipes {
  weft_channel_t* in;
  weft_channel_t* out;
};

/* On a fiber: echoes every message from in to out until in is closed, then closes out. */
static void echo(void* arg) {
  struct pipes* p = (struct pipes*)arg;
  struct msg m;
  while (weft_channel_recv(p->in, &m, -1) == 0) {
    if (weft_channel_send(p->out, &m, -1) != 0) break;
  }
  weft_channel_close(p->out);
}

static void channels(weft_runtime_t* rt) {
  struct pipes p;
  weft_channel_t* bad = NULL;
  CHECK(weft_channel_create(0, 1, &bad) == -EINVAL);
  CHECK(weft_channel_create(1u << 20, 1, &bad) == -EINVAL);
  CHECK(weft_channel_create(8, 1u << 30, &bad) == -EINVAL);
  CHECK(weft_channel_create(8, 1, NULL) == -EINVAL);
  CHECK(weft_channel_create(sizeof(struct msg), 0, &p.in) == 0);  /* unbuffered */
  CHECK(weft_channel_create(sizeof(struct msg), 4, &p.out) == 0);
  struct msg m = {0, "hello"};
  CHECK(weft_channel_try_send(p.in, &m) == -EAGAIN); /* no receiver waits */
  CHECK(weft_channel_recv(p.out, &m, 1000) == -ETIMEDOUT);
  CHECK(weft_channel_send(NULL, &m, -1) == -EINVAL);
  CHECK(weft_channel_recv(p.out, NULL, -1) == -EINVAL);
  weft_fiber_t* f = NULL;
  CHECK(weft_spawn(rt, echo, &p, &f) == 0);
  /* This plain thread talks to the fiber: 1,000 round trips, each checked. */
  for (uint32_t i = 0; i < 1000; ++i) {
    struct msg out = {i, "ping"};
    struct msg back = {0, ""};
    CHECK(weft_channel_send(p.in, &out, -1) == 0);
    CHECK(weft_channel_recv(p.out, &back, -1) == 0);
    CHECK(back.seq == i);
  }
  CHECK(weft_channel_close(p.in) == 0);
  CHECK(weft_channel_close(p.in) == 0); /* idempotent */
  CHECK(weft_fiber_join(f, -1) == 0);
  CHECK(weft_channel_recv(p.out, &m, -1) == -EPIPE); /* closed and drained */
  CHECK(weft_channel_send(p.in, &m, -1) == -EPIPE);
  CHECK(weft_channel_try_recv(p.out, &m) == -EPIPE);
  CHECK(weft_channel_destroy(p.in) == 0);
  CHECK(weft_channel_destroy(p.out) == 0);
  CHECK(weft_channel_destroy(NULL) == -EINVAL);
}

struct shared {
  weft_mutex_t* m;
  weft_cond_t* c;
  int64_t total; /* guarded by m */
  int ready;     /* guarded by m */
};

/* On a fiber: adds 1,000 times under the mutex, then marks itself done and signals. */
static void adder(void* arg) {
  struct shared* s = (struct shared*)arg;
  for (int i = 0; i < 1000; ++i) {
    CHECK(weft_mutex_lock(s->m, -1) == 0);
    ++s->total;
    CHECK(weft_mutex_unlock(s->m) == 0);
  }
  CHECK(weft_mutex_lock(s->m, -1) == 0);
  ++s->ready;
  CHECK(weft_cond_broadcast(s->c) == 0);
  CHECK(weft_mutex_unlock(s->m) == 0);
}

static void locks(weft_runtime_t* rt) {
  struct shared s = {NULL, NULL, 0, 0};
  CHECK(weft_mutex_create(NULL) == -EINVAL);
  CHECK(weft_mutex_create(&s.m) == 0);
  CHECK(weft_cond_create(&s.c) == 0);
  CHECK(weft_mutex_unlock(s.m) == -EPERM);
  CHECK(weft_mutex_try_lock(s.m) == 0);
  CHECK(weft_mutex_try_lock(s.m) == -EBUSY);
  CHECK(weft_mutex_lock(s.m, -1) == -EDEADLK);
  CHECK(weft_cond_wait(s.c, s.m, 1000) == -ETIMEDOUT); /* returns holding the mutex */
  CHECK(weft_mutex_unlock(s.m) == 0);
  for (int i = 0; i < 8; ++i) CHECK(weft_spawn(rt, adder, &s, NULL) == 0);
  /* This plain thread waits for all eight fibers on the condition variable. */
  CHECK(weft_mutex_lock(s.m, -1) == 0);
  while (s.ready < 8) CHECK(weft_cond_wait(s.c, s.m, -1) == 0);
  CHECK(s.total == 8000);
  CHECK(weft_mutex_unlock(s.m) == 0);
  CHECK(weft_cond_signal(NULL) == -EINVAL);
  CHECK(weft_cond_destroy(s.c) == 0);
  CHECK(weft_mutex_destroy(s.m) == 0);
}

int main(void) {
  /* The library's major is the header's, its minor at least the header's. */
  CHECK((weft_abi_version() >> 16) == WEFT_ABI_VERSION_MAJOR);
  CHECK((weft_abi_version() & 0xffffu) >= WEFT_ABI_VERSION_MINOR);

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
  channels(rt);
  locks(rt);
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
