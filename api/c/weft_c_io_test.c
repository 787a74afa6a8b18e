/* api/c/weft_c_io_test.c: the calls ABI 0.2 added, from C11 (-Wall -Wextra -Werror -pedantic):
 * waits with deadlines and cancellation sources, select, fiber options, id and name,
 * call_blocking, stats and dumps, fiber I/O on pipes and sockets (deadline, cancel, close from
 * another fiber, bad fds, absurd sizes), an echo server written in C, consumed handles (debug
 * builds), and a shutdown with a fiber parked in I/O. Exits 0 when every check holds. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "weft/api/c/c_check.h"
#include "weft/api/c/weft.h"


static const int64_t kMs = 1000 * 1000;

static weft_wait_t deadline_in(int64_t ns) {
  weft_wait_t w = {.size = sizeof w, .deadline_ns = weft_now_ns() + ns};
  return w;
}

static weft_wait_t cancelled_by(const weft_cancel_t* c) {
  weft_wait_t w = {.size = sizeof w, .cancel = c};
  return w;
}

/* ---- Waits and cancellation ---------------------------------------------------------------- */

struct later {
  weft_cancel_t* c;
  int64_t after_ns;
};

/* On a fiber: sleeps, then cancels. */
static void cancel_later(void* arg) {
  struct later* l = (struct later*)arg;
  CHECK(weft_sleep_ns(l->after_ns) == 0);
  CHECK(weft_cancel_cancel(l->c) == 0);
}

static void waits(weft_runtime_t* rt) {
  int64_t t0 = weft_now_ns();
  CHECK(t0 > 0);
  CHECK(weft_now_ns() >= t0);

  weft_cancel_t* c = NULL;
  CHECK(weft_cancel_create(NULL, NULL) == -EINVAL);
  CHECK(weft_cancel_create(NULL, &c) == 0);
  CHECK(weft_cancel_is_cancelled(c) == 0);
  CHECK(weft_cancel_is_cancelled(NULL) == -EINVAL);
  CHECK(weft_cancel_after_ns(c, -1) == -EINVAL);

  weft_channel_t* ch = NULL;
  CHECK(weft_channel_create(8, 1, &ch) == 0);
  uint64_t v = 0;
  /* A bad weft_wait_t. */
  weft_wait_t bad = {.size = 3};
  CHECK(weft_channel_recv_ex(ch, &v, &bad) == -EINVAL);
  weft_wait_t flagged = {.size = sizeof flagged, .flags = 1};
  CHECK(weft_channel_recv_ex(ch, &v, &flagged) == -EINVAL);
  /* A deadline: passed already, or later. */
  weft_wait_t past = {.size = sizeof past, .deadline_ns = 1};
  CHECK(weft_channel_recv_ex(ch, &v, &past) == -ETIMEDOUT);
  weft_wait_t soon = deadline_in(2 * kMs);
  CHECK(weft_channel_recv_ex(ch, &v, &soon) == -ETIMEDOUT);
  /* Ready at once: a passed deadline does not matter. */
  CHECK(weft_channel_send_ex(ch, &v, &past) == 0);
  CHECK(weft_channel_recv_ex(ch, &v, &past) == 0);

  /* Cancelled by a fiber while this plain thread waits; a child goes with its parent. */
  weft_cancel_t* child = NULL;
  CHECK(weft_cancel_create(c, &child) == 0);
  struct later l = {c, 2 * kMs};
  weft_fiber_t* canceller = NULL;
  CHECK(weft_spawn(rt, cancel_later, &l, &canceller) == 0);
  weft_wait_t by_child = cancelled_by(child);
  CHECK(weft_channel_recv_ex(ch, &v, &by_child) == -ECANCELED);
  /* The canceller may still be in weft_cancel_cancel(c): c is destroyed only after it ends. */
  CHECK(weft_fiber_join(canceller, -1) == 0);
  CHECK(weft_cancel_is_cancelled(c) == 1);
  CHECK(weft_cancel_is_cancelled(child) == 1);
  /* Every wait given a cancelled source ends at once. */
  weft_wait_t by_c = cancelled_by(c);
  CHECK(weft_sleep_ex(1000 * kMs, &by_c) == -ECANCELED);
  weft_mutex_t* m = NULL;
  weft_cond_t* cv = NULL;
  CHECK(weft_mutex_create(&m) == 0);
  CHECK(weft_cond_create(&cv) == 0);
  CHECK(weft_mutex_lock_ex(m, NULL) == 0);
  CHECK(weft_cond_wait_ex(cv, m, &by_c) == -ECANCELED); /* returns holding m */
  CHECK(weft_mutex_unlock(m) == 0);
  CHECK(weft_cancel_destroy(child) == 0);
  CHECK(weft_cancel_destroy(c) == 0);

  /* A source's own deadline. */
  weft_cancel_t* timed = NULL;
  CHECK(weft_cancel_create(NULL, &timed) == 0);
  CHECK(weft_cancel_after_ns(timed, 2 * kMs) == 0);
  weft_wait_t by_timed = cancelled_by(timed);
  CHECK(weft_channel_recv_ex(ch, &v, &by_timed) == -ECANCELED);
  CHECK(weft_cancel_destroy(timed) == 0);

  /* sleep_ex: the whole sleep, or the wait's deadline first. */
  CHECK(weft_sleep_ex(1000, NULL) == 0);
  weft_wait_t cut = deadline_in(kMs);
  CHECK(weft_sleep_ex(1000 * kMs, &cut) == -ETIMEDOUT);
  CHECK(weft_sleep_ex(-1, NULL) == -EINVAL);

  /* lock_ex on a mutex the caller holds. */
  CHECK(weft_mutex_try_lock(m) == 0);
  weft_wait_t brief = deadline_in(kMs);
  CHECK(weft_mutex_lock_ex(m, &brief) == -EDEADLK); /* held by this very thread */
  CHECK(weft_mutex_unlock(m) == 0);
  CHECK(weft_mutex_destroy(m) == 0);
  CHECK(weft_cond_destroy(cv) == 0);
  CHECK(weft_channel_destroy(ch) == 0);
}

