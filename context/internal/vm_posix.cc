// context/internal/vm_posix.cc: context/internal/vm.h for Linux and other POSIX systems.

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "weft/base/fault.h"
#include "weft/context/internal/vm.h"

namespace weft::context_internal {

void* VmMap(std::size_t bytes) {
  if (fault::Inject(fault::Site::kStackMap, fault::Kind::kNoMemory)) [[unlikely]] {
    errno = ENOMEM;  // WEFT_FAULTS (base/fault.h)
    return nullptr;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void VmUnmap(void* p, std::size_t bytes) { munmap(p, bytes); }

bool VmMakeGuard(void* lo) { return mprotect(lo, kVmGuardBytes, PROT_NONE) == 0; }

#ifdef __linux__
namespace {

// Older kernel headers lack these; the values are the kernel's ABI.
constexpr int kMadvGuardInstall = 102;  // MADV_GUARD_INSTALL, Linux 6.13
constexpr int kPidfdSelf = -10000;      // PIDFD_SELF, Linux 6.15
constexpr std::size_t kVectorSlots = 64;

// Cleared the first time process_madvise on PIDFD_SELF refuses (an older kernel, or a seccomp
// filter): from then on, one madvise per slot. relaxed: a hint; either path gives the same
// advice.
std::atomic<bool> g_vectored{true};

// MadviseStrided: `advice` over [base + i * stride, + bytes) for i < n, with one system call per
// kVectorSlots ranges where the kernel has process_madvise on itself, else one per range. False
// on the first range the kernel refuses (errno tells why).
bool MadviseStrided(std::byte* base, std::size_t stride, std::size_t n, std::size_t bytes,
                    int advice) {
  std::size_t i = 0;
#ifdef SYS_process_madvise
  while (i < n && g_vectored.load(std::memory_order_relaxed)) {
    iovec iov[kVectorSlots];
    std::size_t k = std::min(kVectorSlots, n - i);
    for (std::size_t j = 0; j < k; ++j) {
      iov[j].iov_base = base + (i + j) * stride;
      iov[j].iov_len = bytes;
    }
    long done = syscall(SYS_process_madvise, kPidfdSelf, iov, k, advice, 0u);
    if (done != static_cast<long>(k * bytes)) {
      // Refused, or partly done: the per-range calls below redo this group (each advice used
      // here is harmless given twice) and report any real failure.
      if (done < 0 && (errno == EBADF || errno == ENOSYS || errno == EINVAL || errno == EPERM)) {
        g_vectored.store(false, std::memory_order_relaxed);
      }
      break;
    }
    i += k;
  }
#endif
  for (; i < n; ++i) {
    if (madvise(base + i * stride, bytes, advice) != 0) return false;
  }
  return true;
}

bool InstallGuardsImpl(std::byte* base, std::size_t stride, std::size_t n) {
  return MadviseStrided(base, stride, n, kVmGuardBytes, kMadvGuardInstall);
}

}  // namespace

bool VmHasGuardMarkers() {
  static const bool has = [] {
    void* p = mmap(nullptr, 2 * kVmGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    bool ok = InstallGuardsImpl(static_cast<std::byte*>(p), kVmGuardBytes, 1);
    int fds[2];
    if (ok && pipe2(fds, O_CLOEXEC) == 0) {
      // The kernel reading a marked page fails with EFAULT; if the write succeeds, the call
      // above was accepted without effect (qemu-user does that with madvise advice it does
      // not know).
      ok = ::write(fds[1], p, 1) < 0 && errno == EFAULT;
      close(fds[0]);
      close(fds[1]);
    } else {
      ok = false;
    }
    munmap(p, 2 * kVmGuardBytes);
    return ok;
  }();
  return has;
}

bool VmInstallGuards(void* base, std::size_t stride, std::size_t n) {
  return InstallGuardsImpl(static_cast<std::byte*>(base), stride, n);
}
#else
bool VmHasGuardMarkers() { return false; }
bool VmInstallGuards(void*, std::size_t, std::size_t) { return false; }
#endif

void VmDiscard(void* p, std::size_t bytes) { madvise(p, bytes, MADV_DONTNEED); }

// MADV_POPULATE_READ and _WRITE came together (Linux 5.14); where the headers lack them, both
// prefaults are no-ops.
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
namespace {
// Prefault: the advice over the strided ranges. Cleared once the kernel refuses it (EINVAL: an
// older kernel), so that every later stack does not pay a refused system call; the pages then
// fault in as they are touched, as before. relaxed: a hint.
std::atomic<bool> g_populate{true};
void Prefault(void* base, std::size_t stride, std::size_t n, std::size_t bytes, int advice) {
  if (n == 0 || !g_populate.load(std::memory_order_relaxed)) return;
  if (!MadviseStrided(static_cast<std::byte*>(base), stride, n, bytes, advice) && errno == EINVAL) {
    g_populate.store(false, std::memory_order_relaxed);
  }
}
}  // namespace

void VmPrefaultRead(void* base, std::size_t stride, std::size_t n, std::size_t bytes) {
  Prefault(base, stride, n, bytes, MADV_POPULATE_READ);
}
void VmPrefaultWrite(void* base, std::size_t stride, std::size_t n, std::size_t bytes) {
  Prefault(base, stride, n, bytes, MADV_POPULATE_WRITE);
}
#else
void VmPrefaultRead(void*, std::size_t, std::size_t, std::size_t) {}
void VmPrefaultWrite(void*, std::size_t, std::size_t, std::size_t) {}
#endif

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
