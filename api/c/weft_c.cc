// api/c/weft_c.cc: the C ABI of api/c/weft.h over the C++ API. Every entry point catches every
// exception (none may cross into C) and turns results into negative errno values.

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

#ifdef __GLIBCXX__
#include <cxxabi.h>  // abi::__cxa_current_exception_type
#endif

#include "weft/api/c/weft.h"
#include "weft/api/weft.h"

// WEFT_C_CHECK_HANDLES: keep the table of live handles that turns a consumed or mistyped handle
// into -EINVAL (weft_handle_checks). On in debug builds; define it 0 or 1 to choose.
#ifndef WEFT_C_CHECK_HANDLES
#ifdef NDEBUG
#define WEFT_C_CHECK_HANDLES 0
#else
#define WEFT_C_CHECK_HANDLES 1
#endif
#endif

namespace {
enum class Kind : std::uint8_t { kRuntime = 1, kFiber, kChannel, kMutex, kCond, kCancel };
constexpr bool kCheckHandles = WEFT_C_CHECK_HANDLES != 0;
}  // namespace

struct weft_runtime {
  static constexpr Kind kKind = Kind::kRuntime;
  weft::Runtime rt;
  explicit weft_runtime(weft::RuntimeOptions o) : rt(std::move(o)) {}
};

struct weft_fiber {
  static constexpr Kind kKind = Kind::kFiber;
  weft::JoinHandle<int> handle;
};

struct weft_channel {
  static constexpr Kind kKind = Kind::kChannel;
  std::uint32_t elem_size;
  weft::Channel<std::string> ch;  // each element a blob of elem_size bytes
  weft_channel(std::uint32_t size, std::uint32_t capacity) : elem_size(size), ch(capacity) {}
};

struct weft_mutex {
  static constexpr Kind kKind = Kind::kMutex;
  weft::Mutex m;
};

struct weft_cond {
  static constexpr Kind kKind = Kind::kCond;
  weft::CondVar c;
};

struct weft_cancel {
  static constexpr Kind kKind = Kind::kCancel;
  weft::CancellationSource source;
  weft::CancellationToken token;  // source's, kept so that waits can point at it
  weft_cancel() : token(source.token()) {}
  explicit weft_cancel(const weft::CancellationToken& parent)
      : source(parent), token(source.token()) {}
};

namespace {

// Handles: the live handles and their kinds, and a quarantine of the memory of the last 1,024
// consumed ones, so that a stale handle does not meet a new object at its address.
class Handles {
 public:
  static Handles& Get() {
    static Handles* h = new Handles;  // never destroyed: calls may come during exit
    return *h;
  }
  void Add(const void* p, Kind k) {
    std::lock_guard<std::mutex> l(mu_);
    live_[p] = Entry{k, false};
  }
  bool Live(const void* p, Kind k) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = live_.find(p);
    return it != live_.end() && it->second.kind == k;
  }
  // Claim: for a call that may consume p (a join, a detach): 0 and p marked busy, -EINVAL if it
  // is not a live handle of kind k, -EBUSY if another such call has it. Unclaim: not consumed.
  int Claim(const void* p, Kind k) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = live_.find(p);
    if (it == live_.end() || it->second.kind != k) return -EINVAL;
    if (it->second.busy) return -EBUSY;
    it->second.busy = true;
    return 0;
  }
  void Unclaim(const void* p) {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = live_.find(p); it != live_.end()) it->second.busy = false;
  }
  // Remove: false if p is not a live handle of kind k (then nothing changes).
  bool Remove(const void* p, Kind k) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = live_.find(p);
    if (it == live_.end() || it->second.kind != k) return false;
    live_.erase(it);
    return true;
  }
  void Quarantine(void* memory, void (*release)(void*)) {
    std::pair<void*, void (*)(void*)> oldest{nullptr, nullptr};
    {
      std::lock_guard<std::mutex> l(mu_);
      quarantine_.emplace_back(memory, release);
      if (quarantine_.size() <= kQuarantine) return;
      oldest = quarantine_.front();
      quarantine_.pop_front();
    }
    oldest.second(oldest.first);
  }

 private:
  static constexpr std::size_t kQuarantine = 1024;
  std::mutex mu_;
  struct Entry {
    Kind kind;
    bool busy;  // a join or detach has it (Claim)
  };
  std::unordered_map<const void*, Entry> live_;
  std::deque<std::pair<void*, void (*)(void*)>> quarantine_;
};