/* ---- Fibers: options, id, name, join_ex, call_blocking ------------------------------------- */

struct ident {
  uint64_t id;
  char name[32];
  int64_t name_len;
};

static void identify(void* arg) {
  struct ident* i = (struct ident*)arg;
  i->id = weft_fiber_id();
  i->name_len = weft_fiber_name(i->name, sizeof i->name);
}

static void long_sleep(void* arg) {
  (void)arg;
  weft_sleep_ns(30 * kMs);
}

static atomic_int released;

/* Blocks its thread until another fiber sets `released`: would hang on a single worker if
 * call_blocking held the worker. */
static void block_until_released(void* arg) {
  (void)arg;
  while (atomic_load(&released) == 0) usleep(100);
}

static void release(void* arg) {
  (void)arg;
  atomic_store(&released, 1);
}

static void blocking_on_one_worker(void* arg) {
  weft_runtime_t* rt = (weft_runtime_t*)arg;
  weft_fiber_t* r = NULL;
  CHECK(weft_spawn(rt, release, NULL, &r) == 0);
  CHECK(weft_call_blocking(block_until_released, NULL) == 0);
  CHECK(weft_fiber_join(r, -1) == 0);
}

static void fibers(weft_runtime_t* rt) {
  struct ident a = {0, "", 0}, b = {0, "", 0};
  weft_fiber_options_t o = {.size = sizeof o, .name = "worker-7"};
  weft_fiber_t* f = NULL;
  CHECK(weft_spawn_ex(rt, identify, &a, &o, &f) == 0);
  CHECK(weft_fiber_join_ex(f, NULL) == 0);
  CHECK(a.id != 0);
  CHECK(a.name_len == 8 && strcmp(a.name, "worker-7") == 0);
  weft_fiber_options_t pinned = {.size = sizeof pinned, .flags = WEFT_FIBER_PINNED,
                                 .pinned_worker = 1, .stack_size = 256 * 1024};
  CHECK(weft_spawn_ex(rt, identify, &b, &pinned, &f) == 0);
  CHECK(weft_fiber_join(f, -1) == 0);
  CHECK(b.id != 0 && b.id != a.id);
  CHECK(b.name_len == 0 && b.name[0] == '\0');
  CHECK(weft_spawn_ex(rt, identify, &b, NULL, NULL) == 0); /* defaults, detached */
  /* Outside fibers. */
  CHECK(weft_fiber_id() == 0);
  char name[4] = "xyz";
  CHECK(weft_fiber_name(name, sizeof name) == 0 && name[0] == '\0');
  CHECK(weft_fiber_name(NULL, 0) == 0);
  CHECK(weft_fiber_name(NULL, 4) == -EINVAL);
  /* Bad options. */
  weft_fiber_options_t bad = o;
  bad.size = 8;
  CHECK(weft_spawn_ex(rt, identify, &a, &bad, &f) == -EINVAL);
  CHECK(f == NULL);
  bad = o;
  bad.flags = 2;
  CHECK(weft_spawn_ex(rt, identify, &a, &bad, &f) == -EINVAL);
  bad = o;
  bad.reserved = 1;
  CHECK(weft_spawn_ex(rt, identify, &a, &bad, &f) == -EINVAL);
  bad = o;
  bad.stack_size = (uint64_t)1 << 40;
  CHECK(weft_spawn_ex(rt, identify, &a, &bad, &f) == -EINVAL);
  /* join_ex: a deadline leaves the fiber joinable; a cancelled source too. */
  CHECK(weft_spawn(rt, long_sleep, NULL, &f) == 0);
  weft_wait_t brief = deadline_in(kMs);
  CHECK(weft_fiber_join_ex(f, &brief) == -ETIMEDOUT);
  weft_cancel_t* c = NULL;
  CHECK(weft_cancel_create(NULL, &c) == 0);
  CHECK(weft_cancel_cancel(c) == 0);
  weft_wait_t by_c = cancelled_by(c);
  CHECK(weft_fiber_join_ex(f, &by_c) == -ECANCELED);
  CHECK(weft_fiber_join_ex(f, NULL) == 0);
  CHECK(weft_cancel_destroy(c) == 0);

  /* call_blocking keeps the worker serving: on one worker, the fiber that releases the blocked
   * call still runs. */
  weft_runtime_t* one = NULL;
  weft_runtime_options_t ro = {.size = sizeof ro, .workers = 1, .max_blocking_threads = 2};
  CHECK(weft_runtime_create(&ro, &one) == 0);
  CHECK(weft_block_on(one, blocking_on_one_worker, one) == 0);
  CHECK(weft_runtime_destroy(one) == 0);
  atomic_store(&released, 1);
  CHECK(weft_call_blocking(block_until_released, NULL) == 0); /* a plain thread: inline */
  CHECK(weft_call_blocking(NULL, NULL) == -EINVAL);
}

