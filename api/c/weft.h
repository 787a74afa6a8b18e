/* api/c/weft.h: weft's C ABI (C11; also valid C++), for C programs and for any language that
 * loads a shared library (libweft.so: Python's ctypes, Rust, Zig, cgo).
 *
 * Defines: WEFT_ABI_VERSION, weft_abi_version, weft_handle_checks; runtimes
 * (weft_runtime_options_t, weft_runtime_create / destroy, weft_block_on, the stats and dump
 * calls); fibers (weft_spawn, weft_spawn_ex, weft_fiber_join, weft_fiber_detach, weft_yield,
 * weft_sleep_ns, weft_fiber_id, weft_fiber_name, weft_call_blocking); waits (weft_wait_t,
 * weft_now_ns, weft_cancel_t and its calls); weft_channel_t with weft_select; weft_mutex_t and
 * weft_cond_t; fiber I/O on fds (weft_read, weft_write, weft_read_exact, weft_write_all,
 * weft_accept, weft_connect, weft_poll, weft_close, weft_make_nonblocking).
 *
 * Conventions, for every call:
 *   - Errors are negative errno values (-EINVAL, -ETIMEDOUT, -ECANCELED, -ENOMEM...); 0 is
 *     success. No C++ exception ever crosses this boundary: one escaping a callback (a fiber's
 *     function, a weft_call_blocking function) is caught and reported on stderr, one line per
 *     exception, and the caller that waited for the callback (the join, weft_block_on,
 *     weft_call_blocking) gets -EIO. A pthread_exit unwinding through a callback goes on.
 *   - Handles are opaque pointers; NULL where a handle is required is -EINVAL. A handle is
 *     consumed by the call that says so (join, detach, destroy) and must not be used after it.
 *     Debug builds of the library (weft_handle_checks() returns 1) also answer -EINVAL for a
 *     handle already consumed, or of the wrong kind: they keep a table of live handles and do
 *     not reuse a consumed handle's memory until 1,024 later ones have been consumed. Consuming
 *     one handle from two threads at once (two joins) is undefined, except that a checked
 *     build answers the second join or detach -EBUSY while the first is under way.
 *   - Waits: each call that waits has a form taking a timeout in ns (< 0: no limit) and an _ex
 *     form taking a weft_wait_t (a deadline and a cancellation source; NULL: no limit). Both
 *     fail with -ETIMEDOUT when the time is up, -ECANCELED when the source is cancelled or the
 *     calling fiber's runtime shuts down. A timeout too long for the clock (INT64_MAX ns) is no
 *     limit.
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
#define WEFT_ABI_VERSION_MINOR 2
#define WEFT_ABI_VERSION ((WEFT_ABI_VERSION_MAJOR << 16) | WEFT_ABI_VERSION_MINOR)
uint32_t weft_abi_version(void);

/* weft_handle_checks: 1 when this library detects consumed handles (a debug build: NDEBUG not
 * defined when it was compiled), else 0. */
int weft_handle_checks(void);

typedef struct weft_runtime weft_runtime_t;
typedef struct weft_fiber weft_fiber_t;
typedef void (*weft_fn)(void* arg);

/* weft_now_ns: the clock of deadlines, in ns: CLOCK_MONOTONIC (in a simulated runtime's fibers,
 * its virtual clock). */
int64_t weft_now_ns(void);

/* weft_cancel_t: a cancellation source (0.2). Every wait given it (in a weft_wait_t) ends with
 * -ECANCELED once it is cancelled: by weft_cancel_cancel, by its deadline (weft_cancel_after_ns),
 * or with its parent.
 *   weft_cancel_create: a new source; with parent not NULL, one cancelled with the parent (at
 *     once if it already is) and bound by the parent's deadline too.
 *   weft_cancel_cancel: idempotent; wakes the waits given it, on every fiber and thread.
 *   weft_cancel_after_ns: cancels it ns from now unless cancelled first; a later call replaces
 *     the deadline. -EINVAL for ns < 0; -ENOMEM / -EAGAIN when weft's deadline thread cannot
 *     be had (the deadline then still ends waits).
 *   weft_cancel_is_cancelled: 1 or 0 (or -EINVAL).
 *   weft_cancel_destroy: consumes c and frees it at once: call it only when no call is using it
 *     (a child made from it stays valid and is still cancelled with it). */
