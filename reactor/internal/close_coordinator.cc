// reactor/internal/close_coordinator.cc: the process-wide registry behind CloseCoordinator: the
// per-fd sets of reactors (base/internal/fd_table.h: 64-bit words, grown on demand, never freed),
// the live reactors by slot, and the notices and acknowledgements between them.

#include "weft/reactor/internal/close_coordinator.h"

#include <unistd.h>

#include <memory>
#include <mutex>
#include <new>

#include "weft/base/internal/fd_table.h"

namespace weft::reactor_internal {

// CloseWait: one close that waits for other reactors. remaining counts the acknowledgements still
// due plus the closing reactor's own hold while it posts the notices; whoever takes it to zero
// hands the close back to its reactor (or, if that reactor is gone, closes the fd itself).
struct CloseWait {
  weft::atomic<int> remaining{1};
  int fd = -1;
  IoOp* op = nullptr;  // null: a close that does not wait (Reactor::close(int))
  int origin_slot = -1;
  std::uint64_t origin_serial = 0;
  CloseWait* next = nullptr;  // in the closing reactor's done list
};

namespace {

constexpr int kSlots = 64;
constexpr int kSharedSlot = kSlots - 1;
// Each fd's set of user reactors, one bit each; chunks of 4 Ki fds.
base_internal::FdTable<std::uint64_t, 12, CloseCoordinator::kMaxTrackedFd> g_users;

}  // namespace

struct CloseRegistry {
  std::mutex mu;
  CloseCoordinator* slots[kSharedSlot] = {};  // slots 0..62, one reactor each
  std::vector<CloseCoordinator*> shared;      // every reactor on slot 63
  std::uint64_t next_serial = 1;

