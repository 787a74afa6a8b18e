/* api/c/abi/weft_0_1.h: a frozen copy of api/c/weft.h as of ABI 0.1, never edited. The ABI test
 * (//api/c:weft_c_abi_0_1_test) builds the 0.1 C test against it and runs it with the current
 * libweft.so: a program built for an earlier minor keeps working. */
/* api/c/weft.h: weft's C ABI (C11; also valid C++), for C programs and for any language that
 * loads a shared library (libweft.so: Python's ctypes, Rust, Zig, cgo).
 *
 * Defines: WEFT_ABI_VERSION, weft_abi_version, weft_runtime_options_t, weft_runtime_create,
 * weft_runtime_destroy, weft_block_on, weft_spawn, weft_fiber_join, weft_fiber_detach, weft_yield,
 * weft_sleep_ns, weft_channel_t, weft_mutex_t and weft_cond_t with their calls.
 *
 * Conventions, for every call:
 *   - Errors are negative errno values (-EINVAL, -ETIMEDOUT, -ECANCELED, -ENOMEM...); 0 is
 *     success. No C++ exception ever crosses this boundary: one escaping a callback's fiber is
 *     caught, reported on stderr once, and the fiber's join returns -EIO.
 *   - Handles are opaque pointers; NULL where a handle is required is -EINVAL. A handle is
 *     consumed by the call that says so (join, detach, destroy) and must not be used after it.
 *   - Option structs start with their size (.size = sizeof(weft_runtime_options_t)): a library
 *     of a later ABI minor version accepts the smaller structs of earlier ones; a size it does
 *     not know is -EINVAL. Fields are fixed-width.
 *   - Threads: every call may be made from any thread, in a fiber or not, unless it says
 *     otherwise. A call that waits parks the calling fiber, or blocks a plain thread.
 *
 *   weft_runtime_t* rt;
 *   weft_runtime_options_t o = {.size = sizeof o, .workers = 2};
 *   if (weft_runtime_create(&o, &rt) == 0) {
 *     weft_block_on(rt, body, &state);   // body(&state) on a fiber; returns when it returns
 *     weft_runtime_destroy(rt);
 *   }
 */
#ifndef WEFT_API_C_WEFT_H_
#define WEFT_API_C_WEFT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes: major (incompatible changes; also libweft.so's soname,
 * libweft.so.MAJOR) and minor (additions). weft_abi_version() returns the library's, as
 * (major << 16) | minor: a caller built against major M runs with any library of major M and a
 * minor at least its own. */
#define WEFT_ABI_VERSION_MAJOR 0
#define WEFT_ABI_VERSION_MINOR 1
#define WEFT_ABI_VERSION ((WEFT_ABI_VERSION_MAJOR << 16) | WEFT_ABI_VERSION_MINOR)
uint32_t weft_abi_version(void);

typedef struct weft_runtime weft_runtime_t;
typedef struct weft_fiber weft_fiber_t;
typedef void (*weft_fn)(void* arg);

/* weft_runtime_options_t: every field 0 means the default. */
typedef struct weft_runtime_options {
  uint32_t size;       /* sizeof(weft_runtime_options_t) as the caller was built */
  uint32_t workers;    /* worker threads (0: one per core) */
  uint64_t stack_size; /* bytes per fiber stack (0: 64 KiB) */
} weft_runtime_options_t;

/* weft_runtime_create: starts a runtime's workers; *out is its handle. options may be NULL (all
 * defaults). -EINVAL for a NULL out or an unknown size; -EAGAIN when a thread cannot start;
 * -ENOMEM. */
int weft_runtime_create(const weft_runtime_options_t* options, weft_runtime_t** out);

/* weft_runtime_destroy: shuts the runtime down and frees it (consumes rt). Every wait of every
 * fiber fails with -ECANCELED from then on, so fibers unwind; it returns once all have. Call it
 * from outside the runtime's fibers (-EDEADLK from one of them). */
int weft_runtime_destroy(weft_runtime_t* rt);

/* weft_block_on: runs fn(arg) on a fiber of rt and waits for it (blocks the calling thread, which
 * must not be one of rt's workers). -EIO if fn threw a C++ exception. */
