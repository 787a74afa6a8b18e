// api/internal/signals_windows.cc: SignalSet on Windows, where a process gets console control
// events rather than signals. One console control handler (SetConsoleCtrlHandler, installed at
// the first open) maps each event to a signal, as Go's runtime does: CTRL_C_EVENT and
// CTRL_BREAK_EVENT to SIGINT; CTRL_CLOSE_EVENT, CTRL_LOGOFF_EVENT and CTRL_SHUTDOWN_EVENT to
// SIGTERM. Windows runs the handler on a thread of its own, an ordinary thread, so it queues
// the signal under the set's weft::Mutex and signals its CondVar: recv is a CondVar wait (it
// parks a fiber, blocks a thread). When no set owns the signal the handler returns FALSE and
// Windows runs the next handler (by default, the one that ends the process): that is the
// disposition a close gives back.
//
// Not handled: for CTRL_CLOSE_EVENT, LOGOFF and SHUTDOWN Windows ends the process once the
// handler returns (or after its own timeout); the handler returns at once, so the program has
// only until then to act on the SIGTERM.

#include <windows.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "signal_receivers.h"  // a private header here (srcs)
#include "weft/api/internal/console_events.h"
#include "weft/api/signals.h"
#include "weft/sync/mutex.h"

namespace weft {
namespace {

// The ownable signals, each with an index into the tables below.
constexpr int kSignals[] = {SIGINT, SIGTERM};
constexpr int kSlots = 2;

int IndexOf(int signo) {
  for (int i = 0; i < kSlots; ++i) {
    if (kSignals[i] == signo) return i;
  }
  return -1;
}

int SignalOf(unsigned long event) {
  switch (event) {
    case CTRL_C_EVENT:
    case CTRL_BREAK_EVENT:
      return SIGINT;
    case CTRL_CLOSE_EVENT:
    case CTRL_LOGOFF_EVENT:
    case CTRL_SHUTDOWN_EVENT:
      return SIGTERM;
    default:
      return 0;
  }
}

BOOL WINAPI OnConsoleEvent(DWORD event) {
  return api_internal::DeliverConsoleEvent(event) ? TRUE : FALSE;
}

}  // namespace

// State: the owned signals and their queue. pending[i] (for kSignals[i]) under mutex.
struct SignalSet::State {
  std::vector<int> signals;
  Mutex mutex;
  CondVar ready;
  bool pending[kSlots] = {};
  unsigned next = 0;                      // under mutex: where the next claim starts
  signals_internal::Receivers receivers;  // recv calls in progress
  // ClaimLocked: a queued signal, taken off the queue, or 0. Caller holds mutex.
  int ClaimLocked() {
    const std::size_t n = signals.size();
    const std::size_t start = next++ % n;
    for (std::size_t i = 0; i < n; ++i) {
      const int signo = signals[(start + i) % n];
      bool& p = pending[IndexOf(signo)];
      if (p) {
        p = false;
        return signo;
      }
    }
    return 0;
  }
};

namespace {
// g_mutex: guards g_owner; the handler holds it while it queues, so close() (which clears the
// owner under it) never frees a State the handler is using.
std::mutex g_mutex;
SignalSet::State* g_owner[kSlots] = {};
}  // namespace

bool api_internal::DeliverConsoleEvent(unsigned long event) {
  const int signo = SignalOf(event);
  if (signo == 0) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  SignalSet::State* s = g_owner[IndexOf(signo)];
  if (s == nullptr) return false;
  (void)s->mutex.lock({});  // no deadline, no token: it waits until it has the lock
  s->pending[IndexOf(signo)] = true;
  (void)s->mutex.unlock();
  s->ready.signal();
  return true;
}

void SignalSet::StateDeleter::operator()(State* state) const { delete state; }

Result<SignalSet> SignalSet::open(std::span<const int> signals) {
  if (signals.empty()) return std::errc::invalid_argument;
  std::vector<int> unique;
  for (int signo : signals) {
    if (IndexOf(signo) < 0) return std::errc::invalid_argument;
    bool seen = false;
    for (int s : unique) seen = seen || s == signo;
    if (!seen) unique.push_back(signo);
  }
  static const bool installed = ::SetConsoleCtrlHandler(&OnConsoleEvent, TRUE) != 0;
  if (!installed) return std::errc::io_error;
  SignalSet set(new State);
  std::lock_guard<std::mutex> lock(g_mutex);
  for (int signo : unique) {
    if (g_owner[IndexOf(signo)] != nullptr) return std::errc::device_or_resource_busy;
  }
  for (int signo : unique) g_owner[IndexOf(signo)] = set.state_.get();
  set.state_->signals = std::move(unique);
  return set;
}

Result<int> SignalSet::try_recv() {
  if (state_ == nullptr) return std::errc::bad_file_descriptor;
  (void)state_->mutex.lock({});
  const int signo = state_->ClaimLocked();
  (void)state_->mutex.unlock();
  if (signo != 0) return signo;
  return std::errc::resource_unavailable_try_again;
}

Result<int> SignalSet::recv(const WaitOptions& options) {
  if (state_ == nullptr) return std::errc::bad_file_descriptor;
  State& s = *state_;
  signals_internal::Receivers::Scope receiving(s.receivers);
  if (Result<void> locked = s.mutex.lock(options); !locked.ok()) return locked.error();
  for (;;) {
    if (int signo = s.ClaimLocked(); signo != 0) {
      (void)s.mutex.unlock();
      return signo;
    }
    if (Result<void> woken = s.ready.wait(s.mutex, options); !woken.ok()) {
      // CondVar::wait holds the mutex again; a signal queued as the wait gave up is taken.
      const int signo = s.ClaimLocked();
      (void)s.mutex.unlock();
      if (signo != 0) return signo;
      return woken.error();
    }
  }
}

void SignalSet::close() {
  if (state_ == nullptr) return;
  state_->receivers.AbortIfAny();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (int signo : state_->signals) g_owner[IndexOf(signo)] = nullptr;
  }
  state_.reset();
}

}  // namespace weft