// Valid: p is a handle of T's kind that has not been consumed (as far as the build checks).
template <typename T>
bool Valid(const T* p) {
  if (p == nullptr) return false;
  if constexpr (kCheckHandles) return Handles::Get().Live(p, T::kKind);
  return true;
}

template <typename T>
void Release(void* memory) {
  ::operator delete (memory, std::align_val_t{alignof(T)});
}

// New: a T made from args as a new handle; null when memory runs out. T's constructor may
// throw (a Runtime whose thread cannot start): callers run it under Guard.
template <typename T, typename... A>
T* New(A&&... args) {
  void* memory = ::operator new (sizeof(T), std::align_val_t{alignof(T)}, std::nothrow);
  if (memory == nullptr) return nullptr;
  T* p;
  try {
    p = new (memory) T(std::forward<A>(args)...);
    if constexpr (kCheckHandles) {
      try {
        Handles::Get().Add(p, T::kKind);
      } catch (...) {
        p->~T();
        throw;
      }
    }
  } catch (...) {
    Release<T>(memory);
    throw;
  }
  return p;
}

// Delete: consumes handle p (already Valid): it stops being live, then is destroyed.
template <typename T>
void Delete(T* p) {
  if constexpr (kCheckHandles) {
    if (!Handles::Get().Remove(p, T::kKind)) return;  // consumed meanwhile by another call
  }
  p->~T();
  if constexpr (kCheckHandles) {
    Handles::Get().Quarantine(p, &Release<T>);
  } else {
    Release<T>(p);
  }
}

int Errno(std::errc e) { return -static_cast<int>(e); }

// After: the deadline ns from now; none when that is past the clock's range (INT64_MAX ns:
// "practically forever").
std::optional<weft::SyncClock::time_point> After(std::int64_t ns) {
  const weft::SyncClock::time_point t =
      weft::SaturatingAfter(weft::SyncClock::now(), std::chrono::nanoseconds(ns));
  if (t == weft::SyncClock::time_point::max()) return std::nullopt;
  return t;
}

weft::WaitOptions Timeout(std::int64_t timeout_ns) {
  weft::WaitOptions o;
  if (timeout_ns >= 0) o.deadline = After(timeout_ns);
  return o;
}

// ReadWait: *out from `wait` (null: no limit); -EINVAL for a struct this library does not know.
int ReadWait(const weft_wait_t* wait, weft::WaitOptions* out) {
  if (wait == nullptr) return 0;
  if (wait->size != sizeof(weft_wait_t) || wait->flags != 0) return -EINVAL;
  if (wait->deadline_ns != 0) {  // any negative one has passed, as 1 has
    out->deadline = weft::SyncClock::time_point(
        std::chrono::nanoseconds(std::max<std::int64_t>(wait->deadline_ns, 1)));
  }
  if (wait->cancel != nullptr) {
    if (!Valid(wait->cancel)) return -EINVAL;
    out->cancel = &wait->cancel->token;
  }
  return 0;
}

// RethrowIfForeign: in a catch (...), lets an unwinding that is not a C++ exception go on:
// pthread_exit's or a thread cancellation's forced unwind (it must not be stopped), or another
// language's. (Catching abi::__forced_unwind by type binds a reference the sanitizers reject.)
void RethrowIfForeign() {
#ifdef __GLIBCXX__
  if (abi::__cxa_current_exception_type() == nullptr) throw;
#endif
}

// Run: fn(arg), with any C++ exception that escapes it (a C++ callback behind a C pointer)
// caught and reported once: -EIO for the joiner.
int Run(weft_fn fn, void* arg) {
  try {
    fn(arg);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft: a C callback threw %s; its caller gets -EIO\n", e.what());
  } catch (...) {
    RethrowIfForeign();
    std::fprintf(stderr, "weft: a C callback threw; its caller gets -EIO\n");
  }
  return -EIO;
}

// Guard: f() as an integer result, with any exception turned into an errno.
template <typename F>
auto Guard(F f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  } catch (const std::system_error& e) {
    return e.code().category() == std::generic_category() ? -e.code().value() : -EAGAIN;
  } catch (...) {
    RethrowIfForeign();
    return -EIO;
  }
}

