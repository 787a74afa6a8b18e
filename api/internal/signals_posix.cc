// api/internal/signals_posix.cc: SignalSet on POSIX: a sigaction handler per owned signal that
// records the arrival and rings the owning set's self-pipe; recv waits for the pipe through
// io::poll (the worker's reactor in a fiber, a poll of the thread's own reactor on a thread).
//
// The handler runs on whichever thread the kernel picks, with whatever that thread's mask, and
// touches only lock-free std::atomic and write(2), both async-signal-safe. (std::atomic, not
// weft::atomic: the model checker cannot run inside a signal handler, and the handler needs
// atomics that are lock-free whatever the build.)
//
// Per signal s, in g_slots[s]:
//   pending    the owning set has an occurrence of s queued (coalescing: a flag, not a count)
//   wake_fd    the owning set's pipe write end, or -1 when no set owns s
//   in_handler handlers of s between their first step and their last
// The protocol, which recv and close rely on:
//   handler:  in_handler += 1; fd = wake_fd; if fd >= 0 { pending = true; write(fd) };
//             in_handler -= 1
//   recv:     loop { claim a pending flag (exchange to false) -> return it;
//                    poll the read end; drain it }
//   close:    restore the disposition; wake_fd = -1; wait until in_handler == 0;
//             pending = false; close the pipe
// No lost arrival: pending is set before the byte is written and a recv drains before it claims,
// so pending => (a byte is in the pipe) or (a recv that drained it has yet to claim). Exactly
// one recv takes each occurrence: the claim is an exchange. No write to a closed (or reused) fd:
// wake_fd = -1 and in_handler += 1 are sequentially consistent, so either close sees the handler
// in flight and waits for it, or the handler sees -1 and does nothing.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "signal_receivers.h"  // a private header here (srcs)
#include "weft/api/io.h"
#include "weft/api/signals.h"

