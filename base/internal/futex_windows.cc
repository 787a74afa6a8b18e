// base/internal/futex_windows.cc: FutexWait/FutexWake on Windows' address waits
// (WaitOnAddress / WakeByAddress*, Windows 8 and later; API set
// api-ms-win-core-synch-l1-2-0, import library libsynchronization).

#include <windows.h>

#include "weft/base/futex.h"

namespace weft::base_internal {

void FutexWait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               std::chrono::microseconds timeout) {
  // Milliseconds, rounded up so a short timeout still sleeps rather than spinning; a wait
  // that returns early (word changed, timeout, spurious) means: go and look again.
  auto ms = static_cast<DWORD>((timeout.count() + 999) / 1000);
  WaitOnAddress(reinterpret_cast<volatile VOID*>(&word), &expected, sizeof(expected), ms);
}

void FutexWake(std::atomic<std::uint32_t>& word, int count) {
  if (count == 1) {
    WakeByAddressSingle(reinterpret_cast<PVOID>(&word));
  } else {
    WakeByAddressAll(reinterpret_cast<PVOID>(&word));
  }
}

}  // namespace weft::base_internal