typedef struct weft_cancel weft_cancel_t;
int weft_cancel_create(const weft_cancel_t* parent, weft_cancel_t** out);
int weft_cancel_cancel(weft_cancel_t* c);
int weft_cancel_after_ns(weft_cancel_t* c, int64_t ns);
int weft_cancel_is_cancelled(const weft_cancel_t* c);
int weft_cancel_destroy(weft_cancel_t* c);

/* weft_wait_t (0.2): how long a call may wait. NULL where one is taken: no limit.
 *   weft_wait_t w = {.size = sizeof w, .deadline_ns = weft_now_ns() + 5000000, .cancel = c};
 * One weft_wait_t may serve many calls (a request's deadline). -EINVAL for an unknown size or
 * a flag. */
typedef struct weft_wait {
  uint32_t size;               /* sizeof(weft_wait_t) as the caller was built */
  uint32_t flags;              /* 0 */
  int64_t deadline_ns;         /* on weft_now_ns()'s clock; 0: none. Passed: -ETIMEDOUT at once,
                                  unless the call completes without waiting */
  const weft_cancel_t* cancel; /* NULL: none */
} weft_wait_t;

/* weft_runtime_options_t: every field 0 means the default. ABI 0.1's struct ended after
 * stack_size (16 bytes); the library accepts it, with the later fields 0. */
typedef struct weft_runtime_options {
  uint32_t size;                 /* sizeof(weft_runtime_options_t) as the caller was built */
  uint32_t workers;              /* worker threads (0: one per core; at most 1,024) */
  uint64_t stack_size;           /* bytes per fiber stack (0: 64 KiB; at most 64 MiB) */
  uint32_t max_blocking_threads; /* 0.2: threads for weft_call_blocking (0: 64; at most 65,536) */
  uint32_t flags;                /* 0.2: WEFT_RUNTIME_* below; an unknown bit is -EINVAL */
} weft_runtime_options_t;

/* WEFT_RUNTIME_MEASURE_LATENCY: each fiber's scheduling latency (runnable to running) goes
 * into the stats' sched_latency_ns histograms, at two clock reads per wake-up. */
#define WEFT_RUNTIME_MEASURE_LATENCY 1u

/* weft_runtime_create: starts a runtime's workers; *out is its handle. options may be NULL (all
 * defaults). -EINVAL for a NULL out or an unknown size; -EAGAIN when a thread cannot start;
 * -ENOMEM. */
int weft_runtime_create(const weft_runtime_options_t* options, weft_runtime_t** out);

/* weft_runtime_destroy: shuts the runtime down and frees it (consumes rt). Every wait of every
 * fiber fails with -ECANCELED from then on, so fibers unwind; it returns once all have (a fiber
 * in weft_cond_wait first takes its mutex back: destroy waits for whoever holds it). Call it
 * from outside the runtime: -EDEADLK from one of its fibers or weft_call_blocking functions. A
 * thread whose weft_block_on on rt is returning meanwhile is waited for. */
int weft_runtime_destroy(weft_runtime_t* rt);

/* weft_block_on: runs fn(arg) on a fiber of rt and waits for it (blocks the calling thread).
 * -EDEADLK from rt's own fibers and weft_call_blocking functions; -EIO if fn threw a C++
 * exception. */
int weft_block_on(weft_runtime_t* rt, weft_fn fn, void* arg);

/* weft_runtime_stats_json: a snapshot of the runtime's counters, one JSON object (per worker:
 * spawned, run, stolen, parked, polled, sleeps, idle_ns...; docs/scheduler.md). It writes at
 * most cap - 1 bytes and a NUL to buf (nothing when cap is 0; buf may then be NULL) and returns
 * the full length, as snprintf does: a return >= cap means it was cut. A second call may be
 * longer, as the runtime changes. weft_runtime_dump_fibers: the same for a dump of the live
 * fibers, one line each: id, name, state, what it is parked on. */
int64_t weft_runtime_stats_json(const weft_runtime_t* rt, char* buf, uint64_t cap);
int64_t weft_runtime_dump_fibers(const weft_runtime_t* rt, char* buf, uint64_t cap);

/* weft_spawn: runs fn(arg) on a new fiber of rt. With out, *out is its handle, to be joined or
 * detached exactly once; with out NULL the fiber is detached. */
int weft_spawn(weft_runtime_t* rt, weft_fn fn, void* arg, weft_fiber_t** out);