/* ---- Select -------------------------------------------------------------------------------- */

struct sender {
  weft_channel_t* ch;
  uint64_t value;
};

static void send_later(void* arg) {
  struct sender* s = (struct sender*)arg;
  CHECK(weft_sleep_ns(kMs) == 0);
  CHECK(weft_channel_send(s->ch, &s->value, -1) == 0);
}

static void selects(weft_runtime_t* rt) {
  weft_channel_t* a = NULL;
  weft_channel_t* b = NULL;
  CHECK(weft_channel_create(8, 0, &a) == 0);
  CHECK(weft_channel_create(8, 4, &b) == 0);
  uint64_t in_a = 0, in_b = 0, out = 5;
  weft_select_case_t cases[2] = {{a, &in_a, WEFT_SELECT_RECV, 99}, {b, &in_b, WEFT_SELECT_RECV, 99}};
  /* Nothing ready. */
  CHECK(weft_select(cases, 2, NULL, WEFT_SELECT_NOWAIT) == -EAGAIN);
  weft_wait_t brief = deadline_in(kMs);
  CHECK(weft_select(cases, 2, &brief, 0) == -ETIMEDOUT);
  /* A fiber sends on b: this plain thread's select takes it. */
  struct sender s = {b, 42};
  weft_fiber_t* sender = NULL;
  CHECK(weft_spawn(rt, send_later, &s, &sender) == 0);
  CHECK(weft_select(cases, 2, NULL, 0) == 1);
  CHECK(weft_fiber_join(sender, -1) == 0); /* s lives on this stack */
  CHECK(in_b == 42 && cases[1].result == 0);
  CHECK(in_a == 0 && cases[0].result == 99); /* the other case untouched */
  /* Both ready: each is picked some of the time. */
  weft_channel_t* c = NULL;
  weft_channel_t* d = NULL;
  CHECK(weft_channel_create(8, 256, &c) == 0);
  CHECK(weft_channel_create(8, 256, &d) == 0);
  for (int i = 0; i < 200; ++i) {
    CHECK(weft_channel_try_send(c, &out) == 0);
    CHECK(weft_channel_try_send(d, &out) == 0);
  }
  int picked[2] = {0, 0};
  uint64_t sink = 0;
  for (int i = 0; i < 200; ++i) {
    weft_select_case_t two[2] = {{c, &sink, WEFT_SELECT_RECV, 0}, {d, &sink, WEFT_SELECT_RECV, 0}};
    int k = weft_select(two, 2, NULL, WEFT_SELECT_NOWAIT);
    CHECK(k == 0 || k == 1);
    if (k == 0 || k == 1) ++picked[k];
  }
  CHECK(picked[0] > 0 && picked[1] > 0);
  /* A send case; then a closed channel: result -EPIPE. */
  uint64_t drained = 0;
  weft_select_case_t send_b = {b, &out, WEFT_SELECT_SEND, 99};
  CHECK(weft_select(&send_b, 1, NULL, 0) == 0 && send_b.result == 0);
  CHECK(weft_channel_try_recv(b, &drained) == 0 && drained == 5);
  CHECK(weft_channel_close(a) == 0);
  weft_select_case_t recv_a = {a, &in_a, WEFT_SELECT_RECV, 99};
  CHECK(weft_select(&recv_a, 1, NULL, 0) == 0 && recv_a.result == -EPIPE);
  weft_select_case_t send_a = {a, &out, WEFT_SELECT_SEND, 99};
  CHECK(weft_select(&send_a, 1, NULL, 0) == 0 && send_a.result == -EPIPE);
  /* Cancelled. */
  weft_cancel_t* cancel = NULL;
  CHECK(weft_cancel_create(NULL, &cancel) == 0);
  CHECK(weft_cancel_cancel(cancel) == 0);
  weft_wait_t by_cancel = cancelled_by(cancel);
  weft_select_case_t recv_b = {b, &in_b, WEFT_SELECT_RECV, 0};
  CHECK(weft_select(&recv_b, 1, &by_cancel, 0) == -ECANCELED);
  CHECK(weft_select(NULL, 0, &by_cancel, 0) == -ECANCELED);
  CHECK(weft_cancel_destroy(cancel) == 0);
  /* Bad input. */
  weft_select_case_t many[65];
  for (int i = 0; i < 65; ++i) {
    weft_select_case_t one = {b, &in_b, WEFT_SELECT_RECV, 0};
    many[i] = one;
  }
  CHECK(weft_select(many, 65, NULL, WEFT_SELECT_NOWAIT) == -EINVAL);
  CHECK(weft_select(many, 64, NULL, WEFT_SELECT_NOWAIT) == -EAGAIN); /* one channel, 64 cases */
  CHECK(weft_select(NULL, 0, NULL, 0) == -EINVAL);                    /* would never return */
  CHECK(weft_select(NULL, 0, NULL, WEFT_SELECT_NOWAIT) == -EAGAIN);
  CHECK(weft_select(NULL, 1, NULL, 0) == -EINVAL);
  CHECK(weft_select(many, 1, NULL, 4) == -EINVAL);
  weft_select_case_t no_op = {b, &in_b, 0, 0};
  CHECK(weft_select(&no_op, 1, NULL, 0) == -EINVAL);
  weft_select_case_t no_elem = {b, NULL, WEFT_SELECT_RECV, 0};
  CHECK(weft_select(&no_elem, 1, NULL, 0) == -EINVAL);
  weft_select_case_t no_channel = {NULL, &in_b, WEFT_SELECT_RECV, 0};
  CHECK(weft_select(&no_channel, 1, NULL, 0) == -EINVAL);
  CHECK(weft_channel_destroy(a) == 0);
  CHECK(weft_channel_destroy(b) == 0);
  CHECK(weft_channel_destroy(c) == 0);
  CHECK(weft_channel_destroy(d) == 0);
}

