// context/internal/ucontext_backend.cc: the portable context-switch backend, on POSIX
// getcontext/makecontext/swapcontext. Used where no hand-written assembly exists for the target,
// and on any target with --define=weft_context=ucontext (CI runs the suite that way too).
//
// It implements the raw ABI of raw.h. A suspended context's handle is the address of a ucontext_t
// on its own stack. The two transfer words and the on-top function travel through a per-thread
// slot: a switch starts and ends on the same OS thread, so the slot written before swapcontext is
// the one read after it. swapcontext also saves the signal mask with a system call: that is what
// makes this backend about two orders of magnitude slower than the asm ones.

#include <ucontext.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "weft/context/internal/raw.h"

namespace {

struct Pending {
  void* tag;
  void* data;
  WeftRawOnTop fn;  // null for a plain jump
  void* arg;
};

// PendingSlot: this thread's slot. noinline with a compiler barrier so that the TLS address is
// computed afresh after each switch (a context may resume on another thread).
[[gnu::noinline]] Pending* PendingSlot() {
  static thread_local Pending slot;
  Pending* p = &slot;
  asm volatile("" : "+r"(p)::"memory");
  return p;
}

// Arrival: what the resumed side sees, after running the on-top function if there is one.
WeftRawTransfer Arrive() {
  Pending p = *PendingSlot();
  if (p.fn != nullptr) return p.fn(p.tag, p.data, p.arg);
  return WeftRawTransfer{p.tag, p.data};
}

struct Start {
  ucontext_t uc;  // first member: the handle of a fresh context is &start->uc
  WeftRawEntry entry;
  void* arg;
};

void StartTrampoline(unsigned hi, unsigned lo) {
  auto* start = reinterpret_cast<Start*>((std::uintptr_t{hi} << 32) | lo);
  WeftRawEntry entry = start->entry;
  void* arg = start->arg;
  WeftRawTransfer t = Arrive();
  entry(t.tag, t.data, arg);
  std::fputs("weft: context entry returned (ucontext backend)\n", stderr);
  std::abort();
}

WeftRawTransfer Switch(void* to, void** save, const Pending& pending) {
  ucontext_t self;
  *save = &self;
  *PendingSlot() = pending;
  if (swapcontext(&self, static_cast<ucontext_t*>(to)) != 0) {
    std::perror("weft: swapcontext");
    std::abort();
  }
  return Arrive();
}

}  // namespace

extern "C" void* weft_context_make(void* stack_lo, void* stack_top, WeftRawEntry entry,
                                   void* arg) noexcept {
  auto top = reinterpret_cast<std::uintptr_t>(stack_top) & ~std::uintptr_t{15};
  auto* start = reinterpret_cast<Start*>((top - sizeof(Start)) & ~std::uintptr_t{63});
  new (start) Start{};
  start->entry = entry;
  start->arg = arg;
  if (getcontext(&start->uc) != 0) {
    std::perror("weft: getcontext");
    std::abort();
  }
  // makecontext runs StartTrampoline on everything below the Start block.
  start->uc.uc_stack.ss_sp = stack_lo;
  start->uc.uc_stack.ss_size =
      reinterpret_cast<std::uintptr_t>(start) - reinterpret_cast<std::uintptr_t>(stack_lo);
  start->uc.uc_link = nullptr;
  auto bits = reinterpret_cast<std::uintptr_t>(start);
  // makecontext passes int arguments only: the pointer travels as two 32-bit halves.
  makecontext(&start->uc, reinterpret_cast<void (*)()>(&StartTrampoline), 2,
              static_cast<unsigned>(bits >> 32), static_cast<unsigned>(bits & 0xffffffffu));
  return start;
}

extern "C" WeftRawTransfer weft_context_jump(void* to, void** save, void* tag,
                                             void* data) noexcept {
  return Switch(to, save, Pending{tag, data, nullptr, nullptr});
}

extern "C" WeftRawTransfer weft_context_ontop(void* to, void** save, void* tag, void* data,
                                              WeftRawOnTop fn, void* arg) noexcept {
  return Switch(to, save, Pending{tag, data, fn, arg});
}
