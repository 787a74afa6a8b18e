// scheduler/fiber_local.cc: fiber-local storage (FiberLocal<T> in runtime.h): each fiber's slot
// table (LocalSlots), cleared as the fiber ends, on the fiber; a plain thread's, destroyed at
// thread exit. Also CurrentGroupToken: the TaskGroup token of the running fiber
// (scheduler/task_group.h), which its body answers.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <new>

#include "internal/runtime_impl.h"
#include "weft/base/thread_exit.h"

namespace weft {
namespace scheduler_internal {

namespace {
std::atomic<std::size_t> g_next_local_key{0};
// A plain thread's fiber-local slots: made on first use, destroyed (running the values'
// destructors) at thread exit, through a ThreadOwned (base/thread_exit.h says why).
LocalSlots& ThreadLocals() {
  if (LocalSlots* slots = base_internal::ThreadOwned<LocalSlots>::get()) return *slots;
  throw std::bad_alloc();
}
}  // namespace

// Table: the slots' count, then the slots, in one allocation.
struct LocalSlots::Table {
  std::size_t size;
  Slot* slots() { return reinterpret_cast<Slot*>(this + 1); }
  static Table* Make(std::size_t n) {
    static_assert(alignof(Slot) <= alignof(Table) && sizeof(Table) % alignof(Slot) == 0);
    void* mem = ::operator new(sizeof(Table) + n * sizeof(Slot));  // std::bad_alloc
    auto* t = new (mem) Table{n};
    std::uninitialized_value_construct_n(t->slots(), n);
    return t;
  }
  static void Free(Table* t) noexcept { ::operator delete(t); }  // (Slot: trivial)
};

LocalSlots::Slot& LocalSlots::at(std::size_t key) {
  const std::size_t size = table_ != nullptr ? table_->size : 0;
  if (key >= size) {
    Table* grown = Table::Make(std::max<std::size_t>(key + 1, size * 2));
    if (table_ != nullptr) std::copy(table_->slots(), table_->slots() + size, grown->slots());
    Table::Free(table_);
    table_ = grown;
  }
  return table_->slots()[key];
}

void LocalSlots::clear() {
  // A value's destructor may use a FiberLocal: the table is looked up again for each slot
  // (at() may move it), and a pass that destroyed anything is followed by another, for values
  // made meanwhile, up to kPasses (pthread keys' PTHREAD_DESTRUCTOR_ITERATIONS, 4). Values
  // made during the last pass are dropped undestroyed, as pthread leaves them: never handed to
  // the next fiber of the record.
  constexpr int kPasses = 4;
  for (int pass = 0; pass < kPasses && table_ != nullptr; ++pass) {
    bool destroyed = false;
    for (std::size_t i = table_->size; i-- > 0;) {
      Slot s = table_->slots()[i];
      table_->slots()[i] = Slot{};
      if (s.value != nullptr) {
        s.destroy(s.value);
        destroyed = true;
      }
    }
    if (!destroyed) return;
  }
  for (std::size_t i = 0; table_ != nullptr && i < table_->size; ++i) table_->slots()[i] = Slot{};
}

LocalSlots::~LocalSlots() {
  clear();
  Table::Free(table_);
}

LocalSlots& CurrentLocals() {
  Fiber* f = CurrentFiber();
  return f != nullptr ? f->locals : ThreadLocals();
}

const CancellationToken* CurrentGroupToken() {
  Fiber* f = CurrentFiber();
  return f != nullptr && f->body != nullptr ? f->body->group_token() : nullptr;
}

std::size_t NewLocalKey() {
  // Keys are never reused: a slot table only grows to the number of FiberLocals ever made.
  return g_next_local_key.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace scheduler_internal

}  // namespace weft