/* parked: whether the dump shows the fiber named `name` parked on `what`, within 10 s. */
static int parked(weft_runtime_t* rt, const char* name, const char* what) {
  static char dump[1 << 16];
  for (int i = 0; i < 10000; ++i) {
    CHECK(weft_runtime_dump_fibers(rt, dump, sizeof dump) >= 0);
    for (char* line = strtok(dump, "\n"); line != NULL; line = strtok(NULL, "\n")) {
      if (strstr(line, name) != NULL && strstr(line, what) != NULL) return 1;
    }
    weft_sleep_ns(kMs);
  }
  return 0;
}

/* ---- Fiber I/O ----------------------------------------------------------------------------- */

struct pipe_wait {
  int fd;
  const weft_wait_t* wait;
  int64_t result;
};

static void read_pipe(void* arg) {
  struct pipe_wait* p = (struct pipe_wait*)arg;
  char buf[16];
  p->result = weft_read(p->fd, buf, sizeof buf, p->wait);
}

static void close_fd(void* arg) { CHECK(weft_close(*(int*)arg) == 0); }

static void pipes(weft_runtime_t* rt) {
  int p[2];
  CHECK(pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
  char buf[16] = {0};
  /* A deadline on an empty pipe, from this plain thread. */
  weft_wait_t brief = deadline_in(kMs);
  CHECK(weft_read(p[0], buf, sizeof buf, &brief) == -ETIMEDOUT);
  CHECK(weft_poll(p[0], POLLIN, &brief) == -ETIMEDOUT);
  CHECK(weft_poll(p[1], POLLOUT, NULL) == POLLOUT);
  CHECK(weft_write(p[1], "hello", 5, NULL) == 5);
  CHECK((weft_poll(p[0], POLLIN, NULL) & POLLIN) != 0);
  CHECK(weft_read(p[0], buf, sizeof buf, NULL) == 5 && memcmp(buf, "hello", 5) == 0);
  /* Bad input. */
  CHECK(weft_read(p[0], NULL, 1, NULL) == -EINVAL);
  CHECK(weft_read(p[0], buf, (uint64_t)1 << 63, NULL) == -EINVAL);
  CHECK(weft_read(-1, buf, sizeof buf, NULL) == -EBADF);
  CHECK(weft_write(-1, buf, 1, NULL) == -EBADF);
  CHECK(weft_close(-1) == -EBADF);
  CHECK(weft_accept(p[0], buf, NULL, NULL) == -EINVAL);
  CHECK(weft_connect(p[0], NULL, 0, NULL) == -EINVAL);
  weft_wait_t bad = {.size = 1};
  CHECK(weft_read(p[0], buf, sizeof buf, &bad) == -EINVAL);
  /* A fiber's read, cancelled by a source that another fiber cancels. */
  weft_cancel_t* c = NULL;
  CHECK(weft_cancel_create(NULL, &c) == 0);
  weft_wait_t by_c = cancelled_by(c);
  struct pipe_wait pw = {p[0], &by_c, 0};
  weft_fiber_t* reader = NULL;
  CHECK(weft_spawn(rt, read_pipe, &pw, &reader) == 0);
  struct later l = {c, 2 * kMs};
  weft_fiber_t* canceller = NULL;
  CHECK(weft_spawn(rt, cancel_later, &l, &canceller) == 0);
  CHECK(weft_fiber_join(reader, -1) == 0);
  CHECK(pw.result == -ECANCELED);
  CHECK(weft_fiber_join(canceller, -1) == 0);
  CHECK(weft_cancel_destroy(c) == 0);
  /* A fiber's read, ended by weft_close from another fiber: -ECANCELED, not bytes of whatever
   * file takes the number next. */
  struct pipe_wait closed = {p[0], NULL, 0};
  weft_fiber_options_t named = {.size = sizeof named, .name = "pipe-reader"};
  CHECK(weft_spawn_ex(rt, read_pipe, &closed, &named, &reader) == 0);
  char on_fd[32];
  snprintf(on_fd, sizeof on_fd, "fd %d", p[0]);
  CHECK(parked(rt, "pipe-reader", on_fd));
  CHECK(weft_spawn(rt, close_fd, &p[0], NULL) == 0);
  CHECK(weft_fiber_join(reader, -1) == 0);
  CHECK(closed.result == -ECANCELED);
  /* read_exact at an end of stream. */
  int q[2];
  CHECK(pipe2(q, O_NONBLOCK | O_CLOEXEC) == 0);
  CHECK(weft_write_all(q[1], "abc", 3, NULL) == 0);
  CHECK(weft_close(q[1]) == 0);
  CHECK(weft_read_exact(q[0], buf, 8, NULL) == -ECONNABORTED);
  CHECK(weft_close(q[0]) == 0);
  CHECK(weft_close(p[1]) == 0);
  /* make_nonblocking. */
  int r[2];
  CHECK(pipe2(r, O_CLOEXEC) == 0);
  CHECK(weft_make_nonblocking(r[0]) == 0);
  CHECK((fcntl(r[0], F_GETFL) & O_NONBLOCK) != 0);
  CHECK(weft_make_nonblocking(-1) == -EBADF);
  CHECK(weft_close(r[0]) == 0);
  CHECK(weft_close(r[1]) == 0);
}

/* ---- An echo server in C ------------------------------------------------------------------- */

enum { kConns = 16, kTrips = 200, kSize = 64 };

struct server {
  weft_runtime_t* rt;
  int listener;
  atomic_long delivered;
};

/* On a fiber: echoes one connection until it ends. */
static void echo_conn(void* arg) {
  int fd = (int)(intptr_t)arg;
  char buf[4 * kSize];
  for (;;) {
    int64_t n = weft_read(fd, buf, sizeof buf, NULL);
    if (n <= 0 || weft_write_all(fd, buf, (uint64_t)n, NULL) != 0) break;
  }
  CHECK(weft_close(fd) == 0);
}

static void accept_all(void* arg) {
  struct server* s = (struct server*)arg;
  for (int i = 0; i < kConns; ++i) {
    struct sockaddr_in peer;
    uint32_t len = sizeof peer;
    int fd = weft_accept(s->listener, &peer, &len, NULL);
    CHECK(fd >= 0);
    if (fd < 0) return;
    CHECK(len == sizeof peer && peer.sin_family == AF_INET);
    CHECK(weft_spawn(s->rt, echo_conn, (void*)(intptr_t)fd, NULL) == 0);
  }
}

static void client(void* arg) {
  struct server* s = (struct server*)arg;
  struct sockaddr_in addr;
  socklen_t len = sizeof addr;
  CHECK(getsockname(s->listener, (struct sockaddr*)&addr, &len) == 0);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0);
  weft_wait_t w = deadline_in(10000 * kMs); /* a generous bound: a hang fails, not waits */
  CHECK(weft_connect(fd, &addr, sizeof addr, &w) == 0);
  char out[kSize], in[kSize];
  memset(out, 'x', sizeof out);
  for (int i = 0; i < kTrips; ++i) {
    memcpy(out, &i, sizeof i);
    if (weft_write_all(fd, out, sizeof out, &w) != 0) break;
    if (weft_read_exact(fd, in, sizeof in, &w) != 0) break;
    CHECK(memcmp(in, out, sizeof in) == 0);
    atomic_fetch_add(&s->delivered, 1);
  }
  CHECK(weft_close(fd) == 0);
}

