// context/stack_guard.cc: the stack-overflow diagnostic. The pool registers each guard area it
// maps (internal/stack_guard.h); the fault handler (SIGSEGV or a vectored exception handler, in
// context/internal/vm_*.cc) calls OnGuardFault, which finds the stack whose guard was hit and
// prints one line naming it (its bounds, usable size and context name) with async-signal-safe
// writes only.

#include "internal/stack_guard.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "internal/stack_layout.h"
#include "weft/context/internal/record.h"
#include "weft/context/internal/vm.h"
#include "weft/context/stack.h"

namespace weft {
namespace context_internal {
namespace {

// ---- Guard-page registry, read by the signal handler ----------------------------------------
//
// Open addressing over guard-page addresses. Slots hold 0 (never used), kTombstone (freed) or
// the page address. The handler only reads; writers hold the registry mutex. A slot's usable
// size is published before its address (release) and read after it (acquire), so the handler
// never pairs an address with a stale size.
constexpr std::size_t kRegistrySlots = std::size_t{1} << 17;
constexpr std::uintptr_t kTombstone = 1;
std::atomic<std::uintptr_t> g_guard_page[kRegistrySlots];
std::atomic<std::size_t> g_guard_usable[kRegistrySlots];
std::size_t g_registry_used = 0;  // under g_registry_mu; includes tombstones
std::mutex g_registry_mu;

std::size_t RegistryHash(std::uintptr_t page) {
  return static_cast<std::size_t>((page >> 12) * 0x9E3779B97F4A7C15ull >> 47) &
         (kRegistrySlots - 1);
}

}  // namespace

void RegisterGuard(std::byte* page, std::size_t usable) {
  auto key = reinterpret_cast<std::uintptr_t>(page);
  std::lock_guard<std::mutex> lock(g_registry_mu);
  if (g_registry_used >= kRegistrySlots / 4 * 3)
    return;  // full: the stack still works,
             // an overflow is a plain SIGSEGV
  for (std::size_t i = RegistryHash(key);; i = (i + 1) & (kRegistrySlots - 1)) {
    // relaxed: writers are serialised by g_registry_mu.
    std::uintptr_t v = g_guard_page[i].load(std::memory_order_relaxed);
    if (v == 0 || v == kTombstone) {
      if (v == 0) ++g_registry_used;
      // relaxed: ordered before the address by the release store below.
      g_guard_usable[i].store(usable, std::memory_order_relaxed);
      // release: a handler that sees the address also sees the size stored above.
      g_guard_page[i].store(key, std::memory_order_release);
      return;
    }
  }
}

void UnregisterGuard(std::byte* page) {
  auto key = reinterpret_cast<std::uintptr_t>(page);
  std::lock_guard<std::mutex> lock(g_registry_mu);
  for (std::size_t i = RegistryHash(key);; i = (i + 1) & (kRegistrySlots - 1)) {
    // relaxed: writers are serialised by g_registry_mu.
    std::uintptr_t v = g_guard_page[i].load(std::memory_order_relaxed);
    if (v == 0) return;  // not registered (registry was full)
    if (v == key) {
      // relaxed: the handler tolerates a stale view; the page is unmapped after this anyway.
      g_guard_page[i].store(kTombstone, std::memory_order_relaxed);
      return;
    }
  }
}

namespace {

// ---- Guard chunks, read by the signal handler ------------------------------------------------
//
// With guard markers, guarded stacks are carved from chunks: the handler finds the chunk by
// address and the slot by offset. Writers hold g_registry_mu; an entry's fields are published
// before its base (release) and read after it (acquire). A freed entry's base is 0 and a later
// chunk may reuse it; a fault racing that reuse (a pool destroyed and another created while a
// fiber overflows) could read a mixed entry and name the wrong stack, or pass the fault on as a
// plain SIGSEGV.
struct GuardChunkEntry {
  std::atomic<std::uintptr_t> base{0};
  std::atomic<std::size_t> bytes{0};
  std::atomic<std::size_t> slot{0};
};
constexpr std::size_t kMaxGuardChunks = std::size_t{1} << 14;  // 64 GiB of 4 MiB chunks
GuardChunkEntry g_guard_chunks[kMaxGuardChunks];
std::atomic<std::size_t> g_guard_chunks_used{0};

}  // namespace

void RegisterGuardChunk(std::byte* base, std::size_t bytes, std::size_t slot) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  // relaxed (all three): writers are serialised by g_registry_mu.
  std::size_t used = g_guard_chunks_used.load(std::memory_order_relaxed);
  std::size_t i = 0;
  while (i < used && g_guard_chunks[i].base.load(std::memory_order_relaxed) != 0) ++i;
  if (i == kMaxGuardChunks) return;  // full: the stacks still work; an overflow is a plain SIGSEGV
  GuardChunkEntry& e = g_guard_chunks[i];
  // relaxed: ordered before the base by the release store below.
  e.bytes.store(bytes, std::memory_order_relaxed);
  e.slot.store(slot, std::memory_order_relaxed);
  // release: a handler that sees the base also sees the sizes stored above.
  e.base.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_release);
  // release: a handler that reads the new count sees the entry's base (and so its sizes).
  if (i == used) g_guard_chunks_used.store(used + 1, std::memory_order_release);
}