/* weft_fiber_options_t (0.2): every field 0 means the default. */
typedef struct weft_fiber_options {
  uint32_t size;          /* sizeof(weft_fiber_options_t) as the caller was built */
  uint32_t flags;         /* WEFT_FIBER_PINNED: run only on worker pinned_worker */
  uint64_t stack_size;    /* 0: the runtime's; rounded up to a class (16 KiB .. 64 MiB) */
  const char* name;       /* NULL: none. Copied (its first 31 bytes): shown in dumps */
  uint32_t pinned_worker; /* WEFT_FIBER_PINNED: worker (modulo the count; <= INT_MAX), not stolen */
  uint32_t reserved;      /* 0 */
} weft_fiber_options_t;
#define WEFT_FIBER_PINNED 1u

/* weft_spawn_ex: weft_spawn with options (NULL: the defaults). -EINVAL for an unknown size or
 * flag, a reserved field not 0, or a stack_size above 64 MiB. */
int weft_spawn_ex(weft_runtime_t* rt, weft_fn fn, void* arg, const weft_fiber_options_t* options,
                  weft_fiber_t** out);

/* weft_fiber_join: waits for the fiber to end, then frees its handle (consumes f) and returns 0,
 * or -EIO if fn threw. timeout_ns < 0: no limit. -ETIMEDOUT (or -ECANCELED when the runtime of the
 * calling fiber shuts down) leaves f joinable. -EBUSY: see the handle rules above. */
int weft_fiber_join(weft_fiber_t* f, int64_t timeout_ns);
int weft_fiber_join_ex(weft_fiber_t* f, const weft_wait_t* wait);

/* weft_fiber_detach: the fiber runs on; its handle is freed (consumes f). */
int weft_fiber_detach(weft_fiber_t* f);

/* weft_yield: lets the other fibers of the worker run (a plain thread: sched_yield). */
int weft_yield(void);

/* weft_sleep_ns: sleeps ns nanoseconds (parks a fiber; a plain thread sleeps). -ECANCELED when the
 * fiber's runtime shuts down meanwhile; -EINVAL for ns < 0. */
int weft_sleep_ns(int64_t ns);
/* weft_sleep_ex: as weft_sleep_ns, ending early with -ETIMEDOUT at wait's deadline and
 * -ECANCELED when its source is cancelled. A sleep of 0 returns 0 at once. */
int weft_sleep_ex(int64_t ns, const weft_wait_t* wait);

/* weft_fiber_id: a process-unique id of the calling fiber; 0 outside fibers.
 * weft_fiber_name: its name (weft_fiber_options_t::name) into buf, as weft_runtime_stats_json
 * writes (cap 0: length only); "" outside fibers. */
uint64_t weft_fiber_id(void);
int64_t weft_fiber_name(char* buf, uint64_t cap);

/* weft_call_blocking: runs fn(arg) on the runtime's blocking threads while the calling fiber
 * parks, for calls that block their thread (a legacy library, getaddrinfo, a long
 * computation): the worker goes on running the other fibers. Not cancellable: fn runs to its
 * end. Outside a fiber it runs fn on the calling thread. -EIO if fn threw a C++ exception. */
int weft_call_blocking(weft_fn fn, void* arg);

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
int weft_channel_send_ex(weft_channel_t* ch, const void* elem, const weft_wait_t* wait);
int weft_channel_recv_ex(weft_channel_t* ch, void* elem, const weft_wait_t* wait);
int weft_channel_try_send(weft_channel_t* ch, const void* elem);
int weft_channel_try_recv(weft_channel_t* ch, void* elem);
int weft_channel_close(weft_channel_t* ch);
int weft_channel_destroy(weft_channel_t* ch);

/* weft_select (0.2): exactly one of the n cases (at most 64) happens: a send of *elem on a
 * channel or a receive into *elem. When several are ready, one is picked at random. It returns
 * that case's index, and sets its result: 0, or -EPIPE when the channel was closed (a send
 * then sent nothing; a receive got nothing, the channel being closed and drained). Each send
 * case's element is copied from elem when weft_select is called (what it sends is elem as it
 * was then); only the chosen receive case's elem is written, and only the chosen result set.
 * flags WEFT_SELECT_NOWAIT: -EAGAIN at once when no case is ready (Go's default). Errors:
 * -ETIMEDOUT, -ECANCELED (wait); -EINVAL for n above 64, a NULL channel or elem, an unknown op
 * or flag, and for no cases with neither NOWAIT, deadline nor cancel source (it would never
 * return). One channel may appear in several cases. */