static void echo_server(void* arg) {
  struct server* s = (struct server*)arg;
  weft_fiber_t* acceptor = NULL;
  weft_fiber_t* clients[kConns];
  CHECK(weft_spawn(s->rt, accept_all, s, &acceptor) == 0);
  for (int i = 0; i < kConns; ++i) CHECK(weft_spawn(s->rt, client, s, &clients[i]) == 0);
  for (int i = 0; i < kConns; ++i) CHECK(weft_fiber_join(clients[i], -1) == 0);
  CHECK(weft_fiber_join(acceptor, -1) == 0);
}

static void echo(weft_runtime_t* rt) {
  struct server s;
  s.rt = rt;
  atomic_init(&s.delivered, 0);
  s.listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  CHECK(s.listener >= 0);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(bind(s.listener, (struct sockaddr*)&addr, sizeof addr) == 0);
  CHECK(listen(s.listener, kConns) == 0);
  CHECK(weft_block_on(rt, echo_server, &s) == 0);
  CHECK(atomic_load(&s.delivered) == (long)kConns * kTrips);
  CHECK(weft_close(s.listener) == 0);
}

/* ---- Stats, dumps, handles, shutdown ------------------------------------------------------- */

static void park_on(void* arg) {
  uint64_t v;
  weft_channel_recv((weft_channel_t*)arg, &v, -1);
}

