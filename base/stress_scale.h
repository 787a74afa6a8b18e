// base/stress_scale.h: the knob that makes weft's stress tests run longer, which sanitizer a
// test runs under, the death-test style that works where the test runs, and how a stack
// overflow ends a process there; and (POSIX) a tight address-space limit for out-of-memory death
// tests; the CPU time a process has used (idle tests). Tests size their loops as
// base * StressScale();
// WEFT_STRESS_SCALE=N (N >= 1, default 1) in the environment sets it, and tools/test_all.sh
// passes it through to Bazel.

#ifndef WEFT_BASE_STRESS_SCALE_H_
#define WEFT_BASE_STRESS_SCALE_H_

#ifndef _WIN32
#include <sys/resource.h>
#include <sys/wait.h>

#include <csignal>
#include <cstdio>
#endif

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <ctime>

namespace weft::testing {

inline int StressScale() {
  const char* s = std::getenv("WEFT_STRESS_SCALE");
  int v = s != nullptr ? std::atoi(s) : 1;
  return v > 0 ? v : 1;
}

// kTsan / kAsan: which sanitizer the test runs under. Under TSan every fiber creation and switch
// costs tens of microseconds (TSan keeps a large state per fiber), so fiber-count tests scale down.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kTsan = true;
#else
inline constexpr bool kTsan = false;
#endif
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAsan = true;
#else
inline constexpr bool kAsan = false;
#endif

// ProcessCpuSeconds: CPU time used by every thread of this process so far (idle tests measure
// that a runtime at rest stays off the CPU).
inline double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// DeathTestStyle: GoogleTest's death-test style for tests whose process has threads.
// "threadsafe" re-executes the test binary for each death test, which an emulator without
// binfmt_misc cannot do (qemu-user in the aarch64 config). There WEFT_DEATH_TEST_STYLE=fast, set
// by //:.bazelrc, forks without exec instead.
inline const char* DeathTestStyle() {
  const char* s = std::getenv("WEFT_DEATH_TEST_STYLE");
  return s != nullptr && *s != '\0' ? s : "threadsafe";
}

// DiedOfStackOverflow: how a fiber's guard-page overflow ends a death test's child, for
// EXPECT_EXIT: killed by SIGSEGV on POSIX; on Windows, exit status STATUS_STACK_OVERFLOW
// (0xC00000FD), which weft's handler ends the process with.
inline bool DiedOfStackOverflow(int status) {
#ifdef _WIN32
  return static_cast<unsigned>(status) == 0xC00000FDu;
#else
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
#endif
}

// Emulated: the test runs under an emulator (WEFT_EMULATOR=qemu-aarch64 or wine, set by
// //:.bazelrc's aarch64 and windows configs), where every instruction and syscall costs many times
// more host CPU. Tests that bound CPU use loosen the bound there; they never time anything.
inline bool Emulated() {
  const char* s = std::getenv("WEFT_EMULATOR");
  return s != nullptr && *s != '\0';
}

#ifndef _WIN32
// LimitAddressSpace: lowers RLIMIT_AS to what the process maps now plus `headroom` bytes, so that
// larger allocations fail with ENOMEM; the previous limit goes to *saved (restore it with
// setrlimit). False if that could not be done (no /proc/self/statm, or setrlimit refused). For
// death tests' child processes; sanitizers' shadow reservations and qemu-user defeat it.
inline bool LimitAddressSpace(std::size_t headroom, rlimit* saved) {
  ::getrlimit(RLIMIT_AS, saved);
  long pages = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  rlimit tight = *saved;
  tight.rlim_cur = static_cast<rlim_t>(pages) * 4096 + headroom;
  return pages != 0 && ::setrlimit(RLIMIT_AS, &tight) == 0;
}
#endif

// HoldUntil: spins (in a fiber: holding its worker, with no switch) until pred() or `cap`;
// pred()'s value. The cap only turns a regression into a failure instead of a hang.
template <typename Pred>
bool HoldUntil(Pred pred, std::chrono::seconds cap = std::chrono::seconds(30)) {
  const auto end = std::chrono::steady_clock::now() + cap;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
  }
  return true;
}

}  // namespace weft::testing

#endif  // WEFT_BASE_STRESS_SCALE_H_
