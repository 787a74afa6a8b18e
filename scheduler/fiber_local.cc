// scheduler/fiber_local.cc: fiber-local storage (FiberLocal<T> in runtime.h): each fiber's slot
// table (LocalSlots), cleared as the fiber ends, on the fiber; a plain thread's, destroyed at
// thread exit. Also the fiber's TaskGroup token (scheduler/task_group.h), the one fiber-local
// the runtime itself keeps.

#include <algorithm>
#include <atomic>
#include <cstddef>
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

LocalSlots::Slot& LocalSlots::at(std::size_t key) {
  if (key >= size) {
    std::size_t n = std::max<std::size_t>(key + 1, size * 2);
    auto* grown = new Slot[n];
    std::copy(slots, slots + size, grown);
    delete[] slots;
    slots = grown;
    size = n;
  }
  return slots[key];
}

void LocalSlots::clear() {
  for (std::size_t i = size; i-- > 0;) {
    Slot s = slots[i];
    slots[i] = Slot{};
    if (s.value != nullptr) s.destroy(s.value);
  }
}

LocalSlots::~LocalSlots() {
  clear();
  delete[] slots;
}

LocalSlots& CurrentLocals() {
  Fiber* f = CurrentFiber();
  return f != nullptr ? f->locals : ThreadLocals();
}

const CancellationToken* CurrentGroupToken() {
  Fiber* f = CurrentFiber();
  return f != nullptr ? f->group_token : nullptr;
}

void SetGroupToken(const CancellationToken* token) {
  if (Fiber* f = CurrentFiber()) f->group_token = token;
}

std::size_t NewLocalKey() {
  // Keys are never reused: a slot table only grows to the number of FiberLocals ever made.
  return g_next_local_key.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace scheduler_internal

}  // namespace weft