namespace weft {
namespace {

static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

struct Slot {
  std::atomic<bool> pending{false};
  std::atomic<int> wake_fd{-1};
  std::atomic<int> in_handler{0};
  // Under g_mutex:
  bool owned = false;
  struct sigaction previous {};
};

// g_mutex: serialises open and close (never taken by the handler). A std::mutex: its critical
// sections are a few system calls, without a wait that would want to park a fiber.
std::mutex g_mutex;
Slot g_slots[NSIG];

void OnSignal(int signo) {
  const int saved_errno = errno;  // the interrupted code may be between a call and its errno check
  if (signo > 0 && signo < NSIG) {
    Slot& slot = g_slots[signo];
    slot.in_handler.fetch_add(1, std::memory_order_seq_cst);
    const int fd = slot.wake_fd.load(std::memory_order_seq_cst);
    if (fd >= 0) {
      slot.pending.store(true, std::memory_order_seq_cst);
      const char byte = 0;
      // A full pipe (EAGAIN) is fine: it is readable already.
      ssize_t ignored = ::write(fd, &byte, 1);
      (void)ignored;
    }
    slot.in_handler.fetch_sub(1, std::memory_order_release);
  }
  errno = saved_errno;
}

// Ownable: whether a set may own signo (docs in api/signals.h).
bool Ownable(int signo) {
  if (signo <= 0 || signo >= NSIG) return false;
  switch (signo) {
    case SIGKILL:
    case SIGSTOP:
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
      return false;
    default:
      break;
  }
#ifdef SIGRTMIN
  // Between the classic signals and SIGRTMIN, the C library's own (glibc: its thread
  // cancellation and set*id broadcast).
  if (signo > 31 && signo < SIGRTMIN) return false;
#endif
  return true;
}

// Release: gives signo back. Caller holds g_mutex and owns signo.
void Release(int signo) {
  Slot& slot = g_slots[signo];
  (void)::sigaction(signo, &slot.previous, nullptr);
  slot.wake_fd.store(-1, std::memory_order_seq_cst);
  while (slot.in_handler.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  slot.pending.store(false, std::memory_order_relaxed);
  slot.owned = false;
}

// kTransientRetries: as api/io.cc's: transient poll errors in a row (EINTR, EAGAIN: injected
// faults) that recv absorbs before it reports one.
constexpr int kTransientRetries = 64;

}  // namespace

// State: the owned signals and the self-pipe. read_fd is polled through weft's reactors (and
// closed through io::close); write_fd is written by the handler only.
struct SignalSet::State {
  std::vector<int> signals;
  int read_fd = -1;
  int write_fd = -1;
  std::atomic<unsigned> next{0};          // where the next claim starts: queued signals take turns
  signals_internal::Receivers receivers;  // recv calls in progress
  std::atomic<bool> polled{false};        // read_fd has been handed to a reactor
  int Claim();
  void Drain() const;
};

int SignalSet::State::Claim() {
  const std::size_t n = signals.size();
  const std::size_t start = next.fetch_add(1, std::memory_order_relaxed) % n;
  for (std::size_t i = 0; i < n; ++i) {
    const int signo = signals[(start + i) % n];
    if (g_slots[signo].pending.exchange(false, std::memory_order_seq_cst)) return signo;
  }
  return 0;
}

void SignalSet::State::Drain() const {
  char buf[64];
  while (::read(read_fd, buf, sizeof buf) > 0) {
  }
}

void SignalSet::StateDeleter::operator()(State* state) const { delete state; }

Result<SignalSet> SignalSet::open(std::span<const int> signals) {
  if (signals.empty()) return std::errc::invalid_argument;
  std::vector<int> unique;
  for (int signo : signals) {
    if (!Ownable(signo)) return std::errc::invalid_argument;
    bool seen = false;
    for (int s : unique) seen = seen || s == signo;
    if (!seen) unique.push_back(signo);
  }
  int fds[2];
  if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return static_cast<std::errc>(errno);
  SignalSet set(new State);
  set.state_->signals = std::move(unique);
  set.state_->read_fd = fds[0];
  set.state_->write_fd = fds[1];

  std::lock_guard<std::mutex> lock(g_mutex);
  for (int signo : set.state_->signals) {
    if (g_slots[signo].owned) {
      set.state_->signals.clear();  // owns nothing yet: close() gives nothing back
      return std::errc::device_or_resource_busy;
    }
  }
  struct sigaction action {};
  action.sa_handler = &OnSignal;
  // SA_RESTART: system calls the signal interrupts elsewhere in the program resume, as they
  // would had the signal not been caught. SA_ONSTACK: weft's alternate stack where there is one.
  action.sa_flags = SA_RESTART | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (std::size_t i = 0; i < set.state_->signals.size(); ++i) {
    const int signo = set.state_->signals[i];
    Slot& slot = g_slots[signo];
    slot.pending.store(false, std::memory_order_relaxed);
    slot.wake_fd.store(set.state_->write_fd, std::memory_order_seq_cst);
    if (::sigaction(signo, &action, &slot.previous) != 0) {
      const int err = errno;
      slot.wake_fd.store(-1, std::memory_order_seq_cst);
      for (std::size_t j = 0; j < i; ++j) Release(set.state_->signals[j]);
      set.state_->signals.clear();
      return static_cast<std::errc>(err);
    }
    slot.owned = true;
  }
  return set;
}

Result<int> SignalSet::try_recv() {
  if (state_ == nullptr) return std::errc::bad_file_descriptor;
  if (int signo = state_->Claim(); signo != 0) return signo;
  return std::errc::resource_unavailable_try_again;
}

Result<int> SignalSet::recv(const WaitOptions& options) {
  if (state_ == nullptr) return std::errc::bad_file_descriptor;
  State& s = *state_;
  signals_internal::Receivers::Scope receiving(s.receivers);
  int transient = 0;
  for (;;) {
    if (int signo = s.Claim(); signo != 0) return signo;
    s.polled.store(true, std::memory_order_relaxed);
    Result<std::uint32_t> ready = io::poll(s.read_fd, POLLIN, options);
    if (!ready.ok()) {
      const std::errc e = ready.error();
      if ((e == std::errc::interrupted || e == std::errc::resource_unavailable_try_again) &&
          ++transient <= kTransientRetries) {
        continue;
      }
      // A signal that arrived as the wait gave up is taken rather than left for later.
      if (int signo = s.Claim(); signo != 0) return signo;
      return e;
    }
    transient = 0;
    s.Drain();
  }
}

void SignalSet::close() {
  if (state_ == nullptr) return;
  state_->receivers.AbortIfAny();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (int signo : state_->signals) Release(signo);
  }
  // A read_fd that went through weft's reactors is closed through them (a plain thread's first
  // close makes it a reactor); one that never did, and write_fd, are closed directly.
  if (state_->polled.load(std::memory_order_relaxed)) {
    (void)io::close(state_->read_fd);
  } else {
    ::close(state_->read_fd);
  }
  ::close(state_->write_fd);
  state_.reset();
}

}  // namespace weft
