// context/internal/vm_windows.cc: context/internal/vm.h for Windows.
//
// Memory: VirtualAlloc reserves and commits (commit charge is taken up front, pages are
// demand-zero), VirtualProtect(PAGE_NOACCESS) makes guard pages, and VmDiscard decommits and
// recommits, which (unlike MEM_RESET) guarantees zeros afterwards, as the compact stacks' red-zone
// check needs.
//
// Faults: a vectored exception handler sees the fault first, on the faulting thread, and on the
// stack that faulted (Windows has no alternate signal stack): see kVmGuardBytes for how the
// guard area leaves it room.

#include <windows.h>

#include <mutex>

#include "weft/base/fault.h"
#include "weft/context/internal/vm.h"

namespace weft::context_internal {

void* VmMap(std::size_t bytes) {
  if (fault::Inject(fault::Site::kStackMap, fault::Kind::kNoMemory)) [[unlikely]] {
    SetLastError(ERROR_NOT_ENOUGH_MEMORY);  // WEFT_FAULTS (base/fault.h), as vm_posix.cc's
    return nullptr;
  }
  return VirtualAlloc(nullptr, bytes, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
}

void VmUnmap(void* p, std::size_t /*bytes*/) { VirtualFree(p, 0, MEM_RELEASE); }

bool VmMakeGuard(void* lo) {
  DWORD old = 0;
  auto* page = static_cast<char*>(lo);
  return VirtualProtect(page, 4096, PAGE_NOACCESS, &old) != 0 &&
         VirtualProtect(page + 4096, 4096, PAGE_READWRITE | PAGE_GUARD, &old) != 0;
}

// No guard markers on Windows: a guarded stack keeps its own allocation, which VirtualFree needs
// to release it on its own.
bool VmHasGuardMarkers() { return false; }
bool VmInstallGuards(void* /*base*/, std::size_t /*stride*/, std::size_t /*n*/) { return false; }

void VmDiscard(void* p, std::size_t bytes) {
  // Decommit works within one allocation: walk the range allocation by allocation.
  auto* at = static_cast<char*>(p);
  char* end = at + bytes;
  while (at < end) {
    MEMORY_BASIC_INFORMATION info{};
    if (VirtualQuery(at, &info, sizeof info) == 0) return;
    char* region_end = static_cast<char*>(info.BaseAddress) + info.RegionSize;
    std::size_t n = static_cast<std::size_t>((region_end < end ? region_end : end) - at);
    if (info.State == MEM_COMMIT && info.Protect == PAGE_READWRITE) {
      VirtualFree(at, n, MEM_DECOMMIT);
      VirtualAlloc(at, n, MEM_COMMIT, PAGE_READWRITE);
    }
    at += n;
  }
}

void VmPrefaultRead(void*, std::size_t, std::size_t, std::size_t) {}
void VmPrefaultWrite(void*, std::size_t, std::size_t, std::size_t) {}

// Windows itself has no per-process mapping limit, but each guarded stack takes its own 64 KiB
// allocation granule and three page ranges, and under Wine every one is a host mapping, bounded
// by the host's vm.max_map_count: the Linux default is the budget here too.
std::size_t VmMappingLimit() { return 65530; }

void WriteStderr(const char* s, std::size_t n) {
  DWORD written = 0;
  WriteFile(GetStdHandle(STD_ERROR_HANDLE), s, static_cast<DWORD>(n), &written, nullptr);
}

namespace {

FaultHook g_hook = nullptr;

LONG CALLBACK OnException(EXCEPTION_POINTERS* info) {
  const EXCEPTION_RECORD* r = info->ExceptionRecord;
  std::uintptr_t address = 0;
  if (r->ExceptionCode == EXCEPTION_GUARD_PAGE || r->ExceptionCode == EXCEPTION_ACCESS_VIOLATION) {
    if (r->NumberParameters < 2) return EXCEPTION_CONTINUE_SEARCH;
    address = static_cast<std::uintptr_t>(r->ExceptionInformation[1]);
  } else if (r->ExceptionCode == EXCEPTION_STACK_OVERFLOW) {
    address = static_cast<std::uintptr_t>(info->ContextRecord->Rsp);
  } else {
    return EXCEPTION_CONTINUE_SEARCH;
  }
  if (!g_hook(address)) return EXCEPTION_CONTINUE_SEARCH;
  // Ours: end the process now, with the status Windows gives a stack overflow. Unwinding or
  // continuing would run more code on a stack that has no room left.
  TerminateProcess(GetCurrentProcess(), static_cast<UINT>(EXCEPTION_STACK_OVERFLOW));
  return EXCEPTION_CONTINUE_SEARCH;
}

}  // namespace

bool InstallFaultHook(FaultHook hook) {
  static std::once_flag once;
  static bool installed = false;
  std::call_once(once, [hook] {
    g_hook = hook;
    installed = AddVectoredExceptionHandler(1, &OnException) != nullptr;
  });
  return installed;
}

}  // namespace weft::context_internal
