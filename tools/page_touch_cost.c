// tools/page_touch_cost.c: what the first write to a fresh anonymous page costs on this machine,
// with and without MADV_POPULATE_WRITE ahead of it, for pages at a stride (a stack pool's top
// pages are one slot apart: 20 KiB for 16 KiB stacks). A diagnostic of the host, not a test:
//
//   gcc -O2 -o /tmp/page_touch_cost tools/page_touch_cost.c && /tmp/page_touch_cost
//
// Each line: microseconds per point for the populate calls and for the first touch after them.
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static double NowUs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

// Run: at each of 2,048 points `stride` bytes apart, populates the `pages` pages that end at the
// point's top, then writes once to each point's top page.
static void Run(size_t stride, size_t pages) {
  const size_t points = 2048, page = 4096;
  char* p = mmap(NULL, points * stride, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    return;
  }
  double t0 = NowUs();
  for (size_t i = 0; i < points && pages != 0; ++i) {
    (void)madvise(p + (i + 1) * stride - pages * page, pages * page, MADV_POPULATE_WRITE);
  }
  double t1 = NowUs();
  for (size_t i = 0; i < points; ++i) ((volatile char*)p)[(i + 1) * stride - 64] = 1;
  double t2 = NowUs();
  printf("stride %3zu KiB, %zu page(s) populated each: populate %5.2f us, first touch %5.2f us\n",
         stride / 1024, pages, (t1 - t0) / points, (t2 - t1) / points);
  munmap(p, points * stride);
}

int main(void) {
  Run(4096, 1);
  Run(20480, 0);
  Run(20480, 1);
  Run(20480, 2);
  Run(20480, 5);
  Run(65536, 1);
  return 0;
}
