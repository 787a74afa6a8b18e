// reactor/internal/close_coordinator.h: closing an fd that other reactors (other workers, other
// threads) hold operations or state for, without handing the fd's next file to them.
//
// Defines: weft::reactor_internal::CloseCoordinator.
//
// Each reactor is one thread's, so another reactor's operations on an fd can only be ended by
// that reactor's own thread. A process-wide table records, per fd, which reactors have taken an
// operation on it (a bit per reactor: NoteFd, on the owner thread, as an operation starts). A
// close (StartClose) takes that set and, if it names other reactors, posts each a notice and
// wakes it; each drains its notices at the start of its next poll(), ends its operations on the
// fd (epoll: fails them with -ECANCELED and drops the fd from its epoll set; io_uring: submits
// what it has prepared, then cancels each operation by its user_data) and forgets its state for
// the fd, then acknowledges. Only when every notified reactor has acknowledged does the closing
// reactor call ::close: until then the fd number cannot be reused, so no operation taken before
// the close began can reach the number's next file. The closing reactor keeps polling while it
// waits (two reactors closing each other's fds never wait on each other).
//
// Only busy reactors are waited for. A reactor is busy from its first operation until a poll()
// that ends with none pending (SetBusy); an idle one may not poll again for a long time (a
// thread that did I/O once), and has no operation to end, so a close does not wait for it: its
// notice stays in its mailbox and it drains it (forgetting what it knew of the fd, such as an
// epoll registration) before it takes its next operation. SetBusy's store and the poster's
// load of it pair with the mailbox flag as a Dekker handshake (both sides seq_cst): either the
// poster sees the reactor busy and waits for its acknowledgement, or the reactor sees the mail
// as it turns busy (or as it turns idle, after its last poll) and drains it.
//
// Reactor slots: 63 reactors get a bit each; any further ones share the last bit, and a close
// whose set has it notifies all of them. fds >= kMaxTrackedFd are not tracked (closed at once).
//
// Threads: NoteFd, StartClose and Drain* on the owner thread; the notices and wake-ups are posted
// from any thread under one process-wide mutex (closes are rare next to reads and writes).

#ifndef WEFT_REACTOR_INTERNAL_CLOSE_COORDINATOR_H_
#define WEFT_REACTOR_INTERNAL_CLOSE_COORDINATOR_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "weft/base/atomic.h"
#include "weft/reactor/reactor.h"

namespace weft::reactor_internal {

struct CloseWait;

class CloseCoordinator {
 public:
  static constexpr int kMaxTrackedFd = 1 << 24;

  // self: the reactor to wake when a notice or an acknowledgement arrives.
  explicit CloseCoordinator(Reactor* self);
  // ~CloseCoordinator: acknowledges notices not yet drained (the reactor is going away with its
  // state), and leaves the registry. A close this reactor started and that is still waiting is
  // finished by the last acknowledger, which closes the fd.
  ~CloseCoordinator() { Leave(); }
  // Leave: what the destructor does, early: a reactor calls it first in its own destructor, so
  // that nothing wakes it once its waker is gone. Owner thread; idempotent.
  void Leave();
  CloseCoordinator(const CloseCoordinator&) = delete;
  CloseCoordinator& operator=(const CloseCoordinator&) = delete;

  // NoteFd: this reactor takes an operation on fd. Owner thread; one relaxed load when already
  // noted.
  void NoteFd(int fd) {
    std::atomic<std::uint64_t>* users = UsersOf(fd, /*make=*/false);
    // relaxed: only our own bit is tested, and only we set it (others may clear it, at a close:
    // then we set it again, which is what a new operation after that close needs).
    if (users != nullptr && (users->load(std::memory_order_relaxed) & bit_) != 0) return;
    NoteFd_slow(fd);
  }

  // SetBusy: owner thread; busy = true before taking an operation, busy = (operations pending)
  // at the end of poll(). Returns true when mail waits that must be drained now (before the
  // operation is taken, or before the thread leaves poll()). A plain bool compare unless the
  // state changes.
  bool SetBusy(bool busy) {
    if (busy == busy_cached_) return false;
    busy_cached_ = busy;
    // seq_cst (both): Dekker with StartClose's mail store and busy load (see the file comment).
    busy_.store(busy, std::memory_order_seq_cst);
    return mail_.load(std::memory_order_seq_cst);
  }

  // StartClose: begins closing fd, whose operations in this reactor have already been ended.
  // Returns true when no other reactor needs to act: the caller closes fd now. Else false: op
  // is parked here, and DrainMail hands it back once every other reactor has acknowledged.
  // op null: the caller closes fd now whatever this returns; the others are only told (they end
  // their operations on fd at their next poll; nothing waits for them).
  bool StartClose(IoOp* op, int fd);

  // HasMail: notices or acknowledgements wait (one acquire load: poll() checks it every time).
  bool HasMail() const {
    // acquire: pairs with the release in the posting paths; the posted entries are then
    // visible (they are also under the mutex, which DrainMail takes).
    return mail_.load(std::memory_order_acquire);
  }
  // DrainMail: owner thread, from poll(). For each fd another reactor is closing,
  // forget(fd) (end this reactor's operations on it and drop its state); then after_all() (e.g.
  // submit the cancels) and acknowledge them. Then, for each close this reactor started whose
  // acknowledgements are all in, done(op, fd): the caller closes fd and finishes op.
  template <typename Forget, typename AfterAll, typename Done>
  void DrainMail(Forget forget, AfterAll after_all, Done done) {
    std::vector<Notice> notices;
    CloseWait* finished = TakeMail(notices);
    if (!notices.empty()) {
      for (const Notice& n : notices) forget(n.fd);
      after_all();
      for (const Notice& n : notices) {
        if (n.wait != nullptr) Acknowledge(n.wait);  // null: the closer did not wait for us
      }
    }
    while (finished != nullptr) {
      CloseWait* next = NextOf(finished);
      IoOp* op = OpOf(finished);
      int fd = FdOf(finished);
      Delete(finished);
      done(*op, fd);
      finished = next;
    }
  }

 private:
  struct Notice {
    int fd;
    CloseWait* wait;  // null when we were idle as it was posted: nobody waits for our answer
  };
  friend struct CloseRegistry;

  static std::atomic<std::uint64_t>* UsersOf(int fd, bool make);
  void NoteFd_slow(int fd);
  CloseWait* TakeMail(std::vector<Notice>& notices);
  static void Acknowledge(CloseWait* wait);
  static CloseWait* NextOf(CloseWait* w);
  static IoOp* OpOf(CloseWait* w);
  static int FdOf(CloseWait* w);
  static void Delete(CloseWait* w);

  Reactor* const self_;
  bool left_ = false;
  int slot_;              // 0..63; 63 is shared by every reactor past the 63rd
  std::uint64_t bit_;     // 1 << slot_
  std::uint64_t serial_;  // tells a reused slot's new reactor from the one a close started on
  weft::atomic<bool> mail_{false};
  weft::atomic<bool> busy_{false};  // see SetBusy
  bool busy_cached_ = false;        // owner thread's copy
  // Guarded by the registry's mutex:
  std::vector<Notice> notices_;
  CloseWait* done_ = nullptr;  // closes whose acknowledgements are all in (a list via next)
};

}  // namespace weft::reactor_internal

#endif  // WEFT_REACTOR_INTERNAL_CLOSE_COORDINATOR_H_