  static CloseRegistry& Get() {
    static CloseRegistry* r = new CloseRegistry;  // never destroyed: reactors outlive statics
    return *r;
  }
  // Find: the live reactor that holds (slot, serial), or null. Under mu.
  CloseCoordinator* Find(int slot, std::uint64_t serial) {
    if (slot < kSharedSlot) {
      CloseCoordinator* c = slots[slot];
      return c != nullptr && c->serial_ == serial ? c : nullptr;
    }
    for (CloseCoordinator* c : shared) {
      if (c->serial_ == serial) return c;
    }
    return nullptr;
  }
};

std::atomic<std::uint64_t>* CloseCoordinator::UsersOf(int fd, bool make) {
  return g_users.at(fd, make);  // null out of range or out of memory: this fd stays untracked
}

CloseCoordinator::CloseCoordinator(Reactor* self) : self_(self) {
  CloseRegistry& reg = CloseRegistry::Get();
  std::lock_guard<std::mutex> lock(reg.mu);
  serial_ = reg.next_serial++;
  slot_ = kSharedSlot;
  for (int i = 0; i < kSharedSlot; ++i) {
    if (reg.slots[i] == nullptr) {
      reg.slots[i] = this;
      slot_ = i;
      break;
    }
  }
  if (slot_ == kSharedSlot) reg.shared.push_back(this);
  bit_ = std::uint64_t{1} << slot_;
}

void CloseCoordinator::Leave() {
  if (left_) return;
  left_ = true;
  {
    CloseRegistry& reg = CloseRegistry::Get();
    std::lock_guard<std::mutex> lock(reg.mu);
    if (slot_ < kSharedSlot) {
      reg.slots[slot_] = nullptr;
    } else {
      std::erase(reg.shared, this);
    }
  }
  // Out of the registry, nothing more is posted to us. What was posted is acknowledged (our
  // state for those fds goes away with the reactor), and the closes we started whose operations
  // we will not deliver now just close their fds.
  DrainMail([](int) {}, [] {}, [](IoOp&, int fd) { ::close(fd); });
}

CloseWait* CloseCoordinator::TakeMail(std::vector<Notice>& notices) {
  CloseRegistry& reg = CloseRegistry::Get();
  std::lock_guard<std::mutex> lock(reg.mu);
  // relaxed: under the mutex that every poster holds while it sets the flag.
  mail_.store(false, std::memory_order_relaxed);
  notices.swap(notices_);
  CloseWait* done = done_;
  done_ = nullptr;
  return done;
}

void CloseCoordinator::Acknowledge(CloseWait* wait) {
  // acq_rel: the last one to count down reads what the others did before theirs (each ended its
  // reactor's operations on fd before acknowledging), and the closing reactor reads it in turn.
  if (wait->remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (wait->op != nullptr) {
    CloseRegistry& reg = CloseRegistry::Get();
    std::lock_guard<std::mutex> lock(reg.mu);
    if (CloseCoordinator* origin = reg.Find(wait->origin_slot, wait->origin_serial)) {
      wait->next = origin->done_;
      origin->done_ = wait;
      // release: pairs with HasMail's acquire.
      origin->mail_.store(true, std::memory_order_release);
      origin->self_->wake();
      return;
    }
    ::close(wait->fd);  // the closing reactor is gone: finish its close for it
  }
  delete wait;
}

CloseWait* CloseCoordinator::NextOf(CloseWait* w) { return w->next; }
IoOp* CloseCoordinator::OpOf(CloseWait* w) { return w->op; }
int CloseCoordinator::FdOf(CloseWait* w) { return w->fd; }
void CloseCoordinator::Delete(CloseWait* w) { delete w; }

void CloseCoordinator::NoteFd_slow(int fd) {
  std::atomic<std::uint64_t>* users = UsersOf(fd, /*make=*/true);
  // relaxed: StartClose's exchange and this fetch_or are ordered by the word's modification
  // order alone: a bit set before the exchange is in the set it takes; one set after stays for
  // the next close. The notice itself travels under the registry mutex.
  if (users != nullptr) users->fetch_or(bit_, std::memory_order_relaxed);
}

bool CloseCoordinator::StartClose(IoOp* op, int fd) {
  std::atomic<std::uint64_t>* users = UsersOf(fd, /*make=*/false);
  if (users == nullptr) return true;
  // relaxed: see NoteFd_slow.
  std::uint64_t set = users->exchange(0, std::memory_order_relaxed);
  if (slot_ < kSharedSlot) set &= ~bit_;  // the shared slot's other reactors still count
  if (set == 0) return true;
  auto* wait = new (std::nothrow) CloseWait;
  if (wait == nullptr) return true;  // out of memory: close at once, as if nobody else had it
  wait->fd = fd;
  wait->op = op;
  wait->origin_slot = slot_;
  wait->origin_serial = serial_;
  CloseRegistry& reg = CloseRegistry::Get();
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    auto post = [&](CloseCoordinator* c) {
      if (c == nullptr || c == this) return;
      try {
        c->notices_.push_back(Notice{fd, nullptr});
      } catch (const std::bad_alloc&) {
        return;  // out of memory: that reactor is not waited for (its operations stay pending)
      }
      // seq_cst (the store and the load): Dekker with SetBusy (see the header). Also release
      // for HasMail's acquire.
      c->mail_.store(true, std::memory_order_seq_cst);
      if (!c->busy_.load(std::memory_order_seq_cst)) return;  // drains before its next op
      c->notices_.back().wait = wait;
      // relaxed: the count only has to stay above zero until this loop ends (our own hold).
      wait->remaining.fetch_add(1, std::memory_order_relaxed);
      c->self_->wake();
    };
    for (int i = 0; i < kSharedSlot; ++i) {
      if ((set & (std::uint64_t{1} << i)) != 0) post(reg.slots[i]);
    }
    if ((set & (std::uint64_t{1} << kSharedSlot)) != 0) {
      for (CloseCoordinator* c : reg.shared) post(c);
    }
  }
  // acq_rel: the last one to count down reads what the others did before theirs (their
  // reactors' operations on fd were ended before they acknowledged).
  if (wait->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    delete wait;  // nobody was posted to, or everyone posted to has acknowledged already
    return true;
  }
  return op == nullptr;
}

}  // namespace weft::reactor_internal
