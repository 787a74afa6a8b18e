// context/internal/context_inl.h: the inline half of context/context.h. jump_context and
// jump_context_ontop are inline so that a switch costs its caller one call into the assembly and
// nothing else: an out-of-line wrapper adds a `ret` after every switch, and that return is
// mispredicted whenever the two contexts came from different call sites (measured: 4 ns -> 14 ns
// per switch; see docs/context.md, "Return prediction"). Cold checks and the sanitizer hooks
// stay out of line, in context.cc.

#ifndef WEFT_CONTEXT_INTERNAL_CONTEXT_INL_H_
#define WEFT_CONTEXT_INTERNAL_CONTEXT_INL_H_

#include "weft/context/internal/raw.h"
#include "weft/context/internal/record.h"
#include "weft/context/internal/sanitizers.h"
#if defined(WEFT_CONTEXT_INLINE_X86_64_SYSV)
#include "weft/context/internal/inline_x86_64_sysv.h"
#endif

namespace weft::context_internal {

// The thread's own record, and the running context of this thread (null: the thread's own).
// initial-exec: a fixed offset from the thread pointer, also from a shared library, so a switch
// pays no __tls_get_addr. Only touched before the raw switch, on the thread that switches: the
// resumed side may be on another thread and never reads them.
extern constinit thread_local ContextRecord t_root __attribute__((tls_model("initial-exec")));
extern constinit thread_local ContextRecord* t_current __attribute__((tls_model("initial-exec")));

[[noreturn, gnu::cold]] void DieBadTarget(const ContextRecord* to) noexcept;
void SanitizerBeginSwitch(ContextRecord* self, ContextRecord* to, bool exiting) noexcept;
void SanitizerArrive(ContextRecord* self, ContextRecord* from) noexcept;
WeftRawTransfer OnTopShim(void* tag, void* data, void* arg) noexcept;

struct OnTopCall {
  Transfer (*fn)(Transfer);
  ContextRecord* target;
};

inline ContextRecord* Current() noexcept { return t_current != nullptr ? t_current : &t_root; }

// BeginSwitch: the suspending side's bookkeeping, right before the raw switch.
inline void* BeginSwitch(ContextRecord* self, ContextRecord* to, bool exiting) noexcept {
  if (to == nullptr || to->magic != kRecordMagic || to->sp == nullptr) [[unlikely]] {
    DieBadTarget(to);
  }
  void* sp = to->sp;
  to->sp = nullptr;  // running from now on: a second resume is caught above
  t_current = to;
  if constexpr (WEFT_ASAN || WEFT_TSAN) SanitizerBeginSwitch(self, to, exiting);
  return sp;
}

// Arrive: the resumed side's bookkeeping, first thing after the raw switch returns (or in the
// on-top shim, earlier; the sanitizer part is then a no-op the second time).
inline void Arrive(ContextRecord* self, ContextRecord* from) noexcept {
  if constexpr (WEFT_ASAN) SanitizerArrive(self, from);
  (void)self;
  (void)from;
}

}  // namespace weft::context_internal

namespace weft {

inline Transfer jump_context(Context to, void* data) noexcept {
  using namespace context_internal;
  ContextRecord* self = Current();
  void* sp = BeginSwitch(self, to, /*exiting=*/false);
  WeftRawTransfer r = weft_context_jump(sp, &self->sp, self, data);
  auto* from = static_cast<ContextRecord*>(r.tag);
  Arrive(self, from);
  return Transfer{from, r.data};
}

inline void jump_context_last(Context to, void* data) noexcept {
  using namespace context_internal;
  if constexpr (WEFT_ASAN) {
    (void)jump_context(to, data);
  } else {
    // Nothing runs after the raw switch: BeginSwitch already marked `to` running, and the
    // resumed side (which may have suspended by any switch call) needs no Arrive without ASan.
    ContextRecord* self = Current();
    void* sp = BeginSwitch(self, to, /*exiting=*/false);
    weft_context_jump(sp, &self->sp, self, data);
  }
}

[[gnu::always_inline]] inline Transfer jump_context_inline(Context to, void* data) noexcept {
#if defined(WEFT_CONTEXT_INLINE_X86_64_SYSV)
  using namespace context_internal;
  ContextRecord* self = Current();
  void* sp = BeginSwitch(self, to, /*exiting=*/false);
  WeftRawTransfer r = InlineJump(sp, &self->sp, self, data);
  auto* from = static_cast<ContextRecord*>(r.tag);
  Arrive(self, from);
  return Transfer{from, r.data};
#else
  return jump_context(to, data);
#endif
}

inline Transfer jump_context_ontop(Context to, void* data, OnTopFn fn) noexcept {
  using namespace context_internal;
  ContextRecord* self = Current();
  void* sp = BeginSwitch(self, to, /*exiting=*/false);
  OnTopCall call{fn, to};
  WeftRawTransfer r = weft_context_ontop(sp, &self->sp, self, data, &OnTopShim, &call);
  auto* from = static_cast<ContextRecord*>(r.tag);
  Arrive(self, from);
  return Transfer{from, r.data};
}

}  // namespace weft

#endif  // WEFT_CONTEXT_INTERNAL_CONTEXT_INL_H_