void UnregisterGuardChunk(std::byte* base) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  std::size_t used = g_guard_chunks_used.load(std::memory_order_relaxed);  // under the mutex
  for (std::size_t i = 0; i < used; ++i) {
    // relaxed: under the mutex; the handler tolerates a stale view (the chunk is unmapped after).
    if (g_guard_chunks[i].base.load(std::memory_order_relaxed) ==
        reinterpret_cast<std::uintptr_t>(base)) {
      g_guard_chunks[i].base.store(0, std::memory_order_relaxed);
      return;
    }
  }
}

namespace {

// LookupGuardChunk: whether addr is in the guard area of a slot of a guarded chunk; sets the
// slot's usable start and size. Async-signal-safe (atomic loads only).
bool LookupGuardChunk(std::uintptr_t addr, std::uintptr_t* usable_lo, std::size_t* usable) {
  // acquire: pairs with the count's release store, so each entry below is fully published.
  std::size_t used = g_guard_chunks_used.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used && i < kMaxGuardChunks; ++i) {
    // acquire: pairs with RegisterGuardChunk's release, so the sizes read below are this base's.
    std::uintptr_t base = g_guard_chunks[i].base.load(std::memory_order_acquire);
    if (base == 0 || addr < base) continue;
    // relaxed (both): ordered by the acquire above.
    std::size_t bytes = g_guard_chunks[i].bytes.load(std::memory_order_relaxed);
    std::size_t slot = g_guard_chunks[i].slot.load(std::memory_order_relaxed);
    if (slot == 0 || addr - base >= bytes) continue;
    std::size_t offset = (addr - base) % slot;
    if (offset >= kGuard) return false;  // in a chunk, not in a guard area
    *usable_lo = addr - offset + kGuard;
    *usable = slot - kGuard;
    return true;
  }
  return false;
}

