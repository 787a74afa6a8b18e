// api/c/weft_c.cc: the C ABI of api/c/weft.h over the C++ API. Every entry point catches every
// exception (none may cross into C) and turns results into negative errno values.

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "weft/api/c/weft.h"
#include "weft/api/weft.h"

struct weft_runtime {
  weft::Runtime rt;
  explicit weft_runtime(weft::RuntimeOptions o) : rt(std::move(o)) {}
};

struct weft_fiber {
  weft::JoinHandle<int> handle;
};

struct weft_channel {
  std::uint32_t elem_size;
  weft::Channel<std::string> ch;  // each element a blob of elem_size bytes
  weft_channel(std::uint32_t size, std::uint32_t capacity) : elem_size(size), ch(capacity) {}
};

struct weft_mutex {
  weft::Mutex m;
};
struct weft_cond {
  weft::CondVar c;
};

namespace {

int Errno(std::errc e) { return -static_cast<int>(e); }

weft::WaitOptions Timeout(std::int64_t timeout_ns) {
  weft::WaitOptions o;
  if (timeout_ns >= 0) o.deadline = weft::SyncClock::now() + std::chrono::nanoseconds(timeout_ns);
  return o;
}

// Run: fn(arg), with any C++ exception that escapes it (a C++ callback behind a C pointer)
// caught and reported once: -EIO for the joiner.
int Run(weft_fn fn, void* arg) {
  try {
    fn(arg);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft: a C callback's fiber threw %s; its join returns -EIO\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "weft: a C callback's fiber threw; its join returns -EIO\n");
  }
  return -EIO;
}

// Guard: f() as an int result, with any exception turned into an errno.
template <typename F>
int Guard(F f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  } catch (const std::system_error& e) {
    return e.code().category() == std::generic_category() ? -e.code().value() : -EAGAIN;
  } catch (...) {
    return -EIO;
  }
}

// Create: a new T as *out (a mutex, a condition variable).
template <typename T>
int Create(T** out) {
  if (out == nullptr) return -EINVAL;
  *out = new (std::nothrow) T;
  return *out == nullptr ? -ENOMEM : 0;
}

}  // namespace

