#!/usr/bin/env python3
"""PyTorch as a real client of cgc: torch's allocations go through cgc_torch_malloc/free
(torch.cuda.memory.CUDAPluggableAllocator), then cgc captures torch work on torch's own stream
into a graph whose tensors come from the capture's private pool, and replays it.

Run on a GPU machine with PyTorch:  python3 torch_allocator_test.py [path/to/libcgc.so.1]
(default: $CGC_LIBRARY, else ../data/libcgc.so.1 beside this file in the GPU bundle).
Prints GoogleTest-style summary lines so the bundle's runner can count it; skips with the
reason without torch or a GPU. Exit status 0 unless a check failed.
"""

import ctypes
import os
import sys


def library_path():
    if len(sys.argv) > 1:
        return sys.argv[1]
    if os.environ.get("CGC_LIBRARY"):
        return os.environ["CGC_LIBRARY"]
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "data", "libcgc.so.1")


def skip(why):
    print(f"[  SKIPPED ] 1 test: {why}")
    sys.exit(0)


try:
    import torch
except ImportError as e:
    skip(f"no PyTorch here ({e})")
if not torch.cuda.is_available():
    skip("no GPU visible to PyTorch")

LIB = library_path()
if not os.path.exists(LIB):
    skip(f"no libcgc at {LIB}")

# Must happen before torch allocates anything on the GPU.
allocator = torch.cuda.memory.CUDAPluggableAllocator(LIB, "cgc_torch_malloc", "cgc_torch_free")
torch.cuda.memory.change_current_allocator(allocator)

cgc = ctypes.CDLL(LIB)
c_void_pp = ctypes.POINTER(ctypes.c_void_p)
for name, args in {
    "cgc_context_create": [ctypes.c_int, c_void_pp],
    "cgc_stream_wrap": [ctypes.c_void_p, ctypes.c_void_p, c_void_pp],
    "cgc_capture_begin": [ctypes.c_void_p, ctypes.c_void_p],
    "cgc_capture_end": [ctypes.c_void_p, c_void_pp],
    "cgc_graph_launch": [ctypes.c_void_p, ctypes.c_void_p],
    "cgc_graph_pool": [ctypes.c_void_p, c_void_pp],
    "cgc_graph_destroy": [ctypes.c_void_p],
    "cgc_stream_destroy": [ctypes.c_void_p],
    "cgc_memory_stats": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p],
}.items():
    getattr(cgc, name).argtypes = args
    getattr(cgc, name).restype = ctypes.c_int
cgc.cgc_last_error.restype = ctypes.c_char_p


class MemoryStats(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("bytes_reserved", ctypes.c_size_t),
        ("bytes_allocated", ctypes.c_size_t),
        ("peak_bytes_allocated", ctypes.c_size_t),
        ("peak_bytes_reserved", ctypes.c_size_t),
        ("num_driver_allocs", ctypes.c_uint64),
        ("num_driver_frees", ctypes.c_uint64),
    ]


def ok(status, what):
    if status != 0:
        raise RuntimeError(f"{what} -> status {status}: {cgc.cgc_last_error().decode()}")


def stats(ctx, pool=None):
    s = MemoryStats()
    s.struct_size = ctypes.sizeof(MemoryStats)
    ok(cgc.cgc_memory_stats(ctx, pool, ctypes.byref(s)), "cgc_memory_stats")
    return s


passed, failed = 0, []


def check(name, condition, detail=""):
    global passed
    if condition:
        passed += 1
        print(f"[       OK ] {name}")
    else:
        failed.append(name)
        print(f"[  FAILED  ] {name} {detail}")


ctx = ctypes.c_void_p()
ok(cgc.cgc_context_create(0, ctypes.byref(ctx)), "cgc_context_create")

# 1. Eager torch work on memory from cgc.
x = torch.randn(1 << 20, device="cuda")
y = x * 2 + 1
torch.cuda.synchronize()
check("TorchMathRunsOnCgcMemory", torch.allclose(y, x * 2 + 1))
s = stats(ctx)
check("TorchAllocationsAreCgcs", s.bytes_allocated >= 2 * (4 << 20), f"allocated {s.bytes_allocated}")
del y
torch.cuda.synchronize()
check("TorchFreesReturnToCgc", stats(ctx).bytes_allocated < s.bytes_allocated)

# 2. cgc captures torch work on torch's side stream; torch's allocations inside the capture
#    come from the capture's private pool, and replays recompute from the current inputs.
side = torch.cuda.Stream()
stream = ctypes.c_void_p()
ok(cgc.cgc_stream_wrap(ctx, ctypes.c_void_p(side.cuda_stream), ctypes.byref(stream)), "cgc_stream_wrap")
static_in = torch.randn(4096, device="cuda")
torch.cuda.synchronize()
with torch.cuda.stream(side):
    ok(cgc.cgc_capture_begin(stream, None), "cgc_capture_begin")  # Global mode, new pool
    hidden = static_in * 3
    static_out = hidden.relu() + 0.5
    del hidden  # freed inside the capture: reusable by the same capture
    graph = ctypes.c_void_p()
    ok(cgc.cgc_capture_end(stream, ctypes.byref(graph)), "cgc_capture_end")
pool = ctypes.c_void_p()
ok(cgc.cgc_graph_pool(graph, ctypes.byref(pool)), "cgc_graph_pool")
check("CapturedTorchAllocationsLandInThePool", stats(ctx, pool).bytes_allocated >= 4096 * 4)
for step in range(3):
    static_in.copy_(torch.randn(4096, device="cuda"))
    torch.cuda.synchronize()
    ok(cgc.cgc_graph_launch(graph, stream), "cgc_graph_launch")
    side.synchronize()
    check(f"ReplayRecomputesFromCurrentInputs[{step}]", torch.allclose(static_out, (static_in * 3).relu() + 0.5))
ok(cgc.cgc_graph_destroy(graph), "cgc_graph_destroy")
# The output stays valid after the graph is gone (it is the graph's output block).
torch.cuda.synchronize()
check("OutputOutlivesTheGraph", torch.isfinite(static_out).all().item())
ok(cgc.cgc_stream_destroy(stream), "cgc_stream_destroy")

total = passed + len(failed)
print(f"[==========] {total} tests ran (PyTorch {torch.__version__}, {torch.cuda.get_device_name(0)})")
if failed:
    print(f"[  FAILED  ] {len(failed)} tests, listed below:")
    for name in failed:
        print(f"[  FAILED  ] {name}")
    sys.exit(1)
print(f"[  PASSED  ] {passed} tests.")