static void introspection(weft_runtime_t* rt) {
  int64_t n = weft_runtime_stats_json(rt, NULL, 0);
  CHECK(n > 2);
  char small[8];
  CHECK(weft_runtime_stats_json(rt, small, sizeof small) >= (int64_t)sizeof small);
  CHECK(small[0] == '{' && small[7] == '\0');
  char big[1 << 16];
  int64_t m = weft_runtime_stats_json(rt, big, sizeof big);
  CHECK(m > 0 && m < (int64_t)sizeof big && big[m] == '\0' && big[m - 1] == '}');
  CHECK(strstr(big, "sched_latency_ns") != NULL); /* WEFT_RUNTIME_MEASURE_LATENCY */
  CHECK(weft_runtime_stats_json(NULL, big, sizeof big) == -EINVAL);
  CHECK(weft_runtime_stats_json(rt, NULL, 4) == -EINVAL);
  /* A named fiber parked on a channel shows in the dump. */
  weft_channel_t* ch = NULL;
  CHECK(weft_channel_create(8, 0, &ch) == 0);
  weft_fiber_options_t o = {.size = sizeof o, .name = "parked-reader"};
  weft_fiber_t* f = NULL;
  CHECK(weft_spawn_ex(rt, park_on, ch, &o, &f) == 0);
  CHECK(parked(rt, "parked-reader", "Channel"));
  CHECK(weft_channel_close(ch) == 0);
  CHECK(weft_fiber_join(f, -1) == 0);
  CHECK(weft_channel_destroy(ch) == 0);
}

static void handles(weft_runtime_t* rt) {
  if (weft_handle_checks() != 1) {
    printf("handle checks: off in this build (NDEBUG)\n");
    return;
  }
  weft_mutex_t* m = NULL;
  CHECK(weft_mutex_create(&m) == 0);
  CHECK(weft_mutex_destroy(m) == 0);
  CHECK(weft_mutex_lock(m, -1) == -EINVAL); /* consumed */
  CHECK(weft_mutex_destroy(m) == -EINVAL);
  weft_channel_t* ch = NULL;
  CHECK(weft_channel_create(8, 1, &ch) == 0);
  CHECK(weft_mutex_lock((weft_mutex_t*)(void*)ch, -1) == -EINVAL); /* the wrong kind */
  CHECK(weft_channel_destroy(ch) == 0);
  uint64_t v = 0;
  CHECK(weft_channel_send(ch, &v, 0) == -EINVAL);
  weft_fiber_t* f = NULL;
  CHECK(weft_spawn(rt, long_sleep, NULL, &f) == 0);
  CHECK(weft_fiber_join(f, -1) == 0);
  CHECK(weft_fiber_join(f, -1) == -EINVAL);
  CHECK(weft_fiber_detach(f) == -EINVAL);
  weft_cancel_t* c = NULL;
  CHECK(weft_cancel_create(NULL, &c) == 0);
  CHECK(weft_cancel_destroy(c) == 0);
  weft_wait_t by_c = cancelled_by(c);
  CHECK(weft_sleep_ex(1, &by_c) == -EINVAL);
  CHECK(weft_cancel_create(c, &c) == -EINVAL);
}