extern "C" {

uint32_t weft_abi_version(void) { return WEFT_ABI_VERSION; }

int weft_runtime_create(const weft_runtime_options_t* options, weft_runtime_t** out) {
  if (out == nullptr) return -EINVAL;
  *out = nullptr;
  weft::RuntimeOptions o;
  if (options != nullptr) {
    // The sizes of the versions this library knows (one so far).
    if (options->size != sizeof(weft_runtime_options_t)) return -EINVAL;
    if (options->workers > 1024) return -EINVAL;
    o.workers = options->workers;
    if (options->stack_size != 0) {
      if (options->stack_size > (std::uint64_t{1} << 30)) return -EINVAL;
      o.stack_size = static_cast<std::size_t>(options->stack_size);
    }
  }
  return Guard([&] {
    auto* r = new (std::nothrow) weft_runtime(std::move(o));
    if (r == nullptr) return -ENOMEM;
    *out = r;
    return 0;
  });
}

int weft_runtime_destroy(weft_runtime_t* rt) {
  if (rt == nullptr) return -EINVAL;
  if (weft::scheduler_internal::InFiberOf(rt->rt)) return -EDEADLK;
  return Guard([&] {
    delete rt;
    return 0;
  });
}

int weft_block_on(weft_runtime_t* rt, weft_fn fn, void* arg) {
  if (rt == nullptr || fn == nullptr) return -EINVAL;
  if (weft::scheduler_internal::InFiberOf(rt->rt)) return -EDEADLK;
  return Guard([&] { return rt->rt.block_on([fn, arg] { return Run(fn, arg); }); });
}

int weft_spawn(weft_runtime_t* rt, weft_fn fn, void* arg, weft_fiber_t** out) {
  if (rt == nullptr || fn == nullptr) return -EINVAL;
  if (out != nullptr) *out = nullptr;
  return Guard([&] {
    auto* f = out != nullptr ? new (std::nothrow) weft_fiber : nullptr;
    if (out != nullptr && f == nullptr) return -ENOMEM;
    weft::JoinHandle<int> h = rt->rt.spawn([fn, arg] { return Run(fn, arg); });
    if (f == nullptr) return 0;  // detached as h goes
    f->handle = std::move(h);
    *out = f;
    return 0;
  });
}

int weft_fiber_join(weft_fiber_t* f, int64_t timeout_ns) {
  if (f == nullptr) return -EINVAL;
  const weft::WaitOptions o = Timeout(timeout_ns);
  return Guard([&] {
    weft::Result<int> r = f->handle.join(o);
    if (!r.ok() && f->handle.joinable()) return Errno(r.error());  // timed out: still joinable
    delete f;
    return r.ok() ? *r : Errno(r.error());
  });
}

int weft_fiber_detach(weft_fiber_t* f) {
  if (f == nullptr) return -EINVAL;
  delete f;  // the handle detaches
  return 0;
}

int weft_yield(void) {
  if (weft::this_fiber::in_fiber()) {
    weft::this_fiber::yield();
  } else {
    std::this_thread::yield();
  }
  return 0;
}

int weft_sleep_ns(int64_t ns) {
  if (ns < 0) return -EINVAL;
  return Guard([&] {
    weft::Result<void> r = weft::this_fiber::sleep_for(std::chrono::nanoseconds(ns));
    return r.ok() ? 0 : Errno(r.error());
  });
}

int weft_channel_create(uint32_t elem_size, uint32_t capacity, weft_channel_t** out) {
  if (out == nullptr) return -EINVAL;
  *out = nullptr;
  if (elem_size == 0 || elem_size > (1u << 16) || capacity > (1u << 20)) return -EINVAL;
  return Guard([&] {
    auto* c = new (std::nothrow) weft_channel(elem_size, capacity);
    if (c == nullptr) return -ENOMEM;
    *out = c;
    return 0;
  });
}

int weft_channel_send(weft_channel_t* ch, const void* elem, int64_t timeout_ns) {
  if (ch == nullptr || elem == nullptr) return -EINVAL;
  return Guard([&] {
    weft::Result<void> r = ch->ch.send(std::string(static_cast<const char*>(elem), ch->elem_size),
                                       Timeout(timeout_ns));
    return r.ok() ? 0 : Errno(r.error());
  });
}

int weft_channel_recv(weft_channel_t* ch, void* elem, int64_t timeout_ns) {
  if (ch == nullptr || elem == nullptr) return -EINVAL;
  return Guard([&] {
    weft::Result<std::string> r = ch->ch.recv(Timeout(timeout_ns));
    if (!r.ok()) return Errno(r.error());
    std::memcpy(elem, r->data(), ch->elem_size);
    return 0;
  });
}

int weft_channel_try_send(weft_channel_t* ch, const void* elem) {
  if (ch == nullptr || elem == nullptr) return -EINVAL;
  return Guard([&] {
    weft::Result<void> r =
        ch->ch.try_send(std::string(static_cast<const char*>(elem), ch->elem_size));
    return r.ok() ? 0 : Errno(r.error());
  });
}

int weft_channel_try_recv(weft_channel_t* ch, void* elem) {
  if (ch == nullptr || elem == nullptr) return -EINVAL;
  return Guard([&] {
    weft::Result<std::string> r = ch->ch.try_recv();
    if (!r.ok()) return Errno(r.error());
    std::memcpy(elem, r->data(), ch->elem_size);
    return 0;
  });
}

int weft_channel_close(weft_channel_t* ch) {
  if (ch == nullptr) return -EINVAL;
  ch->ch.close();
  return 0;
}

int weft_channel_destroy(weft_channel_t* ch) {
  if (ch == nullptr) return -EINVAL;
  if (ch->ch.waiters() != 0) return -EBUSY;
  delete ch;
  return 0;
}

int weft_mutex_create(weft_mutex_t** out) { return Create(out); }

int weft_mutex_lock(weft_mutex_t* m, int64_t timeout_ns) {
  if (m == nullptr) return -EINVAL;
  return Guard([&] {
    weft::Result<void> r = m->m.lock(Timeout(timeout_ns));
    return r.ok() ? 0 : Errno(r.error());
  });
}

int weft_mutex_try_lock(weft_mutex_t* m) {
  if (m == nullptr) return -EINVAL;
  return m->m.try_lock() ? 0 : -EBUSY;
}

int weft_mutex_unlock(weft_mutex_t* m) {
  if (m == nullptr) return -EINVAL;
  return Guard([&] {
    weft::Result<void> r = m->m.unlock();
    return r.ok() ? 0 : Errno(r.error());
  });
}

int weft_mutex_destroy(weft_mutex_t* m) {
  if (m == nullptr) return -EINVAL;
  delete m;
  return 0;
}

int weft_cond_create(weft_cond_t** out) { return Create(out); }

int weft_cond_wait(weft_cond_t* c, weft_mutex_t* m, int64_t timeout_ns) {
  if (c == nullptr || m == nullptr) return -EINVAL;
  return Guard([&] {
    weft::Result<void> r = c->c.wait(m->m, Timeout(timeout_ns));
    return r.ok() ? 0 : Errno(r.error());
  });
}

int weft_cond_signal(weft_cond_t* c) {
  if (c == nullptr) return -EINVAL;
  c->c.signal();
  return 0;
}

int weft_cond_broadcast(weft_cond_t* c) {
  if (c == nullptr) return -EINVAL;
  c->c.broadcast();
  return 0;
}

int weft_cond_destroy(weft_cond_t* c) {
  if (c == nullptr) return -EINVAL;
  delete c;
  return 0;
}

}  // extern "C"
