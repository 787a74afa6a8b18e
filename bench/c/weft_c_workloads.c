/* bench/c/weft_c_workloads.c: W6 (../shared/WORKLOADS.md: loopback TCP echo, 100 connections x
 * 1,000 round trips of 64 bytes, clients in the same runtime) written in C against weft's C ABI
 * (api/c/weft.h) and linked with libweft.so, as a C program would use weft. Its line has the
 * runtime "weft_c"; beside weft's own W6 (bench/weft_workloads.cc, the same steps through the C++
 * API) it measures what the C layer costs. Usage, as the other workload programs:
 *   weft_c_workloads [--reps N] [--workers N] [--only W6]
 * bench/run_workloads.sh runs it as the peer weft_c. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <malloc.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "weft/api/c/weft.h"

enum { kConns = 100, kTrips = 1000, kSize = 64, kMaxReps = 100 };

struct w6 {
  weft_runtime_t* rt;
  int listener;
  struct sockaddr_in addr;
  atomic_long delivered;
};

static void set_nodelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A connection's server fiber: echoes through a buffer on its stack until the stream ends. */
static void echo_conn(void* arg) {
  int fd = (int)(intptr_t)arg;
  char buf[kSize * 4];
  for (;;) {
    int64_t n = weft_read(fd, buf, sizeof buf, NULL);
    if (n <= 0 || weft_write_all(fd, buf, (uint64_t)n, NULL) != 0) break;
  }
  weft_close(fd);
}

static void server(void* arg) {
  struct w6* s = (struct w6*)arg;
  weft_fiber_t* conns[kConns];
  int n = 0;
  for (; n < kConns; ++n) {
    int fd = weft_accept(s->listener, NULL, NULL, NULL);
    if (fd < 0) break;
    set_nodelay(fd);
    if (weft_spawn(s->rt, echo_conn, (void*)(intptr_t)fd, &conns[n]) != 0) {
      weft_close(fd);
      break;
    }
  }
  for (int i = 0; i < n; ++i) weft_fiber_join(conns[i], -1);
}

static void client(void* arg) {
  struct w6* s = (struct w6*)arg;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  if (weft_connect(fd, &s->addr, sizeof s->addr, NULL) == 0) {
    set_nodelay(fd);
    char out[kSize] = {0}, in[kSize];
    for (int i = 0; i < kTrips; ++i) {
      memcpy(out, &i, sizeof i);
      if (weft_write_all(fd, out, kSize, NULL) != 0 || weft_read_exact(fd, in, kSize, NULL) != 0) {
        break;
      }
      if (memcmp(in, out, kSize) != 0) break;
      atomic_fetch_add_explicit(&s->delivered, 1, memory_order_relaxed);
    }
  }
  weft_close(fd);
}

static void body(void* arg) {
  struct w6* s = (struct w6*)arg;
  weft_fiber_t* srv = NULL;
  weft_fiber_t* clients[kConns];
  if (weft_spawn(s->rt, server, s, &srv) != 0) return;
  int n = 0;
  for (; n < kConns; ++n) {
    if (weft_spawn(s->rt, client, s, &clients[n]) != 0) break;
  }
  for (int i = 0; i < n; ++i) weft_fiber_join(clients[i], -1);
  weft_fiber_join(srv, -1);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* One W6 run: a fresh listener, 100 clients and their server fibers; exits on a lost message. */
static double run_w6(weft_runtime_t* rt) {
  struct w6 s;
  s.rt = rt;
  atomic_init(&s.delivered, 0);
  s.listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  memset(&s.addr, 0, sizeof s.addr);
  s.addr.sin_family = AF_INET;
  s.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof s.addr;
  if (s.listener < 0 || bind(s.listener, (struct sockaddr*)&s.addr, sizeof s.addr) != 0 ||
      listen(s.listener, SOMAXCONN) != 0 ||
      getsockname(s.listener, (struct sockaddr*)&s.addr, &len) != 0) {
    perror("W6: listener");
    exit(1);
  }
  double start = now_ms();
  int r = weft_block_on(rt, body, &s);
  double ms = now_ms() - start;
  weft_close(s.listener);
  if (r != 0 || atomic_load(&s.delivered) != (long)kConns * kTrips) {
    fprintf(stderr, "W6: lost messages (%ld of %ld delivered)\n", atomic_load(&s.delivered),
            (long)kConns * kTrips);
    exit(1);
  }
  return ms;
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static long rss_kb(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
  }
  if (f != NULL) fclose(f);
  return kb;
}

static int usage(void) {
  fprintf(stderr, "usage: weft_c_workloads [--reps N (1..%d)] [--workers N] [--only W6]\n",
          kMaxReps);
  return 2;
}

int main(int argc, char** argv) {
  int reps = 5;
  unsigned workers = 0;
  const char* only = "W6";
  for (int i = 1; i < argc; ++i) {
    if (i + 1 >= argc) return usage();
    if (strcmp(argv[i], "--reps") == 0) {
      reps = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--workers") == 0) {
      workers = (unsigned)atoi(argv[++i]);
    } else if (strcmp(argv[i], "--only") == 0) {
      only = argv[++i];
    } else {
      return usage();
    }
  }
  if (reps < 1 || reps > kMaxReps) return usage();
  /* Only W6 is written in C; for any other id, no line. */
  char ids[256];
  snprintf(ids, sizeof ids, ",%s,", only);
  if (strstr(ids, ",W6,") == NULL) return 0;
  /* Freed memory stays in the process, as for every runtime (WORKLOADS.md). */
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_MMAP_THRESHOLD, INT_MAX);

  weft_runtime_t* rt = NULL;
  weft_runtime_options_t o = {.size = sizeof o, .workers = workers};
  if (weft_runtime_create(&o, &rt) != 0) {
    fprintf(stderr, "weft_runtime_create failed\n");
    return 1;
  }
  const int progress = getenv("WEFT_BENCH_PROGRESS") != NULL;
  double samples[kMaxReps];
  for (int i = 0; i <= reps; ++i) {
    double ms = run_w6(rt);
    if (i > 0) samples[i - 1] = ms;
    if (progress && i == 0) fprintf(stderr, "    warm-up: %.1f ms\n", ms);
    if (progress && i > 0) fprintf(stderr, "    run %d/%d: %.1f ms\n", i, reps, ms);
  }
  /* The worker count the runtime chose: its stats list one object per worker. */
  char stats[1 << 16];
  unsigned used = workers;
  if (used == 0 && weft_runtime_stats_json(rt, stats, sizeof stats) > 0) {
    for (const char* p = stats; (p = strstr(p, "\"index\"")) != NULL; ++p) ++used;
  }
  weft_runtime_destroy(rt);

  double sorted[kMaxReps];
  memcpy(sorted, samples, sizeof(double) * (size_t)reps);
  qsort(sorted, (size_t)reps, sizeof(double), by_value);
  const double wall = sorted[reps / 2];
  const double ops = (double)kConns * kTrips;
  printf("{\"runtime\":\"weft_c\",\"workload\":\"tcp_echo\",\"n\":%ld,\"workers\":%u,"
         "\"ns_per_op\":%.2f,\"wall_ms\":%.3f,\"rss_kb\":%ld,\"samples_ms\":[",
         (long)ops, used, wall * 1e6 / ops, wall, rss_kb());
  for (int i = 0; i < reps; ++i) printf("%s%f", i == 0 ? "" : ",", samples[i]);
  printf("],\"msgs_per_s\":%.0f}\n", ops / (wall / 1000.0));
  return 0;
}