// Status: a Result<void> as 0 or a negative errno.
int Status(const weft::Result<void>& r) { return r.ok() ? 0 : Errno(r.error()); }

// Create: a new default-made T as *out (a mutex, a condition variable).
template <typename T>
int Create(T** out) {
  if (out == nullptr) return -EINVAL;
  *out = nullptr;
  return Guard([&] {
    *out = New<T>();
    return *out == nullptr ? -ENOMEM : 0;
  });
}

template <typename T>
int Destroy(T* p) {
  if (!Valid(p)) return -EINVAL;
  Delete(p);
  return 0;
}

// CopyOut: s into buf as snprintf would (cap - 1 bytes at most and a NUL); its full length.
std::int64_t CopyOut(std::string_view s, char* buf, std::uint64_t cap) {
  if (cap > 0) {
    if (buf == nullptr) return -EINVAL;
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(s.size(), cap - 1));
    if (n > 0) std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
  }
  return static_cast<std::int64_t>(s.size());
}

// Length: len as a size_t if a call may take it (at most INT64_MAX: the result must fit).
bool Length(std::uint64_t len, std::size_t* out) {
  if (len > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
      len > std::numeric_limits<std::size_t>::max()) {
    return false;
  }
  *out = static_cast<std::size_t>(len);
  return true;
}

// The runtime options struct of ABI 0.1 ended before max_blocking_threads.
constexpr std::uint32_t kRuntimeOptions01 = offsetof(weft_runtime_options_t, max_blocking_threads);

// Claim / Unclaim: a consuming call's hold on f (checked builds), so that two of them at once
// on one handle answer -EBUSY rather than both use it.
int Claim(weft_fiber_t* f) {
  if (f == nullptr) return -EINVAL;
  if constexpr (kCheckHandles) return Handles::Get().Claim(f, weft_fiber::kKind);
  return 0;
}
void Unclaim(weft_fiber_t* f) {
  if constexpr (kCheckHandles) Handles::Get().Unclaim(f);
}

int Join(weft_fiber_t* f, const weft::WaitOptions& o) {
  if (int e = Claim(f); e != 0) return e;
  return Guard([&] {
    weft::Result<int> r(std::errc::io_error);
    try {
      r = f->handle.join(o);
    } catch (...) {
      Unclaim(f);
      throw;
    }
    if (!r.ok() && f->handle.joinable()) {  // timed out, cancelled: still joinable
      Unclaim(f);
      return Errno(r.error());
    }
    Delete(f);
    return r.ok() ? *r : Errno(r.error());
  });
}

int Spawn(weft_runtime_t* rt, weft_fn fn, void* arg, const weft::FiberOptions& options,
          weft_fiber_t** out) {
  if (out != nullptr) *out = nullptr;
  if (!Valid(rt) || fn == nullptr) return -EINVAL;
  return Guard([&] {
    weft_fiber_t* f = nullptr;
    if (out != nullptr && (f = New<weft_fiber>()) == nullptr) return -ENOMEM;
    try {
      weft::JoinHandle<int> h = rt->rt.spawn([fn, arg] { return Run(fn, arg); }, options);
      if (f == nullptr) return 0;  // detached as h goes
      f->handle = std::move(h);
    } catch (...) {
      if (f != nullptr) Delete(f);
      throw;
    }
    *out = f;
    return 0;
  });
}

int Send(weft_channel_t* ch, const void* elem, const weft::WaitOptions& o) {
  if (!Valid(ch) || elem == nullptr) return -EINVAL;
  return Guard([&] {
    return Status(ch->ch.send(std::string(static_cast<const char*>(elem), ch->elem_size), o));
  });
}

// Recv: reads what it needs of ch before waiting: once the value is handed over, the channel
// may be destroyed (no one waits on it any more) before this call returns.
int Recv(weft_channel_t* ch, void* elem, const weft::WaitOptions& o) {
  if (!Valid(ch) || elem == nullptr) return -EINVAL;
  const std::uint32_t size = ch->elem_size;
  return Guard([&] {
    weft::Result<std::string> r = ch->ch.recv(o);
    if (!r.ok()) return Errno(r.error());
    std::memcpy(elem, r->data(), size);
    return 0;
  });
}

