// base/internal/thread_exit_windows.cc: ThreadExitKey on fiber-local storage. FlsAlloc's
// callback runs at thread exit with the slot's value (and at FlsFree, which weft never calls;
// weft does not use Windows fibers, whose deletion would run it too).

#include <windows.h>

#include <cstdio>
#include <cstdlib>

#include "weft/base/thread_exit.h"

namespace weft::base_internal {

// x64 has one calling convention: a plain `void(void*)` is a valid PFLS_CALLBACK_FUNCTION.
static_assert(sizeof(void*) == 8, "ThreadExitKey's callback cast assumes Windows x64");

ThreadExitKey::ThreadExitKey(void (*on_exit)(void*)) {
  DWORD index = FlsAlloc(reinterpret_cast<PFLS_CALLBACK_FUNCTION>(on_exit));
  if (index == FLS_OUT_OF_INDEXES) {
    std::fprintf(stderr, "weft: FlsAlloc: out of indexes (error %lu)\n", GetLastError());
    std::abort();
  }
  key_ = index;
}

void ThreadExitKey::Set(void* value) { FlsSetValue(static_cast<DWORD>(key_), value); }

}  // namespace weft::base_internal