typedef struct weft_select_case {
  weft_channel_t* channel;
  void* elem;     /* send: the element to send (elem_size bytes); recv: where it goes */
  uint32_t op;    /* WEFT_SELECT_SEND or WEFT_SELECT_RECV */
  int32_t result; /* out, for the chosen case: 0 or -EPIPE */
} weft_select_case_t;
#define WEFT_SELECT_SEND 1u
#define WEFT_SELECT_RECV 2u
#define WEFT_SELECT_NOWAIT 1u
int weft_select(weft_select_case_t* cases, uint32_t n, const weft_wait_t* wait, uint32_t flags);

/* Mutexes and condition variables that park fibers and block plain threads alike.
 *   weft_mutex_lock: -EDEADLK if the caller holds it already; -ETIMEDOUT; -ECANCELED.
 *   weft_mutex_try_lock: 0, or -EBUSY when held. weft_mutex_unlock: -EPERM if the caller does
 *     not hold it.
 *   weft_cond_wait: releases the mutex (which the caller holds), waits for a signal, and
 *     returns with the mutex held again, also on -ETIMEDOUT and -ECANCELED; -EPERM (at once,
 *     without it) if the caller does not hold it. Wakes may be spurious: wait in a loop on the
 *     condition.
 *   weft_mutex_destroy / weft_cond_destroy: consume the handle; only when no one holds or waits
 *     on it. */
typedef struct weft_mutex weft_mutex_t;
typedef struct weft_cond weft_cond_t;
int weft_mutex_create(weft_mutex_t** out);
int weft_mutex_lock(weft_mutex_t* m, int64_t timeout_ns);
int weft_mutex_lock_ex(weft_mutex_t* m, const weft_wait_t* wait);
int weft_mutex_try_lock(weft_mutex_t* m);
int weft_mutex_unlock(weft_mutex_t* m);
int weft_mutex_destroy(weft_mutex_t* m);
int weft_cond_create(weft_cond_t** out);
int weft_cond_wait(weft_cond_t* c, weft_mutex_t* m, int64_t timeout_ns);
int weft_cond_wait_ex(weft_cond_t* c, weft_mutex_t* m, const weft_wait_t* wait);
int weft_cond_signal(weft_cond_t* c);
int weft_cond_broadcast(weft_cond_t* c);
int weft_cond_destroy(weft_cond_t* c);

/* Fiber I/O on file descriptors (0.2): a fiber parks on its worker's reactor (io_uring, epoll)
 * until the operation completes; a plain thread blocks. The fds are sockets, pipes and files,
 * non-blocking for sockets and pipes (weft_accept's are; weft_make_nonblocking for others). On
 * Windows an fd is a SOCKET cast to int. Errors are the operation's errno, negated, besides
 * -ETIMEDOUT / -ECANCELED (wait); buffers must stay valid until the call returns. Close an fd
 * that other fibers or threads may be using with weft_close, not close(2): their calls on it
 * end with -ECANCELED first, and none touches an fd that reuses its number.
 *   weft_read / weft_write: one operation; the bytes moved (0 from read: end of stream).
 *     -EINVAL for a NULL buf with len > 0, or len above INT64_MAX.
 *   weft_read_exact / weft_write_all: all len bytes, or an error (read_exact: -ECONNABORTED at
 *     an end of stream before len bytes).
 *   weft_accept: a connection on a listening socket: its fd (non-blocking, close-on-exec), and
 *     its address into addr (a struct sockaddr of *addrlen bytes; both NULL for none).
 *   weft_connect: connects fd (a non-blocking socket) to addr (a struct sockaddr).
 *   weft_poll: waits until fd is ready for events (POLLIN, POLLOUT...); returns the ready ones.
 *   weft_close: ends the fd's calls in progress (-ECANCELED), then closes it; -EBADF if not
 *     open. Not cancellable.
 *   weft_make_nonblocking: sets O_NONBLOCK (Windows: FIONBIO). */
int64_t weft_read(int fd, void* buf, uint64_t len, const weft_wait_t* wait);
int64_t weft_write(int fd, const void* buf, uint64_t len, const weft_wait_t* wait);
int weft_read_exact(int fd, void* buf, uint64_t len, const weft_wait_t* wait);
int weft_write_all(int fd, const void* buf, uint64_t len, const weft_wait_t* wait);
int weft_accept(int fd, void* addr, uint32_t* addrlen, const weft_wait_t* wait);
int weft_connect(int fd, const void* addr, uint32_t addrlen, const weft_wait_t* wait);
int weft_poll(int fd, uint32_t events, const weft_wait_t* wait);
int weft_close(int fd);
int weft_make_nonblocking(int fd);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_API_C_WEFT_H_ */