int Lock(weft_mutex_t* m, const weft::WaitOptions& o) {
  if (!Valid(m)) return -EINVAL;
  return Guard([&] { return Status(m->m.lock(o)); });
}

int Wait(weft_cond_t* c, weft_mutex_t* m, const weft::WaitOptions& o) {
  if (!Valid(c) || !Valid(m)) return -EINVAL;
  return Guard([&] { return Status(c->c.wait(m->m, o)); });
}

}  // namespace

extern "C" {

uint32_t weft_abi_version(void) { return WEFT_ABI_VERSION; }

int weft_handle_checks(void) { return kCheckHandles ? 1 : 0; }

int64_t weft_now_ns(void) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             weft::SyncClock::now().time_since_epoch())
      .count();
}

// ---- Runtimes ----------------------------------------------------------------------------------

int weft_runtime_create(const weft_runtime_options_t* options, weft_runtime_t** out) {
  if (out == nullptr) return -EINVAL;
  *out = nullptr;
  weft_runtime_options_t in{};  // the fields an older caller's struct lacks stay 0
  if (options != nullptr) {
    if (options->size != kRuntimeOptions01 && options->size != sizeof(weft_runtime_options_t)) {
      return -EINVAL;
    }
    std::memcpy(&in, options, options->size);
  }
  weft::RuntimeOptions o;
  if (in.workers > 1024) return -EINVAL;
  o.workers = in.workers;
  if (in.stack_size != 0) {
    if (in.stack_size > weft::kMaxStackSize) return -EINVAL;
    o.stack_size = static_cast<std::size_t>(in.stack_size);
  }
  if (in.max_blocking_threads != 0) {
    if (in.max_blocking_threads > (1u << 16)) return -EINVAL;
    o.max_blocking_threads = in.max_blocking_threads;
  }
  if ((in.flags & ~WEFT_RUNTIME_MEASURE_LATENCY) != 0) return -EINVAL;
  o.measure_latency = (in.flags & WEFT_RUNTIME_MEASURE_LATENCY) != 0;
  return Guard([&] {
    weft_runtime_t* r = New<weft_runtime>(std::move(o));
    if (r == nullptr) return -ENOMEM;
    *out = r;
    return 0;
  });
}

int weft_runtime_destroy(weft_runtime_t* rt) {
  if (!Valid(rt)) return -EINVAL;
  if (weft::scheduler_internal::InsideOf(rt->rt)) return -EDEADLK;
  return Guard([&] {
    Delete(rt);
    return 0;
  });
}

int weft_block_on(weft_runtime_t* rt, weft_fn fn, void* arg) {
  if (!Valid(rt) || fn == nullptr) return -EINVAL;
  if (weft::scheduler_internal::InsideOf(rt->rt)) return -EDEADLK;
  return Guard([&] { return rt->rt.block_on([fn, arg] { return Run(fn, arg); }); });
}

int64_t weft_runtime_stats_json(const weft_runtime_t* rt, char* buf, uint64_t cap) {
  if (!Valid(rt)) return -EINVAL;
  return Guard([&] { return CopyOut(rt->rt.stats_json(), buf, cap); });
}

int64_t weft_runtime_dump_fibers(const weft_runtime_t* rt, char* buf, uint64_t cap) {
  if (!Valid(rt)) return -EINVAL;
  return Guard([&] { return CopyOut(rt->rt.dump_fibers(), buf, cap); });
}

// ---- Fibers ------------------------------------------------------------------------------------

int weft_spawn(weft_runtime_t* rt, weft_fn fn, void* arg, weft_fiber_t** out) {
  return Spawn(rt, fn, arg, {}, out);
}

int weft_spawn_ex(weft_runtime_t* rt, weft_fn fn, void* arg, const weft_fiber_options_t* options,
                  weft_fiber_t** out) {
  if (out != nullptr) *out = nullptr;
  weft::FiberOptions o;
  if (options != nullptr) {
    if (options->size != sizeof(weft_fiber_options_t) || options->reserved != 0 ||
        (options->flags & ~WEFT_FIBER_PINNED) != 0 || options->stack_size > weft::kMaxStackSize) {
      return -EINVAL;
    }
    o.stack_size = static_cast<std::size_t>(options->stack_size);
    if (options->name != nullptr) o.name = options->name;  // copied by the spawn
    if ((options->flags & WEFT_FIBER_PINNED) != 0) {
      if (options->pinned_worker > static_cast<std::uint32_t>(std::numeric_limits<int>::max())) {
        return -EINVAL;
      }
      o.pinned_worker = static_cast<int>(options->pinned_worker);
    }
  }
  return Spawn(rt, fn, arg, o, out);
}

