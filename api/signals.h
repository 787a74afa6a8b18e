// api/signals.h: waiting for process signals from fibers (or plain threads), as a value: a
// SignalSet owns some signals, and recv() parks the calling fiber until one of them arrives and
// returns its number. Like every weft wait it takes WaitOptions (timed_out, operation_canceled)
// and blocks a plain thread instead of parking when called outside a fiber.
//
// Defines: weft::SignalSet, weft::signals::wait.
//
// Guarantees:
//   - Once open() returns, an owned signal never runs its previous disposition (default action,
//     ignore, or another handler) and is not lost, whichever thread the kernel delivers it to:
//     the main thread, a worker, a blocking thread, a thread the program made. (A thread that
//     blocks the signal does not take it; the kernel keeps it pending until some thread takes
//     it.)
//   - Each arrival is received by exactly one recv. An arrival while no recv waits is queued in
//     the set and the next recv returns it. Repeats of one signal that arrive before it is
//     received coalesce into one (as the kernel's own pending signals and signalfd do): a set
//     keeps at most one pending occurrence per signal.
//   - A signal is owned by at most one open set in the process; closing the set (close() or the
//     destructor) restores the disposition it found, and drops the occurrences it had queued.
//
// POSIX: a sigaction handler records the arrival (lock-free atomics, async-signal-safe) and
// writes a byte to the set's self-pipe; recv waits for the pipe through api/io.h (the worker's
// reactor), so no thread is blocked per waiting fiber. weft does not change any thread's signal
// mask. Windows: console control events stand for signals: CTRL_C_EVENT and CTRL_BREAK_EVENT are
// SIGINT, CTRL_CLOSE_EVENT, CTRL_LOGOFF_EVENT and CTRL_SHUTDOWN_EVENT are SIGTERM; only those
// two signals can be owned there. docs/api.md explains the choice (and why not signalfd).
//
// Non-goals: siginfo (sender, value) is not reported; real-time signals coalesce like the others.

#ifndef WEFT_API_SIGNALS_H_
#define WEFT_API_SIGNALS_H_

#include <csignal>
#include <initializer_list>
#include <memory>
#include <span>

#include "weft/base/result.h"
#include "weft/sync/cancellation.h"

namespace weft {

// SignalSet: the signals it owns, their queue, and the waits on them. Movable, not copyable.
// A default-constructed or moved-from set is closed: recv and try_recv give bad_file_descriptor.
// Destroying or closing a set while a recv on it waits is a bug: it aborts with a message (cancel
// the waiters through their token first).
class SignalSet {
 public:
  // open: a set owning `signals` (duplicates are fine). Any thread or fiber. Errors:
  //   - invalid_argument: an empty list; a number outside 1..NSIG-1; SIGKILL or SIGSTOP (they
  //     cannot be caught); SIGSEGV, SIGBUS, SIGFPE or SIGILL (synchronous faults: returning
  //     from a handler re-runs the faulting instruction, and SIGSEGV is the fiber stack guard's,
  //     context/stack.h); the signals the C library keeps for itself (glibc: 32 to SIGRTMIN-1).
  //     On Windows anything but SIGINT and SIGTERM.
  //   - device_or_resource_busy: another open set owns one of them (this call then owns none).
  //   - too_many_files_open and other errno values from creating the set's pipe or sigaction.
  // SIGPIPE may be owned: weft never ignores it (its socket sends pass MSG_NOSIGNAL), so a
  // write to a broken pipe kills the process by default; owned, it is queued instead (and the
  // write fails with broken_pipe).
  static Result<SignalSet> open(std::initializer_list<int> signals);
  static Result<SignalSet> open(std::span<const int> signals);

  SignalSet() = default;
  SignalSet(SignalSet&& other) noexcept;
  SignalSet& operator=(SignalSet&& other) noexcept;  // closes what this set owned first
  SignalSet(const SignalSet&) = delete;
  SignalSet& operator=(const SignalSet&) = delete;
  ~SignalSet();

  // recv: the number of an owned signal that arrived (queued, or the next to arrive). In a fiber
  // it parks the fiber; on a plain thread it blocks the thread. Any number of fibers and threads
  // may wait on one set: each arrival wakes exactly one. A queued signal is returned without
  // waiting, whatever the options; otherwise timed_out past options.deadline, and
  // operation_canceled when options.cancel fires or the runtime shuts down. When several owned
  // signals are queued, successive calls take them in turn.
  Result<int> recv(const WaitOptions& options = {});
  // try_recv: a queued signal, or resource_unavailable_try_again; never waits.
  Result<int> try_recv();

  // close: gives the signals back (their previous dispositions are restored), drops the queued
  // occurrences and releases the pipe. Idempotent. No recv may be waiting on the set. A signal
  // that arrives during the close is either dropped with the set or meets the restored
  // disposition.
  void close();
  bool is_open() const { return state_ != nullptr; }

  // State: per platform (api/internal/signals_posix.cc, signals_windows.cc), deleted there.
  struct State;
  struct StateDeleter {
    void operator()(State* state) const;
  };

 private:
  explicit SignalSet(State* state) : state_(state) {}
  std::unique_ptr<State, StateDeleter> state_;
};

namespace signals {

// wait: opens a set for `signals`, receives one, closes it: a one-shot wait, such as a main
// that waits for SIGINT or SIGTERM (the return value says which). Arrivals before the call are
// not seen (open a SignalSet early for that). The errors of SignalSet::open and recv.
Result<int> wait(std::initializer_list<int> signals, const WaitOptions& options = {});

}  // namespace signals

}  // namespace weft

#endif  // WEFT_API_SIGNALS_H_