/* A fiber parked in a read when its runtime is destroyed: the read ends -ECANCELED and the
 * destroy returns. */
static void shutdown_mid_read(void) {
  weft_runtime_t* rt = NULL;
  weft_runtime_options_t o = {.size = sizeof o, .workers = 2};
  CHECK(weft_runtime_create(&o, &rt) == 0);
  int p[2];
  CHECK(pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
  struct pipe_wait pw = {p[0], NULL, 1};
  weft_fiber_options_t named = {.size = sizeof named, .name = "shutdown-reader"};
  CHECK(weft_spawn_ex(rt, read_pipe, &pw, &named, NULL) == 0);
  char on_fd[32];
  snprintf(on_fd, sizeof on_fd, "fd %d", p[0]);
  CHECK(parked(rt, "shutdown-reader", on_fd));
  CHECK(weft_runtime_destroy(rt) == 0);
  CHECK(pw.result == -ECANCELED);
  close(p[0]);
  close(p[1]);
}

/* ---- Edge cases an adversarial review found ----------------------------------------------- */

struct recv_arg {
  weft_channel_t* ch;
  int64_t timeout_ns;
  int rc;
  uint64_t value;
};

static void recv_with_timeout(void* arg) {
  struct recv_arg* r = (struct recv_arg*)arg;
  r->rc = weft_channel_recv(r->ch, &r->value, r->timeout_ns);
}

static void send_then_destroy(void* arg) {
  weft_channel_t* ch = (weft_channel_t*)arg;
  uint64_t v = 77;
  CHECK(weft_channel_send(ch, &v, -1) == 0); /* handed to the parked receiver */
  CHECK(weft_channel_destroy(ch) == 0);      /* nobody waits on it any more */
}

struct joiner_arg {
  weft_fiber_t* f;
  int rc;
};

static void join_it(void* arg) {
  struct joiner_arg* j = (struct joiner_arg*)arg;
  j->rc = weft_fiber_join(j->f, -1);
}

static weft_runtime_t* blocking_rt;
static int blocking_destroy_rc, blocking_block_on_rc;

static void nop(void* arg) { (void)arg; }

static void destroy_from_blocking(void* arg) {
  (void)arg;
  blocking_destroy_rc = weft_runtime_destroy(blocking_rt);
  blocking_block_on_rc = weft_block_on(blocking_rt, nop, NULL);
}

static void call_destroy_from_blocking(void* arg) {
  (void)arg;
  CHECK(weft_call_blocking(destroy_from_blocking, NULL) == 0);
}

static void exit_thread(void* arg) {
  (void)arg;
  pthread_exit((void*)(intptr_t)42);
}

static void* thread_calling_blocking(void* arg) {
  (void)arg;
  weft_call_blocking(exit_thread, NULL);
  return NULL; /* not reached: pthread_exit unwinds through the call */
}

static atomic_int sleeping_long;

static void sleep_long(void* arg) {
  (void)arg;
  atomic_store(&sleeping_long, 1);
  CHECK(weft_sleep_ns(60000 * kMs) == -ECANCELED);
}

static void* block_on_thread(void* arg) {
  CHECK(weft_block_on((weft_runtime_t*)arg, sleep_long, NULL) == 0);
  return NULL;
}

static void edges(weft_runtime_t* rt) {
  /* Timeouts too long for the clock are no limit (they overflowed into "passed"). */
  weft_channel_t* ch = NULL;
  CHECK(weft_channel_create(8, 0, &ch) == 0);
  struct recv_arg r = {ch, INT64_MAX, 1, 0};
  weft_fiber_t* f = NULL;
  CHECK(weft_spawn(rt, recv_with_timeout, &r, &f) == 0);
  uint64_t v = 5;
  CHECK(weft_sleep_ns(2 * kMs) == 0);
  CHECK(weft_channel_send(ch, &v, INT64_MAX) == 0);
  CHECK(weft_fiber_join(f, -1) == 0);
  CHECK(r.rc == 0 && r.value == 5);
  weft_cancel_t* c = NULL;
  CHECK(weft_cancel_create(NULL, &c) == 0);
  CHECK(weft_cancel_after_ns(c, INT64_MAX) == 0);
  CHECK(weft_cancel_is_cancelled(c) == 0);
  CHECK(weft_cancel_destroy(c) == 0);
  /* A deadline far in the past, on a plain thread: -ETIMEDOUT at once (it waited for ever). */
  weft_wait_t ancient = {.size = sizeof ancient, .deadline_ns = INT64_MIN};
  CHECK(weft_channel_recv_ex(ch, &v, &ancient) == -ETIMEDOUT);
  weft_wait_t negative = {.size = sizeof negative, .deadline_ns = -5};
  CHECK(weft_sleep_ex(kMs, &negative) == -ETIMEDOUT);
  CHECK(weft_sleep_ex(0, &ancient) == 0);
  /* The value handed over, the channel destroyed before the receiver returns: the receive reads
   * nothing of it after the wait. */
  struct recv_arg r2 = {ch, -1, 1, 0};
  CHECK(weft_spawn(rt, send_then_destroy, ch, NULL) == 0);
  recv_with_timeout(&r2); /* this plain thread */
  CHECK(r2.rc == 0 && r2.value == 77);
  /* Two joins of one handle at once: the second is refused, not both run (checked builds). */
  if (weft_handle_checks() == 1) {
    weft_fiber_t* sleeper = NULL;
    CHECK(weft_spawn(rt, long_sleep, NULL, &sleeper) == 0);
    struct joiner_arg j = {sleeper, 1};
    weft_fiber_options_t named = {.size = sizeof named, .name = "first-joiner"};
    weft_fiber_t* joiner = NULL;
    CHECK(weft_spawn_ex(rt, join_it, &j, &named, &joiner) == 0);
    CHECK(parked(rt, "first-joiner", "JoinHandle"));
    CHECK(weft_fiber_join(sleeper, -1) == -EBUSY);
    CHECK(weft_fiber_detach(sleeper) == -EBUSY);
    CHECK(weft_fiber_join(joiner, -1) == 0);
    CHECK(j.rc == 0);
    CHECK(weft_fiber_join(sleeper, -1) == -EINVAL); /* consumed by the first */
  }
  /* Destroy and block_on from a call_blocking function of the runtime itself: -EDEADLK, not a
   * wait for the caller. */
  weft_runtime_options_t o = {.size = sizeof o, .workers = 1};
  CHECK(weft_runtime_create(&o, &blocking_rt) == 0);
  CHECK(weft_block_on(blocking_rt, call_destroy_from_blocking, NULL) == 0);
  CHECK(blocking_destroy_rc == -EDEADLK);
  CHECK(blocking_block_on_rc == -EDEADLK);
  CHECK(weft_runtime_destroy(blocking_rt) == 0);
  /* A stack size past the largest class is refused at once, not by every spawn. */
  weft_runtime_options_t big = {.size = sizeof big, .stack_size = (uint64_t)128 << 20};
  weft_runtime_t* none = NULL;
  CHECK(weft_runtime_create(&big, &none) == -EINVAL);
  /* pthread_exit in a callback unwinds on (it was caught as an exception and aborted). */
  pthread_t t;
  void* ret = NULL;
  CHECK(pthread_create(&t, NULL, thread_calling_blocking, NULL) == 0);
  CHECK(pthread_join(t, &ret) == 0);
  CHECK(ret == (void*)(intptr_t)42);
  /* Destroyed while another thread's block_on returns: that thread is waited for. */
  for (int i = 0; i < 20; ++i) {
    weft_runtime_t* r3 = NULL;
    CHECK(weft_runtime_create(&o, &r3) == 0);
    pthread_t b;
    atomic_store(&sleeping_long, 0);
    CHECK(pthread_create(&b, NULL, block_on_thread, r3) == 0);
    while (atomic_load(&sleeping_long) == 0) weft_sleep_ns(100 * 1000);
    CHECK(weft_runtime_destroy(r3) == 0);
    CHECK(pthread_join(b, NULL) == 0);
  }
}

int main(void) {
  CHECK((weft_abi_version() >> 16) == WEFT_ABI_VERSION_MAJOR);
  CHECK((weft_abi_version() & 0xffffu) >= 2);

  weft_runtime_t* rt = NULL;
  weft_runtime_options_t unknown = {.size = sizeof unknown, .flags = 1u << 7};
  CHECK(weft_runtime_create(&unknown, &rt) == -EINVAL);
  weft_runtime_options_t too_many = {.size = sizeof too_many, .max_blocking_threads = 1u << 20};
  CHECK(weft_runtime_create(&too_many, &rt) == -EINVAL);
  weft_runtime_options_t o = {
      .size = sizeof o, .workers = 2, .flags = WEFT_RUNTIME_MEASURE_LATENCY};
  CHECK(weft_runtime_create(&o, &rt) == 0);
  waits(rt);
  fibers(rt);
  selects(rt);
  pipes(rt);
  echo(rt);
  introspection(rt);
  handles(rt);
  edges(rt);
  CHECK(weft_runtime_destroy(rt) == 0);
  if (weft_handle_checks() == 1) CHECK(weft_runtime_destroy(rt) == -EINVAL);
  shutdown_mid_read();

  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("weft C ABI 0.2: all checks passed\n");
  return 0;
}
