// api/internal/signal_receivers.h: the recv calls in progress on a SignalSet, on every platform,
// so that closing the set under one (a use after free of its state) ends the process with a
// message instead.
//
// Defines (weft::signals_internal): Receivers.

#ifndef WEFT_API_INTERNAL_SIGNAL_RECEIVERS_H_
#define WEFT_API_INTERNAL_SIGNAL_RECEIVERS_H_

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace weft {
namespace signals_internal {

class Receivers {
 public:
  // Scope: one recv, counted for its whole length.
  class Scope {
   public:
    explicit Scope(Receivers& r) : r_(r) { r_.n_.fetch_add(1, std::memory_order_relaxed); }
    // release: the recv's accesses to the state happen before a close that sees it gone.
    ~Scope() { r_.n_.fetch_sub(1, std::memory_order_release); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Receivers& r_;
  };
  // AbortIfAny: close's check, before it frees the state.
  void AbortIfAny() const {
    // acquire: pairs with ~Scope's release.
    if (n_.load(std::memory_order_acquire) != 0) {
      std::fprintf(stderr, "weft: SignalSet closed or destroyed while a recv waits on it\n");
      std::abort();
    }
  }

 private:
  std::atomic<int> n_{0};
};

}  // namespace signals_internal
}  // namespace weft

#endif  // WEFT_API_INTERNAL_SIGNAL_RECEIVERS_H_
