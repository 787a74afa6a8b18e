// context/internal/vm_posix.cc: context/internal/vm.h for Linux and other POSIX systems.

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "context/internal/vm.h"

namespace weft::context_internal {

void* VmMap(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void VmUnmap(void* p, std::size_t bytes) { munmap(p, bytes); }

bool VmMakeGuard(void* lo) { return mprotect(lo, kVmGuardBytes, PROT_NONE) == 0; }

void VmDiscard(void* p, std::size_t bytes) { madvise(p, bytes, MADV_DONTNEED); }

void VmPrefaultRead(void* p, std::size_t bytes) {
  // Kernels before 5.14 refuse MADV_POPULATE_READ; the later read then faults as usual.
#ifdef MADV_POPULATE_READ
  (void)madvise(p, bytes, MADV_POPULATE_READ);
#else
  (void)p;
  (void)bytes;
#endif
}

std::size_t VmMappingLimit() {
  std::size_t max_map_count = 65530;
  int fd = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char buf[32] = {};
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n > 0) max_map_count = std::strtoull(buf, nullptr, 10);
    close(fd);
  }
  return max_map_count;
}

void WriteStderr(const char* s, std::size_t n) {
  ssize_t ignored = ::write(STDERR_FILENO, s, n);
  (void)ignored;
}

namespace {

FaultHook g_hook = nullptr;
struct sigaction g_previous_segv;

void OnSegv(int sig, siginfo_t* info, void* ucontext) {
  if (g_hook(reinterpret_cast<std::uintptr_t>(info->si_addr))) {
    // Back to the default action: the faulting instruction runs again and kills the process
    // with SIGSEGV, so exit status and core dumps stay what tools expect.
    signal(SIGSEGV, SIG_DFL);
    return;
  }
  // Not ours: hand over to whoever was installed before us.
  if ((g_previous_segv.sa_flags & SA_SIGINFO) != 0 && g_previous_segv.sa_sigaction != nullptr) {
    g_previous_segv.sa_sigaction(sig, info, ucontext);
  } else if (g_previous_segv.sa_handler != SIG_DFL && g_previous_segv.sa_handler != SIG_IGN) {
    g_previous_segv.sa_handler(sig);
  } else {
    signal(SIGSEGV, SIG_DFL);  // re-fault into the default action
  }
}

// Per-thread alternate signal stack, removed at thread exit.
struct AltStack {
  void* memory = nullptr;
  std::size_t size = 0;
  ~AltStack() {
    if (memory == nullptr) return;
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, nullptr);
    munmap(memory, size);
  }
};
thread_local AltStack t_alt_stack;
thread_local bool t_thread_ready = false;

bool InstallAltStackForThread() {
  stack_t current{};
  if (sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) == 0) return true;
  long min = sysconf(_SC_SIGSTKSZ);
  std::size_t size = std::max<std::size_t>(64 << 10, min > 0 ? static_cast<std::size_t>(min) : 0);
  void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return false;
  stack_t ss{};
  ss.ss_sp = memory;
  ss.ss_size = size;
  if (sigaltstack(&ss, nullptr) != 0) {
    munmap(memory, size);
    return false;
  }
  t_alt_stack.memory = memory;
  t_alt_stack.size = size;
  return true;
}

}  // namespace

bool InstallFaultHook(FaultHook hook) {
  if (t_thread_ready) return true;
  static std::once_flag once;
  static bool installed = false;
  std::call_once(once, [hook] {
    g_hook = hook;
    struct sigaction action {};
    action.sa_sigaction = &OnSegv;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    installed = sigaction(SIGSEGV, &action, &g_previous_segv) == 0;
  });
  t_thread_ready = installed && InstallAltStackForThread();
  return t_thread_ready;
}

}  // namespace weft::context_internal