int weft_block_on(weft_runtime_t* rt, weft_fn fn, void* arg);

/* weft_spawn: runs fn(arg) on a new fiber of rt. With out, *out is its handle, to be joined or
 * detached exactly once; with out NULL the fiber is detached. */
int weft_spawn(weft_runtime_t* rt, weft_fn fn, void* arg, weft_fiber_t** out);

/* weft_fiber_join: waits for the fiber to end, then frees its handle (consumes f) and returns 0,
 * or -EIO if fn threw. timeout_ns < 0: no limit. -ETIMEDOUT (or -ECANCELED when the runtime of the
 * calling fiber shuts down) leaves f joinable. */
int weft_fiber_join(weft_fiber_t* f, int64_t timeout_ns);

/* weft_fiber_detach: the fiber runs on; its handle is freed (consumes f). */
int weft_fiber_detach(weft_fiber_t* f);

/* weft_yield: lets the other fibers of the worker run (a plain thread: sched_yield). */
int weft_yield(void);

/* weft_sleep_ns: sleeps ns nanoseconds (parks a fiber; a plain thread sleeps). -ECANCELED when the
 * fiber's runtime shuts down meanwhile; -EINVAL for ns < 0. */
int weft_sleep_ns(int64_t ns);

/* Channels of fixed-size byte blobs: each element is elem_size bytes, copied in by send and out
 * by recv. A fiber waits by parking, a plain thread by blocking, so fibers and threads (those of
 * another language too) exchange values through one channel. timeout_ns < 0: no limit.
 *   weft_channel_create: elem_size 1..65,536 bytes, capacity 0 (unbuffered: a send waits for a
 *     receiver) to 2^20 elements; -EINVAL otherwise.
 *   weft_channel_send / recv: -EPIPE once the channel is closed (recv: once closed and drained);
 *     -ETIMEDOUT; -ECANCELED when the calling fiber's runtime shuts down.
 *   weft_channel_try_send / try_recv: without waiting; -EAGAIN when it would wait.
 *   weft_channel_close: idempotent; wakes every waiter.
 *   weft_channel_destroy: frees it (consumes ch); -EBUSY while a fiber or thread waits on it. */
typedef struct weft_channel weft_channel_t;
int weft_channel_create(uint32_t elem_size, uint32_t capacity, weft_channel_t** out);
int weft_channel_send(weft_channel_t* ch, const void* elem, int64_t timeout_ns);
int weft_channel_recv(weft_channel_t* ch, void* elem, int64_t timeout_ns);
int weft_channel_try_send(weft_channel_t* ch, const void* elem);
int weft_channel_try_recv(weft_channel_t* ch, void* elem);
int weft_channel_close(weft_channel_t* ch);
int weft_channel_destroy(weft_channel_t* ch);

/* Mutexes and condition variables that park fibers and block plain threads alike.
 *   weft_mutex_lock: -EDEADLK if the caller holds it already; -ETIMEDOUT; -ECANCELED.
 *   weft_mutex_try_lock: 0, or -EBUSY when held. weft_mutex_unlock: -EPERM if the caller does
 *     not hold it.
 *   weft_cond_wait: releases the mutex (which the caller holds), waits for a signal, and always
 *     returns with the mutex held again, also on -ETIMEDOUT and -ECANCELED. Wakes may be
 *     spurious: wait in a loop on the condition.
 *   weft_mutex_destroy / weft_cond_destroy: consume the handle; only when no one holds or waits
 *     on it. */
typedef struct weft_mutex weft_mutex_t;
typedef struct weft_cond weft_cond_t;
int weft_mutex_create(weft_mutex_t** out);
int weft_mutex_lock(weft_mutex_t* m, int64_t timeout_ns);
int weft_mutex_try_lock(weft_mutex_t* m);
int weft_mutex_unlock(weft_mutex_t* m);
int weft_mutex_destroy(weft_mutex_t* m);
int weft_cond_create(weft_cond_t** out);
int weft_cond_wait(weft_cond_t* c, weft_mutex_t* m, int64_t timeout_ns);
int weft_cond_signal(weft_cond_t* c);
int weft_cond_broadcast(weft_cond_t* c);
int weft_cond_destroy(weft_cond_t* c);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_API_C_WEFT_H_ */