// (Join's Claim checks f.)
int weft_fiber_join(weft_fiber_t* f, int64_t timeout_ns) { return Join(f, Timeout(timeout_ns)); }

int weft_fiber_join_ex(weft_fiber_t* f, const weft_wait_t* wait) {
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  return Join(f, o);
}

int weft_fiber_detach(weft_fiber_t* f) {
  if (int e = Claim(f); e != 0) return e;
  Delete(f);  // the handle detaches
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

int weft_sleep_ns(int64_t ns) { return weft_sleep_ex(ns, nullptr); }

int weft_sleep_ex(int64_t ns, const weft_wait_t* wait) {
  if (ns < 0) return -EINVAL;
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  if (ns == 0) return 0;  // nothing to wait for, whatever the deadline
  return Guard([&] {
    const weft::SyncClock::time_point wake =
        weft::SaturatingAfter(weft::SyncClock::now(), std::chrono::nanoseconds(ns));
    const bool cut = o.deadline.has_value() && *o.deadline < wake;  // the wait's deadline first
    weft::Result<void> r = weft::this_fiber::sleep_until(cut ? *o.deadline : wake, o.cancel);
    if (r.ok() && cut) return -ETIMEDOUT;
    return Status(r);
  });
}

uint64_t weft_fiber_id(void) { return weft::this_fiber::id(); }

int64_t weft_fiber_name(char* buf, uint64_t cap) {
  return CopyOut(weft::this_fiber::name(), buf, cap);
}

int weft_call_blocking(weft_fn fn, void* arg) {
  if (fn == nullptr) return -EINVAL;
  return Guard([&] { return weft::call_blocking([fn, arg] { return Run(fn, arg); }); });
}

// ---- Cancellation ------------------------------------------------------------------------------

int weft_cancel_create(const weft_cancel_t* parent, weft_cancel_t** out) {
  if (out == nullptr) return -EINVAL;
  *out = nullptr;
  if (parent != nullptr && !Valid(parent)) return -EINVAL;
  return Guard([&] {
    *out = parent != nullptr ? New<weft_cancel>(parent->token) : New<weft_cancel>();
    return *out == nullptr ? -ENOMEM : 0;
  });
}

int weft_cancel_cancel(weft_cancel_t* c) {
  if (!Valid(c)) return -EINVAL;
  return Guard([&] {
    c->source.cancel();
    return 0;
  });
}

int weft_cancel_after_ns(weft_cancel_t* c, int64_t ns) {
  if (!Valid(c) || ns < 0) return -EINVAL;
  return Guard([&] { return Status(c->source.cancel_after(std::chrono::nanoseconds(ns))); });
}

int weft_cancel_is_cancelled(const weft_cancel_t* c) {
  if (!Valid(c)) return -EINVAL;
  return c->token.is_cancelled() ? 1 : 0;
}

int weft_cancel_destroy(weft_cancel_t* c) { return Destroy(c); }

// ---- Channels ----------------------------------------------------------------------------------

int weft_channel_create(uint32_t elem_size, uint32_t capacity, weft_channel_t** out) {
  if (out == nullptr) return -EINVAL;
  *out = nullptr;
  if (elem_size == 0 || elem_size > (1u << 16) || capacity > (1u << 20)) return -EINVAL;
  return Guard([&] {
    *out = New<weft_channel>(elem_size, capacity);
    return *out == nullptr ? -ENOMEM : 0;
  });
}

int weft_channel_send(weft_channel_t* ch, const void* elem, int64_t timeout_ns) {
  return Send(ch, elem, Timeout(timeout_ns));
}

int weft_channel_send_ex(weft_channel_t* ch, const void* elem, const weft_wait_t* wait) {
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  return Send(ch, elem, o);
}

int weft_channel_recv(weft_channel_t* ch, void* elem, int64_t timeout_ns) {
  return Recv(ch, elem, Timeout(timeout_ns));
}

int weft_channel_recv_ex(weft_channel_t* ch, void* elem, const weft_wait_t* wait) {
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  return Recv(ch, elem, o);
}

int weft_channel_try_send(weft_channel_t* ch, const void* elem) {
  if (!Valid(ch) || elem == nullptr) return -EINVAL;
  return Guard([&] {
    return Status(ch->ch.try_send(std::string(static_cast<const char*>(elem), ch->elem_size)));
  });
}

int weft_channel_try_recv(weft_channel_t* ch, void* elem) {
  if (!Valid(ch) || elem == nullptr) return -EINVAL;
  return Guard([&] {
    weft::Result<std::string> r = ch->ch.try_recv();
    if (!r.ok()) return Errno(r.error());
    std::memcpy(elem, r->data(), ch->elem_size);
    return 0;
  });
}

int weft_channel_close(weft_channel_t* ch) {
  if (!Valid(ch)) return -EINVAL;
  ch->ch.close();
  return 0;
}

int weft_channel_destroy(weft_channel_t* ch) {
  if (!Valid(ch)) return -EINVAL;
  if (ch->ch.waiters() != 0) return -EBUSY;
  Delete(ch);
  return 0;
}

int weft_select(weft_select_case_t* cases, uint32_t n, const weft_wait_t* wait, uint32_t flags) {
  constexpr std::uint32_t kMaxCases = 64;
  if (n > kMaxCases || (n > 0 && cases == nullptr) || (flags & ~WEFT_SELECT_NOWAIT) != 0) {
    return -EINVAL;
  }
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  for (std::uint32_t i = 0; i < n; ++i) {
    const weft_select_case_t& c = cases[i];
    if (!Valid(c.channel) || c.elem == nullptr ||
        (c.op != WEFT_SELECT_SEND && c.op != WEFT_SELECT_RECV)) {
      return -EINVAL;
    }
  }
  return Guard([&] {
    std::string values[kMaxCases];  // a send's element; where a receive lands
    // The element sizes, read before waiting (a channel may be destroyed once its case is done).
    std::uint32_t sizes[kMaxCases];
    weft::SelectCase select_cases[kMaxCases];
    for (std::uint32_t i = 0; i < n; ++i) {
      weft_channel_t* ch = cases[i].channel;
      sizes[i] = ch->elem_size;
      if (cases[i].op == WEFT_SELECT_SEND) {
        values[i].assign(static_cast<const char*>(cases[i].elem), ch->elem_size);
        select_cases[i] = ch->ch.send_case(values[i]);
      } else {
        select_cases[i] = ch->ch.recv_case(values[i]);
      }
    }
    const bool nowait = (flags & WEFT_SELECT_NOWAIT) != 0;
    weft::Result<weft::SelectResult> r =
        weft::select(std::span<const weft::SelectCase>(select_cases, n), o, nowait);
    if (!r.ok()) return Errno(r.error());
    if (r->index < 0) return -EAGAIN;  // the default: nothing was ready
    weft_select_case_t& chosen = cases[r->index];
    chosen.result = r->ok ? 0 : -EPIPE;
    if (r->ok && chosen.op == WEFT_SELECT_RECV) {
      std::memcpy(chosen.elem, values[r->index].data(), sizes[r->index]);
    }
    return r->index;
  });
}

// ---- Mutexes and condition variables -----------------------------------------------------------

int weft_mutex_create(weft_mutex_t** out) { return Create(out); }

int weft_mutex_lock(weft_mutex_t* m, int64_t timeout_ns) { return Lock(m, Timeout(timeout_ns)); }

int weft_mutex_lock_ex(weft_mutex_t* m, const weft_wait_t* wait) {
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  return Lock(m, o);
}

int weft_mutex_try_lock(weft_mutex_t* m) {
  if (!Valid(m)) return -EINVAL;
  return m->m.try_lock() ? 0 : -EBUSY;
}

int weft_mutex_unlock(weft_mutex_t* m) {
  if (!Valid(m)) return -EINVAL;
  return Guard([&] { return Status(m->m.unlock()); });
}

int weft_mutex_destroy(weft_mutex_t* m) { return Destroy(m); }

int weft_cond_create(weft_cond_t** out) { return Create(out); }

int weft_cond_wait(weft_cond_t* c, weft_mutex_t* m, int64_t timeout_ns) {
  return Wait(c, m, Timeout(timeout_ns));
}

int weft_cond_wait_ex(weft_cond_t* c, weft_mutex_t* m, const weft_wait_t* wait) {
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  return Wait(c, m, o);
}

int weft_cond_signal(weft_cond_t* c) {
  if (!Valid(c)) return -EINVAL;
  c->c.signal();
  return 0;
}

int weft_cond_broadcast(weft_cond_t* c) {
  if (!Valid(c)) return -EINVAL;
  c->c.broadcast();
  return 0;
}

int weft_cond_destroy(weft_cond_t* c) { return Destroy(c); }

// ---- Fiber I/O ---------------------------------------------------------------------------------

int64_t weft_read(int fd, void* buf, uint64_t len, const weft_wait_t* wait) {
  std::size_t n;
  if ((buf == nullptr && len > 0) || !Length(len, &n)) return -EINVAL;
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  return Guard([&]() -> std::int64_t {
    weft::Result<std::size_t> r = weft::io::read(fd, buf, n, o);
    return r.ok() ? static_cast<std::int64_t>(*r) : Errno(r.error());
  });
}

int64_t weft_write(int fd, const void* buf, uint64_t len, const weft_wait_t* wait) {
  std::size_t n;
  if ((buf == nullptr && len > 0) || !Length(len, &n)) return -EINVAL;
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  return Guard([&]() -> std::int64_t {
    weft::Result<std::size_t> r = weft::io::write(fd, buf, n, o);
    return r.ok() ? static_cast<std::int64_t>(*r) : Errno(r.error());
  });
}

int weft_read_exact(int fd, void* buf, uint64_t len, const weft_wait_t* wait) {
  std::size_t n;
  if ((buf == nullptr && len > 0) || !Length(len, &n)) return -EINVAL;
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  return Guard([&] { return Status(weft::io::read_exact(fd, buf, n, o)); });
}

int weft_write_all(int fd, const void* buf, uint64_t len, const weft_wait_t* wait) {
  std::size_t n;
  if ((buf == nullptr && len > 0) || !Length(len, &n)) return -EINVAL;
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  return Guard([&] { return Status(weft::io::write_all(fd, buf, n, o)); });
}

int weft_accept(int fd, void* addr, uint32_t* addrlen, const weft_wait_t* wait) {
  if (addr != nullptr && addrlen == nullptr) return -EINVAL;
  if (addrlen != nullptr &&
      *addrlen > static_cast<std::uint32_t>(std::numeric_limits<int>::max())) {
    return -EINVAL;
  }
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  return Guard([&] {
    socklen_t len = addr != nullptr ? static_cast<socklen_t>(*addrlen) : 0;
    weft::Result<int> r =
        weft::io::accept(fd, static_cast<sockaddr*>(addr), addr != nullptr ? &len : nullptr, o);
    if (!r.ok()) return Errno(r.error());
    if (addr != nullptr) *addrlen = static_cast<std::uint32_t>(len);
    return *r;
  });
}

int weft_connect(int fd, const void* addr, uint32_t addrlen, const weft_wait_t* wait) {
  if (addr == nullptr || addrlen == 0 ||
      addrlen > static_cast<std::uint32_t>(std::numeric_limits<int>::max())) {
    return -EINVAL;
  }
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  return Guard([&] {
    return Status(weft::io::connect(fd, static_cast<const sockaddr*>(addr),
                                    static_cast<socklen_t>(addrlen), o));
  });
}

int weft_poll(int fd, uint32_t events, const weft_wait_t* wait) {
  weft::WaitOptions o;
  if (int e = ReadWait(wait, &o); e != 0) return e;
  return Guard([&] {
    weft::Result<std::uint32_t> r = weft::io::poll(fd, events, o);
    return r.ok() ? static_cast<int>(*r) : Errno(r.error());
  });
}

int weft_close(int fd) {
  return Guard([&] { return Status(weft::io::close(fd)); });
}

int weft_make_nonblocking(int fd) {
  return Guard([&] { return Status(weft::io::make_nonblocking(fd)); });
}

}  // extern "C"
