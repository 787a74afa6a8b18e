// base/internal/thread_exit_posix.cc: ThreadExitKey on a pthread key; its destructor receives
// the value.

#include <pthread.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "weft/base/thread_exit.h"

namespace weft::base_internal {

ThreadExitKey::ThreadExitKey(void (*on_exit)(void*)) {
  pthread_key_t key;
  if (int e = pthread_key_create(&key, on_exit); e != 0) {
    std::fprintf(stderr, "weft: pthread_key_create: %s\n", std::strerror(e));
    std::abort();
  }
  key_ = static_cast<std::uintptr_t>(key);
}

void ThreadExitKey::Set(void* value) {
  pthread_setspecific(static_cast<pthread_key_t>(key_), value);
}

}  // namespace weft::base_internal
