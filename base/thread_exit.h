// base/thread_exit.h: run a function when a thread exits, without a C++ thread_local destructor.
//
// Why not `thread_local T t;` with a destructor: MinGW-w64's GCC (emulated TLS) frees a
// thread's thread_local storage before it runs the C++ thread_local destructors, so those
// destructors read freed memory (msys2/MINGW-packages#2519, #7096). weft hit it as a waiter
// handed back to a pool as null. A ThreadExitKey hands the exit function the value itself, so
// nothing of the exiting thread's TLS is read: POSIX pthread keys, Windows fiber-local storage
// (FlsAlloc's callback runs at thread exit).
//
//   void Release(void* p) { static_cast<Thing*>(p)->Recycle(); }
//   ThreadExitKey& Key() { static auto* k = new ThreadExitKey(&Release); return *k; }
//   Key().Set(thing);  // this thread: Release(thing) runs when it exits
//
// Keys are a small per-process resource (PTHREAD_KEYS_MAX >= 128, FLS 4000): make one per use,
// statically, and never destroy it.
//
// ThreadOwned<T> is the common case built on a key: each thread's own T, made on first use and
// deleted when the thread exits.
//
//   ThreadOwned<Cache>::get()       // this thread's Cache (null only if out of memory)
//   ThreadOwned<Cache>::existing()  // or null if this thread has not made one

#ifndef WEFT_BASE_THREAD_EXIT_H_
#define WEFT_BASE_THREAD_EXIT_H_

#include <cstdint>
#include <new>

namespace weft::base_internal {

class ThreadExitKey {
 public:
  // Aborts with a message if the process has no keys left (a fixed cost at startup, not a
  // condition a caller can handle).
  explicit ThreadExitKey(void (*on_exit)(void*));
  ThreadExitKey(const ThreadExitKey&) = delete;
  ThreadExitKey& operator=(const ThreadExitKey&) = delete;

  // Set: the calling thread's value; on_exit(value) runs when the thread exits, unless the
  // value is null. Another Set replaces it (the old value gets no call).
  void Set(void* value);

 private:
  std::uintptr_t key_;
};

// ThreadOwned<T>: the calling thread's own T (default-constructed on first use), deleted at
// thread exit through a ThreadExitKey. One per type: give each use a type of its own.
template <typename T>
class ThreadOwned {
 public:
  // get: this thread's T, made now if it has none; null if there is no memory for it.
  static T* get() {
    if (t_ == nullptr) {
      static auto* key = new ThreadExitKey(&Destroy);  // never destroyed
      T* fresh = new (std::nothrow) T();
      if (fresh == nullptr) return nullptr;
      key->Set(fresh);
      t_ = fresh;
    }
    return t_;
  }
  // existing: this thread's T, or null if it has not made one.
  static T* existing() { return t_; }

 private:
  static void Destroy(void* p) {
#if !defined(_WIN32)
    // Native TLS outlives the key destructors: a later use (from another exit function) makes a
    // fresh T and sets the key again, which POSIX answers with another destructor round. Under
    // MinGW the TLS may be freed already: it is not touched.
    t_ = nullptr;
#endif
    delete static_cast<T*>(p);
  }
  static constinit inline thread_local T* t_ = nullptr;
};

}  // namespace weft::base_internal

#endif  // WEFT_BASE_THREAD_EXIT_H_