// LookupGuard: async-signal-safe (atomic loads only).
bool LookupGuard(std::uintptr_t page, std::size_t* usable) {
  for (std::size_t i = RegistryHash(page), n = 0; n < kRegistrySlots;
       i = (i + 1) & (kRegistrySlots - 1), ++n) {
    // acquire: pairs with RegisterGuard's release, so the size read below is the one for page.
    std::uintptr_t v = g_guard_page[i].load(std::memory_order_acquire);
    if (v == 0) return false;
    if (v == page) {
      // relaxed: ordered by the acquire above.
      *usable = g_guard_usable[i].load(std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

// ---- Overflow diagnostics (async-signal-safe output) ----------------------------------------

struct Line {
  char buf[512];
  std::size_t n = 0;
  void Add(const char* s) {
    while (*s != '\0' && n < sizeof buf - 1) buf[n++] = *s++;
  }
  void Hex(std::uintptr_t v) {
    char digits[2 + 16];
    int i = 0;
    for (int shift = 60; shift >= 0; shift -= 4) {
      int d = static_cast<int>((v >> shift) & 0xf);
      if (i == 0 && d == 0 && shift != 0) continue;
      digits[i++] = static_cast<char>(d < 10 ? '0' + d : 'a' + d - 10);
    }
    digits[i] = '\0';
    Add("0x");
    Add(digits);
  }
  void Dec(std::size_t v) {
    char digits[24];
    int i = sizeof digits - 1;
    digits[i] = '\0';
    do {
      digits[--i] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    Add(digits + i);
  }
  void Write() { context_internal::WriteStderr(buf, n); }
};

// DescribeStack: "fiber stack [lo, hi) (N bytes usable), context "name"".
void DescribeStack(Line& line, std::uintptr_t usable_lo, std::size_t usable) {
  line.Add("fiber stack [");
  line.Hex(usable_lo);
  line.Add(", ");
  line.Hex(usable_lo + usable);
  line.Add(") (");
  line.Dec(usable);
  line.Add(" bytes usable)");
  // make_context puts the record at the aligned top: name it if it is there.
  using context_internal::ContextRecord;
  using context_internal::kRecordAlignment;
  std::uintptr_t top = (usable_lo + usable) & ~std::uintptr_t{kRecordAlignment - 1};
  auto* record = reinterpret_cast<const ContextRecord*>((top - sizeof(ContextRecord)) &
                                                        ~std::uintptr_t{kRecordAlignment - 1});
  if (record->magic == context_internal::kRecordMagic && record->name[0] != '\0') {
    char name[context_internal::kNameCapacity];
    std::memcpy(name, record->name, sizeof name);
    name[sizeof name - 1] = '\0';
    line.Add(", context \"");
    line.Add(name);
    line.Add("\"");
  }
}

// FindGuard: whether addr is in a weft guard area, of a guarded chunk's slot or of a stack with
// its own mapping; sets that stack's usable start and size. Async-signal-safe.
bool FindGuard(std::uintptr_t addr, std::uintptr_t* usable_lo, std::size_t* usable) {
  if (LookupGuardChunk(addr, usable_lo, usable)) return true;
  std::uintptr_t page = addr & ~std::uintptr_t{kPage - 1};
  for (std::uintptr_t lo = page; lo + kGuard > page; lo -= kPage) {  // each page of the area
    if (LookupGuard(lo, usable)) {
      *usable_lo = lo + kGuard;
      return true;
    }
  }
  return false;
}

// OnGuardFault: the context_internal::FaultHook. Async-signal-safe.
bool OnGuardFault(std::uintptr_t addr) {
  std::uintptr_t usable_lo = 0;
  std::size_t usable = 0;
  if (!FindGuard(addr, &usable_lo, &usable)) return false;
  Line line;
  line.Add("weft: fiber stack overflow: fault at ");
  line.Hex(addr);
  line.Add(" in the guard page of ");
  DescribeStack(line, usable_lo, usable);
  line.Add(". Give the fiber a larger stack (StackOptions::size) or make it use less.\n");
  line.Write();
  return true;
}

}  // namespace

[[noreturn]] void DieRedZone(const std::byte* usable_lo, std::size_t usable) {
  Line line;
  line.Add("weft: fiber stack overflow detected: the red zone below compact ");
  DescribeStack(line, reinterpret_cast<std::uintptr_t>(usable_lo), usable);
  line.Add(" was written. Memory below it may be corrupt; aborting.\n");
  line.Write();
  std::abort();
}

}  // namespace context_internal

bool install_stack_overflow_handler() {
  return context_internal::InstallFaultHook(&context_internal::OnGuardFault);
}

}  // namespace weft
