// context/context.cc: the out-of-line half of context/context.h: making, exiting and discarding
// contexts, the entry and on-top shims, the cold error paths, and the sanitizer hooks. The switch
// itself is inline (internal/context_inl.h): the caller's record is this thread's current one; it
// becomes `to`; ASan and TSan are told; the raw backend switches; on arrival the resumed side
// finishes the switch for ASan and marks itself running (sp = null).

#include "weft/context/context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <system_error>

#include "weft/context/internal/raw.h"
#include "weft/context/internal/record.h"
#include "weft/context/internal/sanitizers.h"

#if WEFT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if WEFT_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace weft {
namespace context_internal {

constinit thread_local ContextRecord t_root
    __attribute__((tls_model("initial-exec"))) = {.magic = kRecordMagic, .name = {}};
constinit thread_local ContextRecord* t_current __attribute__((tls_model("initial-exec"))) =
    nullptr;

namespace {

[[noreturn, gnu::cold]] void Die(const char* what) noexcept {
  std::fprintf(stderr, "weft: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

}  // namespace

void DieBadTarget(const ContextRecord* to) noexcept {
  if (to == nullptr || to->magic != kRecordMagic) Die("jump to a null or destroyed context");
  Die("jump to a context that is not suspended (it is running: the caller itself or on "
      "another thread)");
}

void SanitizerBeginSwitch(ContextRecord* self, ContextRecord* to, bool exiting) noexcept {
#if WEFT_ASAN
  to->asan_switch_pending = true;
  // An exiting caller's fake stack is released (nullptr) instead of saved.
  __sanitizer_start_switch_fiber(exiting ? nullptr : &self->asan_fake_stack, to->stack_lo,
                                 to->stack_size);
#endif
#if WEFT_TSAN
  // A thread's own fiber is known to TSan already; an exiting caller's fiber is destroyed by
  // OnTopShim, once we are off it.
  if (self->tsan_fiber == nullptr) self->tsan_fiber = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(to->tsan_fiber, 0);
#endif
  (void)self;
  (void)to;
  (void)exiting;
}

void SanitizerArrive(ContextRecord* self, ContextRecord* from) noexcept {
#if WEFT_ASAN
  if (!self->asan_switch_pending) return;
  self->asan_switch_pending = false;
  const void* from_lo = nullptr;
  std::size_t from_size = 0;
  __sanitizer_finish_switch_fiber(self->asan_fake_stack, &from_lo, &from_size);
  // A thread's own stack has no known bounds until the thread first leaves it.
  if (from != nullptr && from->entry == nullptr && from->stack_lo == nullptr) {
    from->stack_lo = const_cast<void*>(from_lo);
    from->stack_size = from_size;
  }
#endif
  (void)self;
  (void)from;
}

WeftRawTransfer OnTopShim(void* tag, void* data, void* arg) noexcept {
  const OnTopCall call = *static_cast<OnTopCall*>(arg);  // copy first: it lives on the caller
  auto* from = static_cast<ContextRecord*>(tag);
  Arrive(call.target, from);
#if WEFT_TSAN
  if (from->exiting && from->tsan_fiber != nullptr) {
    __tsan_destroy_fiber(from->tsan_fiber);
    from->tsan_fiber = nullptr;
  }
#endif
  Transfer t = call.fn(Transfer{from, data});
  return WeftRawTransfer{t.from, t.data};
}

namespace {

// EntryShim: the raw entry of every context made by make_context.
[[noreturn]] void EntryShim(void* tag, void* data, void* arg) noexcept {
  auto* self = static_cast<ContextRecord*>(arg);
  Arrive(self, static_cast<ContextRecord*>(tag));
  reinterpret_cast<ContextEntry>(self->entry)(Transfer{static_cast<ContextRecord*>(tag), data});
  Die("a context's entry function returned; it must end with exit_context()");
}

}  // namespace
}  // namespace context_internal

using context_internal::ContextRecord;
using context_internal::kRecordMagic;

Result<Context> make_context(StackSpan stack, ContextEntry entry) noexcept {
  if (entry == nullptr || stack.base == nullptr || stack.size < kMinContextStackSize) {
    return std::errc::invalid_argument;
  }
  auto lo = reinterpret_cast<std::uintptr_t>(stack.base);
  auto top = (lo + stack.size) & ~std::uintptr_t{context_internal::kRecordAlignment - 1};
  auto at = (top - sizeof(ContextRecord)) & ~std::uintptr_t{context_internal::kRecordAlignment - 1};
  auto* record = new (reinterpret_cast<void*>(at)) ContextRecord;  // not {}: see name
  record->name[0] = '\0';
  record->magic = kRecordMagic;
  record->entry = reinterpret_cast<void*>(entry);
  record->stack_lo = stack.base;
  record->stack_size = reinterpret_cast<std::uintptr_t>(record) - lo;
#if WEFT_ASAN
  // A reused stack may still carry poisoned redzones of frames that never returned.
  __asan_unpoison_memory_region(stack.base, record->stack_size);
#endif
#if WEFT_TSAN
  record->tsan_fiber = __tsan_create_fiber(0);
#endif
  record->sp = weft_context_make(stack.base, record, &context_internal::EntryShim, record);
  return record;
}

// Not instrumented for ASan: with detect_stack_use_after_return, an instrumented function keeps
// a local whose address escapes (`call`) in the thread's fake stack, which the exiting switch
// releases (SanitizerBeginSwitch) before the local is written and the target reads it. Here
// `call` is on the exiting context's own stack, which lives until fn has run.
WEFT_NO_SANITIZE_ADDRESS void exit_context(Context to, void* data, OnTopFn fn) noexcept {
  using namespace context_internal;
  ContextRecord* self = Current();
  self->exiting = true;
  void* sp = BeginSwitch(self, to, /*exiting=*/true);
  OnTopCall call{fn, to};
  weft_context_ontop(sp, &self->sp, self, data, &OnTopShim, &call);
  Die("a context was resumed after exit_context()");
}

void discard_context(Context context) noexcept {
  if (context == nullptr || context->magic != kRecordMagic) return;
  if (context->entry == nullptr) return;  // a thread's own record lives as long as the thread
#if WEFT_TSAN
  if (context->tsan_fiber != nullptr) __tsan_destroy_fiber(context->tsan_fiber);
#endif
  context->tsan_fiber = nullptr;
  context->magic = 0;
  context->sp = nullptr;
}

Context current_context() noexcept { return context_internal::Current(); }

void set_context_name(Context context, std::string_view name) noexcept {
  if (context == nullptr) return;
  std::size_t n = std::min(name.size(), context_internal::kNameCapacity - 1);
  std::memcpy(context->name, name.data(), n);
  context->name[n] = '\0';
}

std::string_view context_name(Context context) noexcept {
  if (context == nullptr) return {};
  return std::string_view(context->name);
}

}  // namespace weft
