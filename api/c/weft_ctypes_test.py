#!/usr/bin/env python3
"""api/c/weft_ctypes_test.py: libweft.so from Python's ctypes, as a language runtime loading it
dynamically would: the ABI version, a runtime, Python callbacks run on weft's fibers, spawned
and joined from Python's main thread and from Python threads at once, channel traffic between
fibers and Python threads, the runtime's stats as JSON, and a clean shutdown. The options
struct here is ABI 0.1's (16 bytes), which later libraries accept. Usage: weft_ctypes_test.py path/to/libweft.so"""
import ctypes
import json
import sys
import threading

lib = ctypes.CDLL(sys.argv[1])
lib.weft_abi_version.restype = ctypes.c_uint32
FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Options(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("workers", ctypes.c_uint32), ("stack_size", ctypes.c_uint64)]


lib.weft_runtime_create.argtypes = [ctypes.POINTER(Options), ctypes.POINTER(ctypes.c_void_p)]
lib.weft_runtime_destroy.argtypes = [ctypes.c_void_p]
lib.weft_block_on.argtypes = [ctypes.c_void_p, FN, ctypes.c_void_p]
lib.weft_spawn.argtypes = [ctypes.c_void_p, FN, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
lib.weft_fiber_join.argtypes = [ctypes.c_void_p, ctypes.c_int64]
lib.weft_sleep_ns.argtypes = [ctypes.c_int64]
lib.weft_channel_create.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_void_p)]
lib.weft_channel_send.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
lib.weft_channel_recv.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
lib.weft_channel_try_send.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
lib.weft_channel_close.argtypes = [ctypes.c_void_p]
lib.weft_channel_destroy.argtypes = [ctypes.c_void_p]

version = lib.weft_abi_version()
assert version >> 16 == 0, "ABI major %d, this script knows 0" % (version >> 16)

rt = ctypes.c_void_p()
# Python frames need more stack than weft's 64 KiB default.
opts = Options(ctypes.sizeof(Options), 2, 1 << 20)
assert lib.weft_runtime_create(ctypes.byref(opts), ctypes.byref(rt)) == 0
assert lib.weft_runtime_create(ctypes.byref(Options(3, 0, 0)), ctypes.byref(ctypes.c_void_p())) == -22

seen = []
lock = threading.Lock()


# A Python callback must not wait on weft (sleep, join, ...): a fiber that parks may resume on
# another worker thread, and CPython's thread state belongs to the OS thread. So the callbacks
# only compute; Python's own threads do the waiting.
def work(_):
    with lock:
        seen.append(threading.get_ident())


work_fn = FN(work)

# From the main thread: spawn 32 fibers, join each (the thread blocks; ctypes releases the GIL).
fibers = [ctypes.c_void_p() for _ in range(32)]
for f in fibers:
    assert lib.weft_spawn(rt, work_fn, None, ctypes.byref(f)) == 0
for f in fibers:
    assert lib.weft_fiber_join(f, -1) == 0
assert len(seen) == 32, seen
assert lib.weft_block_on(rt, work_fn, None) == 0


# Python threads, each spawning and joining its own fibers at once, and sleeping through weft.
def thread_body():
    for _ in range(8):
        f = ctypes.c_void_p()
        assert lib.weft_spawn(rt, work_fn, None, ctypes.byref(f)) == 0
        assert lib.weft_sleep_ns(1000) == 0
        assert lib.weft_fiber_join(f, -1) == 0


threads = [threading.Thread(target=thread_body) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert len(seen) == 32 + 1 + 32, len(seen)
# A channel of 8-byte values: fibers running Python callbacks put values in without waiting
# (try_send), Python threads send and the main thread receives (blocking).
ch = ctypes.c_void_p()
assert lib.weft_channel_create(8, 256, ctypes.byref(ch)) == 0


def produce(arg):
    v = ctypes.c_uint64(arg)
    assert lib.weft_channel_try_send(ch, ctypes.byref(v)) == 0


produce_fn = FN(produce)
for i in range(64):
    assert lib.weft_spawn(rt, produce_fn, ctypes.c_void_p(i + 1), None) == 0
senders = [threading.Thread(target=lambda k=k: [lib.weft_channel_send(ch, ctypes.byref(ctypes.c_uint64(1000 + 10 * k + j)), -1) for j in range(10)]) for k in range(4)]
for t in senders:
    t.start()
got = []
for _ in range(64 + 40):
    v = ctypes.c_uint64()
    assert lib.weft_channel_recv(ch, ctypes.byref(v), 10 * 1000 * 1000 * 1000) == 0
    got.append(v.value)
for t in senders:
    t.join()
assert sorted(got) == list(range(1, 65)) + [1000 + x for x in range(40)], sorted(got)
assert lib.weft_channel_close(ch) == 0
assert lib.weft_channel_recv(ch, ctypes.byref(ctypes.c_uint64()), -1) == -32  # EPIPE
assert lib.weft_channel_destroy(ch) == 0

# The runtime's stats as JSON, read the snprintf way: the length first, then the text.
lib.weft_runtime_stats_json.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]
lib.weft_runtime_stats_json.restype = ctypes.c_int64
n = lib.weft_runtime_stats_json(rt, None, 0)
assert n > 0, n
buf = ctypes.create_string_buffer(n + 4096)  # room for counters that grew meanwhile
m = lib.weft_runtime_stats_json(rt, buf, len(buf))
assert 0 < m < len(buf), (n, m)
stats = json.loads(buf.value.decode())
assert isinstance(stats, dict) and stats, stats

assert lib.weft_runtime_destroy(rt) == 0
print("libweft.so from ctypes: ABI %d.%d, %d callbacks on fibers, %d values through a channel"
      % (version >> 16, version & 0xFFFF, len(seen), len(got)))
