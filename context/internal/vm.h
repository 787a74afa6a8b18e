// context/internal/vm.h: the operating-system seam under context/stack.cc: reserving and
// protecting stack memory, giving pages back, and catching the fault of a guard page. One
// implementation per OS family (vm_posix.cc: mmap/mprotect/madvise and a SIGSEGV handler on an
// alternate signal stack; vm_windows.cc: VirtualAlloc/VirtualProtect and a vectored exception
// handler). The scheduler uses VmPrefaultWrite too, for its blocks of fiber objects.

#ifndef WEFT_CONTEXT_INTERNAL_VM_H_
#define WEFT_CONTEXT_INTERNAL_VM_H_

#include <cstddef>
#include <cstdint>

namespace weft::context_internal {

// VmMap: `bytes` (a multiple of the page size) of read-write memory that reads as zeros until
// written, without reserving swap for it up front where the OS allows; null when out of memory
// or address space.
void* VmMap(std::size_t bytes);
// VmUnmap: gives back a whole VmMap region.
void VmUnmap(void* p, std::size_t bytes);
// kVmGuardBytes: the size of a guarded stack's guard area, at the low end of its VmMap region.
// One page on POSIX (the fault handler runs on an alternate signal stack). Two on Windows, which
// dispatches an exception on the stack that faulted: the upper page is PAGE_GUARD, which the OS
// turns into a plain read-write page as it raises the fault, giving the dispatcher and the
// handler room to run; the lower one is PAGE_NOACCESS.
#ifdef _WIN32
inline constexpr std::size_t kVmGuardBytes = 2 * 4096;
#else
inline constexpr std::size_t kVmGuardBytes = 4096;
#endif
// VmMakeGuard: protects [lo, lo + kVmGuardBytes) of a VmMap region as above; false on failure.
bool VmMakeGuard(void* lo);
// VmHasGuardMarkers: whether VmInstallGuards works here. Guard markers (Linux 6.13's
// MADV_GUARD_INSTALL) live in the page tables: they split no mapping, and the kernel installs them
// under the mmap read lock, so one mapping can hold hundreds of guarded stacks and threads that
// create stacks at once do not serialise on the mmap write lock as mprotect does. Probed once per
// process by reading a marked page from the kernel (an emulator such as qemu-user may accept the
// call and install nothing); false on kernels without them and on other systems.
bool VmHasGuardMarkers();
// VmInstallGuards: guard markers over [lo, lo + kVmGuardBytes) for each of the n slots at base,
// base + stride, base + stride * 2, ... of one VmMap region (one system call per 64 slots where
// the kernel has process_madvise on itself). False on failure. Markers stay through VmDiscard
// and go with VmUnmap. Only where VmHasGuardMarkers().
bool VmInstallGuards(void* base, std::size_t stride, std::size_t n);
// VmDiscard: gives back the memory under pages of VmMap regions (the range may span several
// regions); they stay usable and read as zeros afterwards.
void VmDiscard(void* p, std::size_t bytes);
// VmPrefaultRead: maps the shared zero page under the never-written ranges
// [base + i * stride, + bytes), i < n, so that reading them later does not fault.
// VmPrefaultWrite: gives those ranges their own zeroed pages now, so that the first write does
// not fault into the kernel. A fault costs an exception each, 15-23 us here; one system call
// populates 64 ranges where Linux has process_madvise on itself (6.15), about 1 us per page (a
// hypervisor that shadows the page tables may still exit on the first touch). Both are hints: a
// no-op where the OS has no such call (Linux before 5.14: the pages fault in when touched).
void VmPrefaultRead(void* base, std::size_t stride, std::size_t n, std::size_t bytes);
void VmPrefaultWrite(void* base, std::size_t stride, std::size_t n, std::size_t bytes);
// VmMappingLimit: how many separate mappings the process may have (Linux: vm.max_map_count), or
// a large number where the OS sets no such limit.
std::size_t VmMappingLimit();
// WriteStderr: unbuffered, usable inside the fault handler.
void WriteStderr(const char* s, std::size_t n);

// A FaultHook is called, on the faulting thread, with the address of an access that faulted. It
// returns true when the address is in a weft guard page, after printing its diagnostic; the
// process then dies the OS's usual way for that fault (SIGSEGV; STATUS_ACCESS_VIOLATION), so
// exit statuses and crash dumps stay what tools expect. On false the fault goes to whatever
// handler was there before. The hook must be async-signal-safe.
using FaultHook = bool (*)(std::uintptr_t address);
// InstallFaultHook: process-wide, once (later calls keep the first hook); then prepares the
// calling thread (an alternate signal stack on POSIX, so that an overflowed stack can still run
// the handler). False if either step failed.
bool InstallFaultHook(FaultHook hook);

}  // namespace weft::context_internal

#endif  // WEFT_CONTEXT_INTERNAL_VM_H_
